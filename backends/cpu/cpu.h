/*
 * cpu.h - the CPU backend's kernel half, as cpu.c uses it.
 */
#ifndef CUBE_CPU_H
#define CUBE_CPU_H

#include "driver.h"

struct cube__storage {
        uint64_t size;
        void *bytes;
};

/* A loaded kernel: the two entry points the generated code exports. */
struct cube__module {
        void *dl;
        void (*unit_entry)(const void *u, void *const *b, const uint64_t *info);
        void (*cube_entry)(void *u, void *const *b, const uint64_t *info);
        bool uses_sync;
        uint32_t n_buffers;
};

/* The per-unit record the prelude reads (cube__unit in the kernel's source). */
typedef struct cube__cpu_unit {
        uint32_t unit_pos[3], cube_pos[3], cube_dim[3], cube_count[3];
        uint32_t metadata_offset, dynamic_offset;
        void (*sync)(void *ctx);
        void *sync_ctx;
} cube__cpu_unit;

/* The threads that run cubes, and how they run them. */
typedef struct cube__cpu_pool cube__cpu_pool;

cube__cpu_pool *cube__cpu_pool_new(unsigned threads, uint32_t max_units);
void cube__cpu_pool_free(cube__cpu_pool *pool);
/* Called by every thread that ran launches (cube__cpu_run), before it ends. */
void cube__cpu_pool_leave(cube__cpu_pool *pool);
/* Runs a launch to completion on the pool, the calling thread included; one
 * launch at a time per pool. Returns NULL, or the DevicePoison of a kernel
 * that faulted. */
cube_error *cube__cpu_run(cube__cpu_pool *pool, const cube__launch_work *l);

/* What compiled kernels depend on: "gcc 12.2.0 x86_64-linux-gnu -O2 ...". */
const char *cube__cpu_target(void);
cube_error *cube__cpu_compile(const cube__kernel_desc *desc, const char *artifact_path);
cube_error *cube__cpu_load(const cube__kernel_desc *desc, const char *artifact_path,
                           cube__module **ret_module, uint32_t *ret_shared_bytes);
void cube__cpu_unload(cube__module *m);

#endif

/*
 * device.h - cube-device, the CPU device's own process, as its files share
 * it: PoCL's devices, the serving device's state, and the calls each file
 * makes of another.
 */
#ifndef CUBE_CPU_DEVICE_H
#define CUBE_CPU_DEVICE_H

#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>

#include "queue.h"
#include "way.h"

/* PoCL's CPU devices, as the device uses them: "spread" (PoCL's pthread
 * device) runs a launch's cubes on a thread per core; "inline" (its basic
 * device) runs them on the calling thread. A launch of one cube cannot be
 * spread, and waking PoCL's workers for it costs tens of microseconds, so
 * such launches run inline, in about one; so do a kernel's launches of many
 * cubes that proved faster so (way.c). Without a basic device every launch
 * is spread; with it alone, every launch is inline. */
typedef struct cpu_devices {
        cl_platform_id platform;
        cl_device_id ids[2];            /* [0] spread, [1] inline when n == 2 */
        cl_uint n;
        bool in_line_only;              /* n == 1, and ids[0] is the inline device */
} cpu_devices;

#define DEVICE_BATCH 64         /* launches handed to PoCL at once */

/* The arguments a module keeps as its kernel last took them (device-serve.c's
 * set_kept): the first 64, each of up to 32 bytes. */
#define MODULE_ARGS_KEPT 64
#define MODULE_ARG_BYTES 32

/* A loaded program, and its kernel object for the ring's launches. */
typedef struct module {
        cl_program program;
        cl_kernel kernel;
        /* The entry's bare form (the front end's CUBE__BARE), which a build
         * for one cube dimension holds, for launches cubed proved in bounds
         * (CUBE__QL_IN_BOUNDS): a kernel of the same program, with arguments
         * of its own. NULL where the program holds none. */
        struct module *bare;
        char name[96];                  /* the kernel's, in the program */
        uint32_t n_buffers;
        bool looped;                    /* one work-item per cube (cube__dev_launch_args) */
        cube__way timing;               /* how its launches of many cubes run (way.c) */
        unsigned char arg[MODULE_ARGS_KEPT][MODULE_ARG_BYTES]; /* the kernel's arguments
                                                                * as last set */
        uint64_t arg_kept;              /* bit i: arg[i] holds argument i */
} module;

/* A kernel's arguments (opencl.c's CUBE__PARAMS_HEAD): the launch ring, the
 * launch's words (cube__launch_arg, the prelude's ulong4), then each
 * buffer's place in this process and its length for the checks. PoCL copies
 * every argument into an allocation of its own at each launch, and each set
 * into another: past four arguments a launch cost it a quarter to a third
 * more, and setting the words another tenth (docs/PERFORMANCE.md).
 *
 * So a looped kernel takes two: the ring, and where its words lie (one cell
 * for every launch run inline, which has ended before the next is queued,
 * so the argument seldom changes). It reads its buffers' places in the ring,
 * where the device writes each over the buffer's device address, just
 * before the info words (cube__dev_place_buffers), and their lengths among
 * the info words' tail, as on CUDA. Any other kernel keeps them all as
 * arguments: PoCL runs its units in loops of its own, which know an argument
 * is the same for every unit and do not know it of a word read from memory,
 * and a reduction whose lengths were read in the ring took a third longer. A
 * looped kernel reads them once a cube.
 *
 * The ring and the buffers are given as pointers into this process's
 * mappings (clSetKernelArgSVMPointer), not as PoCL buffers: for each buffer
 * argument PoCL tracks, locks and migrates the buffer at every launch, and
 * the device orders its launches itself. PoCL's CPU devices take
 * fine-grained SVM, and pass such a pointer to the kernel as it is. */
#define CUBE__ARG_LAUNCH 1
#define CUBE__ARG_BUFFERS 2

typedef struct cube__launch_arg {
        cl_ulong info_off;              /* the info words, in words from the arena's start */
        cl_uint meta, dyn, n_info;
        cl_uint dim[3];                 /* the cube's shape */
} cube__launch_arg;

_Static_assert(sizeof(cube__launch_arg) == 4 * sizeof(cl_ulong), "the prelude's ulong4");

/* The serving device. */
typedef struct cube__dev_state {
        cl_context context;
        cpu_devices devs;
        cl_command_queue queues[2];     /* one per device of devs */
        char *memory;                   /* device memory, as mapped here */
        void *arena;                    /* the ring past its control block */
        uint64_t window;                /* bytes of each window (queue.h) */
        uint32_t n_windows;
        unsigned cpus;                  /* it may run on (cube__q_cpus); 1: every launch
                                         * inline (cube__dev_runs_inline) */
        pthread_mutex_t lock;           /* modules, peers */
        module *modules;
        uint32_t n_modules;
        struct {                        /* peer devices' memory (queue.h) */
                char *map;
                uint32_t n_windows;
        } peers[CUBE__PEERS_MAX];
} cube__dev_state;

/* ---- the modes, and what they share (device-main.c) --------------------- */

int cube__dev_find_devices(cpu_devices *ret);

/* Sets a resource's soft and hard limit. */
void cube__dev_limit(int resource, rlim_t value);
/* What a build or a check does to itself before it reads a tenant's source:
 * its limits (CPU seconds, address space and output in MiB), a parent-death
 * signal, no network, no privileges, and only dir writable. */
void cube__dev_confine(const char *dir, const char *cpu_s, const char *as_mb, const char *fs_mb);

/* ---- the build mode (device-build.c) ------------------------------------ */

/* cube-device --build. */
int cube__dev_build_main(int argc, char **argv);
/* cube-device --check (backends/frontend/check-main.c). */
int cube__dev_check_main(int argc, char **argv);

/* ---- PoCL's binaries without IR (device-binary.c) ----------------------- */

/* Rewrites a PoCL program binary in place without its LLVM IR, so that
 * PoCL can never compile a work-group function from it: 0, or -1 when it is
 * not a binary of the format this knows (and is of no use then). */
int cube__dev_binary_strip_ir(unsigned char *bin, size_t *len);
/* Whether a PoCL program binary is one strip_ir rewrote. */
bool cube__dev_binary_without_ir(const unsigned char *bin, size_t len);

/* ---- the launch server (device-serve.c) --------------------------------- */

/* The serving device's state. */
extern cube__dev_state cube__dev;

/* The control block, at the start of the ring. */
extern cube__qctl *cube__ctl;

/* cube-device --serve. */
int cube__dev_serve_main(int argc, char **argv);

/* Everything the device does to itself before a client's code can run. */
int cube__dev_seal_self(const char *kcache);

/* Whether a launch runs on the inline device (cpu_devices). */
bool cube__dev_runs_inline(const cube__qlaunch *l);
/* The queue of the device a launch runs on (cube__dev_runs_inline). */
cl_command_queue cube__dev_queue(bool in_line);

/* Writes where each of a launch's n buffers lies in this process, found from
 * its device address in addresses, to ret_pointers (which may be addresses:
 * a slot's own words are overwritten so). Returns the index of the first
 * that lies outside device memory and every peer's, or n. With
 * cube__dev.lock held (the peers). */
uint32_t cube__dev_place_buffers(const uint64_t *addresses, uint32_t n, uint64_t *ret_pointers);

/* Sets launch l's words (its info at info_off) as kernel k's argument, or
 * for a looped kernel writes them to cell and sets where it lies, and gives
 * the sizes PoCL runs it with. m, the module whose kernel k is, or NULL,
 * keeps the arguments k holds, which are not set again. */
cl_int cube__dev_launch_args(cl_kernel k, module *m, bool looped, const cube__qlaunch *l,
                             cl_ulong info_off, cube__launch_arg *cell, size_t ret_global[3],
                             size_t ret_local[3]);
/* Sets the buffers of launch l, placed in words (its buffer words, its info
 * words after them), as arguments of kernel k, a kernel that is not looped
 * (m: as cube__dev_launch_args). */
cl_int cube__dev_buffer_args(cl_kernel k, module *m, const cube__qlaunch *l,
                             const uint64_t *words);

/* Waits for a queued launch's end; a launch the runtime failed keeps why. */
void cube__dev_take_record(cube__qslot *s, uint64_t *info, uint32_t n_info);
void cube__dev_finish(cube__qslot *s, cl_event ev);

/* ---- graphs the device keeps (device-graphs.c) -------------------------- */

/* CUBE__MSG_GRAPH and CUBE__MSG_GRAPH_FREE, on the control thread. */
void cube__dev_graph_message(const cube__msg *m, const char *payload);

/* Runs a replay of a kept graph, posted in slot s. */
void cube__dev_run_graph(cube__qslot *s);

#endif

/*
 * bench-pocl.h - PoCL driven directly through OpenCL, in cube-bench's own
 * process: the baseline the CPU device's kernels are compared with.
 */
#ifndef CUBE_BENCH_POCL_H
#define CUBE_BENCH_POCL_H

#include <stddef.h>
#include <stdint.h>

typedef struct pocl_bench pocl_bench;

/* The first OpenCL CPU device, or NULL (with a reason printed). */
pocl_bench *pocl_bench_new(void);
void pocl_bench_free(pocl_bench *b);
/* Builds src and returns a handle for kernel name, or -1. */
int pocl_bench_kernel(pocl_bench *b, const char *src, const char *name);
/* A device buffer of bytes, filled from init when it is not NULL. */
void *pocl_bench_buffer(pocl_bench *b, size_t bytes, const void *init);
/* Seconds `times` enqueues of kernel back to back on the in-order queue,
 * then one clFinish, take; buffers first, then the u32 arguments. */
double pocl_bench_run(pocl_bench *b, int kernel, void *const *bufs, int n_bufs,
                      const uint32_t *args, int n_args, const size_t global[3],
                      const size_t local[3], int times);

/* Seconds per kernel of batches of `batch` empty one-unit kernels, each with
 * its arguments set as the CPU device sets a launch's, enqueued back to
 * back on PoCL's basic device and then finished once: the least one kernel
 * run through PoCL costs, which no launch or replay on the CPU device can
 * beat. The median of runs; a negative value when there is no basic device
 * (cube-bench asks for one at start, POCL_DEVICES). */
double pocl_bench_enqueue_floor(int batch, int runs);

#endif

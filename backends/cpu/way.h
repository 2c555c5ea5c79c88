/*
 * way.h - which way a kernel's launches of many cubes run on the CPU
 * device: spread over PoCL's threads, or inline on the device's own thread,
 * chosen by timing them (way.c).
 */
#ifndef CUBE_CPU_WAY_H
#define CUBE_CPU_WAY_H

#include <stdbool.h>
#include <stdint.h>

#define CUBE__WAY_FIRST 16              /* spread launches timed before a trial */
#define CUBE__WAY_SAMPLE 64             /* launches timed each way in a trial */
#define CUBE__WAY_TRY_INLINE_NS (1000 * 1000)
#define CUBE__WAY_AGAIN 65536           /* launches between two trials */
#define CUBE__WAY_SLOW_RUN 4            /* slow inline launches in a row that end a verdict */
#define CUBE__WAY_CLIP 8                /* a trial's launch counts for at most this many medians */

typedef enum module_way {
        WAY_TIMING_SPREAD,              /* spread, timed */
        WAY_TIMING_BOTH,                /* either way at random, timed */
        WAY_SPREAD,
        WAY_INLINE,
} module_way;

/* A kernel's timing; all zero is its first state (WAY_TIMING_SPREAD). */
typedef struct cube__way {
        module_way way;
        uint32_t spread_n, inline_n;    /* launches timed each way */
        uint32_t spread_ns[CUBE__WAY_SAMPLE], inline_ns[CUBE__WAY_SAMPLE];
        uint32_t typical_ns;            /* an inline launch's, once inline */
        uint32_t since;                 /* launches since the verdict */
        uint32_t slow;                  /* inline launches in a row far past typical_ns */
} cube__way;

/* A launch of the kernel ran (in_line or spread) for ns, on a device of
 * cpus CPUs: w's next state. */
void cube__way_timed(cube__way *w, bool in_line, uint64_t ns, unsigned cpus);

#endif

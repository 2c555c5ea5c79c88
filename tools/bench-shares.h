/*
 * bench-shares.h - cube-bench's scheduling table: how the daemon shares the
 * device's time by weight, class and cap, measured from its shares view.
 */
#ifndef CUBE_BENCH_SHARES_H
#define CUBE_BENCH_SHARES_H

#include <stdbool.h>

/* The weighted, equal, latency and no-starvation rows, against a daemon
 * started with `--shares "default weight=9 class=latency"` (its sessions
 * lower themselves to the weights and classes each row needs). windows
 * one-second windows per share figure, samples launches for the latency
 * figures. */
void bench_shares_table(const char *socket, int windows, int samples);
/* The cap row, against a daemon whose sessions' tenant is capped (for
 * instance `--shares "default cap=30 cap-alone=yes"`), alone on it. */
void bench_shares_cap(const char *socket, int windows);

/* The latency probe alone and beside 8 floods of its own class, asking
 * nothing of the daemon that an earlier build does not have. */
void bench_shares_floods(const char *socket, int samples);

#endif

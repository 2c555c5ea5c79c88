/*
 * seal.h - confinement for the CPU device's processes (seal.c).
 */
#ifndef CUBE_CPU_SEAL_H
#define CUBE_CPU_SEAL_H

#include <stdbool.h>

/* Drops every capability from every set and the bounding set, and sets
 * no-new-privs. Returns 0 or a negative errno. */
int cube__seal_privileges(void);

/* Landlock: the process may write only under rw_dir; when strict, it may
 * also read only there and in the system's library directories. Returns 0,
 * or a negative errno (-ENOSYS where the kernel has no Landlock). */
int cube__seal_landlock(const char *rw_dir, bool strict);

/* The device's seccomp filter, on every thread of the process (TSYNC):
 * what running kernels and loading programs needs, nothing more. A refused
 * call raises SIGSYS. Returns 0 or a negative errno. */
int cube__seal_seccomp(void);

#endif

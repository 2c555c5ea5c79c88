/*
 * sandbox.h - cube-device run as a short-lived confined child (sandbox.c).
 */
#ifndef CUBE_SANDBOX_H
#define CUBE_SANDBOX_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>

typedef struct cube__sandbox_result {
        int status;                     /* as wait4 says it */
        struct rusage ru;
        bool wall_timeout;              /* killed at the wall-clock limit */
        bool abandoned;                 /* killed once *abandon was set */
} cube__sandbox_result;

/* Finds cube-device; a negative errno when there is none. */
int cube__device_helper(char *buf, size_t cap);
/* Runs `helper MODE DIR CPU_S AS_MB FSIZE_MB` with its output in DIR/stderr
 * and waits for it, at most 3 * cpu_s + 10 s, or until *abandon (when not
 * NULL) is set: a child whose result no one will read is killed then, not
 * waited for. Returns 0, or the error that kept it from starting. */
int cube__sandbox_run(const char *helper, const char *mode, const char *dir, unsigned cpu_s,
                      unsigned as_mb, unsigned fsize_mb, const atomic_bool *abandon,
                      cube__sandbox_result *ret);
/* Writes text as DIR/NAME, mode 0600: 0, or a negative errno. */
int cube__sandbox_write(const char *dir, const char *name, const char *text);
/* The first max bytes of DIR/NAME, NUL-terminated; NULL if it cannot be read. */
char *cube__sandbox_read(const char *dir, const char *name, size_t max);
/* Removes DIR and everything in it, without following links: a child's
 * directory once read, or any other a backend made for its children. */
void cube__sandbox_remove(const char *dir);

#endif

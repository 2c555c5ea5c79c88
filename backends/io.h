/*
 * io.h - whole reads and writes on a descriptor, and the monotonic clock.
 *
 * Both sides of the CPU device need them (cubed's, and the device process,
 * which links nothing of cubed's), so do the confined children's parent
 * (sandbox.c) and the Gloo engine, which is C++: so they are static inline,
 * in C that C++ compiles too.
 */
#ifndef CUBE_IO_H
#define CUBE_IO_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

/* Writes all n bytes, through short writes and EINTR: 0, or a negative
 * errno (-EPIPE when the descriptor takes nothing more). */
static inline int cube__write_all(int fd, const void *p, size_t n)
{
        const char *c = (const char *) p;

        while (n > 0) {
                ssize_t w = write(fd, c, n);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        return w < 0 ? -errno : -EPIPE;
                c += w;
                n -= (size_t) w;
        }
        return 0;
}

/* Reads exactly n bytes, through short reads and EINTR: 0, or a negative
 * errno (-EPIPE at the end of the stream). */
static inline int cube__read_all(int fd, void *p, size_t n)
{
        char *c = (char *) p;

        while (n > 0) {
                ssize_t r = read(fd, c, n);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r <= 0)
                        return r < 0 ? -errno : -EPIPE;
                c += r;
                n -= (size_t) r;
        }
        return 0;
}

/* CLOCK_MONOTONIC in nanoseconds: the clock of driver.h's device timing. */
static inline uint64_t cube__now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

#endif

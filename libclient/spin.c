/*
 * spin.c - a waiting client polls its socket for a short while before it
 * sleeps, where that costs the daemon nothing.
 *
 * An answer that finds its client asleep on another CPU pays for waking
 * that CPU: 20-50 us on the 2-vCPU VMs cube is measured on, most of an idle
 * sync's round trip when client and daemon run on different CPUs. A client
 * that polls for up to $CUBE_CLIENT_SPIN_US (50 us) first takes the answer
 * as it lands. Polling pays only while the daemon does not need the CPU the
 * poller holds: pinned to the daemon's only CPU, every poll would delay the
 * very answer it waits for. So the choice is made at connect, from the two
 * processes' CPU affinity (the daemon's pid from SO_PEERCRED), much as
 * CUDA's default schedule spins only while the CPUs are not oversubscribed.
 * A thread polls only while no other thread of its process waits for an
 * answer (many waiting at once keep the daemon busy, and it needs the CPU
 * more), and a connection whose polls keep finding nothing polls ever more
 * rarely, down to one wait in 256, so long waits cost next to no CPU time.
 */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "spin.h"

#define SPIN_MAX_BACKOFF 8              /* after as many misses: poll once in 256 waits */

static _Atomic unsigned waiting;        /* threads of this process waiting for an answer */

static uint64_t now_ns(void)
{
        struct timespec t;

        clock_gettime(CLOCK_MONOTONIC, &t);
        return (uint64_t) t.tv_sec * 1000000000ull + (uint64_t) t.tv_nsec;
}

bool cube__spin_pays(const cpu_set_t *mine, const cpu_set_t *daemon)
{
        cpu_set_t outside;

        if (!daemon)
                return CPU_COUNT(mine) >= 2;
        /* A CPU the daemon may use and the poller may not: the daemon is never
         * kept waiting for the poller's. */
        CPU_XOR(&outside, daemon, mine);
        CPU_AND(&outside, &outside, daemon);
        if (CPU_COUNT(&outside) > 0)
                return true;
        /* Both free to move: the scheduler keeps them apart. */
        return CPU_COUNT(mine) >= 2 && CPU_COUNT(daemon) >= 2;
}

void cube__spin_init(cube__spin *s, int fd)
{
        const char *env = getenv("CUBE_CLIENT_SPIN_US");
        unsigned long us = CUBE__SPIN_DEFAULT_US;
        cpu_set_t mine, daemon;
        struct ucred peer;
        socklen_t len = sizeof(peer);
        bool known;

        *s = (cube__spin) { 0 };
        if (env && *env) {
                char *end;
                errno = 0;
                us = strtoul(env, &end, 10);
                if (errno || *end)
                        us = CUBE__SPIN_DEFAULT_US;
        }
        if (us == 0 || sched_getaffinity(0, sizeof(mine), &mine) < 0)
                return;
        known = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0 && peer.pid > 0 &&
                sched_getaffinity(peer.pid, sizeof(daemon), &daemon) == 0;
        if (!cube__spin_pays(&mine, known ? &daemon : NULL))
                return;
        s->budget_ns = (us < CUBE__SPIN_MAX_US ? us : CUBE__SPIN_MAX_US) * 1000ull;
}

/* Polls fd for up to the budget: true when an answer is there. */
static bool spin(cube__spin *s, int fd)
{
        struct pollfd p = { .fd = fd, .events = POLLIN };
        uint64_t end = now_ns() + s->budget_ns;
        bool found;

        do
                found = poll(&p, 1, 0) > 0;
        while (!found && now_ns() < end);
        if (found)
                s->misses = 0;
        else if (s->misses < SPIN_MAX_BACKOFF)
                s->misses++;
        s->skip = (1u << s->misses) - 1;
        return found;
}

int cube__spin_wait(cube__spin *s, int fd)
{
        struct pollfd p = { .fd = fd, .events = POLLIN };
        int r = 0;

        /* Another thread of this process waiting too: the daemon is busy
         * with this process's work, and a poller would take a CPU from it. */
        bool alone = atomic_fetch_add(&waiting, 1) == 0;
        if (s->budget_ns && s->skip)
                s->skip--;
        else if (s->budget_ns && alone && spin(s, fd))
                goto out;
        if (poll(&p, 1, -1) < 0)
                r = -errno;
out:
        atomic_fetch_sub(&waiting, 1);
        return r;
}

/*
 * spin.c - a waiting client polls its socket for as long as its answers
 * lately took, before it sleeps, where that costs the daemon nothing.
 *
 * An answer that finds its client asleep on another CPU pays for waking
 * that CPU: 20-150 us on the 2-vCPU VMs cube is measured on, where an idle
 * vCPU halts at once. That is most of an idle sync's round trip when client
 * and daemon run on different CPUs, and a quarter of a 100,000-float
 * reduction's launch and sync. A client that polls while it waits takes the
 * answer as it lands, as CUDA's default schedule spins while the CPUs are
 * not oversubscribed. Polling pays only while the daemon does not need the
 * CPU the poller holds: pinned to the daemon's only CPU, every poll would
 * delay the very answer it waits for. So the choice is made at connect,
 * from the two processes' CPU affinity (the daemon's pid from SO_PEERCRED).
 * A thread polls only while no other thread of its process waits for an
 * answer (many waiting at once keep the daemon busy, and it needs the CPU
 * more). A wait polls for twice what the connection's answers have lately
 * taken (at least 50 us), and never longer than its budget: answers that
 * take longer than that find their client asleep, and it sleeps at once, so
 * long waits cost no CPU time. The budget is 1 ms where client and daemon
 * run on CPUs of their own, and 50 us where they may meet on one: there a
 * longer poll takes the CPU from a daemon the scheduler put beside it, or
 * from other work, when the machine is busy. $CUBE_CLIENT_SPIN_US sets it.
 */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include "poll-window.h"
#include "spin.h"

static _Atomic unsigned waiting;        /* threads of this process waiting for an answer */

static uint64_t now_ns(void)
{
        struct timespec t;

        clock_gettime(CLOCK_MONOTONIC, &t);
        return (uint64_t) t.tv_sec * 1000000000ull + (uint64_t) t.tv_nsec;
}

unsigned cube__spin_budget_us(const cpu_set_t *mine, const cpu_set_t *daemon)
{
        cpu_set_t outside, shared;

        if (!daemon)
                return CPU_COUNT(mine) >= 2 ? CUBE__SPIN_SHARED_US : 0;
        CPU_AND(&shared, daemon, mine);
        if (CPU_COUNT(&shared) == 0)
                return CUBE__SPIN_APART_US;
        /* A CPU the daemon may use and the poller may not: the daemon is never
         * kept waiting for the poller's. */
        CPU_XOR(&outside, daemon, mine);
        CPU_AND(&outside, &outside, daemon);
        if (CPU_COUNT(&outside) > 0)
                return CUBE__SPIN_SHARED_US;
        /* Both free to move: the scheduler keeps them apart. */
        return CPU_COUNT(mine) >= 2 && CPU_COUNT(daemon) >= 2 ? CUBE__SPIN_SHARED_US : 0;
}

void cube__spin_init(cube__spin *s, int fd)
{
        const char *env = getenv("CUBE_CLIENT_SPIN_US");
        unsigned long us;
        cpu_set_t mine, daemon;
        struct ucred peer;
        socklen_t len = sizeof(peer);
        bool known;

        *s = (cube__spin) { 0 };
        if (sched_getaffinity(0, sizeof(mine), &mine) < 0)
                return;
        known = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0 && peer.pid > 0 &&
                sched_getaffinity(peer.pid, sizeof(daemon), &daemon) == 0;
        us = cube__spin_budget_us(&mine, known ? &daemon : NULL);
        if (us && env && *env) {
                char *end;
                errno = 0;
                unsigned long set = strtoul(env, &end, 10);
                if (!errno && !*end)
                        us = set;
        }
        s->budget_ns = (us < CUBE__SPIN_MAX_US ? us : CUBE__SPIN_MAX_US) * 1000ull;
}

/* Polls fd for up to ns: true when an answer is there. */
static bool spin(int fd, uint64_t start, uint64_t ns)
{
        struct pollfd p = { .fd = fd, .events = POLLIN };
        bool found;

        do
                found = poll(&p, 1, 0) > 0;
        while (!found && now_ns() - start < ns);
        return found;
}

int cube__spin_wait(cube__spin *s, int fd)
{
        struct pollfd p = { .fd = fd, .events = POLLIN };
        uint64_t start = s->budget_ns ? now_ns() : 0;
        int r = 0;

        /* Another thread of this process waiting too: the daemon is busy
         * with this process's work, and a poller would take a CPU from it. */
        bool alone = atomic_fetch_add(&waiting, 1) == 0;
        s->polled_ns = alone ? cube__poll_window_ns(s->expect_ns, CUBE__SPIN_MIN_US * 1000ull,
                                                    s->budget_ns) : 0;
        if (!(s->polled_ns && spin(fd, start, s->polled_ns)) && poll(&p, 1, -1) < 0)
                r = -errno;
        if (s->budget_ns && r == 0)
                s->expect_ns = cube__poll_expect_ns(s->expect_ns, now_ns() - start);
        atomic_fetch_sub(&waiting, 1);
        return r;
}

/*
 * linger.c - after answering, the loop polls for the client's next request
 * a short while before it sleeps.
 *
 * A request that finds cubed asleep pays for waking cubed's CPU: on the
 * 2-vCPU VMs cube is measured on an idle vCPU halts at once, and waking it
 * costs a few microseconds, a fifth of an empty launch + sync when client
 * and daemon run on CPUs of their own (docs/PERFORMANCE.md). The client
 * already polls for its answer (libclient/spin.c); this is the other half.
 *
 * Polling pays only when it takes a CPU nobody else needs, so the loop
 * lingers only
 * - after answering a client whose CPUs are all apart from cubed's (its
 *   affinity, read at accept from SO_PEERCRED's pid): a poll on a CPU the
 *   client may use would delay the very request it waits for;
 * - while no work is in flight or being compiled: the device process and
 *   the builds run on cubed's CPUs, and a poll would take their time;
 * - for twice the gap between an answer and the next request the
 *   connection lately showed (at least LINGER_MIN_NS), and never past the
 *   request-poll-us budget: a client that comes back later than that finds
 *   cubed asleep, and cubed stops polling for it within a few answers.
 * request-poll-us = 0 turns it off.
 *
 * While it lingers the loop keeps an idle handle active, so libuv polls its
 * descriptors without blocking and runs the handle once a pass; the handle
 * stops itself when any rule above no longer holds.
 */
#include <sched.h>

#include "poll-window.h"
#include "requests.h"

#define LINGER_MIN_NS (10 * 1000)

/* Runs once a pass of the loop while it lingers. An answer is written before
 * the work it answers is retired, so the rules are checked here, once the
 * loop has settled, and not where the answer is written. */
static void on_linger(uv_idle_t *h)
{
        cube__server *srv = h->data;

        if (srv->inflight || srv->compiling || uv_hrtime() >= srv->linger_until) {
                uv_idle_stop(h);
                srv->lingering = false;
        } else if (!srv->lingering) {
                srv->lingering = true;
                srv->stats.request_polls++;
        }
}

void cube__linger_init(cube__server *srv)
{
        uv_idle_init(srv->loop, &srv->linger_idle);
        srv->linger_idle.data = srv;
        /* It keeps nothing alive: the loop ends when its connections do. */
        uv_unref((uv_handle_t *) &srv->linger_idle);
}

void cube__linger_close(cube__server *srv)
{
        uv_close((uv_handle_t *) &srv->linger_idle, NULL);
}

/* The loop thread's CPUs are read at each accept, as the client's are: an
 * operator may move a running daemon. */
void cube__linger_accept(cube__linger *l, pid_t pid)
{
        cpu_set_t mine, client, shared;

        *l = (cube__linger) { 0 };
        if (pid <= 0 || sched_getaffinity(0, sizeof(mine), &mine) < 0 ||
            sched_getaffinity(pid, sizeof(client), &client) < 0)
                return;
        CPU_AND(&shared, &client, &mine);
        l->apart = CPU_COUNT(&shared) == 0;
}

void cube__linger_answered(cube__server *srv, cube__linger *l)
{
        uint64_t budget = (uint64_t) srv->opts.request_poll_us * 1000, now, window;

        if (!l->apart || !budget)
                return;
        now = uv_hrtime();
        l->answered_ns = now;
        window = cube__poll_window_ns(l->expect_ns, LINGER_MIN_NS, budget);
        if (!window)
                return;
        if (now + window > srv->linger_until)
                srv->linger_until = now + window;
        uv_idle_start(&srv->linger_idle, on_linger);
}

void cube__linger_heard(cube__server *srv, cube__linger *l)
{
        if (!l->answered_ns)
                return;
        l->expect_ns = cube__poll_expect_ns(l->expect_ns, uv_hrtime() - l->answered_ns);
        l->answered_ns = 0;
        if (srv->lingering)
                srv->stats.request_polls_caught++;
}

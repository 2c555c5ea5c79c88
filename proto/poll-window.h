/*
 * poll-window.h - how long one side of a connection polls for the other
 * before it sleeps: the client for its answer (libclient/spin.c), cubed for
 * a client's next request (daemon/linger.c).
 *
 * A poll pays off only when what it waits for arrives while it polls, and
 * costs the CPU meanwhile. Each side keeps how long the other lately took
 * and polls for twice that, within a budget; a peer that lately took longer
 * than the budget is not polled for at all.
 */
#ifndef CUBE_PROTO_POLL_WINDOW_H
#define CUBE_PROTO_POLL_WINDOW_H

#include <stdint.h>

/* How long to poll: twice expect_ns, at least min_ns, at most budget_ns;
 * 0 when expect_ns is over the budget. */
static inline uint64_t cube__poll_window_ns(uint64_t expect_ns, uint64_t min_ns,
                                            uint64_t budget_ns)
{
        uint64_t want = 2 * expect_ns;

        if (expect_ns > budget_ns)
                return 0;
        if (want < min_ns)
                want = min_ns;
        return want < budget_ns ? want : budget_ns;
}

/* The expectation after a wait of took_ns: half of it, half of those
 * before, so a peer that slows down stops being polled for within a few
 * waits. */
static inline uint64_t cube__poll_expect_ns(uint64_t expect_ns, uint64_t took_ns)
{
        return (expect_ns + took_ns) / 2;
}

#endif

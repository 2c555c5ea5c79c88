/*
 * history.c - what the daemon remembers for its operators: the sessions that
 * ended and the failures that happened lately (cubectl history), and the
 * histograms of seconds behind its metrics.
 *
 * Rings of fixed size: a daemon that runs for months remembers the last
 * `history` of each, never more.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <uv.h>

#include "services.h"

int cube__history_init(cube__history *h, uint32_t cap, uint64_t started_ns)
{
        *h = (cube__history) { .cap = cap, .started_ns = started_ns };
        if (!cap)
                return 0;
        h->sessions = calloc(cap, sizeof(*h->sessions));
        h->failures = calloc(cap, sizeof(*h->failures));
        if (!h->sessions || !h->failures) {
                cube__history_free(h);
                return -1;
        }
        return 0;
}

void cube__history_free(cube__history *h)
{
        free(h->sessions);
        free(h->failures);
        *h = (cube__history) {0};
}

void cube__history_session(cube__history *h, const cube__ended *ended)
{
        if (!h->cap)
                return;
        h->sessions[h->next_session] = *ended;
        h->next_session = (h->next_session + 1) % h->cap;
        if (h->n_sessions < h->cap)
                h->n_sessions++;
}

void cube__history_failure(cube__history *h, uint64_t id, uint64_t session, uid_t uid,
                           const cube_error *root)
{
        cube__recent_failure *f;

        if (!h->cap)
                return;
        f = &h->failures[h->next_failure];
        h->next_failure = (h->next_failure + 1) % h->cap;
        if (h->n_failures < h->cap)
                h->n_failures++;
        *f = (cube__recent_failure) { .id = id, .session = session, .uid = uid,
                                      .at_s = (double) (uv_hrtime() - h->started_ns) / 1e9 };
        snprintf(f->root, sizeof(f->root), "%s", cube_error_message(root));
}

const double cube__hist_bounds[CUBE__HIST_BUCKETS] = {
        0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60,
};

void cube__hist_observe(cube__hist *h, double seconds)
{
        size_t i = 0;

        while (i < CUBE__HIST_BUCKETS && seconds > cube__hist_bounds[i])
                i++;
        if (i < CUBE__HIST_BUCKETS)
                h->buckets[i]++;
        h->count++;
        h->sum += seconds;
}

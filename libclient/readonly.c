/*
 * readonly.c - the memory ids this connection imported read-only.
 *
 * The daemon refuses a write through a read-only import, but a write needs
 * no round trip: the refusal could only land on the name, and every later
 * read of it would report the write that never happened. Knowing which of
 * its names are read-only, the library refuses such a write at once instead.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "rpc.h"

/* The index of the first id not below memory. Called with ro_lock held. */
static size_t lower_bound(const cube_client *c, uint64_t memory)
{
        size_t lo = 0, hi = c->n_ro;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (c->ro_ids[mid] < memory)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

int cube__readonly_add(cube_client *c, uint64_t memory)
{
        int r = 0;

        pthread_mutex_lock(&c->ro_lock);
        size_t at = lower_bound(c, memory);
        if (at < c->n_ro && c->ro_ids[at] == memory)
                goto out;
        if (c->n_ro == c->cap_ro) {
                size_t cap = c->cap_ro ? c->cap_ro * 2 : 16;
                uint64_t *ids = realloc(c->ro_ids, cap * sizeof(*ids));
                if (!ids) {
                        r = -1;
                        goto out;
                }
                c->ro_ids = ids;
                c->cap_ro = cap;
        }
        /* Ids only grow, so this is an append but for racing imports. */
        for (size_t i = c->n_ro; i > at; i--)
                c->ro_ids[i] = c->ro_ids[i - 1];
        c->ro_ids[at] = memory;
        c->n_ro++;
out:
        pthread_mutex_unlock(&c->ro_lock);
        return r;
}

void cube__readonly_remove(cube_client *c, uint64_t memory)
{
        pthread_mutex_lock(&c->ro_lock);
        size_t at = lower_bound(c, memory);
        if (at < c->n_ro && c->ro_ids[at] == memory) {
                for (size_t i = at; i + 1 < c->n_ro; i++)
                        c->ro_ids[i] = c->ro_ids[i + 1];
                c->n_ro--;
        }
        pthread_mutex_unlock(&c->ro_lock);
}

bool cube__readonly(cube_client *c, uint64_t memory)
{
        bool found;

        pthread_mutex_lock(&c->ro_lock);
        size_t at = lower_bound(c, memory);
        found = at < c->n_ro && c->ro_ids[at] == memory;
        pthread_mutex_unlock(&c->ro_lock);
        return found;
}

cube_error *cube__check_writable(cube_client *c, const cube_handle *h)
{
        if (!cube__readonly(c, h->memory))
                return NULL;
        /* The daemon's own words for the same refusal. */
        return cube__err_validation("memory %" PRIu64 " is a read-only import: it may not be "
                                    "written", h->memory);
}

/*
 * failures.c - the store of failures, and the claims allocations carry.
 *
 * A failure is a record of what went wrong (its root error) under an id that
 * is never reused. An allocation carries claims: byte ranges whose writer
 * failed, each naming a failure. A read of claimed bytes reports the failure
 * instead of handing back whatever was in memory before; a successful write
 * repairs exactly the bytes it covers. A record lives while some allocation
 * carries it, so the store never grows beyond what is still reachable.
 */
#include <errno.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "cubed.h"

#define SKIPS_KEPT 16

/* A launch skipped because memory `needed` carried the failure; the memory
 * it was to write (`produced`) claims the failure now. */
typedef struct skip_record {
        char *hop;
        uint64_t needed;
        uint64_t *produced;
        size_t n_produced;
} skip_record;

typedef struct failure_record {
        uint64_t id;
        uint64_t session;
        cube_error *root;
        uint32_t tagged;                /* allocations that carry it */
        char *note;                     /* why the root happened, when there is more to say */
        skip_record skips[SKIPS_KEPT];  /* newest first */
        size_t n_skips;
        uint64_t skips_dropped;
} failure_record;

static void skip_free(skip_record *k)
{
        free(k->hop);
        free(k->produced);
}

static void record_free(failure_record *r)
{
        for (size_t i = 0; i < r->n_skips; i++)
                skip_free(&r->skips[i]);
        free(r->note);
        cube_error_free(r->root);
        free(r);
}

uint64_t cube__failures_insert(cube__failures *fs, cube_error *root, uint64_t session)
{
        failure_record *r = calloc(1, sizeof(*r));

        if (!r || !root) {
                free(r);
                cube_error_free(root);
                return 0;
        }
        r->id = ++fs->minted;
        r->session = session;
        r->root = root;
        if (cube__idmap_put(&fs->records, r->id, r) < 0) {
                cube_error_free(root);
                free(r);
                return 0;
        }
        return r->id;
}

void cube__failures_prune(cube__failures *fs, uint64_t failure)
{
        failure_record *r = cube__idmap_get(&fs->records, failure);

        if (!r || r->tagged > 0)
                return;
        cube__idmap_remove(&fs->records, failure);
        record_free(r);
}

static void retag(cube__failures *fs, uint64_t failure, int delta)
{
        failure_record *r = cube__idmap_get(&fs->records, failure);

        if (!r)
                return;
        if (delta > 0)
                r->tagged++;
        else if (r->tagged > 0)
                r->tagged--;
        if (r->tagged == 0)
                cube__failures_prune(fs, failure);
}

static bool carries(const cube__claim *v, size_t n, uint64_t failure)
{
        for (size_t i = 0; i < n; i++)
                if (v[i].failure == failure)
                        return true;
        return false;
}

/* Recomputes which failures gained or lost this allocation as a carrier,
 * comparing the claims before a change with the claims after it. */
static void update_tags(cube__failures *fs, const cube__claim *before, size_t n_before,
                        const cube__claim *after, size_t n_after)
{
        for (size_t i = 0; i < n_after; i++)
                if (!carries(after, i, after[i].failure) &&
                    !carries(before, n_before, after[i].failure))
                        retag(fs, after[i].failure, +1);
        for (size_t i = 0; i < n_before; i++)
                if (!carries(before, i, before[i].failure) &&
                    !carries(after, n_after, before[i].failure))
                        retag(fs, before[i].failure, -1);
}

/* Builds the claims with [start, end) cut out, plus, when failure is not 0,
 * [start, end) claimed by it; neighbours of the same failure are fused. */
static int rewrite(cube__failures *fs, cube__claims *c, uint64_t start, uint64_t end,
                   uint64_t failure)
{
        cube__claim *v = malloc((c->n + 3) * sizeof(*v));
        size_t n = 0;
        bool placed = failure == 0;

        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < c->n; i++) {
                cube__claim k = c->v[i];
                if (!placed && k.start >= start) {
                        v[n++] = (cube__claim) { failure, start, end };
                        placed = true;
                }
                if (k.end <= start || k.start >= end) {
                        v[n++] = k;
                        continue;
                }
                if (k.start < start)
                        v[n++] = (cube__claim) { k.failure, k.start, start };
                if (k.end > end) {
                        if (!placed) {
                                v[n++] = (cube__claim) { failure, start, end };
                                placed = true;
                        }
                        v[n++] = (cube__claim) { k.failure, end, k.end };
                }
        }
        if (!placed)
                v[n++] = (cube__claim) { failure, start, end };

        /* Fuse touching ranges of one failure: [0,10) + [10,20) is [0,20). */
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
                if (m > 0 && v[m - 1].failure == v[i].failure && v[m - 1].end == v[i].start)
                        v[m - 1].end = v[i].end;
                else
                        v[m++] = v[i];
        }

        cube__claim *before = c->v;
        size_t n_before = c->n;
        c->v = v;
        c->n = m;
        c->cap = n_before + 3;
        update_tags(fs, before, n_before, v, m);
        free(before);
        return 0;
}

int cube__claims_taint(cube__failures *fs, cube__claims *c, uint64_t start, uint64_t end,
                       uint64_t failure)
{
        if (start >= end || failure == 0)
                return 0;
        return rewrite(fs, c, start, end, failure);
}

int cube__claims_written(cube__failures *fs, cube__claims *c, uint64_t start, uint64_t end)
{
        if (start >= end || c->n == 0)
                return 0;
        return rewrite(fs, c, start, end, 0);
}

void cube__claims_clear(cube__failures *fs, cube__claims *c)
{
        update_tags(fs, c->v, c->n, NULL, 0);
        free(c->v);
        *c = (cube__claims) {0};
}

void cube__failures_skipped(cube__failures *fs, uint64_t failure, const char *kernel,
                            uint64_t needed, const uint64_t *produced, size_t n_produced)
{
        failure_record *r = cube__idmap_get(&fs->records, failure);
        skip_record k = { .needed = needed, .n_produced = n_produced };

        if (!r)
                return;
        k.produced = malloc((n_produced ? n_produced : 1) * sizeof(*k.produced));
        if (!k.produced || asprintf(&k.hop, "skipped `%s`: it needed memory %llu, which carried "
                                    "the failure", kernel, (unsigned long long) needed) < 0) {
                free(k.produced);
                return;
        }
        memcpy(k.produced, produced, n_produced * sizeof(*produced));
        if (r->n_skips == SKIPS_KEPT) {
                skip_free(&r->skips[--r->n_skips]);
                r->skips_dropped++;
        }
        memmove(r->skips + 1, r->skips, r->n_skips * sizeof(*r->skips));
        r->skips[0] = k;
        r->n_skips++;
}

void cube__failures_note(cube__failures *fs, uint64_t failure, const char *note)
{
        failure_record *r = cube__idmap_get(&fs->records, failure);

        if (r && !r->note)
                r->note = strdup(note);
}

static bool produced(const skip_record *k, uint64_t memory)
{
        for (size_t i = 0; i < k->n_produced; i++)
                if (k->produced[i] == memory)
                        return true;
        return false;
}

cube_error *cube__failures_report(cube__failures *fs, uint64_t failure, uint64_t memory)
{
        failure_record *r = cube__idmap_get(&fs->records, failure);
        cube_error *root;
        char **chain;
        size_t n = 0;

        if (!r)
                return cube__err_not_found("failure #%llu is no longer recorded",
                                           (unsigned long long) failure);
        root = cube_error_clone(r->root);
        chain = calloc(r->n_skips + 2, sizeof(*chain));
        if (!root || !chain) {
                cube_error_free(root);
                free(chain);
                return NULL;
        }
        /* Newest first, from the memory asked about back toward the root:
         * each hop's needed memory is what an older hop produced. */
        for (size_t i = 0; i < r->n_skips; i++) {
                if (memory && !produced(&r->skips[i], memory))
                        continue;
                if ((chain[n] = strdup(r->skips[i].hop)))
                        n++;
                if (memory)
                        memory = r->skips[i].needed;
        }
        if (r->skips_dropped && n > 0 &&
            asprintf(&chain[n], "(%llu older skip record(s) were dropped; the walk may stop "
                     "before the root)", (unsigned long long) r->skips_dropped) >= 0)
                n++;
        if (r->note && (chain[n] = strdup(r->note)))
                n++;
        return cube__err_unwritten(r->id, r->tagged, chain, n, root);
}

typedef struct pack_ctx {
        cube__failures *fs;
        msgpack_packer *pk;
        int r;
} pack_ctx;

static void pack_one(uint64_t key, void *value, void *ctx)
{
        pack_ctx *p = ctx;
        failure_record *rec = value;
        cube_error *report = cube__failures_report(p->fs, rec->id, 0);

        p->r |= msgpack_pack_map(p->pk, 3);
        p->r |= cube__pack_kv_u64(p->pk, "id", rec->id);
        p->r |= cube__pack_kv_u64(p->pk, "session", rec->session);
        p->r |= cube__pack_str(p->pk, "report");
        p->r |= report ? cube__err_pack(p->pk, report) : -1;
        cube_error_free(report);
}

int cube__failures_pack(cube__failures *fs, msgpack_packer *pk)
{
        pack_ctx p = { fs, pk, 0 };

        p.r |= msgpack_pack_array(pk, (uint32_t) fs->records.len);
        cube__idmap_foreach(&fs->records, pack_one, &p);
        return p.r ? -1 : 0;
}

size_t cube__failures_live(const cube__failures *fs)
{
        return fs->records.len;
}

static void free_record(uint64_t key, void *value, void *ctx)
{
        record_free(value);
}

void cube__failures_free(cube__failures *fs)
{
        cube__idmap_foreach(&fs->records, free_record, NULL);
        cube__idmap_free(&fs->records);
}

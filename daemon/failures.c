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

#include "services.h"

#define SKIPS_KEPT 16
#define DROPPED_KEPT 64         /* memories produced by dropped hops, remembered */

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
        uint32_t held;                  /* writers and answers that may still report it */
        char *note;                     /* why the root happened, when there is more to say */
        skip_record skips[SKIPS_KEPT];  /* newest first */
        size_t n_skips;
        uint64_t skips_dropped;
        /* What the dropped hops produced, so that a walk that ends on one of
         * them says the records were dropped instead of reading as a direct
         * claim. Past DROPPED_KEPT, every walk says so. */
        uint64_t dropped[DROPPED_KEPT];
        size_t n_dropped;
        bool dropped_overflow;
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

uint64_t cube__failures_insert(cube__failures *fs, cube_error *root, uint64_t session, uid_t uid)
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
        if (fs->history)
                cube__history_failure(fs->history, r->id, session, uid, root);
        return r->id;
}

void cube__failures_prune(cube__failures *fs, uint64_t failure)
{
        failure_record *r = cube__idmap_get(&fs->records, failure);

        if (!r || r->tagged > 0 || r->held > 0)
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
        cube__failures_prune(fs, failure);
}

static void hold(cube__failures *fs, uint64_t failure, int delta)
{
        failure_record *r = cube__idmap_get(&fs->records, failure);

        if (!r)
                return;
        if (delta > 0)
                r->held++;
        else if (r->held > 0)
                r->held--;
        cube__failures_prune(fs, failure);
}

cube__writer *cube__writer_new(void)
{
        cube__writer *w = calloc(1, sizeof(*w));

        if (w)
                w->refs = 1;
        return w;
}

void cube__writer_finish(cube__failures *fs, cube__writer *w, uint64_t failure)
{
        w->done = true;
        w->failure = failure;
        if (failure)
                hold(fs, failure, +1);
}

void cube__writer_unref(cube__failures *fs, cube__writer *w)
{
        if (!w || --w->refs > 0)
                return;
        if (w->failure)
                hold(fs, w->failure, -1);
        free(w);
}

static bool same(const cube__claim *a, const cube__claim *b)
{
        return a->failure == b->failure && a->writer == b->writer;
}

static bool carries(const cube__claim *v, size_t n, uint64_t failure)
{
        for (size_t i = 0; i < n; i++)
                if (v[i].failure == failure)
                        return true;
        return false;
}

/* Puts claims v (sorted, disjoint; n of them) in place of c's, keeping every
 * count right: a failure's carriers, a writer's references. */
static int install(cube__failures *fs, cube__claims *c, cube__claim *v, size_t n)
{
        size_t m = 0;

        /* Fuse touching ranges of one claim: [0,10) + [10,20) is [0,20). */
        for (size_t i = 0; i < n; i++) {
                if (m > 0 && same(&v[m - 1], &v[i]) && v[m - 1].end == v[i].start)
                        v[m - 1].end = v[i].end;
                else
                        v[m++] = v[i];
        }
        if (m > c->cap) {
                size_t cap = m < 4 ? 4 : 2 * m;
                cube__claim *grown = malloc(cap * sizeof(*grown));
                if (!grown)
                        return -ENOMEM;
                /* The old claims move to the new room untouched; the counts
                 * below are computed from the copy kept in v's caller. */
                if (c->n)
                        memcpy(grown, c->v, c->n * sizeof(*grown));
                free(c->v);
                c->v = grown;
                c->cap = cap;
        }
        for (size_t i = 0; i < m; i++)
                if (v[i].writer)
                        v[i].writer->refs++;
        for (size_t i = 0; i < m; i++)
                if (v[i].failure && !carries(v, i, v[i].failure) &&
                    !carries(c->v, c->n, v[i].failure))
                        retag(fs, v[i].failure, +1);
        for (size_t i = 0; i < c->n; i++)
                if (c->v[i].failure && !carries(c->v, i, c->v[i].failure) &&
                    !carries(v, m, c->v[i].failure))
                        retag(fs, c->v[i].failure, -1);
        for (size_t i = 0; i < c->n; i++)
                if (c->v[i].writer)
                        cube__writer_unref(fs, c->v[i].writer);
        if (m)
                memcpy(c->v, v, m * sizeof(*v));
        c->n = m;
        return 0;
}

/* Room for the claims an edit of c builds: on the stack while small. */
#define EDIT_ROOM 16

static cube__claim *edit_room(const cube__claims *c, cube__claim *stack)
{
        return c->n + 3 <= EDIT_ROOM ? stack : malloc((c->n + 3) * sizeof(cube__claim));
}

/* Builds the claims with [start, end) cut out, plus, unless k claims
 * nothing, [start, end) claimed as k says. */
static int rewrite(cube__failures *fs, cube__claims *c, uint64_t start, uint64_t end,
                   cube__claim k)
{
        cube__claim stack[EDIT_ROOM], *v = edit_room(c, stack);
        size_t n = 0;
        bool placed = !k.failure && !k.writer;
        int r;

        if (!v)
                return -ENOMEM;
        k.start = start;
        k.end = end;
        for (size_t i = 0; i < c->n; i++) {
                cube__claim x = c->v[i];
                if (!placed && x.start >= start) {
                        v[n++] = k;
                        placed = true;
                }
                if (x.end <= start || x.start >= end) {
                        v[n++] = x;
                        continue;
                }
                if (x.start < start) {
                        v[n] = x;
                        v[n++].end = start;
                }
                if (x.end > end) {
                        if (!placed) {
                                v[n++] = k;
                                placed = true;
                        }
                        v[n] = x;
                        v[n++].start = end;
                }
        }
        if (!placed)
                v[n++] = k;
        r = install(fs, c, v, n);
        if (v != stack)
                free(v);
        return r;
}

int cube__claims_taint(cube__failures *fs, cube__claims *c, uint64_t start, uint64_t end,
                       uint64_t failure)
{
        if (start >= end || failure == 0)
                return 0;
        return rewrite(fs, c, start, end, (cube__claim) { .failure = failure });
}

int cube__claims_written(cube__failures *fs, cube__claims *c, uint64_t start, uint64_t end)
{
        if (start >= end || c->n == 0)
                return 0;
        return rewrite(fs, c, start, end, (cube__claim) {0});
}

int cube__claims_pending(cube__failures *fs, cube__claims *c, uint64_t start, uint64_t end,
                         cube__writer *writer)
{
        if (start >= end)
                return 0;
        return rewrite(fs, c, start, end, (cube__claim) { .writer = writer });
}

void cube__claims_settle(cube__failures *fs, cube__claims *c, cube__writer *writer)
{
        cube__claim stack[EDIT_ROOM], *v;
        size_t n = 0;
        bool found = false;

        for (size_t i = 0; i < c->n && !found; i++)
                found = c->v[i].writer == writer;
        if (!found || !(v = edit_room(c, stack)))
                return;         /* later work claimed all it wrote: nothing lands */
        for (size_t i = 0; i < c->n; i++) {
                cube__claim x = c->v[i];
                if (x.writer == writer) {
                        if (!writer->failure)
                                continue;
                        x.writer = NULL;
                        x.failure = writer->failure;
                }
                v[n++] = x;
        }
        install(fs, c, v, n);
        if (v != stack)
                free(v);
}

void cube__claims_clear(cube__failures *fs, cube__claims *c)
{
        install(fs, c, NULL, 0);
        free(c->v);
        *c = (cube__claims) {0};
}

int cube__awaits_collect(cube__failures *fs, cube__awaits *a, const cube__claims *c,
                         uint64_t start, uint64_t end, uint64_t memory)
{
        for (size_t i = 0; i < c->n; i++) {
                const cube__claim *x = &c->v[i];
                bool known = false;

                if (x->end <= start || x->start >= end)
                        continue;
                for (size_t j = 0; j < a->n && !known; j++)
                        known = a->v[j].failure == x->failure && a->v[j].writer == x->writer;
                if (known)
                        continue;
                if (a->n == a->cap) {
                        size_t cap = a->cap ? 2 * a->cap : 4;
                        cube__await *grown = realloc(a->v, cap * sizeof(*grown));
                        if (!grown)
                                return -ENOMEM;
                        a->v = grown;
                        a->cap = cap;
                }
                a->v[a->n++] = (cube__await) { x->failure, x->writer, memory };
                if (x->writer)
                        x->writer->refs++;
                else
                        hold(fs, x->failure, +1);
        }
        return 0;
}

static uint64_t await_failure(const cube__await *w)
{
        return w->writer ? (w->writer->done ? w->writer->failure : 0) : w->failure;
}

uint64_t cube__awaits_first(const cube__awaits *a, uint64_t *ret_memory, bool *ret_pending)
{
        bool pending = false;

        for (size_t i = 0; i < a->n; i++) {
                uint64_t failure = await_failure(&a->v[i]);
                if (a->v[i].writer && !a->v[i].writer->done)
                        pending = true;
                if (failure) {
                        *ret_memory = a->v[i].memory;
                        *ret_pending = pending;
                        return failure;
                }
        }
        *ret_pending = pending;
        return 0;
}

int cube__failures_add_report(cube__failures *fs, cube_error **several, uint64_t failure,
                              uint64_t memory)
{
        for (size_t i = 0; *several && i < cube_error_count(*several); i++)
                if (cube_error_failure(cube_error_at(*several, i)) == failure)
                        return 0;
        if (!*several && !(*several = cube__err_several()))
                return -ENOMEM;
        return cube__err_several_add(*several, cube__failures_report(fs, failure, memory));
}

cube_error *cube__awaits_report(cube__failures *fs, const cube__awaits *a)
{
        cube_error *several = NULL;

        for (size_t i = 0; i < a->n; i++) {
                uint64_t failure = await_failure(&a->v[i]);
                if (failure && cube__failures_add_report(fs, &several, failure,
                                                         a->v[i].memory) < 0) {
                        cube_error_free(several);
                        return cube__err_generic("out of host memory reporting failures");
                }
        }
        return several;
}

void cube__awaits_release(cube__failures *fs, cube__awaits *a)
{
        for (size_t i = 0; i < a->n; i++) {
                if (a->v[i].writer)
                        cube__writer_unref(fs, a->v[i].writer);
                else
                        hold(fs, a->v[i].failure, -1);
        }
        free(a->v);
        *a = (cube__awaits) {0};
}

static void add_hop(cube__failures *fs, uint64_t failure, char *hop, uint64_t needed,
                    const uint64_t *produced, size_t n_produced)
{
        failure_record *r = cube__idmap_get(&fs->records, failure);
        skip_record k = { .hop = hop, .needed = needed, .n_produced = n_produced };

        if (!r || !hop || !(k.produced = malloc((n_produced ? n_produced : 1) *
                                                sizeof(*k.produced)))) {
                free(hop);
                return;
        }
        memcpy(k.produced, produced, n_produced * sizeof(*produced));
        if (r->n_skips == SKIPS_KEPT) {
                skip_record *old = &r->skips[--r->n_skips];
                for (size_t i = 0; i < old->n_produced; i++) {
                        if (r->n_dropped < DROPPED_KEPT)
                                r->dropped[r->n_dropped++] = old->produced[i];
                        else
                                r->dropped_overflow = true;
                }
                skip_free(old);
                r->skips_dropped++;
        }
        memmove(r->skips + 1, r->skips, r->n_skips * sizeof(*r->skips));
        r->skips[0] = k;
        r->n_skips++;
}

void cube__failures_skipped(cube__failures *fs, uint64_t failure, const char *kernel,
                            uint64_t needed, const uint64_t *produced, size_t n_produced)
{
        char *hop = NULL;

        if (asprintf(&hop, "skipped `%s`: it needed memory %llu, which carried the failure",
                     kernel, (unsigned long long) needed) < 0)
                hop = NULL;
        add_hop(fs, failure, hop, needed, produced, n_produced);
}

void cube__failures_ran_stale(cube__failures *fs, uint64_t failure, const char *kernel,
                              uint64_t needed, const uint64_t *produced, size_t n_produced)
{
        char *hop = NULL;

        if (asprintf(&hop, "`%s` ran on memory %llu, whose writer failed on the device: what "
                     "it wrote carries the failure", kernel, (unsigned long long) needed) < 0)
                hop = NULL;
        add_hop(fs, failure, hop, needed, produced, n_produced);
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

/* Whether a hop that was dropped may have produced memory. */
static bool dropped_made(const failure_record *r, uint64_t memory)
{
        if (r->dropped_overflow)
                return true;
        for (size_t i = 0; i < r->n_dropped; i++)
                if (r->dropped[i] == memory)
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
        if (r->skips_dropped && (!memory || dropped_made(r, memory)) &&
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

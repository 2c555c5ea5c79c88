/*
 * allocations.c - allocations, the names sessions give them, and streams.
 *
 * Memory ids are minted by the client, so creating memory is a notification
 * with no answer: a reservation that fails is kept on the allocation as a
 * failure claiming all of it, and the next read, sync or check reports it,
 * as the reference's initialize_memory does.
 *
 * An allocation is named by the session that created it and by every session
 * that imported it with its export token. It lives until the last name is
 * dropped and no work uses it. Its bytes count against one holder at a time
 * (its creator, then, if the creator lets go first, another holder), so the
 * daemon's memory in use is always what live sessions hold.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "cubed.h"


cube__stream *cube__stream_get(cube__session *s, uint64_t id, cube_error **ret_error)
{
        cube__server *srv = s->server;
        cube__stream *st = cube__idmap_get(&s->streams, id);
        cube_error *e;

        if (st)
                return st;
        if (s->streams.len >= srv->opts.max_streams) {
                *ret_error = cube__err_validation(
                        "a session may use at most %u streams (max-streams); stream %" PRIu64
                        " would be one more", srv->opts.max_streams, id);
                return NULL;
        }
        st = calloc(1, sizeof(*st));
        if (!st) {
                *ret_error = cube__err_generic("out of host memory creating stream %" PRIu64, id);
                return NULL;
        }
        st->id = id;
        st->session = s;
        e = srv->driver->stream_open(srv->device, &st->device);
        if (e) {
                free(st);
                *ret_error = e;
                return NULL;
        }
        if (cube__idmap_put(&s->streams, id, st) < 0) {
                srv->driver->stream_close(srv->device, st->device);
                free(st);
                *ret_error = cube__err_generic("out of host memory creating stream %" PRIu64, id);
                return NULL;
        }
        return st;
}

/* Carves a's bytes from pools m. */
static cube_error *reserve(cube__pools *m, uint64_t size, cube__alloc *a)
{
        cube__carve c;
        cube_error *e = cube__pools_reserve(m, size, &c);

        if (e)
                return e;
        a->memory = c.pools;
        a->page = c.page;
        a->storage = c.storage;
        a->base = c.base;
        a->padding = c.padding;
        return NULL;
}

static void reclaim_stream(uint64_t key, void *value, void *ctx)
{
        cube__stream *st = value;

        /* A stream preparing or recording a capture keeps what its warm-up
         * left: the capture is to find it there. */
        if (st->memory && st->memory->capture == CUBE__CAPTURE_NONE)
                cube__pools_cleanup(st->memory);
}

void cube__reclaim_pages(void *server)
{
        cube__server *srv = server;

        for (cube__session *s = srv->sessions; s; s = s->next)
                cube__idmap_foreach(&s->streams, reclaim_stream, NULL);
}

/* Moves an allocation's bytes onto session s (or off every session). */
static void charge(cube__alloc *a, cube__session *s)
{
        cube__server *srv = a->server;
        cube__uid *u;

        if (!a->storage || a->charged == s)
                return;
        if (a->charged) {
                a->charged->memory_in_use -= a->size;
                if ((u = cube__idmap_get(&srv->users.uids, a->charged_uid)))
                        u->memory -= a->size;
        }
        a->charged = s;
        if (!s)
                return;
        a->charged_uid = s->uid;
        s->memory_in_use += a->size;
        if (s->memory_in_use > s->memory_peak)
                s->memory_peak = s->memory_in_use;
        if ((u = cube__uid_get(&srv->users, s->uid)))
                u->memory += a->size;
}

static cube__name *name_new(cube__session *s, uint64_t id, cube__alloc *a, bool read_only)
{
        cube__name *n = calloc(1, sizeof(*n));

        if (!n)
                return NULL;
        n->id = id;
        n->session = s;
        n->alloc = a;
        n->read_only = read_only;
        if (cube__idmap_put(&s->memory, id, n) < 0) {
                free(n);
                return NULL;
        }
        n->next_holder = a->names;
        a->names = n;
        a->holders++;
        return n;
}

/* Why a reservation of size bytes is over a quota, or NULL. */
static const char *over_quota(cube__session *s, uint64_t size, char *why, size_t len)
{
        cube__server *srv = s->server;
        cube__uid *u = cube__uid_get(&srv->users, s->uid);

        /* A holder may be over its quota already, having inherited shared memory's
         * charge: the subtraction must not wrap. */
        if (srv->opts.session_memory && (s->memory_in_use > srv->opts.session_memory ||
                                         size > srv->opts.session_memory - s->memory_in_use)) {
                snprintf(why, len, "the session's memory quota (session-memory, %" PRIu64
                         " bytes) would be exceeded: the session holds %" PRIu64 " bytes",
                         srv->opts.session_memory, s->memory_in_use);
                return why;
        }
        if (srv->opts.uid_memory && u && (u->memory > srv->opts.uid_memory ||
                                           size > srv->opts.uid_memory - u->memory)) {
                snprintf(why, len, "uid %u's memory quota (uid-memory, %" PRIu64 " bytes) would "
                         "be exceeded: its sessions hold %" PRIu64 " bytes", (unsigned) s->uid,
                         srv->opts.uid_memory, u->memory);
                return why;
        }
        return NULL;
}

int cube__alloc_create(cube__session *s, uint64_t id, uint64_t size, uint64_t stream,
                       cube_error *refused)
{
        cube__server *srv = s->server;
        cube__stream *st;
        cube__alloc *a;
        cube_error *e;
        const char *quota = NULL;
        char why[256];

        a = calloc(1, sizeof(*a));
        if (!a) {
                cube_error_free(refused);
                return -ENOMEM;
        }
        a->id = id;
        a->size = size;
        a->server = srv;
        if (!name_new(s, id, a, false)) {
                cube_error_free(refused);
                free(a);
                return -ENOMEM;
        }

        if (refused)
                e = refused;
        else if (srv->poison)
                e = cube__err_wrap(CUBE_SERVER_IO, cube__err_wrap(CUBE_IO_DEVICE_POISONED,
                                                                  cube_error_clone(srv->poison)));
        else if ((quota = over_quota(s, size, why, sizeof(why))))
                e = cube__err_io_size(CUBE_IO_OUT_OF_MEMORY, size);
        else if (!(e = cube__inject_take(srv, CUBE_FAULT_ALLOC)) &&
                 (st = cube__stream_get(s, stream, &e)) &&
                 (st->memory || (st->memory = cube__pools_new(&srv->pools))))
                e = reserve(st->memory, size, a);
        else if (!e)
                e = cube__err_io_size(CUBE_IO_OUT_OF_MEMORY, size);
        if (e) {
                uint64_t failure;

                cube__log_session(CUBE__LOG_INFO, s, 0, "session %" PRIu64 ": memory %" PRIu64
                                  " of %" PRIu64 " bytes could not be reserved: %s%s%s", s->id, id,
                                  size, cube_error_message(e), quota ? ": " : "",
                                  quota ? quota : "");
                s->errors++;
                a->storage = NULL;
                failure = cube__failures_insert(&srv->failures, e, s->id, s->uid);
                if (quota)
                        cube__failures_note(&srv->failures, failure, quota);
                /* An empty allocation has no bytes to claim; mark its one
                 * virtual byte so a read still reports the failure. */
                if (cube__claims_taint(&srv->failures, &a->claims, 0, size ? size : 1, failure) < 0)
                        return -ENOMEM;
                cube__failures_prune(&srv->failures, failure);
                return 0;
        }
        srv->memory_in_use += size;
        if (srv->memory_in_use > srv->memory_peak)
                srv->memory_peak = srv->memory_in_use;
        srv->allocations++;
        charge(a, s);
        return 0;
}

cube_error *cube__await_handles(cube__session *s, const cube_handle *handles, size_t n,
                                cube__awaits *a)
{
        cube__failures *fs = &s->server->failures;

        for (size_t i = 0; i < n; i++) {
                cube__name *nm;
                uint64_t start, end;
                cube_error *e = cube__name_resolve(s, &handles[i], &nm, &start, &end);

                if (e)
                        return e;
                if (!nm->alloc->storage && start == end) {
                        start = 0;      /* the virtual byte of a failed reservation */
                        end = 1;
                }
                if (cube__awaits_collect(fs, a, &nm->alloc->claims, start, end,
                                         nm->alloc->id) < 0 ||
                    cube__awaits_collect(fs, a, &nm->local, start, end, nm->id) < 0)
                        return cube__err_generic("out of host memory reporting failures");
        }
        return NULL;
}

cube_error *cube__alloc_peer(cube__session *s, uint64_t id, struct cube__peer *p,
                             cube__storage *storage, uint64_t at, uint64_t size)
{
        cube__server *srv = s->server;
        cube__alloc *a;

        if (CUBE__MEMORY_SESSION(id) != s->id || cube__idmap_get(&s->memory, id)) {
                srv->driver->release(srv->device, storage);
                return cube__err_validation("memory id %" PRIu64 " is not a free id of this "
                                            "session", id);
        }
        if (!(a = calloc(1, sizeof(*a)))) {
                srv->driver->release(srv->device, storage);
                return cube__err_generic("out of host memory binding a peer's memory");
        }
        a->id = id;
        a->size = size;
        a->server = srv;
        a->storage = storage;
        a->peer = p;
        a->peer_at = at;
        if (!name_new(s, id, a, false)) {
                srv->driver->release(srv->device, storage);
                free(a);
                return cube__err_generic("out of host memory binding a peer's memory");
        }
        s->n_peer_names++;
        return NULL;
}

void cube__alloc_taint(cube__alloc *a, uint64_t start, uint64_t end, uint64_t failure)
{
        if (a->storage)
                cube__claims_taint(&a->server->failures, &a->claims, start, end, failure);
}

static uint64_t token_key(const char *token);

/* Gives the storage back once no name and no work is left. */
static void alloc_release(cube__alloc *a)
{
        cube__server *srv = a->server;

        cube__claims_clear(&srv->failures, &a->claims);
        if (a->token[0])
                cube__idmap_remove(&srv->exports, token_key(a->token));
        if (a->peer) {
                srv->driver->release(srv->device, a->storage);
        } else if (a->storage) {
                charge(a, NULL);
                cube__pools_release(&(cube__carve) { .pools = a->memory, .page = a->page,
                                                     .storage = a->storage, .base = a->base,
                                                     .padding = a->padding }, a->size);
                a->page = NULL;
                a->storage = NULL;
                srv->memory_in_use -= a->size;
                srv->allocations--;
        }
        free(a);
}

void cube__name_free(cube__name *n)
{
        cube__alloc *a = n->alloc;
        cube__server *srv = a->server;

        cube__idmap_remove(&n->session->memory, n->id);
        if (a->peer)
                n->session->n_peer_names--;
        for (cube__name **p = &a->names; *p; p = &(*p)->next_holder)
                if (*p == n) {
                        *p = n->next_holder;
                        break;
                }
        a->holders--;
        if (a->charged == n->session) {
                /* The next holder keeps the bytes now, if any holds them: the
                 * same session, when it imported its own export. */
                charge(a, a->names ? a->names->session : NULL);
        }
        cube__claims_clear(&srv->failures, &n->local);
        free(n);
        if (a->holders == 0) {
                a->freed = true;
                if (a->pending == 0)
                        alloc_release(a);
        }
}

void cube__alloc_unref(cube__alloc *a)
{
        if (--a->pending == 0 && a->freed)
                alloc_release(a);
}

cube_error *cube__name_resolve(cube__session *s, const cube_handle *h, cube__name **ret_name,
                               uint64_t *ret_start, uint64_t *ret_end)
{
        cube__server *srv = s->server;
        cube__name *n;
        uint64_t size;

        if (h->service != srv->nonce) {
                char handle[64];
                snprintf(handle, sizeof(handle), "the service whose nonce is %016" PRIx64,
                         h->service);
                return cube__err_foreign_handle(handle, srv->service);
        }
        if (CUBE__MEMORY_SESSION(h->memory) != s->id)
                return cube__err_not_found("memory %" PRIu64 " belongs to session %" PRIu64 ", not "
                                           "to this one (%" PRIu64 "): a session reaches only its "
                                           "own memory, and memory shared with it by export and "
                                           "import", h->memory,
                                           (uint64_t) CUBE__MEMORY_SESSION(h->memory), s->id);
        n = cube__idmap_get(&s->memory, h->memory);
        if (!n)
                return cube__err_not_found("memory %" PRIu64 " was never created in this session,"
                                           " or was freed", h->memory);
        size = n->alloc->size;
        if (h->offset_start > size || h->offset_end > size - h->offset_start)
                return cube__err_validation(
                        "the handle's offsets (start %" PRIu64 ", end %" PRIu64 ") do not fit"
                        " memory %" PRIu64 " of %" PRIu64 " bytes",
                        h->offset_start, h->offset_end, h->memory, size);
        *ret_name = n;
        *ret_start = h->offset_start;
        *ret_end = size - h->offset_end;
        return NULL;
}

cube_error *cube__alloc_resolve(cube__session *s, const cube_handle *h, cube__alloc **ret_alloc,
                                uint64_t *ret_start, uint64_t *ret_end)
{
        cube__name *n;
        cube_error *e = cube__name_resolve(s, h, &n, ret_start, ret_end);

        if (!e)
                *ret_alloc = n->alloc;
        return e;
}

static int add_claims(cube__failures *fs, cube_error **several, const cube__claims *claims,
                      uint64_t start, uint64_t end, uint64_t memory)
{
        for (size_t k = 0; k < claims->n; k++) {
                const cube__claim *c = &claims->v[k];
                if (c->failure && c->start < end && start < c->end &&
                    cube__failures_add_report(fs, several, c->failure, memory) < 0)
                        return -ENOMEM;
        }
        return 0;
}

cube_error *cube__ensure_written(cube__session *s, const cube_handle *handles, size_t n)
{
        cube__server *srv = s->server;
        cube_error *several = NULL;

        for (size_t i = 0; i < n; i++) {
                cube__name *nm;
                uint64_t start, end;
                cube_error *e = cube__name_resolve(s, &handles[i], &nm, &start, &end);

                if (e) {
                        cube_error_free(several);
                        return e;
                }
                if (!nm->alloc->storage && start == end) {
                        start = 0;      /* the virtual byte of a failed reservation */
                        end = 1;
                }
                if (add_claims(&srv->failures, &several, &nm->alloc->claims, start, end,
                               nm->alloc->id) < 0 ||
                    add_claims(&srv->failures, &several, &nm->local, start, end, nm->id) < 0) {
                        cube_error_free(several);
                        return cube__err_generic("out of host memory reporting failures");
                }
        }
        return several;
}

static uint64_t token_key(const char *token)
{
        char prefix[17];

        memcpy(prefix, token, 16);
        prefix[16] = '\0';
        return strtoull(prefix, NULL, 16);
}

const char *cube__alloc_export(cube__name *n)
{
        cube__alloc *a = n->alloc;
        cube__server *srv = a->server;
        uint8_t bytes[16];

        if (a->token[0])
                return a->token;
        if (getrandom(bytes, sizeof(bytes), 0) != sizeof(bytes))
                return NULL;
        for (int i = 0; i < 16; i++)
                snprintf(a->token + 2 * i, 3, "%02x", bytes[i]);
        if (cube__idmap_get(&srv->exports, token_key(a->token)) ||
            cube__idmap_put(&srv->exports, token_key(a->token), a) < 0) {
                a->token[0] = '\0';
                return NULL;
        }
        return a->token;
}

cube_error *cube__alloc_import(cube__session *s, const char *token, uint64_t id, bool read_only,
                               cube__name **ret_name)
{
        cube__server *srv = s->server;
        cube__alloc *a;
        cube__name *n;

        if (strlen(token) != 32 || !(a = cube__idmap_get(&srv->exports, token_key(token))) ||
            strcmp(a->token, token) != 0 || a->freed)
                return cube__err_not_found("no exported memory has that token (it was never "
                                           "exported, or every holder has freed it)");
        if (CUBE__MEMORY_SESSION(id) != s->id || cube__idmap_get(&s->memory, id))
                return cube__err_validation("memory id %" PRIu64 " is not a free id of this "
                                            "session", id);
        n = name_new(s, id, a, read_only);
        if (!n)
                return cube__err_generic("out of host memory importing memory");
        *ret_name = n;
        return NULL;
}

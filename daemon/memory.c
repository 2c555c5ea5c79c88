/*
 * memory.c - a session's allocations and streams, over the driver.
 *
 * Memory ids are minted by the client, so creating memory is a notification
 * with no answer: a reservation that fails is kept on the allocation as a
 * failure claiming all of it, and the next read, sync or check reports it,
 * as the reference's initialize_memory does.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "cubed.h"

#define CUBED_STREAMS_MAX 1024

cube__stream *cube__stream_get(cube__session *s, uint64_t id, cube_error **ret_error)
{
        cube__server *srv = s->server;
        cube__stream *st = cube__idmap_get(&s->streams, id);
        cube_error *e;

        if (st)
                return st;
        if (s->streams.len >= CUBED_STREAMS_MAX) {
                *ret_error = cube__err_validation(
                        "a session may use at most %d streams; stream %" PRIu64
                        " would be one more", CUBED_STREAMS_MAX, id);
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

int cube__alloc_create(cube__session *s, uint64_t id, uint64_t size)
{
        cube__server *srv = s->server;
        cube__alloc *a;
        cube_error *e;

        a = calloc(1, sizeof(*a));
        if (!a)
                return -ENOMEM;
        a->id = id;
        a->size = size;
        a->session = s;
        if (cube__idmap_put(&s->memory, id, a) < 0) {
                free(a);
                return -ENOMEM;
        }

        if (srv->poison)
                e = cube__err_wrap(CUBE_SERVER_IO, cube__err_wrap(CUBE_IO_DEVICE_POISONED,
                                                                  cube_error_clone(srv->poison)));
        else if (!(e = cube__inject_take(srv, CUBE_FAULT_ALLOC)))
                e = srv->driver->alloc(srv->device, size, &a->storage);
        if (e) {
                uint64_t failure;

                cube__log(CUBE__LOG_INFO, "session %" PRIu64 ": memory %" PRIu64 " of %" PRIu64
                          " bytes could not be reserved: %s", s->id, id, size,
                          cube_error_message(e));
                s->errors++;
                a->storage = NULL;
                failure = cube__failures_insert(&srv->failures, e, s->id);
                /* An empty allocation has no bytes to claim; mark its one
                 * virtual byte so a read still reports the failure. */
                if (cube__claims_taint(&srv->failures, &a->claims, 0, size ? size : 1, failure) < 0)
                        return -ENOMEM;
                cube__failures_prune(&srv->failures, failure);
                return 0;
        }
        s->memory_in_use += size;
        if (s->memory_in_use > s->memory_peak)
                s->memory_peak = s->memory_in_use;
        srv->memory_in_use += size;
        if (srv->memory_in_use > srv->memory_peak)
                srv->memory_peak = srv->memory_in_use;
        srv->allocations++;
        return 0;
}

/* Gives the storage back once the allocation is freed and idle. */
static void alloc_release(cube__alloc *a)
{
        cube__session *s = a->session;
        cube__server *srv = s->server;

        cube__claims_clear(&srv->failures, &a->claims);
        if (a->storage) {
                srv->driver->release(srv->device, a->storage);
                s->memory_in_use -= a->size;
                srv->memory_in_use -= a->size;
                srv->allocations--;
        }
        free(a);
}

void cube__alloc_free(cube__alloc *a)
{
        cube__idmap_remove(&a->session->memory, a->id);
        a->freed = true;
        if (a->pending == 0)
                alloc_release(a);
}

void cube__alloc_unref(cube__alloc *a)
{
        if (--a->pending == 0 && a->freed)
                alloc_release(a);
}

cube_error *cube__alloc_resolve(cube__session *s, const cube_handle *h, cube__alloc **ret_alloc,
                                uint64_t *ret_start, uint64_t *ret_end)
{
        cube__server *srv = s->server;
        cube__alloc *a;

        if (h->service != srv->nonce) {
                char handle[64];
                snprintf(handle, sizeof(handle), "the service whose nonce is %016" PRIx64,
                         h->service);
                return cube__err_foreign_handle(handle, srv->service);
        }
        if (CUBE__MEMORY_SESSION(h->memory) != s->id)
                return cube__err_not_found("memory %" PRIu64 " belongs to session %" PRIu64 ", not "
                                           "to this one (%" PRIu64 "): a session reaches only its "
                                           "own memory", h->memory,
                                           (uint64_t) CUBE__MEMORY_SESSION(h->memory), s->id);
        a = cube__idmap_get(&s->memory, h->memory);
        if (!a)
                return cube__err_not_found("memory %" PRIu64 " was never created in this session,"
                                           " or was freed", h->memory);
        if (h->offset_start > a->size || h->offset_end > a->size - h->offset_start)
                return cube__err_validation(
                        "the handle's offsets (start %" PRIu64 ", end %" PRIu64 ") do not fit"
                        " memory %" PRIu64 " of %" PRIu64 " bytes",
                        h->offset_start, h->offset_end, h->memory, a->size);
        *ret_alloc = a;
        *ret_start = h->offset_start;
        *ret_end = a->size - h->offset_end;
        return NULL;
}

/* Adds the failure to the group unless it is there already. */
static int add_failure(cube__failures *fs, cube_error **several, uint64_t failure,
                       uint64_t memory)
{
        for (size_t i = 0; *several && i < cube_error_count(*several); i++)
                if (cube_error_failure(cube_error_at(*several, i)) == failure)
                        return 0;
        if (!*several && !(*several = cube__err_several()))
                return -ENOMEM;
        return cube__err_several_add(*several, cube__failures_report(fs, failure, memory));
}

cube_error *cube__ensure_written(cube__session *s, const cube_handle *handles, size_t n)
{
        cube__server *srv = s->server;
        cube_error *several = NULL;

        for (size_t i = 0; i < n; i++) {
                cube__alloc *a;
                uint64_t start, end;
                cube_error *e = cube__alloc_resolve(s, &handles[i], &a, &start, &end);

                if (e) {
                        cube_error_free(several);
                        return e;
                }
                if (!a->storage && start == end) {
                        start = 0;      /* the virtual byte of a failed reservation */
                        end = 1;
                }
                for (size_t k = 0; k < a->claims.n; k++) {
                        const cube__claim *c = &a->claims.v[k];
                        if (c->start < end && start < c->end &&
                            add_failure(&srv->failures, &several, c->failure, a->id) < 0) {
                                cube_error_free(several);
                                return cube__err_generic("out of host memory reporting failures");
                        }
                }
        }
        return several;
}

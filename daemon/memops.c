/*
 * memops.c - the memory methods: create, write, free, read, sync, check,
 * flush and memory_cleanup.
 *
 * create, write and free are notifications: whatever goes wrong with them
 * lands on the memory they were to write, and the next read, sync or check of
 * it reports the failure. Once the device is poisoned, every one of them
 * reports that instead.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "dispatch.h"

/* Payloads at least this large are kept in the read buffer they arrived in
 * rather than copied. */
#define KEEP_BUFFER_MIN (256 * 1024)

cube__dispatched cube__do_create(cube__msg *k)
{
        uint64_t stream, memory, size;

        if (k->n != 3 || !cube__obj_u64(&k->p[0], &stream) || !cube__obj_u64(&k->p[1], &memory) ||
            !cube__obj_u64(&k->p[2], &size)) {
                cube__malformed(k, "params must be [stream, memory, size]");
                return CUBE__DISPATCH_DONE;
        }
        if (CUBE__MEMORY_SESSION(memory) != k->session->id ||
            (memory & ((1ull << CUBE__MEMORY_SESSION_SHIFT) - 1)) == 0) {
                cube__conn_protocol_error(k->conn, -1, "create: memory id %" PRIu64 " is not one "
                                          "of this session's: ids are (session << 40) | n with "
                                          "n > 0, and this session is %" PRIu64, memory,
                                          k->session->id);
                return CUBE__DISPATCH_DONE;
        }
        if (cube__idmap_get(&k->session->memory, memory)) {
                cube__conn_protocol_error(k->conn, -1, "create: memory id %" PRIu64
                                          " is already in use in this session", memory);
                return CUBE__DISPATCH_DONE;
        }
        if (cube__alloc_create(k->session, memory, size, stream) < 0)
                cube__conn_protocol_error(k->conn, -1, "create: out of host memory");
        return CUBE__DISPATCH_DONE;
}

void cube__fail_range(cube__session *s, cube__name *n, uint64_t start, uint64_t end,
                      cube_error *e)
{
        cube__server *srv = s->server;
        uint64_t failure;

        cube__log_session(CUBE__LOG_INFO, s, 0, "session %" PRIu64 ": a write to memory %" PRIu64
                          " failed: %s", s->id, n->id, e ? cube_error_message(e) : "out of memory");
        s->errors++;
        failure = cube__failures_insert(&srv->failures, e, s->id);
        if (failure)
                cube__log_session(CUBE__LOG_INFO, s, failure, "failure #%" PRIu64 " claims bytes "
                                  "[%" PRIu64 ", %" PRIu64 ") of memory %" PRIu64, failure, start,
                                  end, n->id);
        /* A read-only name's refused write is its own: the memory it shares
         * was not touched, and no other holder may see a failure. */
        cube__claims_taint(&srv->failures, n->read_only ? &n->local : &n->alloc->claims, start,
                           end, failure);
        cube__failures_prune(&srv->failures, failure);
}

cube__dispatched cube__do_write(cube__msg *k)
{
        cube__session *s = k->session;
        uint64_t stream, start, end;
        cube_handle h;
        const void *data;
        size_t len;
        cube__name *n;
        cube__alloc *a;
        cube__stream *st;
        cube_error *e;
        void *owned;
        bool keep;

        if (k->n != 3 || !cube__obj_u64(&k->p[0], &stream) || !cube__obj_handle(&k->p[1], &h) ||
            !cube__obj_bin(&k->p[2], &data, &len))
                {
                cube__malformed(k, "params must be [stream, handle, bin]");
                return CUBE__DISPATCH_DONE;
        }

        e = cube__name_resolve(s, &h, &n, &start, &end);
        if (e) {
                cube__name *named = h.service == k->server->nonce ?
                                    cube__idmap_get(&s->memory, h.memory) : NULL;
                if (named) {
                        /* The handle names our memory with offsets that do
                         * not fit it: the whole allocation is suspect. */
                        cube__fail_range(s, named, 0, named->alloc->size, e);
                } else {
                        cube__log(CUBE__LOG_INFO, "session %" PRIu64 ": a write was dropped: %s",
                                  s->id, cube_error_message(e));
                        s->errors++;
                        cube_error_free(e);
                }
                return CUBE__DISPATCH_DONE;
        }
        a = n->alloc;
        if (k->server->poison) {
                cube__fail_range(s, n, start, end, cube__poisoned(k->server));
                return CUBE__DISPATCH_DONE;
        }
        if (n->read_only) {
                cube__fail_range(s, n, start, end, cube__err_validation(
                        "memory %" PRIu64 " is a read-only import: it may not be written",
                        n->id));
                return CUBE__DISPATCH_DONE;
        }
        if (len != end - start) {
                cube__fail_range(s, n, start, end, cube__err_validation(
                        "a write of %zu bytes was sent for a handle of %" PRIu64 " bytes", len,
                        end - start));
                return CUBE__DISPATCH_DONE;
        }
        if (!a->storage || len == 0)
                return CUBE__DISPATCH_DONE;   /* a failed reservation keeps its claim */
        st = cube__stream_get(s, stream, &e);
        if (!st) {
                cube__fail_range(s, n, start, end, e);
                return CUBE__DISPATCH_DONE;
        }

        keep = len >= KEEP_BUFFER_MIN;
        if (keep) {
                owned = k->buf;
        } else {
                owned = malloc(len);
                if (!owned) {
                        cube__fail_range(s, n, start, end, cube__err_generic(
                                "out of host memory staging a write of %zu bytes", len));
                        return CUBE__DISPATCH_DONE;
                }
                memcpy(owned, data, len);
                data = owned;
        }
        cube__claims_written(&k->server->failures, &a->claims, start, end);
        cube__submit(s, st, a, CUBE__WORK_COPY_TO_DEVICE, start, (void *) data, len, owned, NULL);
        return keep ? CUBE__DISPATCH_KEPT : CUBE__DISPATCH_DONE;
}

cube__dispatched cube__do_free(cube__msg *k)
{
        uint64_t stream, memory;
        cube__name *n;

        if (k->n != 2 || !cube__obj_u64(&k->p[0], &stream) || !cube__obj_u64(&k->p[1], &memory)) {
                cube__malformed(k, "params must be [stream, memory]");
                return CUBE__DISPATCH_DONE;
        }
        n = cube__idmap_get(&k->session->memory, memory);
        if (!n) {
                cube__log(CUBE__LOG_INFO, "session %" PRIu64 ": free of unknown memory %" PRIu64,
                          k->session->id, memory);
                k->session->errors++;
                return CUBE__DISPATCH_DONE;
        }
        cube__name_free(n);
        return CUBE__DISPATCH_DONE;
}

/* Packs a bin header; returns its length. */
static size_t bin_header(uint8_t *p, uint64_t len)
{
        if (len <= 0xff) {
                p[0] = 0xc4;
                p[1] = (uint8_t) len;
                return 2;
        }
        if (len <= 0xffff) {
                p[0] = 0xc5;
                p[1] = (uint8_t) (len >> 8);
                p[2] = (uint8_t) len;
                return 3;
        }
        p[0] = 0xc6;
        for (int i = 0; i < 4; i++)
                p[1 + i] = (uint8_t) (len >> (24 - 8 * i));
        return 5;
}

cube__dispatched cube__do_read(cube__msg *k)
{
        cube__session *s = k->session;
        uint64_t stream, total = 16;
        cube_handle *hs;
        size_t n;
        cube__stream *st;
        cube_error *e;
        cube__pending_reply *r;
        msgpack_sbuffer sb;
        msgpack_packer pk;

        if (!cube__get_stream_handles(k, &stream, &hs, &n))
                return CUBE__DISPATCH_DONE;
        e = k->server->poison ? cube__poisoned(k->server) : cube__ensure_written(s, hs, n);
        if (e) {
                cube__reply_owned_error(k, e);
                free(hs);
                return CUBE__DISPATCH_DONE;
        }
        for (size_t i = 0; i < n; i++) {
                cube__alloc *a;
                uint64_t start, end;
                cube__alloc_resolve(s, &hs[i], &a, &start, &end);   /* checked above */
                total += end - start + 5;
        }
        if (total > k->server->opts.limits.max_message_bytes) {
                cube__reply_owned_error(k, cube__err_validation(
                        "a read of %" PRIu64 " bytes does not fit one reply of at most %" PRIu64
                        " bytes; read fewer handles at a time", total,
                        k->server->opts.limits.max_message_bytes));
                free(hs);
                return CUBE__DISPATCH_DONE;
        }
        st = cube__stream_get(s, stream, &e);
        r = st ? cube__pending_new(s, k->env->msgid) : NULL;
        if (!r) {
                cube__reply_owned_error(k, st ? NULL : e);
                free(hs);
                return CUBE__DISPATCH_DONE;
        }

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (cube__pack_response_ok(&pk, k->env->msgid) < 0 || msgpack_pack_array(&pk, (uint32_t) n) < 0 ||
            !(r->frame = malloc(total))) {
                r->error = cube__err_generic("out of host memory preparing a read of %" PRIu64
                                             " bytes", total);
        } else {
                uint8_t *p = (uint8_t *) r->frame;
                size_t off = sb.size;
                memcpy(p, sb.data, sb.size);
                for (size_t i = 0; i < n; i++) {
                        cube__alloc *a;
                        uint64_t start, end;
                        cube__alloc_resolve(s, &hs[i], &a, &start, &end);
                        off += bin_header(p + off, end - start);
                        if (end > start)
                                cube__submit(s, st, a, CUBE__WORK_COPY_TO_HOST, start, p + off,
                                             end - start, NULL, r);
                        off += end - start;
                }
                r->frame_len = off;
        }
        msgpack_sbuffer_destroy(&sb);
        free(hs);
        cube__pending_arm(r);
        return CUBE__DISPATCH_DONE;
}

cube__dispatched cube__do_sync(cube__msg *k)
{
        cube__session *s = k->session;
        uint64_t stream;
        cube_handle *hs;
        size_t n;
        cube__stream *st;
        cube_error *e;
        cube__pending_reply *r;

        if (!cube__get_stream_handles(k, &stream, &hs, &n))
                return CUBE__DISPATCH_DONE;
        if (k->server->poison) {
                cube__reply_owned_error(k, cube__poisoned(k->server));
                free(hs);
                return CUBE__DISPATCH_DONE;
        }
        st = cube__stream_get(s, stream, &e);
        r = st ? cube__pending_new(s, k->env->msgid) : NULL;
        if (!r) {
                cube__reply_owned_error(k, st ? NULL : e);
                free(hs);
                return CUBE__DISPATCH_DONE;
        }
        r->handles = hs;
        r->n_handles = n;
        /* The barrier also waits for work of other streams on the named
         * buffers, as a read of them would. */
        cube__op *o = cube__op_new(s, st, CUBE__WORK_FENCE, n);
        if (!o) {
                r->error = cube__err_generic("out of host memory queueing a sync");
        } else {
                o->reply = r;
                for (size_t i = 0; i < n; i++) {
                        cube__alloc *a;
                        uint64_t start, end;
                        cube_error *bad = cube__alloc_resolve(s, &hs[i], &a, &start, &end);
                        if (bad)
                                cube_error_free(bad);   /* reported by the claim check */
                        else
                                cube__op_use(o, a, false);
                }
                cube__op_enqueue(o);
        }
        cube__pending_arm(r);
        return CUBE__DISPATCH_DONE;
}

cube__dispatched cube__do_check(cube__msg *k)
{
        uint64_t stream;
        cube_handle *hs;
        size_t n;
        cube_error *e;

        if (!cube__get_stream_handles(k, &stream, &hs, &n))
                return CUBE__DISPATCH_DONE;
        e = k->server->poison ? cube__poisoned(k->server) : cube__ensure_written(k->session, hs, n);
        free(hs);
        if (e)
                cube__reply_owned_error(k, e);
        else
                cube__reply_ok_nil(k);
        return CUBE__DISPATCH_DONE;
}

/* flush: [stream]. The cpu backend queues nothing on the host side that a
 * flush would push, so a device fault is all it can report. */
cube__dispatched cube__do_flush(cube__msg *k)
{
        uint64_t stream;

        if (k->n != 1 || !cube__obj_u64(&k->p[0], &stream)) {
                cube__malformed(k, "params must be [stream]");
                return CUBE__DISPATCH_DONE;
        }
        if (k->server->poison)
                cube__reply_owned_error(k, cube__poisoned(k->server));
        else
                cube__reply_ok_nil(k);
        return CUBE__DISPATCH_DONE;
}

/* memory_cleanup: [stream]. Gives back every page of the stream's pools that
 * holds no live allocation. */
cube__dispatched cube__do_memory_cleanup(cube__msg *k)
{
        uint64_t stream;
        cube__stream *st;

        if (k->n != 1 || !cube__obj_u64(&k->p[0], &stream)) {
                cube__malformed(k, "params must be [stream]");
                return CUBE__DISPATCH_DONE;
        }
        if (k->server->poison) {
                cube__reply_owned_error(k, cube__poisoned(k->server));
                return CUBE__DISPATCH_DONE;
        }
        st = cube__idmap_get(&k->session->streams, stream);
        if (st && st->memory)
                cube__memory_cleanup(st->memory);
        cube__reply_ok_nil(k);
        return CUBE__DISPATCH_DONE;
}

/* memory_report: [stream]. nil for a stream that was never created. */
cube__dispatched cube__do_memory_report(cube__msg *k)
{
        uint64_t stream;
        cube__stream *st;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        int r = 0;

        if (k->n != 1 || !cube__obj_u64(&k->p[0], &stream)) {
                cube__malformed(k, "params must be [stream]");
                return CUBE__DISPATCH_DONE;
        }
        st = cube__idmap_get(&k->session->streams, stream);
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        r |= cube__pack_response_ok(&pk, k->env->msgid);
        if (st && st->memory)
                r |= cube__memory_pack(st->memory, stream, &pk);
        else if (st) {
                /* Created, and nothing allocated on it yet: empty pools. */
                cube__memory *m = cube__memory_new(k->server);
                r |= m ? cube__memory_pack(m, stream, &pk) : -1;
                cube__memory_close(m);
        } else
                r |= msgpack_pack_nil(&pk);
        if (r == 0)
                cube__reply_sbuffer(k->session, &sb);
        else
                cube__reply_owned_error(k, NULL);
        msgpack_sbuffer_destroy(&sb);
        return CUBE__DISPATCH_DONE;
}

static void pack_id(uint64_t key, void *value, void *ctx)
{
        msgpack_pack_uint64(ctx, key);
}

/* stream_ids: []. The streams this session has created. */
cube__dispatched cube__do_stream_ids(cube__msg *k)
{
        msgpack_sbuffer sb;
        msgpack_packer pk;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (cube__pack_response_ok(&pk, k->env->msgid) == 0 &&
            msgpack_pack_array(&pk, (uint32_t) k->session->streams.len) == 0) {
                cube__idmap_foreach(&k->session->streams, pack_id, &pk);
                cube__reply_sbuffer(k->session, &sb);
        }
        msgpack_sbuffer_destroy(&sb);
        return CUBE__DISPATCH_DONE;
}

/* allocation_mode: [stream, mode], a notification. Persistent (1) and
 * Dedicated (2) push a mode, Auto (0) pops one. */
cube__dispatched cube__do_allocation_mode(cube__msg *k)
{
        uint64_t stream;
        uint32_t mode;
        cube__stream *st;
        cube_error *e = NULL;

        if (k->n != 2 || !cube__obj_u64(&k->p[0], &stream) || !cube__obj_u32(&k->p[1], &mode) ||
            mode > CUBE__MODE_DEDICATED) {
                cube__malformed(k, "params must be [stream, mode] with mode 0, 1 or 2");
                return CUBE__DISPATCH_DONE;
        }
        st = cube__stream_get(k->session, stream, &e);
        if (st && !st->memory)
                st->memory = cube__memory_new(k->server);
        if (st && st->memory)
                cube__memory_mode(st->memory, (int) mode);
        else
                cube__log_session(CUBE__LOG_INFO, k->session, 0, "allocation_mode dropped: %s",
                                  e ? cube_error_message(e) : "out of host memory");
        cube_error_free(e);
        return CUBE__DISPATCH_DONE;
}

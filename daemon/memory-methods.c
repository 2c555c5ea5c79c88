/*
 * memory-methods.c - the memory methods: create, create_tensors, write, free,
 * read, sync, check, flush and memory_cleanup.
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

#include "cubed.h"
#include "layout.h"

/* Payloads at least this large are kept in the read buffer they arrived in
 * rather than copied. */
#define KEEP_BUFFER_MIN (256 * 1024)

bool cube__read_stream_handles(cube__msg *k, uint64_t *ret_stream, cube_handle **ret_handles,
                               size_t *ret_n)
{
        const msgpack_object_array *arr;
        cube_handle *hs;

        if (k->n != 2 || !cube__obj_u64(&k->p[0], ret_stream) || !cube__obj_array(&k->p[1], &arr))
                return cube__reply_malformed(k, "params must be [stream, [handle, ...]]");
        hs = calloc(arr->size ? arr->size : 1, sizeof(*hs));
        if (!hs)
                return cube__reply_malformed(k, "out of host memory");
        for (uint32_t i = 0; i < arr->size; i++)
                if (!cube__obj_handle(&arr->ptr[i], &hs[i])) {
                        free(hs);
                        return cube__reply_malformed(k, "a handle must be [service, memory, offset_start, "
                                         "offset_end] of unsigned integers");
                }
        *ret_handles = hs;
        *ret_n = arr->size;
        return true;
}

/* Whether memory may name a new allocation of the session; a protocol
 * error otherwise. */
static bool new_memory_id(cube__msg *k, const char *method, uint64_t memory)
{
        if (CUBE__MEMORY_SESSION(memory) != k->session->id ||
            (memory & ((1ull << CUBE__MEMORY_SESSION_SHIFT) - 1)) == 0) {
                k->server->up->protocol_error(k->conn, -1, "%s: memory id %" PRIu64 " is not one "
                                          "of this session's: ids are (session << 40) | n with "
                                          "n > 0, and this session is %" PRIu64, method, memory,
                                          k->session->id);
                return false;
        }
        if (cube__idmap_get(&k->session->memory, memory)) {
                k->server->up->protocol_error(k->conn, -1, "%s: memory id %" PRIu64
                                          " is already in use in this session", method, memory);
                return false;
        }
        return true;
}

cube__dispatched cube__do_create(cube__msg *k)
{
        uint64_t stream, memory, size;

        if (k->n != 3 || !cube__obj_u64(&k->p[0], &stream) || !cube__obj_u64(&k->p[1], &memory) ||
            !cube__obj_u64(&k->p[2], &size)) {
                cube__reply_malformed(k, "params must be [stream, memory, size]");
                return CUBE__DISPATCH_DONE;
        }
        if (!new_memory_id(k, "create", memory))
                return CUBE__DISPATCH_DONE;
        if (cube__alloc_create(k->session, memory, size, stream, NULL) < 0)
                k->server->up->protocol_error(k->conn, -1, "create: out of host memory");
        return CUBE__DISPATCH_DONE;
}

/* Reads [strategy, [dim, ...], elem_size]. A rank the descriptor cannot hold
 * is left for the policy to refuse (rank 0 stands for it). */
static bool read_descriptor(const msgpack_object *o, cube_layout_descriptor *ret)
{
        const msgpack_object_array *d, *shape;
        uint64_t strategy;

        if (!cube__obj_array(o, &d) || d->size != 3 || !cube__obj_u64(&d->ptr[0], &strategy) ||
            !cube__obj_array(&d->ptr[1], &shape) || !cube__obj_u64(&d->ptr[2], &ret->elem_size))
                return false;
        ret->strategy = strategy > 1 ? (cube_layout_strategy) 2 : (cube_layout_strategy) strategy;
        ret->rank = shape->size <= CUBE_MAX_RANK ? shape->size : 0;
        for (uint32_t i = 0; i < shape->size; i++) {
                uint64_t dim;
                if (!cube__obj_u64(&shape->ptr[i], &dim))
                        return false;
                if (i < CUBE_MAX_RANK)
                        ret->shape[i] = dim;
        }
        return true;
}

/* create_tensors: [stream, memory, [[strategy, shape, elem_size], ...]], a
 * notification. The batch's tensors share allocation memory, sized by the
 * layout policy the client applied too (proto/layout.c); a batch the policy
 * refuses is a memory that reserved nothing, claimed by Validation. */
cube__dispatched cube__do_create_tensors(cube__msg *k)
{
        const msgpack_object_array *arr;
        cube_layout_descriptor *descs;
        uint64_t stream, memory, size = 0;
        cube_error *refused = NULL;
        char why[160];

        if (k->n != 3 || !cube__obj_u64(&k->p[0], &stream) || !cube__obj_u64(&k->p[1], &memory) ||
            !cube__obj_array(&k->p[2], &arr)) {
                cube__reply_malformed(k, "params must be [stream, memory, [[strategy, shape, "
                                      "elem_size], ...]]");
                return CUBE__DISPATCH_DONE;
        }
        if (!(descs = calloc(arr->size ? arr->size : 1, sizeof(*descs)))) {
                k->server->up->protocol_error(k->conn, -1, "create_tensors: out of host memory");
                return CUBE__DISPATCH_DONE;
        }
        for (uint32_t i = 0; i < arr->size; i++)
                if (!read_descriptor(&arr->ptr[i], &descs[i])) {
                        free(descs);
                        cube__reply_malformed(k, "a tensor descriptor must be [strategy, [dim, "
                                              "...], elem_size] of unsigned integers");
                        return CUBE__DISPATCH_DONE;
                }
        if (!new_memory_id(k, "create_tensors", memory)) {
                free(descs);
                return CUBE__DISPATCH_DONE;
        }
        if (cube__layout_apply(k->server->properties.alignment, descs, arr->size, NULL, &size,
                               why, sizeof(why)) < 0) {
                refused = cube__err_validation("%s", why);
                size = 0;
        }
        free(descs);
        if (cube__alloc_create(k->session, memory, size, stream, refused) < 0)
                k->server->up->protocol_error(k->conn, -1, "create_tensors: out of host memory");
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
        failure = cube__failures_insert(&srv->failures, e, s->id, s->uid);
        if (failure)
                cube__log_session(CUBE__LOG_INFO, s, failure, "failure #%" PRIu64 " claims bytes "
                                  "[%" PRIu64 ", %" PRIu64 ") of memory %" PRIu64, failure, start,
                                  end, n->id);
        /* A read-only name's refused write is its own: the memory it shares
         * was not touched, and no other holder may see a failure. */
        if (n->read_only)
                cube__claims_taint(&srv->failures, &n->local, start, end, failure);
        else
                cube__alloc_taint(n->alloc, start, end, failure);
        cube__failures_prune(&srv->failures, failure);
}

/* A write refused when it is handled, after its stream is known: the
 * failure claims the range and invalidates the stream's open profiling
 * windows, which held the write as much as any launch. */
static void refuse_write(cube__session *s, uint64_t stream, cube__name *n, uint64_t start,
                         uint64_t end, cube_error *e)
{
        cube__stream_failed(s, stream, e);
        cube__fail_range(s, n, start, end, e);
}

/* The layout of a pitched row-major copy of a shape with strides (both in
 * elements): rows of the last dimension, pitch apart. Anything else is
 * IoError::UnsupportedStrides; a layout that reaches past the handle's range
 * is a Validation error. */
static cube_error *strided_layout(const msgpack_object_array *shape,
                                  const msgpack_object_array *strides, uint64_t elem,
                                  uint64_t range, cube__copy *ret)
{
        uint64_t dims[16], steps[16], rows = 1, n = shape->size;

        if (n == 0 || n > 16 || strides->size != n || elem == 0)
                return cube__err_validation("a copy descriptor needs 1 to 16 dimensions, as many "
                                            "strides, and an element size");
        for (uint64_t i = 0; i < n; i++)
                if (!cube__obj_u64(&shape->ptr[i], &dims[i]) ||
                    !cube__obj_u64(&strides->ptr[i], &steps[i]) || dims[i] > UINT32_MAX ||
                    steps[i] > UINT32_MAX)
                        return cube__err_validation("shape and strides must be unsigned integers "
                                                    "below 2^32");
        if (steps[n - 1] != 1 || (n > 1 && steps[n - 2] < dims[n - 1]))
                return cube__err_wrap(CUBE_SERVER_IO, cube__err_new(CUBE_IO_UNSUPPORTED_STRIDES));
        for (uint64_t i = n - 2; n > 2 && i-- > 0;)
                if (steps[i] != steps[i + 1] * dims[i + 1])
                        return cube__err_wrap(CUBE_SERVER_IO,
                                              cube__err_new(CUBE_IO_UNSUPPORTED_STRIDES));
        for (uint64_t i = 0; i + 1 < n; i++)
                rows *= dims[i];
        ret->rows = rows;
        ret->width = dims[n - 1] * elem;
        ret->pitch = (n > 1 ? steps[n - 2] : dims[n - 1]) * elem;
        if (rows && (rows - 1) * ret->pitch + ret->width > range)
                return cube__err_validation("a copy of %" PRIu64 " rows of %" PRIu64 " bytes, %"
                                            PRIu64 " apart, does not fit the handle's %" PRIu64
                                            " bytes", rows, ret->width, ret->pitch, range);
        return NULL;
}

/* A copy's device side: a handle, or [handle, shape, strides, elem_size].
 * Sets *ret_name whenever the handle resolved, even if the layout did not. */
static cube_error *copy_target(cube__session *s, const msgpack_object *o, cube__name **ret_name,
                               uint64_t *ret_start, cube__copy *ret_copy, bool *ret_malformed)
{
        const msgpack_object_array *a, *shape, *strides;
        const msgpack_object *ho = o;
        uint64_t elem = 0, start, end;
        cube_handle h;
        cube_error *e;
        bool descriptor = o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size == 4 &&
                          o->via.array.ptr[0].type == MSGPACK_OBJECT_ARRAY;

        *ret_name = NULL;
        *ret_malformed = false;
        if (descriptor) {
                a = &o->via.array;
                ho = &a->ptr[0];
                if (!cube__obj_array(&a->ptr[1], &shape) || !cube__obj_array(&a->ptr[2], &strides) ||
                    !cube__obj_u64(&a->ptr[3], &elem)) {
                        *ret_malformed = true;
                        return NULL;
                }
        }
        if (!cube__obj_handle(ho, &h)) {
                *ret_malformed = true;
                return NULL;
        }
        if ((e = cube__name_resolve(s, &h, ret_name, &start, &end)))
                return e;
        *ret_start = start;
        *ret_copy = (cube__copy) { 1, end - start, end - start };
        return descriptor ? strided_layout(shape, strides, elem, end - start, ret_copy) : NULL;
}

cube__dispatched cube__do_write(cube__msg *k)
{
        cube__session *s = k->session;
        uint64_t stream, start = 0, offset, len;
        const void *data;
        size_t bin_len;
        cube__name *n;
        cube__alloc *a;
        cube__stream *st;
        cube__region *region = NULL;
        cube__copy copy;
        cube_error *e;
        void *owned = NULL;
        bool bad, keep = false;

        if (k->n != 3 || !cube__obj_u64(&k->p[0], &stream)) {
                cube__reply_malformed(k, "params must be [stream, handle or descriptor, bin or region]");
                return CUBE__DISPATCH_DONE;
        }
        e = copy_target(s, &k->p[1], &n, &start, &copy, &bad);
        if (bad) {
                cube__reply_malformed(k, "the target must be a handle [service, memory, offset_start, "
                                "offset_end] or a descriptor [handle, shape, strides, elem_size]");
                return CUBE__DISPATCH_DONE;
        }
        if (e) {
                cube_handle h = {0};
                const msgpack_object *ho = k->p[1].via.array.size == 4 &&
                        k->p[1].via.array.ptr[0].type == MSGPACK_OBJECT_ARRAY ?
                        &k->p[1].via.array.ptr[0] : &k->p[1];
                bool parsed = cube__obj_handle(ho, &h);

                if (n && parsed && cube_error_kind_of(e) == CUBE_SERVER_IO) {
                        /* A layout the daemon does not copy: the handle's
                         * range is what the write meant, and all it claims. */
                        refuse_write(s, stream, n, start, n->alloc->size - h.offset_end, e);
                } else if (n) {
                        /* A layout that does not fit the handle: which bytes
                         * it meant is unknown, so all of them are suspect. */
                        refuse_write(s, stream, n, 0, n->alloc->size, e);
                } else {
                        cube__name *named = NULL;
                        if (parsed && h.service == k->server->nonce)
                                named = cube__idmap_get(&s->memory, h.memory);
                        if (named) {
                                refuse_write(s, stream, named, 0, named->alloc->size, e);
                        } else {
                                cube__log(CUBE__LOG_INFO, "session %" PRIu64 ": a write was "
                                          "dropped: %s", s->id, cube_error_message(e));
                                s->errors++;
                                cube_error_free(e);
                        }
                }
                return CUBE__DISPATCH_DONE;
        }
        uint64_t extent = copy.rows ? (copy.rows - 1) * copy.pitch + copy.width : 0;
        uint64_t end = start + extent;

        if (cube__obj_bin(&k->p[2], &data, &bin_len)) {
                len = bin_len;
        } else if ((e = cube__region_range(s, &k->p[2], true, &region, &offset, &len))) {
                refuse_write(s, stream, n, start, end, e);
                return CUBE__DISPATCH_DONE;
        } else {
                data = (const char *) region->map + offset;
        }
        a = n->alloc;
        if (k->server->poison) {
                refuse_write(s, stream, n, start, end, cube__poisoned(k->server));
                return CUBE__DISPATCH_DONE;
        }
        if (n->read_only) {
                refuse_write(s, stream, n, start, end, cube__err_validation(
                        "memory %" PRIu64 " is a read-only import: it may not be written",
                        n->id));
                return CUBE__DISPATCH_DONE;
        }
        if (len != copy.rows * copy.width) {
                refuse_write(s, stream, n, start, end, cube__err_validation(
                        "a write of %" PRIu64 " bytes was sent for a handle of %" PRIu64 " bytes",
                        len, copy.rows * copy.width));
                return CUBE__DISPATCH_DONE;
        }
        if (!a->storage || len == 0)
                return CUBE__DISPATCH_DONE;   /* a failed reservation keeps its claim */
        st = cube__stream_get(s, stream, &e);
        if (!st) {
                refuse_write(s, stream, n, start, end, e);
                return CUBE__DISPATCH_DONE;
        }
        if (cube__capturing(st)) {
                /* A capture records launches only: a write from the host
                 * would run now, out of order with the launches the graph
                 * holds. It still runs; the capture cannot be trusted. */
                e = cube__graph_state("write: stream %" PRIu64 " is recording a graph capture, "
                                      "which records launches only; write before begin_capture, "
                                      "or on another stream", stream);
                cube__capture_doom(st, e);
                cube_error_free(e);
        }

        if (!region) {
                keep = len >= KEEP_BUFFER_MIN;
                if (keep) {
                        owned = k->buf;
                } else {
                        owned = malloc(len);
                        if (!owned) {
                                refuse_write(s, stream, n, start, end, cube__err_generic(
                                        "out of host memory staging a write of %" PRIu64 " bytes",
                                        len));
                                return CUBE__DISPATCH_DONE;
                        }
                        memcpy(owned, data, len);
                        data = owned;
                }
        }
        cube__submit_copy(s, st, a, CUBE__WORK_COPY_TO_DEVICE, start, (void *) data, &copy, owned,
                          NULL, region);
        return keep ? CUBE__DISPATCH_KEPT : CUBE__DISPATCH_DONE;
}

cube__dispatched cube__do_free(cube__msg *k)
{
        uint64_t stream, memory;
        cube__name *n;

        if (k->n != 2 || !cube__obj_u64(&k->p[0], &stream) || !cube__obj_u64(&k->p[1], &memory)) {
                cube__reply_malformed(k, "params must be [stream, memory]");
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
        uint64_t stream, total = 16, staged = 0, region_off = 0, unused;
        const msgpack_object_array *targets;
        cube__name **names;
        uint64_t *starts;
        cube__copy *copies;
        cube__region *region = NULL;
        cube_handle *hs;
        size_t n;
        cube__stream *st;
        cube_error *e = NULL;
        cube__pending_reply *r;
        msgpack_sbuffer sb;
        msgpack_packer pk;

        if ((k->n != 2 && k->n != 3) || !cube__obj_u64(&k->p[0], &stream) ||
            !cube__obj_array(&k->p[1], &targets)) {
                cube__reply_malformed(k, "params must be [stream, [handle or descriptor, ...]] or "
                                "[stream, [...], [\"region\", id, offset]]");
                return CUBE__DISPATCH_DONE;
        }
        n = targets->size;
        names = calloc(n + 1, sizeof(*names));
        starts = calloc(n + 1, sizeof(*starts));
        copies = calloc(n + 1, sizeof(*copies));
        hs = calloc(n + 1, sizeof(*hs));
        if (!names || !starts || !copies || !hs) {
                cube__reply_owned_error(k, NULL);
                goto out;
        }
        for (size_t i = 0; i < n && !e; i++) {
                bool bad;
                e = copy_target(s, &targets->ptr[i], &names[i], &starts[i], &copies[i], &bad);
                if (bad) {
                        cube__reply_malformed(k, "a target must be a handle or a descriptor [handle, "
                                        "shape, strides, elem_size]");
                        goto out;
                }
                if (!e) {
                        uint64_t extent = copies[i].rows ? (copies[i].rows - 1) *
                                          copies[i].pitch + copies[i].width : 0;
                        hs[i] = (cube_handle) {
                                .service = k->server->nonce, .memory = names[i]->id,
                                .offset_start = starts[i],
                                .offset_end = names[i]->alloc->size - starts[i] - extent,
                        };
                        staged += copies[i].rows * copies[i].width;
                        total += copies[i].rows * copies[i].width + 5;
                }
        }
        if (!e && k->server->poison)
                e = cube__poisoned(k->server);
        if (!e)
                e = cube__capture_refusal(s, stream, "read");
        if (!e)
                e = cube__ensure_written(s, hs, n);
        if (!e && k->n == 3 && !(e = cube__region_range(s, &k->p[2], false, &region, &region_off,
                                                        &unused)) &&
            staged > region->size - region_off)
                e = cube__err_validation("a read of %" PRIu64 " bytes does not fit region %" PRIu64
                                         " from offset %" PRIu64, staged, region->id, region_off);
        if (!e && !region && total > k->server->opts.limits.max_message_bytes)
                e = cube__err_validation("a read of %" PRIu64 " bytes does not fit one reply of at "
                                         "most %" PRIu64 " bytes; read fewer handles at a time, or "
                                         "into a staging region", total,
                                         k->server->opts.limits.max_message_bytes);
        if (e) {
                cube__reply_owned_error(k, e);
                goto out;
        }
        st = cube__stream_get(s, stream, &e);
        r = st ? cube__pending_new(s, k->env->msgid) : NULL;
        if (!r) {
                cube__reply_owned_error(k, st ? NULL : e);
                goto out;
        }
        /* No failure claims the bytes now; a writer still pending may fail,
         * and the answer waits for it. */
        r->answer = cube__await_handles(s, hs, n, &r->awaits);

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (cube__pack_response_ok(&pk, k->env->msgid) < 0 ||
            msgpack_pack_array(&pk, (uint32_t) n) < 0) {
                r->error = cube__err_generic("out of host memory preparing a read");
        } else if (region) {
                /* The bytes land in the region; the answer gives their sizes. */
                uint64_t off = region_off;
                int rr = 0;
                for (size_t i = 0; i < n; i++) {
                        uint64_t len = copies[i].rows * copies[i].width;
                        rr |= msgpack_pack_uint64(&pk, len);
                        if (len)
                                cube__submit_copy(s, st, names[i]->alloc, CUBE__WORK_COPY_TO_HOST,
                                                  starts[i], (char *) region->map + off,
                                                  &copies[i], NULL, r, region);
                        off += len;
                }
                r->frame_len = sb.size;
                if (rr || !(r->frame = malloc(sb.size)))
                        r->error = cube__err_generic("out of host memory preparing a read");
                else
                        memcpy(r->frame, sb.data, sb.size);
        } else if (!(r->frame = malloc(total))) {
                r->error = cube__err_generic("out of host memory preparing a read of %" PRIu64
                                             " bytes", total);
        } else {
                uint8_t *p = (uint8_t *) r->frame;
                size_t off = sb.size;
                memcpy(p, sb.data, sb.size);
                for (size_t i = 0; i < n; i++) {
                        uint64_t len = copies[i].rows * copies[i].width;
                        off += bin_header(p + off, len);
                        if (len)
                                cube__submit_copy(s, st, names[i]->alloc, CUBE__WORK_COPY_TO_HOST,
                                                  starts[i], p + off, &copies[i], NULL, r, NULL);
                        off += len;
                }
                r->frame_len = off;
        }
        if (r->frame)
                s->queued_bytes += r->frame_len;        /* an answer held from now on */
        msgpack_sbuffer_destroy(&sb);
        cube__pending_arm(r);
out:
        free(names);
        free(starts);
        free(copies);
        free(hs);
        return CUBE__DISPATCH_DONE;
}

/* Whether none of the session's streams has work queued or running, and no
 * other session has work on the named buffers that a barrier would wait
 * for. */
static bool idle_for(cube__session *s, const cube_handle *hs, size_t n)
{
        if (s->inflight)
                return false;
        for (size_t i = 0; i < n; i++) {
                cube__alloc *a;
                uint64_t start, end;
                cube_error *bad = cube__alloc_resolve(s, &hs[i], &a, &start, &end);
                if (bad)
                        cube_error_free(bad);
                else if (a->uses_head)
                        return false;
        }
        return true;
}

/* A fence on st that counts toward r, waiting also for the work of other
 * streams on the named buffers, as a read of them would. */
static void fence(cube__session *s, cube__stream *st, cube__pending_reply *r,
                  const cube_handle *hs, size_t n)
{
        cube__op *o = cube__op_new(s, st, CUBE__WORK_FENCE, n, 0, NULL);

        if (!o) {
                if (!r->error)
                        r->error = cube__err_generic("out of host memory queueing a sync");
                return;
        }
        o->reply = r;
        for (size_t i = 0; i < n; i++) {
                cube__alloc *a;
                uint64_t start, end;
                cube_error *bad = cube__alloc_resolve(s, &hs[i], &a, &start, &end);
                if (bad)
                        cube_error_free(bad);   /* the answer reports it */
                else
                        cube__op_use(o, a, false);
        }
        cube__op_enqueue(o);
}

typedef struct fence_ctx {
        cube__session *session;
        cube__stream *except;
        cube__pending_reply *reply;
} fence_ctx;

static void fence_busy_stream(uint64_t id, void *value, void *ctx)
{
        fence_ctx *f = ctx;
        cube__stream *st = value;

        if (st != f->except && st->pending)
                fence(f->session, st, f->reply, NULL, 0);
}

/* sync: the barrier waits for everything the session queued before it, on
 * every stream, so a device fault raised by any of it is reported; then the
 * claim check, as the bytes were at the sync's place in the order. */
cube__dispatched cube__do_sync(cube__msg *k)
{
        cube__session *s = k->session;
        uint64_t stream;
        cube_handle *hs;
        size_t n;
        cube__stream *st;
        cube_error *e;
        cube__pending_reply *r;

        if (!cube__read_stream_handles(k, &stream, &hs, &n))
                return CUBE__DISPATCH_DONE;
        if (k->server->poison || (e = cube__capture_refusal(s, stream, "sync"))) {
                cube__reply_owned_error(k, k->server->poison ? cube__poisoned(k->server) : e);
                free(hs);
                return CUBE__DISPATCH_DONE;
        }
        st = cube__stream_get(s, stream, &e);
        if (st && idle_for(s, hs, n)) {
                /* Nothing queued can change the answer: the claim check now
                 * is the one the barrier would make, without a trip through
                 * the device's queue. */
                e = cube__ensure_written(s, hs, n);
                free(hs);
                if (e)
                        cube__reply_owned_error(k, e);
                else
                        cube__reply_ok_nil(k);
                return CUBE__DISPATCH_DONE;
        }
        r = st ? cube__pending_new(s, k->env->msgid) : NULL;
        if (!r) {
                cube__reply_owned_error(k, st ? NULL : e);
                free(hs);
                return CUBE__DISPATCH_DONE;
        }
        r->answer = cube__await_handles(s, hs, n, &r->awaits);
        fence(s, st, r, hs, n);
        cube__idmap_foreach(&s->streams, fence_busy_stream,
                            &(fence_ctx) { .session = s, .except = st, .reply = r });
        free(hs);
        cube__pending_arm(r);
        return CUBE__DISPATCH_DONE;
}

cube__dispatched cube__do_check(cube__msg *k)
{
        uint64_t stream;
        cube_handle *hs;
        size_t n;
        cube_error *e;

        if (!cube__read_stream_handles(k, &stream, &hs, &n))
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
                cube__reply_malformed(k, "params must be [stream]");
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
        cube_error *e;

        if (k->n != 1 || !cube__obj_u64(&k->p[0], &stream)) {
                cube__reply_malformed(k, "params must be [stream]");
                return CUBE__DISPATCH_DONE;
        }
        if (k->server->poison) {
                cube__reply_owned_error(k, cube__poisoned(k->server));
                return CUBE__DISPATCH_DONE;
        }
        /* Releasing memory waits on the device, which a recording stream
         * cannot, and the capture is to find its warm-up's pages. */
        if ((e = cube__capture_refusal(k->session, stream, "memory_cleanup"))) {
                cube__reply_owned_error(k, e);
                return CUBE__DISPATCH_DONE;
        }
        st = cube__idmap_get(&k->session->streams, stream);
        if (st && st->memory)
                cube__pools_cleanup(st->memory);
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
                cube__reply_malformed(k, "params must be [stream]");
                return CUBE__DISPATCH_DONE;
        }
        st = cube__idmap_get(&k->session->streams, stream);
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        r |= cube__pack_response_ok(&pk, k->env->msgid);
        if (st && st->memory)
                r |= cube__pools_pack(st->memory, stream, &pk);
        else if (st) {
                /* Created, and nothing allocated on it yet: empty pools. */
                cube__pools *m = cube__pools_new(&k->server->pools);
                r |= m ? cube__pools_pack(m, stream, &pk) : -1;
                cube__pools_close(m);
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
                cube__reply_malformed(k, "params must be [stream, mode] with mode 0, 1 or 2");
                return CUBE__DISPATCH_DONE;
        }
        st = cube__stream_get(k->session, stream, &e);
        if (st && !st->memory)
                st->memory = cube__pools_new(&k->server->pools);
        if (st && st->memory)
                cube__pools_mode(st->memory, (int) mode);
        else
                cube__log_session(CUBE__LOG_INFO, k->session, 0, "allocation_mode dropped: %s",
                                  e ? cube_error_message(e) : "out of host memory");
        cube_error_free(e);
        return CUBE__DISPATCH_DONE;
}

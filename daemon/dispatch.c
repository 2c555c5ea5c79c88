/*
 * dispatch.c - protocol v1's methods: decode the params, act, answer.
 *
 * Work the reference makes fire-and-forget (create, write, free) arrives as
 * notifications and has no answer: whatever goes wrong with it lands on the
 * memory it was to write, and the next read, sync or check reports it.
 * Requests are answered on their msgid, now or once their device work is done.
 * A message whose shape is wrong is a protocol error: answered where it can
 * be, then its connection is closed.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cubed.h"

#define KEEP_BUFFER_MIN (256 * 1024)

typedef struct call {
        cube__conn *conn;
        cube__session *session;
        cube__server *server;
        const cube__envelope *env;
        const msgpack_object *p;        /* params */
        uint32_t n;                     /* number of params */
        void *buf;                      /* the read buffer, for a write to keep */
} call;

static bool malformed(call *k, const char *what)
{
        char method[64];
        size_t n = k->env->method_len < sizeof(method) - 1 ? k->env->method_len : sizeof(method) - 1;

        memcpy(method, k->env->method, n);
        method[n] = '\0';
        cube__conn_protocol_error(k->conn, k->env->type == CUBE__MSG_REQUEST ? (int64_t) k->env->msgid : -1,
                                  "%s: %s", method, what);
        return false;
}

static void reply_ok_nil(call *k)
{
        msgpack_sbuffer sb;
        msgpack_packer pk;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (cube__pack_response_ok(&pk, k->env->msgid) == 0 && msgpack_pack_nil(&pk) == 0)
                cube__reply_sbuffer(k->session, &sb);
        msgpack_sbuffer_destroy(&sb);
}

static void reply_owned_error(call *k, cube_error *e)
{
        if (!e)
                e = cube__err_generic("out of host memory while answering");
        cube__reply_error(k->session, k->env->msgid, e);
        cube_error_free(e);
}

/* Reads [stream, [handle, ...]]: the shape of read, sync and check. */
static bool get_stream_handles(call *k, uint64_t *ret_stream, cube_handle **ret_handles,
                               size_t *ret_n)
{
        const msgpack_object_array *arr;
        cube_handle *hs;

        if (k->n != 2 || !cube__obj_u64(&k->p[0], ret_stream) || !cube__obj_array(&k->p[1], &arr))
                return malformed(k, "params must be [stream, [handle, ...]]");
        hs = calloc(arr->size ? arr->size : 1, sizeof(*hs));
        if (!hs)
                return malformed(k, "out of host memory");
        for (uint32_t i = 0; i < arr->size; i++)
                if (!cube__obj_handle(&arr->ptr[i], &hs[i])) {
                        free(hs);
                        return malformed(k, "a handle must be [service, memory, offset_start, "
                                         "offset_end] of unsigned integers");
                }
        *ret_handles = hs;
        *ret_n = arr->size;
        return true;
}

static void do_hello(call *k)
{
        cube__server *srv = k->server;
        cube__session *s = k->session;
        uint32_t version;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        cube_protocol_limits lim;
        char name[CUBED_NAME_MAX] = "";
        int r = 0;

        if (k->n != 2 || !cube__obj_u32(&k->p[0], &version) ||
            (k->p[1].type != MSGPACK_OBJECT_NIL &&
             !cube__obj_str(&k->p[1], name, sizeof(name)))) {
                malformed(k, "params must be [version, name] with a name of at most 63 bytes");
                return;
        }
        if (version != CUBE_PROTOCOL_VERSION) {
                reply_owned_error(k, cube__err_validation(
                        "this daemon speaks protocol version %d; the client asked for %u",
                        CUBE_PROTOCOL_VERSION, version));
                return;
        }
        s->greeted = true;
        memcpy(s->name, name, sizeof(name));
        lim = (cube_protocol_limits) {
                .max_message_bytes = srv->opts.limits.max_message_bytes,
                .max_depth = srv->opts.limits.max_depth,
                .max_container = srv->opts.limits.max_container,
                .max_str_bytes = srv->opts.limits.max_str_bytes,
                .max_objects = srv->opts.limits.max_objects,
        };
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        r |= cube__pack_response_ok(&pk, k->env->msgid);
        r |= msgpack_pack_map(&pk, 7);
        r |= cube__pack_kv_u64(&pk, "version", CUBE_PROTOCOL_VERSION);
        r |= cube__pack_kv_str(&pk, "service", srv->service);
        r |= cube__pack_kv_u64(&pk, "nonce", srv->nonce);
        r |= cube__pack_kv_str(&pk, "backend", srv->driver->name);
        r |= cube__pack_kv_u64(&pk, "session", s->id);
        r |= cube__pack_str(&pk, "properties");
        r |= cube__pack_properties(&pk, &srv->properties);
        r |= cube__pack_str(&pk, "limits");
        r |= cube__pack_limits(&pk, &lim);
        if (r == 0)
                cube__reply_sbuffer(s, &sb);
        msgpack_sbuffer_destroy(&sb);
        cube__log(CUBE__LOG_DEBUG, "session %" PRIu64 " is %s", s->id, s->name);
}

static void do_status(call *k)
{
        cube__server *srv = k->server;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        int r = 0;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        r |= cube__pack_response_ok(&pk, k->env->msgid);
        r |= msgpack_pack_map(&pk, 10);
        r |= cube__pack_kv_str(&pk, "service", srv->service);
        r |= cube__pack_kv_str(&pk, "backend", srv->driver->name);
        r |= cube__pack_str(&pk, "uptime_seconds");
        r |= msgpack_pack_double(&pk, (double) (uv_hrtime() - srv->started_ns) / 1e9);
        r |= cube__pack_kv_u64(&pk, "sessions", srv->n_sessions);
        r |= cube__pack_kv_u64(&pk, "memory_in_use", srv->memory_in_use);
        r |= cube__pack_kv_u64(&pk, "memory_peak", srv->memory_peak);
        r |= cube__pack_kv_u64(&pk, "allocations", srv->allocations);
        r |= cube__pack_kv_u64(&pk, "failures", cube__failures_live(&srv->failures));
        r |= cube__pack_str(&pk, "poisoned");
        r |= msgpack_pack_false(&pk);
        r |= cube__pack_str(&pk, "properties");
        r |= cube__pack_properties(&pk, &srv->properties);
        if (r == 0)
                cube__reply_sbuffer(k->session, &sb);
        msgpack_sbuffer_destroy(&sb);
}

static void do_create(call *k)
{
        uint64_t stream, memory, size;

        if (k->n != 3 || !cube__obj_u64(&k->p[0], &stream) || !cube__obj_u64(&k->p[1], &memory) ||
            !cube__obj_u64(&k->p[2], &size)) {
                malformed(k, "params must be [stream, memory, size]");
                return;
        }
        if (cube__idmap_get(&k->session->memory, memory)) {
                cube__conn_protocol_error(k->conn, -1, "create: memory id %" PRIu64
                                          " is already in use in this session", memory);
                return;
        }
        if (cube__alloc_create(k->session, memory, size) < 0)
                cube__conn_protocol_error(k->conn, -1, "create: out of host memory");
}

/* Records a write that cannot land as a failure of the bytes it was to write. */
static void fail_write(cube__session *s, cube__alloc *a, uint64_t start, uint64_t end,
                       cube_error *e)
{
        cube__server *srv = s->server;
        uint64_t failure;

        cube__log(CUBE__LOG_INFO, "session %" PRIu64 ": a write to memory %" PRIu64 " failed: %s",
                  s->id, a->id, e ? cube_error_message(e) : "out of memory");
        s->errors++;
        failure = cube__failures_insert(&srv->failures, e, s->id);
        cube__claims_taint(&srv->failures, &a->claims, start, end, failure);
        cube__failures_prune(&srv->failures, failure);
}

static bool do_write(call *k)
{
        cube__session *s = k->session;
        uint64_t stream, start, end;
        cube_handle h;
        const void *data;
        size_t len;
        cube__alloc *a;
        cube__stream *st;
        cube_error *e;
        void *owned;
        bool keep;

        if (k->n != 3 || !cube__obj_u64(&k->p[0], &stream) || !cube__obj_handle(&k->p[1], &h) ||
            !cube__obj_bin(&k->p[2], &data, &len))
                return malformed(k, "params must be [stream, handle, bin]");

        e = cube__alloc_resolve(s, &h, &a, &start, &end);
        if (e) {
                cube__alloc *named = h.service == k->server->nonce ?
                                     cube__idmap_get(&s->memory, h.memory) : NULL;
                if (named) {
                        /* The handle names our memory with offsets that do
                         * not fit it: the whole allocation is suspect. */
                        fail_write(s, named, 0, named->size, e);
                } else {
                        cube__log(CUBE__LOG_INFO, "session %" PRIu64 ": a write was dropped: %s",
                                  s->id, cube_error_message(e));
                        s->errors++;
                        cube_error_free(e);
                }
                return false;
        }
        if (len != end - start) {
                fail_write(s, a, start, end, cube__err_validation(
                        "a write of %zu bytes was sent for a handle of %" PRIu64 " bytes", len,
                        end - start));
                return false;
        }
        if (!a->storage || len == 0)
                return false;   /* a failed reservation keeps its claim */
        st = cube__stream_get(s, stream, &e);
        if (!st) {
                fail_write(s, a, start, end, e);
                return false;
        }

        keep = len >= KEEP_BUFFER_MIN;
        if (keep) {
                owned = k->buf;
        } else {
                owned = malloc(len);
                if (!owned) {
                        fail_write(s, a, start, end, cube__err_generic(
                                "out of host memory staging a write of %zu bytes", len));
                        return false;
                }
                memcpy(owned, data, len);
                data = owned;
        }
        cube__claims_written(&k->server->failures, &a->claims, start, end);
        cube__submit(s, st, a, CUBE__WORK_COPY_TO_DEVICE, start, (void *) data, len, owned, NULL);
        return keep;
}

static void do_free(call *k)
{
        uint64_t stream, memory;
        cube__alloc *a;

        if (k->n != 2 || !cube__obj_u64(&k->p[0], &stream) || !cube__obj_u64(&k->p[1], &memory)) {
                malformed(k, "params must be [stream, memory]");
                return;
        }
        a = cube__idmap_get(&k->session->memory, memory);
        if (!a) {
                cube__log(CUBE__LOG_INFO, "session %" PRIu64 ": free of unknown memory %" PRIu64,
                          k->session->id, memory);
                k->session->errors++;
                return;
        }
        cube__alloc_free(a);
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

static void do_read(call *k)
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

        if (!get_stream_handles(k, &stream, &hs, &n))
                return;
        e = cube__ensure_written(s, hs, n);
        if (e) {
                reply_owned_error(k, e);
                free(hs);
                return;
        }
        for (size_t i = 0; i < n; i++) {
                cube__alloc *a;
                uint64_t start, end;
                cube__alloc_resolve(s, &hs[i], &a, &start, &end);   /* checked above */
                total += end - start + 5;
        }
        if (total > k->server->opts.limits.max_message_bytes) {
                reply_owned_error(k, cube__err_validation(
                        "a read of %" PRIu64 " bytes does not fit one reply of at most %" PRIu64
                        " bytes; read fewer handles at a time", total,
                        k->server->opts.limits.max_message_bytes));
                free(hs);
                return;
        }
        st = cube__stream_get(s, stream, &e);
        r = st ? cube__pending_new(s, k->env->msgid) : NULL;
        if (!r) {
                reply_owned_error(k, st ? NULL : e);
                free(hs);
                return;
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
}

static void do_sync(call *k)
{
        cube__session *s = k->session;
        uint64_t stream;
        cube_handle *hs;
        size_t n;
        cube__stream *st;
        cube_error *e;
        cube__pending_reply *r;

        if (!get_stream_handles(k, &stream, &hs, &n))
                return;
        st = cube__stream_get(s, stream, &e);
        r = st ? cube__pending_new(s, k->env->msgid) : NULL;
        if (!r) {
                reply_owned_error(k, st ? NULL : e);
                free(hs);
                return;
        }
        r->handles = hs;
        r->n_handles = n;
        cube__submit(s, st, NULL, CUBE__WORK_FENCE, 0, NULL, 0, NULL, r);
        cube__pending_arm(r);
}

static void do_check(call *k)
{
        uint64_t stream;
        cube_handle *hs;
        size_t n;
        cube_error *e;

        if (!get_stream_handles(k, &stream, &hs, &n))
                return;
        e = cube__ensure_written(k->session, hs, n);
        free(hs);
        if (e)
                reply_owned_error(k, e);
        else
                reply_ok_nil(k);
}

/* flush and memory_cleanup: [stream]. The cpu backend queues nothing on the
 * host side and frees memory as soon as no work uses it, so both answer at
 * once; a device fault is all flush could report. */
static void do_stream_only(call *k)
{
        uint64_t stream;

        if (k->n != 1 || !cube__obj_u64(&k->p[0], &stream)) {
                malformed(k, "params must be [stream]");
                return;
        }
        reply_ok_nil(k);
}

typedef struct method {
        const char *name;
        int type;                       /* CUBE__MSG_REQUEST or CUBE__MSG_NOTIFY */
        void (*handle)(call *k);
        bool (*handle_keep)(call *k);   /* may keep the read buffer */
} method;

static const method methods[] = {
        { "hello", CUBE__MSG_REQUEST, do_hello, NULL },
        { "status", CUBE__MSG_REQUEST, do_status, NULL },
        { "create", CUBE__MSG_NOTIFY, do_create, NULL },
        { "write", CUBE__MSG_NOTIFY, NULL, do_write },
        { "free", CUBE__MSG_NOTIFY, do_free, NULL },
        { "read", CUBE__MSG_REQUEST, do_read, NULL },
        { "sync", CUBE__MSG_REQUEST, do_sync, NULL },
        { "check", CUBE__MSG_REQUEST, do_check, NULL },
        { "flush", CUBE__MSG_REQUEST, do_stream_only, NULL },
        { "memory_cleanup", CUBE__MSG_REQUEST, do_stream_only, NULL },
};

bool cube__dispatch(cube__conn *c, const msgpack_object *msg, void *buf)
{
        cube__session *s;
        cube__envelope env;
        const char *why;
        call k;

        if (cube__envelope_parse(msg, &env, &why) < 0) {
                int64_t msgid = -1;
                uint64_t v;
                if (msg->type == MSGPACK_OBJECT_ARRAY && msg->via.array.size == 4 &&
                    cube__obj_u64(&msg->via.array.ptr[0], &v) && v == CUBE__MSG_REQUEST &&
                    cube__obj_u64(&msg->via.array.ptr[1], &v) && v <= UINT32_MAX)
                        msgid = (int64_t) v;
                cube__conn_protocol_error(c, msgid, "%s", why);
                return false;
        }
        if (env.type == CUBE__MSG_RESPONSE) {
                cube__conn_protocol_error(c, -1, "clients send requests and notifications, "
                                          "not responses");
                return false;
        }

        for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
                const method *m = &methods[i];
                if (!cube__method_is(&env, m->name))
                        continue;
                k = (call) {
                        .conn = c, .env = &env, .p = env.params->via.array.ptr,
                        .n = env.params->via.array.size, .buf = buf,
                };
                s = cube__conn_session(c);
                k.session = s;
                k.server = s->server;
                if (env.type != m->type) {
                        cube__conn_protocol_error(c, env.type == CUBE__MSG_REQUEST ? (int64_t) env.msgid : -1,
                                                  "%s must be sent as a %s", m->name,
                                                  m->type == CUBE__MSG_REQUEST ? "request" :
                                                  "notification");
                        return false;
                }
                if (!s->greeted && strcmp(m->name, "hello") != 0) {
                        cube__conn_protocol_error(c, env.type == CUBE__MSG_REQUEST ? (int64_t) env.msgid : -1,
                                                  "hello must be the first request of a session");
                        return false;
                }
                if (m->handle_keep)
                        return m->handle_keep(&k);
                m->handle(&k);
                return false;
        }

        if (env.type == CUBE__MSG_REQUEST) {
                cube__session *sess = cube__conn_session(c);
                cube_error *e = cube__err_validation("unknown method '%.*s'",
                                                     (int) (env.method_len > 64 ? 64 : env.method_len),
                                                     env.method);
                if (e)
                        cube__reply_error(sess, env.msgid, e);
                cube_error_free(e);
                return false;
        }
        cube__conn_protocol_error(c, -1, "unknown notification '%.*s'",
                                  (int) (env.method_len > 64 ? 64 : env.method_len), env.method);
        return false;
}

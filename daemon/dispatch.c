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

#include "requests.h"
#include "transport.h"
#include "frame.h"


/* Whether a session name is fit to print: valid UTF-8 (no overlong forms,
 * no surrogates) without control characters, so that no name can forge a
 * row of cubectl's tables, a log line or JSON output. */
static bool name_is_text(const char *name)
{
        const unsigned char *s = (const unsigned char *) name;

        while (*s) {
                uint32_t cp;
                size_t n;
                if (*s < 0x80) {
                        if (*s < 0x20 || *s == 0x7f)
                                return false;
                        s++;
                        continue;
                }
                if ((*s & 0xe0) == 0xc0)
                        n = 2, cp = *s & 0x1f;
                else if ((*s & 0xf0) == 0xe0)
                        n = 3, cp = *s & 0x0f;
                else if ((*s & 0xf8) == 0xf0)
                        n = 4, cp = *s & 0x07;
                else
                        return false;
                for (size_t i = 1; i < n; i++) {
                        if ((s[i] & 0xc0) != 0x80)
                                return false;
                        cp = cp << 6 | (s[i] & 0x3f);
                }
                if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
                    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) || (cp >= 0x80 && cp < 0xa0))
                        return false;
                s += n;
        }
        return true;
}

/* The element types, in cube_elem_type's order, as hello names them. */
static const char *const elem_names[] = { "f16", "bf16", "f32", "f64", "i32", "i64", "u32", "u64" };

/* A stable checksum of the device properties (FNV-1a over their msgpack
 * form, which packs the same fields in the same order on every run): what
 * a client keys tuning results by, per device. */
static uint64_t properties_hash(const cube_device_properties *p)
{
        msgpack_sbuffer sb;
        msgpack_packer pk;
        uint64_t h = 0xcbf29ce484222325ull;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (cube__pack_properties(&pk, p) == 0)
                for (size_t i = 0; i < sb.size; i++)
                        h = (h ^ (uint8_t) sb.data[i]) * 0x100000001b3ull;
        msgpack_sbuffer_destroy(&sb);
        return h;
}

/* What the reference's ServerUtilities says of the device beyond its
 * properties: their checksum, what compiled code depends on, and the
 * transport between devices with the element types it reduces. */
static int pack_utilities(msgpack_packer *pk, const cube__server *srv)
{
        const char *target = srv->driver->target ? srv->driver->target(srv->device) : NULL;
        const int n_types = (int) (sizeof(elem_names) / sizeof(elem_names[0]));
        uint32_t n = 0;
        int r = 0;

        r |= cube__pack_kv_u64(pk, "properties_hash", properties_hash(&srv->properties));
        r |= cube__pack_str(pk, "target_properties");
        r |= msgpack_pack_map(pk, 1);
        r |= cube__pack_kv_str(pk, "target", target ? target : "");
        r |= cube__pack_str(pk, "device_transport");
        if (!srv->transport)
                return r | msgpack_pack_nil(pk);
        for (int t = 0; t < n_types; t++)
                n += srv->transport->reduces(t);
        r |= msgpack_pack_map(pk, 2);
        r |= cube__pack_kv_str(pk, "name", srv->transport->name);
        r |= cube__pack_str(pk, "reduces");
        r |= msgpack_pack_array(pk, n);
        for (int t = 0; t < n_types; t++)
                if (srv->transport->reduces(t))
                        r |= cube__pack_str(pk, elem_names[t]);
        return r;
}

static cube__dispatched do_hello(cube__msg *k)
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
                cube__reply_malformed(k, "params must be [version, name] with a name of at most 63 bytes");
                return CUBE__DISPATCH_DONE;
        }
        if (memchr(k->p[1].via.str.ptr, '\0', k->p[1].type == MSGPACK_OBJECT_STR ?
                                                k->p[1].via.str.size : 0) || !name_is_text(name)) {
                srv->stats.sessions_refused++;
                cube__reply_owned_error(k, cube__err_validation(
                        "the session name must be UTF-8 text without control characters, at "
                        "most 63 bytes"));
                return CUBE__DISPATCH_DONE;
        }
        char banned[256];
        if (cube__name_banned(&srv->opts, &srv->users, name, banned, sizeof(banned))) {
                srv->stats.sessions_refused++;
                cube__log_session(CUBE__LOG_NOTICE, s, 0, "session %" PRIu64 " refused: %s", s->id,
                                  banned);
                cube__reply_owned_error(k, cube__err_validation("%s", banned));
                return CUBE__DISPATCH_DONE;
        }
        if (version != CUBE_PROTOCOL_VERSION) {
                cube__reply_owned_error(k, cube__err_validation(
                        "this daemon speaks protocol version %d; the client asked for %u",
                        CUBE_PROTOCOL_VERSION, version));
                return CUBE__DISPATCH_DONE;
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
        r |= msgpack_pack_map(&pk, 11);
        r |= cube__pack_kv_u64(&pk, "version", CUBE_PROTOCOL_VERSION);
        r |= cube__pack_kv_str(&pk, "check_mode", cube__check_mode_name(srv->opts.check_mode));
        r |= cube__pack_kv_str(&pk, "service", srv->service);
        r |= cube__pack_kv_u64(&pk, "nonce", srv->nonce);
        r |= cube__pack_kv_str(&pk, "backend", srv->driver->name);
        r |= cube__pack_kv_u64(&pk, "session", s->id);
        r |= cube__pack_str(&pk, "properties");
        r |= cube__pack_properties(&pk, &srv->properties);
        r |= cube__pack_str(&pk, "limits");
        r |= cube__pack_limits(&pk, &lim);
        r |= pack_utilities(&pk, srv);
        if (r == 0)
                cube__reply_sbuffer(s, &sb);
        msgpack_sbuffer_destroy(&sb);
        cube__log(CUBE__LOG_DEBUG, "session %" PRIu64 " is %s", s->id, s->name);
        return CUBE__DISPATCH_DONE;
}




typedef struct method {
        const char *name;
        int type;                       /* CUBE__MSG_REQUEST or CUBE__MSG_NOTIFY */
        cube__dispatched (*handle)(cube__msg *k);
        bool admin;                     /* looks or acts, queues no work: served while draining */
} method;

/* Searched in order: a launch, the message a busy client sends most, is
 * found first. */
static const method methods[] = {
        { "launch", CUBE__MSG_NOTIFY, cube__do_launch, false },
        { "hello", CUBE__MSG_REQUEST, do_hello, true },
        { "status", CUBE__MSG_REQUEST, cube__do_status, true },
        { "kernels", CUBE__MSG_REQUEST, cube__do_kernels, true },
        { "kernel_cache", CUBE__MSG_REQUEST, cube__do_kernel_cache, true },
        { "create", CUBE__MSG_NOTIFY, cube__do_create, false },
        { "create_tensors", CUBE__MSG_NOTIFY, cube__do_create_tensors, false },
        { "write", CUBE__MSG_NOTIFY, cube__do_write, false },
        { "free", CUBE__MSG_NOTIFY, cube__do_free, false },
        { "read", CUBE__MSG_REQUEST, cube__do_read, false },
        { "sync", CUBE__MSG_REQUEST, cube__do_sync, false },
        { "check", CUBE__MSG_REQUEST, cube__do_check, false },
        { "flush", CUBE__MSG_REQUEST, cube__do_flush, false },
        { "memory_cleanup", CUBE__MSG_REQUEST, cube__do_memory_cleanup, false },
        { "memory_report", CUBE__MSG_REQUEST, cube__do_memory_report, false },
        { "stream_ids", CUBE__MSG_REQUEST, cube__do_stream_ids, false },
        { "allocation_mode", CUBE__MSG_NOTIFY, cube__do_allocation_mode, false },
        { "memory", CUBE__MSG_REQUEST, cube__do_memory, true },
        { "region", CUBE__MSG_REQUEST, cube__do_region, false },
        { "region_free", CUBE__MSG_NOTIFY, cube__do_region_free, false },
        { "export", CUBE__MSG_REQUEST, cube__do_export, false },
        { "import", CUBE__MSG_REQUEST, cube__do_import, false },
        { "kernel", CUBE__MSG_NOTIFY, cube__do_register, false },
        { "compile_queued", CUBE__MSG_REQUEST, cube__do_compile_queued, false },
        { "start_profile", CUBE__MSG_REQUEST, cube__do_start_profile, false },
        { "end_profile", CUBE__MSG_REQUEST, cube__do_end_profile, false },
        { "abandon_profile", CUBE__MSG_NOTIFY, cube__do_abandon_profile, false },
        { "graph_prepare", CUBE__MSG_REQUEST, cube__do_graph_prepare, false },
        { "begin_capture", CUBE__MSG_REQUEST, cube__do_begin_capture, false },
        { "end_capture", CUBE__MSG_REQUEST, cube__do_end_capture, false },
        { "replay", CUBE__MSG_REQUEST, cube__do_replay, false },
        { "graph_destroy", CUBE__MSG_NOTIFY, cube__do_graph_destroy, false },
        { "captures", CUBE__MSG_REQUEST, cube__do_captures, true },
        { "failures", CUBE__MSG_REQUEST, cube__do_failures, true },
        { "sessions", CUBE__MSG_REQUEST, cube__do_sessions, true },
        { "streams", CUBE__MSG_REQUEST, cube__do_streams, true },
        { "metrics", CUBE__MSG_REQUEST, cube__do_metrics, true },
        { "shares", CUBE__MSG_REQUEST, cube__do_shares, true },
        { "share", CUBE__MSG_REQUEST, cube__do_share, true },
        { "config", CUBE__MSG_REQUEST, cube__do_config, true },
        { "bans", CUBE__MSG_REQUEST, cube__do_bans, true },
        { "ended_sessions", CUBE__MSG_REQUEST, cube__do_ended_sessions, true },
        { "recent_failures", CUBE__MSG_REQUEST, cube__do_recent_failures, true },
        { "drain", CUBE__MSG_REQUEST, cube__do_drain, true },
        { "undrain", CUBE__MSG_REQUEST, cube__do_undrain, true },
        { "kill_session", CUBE__MSG_REQUEST, cube__do_kill_session, true },
        { "debug_inject", CUBE__MSG_REQUEST, cube__do_inject, false },
        { "comm_init", CUBE__MSG_REQUEST, cube__do_comm_init, false },
        { "comm_mint", CUBE__MSG_REQUEST, cube__do_comm_mint, false },
        { "all_reduce", CUBE__MSG_REQUEST, cube__do_collective, false },
        { "all_gather", CUBE__MSG_REQUEST, cube__do_collective, false },
        { "reduce_scatter", CUBE__MSG_REQUEST, cube__do_collective, false },
        { "broadcast", CUBE__MSG_REQUEST, cube__do_collective, false },
        { "all_to_all", CUBE__MSG_REQUEST, cube__do_collective, false },
        { "send", CUBE__MSG_REQUEST, cube__do_collective, false },
        { "recv", CUBE__MSG_REQUEST, cube__do_collective, false },
        { "sync_collective", CUBE__MSG_REQUEST, cube__do_sync_collective, false },
        { "comms", CUBE__MSG_REQUEST, cube__do_comms, true },
        { "can_access_peer", CUBE__MSG_REQUEST, cube__do_can_access_peer, false },
        { "peer_address", CUBE__MSG_REQUEST, cube__do_peer_address, false },
        { "peer_memory", CUBE__MSG_REQUEST, cube__do_peer_memory, false },
        { "peer_bind", CUBE__MSG_REQUEST, cube__do_peer_bind, false },
        { "peer_wrote", CUBE__MSG_NOTIFY, cube__do_peer_wrote, false },
        { "peer_written", CUBE__MSG_REQUEST, cube__do_peer_written, false },
};

/* How deep a plain launch nests, and its longest str ("launch", "static"):
 * [2, "launch", [.., ["static", [x, y, z]], ..]]. */
#define LAUNCH_DEPTH 4
#define LAUNCH_STR_BYTES 6

/* A launch, the message a busy client sends most: [2, "launch", params],
 * its params read where they lie. Decoding it as msgpack-c's tree took
 * about a third of cubed's time on a launch, and the pre-scan's walk over
 * it, before the reader's own, a sixth of the rest: the reader checks the
 * form of every byte it takes, so a launch no longer than the limits'
 * shallow bound passes them whatever it holds, and needs no pre-scan. */
bool cube__dispatch_launch(cube__conn *c, const uint8_t *msg, size_t avail, void *buf,
                           size_t *ret_len, cube__dispatched *ret_dispatched)
{
        static const uint8_t head[] = { 0x93, CUBE__MSG_NOTIFY, 0xa6, 'l', 'a', 'u', 'n', 'c', 'h' };
        cube__session *s = cube__conn_session(c);
        size_t bound = cube__limits_shallow_bound(&s->server->opts.limits, LAUNCH_DEPTH,
                                                  LAUNCH_STR_BYTES);
        size_t len = avail < bound ? avail : bound, plen;

        /* What cube__dispatch refuses before a launch runs, it refuses. */
        if (len < sizeof(head) || memcmp(msg, head, sizeof(head)) != 0 || !s->greeted ||
            s->admin_only)
                return false;
        cube__envelope env = { .type = CUBE__MSG_NOTIFY, .method = "launch", .method_len = 6 };
        cube__msg k = { .conn = c, .session = s, .server = s->server, .env = &env, .buf = buf };
        s->server->asking_uid = s->uid;
        if (!cube__launch_read(&k, msg + sizeof(head), len - sizeof(head), &plen, ret_dispatched))
                return false;
        *ret_len = sizeof(head) + plen;
        return true;
}

cube__dispatched cube__dispatch(cube__conn *c, const msgpack_object *msg, void *buf)
{
        cube__session *s = cube__conn_session(c);
        cube__envelope env;
        const char *why;

        if (cube__envelope_parse(msg, &env, &why) < 0) {
                int64_t msgid = -1;
                uint64_t v;
                if (msg->type == MSGPACK_OBJECT_ARRAY && msg->via.array.size == 4 &&
                    cube__obj_u64(&msg->via.array.ptr[0], &v) && v == CUBE__MSG_REQUEST &&
                    cube__obj_u64(&msg->via.array.ptr[1], &v) && v <= UINT32_MAX)
                        msgid = (int64_t) v;
                cube__conn_protocol_error(c, msgid, "%s", why);
                return CUBE__DISPATCH_DONE;
        }
        if (env.type == CUBE__MSG_RESPONSE) {
                cube__conn_protocol_error(c, -1, "clients send requests and notifications, "
                                          "not responses");
                return CUBE__DISPATCH_DONE;
        }
        int64_t msgid = env.type == CUBE__MSG_REQUEST ? (int64_t) env.msgid : -1;

        for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
                const method *m = &methods[i];
                if (!cube__method_is(&env, m->name))
                        continue;
                if (env.type != m->type) {
                        cube__conn_protocol_error(c, msgid, "%s must be sent as a %s", m->name,
                                                  m->type == CUBE__MSG_REQUEST ? "request" :
                                                  "notification");
                        return CUBE__DISPATCH_DONE;
                }
                if (!s->greeted && strcmp(m->name, "hello") != 0) {
                        cube__conn_protocol_error(c, msgid, "hello must be the first request of "
                                                  "a session");
                        return CUBE__DISPATCH_DONE;
                }
                if (s->admin_only && !m->admin) {
                        if (env.type == CUBE__MSG_REQUEST) {
                                cube_error *e = cube__err_validation("the daemon is draining: a "
                                        "session opened during a drain may look, not work (%s)",
                                        m->name);
                                if (e)
                                        cube__reply_error(s, env.msgid, e);
                                cube_error_free(e);
                        } else {
                                cube__conn_protocol_error(c, -1, "the daemon is draining: a "
                                                          "session opened during a drain may "
                                                          "look, not work (%s)", m->name);
                        }
                        return CUBE__DISPATCH_DONE;
                }
                cube__msg k = {
                        .conn = c, .session = s, .server = s->server, .env = &env,
                        .p = env.params->via.array.ptr, .n = env.params->via.array.size,
                        .buf = buf,
                };
                s->server->asking_uid = s->uid;
                return m->handle(&k);
        }

        if (env.type == CUBE__MSG_REQUEST) {
                cube_error *e = cube__err_validation("unknown method '%.*s'",
                                                     (int) (env.method_len > 64 ? 64 : env.method_len),
                                                     env.method);
                if (e)
                        cube__reply_error(s, env.msgid, e);
                cube_error_free(e);
                return CUBE__DISPATCH_DONE;
        }
        cube__conn_protocol_error(c, -1, "unknown notification '%.*s'",
                                  (int) (env.method_len > 64 ? 64 : env.method_len), env.method);
        return CUBE__DISPATCH_DONE;
}

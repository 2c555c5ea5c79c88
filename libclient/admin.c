/*
 * admin.c - libcubeclient's calls for inspecting and operating a daemon:
 * sessions, streams, metrics, drain and kill_session.
 */
#include <stdlib.h>
#include <string.h>

#include "rpc.h"

uint64_t cube_client_session(const cube_client *c)
{
        return c->session;
}

static bool decode_session(const msgpack_object *m, void *elem)
{
        cube_session_info *v = elem;
        const msgpack_object *o;
        uint64_t pid, uid;

        if (!cube__map_u64(m, "id", &v->id) || !cube__map_u64(m, "pid", &pid) ||
            !cube__map_u64(m, "uid", &uid) || !(o = cube__map_get(m, "name")) ||
            !cube__obj_str(o, v->name, sizeof(v->name)) ||
            !cube__map_u64(m, "streams", &v->streams) ||
            !cube__map_u64(m, "memory_in_use", &v->memory_in_use) ||
            !cube__map_u64(m, "memory_peak", &v->memory_peak) ||
            !cube__map_u64(m, "allocations", &v->allocations) ||
            !cube__map_u64(m, "launches", &v->launches) ||
            !cube__map_u64(m, "bytes_in", &v->bytes_in) ||
            !cube__map_u64(m, "bytes_out", &v->bytes_out) ||
            !cube__map_u64(m, "errors", &v->errors) ||
            !(o = cube__map_get(m, "connected")) || !cube__obj_bool(o, &v->connected))
                return false;
        v->pid = (uint32_t) pid;
        v->uid = (uint32_t) uid;
        return true;
}

cube_error *cube_daemon_sessions(cube_client *c, cube_session_info **ret_sessions, size_t *ret_n)
{
        return cube__request_list(c, "sessions", sizeof(**ret_sessions), decode_session, NULL,
                                  (void **) ret_sessions, ret_n);
}

static bool decode_stream(const msgpack_object *m, void *elem)
{
        cube_stream_info *v = elem;

        return cube__map_u64(m, "session", &v->session) && cube__map_u64(m, "stream", &v->stream) &&
               cube__map_u64(m, "pending", &v->pending);
}

cube_error *cube_daemon_streams(cube_client *c, cube_stream_info **ret_streams, size_t *ret_n)
{
        return cube__request_list(c, "streams", sizeof(**ret_streams), decode_stream, NULL,
                                  (void **) ret_streams, ret_n);
}

static cube_error *deliver_text(cube__call *call, const msgpack_object *r)
{
        char **text = call->ctx;

        if (r->type != MSGPACK_OBJECT_STR)
                return cube__err_answer("metrics");
        /* msgpack-c may give an empty str a NULL pointer. */
        *text = r->via.str.size ? strndup(r->via.str.ptr, r->via.str.size) : strdup("");
        return *text ? NULL : cube__err_generic("out of memory in libcubeclient");
}

cube_error *cube_daemon_metrics(cube_client *c, char **ret_text)
{
        char *text = NULL;
        cube_error *e = cube__request(c, "metrics", NULL, 0, deliver_text, &text);

        if (e) {
                free(text);
                return e;
        }
        *ret_text = text;
        return NULL;
}

/* A string field, cut to fit. */
static bool map_str(const msgpack_object *m, const char *key, char *buf, size_t cap)
{
        const msgpack_object *o = cube__map_get(m, key);

        if (!o || o->type != MSGPACK_OBJECT_STR)
                return false;
        snprintf(buf, cap, "%.*s", (int) o->via.str.size, o->via.str.ptr);
        return true;
}

static bool decode_config(const msgpack_object *m, void *elem)
{
        cube_config_entry *v = elem;
        const msgpack_object *o;

        return map_str(m, "key", v->key, sizeof(v->key)) &&
               map_str(m, "value", v->value, sizeof(v->value)) &&
               map_str(m, "source", v->source, sizeof(v->source)) &&
               (o = cube__map_get(m, "reload")) && cube__obj_bool(o, &v->reloadable);
}

cube_error *cube_daemon_config(cube_client *c, cube_config_entry **ret_entries, size_t *ret_n)
{
        return cube__request_list(c, "config", sizeof(**ret_entries), decode_config, NULL,
                                  (void **) ret_entries, ret_n);
}

static bool decode_ended(const msgpack_object *m, void *elem)
{
        cube_ended_session *v = elem;
        const msgpack_object *o;
        uint64_t pid, uid;

        if (!cube__map_u64(m, "id", &v->id) || !cube__map_u64(m, "pid", &pid) ||
            !cube__map_u64(m, "uid", &uid) || !map_str(m, "name", v->name, sizeof(v->name)) ||
            !cube__map_u64(m, "launches", &v->launches) ||
            !cube__map_u64(m, "bytes_in", &v->bytes_in) ||
            !cube__map_u64(m, "bytes_out", &v->bytes_out) ||
            !cube__map_u64(m, "errors", &v->errors) ||
            !cube__map_u64(m, "memory_peak", &v->memory_peak) ||
            !(o = cube__map_get(m, "opened_seconds")) || !cube__obj_double(o, &v->opened_seconds) ||
            !(o = cube__map_get(m, "duration_seconds")) || !cube__obj_double(o, &v->duration_seconds))
                return false;
        v->pid = (uint32_t) pid;
        v->uid = (uint32_t) uid;
        return true;
}

cube_error *cube_daemon_ended_sessions(cube_client *c, cube_ended_session **ret_sessions,
                                       size_t *ret_n)
{
        return cube__request_list(c, "ended_sessions", sizeof(**ret_sessions), decode_ended, NULL,
                                  (void **) ret_sessions, ret_n);
}

static bool decode_recent(const msgpack_object *m, void *elem)
{
        cube_recent_failure *v = elem;
        const msgpack_object *o;

        return cube__map_u64(m, "id", &v->id) && cube__map_u64(m, "session", &v->session) &&
               map_str(m, "root", v->root, sizeof(v->root)) &&
               (o = cube__map_get(m, "at_seconds")) && cube__obj_double(o, &v->at_seconds);
}

cube_error *cube_daemon_recent_failures(cube_client *c, cube_recent_failure **ret_failures,
                                        size_t *ret_n)
{
        return cube__request_list(c, "recent_failures", sizeof(**ret_failures), decode_recent,
                                  NULL, (void **) ret_failures, ret_n);
}

static bool decode_ban(const msgpack_object *m, void *elem)
{
        cube_ban *v = elem;

        return map_str(m, "kind", v->kind, sizeof(v->kind)) &&
               map_str(m, "who", v->who, sizeof(v->who)) &&
               cube__map_u64(m, "seconds_left", &v->seconds_left);
}

cube_error *cube_daemon_bans(cube_client *c, cube_ban **ret_bans, size_t *ret_n)
{
        return cube__request_list(c, "bans", sizeof(**ret_bans), decode_ban, NULL,
                                  (void **) ret_bans, ret_n);
}

cube_error *cube_daemon_drain(cube_client *c)
{
        return cube__request(c, "drain", NULL, 0, NULL, NULL);
}

cube_error *cube_daemon_drain_timeout(cube_client *c, uint32_t timeout_seconds)
{
        uint64_t t = timeout_seconds;

        return cube__request(c, "drain", &t, 1, NULL, NULL);
}

cube_error *cube_daemon_undrain(cube_client *c)
{
        return cube__request(c, "undrain", NULL, 0, NULL, NULL);
}

cube_error *cube_daemon_kill_session(cube_client *c, uint64_t session)
{
        return cube__request(c, "kill_session", &session, 1, NULL, NULL);
}

static bool decode_share(const msgpack_object *m, void *elem)
{
        cube_share_info *v = elem;
        const msgpack_object *o;
        uint64_t uid, weight, cap, share, owed;

        if (!cube__map_u64(m, "session", &v->session) || !cube__map_u64(m, "uid", &uid) ||
            !(o = cube__map_get(m, "name")) || !cube__obj_str(o, v->name, sizeof(v->name)) ||
            !(o = cube__map_get(m, "tenant")) || !cube__obj_str(o, v->tenant, sizeof(v->tenant)) ||
            !cube__map_u64(m, "weight", &weight) ||
            !(o = cube__map_get(m, "class")) ||
            !cube__obj_str(o, v->class_name, sizeof(v->class_name)) ||
            !cube__map_u64(m, "cap", &cap) || !cube__map_u64(m, "device_ns", &v->device_ns) ||
            !cube__map_u64(m, "window_ns", &v->window_ns) || !cube__map_u64(m, "share", &share) ||
            !cube__map_u64(m, "owed", &owed))
                return false;
        v->uid = (uint32_t) uid;
        v->weight = (uint32_t) weight;
        v->cap = (uint32_t) cap;
        v->share = (uint32_t) share;
        v->owed = (uint32_t) owed;
        return true;
}

cube_error *cube_daemon_shares(cube_client *c, cube_share_info **ret_shares, size_t *ret_n)
{
        return cube__request_list(c, "shares", sizeof(**ret_shares), decode_share, NULL,
                                  (void **) ret_shares, ret_n);
}

cube_error *cube_share_lower(cube_client *c, const char *class_name, uint32_t weight)
{
        cube__call call = { .client = c };
        cube__frame f;

        cube__frame_init(&f);
        call.msgid = cube__next_msgid(c);
        if (cube__pack_request(&f.pk, call.msgid, "share", 2) < 0 ||
            (class_name ? cube__pack_str(&f.pk, class_name) : msgpack_pack_nil(&f.pk)) < 0 ||
            (weight ? msgpack_pack_uint32(&f.pk, weight) : msgpack_pack_nil(&f.pk)) < 0) {
                cube__frame_destroy(&f);
                return cube__err_generic("out of memory in libcubeclient");
        }
        return cube__frame_send(c, &f, &call, NULL, 0);
}

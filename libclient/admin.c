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

typedef struct list {
        void *v;
        size_t n;
} list;

static cube_error *deliver_sessions(cube__call *call, const msgpack_object *r)
{
        list *l = call->ctx;
        cube_session_info *v;

        if (r->type != MSGPACK_OBJECT_ARRAY)
                return cube__err_answer("sessions");
        v = calloc(r->via.array.size + 1, sizeof(*v));
        if (!v)
                return cube__err_generic("out of memory in libcubeclient");
        for (uint32_t i = 0; i < r->via.array.size; i++) {
                const msgpack_object *m = &r->via.array.ptr[i], *o;
                uint64_t pid, uid;
                if (!cube__map_u64(m, "id", &v[i].id) || !cube__map_u64(m, "pid", &pid) ||
                    !cube__map_u64(m, "uid", &uid) || !(o = cube__map_get(m, "name")) ||
                    !cube__obj_str(o, v[i].name, sizeof(v[i].name)) ||
                    !cube__map_u64(m, "streams", &v[i].streams) ||
                    !cube__map_u64(m, "memory_in_use", &v[i].memory_in_use) ||
                    !cube__map_u64(m, "memory_peak", &v[i].memory_peak) ||
                    !cube__map_u64(m, "allocations", &v[i].allocations) ||
                    !cube__map_u64(m, "launches", &v[i].launches) ||
                    !cube__map_u64(m, "bytes_in", &v[i].bytes_in) ||
                    !cube__map_u64(m, "bytes_out", &v[i].bytes_out) ||
                    !cube__map_u64(m, "errors", &v[i].errors) ||
                    !(o = cube__map_get(m, "connected")) || !cube__obj_bool(o, &v[i].connected)) {
                        free(v);
                        return cube__err_answer("sessions");
                }
                v[i].pid = (uint32_t) pid;
                v[i].uid = (uint32_t) uid;
        }
        l->v = v;
        l->n = r->via.array.size;
        return NULL;
}

cube_error *cube_daemon_sessions(cube_client *c, cube_session_info **ret_sessions, size_t *ret_n)
{
        list l = {0};
        cube_error *e = cube__request(c, "sessions", NULL, 0, deliver_sessions, &l);

        if (e)
                return e;
        *ret_sessions = l.v;
        *ret_n = l.n;
        return NULL;
}

static cube_error *deliver_streams(cube__call *call, const msgpack_object *r)
{
        list *l = call->ctx;
        cube_stream_info *v;

        if (r->type != MSGPACK_OBJECT_ARRAY)
                return cube__err_answer("streams");
        v = calloc(r->via.array.size + 1, sizeof(*v));
        if (!v)
                return cube__err_generic("out of memory in libcubeclient");
        for (uint32_t i = 0; i < r->via.array.size; i++) {
                const msgpack_object *m = &r->via.array.ptr[i];
                if (!cube__map_u64(m, "session", &v[i].session) || !cube__map_u64(m, "stream", &v[i].stream) ||
                    !cube__map_u64(m, "pending", &v[i].pending)) {
                        free(v);
                        return cube__err_answer("streams");
                }
        }
        l->v = v;
        l->n = r->via.array.size;
        return NULL;
}

cube_error *cube_daemon_streams(cube_client *c, cube_stream_info **ret_streams, size_t *ret_n)
{
        list l = {0};
        cube_error *e = cube__request(c, "streams", NULL, 0, deliver_streams, &l);

        if (e)
                return e;
        *ret_streams = l.v;
        *ret_n = l.n;
        return NULL;
}

static cube_error *deliver_text(cube__call *call, const msgpack_object *r)
{
        char **text = call->ctx;

        if (r->type != MSGPACK_OBJECT_STR)
                return cube__err_answer("metrics");
        *text = strndup(r->via.str.ptr, r->via.str.size);
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

cube_error *cube_daemon_drain(cube_client *c)
{
        return cube__request(c, "drain", NULL, 0, NULL, NULL);
}

cube_error *cube_daemon_kill_session(cube_client *c, uint64_t session)
{
        return cube__request(c, "kill_session", &session, 1, NULL, NULL);
}

/*
 * graphs.c - libcubeclient's graph capture: graph_prepare, begin_capture,
 * end_capture, replay and graph_destroy on the calling thread's stream, and
 * the daemon's list of windows, graphs and captures (cubectl graphs).
 *
 * Launches are batched, and a batch goes out ahead of the next frame any
 * call sends, so the launches a thread sends before cube_begin_capture run,
 * and those it sends before cube_end_capture are recorded. graph_destroy is
 * a notification and joins the batch the same way.
 */
#include <stdlib.h>
#include <string.h>

#include "rpc.h"

cube_error *cube_graph_prepare(cube_client *c)
{
        uint64_t stream = cube_stream_current();

        return cube__request(c, "graph_prepare", &stream, 1, NULL, NULL);
}

cube_error *cube_begin_capture(cube_client *c)
{
        uint64_t stream = cube_stream_current();

        return cube__request(c, "begin_capture", &stream, 1, NULL, NULL);
}

static cube_error *deliver_graph(cube__call *call, const msgpack_object *r)
{
        if (!cube__obj_u64(r, call->ctx))
                return cube__err_answer("end_capture");
        return NULL;
}

cube_error *cube_end_capture(cube_client *c, uint64_t *ret_graph)
{
        uint64_t stream = cube_stream_current(), graph;
        cube_error *e = cube__request(c, "end_capture", &stream, 1, deliver_graph, &graph);

        if (e)
                return e;
        *ret_graph = graph;
        return NULL;
}

cube_error *cube_replay(cube_client *c, uint64_t graph)
{
        uint64_t params[2] = { cube_stream_current(), graph };

        return cube__request(c, "replay", params, 2, NULL, NULL);
}

cube_error *cube_replay_times(cube_client *c, uint64_t graph, uint32_t times)
{
        uint64_t params[3] = { cube_stream_current(), graph, times };

        if (times == 0 || times > 65536)
                return cube__err_validation("cube_replay_times: times must be 1 to 65536, not %u",
                                            times);
        return cube__request(c, "replay", params, 3, NULL, NULL);
}

cube_error *cube_graph_destroy(cube_client *c, uint64_t graph)
{
        cube__frame f;
        cube_error *e;

        cube__frame_init(&f);
        if (cube__pack_notify(&f.pk, "graph_destroy", 2) < 0 ||
            msgpack_pack_uint64(&f.pk, cube_stream_current()) < 0 ||
            msgpack_pack_uint64(&f.pk, graph) < 0) {
                cube__frame_destroy(&f);
                return cube__err_generic("out of memory in libcubeclient");
        }
        e = cube__send_batched(c, f.data, f.len);
        cube__frame_destroy(&f);
        return e;
}

static bool decode_capture(const msgpack_object *m, void *elem)
{
        cube_capture_info *ci = elem;
        const msgpack_object *v;

        return cube__map_u64(m, "session", &ci->session) &&
               (v = cube__map_get(m, "kind")) && cube__obj_str(v, ci->kind, sizeof(ci->kind)) &&
               cube__map_u64(m, "stream", &ci->stream) && cube__map_u64(m, "id", &ci->id) &&
               (v = cube__map_get(m, "state")) && cube__obj_str(v, ci->state, sizeof(ci->state)) &&
               cube__map_u64(m, "launches", &ci->launches) &&
               cube__map_u64(m, "pages", &ci->pages) &&
               cube__map_u64(m, "page_bytes", &ci->page_bytes) &&
               cube__map_u64(m, "replays", &ci->replays) &&
               cube__map_u64(m, "device_ns", &ci->device_ns);
}

cube_error *cube_daemon_captures(cube_client *c, cube_capture_info **ret_captures, size_t *ret_n)
{
        return cube__request_list(c, "captures", sizeof(**ret_captures), decode_capture, NULL,
                                  (void **) ret_captures, ret_n);
}

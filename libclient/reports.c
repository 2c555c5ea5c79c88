/*
 * reports.c - libcubeclient's view of device memory: per-stream pool
 * reports, the stream ids to iterate, the device-wide view, and allocation
 * modes.
 */
#include <stdlib.h>
#include <string.h>

#include "rpc.h"

/* Reads {stream, pools: [...]} into ret. */
static bool parse_report(const msgpack_object *o, cube_memory_report *ret)
{
        const msgpack_object *pools = cube__map_get(o, "pools");
        cube_memory_report r = {0};

        if (!cube__map_u64(o, "stream", &r.stream) || !pools || pools->type != MSGPACK_OBJECT_ARRAY ||
            pools->via.array.size > 4)
                return false;
        for (uint32_t i = 0; i < pools->via.array.size; i++) {
                const msgpack_object *p = &pools->via.array.ptr[i], *kind = cube__map_get(p, "kind");
                cube_pool_report *q = &r.pools[i];
                if (!kind || !cube__obj_str(kind, q->kind, sizeof(q->kind)) ||
                    !cube__map_u64(p, "page_size", &q->page_size) ||
                    !cube__map_u64(p, "max_slice", &q->max_slice) ||
                    !cube__map_u64(p, "allocations", &q->allocations) ||
                    !cube__map_u64(p, "bytes_in_use", &q->bytes_in_use) ||
                    !cube__map_u64(p, "bytes_padding", &q->bytes_padding) ||
                    !cube__map_u64(p, "bytes_reserved", &q->bytes_reserved) ||
                    !cube__map_u64(p, "pages", &q->pages) || !cube__map_u64(p, "pages_peak", &q->pages_peak) ||
                    !cube__map_u64(p, "largest_alloc", &q->largest_alloc))
                        return false;
        }
        r.n_pools = pools->via.array.size;
        *ret = r;
        return true;
}

typedef struct one_report {
        bool exists;
        cube_memory_report report;
} one_report;

static cube_error *deliver_report(cube__call *call, const msgpack_object *r)
{
        one_report *o = call->ctx;

        if (r->type == MSGPACK_OBJECT_NIL)
                return NULL;
        if (!parse_report(r, &o->report))
                return cube__err_answer("memory_report");
        o->exists = true;
        return NULL;
}

cube_error *cube_stream_memory_report(cube_client *c, uint64_t stream, bool *ret_exists,
                               cube_memory_report *ret_report)
{
        one_report o = {0};
        cube_error *e = cube__request(c, "memory_report", &stream, 1, deliver_report, &o);

        if (e)
                return e;
        *ret_exists = o.exists;
        if (o.exists) {
                o.report.session = cube_client_session(c);
                *ret_report = o.report;
        }
        return NULL;
}

static bool decode_id(const msgpack_object *o, void *elem)
{
        return cube__obj_u64(o, elem);
}

cube_error *cube_stream_ids(cube_client *c, uint64_t **ret_ids, size_t *ret_n)
{
        return cube__request_list(c, "stream_ids", sizeof(**ret_ids), decode_id, NULL,
                                  (void **) ret_ids, ret_n);
}

static bool decode_session_report(const msgpack_object *m, void *elem)
{
        cube_memory_report *v = elem;
        const msgpack_object *rep = cube__map_get(m, "report");

        return rep && parse_report(rep, v) && cube__map_u64(m, "session", &v->session);
}

cube_error *cube_daemon_memory(cube_client *c, cube_memory_report **ret_reports, size_t *ret_n)
{
        return cube__request_list(c, "memory", sizeof(**ret_reports), decode_session_report, NULL,
                                  (void **) ret_reports, ret_n);
}

cube_error *cube_set_allocation_mode(cube_client *c, cube_allocation_mode mode)
{
        cube__frame f;
        cube_error *e;

        if ((unsigned) mode > CUBE_ALLOCATION_DEDICATED)
                return cube__err_validation("unknown allocation mode %d", (int) mode);
        cube__frame_init(&f);
        if (cube__pack_notify(&f.pk, "allocation_mode", 2) < 0 ||
            msgpack_pack_uint64(&f.pk, cube_stream_current()) < 0 ||
            msgpack_pack_uint32(&f.pk, (uint32_t) mode) < 0) {
                cube__frame_destroy(&f);
                return cube__err_generic("out of memory in libcubeclient");
        }
        e = cube__frame_send(c, &f, NULL, NULL, 0);
        return e;
}

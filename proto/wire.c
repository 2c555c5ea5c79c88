/*
 * wire.c - the msgpack-RPC envelope and the common value shapes of protocol v1.
 *
 * Decoding is defensive: every accessor checks the object's type and range,
 * so a hostile peer can at worst get its message refused.
 */
#include <errno.h>
#include <string.h>

#include "errors.h"
#include "wire.h"

#define PACK(expr) do { if ((expr) < 0) return -ENOMEM; } while (0)

int cube__envelope_parse(const msgpack_object *o, cube__envelope *ret, const char **ret_why)
{
        cube__envelope env = {0};
        uint64_t type, msgid;

        if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size < 3) {
                *ret_why = "a message must be an array of 3 or 4 elements";
                return -EBADMSG;
        }
        const msgpack_object *v = o->via.array.ptr;
        if (!cube__obj_u64(&v[0], &type) || type > CUBE__MSG_NOTIFY) {
                *ret_why = "a message must start with its type: 0, 1 or 2";
                return -EBADMSG;
        }
        env.type = (int) type;
        if (env.type == CUBE__MSG_NOTIFY) {
                if (o->via.array.size != 3) {
                        *ret_why = "a notification must be [2, method, params]";
                        return -EBADMSG;
                }
                v--;    /* align the fields with the request layout */
        } else if (o->via.array.size != 4) {
                *ret_why = "a request or response must be an array of 4 elements";
                return -EBADMSG;
        } else {
                if (!cube__obj_u64(&v[1], &msgid) || msgid > UINT32_MAX) {
                        *ret_why = "a msgid must be an unsigned 32-bit integer";
                        return -EBADMSG;
                }
                env.msgid = (uint32_t) msgid;
        }

        if (env.type == CUBE__MSG_RESPONSE) {
                env.error = &v[2];
                env.result = &v[3];
        } else {
                if (v[2].type != MSGPACK_OBJECT_STR || v[2].via.str.size == 0) {
                        *ret_why = "a method name must be a non-empty string";
                        return -EBADMSG;
                }
                if (v[3].type != MSGPACK_OBJECT_ARRAY) {
                        *ret_why = "params must be an array";
                        return -EBADMSG;
                }
                env.method = v[2].via.str.ptr;
                env.method_len = v[2].via.str.size;
                env.params = &v[3];
        }
        *ret = env;
        return 0;
}

bool cube__method_is(const cube__envelope *env, const char *name)
{
        size_t n = strlen(name);
        return env->method_len == n && memcmp(env->method, name, n) == 0;
}

bool cube__obj_u64(const msgpack_object *o, uint64_t *ret)
{
        if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
                return false;
        *ret = o->via.u64;
        return true;
}

bool cube__obj_u32(const msgpack_object *o, uint32_t *ret)
{
        uint64_t v;

        if (!cube__obj_u64(o, &v) || v > UINT32_MAX)
                return false;
        *ret = (uint32_t) v;
        return true;
}

bool cube__obj_bool(const msgpack_object *o, bool *ret)
{
        if (o->type != MSGPACK_OBJECT_BOOLEAN)
                return false;
        *ret = o->via.boolean;
        return true;
}

bool cube__obj_double(const msgpack_object *o, double *ret)
{
        switch (o->type) {
        case MSGPACK_OBJECT_FLOAT32:
        case MSGPACK_OBJECT_FLOAT64:
                *ret = o->via.f64;
                return true;
        case MSGPACK_OBJECT_POSITIVE_INTEGER:
                *ret = (double) o->via.u64;
                return true;
        default:
                return false;
        }
}

bool cube__obj_str(const msgpack_object *o, char *buf, size_t cap)
{
        if (o->type != MSGPACK_OBJECT_STR || o->via.str.size >= cap)
                return false;
        /* msgpack-c may give an empty str a NULL pointer, which memcpy must not see. */
        if (o->via.str.size)
                memcpy(buf, o->via.str.ptr, o->via.str.size);
        buf[o->via.str.size] = '\0';
        return true;
}

bool cube__obj_bin(const msgpack_object *o, const void **ret_ptr, size_t *ret_len)
{
        if (o->type != MSGPACK_OBJECT_BIN)
                return false;
        *ret_ptr = o->via.bin.ptr;
        *ret_len = o->via.bin.size;
        return true;
}

bool cube__obj_array(const msgpack_object *o, const msgpack_object_array **ret)
{
        if (o->type != MSGPACK_OBJECT_ARRAY)
                return false;
        *ret = &o->via.array;
        return true;
}

const msgpack_object *cube__map_get(const msgpack_object *map, const char *key)
{
        size_t n = strlen(key);

        if (map->type != MSGPACK_OBJECT_MAP)
                return NULL;
        for (uint32_t i = 0; i < map->via.map.size; i++) {
                const msgpack_object *k = &map->via.map.ptr[i].key;
                if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
                    memcmp(k->via.str.ptr, key, n) == 0)
                        return &map->via.map.ptr[i].val;
        }
        return NULL;
}

uint64_t cube_handle_len(const cube_handle *h)
{
        if (h->offset_start > h->size || h->offset_end > h->size - h->offset_start)
                return 0;
        return h->size - h->offset_start - h->offset_end;
}

cube_handle cube_handle_slice(const cube_handle *h, uint64_t offset_start, uint64_t offset_end)
{
        cube_handle s = *h;

        s.offset_start += offset_start;
        s.offset_end += offset_end;
        return s;
}

bool cube__obj_handle(const msgpack_object *o, cube_handle *ret)
{
        cube_handle h = {0};

        if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 4)
                return false;
        const msgpack_object *v = o->via.array.ptr;
        if (!cube__obj_u64(&v[0], &h.service) || !cube__obj_u64(&v[1], &h.memory) ||
            !cube__obj_u64(&v[2], &h.offset_start) || !cube__obj_u64(&v[3], &h.offset_end))
                return false;
        *ret = h;
        return true;
}

int cube__pack_handle(msgpack_packer *pk, const cube_handle *h)
{
        PACK(msgpack_pack_array(pk, 4));
        PACK(msgpack_pack_uint64(pk, h->service));
        PACK(msgpack_pack_uint64(pk, h->memory));
        PACK(msgpack_pack_uint64(pk, h->offset_start));
        PACK(msgpack_pack_uint64(pk, h->offset_end));
        return 0;
}

int cube__pack_str(msgpack_packer *pk, const char *s)
{
        size_t n = strlen(s);

        PACK(msgpack_pack_str(pk, n));
        PACK(msgpack_pack_str_body(pk, s, n));
        return 0;
}

int cube__pack_request(msgpack_packer *pk, uint32_t msgid, const char *method, uint32_t n_params)
{
        PACK(msgpack_pack_array(pk, 4));
        PACK(msgpack_pack_uint32(pk, CUBE__MSG_REQUEST));
        PACK(msgpack_pack_uint32(pk, msgid));
        PACK(cube__pack_str(pk, method));
        PACK(msgpack_pack_array(pk, n_params));
        return 0;
}

int cube__pack_notify(msgpack_packer *pk, const char *method, uint32_t n_params)
{
        PACK(msgpack_pack_array(pk, 3));
        PACK(msgpack_pack_uint32(pk, CUBE__MSG_NOTIFY));
        PACK(cube__pack_str(pk, method));
        PACK(msgpack_pack_array(pk, n_params));
        return 0;
}

int cube__pack_response_ok(msgpack_packer *pk, uint32_t msgid)
{
        PACK(msgpack_pack_array(pk, 4));
        PACK(msgpack_pack_uint32(pk, CUBE__MSG_RESPONSE));
        PACK(msgpack_pack_uint32(pk, msgid));
        PACK(msgpack_pack_nil(pk));
        return 0;
}

int cube__pack_response_error(msgpack_packer *pk, uint32_t msgid, const cube_error *error)
{
        PACK(msgpack_pack_array(pk, 4));
        PACK(msgpack_pack_uint32(pk, CUBE__MSG_RESPONSE));
        PACK(msgpack_pack_uint32(pk, msgid));
        PACK(cube__err_pack(pk, error));
        PACK(msgpack_pack_nil(pk));
        return 0;
}

int cube__pack_kv_str(msgpack_packer *pk, const char *key, const char *value)
{
        PACK(cube__pack_str(pk, key));
        PACK(cube__pack_str(pk, value));
        return 0;
}

int cube__pack_kv_u64(msgpack_packer *pk, const char *key, uint64_t value)
{
        PACK(cube__pack_str(pk, key));
        PACK(msgpack_pack_uint64(pk, value));
        return 0;
}

int cube__pack_kv_u32x3(msgpack_packer *pk, const char *key, const uint32_t v[3])
{
        PACK(cube__pack_str(pk, key));
        PACK(msgpack_pack_array(pk, 3));
        for (int i = 0; i < 3; i++)
                PACK(msgpack_pack_uint32(pk, v[i]));
        return 0;
}

static bool obj_u32x3(const msgpack_object *o, uint32_t ret[3])
{
        uint32_t v[3];

        if (!o || o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3)
                return false;
        for (int i = 0; i < 3; i++)
                if (!cube__obj_u32(&o->via.array.ptr[i], &v[i]))
                        return false;
        memcpy(ret, v, sizeof(v));
        return true;
}

static bool map_u64(const msgpack_object *map, const char *key, uint64_t *ret)
{
        const msgpack_object *v = cube__map_get(map, key);
        return v && cube__obj_u64(v, ret);
}

static bool map_u32(const msgpack_object *map, const char *key, uint32_t *ret)
{
        const msgpack_object *v = cube__map_get(map, key);
        return v && cube__obj_u32(v, ret);
}

int cube__pack_properties(msgpack_packer *pk, const cube_device_properties *p)
{
        PACK(msgpack_pack_map(pk, 14));
        PACK(cube__pack_kv_str(pk, "name", p->name));
        PACK(cube__pack_kv_u64(pk, "memory_bytes", p->memory_bytes));
        PACK(cube__pack_kv_u64(pk, "max_page_size", p->max_page_size));
        PACK(cube__pack_kv_u64(pk, "alignment", p->alignment));
        PACK(cube__pack_kv_u64(pk, "plane_size_min", p->plane_size_min));
        PACK(cube__pack_kv_u64(pk, "plane_size_max", p->plane_size_max));
        PACK(cube__pack_kv_u64(pk, "max_bindings", p->max_bindings));
        PACK(cube__pack_kv_u64(pk, "max_shared_memory_size", p->max_shared_memory_size));
        PACK(cube__pack_kv_u32x3(pk, "max_cube_count", p->max_cube_count));
        PACK(cube__pack_kv_u64(pk, "max_units_per_cube", p->max_units_per_cube));
        PACK(cube__pack_kv_u32x3(pk, "max_cube_dim", p->max_cube_dim));
        PACK(cube__pack_kv_u64(pk, "num_streaming_multiprocessors",
                               p->num_streaming_multiprocessors));
        PACK(cube__pack_kv_u64(pk, "num_cpu_cores", p->num_cpu_cores));
        PACK(cube__pack_kv_u64(pk, "load_width", 128));
        return 0;
}

bool cube__obj_properties(const msgpack_object *o, cube_device_properties *ret)
{
        cube_device_properties p = {0};
        const msgpack_object *name = cube__map_get(o, "name");

        if (!name || !cube__obj_str(name, p.name, sizeof(p.name)) ||
            !map_u64(o, "memory_bytes", &p.memory_bytes) ||
            !map_u64(o, "max_page_size", &p.max_page_size) ||
            !map_u32(o, "alignment", &p.alignment) ||
            !map_u32(o, "plane_size_min", &p.plane_size_min) ||
            !map_u32(o, "plane_size_max", &p.plane_size_max) ||
            !map_u32(o, "max_bindings", &p.max_bindings) ||
            !map_u32(o, "max_shared_memory_size", &p.max_shared_memory_size) ||
            !obj_u32x3(cube__map_get(o, "max_cube_count"), p.max_cube_count) ||
            !map_u32(o, "max_units_per_cube", &p.max_units_per_cube) ||
            !obj_u32x3(cube__map_get(o, "max_cube_dim"), p.max_cube_dim) ||
            !map_u32(o, "num_streaming_multiprocessors", &p.num_streaming_multiprocessors) ||
            !map_u32(o, "num_cpu_cores", &p.num_cpu_cores))
                return false;
        *ret = p;
        return true;
}

int cube__pack_limits(msgpack_packer *pk, const cube_protocol_limits *l)
{
        PACK(msgpack_pack_map(pk, 5));
        PACK(cube__pack_kv_u64(pk, "max_message_bytes", l->max_message_bytes));
        PACK(cube__pack_kv_u64(pk, "max_depth", l->max_depth));
        PACK(cube__pack_kv_u64(pk, "max_container", l->max_container));
        PACK(cube__pack_kv_u64(pk, "max_str_bytes", l->max_str_bytes));
        PACK(cube__pack_kv_u64(pk, "max_objects", l->max_objects));
        return 0;
}

bool cube__obj_limits(const msgpack_object *o, cube_protocol_limits *ret)
{
        cube_protocol_limits l = {0};

        if (!map_u64(o, "max_message_bytes", &l.max_message_bytes) ||
            !map_u32(o, "max_depth", &l.max_depth) ||
            !map_u32(o, "max_container", &l.max_container) ||
            !map_u64(o, "max_str_bytes", &l.max_str_bytes) ||
            !map_u64(o, "max_objects", &l.max_objects))
                return false;
        *ret = l;
        return true;
}

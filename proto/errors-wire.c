/*
 * errors-wire.c - the error taxonomy on the wire: every variant and field,
 * nested, as [variant, payload] (PROTOCOL.md, section 6), and back.
 *
 * Decoding trusts nothing: a tree deeper than CUBE_ERR_MAX_DEPTH, a variant
 * of the wrong family where another is nested, or a payload of the wrong
 * shape is refused, never half-built.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors-table.h"
#include "wire.h"

/* ---------------------------------------------------------------------------
 * Encoding: [variant, payload]
 * ------------------------------------------------------------------------- */

static int pack_str(msgpack_packer *pk, const char *s)
{
        size_t n = s ? strlen(s) : 0;

        if (msgpack_pack_str(pk, n) != 0)
                return -ENOMEM;
        if (msgpack_pack_str_body(pk, s ? s : "", n) != 0)
                return -ENOMEM;
        return 0;
}

static int pack_key_str(msgpack_packer *pk, const char *key, const char *s)
{
        int r = pack_str(pk, key);

        return r < 0 ? r : pack_str(pk, s);
}

static int pack_key_u64(msgpack_packer *pk, const char *key, uint64_t v)
{
        int r = pack_str(pk, key);

        if (r < 0)
                return r;
        return msgpack_pack_uint64(pk, v) != 0 ? -ENOMEM : 0;
}

static int pack_key_dim(msgpack_packer *pk, const char *key, const uint32_t d[3])
{
        int r = pack_str(pk, key);

        if (r < 0)
                return r;
        if (msgpack_pack_array(pk, 3) != 0)
                return -ENOMEM;
        for (size_t i = 0; i < 3; i++)
                if (msgpack_pack_uint32(pk, d[i]) != 0)
                        return -ENOMEM;
        return 0;
}

static int pack_value(msgpack_packer *pk, const cube_error *e);

static int pack_key_value(msgpack_packer *pk, const char *key, const cube_error *e)
{
        int r = pack_str(pk, key);

        return r < 0 ? r : pack_value(pk, e);
}

/* Encodes one node and what hangs under it. A node missing what its kind
 * requires (only reachable by building one by hand) is refused with -EINVAL
 * rather than sent as something the other side would reject. */
static int pack_value(msgpack_packer *pk, const cube_error *e)
{
        const struct cube__err_info *info = e ? cube__err_info(e->kind) : NULL;
        const cube_error *source;
        int r;

        if (!info)
                return -EINVAL;

        source = cube__err_source(e);
        switch (info->payload) {
        case PAYLOAD_WRAP:
        case PAYLOAD_MAPPING:
        case PAYLOAD_UNWRITTEN:
                if (!source)
                        return -EINVAL;
                break;
        case PAYLOAD_OPERATION:
                if (e->operation < 0 || e->operation >= CUBE_COLLECTIVE_MAX_)
                        return -EINVAL;
                break;
        default:
                break;
        }

        if (msgpack_pack_array(pk, 2) != 0)
                return -ENOMEM;
        r = pack_str(pk, info->name);
        if (r < 0)
                return r;

        switch (info->payload) {
        case PAYLOAD_UNIT:
                return msgpack_pack_nil(pk) != 0 ? -ENOMEM : 0;

        case PAYLOAD_WRAP:
                return pack_value(pk, source);

        case PAYLOAD_TEXT:
                if (msgpack_pack_map(pk, 1) != 0)
                        return -ENOMEM;
                return pack_key_str(pk, info->key, e->text);

        case PAYLOAD_TEXT_PAIR:
                if (msgpack_pack_map(pk, 2) != 0)
                        return -ENOMEM;
                r = pack_key_str(pk, info->key, e->text);
                if (r < 0)
                        return r;
                return pack_key_str(pk, info->key2, e->text2);

        case PAYLOAD_SIZE:
                if (msgpack_pack_map(pk, 1) != 0)
                        return -ENOMEM;
                return pack_key_u64(pk, "size", e->a);

        case PAYLOAD_LIMIT:
                if (msgpack_pack_map(pk, 2) != 0)
                        return -ENOMEM;
                r = pack_key_u64(pk, "requested", e->a);
                if (r < 0)
                        return r;
                return pack_key_u64(pk, "max", e->b);

        case PAYLOAD_DIM:
                if (msgpack_pack_map(pk, 2) != 0)
                        return -ENOMEM;
                r = pack_key_dim(pk, "requested", e->dim_requested);
                if (r < 0)
                        return r;
                return pack_key_dim(pk, "max", e->dim_max);

        case PAYLOAD_OPERATION:
                if (msgpack_pack_map(pk, 1) != 0)
                        return -ENOMEM;
                return pack_key_str(pk, "operation", cube__err_collective_names[e->operation]);

        case PAYLOAD_MAPPING:
                if (msgpack_pack_map(pk, 2) != 0)
                        return -ENOMEM;
                r = pack_key_u64(pk, "size", e->a);
                if (r < 0)
                        return r;
                return pack_key_value(pk, "source", source);

        case PAYLOAD_UNWRITTEN:
                if (msgpack_pack_map(pk, 4) != 0)
                        return -ENOMEM;
                r = pack_key_u64(pk, "failure", e->a);
                if (r < 0)
                        return r;
                r = pack_key_u64(pk, "claimed", e->b);
                if (r < 0)
                        return r;
                r = pack_str(pk, "chain");
                if (r < 0)
                        return r;
                if (msgpack_pack_array(pk, e->n_chain) != 0)
                        return -ENOMEM;
                for (size_t i = 0; i < e->n_chain; i++) {
                        r = pack_str(pk, e->chain[i]);
                        if (r < 0)
                                return r;
                }
                return pack_key_value(pk, "root", source);

        case PAYLOAD_SEVERAL:
                if (msgpack_pack_map(pk, 1) != 0)
                        return -ENOMEM;
                r = pack_str(pk, "errors");
                if (r < 0)
                        return r;
                if (msgpack_pack_array(pk, e->n_members) != 0)
                        return -ENOMEM;
                for (size_t i = 0; i < e->n_members; i++) {
                        r = pack_value(pk, e->members[i]);
                        if (r < 0)
                                return r;
                }
                return 0;
        }

        return -EINVAL;
}

int cube__err_pack(msgpack_packer *pk, const cube_error *e)
{
        return pack_value(pk, e);
}

/* ---------------------------------------------------------------------------
 * Decoding
 *
 * Every check answers -EBADMSG; only a failed allocation answers -ENOMEM. A
 * half-built node is freed on the way out, so nothing leaks on any path.
 * ------------------------------------------------------------------------- */

static int unpack_value(const msgpack_object *o, cube__err_family family, unsigned depth,
                        cube_error **ret);

static const struct cube__err_info *kind_by_name(cube__err_family family, const char *name,
                                                 size_t n, cube_error_kind *ret_kind)
{
        for (size_t k = 0; k < sizeof(cube__err_table) / sizeof(cube__err_table[0]); k++) {
                const struct cube__err_info *info = &cube__err_table[k];

                if (!info->name || info->family != family)
                        continue;
                if (strlen(info->name) == n && memcmp(info->name, name, n) == 0) {
                        *ret_kind = (cube_error_kind) k;
                        return info;
                }
        }
        return NULL;
}

/* msgpack strings are counted, not terminated. One holding a NUL cannot
 * become a C string without changing what it says, so it is refused. */
static int obj_str(const msgpack_object *o, char **ret)
{
        char *s;

        if (!o || o->type != MSGPACK_OBJECT_STR)
                return -EBADMSG;
        if (memchr(o->via.str.ptr, '\0', o->via.str.size))
                return -EBADMSG;

        s = malloc((size_t) o->via.str.size + 1);
        if (!s)
                return -ENOMEM;
        memcpy(s, o->via.str.ptr, o->via.str.size);
        s[o->via.str.size] = '\0';
        *ret = s;
        return 0;
}

static int obj_uint(const msgpack_object *o, uint64_t max, uint64_t *ret)
{
        uint64_t v;

        if (!o)
                return -EBADMSG;

        if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
                v = o->via.u64;
        else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER && o->via.i64 >= 0)
                v = (uint64_t) o->via.i64;
        else
                return -EBADMSG;

        if (v > max)
                return -EBADMSG;
        *ret = v;
        return 0;
}

static int obj_dim(const msgpack_object *o, uint32_t ret[3])
{
        uint64_t v;
        int r;

        if (!o || o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3)
                return -EBADMSG;

        for (size_t i = 0; i < 3; i++) {
                r = obj_uint(&o->via.array.ptr[i], UINT32_MAX, &v);
                if (r < 0)
                        return r;
                ret[i] = (uint32_t) v;
        }
        return 0;
}

static int obj_operation(const msgpack_object *o, int *ret)
{
        if (!o || o->type != MSGPACK_OBJECT_STR)
                return -EBADMSG;

        for (int i = 0; i < CUBE_COLLECTIVE_MAX_; i++) {
                const char *name = cube__err_collective_names[i];

                if (strlen(name) == o->via.str.size &&
                    memcmp(name, o->via.str.ptr, o->via.str.size) == 0) {
                        *ret = i;
                        return 0;
                }
        }
        return -EBADMSG;
}

/* Decodes the one error a wrapping variant, StorageMappingFailed or
 * Unwritten stands on, into members[0]. */
static int unpack_source(cube_error *e, const msgpack_object *o, cube__err_family family,
                         unsigned depth)
{
        cube_error *source = NULL;
        int r;

        if (!o)
                return -EBADMSG;

        r = unpack_value(o, family, depth + 1, &source);
        if (r < 0)
                return r;
        return cube__err_attach(e, source);
}

static int unpack_chain(cube_error *e, const msgpack_object *o)
{
        int r;

        if (!o || o->type != MSGPACK_OBJECT_ARRAY)
                return -EBADMSG;
        if (o->via.array.size == 0)
                return 0;

        e->chain = calloc(o->via.array.size, sizeof(*e->chain));
        if (!e->chain)
                return -ENOMEM;
        e->n_chain = o->via.array.size;

        for (uint32_t i = 0; i < o->via.array.size; i++) {
                r = obj_str(&o->via.array.ptr[i], &e->chain[i]);
                if (r < 0)
                        return r;
        }
        return 0;
}

static int unpack_members(cube_error *e, const msgpack_object *o, unsigned depth)
{
        int r;

        if (!o || o->type != MSGPACK_OBJECT_ARRAY)
                return -EBADMSG;
        if (o->via.array.size == 0)
                return 0;

        e->members = calloc(o->via.array.size, sizeof(*e->members));
        if (!e->members)
                return -ENOMEM;
        e->n_members = o->via.array.size;

        for (uint32_t i = 0; i < o->via.array.size; i++) {
                r = unpack_value(&o->via.array.ptr[i], CUBE__FAMILY_SERVER, depth + 1,
                                 &e->members[i]);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Fills e's fields from its payload p. On failure e may hold part of them;
 * the caller frees it whole. */
static int unpack_payload(cube_error *e, const struct cube__err_info *info, const msgpack_object *p,
                          unsigned depth)
{
        uint64_t v;
        int r;

        if (info->payload == PAYLOAD_UNIT)
                return p->type == MSGPACK_OBJECT_NIL ? 0 : -EBADMSG;

        if (info->payload == PAYLOAD_WRAP)
                return unpack_source(e, p, info->inner, depth);

        if (p->type != MSGPACK_OBJECT_MAP)
                return -EBADMSG;

        switch (info->payload) {
        case PAYLOAD_TEXT:
                return obj_str(cube__map_get(p, info->key), &e->text);

        case PAYLOAD_TEXT_PAIR:
                r = obj_str(cube__map_get(p, info->key), &e->text);
                if (r < 0)
                        return r;
                return obj_str(cube__map_get(p, info->key2), &e->text2);

        case PAYLOAD_SIZE:
                return obj_uint(cube__map_get(p, "size"), UINT64_MAX, &e->a);

        case PAYLOAD_LIMIT:
                v = info->narrow ? UINT32_MAX : UINT64_MAX;
                r = obj_uint(cube__map_get(p, "requested"), v, &e->a);
                if (r < 0)
                        return r;
                return obj_uint(cube__map_get(p, "max"), v, &e->b);

        case PAYLOAD_DIM:
                r = obj_dim(cube__map_get(p, "requested"), e->dim_requested);
                if (r < 0)
                        return r;
                return obj_dim(cube__map_get(p, "max"), e->dim_max);

        case PAYLOAD_OPERATION:
                return obj_operation(cube__map_get(p, "operation"), &e->operation);

        case PAYLOAD_MAPPING:
                r = obj_uint(cube__map_get(p, "size"), UINT64_MAX, &e->a);
                if (r < 0)
                        return r;
                return unpack_source(e, cube__map_get(p, "source"), info->inner, depth);

        case PAYLOAD_UNWRITTEN:
                r = obj_uint(cube__map_get(p, "failure"), UINT64_MAX, &e->a);
                if (r < 0)
                        return r;
                r = obj_uint(cube__map_get(p, "claimed"), UINT32_MAX, &e->b);
                if (r < 0)
                        return r;
                r = unpack_chain(e, cube__map_get(p, "chain"));
                if (r < 0)
                        return r;
                return unpack_source(e, cube__map_get(p, "root"), info->inner, depth);

        case PAYLOAD_SEVERAL:
                return unpack_members(e, cube__map_get(p, "errors"), depth);

        default:
                return -EBADMSG;
        }
}

/* depth counts error levels, the top one being 1. */
static int unpack_value(const msgpack_object *o, cube__err_family family, unsigned depth,
                        cube_error **ret)
{
        const struct cube__err_info *info;
        const msgpack_object *name;
        cube_error_kind kind;
        cube_error *e;
        int r;

        if (depth > CUBE_ERR_MAX_DEPTH)
                return -EBADMSG;

        if (!o || o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 2)
                return -EBADMSG;

        name = &o->via.array.ptr[0];
        if (name->type != MSGPACK_OBJECT_STR)
                return -EBADMSG;

        info = kind_by_name(family, name->via.str.ptr, name->via.str.size, &kind);
        if (!info)
                return -EBADMSG;

        e = cube__err_node_new(kind);
        if (!e)
                return -ENOMEM;

        r = unpack_payload(e, info, &o->via.array.ptr[1], depth);
        if (r < 0) {
                cube_error_free(e);
                return r;
        }

        *ret = e;
        return 0;
}

int cube__err_unpack(const msgpack_object *o, cube__err_family family, cube_error **ret_error)
{
        if (!ret_error || (unsigned) family >= CUBE__FAMILY_INVALID)
                return -EBADMSG;

        return unpack_value(o, family, 1, ret_error);
}

/*
 * tensormaps.c - a launch's tensor maps (the reference's TensorMapBinding):
 * decoded from the wire, judged against the buffer they bind, and laid out
 * as the words a checked kernel reads them from.
 *
 * The limits are the ones cuTensorMapEncodeTiled and cuTensorMapEncodeIm2col
 * document, on every device: a map a client builds against the CPU device
 * is then one the CUDA device accepts as it is, and a hostile one is refused
 * with the field it got wrong before any kernel sees it. Beyond the driver's
 * rules, the tensor the shape and strides describe must lie within the
 * binding: a load can then never reach another buffer's bytes.
 */
#include <inttypes.h>
#include <string.h>

#include "cubed.h"
#include "frontend.h"

static bool obj_i32(const msgpack_object *o, int32_t *ret)
{
        if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT32_MAX) {
                *ret = (int32_t) o->via.u64;
                return true;
        }
        if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER && o->via.i64 >= INT32_MIN) {
                *ret = (int32_t) o->via.i64;
                return true;
        }
        return false;
}

/* One array of the map: its length is kept for the judgement, its values
 * only up to the most a map holds. */
static bool obj_list(const msgpack_object *o, uint32_t *ret_n, uint64_t *u64, uint32_t *u32,
                     int32_t *i32)
{
        const msgpack_object_array *a;

        if (!cube__obj_array(o, &a))
                return false;
        *ret_n = a->size;
        for (uint32_t d = 0; d < a->size && d < CUBE_TENSOR_MAP_MAX_RANK; d++) {
                const msgpack_object *v = &a->ptr[d];
                if (u64 && !cube__obj_u64(v, &u64[d]))
                        return false;
                if (u32 && !cube__obj_u32(v, &u32[d]))
                        return false;
                if (i32 && (d >= CUBE_TENSOR_MAP_MAX_SPATIAL || !obj_i32(v, &i32[d])))
                        return false;
        }
        return true;
}

bool cube__tmap_decode(const msgpack_object *o, cube__tmap *ret)
{
        const msgpack_object_array *a;
        const msgpack_object *p;
        uint32_t v[6];

        memset(ret, 0, sizeof(*ret));
        if (!cube__obj_array(o, &a) || a->size != 13)
                return false;
        p = a->ptr;
        if (!cube__obj_handle(&p[0], &ret->map.buffer) || !cube__obj_u32(&p[1], &v[0]) ||
            !cube__obj_u32(&p[2], &v[1]) ||
            !obj_list(&p[3], &ret->map.rank, ret->map.shape, NULL, NULL) ||
            !obj_list(&p[4], &ret->n_strides, ret->map.strides, NULL, NULL) ||
            !obj_list(&p[5], &ret->n_box, NULL, ret->map.box, NULL) ||
            !obj_list(&p[6], &ret->n_elem_strides, NULL, ret->map.elem_strides, NULL) ||
            !obj_list(&p[7], &ret->n_lower, NULL, NULL, ret->map.lower_corner) ||
            !obj_list(&p[8], &ret->n_upper, NULL, NULL, ret->map.upper_corner) ||
            !cube__obj_u32(&p[9], &v[2]) || !cube__obj_u32(&p[10], &v[3]) ||
            !cube__obj_u32(&p[11], &v[4]) || !cube__obj_u32(&p[12], &v[5]))
                return false;
        /* Out-of-range enumerators are kept as they came, for the judgement. */
        ret->map.format = (cube_tensor_map_format) v[0];
        ret->map.elem = (cube_elem_type) v[1];
        ret->map.interleave = (cube_tensor_map_interleave) v[2];
        ret->map.swizzle = (cube_tensor_map_swizzle) v[3];
        ret->map.prefetch = (cube_tensor_map_prefetch) v[4];
        ret->map.oob_fill = (cube_tensor_map_oob_fill) v[5];
        return true;
}

uint32_t cube__elem_bytes(cube_elem_type t)
{
        switch (t) {
        case CUBE_ELEM_F16:
        case CUBE_ELEM_BF16:
                return 2;
        case CUBE_ELEM_F32:
        case CUBE_ELEM_I32:
        case CUBE_ELEM_U32:
                return 4;
        case CUBE_ELEM_F64:
        case CUBE_ELEM_I64:
        case CUBE_ELEM_U64:
                return 8;
        }
        return 0;
}

static bool is_float(cube_elem_type t)
{
        return t == CUBE_ELEM_F16 || t == CUBE_ELEM_BF16 || t == CUBE_ELEM_F32 ||
               t == CUBE_ELEM_F64;
}

#define BAD(...) return cube__err_validation(__VA_ARGS__)

cube_error *cube__tmap_validate(const cube__tmap *t, size_t i, uint64_t binding_bytes)
{
        const cube_tensor_map *m = &t->map;
        bool im2col = m->format == CUBE_TENSOR_MAP_IM2COL;
        uint32_t rank = m->rank, eb = cube__elem_bytes(m->elem);

        if (m->format > CUBE_TENSOR_MAP_IM2COL)
                BAD("tensor map %zu: format %u is neither tiled (0) nor im2col (1)", i,
                    (unsigned) m->format);
        if (!eb)
                BAD("tensor map %zu: elem %u is not an element type", i, (unsigned) m->elem);
        if (rank < (im2col ? 3u : 1u) || rank > CUBE_TENSOR_MAP_MAX_RANK)
                BAD("tensor map %zu: rank %u (the length of shape) is not %u to %u%s", i, rank,
                    im2col ? 3u : 1u, CUBE_TENSOR_MAP_MAX_RANK, im2col ? " for im2col" : "");
        if (t->n_strides != rank)
                BAD("tensor map %zu: strides has %u entries for rank %u", i, t->n_strides, rank);
        if (t->n_box != rank)
                BAD("tensor map %zu: box has %u entries for rank %u", i, t->n_box, rank);
        if (t->n_elem_strides != rank)
                BAD("tensor map %zu: elem_strides has %u entries for rank %u", i,
                    t->n_elem_strides, rank);
        if (t->n_lower != (im2col ? rank - 2 : 0) || t->n_upper != t->n_lower)
                BAD("tensor map %zu: lower_corner and upper_corner have %u and %u entries; a%s "
                    "map takes %u", i, t->n_lower, t->n_upper, im2col ? "n im2col" : " tiled",
                    im2col ? rank - 2 : 0);
        if (m->interleave > CUBE_TENSOR_MAP_INTERLEAVE_32B)
                BAD("tensor map %zu: interleave %u is not 0 to 2", i, (unsigned) m->interleave);
        if (m->swizzle > CUBE_TENSOR_MAP_SWIZZLE_128B)
                BAD("tensor map %zu: swizzle %u is not 0 to 3", i, (unsigned) m->swizzle);
        if (m->prefetch > CUBE_TENSOR_MAP_PREFETCH_256B)
                BAD("tensor map %zu: prefetch %u is not 0 to 3", i, (unsigned) m->prefetch);
        if (m->oob_fill > CUBE_TENSOR_MAP_OOB_NAN)
                BAD("tensor map %zu: oob_fill %u is neither zero (0) nor NaN (1)", i,
                    (unsigned) m->oob_fill);
        if (m->oob_fill == CUBE_TENSOR_MAP_OOB_NAN && !is_float(m->elem))
                BAD("tensor map %zu: oob_fill NaN needs a float element type", i);
        if (m->interleave != CUBE_TENSOR_MAP_INTERLEAVE_NONE && rank < 3)
                BAD("tensor map %zu: an interleaved map needs rank 3 or more, not %u", i, rank);

        /* The tensor: every dimension at most 2^32 elements, the innermost
         * contiguous, the others 16-byte aligned and below 2^40 bytes. */
        uint64_t last = 0;
        for (uint32_t d = 0; d < rank; d++) {
                if (m->shape[d] == 0 || m->shape[d] > (1ull << 32))
                        BAD("tensor map %zu: shape[%u] = %" PRIu64 " is not 1 to 2^32", i, d,
                            m->shape[d]);
                if (d == 0 && m->strides[0] != 1)
                        BAD("tensor map %zu: strides[0] = %" PRIu64 "; the innermost dimension "
                            "is contiguous (1)", i, m->strides[0]);
                uint32_t align = m->interleave == CUBE_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16;
                if (d > 0 && (m->strides[d] == 0 || m->strides[d] >= (1ull << 40) / eb ||
                              m->strides[d] * eb % align != 0))
                        BAD("tensor map %zu: strides[%u] = %" PRIu64 " elements is not a "
                            "multiple of %u bytes below 2^40", i, d, m->strides[d], align);
                uint64_t reach;
                if (__builtin_mul_overflow(m->shape[d] - 1, m->strides[d], &reach) ||
                    __builtin_add_overflow(last, reach, &last) || last >= UINT64_MAX / 16)
                        BAD("tensor map %zu: shape and strides reach beyond 2^60 elements", i);
        }
        if ((last + 1) * eb > binding_bytes)
                BAD("tensor map %zu: shape and strides reach %" PRIu64 " bytes; the buffer "
                    "binds %" PRIu64, i, (last + 1) * eb, binding_bytes);

        /* The box. */
        uint32_t box_dims = im2col ? 2 : rank;
        for (uint32_t d = 0; d < box_dims; d++) {
                uint32_t most = im2col && d == 1 ? 1024 : 256;
                if (m->box[d] == 0 || m->box[d] > most)
                        BAD("tensor map %zu: box[%u] = %u is not 1 to %u", i, d, m->box[d], most);
        }
        for (uint32_t d = 0; d < rank; d++)
                if (m->elem_strides[d] == 0 || m->elem_strides[d] > 8)
                        BAD("tensor map %zu: elem_strides[%u] = %u is not 1 to 8", i, d,
                            m->elem_strides[d]);
        uint64_t inner = (uint64_t) m->box[0] * eb;
        if (m->interleave == CUBE_TENSOR_MAP_INTERLEAVE_NONE && inner % 16 != 0)
                BAD("tensor map %zu: box[0] = %u elements is %" PRIu64 " bytes, not a multiple "
                    "of 16", i, m->box[0], inner);
        if (m->swizzle != CUBE_TENSOR_MAP_SWIZZLE_NONE) {
                uint64_t span = 16ull << m->swizzle;
                if (m->interleave == CUBE_TENSOR_MAP_INTERLEAVE_NONE && inner > span)
                        BAD("tensor map %zu: box[0] is %" PRIu64 " bytes, more than swizzle's "
                            "span of %" PRIu64, i, inner, span);
                if (m->interleave == CUBE_TENSOR_MAP_INTERLEAVE_32B &&
                    m->swizzle != CUBE_TENSOR_MAP_SWIZZLE_32B)
                        BAD("tensor map %zu: interleave 32B takes swizzle 32B only", i);
        }
        if (im2col) {
                /* The corners' range narrows with the spatial dimensions. */
                int32_t range = rank == 3 ? 1 << 15 : rank == 4 ? 1 << 7 : 1 << 4;
                for (uint32_t d = 0; d < rank - 2; d++) {
                        if (m->lower_corner[d] < -range || m->lower_corner[d] >= range)
                                BAD("tensor map %zu: lower_corner[%u] = %d is not -%d to %d", i,
                                    d, m->lower_corner[d], range, range - 1);
                        if (m->upper_corner[d] < -range || m->upper_corner[d] >= range)
                                BAD("tensor map %zu: upper_corner[%u] = %d is not -%d to %d", i,
                                    d, m->upper_corner[d], range, range - 1);
                }
        }
        return NULL;
}

void cube__tmap_words(const cube_tensor_map *m, uint64_t *ret)
{
        memset(ret, 0, CUBE__TMAP_WORDS * sizeof(*ret));
        ret[CUBE__TMAP_RANK] = m->rank;
        ret[CUBE__TMAP_FORMAT] = (uint64_t) m->format;
        ret[CUBE__TMAP_ELEM_BYTES] = cube__elem_bytes(m->elem);
        ret[CUBE__TMAP_OOB] = (uint64_t) m->oob_fill;
        ret[CUBE__TMAP_SWIZZLE] = (uint64_t) m->swizzle;
        ret[CUBE__TMAP_ELEM] = (uint64_t) m->elem;
        ret[CUBE__TMAP_INTERLEAVE] = (uint64_t) m->interleave;
        ret[CUBE__TMAP_PREFETCH] = (uint64_t) m->prefetch;
        for (uint32_t d = 0; d < CUBE_TENSOR_MAP_MAX_RANK; d++) {
                bool in = d < m->rank;
                ret[CUBE__TMAP_SHAPE + d] = in ? m->shape[d] : 1;
                ret[CUBE__TMAP_STRIDES + d] = in ? m->strides[d] : 0;
                ret[CUBE__TMAP_BOX + d] = in ? m->box[d] : 1;
                ret[CUBE__TMAP_ELEM_STRIDES + d] = in ? m->elem_strides[d] : 1;
        }
        /* The innermost dimension has no element stride without interleave:
         * the driver ignores it, and so does every device. */
        if (m->interleave == CUBE_TENSOR_MAP_INTERLEAVE_NONE)
                ret[CUBE__TMAP_ELEM_STRIDES] = 1;
        for (uint32_t d = 0; d + 2 < m->rank && d < CUBE_TENSOR_MAP_MAX_SPATIAL; d++) {
                ret[CUBE__TMAP_LOWER + d] = (uint64_t) (int64_t) m->lower_corner[d];
                ret[CUBE__TMAP_UPPER + d] = (uint64_t) (int64_t) m->upper_corner[d];
        }
}

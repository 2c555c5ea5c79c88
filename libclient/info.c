/*
 * info.c - building a launch's info words as the reference lays them out.
 *
 * Scalars first, grouped by type in the reference's ElemType order (f32,
 * f64, i32, i64, u32, u64), each group's bytes concatenated and padded to 8;
 * then the static metadata in u32 units (every buffer's length, then each
 * tensor's shape offset, then each tensor's stride offset), padded to 8; then
 * the dynamic metadata (every shape, then every stride), padded to 8.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "info.h"

enum { G_F32, G_F64, G_I32, G_I64, G_U32, G_U64, N_GROUPS };

typedef struct bytes {
        uint8_t *p;
        size_t len, cap;
} bytes;

struct cube_info {
        bytes groups[N_GROUPS];
        bytes lens;                     /* u32 buffer lengths */
        bytes ranks;                    /* u32 per tensor */
        bytes shapes;                   /* u32 */
        bytes strides;                  /* u32 */
};

static int put(bytes *b, const void *v, size_t n)
{
        if (n == 0)
                return 0;
        if (b->len + n > b->cap) {
                size_t cap = b->cap ? b->cap * 2 : 64;
                while (cap < b->len + n)
                        cap *= 2;
                uint8_t *grown = realloc(b->p, cap);
                if (!grown)
                        return -ENOMEM;
                b->p = grown;
                b->cap = cap;
        }
        memcpy(b->p + b->len, v, n);
        b->len += n;
        return 0;
}

cube_info *cube_info_new(void)
{
        return calloc(1, sizeof(cube_info));
}

void cube_info_free(cube_info *info)
{
        if (!info)
                return;
        for (int g = 0; g < N_GROUPS; g++)
                free(info->groups[g].p);
        free(info->lens.p);
        free(info->ranks.p);
        free(info->shapes.p);
        free(info->strides.p);
        free(info);
}

void cube_info_reset(cube_info *info)
{
        if (!info)
                return;
        for (int g = 0; g < N_GROUPS; g++)
                info->groups[g].len = 0;
        info->lens.len = 0;
        info->ranks.len = 0;
        info->shapes.len = 0;
        info->strides.len = 0;
}

int cube_info_f32(cube_info *info, float v) { return put(&info->groups[G_F32], &v, sizeof(v)); }
int cube_info_f64(cube_info *info, double v) { return put(&info->groups[G_F64], &v, sizeof(v)); }
int cube_info_i32(cube_info *info, int32_t v) { return put(&info->groups[G_I32], &v, sizeof(v)); }
int cube_info_i64(cube_info *info, int64_t v) { return put(&info->groups[G_I64], &v, sizeof(v)); }
int cube_info_u32(cube_info *info, uint32_t v) { return put(&info->groups[G_U32], &v, sizeof(v)); }
int cube_info_u64(cube_info *info, uint64_t v) { return put(&info->groups[G_U64], &v, sizeof(v)); }

int cube_info_buffer_len(cube_info *info, uint32_t len)
{
        return put(&info->lens, &len, sizeof(len));
}

int cube_info_tensor(cube_info *info, size_t rank, const uint32_t *shape, const uint32_t *strides)
{
        uint32_t r = (uint32_t) rank;

        if (rank > UINT32_MAX)
                return -EINVAL;
        if (put(&info->ranks, &r, sizeof(r)) < 0 ||
            put(&info->shapes, shape, rank * sizeof(*shape)) < 0 ||
            put(&info->strides, strides, rank * sizeof(*strides)) < 0)
                return -ENOMEM;
        return 0;
}

static int pad8(bytes *b)
{
        static const uint8_t zero[8];
        return b->len % 8 ? put(b, zero, 8 - b->len % 8) : 0;
}

void cube__info_scalar_counts(const cube_info *info, uint32_t ret[6])
{
        static const unsigned size[N_GROUPS] = { 4, 8, 4, 8, 4, 8 };

        for (int g = 0; g < N_GROUPS; g++)
                ret[g] = info ? (uint32_t) (info->groups[g].len / size[g]) : 0;
}

int cube__info_words(const cube_info *info, uint8_t **ret_words, size_t *ret_len,
                     uint32_t *ret_metadata_offset, uint32_t *ret_dynamic_offset)
{
        bytes out = {0};
        uint32_t n_tensors = (uint32_t) (info ? info->ranks.len / 4 : 0);
        uint32_t total_shapes = (uint32_t) (info ? info->shapes.len / 4 : 0);
        uint32_t meta, dyn, off = 0;

        for (int g = 0; info && g < N_GROUPS; g++) {
                if (put(&out, info->groups[g].p, info->groups[g].len) < 0 || pad8(&out) < 0)
                        goto oom;
        }
        meta = (uint32_t) (out.len / 8);
        if (info && put(&out, info->lens.p, info->lens.len) < 0)
                goto oom;
        for (uint32_t t = 0; t < n_tensors; t++) {
                if (put(&out, &off, sizeof(off)) < 0)
                        goto oom;
                off += ((const uint32_t *) info->ranks.p)[t];
        }
        off = 0;
        for (uint32_t t = 0; t < n_tensors; t++) {
                uint32_t stride_off = total_shapes + off;
                if (put(&out, &stride_off, sizeof(stride_off)) < 0)
                        goto oom;
                off += ((const uint32_t *) info->ranks.p)[t];
        }
        if (pad8(&out) < 0)
                goto oom;
        dyn = (uint32_t) (out.len / 8);
        if (info && (put(&out, info->shapes.p, info->shapes.len) < 0 ||
                     put(&out, info->strides.p, info->strides.len) < 0 || pad8(&out) < 0))
                goto oom;
        *ret_words = out.p;
        *ret_len = out.len;
        *ret_metadata_offset = meta;
        *ret_dynamic_offset = dyn;
        return 0;
oom:
        free(out.p);
        return -ENOMEM;
}

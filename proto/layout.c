/*
 * layout.c - the batched layout policy (the reference's pitched
 * MemoryLayoutPolicy): linked into the client, which hands out the tensors'
 * strides and offsets without a round trip, and into the daemon, which
 * sizes the shared allocation from the same descriptors.
 *
 * Each tensor is rows of its last dimension: a contiguous one packs them,
 * an optimized one starts each on a pitch aligned to the next power of two
 * of a row, clamped to [16, alignment] (a row of one element is not padded).
 * Outer strides nest contiguously. A tensor's bytes are its rows times the
 * pitch; tensor i starts where tensor i-1's bytes, rounded up to the
 * alignment, end, and the allocation is their sum.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>

#include "layout.h"

static uint64_t next_pow2(uint64_t v)
{
        uint64_t p = 1;

        while (p < v && p < (UINT64_C(1) << 62))
                p <<= 1;
        return p;
}

static uint64_t align_of(uint64_t alignment)
{
        return alignment ? alignment : 16;
}

uint64_t cube__layout_pitch(uint64_t alignment, cube_layout_strategy strategy,
                            const uint64_t *shape, uint32_t rank, uint64_t elem_size)
{
        uint64_t row = shape[rank - 1] * elem_size, a, pitch;

        if (strategy != CUBE_LAYOUT_OPTIMIZED || rank < 2 || shape[rank - 1] <= 1)
                return row;
        /* Rows start where the device reads fastest: on its alignment, or on
         * a power of two when a row is smaller than that. */
        a = next_pow2(row);
        a = a < 16 ? 16 : a > align_of(alignment) ? align_of(alignment) : a;
        pitch = (row + a - 1) / a * a;
        /* Strides count elements: a pitch holds whole ones. */
        return pitch % elem_size ? row : pitch;
}

/* Rounds v up to a multiple of a, or answers false past 64 bits. */
static bool round_up(uint64_t v, uint64_t a, uint64_t *ret)
{
        if (v > UINT64_MAX - (a - 1))
                return false;
        *ret = (v + a - 1) / a * a;
        return true;
}

int cube__layout_apply(uint64_t alignment, const cube_layout_descriptor *descs, size_t n,
                       cube_copy *ret_tensors, uint64_t *ret_size, char *why, size_t why_len)
{
        uint64_t align = align_of(alignment), total = 0, offset = 0;

        if (n == 0) {
                snprintf(why, why_len, "a batch of tensors needs at least one descriptor");
                return -1;
        }
        /* First the sizes and the total, so a batch that cannot be held
         * fills nothing. */
        for (size_t i = 0; i < n; i++) {
                const cube_layout_descriptor *d = &descs[i];
                uint64_t rows = 1, size, padded;

                if (d->rank == 0 || d->rank > CUBE_MAX_RANK || d->elem_size == 0 ||
                    (d->strategy != CUBE_LAYOUT_CONTIGUOUS &&
                     d->strategy != CUBE_LAYOUT_OPTIMIZED)) {
                        snprintf(why, why_len, "tensor %zu: a tensor needs a rank of 1 to %d, an "
                                 "element size and a strategy of 0 (contiguous) or 1 "
                                 "(optimized)", i, CUBE_MAX_RANK);
                        return -1;
                }
                for (uint32_t j = 0; j < d->rank; j++)
                        if (d->shape[j] > UINT32_MAX) {
                                snprintf(why, why_len, "tensor %zu: dimension %u of %" PRIu64
                                         " is above 2^32", i, j, d->shape[j]);
                                return -1;
                        }
                if (d->elem_size > UINT32_MAX) {
                        snprintf(why, why_len, "tensor %zu: an element size of %" PRIu64
                                 " is above 2^32", i, d->elem_size);
                        return -1;
                }
                for (uint32_t j = 0; j + 1 < d->rank; j++) {
                        if (d->shape[j] && rows > UINT64_MAX / d->shape[j])
                                goto overflow;
                        rows *= d->shape[j];
                }
                /* A row is below 2^64 (2^32 elements of below 2^32 bytes). */
                uint64_t pitch = cube__layout_pitch(alignment, d->strategy, d->shape, d->rank,
                                                    d->elem_size);
                if (rows && pitch > UINT64_MAX / rows)
                        goto overflow;
                size = rows * pitch;
                if (!round_up(size, align, &padded) || padded > UINT64_MAX - total)
                        goto overflow;
                total += padded;
                continue;
overflow:
                snprintf(why, why_len, "tensor %zu: the batch's size overflows 64 bits", i);
                return -1;
        }
        for (size_t i = 0; ret_tensors && i < n; i++) {
                const cube_layout_descriptor *d = &descs[i];
                cube_copy *t = &ret_tensors[i];
                uint64_t pitch = cube__layout_pitch(alignment, d->strategy, d->shape, d->rank,
                                                    d->elem_size), rows = 1, size;

                *t = (cube_copy) { .rank = d->rank, .elem_size = d->elem_size };
                for (uint32_t j = 0; j < d->rank; j++)
                        t->shape[j] = d->shape[j];
                t->strides[d->rank - 1] = 1;
                for (uint32_t j = d->rank - 1; j-- > 0;)
                        t->strides[j] = j == d->rank - 2 ? pitch / d->elem_size :
                                        t->strides[j + 1] * d->shape[j + 1];
                for (uint32_t j = 0; j + 1 < d->rank; j++)
                        rows *= d->shape[j];
                size = rows * pitch;
                t->handle.offset_start = offset;
                t->handle.offset_end = total - offset - size;
                t->handle.size = total;
                round_up(size, align, &size);
                offset += size;
        }
        *ret_size = total;
        return 0;
}

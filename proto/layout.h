/*
 * layout.h - the batched layout policy both sides apply: where each tensor
 * of a create_tensors batch lies in the allocation they share, and with
 * which strides (the reference's MemoryLayoutPolicy::apply).
 */
#ifndef CUBE_PROTO_LAYOUT_H
#define CUBE_PROTO_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "cube.h"

/* Lays out n descriptors on a device of the given alignment (0: 16). Fills
 * each ret_tensors[i] (when ret_tensors is not NULL) with its shape,
 * strides, element size and its handle's offset_start, offset_end and size;
 * the rest of the handle is the caller's. *ret_size is the allocation's
 * size. Returns -1 with a reason in why for a batch no device can hold
 * (see cube.h's cube_layout_apply). */
int cube__layout_apply(uint64_t alignment, const cube_layout_descriptor *descs, size_t n,
                       cube_copy *ret_tensors, uint64_t *ret_size, char *why, size_t why_len);

/* The pitch, in bytes, of the rows of a tensor laid out with strategy. */
uint64_t cube__layout_pitch(uint64_t alignment, cube_layout_strategy strategy,
                            const uint64_t *shape, uint32_t rank, uint64_t elem_size);

#endif

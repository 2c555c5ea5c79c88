/*
 * info.h - a launch's info words, as the wire carries them.
 */
#ifndef CUBE_CLIENT_INFO_H
#define CUBE_CLIENT_INFO_H

#include <stddef.h>
#include <stdint.h>

#include "cube.h"

/* Lays info out (NULL: no words but the empty metadata). *ret_words is
 * malloc'd; offsets are in 8-byte words. */
/* How many scalars of each type (f32, f64, i32, i64, u32, u64) info holds. */
void cube__info_scalar_counts(const cube_info *info, uint32_t ret[6]);
int cube__info_words(const cube_info *info, uint8_t **ret_words, size_t *ret_len,
                     uint32_t *ret_metadata_offset, uint32_t *ret_dynamic_offset);

#endif

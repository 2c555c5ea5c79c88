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
int cube__info_words(const cube_info *info, uint8_t **ret_words, size_t *ret_len,
                     uint32_t *ret_metadata_offset, uint32_t *ret_dynamic_offset);

#endif

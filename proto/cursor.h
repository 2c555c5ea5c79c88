/*
 * cursor.h - msgpack values read straight from a message's bytes.
 *
 * msgpack-c decodes a message into a tree of objects, and for the smallest,
 * most frequent messages (a launch) building that tree costs more than the
 * daemon's own work on them. A cursor reads the values in place instead, in
 * the forms a peer writes them (cube__pack_* and msgpack-c's packer: the
 * smallest unsigned form of an integer, say). It accepts no other form: a
 * reader that meets one gives up, and the message takes the tree's way, so
 * that both ways accept and refuse exactly the same messages.
 *
 * Every read checks that its bytes are there; a failed read leaves the
 * cursor where it was.
 */
#ifndef CUBE_PROTO_CURSOR_H
#define CUBE_PROTO_CURSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cube.h"

typedef struct cube__cursor {
        const uint8_t *p, *end;
} cube__cursor;

static inline cube__cursor cube__cursor_of(const void *p, size_t len)
{
        return (cube__cursor) { p, (const uint8_t *) p + len };
}

static inline bool cube__cursor_done(const cube__cursor *c)
{
        return c->p == c->end;
}

/* An array header: its element count. */
bool cube__cursor_array(cube__cursor *c, uint32_t *ret_n);
/* An unsigned integer (msgpack-c's positive integer, in an unsigned form). */
bool cube__cursor_u64(cube__cursor *c, uint64_t *ret);
bool cube__cursor_u32(cube__cursor *c, uint32_t *ret);
/* nil, consumed; false (nothing consumed) for anything else. */
bool cube__cursor_nil(cube__cursor *c);
/* A str or a bin: where its bytes are, and how many. */
bool cube__cursor_str(cube__cursor *c, const char **ret_ptr, size_t *ret_len);
bool cube__cursor_bin(cube__cursor *c, const void **ret_ptr, size_t *ret_len);
/* [service, memory, offset_start, offset_end] (cube__obj_handle's). */
bool cube__cursor_handle(cube__cursor *c, cube_handle *ret);

#endif

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
#include "prescan.h"

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

/* The n-byte big-endian number after a one-byte tag at c->p. */
static inline bool cube__cursor_tagged(const cube__cursor *c, size_t n, uint64_t *ret)
{
        if ((size_t) (c->end - c->p) < 1 + n)
                return false;
        *ret = cube__read_be(c->p + 1, (unsigned) n);
        return true;
}

/* An array header: its element count. */
static inline bool cube__cursor_array(cube__cursor *c, uint32_t *ret_n)
{
        uint64_t n;

        if (c->p == c->end)
                return false;
        if ((*c->p & 0xf0) == 0x90) {
                *ret_n = *c->p++ & 0x0f;
                return true;
        }
        size_t w = *c->p == 0xdc ? 2 : *c->p == 0xdd ? 4 : 0;
        if (!w || !cube__cursor_tagged(c, w, &n))
                return false;
        c->p += 1 + w;
        *ret_n = (uint32_t) n;
        return true;
}

/* An unsigned integer (msgpack-c's positive integer, in an unsigned form). */
static inline bool cube__cursor_u64(cube__cursor *c, uint64_t *ret)
{
        uint64_t v;

        if (c->p == c->end)
                return false;
        if (*c->p < 0x80) {
                *ret = *c->p++;
                return true;
        }
        if (*c->p < 0xcc || *c->p > 0xcf)
                return false;
        size_t w = (size_t) 1 << (*c->p - 0xcc);
        if (!cube__cursor_tagged(c, w, &v))
                return false;
        c->p += 1 + w;
        *ret = v;
        return true;
}

static inline bool cube__cursor_u32(cube__cursor *c, uint32_t *ret)
{
        cube__cursor at = *c;
        uint64_t v;

        if (!cube__cursor_u64(&at, &v) || v > UINT32_MAX)
                return false;
        *c = at;
        *ret = (uint32_t) v;
        return true;
}

/* nil, consumed; false (nothing consumed) for anything else. */
static inline bool cube__cursor_nil(cube__cursor *c)
{
        if (c->p == c->end || *c->p != 0xc0)
                return false;
        c->p++;
        return true;
}

/* A str or bin whose length, w bytes, follows its tag. */
static inline bool cube__cursor_sized(cube__cursor *c, size_t w, const void **ret_ptr,
                                      size_t *ret_len)
{
        uint64_t n;

        if (!cube__cursor_tagged(c, w, &n) || n > (uint64_t) (c->end - c->p) - 1 - w)
                return false;
        *ret_ptr = c->p + 1 + w;
        *ret_len = (size_t) n;
        c->p += 1 + w + n;
        return true;
}

/* A str or a bin: where its bytes are, and how many. */
static inline bool cube__cursor_str(cube__cursor *c, const char **ret_ptr, size_t *ret_len)
{
        const void *p;

        if (c->p == c->end)
                return false;
        if ((*c->p & 0xe0) == 0xa0) {
                size_t n = *c->p & 0x1f;
                if (n > (size_t) (c->end - c->p) - 1)
                        return false;
                *ret_ptr = (const char *) c->p + 1;
                *ret_len = n;
                c->p += 1 + n;
                return true;
        }
        size_t w = *c->p == 0xd9 ? 1 : *c->p == 0xda ? 2 : *c->p == 0xdb ? 4 : 0;
        if (!w || !cube__cursor_sized(c, w, &p, ret_len))
                return false;
        *ret_ptr = p;
        return true;
}

static inline bool cube__cursor_bin(cube__cursor *c, const void **ret_ptr, size_t *ret_len)
{
        if (c->p == c->end || *c->p < 0xc4 || *c->p > 0xc6)
                return false;
        return cube__cursor_sized(c, (size_t) 1 << (*c->p - 0xc4), ret_ptr, ret_len);
}

/* [service, memory, offset_start, offset_end] (cube__obj_handle's). */
static inline bool cube__cursor_handle(cube__cursor *c, cube_handle *ret)
{
        cube__cursor at = *c;
        cube_handle h = {0};
        uint32_t n;

        if (!cube__cursor_array(&at, &n) || n != 4 || !cube__cursor_u64(&at, &h.service) ||
            !cube__cursor_u64(&at, &h.memory) || !cube__cursor_u64(&at, &h.offset_start) ||
            !cube__cursor_u64(&at, &h.offset_end))
                return false;
        *c = at;
        *ret = h;
        return true;
}

#endif

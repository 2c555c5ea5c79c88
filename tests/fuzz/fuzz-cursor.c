/*
 * fuzz-cursor.c - proto/cursor.h's reads against msgpack-c's tree of the
 * same bytes.
 *
 * An input is one msgpack message, then any bytes. Where cubed would
 * decode the message (fuzz-decode.h), a cursor walks it value by value
 * beside its tree: what the cursor reads, the tree holds (the same type,
 * number, or bytes at the same place, where there are any); a value the tree holds in a form the
 * cursor takes (an array, nil, a str, a bin, an unsigned integer in an
 * unsigned form), the cursor reads; a read that fails moves nothing. Then
 * a cursor walks the whole input blindly, message or not, and must never
 * read past it.
 */

#include <msgpack.h>
#include <stdint.h>
#include <stdlib.h>

#include "cursor.h"
#include "fuzz-decode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void same_place(const cube__cursor *a, const cube__cursor *b)
{
        if (a->p != b->p || a->end != b->end)
                abort();
}

/* Checks a handle read at *c against o. */
static void check_handle(const msgpack_object *o, const cube__cursor *c)
{
        cube__cursor at = *c;
        cube_handle h;

        if (!cube__cursor_handle(&at, &h)) {
                same_place(&at, c);
                return;
        }
        const msgpack_object *v = o->via.array.ptr;
        if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 4)
                abort();
        for (int i = 0; i < 4; i++)
                if (v[i].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
                        abort();
        if (h.service != v[0].via.u64 || h.memory != v[1].via.u64 ||
            h.offset_start != v[2].via.u64 || h.offset_end != v[3].via.u64)
                abort();
}

/* Walks o and the cursor together; false where o is in a form the cursor
 * does not take (the walk stops there). */
static bool walk(const msgpack_object *o, cube__cursor *c)
{
        uint8_t tag = c->p < c->end ? *c->p : 0xc1;
        cube__cursor at = *c;
        const void *ptr;
        size_t len;
        uint64_t v;
        uint32_t n;

        check_handle(o, c);
        if (cube__cursor_array(&at, &n)) {
                if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != n)
                        abort();
                *c = at;
                for (uint32_t i = 0; i < n; i++)
                        if (!walk(&o->via.array.ptr[i], c))
                                return false;
                return true;
        }
        same_place(&at, c);
        if (o->type == MSGPACK_OBJECT_ARRAY)
                abort();
        if (cube__cursor_u64(&at, &v)) {
                cube__cursor at32 = *c;
                uint32_t w;
                if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 != v ||
                    cube__cursor_u32(&at32, &w) != (v <= UINT32_MAX) ||
                    (v <= UINT32_MAX && (w != v || at32.p != at.p)))
                        abort();
                *c = at;
                return true;
        }
        same_place(&at, c);
        if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && (tag < 0x80 || (tag >= 0xcc && tag <= 0xcf)))
                abort();
        if (cube__cursor_nil(&at)) {
                if (o->type != MSGPACK_OBJECT_NIL)
                        abort();
                *c = at;
                return true;
        }
        same_place(&at, c);
        if (o->type == MSGPACK_OBJECT_NIL)
                abort();
        const char *s;
        if (cube__cursor_str(&at, &s, &len)) {
                if (o->type != MSGPACK_OBJECT_STR || o->via.str.size != len ||
                    (len && o->via.str.ptr != s))
                        abort();
                *c = at;
                return true;
        }
        same_place(&at, c);
        if (o->type == MSGPACK_OBJECT_STR)
                abort();
        if (cube__cursor_bin(&at, &ptr, &len)) {
                if (o->type != MSGPACK_OBJECT_BIN || o->via.bin.size != len ||
                    (len && o->via.bin.ptr != ptr))
                        abort();
                *c = at;
                return true;
        }
        same_place(&at, c);
        if (o->type == MSGPACK_OBJECT_BIN)
                abort();
        return false;
}

/* Every read tried along the whole input, stepping a byte past where none
 * reads: each stays inside it. */
static void walk_blind(const uint8_t *data, size_t size)
{
        cube__cursor c = cube__cursor_of(data, size);

        while (!cube__cursor_done(&c)) {
                cube_handle h;
                const char *s;
                const void *p;
                size_t len;
                uint64_t v;
                uint32_t n;

                if (!cube__cursor_handle(&c, &h) && !cube__cursor_array(&c, &n) &&
                    !cube__cursor_u64(&c, &v) && !cube__cursor_nil(&c) &&
                    !cube__cursor_str(&c, &s, &len) && !cube__cursor_bin(&c, &p, &len))
                        c.p++;
                if (c.p > c.end)
                        abort();
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        msgpack_zone *zone = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE);
        msgpack_object o;
        size_t len;

        if (!zone)
                return 0;
        if (fuzz_decode(data, size, zone, &o, &len)) {
                cube__cursor c = cube__cursor_of(data, len);
                if (walk(&o, &c) && !cube__cursor_done(&c))
                        abort();
        }
        msgpack_zone_free(zone);
        walk_blind(data, size);
        return 0;
}

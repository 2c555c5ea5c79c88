/*
 * fuzz-launch.c - a launch's params as a tenant sends them, through the
 * proto pieces that read and use them.
 *
 * An input is one msgpack value, the params of a launch notification
 * ([stream, kernel, count, dim, [handle, ...], [io, ...], info,
 * [metadata_offset, dynamic_offset], mode], PROTOCOL.md 5.11), then any bytes:
 * the compiled kernel's answers, one a byte. Each field is read with the
 * typed reader of wire.c its place calls for (cubed's own walk over them,
 * in daemon/launches.c, needs a session); the io declarations and the
 * answers go through the fallback chain of launch.c, which must never call a
 * buffer untouched unless an answer says so; and the count is spread over
 * the dim as over a device's limits, which must keep every cube and fit the
 * first two dimensions.
 */

#include <msgpack.h>
#include <stdint.h>
#include <stdlib.h>

#include "fuzz-decode.h"
#include "launch.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads an array of at most cap u32 into ret; how many it read, up to the
 * first element that is not one. */
static size_t read_u32s(const msgpack_object *o, uint32_t *ret, size_t cap)
{
        const msgpack_object_array *arr;
        size_t n = 0;

        if (cube__obj_array(o, &arr))
                while (n < arr->size && n < cap && cube__obj_u32(&arr->ptr[n], &ret[n]))
                        n++;
        return n;
}

static bool is_answer(cube_buffer_io io)
{
        return io == CUBE_BUFFER_READ_ONLY || io == CUBE_BUFFER_WRITE_ONLY ||
               io == CUBE_BUFFER_READ_WRITE || io == CUBE_BUFFER_DEAD;
}

/* What the fallback chain says of every buffer, and one past them. */
static void check_io(const cube_buffer_io *compiled, size_t n_compiled,
                     const cube_buffer_io *declared, size_t n_declared, size_t n)
{
        for (size_t i = 0; i <= n; i++) {
                cube_buffer_io io = cube__io_attr(compiled, n_compiled, declared, n_declared, i);
                bool written = cube__io_written(compiled, n_compiled, declared, n_declared, i);
                bool read = cube__io_read(compiled, n_compiled, declared, n_declared, i);

                if (!(i < n_compiled && io == compiled[i]) && !(i < n_declared && io == declared[i]) &&
                    io != CUBE_BUFFER_UNDECLARED)
                        abort();
                if (i < n_compiled && is_answer(compiled[i]) && io != compiled[i])
                        abort();
                if (!is_answer(io) ? !written || !read :
                    written != cube__io_is_writable(io) || read != cube__io_is_readable(io))
                        abort();
        }
}

/* num cubes spread over max: none lost, and x and y within their limits. */
static void check_spread(const uint32_t max[3], uint32_t num)
{
        uint32_t got[3];

        cube__cube_count_spread(max, num, got);
        if (got[0] > (max[0] ? max[0] : 1) || got[1] > (max[1] ? max[1] : 1))
                abort();
        if (num == 0 ? got[0] != 0 : (unsigned __int128) got[0] * got[1] * got[2] < num)
                abort();
}

/* The io declarations: nil (undeclared) or 0..3; anything else stops the
 * list, as cubed refuses the launch. */
static size_t read_io(const msgpack_object *o, cube_buffer_io *ret, size_t cap)
{
        const msgpack_object_array *arr;
        uint64_t io;
        size_t n = 0;

        if (!cube__obj_array(o, &arr))
                return 0;
        for (; n < arr->size && n < cap; n++) {
                if (arr->ptr[n].type == MSGPACK_OBJECT_NIL)
                        ret[n] = CUBE_BUFFER_UNDECLARED;
                else if (cube__obj_u64(&arr->ptr[n], &io) && io <= CUBE_BUFFER_DEAD)
                        ret[n] = (cube_buffer_io) io;
                else
                        break;
        }
        return n;
}

/* Reads each field of params that is there, with the reader its place in a
 * launch calls for, whatever the others hold: a malformed field stops
 * nothing but itself, so that every piece is reached. */
static void read_launch(const msgpack_object *params, const uint8_t *answers, size_t n_answers)
{
        const msgpack_object_array *arr, *count, *offsets;
        uint32_t counts[3] = { 0 }, dim[3] = { 0 }, u32;
        cube_buffer_io *declared, *compiled;
        const msgpack_object *p;
        size_t m, n = 0, n_io = 0, len;
        const void *info;
        uint64_t u64;
        cube_handle h;

        if (params->type != MSGPACK_OBJECT_ARRAY)
                return;
        p = params->via.array.ptr;
        m = params->via.array.size;
        if (m > 1)
                (void) (cube__obj_u64(&p[0], &u64) && cube__obj_u64(&p[1], &u64));
        /* ["static", [x, y, z]] or ["dynamic", handle] */
        if (m > 2 && cube__obj_array(&p[2], &count) && count->size == 2) {
                (void) read_u32s(&count->ptr[1], counts, 3);
                if (cube__obj_handle(&count->ptr[1], &h))
                        (void) cube_handle_len(&h);
        }
        if (m > 3)
                (void) read_u32s(&p[3], dim, 3);
        if (m > 4 && cube__obj_array(&p[4], &arr))
                for (; n < arr->size && cube__obj_handle(&arr->ptr[n], &h); n++)
                        (void) cube_handle_len(&h);
        if (m > 6 && cube__obj_bin(&p[6], &info, &len) && len && !info)
                abort();
        if (m > 7 && cube__obj_array(&p[7], &offsets) && offsets->size == 2)
                (void) (cube__obj_u32(&offsets->ptr[0], &u32) &&
                        cube__obj_u32(&offsets->ptr[1], &u32));
        if (m > 8)
                (void) cube__obj_u32(&p[8], &u32);

        declared = calloc(n + 1, sizeof(*declared));
        compiled = calloc(n_answers + 1, sizeof(*compiled));
        if (!declared || !compiled)
                abort();
        if (m > 5)
                n_io = read_io(&p[5], declared, n);
        /* An answer may be any value: the chain must take what is not one of
         * the four for "read and written". */
        for (size_t i = 0; i < n_answers; i++)
                compiled[i] = (cube_buffer_io) (int8_t) answers[i];
        check_io(NULL, 0, declared, n_io, n);
        check_io(compiled, n_answers, declared, n_io, n);
        check_io(compiled, n_answers, NULL, 0, n);
        check_spread(dim, counts[0]);
        check_spread(dim, counts[0] * counts[1]);
        free(declared);
        free(compiled);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        msgpack_object obj;
        msgpack_zone zone;
        size_t len;

        if (!msgpack_zone_init(&zone, MSGPACK_ZONE_CHUNK_SIZE))
                abort();
        if (fuzz_decode(data, size, &zone, &obj, &len))
                read_launch(&obj, data + len, size - len);
        msgpack_zone_destroy(&zone);
        return 0;
}

/*
 * launch.c - the launch arithmetic both sides share: which buffers a launch
 * reads and writes, and how a cube count is spread over the device's
 * per-dimension limits.
 */

#include "launch.h"

bool cube__io_is_readable(cube_buffer_io io)
{
        return io == CUBE_BUFFER_READ_ONLY || io == CUBE_BUFFER_READ_WRITE;
}

bool cube__io_is_writable(cube_buffer_io io)
{
        return io == CUBE_BUFFER_WRITE_ONLY || io == CUBE_BUFFER_READ_WRITE;
}

/* Whether io is one of the four answers. Anything else — UNKNOWN, or a value
 * no kernel could have produced — takes the over-naming fallback. */
static bool io_is_answer(cube_buffer_io io)
{
        switch (io) {
        case CUBE_BUFFER_READ_ONLY:
        case CUBE_BUFFER_WRITE_ONLY:
        case CUBE_BUFFER_READ_WRITE:
        case CUBE_BUFFER_DEAD:
                return true;
        default:
                return false;
        }
}

cube_buffer_io cube__io_attr(const cube_buffer_io *compiled, size_t n_compiled,
                      const cube_buffer_io *declared, size_t n_declared, size_t index)
{
        if (compiled && index < n_compiled && io_is_answer(compiled[index]))
                return compiled[index];
        if (declared && index < n_declared)
                return declared[index];
        return CUBE_BUFFER_UNDECLARED;
}

bool cube__io_written(const cube_buffer_io *compiled, size_t n_compiled,
                      const cube_buffer_io *declared, size_t n_declared, size_t index)
{
        cube_buffer_io io = cube__io_attr(compiled, n_compiled, declared, n_declared, index);

        return !io_is_answer(io) || cube__io_is_writable(io);
}

bool cube__io_read(const cube_buffer_io *compiled, size_t n_compiled,
                   const cube_buffer_io *declared, size_t n_declared, size_t index)
{
        cube_buffer_io io = cube__io_attr(compiled, n_compiled, declared, n_declared, index);

        return !io_is_answer(io) || cube__io_is_readable(io);
}

/* A device caps each dimension of a launch grid separately, while callers
 * count cubes in one number. Halving x (rounding up) while doubling y, then
 * y into z, keeps the product at least num_cubes. The walk stops at the
 * first dimension that already fits; z is not checked, as in the reference.
 * A dimension whose maximum is 0 can never fit: it stops shrinking at 1
 * rather than looping forever. */
void cube__cube_count_spread(const uint32_t max[3], uint32_t num_cubes, uint32_t ret[3])
{
        uint64_t count[3] = { num_cubes, 1, 1 };

        for (unsigned i = 0; i < 2; i++) {
                if (count[i] <= max[i])
                        break;

                do {
                        count[i] = (count[i] + 1) / 2;
                        count[i + 1] *= 2;
                } while (count[i] > max[i] && count[i] > 1);
        }

        for (unsigned i = 0; i < 3; i++)
                ret[i] = count[i] > UINT32_MAX ? UINT32_MAX : (uint32_t) count[i];
}

/*
 * launch.h - the launch arithmetic both sides share: which buffers a launch
 * reads and writes (KernelArguments::buffers_read / buffers_written in the
 * reference), and how a cube count is spread over the device's limits.
 */
#ifndef CUBE_PROTO_LAUNCH_H
#define CUBE_PROTO_LAUNCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cube.h"

bool cube__io_is_readable(cube_buffer_io io);
bool cube__io_is_writable(cube_buffer_io io);

/* The answer for resource index: the compiled kernel's when it kept one
 * (compiled != NULL and index < n_compiled), else the caller's declaration
 * (index < n_declared), else CUBE_BUFFER_UNDECLARED. */
cube_buffer_io cube__io_attr(const cube_buffer_io *compiled, size_t n_compiled,
                      const cube_buffer_io *declared, size_t n_declared, size_t index);

/* Whether resource index is written / read, by the fallback chain above, with
 * an unknown answer reading as both: naming a buffer the kernel only read
 * fails a read that would have been fine, loudly; missing one it writes hands
 * back stale bytes, silently. */
bool cube__io_written(const cube_buffer_io *compiled, size_t n_compiled,
                      const cube_buffer_io *declared, size_t n_declared, size_t index);
bool cube__io_read(const cube_buffer_io *compiled, size_t n_compiled,
                   const cube_buffer_io *declared, size_t n_declared, size_t index);

/* Spreads num_cubes over x, then y, then z, halving (rounding up) a dimension
 * and doubling the next until it fits its maximum, as the reference's
 * cube_count_spread does. */
void cube__cube_count_spread(const uint32_t max[3], uint32_t num_cubes, uint32_t ret[3]);

#endif

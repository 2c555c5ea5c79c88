/*
 * grid.c - the reference's grid helpers: CubeCount's constructors and
 * is_empty, CubeCountSelection (a count of cubes spread over the device's
 * per-dimension limits, exact or approximate), and CubeDim's constructors,
 * new (a cube shape from the device's planes and cores), num_elems and
 * can_contain.
 *
 * A caller counts cubes in one number; a device caps each dimension of the
 * grid. Splitting the count here, as the reference does, lets a client
 * launch an oversized count instead of being refused at run time.
 */
#include "cube.h"
#include "launch.h"

cube_dim3 cube_dim3_single(void)
{
        return (cube_dim3) { 1, 1, 1 };
}

cube_dim3 cube_dim3_1d(uint32_t x)
{
        return (cube_dim3) { x, 1, 1 };
}

cube_dim3 cube_dim3_2d(uint32_t x, uint32_t y)
{
        return (cube_dim3) { x, y, 1 };
}

cube_dim3 cube_dim3_3d(uint32_t x, uint32_t y, uint32_t z)
{
        return (cube_dim3) { x, y, z };
}

bool cube_count_is_empty(cube_dim3 count)
{
        return count.x == 0 || count.y == 0 || count.z == 0;
}

uint32_t cube_dim_num_elems(cube_dim3 dim)
{
        return dim.x * dim.y * dim.z;
}

bool cube_dim_can_contain(cube_dim3 dim, cube_dim3 other)
{
        return dim.x >= other.x && dim.y >= other.y && dim.z >= other.z;
}

/* The reference's calculate_plane_count_per_cube: one plane per core on a
 * device that has cores, else a power of two of planes, at most 8. */
static uint32_t planes_per_cube(uint32_t working_units, uint32_t plane_size, uint32_t cores)
{
        uint32_t most, log2 = 0;

        if (cores)
                return cores < working_units ? cores : working_units;
        most = working_units / plane_size;
        if (most < 1)
                most = 1;
        while (log2 < 3 && (most >> (log2 + 1)) != 0)
                log2++;
        return 1u << log2;
}

cube_dim3 cube_dim_new(const cube_device_properties *p, uint32_t working_units)
{
        uint32_t plane = p->plane_size_max ? p->plane_size_max : 1;
        uint32_t planes = planes_per_cube(working_units, plane, p->num_cpu_cores);
        uint32_t limit = p->max_units_per_cube / plane;

        if (planes > limit)
                planes = limit;
        return cube_dim3_2d(plane, planes ? planes : 1);
}

cube_count_selection cube_count_select(const cube_device_properties *p, uint32_t num_cubes)
{
        uint32_t spread[3];
        uint64_t actual;

        cube__cube_count_spread(p->max_cube_count, num_cubes, spread);
        actual = (uint64_t) spread[0] * spread[1] * spread[2];
        return (cube_count_selection) {
                .count = cube_dim3_3d(spread[0], spread[1], spread[2]),
                .exact = actual == num_cubes,
                .num_cubes = actual > UINT32_MAX ? UINT32_MAX : (uint32_t) actual,
        };
}

void cube_launch_grid(cube_launch *l, cube_dim3 count, cube_dim3 dim)
{
        l->cube_count[0] = count.x;
        l->cube_count[1] = count.y;
        l->cube_count[2] = count.z;
        l->cube_dim[0] = dim.x;
        l->cube_dim[1] = dim.y;
        l->cube_dim[2] = dim.z;
}

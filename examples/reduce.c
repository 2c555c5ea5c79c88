/*
 * reduce - a sum in two steps: every cube sums its 256 elements in shared
 * memory with a tree of barriers, and the host adds up the per-cube sums.
 *
 *   mkdir -m 0700 /tmp/cube && cubed --socket /tmp/cube/s &
 *   reduce /tmp/cube/s [SEED] [N]
 *
 * N (default 1000003) need not be a multiple of 256: the kernel reads it as a
 * u32 scalar and counts the units past the end as zeros.
 *
 * The data are whole numbers below 2^15 in magnitude, held as floats. Every
 * sum of at most 256 of them is a whole number below 2^23, which a float
 * holds exactly, so the device's order of additions cannot change a per-cube
 * sum, and each one can be compared exactly with the host's.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cube.h"

#define UNITS_PER_CUBE 256              /* the kernel's shared array matches it */
#define MAX_CUBES_X 65535

/* Unit t first holds element t of its cube; then, round by round, the lower
 * half of the still active units adds in the upper half, with a barrier
 * after every round so that nobody reads a slot before it is written. */
static const char source[] =
        "KERNEL void reduce(const float *in, float *partial, uint32_t n)\n"
        "{\n"
        "        SHARED float part[256];\n"
        "        uint32_t t = UNIT_POS;\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "\n"
        "        part[t] = i < n ? in[i] : 0.0f;\n"
        "        sync_cube();\n"
        "        for (uint32_t s = CUBE_DIM / 2; s > 0; s /= 2) {\n"
        "                if (t < s)\n"
        "                        part[t] += part[t + s];\n"
        "                sync_cube();\n"
        "        }\n"
        "        /* The grid is rounded up to whole rows of cubes: the ones past\n"
        "         * the data have no slot of their own to write. */\n"
        "        if (t == 0 && (uint64_t) CUBE_POS * CUBE_DIM < n)\n"
        "                partial[CUBE_POS] = part[0];\n"
        "}\n";

static int fail(const char *what, cube_error *e)
{
        fprintf(stderr, "reduce: %s: %s\n", what, cube_error_message(e));
        cube_error_free(e);
        return 1;
}

/* splitmix64: a seeded generator, so that a failing run can be repeated. */
static uint64_t next_random(uint64_t *state)
{
        uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

int main(int argc, char **argv)
{
        const char *socket = argc > 1 ? argv[1] : NULL;
        uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 0) :
                        (uint64_t) time(NULL) ^ ((uint64_t) getpid() << 32);
        uint32_t n = argc > 3 ? (uint32_t) strtoul(argv[3], NULL, 0) : 1000003;
        uint64_t state = seed, kernel, cubes = ((uint64_t) n + UNITS_PER_CUBE - 1) / UNITS_PER_CUBE;
        float *in = malloc((size_t) n * sizeof(float));
        float *partial = malloc((size_t) cubes * sizeof(float));
        int64_t *expected = calloc((size_t) cubes, sizeof(int64_t));
        int64_t total = 0;
        double device_total = 0;
        cube_handle bufs[2];
        cube_client *c;
        cube_info *info;
        cube_error *e;
        size_t wrong = 0;

        if (n == 0 || !in || !partial || !expected) {
                fprintf(stderr, "reduce: N must be at least 1, and fit in memory\n");
                return 1;
        }
        for (uint32_t i = 0; i < n; i++) {
                int32_t v = (int32_t) (next_random(&state) >> 48) - 32768;    /* [-2^15, 2^15) */
                in[i] = (float) (v != 0 ? v : 1);
                expected[i / UNITS_PER_CUBE] += (int64_t) in[i];
                total += (int64_t) in[i];
        }

        if ((e = cube_connect(socket, "reduce", &c)))
                return fail("connect", e);
        if ((e = cube_kernel_register(c, source, "reduce", &kernel)))
                return fail("register", e);

        /* The partial sums start as NaN, so a cube that never ran shows. */
        memset(partial, 0xff, (size_t) cubes * sizeof(float));
        if ((e = cube_create(c, in, (uint64_t) n * sizeof(float), &bufs[0])) ||
            (e = cube_create(c, partial, cubes * sizeof(float), &bufs[1])))
                return fail("create", e);

        /* The only scalar is a u32, so the u32 group starts the info words. */
        info = cube_info_new();
        if (!info || cube_info_u32(info, n)) {
                fprintf(stderr, "reduce: out of memory\n");
                return 1;
        }

        cube_launch launch = {
                .kernel = kernel,
                .cube_count = { cubes < MAX_CUBES_X ? (uint32_t) cubes : MAX_CUBES_X,
                                (uint32_t) ((cubes + MAX_CUBES_X - 1) / MAX_CUBES_X), 1 },
                .cube_dim = { UNITS_PER_CUBE, 1, 1 },
                .buffers = bufs,
                .n_buffers = 2,
                .info = info,
                .mode = CUBE_LAUNCH_EXECUTE,
        };
        if ((e = cube_launch_kernel(c, &launch)))
                return fail("launch", e);
        if ((e = cube_read(c, &bufs[1], partial, cubes * sizeof(float))))
                return fail("read", e);

        for (uint64_t i = 0; i < cubes; i++) {
                if ((double) partial[i] != (double) expected[i] && wrong++ < 5)
                        fprintf(stderr, "reduce: cube %" PRIu64 " summed to %.1f, expected %"
                                PRId64 "\n", i, (double) partial[i], expected[i]);
                device_total += partial[i];
        }
        /* Exact too: the total stays far below 2^53. */
        if (device_total != (double) total)
                wrong++;

        printf("reduce: %u elements in %" PRIu64 " cubes, seed %" PRIu64 ": sum %.0f, "
               "expected %" PRId64 ": %s\n", n, cubes, seed, device_total, total,
               wrong ? "MISMATCH" : "match");
        for (int i = 0; i < 2; i++)
                cube_error_free(cube_free(c, &bufs[i]));
        cube_info_free(info);
        cube_disconnect(c);
        free(in);
        free(partial);
        free(expected);
        return wrong ? 1 : 0;
}

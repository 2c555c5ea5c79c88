/*
 * vector_add - the smallest kernel: out = a + b over n floats, computed on
 * the device and checked against the same sum computed here.
 *
 *   mkdir -m 0700 /tmp/cube && cubed --socket /tmp/cube/s &
 *   vector_add /tmp/cube/s [SEED] [N]
 *
 * N (default 1000003) need not be a multiple of the cube dim: the kernel
 * leaves alone the units that fall past the end of the buffers.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cube.h"

#define UNITS_PER_CUBE 256
#define MAX_CUBES_X 65535

/* The kernel, in the dialect of docs/KERNELS.md. BUFFER_LEN(2) is the length
 * of the third buffer (out) in elements, as the info words say. */
static const char source[] =
        "KERNEL void vector_add(const float *a, const float *b, float *out, INFO)\n"
        "{\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "\n"
        "        if (i < BUFFER_LEN(2))\n"
        "                out[i] = a[i] + b[i];\n"
        "}\n";

static int fail(const char *what, cube_error *e)
{
        fprintf(stderr, "vector_add: %s: %s\n", what, cube_error_message(e));
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

/* A float in [-1, 1) that is never zero. */
static float random_float(uint64_t *state)
{
        float f = (float) (next_random(state) >> 40) / (float) (1u << 23) - 1.0f;

        return f != 0.0f ? f : 0.5f;
}

int main(int argc, char **argv)
{
        const char *socket = argc > 1 ? argv[1] : NULL;
        uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 0) :
                        (uint64_t) time(NULL) ^ ((uint64_t) getpid() << 32);
        uint32_t n = argc > 3 ? (uint32_t) strtoul(argv[3], NULL, 0) : 1000003;
        uint64_t state = seed, kernel, cubes;
        size_t bytes = (size_t) n * sizeof(float);
        float *a = malloc(bytes), *b = malloc(bytes), *out = malloc(bytes);
        cube_handle bufs[3];
        cube_client *c;
        cube_info *info;
        cube_error *e;
        size_t wrong = 0;

        if (n == 0 || !a || !b || !out) {
                fprintf(stderr, "vector_add: N must be at least 1, and fit in memory\n");
                return 1;
        }
        for (uint32_t i = 0; i < n; i++) {
                a[i] = random_float(&state);
                b[i] = random_float(&state);
        }

        if ((e = cube_connect(socket, "vector_add", &c)))
                return fail("connect", e);
        if ((e = cube_kernel_register(c, source, "vector_add", &kernel)))
                return fail("register", e);

        /* The output starts as NaN, so an element the kernel never wrote
         * cannot pass for a right one. */
        memset(out, 0xff, bytes);
        if ((e = cube_create(c, a, bytes, &bufs[0])) || (e = cube_create(c, b, bytes, &bufs[1])) ||
            (e = cube_create(c, out, bytes, &bufs[2])))
                return fail("create", e);

        info = cube_info_new();
        if (!info || cube_info_buffer_len(info, n) || cube_info_buffer_len(info, n) ||
            cube_info_buffer_len(info, n)) {
                fprintf(stderr, "vector_add: out of memory\n");
                return 1;
        }

        /* One unit per element; the cubes spill into y past 65535. */
        cubes = (n + UNITS_PER_CUBE - 1) / UNITS_PER_CUBE;
        cube_launch launch = {
                .kernel = kernel,
                .cube_count = { cubes < MAX_CUBES_X ? (uint32_t) cubes : MAX_CUBES_X,
                                (uint32_t) ((cubes + MAX_CUBES_X - 1) / MAX_CUBES_X), 1 },
                .cube_dim = { UNITS_PER_CUBE, 1, 1 },
                .buffers = bufs,
                .n_buffers = 3,
                .info = info,
                .mode = CUBE_LAUNCH_EXECUTE,
        };
        if ((e = cube_launch_kernel(c, &launch)))
                return fail("launch", e);
        if ((e = cube_read(c, &bufs[2], out, bytes)))
                return fail("read", e);

        /* One float addition rounds the same way here as on the device. */
        for (uint32_t i = 0; i < n; i++)
                if (out[i] != a[i] + b[i]) {
                        if (wrong++ < 5)
                                fprintf(stderr, "vector_add: out[%u] = %g, expected %g\n", i,
                                        (double) out[i], (double) (a[i] + b[i]));
                }

        printf("vector_add: %u elements, seed %" PRIu64 ": %s\n", n, seed,
               wrong ? "MISMATCH" : "all match");
        for (int i = 0; i < 3; i++)
                cube_error_free(cube_free(c, &bufs[i]));
        cube_info_free(info);
        cube_disconnect(c);
        free(a);
        free(b);
        free(out);
        return wrong ? 1 : 0;
}

/*
 * matmul - C[M x N] = A[M x K] * B[K x N], tiled: each 16 x 16 cube loads a
 * tile of A and one of B into shared memory, waits for every unit to have
 * loaded its element, multiplies the tiles, and waits again before the next
 * load overwrites them.
 *
 *   mkdir -m 0700 /tmp/cube && cubed --socket /tmp/cube/s &
 *   matmul /tmp/cube/s [SEED] [M N K]
 *
 * The default 157 x 131 x 93 is a multiple of 16 nowhere, so the edges are
 * exercised: units past an edge load zeros and write nothing.
 */
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cube.h"

#define TILE 16

/* Row-major matrices; m, n and k are the u32 scalars, in that order. Every unit
 * takes part in every load and every barrier, even one outside C, so that
 * each barrier is reached by the whole cube. */
static const char source[] =
        "#define TILE 16\n"
        "\n"
        "KERNEL void matmul(const float *a, const float *b, float *c, uint32_t m, uint32_t n,\n"
        "                    uint32_t k)\n"
        "{\n"
        "        SHARED float ta[TILE][TILE];\n"
        "        SHARED float tb[TILE][TILE];\n"
        "        uint32_t tx = UNIT_POS_X, ty = UNIT_POS_Y;\n"
        "        uint32_t row = ABSOLUTE_POS_Y, col = ABSOLUTE_POS_X;\n"
        "        float acc = 0.0f;\n"
        "\n"
        "        for (uint32_t t = 0; t < k; t += TILE) {\n"
        "                ta[ty][tx] = row < m && t + tx < k ? a[(size_t) row * k + t + tx] : 0.0f;\n"
        "                tb[ty][tx] = t + ty < k && col < n ? b[(size_t) (t + ty) * n + col] : 0.0f;\n"
        "                sync_cube();\n"
        "                for (uint32_t i = 0; i < TILE; i++)\n"
        "                        acc += ta[ty][i] * tb[i][tx];\n"
        "                sync_cube();\n"
        "        }\n"
        "        if (row < m && col < n)\n"
        "                c[(size_t) row * n + col] = acc;\n"
        "}\n";

static int fail(const char *what, cube_error *e)
{
        fprintf(stderr, "matmul: %s: %s\n", what, cube_error_message(e));
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
        uint32_t m = argc > 5 ? (uint32_t) strtoul(argv[3], NULL, 0) : 157;
        uint32_t n = argc > 5 ? (uint32_t) strtoul(argv[4], NULL, 0) : 131;
        uint32_t k = argc > 5 ? (uint32_t) strtoul(argv[5], NULL, 0) : 93;
        uint64_t state = seed, kernel;
        float *a = malloc((size_t) m * k * sizeof(float));
        float *b = malloc((size_t) k * n * sizeof(float));
        float *c = malloc((size_t) m * n * sizeof(float));
        cube_handle bufs[3];
        cube_client *client;
        cube_info *info;
        cube_error *e;
        size_t wrong = 0;
        double worst = 0;

        if (m == 0 || n == 0 || k == 0 || !a || !b || !c) {
                fprintf(stderr, "matmul: M, N and K must be at least 1, and fit in memory\n");
                return 1;
        }
        for (size_t i = 0; i < (size_t) m * k; i++)
                a[i] = random_float(&state);
        for (size_t i = 0; i < (size_t) k * n; i++)
                b[i] = random_float(&state);

        if ((e = cube_connect(socket, "matmul", &client)))
                return fail("connect", e);
        if ((e = cube_kernel_register(client, source, "matmul", &kernel)))
                return fail("register", e);

        /* C starts as NaN, so an element the kernel never wrote shows. */
        memset(c, 0xff, (size_t) m * n * sizeof(float));
        if ((e = cube_create(client, a, (uint64_t) m * k * sizeof(float), &bufs[0])) ||
            (e = cube_create(client, b, (uint64_t) k * n * sizeof(float), &bufs[1])) ||
            (e = cube_create(client, c, (uint64_t) m * n * sizeof(float), &bufs[2])))
                return fail("create", e);

        /* Three u32 scalars: the u32 group is all there is, at word 0. */
        info = cube_info_new();
        if (!info || cube_info_u32(info, m) || cube_info_u32(info, n) || cube_info_u32(info, k)) {
                fprintf(stderr, "matmul: out of memory\n");
                return 1;
        }

        /* x runs along the columns of C, y along its rows. */
        cube_launch launch = {
                .kernel = kernel,
                .cube_count = { (n + TILE - 1) / TILE, (m + TILE - 1) / TILE, 1 },
                .cube_dim = { TILE, TILE, 1 },
                .buffers = bufs,
                .n_buffers = 3,
                .info = info,
                .mode = CUBE_LAUNCH_EXECUTE,
        };
        if ((e = cube_launch_kernel(client, &launch)))
                return fail("launch", e);
        if ((e = cube_read(client, &bufs[2], c, (uint64_t) m * n * sizeof(float))))
                return fail("read", e);

        /* A float sum of k products is off from the exact one by at most
         * about k * FLT_EPSILON times the sum of the products' magnitudes;
         * twice that is the tolerance. */
        for (uint32_t i = 0; i < m; i++)
                for (uint32_t j = 0; j < n; j++) {
                        double exact = 0, magnitude = 0, got = c[(size_t) i * n + j];
                        for (uint32_t p = 0; p < k; p++) {
                                double term = (double) a[(size_t) i * k + p] * b[(size_t) p * n + j];
                                exact += term;
                                magnitude += fabs(term);
                        }
                        double tolerance = 2.0 * k * FLT_EPSILON * magnitude + FLT_MIN;
                        if (!(fabs(got - exact) <= tolerance)) {
                                if (wrong++ < 5)
                                        fprintf(stderr, "matmul: C[%u][%u] = %g, expected %g\n",
                                                i, j, got, exact);
                        } else if (fabs(got - exact) > worst) {
                                worst = fabs(got - exact);
                        }
                }

        printf("matmul: %u x %u x %u, seed %" PRIu64 ": %s (largest error %.2g)\n", m, n, k,
               seed, wrong ? "MISMATCH" : "all within tolerance", worst);
        for (int i = 0; i < 3; i++)
                cube_error_free(cube_free(client, &bufs[i]));
        cube_info_free(info);
        cube_disconnect(client);
        free(a);
        free(b);
        free(c);
        return wrong ? 1 : 0;
}

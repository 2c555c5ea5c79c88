/*
 * cube-bench - cube's cost next to the machine's own limits, measured in one
 * run on one CPU placement.
 *
 *   cube-bench --socket PATH [--runs N] [--smoke]
 *
 * Each figure is printed beside the baseline it is compared with, measured in
 * the same run, and the ratio of the two. Times are the best of N runs (the
 * least disturbed by a noisy machine).
 *
 * Figures:
 *   vector add, 3 x 64 MiB: a kernel reading two 64 MiB float buffers and
 *     writing a third, launch to completed sync, in bytes touched per second;
 *     the baseline is memcpy of 64 MiB in the same process, counted the same
 *     way (bytes read plus bytes written per second).
 *   first launch of a new kernel (it compiles) against the first launch of a
 *     kernel another session already compiled (a cache hit), each timed from
 *     launch to completed sync.
 */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cube.h"

static double now(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static void die(const char *what, cube_error *e)
{
        fprintf(stderr, "cube-bench: %s: %s\n", what, cube_error_message(e));
        cube_error_free(e);
        exit(1);
}

#define CHECK(what, expr) do { cube_error *e_ = (expr); if (e_) die(what, e_); } while (0)

static const char vadd_source[] =
"KERNEL void vadd(const float *a, const float *b, float *out, INFO)\n"
"{\n"
"        uint64_t i = ABSOLUTE_POS;\n"
"        if (i < BUFFER_LEN(2))\n"
"                out[i] = a[i] + b[i];\n"
"}\n";

static void bench_vector_add(const char *socket, size_t n, int runs)
{
        cube_client *c;
        cube_handle h[3];
        uint64_t kernel;
        cube_info *info = cube_info_new();
        float *host = malloc(n * sizeof(float)), *copy = malloc(n * sizeof(float));
        double best = 1e30, best_copy = 1e30;
        uint32_t dim = 256;

        for (size_t i = 0; i < n; i++)
                host[i] = (float) (i % 1000);
        memset(copy, 0, n * sizeof(float));
        CHECK("connect", cube_connect(socket, "cube-bench", &c));
        CHECK("create", cube_create(c, host, n * sizeof(float), &h[0]));
        CHECK("create", cube_create(c, host, n * sizeof(float), &h[1]));
        CHECK("empty", cube_empty(c, n * sizeof(float), &h[2]));
        CHECK("register", cube_kernel_register(c, vadd_source, "vadd", &kernel));
        for (int i = 0; i < 3; i++)
                cube_info_buffer_len(info, (uint32_t) n);
        /* As the reference spreads a count: halve x, double y, until x fits. */
        uint64_t x = (n + dim - 1) / dim, y = 1;
        while (x > 65535) {
                x = (x + 1) / 2;
                y *= 2;
        }
        cube_launch l = {
                .kernel = kernel,
                .cube_count = { (uint32_t) x, (uint32_t) y, 1 },
                .cube_dim = { dim, 1, 1 },
                .buffers = h, .n_buffers = 3, .info = info,
        };
        /* The first launch compiles; it is the warm-up. */
        CHECK("launch", cube_launch_kernel(c, &l));
        CHECK("sync", cube_sync(c, &h[2], 1));
        for (int r = 0; r < runs; r++) {
                double t0 = now();
                CHECK("launch", cube_launch_kernel(c, &l));
                CHECK("sync", cube_sync(c, &h[2], 1));
                double t1 = now();
                memcpy(copy, host, n * sizeof(float));
                double t2 = now();
                if (t1 - t0 < best)
                        best = t1 - t0;
                if (t2 - t1 < best_copy)
                        best_copy = t2 - t1;
        }
        double bytes = 3.0 * (double) n * sizeof(float);
        double copy_bytes = 2.0 * (double) n * sizeof(float);
        printf("%-44s %10.2f GB/s   %-24s %8.2f GB/s   ratio %.2f\n",
               "vector add, 3 x 64 MiB (bytes touched/s)", bytes / best / 1e9,
               "memcpy 64 MiB (r+w/s)", copy_bytes / best_copy / 1e9,
               (bytes / best) / (copy_bytes / best_copy));
        cube_info_free(info);
        free(host);
        free(copy);
        cube_disconnect(c);
}

/* Times one session's first launch of source, to completion. */
static double first_launch(const char *socket, const char *source)
{
        cube_client *c;
        cube_handle out;
        uint64_t kernel;
        cube_info *info = cube_info_new();

        CHECK("connect", cube_connect(socket, "cube-bench", &c));
        CHECK("empty", cube_empty(c, 64, &out));
        CHECK("sync", cube_sync(c, NULL, 0));
        cube_info_buffer_len(info, 16);
        CHECK("register", cube_kernel_register(c, source, "fill", &kernel));
        cube_launch l = {
                .kernel = kernel, .cube_count = { 1, 1, 1 }, .cube_dim = { 16, 1, 1 },
                .buffers = &out, .n_buffers = 1, .info = info,
        };
        double t0 = now();
        CHECK("launch", cube_launch_kernel(c, &l));
        CHECK("sync", cube_sync(c, &out, 1));
        double t = now() - t0;
        cube_info_free(info);
        cube_disconnect(c);
        return t;
}

static void bench_first_launch(const char *socket, int runs)
{
        double best_new = 1e30, best_cached = 1e30;
        char source[256];

        for (int r = 0; r < runs; r++) {
                /* A source no cache has seen: the comment makes it new. */
                snprintf(source, sizeof(source),
                         "/* %d-%ld */\nKERNEL void fill(float *out, INFO)\n"
                         "{\n        out[UNIT_POS_X] = (float) UNIT_POS_X;\n}\n",
                         (int) getpid(), (long) (now() * 1e9) + r);
                double t_new = first_launch(socket, source);
                double t_cached = first_launch(socket, source);
                if (t_new < best_new)
                        best_new = t_new;
                if (t_cached < best_cached)
                        best_cached = t_cached;
        }
        printf("%-44s %10.3f ms      %-24s %8.3f ms      ratio %.1f\n",
               "first launch, cached by another session", best_cached * 1e3,
               "first launch, compiling", best_new * 1e3, best_new / best_cached);
}

int main(int argc, char **argv)
{
        static const struct option options[] = {
                { "socket", required_argument, NULL, 's' },
                { "runs", required_argument, NULL, 'r' },
                { "smoke", no_argument, NULL, 'S' },
                { "help", no_argument, NULL, 'h' },
                {}
        };
        const char *socket = NULL;
        int runs = 7, opt;
        size_t n = (64u << 20) / sizeof(float);

        while ((opt = getopt_long(argc, argv, "s:r:Sh", options, NULL)) != -1) {
                switch (opt) {
                case 's': socket = optarg; break;
                case 'r': runs = atoi(optarg) > 0 ? atoi(optarg) : 1; break;
                case 'S': runs = 1; n = (1u << 20) / sizeof(float); break;
                case 'h':
                        printf("Usage: cube-bench --socket PATH [--runs N] [--smoke]\n");
                        return 0;
                default: return 2;
                }
        }
        printf("cube-bench: best of %d run(s)\n", runs);
        bench_vector_add(socket, n, runs);
        bench_first_launch(socket, runs);
        return 0;
}

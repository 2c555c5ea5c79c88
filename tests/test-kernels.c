/*
 * test-kernels.c - kernels end to end: the examples, barriers and shared
 * memory, the refusals of every resource limit, compile errors, the launch
 * modes, the kernel cache across sessions and restarts, a faulting kernel,
 * dynamic cube counts, and the info words.
 *
 * Every test starts its own daemon, with a kernel cache of its own, and ends
 * by stopping it with SIGTERM, which must exit 0 and remove the socket file.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "errors.h"
#include "wire.h"

static char shared_cache[64];           /* a --cache-dir outlasting one daemon */

/* The harness's stop, then the cache a test made to outlast one daemon. */
static void stop_clean_and_remove_cache(void)
{
        test_stop_clean();
        if (*shared_cache) {
                char rm[96];
                snprintf(rm, sizeof(rm), "rm -rf '%s'", shared_cache);
                if (system(rm) != 0)
                        fprintf(stderr, "could not remove %s\n", shared_cache);
                *shared_cache = '\0';
        }
}

/* ---------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------- */

/* Launches l by value, so that a test can write the launch in place; the
 * library itself must accept it (what it cannot see lands on the buffers). */
static void launch(cube_client *c, cube_launch l)
{
        ck_ok(cube_launch_kernel(c, &l));
}

/* Runs a program to its end; returns its exit status, or -1 on a signal. */
static int run_program(const char *const *argv)
{
        int status;
        pid_t pid = fork();

        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                execv(argv[0], (char *const *) argv);
                fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
                _exit(127);
        }
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The failure a buffer's read reports, which must be exactly one Unwritten
 * claim; returns the whole error, which the caller frees. */
static cube_error *read_failure(cube_client *c, const cube_handle *h)
{
        size_t n = cube_handle_len(h);
        void *buf = malloc(n ? n : 1);
        cube_error *e = cube_read(c, h, buf, n);

        free(buf);
        ck_assert_msg(e != NULL, "the read succeeded; a failure was expected");
        ck_assert_msg(cube_error_kind_of(e) == CUBE_SERVER_SEVERAL, "expected Several, got %s",
                      cube_error_message(e));
        ck_assert_uint_eq(cube_error_count(e), 1);
        ck_assert_int_eq(cube_error_kind_of(cube_error_at(e, 0)), CUBE_SERVER_UNWRITTEN);
        return e;
}

/* The root of read_failure's one Unwritten claim. */
static const cube_error *root_of(const cube_error *e)
{
        return cube_error_source(cube_error_at(e, 0));
}

/* Asserts that the error's wrapping chain is exactly kinds[0] -> kinds[1] ->
 * ... (n of them) and returns the innermost. */
static const cube_error *expect_chain(const cube_error *e, const cube_error_kind *kinds, size_t n,
                                      const char *whole)
{
        for (size_t i = 0; i < n; i++) {
                ck_assert_msg(e != NULL, "the chain ends at level %zu: %s", i, whole);
                ck_assert_msg(cube_error_kind_of(e) == kinds[i], "level %zu is %s, not kind %d: %s",
                              i, cube_error_variant(e), (int) kinds[i], whole);
                if (i + 1 < n)
                        e = cube_error_source(e);
        }
        return e;
}

static cube_status session_status(cube_client *c)
{
        cube_status st;

        ck_ok(cube_daemon_status(c, &st));
        return st;
}

/* The cache entry for entry; there must be exactly one. */
static cube_kernel_info kernel_entry(cube_client *c, const char *entry)
{
        cube_kernel_info *v, found = {0};
        size_t n, matches = 0;

        ck_ok(cube_daemon_kernels(c, &v, &n));
        for (size_t i = 0; i < n; i++)
                if (strcmp(v[i].entry, entry) == 0) {
                        found = v[i];
                        matches++;
                }
        free(v);
        ck_assert_msg(matches == 1, "%zu cache entries for kernel '%s'", matches, entry);
        return found;
}

static cube_info *info_with_lens(size_t n, const uint32_t *lens)
{
        cube_info *info = cube_info_new();

        ck_assert_ptr_nonnull(info);
        for (size_t i = 0; i < n; i++)
                ck_assert_int_eq(cube_info_buffer_len(info, lens[i]), 0);
        return info;
}

/* out[i] = in[i] * 3 + 1 over BUFFER_LEN(1) elements; the kernel most tests
 * launch when what it computes is beside the point. */
static const char triple_source[] =
        "KERNEL void triple(const uint32_t *in, uint32_t *out, INFO)\n"
        "{\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "        if (i < BUFFER_LEN(1))\n"
        "                out[i] = in[i] * 3u + 1u;\n"
        "}\n";

#define TRIPLE_N 1000u          /* not a multiple of the cube dim, 64 */

/* A triple launch over in and out, each TRIPLE_N u32. */
static void launch_triple(cube_client *c, uint64_t kernel, const cube_handle *in,
                          const cube_handle *out, cube_launch_mode mode)
{
        static const uint32_t lens[2] = { TRIPLE_N, TRIPLE_N };
        cube_handle bufs[2] = { *in, *out };
        cube_info *info = info_with_lens(2, lens);

        launch(c, (cube_launch) {
                .kernel = kernel, .cube_count = { (TRIPLE_N + 63) / 64, 1, 1 },
                .cube_dim = { 64, 1, 1 }, .buffers = bufs, .n_buffers = 2, .info = info,
                .mode = mode,
        });
        cube_info_free(info);
}

/* Random input, and an output full of a pattern the kernel never writes. */
static void triple_buffers(cube_client *c, uint64_t seed, uint32_t *in, cube_handle *ret_in,
                           cube_handle *ret_out)
{
        uint32_t pattern[TRIPLE_N];

        fill_random(in, TRIPLE_N * sizeof(uint32_t), seed);
        memset(pattern, 0xa5, sizeof(pattern));
        ck_ok(cube_create(c, in, TRIPLE_N * sizeof(uint32_t), ret_in));
        ck_ok(cube_create(c, pattern, sizeof(pattern), ret_out));
}

static void expect_tripled(cube_client *c, const uint32_t *in, const cube_handle *out)
{
        uint32_t got[TRIPLE_N];

        ck_ok(cube_read(c, out, got, sizeof(got)));
        for (uint32_t i = 0; i < TRIPLE_N; i++)
                ck_assert_msg(got[i] == in[i] * 3u + 1u, "out[%u] = %#x, expected %#x", i, got[i],
                              in[i] * 3u + 1u);
}

static void expect_pattern(cube_client *c, const cube_handle *out)
{
        uint32_t got[TRIPLE_N], pattern[TRIPLE_N];

        memset(pattern, 0xa5, sizeof(pattern));
        ck_ok(cube_read(c, out, got, sizeof(got)));
        ck_assert_msg(memcmp(got, pattern, sizeof(got)) == 0, "the output was written");
}

/* ---------------------------------------------------------------------------
 * The examples
 * ------------------------------------------------------------------------- */

/* Runs the example that $var names twice, with different seeds. */
static void run_example(const char *var)
{
        const char *bin = getenv(var);
        static const char *const seeds[] = { "1", "20240917" };

        ck_assert_msg(bin != NULL, "%s is not set", var);
        for (size_t i = 0; i < 2; i++) {
                const char *argv[] = { bin, D.socket, seeds[i], NULL };
                ck_assert_msg(run_program(argv) == 0, "%s with seed %s failed", bin, seeds[i]);
        }
}

START_TEST(the_vector_add_example_matches_its_reference)
{
        run_example("EXAMPLE_VECTOR_ADD");
}
END_TEST

START_TEST(the_reduce_example_matches_its_reference)
{
        run_example("EXAMPLE_REDUCE");
}
END_TEST

START_TEST(the_matmul_example_matches_its_reference)
{
        run_example("EXAMPLE_MATMUL");
}
END_TEST

/* ---------------------------------------------------------------------------
 * Barriers and shared memory
 * ------------------------------------------------------------------------- */

/* Unit t publishes a value unique to its cube, and after a barrier reads its
 * neighbour's; after a second barrier it overwrites its own slot, and after a
 * third reads the other neighbour's. Units that ran one after another without
 * real barriers would read slots not yet written (or already overwritten). */
static const char rotate_source[] =
        "KERNEL void rotate(uint32_t *out, INFO)\n"
        "{\n"
        "        SHARED uint32_t slot[1024];\n"
        "        uint32_t t = UNIT_POS, dim = CUBE_DIM;\n"
        "        uint32_t base = CUBE_POS * dim;\n"
        "        uint32_t next;\n"
        "\n"
        "        slot[t] = base + t;\n"
        "        sync_cube();\n"
        "        next = slot[(t + 1) % dim];\n"
        "        sync_cube();\n"
        "        slot[t] = next ^ 0x80000000u;\n"
        "        sync_cube();\n"
        "        out[2 * (base + t)] = next;\n"
        "        out[2 * (base + t) + 1] = slot[(t + dim - 1) % dim];\n"
        "}\n";

/* Launches kernel over count cubes of dim units on one buffer of words
 * 32-bit words per unit, each 0xa5a5a5a5 before; returns what the launch
 * left there (the caller frees it). */
static uint32_t *run_on_fresh_words(cube_client *c, uint64_t kernel, const uint32_t count[3],
                                    const uint32_t dim[3], uint32_t words)
{
        size_t n = (size_t) words * dim[0] * dim[1] * dim[2] * count[0] * count[1] * count[2];
        uint32_t *got = malloc(n * sizeof(uint32_t));
        cube_handle out;

        ck_assert_ptr_nonnull(got);
        memset(got, 0xa5, n * sizeof(uint32_t));
        ck_ok(cube_create(c, got, n * sizeof(uint32_t), &out));
        launch(c, (cube_launch) {
                .kernel = kernel, .cube_count = { count[0], count[1], count[2] },
                .cube_dim = { dim[0], dim[1], dim[2] }, .buffers = &out, .n_buffers = 1,
        });
        ck_ok(cube_read(c, &out, got, n * sizeof(uint32_t)));
        ck_ok(cube_free(c, &out));
        return got;
}

static void check_rotate(cube_client *c, uint64_t kernel, const uint32_t count[3],
                         const uint32_t dim[3])
{
        uint32_t units = dim[0] * dim[1] * dim[2], cubes = count[0] * count[1] * count[2];
        uint32_t *got = run_on_fresh_words(c, kernel, count, dim, 2);

        for (uint32_t cube = 0; cube < cubes; cube++)
                for (uint32_t t = 0; t < units; t++) {
                        uint32_t g = cube * units + t;
                        ck_assert_msg(got[2 * g] == cube * units + (t + 1) % units,
                                      "dim (%u, %u, %u): cube %u unit %u read %#x from its "
                                      "neighbour after the first barrier, expected %#x", dim[0],
                                      dim[1], dim[2], cube, t, got[2 * g],
                                      cube * units + (t + 1) % units);
                        ck_assert_msg(got[2 * g + 1] == ((cube * units + t) ^ 0x80000000u),
                                      "dim (%u, %u, %u): cube %u unit %u read %#x after the "
                                      "third barrier, expected %#x", dim[0], dim[1], dim[2], cube,
                                      t, got[2 * g + 1], (cube * units + t) ^ 0x80000000u);
                }
        free(got);
}

/* Registers source's entry and checks it with check under each shape
 * (cube count, cube dim). */
static void on_each_shape(const char *source, const char *entry, const uint32_t shapes[][2][3],
                          size_t n, void (*check)(cube_client *, uint64_t, const uint32_t *,
                                                  const uint32_t *))
{
        cube_client *c;

        ck_ok(cube_connect(D.socket, entry, &c));
        uint64_t k = test_kernel(c, source, entry);
        for (size_t i = 0; i < n; i++)
                check(c, k, shapes[i][0], shapes[i][1]);
        cube_disconnect(c);
}

START_TEST(sync_cube_holds_every_unit_until_the_whole_cube_arrives)
{
        static const uint32_t shapes[][2][3] = {
                { { 6, 1, 1 }, { 1024, 1, 1 } },        /* the most units a cube holds */
                { { 3, 2, 1 }, { 16, 8, 4 } },          /* three dimensions, both ways */
                { { 5, 1, 2 }, { 7, 5, 3 } },           /* nothing a power of two */
                { { 4, 1, 1 }, { 2, 1, 1 } },
        };

        on_each_shape(rotate_source, "rotate", shapes, sizeof(shapes) / sizeof(shapes[0]),
                      check_rotate);
}
END_TEST

/* A kernel that needs no other unit of its cube (no barrier, no shared
 * memory) may run its cube's units one after another in a loop (the CPU
 * device does): each unit still sees its own position and its cube's
 * shape, and a unit that returns early leaves the rest of its cube running. */
static const char where_source[] =
        "KERNEL void where(uint32_t *out, INFO)\n"
        "{\n"
        "        uint64_t g = ABSOLUTE_POS;\n"
        "        if (UNIT_POS % 3 == 1)\n"
        "                return;\n"
        "        out[4 * g] = UNIT_POS_X | UNIT_POS_Y << 10 | UNIT_POS_Z << 20;\n"
        "        out[4 * g + 1] = CUBE_DIM_X | CUBE_DIM_Y << 10 | CUBE_DIM_Z << 20;\n"
        "        out[4 * g + 2] = UNIT_POS;\n"
        "        out[4 * g + 3] = ABSOLUTE_POS_X | ABSOLUTE_POS_Y << 10 | ABSOLUTE_POS_Z << 20;\n"
        "}\n";

static void check_where(cube_client *c, uint64_t kernel, const uint32_t count[3],
                        const uint32_t dim[3])
{
        uint32_t units = dim[0] * dim[1] * dim[2];
        uint32_t *got = run_on_fresh_words(c, kernel, count, dim, 4);

        for (uint32_t cz = 0; cz < count[2]; cz++)
        for (uint32_t cy = 0; cy < count[1]; cy++)
        for (uint32_t cx = 0; cx < count[0]; cx++)
        for (uint32_t uz = 0; uz < dim[2]; uz++)
        for (uint32_t uy = 0; uy < dim[1]; uy++)
        for (uint32_t ux = 0; ux < dim[0]; ux++) {
                uint32_t cube = cx + cy * count[0] + cz * count[0] * count[1];
                uint32_t t = ux + uy * dim[0] + uz * dim[0] * dim[1];
                size_t g = (size_t) cube * units + t;
                uint32_t want[4] = {
                        ux | uy << 10 | uz << 20,
                        dim[0] | dim[1] << 10 | dim[2] << 20,
                        t,
                        (cx * dim[0] + ux) | (cy * dim[1] + uy) << 10 | (cz * dim[2] + uz) << 20,
                };
                for (int w = 0; w < 4; w++) {
                        uint32_t expect = t % 3 == 1 ? 0xa5a5a5a5u : want[w];
                        ck_assert_msg(got[4 * g + w] == expect, "count (%u, %u, %u) dim (%u, %u, "
                                      "%u): cube %u unit %u word %d is %#x, expected %#x",
                                      count[0], count[1], count[2], dim[0], dim[1], dim[2], cube,
                                      t, w, got[4 * g + w], expect);
                }
        }
        free(got);
}

START_TEST(units_that_need_no_other_see_their_own_place_and_may_return_early)
{
        static const uint32_t shapes[][2][3] = {
                { { 3, 2, 1 }, { 16, 8, 4 } },
                { { 5, 1, 2 }, { 7, 5, 3 } },
                { { 4, 1, 1 }, { 256, 1, 1 } },
                { { 1, 1, 1 }, { 9, 4, 2 } },           /* one cube: the inline device */
        };

        on_each_shape(where_source, "where", shapes, sizeof(shapes) / sizeof(shapes[0]),
                      check_where);
}
END_TEST

/* Every unit writes its cube's position into its slot, and after a barrier
 * counts the slots of its cube that hold anything else. */
static const char owner_source[] =
        "KERNEL void owner(uint32_t *out, INFO)\n"
        "{\n"
        "        SHARED uint32_t mine[256];\n"
        "        uint32_t t = UNIT_POS, foreign = 0;\n"
        "\n"
        "        mine[t] = CUBE_POS;\n"
        "        sync_cube();\n"
        "        for (uint32_t i = 0; i < CUBE_DIM; i++)\n"
        "                foreign += mine[i] != CUBE_POS;\n"
        "        out[2 * ABSOLUTE_POS] = mine[(t + 1) % CUBE_DIM];\n"
        "        out[2 * ABSOLUTE_POS + 1] = foreign;\n"
        "}\n";

START_TEST(shared_memory_belongs_to_one_cube)
{
        const uint32_t count[3] = { 16, 8, 2 }, units = 256, cubes = 16 * 8 * 2;
        size_t n = (size_t) 2 * units * cubes;
        uint32_t *got = malloc(n * sizeof(uint32_t));
        cube_client *c;
        cube_handle out;
        uint64_t k;

        ck_ok(cube_connect(D.socket, "shared", &c));
        k = test_kernel(c, owner_source, "owner");
        memset(got, 0xa5, n * sizeof(uint32_t));
        ck_ok(cube_create(c, got, n * sizeof(uint32_t), &out));
        launch(c, (cube_launch) {
                .kernel = k, .cube_count = { count[0], count[1], count[2] },
                .cube_dim = { 16, 16, 1 }, .buffers = &out, .n_buffers = 1,
        });
        ck_ok(cube_read(c, &out, got, n * sizeof(uint32_t)));
        for (uint32_t g = 0; g < units * cubes; g++) {
                ck_assert_msg(got[2 * g] == g / units, "unit %u of cube %u saw %#x in its "
                              "cube's shared memory", g % units, g / units, got[2 * g]);
                ck_assert_msg(got[2 * g + 1] == 0, "unit %u of cube %u found %u slots written "
                              "by another cube", g % units, g / units, got[2 * g + 1]);
        }
        cube_disconnect(c);
        free(got);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Refusals
 * ------------------------------------------------------------------------- */

/* A refused launch of triple (or of a kernel with its signature): the
 * declared output reads back an Unwritten whose root is
 * Launch(TooManyResources(variant)); the const input stays readable with the
 * bytes it had. Returns the failure for the caller to inspect and free. */
static cube_error *refused_launch(cube_client *c, uint64_t kernel, const uint32_t dim[3],
                                  const cube_handle *in, const uint32_t *in_data,
                                  const cube_handle *out, cube_error_kind variant,
                                  const cube_error **ret_limit)
{
        static const cube_buffer_io io[2] = { CUBE_BUFFER_READ_ONLY, CUBE_BUFFER_WRITE_ONLY };
        static const uint32_t lens[2] = { TRIPLE_N, TRIPLE_N };
        const cube_error_kind chain[] = {
                CUBE_SERVER_LAUNCH, CUBE_LAUNCH_TOO_MANY_RESOURCES, variant,
        };
        cube_handle bufs[2] = { *in, *out };
        cube_info *info = info_with_lens(2, lens);
        cube_error *e;

        launch(c, (cube_launch) {
                .kernel = kernel, .cube_count = { 2, 1, 1 }, .cube_dim = { dim[0], dim[1], dim[2] },
                .buffers = bufs, .io = io, .n_buffers = 2, .info = info,
        });
        cube_info_free(info);
        e = read_failure(c, out);
        *ret_limit = expect_chain(root_of(e), chain, 3, cube_error_message(e));
        ck_assert(cube_error_is_refusal(e));
        ck_assert(cube_error_is_refusal(root_of(e)));
        ck_assert(!cube_error_is_device_poisoned(e));
        test_expect_bytes(c, in, in_data, TRIPLE_N * sizeof(uint32_t));
        return e;
}

START_TEST(a_cube_dim_beyond_the_device_is_refused)
{
        uint32_t in[TRIPLE_N], requested[3], max[3], dim[3];
        const cube_device_properties *p;
        const cube_error *limit;
        cube_handle hin, hout;
        cube_client *c;
        cube_error *e;
        uint64_t k;

        ck_ok(cube_connect(D.socket, "cube-dim", &c));
        p = cube_client_properties(c);
        /* Within the unit limit, one past the z limit. */
        dim[0] = 1;
        dim[1] = 1;
        dim[2] = p->max_cube_dim[2] + 1;
        ck_assert_uint_le(dim[2], p->max_units_per_cube);
        k = test_kernel(c, triple_source, "triple");
        triple_buffers(c, 1, in, &hin, &hout);
        e = refused_launch(c, k, dim, &hin, in, &hout, CUBE_RESOURCE_CUBE_DIM, &limit);
        ck_assert(cube_error_requested_dim(limit, requested));
        ck_assert(cube_error_max_dim(limit, max));
        for (int i = 0; i < 3; i++) {
                ck_assert_uint_eq(requested[i], dim[i]);
                ck_assert_uint_eq(max[i], p->max_cube_dim[i]);
        }
        cube_error_free(e);

        /* The daemon goes on: the same kernel within limits runs. */
        ck_ok(cube_write(c, &hout, in, sizeof(in)));
        launch_triple(c, k, &hin, &hout, CUBE_LAUNCH_EXECUTE);
        expect_tripled(c, in, &hout);
        cube_disconnect(c);
}
END_TEST

START_TEST(too_many_units_per_cube_are_refused)
{
        uint32_t in[TRIPLE_N], dim[3];
        const cube_device_properties *p;
        const cube_error *limit;
        cube_handle hin, hout;
        cube_client *c;
        cube_error *e;
        uint64_t k;

        ck_ok(cube_connect(D.socket, "units", &c));
        p = cube_client_properties(c);
        /* Every dimension within its own limit, the product beyond the total. */
        dim[0] = p->max_cube_dim[0] < p->max_units_per_cube ? p->max_cube_dim[0] :
                 p->max_units_per_cube;
        dim[1] = p->max_units_per_cube / dim[0] + 1;
        dim[2] = 1;
        ck_assert_uint_le(dim[1], p->max_cube_dim[1]);
        ck_assert_uint_gt((uint64_t) dim[0] * dim[1], p->max_units_per_cube);
        k = test_kernel(c, triple_source, "triple");
        triple_buffers(c, 2, in, &hin, &hout);
        e = refused_launch(c, k, dim, &hin, in, &hout, CUBE_RESOURCE_UNITS, &limit);
        ck_assert_uint_eq(cube_error_requested(limit), (uint64_t) dim[0] * dim[1]);
        ck_assert_uint_eq(cube_error_max(limit), p->max_units_per_cube);
        cube_error_free(e);
        cube_disconnect(c);
}
END_TEST

/* A kernel whose SHARED array holds words u32, every one of them used:
 * out[i] = in[i] + (words - 1 - UNIT_POS). */
static void hoard_source(char *buf, size_t cap, uint32_t words)
{
        snprintf(buf, cap,
                 "KERNEL void hoard(const uint32_t *in, uint32_t *out, INFO)\n"
                 "{\n"
                 "        SHARED uint32_t big[%u];\n"
                 "        uint64_t i = ABSOLUTE_POS;\n"
                 "\n"
                 "        for (uint32_t j = UNIT_POS; j < %u; j += CUBE_DIM)\n"
                 "                big[j] = j;\n"
                 "        sync_cube();\n"
                 "        if (i < BUFFER_LEN(1))\n"
                 "                out[i] = in[i] + big[%u - 1 - UNIT_POS];\n"
                 "}\n", words, words, words);
}

START_TEST(shared_memory_beyond_the_device_is_refused)
{
        static const uint32_t dim[3] = { 64, 1, 1 };
        uint32_t in[TRIPLE_N], words;
        const cube_device_properties *p;
        const cube_error *limit;
        cube_handle hin, hout;
        cube_client *c;
        cube_error *e;
        char source[1024];
        uint64_t k;

        ck_ok(cube_connect(D.socket, "shared-memory", &c));
        p = cube_client_properties(c);
        ck_assert_uint_gt(p->max_shared_memory_size, 0);
        /* A quarter more than the device holds. */
        words = p->max_shared_memory_size / 4 + p->max_shared_memory_size / 16;
        hoard_source(source, sizeof(source), words);
        k = test_kernel(c, source, "hoard");
        triple_buffers(c, 3, in, &hin, &hout);
        e = refused_launch(c, k, dim, &hin, in, &hout, CUBE_RESOURCE_SHARED_MEMORY, &limit);
        ck_assert_uint_eq(cube_error_requested(limit), (uint64_t) words * 4);
        ck_assert_uint_eq(cube_error_max(limit), p->max_shared_memory_size);
        cube_error_free(e);

        /* Once compiled, the kernel's own answer protects the const input
         * even when the launch declares nothing. */
        ck_ok(cube_write(c, &hout, in, sizeof(in)));
        launch_triple(c, k, &hin, &hout, CUBE_LAUNCH_EXECUTE);
        cube_error_free(read_failure(c, &hout));
        test_expect_bytes(c, &hin, in, sizeof(in));
        cube_disconnect(c);
}
END_TEST

START_TEST(the_shared_memory_limit_is_exact)
{
        static const uint32_t dim[3] = { 64, 1, 1 };
        uint32_t in[TRIPLE_N], got[TRIPLE_N], words;
        const cube_device_properties *p;
        const cube_error *limit;
        cube_handle hin, hout;
        cube_client *c;
        cube_error *e;
        char source[1024];
        uint64_t k;

        ck_ok(cube_connect(D.socket, "shared-limit", &c));
        p = cube_client_properties(c);
        ck_assert_uint_eq(p->max_shared_memory_size % 4, 0);
        words = p->max_shared_memory_size / 4;

        /* All of it: the launch runs. */
        hoard_source(source, sizeof(source), words);
        k = test_kernel(c, source, "hoard");
        triple_buffers(c, 7, in, &hin, &hout);
        launch_triple(c, k, &hin, &hout, CUBE_LAUNCH_EXECUTE);
        ck_ok(cube_read(c, &hout, got, sizeof(got)));
        for (uint32_t i = 0; i < TRIPLE_N; i++)
                ck_assert_uint_eq(got[i], in[i] + (words - 1 - i % 64));

        /* Four bytes more: refused, for exactly those bytes. */
        hoard_source(source, sizeof(source), words + 1);
        k = test_kernel(c, source, "hoard");
        e = refused_launch(c, k, dim, &hin, in, &hout, CUBE_RESOURCE_SHARED_MEMORY, &limit);
        ck_assert_uint_eq(cube_error_requested(limit), (uint64_t) words * 4 + 4);
        ck_assert_uint_eq(cube_error_max(limit), p->max_shared_memory_size);
        cube_error_free(e);
        cube_disconnect(c);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Compile and signature errors
 * ------------------------------------------------------------------------- */

static const char broken_source[] =
        "KERNEL void broken(const uint32_t *in, uint32_t *out, INFO)\n"
        "{\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "        if (i < BUFFER_LEN(1))\n"
        "                out[i] = in[i] + undeclared_cube_thing;\n"
        "}\n";

/* A launch of a kernel that cannot be built: the declared output carries
 * Launch(CompilationError(kind)), a refusal; the declared input does not. */
static cube_error *expect_compilation_error(cube_client *c, uint64_t kernel,
                                            cube_error_kind kind, uint32_t seed)
{
        static const cube_buffer_io io[2] = { CUBE_BUFFER_READ_ONLY, CUBE_BUFFER_WRITE_ONLY };
        static const uint32_t lens[2] = { TRIPLE_N, TRIPLE_N };
        const cube_error_kind chain[] = {
                CUBE_SERVER_LAUNCH, CUBE_LAUNCH_COMPILATION_ERROR, kind,
        };
        uint32_t in[TRIPLE_N];
        cube_handle hin, hout, bufs[2];
        cube_info *info = info_with_lens(2, lens);
        cube_error *e;

        triple_buffers(c, seed, in, &hin, &hout);
        bufs[0] = hin;
        bufs[1] = hout;
        launch(c, (cube_launch) {
                .kernel = kernel, .cube_count = { 16, 1, 1 }, .cube_dim = { 64, 1, 1 },
                .buffers = bufs, .io = io, .n_buffers = 2, .info = info,
        });
        cube_info_free(info);
        e = read_failure(c, &hout);
        expect_chain(root_of(e), chain, 3, cube_error_message(e));
        ck_assert(cube_error_is_refusal(e));
        ck_assert(!cube_error_is_device_poisoned(e));
        test_expect_bytes(c, &hin, in, sizeof(in));
        return e;
}

START_TEST(a_kernel_that_does_not_compile_is_refused_with_the_compilers_words)
{
        uint32_t in[TRIPLE_N];
        cube_handle hin, hout;
        cube_client *c;
        cube_error *e;
        uint64_t k;

        ck_ok(cube_connect(D.socket, "broken", &c));
        k = test_kernel(c, broken_source, "broken");
        e = expect_compilation_error(c, k, CUBE_COMPILATION_GENERIC, 4);
        ck_assert_msg(strstr(cube_error_message(e), "undeclared_cube_thing") != NULL,
                      "the compiler's diagnostic is missing: %s", cube_error_message(e));
        cube_error_free(e);
        ck_assert_str_eq(kernel_entry(c, "broken").state, "failed");

        /* A second launch gets the same answer, without a second compile. */
        uint64_t compiles = session_status(c).compiles;
        cube_error_free(expect_compilation_error(c, k, CUBE_COMPILATION_GENERIC, 5));
        ck_assert_uint_eq(session_status(c).compiles, compiles);

        /* The daemon keeps serving, this session and others. */
        k = test_kernel(c, triple_source, "triple");
        triple_buffers(c, 6, in, &hin, &hout);
        launch_triple(c, k, &hin, &hout, CUBE_LAUNCH_EXECUTE);
        expect_tripled(c, in, &hout);
        cube_disconnect(c);
        ck_assert(!status_of(D.socket).poisoned);
}
END_TEST

START_TEST(a_kernel_with_a_bad_signature_fails_validation)
{
        static const char *const sources[] = {
                /* A buffer after a scalar. */
                "KERNEL void nosig(uint32_t n, const uint32_t *in, uint32_t *out)\n"
                "{\n"
                "        out[0] = in[0] + n;\n"
                "}\n",
                /* A scalar of a type no launch can give. */
                "KERNEL void nosig(const uint32_t *in, uint16_t n, INFO)\n"
                "{\n"
                "        (void) in;\n"
                "        (void) n;\n"
                "}\n",
                /* No kernel of that name at all. */
                "KERNEL void something_else(const uint32_t *in, uint32_t *out, INFO)\n"
                "{\n"
                "        out[0] = in[0];\n"
                "}\n",
        };
        cube_client *c;

        ck_ok(cube_connect(D.socket, "signature", &c));
        for (size_t i = 0; i < sizeof(sources) / sizeof(sources[0]); i++) {
                uint64_t k = test_kernel(c, sources[i], "nosig");
                cube_error_free(expect_compilation_error(c, k, CUBE_COMPILATION_VALIDATION,
                                                         (uint32_t) i + 10));
        }
        cube_disconnect(c);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Launch modes
 * ------------------------------------------------------------------------- */

START_TEST(compile_mode_fills_the_cache_and_runs_nothing)
{
        uint32_t in[TRIPLE_N];
        cube_handle hin, hout;
        cube_kernel_info ki;
        cube_client *c;
        uint64_t k;

        ck_ok(cube_connect(D.socket, "compile-mode", &c));
        ck_assert_uint_eq(session_status(c).compiles, 0);
        k = test_kernel(c, triple_source, "triple");
        triple_buffers(c, 20, in, &hin, &hout);
        launch_triple(c, k, &hin, &hout, CUBE_LAUNCH_COMPILE);

        ck_assert_uint_eq(session_status(c).compiles, 1);
        ki = kernel_entry(c, "triple");
        ck_assert_str_eq(ki.state, "compiled");
        ck_assert(!ki.from_disk);
        ck_assert_uint_eq(ki.hits, 0);
        expect_pattern(c, &hout);

        /* The launch that runs it compiles nothing more. */
        launch_triple(c, k, &hin, &hout, CUBE_LAUNCH_EXECUTE);
        expect_tripled(c, in, &hout);
        ck_assert_uint_eq(session_status(c).compiles, 1);
        ck_assert_uint_eq(kernel_entry(c, "triple").hits, ki.hits + 1);
        cube_disconnect(c);
}
END_TEST

/* Three entry points of one source, with two, two and one buffers, and a
 * helper marked KERNEL that the source calls (a helper, not an entry). */
static const char several_source[] =
        "KERNEL uint32_t bump(uint32_t v)\n"
        "{\n"
        "        return v + 1u;\n"
        "}\n"
        "KERNEL void twice(const uint32_t *in, uint32_t *out, INFO)\n"
        "{\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "        if (i < BUFFER_LEN(1))\n"
        "                out[i] = in[i] * 2u;\n"
        "}\n"
        "KERNEL void plus_one(const uint32_t *in, uint32_t *out, INFO)\n"
        "{\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "        if (i < BUFFER_LEN(1))\n"
        "                out[i] = bump(in[i]);\n"
        "}\n"
        "KERNEL void fill(uint32_t *out, INFO)\n"
        "{\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "        if (i < BUFFER_LEN(0))\n"
        "                out[i] = 7u;\n"
        "}\n";

/* A source with several entry points is read and built once, every entry
 * point by its own name, and the disk keeps one artifact for it, which a
 * restarted daemon loads for each of them. */
START_TEST(a_source_with_several_entry_points_is_built_once)
{
        static const char *const entries[] = { "twice", "plus_one", "fill" };
        static const uint32_t lens[2] = { TRIPLE_N, TRIPLE_N };
        uint32_t in[TRIPLE_N], got[TRIPLE_N];
        cube_handle hin, hout;
        cube_cache_artifact *arts;
        size_t n_arts;
        cube_client *c;
        uint64_t k[3];

        ck_ok(cube_connect(D.socket, "several", &c));
        triple_buffers(c, 40, in, &hin, &hout);
        for (int round = 0; round < 2; round++) {
                for (int i = 0; i < 3; i++) {
                        k[i] = test_kernel(c, several_source, entries[i]);
                        cube_handle bufs[2] = { hin, hout };
                        cube_info *info = info_with_lens(i == 2 ? 1 : 2, i == 2 ? lens + 1 : lens);
                        launch(c, (cube_launch) {
                                .kernel = k[i], .cube_count = { (TRIPLE_N + 63) / 64, 1, 1 },
                                .cube_dim = { 64, 1, 1 }, .buffers = i == 2 ? bufs + 1 : bufs,
                                .n_buffers = i == 2 ? 1 : 2, .info = info,
                                .mode = round == 0 ? CUBE_LAUNCH_QUEUE : CUBE_LAUNCH_EXECUTE,
                        });
                        cube_info_free(info);
                        if (round == 0)
                                continue;
                        ck_ok(cube_read(c, &hout, got, sizeof(got)));
                        for (uint32_t j = 0; j < TRIPLE_N; j++) {
                                uint32_t want = i == 0 ? in[j] * 2u : i == 1 ? in[j] + 1u : 7u;
                                ck_assert_msg(got[j] == want, "%s: out[%u] = %#x, expected %#x",
                                              entries[i], j, got[j], want);
                        }
                }
                /* The three asked for at once: one build, the others wait
                 * for it and load what it stored. */
                if (round == 0)
                        ck_ok(cube_compile_queued(c));
                ck_assert_uint_eq(session_status(c).compiles, 1);
        }
        /* The three entries are one program: one key, one artifact. */
        cube_kernel_info tw = kernel_entry(c, "twice"), po = kernel_entry(c, "plus_one");
        cube_kernel_info fi = kernel_entry(c, "fill");
        ck_assert(tw.hash[0]);
        ck_assert_str_eq(po.hash, tw.hash);
        ck_assert_str_eq(fi.hash, tw.hash);
        ck_assert_str_eq(fi.state, "compiled");
        ck_ok(cube_daemon_cache_artifacts(c, &arts, &n_arts));
        ck_assert_uint_eq(n_arts, 1);
        ck_assert_str_eq(arts[0].entry, "twice,plus_one,fill");
        free(arts);
        cube_disconnect(c);
}
END_TEST

START_TEST(queue_mode_compiles_only_when_asked)
{
        uint32_t in[TRIPLE_N];
        cube_handle hin, hout;
        cube_client *c;
        cube_error *e;
        uint64_t k, bad;

        ck_ok(cube_connect(D.socket, "queue-mode", &c));
        k = test_kernel(c, triple_source, "triple");
        triple_buffers(c, 30, in, &hin, &hout);
        launch_triple(c, k, &hin, &hout, CUBE_LAUNCH_QUEUE);
        ck_assert_uint_eq(session_status(c).compiles, 0);
        ck_assert_str_eq(kernel_entry(c, "triple").state, "new");
        expect_pattern(c, &hout);

        ck_ok(cube_compile_queued(c));
        ck_assert_uint_eq(session_status(c).compiles, 1);
        ck_assert_str_eq(kernel_entry(c, "triple").state, "compiled");
        expect_pattern(c, &hout);

        launch_triple(c, k, &hin, &hout, CUBE_LAUNCH_EXECUTE);
        expect_tripled(c, in, &hout);
        ck_assert_uint_eq(session_status(c).compiles, 1);

        /* A queued kernel that fails says so at its own launch, not before. */
        bad = test_kernel(c, broken_source, "broken");
        launch_triple(c, bad, &hin, &hout, CUBE_LAUNCH_QUEUE);
        ck_assert_str_eq(kernel_entry(c, "broken").state, "new");
        ck_ok(cube_compile_queued(c));
        ck_assert_str_eq(kernel_entry(c, "broken").state, "failed");
        expect_tripled(c, in, &hout);   /* the queue launch touched nothing */
        e = expect_compilation_error(c, bad, CUBE_COMPILATION_GENERIC, 31);
        ck_assert_msg(strstr(cube_error_message(e), "undeclared_cube_thing") != NULL, "%s",
                      cube_error_message(e));
        cube_error_free(e);
        cube_disconnect(c);
}
END_TEST

/* ---------------------------------------------------------------------------
 * The kernel cache
 * ------------------------------------------------------------------------- */

/* Connects, runs triple once on fresh data and checks it; returns the
 * session's view of the daemon afterwards. */
static cube_status triple_session(const char *socket, uint64_t seed)
{
        uint32_t in[TRIPLE_N];
        cube_handle hin, hout;
        cube_client *c;
        cube_status st;
        uint64_t k;

        ck_ok(cube_connect(socket, "cache", &c));
        k = test_kernel(c, triple_source, "triple");
        triple_buffers(c, seed, in, &hin, &hout);
        launch_triple(c, k, &hin, &hout, CUBE_LAUNCH_EXECUTE);
        expect_tripled(c, in, &hout);
        st = session_status(c);
        cube_disconnect(c);
        return st;
}

static cube_kernel_info triple_entry(const char *socket)
{
        cube_client *c;
        cube_kernel_info ki;

        ck_ok(cube_connect(socket, "kernels", &c));
        ki = kernel_entry(c, "triple");
        cube_disconnect(c);
        return ki;
}

/* A session holding triple registered: the entry lives while it does. */
static cube_client *triple_keeper(const char *socket)
{
        cube_client *c;

        cube_status st;

        ck_ok(cube_connect(socket, "keeper", &c));
        test_kernel(c, triple_source, "triple");
        ck_ok(cube_daemon_status(c, &st));       /* the registration has arrived */
        return c;
}

START_TEST(a_second_session_hits_the_first_sessions_compile)
{
        cube_kernel_info before, after;
        cube_client *keeper = triple_keeper(D.socket);
        cube_status st;

        st = triple_session(D.socket, 40);
        ck_assert_uint_eq(st.compiles, 1);
        ck_assert_uint_eq(st.kernels, 1);
        before = triple_entry(D.socket);

        st = triple_session(D.socket, 41);
        ck_assert_uint_eq(st.compiles, 1);
        ck_assert_uint_eq(st.kernels, 1);
        after = triple_entry(D.socket);
        ck_assert_str_eq(after.hash, before.hash);
        ck_assert_uint_eq(after.hits, before.hits + 1);
        cube_disconnect(keeper);
}
END_TEST

START_TEST(a_restarted_daemon_loads_the_kernel_from_its_cache_dir)
{
        const char *args[] = { "--cache-dir", shared_cache, NULL };
        cube_kernel_info first, ki;
        cube_client *keeper;
        cube_status st;

        strcpy(shared_cache, "/tmp/cube-kernel-cache-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(shared_cache));
        ck_assert_int_eq(test_daemon_stop(&D, 10000), 0);

        ck_assert_int_eq(test_daemon_start(&D, args), 0);
        keeper = triple_keeper(D.socket);
        st = triple_session(D.socket, 50);
        ck_assert_uint_eq(st.compiles, 1);
        first = triple_entry(D.socket);
        ck_assert(!first.from_disk);
        cube_disconnect(keeper);
        ck_assert_int_eq(test_daemon_stop(&D, 10000), 0);

        ck_assert_int_eq(test_daemon_start(&D, args), 0);
        keeper = triple_keeper(D.socket);
        st = triple_session(D.socket, 51);
        ck_assert_uint_eq(st.compiles, 0);
        ki = triple_entry(D.socket);
        ck_assert_str_eq(ki.hash, first.hash);
        ck_assert_str_eq(ki.state, "compiled");
        ck_assert(ki.from_disk);
        cube_disconnect(keeper);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Launches on the wire: sent in batches, never stranded in the client
 * ------------------------------------------------------------------------- */

/* The launches the daemon has taken from session id, as another client sees
 * them, or UINT64_MAX when it has no such session. */
static uint64_t launches_taken(cube_client *watcher, uint64_t id)
{
        cube_session_info *v;
        uint64_t taken = UINT64_MAX;
        size_t n;

        ck_ok(cube_daemon_sessions(watcher, &v, &n));
        for (size_t i = 0; i < n; i++)
                if (v[i].id == id)
                        taken = v[i].launches;
        free(v);
        return taken;
}

/* Connects and runs triple once, so that the kernel is compiled and a
 * launch's timing is the wire's alone. */
static void ck_connect_compiled(cube_client **ret_client, uint64_t *ret_kernel, const char *name)
{
        uint32_t in[TRIPLE_N];
        cube_handle hin, hout;

        ck_ok(cube_connect(D.socket, name, ret_client));
        *ret_kernel = test_kernel(*ret_client, triple_source, "triple");
        triple_buffers(*ret_client, 2, in, &hin, &hout);
        launch_triple(*ret_client, *ret_kernel, &hin, &hout, CUBE_LAUNCH_EXECUTE);
        expect_tripled(*ret_client, in, &hout);
}

START_TEST(a_lone_launch_reaches_the_daemon_without_another_call)
{
        uint32_t in[TRIPLE_N];
        cube_client *c, *watcher;
        cube_handle hin, hout;
        uint64_t k, taken = 0;

        ck_connect_compiled(&c, &k, "lone");
        ck_ok(cube_connect(D.socket, "watcher", &watcher));
        triple_buffers(c, 3, in, &hin, &hout);
        launch_triple(c, k, &hin, &hout, CUBE_LAUNCH_EXECUTE);
        /* Nothing more is asked of c until the daemon has the launch. */
        for (int i = 0; i < 2000 && (taken = launches_taken(watcher, cube_client_session(c))) == 1;
             i++)
                usleep(1000);
        ck_assert_uint_eq(taken, 2);
        expect_tripled(c, in, &hout);
        cube_disconnect(watcher);
        cube_disconnect(c);
}
END_TEST

START_TEST(launches_queued_just_before_a_disconnect_still_run)
{
        uint32_t in[TRIPLE_N], got[TRIPLE_N];
        cube_client *c, *reader;
        cube_handle hin, hout, shared;
        char token[33];
        bool tripled = false;
        uint64_t k;

        ck_connect_compiled(&c, &k, "leaving");
        ck_ok(cube_connect(D.socket, "staying", &reader));
        triple_buffers(c, 4, in, &hin, &hout);
        ck_ok(cube_export(c, &hout, token));
        ck_ok(cube_import(reader, token, true, &shared));
        launch_triple(c, k, &hin, &hout, CUBE_LAUNCH_EXECUTE);
        cube_disconnect(c);

        for (int i = 0; i < 2000 && !tripled; i++) {
                ck_ok(cube_read(reader, &shared, got, sizeof(got)));
                tripled = got[0] == in[0] * 3u + 1u;
                if (!tripled)
                        usleep(1000);
        }
        ck_assert_msg(tripled, "the launch queued before the disconnect never ran");
        for (uint32_t i = 0; i < TRIPLE_N; i++)
                ck_assert_uint_eq(got[i], in[i] * 3u + 1u);
        cube_disconnect(reader);
}
END_TEST

START_TEST(a_process_that_exits_without_disconnecting_still_sends_its_launches)
{
        int to_parent[2], to_child[2];
        uint32_t in[TRIPLE_N], got[TRIPLE_N];
        char token[33], go = 0;
        cube_handle shared;
        cube_client *reader;
        bool tripled = false;
        pid_t pid;

        ck_assert_int_eq(pipe(to_parent), 0);
        ck_assert_int_eq(pipe(to_child), 0);
        fill_random(in, sizeof(in), 10);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                cube_handle hin, hout;
                cube_client *c;
                uint64_t k;
                char t[33];

                ck_connect_compiled(&c, &k, "exiting");
                triple_buffers(c, 10, in, &hin, &hout);
                if (cube_export(c, &hout, t) != NULL ||
                    write(to_parent[1], t, sizeof(t)) != (ssize_t) sizeof(t) ||
                    read(to_child[0], &go, 1) != 1)
                        _exit(1);
                launch_triple(c, k, &hin, &hout, CUBE_LAUNCH_EXECUTE);
                exit(0);        /* no cube_disconnect */
        }
        ck_assert_int_eq(read(to_parent[0], token, sizeof(token)), (ssize_t) sizeof(token));
        ck_ok(cube_connect(D.socket, "survivor", &reader));
        ck_ok(cube_import(reader, token, true, &shared));
        ck_assert_int_eq(write(to_child[1], &go, 1), 1);
        int status;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        for (int i = 0; i < 2000 && !tripled; i++) {
                ck_ok(cube_read(reader, &shared, got, sizeof(got)));
                tripled = got[0] == in[0] * 3u + 1u;
                if (!tripled)
                        usleep(1000);
        }
        ck_assert_msg(tripled, "the launch made just before exit() never ran");
        cube_disconnect(reader);
        for (int i = 0; i < 2; i++) {
                close(to_parent[i]);
                close(to_child[i]);
        }
}
END_TEST

START_TEST(a_launch_on_a_lost_connection_says_so)
{
        uint32_t in[TRIPLE_N];
        cube_handle hin, hout;
        cube_client *c;
        cube_error *e;
        uint64_t k;

        ck_connect_compiled(&c, &k, "orphan");
        triple_buffers(c, 9, in, &hin, &hout);
        ck_assert_int_eq(test_daemon_stop(&D, 10000), 0);
        e = cube_sync(c, NULL, 0);
        ck_assert_msg(e != NULL, "a sync on a stopped daemon succeeded");
        cube_error_free(e);
        static const uint32_t lens[2] = { TRIPLE_N, TRIPLE_N };
        cube_handle bufs[2] = { hin, hout };
        cube_info *info = info_with_lens(2, lens);
        e = cube_launch_kernel(c, &(cube_launch) {
                .kernel = k, .cube_count = { 16, 1, 1 }, .cube_dim = { 64, 1, 1 },
                .buffers = bufs, .n_buffers = 2, .info = info,
        });
        cube_info_free(info);
        ck_assert_msg(e && strstr(cube_error_message(e), "lost"),
                      "a launch on a lost connection: %s",
                      e ? cube_error_message(e) : "accepted");
        cube_error_free(e);
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_start(&D, NULL), 0);
}
END_TEST

START_TEST(a_burst_of_launches_runs_in_order_with_the_copies_between)
{
        enum { ROUNDS = 3000 };
        uint32_t in[TRIPLE_N], back[TRIPLE_N];
        cube_handle hin, hout;
        cube_client *c;
        uint64_t k;

        /* Every round triples in into out and out back into in; every 100th
         * first overwrites in with fresh values. Only strict order between
         * batched launches and unbatched writes ends with the model's values. */
        ck_ok(cube_connect(D.socket, "burst", &c));
        k = test_kernel(c, triple_source, "triple");
        triple_buffers(c, 5, in, &hin, &hout);
        for (int r = 0; r < ROUNDS; r++) {
                if (r % 100 == 0) {
                        fill_random(in, sizeof(in), 6 + (uint64_t) r);
                        ck_ok(cube_write(c, &hin, in, sizeof(in)));
                }
                launch_triple(c, k, &hin, &hout, CUBE_LAUNCH_EXECUTE);
                launch_triple(c, k, &hout, &hin, CUBE_LAUNCH_EXECUTE);
                for (uint32_t i = 0; i < TRIPLE_N; i++)
                        in[i] = (in[i] * 3u + 1u) * 3u + 1u;
        }
        ck_ok(cube_read(c, &hin, back, sizeof(back)));
        for (uint32_t i = 0; i < TRIPLE_N; i++)
                ck_assert_uint_eq(back[i], in[i]);
        cube_disconnect(c);
}
END_TEST

/* ---------------------------------------------------------------------------
 * A faulting kernel
 * ------------------------------------------------------------------------- */

static const char null_write_source[] =
        "KERNEL void scribble(uint32_t *out, INFO)\n"
        "{\n"
        "        volatile uint32_t *volatile nowhere = NULL;\n"
        "\n"
        "        out[ABSOLUTE_POS] = 1;\n"
        "        if (ABSOLUTE_POS == 77)\n"
        "                *nowhere = 1;\n"
        "}\n";

/* The same fault from a unit running on its own stack, between barriers,
 * at an address far past its buffer. */
static const char far_write_source[] =
        "KERNEL void scribble(uint32_t *out, INFO)\n"
        "{\n"
        "        SHARED uint32_t s[64];\n"
        "\n"
        "        s[UNIT_POS] = UNIT_POS;\n"
        "        sync_cube();\n"
        "        out[ABSOLUTE_POS] = s[(UNIT_POS + 1) % CUBE_DIM];\n"
        "        if (ABSOLUTE_POS == 77)\n"
        "                out[(uint64_t) 1 << 44] = 1;\n"
        "        sync_cube();\n"
        "}\n";

static void fault_poisons_the_device(const char *source)
{
        uint32_t data[256], *back;
        cube_client *bystander, *faulter, *late;
        cube_handle mine, out;
        cube_status st;
        cube_error *e;
        uint64_t k;

        fill_random(data, sizeof(data), 60);
        ck_ok(cube_connect(D.socket, "bystander", &bystander));
        ck_ok(cube_create(bystander, data, sizeof(data), &mine));
        test_expect_bytes(bystander, &mine, data, sizeof(data));

        ck_ok(cube_connect(D.socket, "faulter", &faulter));
        k = test_kernel(faulter, source, "scribble");
        ck_ok(cube_empty(faulter, 64 * 4 * sizeof(uint32_t), &out));
        /* Unchecked: a checked launch cannot leave its bindings. */
        launch(faulter, (cube_launch) {
                .kernel = k, .cube_count = { 4, 1, 1 }, .cube_dim = { 64, 1, 1 },
                .buffers = &out, .n_buffers = 1, .mode = CUBE_LAUNCH_UNCHECKED,
        });
        e = cube_sync(faulter, NULL, 0);
        ck_assert_msg(e != NULL, "the sync after a faulting kernel succeeded");
        ck_assert_msg(cube_error_is_device_poisoned(e), "not a poisoned device: %s",
                      cube_error_message(e));
        ck_assert_msg(strstr(cube_error_message(e), "scribble") != NULL,
                      "the kernel is not named: %s", cube_error_message(e));
        ck_assert(!cube_error_is_refusal(e));
        cube_error_free(e);

        /* What it wrote carries the poison too. */
        back = malloc(cube_handle_len(&out));
        e = cube_read(faulter, &out, back, cube_handle_len(&out));
        free(back);
        ck_assert_ptr_nonnull(e);
        ck_assert(cube_error_is_device_poisoned(e));
        cube_error_free(e);

        /* A session that was there before learns it on its next read. */
        e = cube_read(bystander, &mine, data, sizeof(data));
        ck_assert_msg(e != NULL, "the bystander's read succeeded on a poisoned device");
        ck_assert_msg(cube_error_kind_of(e) == CUBE_SERVER_DEVICE_POISONED, "not DevicePoisoned: "
                      "%s", cube_error_message(e));
        ck_assert(cube_error_is_device_poisoned(e));
        ck_assert_msg(strstr(cube_error_message(e), "scribble") != NULL,
                      "the kernel is not named: %s", cube_error_message(e));
        cube_error_free(e);

        /* A new session still connects, and the daemon says what happened. */
        ck_ok(cube_connect(D.socket, "late", &late));
        st = session_status(late);
        ck_assert(st.poisoned);
        ck_assert_msg(strstr(st.poison, "faulter") != NULL && strstr(st.poison, "session") &&
                      strstr(st.poison, "scribble"), "poison: %s", st.poison);
        cube_disconnect(late);
        cube_disconnect(faulter);
        cube_disconnect(bystander);
}

START_TEST(a_null_write_poisons_the_device_and_the_daemon_keeps_answering)
{
        fault_poisons_the_device(null_write_source);
}
END_TEST

START_TEST(a_wild_write_between_barriers_poisons_the_device_too)
{
        fault_poisons_the_device(far_write_source);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Dynamic cube counts, bindings, and the info words
 * ------------------------------------------------------------------------- */

/* Unit 0 of every cube records where its cube is and how many there are. */
static const char mark_source[] =
        "KERNEL void mark(uint32_t *out, INFO)\n"
        "{\n"
        "        if (UNIT_POS == 0)\n"
        "                out[CUBE_POS] = 0x80000000u | CUBE_POS_X | CUBE_POS_Y << 4 |\n"
        "                                CUBE_POS_Z << 8 | CUBE_COUNT_X << 12 |\n"
        "                                CUBE_COUNT_Y << 16 | CUBE_COUNT_Z << 20;\n"
        "}\n";

#define MARK_N 64

START_TEST(a_dynamic_count_read_from_a_buffer_runs_that_many_cubes)
{
        static const uint32_t zeros[][3] = { { 0, 2, 2 }, { 2, 0, 2 }, { 2, 2, 0 } };
        const uint32_t stale[3] = { 1, 1, 1 }, count[3] = { 3, 2, 2 };
        uint32_t pattern[MARK_N], got[MARK_N];
        cube_handle hcount, out;
        cube_client *c;
        uint64_t k;

        ck_ok(cube_connect(D.socket, "dynamic", &c));
        k = test_kernel(c, mark_source, "mark");
        memset(pattern, 0xa5, sizeof(pattern));
        ck_ok(cube_create(c, pattern, sizeof(pattern), &out));
        /* The count is read in stream order: the write after the create wins. */
        ck_ok(cube_create(c, stale, sizeof(stale), &hcount));
        ck_ok(cube_write(c, &hcount, count, sizeof(count)));
        launch(c, (cube_launch) {
                .kernel = k, .dynamic_count = &hcount, .cube_dim = { 8, 1, 1 },
                .buffers = &out, .n_buffers = 1,
        });
        ck_ok(cube_read(c, &out, got, sizeof(got)));
        for (uint32_t i = 0; i < MARK_N; i++) {
                uint32_t want = 0xa5a5a5a5u;
                if (i < 12)
                        want = 0x80000000u | i % 3 | (i / 3 % 2) << 4 | (i / 6) << 8 |
                               3u << 12 | 2u << 16 | 2u << 20;
                ck_assert_msg(got[i] == want, "slot %u holds %#x, expected %#x", i, got[i], want);
        }

        /* Zero cubes in any dimension run nothing. */
        for (size_t z = 0; z < sizeof(zeros) / sizeof(zeros[0]); z++) {
                ck_ok(cube_write(c, &out, pattern, sizeof(pattern)));
                ck_ok(cube_write(c, &hcount, zeros[z], sizeof(zeros[z])));
                launch(c, (cube_launch) {
                        .kernel = k, .dynamic_count = &hcount, .cube_dim = { 8, 1, 1 },
                        .buffers = &out, .n_buffers = 1,
                });
                ck_ok(cube_read(c, &out, got, sizeof(got)));
                ck_assert_msg(memcmp(got, pattern, sizeof(got)) == 0, "a count of (%u, %u, %u) "
                              "ran cubes", zeros[z][0], zeros[z][1], zeros[z][2]);
        }
        cube_disconnect(c);
}
END_TEST

START_TEST(a_launch_binding_the_wrong_number_of_buffers_fails_validation)
{
        uint32_t in[TRIPLE_N];
        cube_handle hin, hout, extra, three[3];
        cube_client *c;
        cube_error *e;
        uint64_t k;

        ck_ok(cube_connect(D.socket, "bindings", &c));
        k = test_kernel(c, triple_source, "triple");
        triple_buffers(c, 70, in, &hin, &hout);

        /* One buffer short. */
        launch(c, (cube_launch) {
                .kernel = k, .cube_count = { 1, 1, 1 }, .cube_dim = { 64, 1, 1 },
                .buffers = &hout, .n_buffers = 1,
        });
        e = read_failure(c, &hout);
        ck_assert_int_eq(cube_error_kind_of(root_of(e)), CUBE_SERVER_VALIDATION);
        ck_assert_msg(strstr(cube_error_message(e), "triple") != NULL, "%s",
                      cube_error_message(e));
        ck_assert(!cube_error_is_refusal(e));
        ck_assert(!cube_error_is_device_poisoned(e));
        cube_error_free(e);

        /* One too many: every undeclared buffer counts as written. */
        ck_ok(cube_write(c, &hout, in, sizeof(in)));
        ck_ok(cube_create(c, in, sizeof(in), &extra));
        three[0] = hin;
        three[1] = hout;
        three[2] = extra;
        launch(c, (cube_launch) {
                .kernel = k, .cube_count = { 1, 1, 1 }, .cube_dim = { 64, 1, 1 },
                .buffers = three, .n_buffers = 3,
        });
        for (int i = 0; i < 3; i++) {
                e = read_failure(c, &three[i]);
                ck_assert_int_eq(cube_error_kind_of(root_of(e)), CUBE_SERVER_VALIDATION);
                cube_error_free(e);
        }
        cube_disconnect(c);
}
END_TEST

/* Two f32 scalars fill word 0; the u32 group starts at word 1. */
static const char affine_source[] =
        "KERNEL void affine(const float *x, float *y, INFO)\n"
        "{\n"
        "        float scale = SCALAR(float, 0, 0);\n"
        "        float shift = SCALAR(float, 0, 1);\n"
        "        uint32_t n = SCALAR(uint32_t, 1, 0);\n"
        "        uint32_t stride = SCALAR(uint32_t, 1, 1);\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "\n"
        "        if (i < n)\n"
        "                y[i] = x[i * stride] * scale + shift;\n"
        "}\n";

START_TEST(f32_and_u32_scalars_arrive_where_the_layout_puts_them)
{
        enum { N = 777, STRIDE = 3 };
        const float scale = -2.5f, shift = 0.375f;
        float *x = malloc(N * STRIDE * sizeof(float)), y[N];
        cube_handle bufs[2];
        cube_info *info = cube_info_new();
        cube_client *c;
        uint64_t k;

        /* Quarters times -2.5 are exact in a float, so a fused multiply-add
         * on the device rounds exactly as the separate steps here do. */
        for (int i = 0; i < N * STRIDE; i++)
                x[i] = (float) (i % 101) * 0.25f - 12.0f;
        ck_ok(cube_connect(D.socket, "scalars", &c));
        k = test_kernel(c, affine_source, "affine");
        memset(y, 0xff, sizeof(y));
        ck_ok(cube_create(c, x, N * STRIDE * sizeof(float), &bufs[0]));
        ck_ok(cube_create(c, y, sizeof(y), &bufs[1]));
        /* Added out of group order on purpose: the builder groups them. */
        ck_assert_int_eq(cube_info_u32(info, N), 0);
        ck_assert_int_eq(cube_info_f32(info, scale), 0);
        ck_assert_int_eq(cube_info_u32(info, STRIDE), 0);
        ck_assert_int_eq(cube_info_f32(info, shift), 0);
        launch(c, (cube_launch) {
                .kernel = k, .cube_count = { (N + 127) / 128, 1, 1 },
                .cube_dim = { 128, 1, 1 }, .buffers = bufs, .n_buffers = 2, .info = info,
        });
        ck_ok(cube_read(c, &bufs[1], y, sizeof(y)));
        for (int i = 0; i < N; i++) {
                float want = x[i * STRIDE] * scale + shift;
                ck_assert_msg(y[i] == want, "y[%d] = %g, expected %g", i, (double) y[i],
                              (double) want);
        }
        cube_info_free(info);
        cube_disconnect(c);
        free(x);
}
END_TEST

/* One cube_info serves a loop of launches: each step resets it and adds its
 * own scalars, and each launch reads exactly those, never the words of a
 * step before (a stencil of many steps allocates it once). */
START_TEST(one_cube_info_reset_between_launches_serves_them_all)
{
        enum { N = 256, STEPS = 5 };
        float x[N], y[N];
        cube_handle bufs[2], outs[STEPS];
        cube_info *info = cube_info_new();
        cube_client *c;
        uint64_t k;

        for (int i = 0; i < N; i++)
                x[i] = (float) (i % 17) * 0.5f;
        ck_ok(cube_connect(D.socket, "reset", &c));
        k = test_kernel(c, affine_source, "affine");
        ck_ok(cube_create(c, x, sizeof(x), &bufs[0]));
        cube_info_reset(NULL);
        for (int s = 0; s < STEPS; s++) {
                ck_ok(cube_empty(c, sizeof(y), &outs[s]));
                bufs[1] = outs[s];
                cube_info_reset(info);
                ck_assert_int_eq(cube_info_f32(info, (float) (s + 1)), 0);
                ck_assert_int_eq(cube_info_f32(info, (float) s * 0.25f), 0);
                ck_assert_int_eq(cube_info_u32(info, N), 0);
                ck_assert_int_eq(cube_info_u32(info, 1), 0);
                launch(c, (cube_launch) {
                        .kernel = k, .cube_count = { N / 64, 1, 1 }, .cube_dim = { 64, 1, 1 },
                        .buffers = bufs, .n_buffers = 2, .info = info,
                });
        }
        for (int s = 0; s < STEPS; s++) {
                ck_ok(cube_read(c, &outs[s], y, sizeof(y)));
                for (int i = 0; i < N; i++)
                        ck_assert_msg(y[i] == x[i] * (float) (s + 1) + (float) s * 0.25f,
                                      "step %d: y[%d] = %g", s, i, (double) y[i]);
        }
        cube_info_free(info);
        cube_disconnect(c);
}
END_TEST

/* A kernel of more buffers than the CPU device keeps arguments for (its
 * first 64: two of the launch's, then two per buffer). Each launch must
 * reach every binding at its own buffer and with its own length (the write
 * to its last word is checked against it), however the buffers move
 * between launches: in order, reversed, in order again. */
START_TEST(every_binding_of_a_forty_buffer_kernel_reaches_its_own_buffer)
{
        enum { NB = 40 };
        char source[8192];
        size_t at = 0;
        cube_handle h[NB], bound[NB];
        cube_info *info[2] = { cube_info_new(), cube_info_new() };
        cube_client *c;
        uint64_t k;

        at += (size_t) snprintf(source + at, sizeof(source) - at, "KERNEL void many(");
        for (unsigned i = 0; i < NB; i++)
                at += (size_t) snprintf(source + at, sizeof(source) - at, "uint32_t *b%u, ", i);
        at += (size_t) snprintf(source + at, sizeof(source) - at,
                                "INFO)\n{\n    if (ABSOLUTE_POS != 0)\n        return;\n");
        for (unsigned i = 0; i < NB; i++)
                at += (size_t) snprintf(source + at, sizeof(source) - at,
                                        "    b%u[0] += %uu;\n    b%u[BUFFER_LEN(%u) - 1] += 1;\n",
                                        i, i + 1, i, i);
        at += (size_t) snprintf(source + at, sizeof(source) - at, "}\n");
        ck_assert_uint_lt(at, sizeof(source));

        ck_ok(cube_connect(D.socket, "many", &c));
        k = test_kernel(c, source, "many");
        for (unsigned j = 0; j < NB; j++) {
                uint32_t zero[NB + 2] = { 0 };
                ck_ok(cube_create(c, zero, (j + 2) * sizeof(uint32_t), &h[j]));
        }
        for (unsigned i = 0; i < NB; i++) {
                ck_assert_int_eq(cube_info_buffer_len(info[0], i + 2), 0);
                ck_assert_int_eq(cube_info_buffer_len(info[1], NB - i + 1), 0);
        }
        for (unsigned run = 0; run < 3; run++) {
                bool reversed = run == 1;
                for (unsigned i = 0; i < NB; i++)
                        bound[i] = h[reversed ? NB - 1 - i : i];
                launch(c, (cube_launch) {
                        .kernel = k, .cube_count = { 1, 1, 1 }, .cube_dim = { 1, 1, 1 },
                        .buffers = bound, .n_buffers = NB, .info = info[reversed],
                });
        }
        /* Buffer j was binding j twice and binding NB - 1 - j once. */
        for (unsigned j = 0; j < NB; j++) {
                uint32_t got[NB + 2];
                ck_ok(cube_read(c, &h[j], got, (j + 2) * sizeof(uint32_t)));
                ck_assert_msg(got[0] == 2 * (j + 1) + (NB - j),
                              "buffer %u's first word is %u, expected %u", j, got[0],
                              2 * (j + 1) + (NB - j));
                ck_assert_msg(got[j + 1] == 3, "buffer %u's last word is %u, expected 3", j,
                              got[j + 1]);
                for (unsigned w = 1; w < j + 1; w++)
                        ck_assert_msg(got[w] == 0, "buffer %u's word %u is %u", j, w, got[w]);
        }
        cube_info_free(info[0]);
        cube_info_free(info[1]);
        cube_disconnect(c);
}
END_TEST

/* Writes out every metadata word a kernel can reach, by the formulas of
 * docs/KERNELS.md: two buffers, two tensors of ranks 2 and 3, and an i64
 * and a u32 scalar in front of them all; then each tensor's rank. */
static const char layout_source[] =
        "KERNEL void layout(uint32_t *out, const uint32_t *unused, INFO)\n"
        "{\n"
        "        const uint32_t n_buffers = 2, n_tensors = 2;\n"
        "        uint32_t j = 0;\n"
        "\n"
        "        if (ABSOLUTE_POS != 0)\n"
        "                return;\n"
        "        out[j++] = (uint32_t) SCALAR(int64_t, 0, 0);\n"
        "        out[j++] = SCALAR(uint32_t, 1, 0);\n"
        "        out[j++] = BUFFER_LEN(0);\n"
        "        out[j++] = BUFFER_LEN(1);\n"
        "        for (uint32_t t = 0; t < n_tensors; t++)\n"
        "                for (uint32_t d = 0; d < 2 + t; d++) {\n"
        "                        out[j++] = DYN_U32(META_U32(n_buffers + t) + d);\n"
        "                        out[j++] = DYN_U32(META_U32(n_buffers + n_tensors + t) + d);\n"
        "                }\n"
        "        for (uint32_t t = 0; t < n_tensors; t++)\n"
        "                out[j++] = META_U32(n_buffers + t + 1) - META_U32(n_buffers + t);\n"
        "}\n";

START_TEST(buffer_lengths_shapes_and_strides_follow_the_scalars)
{
        static const uint32_t shape0[2] = { 5, 7 }, strides0[2] = { 7, 1 };
        static const uint32_t shape1[3] = { 2, 3, 4 }, strides1[3] = { 1, 2, 6 };
        const uint32_t want[] = {
                0xfedcba98u, 4242, 32, 9,
                5, 7, 7, 1,
                2, 1, 3, 2, 4, 6,
                2, 3,                   /* the ranks */
        };
        uint32_t got[32], nine[9] = {0};
        cube_handle bufs[2];
        cube_info *info = cube_info_new();
        cube_client *c;
        uint64_t k;

        ck_ok(cube_connect(D.socket, "layout", &c));
        k = test_kernel(c, layout_source, "layout");
        memset(got, 0xa5, sizeof(got));
        ck_ok(cube_create(c, got, sizeof(got), &bufs[0]));
        ck_ok(cube_create(c, nine, sizeof(nine), &bufs[1]));
        ck_assert_int_eq(cube_info_u32(info, 4242), 0);
        ck_assert_int_eq(cube_info_i64(info, (int64_t) 0x12345678fedcba98ll), 0);
        ck_assert_int_eq(cube_info_buffer_len(info, 32), 0);
        ck_assert_int_eq(cube_info_buffer_len(info, 9), 0);
        ck_assert_int_eq(cube_info_tensor(info, 2, shape0, strides0), 0);
        ck_assert_int_eq(cube_info_tensor(info, 3, shape1, strides1), 0);
        launch(c, (cube_launch) {
                .kernel = k, .cube_count = { 1, 1, 1 }, .cube_dim = { 1, 1, 1 },
                .buffers = bufs, .n_buffers = 2, .info = info,
        });
        ck_ok(cube_read(c, &bufs[0], got, sizeof(got)));
        for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
                ck_assert_msg(got[i] == want[i], "word %zu is %u, expected %u", i, got[i], want[i]);
        ck_assert_uint_eq(got[sizeof(want) / sizeof(want[0])], 0xa5a5a5a5u);
        cube_info_free(info);
        cube_disconnect(c);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Grid helpers: the reference's CubeCount, CubeCountSelection and CubeDim
 * ------------------------------------------------------------------------- */

START_TEST(the_grid_constructors_and_predicates_follow_the_reference)
{
        cube_dim3 d = cube_dim3_single();

        ck_assert(d.x == 1 && d.y == 1 && d.z == 1);
        d = cube_dim3_1d(7);
        ck_assert(d.x == 7 && d.y == 1 && d.z == 1);
        d = cube_dim3_2d(7, 3);
        ck_assert(d.x == 7 && d.y == 3 && d.z == 1);
        d = cube_dim3_3d(7, 3, 2);
        ck_assert(d.x == 7 && d.y == 3 && d.z == 2);
        ck_assert_uint_eq(cube_dim_num_elems(d), 42);
        ck_assert(!cube_count_is_empty(d));
        ck_assert(cube_count_is_empty(cube_dim3_3d(4, 0, 1)));
        ck_assert(cube_count_is_empty(cube_dim3_1d(0)));
        ck_assert(cube_dim_can_contain(cube_dim3_3d(8, 4, 2), cube_dim3_3d(8, 1, 2)));
        ck_assert(!cube_dim_can_contain(cube_dim3_3d(8, 4, 2), cube_dim3_3d(9, 1, 1)));
        ck_assert(!cube_dim_can_contain(cube_dim3_2d(64, 64), cube_dim3_3d(1, 1, 2)));
}
END_TEST

/* CubeDim::new: one plane per core on a device with cores; a power of two
 * of planes, at most 8, on one without; never past max_units_per_cube, and
 * never empty. */
START_TEST(cube_dim_new_sizes_a_cube_as_the_reference_does)
{
        cube_device_properties gpu = { .plane_size_max = 32, .max_units_per_cube = 1024 };
        cube_device_properties cpu = { .plane_size_max = 1, .max_units_per_cube = 256,
                                       .num_cpu_cores = 16 };
        cube_dim3 d;

        d = cube_dim_new(&gpu, 1u << 20);
        ck_assert(d.x == 32 && d.y == 8 && d.z == 1);
        d = cube_dim_new(&gpu, 100);            /* 100 / 32 = 3: 2 planes */
        ck_assert(d.x == 32 && d.y == 2 && d.z == 1);
        d = cube_dim_new(&gpu, 5);
        ck_assert(d.x == 32 && d.y == 1);
        gpu.max_units_per_cube = 64;            /* 2 planes at most */
        d = cube_dim_new(&gpu, 1u << 20);
        ck_assert(d.x == 32 && d.y == 2);
        d = cube_dim_new(&cpu, 1000);
        ck_assert(d.x == 1 && d.y == 16 && d.z == 1);
        d = cube_dim_new(&cpu, 3);
        ck_assert(d.x == 1 && d.y == 3);
        d = cube_dim_new(&cpu, 0);
        ck_assert(d.x == 1 && d.y == 1);
}
END_TEST

/* CubeCountSelection: a count within the first dimension's limit is exact;
 * one beyond it is spread into y (and z), exact when the halvings divide it,
 * approximate with more cubes than asked otherwise. */
START_TEST(cube_count_select_spreads_an_oversized_count)
{
        cube_device_properties p = { .max_cube_count = { 1000, 1000, 1000 } };
        cube_count_selection s;

        s = cube_count_select(&p, 999);
        ck_assert(s.exact && s.count.x == 999 && s.count.y == 1 && s.count.z == 1);
        ck_assert_uint_eq(s.num_cubes, 999);
        s = cube_count_select(&p, 4000);
        ck_assert(s.exact && s.count.x == 1000 && s.count.y == 4 && s.count.z == 1);
        s = cube_count_select(&p, 4001);
        ck_assert(!s.exact);
        ck_assert(s.count.x <= 1000 && s.count.y <= 1000);
        ck_assert_uint_eq(s.num_cubes, s.count.x * s.count.y * s.count.z);
        ck_assert_uint_gt(s.num_cubes, 4001);
        s = cube_count_select(&p, 0);
        ck_assert(cube_count_is_empty(s.count) && s.exact);
}
END_TEST

/* A count of cubes beyond the device's first dimension, launched as
 * cube_count_select spreads it, runs every unit the caller asked for (the
 * kernel checks its bounds) instead of being refused. */
START_TEST(an_oversized_count_selected_by_the_helpers_runs)
{
        const cube_device_properties *p;
        cube_count_selection s;
        cube_launch l = { 0 };
        cube_handle out;
        cube_client *c;
        uint32_t n, *got;
        uint64_t k;

        ck_ok(cube_connect(D.socket, "grid", &c));
        p = cube_client_properties(c);
        n = p->max_cube_count[0] + 3;           /* one cube per unit, too many for x */
        s = cube_count_select(p, n);
        ck_assert(s.count.y > 1);
        ck_ok(cube_empty(c, (uint64_t) n * sizeof(uint32_t), &out));
        k = test_kernel(c, "KERNEL void mark(uint32_t *x, INFO) { uint64_t i = ABSOLUTE_POS;"
                        " if (i < BUFFER_LEN(0)) x[i] = (uint32_t) i + 1; }", "mark");
        l.kernel = k;
        cube_launch_grid(&l, s.count, cube_dim3_single());
        l.buffers = &out;
        l.n_buffers = 1;
        test_launch_u32(c, l, NULL, 0);
        got = malloc((size_t) n * sizeof(uint32_t));
        ck_assert_ptr_nonnull(got);
        ck_ok(cube_read(c, &out, got, (uint64_t) n * sizeof(uint32_t)));
        for (uint32_t i = 0; i < n; i++)
                ck_assert_msg(got[i] == i + 1, "unit %u wrote %u", i, got[i]);
        free(got);
        cube_disconnect(c);
}
END_TEST

/* ---------------------------------------------------------------------------
 * A launch read in place, or decoded
 * ------------------------------------------------------------------------- */

/* How a launch sent by hand spells its values: as msgpack-c's packer writes
 * them, which cubed reads in place (daemon/dispatch.c's
 * cube__dispatch_launch); in the wider forms that reader also takes; or
 * with one value in a form only msgpack-c's tree reads. */
typedef enum launch_spelling {
        SPELL_PACKED,
        SPELL_WIDE,             /* str8, u64 in full, array16, bin16 */
        SPELL_SIGNED_MODE,      /* the mode as an int8 */
        SPELL_SIGNED_STREAM,    /* the stream as an int64 */
} launch_spelling;

static void wide_u64(msgpack_sbuffer *sb, uint64_t v)
{
        char b[9] = { (char) 0xcf };

        for (int i = 0; i < 8; i++)
                b[1 + i] = (char) (v >> (56 - 8 * i));
        msgpack_sbuffer_write(sb, b, sizeof(b));
}

/* Launches kernel over h as one cube of one unit, spelt how. */
static void raw_launch_one(int fd, uint64_t kernel, const cube_handle *h, launch_spelling how)
{
        bool wide = how == SPELL_WIDE;
        msgpack_sbuffer sb;
        msgpack_packer pk;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        cube__pack_notify(&pk, "launch", 9);
        if (how == SPELL_SIGNED_STREAM)
                msgpack_sbuffer_write(&sb, "\xd3\0\0\0\0\0\0\0\x01", 9);
        else
                msgpack_pack_uint64(&pk, 1);
        if (wide)
                wide_u64(&sb, kernel);
        else
                msgpack_pack_uint64(&pk, kernel);
        msgpack_pack_array(&pk, 2);
        if (wide)
                msgpack_sbuffer_write(&sb, "\xd9\x06static", 8);
        else
                cube__pack_str(&pk, "static");
        for (int a = 0; a < 2; a++) {
                if (wide)
                        msgpack_sbuffer_write(&sb, "\xdc\0\x03", 3);
                else
                        msgpack_pack_array(&pk, 3);
                for (int i = 0; i < 3; i++)
                        msgpack_pack_uint32(&pk, 1);
        }
        msgpack_pack_array(&pk, 1);
        if (wide) {
                msgpack_pack_array(&pk, 4);
                wide_u64(&sb, h->service);
                wide_u64(&sb, h->memory);
                wide_u64(&sb, h->offset_start);
                wide_u64(&sb, h->offset_end);
        } else {
                cube__pack_handle(&pk, h);
        }
        msgpack_pack_array(&pk, 1);
        msgpack_pack_nil(&pk);
        if (wide)
                msgpack_sbuffer_write(&sb, "\xc5\0\0", 3);
        else
                msgpack_pack_bin(&pk, 0);
        msgpack_pack_array(&pk, 2);
        msgpack_pack_uint32(&pk, 0);
        msgpack_pack_uint32(&pk, 0);
        if (how == SPELL_SIGNED_MODE)
                msgpack_sbuffer_write(&sb, "\xd0\0", 2);
        else
                msgpack_pack_uint32(&pk, CUBE_LAUNCH_EXECUTE);
        ck_assert_int_eq(raw_send_sbuffer(fd, &sb), 0);
        msgpack_sbuffer_destroy(&sb);
}

/* The root of an error, through its sources and its first part. */
static const cube_error *innermost(const cube_error *e)
{
        while (cube_error_source(e) || cube_error_count(e))
                e = cube_error_source(e) ? cube_error_source(e) : cube_error_at(e, 0);
        return e;
}

/* Reads h's first word: its value, or the read's error (taken). */
static cube_error *raw_read_word(int fd, uint32_t msgid, const cube_handle *h, uint32_t *ret)
{
        msgpack_unpacked up;
        cube__envelope env;
        const char *why;
        cube_error *e = NULL;

        raw_send_on_handle(fd, msgid, "read", h);
        ck_assert_int_eq(raw_recv(fd, &up, test_scaled_ms(60000)), 1);
        ck_assert_int_eq(cube__envelope_parse(&up.data, &env, &why), 0);
        ck_assert_uint_eq(env.msgid, msgid);
        if (env.error->type != MSGPACK_OBJECT_NIL) {
                ck_assert_int_eq(cube__err_unpack(env.error, CUBE__FAMILY_SERVER, &e), 0);
        } else {
                ck_assert_int_eq(env.result->type, MSGPACK_OBJECT_ARRAY);
                ck_assert_uint_eq(env.result->via.array.size, 1);
                const msgpack_object *bin = &env.result->via.array.ptr[0];
                ck_assert_int_eq(bin->type, MSGPACK_OBJECT_BIN);
                ck_assert_uint_ge(bin->via.bin.size, sizeof(*ret));
                memcpy(ret, bin->via.bin.ptr, sizeof(*ret));
        }
        msgpack_unpacked_destroy(&up);
        return e;
}


/* cubed reads a launch in place when msgpack-c's packer wrote it, and
 * decodes any other spelling msgpack allows as a tree: the two ways run a
 * launch alike, and refuse one alike. */
START_TEST(a_launch_runs_and_is_refused_alike_however_it_is_spelt)
{
        static const char source[] =
                "KERNEL void bump(uint32_t *x, INFO)\n"
                "{\n"
                "        if (ABSOLUTE_POS == 0)\n"
                "                x[0] += 1;\n"
                "}\n";
        static const launch_spelling spellings[] = { SPELL_PACKED, SPELL_WIDE, SPELL_SIGNED_MODE,
                                                     SPELL_SIGNED_STREAM };
        uint64_t nonce, session;
        int fd = raw_connect(D.socket);
        uint32_t word = 0, msgid = 10;

        ck_assert_int_ge(fd, 0);
        raw_greet(fd, &nonce, &session);
        cube_handle h = { .service = nonce, .memory = session << 40 | 1, .offset_end = 4092 };
        raw_send_create(fd, h.memory, 4096);
        raw_send_write(fd, &h, &word, sizeof(word));
        raw_send_kernel(fd, 1, source, "bump");

        for (size_t i = 0; i < sizeof(spellings) / sizeof(spellings[0]); i++) {
                raw_launch_one(fd, 1, &h, spellings[i]);
                cube_error *e = raw_read_word(fd, ++msgid, &h, &word);
                ck_assert_msg(e == NULL, "spelling %zu: %s", i, e ? cube_error_reason(innermost(e)) : "");
                ck_assert_uint_eq(word, i + 1);
        }

        /* Kernel 9 was never registered: each spelling's refusal lands on
         * a memory of its own. */
        char *first = NULL;
        cube_error_kind first_kind = 0;
        for (size_t i = 0; i < sizeof(spellings) / sizeof(spellings[0]); i++) {
                cube_handle m = { .service = nonce, .memory = session << 40 | (2 + i),
                                  .offset_end = 4092 };
                raw_send_create(fd, m.memory, 4096);
                raw_launch_one(fd, 9, &m, spellings[i]);
                cube_error *e = raw_read_word(fd, ++msgid, &m, &word);
                ck_assert_msg(e != NULL, "spelling %zu ran an unregistered kernel", i);
                const cube_error *root = innermost(e);
                const char *why = cube_error_reason(root);
                ck_assert_msg(why && strstr(why, "kernel 9 was never registered"), "spelling %zu: %s",
                              i, why ? why : cube_error_message(root));
                if (!first) {
                        first = strdup(why);
                        first_kind = cube_error_kind_of(e);
                }
                ck_assert_str_eq(why, first);
                ck_assert_int_eq(cube_error_kind_of(e), first_kind);
                cube_error_free(e);
        }
        free(first);
        close(fd);
}
END_TEST

static Suite *kernels_suite(void)
{
        Suite *s = suite_create("kernels");
        TCase *tc = tcase_create("kernels");

        tcase_add_checked_fixture(tc, test_start_default, stop_clean_and_remove_cache);
        tcase_set_timeout(tc, 60);
        tcase_add_test_needing(tc, the_vector_add_example_matches_its_reference,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(tc, the_reduce_example_matches_its_reference,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(tc, the_matmul_example_matches_its_reference,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(tc, sync_cube_holds_every_unit_until_the_whole_cube_arrives,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(tc, shared_memory_belongs_to_one_cube, TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(tc, units_that_need_no_other_see_their_own_place_and_may_return_early,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(tc, a_cube_dim_beyond_the_device_is_refused, TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test(tc, too_many_units_per_cube_are_refused);
        tcase_add_test(tc, shared_memory_beyond_the_device_is_refused);
        tcase_add_test_needing(tc, the_shared_memory_limit_is_exact, TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(tc, a_kernel_that_does_not_compile_is_refused_with_the_compilers_words,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test(tc, a_kernel_with_a_bad_signature_fails_validation);
        tcase_add_test_needing(tc, a_launch_runs_and_is_refused_alike_however_it_is_spelt,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(tc, compile_mode_fills_the_cache_and_runs_nothing,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(tc, a_source_with_several_entry_points_is_built_once,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(tc, queue_mode_compiles_only_when_asked, TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(tc, a_second_session_hits_the_first_sessions_compile,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(tc, a_restarted_daemon_loads_the_kernel_from_its_cache_dir,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(tc, a_lone_launch_reaches_the_daemon_without_another_call,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(tc, launches_queued_just_before_a_disconnect_still_run,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(tc, a_burst_of_launches_runs_in_order_with_the_copies_between,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(tc, a_process_that_exits_without_disconnecting_still_sends_its_launches,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(tc, a_launch_on_a_lost_connection_says_so, TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(tc, a_null_write_poisons_the_device_and_the_daemon_keeps_answering,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(tc, a_wild_write_between_barriers_poisons_the_device_too,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(tc, a_dynamic_count_read_from_a_buffer_runs_that_many_cubes,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test(tc, a_launch_binding_the_wrong_number_of_buffers_fails_validation);
        tcase_add_test_needing(tc, f32_and_u32_scalars_arrive_where_the_layout_puts_them,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(tc, one_cube_info_reset_between_launches_serves_them_all,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test(tc, the_grid_constructors_and_predicates_follow_the_reference);
        tcase_add_test(tc, cube_dim_new_sizes_a_cube_as_the_reference_does);
        tcase_add_test(tc, cube_count_select_spreads_an_oversized_count);
        /* A GPU's first dimension holds 2^31 - 1 cubes: a count past it
         * would take an 8 GiB buffer and 2^31 cubes. */
        tcase_add_test_needing(tc, an_oversized_count_selected_by_the_helpers_runs,
                               TEST_NEEDS_KERNEL_RUNS | TEST_NEEDS_CPU_DEVICE);
        tcase_add_test_needing(tc, buffer_lengths_shapes_and_strides_follow_the_scalars,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(tc, every_binding_of_a_forty_buffer_kernel_reaches_its_own_buffer,
                               TEST_NEEDS_KERNEL_RUNS);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(kernels_suite());
        int failed;

        srunner_run_all(sr, CK_ENV);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? 1 : 0;
}

/*
 * test-failures.c - the failure store end to end: how failed, skipped and
 * abandoned work claims the bytes it was to write, how read, sync, check and
 * flush report those claims, and how faults injected into the real cubed
 * land, driven through the real libcubeclient and cubectl.
 *
 * Every test starts its own daemon with --enable-fault-injection (failure ids
 * therefore start at 1), and ends by stopping it with SIGTERM, which must
 * exit 0 and remove the socket file.
 */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define N 256u                                  /* u32 elements in a buffer */
#define BYTES ((uint64_t) N * sizeof(uint32_t))
#define LEN(a) (sizeof(a) / sizeof((a)[0]))
#define WITNESS 0x5ca1ab1eu                     /* what a hop kernel leaves behind */
#define TEXT(x) #x
#define TEXT_OF(x) TEXT(x)

/* ---------------------------------------------------------------------------
 * Kernels
 * ------------------------------------------------------------------------- */

/* out[i] = scalar + i. Mostly launched with a cube dim the device refuses,
 * which fails it before anything is compiled. */
static const char fill_source[] =
        "KERNEL void fill(uint32_t *out, INFO)\n"
        "{\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "\n"
        "        if (i < BUFFER_LEN(0))\n"
        "                out[i] = SCALAR(uint32_t, 0, 0) + (uint32_t) i;\n"
        "}\n";

/* Two and three outputs, for failures that claim several ranges or buffers. */
static const char pair_source[] =
        "KERNEL void pair(uint32_t *a, uint32_t *b, INFO)\n"
        "{\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "\n"
        "        if (i < BUFFER_LEN(0))\n"
        "                a[i] = b[i] = (uint32_t) i;\n"
        "}\n";

static const char trio_source[] =
        "KERNEL void trio(uint32_t *a, uint32_t *b, uint32_t *c, INFO)\n"
        "{\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "\n"
        "        if (i < BUFFER_LEN(0))\n"
        "                a[i] = b[i] = c[i] = (uint32_t) i;\n"
        "}\n";

/* One buffer for each way the read and write sets are decided: a const input,
 * a non-const input declared READ_ONLY, a declared output, an undeclared
 * buffer, and a const buffer declared WRITE_ONLY. */
#define PROBE_PARAMS "(const uint32_t *cin, uint32_t *rin, uint32_t *out, uint32_t *undeclared, " \
                     "const uint32_t *cwo, INFO)\n"

static const char probe_source[] =
        "KERNEL void probe" PROBE_PARAMS
        "{\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "\n"
        "        if (i < BUFFER_LEN(2)) {\n"
        "                out[i] = cin[i] + rin[i] + cwo[i];\n"
        "                undeclared[i] = cin[i] ^ rin[i];\n"
        "        }\n"
        "}\n";

static const char probe_broken_source[] =
        "KERNEL void probe_broken" PROBE_PARAMS
        "{\n"
        "        out[ABSOLUTE_POS] = cin[0] + rin[0] + cwo[0] + no_such_identifier;\n"
        "        undeclared[0] = 0;\n"
        "}\n";

enum { P_CONST, P_READ, P_OUT, P_UNDECLARED, P_CONST_DECLARED_OUT, P_COUNT };

static const cube_buffer_io probe_io[P_COUNT] = {
        CUBE_BUFFER_READ_ONLY, CUBE_BUFFER_READ_ONLY, CUBE_BUFFER_WRITE_ONLY,
        CUBE_BUFFER_UNDECLARED, CUBE_BUFFER_WRITE_ONLY,
};

/* out[i] = in[i] + 1, and WITNESS into witness[0]. The witness is a
 * parameter, so the daemon never counts it as written and never claims it,
 * while the kernel writes it all the same: its bytes show whether the kernel
 * ran. Two entry points, so a skip chain can name each hop. */
#define HOP_SOURCE(entry) \
        "KERNEL void " entry "(const uint32_t *in, uint32_t *out, uint32_t *witness, " \
        "INFO)\n" \
        "{\n" \
        "        uint64_t i = ABSOLUTE_POS;\n" \
        "\n" \
        "        if (i < BUFFER_LEN(1))\n" \
        "                out[i] = in[i] + 1u;\n" \
        "        if (i == 0)\n" \
        "                *witness = " TEXT_OF(WITNESS) ";\n" \
        "}\n"

static const char hop_b_source[] = HOP_SOURCE("hop_b");
static const char hop_c_source[] = HOP_SOURCE("hop_c");

static const cube_buffer_io hop_io[3] = {
        CUBE_BUFFER_READ_ONLY, CUBE_BUFFER_WRITE_ONLY, CUBE_BUFFER_READ_ONLY,
};

/* a[i] = in[i] + 1, b[i] = in[i] + 2: two plain outputs. */
static const char twin_source[] =
        "KERNEL void twin(const uint32_t *in, uint32_t *a, uint32_t *b, INFO)\n"
        "{\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "\n"
        "        if (i < BUFFER_LEN(0)) {\n"
        "                a[i] = in[i] + 1u;\n"
        "                b[i] = in[i] + 2u;\n"
        "        }\n"
        "}\n";

static const cube_buffer_io twin_io[3] = {
        CUBE_BUFFER_READ_ONLY, CUBE_BUFFER_WRITE_ONLY, CUBE_BUFFER_WRITE_ONLY,
};

/* Spins scalar 2 thousand rounds of a generator no compiler can fold (about
 * scalar 0 milliseconds: launch_linger measures the rate), then writes scalar
 * 0 into out[0], or faults when scalar 1 is set: device work whose end the
 * host can tell apart from the moment it was queued. A kernel has no clock,
 * so taking time means spinning. */
static const char linger_source[] =
        "KERNEL void linger(uint32_t *out, INFO)\n"
        "{\n"
        "        uint32_t ms = SCALAR(uint32_t, 0, 0);\n"
        "        uint64_t n = (uint64_t) SCALAR(uint32_t, 0, 2) * 1000, x = out[1] | 1;\n"
        "        volatile uint32_t *volatile nowhere = NULL;\n"
        "\n"
        "        for (uint64_t i = 0; i < n; i++) {\n"
        "                x ^= x << 13;\n"
        "                x ^= x >> 7;\n"
        "                x ^= x << 17;\n"
        "        }\n"
        "        if (SCALAR(uint32_t, 0, 1))\n"
        "                *nowhere = 1;\n"
        "        out[0] = ms;\n"
        "        out[1] = (uint32_t) x;\n"
        "}\n";

/* ---------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------- */

static const cube_error_kind cube_dim_root[] = {
        CUBE_SERVER_LAUNCH, CUBE_LAUNCH_TOO_MANY_RESOURCES, CUBE_RESOURCE_CUBE_DIM,
};
static const cube_error_kind units_root[] = {
        CUBE_SERVER_LAUNCH, CUBE_LAUNCH_TOO_MANY_RESOURCES, CUBE_RESOURCE_UNITS,
};
static const cube_error_kind compile_root[] = {
        CUBE_SERVER_LAUNCH, CUBE_LAUNCH_COMPILATION_ERROR, CUBE_COMPILATION_GENERIC,
};

static cube_handle filled(cube_client *c, const void *data, uint64_t size)
{
        cube_handle h;

        ck_ok(cube_create(c, data, size, &h));
        return h;
}

/* Bytes [start, end) of the whole allocation h names. */
static cube_handle range(const cube_handle *h, uint64_t start, uint64_t end)
{
        return cube_handle_slice(h, start, cube_handle_len(h) - end);
}

static void fill_pattern(uint32_t *v, size_t n)
{
        memset(v, 0xa5, n * sizeof(*v));
}

/* A launch of kernel k over bufs: N / 64 cubes of 64 units, a unit for every
 * element of an N-element buffer. */
static cube_launch over(uint64_t k, const cube_handle *bufs, const cube_buffer_io *io, size_t n)
{
        return (cube_launch) {
                .kernel = k, .cube_count = { N / 64, 1, 1 }, .cube_dim = { 64, 1, 1 },
                .buffers = bufs, .io = io, .n_buffers = n,
        };
}

/* Sends l with a cube dim the device turns down before compiling anything:
 * one past its z limit (CubeDim), or within every per-dimension limit but
 * holding more units than a cube may (Units). */
static void launch_refused(cube_client *c, cube_launch l, cube_error_kind limit)
{
        const cube_device_properties *p = cube_client_properties(c);

        if (limit == CUBE_RESOURCE_CUBE_DIM) {
                l.cube_dim[0] = 1;
                l.cube_dim[1] = 1;
                l.cube_dim[2] = p->max_cube_dim[2] + 1;
                ck_assert_uint_le(l.cube_dim[2], p->max_units_per_cube);
        } else {
                ck_assert_int_eq(limit, CUBE_RESOURCE_UNITS);
                l.cube_dim[0] = p->max_cube_dim[0] < p->max_units_per_cube ?
                                p->max_cube_dim[0] : p->max_units_per_cube;
                l.cube_dim[1] = p->max_units_per_cube / l.cube_dim[0] + 1;
                l.cube_dim[2] = 1;
                ck_assert_uint_le(l.cube_dim[1], p->max_cube_dim[1]);
        }
        test_launch_u32(c, l, NULL, 0);
}

static void inject(cube_client *c, cube_fault_site site, cube_error_kind kind, const char *reason,
                   uint64_t size)
{
        ck_ok(cube_debug_inject(c, site, kind, reason, size));
}

/* Asserts that e is Several holding exactly n Unwritten reports. */
static void expect_several(const cube_error *e, size_t n)
{
        ck_assert_msg(e != NULL, "the buffers read as written; %zu failure(s) were expected", n);
        ck_assert_msg(cube_error_kind_of(e) == CUBE_SERVER_SEVERAL, "expected Several, got %s: %s",
                      cube_error_variant(e), cube_error_message(e));
        ck_assert_msg(cube_error_count(e) == n, "%zu failure(s) reported, %zu expected: %s",
                      cube_error_count(e), n, cube_error_message(e));
        for (size_t i = 0; i < n; i++)
                ck_assert_msg(cube_error_kind_of(cube_error_at(e, i)) == CUBE_SERVER_UNWRITTEN,
                              "member %zu is %s, not Unwritten", i,
                              cube_error_variant(cube_error_at(e, i)));
}

/* Asserts that e reports exactly the failures ids, in that order, and frees
 * it. */
static void expect_failures(cube_error *e, const uint64_t *ids, size_t n)
{
        expect_several(e, n);
        for (size_t i = 0; i < n; i++)
                ck_assert_msg(cube_error_failure(cube_error_at(e, i)) == ids[i],
                              "member %zu is failure #%" PRIu64 ", expected #%" PRIu64 ": %s", i,
                              cube_error_failure(cube_error_at(e, i)), ids[i],
                              cube_error_message(e));
        cube_error_free(e);
}

/* The one failure the claim check of hs must find: a copy of its Unwritten
 * report, which the caller frees. */
static cube_error *only_failure(cube_client *c, const cube_handle *hs, size_t n)
{
        cube_error *e = cube_check(c, hs, n), *u;

        expect_several(e, 1);
        u = cube_error_clone(cube_error_at(e, 0));
        cube_error_free(e);
        ck_assert_ptr_nonnull(u);
        return u;
}

/* Asserts u reports failure, claimed by that many allocations, with a skip
 * chain of chain_len entries. */
/* Asserts u is an Unwritten claimed by that many buffers, with that chain. */
static void expect_claims(const cube_error *u, uint32_t claimed, size_t chain_len)
{
        ck_assert_int_eq(cube_error_kind_of(u), CUBE_SERVER_UNWRITTEN);
        ck_assert_msg(cube_error_claimed(u) == claimed, "failure #%" PRIu64 " claims %u "
                      "buffer(s), expected %u: %s", cube_error_failure(u), cube_error_claimed(u),
                      claimed, cube_error_message(u));
        ck_assert_msg(cube_error_chain_len(u) == chain_len, "a chain of %zu hop(s), expected %zu: "
                      "%s", cube_error_chain_len(u), chain_len, cube_error_message(u));
}

/* The same, for a failure whose id is known. */
static void expect_unwritten(const cube_error *u, uint64_t failure, uint32_t claimed,
                             size_t chain_len)
{
        expect_claims(u, claimed, chain_len);
        ck_assert_msg(cube_error_failure(u) == failure, "failure #%" PRIu64 ", expected #%" PRIu64
                      ": %s", cube_error_failure(u), failure, cube_error_message(u));
}

/* Asserts hop i of u's chain is the skip of kernel entry that needed memory. */
static void expect_hop(const cube_error *u, size_t i, const char *entry, uint64_t memory)
{
        char want[160];

        snprintf(want, sizeof(want), "skipped `%s`: it needed memory %" PRIu64 ", which carried "
                 "the failure", entry, memory);
        ck_assert_ptr_nonnull(cube_error_chain_at(u, i));
        ck_assert_str_eq(cube_error_chain_at(u, i), want);
}

/* Asserts u's root is wrapped exactly as kinds[0] -> kinds[1] -> ... and
 * returns the innermost. */
static const cube_error *expect_root(const cube_error *u, const cube_error_kind *kinds, size_t n)
{
        const cube_error *e = cube_error_source(u);

        for (size_t i = 0; i < n; i++) {
                ck_assert_msg(e != NULL, "the root ends at level %zu: %s", i,
                              cube_error_message(u));
                ck_assert_msg(cube_error_kind_of(e) == kinds[i], "level %zu of the root is %s, "
                              "not kind %d: %s", i, cube_error_variant(e), (int) kinds[i],
                              cube_error_message(u));
                if (i + 1 < n)
                        e = cube_error_source(e);
        }
        return e;
}

static void expect_bytes(cube_client *c, const cube_handle *h, const void *want)
{
        uint64_t n = cube_handle_len(h);
        void *got = malloc(n ? n : 1);

        ck_ok(cube_read(c, h, got, n));
        ck_assert_msg(memcmp(got, want, n) == 0, "the %" PRIu64 " bytes of memory %" PRIu64
                      " read back differ", n, h->memory);
        free(got);
}

/* The cache state of kernel entry ("new", "compiled", "failed", ...), in a
 * buffer the next call reuses. */
static const char *kernel_state(cube_client *c, const char *entry)
{
        static char state[16];
        cube_kernel_info *v;
        size_t n;

        state[0] = '\0';
        ck_ok(cube_daemon_kernels(c, &v, &n));
        for (size_t i = 0; i < n; i++)
                if (strcmp(v[i].entry, entry) == 0)
                        memcpy(state, v[i].state, sizeof(state));
        free(v);
        return state;
}

/* ---------------------------------------------------------------------------
 * Failure ids, carriers and byte ranges
 * ------------------------------------------------------------------------- */

START_TEST(failure_ids_are_never_reused_and_die_with_their_last_carrier)
{
        cube_client *c = test_connect(D.socket, "ids");
        uint64_t fill = test_kernel(c, fill_source, "fill");
        uint64_t pair = test_kernel(c, pair_source, "pair");
        cube_handle a = test_empty(c, BYTES), b = test_empty(c, BYTES), x, y;
        cube_failure_info *v;
        uint32_t data[N];
        size_t n;
        cube_error *u;

        launch_refused(c, over(fill, &a, NULL, 1), CUBE_RESOURCE_CUBE_DIM);
        launch_refused(c, over(fill, &b, NULL, 1), CUBE_RESOURCE_CUBE_DIM);
        u = only_failure(c, &a, 1);
        expect_unwritten(u, 1, 1, 0);
        cube_error_free(u);
        u = only_failure(c, &b, 1);
        expect_unwritten(u, 2, 1, 0);
        cube_error_free(u);

        ck_ok(cube_daemon_failures(c, &v, &n));
        ck_assert_uint_eq(n, 2);
        ck_assert_uint_eq(v[0].id + v[1].id, 3);
        ck_assert_uint_eq(v[0].session, v[1].session);
        for (size_t i = 0; i < n; i++) {
                ck_assert_uint_eq(cube_error_failure(v[i].report), v[i].id);
                ck_assert_uint_eq(cube_error_claimed(v[i].report), 1);
        }
        cube_failures_free(v, n);

        /* Freeing the only carrier of each frees both failures. */
        ck_ok(cube_free(c, &a));
        ck_ok(cube_free(c, &b));
        ck_assert_uint_eq(test_live_failures(c), 0);

        /* The next failure takes a new id, though both before it are gone. */
        x = test_empty(c, BYTES);
        y = test_empty(c, BYTES);
        launch_refused(c, over(pair, (cube_handle[]) { x, y }, NULL, 2), CUBE_RESOURCE_CUBE_DIM);
        u = only_failure(c, (cube_handle[]) { x, y }, 2);
        expect_unwritten(u, 3, 2, 0);
        cube_error_free(u);

        /* Freeing one carrier leaves the failure to the other. */
        ck_ok(cube_free(c, &x));
        u = only_failure(c, &y, 1);
        expect_unwritten(u, 3, 1, 0);
        cube_error_free(u);
        ck_assert_uint_eq(test_live_failures(c), 1);

        /* Rewriting the last carrier whole frees the failure. */
        fill_random(data, sizeof(data), 1);
        ck_ok(cube_write(c, &y, data, sizeof(data)));
        ck_ok(cube_check(c, &y, 1));
        ck_assert_uint_eq(test_live_failures(c), 0);
        expect_bytes(c, &y, data);

        /* And the next failure is newer than every one before it. */
        launch_refused(c, over(fill, &y, NULL, 1), CUBE_RESOURCE_UNITS);
        u = only_failure(c, &y, 1);
        ck_assert_uint_gt(cube_error_failure(u), 3);
        expect_claims(u, 1, 0);
        cube_error_free(u);
        cube_disconnect(c);
}
END_TEST

START_TEST(a_write_repairs_exactly_the_bytes_it_covers)
{
        cube_client *c = test_connect(D.socket, "ranges");
        uint64_t fill = test_kernel(c, fill_source, "fill"), f;
        cube_handle h = test_empty(c, BYTES), mid = range(&h, 256, 512);
        uint8_t whole[BYTES];
        cube_error *u;

        fill_random(whole, sizeof(whole), 2);
        launch_refused(c, over(fill, &h, NULL, 1), CUBE_RESOURCE_CUBE_DIM);
        u = only_failure(c, &h, 1);
        f = cube_error_failure(u);
        expect_unwritten(u, f, 1, 0);
        cube_error_free(u);

        /* The written slice reads back; every byte around it still fails. */
        ck_ok(cube_write(c, &mid, whole + 256, 256));
        ck_ok(cube_check(c, &mid, 1));
        expect_bytes(c, &mid, whole + 256);
        static const uint64_t tainted[][2] = {
                { 0, 256 }, { 255, 256 }, { 255, 257 }, { 511, 513 }, { 512, 513 },
                { 512, BYTES }, { 0, BYTES },
        };
        for (size_t i = 0; i < LEN(tainted); i++) {
                cube_handle r = range(&h, tainted[i][0], tainted[i][1]);
                u = only_failure(c, &r, 1);
                expect_unwritten(u, f, 1, 0);
                expect_root(u, cube_dim_root, LEN(cube_dim_root));
                cube_error_free(u);
        }

        /* A partial rewrite of the rest leaves the remainder tainted. */
        cube_handle head = range(&h, 0, 256), tail = range(&h, 512, BYTES);
        ck_ok(cube_write(c, &head, whole, 256));
        ck_ok(cube_check(c, &head, 1));
        u = only_failure(c, &h, 1);
        expect_unwritten(u, f, 1, 0);
        cube_error_free(u);
        u = only_failure(c, &tail, 1);
        expect_unwritten(u, f, 1, 0);
        cube_error_free(u);
        ck_assert_uint_eq(test_live_failures(c), 1);

        ck_ok(cube_write(c, &tail, whole + 512, BYTES - 512));
        ck_ok(cube_check(c, &h, 1));
        ck_assert_uint_eq(test_live_failures(c), 0);
        expect_bytes(c, &h, whole);
        cube_disconnect(c);
}
END_TEST

START_TEST(disjoint_failures_are_reported_apart_and_one_failure_once)
{
        cube_client *c = test_connect(D.socket, "disjoint");
        uint64_t fill = test_kernel(c, fill_source, "fill");
        uint64_t pair = test_kernel(c, pair_source, "pair");
        uint64_t trio = test_kernel(c, trio_source, "trio");
        cube_handle h = test_empty(c, 2 * BYTES), lo = range(&h, 0, BYTES);
        cube_handle hi = range(&h, BYTES, 2 * BYTES);
        cube_handle t[3] = { test_empty(c, BYTES), test_empty(c, BYTES), test_empty(c, BYTES) };
        cube_handle m = test_empty(c, 3 * BYTES);
        cube_error *e, *u;
        uint64_t fa, fb;

        /* Two failures on the two halves of one buffer. */
        launch_refused(c, over(fill, &lo, NULL, 1), CUBE_RESOURCE_CUBE_DIM);
        launch_refused(c, over(fill, &hi, NULL, 1), CUBE_RESOURCE_UNITS);
        e = cube_check(c, &h, 1);
        expect_several(e, 2);
        fa = cube_error_failure(cube_error_at(e, 0));
        fb = cube_error_failure(cube_error_at(e, 1));
        ck_assert_uint_ne(fa, fb);
        expect_unwritten(cube_error_at(e, 0), fa, 1, 0);
        expect_unwritten(cube_error_at(e, 1), fb, 1, 0);
        expect_root(cube_error_at(e, 0), cube_dim_root, LEN(cube_dim_root));
        expect_root(cube_error_at(e, 1), units_root, LEN(units_root));
        cube_error_free(e);
        expect_failures(cube_check(c, &lo, 1), &fa, 1);
        expect_failures(cube_check(c, &hi, 1), &fb, 1);

        /* One failure over three buffers is one report, claimed by three. */
        launch_refused(c, over(trio, t, NULL, 3), CUBE_RESOURCE_CUBE_DIM);
        u = only_failure(c, t, 3);
        expect_claims(u, 3, 0);
        ck_assert_uint_ne(cube_error_failure(u), fa);
        ck_assert_uint_ne(cube_error_failure(u), fb);
        expect_failures(cube_check(c, &t[1], 1), (uint64_t[]) { cube_error_failure(u) }, 1);
        cube_error_free(u);

        /* One failure over two ranges of one allocation is one report, and
         * one carrier. */
        cube_handle ends[2] = { range(&m, 0, BYTES), range(&m, 2 * BYTES, 3 * BYTES) };
        cube_handle middle = range(&m, BYTES, 2 * BYTES);
        launch_refused(c, over(pair, ends, NULL, 2), CUBE_RESOURCE_CUBE_DIM);
        u = only_failure(c, &m, 1);
        expect_claims(u, 1, 0);
        cube_error_free(u);
        ck_ok(cube_check(c, &middle, 1));
        ck_assert_uint_eq(test_live_failures(c), 4);
        cube_disconnect(c);
}
END_TEST

/* ---------------------------------------------------------------------------
 * What a failed launch taints
 * ------------------------------------------------------------------------- */

/* The buffers of one probe launch, and what they were created with. */
typedef struct probe_buffers {
        cube_handle h[P_COUNT];
        uint32_t data[P_COUNT][N];
} probe_buffers;

static void make_probe_buffers(cube_client *c, probe_buffers *p, uint64_t seed)
{
        for (int i = 0; i < P_COUNT; i++) {
                fill_random(p->data[i], sizeof(p->data[i]), seed * 10 + (uint64_t) i);
                p->h[i] = filled(c, p->data[i], BYTES);
        }
}

/* After a probe launch that failed with a root wrapped as kinds: the inputs
 * keep their bytes, and exactly what the launch writes carries one failure
 * (the const buffer declared WRITE_ONLY among them when const_declared_out).
 * Returns the report, which the caller frees. */
static cube_error *expect_probe_failed(cube_client *c, const probe_buffers *p,
                                       const cube_error_kind *kinds, size_t n_kinds,
                                       bool const_declared_out)
{
        const cube_handle written[3] = {
                p->h[P_OUT], p->h[P_UNDECLARED], p->h[P_CONST_DECLARED_OUT],
        };
        uint32_t n_written = const_declared_out ? 3 : 2;
        cube_error *u;

        expect_bytes(c, &p->h[P_CONST], p->data[P_CONST]);
        expect_bytes(c, &p->h[P_READ], p->data[P_READ]);
        if (!const_declared_out)
                expect_bytes(c, &p->h[P_CONST_DECLARED_OUT], p->data[P_CONST_DECLARED_OUT]);

        u = only_failure(c, written, n_written);
        expect_claims(u, n_written, 0);
        expect_root(u, kinds, n_kinds);
        for (uint32_t i = 0; i < n_written; i++)
                expect_failures(cube_check(c, &written[i], 1),
                                (uint64_t[]) { cube_error_failure(u) }, 1);
        return u;
}

START_TEST(an_uncompiled_launch_taints_its_declared_and_undeclared_outputs)
{
        cube_client *c = test_connect(D.socket, "uncompiled");
        uint64_t probe = test_kernel(c, probe_source, "probe");
        uint64_t broken = test_kernel(c, probe_broken_source, "probe_broken");
        probe_buffers p;
        cube_error *u;

        /* Refused before compiling: the declaration decides, so the const
         * buffer declared WRITE_ONLY is tainted with the outputs. */
        make_probe_buffers(c, &p, 1);
        launch_refused(c, over(probe, p.h, probe_io, P_COUNT), CUBE_RESOURCE_CUBE_DIM);
        u = expect_probe_failed(c, &p, cube_dim_root, LEN(cube_dim_root), true);
        ck_assert(cube_error_is_refusal(u));
        ck_assert(!cube_error_is_device_poisoned(u));
        cube_error_free(u);

        make_probe_buffers(c, &p, 2);
        launch_refused(c, over(probe, p.h, probe_io, P_COUNT), CUBE_RESOURCE_UNITS);
        u = expect_probe_failed(c, &p, units_root, LEN(units_root), true);
        ck_assert(cube_error_is_refusal(u));
        cube_error_free(u);
        ck_assert_str_eq(kernel_state(c, "probe"), "new");

        /* A compile error: there is no compiled answer either. */
        make_probe_buffers(c, &p, 3);
        test_launch_u32(c, over(broken, p.h, probe_io, P_COUNT), NULL, 0);
        u = expect_probe_failed(c, &p, compile_root, LEN(compile_root), true);
        ck_assert(cube_error_is_refusal(u));
        ck_assert(!cube_error_is_device_poisoned(u));
        ck_assert_msg(strstr(cube_error_message(u), "no_such_identifier") != NULL,
                      "the compiler's words are missing: %s", cube_error_message(u));
        cube_error_free(u);
        ck_assert_str_eq(kernel_state(c, "probe_broken"), "failed");
        ck_assert_uint_eq(test_live_failures(c), 3);
        cube_disconnect(c);
}
END_TEST

START_TEST(after_compiling_the_compiled_answer_decides_what_is_tainted)
{
        static const cube_error_kind oom_root[] = { CUBE_SERVER_LAUNCH, CUBE_LAUNCH_OUT_OF_MEMORY };
        static const cube_error_kind unknown_root[] = { CUBE_SERVER_LAUNCH, CUBE_LAUNCH_UNKNOWN };
        cube_client *c = test_connect(D.socket, "compiled");
        uint64_t probe = test_kernel(c, probe_source, "probe");
        probe_buffers p;
        uint32_t want[N];
        cube_error *u;

        /* The probe runs, and is compiled from here on. */
        make_probe_buffers(c, &p, 4);
        test_launch_u32(c, over(probe, p.h, probe_io, P_COUNT), NULL, 0);
        for (uint32_t i = 0; i < N; i++)
                want[i] = p.data[P_CONST][i] + p.data[P_READ][i] + p.data[P_CONST_DECLARED_OUT][i];
        expect_bytes(c, &p.h[P_OUT], want);
        for (uint32_t i = 0; i < N; i++)
                want[i] = p.data[P_CONST][i] ^ p.data[P_READ][i];
        expect_bytes(c, &p.h[P_UNDECLARED], want);
        ck_assert_str_eq(kernel_state(c, "probe"), "compiled");

        /* Out of memory at enqueue: the const buffer declared WRITE_ONLY is
         * only read (the compiled answer wins), the non-const buffer declared
         * READ_ONLY has no compiled answer and keeps its declaration. */
        inject(c, CUBE_FAULT_LAUNCH, CUBE_LAUNCH_OUT_OF_MEMORY, "no room to queue the launch", 0);
        make_probe_buffers(c, &p, 5);
        test_launch_u32(c, over(probe, p.h, probe_io, P_COUNT), NULL, 0);
        u = expect_probe_failed(c, &p, oom_root, LEN(oom_root), false);
        ck_assert_str_eq(cube_error_reason(expect_root(u, oom_root, LEN(oom_root))),
                         "no room to queue the launch");
        ck_assert(!cube_error_is_refusal(u));
        ck_assert(!cube_error_is_device_poisoned(u));
        cube_error_free(u);

        /* An enqueue the driver refuses. */
        inject(c, CUBE_FAULT_LAUNCH, CUBE_LAUNCH_UNKNOWN, "the driver refused the enqueue", 0);
        make_probe_buffers(c, &p, 6);
        test_launch_u32(c, over(probe, p.h, probe_io, P_COUNT), NULL, 0);
        u = expect_probe_failed(c, &p, unknown_root, LEN(unknown_root), false);
        ck_assert_str_eq(cube_error_reason(expect_root(u, unknown_root, LEN(unknown_root))),
                         "the driver refused the enqueue");
        ck_assert(!cube_error_is_refusal(u));
        ck_assert(!cube_error_is_device_poisoned(u));
        cube_error_free(u);
        ck_assert_uint_eq(test_live_failures(c), 2);
        cube_disconnect(c);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Skipping
 * ------------------------------------------------------------------------- */

/* A fails (refused), B reads A's output, C reads B's. */
typedef struct hops {
        uint64_t fill, hop_b, hop_c;
        cube_handle a, b, cc, wb, wc;
        uint32_t pattern[N];
} hops;

static void run_hops(cube_client *c, hops *h)
{
        h->fill = test_kernel(c, fill_source, "fill");
        h->hop_b = test_kernel(c, hop_b_source, "hop_b");
        h->hop_c = test_kernel(c, hop_c_source, "hop_c");
        fill_pattern(h->pattern, N);
        h->a = test_empty(c, BYTES);
        h->b = filled(c, h->pattern, BYTES);
        h->cc = filled(c, h->pattern, BYTES);
        h->wb = filled(c, h->pattern, BYTES);
        h->wc = filled(c, h->pattern, BYTES);
        launch_refused(c, over(h->fill, &h->a, NULL, 1), CUBE_RESOURCE_CUBE_DIM);
        test_launch_u32(c,
                        over(h->hop_b, (cube_handle[]) { h->a, h->b, h->wb }, hop_io, 3), NULL, 0);
        test_launch_u32(c,
                        over(h->hop_c, (cube_handle[]) { h->b, h->cc, h->wc }, hop_io, 3), NULL, 0);
        ck_ok(cube_sync(c, NULL, 0));
}

START_TEST(a_launch_reading_a_failure_is_skipped_and_passes_it_on)
{
        cube_client *c = test_connect(D.socket, "skips");
        uint32_t in[N], want[N], witness[N];
        cube_handle hin, hout, hw;
        cube_error *u;
        uint64_t f;
        hops h;

        run_hops(c, &h);

        /* Neither hop ran: the witnesses they write hold the pattern. */
        expect_bytes(c, &h.wb, h.pattern);
        expect_bytes(c, &h.wc, h.pattern);

        u = only_failure(c, &h.cc, 1);
        f = cube_error_failure(u);
        expect_unwritten(u, f, 3, 2);
        expect_hop(u, 0, "hop_c", h.b.memory);
        expect_hop(u, 1, "hop_b", h.a.memory);
        expect_root(u, cube_dim_root, LEN(cube_dim_root));
        ck_assert(cube_error_is_refusal(u));
        cube_error_free(u);

        /* The whole path carries that one failure, and nothing else. */
        expect_failures(cube_check(c, (cube_handle[]) { h.a, h.b, h.cc }, 3), &f, 1);
        ck_assert_uint_eq(test_live_failures(c), 1);

        /* On a clean input the same hop runs and leaves its witness. */
        fill_random(in, sizeof(in), 3);
        memcpy(witness, h.pattern, sizeof(witness));
        witness[0] = WITNESS;
        hin = filled(c, in, BYTES);
        hout = filled(c, h.pattern, BYTES);
        hw = filled(c, h.pattern, BYTES);
        test_launch_u32(c, over(h.hop_b, (cube_handle[]) { hin, hout, hw }, hop_io, 3), NULL, 0);
        for (uint32_t i = 0; i < N; i++)
                want[i] = in[i] + 1u;
        expect_bytes(c, &hout, want);
        expect_bytes(c, &hw, witness);
        cube_disconnect(c);
}
END_TEST

START_TEST(the_skip_chain_walks_back_from_the_buffer_asked_about)
{
        cube_client *c = test_connect(D.socket, "walk");
        cube_error *u;
        uint64_t f;
        hops h;

        run_hops(c, &h);
        u = only_failure(c, &h.cc, 1);
        f = cube_error_failure(u);
        expect_unwritten(u, f, 3, 2);
        cube_error_free(u);

        /* B's output was produced by B's skip alone. */
        u = only_failure(c, &h.b, 1);
        expect_unwritten(u, f, 3, 1);
        expect_hop(u, 0, "hop_b", h.a.memory);
        cube_error_free(u);

        /* A's output was produced by no skip: the root alone. */
        u = only_failure(c, &h.a, 1);
        expect_unwritten(u, f, 3, 0);
        expect_root(u, cube_dim_root, LEN(cube_dim_root));
        cube_error_free(u);
        cube_disconnect(c);
}
END_TEST

START_TEST(a_skip_chain_keeps_its_sixteen_newest_hops)
{
        cube_client *c = test_connect(D.socket, "long-chain");
        uint64_t fill = test_kernel(c, fill_source, "fill");
        uint64_t hop = test_kernel(c, hop_b_source, "hop_b");
        uint32_t pattern[N];
        cube_handle p[19], w;
        cube_error *u;

        fill_pattern(pattern, N);
        w = filled(c, pattern, BYTES);
        for (size_t i = 0; i < LEN(p); i++)
                p[i] = test_empty(c, BYTES);
        launch_refused(c, over(fill, &p[0], NULL, 1), CUBE_RESOURCE_CUBE_DIM);
        for (size_t i = 1; i < LEN(p); i++)
                test_launch_u32(c,
                                over(hop, (cube_handle[]) { p[i - 1], p[i], w }, hop_io, 3), NULL, 0);

        /* 18 skips: the 16 newest are kept, newest first, and a note says
         * how many older ones were dropped. */
        u = only_failure(c, &p[18], 1);
        expect_claims(u, 19, 17);
        for (size_t j = 0; j < 16; j++)
                expect_hop(u, j, "hop_b", p[17 - j].memory);
        ck_assert_msg(strncmp(cube_error_chain_at(u, 16), "(2 older skip record(s) were dropped",
                              36) == 0, "the last hop is not the note: %s",
                      cube_error_chain_at(u, 16));
        expect_root(u, cube_dim_root, LEN(cube_dim_root));
        cube_error_free(u);
        expect_bytes(c, &w, pattern);

        /* p[1] was made by the oldest skip, whose record was dropped: its
         * report must not read as a claim made directly by the root. */
        u = only_failure(c, &p[1], 1);
        ck_assert_msg(cube_error_chain_len(u) == 1, "chain of %zu: %s", cube_error_chain_len(u),
                      cube_error_message(u));
        ck_assert_msg(strstr(cube_error_chain_at(u, 0), "older skip record(s) were dropped"),
                      "%s", cube_error_chain_at(u, 0));
        cube_error_free(u);
        /* The root's own memory is a direct claim, and says nothing more. */
        u = only_failure(c, &p[0], 1);
        ck_assert_uint_eq(cube_error_chain_len(u), 0);
        cube_error_free(u);
        cube_disconnect(c);
}
END_TEST

START_TEST(relaunching_into_a_pure_output_repairs_it)
{
        cube_client *c = test_connect(D.socket, "relaunch");
        uint64_t k = test_kernel(c, test_affine_source, "affine");
        uint32_t data[N], want[N];
        cube_handle in, out;
        cube_error *u;
        uint64_t f;

        fill_random(data, sizeof(data), 4);
        for (uint32_t i = 0; i < N; i++)
                want[i] = test_affine(data[i]);
        in = filled(c, data, BYTES);
        out = test_empty(c, BYTES);
        launch_refused(c, over(k, (cube_handle[]) { in, out }, test_affine_io, 2),
                       CUBE_RESOURCE_CUBE_DIM);
        u = only_failure(c, &out, 1);
        f = cube_error_failure(u);
        expect_unwritten(u, f, 1, 0);
        cube_error_free(u);

        /* A declared output is not read, so its claim does not stop the
         * launch, which writes it whole. */
        test_launch_u32(c, over(k, (cube_handle[]) { in, out }, test_affine_io, 2), NULL, 0);
        ck_ok(cube_check(c, &out, 1));
        expect_bytes(c, &out, want);
        ck_assert_uint_eq(test_live_failures(c), 0);

        /* Undeclared, it counts as read too: the launch is skipped on its own
         * output's claim. */
        launch_refused(c, over(k, (cube_handle[]) { in, out }, test_affine_io, 2),
                       CUBE_RESOURCE_UNITS);
        test_launch_u32(c, over(k, (cube_handle[]) { in, out }, NULL, 2), NULL, 0);
        u = only_failure(c, &out, 1);
        ck_assert_uint_gt(cube_error_failure(u), f);
        expect_claims(u, 1, 1);
        expect_hop(u, 0, "affine", out.memory);
        expect_root(u, units_root, LEN(units_root));
        cube_error_free(u);

        /* Declared again, it is repaired. */
        test_launch_u32(c, over(k, (cube_handle[]) { in, out }, test_affine_io, 2), NULL, 0);
        ck_ok(cube_check(c, &out, 1));
        expect_bytes(c, &out, want);
        ck_assert_uint_eq(test_live_failures(c), 0);
        cube_disconnect(c);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Reads, syncs, checks and flush
 * ------------------------------------------------------------------------- */

START_TEST(read_sync_and_check_report_each_named_failure_once)
{
        cube_client *c = test_connect(D.socket, "reports");
        uint64_t fill = test_kernel(c, fill_source, "fill");
        uint64_t pair = test_kernel(c, pair_source, "pair");
        cube_handle m = test_empty(c, 3 * BYTES), z;
        cube_handle s0 = range(&m, 0, BYTES), s1 = range(&m, BYTES, 2 * BYTES);
        cube_handle s2 = range(&m, 2 * BYTES, 3 * BYTES);
        uint32_t data[N], *back = malloc(3 * BYTES);
        uint64_t f1, f2;
        cube_error *e;

        fill_random(data, sizeof(data), 5);
        z = filled(c, data, BYTES);
        launch_refused(c, over(pair, (cube_handle[]) { s0, s2 }, NULL, 2), CUBE_RESOURCE_CUBE_DIM);
        launch_refused(c, over(fill, &s1, NULL, 1), CUBE_RESOURCE_UNITS);

        /* read: each failure once, in the order its bytes come. */
        e = cube_read(c, &m, back, 3 * BYTES);
        expect_several(e, 2);
        f1 = cube_error_failure(cube_error_at(e, 0));
        f2 = cube_error_failure(cube_error_at(e, 1));
        ck_assert_uint_ne(f1, f2);
        expect_unwritten(cube_error_at(e, 0), f1, 1, 0);
        expect_unwritten(cube_error_at(e, 1), f2, 1, 0);
        expect_root(cube_error_at(e, 0), cube_dim_root, LEN(cube_dim_root));
        expect_root(cube_error_at(e, 1), units_root, LEN(units_root));
        cube_error_free(e);
        expect_failures(cube_read(c, &s2, back, BYTES), &f1, 1);

        /* sync and check: only the named buffers, in the order named. */
        expect_failures(cube_sync(c, (cube_handle[]) { z, m }, 2), (uint64_t[]) { f1, f2 }, 2);
        expect_failures(cube_check(c, (cube_handle[]) { z, m }, 2), (uint64_t[]) { f1, f2 }, 2);
        expect_failures(cube_check(c, (cube_handle[]) { s1, s0 }, 2), (uint64_t[]) { f2, f1 }, 2);
        expect_failures(cube_sync(c, (cube_handle[]) { s2, z }, 2), &f1, 1);
        expect_failures(cube_sync(c, &s1, 1), &f2, 1);
        ck_ok(cube_sync(c, &z, 1));
        ck_ok(cube_check(c, &z, 1));
        ck_ok(cube_sync(c, NULL, 0));
        expect_bytes(c, &z, data);

        /* A launch failure is not the flush's to report. */
        ck_ok(cube_flush(c));
        ck_assert_uint_eq(test_live_failures(c), 2);
        free(back);
        cube_disconnect(c);
}
END_TEST

/* Thousands of linger rounds per millisecond on this machine, measured once
 * per test process on a buffer of its own. */
static double linger_rate(cube_client *c, uint64_t k)
{
        static double rate;
        static const cube_buffer_io io[1] = { CUBE_BUFFER_WRITE_ONLY };

        if (rate > 0)
                return rate;
        cube_handle scratch = test_empty(c, 16);
        for (uint32_t kilo = 1u << 12;; kilo *= 4) {
                const uint32_t scalars[3] = { 0, 0, kilo };
                long t0 = test_now_ms();
                test_launch_u32(c, (cube_launch) {
                        .kernel = k, .cube_count = { 1, 1, 1 }, .cube_dim = { 1, 1, 1 },
                        .buffers = &scratch, .io = io, .n_buffers = 1,
                }, scalars, 3);
                ck_ok(cube_sync(c, &scratch, 1));
                long took = test_now_ms() - t0;
                if (took >= 100 || kilo >= (1u << 28)) {
                        rate = (double) kilo / (double) (took > 0 ? took : 1);
                        break;
                }
        }
        ck_ok(cube_free(c, &scratch));
        return rate;
}

/* A launch of the linger kernel over out: one unit, for at least about ms
 * milliseconds (half again the rounds the measured rate asks). */
static void launch_linger(cube_client *c, uint64_t k, const cube_handle *out, uint32_t ms,
                          bool fault, cube_launch_mode mode)
{
        static const cube_buffer_io io[1] = { CUBE_BUFFER_WRITE_ONLY };
        uint32_t kilo = ms && mode == CUBE_LAUNCH_EXECUTE ?
                        (uint32_t) (linger_rate(c, k) * ms * 1.5) + 1 : 0;
        const uint32_t scalars[3] = { ms, fault, kilo };

        /* A fault needs an unchecked launch: a checked one cannot leave its
         * bindings. */
        test_launch_u32(c, (cube_launch) {
                .kernel = k, .cube_count = { 1, 1, 1 }, .cube_dim = { 1, 1, 1 },
                .buffers = out, .io = io, .n_buffers = 1,
                .mode = fault && mode == CUBE_LAUNCH_EXECUTE ? CUBE_LAUNCH_UNCHECKED : mode,
        }, scalars, 3);
}

START_TEST(check_answers_at_once_and_sync_drains_the_device_first)
{
        uint32_t ms = (uint32_t) test_scaled_ms(1000);
        cube_client *c = test_connect(D.socket, "instant");
        uint64_t k = test_kernel(c, linger_source, "linger");
        cube_handle out = test_empty(c, 16), late = test_empty(c, 16);
        uint32_t got[4];
        long t0, t1, t2;
        cube_error *e;

        /* Compiled first, so that nothing below waits for the compiler. */
        launch_linger(c, k, &out, 0, false, CUBE_LAUNCH_COMPILE);
        ck_ok(cube_sync(c, NULL, 0));
        ck_assert_str_eq(kernel_state(c, "linger"), "compiled");
        /* The kernel's speed is measured before the clock starts: measuring it
         * takes up to 4/3 of its last 100-400 ms step, which counted against
         * the check made this test fail on a machine where it lands late. */
        (void) linger_rate(c, k);
        /* The unchecked form the faulting launch below takes, compiled too. */
        test_launch_u32(c, (cube_launch) {
                .kernel = k, .cube_count = { 1, 1, 1 }, .cube_dim = { 1, 1, 1 },
                .buffers = &late, .n_buffers = 1, .mode = CUBE_LAUNCH_UNCHECKED,
        }, (const uint32_t[3]) { 0, 0, 0 }, 3);
        ck_ok(cube_sync(c, NULL, 0));

        t0 = test_now_ms();
        launch_linger(c, k, &out, ms, false, CUBE_LAUNCH_EXECUTE);
        ck_ok(cube_check(c, &out, 1));
        t1 = test_now_ms();
        ck_ok(cube_sync(c, &out, 1));
        t2 = test_now_ms();
        ck_assert_msg(t1 - t0 < (long) ms / 2, "check took %ld ms behind a %u ms kernel", t1 - t0,
                      ms);
        ck_assert_msg(t2 - t0 >= (long) ms, "sync returned after %ld ms, before the %u ms kernel "
                      "ended", t2 - t0, ms);
        ck_ok(cube_read(c, &out, got, sizeof(got)));
        ck_assert_uint_eq(got[0], ms);

        /* A kernel that faults late: check, right after the launch, sees only
         * the claims, which are clean; sync waits for the device and meets
         * the fault. */
        t0 = test_now_ms();
        launch_linger(c, k, &late, ms, true, CUBE_LAUNCH_EXECUTE);
        ck_ok(cube_check(c, &late, 1));
        t1 = test_now_ms();
        ck_assert_msg(t1 - t0 < (long) ms / 2, "check took %ld ms behind a %u ms kernel", t1 - t0,
                      ms);
        e = cube_sync(c, NULL, 0);
        ck_assert_msg(e != NULL, "the sync after a faulting kernel succeeded");
        ck_assert_msg(cube_error_kind_of(e) == CUBE_SERVER_DEVICE_POISONED, "%s",
                      cube_error_message(e));
        ck_assert(cube_error_is_device_poisoned(e));
        ck_assert(!cube_error_is_refusal(e));
        cube_error_free(e);

        /* Now flush has the one thing it reports, and so has check. */
        e = cube_flush(c);
        ck_assert_msg(e && cube_error_kind_of(e) == CUBE_SERVER_DEVICE_POISONED, "flush: %s",
                      e ? cube_error_message(e) : "ok");
        cube_error_free(e);
        e = cube_check(c, &out, 1);
        ck_assert_msg(e && cube_error_is_device_poisoned(e), "check: %s",
                      e ? cube_error_message(e) : "ok");
        cube_error_free(e);
        cube_disconnect(c);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Abandoned write scopes and dynamic counts
 * ------------------------------------------------------------------------- */

START_TEST(an_abandoned_write_scope_reads_as_torn_down)
{
        cube_client *c = test_connect(D.socket, "teardown");
        uint64_t k = test_kernel(c, test_affine_source, "affine");
        uint32_t data[N], want[N], pattern[N];
        cube_handle in, out, next;
        cube_error *u;

        fill_random(data, sizeof(data), 6);
        fill_pattern(pattern, N);
        for (uint32_t i = 0; i < N; i++)
                want[i] = test_affine(data[i]);
        in = filled(c, data, BYTES);
        out = filled(c, pattern, BYTES);
        next = filled(c, pattern, BYTES);

        inject(c, CUBE_FAULT_TEARDOWN, CUBE_SERVER_TORN_DOWN, "", 0);
        test_launch_u32(c, over(k, (cube_handle[]) { in, out }, test_affine_io, 2), NULL, 0);
        u = only_failure(c, &out, 1);
        expect_claims(u, 1, 0);
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(u)), CUBE_SERVER_TORN_DOWN);
        ck_assert_str_eq(cube_error_variant(cube_error_source(u)), "TornDown");
        ck_assert_ptr_null(cube_error_source(cube_error_source(u)));
        ck_assert(!cube_error_is_refusal(u));
        ck_assert(!cube_error_is_device_poisoned(u));
        cube_error_free(u);
        expect_bytes(c, &in, data);
        ck_assert(!status_of(D.socket).poisoned);

        /* It strikes once: the next launch runs. */
        test_launch_u32(c, over(k, (cube_handle[]) { in, next }, test_affine_io, 2), NULL, 0);
        expect_bytes(c, &next, want);
        ck_assert_uint_eq(test_live_failures(c), 1);
        cube_disconnect(c);
}
END_TEST

START_TEST(a_dynamic_count_read_from_a_tainted_buffer_skips_the_launch)
{
        static const uint32_t count[3] = { N / 64, 1, 1 };
        cube_client *c = test_connect(D.socket, "tainted-count");
        uint64_t fill = test_kernel(c, fill_source, "fill");
        uint64_t hop = test_kernel(c, hop_b_source, "hop_b");
        uint32_t data[N], pattern[N], want[N], witness[N];
        cube_handle hcount = test_empty(c, sizeof(count)), in, out, w;
        cube_launch l;
        cube_error *u;
        uint64_t f;

        fill_random(data, sizeof(data), 7);
        fill_pattern(pattern, N);
        in = filled(c, data, BYTES);
        out = filled(c, pattern, BYTES);
        w = filled(c, pattern, BYTES);
        launch_refused(c, over(fill, &hcount, NULL, 1), CUBE_RESOURCE_CUBE_DIM);
        u = only_failure(c, &hcount, 1);
        f = cube_error_failure(u);
        cube_error_free(u);

        l = over(hop, (cube_handle[]) { in, out, w }, hop_io, 3);
        l.dynamic_count = &hcount;
        test_launch_u32(c, l, NULL, 0);
        ck_ok(cube_sync(c, NULL, 0));
        expect_bytes(c, &w, pattern);
        u = only_failure(c, &out, 1);
        expect_unwritten(u, f, 2, 1);
        expect_hop(u, 0, "hop_b", hcount.memory);
        expect_root(u, cube_dim_root, LEN(cube_dim_root));
        cube_error_free(u);
        expect_bytes(c, &in, data);

        /* With the count and the output written, the same launch runs. */
        ck_ok(cube_write(c, &hcount, count, sizeof(count)));
        ck_ok(cube_write(c, &out, pattern, BYTES));
        test_launch_u32(c, l, NULL, 0);
        for (uint32_t i = 0; i < N; i++)
                want[i] = data[i] + 1u;
        memcpy(witness, pattern, sizeof(witness));
        witness[0] = WITNESS;
        expect_bytes(c, &out, want);
        expect_bytes(c, &w, witness);
        ck_assert_uint_eq(test_live_failures(c), 0);
        cube_disconnect(c);
}
END_TEST

/* Asserts that a launch that ran nothing left tainted claimed by failure
 * alone, with no skip recorded, and clean with its pattern. */
static void expect_unchanged(cube_client *c, const cube_handle *tainted, uint64_t failure,
                             const cube_handle *clean, const uint32_t *pattern, const char *what)
{
        cube_error *u = only_failure(c, tainted, 1);

        ck_assert_msg(cube_error_failure(u) == failure && cube_error_claimed(u) == 1 &&
                      cube_error_chain_len(u) == 0, "%s changed the tainted output's claim: %s",
                      what, cube_error_message(u));
        cube_error_free(u);
        u = cube_check(c, clean, 1);
        ck_assert_msg(u == NULL, "%s claimed the clean output: %s", what,
                      u ? cube_error_message(u) : "");
        expect_bytes(c, clean, pattern);
}

START_TEST(a_zero_cube_count_changes_no_claim)
{
        static const uint32_t zeros[][3] = { { 0, 1, 1 }, { 4, 0, 1 }, { 4, 1, 0 } };
        cube_client *c = test_connect(D.socket, "zero-count");
        uint64_t fill = test_kernel(c, fill_source, "fill");
        uint64_t twin = test_kernel(c, twin_source, "twin");
        uint32_t data[N], pattern[N], want[N];
        cube_handle in, tainted, clean, hcount;
        char what[64];
        cube_launch l;
        cube_error *u;
        uint64_t f;

        fill_random(data, sizeof(data), 8);
        fill_pattern(pattern, N);
        in = filled(c, data, BYTES);
        tainted = test_empty(c, BYTES);
        clean = filled(c, pattern, BYTES);
        hcount = filled(c, zeros[0], sizeof(zeros[0]));
        launch_refused(c, over(fill, &tainted, NULL, 1), CUBE_RESOURCE_CUBE_DIM);
        u = only_failure(c, &tainted, 1);
        f = cube_error_failure(u);
        cube_error_free(u);

        l = over(twin, (cube_handle[]) { in, tainted, clean }, twin_io, 3);
        for (size_t z = 0; z < LEN(zeros); z++) {
                memcpy(l.cube_count, zeros[z], sizeof(zeros[z]));
                test_launch_u32(c, l, NULL, 0);
                snprintf(what, sizeof(what), "a static count of (%u, %u, %u)", zeros[z][0],
                         zeros[z][1], zeros[z][2]);
                expect_unchanged(c, &tainted, f, &clean, pattern, what);
        }
        l.dynamic_count = &hcount;
        for (size_t z = 0; z < LEN(zeros); z++) {
                ck_ok(cube_write(c, &hcount, zeros[z], sizeof(zeros[z])));
                test_launch_u32(c, l, NULL, 0);
                snprintf(what, sizeof(what), "a dynamic count of (%u, %u, %u)", zeros[z][0],
                         zeros[z][1], zeros[z][2]);
                expect_unchanged(c, &tainted, f, &clean, pattern, what);
        }

        /* With every output written and a real count, the launch writes both. */
        ck_ok(cube_write(c, &tainted, pattern, BYTES));
        l.dynamic_count = NULL;
        memcpy(l.cube_count, (uint32_t[3]) { N / 64, 1, 1 }, sizeof(l.cube_count));
        test_launch_u32(c, l, NULL, 0);
        for (uint32_t i = 0; i < N; i++)
                want[i] = data[i] + 1u;
        expect_bytes(c, &tainted, want);
        for (uint32_t i = 0; i < N; i++)
                want[i] = data[i] + 2u;
        expect_bytes(c, &clean, want);
        cube_disconnect(c);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Fault injection
 * ------------------------------------------------------------------------- */

START_TEST(an_injected_reservation_failure_is_carried_by_the_memory)
{
        static const cube_error_kind oom[] = { CUBE_SERVER_IO, CUBE_IO_OUT_OF_MEMORY };
        cube_client *c = test_connect(D.socket, "alloc");
        uint32_t data[N];
        cube_handle h, next;
        cube_error *u;
        uint64_t f;

        fill_random(data, sizeof(data), 9);
        inject(c, CUBE_FAULT_ALLOC, CUBE_IO_OUT_OF_MEMORY, "", BYTES);
        h = test_empty(c, BYTES);
        u = only_failure(c, &h, 1);
        f = cube_error_failure(u);
        expect_unwritten(u, f, 1, 0);
        ck_assert_uint_eq(cube_error_size(expect_root(u, oom, LEN(oom))), BYTES);
        ck_assert(cube_error_may_succeed_after_reclaim(cube_error_source(u)));
        ck_assert(cube_error_may_succeed_after_reclaim(cube_error_source(cube_error_source(u))));
        ck_assert(!cube_error_is_refusal(u));
        ck_assert(!cube_error_is_device_poisoned(u));
        cube_error_free(u);

        /* A write to it changes nothing: there is nowhere to put the bytes. */
        ck_ok(cube_write(c, &h, data, sizeof(data)));
        expect_failures(cube_sync(c, &h, 1), &f, 1);

        /* It struck once: the next reservation holds bytes. */
        next = filled(c, data, BYTES);
        expect_bytes(c, &next, data);
        ck_ok(cube_free(c, &h));
        ck_assert_uint_eq(test_live_failures(c), 0);
        cube_disconnect(c);
}
END_TEST

START_TEST(an_injected_copy_failure_lands_on_its_range_or_answers_the_read)
{
        cube_client *c = test_connect(D.socket, "copy");
        uint8_t data[BYTES], part[256], back[BYTES];
        cube_handle h, mid, head, tail;
        cube_error *u, *e;

        fill_random(data, sizeof(data), 10);
        fill_random(part, sizeof(part), 11);
        /* Not the first slice of its page: claims count from the allocation,
         * not from the page. */
        (void) test_empty(c, 512);
        h = filled(c, data, BYTES);
        mid = range(&h, 256, 512);
        head = range(&h, 0, 256);
        tail = range(&h, 512, BYTES);
        ck_ok(cube_sync(c, &h, 1));

        /* A write: its range carries the copy's error, found once the copy
         * has run; the bytes around it are as they were. */
        inject(c, CUBE_FAULT_COPY, CUBE_SERVER_GENERIC, "the copy engine stalled", 0);
        ck_ok(cube_write(c, &mid, part, sizeof(part)));
        e = cube_sync(c, &mid, 1);
        expect_several(e, 1);
        u = cube_error_clone(cube_error_at(e, 0));
        cube_error_free(e);
        expect_claims(u, 1, 0);
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(u)), CUBE_SERVER_GENERIC);
        ck_assert_str_eq(cube_error_reason(cube_error_source(u)), "the copy engine stalled");
        ck_assert(!cube_error_is_refusal(u));
        expect_failures(cube_check(c, &h, 1), (uint64_t[]) { cube_error_failure(u) }, 1);
        cube_error_free(u);
        ck_ok(cube_check(c, &head, 1));
        ck_ok(cube_check(c, &tail, 1));
        expect_bytes(c, &head, data);
        expect_bytes(c, &tail, data + 512);

        /* A read: the read answers the error itself. */
        inject(c, CUBE_FAULT_COPY, CUBE_SERVER_GENERIC, "the copy back stalled", 0);
        e = cube_read(c, &head, back, 256);
        ck_assert_msg(e && cube_error_kind_of(e) == CUBE_SERVER_GENERIC, "read: %s",
                      e ? cube_error_message(e) : "ok");
        ck_assert_str_eq(cube_error_reason(e), "the copy back stalled");
        cube_error_free(e);
        expect_bytes(c, &head, data);

        /* A write that copies repairs the range. */
        ck_ok(cube_write(c, &mid, part, sizeof(part)));
        ck_ok(cube_sync(c, &h, 1));
        memcpy(data + 256, part, sizeof(part));
        expect_bytes(c, &h, data);
        ck_assert_uint_eq(test_live_failures(c), 0);
        cube_disconnect(c);
}
END_TEST

START_TEST(an_injected_compile_failure_reaches_the_launchs_outputs)
{
        static const cube_error_kind panicked[] = {
                CUBE_SERVER_LAUNCH, CUBE_LAUNCH_COMPILATION_ERROR,
                CUBE_COMPILATION_EXPANSION_PANICKED,
        };
        cube_client *c = test_connect(D.socket, "compile");
        uint64_t k = test_kernel(c, test_affine_source, "affine");
        uint64_t fill = test_kernel(c, fill_source, "fill");
        uint32_t data[N];
        cube_handle in, out, other;
        cube_error *u, *e;

        fill_random(data, sizeof(data), 12);
        in = filled(c, data, BYTES);
        out = test_empty(c, BYTES);
        other = test_empty(c, BYTES);

        /* A compile fails with a CompilationError, or a defect of the build. */
        e = cube_debug_inject(c, CUBE_FAULT_COMPILE, CUBE_IO_BUFFER_TOO_BIG, "not a build failure",
                              0);
        ck_assert_msg(e && cube_error_kind_of(e) == CUBE_SERVER_VALIDATION, "%s",
                      e ? cube_error_message(e) : "accepted");
        cube_error_free(e);

        inject(c, CUBE_FAULT_COMPILE, CUBE_COMPILATION_GENERIC, "no such intrinsic on this target",
               0);
        test_launch_u32(c, over(k, (cube_handle[]) { in, out }, test_affine_io, 2), NULL, 0);
        u = only_failure(c, &out, 1);
        expect_claims(u, 1, 0);
        ck_assert_str_eq(cube_error_reason(expect_root(u, compile_root, LEN(compile_root))),
                         "no such intrinsic on this target");
        ck_assert(cube_error_is_refusal(u));
        cube_error_free(u);
        expect_bytes(c, &in, data);
        ck_assert_str_eq(kernel_state(c, "affine"), "failed");

        /* A kernel that panicked while expanding is a defect, not a refusal. */
        inject(c, CUBE_FAULT_COMPILE, CUBE_COMPILATION_EXPANSION_PANICKED, "an assertion failed",
               0);
        test_launch_u32(c, over(fill, &other, NULL, 1), (uint32_t[]) { 1 }, 1);
        u = only_failure(c, &other, 1);
        expect_root(u, panicked, LEN(panicked));
        ck_assert(!cube_error_is_refusal(u));
        ck_assert(!cube_error_is_device_poisoned(u));
        cube_error_free(u);
        ck_assert_uint_eq(test_live_failures(c), 2);
        cube_disconnect(c);
}
END_TEST

START_TEST(an_injected_poison_reaches_every_session_and_status_answers)
{
        cube_client *a = test_connect(D.socket, "first"), *late;
        cube_client *b = test_connect(D.socket, "second");
        uint32_t data[N];
        cube_handle ha, hb;
        cube_status st;
        cube_error *e;

        fill_random(data, sizeof(data), 13);
        ha = filled(a, data, BYTES);
        hb = filled(b, data, BYTES);
        ck_ok(cube_sync(a, &ha, 1));
        ck_ok(cube_sync(b, &hb, 1));

        inject(a, CUBE_FAULT_POISON, CUBE_DEVICE_POISON, "an injected sticky fault", 0);
        e = cube_check(a, &ha, 1);
        ck_assert_msg(e && cube_error_kind_of(e) == CUBE_SERVER_DEVICE_POISONED, "check: %s",
                      e ? cube_error_message(e) : "ok");
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(e)), CUBE_DEVICE_POISON);
        ck_assert_str_eq(cube_error_reason(cube_error_source(e)), "an injected sticky fault");
        ck_assert(cube_error_is_device_poisoned(e));
        ck_assert(!cube_error_is_refusal(e));
        cube_error_free(e);

        e = cube_read(b, &hb, data, sizeof(data));
        ck_assert_msg(e && cube_error_kind_of(e) == CUBE_SERVER_DEVICE_POISONED, "read: %s",
                      e ? cube_error_message(e) : "ok");
        cube_error_free(e);
        e = cube_sync(b, NULL, 0);
        ck_assert_msg(e && cube_error_is_device_poisoned(e), "sync: %s",
                      e ? cube_error_message(e) : "ok");
        cube_error_free(e);
        e = cube_flush(a);
        ck_assert_msg(e && cube_error_is_device_poisoned(e), "flush: %s",
                      e ? cube_error_message(e) : "ok");
        cube_error_free(e);

        /* Status answers, to a session from before and to one from after. */
        ck_ok(cube_daemon_status(b, &st));
        ck_assert(st.poisoned);
        ck_assert_str_eq(st.poison, "an injected sticky fault");
        late = test_connect(D.socket, "late");
        ck_ok(cube_daemon_status(late, &st));
        ck_assert(st.poisoned);
        e = cube_check(late, NULL, 0);
        ck_assert_msg(e && cube_error_is_device_poisoned(e), "a later session's check: %s",
                      e ? cube_error_message(e) : "ok");
        cube_error_free(e);
        cube_disconnect(late);
        cube_disconnect(a);
        cube_disconnect(b);
}
END_TEST

START_TEST(a_daemon_without_the_flag_refuses_injection_and_changes_nothing)
{
        static const cube_fault_site sites[] = {
                CUBE_FAULT_ALLOC, CUBE_FAULT_COPY, CUBE_FAULT_LAUNCH, CUBE_FAULT_COMPILE,
                CUBE_FAULT_POISON, CUBE_FAULT_TEARDOWN,
        };
        static const cube_error_kind kinds[] = {
                CUBE_IO_OUT_OF_MEMORY, CUBE_SERVER_GENERIC, CUBE_LAUNCH_UNKNOWN,
                CUBE_COMPILATION_GENERIC, CUBE_DEVICE_POISON, CUBE_SERVER_TORN_DOWN,
        };
        test_daemon plain;
        cube_client *c;
        uint32_t data[N], want[N];
        cube_handle in, out;
        uint64_t k;
        cube_error *e;

        ck_assert_int_eq(test_daemon_start(&plain, NULL), 0);
        ck_ok(cube_connect(plain.socket, "no-faults", &c));
        for (size_t i = 0; i < LEN(sites); i++) {
                e = cube_debug_inject(c, sites[i], kinds[i], "should not happen", 64);
                ck_assert_msg(e && cube_error_kind_of(e) == CUBE_SERVER_VALIDATION,
                              "site %d: %s", (int) sites[i],
                              e ? cube_error_message(e) : "accepted");
                ck_assert_msg(strstr(cube_error_reason(e), "--enable-fault-injection") != NULL,
                              "the refusal does not say how to enable it: %s",
                              cube_error_reason(e));
                cube_error_free(e);
        }

        /* Nothing was armed: memory, copies, compiles and launches all work. */
        fill_random(data, sizeof(data), 14);
        for (uint32_t i = 0; i < N; i++)
                want[i] = test_affine(data[i]);
        in = filled(c, data, BYTES);
        out = test_empty(c, BYTES);
        k = test_kernel(c, test_affine_source, "affine");
        test_launch_u32(c, over(k, (cube_handle[]) { in, out }, test_affine_io, 2), NULL, 0);
        ck_ok(cube_sync(c, (cube_handle[]) { in, out }, 2));
        expect_bytes(c, &in, data);
        expect_bytes(c, &out, want);
        ck_ok(cube_flush(c));
        ck_assert_uint_eq(test_live_failures(c), 0);
        ck_assert(!status_of(plain.socket).poisoned);
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&plain, 10000), 0);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Independence, and the predicates over groups
 * ------------------------------------------------------------------------- */

START_TEST(interleaved_workflows_on_one_stream_stay_apart)
{
        cube_client *c = test_connect(D.socket, "interleaved");
        uint64_t k = test_kernel(c, test_affine_source, "affine");
        uint32_t d1[N], d2[N], want[N];
        cube_handle in1, in2, t[3], u[3];
        cube_error *r;
        uint64_t f;

        cube_stream_set(42);
        fill_random(d1, sizeof(d1), 15);
        fill_random(d2, sizeof(d2), 16);
        in1 = filled(c, d1, BYTES);
        in2 = filled(c, d2, BYTES);
        for (int i = 0; i < 3; i++) {
                t[i] = test_empty(c, BYTES);
                u[i] = test_empty(c, BYTES);
        }

        /* Launch by launch: the first workflow fails at its first kernel. */
        launch_refused(c, over(k, (cube_handle[]) { in1, t[0] }, test_affine_io, 2),
                       CUBE_RESOURCE_CUBE_DIM);
        test_launch_u32(c, over(k, (cube_handle[]) { in2, u[0] }, test_affine_io, 2), NULL, 0);
        test_launch_u32(c, over(k, (cube_handle[]) { t[0], t[1] }, test_affine_io, 2), NULL, 0);
        test_launch_u32(c, over(k, (cube_handle[]) { u[0], u[1] }, test_affine_io, 2), NULL, 0);
        test_launch_u32(c, over(k, (cube_handle[]) { t[1], t[2] }, test_affine_io, 2), NULL, 0);
        test_launch_u32(c, over(k, (cube_handle[]) { u[1], u[2] }, test_affine_io, 2), NULL, 0);

        for (uint32_t i = 0; i < N; i++)
                want[i] = test_affine(test_affine(test_affine(d2[i])));
        ck_ok(cube_sync(c, u, 3));
        ck_ok(cube_check(c, (cube_handle[]) { in2, u[0], u[1], u[2] }, 4));
        expect_bytes(c, &u[2], want);
        expect_bytes(c, &in1, d1);

        r = only_failure(c, &t[2], 1);
        f = cube_error_failure(r);
        expect_unwritten(r, f, 3, 2);
        expect_hop(r, 0, "affine", t[1].memory);
        expect_hop(r, 1, "affine", t[0].memory);
        expect_root(r, cube_dim_root, LEN(cube_dim_root));
        cube_error_free(r);
        expect_failures(cube_check(c, t, 3), &f, 1);
        ck_ok(cube_flush(c));
        ck_assert_uint_eq(test_live_failures(c), 1);
        cube_stream_set(0);
        cube_disconnect(c);
}
END_TEST

/* Reads h, whose two halves carry one failure each, and returns the report. */
static cube_error *read_halves(cube_client *c, const cube_handle *h)
{
        uint8_t *back = malloc(2 * BYTES);
        cube_error *e = cube_read(c, h, back, 2 * BYTES);

        free(back);
        expect_several(e, 2);
        ck_assert_uint_ne(cube_error_failure(cube_error_at(e, 0)),
                          cube_error_failure(cube_error_at(e, 1)));
        return e;
}

START_TEST(refusal_and_poison_are_judged_over_the_whole_group)
{
        cube_client *c = test_connect(D.socket, "predicates");
        uint64_t fill = test_kernel(c, fill_source, "fill");
        uint64_t k = test_kernel(c, test_affine_source, "affine");
        cube_handle h[3], in;
        uint32_t data[N];
        cube_error *e;

        fill_random(data, sizeof(data), 17);
        in = filled(c, data, BYTES);
        for (int i = 0; i < 3; i++) {
                cube_handle lo, hi;
                h[i] = test_empty(c, 2 * BYTES);
                lo = range(&h[i], 0, BYTES);
                hi = range(&h[i], BYTES, 2 * BYTES);
                launch_refused(c, over(fill, &lo, NULL, 1), CUBE_RESOURCE_CUBE_DIM);
                switch (i) {
                case 0:
                        launch_refused(c, over(fill, &hi, NULL, 1), CUBE_RESOURCE_UNITS);
                        break;
                case 1:
                        inject(c, CUBE_FAULT_LAUNCH, CUBE_LAUNCH_UNKNOWN, "the device faulted", 0);
                        test_launch_u32(c,
                                        over(k, (cube_handle[]) { in, hi }, test_affine_io, 2), NULL, 0);
                        break;
                default:
                        inject(c, CUBE_FAULT_LAUNCH, CUBE_LAUNCH_DEVICE_POISONED,
                               "an illegal address", 0);
                        test_launch_u32(c,
                                        over(k, (cube_handle[]) { in, hi }, test_affine_io, 2), NULL, 0);
                        break;
                }
        }

        /* Two refusals: a refusal, on a healthy device. */
        e = read_halves(c, &h[0]);
        ck_assert(cube_error_is_refusal(cube_error_at(e, 0)));
        ck_assert(cube_error_is_refusal(cube_error_at(e, 1)));
        ck_assert(cube_error_is_refusal(e));
        ck_assert(!cube_error_is_device_poisoned(e));
        cube_error_free(e);

        /* One real failure among refusals is a real failure. */
        e = read_halves(c, &h[1]);
        ck_assert(cube_error_is_refusal(cube_error_at(e, 0)));
        ck_assert(!cube_error_is_refusal(cube_error_at(e, 1)));
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(cube_error_source(
                cube_error_at(e, 1)))), CUBE_LAUNCH_UNKNOWN);
        ck_assert(!cube_error_is_refusal(e));
        ck_assert(!cube_error_is_device_poisoned(e));
        cube_error_free(e);

        /* One poisoned root poisons the group, and is no refusal. */
        e = read_halves(c, &h[2]);
        ck_assert(!cube_error_is_device_poisoned(cube_error_at(e, 0)));
        ck_assert(cube_error_is_device_poisoned(cube_error_at(e, 1)));
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(cube_error_source(
                cube_error_at(e, 1)))), CUBE_LAUNCH_DEVICE_POISONED);
        ck_assert(cube_error_is_device_poisoned(e));
        ck_assert(!cube_error_is_refusal(e));
        cube_error_free(e);
        cube_disconnect(c);
}
END_TEST

/* ---------------------------------------------------------------------------
 * cubectl failures
 * ------------------------------------------------------------------------- */

/* Runs cubectl --socket D.socket with args; returns what it printed on
 * stdout (the caller frees it) and its exit status in ret_status. */
static char *cubectl(const char *const *args, int *ret_status)
{
        const char *bin = getenv("CUBECTL_BIN"), *argv[16];
        size_t n = 0, len = 0, cap = 4096;
        char *out = malloc(cap);
        int fds[2], status;
        pid_t pid;

        ck_assert_msg(bin != NULL, "CUBECTL_BIN is not set");
        argv[n++] = bin;
        argv[n++] = "--socket";
        argv[n++] = D.socket;
        for (; *args && n < LEN(argv) - 1; args++)
                argv[n++] = *args;
        argv[n] = NULL;
        ck_assert_int_eq(pipe(fds), 0);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                dup2(fds[1], 1);
                close(fds[0]);
                close(fds[1]);
                execv(bin, (char *const *) argv);
                _exit(127);
        }
        close(fds[1]);
        for (;;) {
                ssize_t r;
                if (len + 1 == cap)
                        out = realloc(out, cap *= 2);
                r = read(fds[0], out + len, cap - len - 1);
                if (r <= 0)
                        break;
                len += (size_t) r;
        }
        out[len] = '\0';
        close(fds[0]);
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        *ret_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        return out;
}

static void expect_printed(const char *out, const char *want)
{
        ck_assert_msg(strstr(out, want) != NULL, "cubectl printed no \"%s\":\n%s", want, out);
}

START_TEST(cubectl_failures_lists_every_live_failure)
{
        static const char *const text[] = { "failures", NULL };
        static const char *const json[] = { "--json", "failures", NULL };
        cube_client *c = test_connect(D.socket, "ctl");
        uint64_t fill = test_kernel(c, fill_source, "fill");
        uint64_t hop = test_kernel(c, hop_b_source, "hop_b");
        cube_handle a = test_empty(c, BYTES), b = test_empty(c, BYTES), w;
        cube_handle z = test_empty(c, BYTES);
        cube_failure_info *v;
        uint32_t pattern[N];
        char want[512], first_line[256];
        uint64_t session, fa, fz;
        int status;
        size_t n;
        char *out;

        fill_pattern(pattern, N);
        w = filled(c, pattern, BYTES);
        launch_refused(c, over(fill, &a, NULL, 1), CUBE_RESOURCE_CUBE_DIM);
        test_launch_u32(c, over(hop, (cube_handle[]) { a, b, w }, hop_io, 3), NULL, 0);
        launch_refused(c, over(fill, &z, NULL, 1), CUBE_RESOURCE_UNITS);
        ck_ok(cube_sync(c, NULL, 0));
        ck_ok(cube_daemon_failures(c, &v, &n));
        ck_assert_uint_eq(n, 2);
        session = v[0].session;
        ck_assert_uint_eq(v[1].session, session);
        /* The failure the hop passed on claims two buffers, the other one. */
        int chained = cube_error_claimed(v[0].report) == 2 ? 0 : 1;
        ck_assert_uint_eq(cube_error_claimed(v[chained].report), 2);
        ck_assert_uint_eq(cube_error_claimed(v[1 - chained].report), 1);
        fa = v[chained].id;
        fz = v[1 - chained].id;
        ck_assert_uint_lt(fa, fz);
        snprintf(first_line, sizeof(first_line), "%s",
                 cube_error_message(cube_error_source(v[chained].report)));
        first_line[strcspn(first_line, "\n")] = '\0';
        cube_failures_free(v, n);

        out = cubectl(text, &status);
        ck_assert_int_eq(status, 0);
        snprintf(want, sizeof(want), "failure #%" PRIu64 ": session %" PRIu64 ", claiming 2 "
                 "buffer(s)\n  skipped `hop_b`: it needed memory %" PRIu64 ", which carried the "
                 "failure\n  root: %s", fa, session, a.memory, first_line);
        expect_printed(out, want);
        snprintf(want, sizeof(want), "failure #%" PRIu64 ": session %" PRIu64 ", claiming 1 "
                 "buffer(s)\n  root: ", fz, session);
        expect_printed(out, want);
        expect_printed(out, "Total unit count exceeds maximum");
        ck_assert_msg(strstr(out, "no live failures") == NULL, "%s", out);
        free(out);

        out = cubectl(json, &status);
        ck_assert_int_eq(status, 0);
        ck_assert_msg(out[0] == '[' && strcmp(out + strlen(out) - 2, "]\n") == 0, "%s", out);
        snprintf(want, sizeof(want), "{\"id\":%" PRIu64 ",\"session\":%" PRIu64 ",\"claimed\":2,"
                 "\"root_variant\":\"Launch\",\"root\":\"", fa, session);
        expect_printed(out, want);
        snprintf(want, sizeof(want), "\"chain\":[\"skipped `hop_b`: it needed memory %" PRIu64
                 ", which carried the failure\"]}", a.memory);
        expect_printed(out, want);
        snprintf(want, sizeof(want), "{\"id\":%" PRIu64 ",\"session\":%" PRIu64 ",\"claimed\":1,"
                 "\"root_variant\":\"Launch\",\"root\":\"", fz, session);
        expect_printed(out, want);
        expect_printed(out, "\"chain\":[]}");
        free(out);

        /* Once every carrier is gone there is nothing to list. */
        ck_ok(cube_free(c, &a));
        ck_ok(cube_free(c, &b));
        ck_ok(cube_free(c, &z));
        ck_ok(cube_sync(c, NULL, 0));
        out = cubectl(text, &status);
        ck_assert_int_eq(status, 0);
        ck_assert_str_eq(out, "no live failures\n");
        free(out);
        out = cubectl(json, &status);
        ck_assert_int_eq(status, 0);
        ck_assert_str_eq(out, "[]\n");
        free(out);
        cube_disconnect(c);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Failures that arrive late: known only once the device completes the work,
 * after later work was queued behind it
 * ------------------------------------------------------------------------- */

/* A linger kernel on scratch, compiled and run once, so that what is queued
 * next on the stream waits ms behind it on the device. */
static uint64_t slow_stream(cube_client *c, cube_handle *ret_scratch)
{
        uint64_t k = test_kernel(c, linger_source, "linger");

        *ret_scratch = test_empty(c, 16);
        launch_linger(c, k, ret_scratch, 0, false, CUBE_LAUNCH_EXECUTE);
        ck_ok(cube_sync(c, NULL, 0));
        return k;
}

/* The root reason of the one failure e reports (Several of one Unwritten),
 * which it frees. */
static void expect_late(cube_error *e, const char *reason)
{
        expect_several(e, 1);
        ck_assert_str_eq(cube_error_reason(cube_error_source(cube_error_at(e, 0))), reason);
        cube_error_free(e);
}

START_TEST(a_read_behind_a_write_that_fails_on_the_device_reports_it)
{
        cube_client *c = test_connect(D.socket, "late-read");
        uint32_t old[N], fresh[N], back[N];
        cube_handle h, scratch;
        uint64_t k = slow_stream(c, &scratch);

        fill_random(old, sizeof(old), 31);
        fill_random(fresh, sizeof(fresh), 32);
        h = filled(c, old, BYTES);
        ck_ok(cube_sync(c, &h, 1));

        /* The read is handled while the write still waits behind the kernel:
         * no claim is known yet, and the old bytes must not come back. */
        launch_linger(c, k, &scratch, 200, false, CUBE_LAUNCH_EXECUTE);
        inject(c, CUBE_FAULT_COPY, CUBE_SERVER_GENERIC, "the late copy failed", 0);
        ck_ok(cube_write(c, &h, fresh, sizeof(fresh)));
        expect_late(cube_read(c, &h, back, sizeof(back)), "the late copy failed");
        expect_late(cube_check(c, &h, 1), "the late copy failed");
        cube_disconnect(c);
}
END_TEST

START_TEST(a_launch_queued_behind_a_failing_write_passes_the_failure_on)
{
        cube_client *c = test_connect(D.socket, "late-launch");
        uint64_t aff = test_kernel(c, test_affine_source, "affine");
        uint32_t data[N], fresh[N], back[N];
        cube_handle in, out, scratch;
        uint64_t k = slow_stream(c, &scratch);
        const cube_error *u;
        cube_error *e, *first;

        fill_random(data, sizeof(data), 33);
        fill_random(fresh, sizeof(fresh), 34);
        in = filled(c, data, BYTES);
        out = test_empty(c, BYTES);
        /* Compiled, and run once on good input. */
        test_launch_u32(c, over(aff, (cube_handle[]) { in, out }, test_affine_io, 2), NULL, 0);
        ck_ok(cube_sync(c, &out, 1));

        launch_linger(c, k, &scratch, 200, false, CUBE_LAUNCH_EXECUTE);
        inject(c, CUBE_FAULT_COPY, CUBE_SERVER_GENERIC, "the input never arrived", 0);
        ck_ok(cube_write(c, &in, fresh, sizeof(fresh)));
        test_launch_u32(c, over(aff, (cube_handle[]) { in, out }, test_affine_io, 2), NULL, 0);

        /* out was computed from bytes that were never there: it carries the
         * write's own failure, one hop on, as a skipped launch's would. */
        first = cube_read(c, &out, back, sizeof(back));
        expect_several(first, 1);
        u = cube_error_at(first, 0);
        ck_assert_str_eq(cube_error_reason(cube_error_source(u)), "the input never arrived");
        expect_claims(u, 2, 1);
        ck_assert_msg(strstr(cube_error_chain_at(u, 0), "`affine` ran on memory") != NULL,
                      "hop: %s", cube_error_chain_at(u, 0));
        e = cube_check(c, &in, 1);
        expect_several(e, 1);
        ck_assert_uint_eq(cube_error_failure(cube_error_at(e, 0)), cube_error_failure(u));
        cube_error_free(e);
        cube_error_free(first);
        expect_late(cube_sync(c, &out, 1), "the input never arrived");

        /* A good write and launch repair both. */
        ck_ok(cube_write(c, &in, fresh, sizeof(fresh)));
        test_launch_u32(c, over(aff, (cube_handle[]) { in, out }, test_affine_io, 2), NULL, 0);
        ck_ok(cube_read(c, &out, back, sizeof(back)));
        for (size_t i = 0; i < N; i++)
                ck_assert_uint_eq(back[i], test_affine(fresh[i]));
        ck_assert_uint_eq(test_live_failures(c), 0);
        cube_disconnect(c);
}
END_TEST

START_TEST(a_later_write_over_a_failing_one_keeps_its_bytes)
{
        cube_client *c = test_connect(D.socket, "late-repair");
        uint32_t first[N], second[N], part[N / 2];
        cube_handle h, scratch;
        uint64_t k = slow_stream(c, &scratch);

        fill_random(first, sizeof(first), 35);
        fill_random(second, sizeof(second), 36);
        fill_random(part, sizeof(part), 37);
        h = test_empty(c, BYTES);

        /* W1 fails once both are queued: the bytes are W2's. */
        launch_linger(c, k, &scratch, 150, false, CUBE_LAUNCH_EXECUTE);
        inject(c, CUBE_FAULT_COPY, CUBE_SERVER_GENERIC, "W1 failed", 0);
        ck_ok(cube_write(c, &h, first, sizeof(first)));
        ck_ok(cube_write(c, &h, second, sizeof(second)));
        ck_ok(cube_sync(c, &h, 1));
        ck_ok(cube_check(c, &h, 1));
        expect_bytes(c, &h, second);
        ck_assert_uint_eq(test_live_failures(c), 0);

        /* Over half of it: the failure lands on the other half alone. */
        cube_handle front = range(&h, 0, BYTES / 2), back = range(&h, BYTES / 2, BYTES);
        launch_linger(c, k, &scratch, 150, false, CUBE_LAUNCH_EXECUTE);
        inject(c, CUBE_FAULT_COPY, CUBE_SERVER_GENERIC, "W1 failed again", 0);
        ck_ok(cube_write(c, &h, first, sizeof(first)));
        ck_ok(cube_write(c, &front, part, sizeof(part)));
        expect_late(cube_sync(c, &h, 1), "W1 failed again");
        ck_ok(cube_check(c, &front, 1));
        expect_late(cube_check(c, &back, 1), "W1 failed again");
        expect_bytes(c, &front, part);
        cube_disconnect(c);
}
END_TEST

START_TEST(a_sync_waits_for_every_stream_of_its_session)
{
        cube_client *c = test_connect(D.socket, "late-streams");
        cube_handle scratch, out;
        uint64_t k = slow_stream(c, &scratch);
        cube_error *e;

        out = test_empty(c, 16);
        cube_stream_set(2);
        launch_linger(c, k, &out, 200, true, CUBE_LAUNCH_EXECUTE);
        cube_stream_set(1);
        /* Stream 1 has nothing queued; the fault on stream 2 was raised by
         * work the session queued before the sync. */
        e = cube_sync(c, NULL, 0);
        ck_assert_msg(e && cube_error_is_device_poisoned(e), "sync: %s",
                      e ? cube_error_message(e) : "ok");
        cube_error_free(e);
        cube_stream_set(0);
        cube_disconnect(c);
}
END_TEST

START_TEST(a_failed_reservation_keeps_its_failure_whatever_is_written)
{
        cube_client *c = test_connect(D.socket, "late-reservation");
        uint64_t fill = test_kernel(c, fill_source, "fill");
        uint8_t byte = 7;
        cube_handle h, first;
        cube_error *u;
        uint64_t f;

        inject(c, CUBE_FAULT_ALLOC, CUBE_IO_OUT_OF_MEMORY, "", BYTES);
        h = test_empty(c, BYTES);
        u = only_failure(c, &h, 1);
        f = cube_error_failure(u);
        cube_error_free(u);

        /* A write of one byte, a refused launch over it, a read-only...:
         * whatever fails to write it, the reservation's failure stays what
         * every read reports. */
        first = range(&h, 0, 1);
        ck_ok(cube_write(c, &first, &byte, 1));
        launch_refused(c, over(fill, &h, NULL, 1), CUBE_RESOURCE_CUBE_DIM);
        launch_refused(c, over(fill, &first, NULL, 1), CUBE_RESOURCE_UNITS);
        expect_failures(cube_sync(c, &h, 1), &f, 1);
        expect_failures(cube_check(c, &first, 1), &f, 1);
        cube_disconnect(c);
}
END_TEST

START_TEST(a_build_that_fails_outside_the_kernel_is_no_refusal_and_is_retried)
{
        static const cube_error_kind defect[] = { CUBE_SERVER_LAUNCH, CUBE_LAUNCH_UNKNOWN };
        cube_client *c = test_connect(D.socket, "defect");
        uint64_t k = test_kernel(c, test_affine_source, "affine");
        uint32_t data[N], back[N];
        cube_handle in, out;
        cube_error *u;

        fill_random(data, sizeof(data), 38);
        in = filled(c, data, BYTES);
        out = test_empty(c, BYTES);
        inject(c, CUBE_FAULT_COMPILE, CUBE_LAUNCH_UNKNOWN, "the compiler was killed", 0);
        test_launch_u32(c, over(k, (cube_handle[]) { in, out }, test_affine_io, 2), NULL, 0);
        u = only_failure(c, &out, 1);
        ck_assert_str_eq(cube_error_reason(expect_root(u, defect, LEN(defect))),
                         "the compiler was killed");
        ck_assert(!cube_error_is_refusal(u));
        ck_assert(!cube_error_is_device_poisoned(u));
        cube_error_free(u);
        ck_assert_str_eq(kernel_state(c, "affine"), "failed");

        /* The next launch compiles it again, and it runs. */
        test_launch_u32(c, over(k, (cube_handle[]) { in, out }, test_affine_io, 2), NULL, 0);
        ck_ok(cube_read(c, &out, back, sizeof(back)));
        for (size_t i = 0; i < N; i++)
                ck_assert_uint_eq(back[i], test_affine(data[i]));
        ck_assert_str_eq(kernel_state(c, "affine"), "compiled");
        cube_disconnect(c);
}
END_TEST

START_TEST(a_device_fault_injected_late_poisons_the_device)
{
        cube_client *c = test_connect(D.socket, "late-poison");
        uint64_t k = test_kernel(c, test_affine_source, "affine");
        uint32_t data[N];
        cube_handle in, out;
        cube_status st;
        cube_error *e;

        fill_random(data, sizeof(data), 39);
        in = filled(c, data, BYTES);
        out = test_empty(c, BYTES);
        inject(c, CUBE_FAULT_DEVICE_LAUNCH, CUBE_DEVICE_POISON, "a late sticky fault", 0);
        test_launch_u32(c, over(k, (cube_handle[]) { in, out }, test_affine_io, 2), NULL, 0);
        e = cube_sync(c, NULL, 0);
        ck_assert_msg(e && cube_error_is_device_poisoned(e), "sync: %s",
                      e ? cube_error_message(e) : "ok");
        cube_error_free(e);
        ck_ok(cube_daemon_status(c, &st));
        ck_assert(st.poisoned);
        ck_assert_msg(strstr(st.poison, "a late sticky fault") && strstr(st.poison, "late-poison"),
                      "the poison does not name the fault and the session: %s", st.poison);
        cube_disconnect(c);
}
END_TEST

/* A unit that writes far outside every binding (unchecked). */
static const char wild_source[] =
        "KERNEL void wild(uint32_t *out, INFO)\n"
        "{\n"
        "        out[ABSOLUTE_POS] = 1;\n"
        "        if (ABSOLUTE_POS == 7)\n"
        "                out[(uint64_t) 1 << 44] = 1;\n"
        "}\n";

/* A real device fault under reinit: the next sessions meet a fresh device.
 * The CPU device comes up again in place; a GPU keeps a sticky fault until
 * the process ends, so there cubed starts afresh as the same process
 * (before: it exited 3 with no one to start it again). */
START_TEST(a_device_fault_under_reinit_serves_a_fresh_device)
{
        static const char *const args[] = { "--poison-policy", "reinit", "--poison-grace", "1",
                                            NULL };
        test_daemon d;
        cube_client *c;
        cube_handle out;
        cube_status st;
        char before[64];
        long deadline;
        cube_error *e;

        /* The driver's test double faults the process's first launch. */
        setenv("CUBE_CUDA_DOUBLE_FAULT_LAUNCH", "1", 1);
        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        c = test_connect(d.socket, "wild");
        snprintf(before, sizeof(before), "%s", cube_client_service(c));
        out = test_empty(c, 4096);
        test_launch_u32(c, (cube_launch) {
                .kernel = test_kernel(c, wild_source, "wild"), .cube_count = { 1, 1, 1 },
                .cube_dim = { 32, 1, 1 }, .buffers = &out, .n_buffers = 1,
                .mode = CUBE_LAUNCH_UNCHECKED,
        }, NULL, 0);
        e = cube_sync(c, NULL, 0);
        ck_assert_msg(e && cube_error_is_device_poisoned(e), "sync: %s",
                      e ? cube_error_message(e) : "ok");
        cube_error_free(e);
        cube_disconnect(c);

        deadline = test_now_ms() + test_scaled_ms(15000);
        for (;;) {
                e = cube_connect(d.socket, "after", &c);
                if (!e && strcmp(cube_client_service(c), before) != 0)
                        break;
                if (!e)
                        cube_disconnect(c);
                cube_error_free(e);
                ck_assert_msg(kill(d.pid, 0) == 0, "cubed ended instead of serving a fresh device");
                ck_assert_msg(test_now_ms() < deadline, "no fresh device was served");
                usleep(50000);
        }
        ck_ok(cube_daemon_status(c, &st));
        ck_assert_msg(!st.poisoned, "still poisoned: %s", st.poison);
        ck_assert_msg(kill(d.pid, 0) == 0, "cubed's process is gone");
        if (strcmp(test_backend(), "cuda") == 0)
                ck_assert_msg(test_file_holds(d.log, "starting cubed afresh"),
                              "no word in the log of starting afresh");
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
}
END_TEST

START_TEST(a_missing_compiler_is_no_refusal)
{
        static const cube_error_kind defect[] = { CUBE_SERVER_LAUNCH, CUBE_LAUNCH_UNKNOWN };
        const char *path = getenv("PATH");
        char *saved = strdup(path ? path : "/usr/bin:/bin");
        test_daemon d;
        cube_client *c;
        cube_handle out;
        cube_error *u;

        /* The kernel compiler links what it builds with the linker on
         * cubed's PATH: a daemon started without one cannot build at all. */
        ck_assert_ptr_nonnull(saved);
        setenv("PATH", "/nonexistent", 1);
        ck_assert_int_eq(test_daemon_start(&d, NULL), 0);
        setenv("PATH", saved, 1);
        free(saved);
        ck_ok(cube_connect(d.socket, "no-cc", &c));
        uint64_t k = test_kernel(c, fill_source, "fill");
        out = test_empty(c, BYTES);
        for (int attempt = 0; attempt < 2; attempt++) {
                test_launch_u32(c, over(k, &out, NULL, 1), (uint32_t[]) { 1 }, 1);
                ck_ok(cube_sync(c, NULL, 0));
                u = cube_check(c, &out, 1);
                expect_several(u, 1);
                const cube_error *root = expect_root(cube_error_at(u, 0), defect, LEN(defect));
                ck_assert_msg(strstr(cube_error_reason(root), "kernel compiler"),
                              "%s", cube_error_reason(root));
                ck_assert(!cube_error_is_refusal(u));
                cube_error_free(u);
        }
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
}
END_TEST

static Suite *failures_suite(void)
{
        Suite *s = suite_create("failures");
        TCase *claims = tcase_create("claims");
        TCase *launches = tcase_create("launches");
        TCase *skips = tcase_create("skips");
        TCase *reports = tcase_create("reports");
        TCase *inject_tc = tcase_create("inject");
        TCase *plain = tcase_create("plain");
        TCase *tools = tcase_create("tools");
        TCase *late = tcase_create("late");
        TCase *with_daemon[] = { claims, launches, skips, reports, inject_tc, tools, late };

        for (size_t i = 0; i < LEN(with_daemon); i++)
                tcase_add_checked_fixture(with_daemon[i], test_start_with_faults, test_stop_clean);

        tcase_add_test(claims, failure_ids_are_never_reused_and_die_with_their_last_carrier);
        tcase_add_test(claims, a_write_repairs_exactly_the_bytes_it_covers);
        tcase_add_test(claims, disjoint_failures_are_reported_apart_and_one_failure_once);
        suite_add_tcase(s, claims);

        tcase_add_test(launches, an_uncompiled_launch_taints_its_declared_and_undeclared_outputs);
        tcase_add_test_needing(launches, after_compiling_the_compiled_answer_decides_what_is_tainted,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(launches, relaunching_into_a_pure_output_repairs_it,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(launches, an_abandoned_write_scope_reads_as_torn_down,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(launches, a_dynamic_count_read_from_a_tainted_buffer_skips_the_launch,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(launches, a_zero_cube_count_changes_no_claim,
                               TEST_NEEDS_KERNEL_RUNS);
        suite_add_tcase(s, launches);

        tcase_add_test_needing(skips, a_launch_reading_a_failure_is_skipped_and_passes_it_on,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test(skips, the_skip_chain_walks_back_from_the_buffer_asked_about);
        tcase_add_test(skips, a_skip_chain_keeps_its_sixteen_newest_hops);
        tcase_add_test_needing(skips, interleaved_workflows_on_one_stream_stay_apart,
                               TEST_NEEDS_KERNEL_RUNS);
        suite_add_tcase(s, skips);

        tcase_add_test(reports, read_sync_and_check_report_each_named_failure_once);
        tcase_add_test_needing(reports, check_answers_at_once_and_sync_drains_the_device_first,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test(reports, refusal_and_poison_are_judged_over_the_whole_group);
        suite_add_tcase(s, reports);

        tcase_add_test(inject_tc, an_injected_reservation_failure_is_carried_by_the_memory);
        tcase_add_test(inject_tc, an_injected_copy_failure_lands_on_its_range_or_answers_the_read);
        tcase_add_test(inject_tc, an_injected_compile_failure_reaches_the_launchs_outputs);
        tcase_add_test(inject_tc, an_injected_poison_reaches_every_session_and_status_answers);
        suite_add_tcase(s, inject_tc);

        tcase_add_test_needing(plain, a_daemon_without_the_flag_refuses_injection_and_changes_nothing,
                               TEST_NEEDS_KERNEL_RUNS);
        suite_add_tcase(s, plain);

        tcase_add_test(tools, cubectl_failures_lists_every_live_failure);
        suite_add_tcase(s, tools);

        tcase_add_test(late, a_read_behind_a_write_that_fails_on_the_device_reports_it);
        tcase_add_test_needing(late, a_launch_queued_behind_a_failing_write_passes_the_failure_on,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test(late, a_later_write_over_a_failing_one_keeps_its_bytes);
        tcase_add_test_needing(late, a_sync_waits_for_every_stream_of_its_session,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test(late, a_failed_reservation_keeps_its_failure_whatever_is_written);
        tcase_add_test_needing(late, a_build_that_fails_outside_the_kernel_is_no_refusal_and_is_retried,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test(late, a_device_fault_injected_late_poisons_the_device);
        tcase_add_test(late, a_device_fault_under_reinit_serves_a_fresh_device);
        tcase_add_test_needing(plain, a_missing_compiler_is_no_refusal, TEST_NEEDS_CPU_DEVICE);
        suite_add_tcase(s, late);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(failures_suite());
        int failed;

        srunner_run_all(sr, CK_ENV);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? 1 : 0;
}

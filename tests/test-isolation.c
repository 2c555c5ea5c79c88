/*
 * test-isolation.c - tenants cannot reach each other through their kernels.
 *
 * Each test is a hostile kernel run by an attacker session beside a victim
 * session of the same daemon, one construct family each: indexing below and
 * past a binding, pointer arithmetic, integer/pointer casts, punning and
 * unions, reserved names, shared and private arrays, vector builtins,
 * atomics, const casts on a read-only import, info words past the launch's
 * own, and a store that would leave device memory. Every one ends the same
 * way: refused at registration, or the attacker's launch fails with an
 * out-of-bounds root; the victim's bytes are what it wrote; the device is
 * never poisoned. Then check_mode: who may launch unchecked, and what each
 * mode does with such a launch; and scalars as parameters.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cube.h"
#include "harness.h"

#define VICTIM_WORDS (64 * 1024)
#define MINE 4096

/* The victim: a session holding bytes it will read back. */
typedef struct victim {
        cube_client *c;
        cube_handle h;
        uint32_t *bytes;
} victim;

static void victim_start(victim *v, const char *socket)
{
        v->c = test_connect(socket, "victim");
        v->bytes = malloc(VICTIM_WORDS * 4);
        ck_assert_ptr_nonnull(v->bytes);
        for (uint32_t i = 0; i < VICTIM_WORDS; i++)
                v->bytes[i] = 0x5ec2e700u + i;
        ck_ok(cube_create(v->c, v->bytes, VICTIM_WORDS * 4, &v->h));
}

/* The victim's bytes are untouched, and the device serves everyone. */
static void victim_intact(victim *v, const char *socket)
{
        test_expect_bytes(v->c, &v->h, v->bytes, VICTIM_WORDS * 4);
        ck_assert_msg(!status_of(socket).poisoned, "the device was poisoned: %s",
                      status_of(socket).poison);
        cube_disconnect(v->c);
        free(v->bytes);
}

typedef enum outcome { REFUSED, OUT_OF_BOUNDS } outcome;

/* The root of the one failure a read of h reports; the caller frees e. */
static const cube_error *failure_root(cube_client *c, const cube_handle *h, cube_error **ret_e)
{
        void *buf = malloc(cube_handle_len(h));
        cube_error *e = cube_read(c, h, buf, cube_handle_len(h));
        const cube_error *r;

        free(buf);
        ck_assert_msg(e != NULL, "the attacker's launch succeeded");
        ck_assert_msg(cube_error_kind_of(e) == CUBE_SERVER_SEVERAL, "not Several: %s",
                      cube_error_message(e));
        r = cube_error_at(e, 0);
        while (cube_error_source(r))
                r = cube_error_source(r);
        *ret_e = e;
        return r;
}

/* The attacker registers source and launches it over its own two buffers
 * (in: read, out: written) with one u32 scalar k, on cubes cubes of units
 * units each; the result is what its read of out says. Returns the root's
 * reason (static). */
static const char *attack_on(const char *socket, const char *source, const char *entry,
                             uint32_t k, uint32_t cubes, uint32_t units, outcome want)
{
        static char reason[1024];
        cube_client *c = test_connect(socket, "attacker");
        uint32_t in[MINE];
        cube_handle bufs[2];
        cube_error *e;

        for (uint32_t i = 0; i < MINE; i++)
                in[i] = i;
        ck_ok(cube_create(c, in, sizeof(in), &bufs[0]));
        ck_ok(cube_empty(c, sizeof(in), &bufs[1]));
        uint64_t kernel = test_kernel(c, source, entry);
        test_launch_u32(c, (cube_launch) {
                .kernel = kernel, .cube_count = { cubes, 1, 1 }, .cube_dim = { units, 1, 1 },
                .buffers = bufs, .n_buffers = 2,
        }, &k, 1);
        const cube_error *root = failure_root(c, &bufs[1], &e);
        if (want == REFUSED) {
                ck_assert_msg(cube_error_is_refusal(e) &&
                              (cube_error_kind_of(root) == CUBE_COMPILATION_VALIDATION ||
                               cube_error_kind_of(root) == CUBE_COMPILATION_GENERIC),
                              "not refused at registration: %s", cube_error_message(e));
        } else {
                ck_assert_msg(cube_error_kind_of(root) == CUBE_SERVER_VALIDATION &&
                              strstr(cube_error_reason(root), "out of bounds") &&
                              strstr(cube_error_reason(root), entry),
                              "not an out-of-bounds failure of '%s': %s", entry,
                              cube_error_message(e));
                ck_assert(!cube_error_is_device_poisoned(e));
        }
        snprintf(reason, sizeof(reason), "%s", cube_error_reason(root));
        cube_error_free(e);
        cube_disconnect(c);
        return reason;
}

/* The attack on one unit. */
static const char *attack(const char *socket, const char *source, const char *entry, uint32_t k,
                          outcome want)
{
        return attack_on(socket, source, entry, k, 1, 1, want);
}

static void expect(const char *source, const char *entry, uint32_t k, outcome want)
{
        victim v;

        victim_start(&v, D.socket);
        (void) attack(D.socket, source, entry, k, want);
        victim_intact(&v, D.socket);
}

/* ---------------------------------------------------------------------------
 * Indexing and pointers
 * ------------------------------------------------------------------------- */

START_TEST(writes_below_a_binding_land_nowhere)
{
        static const char source[] =
                "KERNEL void below(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                "{\n"
                "        for (uint32_t i = 1; i <= k; i++)\n"
                "                out[-(int64_t) i] = 0xbad0bad0u;\n"
                "}\n";
        victim v;

        victim_start(&v, D.socket);
        const char *why = attack(D.socket, source, "below", 1u << 20, OUT_OF_BOUNDS);
        /* The root names the kernel, the parameter, the index and the length. */
        ck_assert_msg(strstr(why, "wrote") && strstr(why, "parameter 'out'") &&
                      strstr(why, "index 18446744073709551615") && strstr(why, "of 4096 elements") &&
                      strstr(why, "below.c:4:"), "%s", why);
        victim_intact(&v, D.socket);
}
END_TEST

/* Where units run one after another in a loop over their cube (the CPU
 * device, for a kernel without barriers or shared memory), each access
 * keeps the furthest index it saw out of bounds and the cube reports once
 * after its units: the report names the furthest, whichever unit ran first. */
START_TEST(a_cube_reports_the_furthest_index_its_access_went_out_of_bounds)
{
        static const char source[] =
                "KERNEL void spill(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                "{\n"
                "        uint64_t i = ABSOLUTE_POS;\n"
                "        out[i + k] = in[i];\n"
                "}\n";
        victim v;

        victim_start(&v, D.socket);
        const char *why = attack_on(D.socket, source, "spill", 100, 16, 256, OUT_OF_BOUNDS);
        ck_assert_msg(strstr(why, "wrote") && strstr(why, "parameter 'out'") &&
                      strstr(why, "index 4195 of 4096 elements") && strstr(why, "spill.c:4:"),
                      "%s", why);
        victim_intact(&v, D.socket);
}
END_TEST

/* Such a cube keeps 32 bits of an index: one further out is reported as
 * the furthest it keeps, and says so. */
START_TEST(an_index_beyond_what_a_cube_keeps_is_reported_as_further_out)
{
        static const char source[] =
                "KERNEL void far(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                "{\n"
                "        if (ABSOLUTE_POS == 0)\n"
                "                out[(uint64_t) k << 32] = in[0];\n"
                "}\n";
        victim v;

        victim_start(&v, D.socket);
        const char *why = attack_on(D.socket, source, "far", 1, 16, 256, OUT_OF_BOUNDS);
        ck_assert_msg(strstr(why, "index 2147483647 or further out of 4096 elements"), "%s",
                      why);
        victim_intact(&v, D.socket);
}
END_TEST

/* Sixty-four loads the cube proves in range, the most an entry's test holds. */
#define IN0_1 "        s += in[0];\n"
#define IN0_4 IN0_1 IN0_1 IN0_1 IN0_1
#define IN0_16 IN0_4 IN0_4 IN0_4 IN0_4
#define IN0_64 IN0_16 IN0_16 IN0_16 IN0_16

/* A cube runs an access unguarded only where it proved, before its units
 * ran, that every index the access can take lies in its binding. Each of
 * these proofs would be wrong if the bound believed the text: a 32-bit
 * index that wrapped before a division, a variable a macro changes, a
 * conditional whose other arm leaves, a negative index, the last cube of
 * a launch wider than its buffers, a shared array smaller than the cube,
 * a buffer parameter a macro moves, an access past the sites an entry's
 * test holds. Each must still fail its launch and touch nothing outside. */
START_TEST(indexes_a_cube_cannot_bound_keep_their_guards)
{
        static const struct {
                const char *source;
                uint32_t k, cubes, units;
                const char *index;
        } cases[] = {
                { "KERNEL void bnd(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                  "{\n"
                  "        out[(UNIT_POS - 1u) / 4096u] = 0xbad4bad4u;\n"
                  "}\n", 0, 1, 16, "index 1048575 of 4096" },
                { "#define SET(x, v) x = v\n"
                  "KERNEL void bnd(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                  "{\n"
                  "        uint32_t j = UNIT_POS;\n"
                  "        SET(j, j + k);\n"
                  "        out[j] = 0xbad5bad5u;\n"
                  "}\n", 1u << 20, 1, 16, "of 4096" },
                { "#define BUMP(x) x++\n"
                  "KERNEL void bnd(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                  "{\n"
                  "        uint32_t j = UNIT_POS;\n"
                  "        for (uint32_t r = 0; r < k; r++)\n"
                  "                BUMP(j);\n"
                  "        out[j] = in[j];\n"
                  "}\n", 4096, 1, 16, "of 4096" },
                { "KERNEL void bnd(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                  "{\n"
                  "        out[UNIT_POS < 8 ? UNIT_POS : UNIT_POS + k] = 0xbad6bad6u;\n"
                  "}\n", 1u << 20, 1, 16, "of 4096" },
                { "KERNEL void bnd(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                  "{\n"
                  "        int32_t j = (int32_t) UNIT_POS - (int32_t) k;\n"
                  "        out[UNIT_POS] = in[j];\n"
                  "}\n", 1, 1, 16, "index 18446744073709551615 of 4096" },
                { "KERNEL void bnd(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                  "{\n"
                  "        out[ABSOLUTE_POS] = 0xbad7bad7u;\n"
                  "}\n", 0, 17, 256, "index 4351 of 4096" },
                { "KERNEL void bnd(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                  "{\n"
                  "        SHARED uint32_t s[16];\n"
                  "        s[UNIT_POS] = 0xbad8bad8u;\n"
                  "        sync_cube();\n"
                  "        out[UNIT_POS] = s[UNIT_POS % 16u];\n"
                  "}\n", 0, 1, 32, "array 's'" },
                /* A buffer parameter a macro moves is a moved pointer, whose
                 * accesses are checked against the bindings themselves. */
                { "#define SET(x, v) x = v\n"
                  "KERNEL void bnd(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                  "{\n"
                  "        SET(out, out + k);\n"
                  "        out[0] = 0xbad9bad9u;\n"
                  "}\n", 1u << 20, 1, 1, "bnd.c:5:" },
                /* An access past the sites an entry's test holds keeps its
                 * guard, though the cube could bound it and every site
                 * before it is in range. */
                { "KERNEL void bnd(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                  "{\n"
                  "        uint32_t s = 0;\n"
                  IN0_64
                  "        out[UNIT_POS + k] = s;\n"
                  "}\n", 4096 - 15, 1, 16, "index 4096 of 4096" },
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                victim v;

                victim_start(&v, D.socket);
                const char *why = attack_on(D.socket, cases[i].source, "bnd", cases[i].k,
                                            cases[i].cubes, cases[i].units, OUT_OF_BOUNDS);
                ck_assert_msg(strstr(why, cases[i].index), "case %zu: %s", i, why);
                victim_intact(&v, D.socket);
        }
}
END_TEST

START_TEST(reads_past_a_binding_yield_zero_and_fail_the_launch)
{
        static const char source[] =
                "KERNEL void past(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                "{\n"
                "        uint32_t found = 0;\n"
                "        for (uint32_t i = 0; i < k; i++)\n"
                "                found |= in[4096 + i] >> 8 == 0x5ec2e7u;\n"
                "        out[0] = found;\n"
                "        out[4096 + k] = 1;\n"
                "}\n";

        expect(source, "past", 1u << 20, OUT_OF_BOUNDS);
}
END_TEST

START_TEST(pointer_arithmetic_cannot_leave_the_bindings)
{
        static const char source[] =
                "KERNEL void walk(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                "{\n"
                "        uint32_t *p = out - k;\n"
                "        for (uint32_t i = 0; i < 2 * k; i++)\n"
                "                p[i] = 0xbad1bad1u;\n"
                "        GLOBAL uint32_t *q = &out[0] + 4096 + 16;\n"
                "        *q = 7;\n"
                "}\n";

        expect(source, "walk", 1u << 20, OUT_OF_BOUNDS);
}
END_TEST

START_TEST(integer_pointer_casts_are_refused)
{
        static const char *const sources[] = {
                "KERNEL void cast(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                "{\n"
                "        out[0] = *(GLOBAL const uint32_t *) ((uint64_t) in - k);\n"
                "}\n",
                "KERNEL void cast(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                "{\n"
                "        uint64_t a = (uint64_t) out;\n"
                "        out[0] = (uint32_t) a + k;\n"
                "}\n",
        };

        for (size_t i = 0; i < sizeof(sources) / sizeof(sources[0]); i++)
                expect(sources[i], "cast", 4096, REFUSED);
}
END_TEST

START_TEST(punning_and_unions_are_refused)
{
        static const char *const sources[] = {
                "KERNEL void pun(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                "{\n"
                "        GLOBAL uint64_t *w = (GLOBAL uint64_t *) out;\n"
                "        w[-(int64_t) k] = 0;\n"
                "}\n",
                "union u { GLOBAL uint32_t *p; uint64_t a; };\n"
                "KERNEL void pun(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                "{\n"
                "        union u x;\n"
                "        x.p = out;\n"
                "        x.a -= k;\n"
                "        x.p[0] = 1;\n"
                "}\n",
                "static void h(GLOBAL uint32_t *p) { p[0] = 1; }\n"
                "KERNEL void pun(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                "{\n"
                "        void (*f)(GLOBAL uint32_t *) = h;\n"
                "        f(out - k);\n"
                "}\n",
        };

        for (size_t i = 0; i < sizeof(sources) / sizeof(sources[0]); i++)
                expect(sources[i], "pun", 4096, REFUSED);
}
END_TEST

START_TEST(the_translators_own_names_are_refused)
{
        static const char *const sources[] = {
                "KERNEL void own(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                "{\n"
                "        out[0] = cube__m0[k];\n"
                "}\n",
                "KERNEL void own(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                "{\n"
                "        out[0] = (uint32_t) cube__arena[k];\n"
                "}\n",
                "#define X cube__ctx\n"
                "KERNEL void own(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                "{\n"
                "        out[0] = k;\n"
                "}\n",
        };

        for (size_t i = 0; i < sizeof(sources) / sizeof(sources[0]); i++)
                expect(sources[i], "own", 4096, REFUSED);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Arrays, builtins, atomics
 * ------------------------------------------------------------------------- */

START_TEST(shared_and_private_arrays_are_bounded)
{
        static const char *const sources[] = {
                "KERNEL void arr(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                "{\n"
                "        SHARED uint32_t s[16];\n"
                "        s[UNIT_POS + k] = 0xbad2bad2u;\n"
                "        sync_cube();\n"
                "        out[0] = s[k + 1];\n"
                "}\n",
                "KERNEL void arr(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                "{\n"
                "        uint32_t t[4] = { 1, 2, 3, 4 };\n"
                "        t[k] = 0xbad3bad3u;\n"
                "        out[0] = t[k - 1];\n"
                "}\n",
        };

        for (size_t i = 0; i < sizeof(sources) / sizeof(sources[0]); i++)
                expect(sources[i], "arr", 1u << 20, OUT_OF_BOUNDS);
}
END_TEST

START_TEST(vector_builtins_and_vector_pointers_are_refused)
{
        static const char *const sources[] = {
                "KERNEL void vec(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                "{\n"
                "        uint32_t x = vload4(0, in - k);\n"
                "        out[0] = x;\n"
                "}\n",
                "KERNEL void vec(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                "{\n"
                "        vstore4(0, 0, out - k);\n"
                "}\n",
                "KERNEL void vec(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                "{\n"
                "        out[0] = ((GLOBAL const uint4 *) in)[-(int64_t) k].x;\n"
                "}\n",
        };

        for (size_t i = 0; i < sizeof(sources) / sizeof(sources[0]); i++)
                expect(sources[i], "vec", 4096, REFUSED);
}
END_TEST

START_TEST(atomics_on_raw_addresses_are_refused)
{
        static const char source[] =
                "KERNEL void atom(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                "{\n"
                "        atomic_add(&out[0] - k, 1u);\n"
                "}\n";

        expect(source, "atom", 4096, REFUSED);
}
END_TEST

START_TEST(one_devices_spellings_are_refused_with_the_dialects)
{
        static const struct { const char *source, *instead; } cases[] = {
                { "KERNEL void spell(__global const uint32_t *in, uint32_t *out)\n"
                  "{\n        out[0] = in[0];\n}\n", "GLOBAL" },
                { "KERNEL void spell(const uint32_t *in, uint32_t *out)\n"
                  "{\n        out[get_global_id(0)] = in[0];\n}\n", "ABSOLUTE_POS" },
                { "KERNEL void spell(const uint32_t *in, uint32_t *out)\n"
                  "{\n        out[threadIdx.x] = in[0];\n}\n", "UNIT_POS" },
        };
        cube_client *c = test_connect(D.socket, "spell");

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                const char *why = attack(D.socket, cases[i].source, "spell", 0, REFUSED);
                ck_assert_msg(strstr(why, cases[i].instead) && strstr(why, "spell.c:"),
                              "case %zu does not name %s: %s", i, cases[i].instead, why);
        }
        cube_disconnect(c);
}
END_TEST

/* The compiler's own names mean one thing where the front end reads the
 * source and another where the kernel runs: a bound read from one would
 * let the index that runs past its binding unguarded (out[201112 -
 * __STDC_VERSION__] is out[0] to the parse and out[11211] on PoCL). */
START_TEST(the_compilers_own_names_are_refused)
{
        static const struct { const char *source, *name; } cases[] = {
                { "KERNEL void spell(const uint32_t *in, uint32_t *out)\n"
                  "{\n        out[201112u - __STDC_VERSION__] = in[0];\n}\n", "__STDC_VERSION__" },
                { "KERNEL void spell(const uint32_t *in, uint32_t *out)\n"
                  "{\n        out[sizeof(__func__) - 6u] = in[0];\n}\n", "__func__" },
                { "#define DIGITS __LDBL_MANT_DIG__\n"
                  "KERNEL void spell(const uint32_t *in, uint32_t *out)\n"
                  "{\n        out[DIGITS - 64u] = in[0];\n}\n", "__LDBL_MANT_DIG__" },
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                const char *why = attack(D.socket, cases[i].source, "spell", 0, REFUSED);
                ck_assert_msg(strstr(why, cases[i].name) && strstr(why, "spell.c:"),
                              "case %zu does not name %s: %s", i, cases[i].name, why);
        }
}
END_TEST

START_TEST(the_fp64_pragma_is_accepted)
{
        static const char source[] =
                "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
                "KERNEL void dbl(const double *in, double *out)\n"
                "{\n"
                "        out[ABSOLUTE_POS] = in[ABSOLUTE_POS] * 2.0;\n"
                "}\n";
        cube_client *c = test_connect(D.socket, "dbl");
        double in[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, want[8];
        cube_handle bufs[2];

        for (int i = 0; i < 8; i++)
                want[i] = in[i] * 2.0;
        ck_ok(cube_create(c, in, sizeof(in), &bufs[0]));
        ck_ok(cube_empty(c, sizeof(in), &bufs[1]));
        ck_ok(cube_launch_kernel(c, &(cube_launch) {
                .kernel = test_kernel(c, source, "dbl"), .cube_count = { 1, 1, 1 },
                .cube_dim = { 8, 1, 1 }, .buffers = bufs, .n_buffers = 2,
        }));
        test_expect_bytes(c, &bufs[1], want, sizeof(want));
        cube_disconnect(c);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Read-only imports, info words, device memory
 * ------------------------------------------------------------------------- */

START_TEST(a_read_only_import_stays_read_only)
{
        static const char cast_source[] =
                "KERNEL void ro(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                "{\n"
                "        ((GLOBAL uint32_t *) in)[k] = 0xbad4bad4u;\n"
                "}\n";
        static const char write_source[] =
                "KERNEL void rw(uint32_t *dst, uint32_t *out)\n"
                "{\n"
                "        dst[0] = 0xbad5bad5u;\n"
                "        out[0] = 1;\n"
                "}\n";
        victim v;
        char token[33];
        cube_handle bufs[2];
        cube_error *e;

        victim_start(&v, D.socket);
        (void) attack(D.socket, cast_source, "ro", 0, REFUSED);

        /* Imported read-only, bound to a parameter the kernel writes: the
         * launch is refused before anything runs. */
        ck_ok(cube_export(v.c, &v.h, token));
        cube_client *c = test_connect(D.socket, "importer");
        ck_ok(cube_import(c, token, true, &bufs[0]));
        ck_ok(cube_empty(c, 64, &bufs[1]));
        ck_ok(cube_launch_kernel(c, &(cube_launch) {
                .kernel = test_kernel(c, write_source, "rw"), .cube_count = { 1, 1, 1 },
                .cube_dim = { 1, 1, 1 }, .buffers = bufs, .n_buffers = 2,
        }));
        const cube_error *root = failure_root(c, &bufs[1], &e);
        ck_assert_msg(cube_error_kind_of(root) == CUBE_SERVER_VALIDATION &&
                      strstr(cube_error_reason(root), "read-only import") &&
                      strstr(cube_error_reason(root), "'dst'"), "%s", cube_error_message(e));
        cube_error_free(e);
        cube_disconnect(c);
        victim_intact(&v, D.socket);
}
END_TEST

START_TEST(info_words_past_the_launchs_own_read_as_zero_and_fail_it)
{
        static const char *const sources[] = {
                "KERNEL void words(const uint32_t *in, uint32_t *out, INFO)\n"
                "{\n"
                "        out[0] = SCALAR(uint32_t, 0, 4096);\n"
                "}\n",
                "KERNEL void words(const uint32_t *in, uint32_t *out, INFO)\n"
                "{\n"
                "        out[0] = META_U32(100000) | DYN_U32(7);\n"
                "}\n",
        };

        for (size_t i = 0; i < sizeof(sources) / sizeof(sources[0]); i++)
                expect(sources[i], "words", 0, OUT_OF_BOUNDS);
}
END_TEST

START_TEST(a_store_far_outside_device_memory_fails_only_its_launch)
{
        static const char source[] =
                "KERNEL void far(const uint32_t *in, uint32_t *out, uint32_t k)\n"
                "{\n"
                "        out[(uint64_t) 1 << 40] = k;\n"
                "        out[0] = in[0];\n"
                "}\n";
        victim v;

        victim_start(&v, D.socket);
        (void) attack(D.socket, source, "far", 1, OUT_OF_BOUNDS);
        /* The device is whole: the victim launches and reads as before. */
        uint64_t k = test_kernel(v.c, test_affine_source, "affine");
        cube_error *e = test_affine_try(v.c, k, 1000);
        ck_assert_msg(e == NULL, "the victim's launch failed: %s", e ? cube_error_message(e) : "");
        victim_intact(&v, D.socket);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Common idioms keep working checked
 * ------------------------------------------------------------------------- */

START_TEST(row_pointers_helpers_and_moving_pointers_run_checked)
{
        static const char source[] =
                "static float dot(const float *row, const float *col, uint32_t n)\n"
                "{\n"
                "        float s = 0;\n"
                "        for (uint32_t k = 0; k < n; k++, col += n)\n"
                "                s += row[k] * *col;\n"
                "        return s;\n"
                "}\n"
                "\n"
                "KERNEL void gemm(const float *a, const float *b, float *c, uint32_t n, float alpha)\n"
                "{\n"
                "        uint32_t i = ABSOLUTE_POS_Y, j = ABSOLUTE_POS_X;\n"
                "        const float *row = a + i * n;\n"
                "\n"
                "        if (i < n && j < n)\n"
                "                c[i * n + j] = alpha * dot(row, b + j, n);\n"
                "}\n";
        enum { M = 24 };
        float a[M * M], b[M * M], want[M * M], got[M * M];
        cube_client *c = test_connect(D.socket, "gemm");
        cube_handle bufs[3];
        cube_info *info = cube_info_new();

        for (int i = 0; i < M * M; i++) {
                a[i] = (float) (i % 7) - 3.0f;
                b[i] = (float) (i % 5) * 0.5f;
        }
        for (int i = 0; i < M; i++)
                for (int j = 0; j < M; j++) {
                        float s = 0;
                        for (int k = 0; k < M; k++)
                                s += a[i * M + k] * b[k * M + j];
                        want[i * M + j] = 2.0f * s;
                }
        ck_ok(cube_create(c, a, sizeof(a), &bufs[0]));
        ck_ok(cube_create(c, b, sizeof(b), &bufs[1]));
        ck_ok(cube_empty(c, sizeof(a), &bufs[2]));
        cube_info_u32(info, M);
        cube_info_f32(info, 2.0f);
        ck_ok(cube_launch_kernel(c, &(cube_launch) {
                .kernel = test_kernel(c, source, "gemm"), .cube_count = { 3, 3, 1 },
                .cube_dim = { 8, 8, 1 }, .buffers = bufs, .n_buffers = 3, .info = info,
        }));
        cube_info_free(info);
        ck_ok(cube_read(c, &bufs[2], got, sizeof(got)));
        for (int i = 0; i < M * M; i++)
                ck_assert_msg(got[i] > want[i] - 1e-3f && got[i] < want[i] + 1e-3f,
                              "c[%d] = %g, not %g", i, (double) got[i], (double) want[i]);
        cube_disconnect(c);
}
END_TEST

START_TEST(scalars_are_checked_against_the_signature)
{
        static const char source[] =
                "KERNEL void saxpy(const float *x, float *y, float a, uint32_t n)\n"
                "{\n"
                "        uint64_t i = ABSOLUTE_POS;\n"
                "        if (i < n)\n"
                "                y[i] = a * x[i] + y[i];\n"
                "}\n";
        cube_client *c = test_connect(D.socket, "saxpy");
        float x[64], y[64], want[64];
        cube_handle bufs[2];
        cube_error *e;

        for (int i = 0; i < 64; i++) {
                x[i] = (float) i;
                y[i] = 1.0f;
                want[i] = 3.0f * (float) i + 1.0f;
        }
        uint64_t k = test_kernel(c, source, "saxpy");
        ck_ok(cube_create(c, x, sizeof(x), &bufs[0]));
        ck_ok(cube_create(c, y, sizeof(y), &bufs[1]));
        cube_info *info = cube_info_new();
        cube_info_u32(info, 64);
        cube_info_f32(info, 3.0f);
        cube_launch l = { .kernel = k, .cube_count = { 1, 1, 1 }, .cube_dim = { 64, 1, 1 },
                          .buffers = bufs, .n_buffers = 2, .info = info };
        ck_ok(cube_launch_kernel(c, &l));
        cube_info_free(info);
        test_expect_bytes(c, &bufs[1], want, sizeof(want));

        /* The f32 missing: refused, naming the parameter. */
        info = cube_info_new();
        cube_info_u32(info, 64);
        l.info = info;
        ck_ok(cube_launch_kernel(c, &l));
        cube_info_free(info);
        const cube_error *root = failure_root(c, &bufs[1], &e);
        ck_assert_msg(cube_error_kind_of(root) == CUBE_SERVER_VALIDATION &&
                      strstr(cube_error_reason(root), "'a'") &&
                      strstr(cube_error_reason(root), "f32"), "%s", cube_error_message(e));
        cube_error_free(e);

        /* A u64 where a u32 goes: refused too. */
        ck_ok(cube_write(c, &bufs[1], y, sizeof(y)));
        info = cube_info_new();
        cube_info_u64(info, 64);
        cube_info_f32(info, 3.0f);
        l.info = info;
        ck_ok(cube_launch_kernel(c, &l));
        cube_info_free(info);
        root = failure_root(c, &bufs[1], &e);
        ck_assert_msg(cube_error_kind_of(root) == CUBE_SERVER_VALIDATION &&
                      strstr(cube_error_reason(root), "'n'"), "%s", cube_error_message(e));
        cube_error_free(e);
        cube_disconnect(c);
}
END_TEST

/* ---------------------------------------------------------------------------
 * check_mode
 * ------------------------------------------------------------------------- */

static const char wild_source[] =
        "KERNEL void wild(const uint32_t *in, uint32_t *out, uint32_t k)\n"
        "{\n"
        "        out[k] = 1;\n"
        "        out[0] = 2;\n"
        "}\n";

/* An unchecked launch of wild (k past out) by c; what a read of out says. */
static cube_error *unchecked_launch(cube_client *c, uint32_t k)
{
        uint32_t in[MINE] = { 0 };
        cube_handle bufs[2];
        cube_error *e;

        ck_ok(cube_create(c, in, sizeof(in), &bufs[0]));
        ck_ok(cube_empty(c, sizeof(in), &bufs[1]));
        test_launch_u32(c, (cube_launch) {
                .kernel = test_kernel(c, wild_source, "wild"), .cube_count = { 1, 1, 1 },
                .cube_dim = { 1, 1, 1 }, .buffers = bufs, .n_buffers = 2,
                .mode = CUBE_LAUNCH_UNCHECKED,
        }, &k, 1);
        void *buf = malloc(sizeof(in));
        e = cube_read(c, &bufs[1], buf, sizeof(in));
        free(buf);
        return e;
}

static cube_error *unchecked_attack(const char *socket, uint32_t k)
{
        cube_client *c = test_connect(socket, "unchecked");
        cube_error *e = unchecked_launch(c, k);

        cube_disconnect(c);
        return e;
}

static const cube_error *root_of(const cube_error *e)
{
        const cube_error *r = cube_error_at(e, 0);
        while (cube_error_source(r))
                r = cube_error_source(r);
        return r;
}

START_TEST(an_unchecked_launch_is_refused_to_users_not_listed)
{
        static const char *const args[] = { "--unchecked-uids", "65534", NULL };
        test_daemon d;

        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        cube_client *c = test_connect(d.socket, "mode");
        ck_assert_str_eq(cube_client_check_mode(c), "auto");
        cube_disconnect(c);
        cube_error *e = unchecked_attack(d.socket, 8);
        ck_assert_ptr_nonnull(e);
        ck_assert_msg(cube_error_kind_of(root_of(e)) == CUBE_SERVER_VALIDATION &&
                      strstr(cube_error_reason(root_of(e)), "unchecked-uids"), "%s",
                      cube_error_message(e));
        cube_error_free(e);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
}
END_TEST

START_TEST(enforce_refuses_unchecked_launches_even_to_listed_users)
{
        static const char *const args[] = { "--check-mode", "enforce", NULL };
        test_daemon d;

        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        cube_client *c = test_connect(d.socket, "mode");
        ck_assert_str_eq(cube_client_check_mode(c), "enforce");
        cube_disconnect(c);
        /* cubectl status says it too. */
        char cmd[256], line[512];
        bool seen = false;
        snprintf(cmd, sizeof(cmd), "%s --socket %s status", getenv("CUBECTL_BIN"), d.socket);
        FILE *p = popen(cmd, "r");
        ck_assert_ptr_nonnull(p);
        while (fgets(line, sizeof(line), p))
                seen |= strstr(line, "checks:") && strstr(line, "enforce");
        ck_assert_int_eq(pclose(p), 0);
        ck_assert_msg(seen, "cubectl status does not say the check mode");
        cube_error *e = unchecked_attack(d.socket, 8);
        ck_assert_ptr_nonnull(e);
        ck_assert_msg(cube_error_kind_of(root_of(e)) == CUBE_SERVER_VALIDATION &&
                      strstr(cube_error_reason(root_of(e)), "check-mode enforce"), "%s",
                      cube_error_message(e));
        cube_error_free(e);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
}
END_TEST

START_TEST(validate_runs_unchecked_launches_checked)
{
        static const char *const args[] = { "--check-mode", "validate", NULL };
        test_daemon d;

        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        cube_error *e = unchecked_attack(d.socket, 1u << 30);
        ck_assert_ptr_nonnull(e);
        ck_assert_msg(cube_error_kind_of(root_of(e)) == CUBE_SERVER_VALIDATION &&
                      strstr(cube_error_reason(root_of(e)), "out of bounds"), "%s",
                      cube_error_message(e));
        cube_error_free(e);
        ck_assert(!status_of(d.socket).poisoned);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
}
END_TEST

START_TEST(a_listed_user_runs_unchecked_under_auto)
{
        /* In bounds, so that the unchecked run is seen to run, and to leave
         * no out-of-bounds record: it has no guards. */
        cube_client *c = test_connect(D.socket, "unchecked");
        cube_error *e = unchecked_launch(c, 5);

        ck_assert_msg(e == NULL, "%s", e ? cube_error_message(e) : "");
        /* Unchecked is an entry of its own in the kernel cache, beside the
         * checked one the registration made. */
        cube_kernel_info *ks;
        size_t n, wild = 0;
        ck_ok(cube_daemon_kernels(c, &ks, &n));
        for (size_t i = 0; i < n; i++)
                wild += strcmp(ks[i].entry, "wild") == 0;
        free(ks);
        ck_assert_uint_eq(wild, 2);
        cube_disconnect(c);
}
END_TEST

static Suite *isolation_suite(void)
{
        Suite *s = suite_create("isolation");
        TCase *hostile = tcase_create("hostile");
        TCase *idioms = tcase_create("idioms");
        TCase *modes = tcase_create("check_mode");

        tcase_add_checked_fixture(hostile, test_start_default, test_stop_clean);
        tcase_set_timeout(hostile, 120);
        tcase_add_test(hostile, writes_below_a_binding_land_nowhere);
        tcase_add_test(hostile, reads_past_a_binding_yield_zero_and_fail_the_launch);
        tcase_add_test_needing(hostile, a_cube_reports_the_furthest_index_its_access_went_out_of_bounds,
                               TEST_NEEDS_CPU_DEVICE);
        tcase_add_test_needing(hostile, an_index_beyond_what_a_cube_keeps_is_reported_as_further_out,
                               TEST_NEEDS_CPU_DEVICE);
        tcase_add_test(hostile, indexes_a_cube_cannot_bound_keep_their_guards);
        tcase_add_test(hostile, pointer_arithmetic_cannot_leave_the_bindings);
        tcase_add_test(hostile, integer_pointer_casts_are_refused);
        tcase_add_test(hostile, punning_and_unions_are_refused);
        tcase_add_test(hostile, the_translators_own_names_are_refused);
        tcase_add_test(hostile, shared_and_private_arrays_are_bounded);
        tcase_add_test(hostile, vector_builtins_and_vector_pointers_are_refused);
        tcase_add_test(hostile, atomics_on_raw_addresses_are_refused);
        tcase_add_test(hostile, one_devices_spellings_are_refused_with_the_dialects);
        tcase_add_test(hostile, the_compilers_own_names_are_refused);
        tcase_add_test(hostile, a_read_only_import_stays_read_only);
        tcase_add_test(hostile, info_words_past_the_launchs_own_read_as_zero_and_fail_it);
        tcase_add_test(hostile, a_store_far_outside_device_memory_fails_only_its_launch);
        suite_add_tcase(s, hostile);

        tcase_add_checked_fixture(idioms, test_start_default, test_stop_clean);
        tcase_set_timeout(idioms, 120);
        tcase_add_test(idioms, the_fp64_pragma_is_accepted);
        tcase_add_test(idioms, row_pointers_helpers_and_moving_pointers_run_checked);
        tcase_add_test(idioms, scalars_are_checked_against_the_signature);
        suite_add_tcase(s, idioms);

        tcase_set_timeout(modes, 120);
        tcase_add_test(modes, an_unchecked_launch_is_refused_to_users_not_listed);
        tcase_add_test(modes, enforce_refuses_unchecked_launches_even_to_listed_users);
        tcase_add_test(modes, validate_runs_unchecked_launches_checked);
        tcase_add_checked_fixture(modes, test_start_default, test_stop_clean);
        tcase_add_test(modes, a_listed_user_runs_unchecked_under_auto);
        suite_add_tcase(s, modes);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(isolation_suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

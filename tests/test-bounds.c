/*
 * test-bounds.c - an entry point's test of every bound, as the front end
 * writes it for the host and the host evaluates it over a launch's whole
 * grid (backends/frontend/bounds.c), and the bare form that a launch it
 * holds for may run. The front end runs here on real sources; the launches
 * are described, not run: test-device.c runs them.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"

/* The front end's answer for source's entry, which must be checked. */
static cube__fe_facts *facts_of(const char *source, const char *entry, char **ret_checked)
{
        char *checked = NULL, *facts = NULL, *error = NULL;
        cube__fe_status st = cube__frontend_run(source, entry, &checked, &facts, &error);

        ck_assert_msg(st == CUBE__FE_OK, "the front end refused '%s': %s", entry,
                      error ? error : "(nothing said)");
        cube__fe_facts *f = cube__fe_facts_parse(facts, entry);
        ck_assert_ptr_nonnull(f);
        free(facts);
        free(error);
        if (ret_checked)
                *ret_checked = checked;
        else
                free(checked);
        return f;
}

/* A launch of cubes of dim, count of them, whose info words are info
 * (meta words from meta on), binding bindings. */
typedef struct launch {
        uint32_t count[3], dim[3];
        uint64_t info[8];
        uint32_t n_info, meta;
        uint64_t bindings[4];
        uint32_t n_bindings;
} launch;

static bool holds(const cube__fe_facts *f, const launch *l)
{
        cube__fe_grid g = {
                .info = l->info, .n_info = l->n_info, .meta = l->meta, .dyn = l->n_info,
                .bindings = l->bindings, .n_bindings = l->n_bindings,
        };

        memcpy(g.count, l->count, sizeof(g.count));
        memcpy(g.dim, l->dim, sizeof(g.dim));
        return cube__fe_bounds_hold(f->bounds, &g);
}

static const char reduce_source[] =
        "KERNEL void reduce(const float *in, float *partial, INFO)\n"
        "{\n"
        "        SHARED float part[256];\n"
        "        uint32_t n = SCALAR(uint32_t, 0, 0);\n"
        "        uint32_t t = UNIT_POS;\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "        part[t] = i < n ? in[i] : 0.0f;\n"
        "        sync_cube();\n"
        "        for (uint32_t s = CUBE_DIM / 2; s > 0; s /= 2) {\n"
        "                if (t < s)\n"
        "                        part[t] += part[t + s];\n"
        "                sync_cube();\n"
        "        }\n"
        "        if (t == 0)\n"
        "                partial[CUBE_POS] = part[0];\n"
        "}\n";

/* in[ABSOLUTE_POS], part[UNIT_POS] and partial[CUBE_POS] are proved for a
 * grid of whole cubes over its bindings, and for no launch that reaches
 * past one of them, or writes a binding it may not. */
START_TEST(a_reduction_is_proved_in_bounds_for_its_grid_and_not_past_it)
{
        cube__fe_facts *f = facts_of(reduce_source, "reduce", NULL);
        launch l = {
                .count = { 64, 1, 1 }, .dim = { 256, 1, 1 }, .info = { 16384 }, .n_info = 1,
                .meta = 1, .bindings = { 16384 * 4, 64 * 4 }, .n_bindings = 2,
        };

        ck_assert_ptr_nonnull(f->bounds);
        ck_assert(holds(f, &l));
        l.bindings[0] -= 4;             /* the last unit's in[i] */
        ck_assert(!holds(f, &l));
        l.bindings[0] += 4;
        l.bindings[1] -= 4;             /* the last cube's partial[CUBE_POS] */
        ck_assert(!holds(f, &l));
        l.bindings[1] += 4;
        l.bindings[1] |= CUBE__CHECK_READ_ONLY;
        ck_assert(!holds(f, &l));
        l.bindings[1] &= ~CUBE__CHECK_READ_ONLY;
        l.dim[0] = 512;                 /* part[t] holds 256 */
        l.count[0] = 32;
        ck_assert(!holds(f, &l));
        l.dim[0] = 128;                 /* smaller cubes: all in */
        l.count[0] = 128;
        l.bindings[1] = 128 * 4;
        ck_assert(holds(f, &l));
        l.count[1] = 2;                 /* CUBE_POS reaches 255 */
        ck_assert(!holds(f, &l));
        cube__fe_facts_free(f);
}
END_TEST

static const char matmul_source[] =
        "KERNEL void matmul(const float *a, const float *b, float *c, INFO)\n"
        "{\n"
        "        SHARED float ta[16][16];\n"
        "        SHARED float tb[16][16];\n"
        "        uint32_t m = SCALAR(uint32_t, 0, 0), n = SCALAR(uint32_t, 0, 1);\n"
        "        uint32_t k = SCALAR(uint32_t, 0, 2);\n"
        "        uint32_t tx = UNIT_POS_X, ty = UNIT_POS_Y;\n"
        "        uint32_t row = ABSOLUTE_POS_Y, col = ABSOLUTE_POS_X;\n"
        "        float acc = 0.0f;\n"
        "        for (uint32_t t = 0; t < k; t += 16) {\n"
        "                ta[ty][tx] = row < m && t + tx < k ? a[(size_t) row * k + t + tx] : 0.0f;\n"
        "                tb[ty][tx] = t + ty < k && col < n ? b[(size_t) (t + ty) * n + col] : 0.0f;\n"
        "                sync_cube();\n"
        "                for (uint32_t i = 0; i < 16; i++)\n"
        "                        acc += ta[ty][i] * tb[i][tx];\n"
        "                sync_cube();\n"
        "        }\n"
        "        c[(size_t) row * n + col] = acc;\n"
        "}\n";

/* c's index reads the scalar n from the launch's words, as the cube does:
 * a wider n reaches past c, and a launch whose words hold no n proves
 * nothing. */
START_TEST(a_bound_reads_the_launchs_scalars)
{
        cube__fe_facts *f = facts_of(matmul_source, "matmul", NULL);
        launch l = {
                .count = { 4, 4, 1 }, .dim = { 16, 16, 1 },
                .info = { 64ull | 64ull << 32, 64 }, .n_info = 2, .meta = 2,
                .bindings = { 64 * 64 * 4, 64 * 64 * 4, 64 * 64 * 4 }, .n_bindings = 3,
        };

        ck_assert_ptr_nonnull(f->bounds);
        ck_assert(holds(f, &l));
        l.info[0] = 64ull | 65ull << 32;        /* n = 65 */
        ck_assert(!holds(f, &l));
        l.info[0] = 64ull | 63ull << 32;        /* rows of 63: the last cube's col reaches 63 */
        ck_assert(holds(f, &l));
        l.info[0] = 64ull | 64ull << 32;
        l.meta = 0;                             /* n is outside the scalars' words */
        ck_assert(!holds(f, &l));
        l.meta = 2;
        l.count[1] = 5;                         /* a fifth row of cubes */
        ck_assert(!holds(f, &l));
        cube__fe_facts_free(f);
}
END_TEST

/* The operations a bound follows, each over a grid: the remainder, shifts
 * and masks, a division, either value of a choice (not its condition), the
 * cube's position and count in two dimensions, and a meta word
 * (BUFFER_LEN). */
static const char ops_source[] =
        "KERNEL void ops(uint32_t *out, INFO)\n"
        "{\n"
        "        SHARED uint32_t s[64];\n"
        "        uint32_t t = UNIT_POS;\n"
        "        s[t % 64u] = 1u;\n"
        "        s[(t >> 1) & 31u] = 2u;\n"
        "        s[t / 2u] = 3u;\n"
        "        sync_cube();\n"
        "        out[CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_X] = s[t < 32u ? 1u : 2u];\n"
        "        out[BUFFER_LEN(0) - 1u - CUBE_POS_X] = 0u;\n"
        "}\n";

START_TEST(each_operation_is_followed_over_the_grid)
{
        cube__fe_facts *f = facts_of(ops_source, "ops", NULL);
        launch l = {
                .count = { 8, 4, 1 }, .dim = { 128, 1, 1 }, .info = { 32 }, .n_info = 1,
                .meta = 0, .bindings = { 32 * 4 }, .n_bindings = 1,
        };

        ck_assert_ptr_nonnull(f->bounds);
        ck_assert(holds(f, &l));
        l.dim[0] = 256;                 /* t / 2 reaches 127 */
        ck_assert(!holds(f, &l));
        l.dim[0] = 128;
        l.bindings[0] = 31 * 4;         /* the last cube's out[31] */
        l.info[0] = 31;
        ck_assert(!holds(f, &l));
        l.bindings[0] = 32 * 4;
        l.info[0] = 40;                 /* BUFFER_LEN says more than the binding holds */
        ck_assert(!holds(f, &l));
        l.info[0] = 8;                  /* BUFFER_LEN - 1 - CUBE_POS_X reaches 0 */
        ck_assert(holds(f, &l));
        l.info[0] = 7;                  /* ... and wraps in the last cube */
        ck_assert(!holds(f, &l));
        cube__fe_facts_free(f);
}
END_TEST

/* The text the front end wrote, read as untrusted: every malformed one is
 * no bounds at all (NULL), and a facts line of one leaves the entry's
 * other facts as they were. */
START_TEST(a_bounds_text_that_cannot_be_read_is_no_bounds)
{
        static const char *const bad[] = {
                "", "k1", "k1 k2 add", "inside5", "k1 inside5 k2", "add", "zz",
                "k99999999999999999999 inside5", "u-1 inside5", "scalar3u:0:0 inside4",
                "scalar4u:0 inside4", "k0 inbinding9999:4", "k0 inbinding0:3", "fit1 inside2",
                "k0 fit1, inside2", "pos4 inside2", "unit3 inside2", "k1 inside5x",
                "writable9999", "k1  insideX",
        };
        static const struct { const char *text; bool holds; } good[] = {
                { "k1 inside5", true }, { "k5 inside5", false }, { "k-1 inside5", false },
                { "k2 k3 add inside6", true }, { "k2 k3 add inside5", false },
                { "pos0 inside4", true }, { "pos0 inside3", false },
                { "unit0 dim0 add inside16", true }, { "k0 inbinding0:4", true },
                { "k1 inbinding0:4", false }, { "writable0", true },
                { "k7 k2 rem inside2", true }, { "k-7 k2 rem inside2", false },
                { "k1 k62 shl inside5", false }, { "u1 k3 shl inside9", true },
        };
        uint64_t binding = 4;
        cube__fe_grid g = { .count = { 4, 1, 1 }, .dim = { 8, 1, 1 }, .bindings = &binding,
                            .n_bindings = 1 };

        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                cube__fe_bounds *b = cube__fe_bounds_parse(bad[i], strlen(bad[i]));
                ck_assert_msg(b == NULL, "'%s' was read", bad[i]);
        }
        for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
                cube__fe_bounds *b = cube__fe_bounds_parse(good[i].text, strlen(good[i].text));
                ck_assert_msg(b != NULL, "'%s' was not read", good[i].text);
                ck_assert_msg(cube__fe_bounds_hold(b, &g) == good[i].holds, "'%s': %s",
                              good[i].text, good[i].holds ? "does not hold" : "holds");
                cube__fe_bounds_free(b);
        }
        cube__fe_facts *f = cube__fe_facts_parse("entry e\nbuffer 0 1 const 4 in\n"
                                                 "bounds k1 k2\nsync 0\n", "e");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(f->n_buffers, 1);
        ck_assert_ptr_null(f->bounds);
        cube__fe_facts_free(f);
}
END_TEST

/* The bare form is the entry written again right after itself, under the
 * backend's CUBE__BARE, with its test taken as true; it is not written
 * where the copy could read differently from the first (a preprocessor
 * line in the body) or has nothing to gain (an entry that
 * walks its cube itself, no bound). */
START_TEST(the_bare_form_is_written_only_where_it_is_the_same_code)
{
        static const struct { const char *source, *entry; bool bare; } cases[] = {
                { reduce_source, "reduce", true },
                { "KERNEL void d(uint32_t *out, INFO)\n{\n        sync_cube();\n"
                  "#define AT 0u\n        out[AT] = 1u;\n}\n", "d", false },
                { "KERNEL void l(uint32_t *out, INFO)\n{\n        out[ABSOLUTE_POS] = 1u;\n}\n",
                  "l", false },
                { "KERNEL void u(uint32_t *out, INFO)\n{\n        sync_cube();\n"
                  "        for (uint32_t j = 0; j < 4u; j++)\n                out[j] = 1u;\n}\n",
                  "u", false },
        };

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                char *checked, bare[64];
                cube__fe_facts *f = facts_of(cases[i].source, cases[i].entry, &checked);
                snprintf(bare, sizeof(bare), "CUBE__BARE_NAME(%s)", cases[i].entry);
                ck_assert_msg((strstr(checked, bare) != NULL) == cases[i].bare &&
                              (f->bounds != NULL) == cases[i].bare, "'%s': %s a bare form",
                              cases[i].entry, cases[i].bare ? "without" : "with");
                if (cases[i].bare) {
                        ck_assert_ptr_nonnull(strstr(checked, "#if CUBE__CHECKED && CUBE__BARE\n"
                                                              "#line 1 \"reduce.c\"\n"));
                        ck_assert_ptr_nonnull(strstr(checked, "const int cube__bare = 1;"));
                        ck_assert_ptr_nonnull(strstr(checked, "#endif\n#line 16 \"reduce.c\"\n"));
                }
                free(checked);
                cube__fe_facts_free(f);
        }
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("bounds");
        TCase *tc = tcase_create("bounds");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, a_reduction_is_proved_in_bounds_for_its_grid_and_not_past_it);
        tcase_add_test(tc, a_bound_reads_the_launchs_scalars);
        tcase_add_test(tc, each_operation_is_followed_over_the_grid);
        tcase_add_test(tc, a_bounds_text_that_cannot_be_read_is_no_bounds);
        tcase_add_test(tc, the_bare_form_is_written_only_where_it_is_the_same_code);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(suite());
        int failed;

        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

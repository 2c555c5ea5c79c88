/*
 * test-launch.c - the launch arithmetic: which buffers a launch reads and
 * writes, by the compiled answer, the caller's declaration, or neither; and
 * how a cube count is spread over the device's limits.
 */

#include <check.h>
#include <stdint.h>

#include "launch.h"

#define MAX_RESOURCES 8

/* The part of a launch's arguments the io sets depend on: how many
 * resources it binds and what the caller declared for them. */
typedef struct launch_args {
        size_t n_resources;
        cube_buffer_io declared[MAX_RESOURCES];
        size_t n_declared;
} launch_args;

/* A resource added without a declaration. */
static void with_buffer(launch_args *a)
{
        ck_assert_uint_lt(a->n_resources, MAX_RESOURCES);
        a->n_resources++;
}

static void with_buffers(launch_args *a, size_t n)
{
        for (size_t i = 0; i < n; i++)
                with_buffer(a);
}

/* A resource added with a declaration: earlier undeclared resources are
 * padded with READ_WRITE first, so the declaration lands on its own index. */
static void with_buffer_io(launch_args *a, cube_buffer_io io)
{
        ck_assert_uint_lt(a->n_resources, MAX_RESOURCES);
        while (a->n_declared < a->n_resources)
                a->declared[a->n_declared++] = CUBE_BUFFER_READ_WRITE;
        a->n_resources++;
        a->declared[a->n_declared++] = io;
}

/* The indices of the resources written (or read), in resource order. */
static size_t buffers_written(const launch_args *a, const cube_buffer_io *compiled, size_t n_compiled, size_t ret[])
{
        size_t n = 0;

        for (size_t i = 0; i < a->n_resources; i++)
                if (cube__io_written(compiled, n_compiled, a->declared, a->n_declared, i))
                        ret[n++] = i;
        return n;
}

static size_t buffers_read(const launch_args *a, const cube_buffer_io *compiled, size_t n_compiled, size_t ret[])
{
        size_t n = 0;

        for (size_t i = 0; i < a->n_resources; i++)
                if (cube__io_read(compiled, n_compiled, a->declared, a->n_declared, i))
                        ret[n++] = i;
        return n;
}

static void check_spread(uint32_t mx, uint32_t my, uint32_t mz, uint32_t num_cubes,
                         uint32_t ex, uint32_t ey, uint32_t ez)
{
        const uint32_t max[3] = { mx, my, mz };
        uint32_t actual[3];

        cube__cube_count_spread(max, num_cubes, actual);
        ck_assert_uint_eq(actual[0], ex);
        ck_assert_uint_eq(actual[1], ey);
        ck_assert_uint_eq(actual[2], ez);
}

START_TEST(safe_num_cubes_even) {
        check_spread(32, 32, 32, 2048, 32, 32, 2);
}
END_TEST

START_TEST(safe_num_cubes_odd) {
        check_spread(48, 32, 16, 3177, 25, 32, 4);
}
END_TEST

START_TEST(spread_leaves_a_count_that_fits_alone) {
        check_spread(65535, 65535, 65535, 100, 100, 1, 1);
        check_spread(100, 1, 1, 100, 100, 1, 1);
        check_spread(1, 1, 1, 0, 0, 1, 1);
}
END_TEST

START_TEST(spread_that_needs_z) {
        /* x: 64 -> 32,2 -> 16,4 -> 8,8 -> 4,16; y: 16 -> 8,2 -> 4,4. */
        check_spread(4, 4, 4, 64, 4, 4, 4);
        /* Only x fits after y took the doubling: y spills into z. */
        check_spread(1024, 2, 65535, 1u << 20, 1024, 2, 512);
}
END_TEST

START_TEST(spread_saturates_instead_of_wrapping) {
        /* x halves 32 times down to 1, y doubles to 2^32, then halves into z:
         * z would be 2^32, which does not fit a u32. */
        check_spread(1, 1, 1, UINT32_MAX, 1, 1, UINT32_MAX);
        check_spread(UINT32_MAX, 1, 1, UINT32_MAX, UINT32_MAX, 1, 1);
}
END_TEST

START_TEST(spread_terminates_on_a_zero_maximum) {
        uint32_t max[3] = { 0, 0, 0 };
        uint32_t actual[3];

        cube__cube_count_spread(max, 1000, actual);
        ck_assert_uint_eq(actual[0], 1);
        ck_assert_uint_eq(actual[1], 1);
        ck_assert_uint_ge((uint64_t) actual[0] * actual[1] * actual[2], 1000);
}
END_TEST

START_TEST(io_attr_predicates) {
        ck_assert(cube__io_is_readable(CUBE_BUFFER_READ_ONLY));
        ck_assert(!cube__io_is_writable(CUBE_BUFFER_READ_ONLY));
        ck_assert(!cube__io_is_readable(CUBE_BUFFER_WRITE_ONLY));
        ck_assert(cube__io_is_writable(CUBE_BUFFER_WRITE_ONLY));
        ck_assert(cube__io_is_readable(CUBE_BUFFER_READ_WRITE));
        ck_assert(cube__io_is_writable(CUBE_BUFFER_READ_WRITE));
        ck_assert(!cube__io_is_readable(CUBE_BUFFER_DEAD));
        ck_assert(!cube__io_is_writable(CUBE_BUFFER_DEAD));
}
END_TEST

/* The compiled kernel's answer drives both sets exactly, in resource order. */
START_TEST(buffer_io_drives_the_read_and_write_sets) {
        launch_args args = {};
        size_t written[MAX_RESOURCES], read[MAX_RESOURCES];
        const cube_buffer_io io[] = {
                CUBE_BUFFER_READ_ONLY,
                CUBE_BUFFER_WRITE_ONLY,
                CUBE_BUFFER_READ_WRITE,
                CUBE_BUFFER_DEAD,
        };

        with_buffers(&args, 4);

        ck_assert_uint_eq(buffers_written(&args, io, 4, written), 2);  /* WriteOnly and ReadWrite */
        ck_assert_uint_eq(written[0], 1);
        ck_assert_uint_eq(written[1], 2);

        ck_assert_uint_eq(buffers_read(&args, io, 4, read), 2);  /* ReadOnly and ReadWrite */
        ck_assert_uint_eq(read[0], 0);
        ck_assert_uint_eq(read[1], 2);
}
END_TEST

/* Every fallback over-names: a kernel the compiler kept no answer for, and a
 * resource past what the answer covers, read as both read and written. */
START_TEST(missing_io_reads_as_everything_read_and_written) {
        launch_args args = {};
        size_t idx[MAX_RESOURCES];
        const cube_buffer_io short_io[] = { CUBE_BUFFER_DEAD };

        with_buffers(&args, 2);

        ck_assert_uint_eq(buffers_written(&args, NULL, 0, idx), 2);
        ck_assert_uint_eq(buffers_read(&args, NULL, 0, idx), 2);

        /* The uncovered resource reads as written. */
        ck_assert_uint_eq(buffers_written(&args, short_io, 1, idx), 1);
        ck_assert_uint_eq(buffers_read(&args, short_io, 1, idx), 1);
}
END_TEST

/* The caller's declaration answers when the compiled kernel kept none, and
 * the compiled answer still wins where it exists. */
START_TEST(declared_io_answers_when_the_compiled_kernel_kept_none) {
        launch_args args = {};
        size_t idx[MAX_RESOURCES];
        const cube_buffer_io compiled[] = { CUBE_BUFFER_READ_WRITE };

        with_buffer_io(&args, CUBE_BUFFER_READ_ONLY);
        with_buffer_io(&args, CUBE_BUFFER_READ_ONLY);
        with_buffer_io(&args, CUBE_BUFFER_WRITE_ONLY);

        /* No compiled answer: only the declared output is written. */
        ck_assert_uint_eq(buffers_written(&args, NULL, 0, idx), 1);
        ck_assert_uint_eq(idx[0], 2);
        ck_assert_uint_eq(buffers_read(&args, NULL, 0, idx), 2);

        /* Compiled ReadWrite plus the declared output. */
        ck_assert_uint_eq(buffers_written(&args, compiled, 1, idx), 2);
        ck_assert_uint_eq(idx[0], 0);
        ck_assert_uint_eq(idx[1], 2);
}
END_TEST

/* Declarations stay on the resource they were made for when declared and
 * undeclared resources mix, and the undeclared ones keep the loud fallback. */
START_TEST(an_undeclared_resource_among_declared_ones_over_names) {
        launch_args args = {};
        size_t idx[MAX_RESOURCES];

        with_buffer(&args);
        with_buffer_io(&args, CUBE_BUFFER_READ_ONLY);

        ck_assert_uint_eq(buffers_written(&args, NULL, 0, idx), 1);  /* the undeclared one */
        ck_assert_uint_eq(idx[0], 0);
        ck_assert_uint_eq(buffers_read(&args, NULL, 0, idx), 2);
}
END_TEST

START_TEST(io_attr_falls_back_in_order) {
        const cube_buffer_io compiled[] = { CUBE_BUFFER_DEAD };
        const cube_buffer_io declared[] = { CUBE_BUFFER_WRITE_ONLY, CUBE_BUFFER_READ_ONLY };

        ck_assert_int_eq(cube__io_attr(compiled, 1, declared, 2, 0), CUBE_BUFFER_DEAD);
        ck_assert_int_eq(cube__io_attr(compiled, 1, declared, 2, 1), CUBE_BUFFER_READ_ONLY);
        ck_assert_int_eq(cube__io_attr(compiled, 1, declared, 2, 2), CUBE_BUFFER_UNDECLARED);
        /* An empty compiled answer is no answer at all. */
        ck_assert_int_eq(cube__io_attr(compiled, 0, declared, 2, 0), CUBE_BUFFER_WRITE_ONLY);
        ck_assert_int_eq(cube__io_attr(NULL, 5, NULL, 5, 0), CUBE_BUFFER_UNDECLARED);

        ck_assert(cube__io_written(NULL, 0, NULL, 0, 0));
        ck_assert(cube__io_read(NULL, 0, NULL, 0, 0));
        ck_assert(!cube__io_written(compiled, 1, declared, 2, 0));
        ck_assert(!cube__io_read(compiled, 1, declared, 2, 0));
}
END_TEST

static Suite *launch_suite(void)
{
        Suite *s = suite_create("launch");
        TCase *spread = tcase_create("spread");
        TCase *io = tcase_create("io");

        tcase_add_test(spread, safe_num_cubes_even);
        tcase_add_test(spread, safe_num_cubes_odd);
        tcase_add_test(spread, spread_leaves_a_count_that_fits_alone);
        tcase_add_test(spread, spread_that_needs_z);
        tcase_add_test(spread, spread_saturates_instead_of_wrapping);
        tcase_add_test(spread, spread_terminates_on_a_zero_maximum);
        suite_add_tcase(s, spread);

        tcase_add_test(io, io_attr_predicates);
        tcase_add_test(io, buffer_io_drives_the_read_and_write_sets);
        tcase_add_test(io, missing_io_reads_as_everything_read_and_written);
        tcase_add_test(io, declared_io_answers_when_the_compiled_kernel_kept_none);
        tcase_add_test(io, an_undeclared_resource_among_declared_ones_over_names);
        tcase_add_test(io, io_attr_falls_back_in_order);
        suite_add_tcase(s, io);

        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(launch_suite());
        srunner_run_all(sr, CK_ENV);
        int nf = srunner_ntests_failed(sr);
        srunner_free(sr);
        return nf ? 1 : 0;
}

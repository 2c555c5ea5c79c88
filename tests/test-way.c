/*
 * test-way.c - which way the CPU device runs a kernel's launches of many
 * cubes (backends/cpu/way.c): the trial that times them spread and inline,
 * its verdict, and what sends a verdict back to a trial. A launch's time is
 * given here, so the machine's own noise plays no part.
 */
#include <check.h>
#include <stdlib.h>

#include "way.h"

#define US 1000ull
#define CPUS 2

/* n launches, each in_line or spread, of ns each. */
static void run(cube__way *w, int n, bool in_line, uint64_t ns)
{
        for (int i = 0; i < n; i++)
                cube__way_timed(w, in_line, ns, CPUS);
}

/* The trial: CUBE__WAY_FIRST spread of spread_ns, then CUBE__WAY_SAMPLE
 * each way, taking turns; odd_ns, when set, is the inline sample's first. */
static void trial(cube__way *w, uint64_t spread_ns, uint64_t inline_ns, uint64_t odd_ns)
{
        run(w, CUBE__WAY_FIRST, false, spread_ns);
        ck_assert_int_eq(w->way, WAY_TIMING_BOTH);
        for (int i = 0; i < CUBE__WAY_SAMPLE; i++) {
                ck_assert_int_eq(w->way, WAY_TIMING_BOTH);
                cube__way_timed(w, true, i == 0 && odd_ns ? odd_ns : inline_ns, CPUS);
                cube__way_timed(w, false, spread_ns, CPUS);
        }
}

START_TEST(a_brief_kernel_runs_inline_and_a_slower_inline_one_spread)
{
        cube__way w = { 0 };

        trial(&w, 40 * US, 10 * US, 0);
        ck_assert_int_eq(w.way, WAY_INLINE);

        w = (cube__way) { 0 };
        trial(&w, 20 * US, 50 * US, 0);
        ck_assert_int_eq(w.way, WAY_SPREAD);
}
END_TEST

START_TEST(a_long_kernel_stays_spread_without_a_trial)
{
        cube__way w = { 0 };

        run(&w, CUBE__WAY_FIRST - 1, false, 2000 * US);
        ck_assert_int_eq(w.way, WAY_TIMING_SPREAD);
        run(&w, 1, false, 2000 * US);
        ck_assert_int_eq(w.way, WAY_SPREAD);
}
END_TEST

/* A launch preempted for 5 ms beside 63 of 10 us: a mean of 88 us, more
 * than the spread launches' 40. The verdict is still inline. */
START_TEST(one_preempted_launch_does_not_decide_the_trial)
{
        cube__way w = { 0 };

        trial(&w, 40 * US, 10 * US, 5000 * US);
        ck_assert_int_eq(w.way, WAY_INLINE);

        /* Nor one among the first spread launches, whose mean would say
         * the kernel is too long to try inline. */
        w = (cube__way) { 0 };
        run(&w, 1, false, 20000 * US);
        run(&w, CUBE__WAY_FIRST - 1, false, 40 * US);
        ck_assert_int_eq(w.way, WAY_TIMING_BOTH);
}
END_TEST

/* Spread launches in a batch: the first wakes PoCL's threads (200 us), the
 * seven after it run at once (5 us). Their median, 5 us, is less than an
 * inline launch's 15; their mean, 29 us, is more, and is what they cost. */
START_TEST(a_batch_pays_for_waking_its_threads)
{
        cube__way w = { 0 };

        run(&w, CUBE__WAY_FIRST, false, 40 * US);
        for (int i = 0; i < CUBE__WAY_SAMPLE; i++) {
                cube__way_timed(&w, true, 15 * US, CPUS);
                cube__way_timed(&w, false, i % 8 == 0 ? 200 * US : 5 * US, CPUS);
        }
        ck_assert_int_eq(w.way, WAY_INLINE);
}
END_TEST

START_TEST(slow_inline_launches_in_a_row_send_it_back_to_a_trial)
{
        cube__way w = { 0 };

        trial(&w, 40 * US, 10 * US, 0);
        ck_assert_int_eq(w.way, WAY_INLINE);
        /* A slow launch now and then, between ordinary ones: preemption. */
        for (int i = 0; i < 10; i++) {
                run(&w, 1, true, 5000 * US);
                run(&w, 1, true, 10 * US);
                ck_assert_int_eq(w.way, WAY_INLINE);
        }
        run(&w, CUBE__WAY_SLOW_RUN - 1, true, 5000 * US);
        run(&w, 1, true, 10 * US);
        ck_assert_int_eq(w.way, WAY_INLINE);
        /* The kernel's launches grew: every one slow. */
        run(&w, CUBE__WAY_SLOW_RUN, true, 5000 * US);
        ck_assert_int_eq(w.way, WAY_TIMING_SPREAD);
        ck_assert_uint_eq(w.spread_n, 0);
}
END_TEST

START_TEST(a_verdict_is_tried_again_after_its_launches)
{
        cube__way w = { 0 };

        trial(&w, 40 * US, 10 * US, 0);
        ck_assert_int_eq(w.way, WAY_INLINE);
        run(&w, CUBE__WAY_AGAIN - 1, true, 10 * US);
        ck_assert_int_eq(w.way, WAY_INLINE);
        run(&w, 1, true, 10 * US);
        ck_assert_int_eq(w.way, WAY_TIMING_SPREAD);

        w = (cube__way) { 0 };
        run(&w, CUBE__WAY_FIRST, false, 2000 * US);
        run(&w, CUBE__WAY_AGAIN, false, 2000 * US);
        ck_assert_int_eq(w.way, WAY_TIMING_SPREAD);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("way");
        TCase *tc = tcase_create("way");

        tcase_add_test(tc, a_brief_kernel_runs_inline_and_a_slower_inline_one_spread);
        tcase_add_test(tc, a_long_kernel_stays_spread_without_a_trial);
        tcase_add_test(tc, one_preempted_launch_does_not_decide_the_trial);
        tcase_add_test(tc, a_batch_pays_for_waking_its_threads);
        tcase_add_test(tc, slow_inline_launches_in_a_row_send_it_back_to_a_trial);
        tcase_add_test(tc, a_verdict_is_tried_again_after_its_launches);
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

/*
 * test-spin.c - when a waiting client polls its socket before it sleeps
 * (libclient/spin.c): the rule on CPU sets, the decision against a real
 * cubed pinned apart from the client or onto the client's own CPU, and how
 * long a wait polls, from how long the answers before it took. And the
 * daemon's side (daemon/linger.c): when cubed polls for a client's next
 * request, told by its metrics.
 */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "spin.h"

static cpu_set_t cpus(int a, int b)
{
        cpu_set_t set;

        CPU_ZERO(&set);
        CPU_SET(a, &set);
        if (b >= 0)
                CPU_SET(b, &set);
        return set;
}

START_TEST(test_the_rule)
{
        cpu_set_t c0 = cpus(0, -1), c1 = cpus(1, -1), both = cpus(0, 1);

        /* One CPU for both: a poll would hold the daemon's only CPU. */
        ck_assert_uint_eq(cube__spin_budget_us(&c0, &c0), 0);
        /* The daemon may not run where the client polls. */
        ck_assert_uint_eq(cube__spin_budget_us(&both, &c0), 0);
        /* CPUs of their own: the long budget. */
        ck_assert_uint_eq(cube__spin_budget_us(&c0, &c1), CUBE__SPIN_APART_US);
        /* They may meet on a CPU: the short one. */
        ck_assert_uint_eq(cube__spin_budget_us(&c0, &both), CUBE__SPIN_SHARED_US);
        ck_assert_uint_eq(cube__spin_budget_us(&both, &both), CUBE__SPIN_SHARED_US);
        /* The daemon's CPUs unknown: the client's own decide. */
        ck_assert_uint_eq(cube__spin_budget_us(&c0, NULL), 0);
        ck_assert_uint_eq(cube__spin_budget_us(&both, NULL), CUBE__SPIN_SHARED_US);
}
END_TEST

/* Pins the daemon's main thread (what SO_PEERCRED's pid names) and this
 * thread, then asks the decision on a fresh connection. */
static uint64_t budget_with(const test_daemon *d, int daemon_cpu, int my_cpu)
{
        cpu_set_t dset = cpus(daemon_cpu, -1), mine = cpus(my_cpu, -1);
        cube__spin s;
        int fd;

        ck_assert_int_eq(sched_setaffinity(d->pid, sizeof(dset), &dset), 0);
        ck_assert_int_eq(sched_setaffinity(0, sizeof(mine), &mine), 0);
        fd = raw_connect(d->socket);
        ck_assert_int_ge(fd, 0);
        cube__spin_init(&s, fd);
        close(fd);
        return s.budget_ns;
}

START_TEST(test_decided_from_the_daemons_cpus)
{
        test_daemon d;
        cpu_set_t saved;
        cube_client *c;

        if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
                fprintf(stderr, "one CPU: nothing to pin apart; the rule is tested alone\n");
                return;
        }
        ck_assert_int_eq(sched_getaffinity(0, sizeof(saved), &saved), 0);
        ck_assert_int_eq(test_daemon_start(&d, NULL), 0);
        unsetenv("CUBE_CLIENT_SPIN_US");
        ck_assert_uint_eq(budget_with(&d, 1, 0), CUBE__SPIN_APART_US * 1000ull);
        ck_assert_uint_eq(budget_with(&d, 0, 0), 0);
        setenv("CUBE_CLIENT_SPIN_US", "0", 1);
        ck_assert_uint_eq(budget_with(&d, 1, 0), 0);
        setenv("CUBE_CLIENT_SPIN_US", "120", 1);
        ck_assert_uint_eq(budget_with(&d, 1, 0), 120000);
        setenv("CUBE_CLIENT_SPIN_US", "1000000", 1);
        ck_assert_uint_eq(budget_with(&d, 1, 0), CUBE__SPIN_MAX_US * 1000ull);
        unsetenv("CUBE_CLIENT_SPIN_US");

        /* A polling client gets its answers as a sleeping one does. */
        (void) budget_with(&d, 1, 0);
        ck_ok(cube_connect(d.socket, "spin", &c));
        for (int i = 0; i < 100; i++)
                ck_ok(cube_sync(c, NULL, 0));
        cube_disconnect(c);
        ck_assert_int_eq(sched_setaffinity(0, sizeof(saved), &saved), 0);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
}
END_TEST

typedef struct later {
        int fd;
        unsigned ms;
        pthread_t thread;
} later;

static void *write_later(void *arg)
{
        later *l = arg;

        usleep(l->ms * 1000);
        ck_assert_int_eq(write(l->fd, "x", 1), 1);
        return NULL;
}

/* Waits on fd for a byte written ms from now, then takes it. */
static void wait_for_byte(cube__spin *s, int fd, int writer, unsigned ms)
{
        later l = { .fd = writer, .ms = ms };
        char b;

        ck_assert_int_eq(pthread_create(&l.thread, NULL, write_later, &l), 0);
        ck_assert_int_eq(cube__spin_wait(s, fd), 0);
        ck_assert_int_eq(read(fd, &b, 1), 1);
        pthread_join(l.thread, NULL);
}

START_TEST(test_polls_as_long_as_answers_take)
{
        cube__spin s = { .budget_ns = 50000000 };
        int sv[2];

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
        /* Nothing known yet: the shortest poll, then the answers' pace. */
        wait_for_byte(&s, sv[0], sv[1], 5);
        ck_assert_uint_eq(s.polled_ns, CUBE__SPIN_MIN_US * 1000ull);
        for (int i = 0; i < 6; i++)
                wait_for_byte(&s, sv[0], sv[1], 5);
        ck_assert_uint_ge(s.expect_ns, 4000000);
        /* Polled for twice what the answers took before it: at least 8 ms,
         * so the 5 ms answer came while it polled. */
        ck_assert_uint_ge(s.polled_ns, 8000000);
        ck_assert_uint_le(s.polled_ns, s.budget_ns);
        close(sv[0]);
        close(sv[1]);
}
END_TEST

START_TEST(test_answers_slower_than_the_budget_find_the_client_asleep)
{
        cube__spin s = { .budget_ns = 1000000 };
        int sv[2];

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
        /* Answered after 20 ms, past the 1 ms budget: the next waits sleep
         * at once. */
        wait_for_byte(&s, sv[0], sv[1], 20);
        ck_assert_uint_gt(s.expect_ns, s.budget_ns);
        wait_for_byte(&s, sv[0], sv[1], 20);
        ck_assert_uint_eq(s.polled_ns, 0);
        /* Answers already there: polling is back within a few waits. */
        for (int i = 0; i < 9; i++) {
                char b;
                ck_assert_int_eq(write(sv[1], "x", 1), 1);
                ck_assert_int_eq(cube__spin_wait(&s, sv[0]), 0);
                ck_assert_int_eq(read(sv[0], &b, 1), 1);
        }
        ck_assert_uint_gt(s.polled_ns, 0);
        ck_assert_uint_le(s.expect_ns, s.budget_ns);
        close(sv[0]);
        close(sv[1]);
}
END_TEST

typedef struct waiter {
        cube__spin spin;
        int sv[2];
        pthread_t thread;
} waiter;

static void *wait_on(void *arg)
{
        waiter *w = arg;

        ck_assert_int_eq(cube__spin_wait(&w->spin, w->sv[0]), 0);
        return NULL;
}

START_TEST(test_no_poll_while_another_thread_waits)
{
        waiter other = { .spin = { 0 } };
        cube__spin s = { .budget_ns = 20000 };
        int sv[2];
        char b;

        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
        ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, other.sv), 0);
        ck_assert_int_eq(pthread_create(&other.thread, NULL, wait_on, &other), 0);
        usleep(100000);
        /* Another thread of the process waits: this one sleeps at once. */
        wait_for_byte(&s, sv[0], sv[1], 50);
        ck_assert_uint_eq(s.polled_ns, 0);
        s.expect_ns = 0;
        ck_assert_int_eq(write(other.sv[1], "x", 1), 1);
        pthread_join(other.thread, NULL);
        ck_assert_int_eq(read(other.sv[0], &b, 1), 1);
        /* Alone again: the wait polls. */
        wait_for_byte(&s, sv[0], sv[1], 50);
        ck_assert_uint_eq(s.polled_ns, 20000);
        close(sv[0]);
        close(sv[1]);
        close(other.sv[0]);
        close(other.sv[1]);
}
END_TEST

/* The daemon's counter name, of this instance. */
static double polls_of(cube_client *c, const char *name)
{
        char series[128];

        snprintf(series, sizeof(series), "%s{instance=\"%s\"}", name, test_instance());
        return test_metric_of(c, series);
}

static void pin(pid_t pid, int cpu)
{
        cpu_set_t set = cpus(cpu, -1);

        ck_assert_int_eq(sched_setaffinity(pid, sizeof(set), &set), 0);
}

static bool two_cpus(void)
{
        if (sysconf(_SC_NPROCESSORS_ONLN) >= 2)
                return true;
        fprintf(stderr, "one CPU: nothing to pin apart\n");
        return false;
}

/* syncs idle syncs on a fresh connection; returns the daemon's polls that
 * they started (read through that connection before and after). */
static double polls_during_syncs(const test_daemon *d, int syncs, unsigned gap_us,
                                 double *ret_caught)
{
        cube_client *c;
        double polls, caught;

        ck_ok(cube_connect(d->socket, "linger", &c));
        polls = polls_of(c, "cube_request_polls_total");
        caught = polls_of(c, "cube_request_polls_caught_total");
        for (int i = 0; i < syncs; i++) {
                ck_ok(cube_sync(c, NULL, 0));
                if (gap_us)
                        usleep(gap_us);
        }
        polls = polls_of(c, "cube_request_polls_total") - polls;
        if (ret_caught)
                *ret_caught = polls_of(c, "cube_request_polls_caught_total") - caught;
        cube_disconnect(c);
        return polls;
}

/* Starts a daemon pinned to CPU 1 and pins this thread to CPU 0; restore
 * takes the affinity stop_apart puts back. */
static void start_apart(test_daemon *d, const char *const *args, cpu_set_t *restore)
{
        ck_assert_int_eq(sched_getaffinity(0, sizeof(*restore), restore), 0);
        ck_assert_int_eq(test_daemon_start(d, args), 0);
        pin(d->pid, 1);
        pin(0, 0);
}

static void stop_apart(test_daemon *d, const cpu_set_t *restore)
{
        ck_assert_int_eq(sched_setaffinity(0, sizeof(*restore), restore), 0);
        ck_assert_int_eq(test_daemon_stop(d, 10000), 0);
}

/* A client on CPUs apart from the daemon's has its requests polled for; one
 * on the daemon's own CPU never: the poll would hold the CPU it needs. */
START_TEST(test_the_daemon_polls_for_a_client_apart)
{
        test_daemon d;
        cpu_set_t saved;
        double caught;

        if (!two_cpus())
                return;
        start_apart(&d, NULL, &saved);
        ck_assert_double_gt(polls_during_syncs(&d, 500, 0, &caught), 0);
        ck_assert_msg(caught > 0, "no request arrived while the daemon polled for it");
        pin(0, 1);
        ck_assert_double_eq(polls_during_syncs(&d, 300, 0, NULL), 0);
        stop_apart(&d, &saved);
}
END_TEST

/* A client that comes back later than the budget finds the daemon asleep
 * after its first answers; request-poll-us 0 turns polling off. */
START_TEST(test_the_daemon_polls_only_within_its_budget)
{
        static const char *const off[] = { "--request-poll-us", "0", NULL };
        test_daemon d;
        cpu_set_t saved;

        if (!two_cpus())
                return;
        start_apart(&d, NULL, &saved);
        /* 2 ms between syncs, the budget 50 us: the first gap shows it. */
        ck_assert_double_le(polls_during_syncs(&d, 50, 2000, NULL), 3);
        stop_apart(&d, &saved);

        start_apart(&d, off, &saved);
        ck_assert_double_eq(polls_during_syncs(&d, 300, 0, NULL), 0);
        stop_apart(&d, &saved);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("spin");
        TCase *tc = tcase_create("spin");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, test_the_rule);
        tcase_add_test(tc, test_decided_from_the_daemons_cpus);
        tcase_add_test(tc, test_polls_as_long_as_answers_take);
        tcase_add_test(tc, test_answers_slower_than_the_budget_find_the_client_asleep);
        tcase_add_test(tc, test_no_poll_while_another_thread_waits);
        tcase_add_test(tc, test_the_daemon_polls_for_a_client_apart);
        tcase_add_test(tc, test_the_daemon_polls_only_within_its_budget);
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

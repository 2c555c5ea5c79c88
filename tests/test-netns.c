/*
 * test-netns.c - collectives across hosts: two network namespaces joined by
 * a veth pair stand for two machines, one cubed in each listening on its
 * veth address, and one client process per rank inside its namespace. Rank
 * 0 mints the group id and hands it to rank 1 the way a launcher would; the
 * ranks all_reduce and send/recv over the veth link.
 *
 * Where the namespaces cannot be made (not root, no ip(8), EPERM) the
 * program exits 77, which meson counts as skipped. The namespaces, and any
 * daemon still in them, are removed however the run ends; a run killed
 * outright leaves them to the next one, which removes them first.
 */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static test_netns netns;
static volatile sig_atomic_t stop_signal;

/* A signal to the run: main removes the namespaces, then ends by it. */
static void on_signal(int sig)
{
        stop_signal = sig;
}

/* Member r's element i: exact in f32, different on each rank. */
static float value(int r, size_t i)
{
        return (float) ((int) (i % 1021) * (r + 1) + 3 * r + 1);
}

/* Starts cubed inside namespace i, its transport on the veth address. Each
 * "host" has one device, so both members are cpu0, as on two machines. */
static void start_member(test_daemon *d, int i)
{
        const char *args[] = { "--comm-address", netns.addr[i],
                               "--collective-timeout", "20000", NULL };
        ck_assert_msg(test_daemon_start_in_netns(d, &netns, i, args) == 0,
                      "cubed in %s did not start", netns.name[i]);
}

#define FAIL_AT(code, what, e) do { \
        fprintf(stderr, "rank %d: %s: %s\n", r, what, (e) ? cube_error_message(e) : "wrong"); \
        return code; \
} while (0)

/* One rank, in its own namespace: mint (rank 0) or receive the id, join,
 * all_reduce each size and check every element, then send 0 -> 1. */
static int rank_main(const test_daemon *d, int r, int id_in, int id_out)
{
        static const size_t sizes[] = { 1000, 1u << 20 };   /* status fused; separate */
        cube_client *c;
        cube_error *e;
        char id[128] = "";

        if (test_netns_enter(&netns, r) < 0)
                FAIL_AT(10, "setns", NULL);
        if ((e = cube_connect(d->socket, "netns-rank", &c)))
                FAIL_AT(11, "connect", e);
        if (r == 0) {
                if ((e = cube_comm_mint(c, id)))
                        FAIL_AT(12, "mint", e);
                /* The id names where rank 0 listens: its veth address. */
                if (!strstr(id, netns.addr[0]))
                        FAIL_AT(13, "the minted id does not name the veth address", NULL);
                if (write(id_out, id, sizeof(id)) != (ssize_t) sizeof(id))
                        FAIL_AT(14, "write id", NULL);
        } else if (read(id_in, id, sizeof(id)) != (ssize_t) sizeof(id)) {
                FAIL_AT(14, "read id", NULL);
        }
        id[sizeof(id) - 1] = '\0';
        if ((e = cube_comm_init_id(c, id, (uint32_t) r, 2)))
                FAIL_AT(15, "comm_init_id", e);
        cube_group grp = { NULL, 0, id };

        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
                size_t n = sizes[s], bytes = n * sizeof(float);
                float *buf = malloc(bytes);
                cube_handle src, dst;
                for (size_t i = 0; i < n; i++)
                        buf[i] = value(r, i);
                if ((e = cube_create(c, buf, bytes, &src)) || (e = cube_empty(c, bytes, &dst)))
                        FAIL_AT(16, "create", e);
                if ((e = cube_all_reduce(c, &grp, &src, &dst,
                                         (cube_reduction) { CUBE_ELEM_F32, CUBE_REDUCE_SUM },
                                         CUBE_WAIT_NOW)))
                        FAIL_AT(17, "all_reduce", e);
                memset(buf, 0, bytes);
                if ((e = cube_read(c, &dst, buf, bytes)))
                        FAIL_AT(18, "read the sum", e);
                for (size_t i = 0; i < n; i++)
                        if (buf[i] != value(0, i) + value(1, i)) {
                                fprintf(stderr, "rank %d: %zu elements: [%zu] = %g, want %g\n",
                                        r, n, i, buf[i], value(0, i) + value(1, i));
                                return 19;
                        }
                cube_free(c, &src);
                cube_free(c, &dst);
                free(buf);
        }

        /* send/recv on the same group: rank 0's bytes land on rank 1. */
        size_t n = 300000, bytes = n * sizeof(uint32_t);
        uint32_t *buf = malloc(bytes);
        cube_handle h;
        if (r == 0) {
                for (size_t i = 0; i < n; i++)
                        buf[i] = (uint32_t) (i * 2654435761u);
                if ((e = cube_create(c, buf, bytes, &h)))
                        FAIL_AT(20, "create", e);
                if ((e = cube_send(c, &grp, &h, "1", CUBE_WAIT_NOW)) || (e = cube_sync(c, NULL, 0)))
                        FAIL_AT(21, "send", e);
        } else {
                if ((e = cube_empty(c, bytes, &h)))
                        FAIL_AT(20, "empty", e);
                if ((e = cube_recv(c, &grp, &h, "0", CUBE_WAIT_NOW)))
                        FAIL_AT(21, "recv", e);
                if ((e = cube_read(c, &h, buf, bytes)))
                        FAIL_AT(22, "read what came", e);
                for (size_t i = 0; i < n; i++)
                        if (buf[i] != (uint32_t) (i * 2654435761u)) {
                                fprintf(stderr, "rank 1: recv [%zu] = %u\n", i, buf[i]);
                                return 23;
                        }
        }
        cube_free(c, &h);
        free(buf);
        cube_disconnect(c);
        return 0;
}

START_TEST(test_across_namespaces)
{
        test_daemon d[2];
        int id_pipe[2];
        pid_t pids[2];

        start_member(&d[0], 0);
        start_member(&d[1], 1);
        ck_assert_int_eq(pipe(id_pipe), 0);
        for (int r = 0; r < 2; r++)
                if ((pids[r] = fork()) == 0) {
                        /* Rank 1 sees EOF, not a hang, when rank 0 fails first. */
                        close(id_pipe[r == 0 ? 0 : 1]);
                        _exit(rank_main(&d[r], r, id_pipe[0], id_pipe[1]));
                }
        close(id_pipe[0]);
        close(id_pipe[1]);
        for (int r = 0; r < 2; r++) {
                int st;
                ck_assert_int_eq(waitpid(pids[r], &st, 0), pids[r]);
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
                        for (int i = 0; i < 2; i++)
                                test_daemon_dump_log(&d[i]);
                ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d: status %d", r,
                              WIFEXITED(st) ? WEXITSTATUS(st) : -1);
        }
        for (int i = 0; i < 2; i++)
                ck_assert_int_eq(test_daemon_stop(&d[i], 10000), 0);
}
END_TEST

/* Rank 1 cannot reach a daemon that advertises loopback from another
 * namespace: the join fails within the timeout rather than hanging. */
START_TEST(test_loopback_unreachable)
{
        test_daemon d[2];
        const char *a0[] = { "--collective-timeout", "2000", NULL };
        const char *a1[] = { "--comm-address", netns.addr[1],
                             "--collective-timeout", "2000", NULL };
        char id[128];
        cube_client *c;
        long t0;

        ck_assert_int_eq(test_daemon_start_in_netns(&d[0], &netns, 0, a0), 0);
        ck_assert_int_eq(test_daemon_start_in_netns(&d[1], &netns, 1, a1), 0);
        c = test_connect(d[0].socket, "netns-mint");
        ck_ok(cube_comm_mint(c, id));
        ck_assert_msg(strstr(id, "127.0.0.1"), "%s", id);
        cube_disconnect(c);
        c = test_connect(d[1].socket, "netns-join");
        t0 = test_now_ms();
        cube_error *e = cube_comm_init_id(c, id, 1, 2);
        ck_assert_msg(e != NULL, "rank 1 joined a group whose rank 0 it cannot reach");
        ck_assert_msg(test_now_ms() - t0 < test_scaled_ms(15000), "the join took %ld ms",
                      test_now_ms() - t0);
        cube_error_free(e);
        cube_disconnect(c);
        for (int i = 0; i < 2; i++)
                test_daemon_stop(&d[i], 10000);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("netns");
        TCase *tc = tcase_create("netns");

        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_across_namespaces);
        tcase_add_test(tc, test_loopback_unreachable);
        suite_add_tcase(s, tc);
        return s;
}

/* The suite runs in a child, so that this process outlives anything that
 * ends the run (a failure, a timeout, a signal to the whole process group,
 * which is how Check passes one on) and always removes the namespaces and
 * the daemons in them. */
int main(void)
{
        struct sigaction sa = { .sa_handler = on_signal };   /* no SA_RESTART */
        char why[256];
        int st = 0;
        pid_t runner;

        if (test_netns_create(&netns, why, sizeof(why)) < 0) {
                printf("skipped: %s\n", why);
                return 77;
        }
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
        fflush(stdout);
        if ((runner = fork()) == 0) {
                SRunner *sr = srunner_create(suite());
                signal(SIGTERM, SIG_DFL);
                signal(SIGINT, SIG_DFL);
                signal(SIGHUP, SIG_DFL);
                srunner_run_all(sr, CK_NORMAL);
                int failed = srunner_ntests_failed(sr);
                srunner_free(sr);
                _exit(failed ? 1 : 0);
        }
        while (runner > 0 && waitpid(runner, &st, 0) < 0 && errno == EINTR && !stop_signal)
                ;
        test_netns_destroy(&netns);
        if (stop_signal) {
                kill(runner, SIGKILL);
                waitpid(runner, NULL, 0);
                signal(stop_signal, SIG_DFL);
                raise(stop_signal);
        }
        return runner > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

/*
 * test-comms.c - collectives between daemons: every operation, reduction and
 * dtype against a host computation, from one process and from one process
 * per device; the tainted-buffer rules; members lost mid-operation; sizes;
 * a device without a transport; peer access.
 */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static const char *const names[] = { "cpu0", "cpu1", "cpu2", "cpu3" };

static void connect_all(test_group *g, cube_client **c)
{
        for (int i = 0; i < g->n; i++)
                ck_ok(cube_connect(g->d[i].socket, "test-comms", &c[i]));
}

static void disconnect_all(test_group *g, cube_client **c)
{
        for (int i = 0; i < g->n; i++)
                cube_disconnect(c[i]);
}

static size_t esize(cube_elem_type t)
{
        return t <= CUBE_ELEM_BF16 ? 2 : t == CUBE_ELEM_F32 || t == CUBE_ELEM_I32 ||
               t == CUBE_ELEM_U32 ? 4 : 8;
}

/* Member r's element i, as a double small enough to be exact in any dtype. */
static double value(int r, size_t i)
{
        return (double) ((int) (i % 7) + 2 * r + 1);
}

static void put(void *p, cube_elem_type t, size_t i, double v)
{
        switch (t) {
        case CUBE_ELEM_F16: { /* small integers: exact */
                uint16_t h = 0;
                if (v != 0) {
                        int e = 0;
                        double m = frexp(v, &e); /* v = m * 2^e, 0.5 <= m < 1 */
                        h = (uint16_t) (((e - 1 + 15) << 10) | ((int) ((m * 2 - 1) * 1024) & 0x3ff));
                }
                ((uint16_t *) p)[i] = h;
                break;
        }
        case CUBE_ELEM_BF16: { float f = (float) v; uint32_t u; memcpy(&u, &f, 4);
                ((uint16_t *) p)[i] = (uint16_t) (u >> 16); break; }
        case CUBE_ELEM_F32: ((float *) p)[i] = (float) v; break;
        case CUBE_ELEM_F64: ((double *) p)[i] = v; break;
        case CUBE_ELEM_I32: ((int32_t *) p)[i] = (int32_t) v; break;
        case CUBE_ELEM_I64: ((int64_t *) p)[i] = (int64_t) v; break;
        case CUBE_ELEM_U32: ((uint32_t *) p)[i] = (uint32_t) v; break;
        case CUBE_ELEM_U64: ((uint64_t *) p)[i] = (uint64_t) v; break;
        }
}

static double get(const void *p, cube_elem_type t, size_t i)
{
        switch (t) {
        case CUBE_ELEM_F16: { uint16_t h = ((const uint16_t *) p)[i];
                if (!h) return 0;
                return ldexp(1.0 + (h & 0x3ff) / 1024.0, ((h >> 10) & 0x1f) - 15); }
        case CUBE_ELEM_BF16: { uint32_t u = (uint32_t) ((const uint16_t *) p)[i] << 16; float f;
                memcpy(&f, &u, 4); return f; }
        case CUBE_ELEM_F32: return ((const float *) p)[i];
        case CUBE_ELEM_F64: return ((const double *) p)[i];
        case CUBE_ELEM_I32: return ((const int32_t *) p)[i];
        case CUBE_ELEM_I64: return (double) ((const int64_t *) p)[i];
        case CUBE_ELEM_U32: return ((const uint32_t *) p)[i];
        default: return (double) ((const uint64_t *) p)[i];
        }
}

static bool is_int(cube_elem_type t)
{
        return t >= CUBE_ELEM_I32;
}

/* all_reduce of every dtype and both reductions, both ComputeWaits; small
 * (the payloads ride in the status exchange) and large (Gloo's ring). */
static void all_reduce_every_dtype(test_group *g, cube_client **c)
{
        int n = g->n;
        cube_group grp = { names, (size_t) n, NULL };

        for (size_t elems = 1000; elems <= 40000; elems += 39000)
        for (int t = CUBE_ELEM_F16; t <= CUBE_ELEM_U64; t++)
                for (int op = 0; op < 2; op++)
                        for (int w = 0; w < 2; w++) {
                                size_t bytes = elems * esize(t);
                                cube_handle src[4], dst[4];
                                char *buf = malloc(bytes);
                                for (int r = 0; r < n; r++) {
                                        for (size_t i = 0; i < elems; i++)
                                                put(buf, t, i, value(r, i));
                                        ck_ok(cube_create(c[r], buf, bytes, &src[r]));
                                        ck_ok(cube_empty(c[r], bytes, &dst[r]));
                                }
                                for (int r = 0; r < n; r++)
                                        ck_ok(cube_all_reduce(c[r], &grp, &src[r], &dst[r],
                                                              (cube_reduction) { t, op }, w));
                                for (int r = 0; r < n; r++) {
                                        if (w == CUBE_WAIT_AT_SYNC)
                                                ck_ok(cube_sync_collective(c[r]));
                                        ck_ok(cube_read(c[r], &dst[r], buf, bytes));
                                        for (size_t i = 0; i < elems; i++) {
                                                double want = 0;
                                                for (int q = 0; q < n; q++)
                                                        want += value(q, i);
                                                if (op == CUBE_REDUCE_MEAN)
                                                        want = is_int(t) ? floor(want / n) :
                                                               want / n;
                                                double got = get(buf, t, i);
                                                double tol = t <= CUBE_ELEM_BF16 ? 0.02 * want : 1e-6;
                                                ck_assert_msg(fabs(got - want) <= tol,
                                                              "%zu of dtype %d op %d wait %d rank %d"
                                                              " [%zu]: %g, want %g", elems, t, op,
                                                              w, r, i, got, want);
                                        }
                                        cube_free(c[r], &src[r]);
                                        cube_free(c[r], &dst[r]);
                                }
                                free(buf);
                        }
}

/* all_gather, reduce_scatter, broadcast, all_to_all, send/recv on u32. */
static void other_ops(test_group *g, cube_client **c)
{
        int n = g->n;
        size_t chunk = 64;                      /* u32 per rank chunk */
        size_t cb = chunk * 4, all = cb * (size_t) n;
        cube_group grp = { names, (size_t) n, NULL };
        cube_handle src[4], dst[4];
        uint32_t *buf = malloc(all), *out = malloc(all);

        /* all_gather */
        for (int r = 0; r < n; r++) {
                for (size_t i = 0; i < chunk; i++)
                        buf[i] = (uint32_t) (r * 1000 + i);
                ck_ok(cube_create(c[r], buf, cb, &src[r]));
                ck_ok(cube_empty(c[r], all, &dst[r]));
        }
        for (int r = 0; r < n; r++)
                ck_ok(cube_all_gather(c[r], &grp, &src[r], &dst[r], CUBE_WAIT_NOW));
        for (int r = 0; r < n; r++) {
                ck_ok(cube_read(c[r], &dst[r], out, all));
                for (int q = 0; q < n; q++)
                        for (size_t i = 0; i < chunk; i++)
                                ck_assert_uint_eq(out[q * chunk + i], q * 1000 + i);
                cube_free(c[r], &src[r]);
                cube_free(c[r], &dst[r]);
        }
        /* reduce_scatter: sum of every rank's all-sized src, rank r keeps chunk r */
        for (int r = 0; r < n; r++) {
                for (size_t i = 0; i < chunk * n; i++)
                        buf[i] = (uint32_t) (i + r);
                ck_ok(cube_create(c[r], buf, all, &src[r]));
                ck_ok(cube_empty(c[r], cb, &dst[r]));
        }
        for (int r = 0; r < n; r++)
                ck_ok(cube_reduce_scatter(c[r], &grp, &src[r], &dst[r],
                                          (cube_reduction) { CUBE_ELEM_U32, CUBE_REDUCE_SUM },
                                          CUBE_WAIT_NOW));
        for (int r = 0; r < n; r++) {
                ck_ok(cube_read(c[r], &dst[r], out, cb));
                for (size_t i = 0; i < chunk; i++) {
                        size_t k = r * chunk + i;
                        uint32_t want = 0;
                        for (int q = 0; q < n; q++)
                                want += (uint32_t) (k + q);
                        ck_assert_uint_eq(out[i], want);
                }
                cube_free(c[r], &src[r]);
                cube_free(c[r], &dst[r]);
        }
        /* broadcast from the last member */
        const char *root = names[n - 1];
        for (size_t i = 0; i < chunk; i++)
                buf[i] = (uint32_t) (7 * i + 3);
        ck_ok(cube_create(c[n - 1], buf, cb, &src[n - 1]));
        for (int r = 0; r < n; r++)
                ck_ok(cube_empty(c[r], cb, &dst[r]));
        for (int r = 0; r < n; r++)
                ck_ok(cube_broadcast(c[r], &grp, r == n - 1 ? &src[r] : NULL, &dst[r], root,
                                     CUBE_WAIT_NOW));
        for (int r = 0; r < n; r++) {
                ck_ok(cube_read(c[r], &dst[r], out, cb));
                for (size_t i = 0; i < chunk; i++)
                        ck_assert_uint_eq(out[i], 7 * i + 3);
                cube_free(c[r], &dst[r]);
        }
        cube_free(c[n - 1], &src[n - 1]);
        /* all_to_all: chunk q of rank r's src goes to chunk r of rank q's dst */
        for (int r = 0; r < n; r++) {
                for (size_t i = 0; i < chunk * n; i++)
                        buf[i] = (uint32_t) (r * 100000 + i);
                ck_ok(cube_create(c[r], buf, all, &src[r]));
                ck_ok(cube_empty(c[r], all, &dst[r]));
        }
        for (int r = 0; r < n; r++)
                ck_ok(cube_all_to_all(c[r], &grp, &src[r], &dst[r], CUBE_WAIT_NOW));
        for (int r = 0; r < n; r++) {
                ck_ok(cube_read(c[r], &dst[r], out, all));
                for (int q = 0; q < n; q++)
                        for (size_t i = 0; i < chunk; i++)
                                ck_assert_uint_eq(out[q * chunk + i],
                                                  q * 100000 + r * chunk + i);
                cube_free(c[r], &src[r]);
                cube_free(c[r], &dst[r]);
        }
        /* send/recv: 0 -> 1, on the pair's own group */
        for (size_t i = 0; i < chunk; i++)
                buf[i] = (uint32_t) (i * i);
        ck_ok(cube_create(c[0], buf, cb, &src[0]));
        ck_ok(cube_empty(c[1], cb, &dst[1]));
        ck_ok(cube_send(c[0], NULL, &src[0], "cpu1", CUBE_WAIT_NOW));
        ck_ok(cube_recv(c[1], NULL, &dst[1], "cpu0", CUBE_WAIT_NOW));
        ck_ok(cube_read(c[1], &dst[1], out, cb));
        for (size_t i = 0; i < chunk; i++)
                ck_assert_uint_eq(out[i], i * i);
        free(buf);
        free(out);
}

START_TEST(test_two_one_process)
{
        test_group g;
        cube_client *c[2];

        ck_assert_int_eq(test_group_start(&g, 2, NULL), 0);
        connect_all(&g, c);
        ck_ok(cube_comm_init_all(c, names, 2));
        all_reduce_every_dtype(&g, c);
        other_ops(&g, c);
        disconnect_all(&g, c);
        test_group_stop(&g);
}
END_TEST

START_TEST(test_four_one_process)
{
        test_group g;
        cube_client *c[4];
        const char *order[] = { "cpu2", "cpu0", "cpu3", "cpu1" };

        ck_assert_int_eq(test_group_start(&g, 4, NULL), 0);
        connect_all(&g, c);
        /* Any order of the same devices is one group. */
        ck_ok(cube_comm_init_all(c, order, 4));
        all_reduce_every_dtype(&g, c);
        other_ops(&g, c);
        disconnect_all(&g, c);
        test_group_stop(&g);
}
END_TEST

/* One process per device, each talking to its own daemon only. */
static int rank_main(test_group *g, int r, int n)
{
        cube_client *c;
        cube_group grp = { names, (size_t) n, NULL };
        size_t elems = 4096;
        float *buf = malloc(elems * 4);
        cube_handle src, dst;

        if (cube_connect(g->d[r].socket, "rank", &c))
                return 1;
        if (cube_comm_init(c, names, (size_t) n))
                return 2;
        for (size_t i = 0; i < elems; i++)
                buf[i] = (float) value(r, i);
        if (cube_create(c, buf, elems * 4, &src) || cube_empty(c, elems * 4, &dst) ||
            cube_all_reduce(c, &grp, &src, &dst, (cube_reduction) { CUBE_ELEM_F32, CUBE_REDUCE_SUM },
                            CUBE_WAIT_AT_SYNC) || cube_sync_collective(c) ||
            cube_read(c, &dst, buf, elems * 4))
                return 3;
        for (size_t i = 0; i < elems; i++) {
                double want = 0;
                for (int q = 0; q < n; q++)
                        want += value(q, i);
                if (buf[i] != (float) want)
                        return 4;
        }
        cube_disconnect(c);
        free(buf);
        return 0;
}

START_TEST(test_process_per_rank)
{
        test_group g;
        pid_t pids[4];
        int n = 4;

        ck_assert_int_eq(test_group_start(&g, n, NULL), 0);
        for (int r = 0; r < n; r++)
                if ((pids[r] = fork()) == 0)
                        _exit(rank_main(&g, r, n));
        for (int r = 0; r < n; r++) {
                int st;
                ck_assert_int_eq(waitpid(pids[r], &st, 0), pids[r]);
                ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d: status %d", r, st);
        }
        test_group_stop(&g);
}
END_TEST

/* A member whose source carries a failure: every destination carries it,
 * nobody hangs, and the group goes on. */
START_TEST(test_tainted_source)
{
        static const char *const args[] = { "--enable-fault-injection", NULL };
        test_group g;
        cube_client *c[2];
        cube_group grp = { names, 2, NULL };
        cube_handle src[2], dst[2];
        float buf[256] = {0};
        cube_error *e;

        ck_assert_int_eq(test_group_start(&g, 2, args), 0);
        connect_all(&g, c);
        ck_ok(cube_comm_init_all(c, names, 2));
        ck_ok(cube_create(c[0], buf, sizeof(buf), &src[0]));
        ck_ok(cube_debug_inject(c[1], CUBE_FAULT_COPY, CUBE_IO_UNKNOWN, "the source's write", 0));
        ck_ok(cube_create(c[1], buf, sizeof(buf), &src[1]));
        for (int r = 0; r < 2; r++)
                ck_ok(cube_empty(c[r], sizeof(buf), &dst[r]));
        long t0 = test_now_ms();
        for (int r = 0; r < 2; r++)
                ck_ok(cube_all_reduce(c[r], &grp, &src[r], &dst[r],
                                      (cube_reduction) { CUBE_ELEM_F32, CUBE_REDUCE_SUM },
                                      CUBE_WAIT_NOW));
        e = cube_read(c[1], &dst[1], buf, sizeof(buf));
        ck_assert_msg(e && strstr(cube_error_message(e), "the source's write"), "%s",
                      e ? cube_error_message(e) : "no error");
        cube_error_free(e);
        e = cube_read(c[0], &dst[0], buf, sizeof(buf));
        ck_assert_msg(e && strstr(cube_error_message(e), "cpu1") &&
                      strstr(cube_error_message(e), "refused"), "%s",
                      e ? cube_error_message(e) : "no error");
        ck_assert(cube_error_kind_of(e) == CUBE_SERVER_UNWRITTEN ||
                  cube_error_kind_of(e) == CUBE_SERVER_SEVERAL);
        cube_error_free(e);
        ck_assert_int_lt(test_now_ms() - t0, 5000);
        /* A clean source again: the same group works, and so does a new comm_init. */
        ck_ok(cube_write(c[1], &src[1], buf, sizeof(buf)));
        ck_ok(cube_comm_init_all(c, names, 2));
        for (int r = 0; r < 2; r++) {
                for (int i = 0; i < 256; i++)
                        buf[i] = (float) (r + i);
                ck_ok(cube_write(c[r], &src[r], buf, sizeof(buf)));
        }
        for (int r = 0; r < 2; r++)
                ck_ok(cube_all_reduce(c[r], &grp, &src[r], &dst[r],
                                      (cube_reduction) { CUBE_ELEM_F32, CUBE_REDUCE_SUM },
                                      CUBE_WAIT_NOW));
        for (int r = 0; r < 2; r++) {
                ck_ok(cube_read(c[r], &dst[r], buf, sizeof(buf)));
                for (int i = 0; i < 256; i++)
                        ck_assert_float_eq(buf[i], (float) (2 * i + 1));
        }
        disconnect_all(&g, c);
        test_group_stop(&g);
}
END_TEST

/* A member daemon killed in the middle of a 64 MiB all_reduce. */
START_TEST(test_member_killed)
{
        static const char *const args[] = { "--collective-timeout", "3000", NULL };
        test_group g;
        cube_client *c[2];
        cube_group grp = { names, 2, NULL };
        cube_handle src[2], dst[2];
        size_t bytes = 64u << 20;
        char *buf = calloc(1, bytes);
        cube_error *e;
        cube_status st;

        ck_assert_int_eq(test_group_start(&g, 2, args), 0);
        connect_all(&g, c);
        ck_ok(cube_comm_init_all(c, names, 2));
        for (int r = 0; r < 2; r++) {
                ck_ok(cube_create(c[r], buf, bytes, &src[r]));
                ck_ok(cube_empty(c[r], bytes, &dst[r]));
        }
        for (int r = 0; r < 2; r++)
                ck_ok(cube_all_reduce(c[r], &grp, &src[r], &dst[r],
                                      (cube_reduction) { CUBE_ELEM_F32, CUBE_REDUCE_SUM },
                                      CUBE_WAIT_NOW));
        usleep(20000);
        kill(g.d[1].pid, SIGKILL);
        waitpid(g.d[1].pid, NULL, 0);
        g.d[1].pid = 0;
        long t0 = test_now_ms();
        e = cube_sync(c[0], &dst[0], 1);
        long took = test_now_ms() - t0;
        if (e) {
                ck_assert_msg(strstr(cube_error_message(e), "cpu1"), "%s", cube_error_message(e));
                cube_error_free(e);
                ck_assert_int_lt(took, 3000 + 3000);
        }
        /* Either it finished before the kill or it failed naming cpu1; the
         * group refuses later work either way once it notices. */
        e = cube_all_reduce(c[0], &grp, &src[0], &dst[0],
                            (cube_reduction) { CUBE_ELEM_F32, CUBE_REDUCE_SUM }, CUBE_WAIT_NOW);
        if (!e) {
                e = cube_sync(c[0], &dst[0], 1);
                ck_assert_msg(e && strstr(cube_error_message(e), "cpu1"), "%s",
                              e ? cube_error_message(e) : "no error");
        }
        cube_error_free(e);
        /* Nothing leaks. */
        cube_free(c[0], &src[0]);
        cube_free(c[0], &dst[0]);
        ck_assert(wait_memory_in_use(g.d[0].socket, 0, 5000));
        ck_ok(cube_daemon_status(c[0], &st));
        cube_disconnect(c[0]);
        cube_disconnect(c[1]);
        free(buf);
        test_group_stop(&g);
}
END_TEST

/* A member's client killed: its session's groups close, the others fail
 * promptly naming it. */
START_TEST(test_member_client_killed)
{
        static const char *const args[] = { "--collective-timeout", "20000", NULL };
        test_group g;
        cube_client *c;
        cube_group grp = { names, 2, NULL };
        cube_handle src, dst;
        float buf[1024] = {0};
        cube_error *e;
        int pfd[2];
        pid_t child;
        char ok;

        ck_assert_int_eq(test_group_start(&g, 2, args), 0);
        ck_assert_int_eq(pipe(pfd), 0);
        if ((child = fork()) == 0) {
                cube_client *cc;
                if (cube_connect(g.d[1].socket, "doomed", &cc) || cube_comm_init(cc, names, 2))
                        _exit(1);
                ok = 1;
                if (write(pfd[1], &ok, 1) != 1)
                        _exit(1);
                pause();
                _exit(0);
        }
        ck_ok(cube_connect(g.d[0].socket, "survivor", &c));
        ck_ok(cube_comm_init(c, names, 2));
        ck_assert_int_eq(read(pfd[0], &ok, 1), 1);
        ck_ok(cube_create(c, buf, sizeof(buf), &src));
        ck_ok(cube_empty(c, sizeof(buf), &dst));
        ck_ok(cube_all_reduce(c, &grp, &src, &dst,
                              (cube_reduction) { CUBE_ELEM_F32, CUBE_REDUCE_SUM }, CUBE_WAIT_NOW));
        long t0 = test_now_ms();
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        e = cube_read(c, &dst, buf, sizeof(buf));
        ck_assert_msg(e && strstr(cube_error_message(e), "member cpu1 (rank 1) has left the "
                                  "group (its session ended)"), "%s",
                      e ? cube_error_message(e) : "no error");
        cube_error_free(e);
        ck_assert_int_lt(test_now_ms() - t0, 10000);
        cube_disconnect(c);
        test_group_stop(&g);
}
END_TEST

typedef struct id_join {
        cube_client *client;
        const char *id;
        uint32_t rank;
        cube_error *e;
} id_join;

static void *join_by_id(void *arg)
{
        id_join *j = arg;
        j->e = cube_comm_init_id(j->client, j->id, j->rank, 4);
        return NULL;
}

/* In a group of four, a member whose client never asks for the operation:
 * the others time out, and each names the silent member, not the member it
 * happened to wait for; in a group of devices and in one joined by a
 * minted id (the way across hosts). */
static void silent_member_named(bool by_id)
{
        static const char *const args[] = { "--collective-timeout", "2000", NULL };
        test_group g;
        cube_client *c[4];
        char id[128];
        cube_group grp = { names, 4, NULL };
        cube_handle src[4], dst[4];
        float buf[1024] = {0};
        cube_status st;

        ck_assert_int_eq(test_group_start(&g, 4, args), 0);
        connect_all(&g, c);
        if (by_id) {
                id_join j[4];
                pthread_t t[4];
                ck_ok(cube_comm_mint(c[0], id));
                for (uint32_t r = 0; r < 4; r++) {
                        j[r] = (id_join) { c[r], id, r, NULL };
                        ck_assert_int_eq(pthread_create(&t[r], NULL, join_by_id, &j[r]), 0);
                }
                for (int r = 0; r < 4; r++) {
                        pthread_join(t[r], NULL);
                        ck_ok(j[r].e);
                }
                grp = (cube_group) { NULL, 0, id };
        } else {
                ck_ok(cube_comm_init_all(c, names, 4));
        }
        for (int r = 0; r < 4; r++) {
                ck_ok(cube_create(c[r], buf, sizeof(buf), &src[r]));
                ck_ok(cube_empty(c[r], sizeof(buf), &dst[r]));
        }
        /* One operation every member takes part in, then one cpu2 skips. */
        for (int round = 0; round < 2; round++)
                for (int r = 0; r < 4; r++)
                        if (round == 0 || r != 2)
                                ck_ok(cube_all_reduce(c[r], &grp, &src[r], &dst[r],
                                                      (cube_reduction) { CUBE_ELEM_F32,
                                                                         CUBE_REDUCE_SUM },
                                                      CUBE_WAIT_NOW));
        long t0 = test_now_ms();
        for (int r = 0; r < 4; r++) {
                cube_error *e;
                if (r == 2)
                        continue;
                e = cube_sync(c[r], &dst[r], 1);
                ck_assert_msg(e, "member %d: the operation cpu2 skipped succeeded", r);
                ck_assert_msg(strstr(cube_error_message(e),
                                     "member cpu2 (rank 2) never started it: it has started 1 "
                                     "of the group's operations, this is operation 2"),
                              "member %d: %s", r, cube_error_message(e));
                ck_assert_msg(!strstr(cube_error_message(e), "a member is lost"), "%s",
                              cube_error_message(e));
                for (int q = 0; q < 4; q++) {
                        char other[32];
                        snprintf(other, sizeof(other), "member cpu%d", q);
                        ck_assert_msg(q == 2 || !strstr(cube_error_message(e), other),
                                      "member %d names cpu%d too: %s", r, q,
                                      cube_error_message(e));
                }
                cube_error_free(e);
        }
        ck_assert_int_lt(test_now_ms() - t0, 2000 + 5000);
        ck_ok(cube_daemon_status(c[2], &st));
        disconnect_all(&g, c);
        test_group_stop(&g);
}

START_TEST(test_silent_member_named)
{
        silent_member_named(false);
}
END_TEST

START_TEST(test_silent_member_named_by_id)
{
        silent_member_named(true);
}
END_TEST

/* In a group of four, a member daemon stopped (SIGSTOP) in the middle of a
 * 64 MiB all_reduce: the others fail within the timeout naming it. */
START_TEST(test_stopped_member_named)
{
        static const char *const args[] = { "--collective-timeout", "3000", NULL };
        test_group g;
        cube_client *c[4];
        cube_group grp = { names, 4, NULL };
        cube_handle src[4], dst[4];
        size_t bytes = 64u << 20;
        char *buf = calloc(1, bytes);
        int failed = 0;

        ck_assert_int_eq(test_group_start(&g, 4, args), 0);
        connect_all(&g, c);
        ck_ok(cube_comm_init_all(c, names, 4));
        for (int r = 0; r < 4; r++) {
                ck_ok(cube_create(c[r], buf, bytes, &src[r]));
                ck_ok(cube_empty(c[r], bytes, &dst[r]));
        }
        for (int r = 0; r < 4; r++)
                ck_ok(cube_all_reduce(c[r], &grp, &src[r], &dst[r],
                                      (cube_reduction) { CUBE_ELEM_F32, CUBE_REDUCE_SUM },
                                      CUBE_WAIT_NOW));
        usleep(20000);
        kill(g.d[3].pid, SIGSTOP);
        long t0 = test_now_ms();
        for (int r = 0; r < 3; r++) {
                cube_error *e = cube_sync(c[r], &dst[r], 1);
                if (!e)
                        continue;       /* it finished before the stop */
                failed++;
                ck_assert_msg(strstr(cube_error_message(e), "member cpu3 (rank 3) does not "
                                     "answer: its daemon is stopped") ||
                              strstr(cube_error_message(e), "member cpu3 (rank 3) never "
                                     "started it"), "member %d: %s", r, cube_error_message(e));
                cube_error_free(e);
        }
        ck_assert_int_lt(test_now_ms() - t0, 3000 + 5000);
        kill(g.d[3].pid, SIGCONT);
        if (!failed)
                fprintf(stderr, "test_stopped_member_named: the all_reduce finished before "
                        "the stop; nothing was named\n");
        disconnect_all(&g, c);
        free(buf);
        test_group_stop(&g);
}
END_TEST

START_TEST(test_sizes)
{
        test_group g;
        cube_client *c[2];
        cube_group grp = { names, 2, NULL };
        cube_handle src[2], dst[2], small;
        static char buf[1 << 20];
        cube_error *e;

        ck_assert_int_eq(test_group_start(&g, 2, NULL), 0);
        connect_all(&g, c);
        ck_ok(cube_comm_init_all(c, names, 2));
        ck_ok(cube_empty(c[0], 4096, &src[0]));
        ck_ok(cube_empty(c[0], 1024, &small));
        e = cube_all_reduce(c[0], &grp, &src[0], &small,
                            (cube_reduction) { CUBE_ELEM_F32, CUBE_REDUCE_SUM }, CUBE_WAIT_NOW);
        ck_assert_msg(e && strcmp(cube_error_reason(e), "the collective's destination holds 1024 "
                                  "bytes where it needs 4096") == 0, "%s",
                      e ? cube_error_message(e) : "none");
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_SERVER_GENERIC);
        cube_error_free(e);
        /* Members whose sizes differ: both destinations say so. */
        ck_ok(cube_create(c[0], buf, sizeof(buf), &src[0]));
        ck_ok(cube_empty(c[0], sizeof(buf), &dst[0]));
        ck_ok(cube_create(c[1], buf, sizeof(buf) / 2, &src[1]));
        ck_ok(cube_empty(c[1], sizeof(buf) / 2, &dst[1]));
        for (int r = 0; r < 2; r++)
                ck_ok(cube_all_reduce(c[r], &grp, &src[r], &dst[r],
                                      (cube_reduction) { CUBE_ELEM_F32, CUBE_REDUCE_SUM },
                                      CUBE_WAIT_NOW));
        for (int r = 0; r < 2; r++) {
                e = cube_read(c[r], &dst[r], buf, r ? sizeof(buf) / 2 : sizeof(buf));
                ck_assert_msg(e && strstr(cube_error_message(e), "bytes where this member"),
                              "%s", e ? cube_error_message(e) : "none");
                cube_error_free(e);
                cube_free(c[r], &src[r]);
                cube_free(c[r], &dst[r]);
        }
        /* Sizes that would take different ways through the engine, small
         * (4 KiB, 8 KiB) and small against large (4 KiB, 1 MiB): the data of
         * members that disagree never meets, so neither daemon goes down,
         * and the group goes on. */
        static const size_t pairs[][2] = { { 4096, 8192 }, { 4096, sizeof(buf) } };
        for (size_t k = 0; k < 2; k++) {
                for (int r = 0; r < 2; r++) {
                        ck_ok(cube_create(c[r], buf, pairs[k][r], &src[r]));
                        ck_ok(cube_empty(c[r], pairs[k][r], &dst[r]));
                }
                for (int r = 0; r < 2; r++)
                        ck_ok(cube_all_reduce(c[r], &grp, &src[r], &dst[r],
                                              (cube_reduction) { CUBE_ELEM_F32, CUBE_REDUCE_SUM },
                                              CUBE_WAIT_NOW));
                for (int r = 0; r < 2; r++) {
                        char want[160];
                        snprintf(want, sizeof(want), "member cpu%d (rank %d) contributes %zu "
                                 "bytes where this member contributes %zu", 1 - r, 1 - r,
                                 pairs[k][1 - r], pairs[k][r]);
                        e = cube_read(c[r], &dst[r], buf, pairs[k][r]);
                        ck_assert_msg(e && strstr(cube_error_message(e), want), "%zu/%zu: %s",
                                      pairs[k][0], pairs[k][1],
                                      e ? cube_error_message(e) : "none");
                        cube_error_free(e);
                        cube_free(c[r], &src[r]);
                        cube_free(c[r], &dst[r]);
                }
        }
        /* The group goes on. */
        for (int r = 0; r < 2; r++) {
                ck_ok(cube_create(c[r], buf, 4096, &src[r]));
                ck_ok(cube_empty(c[r], 4096, &dst[r]));
        }
        for (int r = 0; r < 2; r++)
                ck_ok(cube_all_reduce(c[r], &grp, &src[r], &dst[r],
                                      (cube_reduction) { CUBE_ELEM_F32, CUBE_REDUCE_SUM },
                                      CUBE_WAIT_NOW));
        for (int r = 0; r < 2; r++)
                ck_ok(cube_read(c[r], &dst[r], buf, 4096));
        disconnect_all(&g, c);
        test_group_stop(&g);
}
END_TEST

/* Members that run different operations at the same place in the order:
 * every destination says how they differ, nothing is written, and the
 * group goes on. */
START_TEST(test_disagreeing_ops)
{
        test_group g;
        cube_client *c[2];
        cube_group grp = { names, 2, NULL };
        cube_handle src[2], dst[2];
        float buf[1024] = {0};
        cube_reduction sum = { CUBE_ELEM_F32, CUBE_REDUCE_SUM };
        cube_reduction mean = { CUBE_ELEM_F32, CUBE_REDUCE_MEAN };
        static const char *const want[3][2] = {
                { "member cpu1 (rank 1) runs broadcast where this member runs all_reduce",
                  "member cpu0 (rank 0) runs all_reduce where this member runs broadcast" },
                { "member cpu1 (rank 1) names rank 1 as the root where this member names rank 0",
                  "member cpu0 (rank 0) names rank 0 as the root where this member names rank 1" },
                { "member cpu1 (rank 1) reduces another way (dtype 2, mean) than this member "
                  "(dtype 2, sum)",
                  "member cpu0 (rank 0) reduces another way (dtype 2, sum) than this member "
                  "(dtype 2, mean)" },
        };

        ck_assert_int_eq(test_group_start(&g, 2, NULL), 0);
        connect_all(&g, c);
        ck_ok(cube_comm_init_all(c, names, 2));
        for (int r = 0; r < 2; r++) {
                ck_ok(cube_create(c[r], buf, sizeof(buf), &src[r]));
                ck_ok(cube_empty(c[r], sizeof(buf), &dst[r]));
        }
        for (int k = 0; k < 3; k++) {
                if (k == 0) {
                        ck_ok(cube_all_reduce(c[0], &grp, &src[0], &dst[0], sum, CUBE_WAIT_NOW));
                        ck_ok(cube_broadcast(c[1], &grp, &src[1], &dst[1], "cpu1",
                                             CUBE_WAIT_NOW));
                } else if (k == 1) {
                        for (int r = 0; r < 2; r++)
                                ck_ok(cube_broadcast(c[r], &grp, &src[r], &dst[r], names[r],
                                                     CUBE_WAIT_NOW));
                } else {
                        ck_ok(cube_all_reduce(c[0], &grp, &src[0], &dst[0], sum, CUBE_WAIT_NOW));
                        ck_ok(cube_all_reduce(c[1], &grp, &src[1], &dst[1], mean, CUBE_WAIT_NOW));
                }
                for (int r = 0; r < 2; r++) {
                        cube_error *e = cube_read(c[r], &dst[r], buf, sizeof(buf));
                        ck_assert_msg(e && strstr(cube_error_message(e), want[k][r]) &&
                                      strstr(cube_error_message(e), "wrote nothing"),
                                      "case %d member %d: %s", k, r,
                                      e ? cube_error_message(e) : "none");
                        cube_error_free(e);
                }
        }
        /* The group goes on. */
        for (int r = 0; r < 2; r++)
                ck_ok(cube_all_reduce(c[r], &grp, &src[r], &dst[r], sum, CUBE_WAIT_NOW));
        for (int r = 0; r < 2; r++)
                ck_ok(cube_read(c[r], &dst[r], buf, sizeof(buf)));
        disconnect_all(&g, c);
        test_group_stop(&g);
}
END_TEST

START_TEST(test_no_transport)
{
        static const char *const args[] = { "--transport", "none", NULL };
        test_group g;
        cube_client *c;
        cube_group grp = { names, 2, NULL };
        cube_handle h;
        cube_error *e;
        uint64_t addr;
        bool can = true;

        ck_assert_int_eq(test_group_start(&g, 1, args), 0);
        ck_ok(cube_connect(g.d[0].socket, "t", &c));
        e = cube_comm_init(c, names, 2);
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_SERVER_NO_DEVICE_TRANSPORT);
        ck_assert_int_eq(cube_error_operation(e), CUBE_COLLECTIVE_COMM_INIT);
        cube_error_free(e);
        /* Before touching any buffer: a handle that names nothing is not looked at. */
        ck_ok(cube_empty(c, 64, &h));
        e = cube_all_reduce(c, &grp, &h, &h, (cube_reduction) { CUBE_ELEM_F32, CUBE_REDUCE_SUM },
                            CUBE_WAIT_NOW);
        ck_assert_int_eq(cube_error_operation(e), (e ? CUBE_COLLECTIVE_ALL_REDUCE : -2));
        cube_error_free(e);
        e = cube_sync_collective(c);
        ck_assert_int_eq(cube_error_operation(e), (e ? CUBE_COLLECTIVE_SYNC_COLLECTIVE : -2));
        cube_error_free(e);
        ck_ok(cube_can_access_peer(c, "cpu1", &can));
        ck_assert(!can);
        e = cube_peer_address(c, &h, &addr);
        ck_assert_int_eq(cube_error_operation(e), (e ? CUBE_COLLECTIVE_PEER_ACCESS : -2));
        cube_error_free(e);
        cube_disconnect(c);
        test_group_stop(&g);
}
END_TEST

/* ---------------------------------------------------------------------------
 * A stop is clean whatever the groups wait for
 * ------------------------------------------------------------------------- */

/* How many cube-device-* directories dir holds: the CPU device's runtime
 * directories, made under the daemon's TMPDIR. */
static int runtime_dirs(const char *dir)
{
        DIR *d = opendir(dir);
        struct dirent *de;
        int n = 0;

        ck_assert_ptr_nonnull(d);
        while ((de = readdir(d)))
                n += strncmp(de->d_name, "cube-device-", 12) == 0;
        closedir(d);
        return n;
}

/* Starts one daemon whose TMPDIR is tmp. */
static void start_in(test_group *g, const char *tmp, const char *const *args)
{
        const char *old = getenv("TMPDIR");
        char *saved = old ? strdup(old) : NULL;

        setenv("TMPDIR", tmp, 1);
        ck_assert_int_eq(test_group_start(g, 1, args), 0);
        if (saved)
                setenv("TMPDIR", saved, 1);
        else
                unsetenv("TMPDIR");
        free(saved);
}

/* SIGTERM, and the exit status once it exits (-1 past timeout_ms). */
static int terminate(test_daemon *d, long timeout_ms, long *ret_took)
{
        long t0 = test_now_ms();
        int status = 0;

        kill(d->pid, SIGTERM);
        while (waitpid(d->pid, &status, WNOHANG) != d->pid) {
                if (test_now_ms() - t0 > timeout_ms) {
                        kill(d->pid, SIGKILL);
                        waitpid(d->pid, NULL, 0);
                        d->pid = 0;
                        return -1;
                }
                usleep(5000);
        }
        *ret_took = test_now_ms() - t0;
        d->pid = 0;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

typedef struct waiting_init {
        cube_client *c;
        cube_error *e;
} waiting_init;

static void *init_with_absent_member(void *arg)
{
        static const char *const members[] = { "cpu0", "cpu7" };
        waiting_init *w = arg;

        w->e = cube_comm_init(w->c, members, 2);
        return NULL;
}

/* A comm_init waiting for a member that never comes, longer than the drain
 * timeout: SIGTERM still stops cubed cleanly within the drain, the waiting
 * member learns its group failed, and the device's runtime directory goes. */
START_TEST(test_stop_with_a_pending_comm_init)
{
        static const char *const args[] = { "--drain-timeout", "4", "--collective-timeout",
                                            "60000", NULL };
        char tmp[] = "/tmp/cube-tmpdir-XXXXXX";
        waiting_init w = { 0 };
        pthread_t t;
        test_group g;
        long took = 0;
        int rc;

        ck_assert_ptr_nonnull(mkdtemp(tmp));
        start_in(&g, tmp, args);
        ck_assert_int_eq(runtime_dirs(tmp), 1);
        ck_ok(cube_connect(g.d[0].socket, "waits", &w.c));
        ck_assert_int_eq(pthread_create(&t, NULL, init_with_absent_member, &w), 0);
        usleep(500 * 1000);
        rc = terminate(&g.d[0], 4000 + 3000, &took);
        pthread_join(t, NULL);
        ck_assert_msg(rc == 0, "cubed exited %d after SIGTERM with a pending comm_init", rc);
        ck_assert_msg(took < 4000, "the stop took %ld ms, past the drain timeout", took);
        ck_assert_msg(w.e != NULL, "the pending comm_init succeeded");
        ck_assert_msg(strstr(cube_error_message(w.e), "stopping"), "the member was not told "
                      "why: %s", cube_error_message(w.e));
        cube_error_free(w.e);
        cube_disconnect(w.c);
        ck_assert_msg(runtime_dirs(tmp) == 0, "the device's runtime directory outlived cubed");
        test_group_stop(&g);
        ck_assert_int_eq(rmdir(tmp), 0);
}
END_TEST

/* SIGKILL leaves the device's runtime directory; the next start removes it,
 * and leaves the one of a daemon still running. */
START_TEST(test_start_removes_what_a_killed_daemon_left)
{
        char tmp[] = "/tmp/cube-tmpdir-XXXXXX";
        test_group killed, live, next;
        long took = 0;

        ck_assert_ptr_nonnull(mkdtemp(tmp));
        start_in(&killed, tmp, NULL);
        start_in(&live, tmp, NULL);
        ck_assert_int_eq(runtime_dirs(tmp), 2);
        kill(killed.d[0].pid, SIGKILL);
        waitpid(killed.d[0].pid, NULL, 0);
        killed.d[0].pid = 0;
        /* Its device process follows it (PR_SET_PDEATHSIG). */
        usleep(200 * 1000);
        ck_assert_int_eq(runtime_dirs(tmp), 2);
        start_in(&next, tmp, NULL);
        ck_assert_msg(runtime_dirs(tmp) == 2, "%d runtime directories: the killed daemon's "
                      "is still there, or the live one's was taken", runtime_dirs(tmp));
        ck_assert_int_eq(terminate(&next.d[0], 10000, &took), 0);
        ck_assert_int_eq(terminate(&live.d[0], 10000, &took), 0);
        ck_assert_int_eq(runtime_dirs(tmp), 0);
        test_group_stop(&next);
        test_group_stop(&live);
        test_group_stop(&killed);
        ck_assert_int_eq(rmdir(tmp), 0);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("comms");
        TCase *tc = tcase_create("comms");

        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, test_two_one_process);
        tcase_add_test(tc, test_four_one_process);
        tcase_add_test(tc, test_process_per_rank);
        tcase_add_test(tc, test_tainted_source);
        tcase_add_test(tc, test_member_killed);
        tcase_add_test(tc, test_member_client_killed);
        tcase_add_test(tc, test_silent_member_named);
        tcase_add_test(tc, test_silent_member_named_by_id);
        tcase_add_test(tc, test_stopped_member_named);
        tcase_add_test(tc, test_sizes);
        tcase_add_test(tc, test_disagreeing_ops);
        tcase_add_test(tc, test_no_transport);
        tcase_add_test(tc, test_stop_with_a_pending_comm_init);
        tcase_add_test(tc, test_start_removes_what_a_killed_daemon_left);
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
        return failed ? 1 : 0;
}

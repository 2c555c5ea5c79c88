/*
 * test-graphs.c - profiling windows and graph capture end to end, against
 * the real cubed through the real libcubeclient: what a window measures and
 * when it refuses to, and the capture lifecycle, its window's rules, replay
 * and what failures do to it.
 *
 * Every test starts its own daemon with --enable-fault-injection and stops
 * it with SIGTERM, which must exit 0.
 */
#include <check.h>
#include <stdbool.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define N 256u                                  /* u32 elements in a buffer */
#define BYTES ((uint64_t) N * sizeof(uint32_t))
#define SPIN_1X 12000000u                       /* iterations: about 5 ms of device time */

static void start_daemon(const char *const *more)
{
        const char *args[8] = { "--enable-fault-injection" };
        size_t n = 1;

        for (; more && *more && n < 7; more++)
                args[n++] = *more;
        args[n] = NULL;
        ck_assert_int_eq(test_daemon_start(&D, args), 0);
}

/* Counts a volatile to scalar 0 and leaves the count in out[0]: device time
 * that grows with the scalar, and no sleep a scheduler could stretch. */
static const char spin_source[] =
        "KERNEL void spin(uint32_t *out, INFO)\n"
        "{\n"
        "        volatile uint32_t n = 0;\n"
        "        uint32_t iters = SCALAR(uint32_t, 0, 0);\n"
        "\n"
        "        for (uint32_t i = 0; i < iters; i++)\n"
        "                n = n + 1u;\n"
        "        out[0] = n;\n"
        "}\n";

/* acc[i] = acc[i] * 3 + k: the order of the steps shows in the result. */
static const char step_source[] =
        "KERNEL void step(uint32_t *acc, INFO)\n"
        "{\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "\n"
        "        if (i < BUFFER_LEN(0))\n"
        "                acc[i] = acc[i] * 3u + SCALAR(uint32_t, 0, 0) + (uint32_t) i;\n"
        "}\n";

static cube_launch over(uint64_t k, const cube_handle *bufs, const cube_buffer_io *io, size_t n)
{
        return (cube_launch) {
                .kernel = k, .cube_count = { N / 64, 1, 1 }, .cube_dim = { 64, 1, 1 },
                .buffers = bufs, .io = io, .n_buffers = n,
        };
}

static void spin(cube_client *c, uint64_t k, const cube_handle *out, uint32_t iters)
{
        cube_launch l = { .kernel = k, .cube_count = { 1, 1, 1 }, .cube_dim = { 1, 1, 1 },
                          .buffers = out, .n_buffers = 1 };

        test_launch_u32(c, l, &iters, 1);
}

/* A launch the device turns down before compiling: too many units. */
static void launch_refused(cube_client *c, uint64_t k, const cube_handle *out)
{
        const cube_device_properties *p = cube_client_properties(c);
        cube_launch l = { .kernel = k, .cube_count = { 1, 1, 1 },
                          .cube_dim = { 1, 1, p->max_cube_dim[2] + 1 },
                          .buffers = out, .n_buffers = 1 };
        uint32_t iters = 1;

        test_launch_u32(c, l, &iters, 1);
}

static uint64_t measure(cube_client *c, uint64_t token)
{
        cube_profile_duration d;

        ck_ok(cube_end_profile(c, token, &d));
        ck_assert_uint_gt(d.timed, 0);
        return d.device_ns;
}

static void sleep_ms(long ms)
{
        struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };

        while (nanosleep(&t, &t) != 0)
                ;
}

static cube_error *reason_has(cube_error *e, const char *what)
{
        ck_assert_ptr_nonnull(e);
        ck_assert_msg(strstr(cube_error_message(e), what) != NULL, "'%s' not in: %s", what,
                      cube_error_message(e));
        return e;
}

/* ---------------------------------------------------------------------------
 * Profiling
 * ------------------------------------------------------------------------- */

/* Windows nest and overlap; each measures exactly its own launches, and a
 * host sleep inside one is not device time. */
START_TEST(windows_nest_and_overlap_and_measure_only_their_work)
{
        cube_client *c = test_connect(D.socket, "profile");
        uint64_t k = test_kernel(c, spin_source, "spin");
        uint64_t outer, a, b;
        cube_handle out;

        ck_ok(cube_empty(c, 64, &out));
        spin(c, k, &out, 1000);         /* compiled before any window */
        ck_ok(cube_sync(c, NULL, 0));

        ck_ok(cube_start_profile(c, &outer));
        ck_ok(cube_start_profile(c, &a));
        spin(c, k, &out, SPIN_1X);
        ck_ok(cube_start_profile(c, &b));       /* overlaps a */
        spin(c, k, &out, SPIN_1X);
        uint64_t ta = measure(c, a);            /* two launches */
        sleep_ms(60);                           /* host time inside outer and b */
        spin(c, k, &out, SPIN_1X);
        uint64_t tb = measure(c, b);            /* two launches */
        uint64_t to = measure(c, outer);        /* three launches */

        ck_assert_msg(ta != tb || ta > 0, "windows measured nothing");
        ck_assert_msg(to > ta && to > tb, "outer %" PRIu64 " ns <= inner %" PRIu64 "/%" PRIu64,
                      to, ta, tb);
        /* Three launches against two: the sleep did not count. */
        ck_assert_msg(to < ta + tb, "outer %" PRIu64 " ns is not the three launches (a %" PRIu64
                      ", b %" PRIu64 "): host time counted?", to, ta, tb);
        test_expect_kind(cube_end_profile(c, a, NULL), CUBE_PROFILE_NOT_REGISTERED,
                         "ending a window twice");
        cube_disconnect(c);
}
END_TEST

/* Nothing timed: NotMeasured, never a zero duration. */
START_TEST(an_empty_or_host_only_window_is_not_measured)
{
        cube_client *c = test_connect(D.socket, "empty");
        uint64_t t, k = test_kernel(c, spin_source, "spin");
        uint32_t data[N] = {0};
        cube_handle h;

        ck_ok(cube_start_profile(c, &t));
        test_expect_kind(cube_end_profile(c, t, NULL), CUBE_PROFILE_NOT_MEASURED, "empty window");

        ck_ok(cube_start_profile(c, &t));
        ck_ok(cube_create(c, data, BYTES, &h));         /* host work and a copy */
        ck_ok(cube_write(c, &h, data, BYTES));
        sleep_ms(20);
        test_expect_kind(cube_end_profile(c, t, NULL), CUBE_PROFILE_NOT_MEASURED,
                         "window of host work only");

        /* At launch, with no launch: nothing opened it. */
        ck_ok(cube_start_profile_at_launch(c, &t));
        ck_ok(cube_write(c, &h, data, BYTES));
        test_expect_kind(cube_end_profile(c, t, NULL), CUBE_PROFILE_NOT_MEASURED,
                         "at-launch window with no launch");

        /* At launch, with one: it measures it. */
        ck_ok(cube_start_profile_at_launch(c, &t));
        sleep_ms(20);
        spin(c, k, &h, 1000);
        ck_assert_uint_gt(measure(c, t), 0);
        cube_disconnect(c);
}
END_TEST

/* A failure inside a window invalidates it: refused at enqueue, or failed
 * on the device. */
START_TEST(a_failure_inside_a_window_invalidates_it)
{
        cube_client *c = test_connect(D.socket, "failing");
        uint64_t t, k = test_kernel(c, spin_source, "spin");
        cube_handle out;
        cube_error *e;

        ck_ok(cube_empty(c, 64, &out));
        spin(c, k, &out, 1000);

        ck_ok(cube_start_profile(c, &t));
        spin(c, k, &out, 1000);
        launch_refused(c, k, &out);
        e = cube_end_profile(c, t, NULL);
        ck_assert_ptr_nonnull(e);
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_PROFILE_LAUNCH);
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(e)), CUBE_LAUNCH_TOO_MANY_RESOURCES);
        cube_error_free(e);

        /* out carries the refusal now (spin reads it too): a fresh buffer. */
        ck_ok(cube_empty(c, 64, &out));
        ck_ok(cube_debug_inject(c, CUBE_FAULT_DEVICE_LAUNCH, CUBE_LAUNCH_UNKNOWN, "injected", 0));
        ck_ok(cube_start_profile(c, &t));
        spin(c, k, &out, 1000);
        e = cube_end_profile(c, t, NULL);
        ck_assert_ptr_nonnull(e);
        ck_assert_msg(cube_error_kind_of(e) == CUBE_PROFILE_LAUNCH, "%s", cube_error_message(e));
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(e)), CUBE_LAUNCH_UNKNOWN);
        cube_error_free(e);

        /* A window after the failure measures again. */
        ck_ok(cube_empty(c, 64, &out));
        ck_ok(cube_start_profile(c, &t));
        spin(c, k, &out, 1000);
        ck_assert_uint_gt(measure(c, t), 0);
        cube_disconnect(c);
}
END_TEST

START_TEST(unknown_ended_and_foreign_tokens_are_not_registered)
{
        cube_client *c = test_connect(D.socket, "tokens");
        uint64_t t;

        test_expect_kind(cube_end_profile(c, 12345, NULL), CUBE_PROFILE_NOT_REGISTERED,
                         "unknown token");
        ck_ok(cube_start_profile(c, &t));
        cube_stream_set(77);
        test_expect_kind(cube_end_profile(c, t, NULL), CUBE_PROFILE_NOT_REGISTERED,
                         "token of another stream");
        cube_stream_set(0);
        test_expect_kind(cube_end_profile(c, t, NULL), CUBE_PROFILE_NOT_MEASURED, "its own");
        test_expect_kind(cube_end_profile(c, t, NULL), CUBE_PROFILE_NOT_REGISTERED, "twice");
        cube_disconnect(c);
}
END_TEST

/* Abandon forgets the window at once; cubectl shows it gone. */
START_TEST(abandon_drops_a_window_without_measuring_it)
{
        cube_client *c = test_connect(D.socket, "abandon");
        uint64_t t, k = test_kernel(c, spin_source, "spin");
        cube_capture_info *ci;
        size_t n;
        cube_handle out;

        ck_ok(cube_empty(c, 64, &out));
        ck_ok(cube_start_profile(c, &t));
        spin(c, k, &out, SPIN_1X);
        ck_ok(cube_daemon_captures(c, &ci, &n));
        ck_assert_uint_eq(n, 1);
        ck_assert_str_eq(ci[0].kind, "window");
        ck_assert_uint_eq(ci[0].id, t);
        free(ci);
        ck_ok(cube_abandon_profile(c, t));      /* no wait: the launch still runs */
        ck_ok(cube_daemon_captures(c, &ci, &n));
        ck_assert_uint_eq(n, 0);
        free(ci);
        test_expect_kind(cube_end_profile(c, t, NULL), CUBE_PROFILE_NOT_REGISTERED,
                         "ending an abandoned window");
        ck_ok(cube_sync(c, &out, 1));
        cube_disconnect(c);
}
END_TEST

/* A kernel's measured time grows with its work: 4x the iterations measures
 * 3x to 5x. The device's clock runs on while a neighbour preempts it, which
 * only ever adds time, so the fastest of fifteen runs of each size is what is
 * compared; the runs alternate, so both sizes see the same load. Both sizes
 * are short (about 0.5 and 2 ms), so that on a loaded machine some run of
 * each fits in one time slice: a 13 ms run there never did, and read 6-8x. */
START_TEST(measured_time_grows_with_the_work)
{
        cube_client *c = test_connect(D.socket, "scale");
        uint64_t k = test_kernel(c, spin_source, "spin"), t, best[2] = { UINT64_MAX, UINT64_MAX };
        cube_handle out;

        ck_ok(cube_empty(c, 64, &out));
        spin(c, k, &out, 1000);
        ck_ok(cube_sync(c, NULL, 0));
        for (int round = 0; round < 15; round++)
                for (int i = 0; i < 2; i++) {
                        ck_ok(cube_start_profile_at_launch(c, &t));
                        spin(c, k, &out, SPIN_1X / 6 * (i ? 4 : 1));
                        uint64_t ns = measure(c, t);
                        if (ns < best[i])
                                best[i] = ns;
                }
        double ratio = (double) best[1] / (double) best[0];
        fprintf(stderr, "spin 4x/1x: %.2fx (fastest of 15: %" PRIu64 " ns, %" PRIu64 " ns)\n",
                ratio, best[0], best[1]);
        ck_assert_msg(ratio >= 3.0 && ratio <= 5.0, "4x the work measured %.2fx", ratio);
        cube_disconnect(c);
}
END_TEST

/* Open windows of a session that disconnects go with it. */
START_TEST(a_session_leaving_windows_open_leaks_nothing)
{
        cube_client *c = test_connect(D.socket, "leaver"), *w;
        uint64_t k = test_kernel(c, spin_source, "spin"), t;
        cube_capture_info *ci;
        size_t n;
        cube_handle out;

        ck_ok(cube_empty(c, 64, &out));
        for (int i = 0; i < 50; i++) {
                ck_ok(cube_start_profile(c, &t));
                spin(c, k, &out, 1000);
        }
        cube_disconnect(c);
        ck_assert(wait_memory_in_use(D.socket, 0, 10000));
        w = test_connect(D.socket, "watcher");
        ck_ok(cube_daemon_captures(w, &ci, &n));
        ck_assert_uint_eq(n, 0);
        free(ci);
        cube_disconnect(w);
}
END_TEST

START_TEST(windows_are_limited_per_session)
{
        cube_client *c = test_connect(D.socket, "greedy");
        uint64_t t[4];

        for (int i = 0; i < 3; i++)
                ck_ok(cube_start_profile(c, &t[i]));
        test_expect_kind(cube_start_profile(c, &t[3]), CUBE_SERVER_VALIDATION,
                         "a window past max-profile-windows");
        ck_ok(cube_abandon_profile(c, t[0]));
        ck_ok(cube_start_profile(c, &t[3]));
        cube_disconnect(c);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Graphs
 * ------------------------------------------------------------------------- */

#define STEPS 100
#define REPLAYS 1000

static uint32_t step_model(uint32_t x, uint32_t k, uint32_t i)
{
        return x * 3u + k + i;
}

static void steps(cube_client *c, uint64_t k, const cube_handle *acc)
{
        static const cube_buffer_io rw = CUBE_BUFFER_READ_WRITE;

        for (uint32_t j = 0; j < STEPS; j++) {
                uint32_t scalar = j * 7u + 1u;
                test_launch_u32(c, over(k, acc, &rw, 1), &scalar, 1);
        }
}

static uint64_t capture_steps(cube_client *c, uint64_t k, const cube_handle *acc)
{
        uint64_t g;

        ck_ok(cube_graph_prepare(c));
        steps(c, k, acc);                       /* the warm-up */
        ck_ok(cube_begin_capture(c));
        steps(c, k, acc);
        ck_ok(cube_end_capture(c, &g));
        return g;
}

/* 100 recorded launches replayed 1000 times give what running them 1000
 * times gives. */
START_TEST(a_replayed_sequence_matches_running_it)
{
        cube_client *c = test_connect(D.socket, "replay");
        uint64_t k = test_kernel(c, step_source, "step"), g;
        uint32_t zero[N] = {0}, got[N], ran[N], want[N];
        cube_handle acc, eager;

        ck_ok(cube_create(c, zero, BYTES, &acc));
        ck_ok(cube_create(c, zero, BYTES, &eager));
        g = capture_steps(c, k, &acc);
        ck_ok(cube_write(c, &acc, zero, BYTES));
        for (int r = 0; r < REPLAYS / 2; r++)
                ck_ok(cube_replay(c, g));
        ck_ok(cube_replay_times(c, g, REPLAYS / 2));    /* the rest with one request */
        ck_ok(cube_read(c, &acc, got, BYTES));
        for (int r = 0; r < REPLAYS; r++)
                steps(c, k, &eager);
        ck_ok(cube_read(c, &eager, ran, BYTES));
        for (uint32_t i = 0; i < N; i++) {
                uint32_t x = 0;
                for (int r = 0; r < REPLAYS; r++)
                        for (uint32_t j = 0; j < STEPS; j++)
                                x = step_model(x, j * 7u + 1u, i);
                want[i] = x;
        }
        ck_assert_mem_eq(ran, want, BYTES);
        ck_assert_mem_eq(got, want, BYTES);
        cube_graph_destroy(c, g);
        cube_disconnect(c);
}
END_TEST

/* The state captures gives graph id. */
static void expect_graph_state(cube_client *c, uint64_t id, const char *state)
{
        cube_capture_info *ci;
        size_t n;
        bool seen = false;

        ck_ok(cube_daemon_captures(c, &ci, &n));
        for (size_t i = 0; i < n; i++)
                if (strcmp(ci[i].kind, "graph") == 0 && ci[i].id == id) {
                        ck_assert_str_eq(ci[i].state, state);
                        seen = true;
                }
        free(ci);
        ck_assert_msg(seen, "graph %" PRIu64 " is not listed", id);
}

/* The device keeps a graph of up to 4096 launches; a larger one replays
 * through its launches, with the same results. */
START_TEST(a_graph_larger_than_the_device_keeps_replays_through_its_launches)
{
        static const cube_buffer_io rw = CUBE_BUFFER_READ_WRITE;
        enum { BIG = 4097 };
        cube_client *c = test_connect(D.socket, "large");
        uint64_t k = test_kernel(c, step_source, "step"), kept, big;
        uint32_t zero[N] = {0}, got[N];
        cube_handle acc;

        ck_ok(cube_create(c, zero, BYTES, &acc));
        kept = capture_steps(c, k, &acc);
        expect_graph_state(c, kept, "kept");
        ck_ok(cube_graph_prepare(c));
        ck_ok(cube_begin_capture(c));
        for (uint32_t j = 0; j < BIG; j++) {
                uint32_t scalar = j * 7u + 1u;
                test_launch_u32(c, over(k, &acc, &rw, 1), &scalar, 1);
        }
        ck_ok(cube_end_capture(c, &big));
        expect_graph_state(c, big, "ready");
        ck_ok(cube_write(c, &acc, zero, BYTES));
        ck_ok(cube_replay_times(c, big, 2));
        ck_ok(cube_replay(c, kept));
        ck_ok(cube_read(c, &acc, got, BYTES));
        for (uint32_t i = 0; i < N; i++) {
                uint32_t x = 0;
                for (int r = 0; r < 2; r++)
                        for (uint32_t j = 0; j < BIG; j++)
                                x = step_model(x, j * 7u + 1u, i);
                for (uint32_t j = 0; j < STEPS; j++)
                        x = step_model(x, j * 7u + 1u, i);
                ck_assert_uint_eq(got[i], x);
        }
        cube_graph_destroy(c, big);
        cube_graph_destroy(c, kept);
        cube_disconnect(c);
}
END_TEST

static const char mix_source[] =
        "KERNEL void mix(const uint32_t *a, const uint32_t *b, uint32_t *out, INFO)\n"
        "{\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "\n"
        "        if (i < BUFFER_LEN(2))\n"
        "                out[i] = a[i] + 2u * b[i];\n"
        "}\n";

/* Units of a cube meet in SHARED memory: the device runs it as a
 * work-group, not one item walking the cube. */
static const char cube_sum_source[] =
        "KERNEL void cube_sum(const uint32_t *in, uint32_t *sums, INFO)\n"
        "{\n"
        "        SHARED uint32_t part[64];\n"
        "\n"
        "        part[UNIT_POS] = in[ABSOLUTE_POS];\n"
        "        sync_cube();\n"
        "        if (UNIT_POS == 0) {\n"
        "                uint32_t s = 0;\n"
        "                for (uint32_t i = 0; i < CUBE_DIM; i++)\n"
        "                        s += part[i];\n"
        "                sums[CUBE_POS] += s;\n"
        "        }\n"
        "}\n";

/* The launches of a kept graph take their buffers as the ring's do: a
 * kernel whose units share nothing, of one buffer and of three, and one
 * whose units meet at a barrier, each replay after the last giving what
 * running them in order gives. */
START_TEST(a_kept_graph_gives_each_kind_of_kernel_its_buffers)
{
        static const cube_buffer_io rw = CUBE_BUFFER_READ_WRITE;
        enum { CUBES = N / 64, ROUNDS = 5 };
        cube_client *c = test_connect(D.socket, "kinds");
        uint64_t ks = test_kernel(c, step_source, "step");
        uint64_t km = test_kernel(c, mix_source, "mix");
        uint64_t kc = test_kernel(c, cube_sum_source, "cube_sum"), g;
        uint32_t zero[N] = {0}, ones[N], acc_got[N], mixed_got[N], sums_got[CUBES];
        uint32_t acc_x[N] = {0}, mixed_x[N], sums_x[CUBES] = {0};
        cube_handle acc, b, mixed, sums;

        for (uint32_t i = 0; i < N; i++)
                ones[i] = i % 5u + 1u;
        ck_ok(cube_create(c, zero, BYTES, &acc));
        ck_ok(cube_create(c, ones, BYTES, &b));
        ck_ok(cube_create(c, zero, BYTES, &mixed));
        ck_ok(cube_create(c, zero, CUBES * sizeof(uint32_t), &sums));
        const cube_handle mix_bufs[3] = { acc, b, mixed }, sum_bufs[2] = { mixed, sums };
        uint32_t scalar = 3;
        ck_ok(cube_graph_prepare(c));
        for (int warm = 0; warm < 2; warm++) {
                if (warm)
                        ck_ok(cube_begin_capture(c));
                test_launch_u32(c, over(ks, &acc, &rw, 1), &scalar, 1);
                test_launch_u32(c, over(km, mix_bufs, NULL, 3), NULL, 0);
                test_launch_u32(c, over(kc, sum_bufs, NULL, 2), NULL, 0);
        }
        ck_ok(cube_end_capture(c, &g));
        expect_graph_state(c, g, "kept");
        ck_ok(cube_write(c, &acc, zero, BYTES));
        ck_ok(cube_write(c, &sums, zero, CUBES * sizeof(uint32_t)));
        ck_ok(cube_replay_times(c, g, ROUNDS));
        ck_ok(cube_read(c, &acc, acc_got, BYTES));
        ck_ok(cube_read(c, &mixed, mixed_got, BYTES));
        ck_ok(cube_read(c, &sums, sums_got, CUBES * sizeof(uint32_t)));
        for (int r = 0; r < ROUNDS; r++) {
                for (uint32_t i = 0; i < N; i++) {
                        acc_x[i] = step_model(acc_x[i], scalar, i);
                        mixed_x[i] = acc_x[i] + 2u * ones[i];
                }
                for (uint32_t q = 0; q < CUBES; q++)
                        for (uint32_t i = 0; i < 64; i++)
                                sums_x[q] += mixed_x[q * 64 + i];
        }
        ck_assert_mem_eq(acc_got, acc_x, BYTES);
        ck_assert_mem_eq(mixed_got, mixed_x, BYTES);
        ck_assert_mem_eq(sums_got, sums_x, CUBES * sizeof(uint32_t));
        cube_graph_destroy(c, g);
        cube_disconnect(c);
}
END_TEST

static double seconds_since(long t0_ms)
{
        return (double) (test_now_ms() - t0_ms) / 1000.0;
}

/* The kernel timeout watches each launch of a replay from the launch's own
 * start: a replay longer than the timeout runs to its end, and a launch in
 * one that never ends is stopped, the poison naming its kernel, its place
 * and its graph. */
START_TEST(the_kernel_timeout_watches_each_launch_of_a_replay)
{
        static const char *const args[] = { "--kernel-timeout", "3", NULL };
        test_daemon d;
        cube_client *c;
        cube_handle out;
        uint64_t k, forever, g, g2;
        cube_error *e;
        long t0;

        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        c = test_connect(d.socket, "watched");
        k = test_kernel(c, spin_source, "spin");
        forever = test_kernel(c, test_forever_source, "forever");
        ck_ok(cube_empty(c, 64, &out));
        /* Launches of about 0.8 s each, six of them: 4.8 s in all. The
         * faster of two timings sets the count: one slowed by a neighbour
         * would make the replay too short to pass the timeout. */
        spin(c, k, &out, 10);
        ck_ok(cube_sync(c, NULL, 0));
        double per = 1e9;
        for (int i = 0; i < 2; i++) {
                t0 = test_now_ms();
                spin(c, k, &out, 40 * SPIN_1X);
                ck_ok(cube_sync(c, NULL, 0));
                double p = seconds_since(t0) / (40.0 * SPIN_1X);
                per = p < per ? p : per;
        }
        double want = 0.8 / per;
        uint32_t iters = want > 4e9 ? 4000000000u : (uint32_t) want;
        ck_ok(cube_graph_prepare(c));
        ck_ok(cube_begin_capture(c));
        for (int i = 0; i < 6; i++)
                spin(c, k, &out, iters);
        ck_ok(cube_end_capture(c, &g));
        expect_graph_state(c, g, "kept");
        t0 = test_now_ms();
        ck_ok(cube_replay(c, g));
        ck_ok(cube_sync(c, NULL, 0));
        ck_assert_msg(seconds_since(t0) > 3.2, "the replay took %.2f s, not past the timeout",
                      seconds_since(t0));
        ck_assert(!status_of(d.socket).poisoned);

        cube_launch l = { .kernel = forever, .cube_count = { 1, 1, 1 },
                          .cube_dim = { 1, 1, 1 }, .buffers = &out, .n_buffers = 1 };
        ck_ok(cube_graph_prepare(c));
        ck_ok(cube_begin_capture(c));
        spin(c, k, &out, 10);
        test_launch_u32(c, l, NULL, 0);
        ck_ok(cube_end_capture(c, &g2));
        t0 = test_now_ms();
        ck_ok(cube_replay(c, g2));
        e = cube_sync(c, NULL, 0);
        ck_assert_msg(e && cube_error_is_device_poisoned(e), "not poisoned: %s",
                      e ? cube_error_message(e) : "(succeeded)");
        const char *why = cube_error_reason(cube_error_source(e));
        ck_assert_msg(why && strstr(why, "kernel 'forever' (launch 2 of graph 2)") &&
                      strstr(why, "kernel timeout"), "the poison does not name the launch: %s",
                      why ? why : cube_error_message(e));
        ck_assert_msg(seconds_since(t0) <= 3.0 + 1.0 + 1.0, "poisoned after %.2f s",
                      seconds_since(t0));
        cube_error_free(e);
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
}
END_TEST

/* Inside the window: read, sync, profile and memory_cleanup on the stream
 * are refused with graph_state, and the capture goes on. */
START_TEST(calls_that_wait_are_refused_inside_a_capture)
{
        cube_client *c = test_connect(D.socket, "refusals");
        uint64_t k = test_kernel(c, step_source, "step"), g, t;
        uint32_t zero[N] = {0}, got[N];
        cube_handle acc;

        ck_ok(cube_create(c, zero, BYTES, &acc));
        ck_ok(cube_start_profile(c, &t));       /* opened before: refused to end inside */
        ck_ok(cube_graph_prepare(c));
        steps(c, k, &acc);
        ck_ok(cube_begin_capture(c));
        steps(c, k, &acc);
        cube_error_free(reason_has(cube_read(c, &acc, got, BYTES), "read: stream"));
        cube_error_free(reason_has(cube_sync(c, NULL, 0), "sync: stream"));
        cube_error_free(reason_has(cube_memory_cleanup(c), "memory_cleanup: stream"));
        cube_error_free(reason_has(cube_start_profile(c, &t), "start_profile: stream"));
        cube_error *e = cube_end_profile(c, t, NULL);
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_PROFILE_SERVER);
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(e)), CUBE_SERVER_GENERIC);
        cube_error_free(reason_has(e, "end_profile: stream"));
        ck_ok(cube_check(c, &acc, 1));          /* instant: allowed */
        ck_ok(cube_end_capture(c, &g));
        ck_ok(cube_sync(c, NULL, 0));
        ck_assert_uint_gt(measure(c, t), 0);    /* the window survived the refusal */
        cube_disconnect(c);
}
END_TEST

/* A new page inside the window is PageUpdateForbidden; the warm-up leaves
 * the page there, and then there is no error. */
START_TEST(a_new_page_inside_a_capture_is_forbidden_unless_warmed_up)
{
        cube_client *c = test_connect(D.socket, "pages");
        uint64_t k = test_kernel(c, test_affine_source, "affine"), g;
        uint32_t in[N], got[N];
        cube_handle bufs[2], warm;
        cube_error *e;

        for (uint32_t i = 0; i < N; i++)
                in[i] = i;
        ck_ok(cube_create(c, in, BYTES, &bufs[0]));
        ck_ok(cube_sync(c, NULL, 0));

        /* Warm-up: the output's size once, freed again. */
        ck_ok(cube_graph_prepare(c));
        ck_ok(cube_empty(c, 1u << 20, &warm));
        ck_ok(cube_free(c, &warm));
        ck_ok(cube_begin_capture(c));
        ck_ok(cube_empty(c, 1u << 20, &bufs[1]));       /* reuses the warm page */
        ck_ok(cube_check(c, &bufs[1], 1));
        cube_handle big;
        ck_ok(cube_empty(c, 3u << 20, &big));           /* no page of that size */
        e = cube_check(c, &big, 1);
        ck_assert_ptr_nonnull(e);
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_SERVER_SEVERAL);
        const cube_error *root = cube_error_source(cube_error_at(e, 0));
        ck_assert_int_eq(cube_error_kind_of(root), CUBE_SERVER_IO);
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(root)), CUBE_IO_PAGE_UPDATE_FORBIDDEN);
        cube_error_free(reason_has(e, "warm up"));
        cube_handle view[2] = { bufs[0], cube_handle_slice(&bufs[1], 0, (1u << 20) - BYTES) };
        test_launch_u32(c, over(k, view, test_affine_io, 2), NULL, 0);
        ck_ok(cube_end_capture(c, &g));
        ck_ok(cube_replay(c, g));
        ck_ok(cube_read(c, &view[1], got, BYTES));
        for (uint32_t i = 0; i < N; i++)
                ck_assert_uint_eq(got[i], i * 5u + 7u);
        cube_disconnect(c);
}
END_TEST

/* A failure during the window dooms the capture: end_capture reports it,
 * and the outputs carry it. */
START_TEST(a_failure_during_the_window_dooms_the_capture)
{
        cube_client *c = test_connect(D.socket, "doomed");
        uint64_t k = test_kernel(c, test_affine_source, "affine"), ks = test_kernel(c, spin_source, "spin");
        uint64_t g;
        uint32_t in[N] = {0};
        cube_handle bufs[2], out;
        cube_error *e;

        ck_ok(cube_create(c, in, BYTES, &bufs[0]));
        ck_ok(cube_empty(c, BYTES, &bufs[1]));
        ck_ok(cube_empty(c, 64, &out));
        ck_ok(cube_graph_prepare(c));
        test_launch_u32(c, over(k, bufs, test_affine_io, 2), NULL, 0);
        ck_ok(cube_begin_capture(c));
        test_launch_u32(c, over(k, bufs, test_affine_io, 2), NULL, 0);
        launch_refused(c, ks, &out);
        e = cube_end_capture(c, &g);
        ck_assert_ptr_nonnull(e);
        ck_assert_msg(cube_error_kind_of(e) == CUBE_SERVER_LAUNCH, "%s", cube_error_message(e));
        cube_error_free(e);
        /* The graph's write set carries it: the capture never wrote it. */
        e = cube_check(c, &bufs[1], 1);
        ck_assert_ptr_nonnull(e);
        cube_error_free(e);
        /* The stream is free again: a new capture may begin. */
        test_expect_kind(cube_begin_capture(c), CUBE_SERVER_GENERIC, "begin after a doomed end");
        cube_disconnect(c);
}
END_TEST

/* Doomed and abandoned at once: Several, with both. Abandoned alone: the
 * graph_state of it. */
START_TEST(doomed_and_abandoned_is_several)
{
        cube_client *c = test_connect(D.socket, "abandoned");
        uint64_t ks = test_kernel(c, spin_source, "spin"), g;
        cube_handle out, other;
        cube_error *e;

        ck_ok(cube_empty(c, 64, &out));
        ck_ok(cube_empty(c, 64, &other));
        spin(c, ks, &out, 10);
        ck_ok(cube_sync(c, NULL, 0));
        ck_ok(cube_graph_prepare(c));
        ck_ok(cube_begin_capture(c));
        for (int i = 0; i < 5; i++)             /* max-graph-launches is 4 */
                spin(c, ks, &out, 10);
        e = cube_end_capture(c, &g);
        cube_error_free(reason_has(e, "max-graph-launches"));

        /* The abandoned capture's write set carries its failure: repair it. */
        uint32_t zero[16] = {0};
        ck_ok(cube_write(c, &out, zero, sizeof(zero)));
        ck_ok(cube_graph_prepare(c));
        ck_ok(cube_begin_capture(c));
        launch_refused(c, ks, &other);          /* dooms; out stays clean */
        for (int i = 0; i < 5; i++)
                spin(c, ks, &out, 10);
        e = cube_end_capture(c, &g);
        ck_assert_ptr_nonnull(e);
        ck_assert_msg(cube_error_kind_of(e) == CUBE_SERVER_SEVERAL, "%s", cube_error_message(e));
        ck_assert_uint_eq(cube_error_count(e), 2);
        ck_assert_int_eq(cube_error_kind_of(cube_error_at(e, 0)), CUBE_SERVER_LAUNCH);
        ck_assert_int_eq(cube_error_kind_of(cube_error_at(e, 1)), CUBE_SERVER_GENERIC);
        cube_error_free(e);
        cube_disconnect(c);
}
END_TEST

/* A failed replay leaves its write set carrying the failure, whether the
 * enqueue failed or the device did; a replay that lands repairs it. */
/* bufs[0] made of in and an empty bufs[1], and a graph of one affine launch
 * over them, captured after a warm-up run and synced. */
static uint64_t capture_affine(cube_client *c, uint64_t k, const uint32_t *in, cube_handle *bufs)
{
        uint64_t g;

        ck_ok(cube_create(c, in, BYTES, &bufs[0]));
        ck_ok(cube_empty(c, BYTES, &bufs[1]));
        ck_ok(cube_graph_prepare(c));
        test_launch_u32(c, over(k, bufs, test_affine_io, 2), NULL, 0);
        ck_ok(cube_begin_capture(c));
        test_launch_u32(c, over(k, bufs, test_affine_io, 2), NULL, 0);
        ck_ok(cube_end_capture(c, &g));
        ck_ok(cube_sync(c, NULL, 0));
        return g;
}

START_TEST(a_failed_replay_taints_its_write_set_until_one_lands)
{
        cube_client *c = test_connect(D.socket, "taint");
        uint64_t k = test_kernel(c, test_affine_source, "affine"), g;
        uint32_t in[N], got[N];
        cube_handle bufs[2];
        cube_error *e;

        for (uint32_t i = 0; i < N; i++)
                in[i] = i;
        g = capture_affine(c, k, in, bufs);
        ck_ok(cube_read(c, &bufs[1], got, BYTES));

        /* On the device: the replay is queued, and fails there. */
        ck_ok(cube_debug_inject(c, CUBE_FAULT_DEVICE_LAUNCH, CUBE_LAUNCH_UNKNOWN, "replay fault", 0));
        ck_ok(cube_replay(c, g));
        e = cube_read(c, &bufs[1], got, BYTES);
        ck_assert_ptr_nonnull(e);
        cube_error_free(reason_has(e, "replay fault"));
        ck_ok(cube_read(c, &bufs[0], got, BYTES));     /* the input is untouched */
        ck_ok(cube_replay(c, g));
        ck_ok(cube_read(c, &bufs[1], got, BYTES));
        for (uint32_t i = 0; i < N; i++)
                ck_assert_uint_eq(got[i], i * 5u + 7u);

        /* At enqueue: the replay answers it, and the write set carries it. */
        ck_ok(cube_debug_inject(c, CUBE_FAULT_LAUNCH, CUBE_LAUNCH_UNKNOWN, "enqueue fault", 0));
        cube_error_free(reason_has(cube_replay(c, g), "enqueue fault"));
        cube_error_free(reason_has(cube_check(c, &bufs[1], 1), "enqueue fault"));
        ck_ok(cube_replay(c, g));
        ck_ok(cube_sync(c, &bufs[1], 1));
        cube_disconnect(c);
}
END_TEST

/* Skipped is an answer a caller gets: a replay whose input carries a
 * failure does not run and answers ServerError::Skipped (its write set
 * claims the failure, whose root a read names), and a profiling window
 * holding it answers ProfileError::Server(Skipped). */
START_TEST(a_replay_of_a_failed_input_answers_skipped)
{
        static const cube_buffer_io into_input[2] = { CUBE_BUFFER_READ_ONLY,
                                                      CUBE_BUFFER_WRITE_ONLY };
        cube_client *c = test_connect(D.socket, "skipped");
        uint64_t k = test_kernel(c, test_affine_source, "affine"), g, t;
        cube_handle bufs[2], backwards[2];
        uint32_t in[N] = { 0 };
        cube_error *e;

        g = capture_affine(c, k, in, bufs);

        /* The graph's input now carries a failure: a launch writing it is
         * refused at enqueue. */
        backwards[0] = bufs[1];
        backwards[1] = bufs[0];
        ck_ok(cube_debug_inject(c, CUBE_FAULT_LAUNCH, CUBE_LAUNCH_UNKNOWN, "input fault", 0));
        test_launch_u32(c, over(k, backwards, into_input, 2), NULL, 0);
        ck_assert_ptr_nonnull(e = cube_check(c, &bufs[0], 1));
        cube_error_free(e);

        ck_ok(cube_start_profile(c, &t));
        e = cube_replay(c, g);
        ck_assert_msg(e && cube_error_kind_of(e) == CUBE_SERVER_SKIPPED, "the replay answered %s",
                      e ? cube_error_message(e) : "nothing");
        cube_error_free(e);
        e = cube_end_profile(c, t, NULL);
        ck_assert_msg(e && cube_error_kind_of(e) == CUBE_PROFILE_SERVER &&
                      cube_error_kind_of(cube_error_source(e)) == CUBE_SERVER_SKIPPED,
                      "the window answered %s", e ? cube_error_message(e) : "nothing");
        cube_error_free(e);
        cube_error_free(reason_has(cube_check(c, &bufs[1], 1), "input fault"));
        cube_disconnect(c);
}
END_TEST

/* A create on a poisoned device is claimed by Io(DevicePoisoned), carrying
 * the poison's reason: a check answers the poison itself, and the failure
 * store holds the create's own report. */
START_TEST(a_create_on_a_poisoned_device_is_io_device_poisoned)
{
        static const char *const args[] = { "--enable-fault-injection", "--poison-policy",
                                             "reinit", "--poison-grace", "60", NULL };
        const cube_error *u = NULL, *io;
        cube_failure_info *v;
        test_daemon d;
        cube_client *c;
        cube_handle h;
        cube_error *e;
        size_t n;

        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        c = test_connect(d.socket, "late");
        ck_ok(cube_debug_inject(c, CUBE_FAULT_POISON, 0, "poisoned before the create", 0));
        ck_ok(cube_empty(c, 4096, &h));
        e = cube_check(c, &h, 1);
        ck_assert_msg(e && cube_error_is_device_poisoned(e), "the create reads as %s",
                      e ? cube_error_message(e) : "fine");
        cube_error_free(e);
        ck_ok(cube_daemon_failures(c, &v, &n));
        for (size_t i = 0; i < n; i++)
                if (v[i].session == cube_client_session(c))
                        u = v[i].report;
        ck_assert_ptr_nonnull(u);
        ck_assert_int_eq(cube_error_kind_of(u), CUBE_SERVER_UNWRITTEN);
        io = cube_error_source(u);
        ck_assert_int_eq(cube_error_kind_of(io), CUBE_SERVER_IO);
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(io)), CUBE_IO_DEVICE_POISONED);
        ck_assert(cube_error_is_device_poisoned(io));
        ck_assert_msg(strstr(cube_error_message(io), "poisoned before the create"), "%s",
                      cube_error_message(io));
        cube_failures_free(v, n);
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
}
END_TEST

/* Lifecycles the reference does not allow answer graph_state naming what
 * was wrong. */
START_TEST(lifecycle_errors_say_what_was_wrong)
{
        cube_client *c = test_connect(D.socket, "lifecycle");
        uint64_t g;

        cube_error_free(reason_has(cube_begin_capture(c), "was not prepared"));
        cube_error_free(reason_has(cube_end_capture(c, &g), "is not recording"));
        ck_ok(cube_graph_prepare(c));
        cube_error_free(reason_has(cube_graph_prepare(c), "already preparing"));
        cube_error_free(reason_has(cube_end_capture(c, &g), "begin_capture starts recording"));
        ck_ok(cube_begin_capture(c));
        cube_error_free(reason_has(cube_begin_capture(c), "already recording"));
        cube_error_free(reason_has(cube_graph_prepare(c), "already recording"));
        ck_ok(cube_end_capture(c, &g));
        cube_error_free(reason_has(cube_replay(c, g + 1), "is unknown"));
        ck_ok(cube_replay(c, g));                       /* empty: nothing to run */
        ck_ok(cube_graph_destroy(c, g));
        cube_error_free(reason_has(cube_replay(c, g), "was destroyed"));
        ck_ok(cube_graph_destroy(c, g));                /* unknown: a no-op */
        ck_ok(cube_sync(c, NULL, 0));
        cube_disconnect(c);
}
END_TEST

/* A daemon whose operator turned graphs off (max-graphs 0) answers as the
 * reference's backend without graph support: graph_prepare is a no-op, and
 * begin_capture, end_capture and replay are graph_capture_unsupported. The
 * stream's launches run as ever. */
START_TEST(graphs_off_answer_graph_capture_unsupported)
{
        static const char *const args[] = { "--max-graphs", "0", NULL };
        const char *unsupported = "graph capture is not supported by this backend";
        uint32_t zero[N] = {0}, got[N];
        test_daemon d;
        cube_client *c;
        cube_handle acc;
        cube_error *e;
        uint64_t k, g = 7;

        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        c = test_connect(d.socket, "no-graphs");
        k = test_kernel(c, step_source, "step");
        ck_ok(cube_create(c, zero, BYTES, &acc));
        ck_ok(cube_graph_prepare(c));
        e = reason_has(cube_begin_capture(c), unsupported);
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_SERVER_GENERIC);
        ck_assert(!cube_error_is_refusal(e));
        cube_error_free(e);
        steps(c, k, &acc);                      /* run, not recorded */
        cube_error_free(reason_has(cube_end_capture(c, &g), unsupported));
        ck_assert_uint_eq(g, 7);
        cube_error_free(reason_has(cube_replay(c, 1), unsupported));
        cube_error_free(reason_has(cube_replay_times(c, 1, 3), unsupported));
        ck_ok(cube_graph_destroy(c, 1));
        ck_ok(cube_read(c, &acc, got, BYTES));
        for (uint32_t i = 0; i < N; i++) {
                uint32_t x = 0;
                for (uint32_t j = 0; j < STEPS; j++)
                        x = step_model(x, j * 7u + 1u, i);
                ck_assert_uint_eq(got[i], x);
        }
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
}
END_TEST

/* graph_destroy while a replay runs: the replay finishes on what the graph
 * kept, and then the graph is gone. */
START_TEST(destroy_during_a_replay_is_safe)
{
        cube_client *c = test_connect(D.socket, "destroy");
        uint64_t k = test_kernel(c, spin_source, "spin"), g;
        cube_handle out;
        uint32_t got[16];
        cube_capture_info *ci;
        size_t n;

        ck_ok(cube_empty(c, 64, &out));
        ck_ok(cube_graph_prepare(c));
        spin(c, k, &out, 10);
        ck_ok(cube_begin_capture(c));
        for (int i = 0; i < 4; i++)
                spin(c, k, &out, SPIN_1X);
        ck_ok(cube_end_capture(c, &g));
        ck_ok(cube_daemon_captures(c, &ci, &n));
        ck_assert_uint_eq(n, 1);
        ck_assert_str_eq(ci[0].kind, "graph");
        ck_assert_uint_eq(ci[0].launches, 4);
        ck_assert_uint_ge(ci[0].pages, 1);
        /* cubectl graphs shows it, with its state (kept by a device that
         * keeps graphs), its launches and pages. */
        char cmd[256], line[512], state[32];
        bool seen = false;
        snprintf(state, sizeof(state), " %s ", ci[0].state);
        free(ci);
        snprintf(cmd, sizeof(cmd), "%s --socket %s graphs", getenv("CUBECTL_BIN"), D.socket);
        FILE *p = popen(cmd, "r");
        ck_assert_ptr_nonnull(p);
        while (fgets(line, sizeof(line), p))
                seen |= strstr(line, "graph ") && strstr(line, state) && strstr(line, " 4 ");
        ck_assert_int_eq(pclose(p), 0);
        ck_assert_msg(seen, "cubectl graphs did not list the graph");
        ck_ok(cube_replay(c, g));
        ck_ok(cube_graph_destroy(c, g));
        ck_ok(cube_free(c, &out));              /* the graph kept it */
        cube_error_free(reason_has(cube_replay(c, g), "was destroyed"));
        ck_ok(cube_sync(c, NULL, 0));
        ck_ok(cube_daemon_captures(c, &ci, &n));
        ck_assert_uint_eq(n, 0);
        free(ci);
        (void) got;
        ck_assert(wait_memory_in_use(D.socket, 0, 10000));
        cube_disconnect(c);
}
END_TEST

/* A session that dies holding graphs (over buffers it freed) frees their
 * pages. */
START_TEST(a_session_dying_with_graphs_frees_their_pages)
{
        cube_client *c = test_connect(D.socket, "holder");
        uint64_t k = test_kernel(c, step_source, "step"), g;
        uint32_t zero[N] = {0};
        cube_handle acc;

        ck_ok(cube_create(c, zero, BYTES, &acc));
        g = capture_steps(c, k, &acc);
        ck_ok(cube_replay(c, g));
        ck_ok(cube_free(c, &acc));
        ck_ok(cube_sync(c, NULL, 0));
        ck_assert_uint_gt(status_of(D.socket).memory_in_use, 0);        /* kept by the graph */
        ck_ok(cube_replay(c, g));
        cube_disconnect(c);
        ck_assert(wait_memory_in_use(D.socket, 0, 10000));
        for (int i = 0; i < 100 && status_of(D.socket).memory_reserved; i++)
                sleep_ms(20);
        ck_assert_uint_eq(status_of(D.socket).memory_reserved, 0);
}
END_TEST

START_TEST(graphs_are_limited_per_session)
{
        cube_client *c = test_connect(D.socket, "graphs");
        uint64_t g[3];

        for (int i = 0; i < 2; i++) {
                ck_ok(cube_graph_prepare(c));
                ck_ok(cube_begin_capture(c));
                ck_ok(cube_end_capture(c, &g[i]));
        }
        test_expect_kind(cube_graph_prepare(c), CUBE_SERVER_VALIDATION, "a graph past max-graphs");
        ck_ok(cube_graph_destroy(c, g[0]));
        ck_ok(cube_graph_prepare(c));
        cube_disconnect(c);
}
END_TEST

static void start_limited(void)
{
        static const char *const args[] = { "--max-graph-launches", "4", "--max-graphs", "2",
                                            "--max-profile-windows", "3", NULL };
        start_daemon(args);
}

static Suite *graphs_suite(void)
{
        Suite *s = suite_create("graphs");
        TCase *profile = tcase_create("profile");
        TCase *graphs = tcase_create("graphs");
        TCase *limits = tcase_create("limits");
        TCase *own = tcase_create("own-daemon");        /* each test starts its own */

        tcase_add_checked_fixture(profile, test_start_with_faults, test_stop_clean);
        tcase_add_checked_fixture(graphs, test_start_with_faults, test_stop_clean);
        tcase_add_checked_fixture(limits, start_limited, test_stop_clean);
        tcase_set_timeout(profile, 120);
        tcase_set_timeout(graphs, 240);
        tcase_set_timeout(own, 120);
        tcase_add_test(profile, windows_nest_and_overlap_and_measure_only_their_work);
        tcase_add_test(profile, an_empty_or_host_only_window_is_not_measured);
        tcase_add_test(profile, a_failure_inside_a_window_invalidates_it);
        tcase_add_test(profile, unknown_ended_and_foreign_tokens_are_not_registered);
        tcase_add_test(profile, abandon_drops_a_window_without_measuring_it);
        tcase_add_test_needing(profile, measured_time_grows_with_the_work, TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test(profile, a_session_leaving_windows_open_leaks_nothing);
        tcase_add_test_needing(graphs, a_replayed_sequence_matches_running_it,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(graphs, a_kept_graph_gives_each_kind_of_kernel_its_buffers,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test(graphs, calls_that_wait_are_refused_inside_a_capture);
        tcase_add_test_needing(graphs, a_new_page_inside_a_capture_is_forbidden_unless_warmed_up,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test(graphs, a_failure_during_the_window_dooms_the_capture);
        tcase_add_test_needing(graphs, a_failed_replay_taints_its_write_set_until_one_lands,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test(graphs, a_replay_of_a_failed_input_answers_skipped);
        tcase_add_test(own, a_create_on_a_poisoned_device_is_io_device_poisoned);
        tcase_add_test(graphs, lifecycle_errors_say_what_was_wrong);
        tcase_add_test(graphs, destroy_during_a_replay_is_safe);
        tcase_add_test(graphs, a_session_dying_with_graphs_frees_their_pages);
        tcase_add_test_needing(graphs, a_graph_larger_than_the_device_keeps_replays_through_its_launches,
                               TEST_NEEDS_CPU_DEVICE | TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(own, the_kernel_timeout_watches_each_launch_of_a_replay,
                               TEST_NEEDS_CPU_DEVICE | TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(own, graphs_off_answer_graph_capture_unsupported,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test(limits, doomed_and_abandoned_is_several);
        tcase_add_test(limits, windows_are_limited_per_session);
        tcase_add_test(limits, graphs_are_limited_per_session);
        suite_add_tcase(s, profile);
        suite_add_tcase(s, graphs);
        suite_add_tcase(s, limits);
        suite_add_tcase(s, own);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(graphs_suite());
        int failed;

        srunner_run_all(sr, CK_ENV);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? 1 : 0;
}

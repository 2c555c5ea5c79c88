/*
 * bench-shares.c - cube-bench's scheduling table: sessions keep the device
 * busy with kernels of a known length, and their device time is read from
 * the daemon's shares view once a second, so each row is what the daemon
 * itself measured, window by window.
 *
 * Rows (one run each):
 *   weighted share: weights 9:1, the weight-9 session's kernels 1 ms, the
 *     other's 10 ms; the weight-9 session's share in each window against 90 %.
 *   equal weights: both weight 9, kernels 1 ms and 10 ms; against 50 %.
 *   latency under load: one latency session's spin(1) launch + sync, alone,
 *     then beside 8 batch sessions flooding 1 ms kernels, then beside the
 *     same floods in its own class (what equal sharing without classes
 *     gives); p99 against 1.2 x alone + one batch kernel.
 *   no starvation: a batch session beside a saturating latency session, its
 *     share in each window against the floor (share-min-percent, 5 %).
 *   cap: a capped tenant alone (bench_shares_cap): its device time over
 *     wall time, window by window, against its cap.
 *   floods (bench_shares_floods): the latency figure with no classes, for a
 *     daemon that has none (an earlier build), beside the table.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench-baselines.h"
#include "bench-shares.h"
#include "cube.h"

#define STREAMS 2
#define BATCH 64
#define MAX_SESSIONS 10

static const char spin_source[] =
"KERNEL void spin(uint64_t *out, INFO)\n"
"{\n"
"        uint64_t n = SCALAR(uint64_t, 0, 0), x = out[0] | 1;\n"
"\n"
"        for (uint64_t i = 0; i < n; i++) {\n"
"                x ^= x << 13;\n"
"                x ^= x >> 7;\n"
"                x ^= x << 17;\n"
"        }\n"
"        out[0] = x;\n"
"}\n";

/* A session that keeps the device busy: BATCH spins at a time on one
 * stream, the next batch queued as soon as the daemon holds fewer than
 * 2 x BATCH of them (its streams view), so that it always has work queued
 * even while its thread waits for a CPU. */
typedef struct spinner {
        cube_client *c;
        uint64_t kernel, rounds;
        cube_handle out[STREAMS];
        atomic_bool stop;
        pthread_t thread;
        bool running;
} spinner;

static void fail(const char *what, cube_error *e)
{
        fprintf(stderr, "cube-bench: %s: %s\n", what, cube_error_message(e));
        exit(1);
}

#define OK(what, expr) do { cube_error *e_ = (expr); if (e_) fail(what, e_); } while (0)

static void spin(spinner *s, unsigned st, uint64_t rounds)
{
        cube_info *info = cube_info_new();

        if (!info || cube_info_u64(info, rounds) < 0 || cube_info_buffer_len(info, 1) < 0) {
                fprintf(stderr, "cube-bench: out of memory\n");
                exit(1);
        }
        OK("launch", cube_launch_kernel(s->c, &(cube_launch) {
                .kernel = s->kernel, .cube_count = { 1, 1, 1 }, .cube_dim = { 1, 1, 1 },
                .buffers = &s->out[st], .n_buffers = 1, .info = info,
        }));
        cube_info_free(info);
}

/* The work s has queued on its stream 2, from the daemon's streams view. */
static uint64_t queued(spinner *s)
{
        cube_stream_info *v;
        size_t n;
        uint64_t pending = 0;

        OK("streams", cube_daemon_streams(s->c, &v, &n));
        for (size_t i = 0; i < n; i++)
                if (v[i].session == cube_client_session(s->c) && v[i].stream == 2)
                        pending = v[i].pending;
        free(v);
        return pending;
}

static void *spinner_thread(void *arg)
{
        spinner *s = arg;

        cube_stream_set(2);
        while (!atomic_load(&s->stop)) {
                for (int i = 0; i < BATCH; i++)
                        spin(s, 1, s->rounds);
                while (!atomic_load(&s->stop) && queued(s) >= 2 * BATCH)
                        usleep(2000);
        }
        OK("sync", cube_sync(s->c, &s->out[1], 1));
        return NULL;
}

/* Seconds one launch + sync of rounds takes. */
static double time_spin(spinner *s, uint64_t rounds)
{
        double t0 = bench_now();

        cube_stream_set(1);
        spin(s, 0, rounds);
        OK("sync", cube_sync(s->c, &s->out[0], 1));
        return bench_now() - t0;
}

/* Connects s as class_ (NULL: the operator's) and weight (0: the
 * operator's), its spin lasting about ms milliseconds. */
static void spinner_open(spinner *s, const char *socket, const char *class_, uint32_t weight,
                         double ms)
{
        static const uint64_t zero = 0;

        memset(s, 0, sizeof(*s));
        OK("connect", cube_connect(socket, "bench-shares", &s->c));
        if (class_ || weight)
                OK("share", cube_share_lower(s->c, class_, weight));
        OK("register", cube_kernel_register(s->c, spin_source, "spin", &s->kernel));
        for (unsigned st = 0; st < STREAMS; st++) {
                cube_stream_set(1 + st);
                OK("create", cube_create(s->c, &zero, 8, &s->out[st]));
        }
        s->rounds = 1;
        if (ms <= 0)
                return;
        time_spin(s, 1);        /* compiles it */
        uint64_t n = 1u << 16;
        double took;
        while ((took = time_spin(s, n)) < 0.05 && n < (1ull << 40))
                n *= 4;
        s->rounds = (uint64_t) ((double) n * ms / 1e3 / took);
        if (!s->rounds)
                s->rounds = 1;
}

static void spinner_start(spinner *s)
{
        atomic_init(&s->stop, false);
        s->running = pthread_create(&s->thread, NULL, spinner_thread, s) == 0;
}

static void spinner_close(spinner *s)
{
        atomic_store(&s->stop, true);
        if (s->running)
                pthread_join(s->thread, NULL);
        cube_disconnect(s->c);
}

/* Each spinner's device time so far, from the shares view. */
static void device_times(cube_client *c, spinner *s, int n, uint64_t *ret)
{
        cube_share_info *v;
        size_t len;

        OK("shares", cube_daemon_shares(c, &v, &len));
        for (int i = 0; i < n; i++) {
                ret[i] = 0;
                for (size_t j = 0; j < len; j++)
                        if (v[j].session == cube_client_session(s[i].c))
                                ret[i] = v[j].device_ns;
        }
        free(v);
}

/* Spinner 0's part of the spinners' device time (or, with wall set, of the
 * wall time) in each of windows one-second windows, after two seconds of
 * warming up (the kernels' lengths were measured on the same sessions, and
 * that device time counts in their shares): its least and greatest. */
static void window_shares(spinner *s, int n, int windows, bool wall, double *ret_min,
                          double *ret_max)
{
        uint64_t before[MAX_SESSIONS], after[MAX_SESSIONS];
        double lo = 1, hi = 0;

        sleep(2);
        device_times(s[0].c, s, n, before);
        for (int w = 0; w < windows; w++) {
                double t0 = bench_now(), total = 0, share;
                usleep(1000000);
                device_times(s[0].c, s, n, after);
                for (int i = 0; i < n; i++)
                        total += (double) (after[i] - before[i]);
                share = wall ? (double) (after[0] - before[0]) / ((bench_now() - t0) * 1e9) :
                               total > 0 ? (double) (after[0] - before[0]) / total : 0;
                if (share < lo)
                        lo = share;
                if (share > hi)
                        hi = share;
                memcpy(before, after, sizeof(before));
        }
        *ret_min = lo;
        *ret_max = hi;
}

static void share_row(const char *figure, double lo, double hi, double want, double tolerance,
                      int windows)
{
        double worst = hi - want > want - lo ? hi - want : want - lo;

        printf("| %s | %.1f %% to %.1f %% over %d windows of 1 s | owed %.0f %% | %.1f pts | "
               "<= %.0f pts every window | %s |\n", figure, lo * 100, hi * 100, windows,
               want * 100, worst * 100, tolerance * 100,
               worst <= tolerance ? "met" : "MISSED");
        fflush(stdout);
}

/* Two sessions of weights w0 and w1 (0: the operator's 9), kernels of ms0
 * and ms1: session 0's share, window by window. */
static void two_sessions(const char *socket, uint32_t w0, double ms0, uint32_t w1, double ms1,
                         const char *figure, double want, int windows)
{
        spinner s[2];
        double lo, hi;

        spinner_open(&s[0], socket, NULL, w0, ms0);
        spinner_open(&s[1], socket, NULL, w1, ms1);
        spinner_start(&s[0]);
        spinner_start(&s[1]);
        window_shares(s, 2, windows, false, &lo, &hi);
        spinner_close(&s[0]);
        spinner_close(&s[1]);
        share_row(figure, lo, hi, want, 0.05, windows);
}

/* The p99 of samples launch + sync of a one-round spin on probe, in seconds,
 * while floods (n, each of class flood_class) run. */
static double probe_p99(const char *socket, spinner *probe, int n, const char *flood_class,
                        int samples)
{
        spinner *floods = calloc((size_t) (n ? n : 1), sizeof(*floods));
        double *lat = calloc((size_t) samples, sizeof(double)), p99;

        if (!floods || !lat) {
                fprintf(stderr, "cube-bench: out of memory\n");
                exit(1);
        }
        for (int i = 0; i < n; i++) {
                spinner_open(&floods[i], socket, flood_class, 0, i ? 0 : 1.0);
                floods[i].rounds = floods[0].rounds;
        }
        for (int i = 0; i < n; i++)
                spinner_start(&floods[i]);
        if (n)
                sleep(1);
        for (int i = 0; i < samples; i++) {
                lat[i] = time_spin(probe, 1);
                usleep(1000);
        }
        for (int i = 0; i < n; i++)
                spinner_close(&floods[i]);
        for (int i = 0; i < samples; i++)
                for (int j = i + 1; j < samples; j++)
                        if (lat[j] < lat[i]) {
                                double x = lat[i];
                                lat[i] = lat[j];
                                lat[j] = x;
                        }
        p99 = lat[(int) (0.99 * (samples - 1) + 0.5)];
        free(lat);
        free(floods);
        return p99;
}

void bench_shares_table(const char *socket, int windows, int samples)
{
        spinner probe, s[2];
        double alone, loaded, same, lo, hi, kernel_s;

        two_sessions(socket, 0, 1.0, 1, 10.0, "weighted share 9:1, 1 ms beside 10 ms kernels",
                     0.9, windows);
        two_sessions(socket, 0, 1.0, 0, 10.0, "equal weights, 1 ms beside 10 ms kernels", 0.5,
                     windows);

        spinner_open(&probe, socket, NULL, 0, 1.0);
        kernel_s = time_spin(&probe, probe.rounds);
        alone = probe_p99(socket, &probe, 0, NULL, samples);
        loaded = probe_p99(socket, &probe, 8, "batch", samples);
        same = probe_p99(socket, &probe, 8, NULL, samples);
        spinner_close(&probe);
        double bound = 1.2 * alone + kernel_s;
        printf("| latency launch+sync p99 beside 8 batch floods of 1 ms kernels | %.0f us | "
               "alone %.0f us; the floods in its own class %.0f us | %.2f | <= 1.2 x alone + "
               "one kernel (%.0f us) | %s |\n", loaded * 1e6, alone * 1e6, same * 1e6,
               loaded / bound, bound * 1e6, loaded <= bound ? "met" : "MISSED");
        fflush(stdout);

        spinner_open(&s[0], socket, "batch", 0, 1.0);
        spinner_open(&s[1], socket, NULL, 0, 1.0);
        spinner_start(&s[0]);
        spinner_start(&s[1]);
        window_shares(s, 2, windows, false, &lo, &hi);
        spinner_close(&s[0]);
        spinner_close(&s[1]);
        printf("| no starvation: batch beside a saturating latency session | %.1f %% to %.1f %% "
               "over %d windows of 1 s | floor 5 %% | %.2f | >= 4 %% every window | %s |\n",
               lo * 100, hi * 100, windows, lo / 0.05, lo >= 0.04 ? "met" : "MISSED");
        fflush(stdout);
}

void bench_shares_cap(const char *socket, int windows)
{
        spinner s;
        cube_share_info *v;
        size_t n;
        double lo, hi, cap = 0;

        spinner_open(&s, socket, NULL, 0, 1.0);
        OK("shares", cube_daemon_shares(s.c, &v, &n));
        for (size_t i = 0; i < n; i++)
                if (v[i].session == cube_client_session(s.c))
                        cap = v[i].cap / 100.0;
        free(v);
        spinner_start(&s);
        window_shares(&s, 1, windows, true, &lo, &hi);
        spinner_close(&s);
        if (cap <= 0) {
                printf("| cap: a capped tenant alone | not measured: the daemon gives this "
                       "tenant no cap | - | - | - | - |\n");
                return;
        }
        share_row("cap: a capped tenant alone, device time over wall time", lo, hi, cap, 0.05,
                  windows);
}

void bench_shares_floods(const char *socket, int samples)
{
        spinner probe;
        double alone, loaded;

        spinner_open(&probe, socket, NULL, 0, 1.0);
        alone = probe_p99(socket, &probe, 0, NULL, samples);
        loaded = probe_p99(socket, &probe, 8, NULL, samples);
        spinner_close(&probe);
        printf("| launch+sync p99 beside 8 floods of 1 ms kernels, no classes | %.0f us | "
               "alone %.0f us | %.2f | - | - |\n", loaded * 1e6, alone * 1e6, loaded / alone);
        fflush(stdout);
}

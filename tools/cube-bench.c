/*
 * cube-bench - cube's cost next to the machine's own limits, measured in one
 * run on one CPU placement.
 *
 *   cube-bench --socket PATH [--daemon-pid PID] [--runs N] [--smoke]
 *              [--restart-tag TAG] [--redis-ops OPS] [--only FIGURE]
 *              [--peer-socket PATH]
 *   cube-bench --socket PATH --after-restart TAG [--runs N] [--smoke]
 *
 * Prints one Markdown table row per figure: cube's figure, the baseline
 * measured in the same run on the same placement, their ratio, the target and
 * whether it is met. Baselines that need a second process fork a peer and run
 * it on the daemon's CPUs (read from --daemon-pid), so both sides of a
 * baseline sit where cubed and this client sit. Latencies are the median (or
 * the percentile named) of every sample; rates and bandwidths are the median
 * of N runs.
 *
 * Figures:
 *   daemon memory per idle session: cubed's VmRSS after opening S sessions
 *     (each connected and synced once, then left idle), less VmRSS before,
 *     over S. Measured first, on a fresh daemon. Needs --daemon-pid.
 *   sync round trip: cube_sync(c, NULL, 0) on an idle stream, against a 64 B
 *     ping-pong with a peer process over a socketpair.
 *   pipelined launches/s: launches of an empty kernel, K at a time and then
 *     one sync, against K 64 B messages written one by one, each answered by
 *     a 16 B ack.
 *   staged write / read of 64 MiB: through a staging region created once,
 *     cube_write_region + cube_sync, and cube_read_region; bytes per second
 *     against memcpy of 64 MiB in this process.
 *   inline write / read of 64 MiB: cube_write + cube_sync, and cube_read, the
 *     bytes crossing the socket; against 64 MiB written to (read from) a peer
 *     over a socketpair.
 *   aggregate sync ops/s: C clients, each a thread with its own cube_connect,
 *     calling cube_sync in a loop; against redis-benchmark PING_INLINE with
 *     50 clients when bench.sh passes --redis-ops, else against C threads
 *     ping-ponging 64 B with a single-threaded epoll echo server.
 *   p99 / p50 of launch+read: one client launches a kernel that writes 4 B
 *     and reads them back, while C - 1 others each launch 32 empty kernels
 *     and sync, in a loop.
 *   first launch of a kernel another session compiled (a cache hit), launch
 *     to completed sync, against the first launch of a new kernel (it
 *     compiles). With --restart-tag, those new kernels' sources are named
 *     by TAG, so that after a restart of the daemon on the same --cache-dir,
 *     --after-restart TAG can time their first launch from the disk cache,
 *     against new kernels compiled in that run.
 *   vector add, 3 x 64 MiB (no target): a kernel reading two 64 MiB float
 *     buffers and writing a third, launch to completed sync, in bytes touched
 *     per second; against memcpy of 64 MiB counted the same way (bytes read
 *     plus bytes written per second).
 *   CPU kernels: vector add, reduce, matmul, an empty launch, and 1000
 *     dependent launches of a small step with one sync at the end, each
 *     launch to completed sync; against the same kernel in OpenCL C on PoCL
 *     in this process (the daemon's CPUs), enqueued the same number of times
 *     and finished once, the two taking turns run by run; the empty launch
 *     against that plus a raw 64 B ping-pong with the daemon's CPUs, the
 *     one crossing a launch + sync cannot avoid, and in a row of its own
 *     against PoCL plus the ping-pong relayed through a second process on
 *     the daemon's CPUs (the device process's turn, which the answer waits
 *     for). The compute kernels and
 *     the dependent launches are timed once the daemon has built each for
 *     its cube dimension, as PoCL's first enqueue builds its own.
 *   all_reduce of 64 MiB and of 4 KiB f32 over two daemons (--socket and
 *     --peer-socket, on one host): a group id minted on the first, one
 *     thread per rank with its own client, cube_all_reduce (Sum, NOW) then
 *     cube_sync. 64 MiB: K operations queued and one sync, bus bandwidth
 *     2 (n - 1) / n * bytes / seconds per operation; 4 KiB: all_reduce +
 *     sync one at a time, the median sample (the fastest beside it). Against
 *     Gloo's own allreduce between two processes (bench-gloo, on the
 *     daemon's CPUs), timed the same way; the two take turns for N rounds,
 *     and each row compares the medians over rounds.
 *   checked kernels (--only checked): vector add, reduce and matmul launched
 *     checked and unchecked (the daemon lists this user in --unchecked-uids),
 *     launch to completed sync, run by run interleaved, both forms built
 *     for their cube dimension first; and the kernel front
 *     end alone (cube-device --check on matmul, $CUBE_DEVICE_BIN) beside the
 *     first launch of a fresh kernel (front end, PoCL build, load).
 *   scheduling and cap (only when named by --only: each needs a daemon
 *     configured for it, which bench.sh starts): device time shared by
 *     weight, class and cap (bench-shares.c); floods, the latency figure
 *     alone, for a daemon without classes (BASE_BUILD in bench.sh).
 *
 * It is long (about 1,540 lines): every figure shares the placement, the
 * baselines and the table's printing, and one program keeps them in step.
 */
#include <dirent.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench-baselines.h"
#include "bench-pocl.h"
#include "bench-shares.h"
#include "cube.h"
#include "sandbox.h"

#define MIB (1024.0 * 1024.0)
/* How long a kernel figure leaves the daemon idle for its kernels' builds
 * for their cube dimension (each a PoCL build of one to three seconds here
 * when the machine is quiet, run 10 nice levels down, so much longer when it
 * is not): until none of the daemon's builds is seen running twice in a
 * row, at most SHAPE_BUILD_MAX_S; SHAPE_BUILD_WAIT_S where the daemon's pid
 * is unknown. None in a smoke run, which times nothing. */
#define SHAPE_BUILD_WAIT_S 4
#define SHAPE_BUILD_MAX_S 120

struct config {
        const char *socket;
        pid_t daemon_pid;               /* 0: unknown */
        int runs;
        size_t bulk;                    /* bytes of the bulk figures */
        int rtt_samples;                /* round trips per latency figure */
        int pipelined;                  /* launches per pipelined run */
        int clients;                    /* concurrent clients */
        double seconds;                 /* of each concurrent run */
        int sessions;                   /* idle sessions for the memory figure */
        bool wait_for_shapes;           /* for builds for a cube dimension */
        const char *restart_tag;
        double redis_ops;               /* 0: redis not installed */
        const char *only;               /* one figure's name, or NULL for all */
        const char *peer_socket;        /* a second daemon, for the collectives */
        cpu_set_t daemon_cpus;
        bool have_daemon_cpus;
};

static void die(const char *what, cube_error *e)
{
        fprintf(stderr, "cube-bench: %s: %s\n", what, cube_error_message(e));
        cube_error_free(e);
        exit(1);
}

#define CHECK(what, expr) do { cube_error *e_ = (expr); if (e_) die(what, e_); } while (0)

static void *xcalloc(size_t n, size_t size)
{
        void *p = calloc(n ? n : 1, size);
        if (!p) {
                fprintf(stderr, "cube-bench: out of memory\n");
                exit(1);
        }
        return p;
}

static int compare_doubles(const void *a, const void *b)
{
        double x = *(const double *) a, y = *(const double *) b;
        return (x > y) - (x < y);
}

/* The p-th percentile (0 to 100) of v; sorts v. */
static double percentile(double *v, int n, double p)
{
        qsort(v, (size_t) n, sizeof(*v), compare_doubles);
        int i = (int) (p / 100.0 * (n - 1) + 0.5);
        return v[i];
}

static double median(double *v, int n)
{
        return percentile(v, n, 50);
}

static const cpu_set_t *peer_cpus(const struct config *cfg)
{
        return cfg->have_daemon_cpus ? &cfg->daemon_cpus : NULL;
}

/* One table row; the target is met when ratio is on the right side of it. */
static void row(const char *figure, const char *cube, const char *baseline,
                double ratio, const char *ratio_unit, const char *target, bool met)
{
        printf("| %s | %s | %s | %.2f%s | %s | %s |\n", figure, cube, baseline,
               ratio, ratio_unit, target, met ? "met" : "MISSED");
        fflush(stdout);
}

static void format_cpus(char *buf, size_t len, const cpu_set_t *set)
{
        size_t used = 0;
        buf[0] = '\0';
        for (int i = 0; i < CPU_SETSIZE && used + 8 < len; i++)
                if (CPU_ISSET(i, set))
                        used += (size_t) snprintf(buf + used, len - used, "%s%d",
                                                  used ? "," : "", i);
}

static void print_placement(const struct config *cfg)
{
        cpu_set_t mine;
        char client[256] = "?", daemon[256] = "unknown (no --daemon-pid)";

        if (sched_getaffinity(0, sizeof(mine), &mine) == 0)
                format_cpus(client, sizeof(client), &mine);
        if (cfg->have_daemon_cpus)
                format_cpus(daemon, sizeof(daemon), &cfg->daemon_cpus);
        printf("placement: client on CPUs %s, daemon (and baseline peers) on CPUs %s\n",
               client, daemon);
}

static cube_client *connect_client(const struct config *cfg)
{
        cube_client *c;
        CHECK("connect", cube_connect(cfg->socket, "cube-bench", &c));
        return c;
}

static const char nop_source[] =
"KERNEL void nop(INFO)\n"
"{\n"
"}\n";

static const char touch_source[] =
"KERNEL void touch(float *out, INFO)\n"
"{\n"
"        out[0] = 1.0f;\n"
"}\n";

/* A one-unit launch of the empty kernel, registered on c. */
static cube_launch nop_launch(cube_client *c)
{
        uint64_t kernel;
        CHECK("register", cube_kernel_register(c, nop_source, "nop", &kernel));
        return (cube_launch) {
                .kernel = kernel, .cube_count = { 1, 1, 1 }, .cube_dim = { 1, 1, 1 },
        };
}

/* A one-unit launch of the kernel that writes out[0], registered on c. */
static cube_launch touch_launch(cube_client *c, const cube_handle *out, cube_info *info)
{
        uint64_t kernel;
        CHECK("register", cube_kernel_register(c, touch_source, "touch", &kernel));
        cube_info_buffer_len(info, 1);
        return (cube_launch) {
                .kernel = kernel, .cube_count = { 1, 1, 1 }, .cube_dim = { 1, 1, 1 },
                .buffers = out, .n_buffers = 1, .info = info,
        };
}

/* VmRSS of pid, in bytes, or -1. */
static long vm_rss(pid_t pid)
{
        char path[64], line[256];
        long kib = -1;

        snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
        FILE *f = fopen(path, "r");
        if (!f)
                return -1;
        while (fgets(line, sizeof(line), f))
                if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
                        break;
        fclose(f);
        return kib < 0 ? -1 : kib * 1024;
}

static void bench_session_memory(const struct config *cfg)
{
        char figure[96], cube[64];

        snprintf(figure, sizeof(figure), "daemon memory per idle session (%d sessions)",
                 cfg->sessions);
        long before = cfg->daemon_pid ? vm_rss(cfg->daemon_pid) : -1;
        if (before < 0) {
                printf("| %s | n/a: needs --daemon-pid | - | - | <= 64 KiB | not measured |\n",
                       figure);
                return;
        }
        cube_client **c = xcalloc((size_t) cfg->sessions, sizeof(*c));
        for (int i = 0; i < cfg->sessions; i++) {
                c[i] = connect_client(cfg);
                CHECK("sync", cube_sync(c[i], NULL, 0));
        }
        long after = vm_rss(cfg->daemon_pid);
        for (int i = 0; i < cfg->sessions; i++)
                cube_disconnect(c[i]);
        free(c);
        double per = (double) (after - before) / cfg->sessions / 1024.0;
        snprintf(cube, sizeof(cube), "%.1f KiB (VmRSS %.1f -> %.1f MiB)", per,
                 before / MIB, after / MIB);
        row(figure, cube, "-", per, " KiB", "<= 64 KiB", per <= 64);
}

static void bench_sync_rtt(const struct config *cfg)
{
        int n = cfg->rtt_samples;
        double *cube = xcalloc((size_t) n, sizeof(double));
        double *raw = xcalloc((size_t) n, sizeof(double));
        char a[64], b[96];
        cube_client *c = connect_client(cfg);

        for (int i = 0; i < n / 10 + 1; i++)
                CHECK("sync", cube_sync(c, NULL, 0));
        for (int i = 0; i < n; i++) {
                double t0 = bench_now();
                CHECK("sync", cube_sync(c, NULL, 0));
                cube[i] = bench_now() - t0;
        }
        cube_disconnect(c);
        raw_ping_pong(peer_cpus(cfg), n, raw);
        double m = median(cube, n), r = median(raw, n);
        snprintf(a, sizeof(a), "%.1f us", m * 1e6);
        snprintf(b, sizeof(b), "raw UDS 64 B ping-pong: %.1f us", r * 1e6);
        row("sync round trip, idle stream (median)", a, b, m / r, "x", "<= 1.5x", m / r <= 1.5);
        free(cube);
        free(raw);
}

static void bench_launch_rate(const struct config *cfg)
{
        double *cube = xcalloc((size_t) cfg->runs, sizeof(double));
        double *raw = xcalloc((size_t) cfg->runs, sizeof(double));
        char a[64], b[128];
        int n = cfg->pipelined;
        cube_client *c = connect_client(cfg);
        cube_launch l = nop_launch(c);

        CHECK("launch", cube_launch_kernel(c, &l));
        CHECK("sync", cube_sync(c, NULL, 0));
        for (int r = 0; r < cfg->runs; r++) {
                double t0 = bench_now();
                for (int i = 0; i < n; i++)
                        CHECK("launch", cube_launch_kernel(c, &l));
                CHECK("sync", cube_sync(c, NULL, 0));
                cube[r] = n / (bench_now() - t0);
                raw[r] = raw_pipelined(peer_cpus(cfg), n);
        }
        cube_disconnect(c);
        double m = median(cube, cfg->runs), q = median(raw, cfg->runs);
        snprintf(a, sizeof(a), "%.0f launches/s", m);
        snprintf(b, sizeof(b), "raw 64 B messages + 16 B acks: %.0f msg/s", q);
        row("pipelined empty-kernel launches/s, one client", a, b, m / q, "x", ">= 0.7x",
            m / q >= 0.7);
        free(cube);
        free(raw);
}

/* A graph of 100 empty launches, replayed, against the same 100 launches
 * issued one by one, in the same run: the cost per launch of each, every
 * round ending with a sync so both include running the launches. Replay
 * skips the wire, the decode and the launch path's resolve and validate;
 * the target is 5x. */
#define GRAPH_LAUNCHES 100
static void bench_graph_replay(const struct config *cfg)
{
        double *issued = xcalloc((size_t) cfg->runs, sizeof(double));
        double *replayed = xcalloc((size_t) cfg->runs, sizeof(double));
        double *one_by_one = xcalloc((size_t) cfg->runs, sizeof(double));
        int rounds = cfg->pipelined / GRAPH_LAUNCHES > 0 ? cfg->pipelined / GRAPH_LAUNCHES : 1;
        cube_client *c = connect_client(cfg);
        cube_launch l = nop_launch(c);
        uint64_t graph;
        char a[64], b[160];

        CHECK("graph_prepare", cube_graph_prepare(c));
        for (int i = 0; i < GRAPH_LAUNCHES; i++)
                CHECK("launch", cube_launch_kernel(c, &l));
        CHECK("begin_capture", cube_begin_capture(c));
        for (int i = 0; i < GRAPH_LAUNCHES; i++)
                CHECK("launch", cube_launch_kernel(c, &l));
        CHECK("end_capture", cube_end_capture(c, &graph));
        CHECK("sync", cube_sync(c, NULL, 0));
        for (int r = 0; r < cfg->runs; r++) {
                double t0 = bench_now();
                for (int k = 0; k < rounds; k++)
                        for (int i = 0; i < GRAPH_LAUNCHES; i++)
                                CHECK("launch", cube_launch_kernel(c, &l));
                CHECK("sync", cube_sync(c, NULL, 0));
                issued[r] = (bench_now() - t0) / ((double) rounds * GRAPH_LAUNCHES);
                t0 = bench_now();
                for (int k = 0; k < rounds; k += 1000)
                        CHECK("replay", cube_replay_times(c, graph, (uint32_t) (rounds - k < 1000 ?
                                                                            rounds - k : 1000)));
                CHECK("sync", cube_sync(c, NULL, 0));
                replayed[r] = (bench_now() - t0) / ((double) rounds * GRAPH_LAUNCHES);
                t0 = bench_now();
                for (int k = 0; k < rounds; k++)
                        CHECK("replay", cube_replay(c, graph));
                CHECK("sync", cube_sync(c, NULL, 0));
                one_by_one[r] = (bench_now() - t0) / ((double) rounds * GRAPH_LAUNCHES);
        }
        CHECK("graph_destroy", cube_graph_destroy(c, graph));
        cube_disconnect(c);
        double m = median(replayed, cfg->runs), q = median(issued, cfg->runs);
        double o = median(one_by_one, cfg->runs);
        snprintf(a, sizeof(a), "%.3f us per launch", m * 1e6);
        snprintf(b, sizeof(b), "the %d launches issued: %.3f us per launch", GRAPH_LAUNCHES,
                 q * 1e6);
        row("graph of 100 empty launches, replayed (1000 replays a request)", a, b, q / m,
            "x faster", ">= 5x", q / m >= 5);
        snprintf(a, sizeof(a), "%.3f us per launch", o * 1e6);
        printf("| graph of 100 empty launches, one cube_replay round trip each | %s | %s | "
               "%.2fx faster | (none) | - |\n", a, b, q / o);
        /* What neither a replay nor a launch can go below while each is one
         * kernel run by PoCL: the launches issued are held to 0.6x its rate. */
        double floor = pocl_bench_enqueue_floor(GRAPH_LAUNCHES, cfg->runs);
        if (floor > 0) {
                snprintf(a, sizeof(a), "the %d launches issued: %.3f us per launch",
                         GRAPH_LAUNCHES, q * 1e6);
                snprintf(b, sizeof(b), "PoCL's floor, %d empty kernels enqueued on its basic "
                         "device then clFinish (cube-bench's process): %.3f us per kernel",
                         GRAPH_LAUNCHES, floor * 1e6);
                row("pipelined empty launches against PoCL's floor", a, b, floor / q,
                    "x its rate", ">= 0.60x", floor / q >= 0.6);
        }
        free(issued);
        free(replayed);
        free(one_by_one);
}

/* Moves the calling thread onto cpus (the daemon's) when given, keeping
 * where it was in *ret_was; true when it moved (move_back then returns it). */
static bool move_to(const cpu_set_t *cpus, cpu_set_t *ret_was)
{
        return cpus && pthread_getaffinity_np(pthread_self(), sizeof(*ret_was), ret_was) == 0 &&
               pthread_setaffinity_np(pthread_self(), sizeof(*cpus), cpus) == 0;
}

static void move_back(bool moved, const cpu_set_t *was)
{
        if (moved)
                pthread_setaffinity_np(pthread_self(), sizeof(*was), was);
}

/* Seconds to memcpy size bytes between two touched buffers, on cpus (the
 * daemon's, where its copies run) when given. */
static double memcpy_time(const cpu_set_t *cpus, char *dst, const char *src, size_t size)
{
        cpu_set_t was;
        bool moved = move_to(cpus, &was);

        double t0 = bench_now();
        memcpy(dst, src, size);
        double t = bench_now() - t0;
        move_back(moved, &was);
        return t;
}

static void bulk_row(const char *figure, size_t size, double cube_s, const char *base_name,
                     double base_s)
{
        char a[64], b[128];
        double cube_gbs = size / cube_s / 1e9, base_gbs = size / base_s / 1e9;
        snprintf(a, sizeof(a), "%.2f GB/s", cube_gbs);
        snprintf(b, sizeof(b), "%s: %.2f GB/s", base_name, base_gbs);
        row(figure, a, b, cube_gbs / base_gbs, "x", ">= 0.8x", cube_gbs / base_gbs >= 0.8);
}

static void bench_staged(const struct config *cfg)
{
        size_t size = cfg->bulk;
        double *w = xcalloc((size_t) cfg->runs, sizeof(double));
        double *rd = xcalloc((size_t) cfg->runs, sizeof(double));
        double *copy = xcalloc((size_t) cfg->runs, sizeof(double));
        char *src = xcalloc(1, size), *dst = xcalloc(1, size);
        char figure[96], base[64];
        cube_client *c = connect_client(cfg);
        cube_region *region;
        cube_handle h;

        memset(src, 1, size);
        memset(dst, 2, size);
        CHECK("region", cube_region_create(c, size, &region));
        memset(region->data, 1, size);
        CHECK("empty", cube_empty(c, size, &h));
        CHECK("write", cube_write_region(c, &h, region, 0));
        CHECK("sync", cube_sync(c, &h, 1));
        for (int r = 0; r < cfg->runs; r++) {
                double t0 = bench_now();
                CHECK("write", cube_write_region(c, &h, region, 0));
                CHECK("sync", cube_sync(c, &h, 1));
                double t1 = bench_now();
                CHECK("read", cube_read_region(c, &h, region, 0));
                w[r] = t1 - t0;
                rd[r] = bench_now() - t1;
                /* The baseline runs beside each pair, not minutes apart. */
                copy[r] = memcpy_time(peer_cpus(cfg), dst, src, size);
        }
        CHECK("free", cube_free(c, &h));
        cube_region_free(c, region);
        cube_disconnect(c);
        double m = median(copy, cfg->runs);
        snprintf(base, sizeof(base), "memcpy %.0f MiB", size / MIB);
        snprintf(figure, sizeof(figure), "%.0f MiB write, staged (region + sync)", size / MIB);
        bulk_row(figure, size, median(w, cfg->runs), base, m);
        snprintf(figure, sizeof(figure), "%.0f MiB read, staged (region)", size / MIB);
        bulk_row(figure, size, median(rd, cfg->runs), base, m);
        free(src);
        free(dst);
        free(copy);
        free(w);
        free(rd);
}

static void bench_inline(const struct config *cfg)
{
        size_t size = cfg->bulk;
        double *w = xcalloc((size_t) cfg->runs, sizeof(double));
        double *rd = xcalloc((size_t) cfg->runs, sizeof(double));
        double *rs = xcalloc((size_t) cfg->runs, sizeof(double));
        double *rr = xcalloc((size_t) cfg->runs, sizeof(double));
        char figure[96], base[64];
        char *buf = xcalloc(1, size);
        cube_client *c = connect_client(cfg);
        cube_handle h;

        memset(buf, 1, size);
        CHECK("empty", cube_empty(c, size, &h));
        CHECK("write", cube_write(c, &h, buf, size));
        CHECK("sync", cube_sync(c, &h, 1));
        for (int r = 0; r < cfg->runs; r++) {
                double t0 = bench_now();
                CHECK("write", cube_write(c, &h, buf, size));
                CHECK("sync", cube_sync(c, &h, 1));
                double t1 = bench_now();
                CHECK("read", cube_read(c, &h, buf, size));
                w[r] = t1 - t0;
                rd[r] = bench_now() - t1;
                rs[r] = raw_bulk_send(peer_cpus(cfg), size);
                rr[r] = raw_bulk_receive(peer_cpus(cfg), size);
        }
        CHECK("free", cube_free(c, &h));
        cube_disconnect(c);
        snprintf(figure, sizeof(figure), "%.0f MiB write, inline (cube_write + sync)", size / MIB);
        snprintf(base, sizeof(base), "raw UDS send of %.0f MiB", size / MIB);
        bulk_row(figure, size, median(w, cfg->runs), base, median(rs, cfg->runs));
        snprintf(figure, sizeof(figure), "%.0f MiB read, inline (cube_read)", size / MIB);
        snprintf(base, sizeof(base), "raw UDS receive of %.0f MiB", size / MIB);
        bulk_row(figure, size, median(rd, cfg->runs), base, median(rr, cfg->runs));
        free(buf);
        free(w);
        free(rd);
        free(rs);
        free(rr);
}

static const char vadd_source[] =
"KERNEL void vadd(const float *a, const float *b, float *out, INFO)\n"
"{\n"
"        uint64_t i = ABSOLUTE_POS;\n"
"        if (i < BUFFER_LEN(2))\n"
"                out[i] = a[i] + b[i];\n"
"}\n";

/* A launch of vadd over three buffers of n floats, spread as the reference
 * spreads a count: halve x, double y, until x fits. */
static cube_launch vadd_launch(cube_client *c, const cube_handle *h, cube_info *info, size_t n)
{
        uint64_t kernel, x = (n + 255) / 256, y = 1;

        CHECK("register", cube_kernel_register(c, vadd_source, "vadd", &kernel));
        for (int i = 0; i < 3; i++)
                cube_info_buffer_len(info, (uint32_t) n);
        while (x > 65535) {
                x = (x + 1) / 2;
                y *= 2;
        }
        return (cube_launch) {
                .kernel = kernel,
                .cube_count = { (uint32_t) x, (uint32_t) y, 1 },
                .cube_dim = { 256, 1, 1 },
                .buffers = h, .n_buffers = 3, .info = info,
        };
}

static void bench_vector_add(const struct config *cfg)
{
        size_t n = cfg->bulk / sizeof(float);
        double *t = xcalloc((size_t) cfg->runs, sizeof(double));
        double *copy = xcalloc((size_t) cfg->runs, sizeof(double));
        float *host = xcalloc(n, sizeof(float)), *dst = xcalloc(n, sizeof(float));
        cube_info *info = cube_info_new();
        cube_client *c = connect_client(cfg);
        char figure[96], a[64], b[96];
        cube_handle h[3];

        for (size_t i = 0; i < n; i++)
                host[i] = (float) (i % 1000);
        CHECK("create", cube_create(c, host, n * sizeof(float), &h[0]));
        CHECK("create", cube_create(c, host, n * sizeof(float), &h[1]));
        CHECK("empty", cube_empty(c, n * sizeof(float), &h[2]));
        cube_launch l = vadd_launch(c, h, info, n);
        CHECK("launch", cube_launch_kernel(c, &l));
        CHECK("sync", cube_sync(c, &h[2], 1));
        for (int r = 0; r < cfg->runs; r++) {
                double t0 = bench_now();
                CHECK("launch", cube_launch_kernel(c, &l));
                CHECK("sync", cube_sync(c, &h[2], 1));
                t[r] = bench_now() - t0;
                copy[r] = memcpy_time(peer_cpus(cfg), (char *) dst, (const char *) host,
                                      n * sizeof(float));
        }
        for (int i = 0; i < 3; i++)
                CHECK("free", cube_free(c, &h[i]));
        cube_disconnect(c);
        cube_info_free(info);
        double cube_gbs = 3.0 * cfg->bulk / median(t, cfg->runs) / 1e9;
        double copy_gbs = 2.0 * cfg->bulk / median(copy, cfg->runs) / 1e9;
        free(host);
        free(dst);
        free(copy);
        snprintf(figure, sizeof(figure), "vector add, 3 x %.0f MiB, bytes touched/s", cfg->bulk / MIB);
        snprintf(a, sizeof(a), "%.2f GB/s", cube_gbs);
        snprintf(b, sizeof(b), "memcpy, bytes read + written/s: %.2f GB/s", copy_gbs);
        printf("| %s | %s | %s | %.2fx | (none) | - |\n", figure, a, b, cube_gbs / copy_gbs);
        fflush(stdout);
        free(t);
}

/* What every concurrent client thread shares. */
struct crowd {
        const struct config *cfg;
        atomic_int go;                  /* 0 wait, 1 run, 2 stop */
        atomic_int ready;               /* members waiting for go */
};

struct member {
        struct crowd *crowd;
        cube_client *c;
        long ops;
};

static void wait_for_go(struct crowd *crowd)
{
        atomic_fetch_add(&crowd->ready, 1);
        while (atomic_load(&crowd->go) == 0)
                sched_yield();
}

static void *sync_loop(void *arg)
{
        struct member *m = arg;
        CHECK("sync", cube_sync(m->c, NULL, 0));
        wait_for_go(m->crowd);
        while (atomic_load(&m->crowd->go) == 1) {
                CHECK("sync", cube_sync(m->c, NULL, 0));
                m->ops++;
        }
        return NULL;
}

static void *flood_loop(void *arg)
{
        struct member *m = arg;
        cube_launch l = nop_launch(m->c);
        /* Compiled (or found in the cache) before the flood starts, so no
         * flooder waits on the compiler while the probe is timed. */
        CHECK("launch", cube_launch_kernel(m->c, &l));
        CHECK("sync", cube_sync(m->c, NULL, 0));
        wait_for_go(m->crowd);
        while (atomic_load(&m->crowd->go) == 1) {
                for (int i = 0; i < 32; i++)
                        CHECK("launch", cube_launch_kernel(m->c, &l));
                CHECK("sync", cube_sync(m->c, NULL, 0));
                m->ops += 32;
        }
        return NULL;
}

/* Starts n threads running fn, one client each, and returns once all are
 * ready to go. */
static void crowd_start(struct crowd *crowd, struct member *m, pthread_t *t, int n,
                        cube_client **clients, void *(*fn)(void *))
{
        atomic_store(&crowd->go, 0);
        atomic_store(&crowd->ready, 0);
        for (int i = 0; i < n; i++) {
                m[i] = (struct member) { .crowd = crowd, .c = clients[i] };
                if (pthread_create(&t[i], NULL, fn, &m[i]) != 0) {
                        fprintf(stderr, "cube-bench: pthread_create failed\n");
                        exit(1);
                }
        }
        /* Every member has warmed up (connected, compiled, synced). */
        while (atomic_load(&crowd->ready) < n)
                usleep(1000);
}

static long crowd_stop(struct crowd *crowd, struct member *m, pthread_t *t, int n)
{
        long ops = 0;
        atomic_store(&crowd->go, 2);
        for (int i = 0; i < n; i++) {
                pthread_join(t[i], NULL);
                ops += m[i].ops;
        }
        return ops;
}

static void bench_many_clients(const struct config *cfg)
{
        int n = cfg->clients;
        struct crowd crowd = { .cfg = cfg };
        struct member *m = xcalloc((size_t) n, sizeof(*m));
        pthread_t *t = xcalloc((size_t) n, sizeof(*t));
        cube_client **c = xcalloc((size_t) n, sizeof(*c));
        double *cube = xcalloc((size_t) cfg->runs, sizeof(double));
        double *raw = xcalloc((size_t) cfg->runs, sizeof(double));
        char figure[96], a[64], b[160];

        for (int i = 0; i < n; i++)
                c[i] = connect_client(cfg);
        for (int r = 0; r < cfg->runs; r++) {
                crowd_start(&crowd, m, t, n, c, sync_loop);
                double t0 = bench_now();
                atomic_store(&crowd.go, 1);
                usleep((useconds_t) (cfg->seconds * 1e6));
                long ops = crowd_stop(&crowd, m, t, n);
                cube[r] = ops / (bench_now() - t0);
                if (cfg->redis_ops <= 0)
                        raw[r] = raw_many_clients(peer_cpus(cfg), n, cfg->seconds);
        }
        for (int i = 0; i < n; i++)
                cube_disconnect(c[i]);
        double q = median(cube, cfg->runs), base;
        if (cfg->redis_ops > 0) {
                base = cfg->redis_ops;
                snprintf(b, sizeof(b), "redis-benchmark PING_INLINE, 50 clients, UDS: %.0f ops/s",
                         base);
        } else {
                base = median(raw, cfg->runs);
                snprintf(b, sizeof(b), "redis: not installed; raw UDS epoll echo server, "
                         "%d clients: %.0f ops/s", n, base);
        }
        snprintf(figure, sizeof(figure), "aggregate sync ops/s, %d clients", n);
        snprintf(a, sizeof(a), "%.0f ops/s", q);
        row(figure, a, b, q / base, "x", ">= 1.0x", q / base >= 1.0);
        free(m);
        free(t);
        free(c);
        free(cube);
        free(raw);
}

static void bench_tail_latency(const struct config *cfg)
{
        int n = cfg->clients - 1, samples = cfg->rtt_samples;
        struct crowd crowd = { .cfg = cfg };
        struct member *m = xcalloc((size_t) n, sizeof(*m));
        pthread_t *t = xcalloc((size_t) n, sizeof(*t));
        cube_client **c = xcalloc((size_t) n, sizeof(*c));
        double *lat = xcalloc((size_t) samples, sizeof(double));
        cube_info *info = cube_info_new();
        cube_client *me = connect_client(cfg);
        char figure[96], a[96];
        cube_handle out;
        float value;

        CHECK("empty", cube_empty(me, sizeof(float), &out));
        cube_launch l = touch_launch(me, &out, info);
        CHECK("launch", cube_launch_kernel(me, &l));
        CHECK("read", cube_read(me, &out, &value, sizeof(value)));
        for (int i = 0; i < n; i++)
                c[i] = connect_client(cfg);
        crowd_start(&crowd, m, t, n, c, flood_loop);
        atomic_store(&crowd.go, 1);
        for (int i = 0; i < samples; i++) {
                double t0 = bench_now();
                CHECK("launch", cube_launch_kernel(me, &l));
                CHECK("read", cube_read(me, &out, &value, sizeof(value)));
                lat[i] = bench_now() - t0;
        }
        crowd_stop(&crowd, m, t, n);
        for (int i = 0; i < n; i++)
                cube_disconnect(c[i]);
        cube_disconnect(me);
        cube_info_free(info);
        double p99 = percentile(lat, samples, 99), p50 = percentile(lat, samples, 50);
        snprintf(figure, sizeof(figure), "p99 / p50 of one client's launch+read, %d flooding",
                 n);
        snprintf(a, sizeof(a), "p99 %.0f us / p50 %.0f us", p99 * 1e6, p50 * 1e6);
        row(figure, a, "-", p99 / p50, "", "<= 10", p99 / p50 <= 10);
        free(m);
        free(t);
        free(c);
        free(lat);
}

/* A kernel source no cache has seen (a fresh tag), or the tag's r-th. */
static void fill_source(char *buf, size_t len, const char *tag, int r)
{
        snprintf(buf, len,
                 "/* %s-%d */\nKERNEL void fill(float *out, INFO)\n"
                 "{\n        out[UNIT_POS_X] = (float) UNIT_POS_X;\n}\n", tag, r);
}

static void fresh_tag(char *buf, size_t len)
{
        snprintf(buf, len, "%d-%.0f", (int) getpid(), bench_now() * 1e9);
}

/* Times one session's first launch of source, to completion. */
static double first_launch(const struct config *cfg, const char *source)
{
        cube_client *c = connect_client(cfg);
        cube_info *info = cube_info_new();
        cube_handle out;
        uint64_t kernel;

        CHECK("empty", cube_empty(c, 64, &out));
        CHECK("sync", cube_sync(c, NULL, 0));
        cube_info_buffer_len(info, 16);
        CHECK("register", cube_kernel_register(c, source, "fill", &kernel));
        cube_launch l = {
                .kernel = kernel, .cube_count = { 1, 1, 1 }, .cube_dim = { 16, 1, 1 },
                .buffers = &out, .n_buffers = 1, .info = info,
        };
        double t0 = bench_now();
        CHECK("launch", cube_launch_kernel(c, &l));
        CHECK("sync", cube_sync(c, &out, 1));
        double t = bench_now() - t0;
        cube_info_free(info);
        cube_disconnect(c);
        return t;
}

static void first_launch_row(const char *figure, double hit, double compile,
                             const char *target, double limit_ms)
{
        char a[64], b[96];
        snprintf(a, sizeof(a), "%.3f ms", hit * 1e3);
        snprintf(b, sizeof(b), "first launch, compiling: %.1f ms", compile * 1e3);
        printf("| %s | %s | %s | compiling costs %.0fx | %s | %s |\n", figure, a, b,
               compile / hit, target, hit * 1e3 <= limit_ms ? "met" : "MISSED");
        fflush(stdout);
}

static void bench_first_launch(const struct config *cfg)
{
        double *hit = xcalloc((size_t) cfg->runs, sizeof(double));
        double *compile = xcalloc((size_t) cfg->runs, sizeof(double));
        char tag[64], source[256];

        if (cfg->restart_tag)
                snprintf(tag, sizeof(tag), "%s", cfg->restart_tag);
        else
                fresh_tag(tag, sizeof(tag));
        for (int r = 0; r < cfg->runs; r++) {
                fill_source(source, sizeof(source), tag, r);
                compile[r] = first_launch(cfg, source);
                hit[r] = first_launch(cfg, source);
        }
        first_launch_row("first launch, cached by another session (median)",
                         median(hit, cfg->runs), median(compile, cfg->runs), "<= 1 ms", 1.0);
        free(hit);
        free(compile);
}

static void bench_after_restart(const struct config *cfg, const char *restart_tag)
{
        double *disk = xcalloc((size_t) cfg->runs, sizeof(double));
        double *compile = xcalloc((size_t) cfg->runs, sizeof(double));
        char tag[64], source[256], figure[128];

        fresh_tag(tag, sizeof(tag));
        for (int r = 0; r < cfg->runs; r++) {
                fill_source(source, sizeof(source), restart_tag, r);
                disk[r] = first_launch(cfg, source);
                fill_source(source, sizeof(source), tag, r);
                compile[r] = first_launch(cfg, source);
        }
        snprintf(figure, sizeof(figure), "first launch after a daemon restart, disk cache "
                 "(median; the very first: %.3f ms)", disk[0] * 1e3);
        first_launch_row(figure, median(disk, cfg->runs), median(compile, cfg->runs),
                         "<= 2 ms", 2.0);
        free(disk);
        free(compile);
}

/* ---------------------------------------------------------------------------
 * The CPU device's kernels against PoCL's own
 * ------------------------------------------------------------------------- */

static const char bench_reduce_source[] =
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

static const char bench_matmul_source[] =
"KERNEL void matmul(const float *a, const float *b, float *c, INFO)\n"
"{\n"
"        SHARED float ta[16][16];\n"
"        SHARED float tb[16][16];\n"
"        uint32_t m = SCALAR(uint32_t, 0, 0), n = SCALAR(uint32_t, 0, 1), k = SCALAR(uint32_t, 0, 2);\n"
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
"        if (row < m && col < n)\n"
"                c[(size_t) row * n + col] = acc;\n"
"}\n";

/* The same kernels, translated by hand to OpenCL C. */
static const char pocl_source[] =
"__kernel void vadd(__global const float *a, __global const float *b, __global float *out,\n"
"                   uint n)\n"
"{\n"
"        ulong i = get_global_id(0);\n"
"        if (i < n)\n"
"                out[i] = a[i] + b[i];\n"
"}\n"
"__kernel void reduce(__global const float *in, __global float *partial, uint n)\n"
"{\n"
"        __local float part[256];\n"
"        uint t = get_local_id(0);\n"
"        ulong i = get_global_id(0);\n"
"        part[t] = i < n ? in[i] : 0.0f;\n"
"        barrier(CLK_LOCAL_MEM_FENCE);\n"
"        for (uint s = get_local_size(0) / 2; s > 0; s /= 2) {\n"
"                if (t < s)\n"
"                        part[t] += part[t + s];\n"
"                barrier(CLK_LOCAL_MEM_FENCE);\n"
"        }\n"
"        if (t == 0)\n"
"                partial[get_group_id(0)] = part[0];\n"
"}\n"
"__kernel void matmul(__global const float *a, __global const float *b, __global float *c,\n"
"                     uint m, uint n, uint k)\n"
"{\n"
"        __local float ta[16][16];\n"
"        __local float tb[16][16];\n"
"        uint tx = get_local_id(0), ty = get_local_id(1);\n"
"        uint row = get_global_id(1), col = get_global_id(0);\n"
"        float acc = 0.0f;\n"
"        for (uint t = 0; t < k; t += 16) {\n"
"                ta[ty][tx] = row < m && t + tx < k ? a[(size_t) row * k + t + tx] : 0.0f;\n"
"                tb[ty][tx] = t + ty < k && col < n ? b[(size_t) (t + ty) * n + col] : 0.0f;\n"
"                barrier(CLK_LOCAL_MEM_FENCE);\n"
"                for (uint i = 0; i < 16; i++)\n"
"                        acc += ta[ty][i] * tb[i][tx];\n"
"                barrier(CLK_LOCAL_MEM_FENCE);\n"
"        }\n"
"        if (row < m && col < n)\n"
"                c[(size_t) row * n + col] = acc;\n"
"}\n"
"__kernel void nop(__global uint *unused)\n"
"{\n"
"}\n"
"__kernel void relax(__global float *x, uint n)\n"
"{\n"
"        ulong i = get_global_id(0);\n"
"        if (i < n)\n"
"                x[i] = x[i] * 0.5f + 1.0f;\n"
"}\n";

/* One small step of an iterative method: many of them in a row, each on
 * what the one before wrote, with one wait at the end. */
static const char relax_source[] =
"KERNEL void relax(float *x, INFO)\n"
"{\n"
"        uint64_t i = ABSOLUTE_POS;\n"
"        if (i < BUFFER_LEN(0))\n"
"                x[i] = x[i] * 0.5f + 1.0f;\n"
"}\n";

/* One kernel of the table, both ways. */
struct kernel_case {
        const char *figure;
        const char *entry;
        const char *source;
        uint32_t n_bufs;
        size_t bytes[3];
        uint32_t args[3];
        uint32_t n_args;
        uint32_t count[3], dim[3];
        double target;
        bool latency;                   /* timed as a latency: rtt_samples, not runs */
        int chain;                      /* launches on one stream before the sync */
};

/* A kernel case's buffers (in cube, and in PoCL when pb is given), info
 * words and registration: its launch. */
static cube_launch case_launch(cube_client *c, const struct kernel_case *kc, cube_info *info,
                               cube_handle *h, pocl_bench *pb, void **pbufs)
{
        uint64_t kernel;

        for (uint32_t i = 0; i < kc->n_bufs; i++) {
                float *host = xcalloc(kc->bytes[i] / sizeof(float) + 1, sizeof(float));
                for (size_t j = 0; j < kc->bytes[i] / sizeof(float); j++)
                        host[j] = (float) (j % 7);
                CHECK("create", cube_create(c, host, kc->bytes[i], &h[i]));
                if (pb)
                        pbufs[i] = pocl_bench_buffer(pb, kc->bytes[i], host);
                free(host);
        }
        for (uint32_t i = 0; i < kc->n_args; i++)
                cube_info_u32(info, kc->args[i]);
        for (uint32_t i = 0; i < kc->n_bufs; i++)
                cube_info_buffer_len(info, (uint32_t) (kc->bytes[i] / sizeof(float)));
        CHECK("register", cube_kernel_register(c, kc->source, kc->entry, &kernel));
        return (cube_launch) {
                .kernel = kernel,
                .cube_count = { kc->count[0], kc->count[1], kc->count[2] },
                .cube_dim = { kc->dim[0], kc->dim[1], kc->dim[2] },
                .buffers = h, .n_buffers = kc->n_bufs, .info = info,
        };
}

/* /proc/PID/NAME's first cap - 1 bytes into buf, NUL-terminated: their
 * count, or -1 when the process has ended. */
static long read_proc(long pid, const char *name, char *buf, size_t cap)
{
        char path[64];
        FILE *f;
        size_t n;

        snprintf(path, sizeof(path), "/proc/%ld/%s", pid, name);
        if (!(f = fopen(path, "re")))
                return -1;
        n = fread(buf, 1, cap - 1, f);
        fclose(f);
        buf[n] = '\0';
        return (long) n;
}

/* Whether process daemon has a kernel build running: a child of its that is
 * "cube-device --build". */
static bool daemon_building(pid_t daemon)
{
        DIR *proc = opendir("/proc");
        struct dirent *e;
        bool found = false;

        while (proc && !found && (e = readdir(proc))) {
                char buf[512], *end, *fields;
                long pid = strtol(e->d_name, &end, 10), ppid, n;

                if (*end || pid <= 0 || read_proc(pid, "stat", buf, sizeof(buf)) < 0)
                        continue;
                /* After the command's name, which may hold anything. */
                if (!(fields = strrchr(buf, ')')) ||
                    sscanf(fields + 1, " %*c %ld", &ppid) != 1 || ppid != daemon ||
                    (n = read_proc(pid, "cmdline", buf, sizeof(buf))) < 0)
                        continue;
                size_t first = strlen(buf) + 1;
                found = (long) first < n && strcmp(buf + first, "--build") == 0;
        }
        if (proc)
                closedir(proc);
        return found;
}

/* Launches the n launches, chain times over, and syncs once. */
static void launch_all(cube_client *c, const cube_launch *launches, int n, int chain)
{
        for (int t = 0; t < chain; t++)
                for (int i = 0; i < n; i++)
                        CHECK("launch", cube_launch_kernel(c, &launches[i]));
        CHECK("sync", cube_sync(c, NULL, 0));
}

/* Brings each of the n launches to the function built for its cube
 * dimension (docs/KERNELS.md), as PoCL's own first enqueue does for its
 * kernel: launched (in chains of chain, as the row times them) until each
 * has run long enough to ask for that build, then left idle while the
 * builds run. Timing them any earlier measures the generic function a
 * kernel stops using a few seconds later. Each pass launches them again: a
 * build that found no slot free is asked for again by a later launch. */
static void warm_for_shapes(const struct config *cfg, cube_client *c, const cube_launch *launches,
                            int n, int chain)
{
        double ran = 0;

        if (!cfg->wait_for_shapes)
                return;
        for (int r = 0; r < 2 || (ran < 0.25 && r < 1000); r++) {
                double t0 = bench_now();
                launch_all(c, launches, n, chain);
                if (r > 0)
                        ran += (bench_now() - t0) / n;
        }
        if (cfg->daemon_pid <= 0) {
                sleep(SHAPE_BUILD_WAIT_S);
        } else {
                double deadline = bench_now() + SHAPE_BUILD_MAX_S;
                for (int idle = 0; idle < 2 && bench_now() < deadline;) {
                        usleep(250 * 1000);
                        idle = daemon_building(cfg->daemon_pid) ? 0 : idle + 1;
                        launch_all(c, launches, n, 1);
                }
        }
        launch_all(c, launches, n, 1);
}

static void kernel_row(const struct config *cfg, pocl_bench *pb, int pk, const struct kernel_case *kc)
{
        cube_client *c = connect_client(cfg);
        cube_info *info = cube_info_new();
        int runs = kc->latency ? cfg->rtt_samples : cfg->runs;
        double *tc = xcalloc((size_t) runs, sizeof(double));
        double *tp = xcalloc((size_t) runs, sizeof(double));
        cpu_set_t was;
        bool moved;
        cube_handle h[3];
        void *pbufs[3];
        char a[64], b[96];

        cube_launch l = case_launch(c, kc, info, h, pb, pbufs);
        size_t global[3], local[3];
        for (int i = 0; i < 3; i++) {
                local[i] = kc->dim[i];
                global[i] = (size_t) kc->count[i] * kc->dim[i];
        }
        /* Warm both up (compiles), then interleave them run by run; a
         * latency's samples, in turns of 100, so that moving between CPUs
         * is not in them. PoCL runs where the daemon's device runs, as the
         * copies' memcpy does. */
        CHECK("launch", cube_launch_kernel(c, &l));
        CHECK("sync", cube_sync(c, NULL, 0));
        if (!kc->latency)
                warm_for_shapes(cfg, c, &l, 1, kc->chain);
        moved = move_to(peer_cpus(cfg), &was);
        pocl_bench_run(pb, pk, pbufs, (int) kc->n_bufs, kc->args, (int) kc->n_args, global, local,
                       1);
        move_back(moved, &was);
        int chain = kc->chain;
        int turn = kc->latency ? 100 : 1;
        for (int r0 = 0; r0 < runs; r0 += turn) {
                int r1 = r0 + turn < runs ? r0 + turn : runs;
                for (int r = r0; r < r1; r++) {
                        double t0 = bench_now();
                        for (int i = 0; i < chain; i++)
                                CHECK("launch", cube_launch_kernel(c, &l));
                        CHECK("sync", cube_sync(c, NULL, 0));
                        tc[r] = bench_now() - t0;
                }
                moved = move_to(peer_cpus(cfg), &was);
                for (int r = r0; r < r1; r++)
                        tp[r] = pocl_bench_run(pb, pk, pbufs, (int) kc->n_bufs, kc->args,
                                               (int) kc->n_args, global, local, chain);
                move_back(moved, &was);
        }
        double mc = median(tc, runs), mp = median(tp, runs), mpocl = mp, mrelay = 0;
        /* mp becomes the row's floor; mpocl stays PoCL's own run. */
        snprintf(a, sizeof(a), "%.3f ms", mc * 1e3);
        if (kc->latency) {
                /* A launch + sync crosses to the daemon and back once: its
                 * floor is that crossing and the kernel's own run. */
                double *pp = xcalloc((size_t) runs, sizeof(double));
                raw_relay(peer_cpus(cfg), runs, pp);
                mrelay = median(pp, runs);
                raw_ping_pong(peer_cpus(cfg), runs, pp);
                double mpp = median(pp, runs);
                free(pp);
                snprintf(b, sizeof(b), "raw UDS ping-pong %.3f ms + PoCL enqueue + finish %.3f ms",
                         mpp * 1e3, mp * 1e3);
                mp += mpp;
        } else if (chain > 1)
                snprintf(b, sizeof(b), "PoCL: %d enqueues + one finish, same kernel in OpenCL C: "
                         "%.3f ms", chain, mp * 1e3);
        else
                snprintf(b, sizeof(b), "PoCL enqueue + finish, same kernel in OpenCL C: %.3f ms",
                         mp * 1e3);
        char target[32];
        snprintf(target, sizeof(target), "<= %.2fx", kc->target);
        printf("| %s | %s | %s | %.2fx | %s | %s |\n", kc->figure, a, b, mc / mp, target,
               mc / mp <= kc->target ? "met" : "NOT met");
        /* The answer comes back through cubed after the device process's
         * turn: where all of them share one CPU, that is four process turns
         * to the ping-pong's two, and the relay is the floor they allow. */
        if (kc->latency) {
                snprintf(a, sizeof(a), "%.1f us", mc * 1e6);
                snprintf(b, sizeof(b), "raw UDS relay through a second process %.1f us + PoCL "
                         "%.1f us", mrelay * 1e6, mpocl * 1e6);
                printf("| CPU kernel: empty launch + sync, against its relay | %s | %s | %.2fx | "
                       "(none) | - |\n", a, b, mc / (mrelay + mpocl));
        }
        fflush(stdout);
        for (uint32_t i = 0; i < kc->n_bufs; i++)
                CHECK("free", cube_free(c, &h[i]));
        cube_info_free(info);
        cube_disconnect(c);
        free(tc);
        free(tp);
}

/* ---------------------------------------------------------------------------
 * Checked kernels against the same kernels unchecked
 * ------------------------------------------------------------------------- */


/* One kernel launched checked and unchecked (the daemon must list this user
 * in --unchecked-uids), run by run interleaved; the median of each. */
static void checked_row(const struct config *cfg, const struct kernel_case *kc)
{
        cube_client *c = connect_client(cfg);
        cube_info *info = cube_info_new();
        double *tc = xcalloc((size_t) cfg->runs, sizeof(double));
        double *tu = xcalloc((size_t) cfg->runs, sizeof(double));
        cube_handle h[3];
        char a[64], b[96], figure[128], target[32];

        cube_launch l = case_launch(c, kc, info, h, NULL, NULL);
        cube_launch u = l;
        u.mode = CUBE_LAUNCH_UNCHECKED;
        /* Both compiled first, and each built for its cube dimension. */
        cube_launch both[2] = { l, u };
        warm_for_shapes(cfg, c, both, 2, 1);
        for (int r = 0; r < cfg->runs; r++) {
                double t0 = bench_now();
                CHECK("launch", cube_launch_kernel(c, &l));
                CHECK("sync", cube_sync(c, NULL, 0));
                tc[r] = bench_now() - t0;
                t0 = bench_now();
                CHECK("launch", cube_launch_kernel(c, &u));
                CHECK("sync", cube_sync(c, NULL, 0));
                tu[r] = bench_now() - t0;
        }
        double mc = median(tc, cfg->runs), mu = median(tu, cfg->runs);
        snprintf(figure, sizeof(figure), "checked %s", kc->figure + strlen("CPU kernel: "));
        snprintf(a, sizeof(a), "%.3f ms", mc * 1e3);
        snprintf(b, sizeof(b), "the same launch unchecked: %.3f ms", mu * 1e3);
        snprintf(target, sizeof(target), "<= %.2fx", kc->target);
        printf("| %s | %s | %s | %.2fx | %s | %s |\n", figure, a, b, mc / mu, target,
               mc / mu <= kc->target ? "met" : "NOT met");
        fflush(stdout);
        for (uint32_t i = 0; i < kc->n_bufs; i++)
                CHECK("free", cube_free(c, &h[i]));
        cube_info_free(info);
        cube_disconnect(c);
        free(tc);
        free(tu);
}

/* The front end alone on a source, as cubed runs it (a confined
 * cube-device --check): seconds, or -1 when it cannot be run. */
static double frontend_once(const char *helper, const char *source, const char *entry)
{
        char dir[] = "/tmp/cube-bench-fe-XXXXXX";
        cube__sandbox_result res;
        bool ok;

        if (!mkdtemp(dir))
                return -1;
        double t0 = bench_now();
        ok = cube__sandbox_write(dir, "source", source) == 0 &&
             cube__sandbox_write(dir, "entry", entry) == 0 &&
             cube__sandbox_run(helper, "--check", dir, 60, 2048, 256, NULL, &res) == 0 &&
             WIFEXITED(res.status) && WEXITSTATUS(res.status) == 0;
        double t = bench_now() - t0;
        cube__sandbox_remove(dir);
        return ok ? t : -1;
}

/* The CPU kernel table's cases (sizes by --smoke), each with the target its
 * row against PoCL has; figures hold their names. */
#define KERNEL_CASES 7
#define CHAIN_LAUNCHES 1000
static void cpu_kernel_cases(const struct config *cfg, char figures[KERNEL_CASES][64],
                             struct kernel_case ret[KERNEL_CASES])
{
        bool small = cfg->bulk < (16u << 20);
        uint32_t vn = small ? 1u << 16 : 16000000u;
        uint32_t rs = small ? 4096 : 100000, rl = small ? 1u << 16 : 16000000u;
        uint32_t ms = small ? 32 : 256, ml = small ? 64 : 1024;
        char (*f)[64] = figures;

        snprintf(f[0], 64, "CPU kernel: vector add, %u floats", vn);
        snprintf(f[1], 64, "CPU kernel: reduce, %u floats", rs);
        snprintf(f[2], 64, "CPU kernel: reduce, %u floats", rl);
        snprintf(f[3], 64, "CPU kernel: matmul %u x %u", ms, ms);
        snprintf(f[4], 64, "CPU kernel: matmul %u x %u", ml, ml);
        snprintf(f[5], 64, "CPU kernel: empty launch + sync (median of %d)", cfg->rtt_samples);
        snprintf(f[6], 64, "CPU kernel: %d dependent steps of 4096 floats, one sync",
                 CHAIN_LAUNCHES);
        const struct kernel_case cases[KERNEL_CASES] = {
                { f[0], "vadd", vadd_source, 3, { vn * 4ul, vn * 4ul, vn * 4ul }, { vn }, 1,
                  { (vn + 255) / 256, 1, 1 }, { 256, 1, 1 }, 1.05, false, 1 },
                { f[1], "reduce", bench_reduce_source, 2, { rs * 4ul, (rs + 255) / 256 * 4ul },
                  { rs }, 1, { (rs + 255) / 256, 1, 1 }, { 256, 1, 1 }, 1.05, false, 1 },
                { f[2], "reduce", bench_reduce_source, 2, { rl * 4ul, (rl + 255) / 256 * 4ul },
                  { rl }, 1, { (rl + 255) / 256, 1, 1 }, { 256, 1, 1 }, 1.05, false, 1 },
                { f[3], "matmul", bench_matmul_source, 3, { ms * ms * 4ul, ms * ms * 4ul,
                  ms * ms * 4ul }, { ms, ms, ms }, 3, { ms / 16, ms / 16, 1 }, { 16, 16, 1 }, 1.05,
                  false, 1 },
                { f[4], "matmul", bench_matmul_source, 3, { ml * ml * 4ul, ml * ml * 4ul,
                  ml * ml * 4ul }, { ml, ml, ml }, 3, { ml / 16, ml / 16, 1 }, { 16, 16, 1 }, 1.05,
                  false, 1 },
                { f[5], "nop", "KERNEL void nop(uint32_t *unused, INFO)\n{\n}\n", 1, { 64 },
                  { 0 }, 0, { 1, 1, 1 }, { 1, 1, 1 }, 1.5, true, 1 },
                { f[6], "relax", relax_source, 1, { 4096 * 4ul }, { 4096 }, 1, { 16, 1, 1 },
                  { 256, 1, 1 }, 1.5, false, CHAIN_LAUNCHES },
        };
        memcpy(ret, cases, sizeof(cases));
}

static void bench_checked(const struct config *cfg)
{
        char f[KERNEL_CASES][64];
        struct kernel_case cases[KERNEL_CASES];

        /* Every compute kernel of the table, held to 1.10x its unchecked self. */
        cpu_kernel_cases(cfg, f, cases);
        for (size_t i = 0; i < 5; i++) {
                cases[i].target = 1.1;
                checked_row(cfg, &cases[i]);
        }

        /* What reading a registration costs, beside a whole first build. */
        char helper[PATH_MAX];
        if (cube__device_helper(helper, sizeof(helper)) < 0)
                return;
        double *fe = xcalloc((size_t) cfg->runs, sizeof(double));
        double *compile = xcalloc((size_t) cfg->runs, sizeof(double));
        char tag[64], source[256];
        fresh_tag(tag, sizeof(tag));
        bool ok = true;
        for (int r = 0; r < cfg->runs && ok; r++) {
                fill_source(source, sizeof(source), tag, r);
                fe[r] = frontend_once(helper, bench_matmul_source, "matmul");
                ok = fe[r] >= 0;
                compile[r] = first_launch(cfg, source);
        }
        if (ok) {
                double mf = median(fe, cfg->runs), mc = median(compile, cfg->runs);
                printf("| kernel front end: parse, check and rewrite of matmul (cube-device "
                       "--check) | %.1f ms | first launch of a fresh kernel (front end, PoCL "
                       "build, load): %.1f ms | %.2fx | reported | - |\n", mf * 1e3, mc * 1e3,
                       mf / mc);
        }
        free(fe);
        free(compile);
}

static void bench_cpu_kernels(const struct config *cfg)
{
        /* PoCL's worker threads start on the daemon's CPUs, as the device's do. */
        cpu_set_t was;
        bool moved = move_to(peer_cpus(cfg), &was);
        pocl_bench *pb = pocl_bench_new();
        move_back(moved, &was);

        if (!pb)
                return;
        int kv = pocl_bench_kernel(pb, pocl_source, "vadd");
        int kr = pocl_bench_kernel(pb, pocl_source, "reduce");
        int km = pocl_bench_kernel(pb, pocl_source, "matmul");
        int kn = pocl_bench_kernel(pb, pocl_source, "nop");
        int ks = pocl_bench_kernel(pb, pocl_source, "relax");
        if (kv < 0 || kr < 0 || km < 0 || kn < 0 || ks < 0) {
                pocl_bench_free(pb);
                return;
        }
        char f[KERNEL_CASES][64];
        struct kernel_case cases[KERNEL_CASES];
        cpu_kernel_cases(cfg, f, cases);
        const int pks[] = { kv, kr, kr, km, km, kn, ks };
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
                kernel_row(cfg, pb, pks[i], &cases[i]);
        pocl_bench_free(pb);
}

/* ---- all_reduce over two daemons ---------------------------------------- */

struct coll_rank {
        const char *socket;
        int rank;
        const char *id;
        pthread_barrier_t *barrier;
        size_t bytes;
        int iters, runs;                /* bandwidth: runs of iters queued operations */
        int samples;                    /* latency: all_reduce + sync, one at a time */
        double *per_op;                 /* runs entries */
        double *single;                 /* samples entries */
        double fastest;                 /* the fastest sample */
        cube_client *client;            /* rank 0's, connected to mint */
};

/* One rank: joins the minted group, warms up, times its part. */
static void *coll_rank_main(void *arg)
{
        struct coll_rank *r = arg;
        cube_reduction sum = { CUBE_ELEM_F32, CUBE_REDUCE_SUM };
        size_t n = r->bytes / sizeof(float);
        float *buf = xcalloc(n, sizeof(float));
        cube_client *c = r->client;
        cube_handle src, dst;

        if (!c)
                CHECK("connect", cube_connect(r->socket, "cube-bench", &c));
        for (size_t i = 0; i < n; i++)
                buf[i] = (float) (i % 1000) + (float) r->rank;
        CHECK("comm_init_id", cube_comm_init_id(c, r->id, (uint32_t) r->rank, 2));
        cube_group g = { NULL, 0, r->id };
        CHECK("create", cube_create(c, buf, r->bytes, &src));
        CHECK("empty", cube_empty(c, r->bytes, &dst));
        for (int i = 0; i < 3; i++) {
                CHECK("all_reduce", cube_all_reduce(c, &g, &src, &dst, sum, CUBE_WAIT_NOW));
                CHECK("sync", cube_sync(c, NULL, 0));
        }
        for (int k = 0; k < r->runs; k++) {
                pthread_barrier_wait(r->barrier);
                double t0 = bench_now();
                for (int i = 0; i < r->iters; i++)
                        CHECK("all_reduce", cube_all_reduce(c, &g, &src, &dst, sum,
                                                            CUBE_WAIT_NOW));
                CHECK("sync", cube_sync(c, NULL, 0));
                r->per_op[k] = (bench_now() - t0) / r->iters;
        }
        pthread_barrier_wait(r->barrier);
        for (int i = 0; i < r->samples; i++) {
                double t0 = bench_now();
                CHECK("all_reduce", cube_all_reduce(c, &g, &src, &dst, sum, CUBE_WAIT_NOW));
                CHECK("sync", cube_sync(c, NULL, 0));
                r->single[i] = bench_now() - t0;
                if (!i || r->single[i] < r->fastest)
                        r->fastest = r->single[i];
        }
        CHECK("read", cube_read(c, &dst, buf, r->bytes));
        if (n > 1 && buf[1] != 3.0f) {          /* (1 + 0) + (1 + 1) */
                fprintf(stderr, "cube-bench: all_reduce: rank %d: wrong sum %g\n", r->rank,
                        buf[1]);
                exit(1);
        }
        cube_free(c, &src);
        cube_free(c, &dst);
        cube_disconnect(c);
        free(buf);
        return NULL;
}

/* cube's all_reduce of bytes over the two daemons: the median over runs of
 * seconds per queued operation, and the median and the fastest of samples
 * one at a time. */
static void cube_all_reduce_times(const struct config *cfg, size_t bytes, int iters, int runs,
                                  int samples, double *ret_per_op, double *ret_single,
                                  double *ret_fastest)
{
        struct coll_rank r[2];
        pthread_barrier_t barrier;
        pthread_t t[2];
        char id[128];
        cube_client *c0 = connect_client(cfg);

        CHECK("comm_mint", cube_comm_mint(c0, id));
        pthread_barrier_init(&barrier, NULL, 2);
        for (int i = 0; i < 2; i++) {
                r[i] = (struct coll_rank) {
                        .socket = i ? cfg->peer_socket : cfg->socket, .rank = i, .id = id,
                        .barrier = &barrier, .bytes = bytes, .iters = iters, .runs = runs,
                        .samples = samples, .client = i ? NULL : c0,
                        .per_op = xcalloc((size_t) runs, sizeof(double)),
                        .single = xcalloc((size_t) (samples ? samples : 1), sizeof(double)),
                };
                pthread_create(&t[i], NULL, coll_rank_main, &r[i]);
        }
        for (int i = 0; i < 2; i++)
                pthread_join(t[i], NULL);
        pthread_barrier_destroy(&barrier);
        *ret_per_op = median(r[0].per_op, runs);
        *ret_single = samples ? median(r[0].single, samples) : 0;
        *ret_fastest = r[0].fastest;
        for (int i = 0; i < 2; i++) {
                free(r[i].per_op);
                free(r[i].single);
        }
}

/* Both collective rows, unmeasured, saying why. */
static void collectives_not_measured(const char *figure, const char *why)
{
        printf("| %s | n/a: %s | - | - | >= 0.9x | not measured |\n", figure, why);
        printf("| all_reduce 4 KiB f32, 2 daemons (latency) | n/a: %s | - | - | <= 1.5x | "
               "not measured |\n", why);
}

/* The collective rows. The load of a 2-vCPU machine drifts in seconds, so
 * cube and Gloo take turns: each of the N rounds times one run of each (a
 * fresh group and a fresh pair of Gloo processes), and a row compares the
 * medians over rounds. */
static void bench_collectives(const struct config *cfg)
{
        size_t big = cfg->bulk, small = 4096;
        int runs = cfg->runs, iters = runs > 1 ? 4 : 2;
        int samples = (cfg->rtt_samples < 1000 ? cfg->rtt_samples : 1000) / runs + 1;
        double *c_bw = xcalloc((size_t) runs, sizeof(double));
        double *g_bw = xcalloc((size_t) runs, sizeof(double));
        double *c_lat = xcalloc((size_t) runs, sizeof(double));
        double *g_lat = xcalloc((size_t) runs, sizeof(double));
        double c_min = 1e9, g_min = 1e9, fastest, unused;
        char figure[96], cube[64], base[96], id[128];
        bool gloo = true;

        snprintf(figure, sizeof(figure), "all_reduce %.0f MiB f32, 2 daemons (bus bandwidth)",
                 big / MIB);
        if (!cfg->peer_socket) {
                collectives_not_measured(figure, "needs --peer-socket");
                goto out;
        }
        /* A daemon built without a collective engine answers NoDeviceTransport. */
        cube_client *probe = connect_client(cfg);
        cube_error *e = cube_comm_mint(probe, id);
        cube_disconnect(probe);
        if (e) {
                collectives_not_measured(figure, cube_error_message(e));
                cube_error_free(e);
                goto out;
        }
        for (int k = 0; k < runs; k++) {
                cube_all_reduce_times(cfg, big, iters, 1, 0, &c_bw[k], &unused, &fastest);
                gloo = gloo && gloo_allreduce(peer_cpus(cfg), big, iters, 1, &g_bw[k], &unused,
                                              &fastest) == 0;
                cube_all_reduce_times(cfg, small, 1, 1, samples, &unused, &c_lat[k], &fastest);
                c_min = fastest < c_min ? fastest : c_min;
                gloo = gloo && gloo_allreduce(peer_cpus(cfg), small, samples, 1, &unused,
                                              &g_lat[k], &fastest) == 0;
                g_min = fastest < g_min ? fastest : g_min;
        }
        /* n = 2: the bus bandwidth 2 (n - 1) / n * bytes / t is bytes / t. */
        double c_op = median(c_bw, runs), c_one = median(c_lat, runs);
        snprintf(cube, sizeof(cube), "%.2f GB/s (%.1f ms)", big / c_op / 1e9, c_op * 1e3);
        if (!gloo) {
                printf("| %s | %s | n/a: bench-gloo not built or failed | - | >= 0.9x | "
                       "not measured |\n", figure, cube);
                printf("| all_reduce 4 KiB f32, 2 daemons (latency) | %.1f us | n/a: "
                       "bench-gloo not built or failed | - | <= 1.5x | not measured |\n",
                       c_one * 1e6);
                goto out;
        }
        double g_op = median(g_bw, runs), g_one = median(g_lat, runs);
        snprintf(base, sizeof(base), "Gloo allreduce, 2 processes: %.2f GB/s (%.1f ms)",
                 big / g_op / 1e9, g_op * 1e3);
        row(figure, cube, base, g_op / c_op, "x", ">= 0.9x", g_op / c_op >= 0.9);
        snprintf(cube, sizeof(cube), "%.1f us (fastest %.1f us)", c_one * 1e6, c_min * 1e6);
        snprintf(base, sizeof(base), "Gloo allreduce, 2 processes: %.1f us (fastest %.1f us)",
                 g_one * 1e6, g_min * 1e6);
        row("all_reduce 4 KiB f32, 2 daemons (latency)", cube, base, c_one / g_one, "x",
            "<= 1.5x", c_one / g_one <= 1.5);
out:
        free(c_bw);
        free(g_bw);
        free(c_lat);
        free(g_lat);
}

/* The scheduling table's rows: 10 one-second windows per share, 1000
 * latency samples (2 and 20 in a smoke run). */
static void bench_scheduling(const struct config *cfg)
{
        bool full = cfg->rtt_samples >= 1000;

        bench_shares_table(cfg->socket, full ? 10 : 2, full ? 1000 : 20);
}

static void bench_cap(const struct config *cfg)
{
        bench_shares_cap(cfg->socket, cfg->rtt_samples >= 1000 ? 10 : 2);
}

static void bench_floods(const struct config *cfg)
{
        bench_shares_floods(cfg->socket, cfg->rtt_samples >= 1000 ? 1000 : 20);
}

static void usage(FILE *f)
{
        fprintf(f,
                "Usage: cube-bench --socket PATH [--daemon-pid PID] [--runs N] [--smoke]\n"
                "                  [--restart-tag TAG] [--redis-ops OPS] [--only FIGURE]\n"
                "                  [--peer-socket PATH]\n"
                "       cube-bench --socket PATH --after-restart TAG [--runs N] [--smoke]\n"
                "FIGURE: memory, sync, launches, graph, staged, inline, clients, tail, first,\n"
                "        vadd, kernels or collectives; scheduling, cap or floods (only when named).\n");
}

static const struct figure {
        const char *name;
        void (*run)(const struct config *cfg);
        bool named_only;                /* needs a daemon configured for it */
} figures[] = {
        { "memory", bench_session_memory, false },
        { "sync", bench_sync_rtt, false },
        { "launches", bench_launch_rate, false },
        { "graph", bench_graph_replay, false },
        { "staged", bench_staged, false },
        { "inline", bench_inline, false },
        { "clients", bench_many_clients, false },
        { "tail", bench_tail_latency, false },
        { "first", bench_first_launch, false },
        { "vadd", bench_vector_add, false },
        { "kernels", bench_cpu_kernels, false },
        { "checked", bench_checked, false },
        { "collectives", bench_collectives, false },
        { "scheduling", bench_scheduling, true },
        { "cap", bench_cap, true },
        { "floods", bench_floods, true },
};

#define N_FIGURES (sizeof(figures) / sizeof(figures[0]))

/* The table's rows, in order: memory first, while the daemon is fresh. */
static int run_figures(const struct config *cfg)
{
        bool any = false;

        print_placement(cfg);
        printf("latencies: median of %d samples; rates and bandwidths: median of %d run(s)\n\n",
               cfg->rtt_samples, cfg->runs);
        printf("| figure | cube | baseline (same run) | ratio | target | verdict |\n");
        printf("|---|---|---|---|---|---|\n");
        for (size_t i = 0; i < N_FIGURES; i++) {
                if (cfg->only ? strcmp(cfg->only, figures[i].name) != 0 : figures[i].named_only)
                        continue;
                figures[i].run(cfg);
                any = true;
        }
        if (!any) {
                fprintf(stderr, "cube-bench: no figure named %s\n", cfg->only);
                return 2;
        }
        return 0;
}

int main(int argc, char **argv)
{
        static const struct option options[] = {
                { "socket", required_argument, NULL, 's' },
                { "daemon-pid", required_argument, NULL, 'p' },
                { "runs", required_argument, NULL, 'r' },
                { "smoke", no_argument, NULL, 'S' },
                { "restart-tag", required_argument, NULL, 't' },
                { "after-restart", required_argument, NULL, 'a' },
                { "redis-ops", required_argument, NULL, 'R' },
                { "only", required_argument, NULL, 'o' },
                { "peer-socket", required_argument, NULL, 'P' },
                { "help", no_argument, NULL, 'h' },
                {}
        };
        struct config cfg = {
                .runs = 5, .bulk = 64u << 20, .rtt_samples = 2000, .pipelined = 20000,
                .clients = 64, .seconds = 0.5, .sessions = 256,
                .wait_for_shapes = true,
        };
        const char *after_restart = NULL;
        bool smoke = false;
        int opt;

        /* PoCL's pthread device (the kernels' baseline, listed first) and its
         * basic device (the enqueue floor), as the CPU device has them. */
        setenv("POCL_DEVICES", "pthread basic", 0);

        while ((opt = getopt_long(argc, argv, "s:p:r:St:a:R:o:P:h", options, NULL)) != -1) {
                switch (opt) {
                case 's': cfg.socket = optarg; break;
                case 'p': cfg.daemon_pid = (pid_t) atoi(optarg); break;
                case 'r': cfg.runs = atoi(optarg) > 0 ? atoi(optarg) : 1; break;
                case 'S': smoke = true; break;
                case 't': cfg.restart_tag = optarg; break;
                case 'a': after_restart = optarg; break;
                case 'R': cfg.redis_ops = atof(optarg); break;
                case 'o': cfg.only = optarg; break;
                case 'P': cfg.peer_socket = optarg; break;
                case 'h': usage(stdout); return 0;
                default: usage(stderr); return 2;
                }
        }
        if (smoke) {
                cfg = (struct config) {
                        .socket = cfg.socket, .daemon_pid = cfg.daemon_pid,
                        .restart_tag = cfg.restart_tag, .redis_ops = cfg.redis_ops,
                        .only = cfg.only, .peer_socket = cfg.peer_socket,
                        .runs = 1, .bulk = 1u << 20, .rtt_samples = 20, .pipelined = 100,
                        .clients = 4, .seconds = 0.02, .sessions = 4,
                };
        }
        if (cfg.daemon_pid > 0 &&
            sched_getaffinity(cfg.daemon_pid, sizeof(cfg.daemon_cpus), &cfg.daemon_cpus) == 0)
                cfg.have_daemon_cpus = true;

        if (after_restart) {
                bench_after_restart(&cfg, after_restart);
                return 0;
        }
        return run_figures(&cfg);
}

/*
 * test-sharing.c - many clients on one device: a stress run of processes
 * that die at random, the order of work across streams and its concurrency,
 * isolation between sessions, sharing by export and import, every quota,
 * backpressure, fairness between sessions, who may connect, and shared
 * memory outliving the session that exported it.
 *
 * Every test starts its own daemon and ends by stopping it with SIGTERM,
 * which must exit 0 and remove the socket file. Tests that need a peer of
 * another uid fork a child that becomes nobody (65534); they are skipped
 * when the suite does not run as root.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "errors.h"

#define NOBODY 65534

static void start(const char *const *args)
{
        ck_assert_int_eq(test_daemon_start(&D, args), 0);
}

/* A small generator for the forked clients, which must not share a sequence. */
static uint64_t next_rand(uint64_t *x)
{
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        return *x;
}

/* Fills n u32 with values that differ from one seed to the next; faster than
 * fill_random for the buffers of tens of MiB. */
static void fill_words(uint32_t *p, size_t n, uint64_t seed)
{
        uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;

        for (size_t i = 0; i < n; i++)
                p[i] = (uint32_t) (next_rand(&x) >> 16);
}

/* ---------------------------------------------------------------------------
 * Kernels
 * ------------------------------------------------------------------------- */

/* out[i] = in[i] * 2 + k, k the first u32 scalar. */
static const char scale2_source[] =
        "KERNEL void scale2(const uint32_t *in, uint32_t *out, INFO)\n"
        "{\n"
        "        uint32_t k = SCALAR(uint32_t, 0, 0);\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "\n"
        "        if (i < BUFFER_LEN(1))\n"
        "                out[i] = in[i] * 2u + k;\n"
        "}\n";

/* The same result written to two outputs. */
static const char twin_source[] =
        "KERNEL void twin(const uint32_t *in, uint32_t *a, uint32_t *b, INFO)\n"
        "{\n"
        "        uint32_t k = SCALAR(uint32_t, 0, 0);\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "\n"
        "        if (i < BUFFER_LEN(2)) {\n"
        "                a[i] = in[i] * 2u + k;\n"
        "                b[i] = in[i] * 2u + k;\n"
        "        }\n"
        "}\n";

/* Busy for n rounds of a generator no compiler can fold, n the first u64. */
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

/* Does nothing: the cheapest launch there is. */
static const char nop_source[] =
        "KERNEL void nop(uint32_t *unused, INFO)\n"
        "{\n"
        "        (void) unused;\n"
        "}\n";

/* A scale2 launch over n elements. Returns the library's own verdict, so
 * that forked clients, which must not use Check, can call it too. */
static cube_error *launch_scale2(cube_client *c, uint64_t kernel, const cube_handle *in,
                                 const cube_handle *out, uint32_t n, uint32_t k)
{
        cube_handle bufs[2] = { *in, *out };
        cube_info *info = cube_info_new();
        cube_error *e;

        if (!info || cube_info_u32(info, k) < 0 || cube_info_buffer_len(info, n) < 0 ||
            cube_info_buffer_len(info, n) < 0) {
                cube_info_free(info);
                return cube__err_generic("out of memory building a launch's info");
        }
        e = cube_launch_kernel(c, &(cube_launch) {
                .kernel = kernel, .cube_count = { (n + 255) / 256, 1, 1 },
                .cube_dim = { 256, 1, 1 }, .buffers = bufs, .n_buffers = 2, .info = info,
        });
        cube_info_free(info);
        return e;
}

static void launch_twin(cube_client *c, uint64_t kernel, const cube_handle *in,
                        const cube_handle *a, const cube_handle *b, uint32_t n, uint32_t k)
{
        cube_handle bufs[3] = { *in, *a, *b };
        cube_info *info = cube_info_new();

        ck_assert_int_eq(cube_info_u32(info, k), 0);
        for (int i = 0; i < 3; i++)
                ck_assert_int_eq(cube_info_buffer_len(info, n), 0);
        ck_ok(cube_launch_kernel(c, &(cube_launch) {
                .kernel = kernel, .cube_count = { (n + 255) / 256, 1, 1 },
                .cube_dim = { 256, 1, 1 }, .buffers = bufs, .n_buffers = 3, .info = info,
        }));
        cube_info_free(info);
}

/* One unit spinning for n rounds, writing its 8-byte out: the library's
 * verdict, for threads that must not assert. */
static cube_error *spin_try(cube_client *c, uint64_t kernel, const cube_handle *out, uint64_t n)
{
        cube_info *info = cube_info_new();
        cube_error *e;

        if (!info || cube_info_u64(info, n) < 0 || cube_info_buffer_len(info, 1) < 0) {
                cube_info_free(info);
                return cube__err_generic("out of memory building a launch's info");
        }
        e = cube_launch_kernel(c, &(cube_launch) {
                .kernel = kernel, .cube_count = { 1, 1, 1 }, .cube_dim = { 1, 1, 1 },
                .buffers = out, .n_buffers = 1, .info = info,
        });
        cube_info_free(info);
        return e;
}

static void launch_spin(cube_client *c, uint64_t kernel, const cube_handle *out, uint64_t n)
{
        ck_ok(spin_try(c, kernel, out, n));
}

/* The rounds of spin that take about ms milliseconds on this machine, on the
 * calling thread's stream: measured rather than guessed, since the tests
 * that use it compare other work against the kernel's own time. */
static uint64_t spin_rounds_for(cube_client *c, uint64_t kernel, const cube_handle *out, int ms)
{
        uint64_t n = 1u << 22;

        launch_spin(c, kernel, out, 1);         /* compiles it */
        ck_ok(cube_sync(c, out, 1));
        for (;;) {
                long t0 = test_now_ms();
                launch_spin(c, kernel, out, n);
                ck_ok(cube_sync(c, out, 1));
                long took = test_now_ms() - t0;
                if (took >= 40 || n >= (1ull << 40))
                        return (uint64_t) ((double) n * ms / (double) (took > 0 ? took : 1));
                n *= 4;
        }
}

/* ---------------------------------------------------------------------------
 * Reports
 * ------------------------------------------------------------------------- */

/* e must be Several with exactly one Unwritten claim; returns its root. */
static const cube_error *one_claim_root(const cube_error *e)
{
        ck_assert_msg(e != NULL, "no failure was reported");
        ck_assert_msg(cube_error_kind_of(e) == CUBE_SERVER_SEVERAL, "expected Several, got %s",
                      cube_error_message(e));
        ck_assert_uint_eq(cube_error_count(e), 1);
        ck_assert_int_eq(cube_error_kind_of(cube_error_at(e, 0)), CUBE_SERVER_UNWRITTEN);
        return cube_error_source(cube_error_at(e, 0));
}

/* e is one claim whose root is Validation mentioning what. */
static void expect_claimed_validation(cube_error *e, const char *what)
{
        const cube_error *root = one_claim_root(e);

        ck_assert_msg(cube_error_kind_of(root) == CUBE_SERVER_VALIDATION, "the root is %s: %s",
                      cube_error_variant(root), cube_error_message(e));
        ck_assert_msg(strstr(cube_error_reason(root), what), "'%s' is not in: %s", what,
                      cube_error_message(e));
        cube_error_free(e);
}

/* e is Io(NotFound), bare or as the root of one claim. */
static void expect_not_found(cube_error *e, bool claimed)
{
        const cube_error *io = claimed ? one_claim_root(e) : e;

        ck_assert_msg(io && cube_error_kind_of(io) == CUBE_SERVER_IO &&
                      cube_error_kind_of(cube_error_source(io)) == CUBE_IO_NOT_FOUND,
                      "expected Io(NotFound), got %s", e ? cube_error_message(e) : "success");
        cube_error_free(e);
}

/* e is the library's own refusal of a write through h, a read-only import:
 * ServerError::Validation, bare (no claim: nothing reached the daemon). */
static void expect_refused_write(cube_error *e, const cube_handle *h)
{
        char id[32];

        snprintf(id, sizeof(id), "memory %" PRIu64 " ", h->memory);
        ck_assert_msg(e && cube_error_kind_of(e) == CUBE_SERVER_VALIDATION &&
                      strstr(cube_error_reason(e), "read-only import") &&
                      strstr(cube_error_reason(e), id),
                      "a write to a read-only import: %s (%s)", e ? cube_error_message(e) : "allowed",
                      e ? cube_error_reason(e) : "");
        cube_error_free(e);
}

/* got[i] == in[i] * 2 + k for all n: one assertion, not one per element
 * (each passing assertion is a message to Check's parent process). */
static void expect_scaled(const uint32_t *got, const uint32_t *in, size_t n, uint32_t k)
{
        for (size_t i = 0; i < n; i++)
                if (got[i] != in[i] * 2u + k)
                        ck_abort_msg("element %zu is %u, not %u", i, got[i], in[i] * 2u + k);
}

/* A session's line of cube_daemon_sessions. */
static cube_session_info session_info(cube_client *asker, uint64_t id)
{
        cube_session_info *v, found = {0};
        size_t n;
        bool seen = false;

        ck_ok(cube_daemon_sessions(asker, &v, &n));
        for (size_t i = 0; i < n; i++)
                if (v[i].id == id) {
                        found = v[i];
                        seen = true;
                }
        free(v);
        ck_assert_msg(seen, "session %" PRIu64 " is not listed", id);
        return found;
}

/* Work the daemon still holds on one stream of a session; 0 when the stream
 * is not listed. */
static uint64_t stream_pending(cube_client *asker, uint64_t session, uint64_t stream)
{
        cube_stream_info *v;
        uint64_t pending = 0;
        size_t n;

        ck_ok(cube_daemon_streams(asker, &v, &n));
        for (size_t i = 0; i < n; i++)
                if (v[i].session == session && v[i].stream == stream)
                        pending = v[i].pending;
        free(v);
        return pending;
}

/* The daemon's open descriptors, counted in /proc; when list is given, each
 * one as "fd:target " into it, for a failure to show what differs. */
static int open_fds(pid_t pid, char *list, size_t cap)
{
        char path[64], entry[320], target[64];
        struct dirent *de;
        size_t len = 0;
        DIR *d;
        int n = 0;

        snprintf(path, sizeof(path), "/proc/%d/fd", (int) pid);
        d = opendir(path);
        ck_assert_msg(d, "cannot list %s: %s", path, strerror(errno));
        if (list && cap)
                list[0] = '\0';
        while ((de = readdir(d))) {
                if (de->d_name[0] == '.')
                        continue;
                n++;
                if (!list || len >= cap)
                        continue;
                snprintf(entry, sizeof(entry), "%s/%s", path, de->d_name);
                ssize_t r = readlink(entry, target, sizeof(target) - 1);
                target[r > 0 ? r : 0] = '\0';
                len += (size_t) snprintf(list + len, cap - len, "%s:%s ", de->d_name, target);
        }
        closedir(d);
        return n;
}

/* ---------------------------------------------------------------------------
 * Peers of another uid
 *
 * A child becomes nobody and runs a step function; it talks to the test over
 * two pipes, one byte a message, so that the test can act while the child
 * holds its sessions. Its exit status is the step's verdict (0: as expected).
 * ------------------------------------------------------------------------- */

/* Waits for the child to say it holds its sessions; when it ends instead, the
 * test fails with its exit status (its own message is on stderr). */
static void await_holding(nobody *n)
{
        int said = hear(n->from_child, test_scaled_ms(10000));

        if (said != 'h')
                ck_abort_msg("nobody stopped before holding its sessions (exit status %d)",
                             nobody_finish(n));
}

/* In a child: a connect that must be refused with a message naming what. */
static bool refused_naming(const char *socket, const char *what)
{
        cube_client *c;
        cube_error *e = cube_connect(socket, "nobody", &c);
        bool ok = e && strstr(cube_error_message(e), what);

        if (!e) {
                dprintf(2, "nobody connected; a refusal naming %s was expected\n", what);
                cube_disconnect(c);
        } else if (!ok) {
                dprintf(2, "refused, but not for %s: %s\n", what, cube_error_message(e));
        }
        cube_error_free(e);
        return ok;
}

/* In a child: connects, and proves the session works with a round trip. */
static cube_client *connect_and_use(const char *socket)
{
        unsigned char data[256], back[256];
        cube_client *c;
        cube_handle h;
        cube_error *e;

        fill_random(data, sizeof(data), 77);
        if ((e = cube_connect(socket, "nobody", &c))) {
                dprintf(2, "connect as nobody: %s\n", cube_error_message(e));
                cube_error_free(e);
                return NULL;
        }
        if ((e = cube_create(c, data, sizeof(data), &h)) ||
            (e = cube_read(c, &h, back, sizeof(back))) || (e = cube_free(c, &h))) {
                dprintf(2, "a round trip as nobody: %s\n", cube_error_message(e));
                cube_error_free(e);
                cube_disconnect(c);
                return NULL;
        }
        if (memcmp(data, back, sizeof(data)) != 0) {
                dprintf(2, "a round trip as nobody read other bytes\n");
                cube_disconnect(c);
                return NULL;
        }
        return c;
}

/* In a child: connects again once an ended session's place is free (the
 * daemon notices an end when it reads it, a moment later). */
static cube_client *connect_when_free(const char *socket)
{
        long deadline = test_now_ms() + test_scaled_ms(5000);

        for (;;) {
                cube_client *c;
                cube_error *e = cube_connect(socket, "nobody", &c);
                if (!e)
                        return c;
                if (test_now_ms() > deadline) {
                        dprintf(2, "no place came free: %s\n", cube_error_message(e));
                        cube_error_free(e);
                        return NULL;
                }
                cube_error_free(e);
                usleep(10000);
        }
}

/* ---------------------------------------------------------------------------
 * 1. Stress: many processes, a quarter of them killed
 * ------------------------------------------------------------------------- */

#define STRESS_CLIENTS 64
#define STRESS_VICTIMS 16
#define STRESS_ROUNDS 24
#define STRESS_STREAMS 4
#define STRESS_HOLD 8192                /* what every survivor keeps at the end */

/* What a client reports when it holds its last buffer: its index, and
 * whether every result it checked was right. */
typedef struct stress_report {
        uint8_t index;
        uint8_t ok;
} stress_report;

/* One round of a stress client: a fresh input on a random stream, the kernel,
 * the result read back on another random stream (so the read depends on the
 * launch across streams), sometimes a rewrite of the input, then both freed. */
static bool stress_round(cube_client *c, uint64_t kernel, uint32_t k, uint64_t *rng, int index)
{
        uint32_t in[1024], out[1024];
        uint32_t n = 64 + (uint32_t) (next_rand(rng) % 960);
        cube_handle hin, hout;
        cube_error *e;

        for (uint32_t i = 0; i < n; i++)
                in[i] = (uint32_t) next_rand(rng);
        cube_stream_set(1 + next_rand(rng) % STRESS_STREAMS);
        if ((e = cube_create(c, in, n * 4, &hin)) || (e = cube_empty(c, n * 4, &hout)) ||
            (e = launch_scale2(c, kernel, &hin, &hout, n, k)))
                goto fail;
        cube_stream_set(1 + next_rand(rng) % STRESS_STREAMS);
        if ((e = cube_read(c, &hout, out, n * 4)))
                goto fail;
        for (uint32_t i = 0; i < n; i++)
                if (out[i] != in[i] * 2u + k) {
                        dprintf(2, "client %d: out[%u] is %u, not %u\n", index, i, out[i],
                                in[i] * 2u + k);
                        return false;
                }
        if (next_rand(rng) % 3 == 0) {
                for (uint32_t i = 0; i < n; i++)
                        in[i] = (uint32_t) next_rand(rng);
                if ((e = cube_write(c, &hin, in, n * 4)))
                        goto fail;
                cube_stream_set(1 + next_rand(rng) % STRESS_STREAMS);
                if ((e = cube_read(c, &hin, out, n * 4)))
                        goto fail;
                if (memcmp(in, out, n * 4) != 0) {
                        dprintf(2, "client %d: a rewritten input read back different\n", index);
                        return false;
                }
        }
        if (next_rand(rng) % 5 == 0 && (e = cube_sync(c, NULL, 0)))
                goto fail;
        if ((e = cube_free(c, &hin)) || (e = cube_free(c, &hout)))
                goto fail;
        return true;
fail:
        dprintf(2, "client %d: %s\n", index, cube_error_message(e));
        cube_error_free(e);
        return false;
}

/* A forked client. A victim works until it is killed; a survivor does its
 * rounds, keeps STRESS_HOLD bytes, reports, and waits for the test to let it
 * go (EOF on release). Never returns. */
static _Noreturn void stress_client(int index, bool victim, uint64_t seed, int report,
                                    int release)
{
        uint64_t rng = (seed ^ (uint64_t) index * 0x9e3779b97f4a7c15ull) | 1, kernel;
        uint32_t k = (uint32_t) index * 7 + 3;
        stress_report r = { (uint8_t) index, 0 };
        long give_up = test_now_ms() + 60000;
        unsigned char hold_data[STRESS_HOLD];
        cube_client *c;
        cube_handle hold;
        cube_error *e;
        bool ok = true;
        char byte;

        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if ((e = cube_connect(D.socket, "stress", &c)) ||
            (e = cube_kernel_register(c, scale2_source, "scale2", &kernel))) {
                dprintf(2, "client %d: %s\n", index, cube_error_message(e));
                _exit(2);
        }
        for (int round = 0; ok && (victim || round < STRESS_ROUNDS); round++) {
                ok = stress_round(c, kernel, k, &rng, index);
                if (victim && test_now_ms() > give_up)
                        _exit(3);               /* never killed: the test has failed */
        }
        if (victim)
                _exit(4);                       /* a failure of its own before the kill */

        fill_random(hold_data, sizeof(hold_data), (uint64_t) index);
        if (ok && ((e = cube_create(c, hold_data, sizeof(hold_data), &hold)) ||
                   (e = cube_sync(c, &hold, 1)))) {
                dprintf(2, "client %d: %s\n", index, cube_error_message(e));
                cube_error_free(e);
                ok = false;
        }
        r.ok = ok;
        if (write(report, &r, sizeof(r)) != sizeof(r))
                _exit(5);
        while (read(release, &byte, 1) > 0)
                ;
        cube_disconnect(c);
        _exit(ok ? 0 : 1);
}

START_TEST(stress_with_a_quarter_of_the_clients_killed)
{
        pid_t pids[STRESS_CLIENTS];
        bool victim[STRESS_CLIENTS] = {0}, reported[STRESS_CLIENTS] = {0};
        long kill_at[STRESS_CLIENTS];
        int order[STRESS_CLIENTS], report[2], release[2], baseline, fds, survivors = 0;
        uint64_t seed = (uint64_t) time(NULL), rng = seed | 1, kernel;
        uint32_t in[256], out[256];
        char before[2048], after[2048];
        cube_client *c;
        cube_handle hin, hout;

        start(NULL);
        /* The baseline is the listener alone: the connection start() made to
         * see the daemon ready may not be closed on its side yet. */
        for (long settle = test_now_ms() + test_scaled_ms(5000);; usleep(10000)) {
                baseline = open_fds(D.pid, before, sizeof(before));
                const char *sock = strstr(before, "socket:");
                if (!sock || !strstr(sock + 1, "socket:") || test_now_ms() > settle)
                        break;
        }

        /* Compile the kernel once, so that no client waits for the compiler. */
        fill_words(in, 256, 1);
        ck_ok(cube_connect(D.socket, "warm", &c));
        kernel = test_kernel(c, scale2_source, "scale2");
        ck_ok(cube_create(c, in, sizeof(in), &hin));
        ck_ok(cube_empty(c, sizeof(out), &hout));
        ck_ok(launch_scale2(c, kernel, &hin, &hout, 256, 1));
        ck_ok(cube_read(c, &hout, out, sizeof(out)));
        ck_assert_uint_eq(out[255], in[255] * 2u + 1);
        cube_disconnect(c);
        ck_assert(wait_memory_in_use(D.socket, 0, 5000));

        /* Which clients die, and when: a random quarter, within the first
         * half second. The seed is printed so that a failure can be rerun. */
        fprintf(stderr, "stress seed %" PRIu64 "\n", seed);
        for (int i = 0; i < STRESS_CLIENTS; i++)
                order[i] = i;
        for (int i = STRESS_CLIENTS - 1; i > 0; i--) {
                int j = (int) (next_rand(&rng) % (uint64_t) (i + 1)), t = order[i];
                order[i] = order[j];
                order[j] = t;
        }
        for (int i = 0; i < STRESS_VICTIMS; i++) {
                victim[order[i]] = true;
                kill_at[order[i]] = (long) (next_rand(&rng) % 500);
        }

        ck_assert_int_eq(pipe(report), 0);
        ck_assert_int_eq(pipe(release), 0);
        long t0 = test_now_ms();
        for (int i = 0; i < STRESS_CLIENTS; i++) {
                pids[i] = fork();
                ck_assert_int_ge(pids[i], 0);
                if (pids[i] == 0) {
                        close(report[0]);
                        close(release[1]);
                        stress_client(i, victim[i], seed, report[1], release[0]);
                }
        }
        close(report[1]);
        close(release[0]);

        /* The kills, in time order. */
        for (long ms = 0; ms <= 500; ms += 5) {
                for (int i = 0; i < STRESS_CLIENTS; i++)
                        if (victim[i] && kill_at[i] >= 0 && kill_at[i] <= ms) {
                                ck_assert_int_eq(kill(pids[i], SIGKILL), 0);
                                kill_at[i] = -1;
                        }
                long wait = t0 + ms + 5 - test_now_ms();
                if (wait > 0)
                        usleep((useconds_t) wait * 1000);
        }

        /* Every survivor reports, once, that all its results were right. */
        long deadline = test_now_ms() + test_scaled_ms(45000);
        while (survivors < STRESS_CLIENTS - STRESS_VICTIMS) {
                stress_report r;
                struct pollfd p = { .fd = report[0], .events = POLLIN };
                long left = deadline - test_now_ms();

                ck_assert_msg(left > 0 && poll(&p, 1, (int) left) == 1,
                              "only %d of %d survivors reported", survivors,
                              STRESS_CLIENTS - STRESS_VICTIMS);
                ck_assert_int_eq(read(report[0], &r, sizeof(r)), sizeof(r));
                ck_assert_int_lt(r.index, STRESS_CLIENTS);
                ck_assert_msg(!victim[r.index], "client %d was killed, yet reported", r.index);
                ck_assert_msg(!reported[r.index], "client %d reported twice", r.index);
                ck_assert_msg(r.ok, "client %d found a wrong result or a failure", r.index);
                reported[r.index] = true;
                survivors++;
        }

        /* The killed clients left nothing: what is in use is exactly what the
         * survivors hold. */
        ck_assert_msg(wait_memory_in_use(D.socket, (uint64_t) survivors * STRESS_HOLD, 10000),
                      "memory in use is %" PRIu64 ", not %d survivors x %d",
                      status_of(D.socket).memory_in_use, survivors, STRESS_HOLD);
        cube_status st = status_of(D.socket);
        ck_assert_uint_eq(st.allocations, (uint64_t) survivors);

        close(release[1]);
        for (int i = 0; i < STRESS_CLIENTS; i++) {
                int status;
                ck_assert_int_eq(waitpid(pids[i], &status, 0), pids[i]);
                if (victim[i])
                        ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                                      "victim %d ended with status %#x before its kill", i,
                                      status);
                else
                        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                                      "survivor %d ended with status %#x", i, status);
        }
        close(report[0]);
        ck_assert(wait_memory_in_use(D.socket, 0, 10000));

        /* Every connection is closed: the daemon holds what it held at first. */
        deadline = test_now_ms() + test_scaled_ms(5000);
        while ((fds = open_fds(D.pid, after, sizeof(after))) != baseline &&
               test_now_ms() < deadline)
                usleep(10000);
        ck_assert_msg(fds == baseline, "the daemon had open %s\nit has %s", before, after);
        test_stop_clean();
}
END_TEST

/* ---------------------------------------------------------------------------
 * 2. Order across streams
 *
 * Without the executor's ordering by buffer, the read on stream B would be
 * handed to a second device worker while the first still copies the 32 MiB
 * (or runs the kernel) of stream A, and would see old bytes.
 * ------------------------------------------------------------------------- */

START_TEST(work_on_another_stream_sees_what_came_before_it)
{
        const size_t n = 32u << 20, words = n / 4;
        uint32_t *data = malloc(n), *back = malloc(n), *want = malloc(n);
        uint64_t kernel;
        cube_client *c;
        cube_handle h, mid, out;

        start(NULL);
        ck_ok(cube_connect(D.socket, "streams", &c));
        cube_stream_set(1);
        ck_ok(cube_empty(c, n, &h));
        for (int i = 0; i < 10; i++) {
                uint64_t a = 1 + (uint64_t) (i % 2), b = 2 - (uint64_t) (i % 2);
                fill_words(data, words, 100 + (uint64_t) i);
                cube_stream_set(a);
                ck_ok(cube_write(c, &h, data, n));
                cube_stream_set(b);
                memset(back, 0, n);
                ck_ok(cube_read(c, &h, back, n));
                ck_assert_msg(memcmp(data, back, n) == 0,
                              "round %d: the read on stream %" PRIu64 " missed the write on "
                              "stream %" PRIu64, i, b, a);
        }

        /* A kernel on A writes mid; a kernel on B reads it, and a read on B
         * sees it too. */
        kernel = test_kernel(c, scale2_source, "scale2");
        cube_stream_set(1);
        ck_ok(cube_empty(c, n, &mid));
        ck_ok(cube_empty(c, n, &out));
        for (int i = 0; i < 3; i++) {
                fill_words(data, words, 200 + (uint64_t) i);
                cube_stream_set(1);
                ck_ok(cube_write(c, &h, data, n));
                ck_ok(launch_scale2(c, kernel, &h, &mid, (uint32_t) words, 5));
                cube_stream_set(2);
                ck_ok(launch_scale2(c, kernel, &mid, &out, (uint32_t) words, 7));
                ck_ok(cube_read(c, &out, back, n));
                for (size_t j = 0; j < words; j++)
                        want[j] = (data[j] * 2u + 5u) * 2u + 7u;
                ck_assert_msg(memcmp(want, back, n) == 0,
                              "round %d: the kernel on stream 2 missed the one on stream 1", i);
                cube_stream_set(3);
                ck_ok(cube_read(c, &mid, back, n));
                expect_scaled(back, data, words, 5);
        }
        cube_disconnect(c);
        free(data);
        free(back);
        free(want);
        ck_assert(wait_memory_in_use(D.socket, 0, 5000));
        test_stop_clean();
}
END_TEST

/* ---------------------------------------------------------------------------
 * 3. Streams run side by side
 * ------------------------------------------------------------------------- */

typedef struct side_work {
        cube_client *c;
        cube_handle h;
        long began, ended;
        bool right;
        cube_error *e;
} side_work;

/* A write and a read of an unrelated buffer, on a stream of its own, once
 * the long kernel surely runs. */
static void *side_thread(void *arg)
{
        side_work *w = arg;
        unsigned char data[65536], back[65536];

        cube_stream_set(2);
        fill_random(data, sizeof(data), 99);
        usleep(50000);
        w->began = test_now_ms();
        if (!(w->e = cube_write(w->c, &w->h, data, sizeof(data))))
                w->e = cube_read(w->c, &w->h, back, sizeof(back));
        w->ended = test_now_ms();
        w->right = !w->e && memcmp(data, back, sizeof(data)) == 0;
        return NULL;
}

static pthread_t side_start(side_work *w)
{
        pthread_t t;

        ck_assert_int_eq(pthread_create(&t, NULL, side_thread, w), 0);
        return t;
}

/* Joins the side work, which must have read back what it wrote. */
static void side_done(side_work *w, pthread_t t)
{
        pthread_join(t, NULL);
        ck_assert_msg(!w->e, "the side work failed: %s", w->e ? cube_error_message(w->e) : "");
        ck_assert_msg(w->right, "the side work read back other bytes");
}

START_TEST(a_long_kernel_does_not_hold_up_another_stream)
{
        side_work w = {0};
        uint64_t kernel, rounds;
        unsigned char zero[65536] = {0};
        cube_client *c;
        cube_handle spin_out;
        pthread_t t;

        start(NULL);
        ck_ok(cube_connect(D.socket, "concurrent", &c));
        kernel = test_kernel(c, spin_source, "spin");
        cube_stream_set(1);
        ck_ok(cube_create(c, zero, 8, &spin_out));
        ck_ok(cube_create(c, zero, sizeof(zero), &w.h));
        rounds = spin_rounds_for(c, kernel, &spin_out, test_scaled_ms(400));

        w.c = c;
        long t0 = test_now_ms();
        launch_spin(c, kernel, &spin_out, rounds);
        t = side_start(&w);
        ck_ok(cube_sync(c, &spin_out, 1));
        long kernel_ms = test_now_ms() - t0;
        side_done(&w, t);

        fprintf(stderr, "concurrency: a write and read took %ld ms beside a %ld ms kernel\n",
                w.ended - w.began, kernel_ms);
        /* The kernel ran long enough for the comparison to mean something,
         * and the side work finished well inside it. */
        ck_assert_msg(kernel_ms >= test_scaled_ms(200), "the kernel took only %ld ms", kernel_ms);
        ck_assert_msg(w.ended - w.began < kernel_ms / 4,
                      "a write and read on another stream took %ld ms beside a %ld ms kernel",
                      w.ended - w.began, kernel_ms);
        ck_assert_msg(w.ended < t0 + kernel_ms, "the side work ended after the kernel");
        cube_disconnect(c);
        test_stop_clean();
}
END_TEST

/* A write queued on stream A (from a region, so the client does not wait
 * for it) and a read right behind it on stream B reach the daemon together.
 * Where the device orders streams itself (CUDA), the read's work once went
 * to the device ahead of the write's, waited for nothing, and read the old
 * bytes (on an H200: kernels on stream 2 that missed stream 1's). */
START_TEST(a_queued_write_is_seen_by_a_read_right_behind_it_on_another_stream)
{
        const size_t n = 8u << 20, words = n / 4;
        uint32_t *back = malloc(n), *want = malloc(n);
        cube_region *r;
        cube_client *c;
        cube_handle h;

        start(NULL);
        ck_ok(cube_connect(D.socket, "queued", &c));
        cube_stream_set(1);
        ck_ok(cube_empty(c, n, &h));
        ck_ok(cube_region_create(c, n, &r));
        for (int i = 0; i < 20; i++) {
                fill_words(want, words, 300 + (uint64_t) i);
                memcpy(r->data, want, n);
                cube_stream_set(1 + (uint64_t) (i % 2));
                ck_ok(cube_write_region(c, &h, r, 0));
                cube_stream_set(2 - (uint64_t) (i % 2));
                ck_ok(cube_read(c, &h, back, n));
                ck_assert_msg(memcmp(want, back, n) == 0, "round %d: the read missed the write "
                              "queued before it on another stream", i);
                ck_ok(cube_sync(c, NULL, 0));
        }
        cube_region_free(c, r);
        cube_disconnect(c);
        free(back);
        free(want);
}
END_TEST

/* Two allocations made on one stream share a page; a long launch over one
 * holds up nothing of the other's on another stream. The device's order
 * between streams once went by page (a write beside a 393 ms kernel on an
 * H200 took 343 ms); it goes by allocation. The test double's launches
 * take 400 ms here. */
START_TEST(a_launch_holds_up_no_neighbour_in_its_page_on_another_stream)
{
        side_work w = {0};
        unsigned char zero[65536] = {0};
        uint64_t kernel;
        cube_client *c;
        cube_handle a, b;
        pthread_t t;

        setenv("CUBE_CUDA_DOUBLE_LAUNCH_US", "400000", 1);
        start(NULL);
        ck_ok(cube_connect(D.socket, "neighbours", &c));
        kernel = test_kernel(c, scale2_source, "scale2");
        cube_stream_set(1);
        ck_ok(cube_create(c, zero, 4096, &a));
        ck_ok(cube_create(c, zero, 4096, &b));
        ck_ok(cube_create(c, zero, sizeof(zero), &w.h));
        /* Built and loaded first: a launch waiting for its kernel holds the
         * session's later requests. */
        ck_ok(launch_scale2(c, kernel, &a, &b, 1024, 1));
        ck_ok(cube_sync(c, &b, 1));
        w.c = c;
        long t0 = test_now_ms();
        ck_ok(launch_scale2(c, kernel, &a, &b, 1024, 1));
        t = side_start(&w);
        ck_ok(cube_sync(c, &b, 1));
        long kernel_ms = test_now_ms() - t0;
        side_done(&w, t);
        ck_assert_msg(kernel_ms >= 300, "the launch took only %ld ms", kernel_ms);
        ck_assert_msg(w.ended - w.began < kernel_ms / 4,
                      "a write and read of a neighbour took %ld ms beside a %ld ms launch",
                      w.ended - w.began, kernel_ms);
        cube_disconnect(c);
        test_stop_clean();
}
END_TEST

/* ---------------------------------------------------------------------------
 * 4. Isolation
 * ------------------------------------------------------------------------- */

START_TEST(a_launch_naming_another_sessions_memory_touches_nothing)
{
        uint32_t da[1024], db[1024], pattern[1024];
        uint64_t ka, kb, kt;
        cube_client *a, *b;
        cube_handle ha, hb, hout, hout2;

        start(NULL);
        fill_words(da, 1024, 11);
        fill_words(db, 1024, 12);
        memset(pattern, 0xa5, sizeof(pattern));
        ck_ok(cube_connect(D.socket, "a", &a));
        ck_ok(cube_connect(D.socket, "b", &b));
        ka = test_kernel(a, scale2_source, "scale2");
        kb = test_kernel(b, scale2_source, "scale2");
        kt = test_kernel(b, twin_source, "twin");
        ck_ok(cube_create(a, da, sizeof(da), &ha));
        ck_ok(cube_create(b, db, sizeof(db), &hb));
        ck_ok(cube_create(b, pattern, sizeof(pattern), &hout));
        ck_ok(cube_create(b, pattern, sizeof(pattern), &hout2));
        ck_ok(cube_sync(a, &ha, 1));

        /* A's memory as an input: B's output carries NotFound. */
        ck_ok(launch_scale2(b, kb, &ha, &hout, 1024, 1));
        expect_not_found(cube_check(b, &hout, 1), true);
        cube_error *e = cube_read(b, &hout, pattern, sizeof(pattern));
        ck_assert_ptr_nonnull(strstr(cube_error_message(e), "belongs to session"));
        cube_error_free(e);

        /* A's memory as an output: A's bytes stay, B's other output carries
         * NotFound. */
        launch_twin(b, kt, &hb, &ha, &hout2, 1024, 2);
        expect_not_found(cube_check(b, &hout2, 1), true);
        ck_ok(cube_sync(b, NULL, 0));
        test_expect_bytes(a, &ha, da, sizeof(da));
        ck_ok(cube_check(a, &ha, 1));

        /* A's own launches still run on it. */
        ck_ok(cube_empty(a, sizeof(da), &hb));
        ck_ok(launch_scale2(a, ka, &ha, &hb, 1024, 3));
        ck_ok(cube_read(a, &hb, db, sizeof(db)));
        expect_scaled(db, da, 1024, 3);
        cube_disconnect(a);
        cube_disconnect(b);
        ck_assert(wait_memory_in_use(D.socket, 0, 5000));
        test_stop_clean();
}
END_TEST

/* ---------------------------------------------------------------------------
 * 5. Export and import
 * ------------------------------------------------------------------------- */

static void expect_token(const char *token)
{
        ck_assert_uint_eq(strlen(token), 32);
        for (int i = 0; i < 32; i++)
                ck_assert_msg(strchr("0123456789abcdef", token[i]), "token %s is not hex", token);
}

START_TEST(an_import_shares_the_bytes_and_a_read_only_one_refuses_writes)
{
        enum { N = 1024 };
        uint32_t da[N], dbytes[N], dx[N], back[N];
        char token[33], again[33];
        uint64_t kernel;
        cube_client *a, *b;
        cube_handle ha, hb, hr, hr2, hr3, hin, hout;
        cube_error *e;

        start(NULL);
        fill_words(da, N, 21);
        fill_words(dbytes, N, 22);
        fill_words(dx, N, 23);
        ck_ok(cube_connect(D.socket, "a", &a));
        ck_ok(cube_connect(D.socket, "b", &b));
        ck_ok(cube_create(a, da, sizeof(da), &ha));
        ck_ok(cube_export(a, &ha, token));
        expect_token(token);
        ck_ok(cube_export(a, &ha, again));
        ck_assert_str_eq(token, again);

        /* Read-write: each side sees the other's writes. */
        ck_ok(cube_import(b, token, false, &hb));
        ck_assert_uint_eq(hb.size, sizeof(da));
        ck_assert_uint_ne(hb.memory, ha.memory);
        test_expect_bytes(b, &hb, da, sizeof(da));
        ck_ok(cube_write(b, &hb, dbytes, sizeof(dbytes)));
        ck_ok(cube_sync(b, &hb, 1));
        test_expect_bytes(a, &ha, dbytes, sizeof(dbytes));
        ck_assert_uint_eq(status_of(D.socket).memory_in_use, sizeof(da));

        /* Read-only: a write through it is refused at once (the next test
         * says how), and touches no holder. */
        ck_ok(cube_import(b, token, true, &hr));
        test_expect_bytes(b, &hr, dbytes, sizeof(dbytes));
        expect_refused_write(cube_write(b, &hr, dx, sizeof(dx)), &hr);
        ck_ok(cube_sync(b, NULL, 0));
        ck_ok(cube_check(a, &ha, 1));
        ck_ok(cube_check(b, &hb, 1));
        test_expect_bytes(a, &ha, dbytes, sizeof(dbytes));
        test_expect_bytes(b, &hb, dbytes, sizeof(dbytes));

        /* A launch that would write a read-only import is refused. */
        kernel = test_kernel(b, scale2_source, "scale2");
        ck_ok(cube_import(b, token, true, &hr2));
        ck_ok(cube_create(b, dx, sizeof(dx), &hin));
        ck_ok(launch_scale2(b, kernel, &hin, &hr2, N, 1));
        expect_claimed_validation(cube_check(b, &hr2, 1), "read-only import");
        ck_ok(cube_sync(b, NULL, 0));
        ck_ok(cube_check(a, &ha, 1));
        test_expect_bytes(a, &ha, dbytes, sizeof(dbytes));

        /* Reading it through a const parameter is what it is for. */
        ck_ok(cube_import(b, token, true, &hr3));
        ck_ok(cube_empty(b, sizeof(back), &hout));
        ck_ok(launch_scale2(b, kernel, &hr3, &hout, N, 9));
        ck_ok(cube_read(b, &hout, back, sizeof(back)));
        expect_scaled(back, dbytes, N, 9);

        /* The name whose launch was refused carries that failure as an input
         * too: a launch reading it is skipped, and its output claims it. */
        ck_ok(cube_empty(b, sizeof(back), &hout));
        ck_ok(launch_scale2(b, kernel, &hr2, &hout, N, 9));
        expect_claimed_validation(cube_check(b, &hout, 1), "read-only import");

        /* A read-only import cannot be passed on with write access. */
        e = cube_export(b, &hr3, again);
        ck_assert_msg(e && cube_error_kind_of(e) == CUBE_SERVER_VALIDATION &&
                      strstr(cube_error_message(e), "read-only import"),
                      "exporting a read-only import: %s", e ? cube_error_message(e) : "allowed");
        cube_error_free(e);

        /* Tokens nobody exported. */
        expect_not_found(cube_import(b, "0123456789abcdef0123456789abcdef", false, &hin), false);
        expect_not_found(cube_import(b, "not a token", true, &hin), false);

        cube_disconnect(a);
        cube_disconnect(b);
        ck_assert(wait_memory_in_use(D.socket, 0, 5000));
        test_stop_clean();
}
END_TEST

/* Every way of writing a read-only import is refused by the library when
 * it is called, with ServerError::Validation, and sends nothing: the name's
 * later reads, and launches reading it, see the shared bytes as they are. */
START_TEST(a_write_to_a_read_only_import_is_refused_at_once)
{
        enum { N = 4096 };
        uint32_t data[N], other[N], back[N];
        static const cube_buffer_io declared[2][2] = {
                { CUBE_BUFFER_READ_ONLY, CUBE_BUFFER_WRITE_ONLY },
                { CUBE_BUFFER_READ_ONLY, CUBE_BUFFER_READ_WRITE },
        };
        char token[33];
        uint64_t kernel;
        cube_client *a, *b;
        cube_handle ha, hr, hin, hout;
        cube_region *region;
        cube_error *e;

        start(NULL);
        fill_words(data, N, 41);
        fill_words(other, N, 42);
        ck_ok(cube_connect(D.socket, "a", &a));
        ck_ok(cube_connect(D.socket, "b", &b));
        ck_ok(cube_create(a, data, sizeof(data), &ha));
        ck_ok(cube_export(a, &ha, token));
        ck_ok(cube_import(b, token, true, &hr));

        /* A write, whole, a slice, strided and from a region. */
        expect_refused_write(cube_write(b, &hr, other, sizeof(other)), &hr);
        cube_handle tail = cube_handle_slice(&hr, sizeof(other) / 2, 0);
        expect_refused_write(cube_write(b, &tail, other, sizeof(other) / 2), &hr);
        cube_copy strided = { .handle = hr, .rank = 2, .shape = { 64, 64 },
                              .strides = { 64, 1 }, .elem_size = 4 };
        expect_refused_write(cube_write_strided(b, &strided, other, sizeof(other)), &hr);
        ck_ok(cube_region_create(b, sizeof(other), &region));
        memcpy(region->data, other, sizeof(other));
        expect_refused_write(cube_write_region(b, &hr, region, 0), &hr);
        cube_region_free(b, region);

        /* A launch declaring it written. */
        kernel = test_kernel(b, scale2_source, "scale2");
        ck_ok(cube_create(b, other, sizeof(other), &hin));
        for (int i = 0; i < 2; i++) {
                cube_handle bufs[2] = { hin, hr };
                e = cube_launch_kernel(b, &(cube_launch) {
                        .kernel = kernel, .cube_count = { N / 256, 1, 1 },
                        .cube_dim = { 256, 1, 1 }, .buffers = bufs, .io = declared[i],
                        .n_buffers = 2 });
                expect_refused_write(e, &hr);
        }

        /* Nothing of it reached the daemon: reads through the name, and a
         * launch reading it, are as good as before. */
        ck_ok(cube_sync(b, NULL, 0));
        ck_ok(cube_check(b, &hr, 1));
        test_expect_bytes(b, &hr, data, sizeof(data));
        test_expect_bytes(a, &ha, data, sizeof(data));
        ck_ok(cube_empty(b, sizeof(back), &hout));
        ck_ok(launch_scale2(b, kernel, &hr, &hout, N, 3));
        ck_ok(cube_read(b, &hout, back, sizeof(back)));
        expect_scaled(back, data, N, 3);
        ck_assert_uint_eq(session_info(a, cube_client_session(b)).errors, 0);

        /* The same memory imported writable is written as ever. */
        cube_handle hw;
        ck_ok(cube_import(b, token, false, &hw));
        ck_ok(cube_write(b, &hw, other, sizeof(other)));
        ck_ok(cube_sync(b, &hw, 1));
        test_expect_bytes(b, &hr, other, sizeof(other));

        cube_disconnect(a);
        cube_disconnect(b);
        ck_assert(wait_memory_in_use(D.socket, 0, 5000));
        test_stop_clean();
}
END_TEST

START_TEST(shared_memory_lives_until_its_last_holder_lets_go)
{
        enum { N = 65536 };
        unsigned char *data = malloc(N);
        char token[33];
        cube_client *a, *b, *c;
        cube_handle ha, hb, hr, hc;

        start(NULL);
        fill_random(data, N, 31);
        ck_ok(cube_connect(D.socket, "a", &a));
        ck_ok(cube_connect(D.socket, "b", &b));
        ck_ok(cube_create(a, data, N, &ha));
        ck_ok(cube_export(a, &ha, token));
        ck_ok(cube_import(b, token, false, &hb));
        ck_ok(cube_import(b, token, true, &hr));

        /* One allocation, counted once, charged to its creator. */
        cube_status st = status_of(D.socket);
        ck_assert_uint_eq(st.memory_in_use, N);
        ck_assert_uint_eq(st.allocations, 1);
        ck_assert_uint_eq(session_info(b, cube_client_session(a)).memory_in_use, N);
        ck_assert_uint_eq(session_info(b, cube_client_session(b)).memory_in_use, 0);

        /* The creator lets go: the bytes stay, charged to B now. */
        ck_ok(cube_free(a, &ha));
        ck_ok(cube_sync(a, NULL, 0));
        ck_assert_uint_eq(status_of(D.socket).memory_in_use, N);
        ck_assert_uint_eq(session_info(b, cube_client_session(a)).memory_in_use, 0);
        ck_assert_uint_eq(session_info(b, cube_client_session(b)).memory_in_use, N);
        test_expect_bytes(b, &hb, data, N);
        cube_disconnect(a);
        test_expect_bytes(b, &hr, data, N);
        ck_assert_uint_eq(status_of(D.socket).memory_in_use, N);

        /* The token still works while anyone holds the memory. */
        ck_ok(cube_connect(D.socket, "c", &c));
        ck_ok(cube_import(c, token, true, &hc));
        test_expect_bytes(c, &hc, data, N);
        cube_disconnect(c);

        /* The last name goes: so do the bytes, and the token. */
        ck_ok(cube_free(b, &hb));
        ck_ok(cube_sync(b, NULL, 0));
        ck_assert_uint_eq(status_of(D.socket).memory_in_use, N);
        ck_ok(cube_free(b, &hr));
        ck_ok(cube_sync(b, NULL, 0));
        ck_assert(wait_memory_in_use(D.socket, 0, 5000));
        expect_not_found(cube_import(b, token, false, &hc), false);

        /* The same when the holders disconnect instead, creator first. */
        ck_ok(cube_connect(D.socket, "a", &a));
        ck_ok(cube_create(a, data, N, &ha));
        ck_ok(cube_export(a, &ha, token));
        ck_ok(cube_import(b, token, true, &hr));
        cube_disconnect(a);
        test_expect_bytes(b, &hr, data, N);
        ck_assert(wait_memory_in_use(D.socket, N, 5000));
        cube_disconnect(b);
        ck_assert(wait_memory_in_use(D.socket, 0, 5000));
        free(data);
        test_stop_clean();
}
END_TEST

/* ---------------------------------------------------------------------------
 * 6. Quotas
 * ------------------------------------------------------------------------- */

/* e is one claim of Io(OutOfMemory{size}) whose chain ends naming quota. */
static void expect_over_quota(cube_error *e, uint64_t size, const char *quota)
{
        const cube_error *root = one_claim_root(e), *u = cube_error_at(e, 0);
        size_t n = cube_error_chain_len(u);

        ck_assert_int_eq(cube_error_kind_of(root), CUBE_SERVER_IO);
        ck_assert_int_eq(cube_error_kind_of(cube_error_source(root)), CUBE_IO_OUT_OF_MEMORY);
        ck_assert_uint_eq(cube_error_size(cube_error_source(root)), size);
        ck_assert(cube_error_may_succeed_after_reclaim(root));
        ck_assert_msg(n >= 1 && strstr(cube_error_chain_at(u, n - 1), quota),
                      "the chain's last line does not name %s: %s", quota, cube_error_message(e));
        cube_error_free(e);
}

START_TEST(session_memory_caps_one_session)
{
        static const char *const args[] = { "--session-memory", "1M", NULL };
        cube_client *c, *other;
        cube_handle h1, h2, h3, ho;

        start(args);
        ck_ok(cube_connect(D.socket, "quota", &c));
        ck_ok(cube_empty(c, 600 * 1024, &h1));
        ck_ok(cube_empty(c, 600 * 1024, &h2));
        ck_ok(cube_check(c, &h1, 1));
        expect_over_quota(cube_check(c, &h2, 1), 614400, "session-memory");
        ck_assert_uint_eq(status_of(D.socket).memory_in_use, 614400);

        /* Another session has a quota of its own. */
        ck_ok(cube_connect(D.socket, "other", &other));
        ck_ok(cube_empty(other, 600 * 1024, &ho));
        ck_ok(cube_check(other, &ho, 1));
        cube_disconnect(other);

        /* Reclaiming makes room. */
        ck_ok(cube_free(c, &h1));
        ck_ok(cube_free(c, &h2));
        ck_ok(cube_empty(c, 600 * 1024, &h3));
        ck_ok(cube_check(c, &h3, 1));
        cube_disconnect(c);
        ck_assert(wait_memory_in_use(D.socket, 0, 5000));
        test_stop_clean();
}
END_TEST

START_TEST(uid_memory_caps_a_users_sessions_together)
{
        static const char *const args[] = { "--uid-memory", "1M", NULL };
        cube_client *a, *b;
        cube_handle ha, hb, hb2;

        start(args);
        ck_ok(cube_connect(D.socket, "a", &a));
        ck_ok(cube_connect(D.socket, "b", &b));
        ck_ok(cube_empty(a, 600 * 1024, &ha));
        ck_ok(cube_check(a, &ha, 1));
        ck_ok(cube_empty(b, 600 * 1024, &hb));
        expect_over_quota(cube_check(b, &hb, 1), 614400, "uid-memory");

        /* A frees (and the daemon has read it): B fits. */
        ck_ok(cube_free(a, &ha));
        ck_ok(cube_sync(a, NULL, 0));
        ck_ok(cube_empty(b, 600 * 1024, &hb2));
        ck_ok(cube_check(b, &hb2, 1));
        cube_disconnect(a);
        cube_disconnect(b);
        ck_assert(wait_memory_in_use(D.socket, 0, 5000));
        test_stop_clean();
}
END_TEST

/* Memory another holder lets go of is charged to the session that keeps it,
 * quota or not; a session over its quota that way may still not grow. */
START_TEST(a_session_over_its_quota_by_inheritance_may_not_grow)
{
        static const char *const args[] = { "--session-memory", "1M", NULL };
        char token[33];
        cube_client *a, *b;
        cube_handle ha, hb, hi, more;

        start(args);
        ck_ok(cube_connect(D.socket, "a", &a));
        ck_ok(cube_connect(D.socket, "b", &b));
        ck_ok(cube_empty(a, 600 * 1024, &ha));
        ck_ok(cube_export(a, &ha, token));
        ck_ok(cube_empty(b, 600 * 1024, &hb));
        ck_ok(cube_import(b, token, false, &hi));
        ck_ok(cube_check(b, &hb, 1));
        ck_ok(cube_free(a, &ha));
        ck_ok(cube_sync(a, NULL, 0));
        ck_assert_uint_eq(session_info(b, cube_client_session(b)).memory_in_use, 1200 * 1024);

        ck_ok(cube_empty(b, 600 * 1024, &more));
        expect_over_quota(cube_check(b, &more, 1), 614400, "session-memory");
        ck_assert_uint_eq(status_of(D.socket).memory_in_use, 1200 * 1024);
        cube_disconnect(a);
        cube_disconnect(b);
        ck_assert(wait_memory_in_use(D.socket, 0, 5000));
        test_stop_clean();
}
END_TEST

/* Importing one's own export and freeing the first name must not shed the
 * charge: the bytes are still the session's. */
START_TEST(a_session_that_imports_its_own_export_keeps_the_charge)
{
        static const char *const args[] = { "--session-memory", "1M", NULL };
        char token[33];
        cube_client *a;
        cube_handle ha, hi, more;

        start(args);
        ck_ok(cube_connect(D.socket, "a", &a));
        ck_ok(cube_empty(a, 600 * 1024, &ha));
        ck_ok(cube_export(a, &ha, token));
        ck_ok(cube_import(a, token, false, &hi));
        ck_ok(cube_free(a, &ha));
        ck_ok(cube_sync(a, NULL, 0));
        ck_assert_uint_eq(session_info(a, cube_client_session(a)).memory_in_use, 600 * 1024);

        ck_ok(cube_empty(a, 600 * 1024, &more));
        expect_over_quota(cube_check(a, &more, 1), 614400, "session-memory");
        cube_disconnect(a);
        ck_assert(wait_memory_in_use(D.socket, 0, 5000));
        test_stop_clean();
}
END_TEST

/* nobody holds two sessions; a third is refused; root still gets in; once one
 * ends, nobody gets in again. */
static int hold_max_sessions(const char *socket, int from_test, int to_test)
{
        cube_client *c1 = connect_and_use(socket), *c2 = connect_and_use(socket), *c3;

        if (!c1 || !c2 || !refused_naming(socket, "max-sessions"))
                return 1;
        if (write(to_test, "h", 1) != 1 || hear(from_test, 30000) != 'g')
                return 2;
        cube_disconnect(c1);
        if (!(c3 = connect_when_free(socket)))
                return 3;
        cube_disconnect(c2);
        cube_disconnect(c3);
        return 0;
}

START_TEST(max_sessions_refuses_one_more)
{
        static const char *const args[] = { "--max-sessions", "2", NULL };
        cube_client *root;
        nobody n;

        if (!running_as_root())
                return;
        start(args);
        open_socket_to_all(&D);
        nobody_start(&n, D.socket, hold_max_sessions);
        await_holding(&n);
        ck_ok(cube_connect(D.socket, "root", &root));   /* exempt */
        cube_disconnect(root);
        tell(n.to_child, 'g');
        ck_assert_int_eq(nobody_finish(&n), 0);
        test_stop_clean();
}
END_TEST

static int hold_one_session_per_uid(const char *socket, int from_test, int to_test)
{
        cube_client *c1 = connect_and_use(socket), *c2;

        if (!c1 || !refused_naming(socket, "max-sessions-per-uid"))
                return 1;
        if (write(to_test, "h", 1) != 1 || hear(from_test, 30000) != 'g')
                return 2;
        cube_disconnect(c1);
        if (!(c2 = connect_when_free(socket)))
                return 3;
        cube_disconnect(c2);
        return 0;
}

START_TEST(max_sessions_per_uid_refuses_a_second)
{
        static const char *const args[] = { "--max-sessions-per-uid", "1", NULL };
        cube_client *r1, *r2;
        nobody n;

        if (!running_as_root())
                return;
        start(args);
        open_socket_to_all(&D);
        nobody_start(&n, D.socket, hold_one_session_per_uid);
        await_holding(&n);
        ck_ok(cube_connect(D.socket, "root", &r1));     /* exempt */
        ck_ok(cube_connect(D.socket, "root", &r2));
        cube_disconnect(r1);
        cube_disconnect(r2);
        tell(n.to_child, 'g');
        ck_assert_int_eq(nobody_finish(&n), 0);
        test_stop_clean();
}
END_TEST

START_TEST(max_streams_refuses_a_fifth_stream)
{
        static const char *const args[] = { "--max-streams", "4", NULL };
        uint32_t data[5][256], back[256];
        uint64_t kernel;
        cube_client *c;
        cube_handle h[5], out;
        cube_error *e;

        start(args);
        ck_ok(cube_connect(D.socket, "streams", &c));
        kernel = test_kernel(c, scale2_source, "scale2");
        for (int i = 0; i < 5; i++) {
                fill_words(data[i], 256, 40 + (uint64_t) i);
                cube_stream_set(1 + (uint64_t) i);
                ck_ok(cube_create(c, data[i], sizeof(data[i]), &h[i]));
        }
        cube_stream_set(1);
        for (int i = 0; i < 4; i++)
                test_expect_bytes(c, &h[i], data[i], sizeof(data[i]));
        expect_claimed_validation(cube_check(c, &h[4], 1), "max-streams");

        /* A read or a launch on the fifth stream is refused the same way. */
        cube_stream_set(5);
        e = cube_read(c, &h[0], back, sizeof(back));
        ck_assert_msg(e && cube_error_kind_of(e) == CUBE_SERVER_VALIDATION &&
                      strstr(cube_error_message(e), "max-streams"),
                      "a read on a fifth stream: %s", e ? cube_error_message(e) : "succeeded");
        cube_error_free(e);
        cube_stream_set(1);
        ck_ok(cube_empty(c, sizeof(back), &out));
        cube_stream_set(5);
        ck_ok(launch_scale2(c, kernel, &h[0], &out, 256, 1));
        cube_stream_set(1);
        expect_claimed_validation(cube_check(c, &out, 1), "max-streams");

        /* The four streams still work (out carries the refusal: a fresh
         * output). */
        ck_ok(cube_empty(c, sizeof(back), &out));
        cube_stream_set(4);
        ck_ok(launch_scale2(c, kernel, &h[0], &out, 256, 1));
        ck_ok(cube_read(c, &out, back, sizeof(back)));
        expect_scaled(back, data[0], 256, 1);
        cube_disconnect(c);
        test_stop_clean();
}
END_TEST

/* A client that queues far more than its limits let the daemon hold: first a
 * long kernel, so that everything after it waits in the daemon, then writes
 * of count slices of size bytes, then one read of them all. */
typedef struct flood {
        cube_client *c;
        uint64_t kernel, rounds;
        cube_handle spin_out, buf;
        size_t count, size;
        atomic_bool done;
        bool right;
        cube_error *e;
} flood;

static void *flood_thread(void *arg)
{
        flood *f = arg;
        size_t total = f->count * f->size;
        unsigned char *data = malloc(total), *back = malloc(total);

        cube_stream_set(1);
        fill_random(data, total, 55);
        launch_spin(f->c, f->kernel, &f->spin_out, f->rounds);
        for (size_t i = 0; !f->e && i < f->count; i++) {
                cube_handle slice = cube_handle_slice(&f->buf, i * f->size,
                                                      total - (i + 1) * f->size);
                f->e = cube_write(f->c, &slice, data + i * f->size, f->size);
        }
        if (!f->e)
                f->e = cube_read(f->c, &f->buf, back, total);
        f->right = !f->e && memcmp(data, back, total) == 0;
        free(data);
        free(back);
        atomic_store(&f->done, true);
        return NULL;
}

/* Floods from one client while another keeps asking for the sessions: the
 * flood ends with the right bytes, the other client is answered promptly
 * throughout, and the daemon never holds more of the flood than the limit
 * allows (most_pending). */
static void flood_and_watch(size_t count, size_t size, uint64_t most_pending)
{
        flood f = { .count = count, .size = size };
        cube_client *watcher;
        long slowest = 0, deadline;
        uint64_t seen_pending = 0;
        unsigned answers = 0;
        pthread_t t;

        ck_ok(cube_connect(D.socket, "flood", &f.c));
        ck_ok(cube_connect(D.socket, "watcher", &watcher));
        f.kernel = test_kernel(f.c, spin_source, "spin");
        cube_stream_set(1);
        ck_ok(cube_empty(f.c, 8, &f.spin_out));
        ck_ok(cube_empty(f.c, count * size, &f.buf));
        f.rounds = spin_rounds_for(f.c, f.kernel, &f.spin_out, test_scaled_ms(300));
        atomic_init(&f.done, false);

        ck_assert_int_eq(pthread_create(&t, NULL, flood_thread, &f), 0);
        deadline = test_now_ms() + test_scaled_ms(20000);
        while (!atomic_load(&f.done)) {
                cube_session_info *v;
                size_t n;
                long t0 = test_now_ms();

                ck_assert_msg(t0 < deadline, "the flood did not finish: the client hangs");
                ck_ok(cube_daemon_sessions(watcher, &v, &n));
                free(v);
                if (test_now_ms() - t0 > slowest)
                        slowest = test_now_ms() - t0;
                answers++;
                uint64_t p = stream_pending(watcher, cube_client_session(f.c), 1);
                if (p > seen_pending)
                        seen_pending = p;
                usleep(2000);
        }
        pthread_join(t, NULL);
        fprintf(stderr, "flood of %zu x %zu bytes: %u answers, the slowest %ld ms; at most %"
                PRIu64 " pieces held\n", count, size, answers, slowest, seen_pending);
        ck_assert_msg(!f.e, "the flood failed: %s", f.e ? cube_error_message(f.e) : "");
        ck_assert_msg(f.right, "the flood's bytes read back different");
        ck_assert_msg(answers >= 5, "only %u answers during the flood", answers);
        ck_assert_msg(slowest < test_scaled_ms(250), "sessions took %ld ms to answer during a "
                      "flood", slowest);
        ck_assert_msg(seen_pending >= 2, "the flood was never seen queued (%" PRIu64 ")",
                      seen_pending);
        ck_assert_msg(seen_pending <= most_pending, "the daemon held %" PRIu64 " pieces of the "
                      "flood's work; its limits allow %" PRIu64, seen_pending, most_pending);
        cube_disconnect(f.c);
        cube_disconnect(watcher);
        ck_assert(wait_memory_in_use(D.socket, 0, 5000));
}

START_TEST(max_requests_holds_back_a_flood_of_small_writes)
{
        static const char *const args[] = { "--max-requests", "8", NULL };

        start(args);
        /* In flight at most 8, and one more message's worth: a read is two. */
        flood_and_watch(200, 4096, 9);
        test_stop_clean();
}
END_TEST

START_TEST(max_queued_bytes_holds_back_a_flood_of_large_writes)
{
        static const char *const args[] = { "--max-queued-bytes", "1M", NULL };

        start(args);
        /* The kernel, and 1 MiB of 256 KiB writes: the fourth reaches the
         * limit, and the daemon reads no further. */
        flood_and_watch(20, 256 * 1024, 6);
        test_stop_clean();
}
END_TEST

/* ---------------------------------------------------------------------------
 * 7. Fairness
 *
 * executor.c's bound: a newly ready piece of work waits at most one round
 * (one piece of work of each other session with ready work) plus what the
 * device already holds (at most DEVICE_WINDOW = 64 pieces). B's launch and
 * read are two pieces, so B waits for at most a few dozen of A's empty
 * launches, however many A has queued: milliseconds, against the seconds A's
 * queue takes to drain.
 * ------------------------------------------------------------------------- */

/* More than any machine sends in the flood's 2 s: it is the clock that
 * ends the flood. 200,000 took 0.3-0.9 s to send and drain on a 2-vCPU
 * EPYC, too short a queue to be ten times B's wait. */
#define FAIR_LAUNCHES 20000000

typedef struct flooder {
        cube_client *c;
        uint64_t kernel;
        cube_handle unused;
        atomic_long sent;
        long began, synced;
        cube_error *e;
} flooder;

static void *fair_flood_thread(void *arg)
{
        flooder *f = arg;
        cube_info *info = cube_info_new();
        cube_launch l = {
                .kernel = f->kernel, .cube_count = { 1, 1, 1 }, .cube_dim = { 1, 1, 1 },
                .buffers = &f->unused, .n_buffers = 1, .info = info,
        };

        cube_stream_set(1);
        cube_info_buffer_len(info, 1);
        f->began = test_now_ms();
        for (long i = 0; !f->e && i < FAIR_LAUNCHES; i++) {
                f->e = cube_launch_kernel(f->c, &l);
                atomic_store(&f->sent, i + 1);
                if (i % 256 == 0 && test_now_ms() - f->began > 2000)
                        break;
        }
        if (!f->e)
                f->e = cube_sync(f->c, &f->unused, 1);
        f->synced = test_now_ms();
        atomic_store(&f->sent, -1);
        cube_info_free(info);
        return NULL;
}

START_TEST(a_flooding_session_delays_another_by_a_bounded_amount)
{
        uint32_t in[1024], out[1024];
        flooder f = {0};
        uint64_t kernel, pending;
        cube_client *b;
        cube_handle hin, hout;
        cube_info *info;
        pthread_t t;
        long sent;

        start(NULL);
        ck_ok(cube_connect(D.socket, "flooder", &f.c));
        ck_ok(cube_connect(D.socket, "b", &b));
        f.kernel = test_kernel(f.c, nop_source, "nop");
        kernel = test_kernel(b, scale2_source, "scale2");
        cube_stream_set(1);
        ck_ok(cube_empty(f.c, 4, &f.unused));
        fill_words(in, 1024, 61);
        ck_ok(cube_create(b, in, sizeof(in), &hin));
        ck_ok(cube_empty(b, sizeof(out), &hout));

        /* Both kernels compiled before anything is timed. */
        ck_ok(launch_scale2(b, kernel, &hin, &hout, 1024, 1));
        ck_ok(cube_read(b, &hout, out, sizeof(out)));
        atomic_init(&f.sent, 0);
        info = cube_info_new();
        ck_assert_int_eq(cube_info_buffer_len(info, 1), 0);
        ck_ok(cube_launch_kernel(f.c, &(cube_launch) {
                .kernel = f.kernel, .cube_count = { 1, 1, 1 }, .cube_dim = { 1, 1, 1 },
                .buffers = &f.unused, .n_buffers = 1, .info = info,
        }));
        ck_ok(cube_sync(f.c, &f.unused, 1));
        cube_info_free(info);

        ck_assert_int_eq(pthread_create(&t, NULL, fair_flood_thread, &f), 0);
        /* Past the daemon's default of 4096 requests in flight: its queue for
         * A is full, and more waits in the socket. */
        while ((sent = atomic_load(&f.sent)) >= 0 && sent < 6000)
                usleep(1000);
        ck_assert_msg(sent >= 0, "the flood ended before it was 6000 launches long");

        long t0 = test_now_ms();
        ck_ok(launch_scale2(b, kernel, &hin, &hout, 1024, 2));
        ck_ok(cube_read(b, &hout, out, sizeof(out)));
        long b_ms = test_now_ms() - t0, b_done = test_now_ms();
        pending = stream_pending(b, cube_client_session(f.c), 1);
        expect_scaled(out, in, 1024, 2);

        pthread_join(t, NULL);
        ck_assert_msg(!f.e, "the flood failed: %s", f.e ? cube_error_message(f.e) : "");
        long a_ms = f.synced - f.began;
        fprintf(stderr, "fairness: B's launch and read took %ld ms; A's queue %ld ms\n", b_ms,
                a_ms);
        ck_assert_msg(pending > 0 && f.synced > b_done,
                      "A's queue had drained before B finished (pending %" PRIu64 ")", pending);
        ck_assert_msg(b_ms * 10 < a_ms, "B waited %ld ms behind a queue that took %ld ms", b_ms,
                      a_ms);
        cube_disconnect(f.c);
        cube_disconnect(b);
        test_stop_clean();
}
END_TEST

/* ---------------------------------------------------------------------------
 * 7a. Device time by weight, class and cap
 * ------------------------------------------------------------------------- */

/* A session keeping the device busy with spin kernels of a given length
 * until told to stop: 64 at a time on stream 2, the next 64 queued as soon
 * as the daemon holds fewer than 128 of them, so that it always has work
 * queued even while its thread waits for a CPU. */
#define SPIN_STREAMS 2

typedef struct spinner {
        cube_client *c;
        uint64_t kernel, rounds;
        cube_handle out[SPIN_STREAMS];
        atomic_bool stop;
        cube_error *e;
        pthread_t thread;
} spinner;

static void *spinner_thread(void *arg)
{
        spinner *s = arg;

        cube_stream_set(2);
        while (!s->e && !atomic_load(&s->stop)) {
                for (int i = 0; !s->e && i < 64; i++)
                        s->e = spin_try(s->c, s->kernel, &s->out[1], s->rounds);
                while (!s->e && !atomic_load(&s->stop)) {
                        cube_stream_info *v;
                        size_t n;
                        uint64_t pending = 0;
                        if ((s->e = cube_daemon_streams(s->c, &v, &n)))
                                break;
                        for (size_t i = 0; i < n; i++)
                                if (v[i].session == cube_client_session(s->c) && v[i].stream == 2)
                                        pending = v[i].pending;
                        free(v);
                        if (pending < 128)
                                break;
                        usleep(2000);
                }
        }
        if (!s->e)
                s->e = cube_sync(s->c, &s->out[1], 1);
        return NULL;
}

/* Connects s, and measures the rounds of about ms milliseconds of spin. */
static void spinner_open(spinner *s, const char *name, int ms)
{
        static const uint64_t zero = 0;

        *s = (spinner) {0};
        ck_ok(cube_connect(D.socket, name, &s->c));
        s->kernel = test_kernel(s->c, spin_source, "spin");
        for (int st = SPIN_STREAMS - 1; st >= 0; st--) {
                cube_stream_set(1 + (unsigned) st);
                ck_ok(cube_create(s->c, &zero, 8, &s->out[st]));
        }
        s->rounds = ms ? spin_rounds_for(s->c, s->kernel, &s->out[0], ms) : 1;
}

static void spinner_start(spinner *s)
{
        atomic_init(&s->stop, false);
        ck_assert_int_eq(pthread_create(&s->thread, NULL, spinner_thread, s), 0);
}

static void spinner_close(spinner *s)
{
        atomic_store(&s->stop, true);
        pthread_join(s->thread, NULL);
        ck_assert_msg(!s->e, "a spinner failed: %s", s->e ? cube_error_message(s->e) : "");
        cube_disconnect(s->c);
}

/* The shares view's line of a session. */
static cube_share_info share_line(cube_client *c, uint64_t session)
{
        cube_share_info *v, found = {0};
        size_t n;

        ck_ok(cube_daemon_shares(c, &v, &n));
        for (size_t i = 0; i < n; i++)
                if (v[i].session == session)
                        found = v[i];
        free(v);
        ck_assert_msg(found.session == session, "no shares line for session %" PRIu64, session);
        return found;
}

/* Device time each of n spinners got over about a second, after half a
 * second of warming up, as fractions of their sum (or of the wall time,
 * with wall set). */
static void measure_shares(spinner *s, size_t n, double *ret, bool wall)
{
        uint64_t before[8], total = 0;
        long t0;

        usleep(500000);
        t0 = test_now_ms();
        for (size_t i = 0; i < n; i++)
                before[i] = share_line(s[0].c, cube_client_session(s[i].c)).device_ns;
        usleep(1000000);
        for (size_t i = 0; i < n; i++) {
                ret[i] = (double) (share_line(s[0].c, cube_client_session(s[i].c)).device_ns -
                                   before[i]);
                total += (uint64_t) ret[i];
        }
        for (size_t i = 0; i < n; i++)
                ret[i] /= wall ? (double) (test_now_ms() - t0) * 1e6 : (double) (total ? total : 1);
}

START_TEST(weights_share_device_time_not_launches)
{
        static const char *const args[] = { "--shares", "default weight=9", NULL };
        spinner s[2];
        double share[2];

        start(args);
        spinner_open(&s[0], "short", 1);
        spinner_open(&s[1], "long", 10);
        ck_ok(cube_share_lower(s[1].c, NULL, 1));
        spinner_start(&s[0]);
        spinner_start(&s[1]);
        measure_shares(s, 2, share, false);
        spinner_close(&s[0]);
        spinner_close(&s[1]);
        fprintf(stderr, "weights 9:1, kernels 1 ms and 10 ms: shares %.3f and %.3f\n", share[0],
                share[1]);
        ck_assert_msg(share[0] > 0.6 && share[0] < 0.98, "weight 9 of 10 got %.3f of the "
                      "device time", share[0]);
        test_stop_clean();
}
END_TEST

START_TEST(equal_weights_share_equally_whatever_the_kernels_length)
{
        spinner s[2];
        double share[2];

        start(NULL);
        spinner_open(&s[0], "short", 1);
        spinner_open(&s[1], "long", 10);
        spinner_start(&s[0]);
        spinner_start(&s[1]);
        measure_shares(s, 2, share, false);
        spinner_close(&s[0]);
        spinner_close(&s[1]);
        fprintf(stderr, "equal weights, kernels 1 ms and 10 ms: shares %.3f and %.3f\n",
                share[0], share[1]);
        ck_assert_msg(share[0] > 0.35 && share[0] < 0.65, "the 1 ms kernels got %.3f of the "
                      "device time", share[0]);
        test_stop_clean();
}
END_TEST

START_TEST(a_latency_session_waits_for_a_bound_not_for_the_queue)
{
        static const char *const args[] = { "--shares", "default class=latency", NULL };
        spinner batch[2], l;
        long took[40];

        start(args);
        for (int i = 0; i < 2; i++) {
                spinner_open(&batch[i], "batch", 5);
                ck_ok(cube_share_lower(batch[i].c, "batch", 0));
        }
        spinner_open(&l, "latency", 0);
        for (int i = 0; i < 2; i++)
                spinner_start(&batch[i]);
        usleep(300000);
        for (int i = 0; i < 40; i++) {
                long t0 = test_now_ms();
                launch_spin(l.c, l.kernel, &l.out[0], 1);
                ck_ok(cube_sync(l.c, &l.out[0], 1));
                took[i] = test_now_ms() - t0;
        }
        for (int i = 0; i < 2; i++)
                spinner_close(&batch[i]);
        for (int i = 0; i < 40; i++)
                for (int j = i + 1; j < 40; j++)
                        if (took[j] < took[i]) {
                                long x = took[i];
                                took[i] = took[j];
                                took[j] = x;
                        }
        fprintf(stderr, "latency beside 2 batch floods of 5 ms kernels: median %ld ms, "
                "90th %ld ms\n", took[20], took[36]);
        /* The batch streams hold 16 kernels each on the device without the
         * bound: a launch behind them waits about 160 ms. */
        ck_assert_msg(took[20] < test_scaled_ms(40), "the median latency launch took %ld ms",
                      took[20]);
        cube_disconnect(l.c);
        test_stop_clean();
}
END_TEST

START_TEST(a_batch_session_beside_a_saturating_latency_one_gets_its_floor)
{
        static const char *const args[] = { "--shares", "default class=latency",
                                            "--share-min-percent", "10", NULL };
        spinner s[2];
        double share[2];

        start(args);
        spinner_open(&s[0], "latency", 2);
        spinner_open(&s[1], "batch", 2);
        ck_ok(cube_share_lower(s[1].c, "batch", 0));
        spinner_start(&s[0]);
        spinner_start(&s[1]);
        measure_shares(s, 2, share, false);
        spinner_close(&s[0]);
        spinner_close(&s[1]);
        fprintf(stderr, "latency beside batch (floor 10%%): shares %.3f and %.3f\n", share[0],
                share[1]);
        ck_assert_msg(share[0] > 0.7, "the latency session got only %.3f", share[0]);
        ck_assert_msg(share[1] > 0.05, "the batch session got %.3f, under its floor", share[1]);
        test_stop_clean();
}
END_TEST

START_TEST(a_capped_tenant_alone_is_held_to_its_cap)
{
        static const char *const args[] = { "--shares", "default cap=30 cap-alone=yes", NULL };
        spinner s;
        double share;

        start(args);
        spinner_open(&s, "capped", 2);
        spinner_start(&s);
        measure_shares(&s, 1, &share, true);
        spinner_close(&s);
        fprintf(stderr, "a tenant capped at 30%% alone: %.3f of the wall time\n", share);
        ck_assert_msg(share > 0.2 && share < 0.4, "the capped tenant had %.3f of the device",
                      share);
        test_stop_clean();
}
END_TEST

START_TEST(a_session_may_lower_its_share_never_raise_it)
{
        static const char *const args[] = { "--shares", "default weight=4", NULL };
        cube_client *c;
        cube_share_info line;

        start(args);
        ck_ok(cube_connect(D.socket, "lowering", &c));
        line = share_line(c, cube_client_session(c));
        ck_assert_uint_eq(line.weight, 4);
        ck_assert_str_eq(line.class_name, "normal");
        test_expect_kind(cube_share_lower(c, "latency", 0), CUBE_SERVER_VALIDATION, "a raised class");
        test_expect_kind(cube_share_lower(c, NULL, 5), CUBE_SERVER_VALIDATION, "a raised weight");
        test_expect_kind(cube_share_lower(c, "urgent", 0), CUBE_SERVER_VALIDATION, "no class");
        ck_ok(cube_share_lower(c, "batch", 2));
        line = share_line(c, cube_client_session(c));
        ck_assert_uint_eq(line.weight, 2);
        ck_assert_str_eq(line.class_name, "batch");
        cube_disconnect(c);
        test_stop_clean();
}
END_TEST

/* Polls the session's line until its weight is want. */
static bool wait_weight(cube_client *c, uint32_t want, int timeout_ms)
{
        long until = test_now_ms() + timeout_ms;

        do {
                if (share_line(c, cube_client_session(c)).weight == want)
                        return true;
                usleep(20000);
        } while (test_now_ms() < until);
        return false;
}

START_TEST(a_reload_gives_every_session_its_new_terms)
{
        char conf[160];
        const char *args[] = { "--config", conf, NULL };
        cube_client *c;
        cube_share_info line;
        FILE *f;

        snprintf(conf, sizeof(conf), "/tmp/cube-shares-%d.conf", (int) getpid());
        ck_assert_ptr_nonnull(f = fopen(conf, "w"));
        fprintf(f, "shares = default weight=3 tenant=team\n");
        fclose(f);
        start(args);
        ck_ok(cube_connect(D.socket, "reloaded", &c));
        line = share_line(c, cube_client_session(c));
        ck_assert_uint_eq(line.weight, 3);
        ck_assert_str_eq(line.tenant, "team");
        ck_assert_ptr_nonnull(f = fopen(conf, "w"));
        fprintf(f, "shares = default weight=5 class=batch; uid:%u weight=7\n",
                (unsigned) getuid());
        fclose(f);
        ck_assert_int_eq(kill(D.pid, SIGHUP), 0);
        ck_assert_msg(wait_weight(c, 7, test_scaled_ms(5000)), "the reload left weight %u",
                      share_line(c, cube_client_session(c)).weight);
        line = share_line(c, cube_client_session(c));
        ck_assert_str_eq(line.class_name, "batch");
        ck_assert_str_eq(line.tenant, "uid:0");
        cube_disconnect(c);
        unlink(conf);
        test_stop_clean();
}
END_TEST

START_TEST(the_shares_view_and_the_metrics_show_sessions_and_tenants)
{
        static const char *const args[] = { "--shares", "default tenant=infer cap=50", NULL };
        char cmd[512], out[8192], want[128];
        spinner s;
        char *text;
        size_t len;
        FILE *p;

        start(args);
        spinner_open(&s, "viewed", 0);
        launch_spin(s.c, s.kernel, &s.out[0], 1000);
        ck_ok(cube_sync(s.c, &s.out[0], 1));
        snprintf(cmd, sizeof(cmd), "%s --socket %s --json shares", getenv("CUBECTL_BIN"),
                 D.socket);
        ck_assert_ptr_nonnull(p = popen(cmd, "r"));
        len = fread(out, 1, sizeof(out) - 1, p);
        out[len] = '\0';
        ck_assert_int_eq(pclose(p), 0);
        snprintf(want, sizeof(want), "\"session\":%" PRIu64, cube_client_session(s.c));
        ck_assert_msg(strstr(out, want), "no %s in %s", want, out);
        ck_assert_msg(strstr(out, "\"session\":0,") && strstr(out, "\"tenant\":\"infer\"") &&
                      strstr(out, "\"cap\":50") && strstr(out, "\"owed_percent\":") &&
                      strstr(out, "\"share_percent\":"), "cubectl shares said %s", out);
        ck_ok(cube_daemon_metrics(s.c, &text));
        snprintf(want, sizeof(want), "cube_share_owed_ratio{instance=\"%s\",session=\"%" PRIu64
                 "\",tenant=\"infer\"}", test_instance(), cube_client_session(s.c));
        ck_assert_msg(strstr(text, want), "no %s in the metrics", want);
        snprintf(want, sizeof(want), "cube_share_weight{instance=\"%s\",tenant=\"infer\"} 1\n",
                 test_instance());
        ck_assert_msg(strstr(text, want), "no %s in the metrics", want);
        snprintf(want, sizeof(want), "cube_share_device_seconds{instance=\"%s\",tenant=",
                 test_instance());
        ck_assert_msg(strstr(text, want), "no %s in the metrics", want);
        free(text);
        cube_disconnect(s.c);
        test_stop_clean();
}
END_TEST

/* ---------------------------------------------------------------------------
 * 8. Who may connect
 * ------------------------------------------------------------------------- */

static int refused_by_allow_uids(const char *socket, int from_test, int to_test)
{
        return refused_naming(socket, "allow-uids") ? 0 : 1;
}

static int refused_by_allow_groups(const char *socket, int from_test, int to_test)
{
        return refused_naming(socket, "allow-groups") ? 0 : 1;
}

static int allowed(const char *socket, int from_test, int to_test)
{
        cube_client *c = connect_and_use(socket);

        cube_disconnect(c);
        return c ? 0 : 1;
}

/* A connect refused by the socket's permissions, before the daemon sees it. */
static int kept_out_by_the_socket(const char *socket, int from_test, int to_test)
{
        cube_client *c;
        cube_error *e = cube_connect(socket, "nobody", &c);
        bool ok = e && strstr(cube_error_message(e), strerror(EACCES));

        if (!ok)
                dprintf(2, "expected EACCES: %s\n", e ? cube_error_message(e) : "connected");
        if (!e)
                cube_disconnect(c);
        cube_error_free(e);
        return ok ? 0 : 1;
}

static void expect_nobody(nobody_fn fn)
{
        nobody n;

        nobody_start(&n, D.socket, fn);
        ck_assert_int_eq(nobody_finish(&n), 0);
}

START_TEST(allow_uids_admits_only_the_listed)
{
        static const char *const args[] = { "--allow-uids", "0", NULL };
        cube_client *c;

        if (!running_as_root())
                return;
        start(args);
        open_socket_to_all(&D);
        expect_nobody(refused_by_allow_uids);
        ck_ok(cube_connect(D.socket, "root", &c));
        cube_disconnect(c);
        test_stop_clean();
}
END_TEST

/* A refusal races the client's hello: the daemon may have closed the
 * connection before the hello is sent. The reason must come through anyway,
 * every time. */
static int always_told_why(const char *socket, int from_test, int to_test)
{
        for (int i = 0; i < 200; i++)
                if (!refused_naming(socket, "allow-uids")) {
                        dprintf(2, "attempt %d of 200\n", i + 1);
                        return 1;
                }
        return 0;
}

START_TEST(every_refused_connect_is_told_why)
{
        static const char *const args[] = { "--allow-uids", "0", NULL };

        if (!running_as_root())
                return;
        start(args);
        open_socket_to_all(&D);
        expect_nobody(always_told_why);
        test_stop_clean();
}
END_TEST

START_TEST(allow_groups_admits_members_only)
{
        static const char *const root_only[] = { "--allow-groups", "root", NULL };
        static const char *const nogroup[] = { "--allow-groups", "nogroup", NULL };

        if (!running_as_root())
                return;
        start(root_only);
        open_socket_to_all(&D);
        expect_nobody(refused_by_allow_groups);
        test_stop_clean();

        start(nogroup);
        open_socket_to_all(&D);
        expect_nobody(allowed);
        test_stop_clean();
}
END_TEST

START_TEST(socket_group_opens_the_socket_to_the_group)
{
        static const char *const args[] = { "--socket-group", "nogroup", NULL };
        struct stat st;

        if (!running_as_root())
                return;
        /* Without it the socket is root's alone: nobody cannot connect. */
        start(NULL);
        ck_assert_int_eq(chmod(D.dir, 0755), 0);
        expect_nobody(kept_out_by_the_socket);
        test_stop_clean();

        start(args);
        ck_assert_int_eq(stat(D.socket, &st), 0);
        ck_assert_uint_eq(st.st_gid, NOBODY);
        ck_assert_uint_eq(st.st_mode & 07777, 0660);
        ck_assert_int_eq(chmod(D.dir, 0755), 0);
        expect_nobody(allowed);
        test_stop_clean();
}
END_TEST

/* ---------------------------------------------------------------------------
 * 9. The exporter dies
 * ------------------------------------------------------------------------- */

#define SHARED_SIZE 65536

/* A forked exporter: shares a buffer, sends its token, then works on other
 * buffers until it is killed. Never returns. */
static _Noreturn void exporter(int to_test)
{
        unsigned char data[SHARED_SIZE];
        uint32_t in[4096], out[4096];
        uint64_t kernel, rng = 5;
        char token[33];
        cube_client *c;
        cube_handle shared, hin, hout;
        cube_error *e;

        prctl(PR_SET_PDEATHSIG, SIGKILL);
        fill_random(data, sizeof(data), 91);
        if ((e = cube_connect(D.socket, "exporter", &c)) ||
            (e = cube_kernel_register(c, scale2_source, "scale2", &kernel)) ||
            (e = cube_create(c, data, sizeof(data), &shared)) ||
            (e = cube_sync(c, &shared, 1)) || (e = cube_export(c, &shared, token)))
                goto fail;
        if (write(to_test, token, 33) != 33)
                _exit(2);
        for (long end = test_now_ms() + 60000; test_now_ms() < end;) {
                for (int i = 0; i < 4096; i++)
                        in[i] = (uint32_t) next_rand(&rng);
                cube_stream_set(1 + next_rand(&rng) % 3);
                if ((e = cube_create(c, in, sizeof(in), &hin)) ||
                    (e = cube_empty(c, sizeof(out), &hout)) ||
                    (e = launch_scale2(c, kernel, &hin, &hout, 4096, 4)) ||
                    (e = cube_read(c, &hout, out, sizeof(out))))
                        goto fail;
                if (next_rand(&rng) % 2)
                        cube_free(c, &hin);     /* the rest is left for the kill */
        }
        _exit(3);
fail:
        dprintf(2, "exporter: %s\n", cube_error_message(e));
        _exit(1);
}

START_TEST(shared_memory_outlives_a_killed_exporter)
{
        unsigned char data[SHARED_SIZE];
        char token[33];
        int pipefd[2], status;
        cube_client *b;
        cube_handle h, hr;
        pid_t pid;

        start(NULL);
        fill_random(data, sizeof(data), 91);
        ck_assert_int_eq(pipe(pipefd), 0);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                close(pipefd[0]);
                exporter(pipefd[1]);
        }
        close(pipefd[1]);
        struct pollfd p = { .fd = pipefd[0], .events = POLLIN };
        ck_assert_int_eq(poll(&p, 1, test_scaled_ms(10000)), 1);
        ck_assert_int_eq(read(pipefd[0], token, 33), 33);
        close(pipefd[0]);

        ck_ok(cube_connect(D.socket, "importer", &b));
        ck_ok(cube_import(b, token, false, &h));
        test_expect_bytes(b, &h, data, sizeof(data));

        /* Let it get well into its work, then kill it. */
        usleep(150000);
        ck_assert_int_eq(kill(pid, SIGKILL), 0);
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFSIGNALED(status), "the exporter ended with status %#x before the kill",
                      status);

        /* Its own buffers are reclaimed; the shared one is B's now. */
        ck_assert_msg(wait_memory_in_use(D.socket, SHARED_SIZE, 5000),
                      "memory in use is %" PRIu64 ", not the shared %d bytes",
                      status_of(D.socket).memory_in_use, SHARED_SIZE);
        ck_assert_uint_eq(session_info(b, cube_client_session(b)).memory_in_use, SHARED_SIZE);
        test_expect_bytes(b, &h, data, sizeof(data));
        ck_ok(cube_import(b, token, true, &hr));
        test_expect_bytes(b, &hr, data, sizeof(data));
        ck_ok(cube_check(b, &h, 1));

        cube_disconnect(b);
        ck_assert(wait_memory_in_use(D.socket, 0, 5000));
        ck_assert_uint_eq(status_of(D.socket).allocations, 0);
        test_stop_clean();
}
END_TEST

int main(void)
{
        Suite *s = suite_create("sharing");
        TCase *stress = tcase_create("stress"), *streams = tcase_create("streams");
        TCase *sharing = tcase_create("sharing"), *quotas = tcase_create("quotas");
        TCase *fairness = tcase_create("fairness"), *access_tc = tcase_create("access");
        TCase *shares = tcase_create("shares");
        TCase *all[] = { stress, streams, sharing, quotas, fairness, shares, access_tc };
        SRunner *sr;
        int failed;

        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
                tcase_set_timeout(all[i], 120);
                suite_add_tcase(s, all[i]);
        }
        tcase_add_test_needing(stress, stress_with_a_quarter_of_the_clients_killed,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(streams, work_on_another_stream_sees_what_came_before_it,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(streams, a_long_kernel_does_not_hold_up_another_stream,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test(streams, a_queued_write_is_seen_by_a_read_right_behind_it_on_another_stream);
        tcase_add_test_needing(streams, a_launch_holds_up_no_neighbour_in_its_page_on_another_stream,
                               TEST_NEEDS_CUDA_DOUBLE);
        tcase_add_test_needing(sharing, a_launch_naming_another_sessions_memory_touches_nothing,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(sharing, an_import_shares_the_bytes_and_a_read_only_one_refuses_writes,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(sharing, a_write_to_a_read_only_import_is_refused_at_once,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test(sharing, shared_memory_lives_until_its_last_holder_lets_go);
        tcase_add_test(sharing, shared_memory_outlives_a_killed_exporter);
        tcase_add_test(quotas, session_memory_caps_one_session);
        tcase_add_test(quotas, uid_memory_caps_a_users_sessions_together);
        tcase_add_test(quotas, a_session_over_its_quota_by_inheritance_may_not_grow);
        tcase_add_test(quotas, a_session_that_imports_its_own_export_keeps_the_charge);
        tcase_add_test(quotas, max_sessions_refuses_one_more);
        tcase_add_test(quotas, max_sessions_per_uid_refuses_a_second);
        tcase_add_test_needing(quotas, max_streams_refuses_a_fifth_stream, TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(quotas, max_requests_holds_back_a_flood_of_small_writes,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(quotas, max_queued_bytes_holds_back_a_flood_of_large_writes,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(fairness, a_flooding_session_delays_another_by_a_bounded_amount,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(shares, weights_share_device_time_not_launches,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(shares, equal_weights_share_equally_whatever_the_kernels_length,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(shares, a_latency_session_waits_for_a_bound_not_for_the_queue,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(shares, a_batch_session_beside_a_saturating_latency_one_gets_its_floor,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(shares, a_capped_tenant_alone_is_held_to_its_cap,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test(shares, a_session_may_lower_its_share_never_raise_it);
        tcase_add_test(shares, a_reload_gives_every_session_its_new_terms);
        tcase_add_test(shares, the_shares_view_and_the_metrics_show_sessions_and_tenants);
        tcase_add_test(access_tc, allow_uids_admits_only_the_listed);
        tcase_add_test(access_tc, every_refused_connect_is_told_why);
        tcase_add_test(access_tc, allow_groups_admits_members_only);
        tcase_add_test(access_tc, socket_group_opens_the_socket_to_the_group);

        sr = srunner_create(s);
        srunner_run_all(sr, CK_ENV);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? 1 : 0;
}

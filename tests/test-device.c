/*
 * test-device.c - the CPU device as a device: kernels run in a confined
 * process of their own, and whatever a kernel does ends there.
 *
 * A kernel reaching for the C library or the system is refused; the device
 * process's seal holds (no file outside its directory, no socket, no exec,
 * no other process); a wild write poisons the device, cubed keeps answering
 * and a fresh device serves afterwards; a kernel that never ends and units
 * stuck at different barriers are stopped by the kernel timeout; a compiler
 * bomb is refused within the compile limit while others are served; a
 * planted or altered artifact in the kernel cache is never loaded; a
 * device that may use one CPU runs every launch on its own thread; and a
 * worker lapped on the launch ring by the loop thread stops neither.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define N 1000u

/* out[i] = in[i] * 3 + 1: the kernel a fresh device must run correctly. */
static const char triple_source[] =
        "KERNEL void triple(const uint32_t *in, uint32_t *out, INFO)\n"
        "{\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "        if (i < BUFFER_LEN(1))\n"
        "                out[i] = in[i] * 3u + 1u;\n"
        "}\n";

/* The same signature, another answer: what a planted artifact would run. */
static const char evil_source[] =
        "KERNEL void evil(const uint32_t *in, uint32_t *out, INFO)\n"
        "{\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "        if (i < BUFFER_LEN(1))\n"
        "                out[i] = 0xdeadbeefu;\n"
        "}\n";

/* A launch of kernel over bufs with one buffer length each (N). */
static void launch_n(cube_client *c, uint64_t kernel, cube_handle *bufs, size_t n_bufs,
                     uint32_t cubes, uint32_t dim, cube_launch_mode mode)
{
        static const cube_buffer_io io[2] = { CUBE_BUFFER_READ_ONLY, CUBE_BUFFER_WRITE_ONLY };
        cube_info *info = cube_info_new();

        for (size_t i = 0; i < n_bufs; i++)
                ck_assert_int_eq(cube_info_buffer_len(info, N), 0);
        ck_ok(cube_launch_kernel(c, &(cube_launch) {
                .kernel = kernel, .cube_count = { cubes, 1, 1 }, .cube_dim = { dim, 1, 1 },
                .buffers = bufs, .n_buffers = n_bufs, .info = info, .mode = mode,
                .io = n_bufs == 2 ? io : NULL,
        }));
        cube_info_free(info);
}

/* Runs triple on a fresh input and checks every element. */
static void expect_triple_runs(cube_client *c, uint64_t k)
{
        uint32_t in[N], got[N];
        cube_handle bufs[2];

        fill_random(in, sizeof(in), 77);
        ck_ok(cube_create(c, in, sizeof(in), &bufs[0]));
        ck_ok(cube_empty(c, sizeof(got), &bufs[1]));
        launch_n(c, k, bufs, 2, (N + 63) / 64, 64, CUBE_LAUNCH_EXECUTE);
        ck_ok(cube_read(c, &bufs[1], got, sizeof(got)));
        for (uint32_t i = 0; i < N; i++)
                ck_assert_msg(got[i] == in[i] * 3u + 1u, "out[%u] = %#x, expected %#x", i, got[i],
                              in[i] * 3u + 1u);
}

/* Launches steps of triple, one cube and many cubes in turns, without a
 * wait, back and forth between two buffers, and checks that each ran
 * after the one before it. */
static void expect_alternating_steps_in_order(cube_client *c, uint64_t k, int steps,
                                              const char *what)
{
        uint32_t in[N], got[N], want[N];
        cube_handle ab[2], ba[2];

        fill_random(in, sizeof(in), 5);
        memcpy(want, in, sizeof(want));
        ck_ok(cube_create(c, in, sizeof(in), &ab[0]));
        ck_ok(cube_empty(c, sizeof(in), &ab[1]));
        ba[0] = ab[1];
        ba[1] = ab[0];
        for (int step = 0; step < steps; step++) {
                if (step % 2 == 0)
                        launch_n(c, k, ab, 2, 1, 1000, CUBE_LAUNCH_EXECUTE);
                else
                        launch_n(c, k, ba, 2, (N + 63) / 64, 64, CUBE_LAUNCH_EXECUTE);
                for (uint32_t i = 0; i < N; i++)
                        want[i] = want[i] * 3u + 1u;
        }
        ck_ok(cube_read(c, &ab[0], got, sizeof(got)));
        for (uint32_t i = 0; i < N; i++)
                ck_assert_msg(got[i] == want[i], "%s: element %u is %#x after %d launches, not %#x",
                              what, i, got[i], steps, want[i]);
        ck_ok(cube_free(c, &ab[0]));
        ck_ok(cube_free(c, &ab[1]));
}

/* One-cube launches run on another of PoCL's devices than spread ones
 * (KERNELS.md); a chain alternating the two, issued without a wait, must
 * still run each launch after the one before it. */
START_TEST(one_cube_and_spread_launches_alternating_keep_their_order)
{
        test_daemon d;
        cube_client *c;

        ck_assert_int_eq(test_daemon_start(&d, NULL), 0);
        ck_ok(cube_connect(d.socket, "alternate", &c));
        expect_alternating_steps_in_order(c, test_kernel(c, triple_source, "triple"), 64,
                                          "both devices");
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
}
END_TEST

/* The machine's owner may choose PoCL's devices (POCL_DEVICES in cubed's
 * environment): the builds and the device must both take the choice, or no
 * build loads. With the basic device alone every launch runs inline; with
 * the pthread one alone every launch is spread. */
START_TEST(the_devices_the_owner_chose_run_every_launch)
{
        static const char *const choices[] = { "basic", "pthread" };

        for (size_t n = 0; n < sizeof(choices) / sizeof(choices[0]); n++) {
                char what[64];
                test_daemon d;
                cube_client *c;

                ck_assert_int_eq(setenv("POCL_DEVICES", choices[n], 1), 0);
                ck_assert_int_eq(test_daemon_start(&d, NULL), 0);
                unsetenv("POCL_DEVICES");
                ck_ok(cube_connect(d.socket, "chosen", &c));
                snprintf(what, sizeof(what), "POCL_DEVICES=%s", choices[n]);
                expect_alternating_steps_in_order(c, test_kernel(c, triple_source, "triple"), 16,
                                                  what);
                cube_disconnect(c);
                ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
        }
}
END_TEST

/* The one failure a read of h reports, and its root. */
static const cube_error *root_of_read(cube_client *c, const cube_handle *h, cube_error **ret_e)
{
        uint32_t got[N];
        cube_error *e = cube_read(c, h, got, sizeof(got));
        const cube_error *r;

        ck_assert_msg(e != NULL, "the read succeeded");
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_SERVER_SEVERAL);
        r = cube_error_at(e, 0);
        while (cube_error_source(r))
                r = cube_error_source(r);
        *ret_e = e;
        return r;
}

/* unchecked: the kernel faults by leaving its bindings, which only an
 * unchecked launch can (its compile then counts in within_ms). */
static void launch_and_expect_poison(cube_client *c, uint64_t k, const char *entry,
                                     const char *what, long within_ms, bool unchecked)
{
        cube_handle out;
        cube_error *e;
        long t0;

        ck_ok(cube_empty(c, N * sizeof(uint32_t), &out));
        launch_n(c, k, &out, 1, 4, 64, CUBE_LAUNCH_COMPILE);
        ck_ok(cube_sync(c, NULL, 0));
        t0 = test_now_ms();
        launch_n(c, k, &out, 1, 4, 64, unchecked ? CUBE_LAUNCH_UNCHECKED : CUBE_LAUNCH_EXECUTE);
        e = cube_sync(c, NULL, 0);
        long took = test_now_ms() - t0;
        ck_assert_msg(e != NULL, "the sync after %s succeeded", entry);
        ck_assert_msg(cube_error_is_device_poisoned(e), "not poisoned: %s", cube_error_message(e));
        ck_assert_msg(strstr(cube_error_message(e), entry) && strstr(cube_error_message(e), what),
                      "the poison does not name '%s' and '%s': %s", entry, what,
                      cube_error_message(e));
        ck_assert_msg(took <= within_ms, "poisoned after %ld ms, more than %ld", took, within_ms);
        cube_error_free(e);
}

/* ---------------------------------------------------------------------------
 * Refused before anything runs
 * ------------------------------------------------------------------------- */

START_TEST(a_kernel_reaching_for_the_system_is_refused_naming_the_line)
{
        static const struct { const char *source, *line, *what; } cases[] = {
                { "KERNEL void reach(const uint32_t *in, uint32_t *out, INFO)\n{\n"
                  "        out[0] = in[0];\n        void *f = fopen(0, 0);\n}\n", "line 4", "fopen" },
                { "KERNEL void reach(const uint32_t *in, uint32_t *out, INFO)\n{\n"
                  "        out[0] = system(0);\n}\n", "line 3", "system" },
                { "KERNEL void reach(const uint32_t *in, uint32_t *out, INFO)\n{\n"
                  "        out[0] = in[0];\n\n        __asm__ volatile (\"syscall\");\n}\n",
                  "line 5", "__asm__" },
                { "#include <stdio.h>\n"
                  "KERNEL void reach(const uint32_t *in, uint32_t *out, INFO)\n{\n}\n",
                  "line 1", "#include" },
        };
        test_daemon d;
        cube_client *c;

        ck_assert_int_eq(test_daemon_start(&d, NULL), 0);
        ck_ok(cube_connect(d.socket, "reach", &c));
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                uint32_t in[N] = { 0 };
                cube_handle bufs[2];
                cube_error *e;
                uint64_t k = test_kernel(c, cases[i].source, "reach");

                ck_ok(cube_create(c, in, sizeof(in), &bufs[0]));
                ck_ok(cube_empty(c, sizeof(in), &bufs[1]));
                launch_n(c, k, bufs, 2, 1, 64, CUBE_LAUNCH_EXECUTE);
                const cube_error *root = root_of_read(c, &bufs[1], &e);
                ck_assert_msg(cube_error_kind_of(root) == CUBE_COMPILATION_VALIDATION,
                              "case %zu: not a Validation: %s", i, cube_error_message(e));
                ck_assert_msg(strstr(cube_error_reason(root), cases[i].line) &&
                              strstr(cube_error_reason(root), cases[i].what),
                              "case %zu does not name %s and %s: %s", i, cases[i].line,
                              cases[i].what, cube_error_reason(root));
                ck_assert(cube_error_is_refusal(e));
                ck_assert(!cube_error_is_device_poisoned(e));
                cube_error_free(e);
        }
        ck_assert(!status_of(d.socket).poisoned);
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
}
END_TEST

/* ---------------------------------------------------------------------------
 * The seal
 * ------------------------------------------------------------------------- */

/* Runs cube-device --probe-seal DIR what; its exit status. */
static int probe(const char *dir, const char *what)
{
        const char *bin = getenv("CUBE_DEVICE_BIN");
        int status;
        pid_t pid;

        ck_assert_msg(bin != NULL, "CUBE_DEVICE_BIN is not set");
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                execl(bin, bin, "--probe-seal", dir, what, (char *) NULL);
                _exit(127);
        }
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFEXITED(status), "the probe for %s died of signal %d", what,
                      WTERMSIG(status));
        return WEXITSTATUS(status);
}

START_TEST(the_sealed_device_reaches_its_directory_and_nothing_else)
{
        char dir[] = "/tmp/cube-seal-XXXXXX", outside[64];
        struct stat st;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(outside, sizeof(outside), "%s.outside", dir);
        ck_assert_int_eq(probe(dir, "write-private"), 0);
        ck_assert_int_eq(probe(dir, "write-outside"), EACCES);
        ck_assert_msg(stat(outside, &st) < 0, "the sealed device created %s", outside);
        ck_assert_int_eq(probe(dir, "read-outside"), EACCES);
        /* The filter stops these with SIGSYS, which ends the process. */
        ck_assert_int_eq(probe(dir, "socket"), 128 + SIGSYS);
        ck_assert_int_eq(probe(dir, "execve"), 128 + SIGSYS);
        ck_assert_int_eq(probe(dir, "fork"), 128 + SIGSYS);
        ck_assert_int_eq(probe(dir, "kill-parent"), 128 + SIGSYS);
        ck_assert_int_eq(probe(dir, "ptrace"), 128 + SIGSYS);
        char rm[96];
        snprintf(rm, sizeof(rm), "rm -rf %s", dir);
        ck_assert_int_eq(system(rm), 0);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Faults and hangs end the device, not cubed
 * ------------------------------------------------------------------------- */

static const char wild_source[] =
        "KERNEL void wild(uint32_t *out, INFO)\n"
        "{\n"
        "        out[ABSOLUTE_POS] = 1;\n"
        "        if (ABSOLUTE_POS == 77)\n"
        "                out[(uint64_t) 1 << 44] = 1;\n"
        "}\n";

START_TEST(a_wild_write_poisons_the_device_and_a_fresh_one_serves_after_reinit)
{
        static const char *const args[] = { "--poison-policy", "reinit", "--poison-grace", "1",
                                            NULL };
        test_daemon d;
        cube_client *c;
        cube_status st;
        long deadline;

        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        ck_ok(cube_connect(d.socket, "wild", &c));
        launch_and_expect_poison(c, test_kernel(c, wild_source, "wild"), "wild", test_fault_word(),
                                 10000, true);
        st = status_of(d.socket);
        ck_assert(st.poisoned);
        ck_assert_msg(strstr(st.poison, "wild") != NULL, "poison: %s", st.poison);
        cube_disconnect(c);

        /* Once every session was told, the policy starts a fresh device. */
        deadline = test_now_ms() + 15000;
        while ((st = status_of(d.socket)).poisoned && test_now_ms() < deadline)
                usleep(50 * 1000);
        ck_assert_msg(!st.poisoned, "the device was not re-initialised: %s", st.poison);
        ck_ok(cube_connect(d.socket, "after", &c));
        expect_triple_runs(c, test_kernel(c, triple_source, "triple"));
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
}
END_TEST

/* The other ways a kernel can fault reach the same end: each names its
 * signal, and the next sessions are served by a fresh device. A unit whose
 * stack overflows dies on it (its handler has no stack left to run on), so
 * cubed names the signal the device process died of. */
static const char divide_source[] =
        "KERNEL void divide(uint32_t *out, INFO)\n"
        "{\n"
        "        volatile int32_t zero = (int32_t) (ABSOLUTE_POS / 1000000);\n"
        "        out[ABSOLUTE_POS] = (uint32_t) (7 / zero);\n"
        "}\n";

/* A unit's private array far past any work-item stack. */
static const char deep_source[] =
        "KERNEL void deep(uint32_t *out, INFO)\n"
        "{\n"
        "        volatile uint32_t big[1 << 24];\n"
        "\n"
        "        for (uint32_t i = 0; i < (1u << 24); i += 1024)\n"
        "                big[i] = i + ABSOLUTE_POS;\n"
        "        out[ABSOLUTE_POS] = big[(ABSOLUTE_POS * 4096) & ((1u << 24) - 1)];\n"
        "}\n";

static void expect_fault_poisons_then_reinit(const char *source, const char *entry,
                                             const char *what)
{
        static const char *const args[] = { "--poison-policy", "reinit", "--poison-grace", "1",
                                            NULL };
        test_daemon d;
        cube_client *c;
        cube_status st;
        long deadline;

        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        ck_ok(cube_connect(d.socket, entry, &c));
        launch_and_expect_poison(c, test_kernel(c, source, entry), entry, what, 10000, false);
        cube_disconnect(c);
        deadline = test_now_ms() + 15000;
        while ((st = status_of(d.socket)).poisoned && test_now_ms() < deadline)
                usleep(50 * 1000);
        ck_assert_msg(!st.poisoned, "the device was not re-initialised: %s", st.poison);
        ck_ok(cube_connect(d.socket, "after", &c));
        expect_triple_runs(c, test_kernel(c, triple_source, "triple"));
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
}

START_TEST(an_integer_division_by_zero_poisons_the_device_naming_sigfpe)
{
        expect_fault_poisons_then_reinit(divide_source, "divide", "FPE");
}
END_TEST

START_TEST(a_unit_overflowing_its_stack_poisons_the_device)
{
        expect_fault_poisons_then_reinit(deep_source, "deep", test_fault_word());
}
END_TEST

START_TEST(a_kernel_that_never_ends_is_stopped_by_the_kernel_timeout)
{
        static const char *const args[] = { "--kernel-timeout", "1", NULL };
        test_daemon d;
        cube_client *c;

        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        ck_ok(cube_connect(d.socket, "forever", &c));
        launch_and_expect_poison(c, test_kernel(c, test_forever_source, "forever"), "forever",
                                 "the kernel timeout (--kernel-timeout 1 s)", 1000 + 1000, false);
        ck_assert(status_of(d.socket).poisoned);
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
}
END_TEST

/* Half the units wait at a barrier the other half never reach. */
static const char divergent_source[] =
        "KERNEL void divergent(uint32_t *out, INFO)\n"
        "{\n"
        "        volatile uint32_t spin = 1;\n"
        "\n"
        "        if (UNIT_POS < 32) {\n"
        "                sync_cube();\n"
        "        } else {\n"
        "                while (spin)\n"
        "                        out[ABSOLUTE_POS] = spin;\n"
        "                sync_cube();\n"
        "        }\n"
        "}\n";

START_TEST(units_stuck_at_different_barriers_end_like_a_kernel_that_never_ends)
{
        static const char *const args[] = { "--kernel-timeout", "1", NULL };
        test_daemon d;
        cube_client *c;

        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        ck_ok(cube_connect(d.socket, "divergent", &c));
        launch_and_expect_poison(c, test_kernel(c, divergent_source, "divergent"),
                                 "divergent", "kernel timeout", 1000 + 1000, false);
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Compiling under limits
 * ------------------------------------------------------------------------- */

/* 2^40 tokens from forty lines: the preprocessor never finishes. */
static void bomb_source(char *buf, size_t cap)
{
        size_t n = (size_t) snprintf(buf, cap, "#define B0 x = x + 1;\n");

        for (int i = 1; i <= 40; i++)
                n += (size_t) snprintf(buf + n, cap - n, "#define B%d B%d B%d\n", i, i - 1, i - 1);
        snprintf(buf + n, cap - n, "KERNEL void bomb(const uint32_t *in, uint32_t *out, INFO)\n"
                 "{\n        uint32_t x = 0;\n        B40\n        out[0] = x;\n}\n");
}

START_TEST(a_compiler_bomb_is_refused_within_the_compile_limit_while_others_are_served)
{
        static const char *const args[] = { "--compile-limit", "3", NULL };
        char source[4096];
        uint32_t in[N] = { 0 };
        cube_handle bufs[2];
        test_daemon d;
        cube_client *c, *other;
        cube_error *e;
        long t0;

        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        ck_ok(cube_connect(d.socket, "bomb", &c));
        ck_ok(cube_connect(d.socket, "other", &other));
        bomb_source(source, sizeof(source));
        uint64_t k = test_kernel(c, source, "bomb");
        ck_ok(cube_create(c, in, sizeof(in), &bufs[0]));
        ck_ok(cube_empty(c, sizeof(in), &bufs[1]));
        t0 = test_now_ms();
        launch_n(c, k, bufs, 2, 1, 64, CUBE_LAUNCH_EXECUTE);

        /* While it compiles, another session is served at once. */
        for (int i = 0; i < 10; i++) {
                uint32_t data[64], back[64];
                cube_handle h;
                long s0 = test_now_ms();
                fill_random(data, sizeof(data), (uint64_t) i);
                ck_ok(cube_create(other, data, sizeof(data), &h));
                ck_ok(cube_read(other, &h, back, sizeof(back)));
                ck_assert(memcmp(data, back, sizeof(data)) == 0);
                ck_ok(cube_free(other, &h));
                ck_assert(!status_of(d.socket).poisoned);
                ck_assert_msg(test_now_ms() - s0 < 1000, "a round trip took %ld ms during the "
                              "compile", test_now_ms() - s0);
                usleep(100 * 1000);
        }

        const cube_error *root = root_of_read(c, &bufs[1], &e);
        long took = test_now_ms() - t0;
        ck_assert_msg(cube_error_kind_of(root) == CUBE_COMPILATION_GENERIC, "not a compilation "
                      "error: %s", cube_error_message(e));
        ck_assert_msg(strstr(cube_error_reason(root), "limit"), "%s", cube_error_reason(root));
        ck_assert(cube_error_is_refusal(e));
        ck_assert_msg(took < 3000 * 2 + 3000, "refused after %ld ms", took);
        cube_error_free(e);
        cube_disconnect(other);
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
}
END_TEST

/* A constant table of 8 MiB: past an output limit of 4 MiB. */
static const char table_source[] =
        "CONSTANT uint32_t values[2 << 20] = { 1, 2, 3 };\n"
        "KERNEL void table(const uint32_t *in, uint32_t *out, INFO)\n"
        "{\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "        if (i < BUFFER_LEN(1))\n"
        "                out[i] = values[in[i] & ((2u << 20) - 1)];\n"
        "}\n";

/* One expression nested so deep that the compiler's recursion over it
 * overflows its stack: it dies of this source and builds others. */
static char *deep_expression_source(void)
{
        enum { DEPTH = 400000 };
        size_t cap = DEPTH * 4 + 512, n;
        char *s = malloc(cap);

        ck_assert_ptr_nonnull(s);
        n = (size_t) snprintf(s, cap, "KERNEL void nested(const uint32_t *in, uint32_t *out, "
                              "INFO)\n{\n        uint32_t x = in[0];\n        out[0] = x");
        for (int i = 0; i < DEPTH; i++)
                n += (size_t) snprintf(s + n, cap - n, "+%c", 'x');
        snprintf(s + n, cap - n, ";\n}\n");
        return s;
}

/* A build stopped by its limits, or a compiler that dies on one source, is a
 * refusal naming why, said without the daemon's paths, and kept: the next
 * launch, and a later session registering the same source, answer it
 * without building again. */
static void expect_remembered_refusal(const test_daemon *d, const char *source, const char *entry,
                                      const char *says)
{
        uint32_t in[N] = { 0 };
        cube_handle bufs[2];
        cube_client *c = NULL;
        cube_error *e;
        uint64_t k = 0, compiles = 0;

        for (int attempt = 0; attempt < 3; attempt++) {
                if (attempt != 1) {
                        if (c) {
                                /* Its entry goes with its last session. */
                                long deadline = test_now_ms() + 5000;
                                cube_disconnect(c);
                                while (status_of(d->socket).kernels > 0 &&
                                       test_now_ms() < deadline)
                                        usleep(20 * 1000);
                        }
                        ck_ok(cube_connect(d->socket, entry, &c));
                        k = test_kernel(c, source, entry);
                        ck_ok(cube_create(c, in, sizeof(in), &bufs[0]));
                        ck_ok(cube_empty(c, sizeof(in), &bufs[1]));
                }
                launch_n(c, k, bufs, 2, 1, 64, CUBE_LAUNCH_EXECUTE);
                const cube_error *root = root_of_read(c, &bufs[1], &e);
                const char *why = cube_error_reason(root);
                ck_assert_msg(cube_error_kind_of(root) == CUBE_COMPILATION_GENERIC &&
                              cube_error_is_refusal(e), "%s: not a refusal: %s", entry,
                              cube_error_message(e));
                ck_assert_msg(strstr(why, says), "%s: does not say '%s': %s", entry, says, why);
                ck_assert_msg(!strstr(why, "/proc") && !strstr(why, "/tmp") &&
                              !strstr(why, ".build-"), "%s: names a path: %s", entry, why);
                cube_error_free(e);
                if (attempt == 0)
                        compiles = status_of(d->socket).compiles;
        }
        ck_assert_msg(status_of(d->socket).compiles == compiles, "%s was built again at the "
                      "next launch, or in the next session", entry);
        cube_disconnect(c);
}

START_TEST(a_build_stopped_by_its_limits_is_a_refusal_kept_for_its_source)
{
        static const char *const args[] = { "--compile-output", "4M", NULL };
        char *deep = deep_expression_source();
        test_daemon d;
        cube_client *c;

        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        expect_remembered_refusal(&d, table_source, "table", "output limit of 4 MiB");
        expect_remembered_refusal(&d, deep, "nested", "died of");
        /* The compiler still builds, and the daemon still serves. */
        ck_ok(cube_connect(d.socket, "after", &c));
        expect_triple_runs(c, test_kernel(c, triple_source, "triple"));
        cube_disconnect(c);
        free(deep);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
}
END_TEST

/* ---------------------------------------------------------------------------
 * The kernel cache is trusted only when it is cube's
 * ------------------------------------------------------------------------- */

static cube_kernel_info entry_of(cube_client *c, const char *entry)
{
        cube_kernel_info *v, found = { 0 };
        size_t n;

        ck_ok(cube_daemon_kernels(c, &v, &n));
        for (size_t i = 0; i < n; i++)
                if (strcmp(v[i].entry, entry) == 0)
                        found = v[i];
        free(v);
        ck_assert_msg(found.entry[0], "no cache entry for %s", entry);
        return found;
}

static bool log_has(const test_daemon *d, const char *what)
{
        FILE *f = fopen(d->log, "r");
        char line[2048];
        bool found = false;

        while (f && !found && fgets(line, sizeof(line), f))
                found = strstr(line, what) != NULL;
        if (f)
                fclose(f);
        return found;
}

static void copy_file(const char *from, const char *to)
{
        char cmd[512];

        snprintf(cmd, sizeof(cmd), "cp %s %s", from, to);
        ck_assert_int_eq(system(cmd), 0);
}

START_TEST(a_planted_or_altered_artifact_is_compiled_again_never_loaded)
{
        char cache[] = "/tmp/cube-cache-XXXXXX", triple[160], evil[160], cmd[96];
        const char *args[] = { "--cache-dir", cache, NULL };
        cube_kernel_info info;
        test_daemon d;
        cube_client *c;
        cube_handle bufs[2];
        uint32_t in[N] = { 0 };

        ck_assert_ptr_nonnull(mkdtemp(cache));
        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        ck_ok(cube_connect(d.socket, "first", &c));
        ck_ok(cube_create(c, in, sizeof(in), &bufs[0]));
        ck_ok(cube_empty(c, sizeof(in), &bufs[1]));
        launch_n(c, test_kernel(c, triple_source, "triple"), bufs, 2, 1, 64,
                 CUBE_LAUNCH_COMPILE);
        launch_n(c, test_kernel(c, evil_source, "evil"), bufs, 2, 1, 64, CUBE_LAUNCH_COMPILE);
        ck_ok(cube_sync(c, NULL, 0));
        snprintf(triple, sizeof(triple), "%s/%s.ocl", cache, entry_of(c, "triple").hash);
        snprintf(evil, sizeof(evil), "%s/%s.ocl", cache, entry_of(c, "evil").hash);
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);

        /* Planted: evil's code under triple's name. */
        copy_file(evil, triple);
        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        ck_ok(cube_connect(d.socket, "planted", &c));
        expect_triple_runs(c, test_kernel(c, triple_source, "triple"));
        info = entry_of(c, "triple");
        ck_assert_msg(!info.from_disk, "the planted artifact was loaded");
        ck_assert_msg(log_has(&d, "planted or altered"), "the event was not logged");
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);

        /* Recompiled, it loads again: the digest is its own. */
        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        ck_ok(cube_connect(d.socket, "again", &c));
        expect_triple_runs(c, test_kernel(c, triple_source, "triple"));
        ck_assert(entry_of(c, "triple").from_disk);
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);

        /* Altered in place: one byte near its end. */
        FILE *f = fopen(triple, "r+b");
        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(fseek(f, -16, SEEK_END), 0);
        int ch = fgetc(f);
        ck_assert_int_eq(fseek(f, -16, SEEK_END), 0);
        fputc(ch ^ 0x5a, f);
        fclose(f);
        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        ck_ok(cube_connect(d.socket, "altered", &c));
        expect_triple_runs(c, test_kernel(c, triple_source, "triple"));
        ck_assert_msg(!entry_of(c, "triple").from_disk, "the altered artifact was loaded");
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);

        /* A directory others may read is not cube's: nothing loads from it. */
        ck_assert_int_eq(chmod(cache, 0750), 0);
        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        ck_ok(cube_connect(d.socket, "open-dir", &c));
        expect_triple_runs(c, test_kernel(c, triple_source, "triple"));
        ck_assert_msg(!entry_of(c, "triple").from_disk, "loaded from a 0750 directory");
        ck_assert(log_has(&d, "0750"));
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
        snprintf(cmd, sizeof(cmd), "rm -rf %s", cache);
        ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* Runs triple in a session of a daemon started with args (a --cache-dir
 * and its directory), and stops it: where the kernel's file with suffix
 * (".ocl", ".facts") lies goes to ret_path. */
static void cache_triple(test_daemon *d, const char *const *args, const char *suffix,
                         char *ret_path, size_t cap)
{
        cube_client *c;

        ck_assert_int_eq(test_daemon_start(d, args), 0);
        ck_ok(cube_connect(d->socket, "first", &c));
        expect_triple_runs(c, test_kernel(c, triple_source, "triple"));
        snprintf(ret_path, cap, "%s/%s%s", args[1], entry_of(c, "triple").hash, suffix);
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(d, 10000), 0);
}

/* Runs triple in a session (name) of a daemon started with args, and stops
 * it: the kernel was compiled again, not loaded from the cache, and the log
 * says why (logged). */
static void expect_compiled_again(test_daemon *d, const char *const *args, const char *name,
                                  const char *logged)
{
        cube_client *c;

        ck_assert_int_eq(test_daemon_start(d, args), 0);
        ck_ok(cube_connect(d->socket, name, &c));
        expect_triple_runs(c, test_kernel(c, triple_source, "triple"));
        ck_assert_msg(!entry_of(c, "triple").from_disk, "%s: the artifact was loaded", name);
        ck_assert_msg(log_has(d, logged), "%s: the refusal was not logged", name);
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(d, 10000), 0);
}

/* Gives each of the artifact's PoCL binaries (one per device) back a root
 * entry holding IR, in the bytes of its empty stand-in (device-binary.c):
 * an entry of the same length, "/program.bc" of three bytes. Its digest is
 * recorded again, as a build of an older cube would have recorded it. */
static void plant_ir(const char *artifact)
{
        static const char stand_in[] = "/program.no-ir", ir[] = "/program.bc";
        unsigned char *bytes, entry[4 + sizeof(stand_in) - 1 + 4];
        char line[PATH_MAX + 16], digest[65];
        uint32_t len = sizeof(ir) - 1, content = 3;
        size_t n, planted = 0;
        struct stat st;
        FILE *f;

        ck_assert_int_eq(stat(artifact, &st), 0);
        ck_assert_ptr_nonnull(bytes = malloc((size_t) st.st_size));
        ck_assert_ptr_nonnull(f = fopen(artifact, "r+b"));
        ck_assert_uint_eq(n = fread(bytes, 1, (size_t) st.st_size, f), (size_t) st.st_size);
        memcpy(entry, &len, 4);
        memcpy(entry + 4, ir, len);
        memcpy(entry + 4 + len, &content, 4);
        memcpy(entry + 8 + len, "IR!", content);
        for (size_t at = 4; at + sizeof(entry) <= n; at++) {
                if (memcmp(bytes + at, stand_in, sizeof(stand_in) - 1) != 0)
                        continue;
                memcpy(bytes + at - 4, entry, sizeof(entry));
                planted++;
        }
        ck_assert_uint_gt(planted, 0);
        ck_assert_int_eq(fseek(f, 0, SEEK_SET), 0);
        ck_assert_uint_eq(fwrite(bytes, 1, n, f), n);
        fclose(f);
        free(bytes);

        snprintf(line, sizeof(line), "sha256sum %s", artifact);
        ck_assert_ptr_nonnull(f = popen(line, "r"));
        ck_assert_int_eq(fscanf(f, "%64s", digest), 1);
        pclose(f);
        snprintf(line, sizeof(line), "%s.sha256", artifact);
        ck_assert_ptr_nonnull(f = fopen(line, "r+b"));
        ck_assert_uint_eq(fwrite(digest, 1, 64, f), 64);
        fclose(f);
}

/* An artifact whose binaries still hold their IR (as a build of an older
 * cube wrote them) would have PoCL compile inside the sealed device, which
 * the seal kills, with every tenant's work in it: its digest matches, yet
 * the device refuses to load it, the event is logged, and the kernel is
 * compiled again, so the next daemon loads what that build wrote. */
START_TEST(an_artifact_still_holding_ir_is_refused_and_compiled_again)
{
        char cache[] = "/tmp/cube-cache-XXXXXX", triple[160], cmd[96];
        const char *args[] = { "--cache-dir", cache, NULL };
        test_daemon d;
        cube_client *c;

        ck_assert_ptr_nonnull(mkdtemp(cache));
        cache_triple(&d, args, ".ocl", triple, sizeof(triple));
        plant_ir(triple);
        expect_compiled_again(&d, args, "holding IR", "still holds the program's IR");

        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        ck_ok(cube_connect(d.socket, "again", &c));
        expect_triple_runs(c, test_kernel(c, triple_source, "triple"));
        ck_assert_msg(entry_of(c, "triple").from_disk, "the build that replaced it did not load");
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
        snprintf(cmd, sizeof(cmd), "rm -rf %s", cache);
        ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* The front end's facts kept beside an artifact are trusted as it is: facts
 * altered after they were written (here, a scalar the kernel does not take,
 * which would refuse every launch) are read again from the source, and the
 * event is logged. */
START_TEST(altered_facts_beside_an_artifact_are_read_again_from_the_source)
{
        char cache[] = "/tmp/cube-cache-XXXXXX", facts[160], text[8192], cmd[96];
        const char *args[] = { "--cache-dir", cache, NULL };
        test_daemon d;
        cube_client *c;

        ck_assert_ptr_nonnull(mkdtemp(cache));
        cache_triple(&d, args, ".facts", facts, sizeof(facts));

        FILE *f = fopen(facts, "r");
        ck_assert_ptr_nonnull(f);
        size_t n = fread(text, 1, sizeof(text) - 1, f);
        fclose(f);
        text[n] = '\0';
        ck_assert_ptr_nonnull(strstr(text, "\nbuffer 1 "));
        ck_assert_ptr_nonnull(f = fopen(facts, "w"));
        fprintf(f, "scalar 0 u32 planted\n%s", text);
        fclose(f);

        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        ck_ok(cube_connect(d.socket, "altered", &c));
        expect_triple_runs(c, test_kernel(c, triple_source, "triple"));
        ck_assert_msg(entry_of(c, "triple").from_disk, "the artifact itself was not loaded");
        ck_assert_msg(log_has(&d, "cached facts"), "the event was not logged");
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
        snprintf(cmd, sizeof(cmd), "rm -rf %s", cache);
        ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* A symlink planted under an artifact's name, pointing at a copy of the
 * very bytes its digest records, is refused: artifacts are opened through
 * the held directory with O_NOFOLLOW and judged on what was opened. */
START_TEST(a_symlink_planted_in_the_cache_is_refused)
{
        char cache[] = "/tmp/cube-cache-XXXXXX", triple[160], aside[200], cmd[96];
        const char *args[] = { "--cache-dir", cache, NULL };
        test_daemon d;
        cube_client *c;
        cube_handle bufs[2];
        uint32_t in[N] = { 0 };

        ck_assert_ptr_nonnull(mkdtemp(cache));
        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        ck_ok(cube_connect(d.socket, "first", &c));
        ck_ok(cube_create(c, in, sizeof(in), &bufs[0]));
        ck_ok(cube_empty(c, sizeof(in), &bufs[1]));
        launch_n(c, test_kernel(c, triple_source, "triple"), bufs, 2, 1, 64,
                 CUBE_LAUNCH_COMPILE);
        ck_ok(cube_sync(c, NULL, 0));
        snprintf(triple, sizeof(triple), "%s/%s.ocl", cache, entry_of(c, "triple").hash);
        snprintf(aside, sizeof(aside), "%s.aside", cache);
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);

        ck_assert_int_eq(rename(triple, aside), 0);
        ck_assert_int_eq(symlink(aside, triple), 0);
        expect_compiled_again(&d, args, "symlinked", "is a symlink");
        unlink(aside);
        snprintf(cmd, sizeof(cmd), "rm -rf %s", cache);
        ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* The cache's path: a directory above it that another user owns, or that
 * others may write without the sticky bit, is refused at start; an artifact
 * another user owns is never loaded; and a cache directory swapped for
 * another after the start is not loaded from. */
START_TEST(a_cache_another_user_could_swap_is_refused_or_not_loaded)
{
        char top[] = "/tmp/cube-above-XXXXXX", cache[96], moved[112], triple[200], cmd[512];
        const char *args[] = { "--cache-dir", cache, NULL };
        test_daemon d;
        cube_client *c;
        cube_handle bufs[2];
        uint32_t in[N] = { 0 };

        if (!running_as_root())
                return;         /* making another user's directory needs root */
        ck_assert_ptr_nonnull(mkdtemp(top));
        snprintf(cache, sizeof(cache), "%s/cache", top);
        snprintf(moved, sizeof(moved), "%s/moved", top);

        ck_assert_int_eq(chown(top, 65534, 65534), 0);
        ck_assert_msg(test_daemon_start(&d, args) < 0, "served a cache under nobody's directory");
        ck_assert_int_eq(chown(top, 0, 0), 0);
        ck_assert_int_eq(chmod(top, 0777), 0);
        ck_assert_msg(test_daemon_start(&d, args) < 0, "served a cache under a 0777 directory");
        ck_assert_int_eq(chmod(top, 0755), 0);

        /* A trusted cache, with triple compiled into it. */
        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        ck_ok(cube_connect(d.socket, "first", &c));
        ck_ok(cube_create(c, in, sizeof(in), &bufs[0]));
        ck_ok(cube_empty(c, sizeof(in), &bufs[1]));
        launch_n(c, test_kernel(c, triple_source, "triple"), bufs, 2, 1, 64,
                 CUBE_LAUNCH_COMPILE);
        ck_ok(cube_sync(c, NULL, 0));
        snprintf(triple, sizeof(triple), "%s/%s.ocl", cache, entry_of(c, "triple").hash);
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);

        /* Another user's artifact, digest and all. */
        ck_assert_int_eq(chown(triple, 65534, 65534), 0);
        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        ck_ok(cube_connect(d.socket, "owned", &c));
        expect_triple_runs(c, test_kernel(c, triple_source, "triple"));
        ck_assert_msg(!entry_of(c, "triple").from_disk, "another user's artifact was loaded");
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);

        /* The recompiled artifact is ours again; the directory is swapped
         * under a running daemon for a copy holding the same files. */
        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        ck_ok(cube_connect(d.socket, "swapped", &c));
        ck_assert_int_eq(rename(cache, moved), 0);
        snprintf(cmd, sizeof(cmd), "cp -a %s %s && rm %s", moved, cache, triple);
        ck_assert_int_eq(system(cmd), 0);
        expect_triple_runs(c, test_kernel(c, triple_source, "triple"));
        ck_assert_msg(!entry_of(c, "triple").from_disk, "loaded from a swapped cache");
        ck_assert(log_has(&d, "no longer the directory"));
        /* Nor is anything built into the directory swapped in. */
        ck_assert_msg(access(triple, F_OK) < 0, "the kernel was built into the swapped cache");
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
        snprintf(cmd, sizeof(cmd), "rm -rf %s", top);
        ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Build slots are shared between users
 * ------------------------------------------------------------------------- */

#define HOG_BUILDS 4

/* 2^40 tokens in an #if: the preprocessor burns its CPU time and writes
 * nothing, so the build runs to the compile limit. */
static void silent_bomb_source(char *buf, size_t cap, int seed)
{
        size_t n = (size_t) snprintf(buf, cap, "#define B0 1 +\n");

        for (int i = 1; i <= 40; i++)
                n += (size_t) snprintf(buf + n, cap - n, "#define B%d B%d B%d\n", i, i - 1, i - 1);
        snprintf(buf + n, cap - n, "#if B40 0\n#endif\n"
                 "KERNEL void bomb(const uint32_t *in, uint32_t *out, INFO)\n"
                 "{\n        out[0] = in[0] + %d;\n}\n", seed);
}

/* As nobody: launches HOG_BUILDS compiler bombs from as many sessions (a
 * session waits for its kernel before it reads on), each running to the
 * compile limit, and holds on until told. */
static int hog_the_build_slots(const char *socket, int from_test, int to_test)
{
        uint32_t in[N] = { 0 };
        cube_client *c[HOG_BUILDS];

        for (int i = 0; i < HOG_BUILDS; i++) {
                cube_handle bufs[2];
                char source[4096];
                uint64_t k;
                if (cube_connect(socket, "hog", &c[i]))
                        return 2;
                ck_ok(cube_create(c[i], in, sizeof(in), &bufs[0]));
                ck_ok(cube_empty(c[i], sizeof(in), &bufs[1]));
                silent_bomb_source(source, sizeof(source), i);
                if (cube_kernel_register(c[i], source, "bomb", &k))
                        return 3;
                launch_n(c[i], k, bufs, 2, 1, 64, CUBE_LAUNCH_EXECUTE);
        }
        tell(to_test, 'h');
        hear(from_test, 60000);
        for (int i = 0; i < HOG_BUILDS; i++)
                cube_disconnect(c[i]);
        return 0;
}

START_TEST(a_bystanders_build_starts_at_once_while_another_user_fills_the_slots)
{
        static const char *const args[] = { "--compile-limit", "6", "--drain-timeout", "30",
                                            NULL };
        test_daemon d;
        cube_client *c;
        nobody n;
        long t0, took;
        double build_ms;

        if (!running_as_root())
                return;
        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        open_socket_to_all(&d);
        nobody_start(&n, d.socket, hog_the_build_slots);
        ck_assert_int_eq(hear(n.from_child, test_scaled_ms(10000)), 'h');
        usleep(1000 * 1000);            /* its builds hold the slots */
        ck_ok(cube_connect(d.socket, "bystander", &c));
        uint64_t k = test_kernel(c, triple_source, "triple");
        t0 = test_now_ms();
        expect_triple_runs(c, k);
        took = test_now_ms() - t0;
        build_ms = entry_of(c, "triple").compile_ms;
        ck_assert_msg(took - (long) build_ms < 1000, "the bystander's kernel took %ld ms, of "
                      "which %.0f ms building: it waited %ld ms for a slot", took, build_ms,
                      took - (long) build_ms);
        cube_disconnect(c);
        tell(n.to_child, 'q');
        ck_assert_int_eq(nobody_finish(&n), 0);
        ck_assert_int_eq(test_daemon_stop(&d, 30000), 0);
}
END_TEST

/* Two sessions of one user each launch a compiler bomb: with a core for
 * each, both builds run at once (one slot is still kept for another user),
 * so a client warming its cache with several sources does not wait for one
 * build after another. */
START_TEST(one_users_builds_of_several_sources_run_side_by_side)
{
        static const char *const args[] = { "--compile-limit", "4", NULL };
        uint32_t in[N] = { 0 };
        cube_client *c[2];
        cube_handle bufs[2][2];
        test_daemon d;
        long most = 0;

        if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
                return;         /* one core: one build at a time, and one slot kept */
        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        for (int i = 0; i < 2; i++) {
                char source[4096];
                uint64_t k;
                ck_ok(cube_connect(d.socket, "warming", &c[i]));
                ck_ok(cube_create(c[i], in, sizeof(in), &bufs[i][0]));
                ck_ok(cube_empty(c[i], sizeof(in), &bufs[i][1]));
                silent_bomb_source(source, sizeof(source), i);
                ck_ok(cube_kernel_register(c[i], source, "bomb", &k));
                launch_n(c[i], k, bufs[i], 2, 1, 64, CUBE_LAUNCH_EXECUTE);
        }
        for (long t0 = test_now_ms(); most < 2 && test_now_ms() - t0 < 3000;) {
                long n = test_children_running(d.pid, "--check") +
                         test_children_running(d.pid, "--build");
                most = n > most ? n : most;
                usleep(20 * 1000);
        }
        ck_assert_msg(most == 2, "one user's two builds: at most %ld ran at once", most);
        for (int i = 0; i < 2; i++) {
                cube_error *e;
                const cube_error *root = root_of_read(c[i], &bufs[i][1], &e);
                ck_assert_msg(cube_error_kind_of(root) == CUBE_COMPILATION_GENERIC,
                              "not the bomb's refusal: %s", cube_error_message(e));
                cube_error_free(e);
                cube_disconnect(c[i]);
        }
        ck_assert_int_eq(test_daemon_stop(&d, 30000), 0);
}
END_TEST

/* Kernels that carry work: each unit steps a generator many times. The
 * first walks its cube's units in a loop of its own (the front end's looped
 * form); the second, with a barrier, runs them as PoCL's work-items. The
 * third is brief: a few microseconds a launch. */
#define BUSY_STEPS 100000u
#define BRIEF_STEPS 16u
#define BUSY_BODY(name, steps, between) BUSY_BODY_(name, steps, between)
#define BUSY_BODY_(name, steps, between) \
        "KERNEL void " name "(const uint32_t *in, uint32_t *out, INFO)\n" \
        "{\n" \
        "        uint64_t i = ABSOLUTE_POS;\n" \
        "        uint32_t x = i < BUFFER_LEN(0) ? in[i] : 0u;\n" \
        "        for (uint32_t k = 0; k < " #steps "; k++)\n" \
        "                x = x * 1664525u + 1013904223u;\n" \
        between \
        "        if (i < BUFFER_LEN(1))\n" \
        "                out[i] = x;\n" \
        "}\n"
static const char busy_source[] = BUSY_BODY("busy", BUSY_STEPS, "");
static const char busy_sync_source[] = BUSY_BODY("busy_sync", BUSY_STEPS, "        sync_cube();\n");
static const char brief_source[] = BUSY_BODY("brief", BRIEF_STEPS, "");
static const char brief_sync_source[] = BUSY_BODY("brief_sync", BRIEF_STEPS,
                                                  "        sync_cube();\n");

/* One of them, for busy_until_specialised: launched `launches` times a
 * round, as a brief kernel has to be to run long enough, in `cubes` cubes
 * (0: enough for N units). */
typedef struct busy_kernel {
        const char *source, *entry;
        uint32_t steps;
        bool looped;
        int launches;
        uint32_t cubes;
} busy_kernel;

static uint32_t stepped(uint32_t x, uint32_t steps)
{
        for (uint32_t k = 0; k < steps; k++)
                x = x * 1664525u + 1013904223u;
        return x;
}

static uint32_t busy_of(uint32_t x)
{
        return stepped(x, BUSY_STEPS);
}

/* The cache directory's artifacts ("*.ocl") and facts ("*.facts"): a
 * kernel's build leaves one of each, a build for a cube dimension an
 * artifact alone. */
static int count_files(const char *dir, const char *suffix)
{
        char cmd[512];
        FILE *p;
        int n = -1;

        snprintf(cmd, sizeof(cmd), "ls %s | grep -c '\\%s$'", dir, suffix);
        if ((p = popen(cmd, "r"))) {
                if (fscanf(p, "%d", &n) != 1)
                        n = -1;
                pclose(p);
        }
        return n;
}

/* Launches kernel k (bk) over bufs in cubes of 64 until the device runs
 * code built for that dimension, or the deadline; checks each round's
 * result. A looped kernel's build for the dimension is a second program (a
 * second work-group function of its name mapped); the other's is PoCL's
 * function specialised for a local size of 64, and for grids under 65,535
 * units a side where the launches' grid is one. The highest nice value a
 * build of daemon's was seen running at goes to ret_build_nice (left alone
 * when none was seen). */
static bool busy_until_specialised(cube_client *c, uint64_t k, const busy_kernel *bk,
                                   pid_t daemon, pid_t device, cube_handle *bufs,
                                   const uint32_t *in, long deadline, long *ret_build_nice)
{
        uint32_t cubes = bk->cubes ? bk->cubes : (N + 63) / 64;
        char part[128], bare[128];
        uint32_t got[N];
        bool found = false;
        pid_t build;
        long nice;

        if (bk->looped)
                snprintf(part, sizeof(part), "/cube__k_%s/0-0-0/cube__k_%s.so", bk->entry,
                         bk->entry);
        else
                snprintf(part, sizeof(part), "/cube__k_%s/64-1-1-goffs0%s/cube__k_%s.so",
                         bk->entry, cubes * 64 < 65535 ? "-smallgrid" : "", bk->entry);
        /* A kernel with a barrier whose launches are proved in bounds runs
         * its bare form from that build instead. */
        snprintf(bare, sizeof(bare), "/cube__kb_%s/64-1-1-goffs0%s/cube__kb_%s.so",
                 bk->entry, cubes * 64 < 65535 ? "-smallgrid" : "", bk->entry);
        while (!found && test_now_ms() < deadline) {
                for (int l = 0; l < bk->launches; l++)
                        launch_n(c, k, bufs, 2, cubes, 64, CUBE_LAUNCH_EXECUTE);
                ck_ok(cube_read(c, &bufs[1], got, sizeof(got)));
                for (uint32_t i = 0; i < N; i += 97)
                        ck_assert_uint_eq(got[i], stepped(in[i], bk->steps));
                found = test_maps_count(device, part) >= (bk->looped ? 2 : 1) ||
                        (!bk->looped && test_maps_count(device, bare) >= 1);
                if ((build = test_child_running(daemon, "--build")) > 0 &&
                    test_nice_of(build, &nice) == 0 &&
                    (*ret_build_nice == LONG_MAX || nice > *ret_build_nice))
                        *ret_build_nice = nice;
                /* The build yields to these very launches: on a machine
                 * busy with other work too it runs mostly in their gaps. */
                if (!found && build > 0)
                        usleep(20000);
        }
        return found;
}

START_TEST(a_kernel_carrying_work_runs_code_built_for_its_cube_dimension)
{
        static const busy_kernel kernels[] = {
                { busy_source, "busy", BUSY_STEPS, true, 1, 0 },
                { busy_sync_source, "busy_sync", BUSY_STEPS, false, 1, 0 },
                /* A grid of 65,536 units: a reduction of 16 million floats
                 * has one of 16 million, which PoCL's functions for small
                 * grids do not run. */
                { brief_sync_source, "brief_sync", BRIEF_STEPS, false, 4, 1024 },
        };
        char cache[] = "/tmp/cube-shape-cache-XXXXXX", cmd[64];
        const char *args[] = { "--cache-dir", cache, NULL };
        test_daemon d;
        cube_client *c;
        cube_handle bufs[2];
        uint32_t in[N];
        pid_t device;
        long yielding;
        int seen_builds = 0;

        fill_random(in, sizeof(in), 5);
        ck_assert_ptr_nonnull(mkdtemp(cache));
        for (int run = 0; run < 2; run++) {
                ck_assert_int_eq(test_daemon_start(&d, args), 0);
                ck_ok(cube_connect(d.socket, "busy", &c));
                ck_ok(cube_create(c, in, sizeof(in), &bufs[0]));
                ck_ok(cube_empty(c, sizeof(in), &bufs[1]));
                ck_assert_int_gt(device = test_child_running(d.pid, "--serve"), 0);
                ck_assert_int_eq(test_nice_of(d.pid, &yielding), 0);
                yielding = yielding + 10 < 19 ? yielding + 10 : 19;
                /* Their launches carry work: after their first tens of
                 * milliseconds each kernel is built again for cubes of 64,
                 * and then runs that code. A restarted daemon loads both
                 * builds from the cache: it has no source to build from, as
                 * the kernel's facts came from the cache too. */
                for (int i = 0; i < 3; i++) {
                        uint64_t k = test_kernel(c, kernels[i].source, kernels[i].entry);
                        long build_nice = LONG_MAX;
                        ck_assert_msg(busy_until_specialised(c, k, &kernels[i], d.pid, device,
                                                             bufs, in,
                                                             test_now_ms() + test_scaled_ms(100000),
                                                             &build_nice),
                                      "run %d: the device never ran %s built for cubes of 64", run,
                                      kernels[i].entry);
                        /* The builds no one waits for yield to launches
                         * (from when the builder has read what it builds). */
                        if (run == 0)
                                seen_builds += build_nice == yielding;
                }
                ck_assert_msg(run > 0 || seen_builds > 0, "no build for cubes of 64 was seen "
                              "running at nice %ld", yielding);
                ck_assert_int_eq(count_files(cache, ".ocl"), 6);
                ck_assert_int_eq(count_files(cache, ".facts"), 3);
                cube_disconnect(c);
                ck_assert_int_eq(test_daemon_stop(&d, 30000), 0);
        }
        snprintf(cmd, sizeof(cmd), "rm -rf %s", cache);
        ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* A kernel with a barrier whose every access the front end bounds: in[i +
 * shift], with shift a scalar, and out[i]. */
#define BOUNDED_CUBES 16u
#define BOUNDED_UNITS (BOUNDED_CUBES * 64u)
static const char bounded_source[] =
        "KERNEL void bounded(const uint32_t *in, uint32_t *out, uint32_t shift, INFO)\n"
        "{\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "        uint32_t x = in[i + shift];\n"
        "        for (uint32_t k = 0; k < 100000u; k++)\n"
        "                x = x * 1664525u + 1013904223u;\n"
        "        sync_cube();\n"
        "        out[i] = x;\n"
        "}\n";

static void launch_bounded(cube_client *c, uint64_t k, cube_handle *bufs, uint32_t shift)
{
        test_launch_u32(c, (cube_launch) {
                .kernel = k, .cube_count = { BOUNDED_CUBES, 1, 1 }, .cube_dim = { 64, 1, 1 },
                .buffers = bufs, .n_buffers = 2,
        }, &shift, 1);
}

/* Once built for its cube dimension, a checked kernel runs its bare form
 * for a launch the daemon proved in bounds over the whole grid (the device
 * maps that form's code), with the results of the checked one; a launch
 * of it that is not in bounds runs checked, and fails as one. in holds 64
 * elements more than the grid has units: a shift of 64 reads the last,
 * one of 65 reads past it. */
START_TEST(a_launch_proved_in_bounds_runs_the_bare_form_and_one_out_of_bounds_is_caught)
{
        char cache[] = "/tmp/cube-bare-cache-XXXXXX", cmd[64];
        const char *args[] = { "--cache-dir", cache, NULL };
        const char *bare = "/cube__kb_bounded/64-1-1-goffs0-smallgrid/cube__kb_bounded.so";
        uint32_t in[BOUNDED_UNITS + 64], got[BOUNDED_UNITS];
        cube_handle bufs[2];
        test_daemon d;
        cube_client *c;
        cube_error *e;
        pid_t device;

        fill_random(in, sizeof(in), 11);
        ck_assert_ptr_nonnull(mkdtemp(cache));
        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        ck_ok(cube_connect(d.socket, "bare", &c));
        ck_ok(cube_create(c, in, sizeof(in), &bufs[0]));
        ck_ok(cube_empty(c, sizeof(got), &bufs[1]));
        ck_assert_int_gt(device = test_child_running(d.pid, "--serve"), 0);
        uint64_t k = test_kernel(c, bounded_source, "bounded");
        long deadline = test_now_ms() + test_scaled_ms(100000);
        bool ran_bare = false;
        for (uint32_t round = 0; !ran_bare && test_now_ms() < deadline; round++) {
                uint32_t shift = round % 2 ? 64 : 0;
                launch_bounded(c, k, bufs, shift);
                ck_ok(cube_read(c, &bufs[1], got, sizeof(got)));
                for (uint32_t i = 0; i < BOUNDED_UNITS; i += 31)
                        ck_assert_uint_eq(got[i], busy_of(in[i + shift]));
                ran_bare = test_maps_count(device, bare) >= 1;
        }
        ck_assert_msg(ran_bare, "the device never ran the bare form of 'bounded'");
        for (uint32_t shift = 0; shift <= 64; shift += 64) {
                launch_bounded(c, k, bufs, shift);
                ck_ok(cube_read(c, &bufs[1], got, sizeof(got)));
                for (uint32_t i = 0; i < BOUNDED_UNITS; i++)
                        ck_assert_uint_eq(got[i], busy_of(in[i + shift]));
        }
        launch_bounded(c, k, bufs, 65);
        ck_assert_msg((e = cube_read(c, &bufs[1], got, sizeof(got))) != NULL,
                      "a shift of 65 read past 'in' and succeeded");
        const cube_error *root = cube_error_kind_of(e) == CUBE_SERVER_SEVERAL ?
                                 cube_error_at(e, 0) : e;
        while (cube_error_source(root))
                root = cube_error_source(root);
        ck_assert_msg(cube_error_kind_of(root) == CUBE_SERVER_VALIDATION &&
                      strstr(cube_error_reason(root), "out of bounds") &&
                      strstr(cube_error_reason(root), "'in'"),
                      "a shift of 65 was not caught reading past 'in': %s",
                      cube_error_message(e));
        cube_error_free(e);
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 30000), 0);
        snprintf(cmd, sizeof(cmd), "rm -rf %s", cache);
        ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* A kernel with a barrier, in cubes two units deep: the first unit of the
 * grid writes whether the launch has more than 40,000 cubes along z, the
 * others a value they worked for. */
#define TALL_CUBES 50000u
static const char tall_source[] =
        "KERNEL void tall(uint32_t *out, INFO)\n"
        "{\n"
        "        uint32_t x = CUBE_POS_Z;\n"
        "        for (uint32_t k = 0; k < 16u; k++)\n"
        "                x = x * 1664525u + 1013904223u;\n"
        "        sync_cube();\n"
        "        if (ABSOLUTE_POS_Z == 0)\n"
        "                out[0] = CUBE_COUNT_Z > 40000u ? 1u : 2u;\n"
        "        else if (ABSOLUTE_POS_Z < BUFFER_LEN(0))\n"
        "                out[ABSOLUTE_POS_Z] = x;\n"
        "}\n";

/* Code built for cubes two units deep still counts a launch's cubes along
 * z right when they are more than 65,535 units deep in all. PoCL 3.1 takes
 * such a grid for a small one (its depth as the cube's depth squared), and
 * its function for small grids assumes at most 32,768 cubes of that depth:
 * it folds the test of CUBE_COUNT_Z to false. */
START_TEST(code_built_for_cubes_two_units_deep_counts_a_tall_grid_right)
{
        test_daemon d;
        cube_client *c;
        cube_handle out;
        uint32_t got[N];
        pid_t device;
        bool found = false;

        ck_assert_int_eq(test_daemon_start(&d, NULL), 0);
        ck_ok(cube_connect(d.socket, "tall", &c));
        ck_ok(cube_empty(c, sizeof(got), &out));
        ck_assert_int_gt(device = test_child_running(d.pid, "--serve"), 0);
        uint64_t k = test_kernel(c, tall_source, "tall");
        cube_info *info = cube_info_new();
        ck_assert_int_eq(cube_info_buffer_len(info, N), 0);
        long deadline = test_now_ms() + test_scaled_ms(100000);
        /* One round more once the build is mapped: it ran that round. */
        for (int after = 0; after < 2 && test_now_ms() < deadline; after += found) {
                for (int l = 0; l < 4; l++)
                        ck_ok(cube_launch_kernel(c, &(cube_launch) {
                                .kernel = k, .cube_count = { 1, 1, TALL_CUBES },
                                .cube_dim = { 1, 1, 2 }, .buffers = &out, .n_buffers = 1,
                                .info = info, .mode = CUBE_LAUNCH_EXECUTE,
                        }));
                ck_ok(cube_read(c, &out, got, sizeof(got)));
                found = found || test_maps_count(device, "/cube__k_tall/1-1-2-goffs0") >= 1;
                ck_assert_msg(got[0] == 1, "a launch saw at most 40,000 cubes along z, of %u "
                              "(code built for cubes of 1 x 1 x 2 %s)", TALL_CUBES,
                              found ? "mapped" : "not yet mapped");
                ck_assert_uint_eq(got[N - 1], stepped((N - 1) / 2, 16));
                if (!found && test_child_running(d.pid, "--build") > 0)
                        usleep(20000);
        }
        ck_assert_msg(found, "the device never ran tall built for cubes of 1 x 1 x 2");
        cube_info_free(info);
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 30000), 0);
}
END_TEST

/* Starts d and a session of it with bufs (in, random from seed; an empty
 * output) and kernel busy registered; returns the kernel. */
static uint64_t busy_daemon(test_daemon *d, cube_client **ret_c, cube_handle bufs[2],
                            uint32_t in[N], unsigned seed)
{
        cube_client *c;

        fill_random(in, N * sizeof(uint32_t), seed);
        ck_assert_int_eq(test_daemon_start(d, NULL), 0);
        ck_ok(cube_connect(d->socket, "busy", &c));
        ck_ok(cube_create(c, in, N * sizeof(uint32_t), &bufs[0]));
        ck_ok(cube_empty(c, N * sizeof(uint32_t), &bufs[1]));
        *ret_c = c;
        return test_kernel(c, busy_source, "busy");
}

/* A build for a cube dimension that fails is logged, and the kernel's
 * launches of that dimension keep running its generic code, correctly. The
 * build fails for want of its directory: the cache is moved away once the
 * kernel's own build is loaded. */
START_TEST(a_failed_build_for_a_cube_dimension_leaves_the_generic_code)
{
        test_daemon d;
        cube_client *c;
        cube_handle bufs[2];
        uint32_t in[N], got[N];
        char away[sizeof(d.cache) + 8];
        long deadline;
        bool logged = false;

        uint64_t k = busy_daemon(&d, &c, bufs, in, 7);
        launch_n(c, k, bufs, 2, (N + 63) / 64, 64, CUBE_LAUNCH_EXECUTE);
        ck_ok(cube_sync(c, NULL, 0));
        snprintf(away, sizeof(away), "%s.away", d.cache);
        ck_assert_int_eq(rename(d.cache, away), 0);
        deadline = test_now_ms() + test_scaled_ms(40000);
        while (!logged && test_now_ms() < deadline) {
                launch_n(c, k, bufs, 2, (N + 63) / 64, 64, CUBE_LAUNCH_EXECUTE);
                ck_ok(cube_read(c, &bufs[1], got, sizeof(got)));
                for (uint32_t i = 0; i < N; i += 97)
                        ck_assert_uint_eq(got[i], busy_of(in[i]));
                logged = log_has(&d, "for cubes of 64x1x1 was not built; its launches keep the "
                                 "generic code");
        }
        ck_assert_msg(logged, "the failed build was not logged");
        for (int r = 0; r < 20; r++) {
                launch_n(c, k, bufs, 2, (N + 63) / 64, 64, CUBE_LAUNCH_EXECUTE);
                ck_ok(cube_read(c, &bufs[1], got, sizeof(got)));
                for (uint32_t i = 0; i < N; i++)
                        ck_assert_uint_eq(got[i], busy_of(in[i]));
        }
        ck_assert_int_eq(test_child_running(d.pid, "--build"), -1);
        ck_assert_int_eq(rename(away, d.cache), 0);
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
}
END_TEST

/* A build for a cube dimension is one no one waits for: a stop kills it
 * rather than wait for it. The build is held stopped (SIGSTOP), as a build
 * starved by a busy machine is held: the stop must not wait for it at all. */
START_TEST(a_stop_abandons_a_build_for_a_cube_dimension)
{
        test_daemon d;
        cube_client *c;
        cube_handle bufs[2];
        uint32_t in[N];
        pid_t build = 0;
        long deadline;
        int stopped;

        uint64_t k = busy_daemon(&d, &c, bufs, in, 6);
        deadline = test_now_ms() + test_scaled_ms(40000);
        while (build <= 0 && test_now_ms() < deadline) {
                launch_n(c, k, bufs, 2, (N + 63) / 64, 64, CUBE_LAUNCH_EXECUTE);
                ck_ok(cube_sync(c, NULL, 0));
                build = test_child_running(d.pid, "--build");
        }
        ck_assert_msg(build > 0, "no build for cubes of 64 started");
        ck_assert_int_eq(kill(build, SIGSTOP), 0);
        cube_disconnect(c);
        long start = test_now_ms();
        stopped = test_daemon_stop(&d, 5000);
        long took = test_now_ms() - start;
        bool build_left = kill(build, 0) == 0;
        if (build_left)
                kill(build, SIGKILL);
        ck_assert_msg(stopped == 0, "the stop waited for the build (exit %d after %ld ms)",
                      stopped, took);
        ck_assert_msg(!build_left, "the build outlived the daemon");
}
END_TEST

/* Starts d on the first CPU this process may use: the daemon, and so its
 * device, may use that one only. */
static void start_on_one_cpu(test_daemon *d)
{
        cpu_set_t saved, one;
        int started;

        ck_assert_int_eq(sched_getaffinity(0, sizeof(saved), &saved), 0);
        CPU_ZERO(&one);
        for (int i = 0; i < CPU_SETSIZE && CPU_COUNT(&one) == 0; i++)
                if (CPU_ISSET(i, &saved))
                        CPU_SET(i, &one);
        ck_assert_int_eq(sched_setaffinity(0, sizeof(one), &one), 0);
        started = test_daemon_start(d, NULL);
        ck_assert_int_eq(sched_setaffinity(0, sizeof(saved), &saved), 0);
        ck_assert_int_eq(started, 0);
}

/* Flooders keep the loop thread's share of the ring full, so a prober's
 * launch, behind them, goes to the ring from a worker, which then takes its
 * read. A worker preempted between the two, as any thread may be, sees the
 * loop run through the ring and come back to the slot it holds. Neither may
 * wait for the other there: cubed must go on, and no launch may be lost,
 * every counter ending at the number of launches made on it. The workers
 * run at idle priority on the daemon's one CPU, which the loop thread and
 * the device, serving sixteen flooders, keep busy: preempted there
 * anywhere, they are lapped often. */
#define RING_FLOODERS 16
#define RING_PROBERS 2
#define RING_PROBES 1000
#define RING_BURST 48
#define RING_PROBE_BURST 15

struct ring_client {
        const char *socket;
        bool probe;
        _Atomic int *probers_left;      /* flooders flood until it is 0 */
        uint32_t got, want;
        char failed[160];
};

static const char ring_count_source[] =
        "KERNEL void count(uint32_t *out, INFO)\n"
        "{\n"
        "        out[0] = out[0] + 1u;\n"
        "}\n";

static void *ring_client_run(void *arg)
{
        struct ring_client *r = arg;
        cube_info *info = cube_info_new();
        uint32_t zero = 0, got;
        cube_error *e = NULL;
        cube_client *c = NULL;
        cube_handle out, side;
        uint64_t k;

        if ((e = cube_connect(r->socket, "ring", &c)) || (e = cube_create(c, &zero, 4, &out)) ||
            (e = cube_empty(c, 4, &side)) ||
            (e = cube_kernel_register(c, ring_count_source, "count", &k)) ||
            cube_info_buffer_len(info, 1) != 0)
                goto out;
        cube_launch l = {
                .kernel = k, .cube_count = { 1, 1, 1 }, .cube_dim = { 1, 1, 1 },
                .buffers = &out, .n_buffers = 1, .info = info,
        };
        for (int round = 0;
             r->probe ? round < RING_PROBES : round == 0 || atomic_load(r->probers_left) > 0;
             round++) {
                if (r->probe && (e = cube_write(c, &side, &zero, 4)))
                        goto out;
                for (int i = 0; i < (r->probe ? RING_PROBE_BURST : RING_BURST); i++)
                        if ((e = cube_launch_kernel(c, &l)))
                                goto out;
                if ((e = r->probe ? cube_read(c, &out, &got, 4) : cube_sync(c, NULL, 0)))
                        goto out;
                r->want += r->probe ? RING_PROBE_BURST : RING_BURST;
        }
        e = cube_read(c, &out, &r->got, 4);
out:
        if (e)
                snprintf(r->failed, sizeof(r->failed), "%s", cube_error_message(e));
        cube_error_free(e);
        cube_info_free(info);
        cube_disconnect(c);
        if (r->probe)
                atomic_fetch_sub(r->probers_left, 1);
        return NULL;
}

/* Every thread of process pid but its first (cubed's loop) at idle priority. */
static void idle_all_but_the_first_thread(pid_t pid)
{
        char path[64];
        DIR *dir;
        struct dirent *t;
        int n = 0;

        snprintf(path, sizeof(path), "/proc/%d/task", (int) pid);
        ck_assert_ptr_nonnull(dir = opendir(path));
        while ((t = readdir(dir))) {
                pid_t tid = (pid_t) atoi(t->d_name);
                if (tid <= 0 || tid == pid)
                        continue;
                ck_assert_int_eq(sched_setscheduler(tid, SCHED_IDLE, &(struct sched_param) { 0 }),
                                 0);
                n++;
        }
        closedir(dir);
        ck_assert_int_gt(n, 0);
}

START_TEST(a_worker_lapped_by_the_loop_on_the_ring_stops_neither)
{
        struct ring_client r[RING_FLOODERS + RING_PROBERS];
        pthread_t t[RING_FLOODERS + RING_PROBERS];
        _Atomic int probers_left = RING_PROBERS;
        test_daemon d;

        start_on_one_cpu(&d);
        idle_all_but_the_first_thread(d.pid);
        for (int i = 0; i < RING_FLOODERS + RING_PROBERS; i++) {
                r[i] = (struct ring_client) { .socket = d.socket, .probe = i >= RING_FLOODERS,
                                              .probers_left = &probers_left };
                ck_assert_int_eq(pthread_create(&t[i], NULL, ring_client_run, &r[i]), 0);
        }
        for (int i = 0; i < RING_FLOODERS + RING_PROBERS; i++) {
                ck_assert_int_eq(pthread_join(t[i], NULL), 0);
                ck_assert_uint_gt(r[i].want, 0);
                ck_assert_msg(!r[i].failed[0], "client %d: %s", i, r[i].failed);
                ck_assert_uint_eq(r[i].got, r[i].want);
        }
        ck_assert_int_eq(test_daemon_stop(&d, 30000), 0);
}
END_TEST

/* A device that may use one CPU cannot spread a launch's cubes: PoCL's
 * threads would take turns on that CPU, every launch waking each of them.
 * There it runs every launch on its own thread (KERNELS.md). */
START_TEST(a_device_on_one_cpu_runs_every_launch_on_its_own_thread)
{
        static const char *const sources[][2] = {
                { busy_source, "busy" }, { busy_sync_source, "busy_sync" },
        };
        long main0, others0, main1, others1;
        test_daemon d;
        cube_client *c;
        cube_handle bufs[2];
        uint32_t in[N], got[N];
        pid_t device;

        start_on_one_cpu(&d);
        ck_ok(cube_connect(d.socket, "one-cpu", &c));
        fill_random(in, sizeof(in), 9);
        ck_ok(cube_create(c, in, sizeof(in), &bufs[0]));
        ck_ok(cube_empty(c, sizeof(in), &bufs[1]));
        ck_assert_int_gt(device = test_child_running(d.pid, "--serve"), 0);
        ck_assert_int_eq(test_thread_cpu_ms(device, &main0, &others0), 0);
        /* A looped kernel and one whose cubes wait at a barrier, in cubes of
         * 64, each launch carrying tens of milliseconds of work. */
        for (size_t s = 0; s < sizeof(sources) / sizeof(sources[0]); s++) {
                uint64_t k = test_kernel(c, sources[s][0], sources[s][1]);
                for (int i = 0; i < 3; i++) {
                        launch_n(c, k, bufs, 2, (N + 63) / 64, 64, CUBE_LAUNCH_EXECUTE);
                        ck_ok(cube_read(c, &bufs[1], got, sizeof(got)));
                        for (uint32_t j = 0; j < N; j++)
                                ck_assert_uint_eq(got[j], busy_of(in[j]));
                }
        }
        ck_assert_int_eq(test_thread_cpu_ms(device, &main1, &others1), 0);
        ck_assert_msg(main1 - main0 >= 100 && others1 - others0 <= (main1 - main0) / 10,
                      "the device's own thread ran %ld ms of the launches, its other threads "
                      "%ld ms", main1 - main0, others1 - others0);
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 30000), 0);
}
END_TEST

/* Launches kernel k over bufs in 16 cubes of 64, `launches` at a time,
 * rounds times, checking each round's result (stepped steps times); each
 * launch waited for before the next when waited. */
static void launch_rounds(cube_client *c, uint64_t k, cube_handle *bufs, const uint32_t *in,
                          uint32_t steps, int rounds, int launches, bool waited)
{
        uint32_t got[N];

        for (int r = 0; r < rounds; r++) {
                for (int l = 0; l < launches; l++) {
                        launch_n(c, k, bufs, 2, (N + 63) / 64, 64, CUBE_LAUNCH_EXECUTE);
                        if (waited)
                                ck_ok(cube_sync(c, NULL, 0));
                }
                ck_ok(cube_read(c, &bufs[1], got, sizeof(got)));
                for (uint32_t i = 0; i < N; i += 37)
                        ck_assert_uint_eq(got[i], stepped(in[i], steps));
        }
}

/* With two CPUs or more, a brief kernel of many cubes runs on the device's
 * own thread once its launches have been timed both ways: spread over
 * PoCL's threads, each of them woken for a few microseconds of work, it was
 * slower. A kernel carrying work, timed the same way, stays spread. The
 * client waits for each brief launch, as one whose every step needs the last
 * one's result: launches posted ahead of the device reach PoCL in batches,
 * one wake-up for many, and there spreading them can be the faster way
 * (10.3 us a launch against 13.9 inline, in one run on two CPUs). */
START_TEST(a_brief_kernel_of_many_cubes_runs_inline_once_timed_and_a_long_one_spread)
{
        long main0, others0, main1, others1;
        test_daemon d;
        cube_client *c;
        cube_handle bufs[2];
        uint32_t in[N];
        pid_t device;

        fill_random(in, sizeof(in), 10);
        ck_assert_int_eq(test_daemon_start(&d, NULL), 0);
        ck_ok(cube_connect(d.socket, "brief", &c));
        ck_ok(cube_create(c, in, sizeof(in), &bufs[0]));
        ck_ok(cube_empty(c, sizeof(in), &bufs[1]));
        ck_assert_int_gt(device = test_child_running(d.pid, "--serve"), 0);

        uint64_t k = test_kernel(c, brief_source, "brief");
        launch_rounds(c, k, bufs, in, BRIEF_STEPS, 4, 100, true);       /* timed */
        ck_assert_int_eq(test_thread_cpu_ms(device, &main0, &others0), 0);
        launch_rounds(c, k, bufs, in, BRIEF_STEPS, 40, 500, true);
        ck_assert_int_eq(test_thread_cpu_ms(device, &main1, &others1), 0);
        ck_assert_msg(main1 - main0 >= 50 && others1 - others0 <= (main1 - main0) / 4,
                      "brief: the device's own thread ran %ld ms of 20,000 launches, its other "
                      "threads %ld ms", main1 - main0, others1 - others0);

        k = test_kernel(c, busy_source, "busy");
        launch_rounds(c, k, bufs, in, BUSY_STEPS, 1, 20, false);        /* timed */
        ck_assert_int_eq(test_thread_cpu_ms(device, &main0, &others0), 0);
        launch_rounds(c, k, bufs, in, BUSY_STEPS, 6, 1, false);
        ck_assert_int_eq(test_thread_cpu_ms(device, &main1, &others1), 0);
        ck_assert_msg(others1 - others0 >= 100 && others1 - others0 >= main1 - main0,
                      "busy: the device's own thread ran %ld ms of 6 launches, its other threads "
                      "%ld ms", main1 - main0, others1 - others0);
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 30000), 0);
}
END_TEST

/* A device that shares cubed's one CPU is woken once for what a round of
 * the loop posted, not at each launch: woken at once, it took that CPU from
 * the loop for the one launch posted so far, and slept again, for every
 * four or five launches of a burst (KERNELS.md). The burst must also lose
 * no launch and no wake-up: the counter ends at the number launched. */
#define BURST 4000
START_TEST(a_burst_of_launches_wakes_a_device_on_one_cpu_once_a_round)
{
        static const char count_source[] =
                "KERNEL void count(uint32_t *out, INFO)\n"
                "{\n"
                "        out[0] = out[0] + 1u;\n"
                "}\n";
        test_daemon d;
        cube_client *c;
        cube_handle out;
        uint32_t zero = 0, got;
        long before, after;
        pid_t device;

        start_on_one_cpu(&d);
        ck_ok(cube_connect(d.socket, "burst", &c));
        ck_ok(cube_create(c, &zero, sizeof(zero), &out));
        uint64_t k = test_kernel(c, count_source, "count");
        cube_info *info = cube_info_new();
        ck_assert_int_eq(cube_info_buffer_len(info, 1), 0);
        cube_launch l = {
                .kernel = k, .cube_count = { 1, 1, 1 }, .cube_dim = { 1, 1, 1 },
                .buffers = &out, .n_buffers = 1, .info = info,
        };
        ck_ok(cube_launch_kernel(c, &l));
        ck_ok(cube_sync(c, NULL, 0));
        ck_assert_int_gt(device = test_child_running(d.pid, "--serve"), 0);
        before = test_sleeps(device);
        for (int i = 1; i < BURST; i++)
                ck_ok(cube_launch_kernel(c, &l));
        ck_ok(cube_sync(c, NULL, 0));
        after = test_sleeps(device);
        ck_ok(cube_read(c, &out, &got, sizeof(got)));
        ck_assert_uint_eq(got, BURST);
        ck_assert_int_ge(before, 0);
        ck_assert_msg(after - before < BURST / 20, "the device slept %ld times in a burst of "
                      "%d launches", after - before, BURST);
        cube_info_free(info);
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 30000), 0);
}
END_TEST

/* A brief kernel launched over and over carries work too: its launches,
 * about 10 us each here, add up to a build for their cube dimension as a
 * few long ones do, 8,000 of them being enough. On one CPU the device runs
 * each launch on its own thread, so each is timed alone and none is long.
 * The build is looked for in the cache, with no launch meanwhile. */
START_TEST(a_brief_kernel_launched_over_and_over_runs_code_built_for_its_cube_dimension)
{
        static const busy_kernel brief = { brief_source, "brief", BRIEF_STEPS, true, 500, 0 };
        test_daemon d;
        cube_client *c;
        cube_handle bufs[2];
        uint32_t in[N];
        long build_nice = LONG_MAX;
        pid_t device;

        fill_random(in, sizeof(in), 8);
        start_on_one_cpu(&d);
        ck_ok(cube_connect(d.socket, "brief", &c));
        ck_ok(cube_create(c, in, sizeof(in), &bufs[0]));
        ck_ok(cube_empty(c, sizeof(in), &bufs[1]));
        ck_assert_int_gt(device = test_child_running(d.pid, "--serve"), 0);
        uint64_t k = test_kernel(c, brief.source, brief.entry);
        for (int r = 0; r < 8000 / brief.launches; r++) {
                uint32_t got[N];
                for (int l = 0; l < brief.launches; l++)
                        launch_n(c, k, bufs, 2, (N + 63) / 64, 64, CUBE_LAUNCH_EXECUTE);
                ck_ok(cube_read(c, &bufs[1], got, sizeof(got)));
        }
        long deadline = test_now_ms() + test_scaled_ms(40000);
        while (count_files(d.cache, ".ocl") < 2 && test_now_ms() < deadline)
                usleep(50 * 1000);
        ck_assert_msg(count_files(d.cache, ".ocl") == 2, "8,000 launches of brief built nothing "
                      "for their cube dimension");
        ck_assert_msg(busy_until_specialised(c, k, &brief, d.pid, device, bufs, in,
                                             test_now_ms() + test_scaled_ms(40000), &build_nice),
                      "the device never ran brief built for cubes of 64");
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 30000), 0);
}
END_TEST

START_TEST(a_kernel_launched_briefly_is_built_once)
{
        test_daemon d;
        cube_client *c;

        ck_assert_int_eq(test_daemon_start(&d, NULL), 0);
        ck_ok(cube_connect(d.socket, "brief", &c));
        uint64_t k = test_kernel(c, triple_source, "triple");
        for (int i = 0; i < 50; i++)
                expect_triple_runs(c, k);
        cube_disconnect(c);
        ck_assert_int_eq(count_files(d.cache, ".ocl"), 1);
        ck_assert_int_eq(test_daemon_stop(&d, 30000), 0);
}
END_TEST

static Suite *device_suite(void)
{
        Suite *s = suite_create("device");
        TCase *tc = tcase_create("device");
        cpu_set_t cpus;

        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, a_kernel_reaching_for_the_system_is_refused_naming_the_line);
        tcase_add_test(tc, the_sealed_device_reaches_its_directory_and_nothing_else);
        tcase_add_test(tc, a_wild_write_poisons_the_device_and_a_fresh_one_serves_after_reinit);
        tcase_add_test(tc, one_cube_and_spread_launches_alternating_keep_their_order);
        tcase_add_test(tc, the_devices_the_owner_chose_run_every_launch);
        tcase_add_test(tc, an_integer_division_by_zero_poisons_the_device_naming_sigfpe);
        tcase_add_test(tc, a_unit_overflowing_its_stack_poisons_the_device);
        tcase_add_test(tc, a_kernel_that_never_ends_is_stopped_by_the_kernel_timeout);
        tcase_add_test(tc, units_stuck_at_different_barriers_end_like_a_kernel_that_never_ends);
        tcase_add_test(tc, a_compiler_bomb_is_refused_within_the_compile_limit_while_others_are_served);
        tcase_add_test(tc, a_build_stopped_by_its_limits_is_a_refusal_kept_for_its_source);
        tcase_add_test(tc, a_planted_or_altered_artifact_is_compiled_again_never_loaded);
        tcase_add_test(tc, an_artifact_still_holding_ir_is_refused_and_compiled_again);
        tcase_add_test(tc, altered_facts_beside_an_artifact_are_read_again_from_the_source);
        tcase_add_test(tc, a_symlink_planted_in_the_cache_is_refused);
        tcase_add_test(tc, a_cache_another_user_could_swap_is_refused_or_not_loaded);
        tcase_add_test(tc, a_bystanders_build_starts_at_once_while_another_user_fills_the_slots);
        tcase_add_test(tc, one_users_builds_of_several_sources_run_side_by_side);
        tcase_add_test(tc, a_kernel_launched_briefly_is_built_once);
        tcase_add_test(tc, a_brief_kernel_launched_over_and_over_runs_code_built_for_its_cube_dimension);
        tcase_add_test(tc, a_device_on_one_cpu_runs_every_launch_on_its_own_thread);
        if (sched_getaffinity(0, sizeof(cpus), &cpus) == 0 && CPU_COUNT(&cpus) > 1)
                tcase_add_test(tc, a_brief_kernel_of_many_cubes_runs_inline_once_timed_and_a_long_one_spread);
        tcase_add_test(tc, a_burst_of_launches_wakes_a_device_on_one_cpu_once_a_round);
        suite_add_tcase(s, tc);
        /* Hung, it meets the case's timeout: that is its failure. */
        TCase *ring = tcase_create("ring");
        tcase_set_timeout(ring, 60.0 * test_timeout_multiplier());
        tcase_add_test(ring, a_worker_lapped_by_the_loop_on_the_ring_stops_neither);
        suite_add_tcase(s, ring);
        /* Builds for a cube dimension come after tens of milliseconds of
         * launches, and take a build each: a case of its own, given longer. */
        TCase *shapes = tcase_create("shapes");
        tcase_set_timeout(shapes, 300);
        tcase_add_test(shapes, a_kernel_carrying_work_runs_code_built_for_its_cube_dimension);
        tcase_add_test(shapes, code_built_for_cubes_two_units_deep_counts_a_tall_grid_right);
        tcase_add_test(shapes,
                       a_launch_proved_in_bounds_runs_the_bare_form_and_one_out_of_bounds_is_caught);
        tcase_add_test(shapes, a_stop_abandons_a_build_for_a_cube_dimension);
        tcase_add_test(shapes, a_failed_build_for_a_cube_dimension_leaves_the_generic_code);
        suite_add_tcase(s, shapes);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(device_suite());
        int failed;

        srunner_run_all(sr, CK_ENV);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? 1 : 0;
}

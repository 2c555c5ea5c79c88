/*
 * cubectl-health.c - discovery and health: cubectl list and selftest.
 *
 * list finds every instance on the host by its socket (INSTANCE.sock under
 * /run/cube, as cubed@.socket makes them) and asks each how it is; selftest
 * runs a known kernel and memory patterns through one daemon and checks
 * every byte.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cubectl.h"

#define LIST_DIR "/run/cube"
#define LIST_MAX 256                    /* sockets list looks at in one directory */
#define LIST_WAIT_S 5                   /* for the instances' answers, all at once */

static const char *list_dir = LIST_DIR;        /* --dir */

int health_option(int opt, const char *arg)
{
        if (opt != 'D')
                return EXIT_USAGE;
        if (!*arg || strlen(arg) > 80) {
                fprintf(stderr, "cubectl: --dir takes a directory of at most 80 bytes\n");
                return EXIT_USAGE;
        }
        list_dir = arg;
        return EXIT_OK;
}

double now_seconds(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

/* ---------------------------------------------------------------------------
 * list
 * ------------------------------------------------------------------------- */

typedef struct instance {
        char name[80];                  /* the socket's file name, INSTANCE.sock */
        char path[108];
        bool reachable;
        char reason[256];               /* why not */
        cube_status st;
} instance;

static int by_name(const void *a, const void *b)
{
        return strcmp(((const instance *) a)->name, ((const instance *) b)->name);
}

/* Why a socket nobody answers on is dead, in words: a plain connect says it
 * better than cube_connect's whole message. */
static void unreachable_reason(const char *path, const cube_error *e, char *buf, size_t cap)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), err = 0;

        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
        if (fd >= 0 && connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
                err = errno;
        if (fd >= 0)
                close(fd);
        if (err == ECONNREFUSED)
                snprintf(buf, cap, "stale socket: no daemon listens on it");
        else if (err == EACCES)
                snprintf(buf, cap, "permission denied: this user may not use the socket");
        else if (err)
                snprintf(buf, cap, "%s", strerror(err));
        else
                snprintf(buf, cap, "%s", cube_error_message(e));
}

/* One instance: connected to, asked its status, let go. */
static void probe(instance *in)
{
        cube_client *c;
        cube_error *e = cube_connect(in->path, "cubectl", &c);

        if (e) {
                unreachable_reason(in->path, e, in->reason, sizeof(in->reason));
                cube_error_free(e);
                return;
        }
        e = cube_daemon_status(c, &in->st);
        cube_disconnect(c);
        if (e) {
                snprintf(in->reason, sizeof(in->reason), "status failed: %s",
                         cube_error_message(e));
                cube_error_free(e);
                return;
        }
        in->reachable = true;
}

/* Every instance probed at once, each in a child of its own, so that one
 * that accepts and never answers (a hung daemon, something else on the
 * socket) costs LIST_WAIT_S and is listed as such, not a hung command. */
static void probe_all(instance *v, size_t n)
{
        pid_t *pids = calloc(n ? n : 1, sizeof(*pids));
        int *fds = calloc(n ? n : 1, sizeof(*fds));
        size_t *got = calloc(n ? n : 1, sizeof(*got));
        double deadline = now_seconds() + LIST_WAIT_S;

        if (!pids || !fds || !got) {
                for (size_t i = 0; i < n; i++)
                        probe(&v[i]);
                goto out;
        }
        fflush(stdout);
        for (size_t i = 0; i < n; i++) {
                int p[2];
                fds[i] = -1;
                if (pipe2(p, O_CLOEXEC) < 0) {
                        probe(&v[i]);   /* no room for a child: asked here */
                        continue;
                }
                if ((pids[i] = fork()) < 0) {
                        close(p[0]);
                        close(p[1]);
                        probe(&v[i]);
                        continue;
                }
                if (pids[i] == 0) {
                        close(p[0]);
                        probe(&v[i]);
                        ssize_t w = write(p[1], &v[i], sizeof(v[i]));
                        _exit(w == (ssize_t) sizeof(v[i]) ? 0 : 1);
                }
                close(p[1]);
                fds[i] = p[0];
        }
        for (;;) {
                struct pollfd pfd[LIST_MAX];
                size_t map[LIST_MAX], k = 0;
                double left = deadline - now_seconds();
                for (size_t i = 0; i < n; i++)
                        if (fds[i] >= 0) {
                                pfd[k] = (struct pollfd) { .fd = fds[i], .events = POLLIN };
                                map[k++] = i;
                        }
                if (k == 0 || left <= 0)
                        break;
                if (poll(pfd, k, (int) (left * 1000) + 1) < 0 && errno != EINTR)
                        break;
                for (size_t j = 0; j < k; j++) {
                        size_t i = map[j];
                        instance tmp;
                        ssize_t r;
                        if (!pfd[j].revents)
                                continue;
                        r = read(fds[i], (char *) &tmp + got[i], sizeof(tmp) - got[i]);
                        if (r > 0 && (got[i] += (size_t) r) < sizeof(tmp))
                                continue;
                        if (r > 0)
                                v[i] = tmp;
                        else
                                snprintf(v[i].reason, sizeof(v[i].reason), "the probe of it "
                                         "failed");
                        close(fds[i]);
                        fds[i] = -1;
                }
        }
        for (size_t i = 0; i < n; i++) {
                if (fds[i] >= 0) {
                        snprintf(v[i].reason, sizeof(v[i].reason), "no answer within %d s: "
                                 "the socket accepts, but nothing answers hello", LIST_WAIT_S);
                        close(fds[i]);
                }
                if (pids[i] > 0) {
                        kill(pids[i], SIGKILL);
                        waitpid(pids[i], NULL, 0);
                }
        }
out:
        free(pids);
        free(fds);
        free(got);
}

/* What list shows of an instance: why it is unreachable, or what it
 * answered (JSON leaves out the other's members, the table shows '-'). */
static bool reachable(const void *row)
{
        return ((const instance *) row)->reachable;
}

static bool unreachable(const void *row)
{
        return !reachable(row);
}

/* The socket's name less ".sock". */
static value instance_name(const void *row, const void *ctx, char *buf, size_t cap)
{
        const instance *in = row;

        snprintf(buf, cap, "%.*s", (int) (strlen(in->name) - 5), in->name);
        return (value) { .s = buf };
}

static value instance_state(const void *row, const void *ctx, char *buf, size_t cap)
{
        const instance *in = row;

        if (!in->reachable)
                return (value) { .s = "unreachable" };
        if (in->st.poisoned)
                return (value) { .s = "poisoned" };
        return (value) { .s = *in->st.state ? in->st.state : "serving" };
}

/* Sessions other than the one list opened to ask. */
static value other_sessions(const void *row, const void *ctx, char *buf, size_t cap)
{
        const instance *in = row;

        return (value) { .u = in->st.sessions ? in->st.sessions - 1 : 0 };
}

static const field instance_fields[] = {
        { "socket", "SOCKET", TEXT(instance, path), .show = SHOW_NAME, .width = -28 },
        { "instance", "INSTANCE", .kind = FIELD_TEXT, .get = instance_name, .show = SHOW_NAME,
          .width = -10 },
        { "state", NULL, .kind = FIELD_TEXT, .get = instance_state },
        { "reachable", NULL, BOOL(instance, reachable) },
        { "reason", NULL, TEXT(instance, reason), .when = unreachable },
        { "service", NULL, TEXT(instance, st.service), .when = reachable },
        { "backend", "BACKEND", TEXT(instance, st.backend), .when = reachable, .width = -7 },
        { "device", "DEVICE", TEXT(instance, st.properties.name), .show = SHOW_TEXT,
          .when = reachable, .width = -20 },
        { "version", "VERSION", TEXT(instance, st.version), .empty = "?", .when = reachable,
          .width = -8 },
        { NULL, "STATE", .kind = FIELD_TEXT, .get = instance_state, .width = -11 },
        { "sessions", "SESSIONS", .kind = FIELD_U32, .get = other_sessions, .when = reachable,
          .width = 8 },
        { "uptime_seconds", NULL, F64(instance, st.uptime_seconds), .when = reachable },
        { NULL, "", TEXT(instance, reason), .show = SHOW_TEXT, .when = unreachable,
          .optional = true },
};
static const view instance_view = VIEW(instance, instance_fields, .header = true);

int cmd_list(cube_client *unused, bool json, const char *arg)
{
        DIR *d = opendir(list_dir);
        instance *v;
        size_t n = 0;
        struct dirent *de;

        (void) unused;
        (void) arg;
        if (!d) {
                char why[160];
                snprintf(why, sizeof(why), "cannot read %s: %s", list_dir, strerror(errno));
                print_error("list", NULL, why);
                return EXIT_UNREACHABLE;
        }
        v = calloc(LIST_MAX, sizeof(*v));
        if (!v) {
                closedir(d);
                print_error("list", NULL, "out of memory");
                return EXIT_ERROR;
        }
        while ((de = readdir(d)) && n < LIST_MAX) {
                size_t len = strlen(de->d_name);
                struct stat st;
                if (len <= 5 || len >= sizeof(v[n].name) ||
                    strcmp(de->d_name + len - 5, ".sock") != 0)
                        continue;
                snprintf(v[n].name, sizeof(v[n].name), "%s", de->d_name);
                if ((size_t) snprintf(v[n].path, sizeof(v[n].path), "%s/%s", list_dir,
                                      de->d_name) >= sizeof(v[n].path))
                        continue;       /* too long for a socket address */
                if (lstat(v[n].path, &st) < 0 || !S_ISSOCK(st.st_mode))
                        continue;
                n++;
        }
        closedir(d);
        qsort(v, n, sizeof(*v), by_name);
        probe_all(v, n);

        if (!json && n == 0)
                printf("no instance sockets in %s\n", list_dir);
        else
                print_rows(&instance_view, v, n, NULL, json);
        free(v);
        return EXIT_OK;
}

/* ---------------------------------------------------------------------------
 * selftest
 * ------------------------------------------------------------------------- */

/* out[i] = in[i] * 2654435761 + 40503: every output bit depends on its
 * input, so a lost, doubled or misplaced element shows. */
static const char selftest_source[] =
        "KERNEL void cube_selftest(const uint32_t *in, uint32_t *out, INFO)\n"
        "{\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "\n"
        "        if (i < BUFFER_LEN(1))\n"
        "                out[i] = in[i] * 2654435761u + 40503u;\n"
        "}\n";

enum { SELFTEST_ELEMS = 65536, SELFTEST_STEPS = 16 };

typedef struct step {
        char name[32];
        bool passed, skipped;
        double ms;
        char detail[512];
} step;

typedef struct selftest {
        step steps[SELFTEST_STEPS];
        size_t n;
        double started;
        bool passed;                    /* every step */
} selftest;

static step *step_begin(selftest *t, const char *name)
{
        step *s = &t->steps[t->n++];

        snprintf(s->name, sizeof(s->name), "%s", name);
        t->started = now_seconds();
        return s;
}

/* Ends the step: passed when e is NULL, else failed with e's message (e is
 * taken). */
static bool step_end(selftest *t, step *s, cube_error *e)
{
        s->ms = (now_seconds() - t->started) * 1e3;
        s->passed = !e;
        if (e) {
                snprintf(s->detail, sizeof(s->detail), "%s", cube_error_message(e));
                cube_error_free(e);
        }
        return s->passed;
}

static void step_skip(selftest *t, const char *name, const char *why)
{
        step *s = &t->steps[t->n++];

        snprintf(s->name, sizeof(s->name), "%s", name);
        snprintf(s->detail, sizeof(s->detail), "%s", why);
        s->skipped = true;
}

/* A pattern no run of equal bytes hides in, different for each seed. */
static void pattern(void *buf, size_t n, uint64_t seed)
{
        uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
        unsigned char *p = buf;

        for (size_t i = 0; i < n; i++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                p[i] = (unsigned char) (x >> 24);
        }
}

/* The kernel's steps: register, write the input, launch, read back and
 * check every element. A step that cannot run for an earlier one's failure
 * is skipped. */
static void selftest_kernel(cube_client *c, selftest *t)
{
        uint32_t *in = malloc(SELFTEST_ELEMS * sizeof(uint32_t));
        uint32_t *out = malloc(SELFTEST_ELEMS * sizeof(uint32_t));
        cube_handle hin, hout;
        uint64_t kernel;
        cube_info *info = cube_info_new();
        step *s;
        bool have_in = false, have_out = false;

        if (!in || !out || !info || cube_info_buffer_len(info, SELFTEST_ELEMS) < 0 ||
            cube_info_buffer_len(info, SELFTEST_ELEMS) < 0) {
                s = step_begin(t, "kernel");
                step_end(t, s, NULL);
                s->passed = false;
                snprintf(s->detail, sizeof(s->detail), "out of memory");
                goto out;
        }
        pattern(in, SELFTEST_ELEMS * sizeof(uint32_t), 1);

        s = step_begin(t, "register");
        if (!step_end(t, s, cube_kernel_register(c, selftest_source, "cube_selftest", &kernel))) {
                step_skip(t, "write-input", "the kernel was not registered");
                step_skip(t, "launch", "the kernel was not registered");
                step_skip(t, "check-output", "the kernel was not registered");
                goto out;
        }
        snprintf(s->detail, sizeof(s->detail), "cube_selftest");

        s = step_begin(t, "write-input");
        cube_error *e = cube_create(c, in, SELFTEST_ELEMS * sizeof(uint32_t), &hin);
        have_in = !e;
        if (!e && !(e = cube_sync(c, &hin, 1)))
                snprintf(s->detail, sizeof(s->detail), "%d words", SELFTEST_ELEMS);
        if (!step_end(t, s, e)) {
                step_skip(t, "launch", "the input was not written");
                step_skip(t, "check-output", "the input was not written");
                goto out;
        }

        s = step_begin(t, "launch");
        cube_handle bufs[2];
        static const cube_buffer_io io[2] = { CUBE_BUFFER_READ_ONLY, CUBE_BUFFER_WRITE_ONLY };
        e = cube_empty(c, SELFTEST_ELEMS * sizeof(uint32_t), &hout);
        have_out = !e;
        if (!e) {
                bufs[0] = hin;
                bufs[1] = hout;
                e = cube_launch_kernel(c, &(cube_launch) {
                        .kernel = kernel, .cube_count = { SELFTEST_ELEMS / 256, 1, 1 },
                        .cube_dim = { 256, 1, 1 }, .buffers = bufs, .io = io, .n_buffers = 2,
                        .info = info,
                });
        }
        /* What the launch did lands on its output: a sync names it. */
        if (!e)
                e = cube_sync(c, &hout, 1);
        if (!e)
                snprintf(s->detail, sizeof(s->detail), "%d cubes of 256 units, a compile "
                         "included unless cached", SELFTEST_ELEMS / 256);
        if (!step_end(t, s, e)) {
                step_skip(t, "check-output", "the launch failed");
                goto out;
        }

        s = step_begin(t, "check-output");
        e = cube_read(c, &hout, out, SELFTEST_ELEMS * sizeof(uint32_t));
        if (step_end(t, s, e)) {
                for (size_t i = 0; i < SELFTEST_ELEMS; i++) {
                        uint32_t want = in[i] * 2654435761u + 40503u;
                        if (out[i] != want) {
                                s->passed = false;
                                snprintf(s->detail, sizeof(s->detail), "element %zu is %#" PRIx32
                                         ", not %#" PRIx32, i, out[i], want);
                                break;
                        }
                }
                if (s->passed)
                        snprintf(s->detail, sizeof(s->detail), "%d words as computed here",
                                 SELFTEST_ELEMS);
        }
out:
        if (have_in)
                cube_error_free(cube_free(c, &hin));
        if (have_out)
                cube_error_free(cube_free(c, &hout));
        cube_info_free(info);
        free(in);
        free(out);
}

/* A pattern written and read back, byte for byte: sizes from one byte to
 * more than one message holds (a staged copy). */
static void selftest_copy(cube_client *c, selftest *t, uint64_t size)
{
        unsigned char *data = malloc(size), *back = malloc(size);
        char name[32], sz[32];
        cube_handle h;
        cube_error *e;
        step *s;

        human_bytes(size, sz, sizeof(sz));
        snprintf(name, sizeof(name), "round-trip-%" PRIu64, size);
        s = step_begin(t, name);
        if (!data || !back) {
                step_end(t, s, NULL);
                s->passed = false;
                snprintf(s->detail, sizeof(s->detail), "out of memory");
                goto out;
        }
        pattern(data, size, size);
        memset(back, ~data[0], size);
        if (!(e = cube_create(c, data, size, &h))) {
                e = cube_read(c, &h, back, size);
                cube_error_free(cube_free(c, &h));
        }
        if (step_end(t, s, e)) {
                for (uint64_t i = 0; i < size; i++)
                        if (back[i] != data[i]) {
                                s->passed = false;
                                snprintf(s->detail, sizeof(s->detail), "byte %" PRIu64 " of %s "
                                         "is %#x, not %#x", i, sz, back[i], data[i]);
                                break;
                        }
                if (s->passed)
                        snprintf(s->detail, sizeof(s->detail), "%s", sz);
        }
out:
        free(data);
        free(back);
}

static value step_result(const void *row, const void *ctx, char *buf, size_t cap)
{
        const step *x = row;

        return (value) { .s = x->skipped ? "skipped" : x->passed ? "pass" : "fail" };
}

static value step_mark(const void *row, const void *ctx, char *buf, size_t cap)
{
        const step *x = row;

        return (value) { .s = x->skipped ? "SKIP" : x->passed ? "PASS" : "FAIL" };
}

static const field step_fields[] = {
        { NULL, "", .kind = FIELD_TEXT, .get = step_mark, .width = -4 },
        { "step", "", TEXT(step, name), .width = -20 },
        { "result", NULL, .kind = FIELD_TEXT, .get = step_result },
        { "ms", "", F64(step, ms), .prec = 3, .after = " ms", .width = 12 },
        { "detail", "", TEXT(step, detail), .show = SHOW_TEXT },
};
static const view step_view = VIEW(step, step_fields);

/* The last line: passed, or the first step that failed. */
static value verdict(const void *row, const void *ctx, char *buf, size_t cap)
{
        const selftest *t = row;
        const char *failed = NULL;

        if (t->passed) {
                snprintf(buf, cap, "selftest passed: %zu steps", t->n);
                return (value) { .s = buf };
        }
        for (size_t i = 0; i < t->n && !failed; i++)
                if (!t->steps[i].passed && !t->steps[i].skipped)
                        failed = t->steps[i].name;
        snprintf(buf, cap, "selftest FAILED at %s", failed ? failed : "?");
        return (value) { .s = buf };
}

static const field selftest_fields[] = {
        { "passed", NULL, BOOL(selftest, passed) },
        { "steps", "", ARRAY(selftest, steps, n, step_view) },
        { NULL, "", .kind = FIELD_TEXT, .get = verdict },
};
static const view selftest_view = VIEW(selftest, selftest_fields);

int cmd_selftest(cube_client *c, bool json, const char *arg)
{
        static const uint64_t sizes[] = { 1, 4096, 1 << 20, 24 << 20 };
        selftest t = {0};
        cube_status st;
        step *s;

        (void) arg;
        s = step_begin(&t, "status");
        if (step_end(&t, s, cube_daemon_status(c, &st))) {
                snprintf(s->detail, sizeof(s->detail), "%s, %s on %s", st.service, st.backend,
                         st.properties.name);
                if (st.poisoned) {
                        s->passed = false;
                        snprintf(s->detail, sizeof(s->detail), "the device is poisoned: %s",
                                 st.poison);
                }
        }
        selftest_kernel(c, &t);
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
                if (sizes[i] <= cube_client_properties(c)->max_page_size)
                        selftest_copy(c, &t, sizes[i]);

        t.passed = true;
        for (size_t i = 0; i < t.n; i++)
                t.passed &= t.steps[i].passed;
        print_record(&selftest_view, &t, c, json);
        return t.passed ? EXIT_OK : EXIT_ERROR;
}

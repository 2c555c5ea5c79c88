/*
 * test-operations.c - cubed as systemd and an operator see it: the units lint
 * clean and are hardened, socket activation, the sd_notify lifecycle and the
 * watchdog, the configuration file and SIGHUP reload, the poison policies,
 * cubectl's commands and exit statuses, and who may act on a daemon.
 *
 * Every test starts its own daemon with a fake NOTIFY_SOCKET whose datagrams
 * are all recorded for the daemon's whole life, and ends by asserting how the
 * daemon exited. Each daemon lives in a directory of its own under one
 * directory for the run; a test that passes removes its directory, so what is
 * left at the end belongs to failed tests, and its logs are shown.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <libgen.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "errors.h"
#include "wire.h"

extern char **environ;

#define MAX_NOTES 2048

typedef struct daemon_proc {
        pid_t pid;                      /* 0 once reaped */
        int exit_status;                /* as proc_wait_exit returns it */
        char dir[64];
        char socket[96];
        char notify[96];
        char log[96];
        char cache[96];
        int notify_fd;
        int record_fd;                  /* the datagrams, also kept on disk */
        pthread_t listener;
        bool listening, quit;
        pthread_mutex_t lock;
        char *notes[MAX_NOTES];         /* every datagram, in order */
        size_t n_notes;
} daemon_proc;

/* Where every directory of this run goes; made before the tests fork. */
static char run_dir[32];

static void dump_file(const char *what, const char *path)
{
        char line[1024];
        FILE *f = fopen(path, "r");

        if (!f)
                return;
        fprintf(stderr, "---- %s (%s) ----\n", what, path);
        while (fgets(line, sizeof(line), f))
                fputs(line, stderr);
        fprintf(stderr, "---- end ----\n");
        fclose(f);
}

static bool path_exists(const char *path)
{
        struct stat st;

        return lstat(path, &st) == 0;
}

static void write_file(const char *path, const char *text)
{
        FILE *f = fopen(path, "w");

        ck_assert_msg(f, "cannot write %s: %s", path, strerror(errno));
        fputs(text, f);
        ck_assert_int_eq(fclose(f), 0);
}

/* Whether a datagram holds exactly this line ("READY=1", "STOPPING=1"). */
static bool has_line(const char *text, const char *line)
{
        size_t n = strlen(line);

        for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
                if (strncmp(p, line, n) == 0 && (p[n] == '\n' || p[n] == '\0'))
                        return true;
        return false;
}

/* The fake NOTIFY_SOCKET's reader. It runs on its own thread so that the
 * daemon never blocks on a full datagram queue, whatever the test is doing,
 * and it closes any descriptor sent along, as systemd-notify's barrier does. */
static void *notify_listener(void *arg)
{
        daemon_proc *p = arg;

        for (;;) {
                struct pollfd pfd = { .fd = p->notify_fd, .events = POLLIN };
                char buf[4096];
                char ctl[CMSG_SPACE(sizeof(int) * 16)];
                struct iovec iov = { buf, sizeof(buf) - 1 };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                                     .msg_control = ctl, .msg_controllen = sizeof(ctl) };
                ssize_t r;
                bool quit;

                if (poll(&pfd, 1, 20) <= 0) {
                        pthread_mutex_lock(&p->lock);
                        quit = p->quit;
                        pthread_mutex_unlock(&p->lock);
                        if (quit)
                                return NULL;
                        continue;
                }
                r = recvmsg(p->notify_fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
                if (r < 0)
                        continue;
                test_close_passed_fds(&mh);
                buf[r] = '\0';
                dprintf(p->record_fd, "[%ld] %s\n", test_now_ms(), buf);
                pthread_mutex_lock(&p->lock);
                if (p->n_notes < MAX_NOTES)
                        p->notes[p->n_notes++] = strdup(buf);
                pthread_mutex_unlock(&p->lock);
        }
}

/* Waits up to timeout_ms for a datagram at index from or later holding the
 * line; returns its index, or -1. */
static long wait_note(daemon_proc *p, size_t from, const char *line, int timeout_ms)
{
        long deadline = test_now_ms() + timeout_ms;

        for (;;) {
                pthread_mutex_lock(&p->lock);
                for (size_t i = from; i < p->n_notes; i++)
                        if (has_line(p->notes[i], line)) {
                                pthread_mutex_unlock(&p->lock);
                                return (long) i;
                        }
                pthread_mutex_unlock(&p->lock);
                if (test_now_ms() > deadline)
                        return -1;
                usleep(5000);
        }
}

/* How many datagrams from index from on hold the line. */
static size_t count_notes(daemon_proc *p, size_t from, const char *line)
{
        size_t n = 0;

        pthread_mutex_lock(&p->lock);
        for (size_t i = from; i < p->n_notes; i++)
                n += has_line(p->notes[i], line);
        pthread_mutex_unlock(&p->lock);
        return n;
}

static size_t n_notes(daemon_proc *p)
{
        size_t n;

        pthread_mutex_lock(&p->lock);
        n = p->n_notes;
        pthread_mutex_unlock(&p->lock);
        return n;
}

/* A copy of datagram i (caller frees). */
static char *note_text(daemon_proc *p, long i)
{
        char *t;

        pthread_mutex_lock(&p->lock);
        t = strdup(p->notes[i]);
        pthread_mutex_unlock(&p->lock);
        return t;
}

/* Waits up to timeout_ms for the process to end. Returns its exit status,
 * -1 when a signal ended it, or -2 while it still runs. */
static int proc_wait_exit(daemon_proc *p, int timeout_ms)
{
        long deadline = test_now_ms() + timeout_ms;
        int status;

        if (p->pid <= 0)
                return p->exit_status;
        for (;;) {
                if (waitpid(p->pid, &status, WNOHANG) == p->pid) {
                        p->pid = 0;
                        p->exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
                        return p->exit_status;
                }
                if (test_now_ms() > deadline)
                        return -2;
                usleep(2000);
        }
}

/* SIGTERM, then the exit status; a daemon that does not stop in time is
 * killed and reads as -1. */
static int proc_stop(daemon_proc *p, int timeout_ms)
{
        int r;

        if (p->pid <= 0)
                return p->exit_status;
        kill(p->pid, SIGTERM);
        r = proc_wait_exit(p, timeout_ms);
        if (r == -2) {
                fprintf(stderr, "the daemon did not stop within %d ms\n", timeout_ms);
                kill(p->pid, SIGKILL);
                waitpid(p->pid, NULL, 0);
                p->pid = 0;
                r = p->exit_status = -1;
        }
        return r;
}

/* Ends recording, and removes the directory unless $CUBE_TEST_LEAVE. */
static void proc_done(daemon_proc *p)
{
        char cmd[160];

        if (p->pid > 0) {
                kill(p->pid, SIGKILL);
                waitpid(p->pid, NULL, 0);
                p->pid = 0;
        }
        if (p->listening) {
                pthread_mutex_lock(&p->lock);
                p->quit = true;
                pthread_mutex_unlock(&p->lock);
                pthread_join(p->listener, NULL);
                p->listening = false;
                close(p->notify_fd);
                close(p->record_fd);
                for (size_t i = 0; i < p->n_notes; i++)
                        free(p->notes[i]);
                p->n_notes = 0;
        }
        if (p->dir[0] && !getenv("CUBE_TEST_LEAVE")) {
                snprintf(cmd, sizeof(cmd), "rm -rf '%s'", p->dir);
                if (system(cmd) != 0)
                        fprintf(stderr, "could not remove %s\n", p->dir);
        }
        p->dir[0] = '\0';
}

/* A temporary directory with the fake NOTIFY_SOCKET bound and recorded. */
static void proc_init(daemon_proc *p)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char path[128];

        memset(p, 0, sizeof(*p));
        p->exit_status = -1;
        snprintf(p->dir, sizeof(p->dir), "%s/XXXXXX", run_dir);
        ck_assert_ptr_nonnull(mkdtemp(p->dir));
        snprintf(p->socket, sizeof(p->socket), "%s/s", p->dir);
        snprintf(p->notify, sizeof(p->notify), "%s/notify", p->dir);
        snprintf(p->log, sizeof(p->log), "%s/log", p->dir);
        snprintf(p->cache, sizeof(p->cache), "%s/cache", p->dir);
        snprintf(path, sizeof(path), "%s/notifications", p->dir);
        p->record_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        ck_assert_int_ge(p->record_fd, 0);
        p->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(p->notify_fd, 0);
        strcpy(sa.sun_path, p->notify);
        ck_assert_int_eq(bind(p->notify_fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        pthread_mutex_init(&p->lock, NULL);
        ck_assert_int_eq(pthread_create(&p->listener, NULL, notify_listener, p), 0);
        p->listening = true;
}

/* The environment for a child: ours without anything systemd would pass,
 * then NOTIFY_SOCKET (when given) and the extra "VAR=value" entries. Built
 * before fork, so that the child only has to exec. */
static char **child_env(const char *notify, const char *const *extra)
{
        static const char *const drop[] = { "NOTIFY_SOCKET=", "LISTEN_FDS=", "LISTEN_PID=",
                                            "LISTEN_FDNAMES=", "WATCHDOG_USEC=",
                                            "WATCHDOG_PID=", "INVOCATION_ID=", NULL };
        size_t n = 0, k = 0;
        char **env;

        while (environ[n])
                n++;
        for (const char *const *e = extra; e && *e; e++)
                n++;
        env = calloc(n + 2, sizeof(char *));
        ck_assert_ptr_nonnull(env);
        for (char **e = environ; *e; e++) {
                bool keep = true;
                for (const char *const *d = drop; *d; d++)
                        keep &= strncmp(*e, *d, strlen(*d)) != 0;
                if (keep)
                        env[k++] = strdup(*e);
        }
        if (notify) {
                env[k] = malloc(strlen(notify) + sizeof("NOTIFY_SOCKET="));
                sprintf(env[k++], "NOTIFY_SOCKET=%s", notify);
        }
        for (const char *const *e = extra; e && *e; e++)
                env[k++] = strdup(*e);
        env[k] = NULL;
        return env;
}

static void free_env(char **env)
{
        for (char **e = env; *e; e++)
                free(*e);
        free(env);
}

/* Forks argv (argv[0] looked up in PATH) with stdout and stderr in the log.
 * The child dies with the test process. */
static void proc_exec(daemon_proc *p, const char *const *argv, const char *const *env)
{
        char **envp = child_env(p->notify[0] ? p->notify : NULL, env);
        int log = open(p->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

        ck_assert_int_ge(log, 0);
        p->pid = fork();
        ck_assert_int_ge(p->pid, 0);
        if (p->pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                dup2(log, 1);
                dup2(log, 2);
                execvpe(argv[0], (char *const *) argv, envp);
                dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
                _exit(127);
        }
        close(log);
        free_env(envp);
}

/* Starts $CUBED_BIN (after $CUBE_TEST_WRAPPER, if set) with args. */
static void proc_spawn_cubed(daemon_proc *p, const char *const *args, const char *const *env)
{
        const char *bin = getenv("CUBED_BIN"), *wrapper = getenv("CUBE_TEST_WRAPPER");
        const char *argv[64];
        char *copy = NULL;
        int n = 0;

        ck_assert_msg(bin, "CUBED_BIN is not set");
        if (wrapper && *wrapper) {
                copy = strdup(wrapper);
                for (char *tok = strtok(copy, " "); tok && n < 16; tok = strtok(NULL, " "))
                        argv[n++] = tok;
        }
        argv[n++] = bin;
        for (const char *const *a = args; a && *a && n < 63; a++)
                argv[n++] = *a;
        argv[n] = NULL;
        proc_exec(p, argv, env);
        free(copy);
}

/* Waits for READY=1 (the daemon must not have died); returns its index. */
static long wait_ready(daemon_proc *p, size_t from)
{
        long deadline = test_now_ms() + test_scaled_ms(10000);

        for (;;) {
                long i = wait_note(p, from, "READY=1", 20);
                if (i >= 0)
                        return i;
                if (proc_wait_exit(p, 0) != -2) {
                        ck_abort_msg("cubed exited with status %d before READY=1",
                                     p->exit_status);
                }
                ck_assert_msg(test_now_ms() < deadline, "no READY=1 from cubed");
        }
}

/* The usual daemon on the directory's socket and cache, extra args after. */
static void start_daemon(daemon_proc *p, const char *const *extra, const char *const *env)
{
        const char *args[48] = { "--socket", p->socket, "--cache-dir", p->cache, "--log-level",
                                 "info" };
        int n = 6;

        for (const char *const *a = extra; a && *a && n < 47; a++)
                args[n++] = *a;
        args[n] = NULL;
        proc_spawn_cubed(p, args, env);
        wait_ready(p, 0);
}

/* A program's exit status and what it printed. */
typedef struct output {
        int status;                     /* -1 when a signal ended it */
        char out[32768];
        char err[32768];
} output;

/* Runs argv in dir (NULL: here) with the extra environment, capturing
 * stdout and stderr apart. */
static void run_program(output *o, const char *dir, const char *const *env,
                        const char *const *argv)
{
        char **envp = child_env(NULL, env);
        int out[2], err[2], status;
        size_t n_out = 0, n_err = 0;
        pid_t pid;

        ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
        ck_assert_int_eq(pipe2(err, O_CLOEXEC), 0);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                dup2(out[1], 1);
                dup2(err[1], 2);
                if (dir && chdir(dir) < 0)
                        _exit(126);
                execvpe(argv[0], (char *const *) argv, envp);
                dprintf(2, "exec %s: %s\n", argv[0], strerror(errno));
                _exit(127);
        }
        free_env(envp);
        close(out[1]);
        close(err[1]);
        for (int open_fds = 2; open_fds > 0;) {
                struct pollfd pfd[2] = { { out[0], POLLIN, 0 }, { err[0], POLLIN, 0 } };
                ck_assert_int_gt(poll(pfd, 2, -1), 0);
                for (int i = 0; i < 2; i++) {
                        char *buf = i ? o->err : o->out;
                        size_t *n = i ? &n_err : &n_out;
                        ssize_t r;
                        if (pfd[i].fd < 0 || !(pfd[i].revents & (POLLIN | POLLHUP)))
                                continue;
                        r = read(pfd[i].fd, buf + *n, sizeof(o->out) - 1 - *n);
                        if (r > 0) {
                                *n += (size_t) r;
                                continue;
                        }
                        close(i ? err[0] : out[0]);
                        if (i)
                                err[0] = -1;
                        else
                                out[0] = -1;
                        open_fds--;
                }
        }
        o->out[n_out] = '\0';
        o->err[n_err] = '\0';
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        o->status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Asserts cond about a program's output. Check's messages are short, so the
 * output itself goes to stderr. */
#define ck_assert_out(o, cond, ...) do { \
        if (!(cond)) { \
                fprintf(stderr, "---- stdout ----\n%s---- stderr ----\n%s---- end ----\n", \
                        (o)->out, (o)->err); \
                ck_abort_msg(__VA_ARGS__); \
        } \
} while (0)

/* cubectl against a socket, with arguments after --socket. */
static void cubectl(output *o, const char *socket, const char *const *args)
{
        const char *argv[16];
        const char *bin = getenv("CUBECTL_BIN");
        int n = 0;

        ck_assert_msg(bin, "CUBECTL_BIN is not set");
        argv[n++] = bin;
        argv[n++] = "--socket";
        argv[n++] = socket;
        for (const char *const *a = args; *a && n < 15; a++)
                argv[n++] = *a;
        argv[n] = NULL;
        run_program(o, NULL, NULL, argv);
}

static char *metrics_of(cube_client *c);
static bool line_with(const char *text, const char *needle, char *line, size_t cap);

/* ------------------------------------------------------------------------
 * The units
 * ------------------------------------------------------------------------ */

/* The units as an installation would have them, for instance cpu0, in a new
 * directory: @SBINDIR@ is where the built cubed lies, so ExecStart exists. */
static void write_units(char *dir)
{
        const char *tmpl = getenv("CUBE_UNIT_TEMPLATE"), *sock = getenv("CUBE_SOCKET_UNIT");
        char *bin = strdup(getenv("CUBED_BIN") ? getenv("CUBED_BIN") : "");
        const char *sbindir = dirname(bin);
        char path[160], text[16384], out[20000], *o = out;
        int substituted = 0;
        FILE *f;
        size_t n;

        ck_assert_msg(tmpl && sock, "CUBE_UNIT_TEMPLATE and CUBE_SOCKET_UNIT must be set");
        snprintf(dir, 64, "%s/XXXXXX", run_dir);
        ck_assert_ptr_nonnull(mkdtemp(dir));

        f = fopen(tmpl, "r");
        ck_assert_msg(f, "cannot read %s", tmpl);
        n = fread(text, 1, sizeof(text) - 1, f);
        fclose(f);
        text[n] = '\0';
        for (const char *p = text; *p;) {
                if (strncmp(p, "@SBINDIR@", 9) == 0) {
                        o += sprintf(o, "%s", sbindir);
                        p += 9;
                        substituted++;
                } else if (strncmp(p, "@DOCDIR@", 8) == 0) {
                        o += sprintf(o, "/usr/share/doc/cube");
                        p += 8;
                } else {
                        *o++ = *p++;
                }
                ck_assert_uint_lt((size_t) (o - out), sizeof(out) - 512);
        }
        *o = '\0';
        ck_assert_msg(substituted > 0, "%s has no @SBINDIR@", tmpl);
        snprintf(path, sizeof(path), "%s/cubed@cpu0.service", dir);
        write_file(path, out);

        f = fopen(sock, "r");
        ck_assert_msg(f, "cannot read %s", sock);
        n = fread(text, 1, sizeof(text) - 1, f);
        fclose(f);
        text[n] = '\0';
        snprintf(path, sizeof(path), "%s/cubed@cpu0.socket", dir);
        write_file(path, text);
        free(bin);
}

static void remove_dir(const char *dir)
{
        char cmd[128];

        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0)
                fprintf(stderr, "could not remove %s\n", dir);
}

/* systemd-analyze verify exits 0 even when it warns, so any output fails. */
START_TEST(the_units_verify_without_a_word)
{
        static const char *const argv[] = { "systemd-analyze", "verify", "./cubed@cpu0.service",
                                             "./cubed@cpu0.socket", NULL };
        output *o = calloc(1, sizeof(*o));
        char dir[64];

        write_units(dir);
        run_program(o, dir, NULL, argv);
        remove_dir(dir);
        ck_assert_out(o, o->status == 0 && !o->out[0] && !o->err[0],
                      "systemd-analyze verify exited %d and said something", o->status);
        free(o);
}
END_TEST

/* The exposure is 0.7 ("SAFE") on systemd 252; 2.0 is the most accepted. */
START_TEST(the_service_is_hardened)
{
        static const char *const argv[] = { "systemd-analyze", "security", "--offline=true",
                                             "--threshold=20", "./cubed@cpu0.service", NULL };
        output *o = calloc(1, sizeof(*o));
        char dir[64];

        write_units(dir);
        run_program(o, dir, NULL, argv);
        remove_dir(dir);
        ck_assert_out(o, o->status == 0, "systemd-analyze security exited %d", o->status);
        ck_assert_out(o, strstr(o->out, "Overall exposure level for cubed@cpu0.service"),
                      "no exposure level");
        free(o);
}
END_TEST

/* ------------------------------------------------------------------------
 * Lifecycle: socket activation, notifications, the watchdog
 * ------------------------------------------------------------------------ */

static void round_trip(cube_client *c, size_t n, uint64_t seed)
{
        unsigned char *data = malloc(n), *back = calloc(1, n);
        cube_handle h;

        fill_random(data, n, seed);
        ck_ok(cube_create(c, data, n, &h));
        ck_ok(cube_read(c, &h, back, n));
        ck_assert_msg(memcmp(data, back, n) == 0, "%zu bytes came back different", n);
        ck_ok(cube_free(c, &h));
        free(data);
        free(back);
}

/* Connects to p's socket once something listens there, retrying while it
 * does not (p must not exit meanwhile). */
static cube_client *connect_when_listening(daemon_proc *p, const char *name)
{
        long deadline = test_now_ms() + test_scaled_ms(10000);
        cube_client *c = NULL;
        cube_error *e = NULL;

        while (!path_exists(p->socket) || (e = cube_connect(p->socket, name, &c))) {
                ck_assert_msg(test_now_ms() < deadline, "could not connect to %s: %s", p->socket,
                              e ? cube_error_message(e) : "no socket");
                ck_assert_int_eq(proc_wait_exit(p, 0), -2);
                cube_error_free(e);
                e = NULL;
                usleep(10000);
        }
        return c;
}

START_TEST(socket_activation)
{
        daemon_proc p;
        char notify_env[128], mainpid[32], *ready;
        const char *bin = getenv("CUBED_BIN");
        cube_client *c;
        cube_status st;
        long r;

        proc_init(&p);
        snprintf(notify_env, sizeof(notify_env), "NOTIFY_SOCKET=%s", p.notify);
        const char *argv[] = { "systemd-socket-activate", "-l", p.socket, "--fdname=api", "-E",
                               notify_env, bin, "--instance", "cpu0", "--cache-dir", p.cache,
                               "--log-level", "info", NULL };
        proc_exec(&p, argv, NULL);

        /* The daemon is executed on the first connection, so connect first;
         * retry while systemd-socket-activate has yet to listen. */
        c = connect_when_listening(&p, "activated");
        round_trip(c, 100000, 1);
        ck_ok(cube_daemon_status(c, &st));
        ck_assert_str_eq(st.service, cube_client_service(c));
        ck_assert(!st.poisoned);

        r = wait_note(&p, 0, "READY=1", test_scaled_ms(5000));
        ck_assert_msg(r >= 0, "no READY=1 on the notify socket");
        /* systemd-socket-activate executes cubed in its own process. */
        snprintf(mainpid, sizeof(mainpid), "MAINPID=%d", (int) p.pid);
        ready = note_text(&p, r);
        ck_assert_msg(has_line(ready, mainpid), "READY=1 without %s: %s", mainpid, ready);
        free(ready);
        ck_assert(test_file_holds(p.log, "passed by systemd"));

        cube_disconnect(c);
        ck_assert_int_eq(proc_stop(&p, test_scaled_ms(10000)), 0);
        ck_assert_msg(path_exists(p.socket), "cubed removed the socket systemd had bound");
        proc_done(&p);
}
END_TEST

START_TEST(notifications_from_start_to_stop)
{
        daemon_proc p;
        char *ready;
        long r, stopping;

        proc_init(&p);
        start_daemon(&p, NULL, NULL);
        r = wait_note(&p, 0, "READY=1", 0);
        ready = note_text(&p, r);
        ck_assert_msg(strstr(ready, "STATUS="), "READY=1 without a STATUS=: %s", ready);
        free(ready);
        ck_assert_uint_eq(count_notes(&p, 0, "READY=1"), 1);
        ck_assert_uint_eq(count_notes(&p, 0, "STOPPING=1"), 0);

        kill(p.pid, SIGTERM);
        ck_assert_int_eq(proc_wait_exit(&p, test_scaled_ms(10000)), 0);
        /* Sent before the exit, so already queued: it arrives at once. */
        stopping = wait_note(&p, 0, "STOPPING=1", test_scaled_ms(2000));
        ck_assert_msg(stopping > r, "STOPPING=1 came at %ld, READY=1 at %ld", stopping, r);
        ck_assert_uint_eq(count_notes(&p, 0, "READY=1"), 1);
        ck_assert(!path_exists(p.socket));
        proc_done(&p);
}
END_TEST

START_TEST(the_watchdog_is_fed_only_when_asked)
{
        static const char *const watchdog[] = { "WATCHDOG_USEC=200000", NULL };
        daemon_proc p, q;
        long ready, deadline;
        size_t fed;

        proc_init(&p);
        start_daemon(&p, NULL, watchdog);
        ready = wait_note(&p, 0, "READY=1", 0);
        deadline = test_now_ms() + test_scaled_ms(1500);
        while ((fed = count_notes(&p, (size_t) ready, "WATCHDOG=1")) < 3 &&
               test_now_ms() < deadline)
                usleep(10000);
        ck_assert_msg(fed >= 3, "only %zu WATCHDOG=1 in 1.5 s with WATCHDOG_USEC=200000", fed);
        ck_assert_int_eq(proc_stop(&p, test_scaled_ms(10000)), 0);
        proc_done(&p);

        proc_init(&q);
        start_daemon(&q, NULL, NULL);
        usleep(500000);
        ck_assert_uint_eq(count_notes(&q, 0, "WATCHDOG=1"), 0);
        ck_assert_int_eq(proc_stop(&q, test_scaled_ms(10000)), 0);
        proc_done(&q);
}
END_TEST

/* ------------------------------------------------------------------------
 * The configuration file and reload
 * ------------------------------------------------------------------------ */

/* Whether the daemon takes a request whose one param is an array of n nils.
 * The method is unknown, so a message within the limits is answered with
 * "unknown method" on a connection that stays open, while one beyond
 * max-container is refused as a protocol error and the connection closed. */
static bool container_accepted(const char *socket, int n)
{
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_unpacked up;
        cube__envelope env;
        cube_error *e = NULL;
        const char *why;
        bool accepted;
        int fd = raw_connect(socket);

        ck_assert_int_ge(fd, 0);
        ck_assert_msg(raw_hello(fd) != 0, "hello was not answered");
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        cube__pack_request(&pk, 7, "no_such_method", 1);
        msgpack_pack_array(&pk, (size_t) n);
        for (int i = 0; i < n; i++)
                msgpack_pack_nil(&pk);
        /* A message over the limit is refused from its header: the daemon
         * answers and hangs up before the rest is sent, so the send may fail
         * (EPIPE) with the answer already waiting to be read. */
        (void) raw_send_sbuffer(fd, &sb);
        msgpack_sbuffer_destroy(&sb);

        ck_assert_int_eq(raw_recv(fd, &up, 5000), 1);
        ck_assert_int_eq(cube__envelope_parse(&up.data, &env, &why), 0);
        ck_assert_int_eq(env.type, CUBE__MSG_RESPONSE);
        ck_assert_uint_eq(env.msgid, 7);
        ck_assert_int_eq(cube__err_unpack(env.error, CUBE__FAMILY_SERVER, &e), 0);
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_SERVER_VALIDATION);
        accepted = strstr(cube_error_message(e), "unknown method 'no_such_method'") != NULL;
        ck_assert_msg(accepted || strstr(cube_error_message(e), "protocol error"),
                      "%d elements: unexpected answer: %s", n, cube_error_message(e));
        cube_error_free(e);
        msgpack_unpacked_destroy(&up);
        if (!accepted)
                ck_assert_msg(raw_wait_closed(fd, 5000), "a refused message left it open");
        close(fd);
        return accepted;
}

static void expect_max_container(const char *socket, int limit)
{
        cube_client *c;

        ck_assert_msg(container_accepted(socket, limit), "%d elements refused", limit);
        ck_assert_msg(!container_accepted(socket, limit + 1), "%d elements accepted",
                      limit + 1);
        ck_ok(cube_connect(socket, "limits", &c));
        ck_assert_uint_eq(cube_client_limits(c)->max_container, (uint32_t) limit);
        cube_disconnect(c);
}

/* SIGHUP, then RELOADING=1 and a READY=1 after it. */
static void reload(daemon_proc *p)
{
        size_t from = n_notes(p);
        long reloading, ready;

        kill(p->pid, SIGHUP);
        reloading = wait_note(p, from, "RELOADING=1", test_scaled_ms(5000));
        ck_assert_msg(reloading >= 0, "no RELOADING=1 after SIGHUP");
        ready = wait_note(p, (size_t) reloading + 1, "READY=1", test_scaled_ms(5000));
        ck_assert_msg(ready > reloading, "no READY=1 after RELOADING=1");
}

START_TEST(reload_takes_a_good_file_and_keeps_the_running_one_on_a_bad)
{
        daemon_proc p;
        char conf[128], where[160];

        proc_init(&p);
        snprintf(conf, sizeof(conf), "%s/cubed.conf", p.dir);
        write_file(conf, "# limits for the test\nmax-container = 100\nlog-level = info\n");
        const char *args[] = { "--socket", p.socket, "--cache-dir", p.cache, "--config", conf,
                               NULL };
        proc_spawn_cubed(&p, args, NULL);
        wait_ready(&p, 0);
        /* The level came from the file: info shows sessions opening. */
        expect_max_container(p.socket, 100);
        ck_assert(test_file_holds(p.log, "session 1 opened"));

        write_file(conf, "log-level = info\nmax-container = lots\n");
        reload(&p);
        snprintf(where, sizeof(where), "%s:2", conf);
        ck_assert_msg(test_file_holds(p.log, "reload failed"), "no 'reload failed' in the log");
        ck_assert_msg(test_file_holds(p.log, where), "the log does not name %s", where);
        expect_max_container(p.socket, 100);

        write_file(conf, "max-container = 50\nlog-level = info\n");
        reload(&p);
        expect_max_container(p.socket, 50);

        ck_assert_int_eq(proc_stop(&p, test_scaled_ms(10000)), 0);
        proc_done(&p);
}
END_TEST

/* A refused reload says so where an operator looks: STATUS=, the log (the
 * key and why), cubectl status, the metrics; cubed --check-config refuses
 * the same file; cubectl config says where each value came from. */
START_TEST(a_refused_reload_is_reported)
{
        static const char *const config[] = { "config", NULL };
        static const char *const status[] = { "status", NULL };
        daemon_proc p;
        output *o = calloc(1, sizeof(*o));
        char conf[128], where[160], line[512], *text;
        const char *bin = getenv("CUBED_BIN");
        cube_client *c;
        size_t from;
        long ready;

        proc_init(&p);
        snprintf(conf, sizeof(conf), "%s/cubed.conf", p.dir);
        write_file(conf, "# limits\nmax-container = 100\n");
        const char *args[] = { "--socket", p.socket, "--cache-dir", p.cache, "--config", conf,
                               "--log-level", "info", NULL };
        proc_spawn_cubed(&p, args, NULL);
        wait_ready(&p, 0);

        cubectl(o, p.socket, config);
        ck_assert_out(o, o->status == 0, "cubectl config exited %d", o->status);
        snprintf(where, sizeof(where), "%s:2", conf);
        ck_assert_out(o, line_with(o->out, "max-container", line, sizeof(line)) &&
                      strstr(line, "100") && strstr(line, where), "max-container not from %s",
                      where);
        ck_assert_out(o, line_with(o->out, "log-level", line, sizeof(line)) &&
                      strstr(line, "info") && strstr(line, "command line"),
                      "log-level not from the command line");
        ck_assert_out(o, line_with(o->out, "max-depth", line, sizeof(line)) &&
                      strstr(line, "16") && strstr(line, "default"), "max-depth not a default");

        write_file(conf, "max-container = 100\nmax-depth = 99\n");
        const char *check[] = { bin, "--check-config", conf, NULL };
        run_program(o, NULL, NULL, check);
        ck_assert_out(o, o->status == 2 && strstr(o->err, "max-depth"),
                      "--check-config of a bad file exited %d", o->status);
        /* A misspelt transport is refused, not a silent Gloo. */
        write_file(conf, "transport = nome\n");
        run_program(o, NULL, NULL, check);
        ck_assert_out(o, o->status == 2 && strstr(o->err, "transport") && strstr(o->err, "nome"),
                      "--check-config of transport = nome exited %d", o->status);
        write_file(conf, "max-container = 100\nmax-depth = 99\n");

        from = n_notes(&p);
        reload(&p);
        ready = wait_note(&p, from, "READY=1", 0);
        text = note_text(&p, ready);
        ck_assert_msg(strstr(text, "STATUS=") && strstr(text, "reload refused") &&
                      strstr(text, "max-depth"), "the READY=1 after a refused reload: %s", text);
        free(text);
        ck_assert(test_file_holds(p.log, "max-depth: must be"));
        cubectl(o, p.socket, status);
        ck_assert_out(o, o->status == 0 && strstr(o->out, "REFUSED") &&
                      strstr(o->out, "max-depth"), "cubectl status does not say so");
        ck_ok(cube_connect(p.socket, "m", &c));
        char *m = metrics_of(c);
        ck_assert(test_metric_value(m, "cube_reloads_refused_total{instance=\"cpu0\"}") == 1);
        free(m);
        cube_disconnect(c);

        /* Fixed, it is taken, and the refusal is forgotten. */
        write_file(conf, "max-container = 100\nmax-depth = 20\n");
        run_program(o, NULL, NULL, check);
        ck_assert_out(o, o->status == 0, "--check-config of a good file exited %d", o->status);
        reload(&p);
        cubectl(o, p.socket, status);
        ck_assert_out(o, o->status == 0 && !strstr(o->out, "REFUSED"), "still refused");
        cubectl(o, p.socket, config);
        ck_assert_out(o, line_with(o->out, "max-depth", line, sizeof(line)) &&
                      strstr(line, "20"), "max-depth is not 20");

        ck_assert_int_eq(proc_stop(&p, test_scaled_ms(10000)), 0);
        proc_done(&p);
        free(o);
}
END_TEST

START_TEST(the_command_line_wins_over_the_file_across_reloads)
{
        daemon_proc p;
        char conf[128];

        proc_init(&p);
        snprintf(conf, sizeof(conf), "%s/cubed.conf", p.dir);
        write_file(conf, "max-container = 100\n");
        const char *args[] = { "--socket", p.socket, "--cache-dir", p.cache, "--config", conf,
                               "--max-container", "30", NULL };
        proc_spawn_cubed(&p, args, NULL);
        wait_ready(&p, 0);
        expect_max_container(p.socket, 30);

        write_file(conf, "max-container = 50\n");
        reload(&p);
        ck_assert(test_file_holds(p.log, "configuration reloaded"));
        expect_max_container(p.socket, 30);

        ck_assert_int_eq(proc_stop(&p, test_scaled_ms(10000)), 0);
        proc_done(&p);
}
END_TEST

/* cubed with this configuration file must refuse to start: status 2, a
 * message naming file:line and the word, and no socket. */
static void expect_refused(const char *text, int line, const char *word)
{
        daemon_proc p;
        output *o = calloc(1, sizeof(*o));
        char conf[128], where[160];
        const char *bin = getenv("CUBED_BIN");

        proc_init(&p);
        snprintf(conf, sizeof(conf), "%s/cubed.conf", p.dir);
        snprintf(where, sizeof(where), "%s:%d", conf, line);
        write_file(conf, text);
        const char *argv[] = { bin, "--socket", p.socket, "--cache-dir", p.cache, "--config",
                               conf, NULL };
        run_program(o, NULL, NULL, argv);
        ck_assert_out(o, o->status == 2, "cubed exited %d with\n%s", o->status, text);
        ck_assert_out(o, strstr(o->err, where) && strstr(o->err, word),
                      "the message does not name %s and %s", where, word);
        ck_assert(!path_exists(p.socket));
        proc_done(&p);
        free(o);
}

START_TEST(a_bad_configuration_file_stops_the_start)
{
        expect_refused("# a comment\nmax-container = 100\nfrobnicate = yes\n", 3, "frobnicate");
        expect_refused("\nmax-depth = 99\n", 2, "max-depth");
        expect_refused("poison-policy = explode\n", 1, "poison-policy");
        expect_refused("log-level info\n", 1, "key = value");
}
END_TEST

START_TEST(config_if_exists_reads_the_file_once_it_exists)
{
        daemon_proc p;
        output *o = calloc(1, sizeof(*o));
        char missing[128];
        const char *bin = getenv("CUBED_BIN");

        proc_init(&p);
        snprintf(missing, sizeof(missing), "%s/absent.conf", p.dir);
        const char *extra[] = { "--config-if-exists", missing, NULL };
        start_daemon(&p, extra, NULL);
        expect_max_container(p.socket, 65536);

        /* Created after the start, the file is read by the next reload. */
        write_file(missing, "max-container = 50\n");
        reload(&p);
        expect_max_container(p.socket, 50);
        ck_assert_int_eq(proc_stop(&p, test_scaled_ms(10000)), 0);
        ck_assert_int_eq(unlink(missing), 0);

        /* Where the file is required, its absence is an error. */
        const char *argv[] = { bin, "--socket", p.socket, "--cache-dir", p.cache, "--config",
                               missing, NULL };
        run_program(o, NULL, NULL, argv);
        ck_assert_out(o, o->status == 2 && strstr(o->err, missing), "cubed exited %d",
                      o->status);
        proc_done(&p);
        free(o);
}
END_TEST

/* ------------------------------------------------------------------------
 * A poisoned device
 * ------------------------------------------------------------------------ */

static void expect_poisoned(cube_error *e)
{
        ck_assert_msg(e, "no error from a poisoned device");
        ck_assert_msg(cube_error_is_device_poisoned(e), "not DevicePoisoned: %s",
                      cube_error_message(e));
        cube_error_free(e);
}

START_TEST(poison_policy_exit_ends_with_status_3)
{
        static const char *const args[] = { "--enable-fault-injection", "--poison-policy",
                                             "exit", "--poison-grace", "1", NULL };
        daemon_proc p;
        cube_client *c;
        long start;
        int r;

        proc_init(&p);
        start_daemon(&p, args, NULL);
        ck_ok(cube_connect(p.socket, "victim", &c));
        round_trip(c, 4096, 3);
        ck_ok(cube_debug_inject(c, CUBE_FAULT_POISON, 0, "a test poisoned it", 0));
        start = test_now_ms();
        expect_poisoned(cube_sync(c, NULL, 0));
        r = proc_wait_exit(&p, test_scaled_ms(5000));
        ck_assert_msg(r == 3, "cubed ended with %d, not 3, %ld ms after the poison", r,
                      test_now_ms() - start);
        ck_assert(wait_note(&p, 0, "STOPPING=1", test_scaled_ms(2000)) >= 0);
        ck_assert(!path_exists(p.socket));
        cube_disconnect(c);
        proc_done(&p);
}
END_TEST

/* The poison policy cubed runs with when none is given: started as
 * start_daemon does (with NOTIFY_SOCKET), or with notify false and no
 * NOTIFY_SOCKET at all, plus env. */
static char *default_poison_policy(bool notify, const char *const *env)
{
        daemon_proc p;
        cube_config_entry *v;
        cube_client *c;
        char *policy = NULL;
        size_t n;

        proc_init(&p);
        if (notify) {
                start_daemon(&p, NULL, env);
        } else {
                const char *args[] = { "--socket", p.socket, "--cache-dir", p.cache, NULL };
                p.notify[0] = '\0';
                proc_spawn_cubed(&p, args, env);
        }
        c = connect_when_listening(&p, "policy");
        ck_ok(cube_daemon_config(c, &v, &n));
        for (size_t i = 0; i < n; i++)
                if (strcmp(v[i].key, "poison-policy") == 0) {
                        ck_assert_str_eq(v[i].source, "default");
                        policy = strdup(v[i].value);
                }
        free(v);
        cube_disconnect(c);
        ck_assert_int_eq(proc_stop(&p, test_scaled_ms(10000)), 0);
        proc_done(&p);
        ck_assert_ptr_nonnull(policy);
        return policy;
}

/* A daemon run by hand has no service manager to start it again after a
 * fault, so its default policy brings the device up in place; under systemd
 * (NOTIFY_SOCKET or INVOCATION_ID in its environment) it exits. */
START_TEST(the_default_poison_policy_follows_how_cubed_was_started)
{
        static const char *const invocation[] = { "INVOCATION_ID=0123456789abcdef", NULL };
        char *policy;

        policy = default_poison_policy(false, NULL);
        ck_assert_str_eq(policy, "reinit");
        free(policy);
        policy = default_poison_policy(false, invocation);
        ck_assert_str_eq(policy, "exit");
        free(policy);
        policy = default_poison_policy(true, NULL);
        ck_assert_str_eq(policy, "exit");
        free(policy);
}
END_TEST

/* A session that never asks again does not keep a poisoned daemon alive. */
START_TEST(poison_policy_exit_does_not_wait_for_a_silent_session)
{
        static const char *const args[] = { "--enable-fault-injection", "--poison-policy",
                                             "exit", "--poison-grace", "1", NULL };
        daemon_proc p;
        cube_client *c;
        int r;

        proc_init(&p);
        start_daemon(&p, args, NULL);
        ck_ok(cube_connect(p.socket, "silent", &c));
        ck_ok(cube_debug_inject(c, CUBE_FAULT_POISON, 0, "a test poisoned it", 0));
        r = proc_wait_exit(&p, test_scaled_ms(6000));
        ck_assert_msg(r == 3, "cubed ended with %d, not 3", r);
        cube_disconnect(c);
        proc_done(&p);
}
END_TEST

START_TEST(poison_policy_reinit_serves_a_new_device)
{
        static const char *const args[] = { "--enable-fault-injection", "--poison-policy",
                                             "reinit", "--poison-grace", "1", NULL };
        daemon_proc p;
        cube_client *c, *n = NULL;
        cube_handle old;
        unsigned char data[64] = { 1, 2, 3 };
        char before[64];
        cube_status st;
        cube_error *e;
        long deadline;

        proc_init(&p);
        start_daemon(&p, args, NULL);
        ck_ok(cube_connect(p.socket, "before", &c));
        snprintf(before, sizeof(before), "%s", cube_client_service(c));
        ck_ok(cube_create(c, data, sizeof(data), &old));
        ck_ok(cube_sync(c, &old, 1));
        ck_ok(cube_debug_inject(c, CUBE_FAULT_POISON, 0, "a test poisoned it", 0));
        expect_poisoned(cube_sync(c, NULL, 0));

        /* Until the policy acts, a new session still meets the old device. */
        deadline = test_now_ms() + test_scaled_ms(6000);
        for (;;) {
                /* A session that connects just as the policy acts is closed
                 * with the rest, as any client of a re-initialised device
                 * is: it connects again. */
                e = cube_connect(p.socket, "after", &n);
                if (e && cube_error_kind_of(e) == CUBE_SERVER_GENERIC &&
                    strstr(cube_error_message(e), "was lost") && test_now_ms() < deadline) {
                        cube_error_free(e);
                        usleep(50000);
                        continue;
                }
                ck_ok(e);
                if (strcmp(cube_client_service(n), before) != 0)
                        break;
                cube_disconnect(n);
                ck_assert_msg(test_now_ms() < deadline, "the device was not re-initialised");
                ck_assert_int_eq(proc_wait_exit(&p, 0), -2);
                usleep(50000);
        }
        ck_ok(cube_daemon_status(n, &st));
        ck_assert_msg(!st.poisoned, "still poisoned after reinit: %s", st.poison);
        ck_assert_str_eq(st.service, cube_client_service(n));
        round_trip(n, 10000, 4);
        e = cube_read(n, &old, data, sizeof(data));
        ck_assert_msg(e && cube_error_kind_of(e) == CUBE_SERVER_FOREIGN_HANDLE,
                      "a handle from before the reinit: %s", e ? cube_error_message(e) : "ok");
        cube_error_free(e);

        /* The session from before was closed. */
        e = cube_read(c, &old, data, sizeof(data));
        ck_assert_msg(e && cube_error_kind_of(e) == CUBE_SERVER_GENERIC,
                      "the old session still answers: %s", e ? cube_error_message(e) : "ok");
        cube_error_free(e);
        cube_disconnect(c);
        cube_disconnect(n);
        ck_assert_int_eq(proc_stop(&p, test_scaled_ms(10000)), 0);
        proc_done(&p);
}
END_TEST

/* Connects as name once the device serves a service other than before
 * (the reinit is done); returns the client. */
static cube_client *connect_after_reinit(const char *socket, const char *name, const char *before)
{
        long deadline = test_now_ms() + test_scaled_ms(8000);
        cube_client *n;

        for (;;) {
                cube_error *e = cube_connect(socket, name, &n);
                if (!e && strcmp(cube_client_service(n), before) != 0)
                        return n;
                if (!e)
                        cube_disconnect(n);
                cube_error_free(e);
                ck_assert_msg(test_now_ms() < deadline, "the device was not re-initialised");
                usleep(50000);
        }
}

/* A tenant that keeps poisoning the device is refused for a while. */
START_TEST(a_tenant_that_poisons_again_and_again_is_refused)
{
        static const char *const args[] = { "--enable-fault-injection", "--poison-policy",
                                             "reinit", "--poison-grace", "1", "--poison-ban-after",
                                             "2", "--poison-ban-seconds", "60", NULL };
        static const char *const bans[] = { "bans", NULL };
        daemon_proc p;
        output *o = calloc(1, sizeof(*o));
        cube_client *c, *other;
        char before[64];
        cube_error *e;

        proc_init(&p);
        start_daemon(&p, args, NULL);
        ck_ok(cube_connect(p.socket, "bully", &c));
        for (int i = 0; i < 2; i++) {
                snprintf(before, sizeof(before), "%s", cube_client_service(c));
                ck_ok(cube_debug_inject(c, CUBE_FAULT_POISON, 0, "again", 0));
                expect_poisoned(cube_sync(c, NULL, 0));
                cube_disconnect(c);
                if (i == 0)
                        c = connect_after_reinit(p.socket, "bully", before);
        }
        other = connect_after_reinit(p.socket, "bystander", before);
        e = cube_connect(p.socket, "bully", &c);
        ck_assert_msg(e, "a name that poisoned the device twice was taken again");
        ck_assert_msg(strstr(cube_error_message(e), "poisoned the device 2 time(s)"), "%s",
                      cube_error_message(e));
        cube_error_free(e);
        ck_assert(test_file_holds(p.log, "the name is refused for 60 s"));
        cubectl(o, p.socket, bans);
        ck_assert_out(o, o->status == 0 && strstr(o->out, "bully"), "cubectl bans does not show it");
        round_trip(other, 1000, 9);
        cube_disconnect(other);
        ck_assert_int_eq(proc_stop(&p, test_scaled_ms(10000)), 0);
        proc_done(&p);
        free(o);
}
END_TEST

START_TEST(a_poisoned_device_is_reported_during_the_grace)
{
        static const char *const args[] = { "--enable-fault-injection", "--poison-grace", "60",
                                             NULL };
        daemon_proc p;
        cube_client *c, *n;
        cube_status st;

        proc_init(&p);
        start_daemon(&p, args, NULL);
        ck_ok(cube_connect(p.socket, "victim", &c));
        ck_ok(cube_debug_inject(c, CUBE_FAULT_POISON, 0, "a test poisoned it", 0));
        ck_ok(cube_daemon_status(c, &st));
        ck_assert(st.poisoned);
        ck_assert_msg(strstr(st.poison, "a test poisoned it"), "the reason is '%s'", st.poison);
        expect_poisoned(cube_sync(c, NULL, 0));

        ck_ok(cube_connect(p.socket, "newcomer", &n));
        ck_assert_str_eq(cube_client_service(n), cube_client_service(c));
        ck_ok(cube_daemon_status(n, &st));
        ck_assert(st.poisoned);
        ck_assert(wait_note(&p, 0, "STATUS=the device is poisoned", test_scaled_ms(2000)) >= 0);
        ck_assert_int_eq(proc_wait_exit(&p, 0), -2);

        cube_disconnect(n);
        cube_disconnect(c);
        ck_assert_int_eq(proc_stop(&p, test_scaled_ms(10000)), 0);
        proc_done(&p);
}
END_TEST

/* ------------------------------------------------------------------------
 * cubectl
 * ------------------------------------------------------------------------ */

/* The line of text that holds needle (copied into line), or false. */
static bool line_with(const char *text, const char *needle, char *line, size_t cap)
{
        const char *hit = strstr(text, needle), *start, *end;

        if (!hit)
                return false;
        for (start = hit; start > text && start[-1] != '\n'; start--)
                ;
        end = strchr(hit, '\n');
        if (!end)
                end = hit + strlen(hit);
        snprintf(line, cap, "%.*s", (int) (end - start), start);
        return true;
}

/* Whether cubectl streams printed a row "SESSION STREAM PENDING" for this
 * session and stream, with nothing pending. */
static bool has_stream_row(const char *text, uint64_t session, uint64_t stream)
{
        for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
                uint64_t a, b, pending;
                if (sscanf(p, "%" SCNu64 " %" SCNu64 " %" SCNu64, &a, &b, &pending) == 3 &&
                    a == session && b == stream && pending == 0)
                        return true;
        }
        return false;
}

/* The kernel cache directory's artifacts, as another client sees them,
 * asserting there is exactly one, of the affine kernel. */
static cube_cache_artifact the_stored_affine(const char *socket)
{
        cube_cache_artifact *v, a;
        cube_client *w;
        struct timespec now;
        size_t n;

        ck_ok(cube_connect(socket, "watcher", &w));
        ck_ok(cube_daemon_cache_artifacts(w, &v, &n));
        ck_assert_uint_eq(n, 1);
        a = v[0];
        free(v);
        cube_disconnect(w);
        ck_assert_str_eq(a.entry, "affine");
        ck_assert_str_eq(a.backend, "cpu");
        ck_assert_uint_eq(strlen(a.hash), 64);
        ck_assert_uint_eq(strspn(a.source_hash, "0123456789abcdef"), 64);
        ck_assert_str_ne(a.source_hash, a.hash);
        ck_assert_uint_gt(a.bytes, 64);
        clock_gettime(CLOCK_REALTIME, &now);
        ck_assert(a.used_at > (double) now.tv_sec - 600 && a.used_at < (double) now.tv_sec + 5);
        return a;
}

/* Once every session that registered a kernel has ended, the live cache
 * lists nothing, but cubectl kernels still shows what the directory holds:
 * the artifact's key, its source's digest, its entry point, backend, size
 * and last use; and a daemon started later on the same directory shows the
 * same. */
START_TEST(cubectl_kernels_shows_the_artifacts_on_disk_after_the_sessions_end)
{
        const char *kernels[] = { "kernels", NULL }, *json[] = { "--json", "kernels", NULL };
        output *o = calloc(1, sizeof(*o));
        cube_cache_artifact first, again;
        daemon_proc p, q;
        cube_kernel_info *live;
        cube_client *c;
        char short_hash[13];
        size_t n;

        proc_init(&p);
        start_daemon(&p, NULL, NULL);
        ck_ok(cube_connect(p.socket, "compiler", &c));
        ck_ok(test_affine_try(c, test_kernel(c, test_affine_source, "affine"), 64));
        cube_disconnect(c);

        ck_ok(cube_connect(p.socket, "watcher", &c));
        ck_ok(cube_daemon_kernels(c, &live, &n));
        free(live);
        ck_assert_uint_eq(n, 0);
        cube_disconnect(c);
        first = the_stored_affine(p.socket);
        snprintf(short_hash, sizeof(short_hash), "%.12s", first.hash);
        cubectl(o, p.socket, kernels);
        ck_assert_out(o, o->status == 0 && strstr(o->out, short_hash) &&
                      strstr(o->out, "affine") && strstr(o->out, "LAST USE"),
                      "cubectl kernels does not show the artifact %s", short_hash);
        cubectl(o, p.socket, json);
        ck_assert_out(o, o->status == 0 && strstr(o->out, "\"stored\":[{") &&
                      strstr(o->out, first.source_hash), "cubectl --json kernels has no stored");
        ck_assert_int_eq(proc_stop(&p, test_scaled_ms(10000)), 0);

        const char *same_cache[] = { "--cache-dir", p.cache, NULL };
        proc_init(&q);
        start_daemon(&q, same_cache, NULL);
        again = the_stored_affine(q.socket);
        ck_assert_str_eq(again.hash, first.hash);
        ck_assert_str_eq(again.source_hash, first.source_hash);
        ck_assert_uint_eq(again.bytes, first.bytes);
        ck_assert_int_eq(proc_stop(&q, test_scaled_ms(10000)), 0);
        proc_done(&q);
        proc_done(&p);
        free(o);
}
END_TEST

START_TEST(cubectl_shows_sessions_memory_streams_and_metrics)
{
        static const char *const sessions[] = { "sessions", NULL };
        static const char *const json_sessions[] = { "--json", "sessions", NULL };
        static const char *const json_memory[] = { "--json", "memory", NULL };
        static const char *const memory[] = { "memory", NULL };
        static const char *const json_streams[] = { "--json", "streams", NULL };
        static const char *const streams[] = { "streams", NULL };
        static const char *const metrics[] = { "metrics", NULL };
        static const char *const json_metrics[] = { "--json", "metrics", NULL };
        daemon_proc p;
        output *o = calloc(1, sizeof(*o));
        unsigned char data[4096];
        char line[512], want[256];
        cube_client *c;
        cube_handle h;
        uint64_t id, sid;
        unsigned pid, uid;
        char name[64];

        proc_init(&p);
        start_daemon(&p, NULL, NULL);
        ck_ok(cube_connect(p.socket, "opsclient", &c));
        sid = cube_client_session(c);
        fill_random(data, sizeof(data), 5);
        ck_ok(cube_create(c, data, sizeof(data), &h));
        ck_ok(cube_write(c, &h, data, sizeof(data)));
        ck_ok(cube_sync(c, &h, 1));

        cubectl(o, p.socket, sessions);
        ck_assert_out(o, o->status == 0, "cubectl sessions exited %d", o->status);
        ck_assert_out(o, line_with(o->out, "opsclient", line, sizeof(line)), "no opsclient");
        ck_assert_int_eq(sscanf(line, "%" SCNu64 " %u %u %63s", &id, &pid, &uid, name), 4);
        ck_assert_uint_eq(id, sid);
        ck_assert_uint_eq(pid, (unsigned) getpid());
        ck_assert_uint_eq(uid, (unsigned) getuid());
        ck_assert_str_eq(name, "opsclient");
        ck_assert_msg(!strstr(line, "(cubectl)"), "the client's session marked as cubectl's");
        ck_assert_out(o, line_with(o->out, "(cubectl)", line, sizeof(line)),
                      "cubectl's own session is not marked");
        ck_assert_int_eq(sscanf(line, "%" SCNu64 " %u %u %63s", &id, &pid, &uid, name), 4);
        ck_assert_str_eq(name, "cubectl");
        ck_assert_uint_ne(id, sid);

        cubectl(o, p.socket, json_sessions);
        ck_assert_out(o, o->status == 0, "cubectl --json sessions exited %d", o->status);
        ck_assert_out(o, o->out[0] == '[' && strstr(o->out, "]\n"), "not a JSON array");
        snprintf(want, sizeof(want), "{\"id\":%" PRIu64 ",\"pid\":%d,\"uid\":%u,"
                 "\"name\":\"opsclient\"", sid, (int) getpid(), (unsigned) getuid());
        ck_assert_out(o, strstr(o->out, want), "no %s", want);
        ck_assert_out(o, strstr(o->out, "\"name\":\"cubectl\""), "no cubectl session");
        ck_assert_out(o, strstr(o->out, "\"self\":true") && strstr(o->out, "\"self\":false"),
                      "self is not marked");
        ck_assert_out(o, strstr(o->out, "\"memory_in_use\":4096"), "no memory in use");

        cubectl(o, p.socket, json_memory);
        ck_assert_out(o, o->status == 0, "cubectl --json memory exited %d", o->status);
        ck_assert_out(o, o->out[0] == '{' && strstr(o->out, "\"memory_in_use\":4096,"),
                      "no memory in use");
        snprintf(want, sizeof(want), "{\"id\":%" PRIu64 ",\"memory_in_use\":4096", sid);
        ck_assert_out(o, strstr(o->out, want), "no %s", want);
        cubectl(o, p.socket, memory);
        ck_assert_out(o, o->status == 0, "cubectl memory exited %d", o->status);
        ck_assert_out(o, strstr(o->out, "4.0 KiB in use"), "no 4.0 KiB in use");

        cubectl(o, p.socket, json_streams);
        ck_assert_out(o, o->status == 0, "cubectl --json streams exited %d", o->status);
        snprintf(want, sizeof(want), "{\"session\":%" PRIu64 ",\"stream\":%" PRIu64
                 ",\"pending\":0}", sid, cube_stream_current());
        ck_assert_out(o, strstr(o->out, want), "no %s", want);
        cubectl(o, p.socket, streams);
        ck_assert_out(o, o->status == 0, "cubectl streams exited %d", o->status);
        ck_assert_out(o, has_stream_row(o->out, sid, cube_stream_current()),
                      "no row for stream %" PRIu64 " of session %" PRIu64,
                      cube_stream_current(), sid);

        cubectl(o, p.socket, metrics);
        ck_assert_out(o, o->status == 0, "cubectl metrics exited %d", o->status);
        ck_assert_out(o, strstr(o->out, "# TYPE cube_sessions gauge\n"), "no cube_sessions type");
        snprintf(want, sizeof(want), "\ncube_memory_in_use_bytes{instance=\"cpu0\"} 4096\n");
        ck_assert_out(o, strstr(o->out, want), "no %s", want + 1);
        cubectl(o, p.socket, json_metrics);
        ck_assert_out(o, o->status == 0, "cubectl --json metrics exited %d", o->status);
        ck_assert_out(o, strstr(o->out, "\"cube_memory_in_use_bytes\":4096"),
                      "no cube_memory_in_use_bytes");
        ck_assert_out(o, strstr(o->out, "\"cube_sessions\":2"), "no cube_sessions");

        cube_disconnect(c);
        ck_assert_int_eq(proc_stop(&p, test_scaled_ms(10000)), 0);
        proc_done(&p);
        free(o);
}
END_TEST

static char *metrics_of(cube_client *c)
{
        char *text;

        ck_ok(cube_daemon_metrics(c, &text));
        return text;
}

/* Every counter of before is in after, and none went down. */
static void expect_counters_kept(const char *before, const char *after)
{
        for (const char *p = before; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
                char name[128], type[32], series[256];
                if (sscanf(p, "# TYPE %127s %31s", name, type) != 2 || strcmp(type, "counter"))
                        continue;
                snprintf(series, sizeof(series), "%s{instance=\"cpu0\"}", name);
                double a = test_metric_value(before, series), b = test_metric_value(after, series);
                ck_assert_msg(a >= 0 && b >= 0, "%s is missing", series);
                ck_assert_msg(b >= a, "%s went down from %g to %g", series, a, b);
        }
}

/* Counters are the daemon's lifetime counters: sessions ending take nothing
 * from them, and their labels name the instance, not the per-start nonce. */
START_TEST(metrics_counters_never_go_down)
{
        daemon_proc p;
        cube_client *watch, *c[3];
        cube_handle h;
        unsigned char data[8192];
        char *t0, *t1, *t2, tmp[128];
        cube_status st;

        proc_init(&p);
        start_daemon(&p, NULL, NULL);
        ck_ok(cube_connect(p.socket, "watcher", &watch));
        t0 = metrics_of(watch);
        ck_assert_msg(!strstr(t0, "service="), "a series is labelled with the service id");
        ck_assert_msg(strstr(t0, "\ncube_build_info{instance=\"cpu0\",version=\""),
                      "no cube_build_info:\n%s", t0);
        ck_assert_msg(strstr(t0, "# TYPE cube_compile_seconds histogram") &&
                      strstr(t0, "# TYPE cube_queue_wait_seconds histogram"), "no histograms");
        for (int i = 0; i < 3; i++) {
                ck_ok(cube_connect(p.socket, "churn", &c[i]));
                fill_random(data, sizeof(data), (uint64_t) i);
                ck_ok(cube_create(c[i], data, sizeof(data), &h));
                ck_ok(cube_read(c[i], &h, data, sizeof(data)));
                cube_error *e = cube_import(c[i], "00000000000000000000000000000000", false, &h);
                ck_assert_msg(e, "a made-up token was imported");
                cube_error_free(e);
        }
        t1 = metrics_of(watch);
        expect_counters_kept(t0, t1);
        ck_assert(test_metric_value(t1, "cube_errors_total{instance=\"cpu0\"}") >= 3);
        ck_assert(test_metric_value(t1, "cube_sessions_opened_total{instance=\"cpu0\"}") >= 4);
        for (int i = 0; i < 3; i++)
                cube_disconnect(c[i]);
        for (long deadline = test_now_ms() + test_scaled_ms(5000);;) {
                ck_ok(cube_daemon_status(watch, &st));
                if (st.sessions == 1)
                        break;
                ck_assert_msg(test_now_ms() < deadline, "the sessions did not end");
                usleep(10000);
        }
        t2 = metrics_of(watch);
        expect_counters_kept(t1, t2);
        ck_assert(test_metric_value(t2, "cube_received_bytes_total{instance=\"cpu0\"}") >=
                  test_metric_value(t1, "cube_received_bytes_total{instance=\"cpu0\"}"));
        ck_assert(test_metric_value(t2, "cube_received_bytes_total{instance=\"cpu0\"}") > 3 * 8192);

        /* promtool, where it is installed, agrees it is well formed. */
        if (system("command -v promtool >/dev/null 2>&1") == 0) {
                snprintf(tmp, sizeof(tmp), "%s/metrics", p.dir);
                write_file(tmp, t2);
                char cmd[192];
                snprintf(cmd, sizeof(cmd), "promtool check metrics < '%s'", tmp);
                ck_assert_msg(system(cmd) == 0, "promtool check metrics failed");
        } else {
                fprintf(stderr, "no promtool: the format check is skipped\n");
        }
        free(t0);
        free(t1);
        free(t2);
        cube_disconnect(watch);
        ck_assert_int_eq(proc_stop(&p, test_scaled_ms(10000)), 0);
        proc_done(&p);
}
END_TEST

/* At the default level a session's end and failures leave a trace: the
 * close is logged at notice with its totals, and cubectl history shows the
 * session and its failure after it has gone. A multi-line message keeps its
 * prefix on every line. */
START_TEST(post_mortem_of_an_ended_session)
{
        static const char *const args[] = { "--log-level", "notice", "--enable-fault-injection",
                                             "--poison-grace", "60", NULL };
        static const char *const history[] = { "history", NULL };
        static const char *const json_history[] = { "--json", "history", NULL };
        daemon_proc p;
        output *o = calloc(1, sizeof(*o));
        cube_client *c, *w;
        cube_handle h;
        unsigned char data[256] = { 1 };
        char want[256], line[512];
        cube_error *e;
        cube_status st;
        uint64_t sid;

        proc_init(&p);
        start_daemon(&p, args, NULL);
        ck_ok(cube_connect(p.socket, "postmortem", &c));
        sid = cube_client_session(c);
        ck_ok(cube_debug_inject(c, CUBE_FAULT_ALLOC, CUBE_IO_OUT_OF_MEMORY, "", sizeof(data)));
        ck_ok(cube_create(c, data, sizeof(data), &h));
        e = cube_read(c, &h, data, sizeof(data));
        ck_assert_msg(e, "a failed reservation read back");
        cube_error_free(e);
        cube_disconnect(c);
        ck_ok(cube_connect(p.socket, "watcher", &w));
        for (long deadline = test_now_ms() + test_scaled_ms(5000);;) {
                ck_ok(cube_daemon_status(w, &st));
                if (st.sessions == 1)
                        break;
                ck_assert_msg(test_now_ms() < deadline, "the session did not end");
                usleep(10000);
        }
        snprintf(want, sizeof(want), "cubed: notice: session %" PRIu64 " (pid %d, uid %u, "
                 "'postmortem') closed after", sid, (int) getpid(), (unsigned) getuid());
        ck_assert_msg(test_file_holds(p.log, want), "no '%s' in the log", want);
        {
                char text[65536];
                FILE *lf = fopen(p.log, "r");
                size_t n = lf ? fread(text, 1, sizeof(text) - 1, lf) : 0;
                if (lf)
                        fclose(lf);
                text[n] = '\0';
                ck_assert(line_with(text, want, line, sizeof(line)));
                ck_assert_msg(strstr(line, " error(s)") && !strstr(line, " 0 error(s)"),
                              "the close does not count the errors: %s", line);
        }

        cubectl(o, p.socket, history);
        ck_assert_out(o, o->status == 0, "cubectl history exited %d", o->status);
        ck_assert_out(o, line_with(o->out, "postmortem", line, sizeof(line)), "no ended session");
        ck_assert_out(o, strstr(o->out, "failure #1") && strstr(o->out, "out of device memory"),
                      "no recent failure");
        cubectl(o, p.socket, json_history);
        snprintf(want, sizeof(want), "{\"id\":%" PRIu64 ",\"pid\":%d", sid, (int) getpid());
        ck_assert_out(o, o->status == 0 && strstr(o->out, want), "no %s", want);

        /* Every line of a multi-line message carries the prefix. */
        ck_ok(cube_debug_inject(w, CUBE_FAULT_POISON, 0, "first line\nforged: line", 0));
        ck_assert(wait_note(&p, 0, "STATUS=the device is poisoned", test_scaled_ms(2000)) >= 0);
        ck_assert_msg(test_file_holds(p.log, "cubed: error: forged: line"),
                      "the continuation line lost its prefix");
        FILE *f = fopen(p.log, "r");
        while (f && fgets(line, sizeof(line), f))
                ck_assert_msg(strncmp(line, "cubed: ", 7) == 0, "a log line without the prefix: %s",
                              line);
        if (f)
                fclose(f);
        cube_disconnect(w);
        ck_assert_int_eq(proc_stop(&p, test_scaled_ms(10000)), 0);
        ck_assert_msg(test_file_holds(p.log, "exit status 0"), "the final exit is not logged");
        proc_done(&p);
        free(o);
}
END_TEST

/* A client-chosen name cannot forge cubectl's output: names that are not
 * printable UTF-8 are refused at hello, what is shown is escaped, and with
 * --json even errors are JSON. */
START_TEST(hostile_session_names)
{
        static const char *const bad[] = { "forged\n  99  1  0  root", "tab\there", "\xff\xfe",
                                           "\xc0\xaf", "bell\a", "\xed\xa0\x80", NULL };
        static const char *const json_sessions[] = { "--json", "sessions", NULL };
        static const char *const json_kill[] = { "--json", "kill-session", "999999", NULL };
        daemon_proc p;
        output *o = calloc(1, sizeof(*o));
        cube_client *c, *good;
        cube_error *e;
        char path[160], cmd[256];

        proc_init(&p);
        start_daemon(&p, NULL, NULL);
        for (const char *const *n = bad; *n; n++) {
                e = cube_connect(p.socket, *n, &c);
                ck_assert_msg(e, "the name '%s' was taken", *n);
                ck_assert_msg(cube_error_kind_of(e) == CUBE_SERVER_VALIDATION &&
                              strstr(cube_error_message(e), "session name"),
                              "'%s': %s", *n, cube_error_message(e));
                cube_error_free(e);
        }
        ck_ok(cube_connect(p.socket, "gr\xc3\xbc\xc3\x9f \"quoted\"", &good));

        cubectl(o, p.socket, json_sessions);
        ck_assert_out(o, o->status == 0, "cubectl --json sessions exited %d", o->status);
        snprintf(path, sizeof(path), "%s/sessions.json", p.dir);
        write_file(path, o->out);
        snprintf(cmd, sizeof(cmd), "python3 -c 'import json,sys; json.load(open(sys.argv[1]))' %s",
                 path);
        ck_assert_out(o, system(cmd) == 0, "cubectl --json sessions is not JSON");
        ck_assert_out(o, strstr(o->out, "\"name\":\"gr\xc3\xbc\xc3\x9f \\\"quoted\\\"\""),
                      "the name is not in the JSON");

        cubectl(o, p.socket, json_kill);
        ck_assert_out(o, o->status == 1 && o->out[0] == '{' && strstr(o->out, "\"error\":{"),
                      "a --json error is not JSON");
        write_file(path, o->out);
        ck_assert_out(o, system(cmd) == 0, "the --json error does not parse");

        cube_disconnect(good);
        ck_assert_int_eq(proc_stop(&p, test_scaled_ms(10000)), 0);
        proc_done(&p);
        free(o);
}
END_TEST

START_TEST(cubectl_kill_session)
{
        static const char *const unknown[] = { "kill-session", "999999", NULL };
        static const char *const no_id[] = { "kill-session", NULL };
        static const char *const not_a_number[] = { "kill-session", "seven", NULL };
        daemon_proc p;
        output *o = calloc(1, sizeof(*o));
        unsigned char data[4096] = { 9 };
        char id[32];
        cube_client *c, *bystander;
        cube_handle h, hb;
        cube_error *e;

        proc_init(&p);
        start_daemon(&p, NULL, NULL);
        ck_ok(cube_connect(p.socket, "doomed", &c));
        ck_ok(cube_connect(p.socket, "bystander", &bystander));
        ck_ok(cube_create(c, data, sizeof(data), &h));
        ck_ok(cube_create(bystander, data, 100, &hb));
        ck_ok(cube_sync(c, &h, 1));
        ck_ok(cube_sync(bystander, &hb, 1));
        ck_assert_uint_eq(status_of(p.socket).memory_in_use, sizeof(data) + 100);

        snprintf(id, sizeof(id), "%" PRIu64, cube_client_session(c));
        const char *kill_it[] = { "kill-session", id, NULL };
        cubectl(o, p.socket, kill_it);
        ck_assert_out(o, o->status == 0, "kill-session exited %d", o->status);
        e = cube_read(c, &h, data, sizeof(data));
        ck_assert_msg(e, "a killed session still reads");
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_SERVER_GENERIC);
        ck_assert_msg(strstr(cube_error_message(e), "was lost"), "%s", cube_error_message(e));
        cube_error_free(e);
        cube_disconnect(c);
        ck_assert(wait_memory_in_use(p.socket, 100, 5000));
        ck_ok(cube_read(bystander, &hb, data, 100));

        cubectl(o, p.socket, unknown);
        ck_assert_out(o, o->status == 1, "kill-session of an unknown id exited %d", o->status);
        ck_assert_out(o, strstr(o->err, "999999"), "the message does not name the id");
        cubectl(o, p.socket, no_id);
        ck_assert_out(o, o->status == 2, "kill-session without an id exited %d", o->status);
        cubectl(o, p.socket, not_a_number);
        ck_assert_out(o, o->status == 2, "kill-session seven exited %d", o->status);

        cube_disconnect(bystander);
        ck_assert(wait_memory_in_use(p.socket, 0, 5000));
        ck_assert_int_eq(proc_stop(&p, test_scaled_ms(10000)), 0);
        proc_done(&p);
        free(o);
}
END_TEST

/* A drain can be watched to its end: cubectl keeps answering, a session
 * opened meanwhile may look but not work, a second drain is no error,
 * undrain takes work again, and the log says who asked and how it ended. */
START_TEST(cubectl_drain)
{
        static const char *const drain[] = { "drain", NULL };
        static const char *const undrain[] = { "undrain", NULL };
        static const char *const status[] = { "status", NULL };
        daemon_proc p;
        output *o = calloc(1, sizeof(*o));
        cube_client *last, *late = NULL;
        cube_error *e;

        proc_init(&p);
        start_daemon(&p, NULL, NULL);
        ck_ok(cube_connect(p.socket, "last", &last));
        cubectl(o, p.socket, drain);
        ck_assert_out(o, o->status == 0, "drain exited %d", o->status);
        cubectl(o, p.socket, drain);
        ck_assert_out(o, o->status == 0, "a second drain exited %d", o->status);

        cubectl(o, p.socket, status);
        ck_assert_out(o, o->status == 0 && strstr(o->out, "state:       draining"),
                      "status of a draining daemon exited %d", o->status);
        ck_ok(cube_connect(p.socket, "late", &late));
        e = cube_sync(late, NULL, 0);
        ck_assert_msg(e && strstr(cube_error_message(e), "draining"),
                      "a session opened during a drain worked: %s", e ? cube_error_message(e) : "ok");
        cube_error_free(e);
        cube_disconnect(late);
        ck_assert_int_eq(proc_wait_exit(&p, 200), -2);
        round_trip(last, 5000, 6);
        ck_assert(wait_note(&p, 0, "STATUS=draining: 1 working session(s) left",
                            test_scaled_ms(2000)) >= 0);

        /* Undrained, a new session works. */
        cubectl(o, p.socket, undrain);
        ck_assert_out(o, o->status == 0, "undrain exited %d", o->status);
        ck_ok(cube_connect(p.socket, "later", &late));
        round_trip(late, 100, 7);
        cube_disconnect(late);
        cubectl(o, p.socket, drain);
        ck_assert_out(o, o->status == 0, "drain exited %d", o->status);

        cube_disconnect(last);
        ck_assert_int_eq(proc_wait_exit(&p, test_scaled_ms(5000)), 0);
        ck_assert(wait_note(&p, 0, "STOPPING=1", test_scaled_ms(2000)) >= 0);
        ck_assert(!path_exists(p.socket));
        ck_assert_msg(test_file_holds(p.log, "asked for a drain"), "the log does not say who asked");
        ck_assert_msg(test_file_holds(p.log, "ended the drain"), "the undrain is not logged");
        ck_assert_msg(test_file_holds(p.log, "exit status 0"), "the final exit is not logged");
        proc_done(&p);
        free(o);
}
END_TEST

/* Past its deadline a drain closes what is left and stops. */
START_TEST(cubectl_drain_with_a_deadline)
{
        static const char *const drain[] = { "--timeout", "1", "drain", NULL };
        daemon_proc p;
        output *o = calloc(1, sizeof(*o));
        cube_client *stuck;
        long start;

        proc_init(&p);
        start_daemon(&p, NULL, NULL);
        ck_ok(cube_connect(p.socket, "stuck", &stuck));
        start = test_now_ms();
        cubectl(o, p.socket, drain);
        ck_assert_out(o, o->status == 0, "drain --timeout 1 exited %d", o->status);
        ck_assert_int_eq(proc_wait_exit(&p, test_scaled_ms(5000)), 0);
        ck_assert_msg(test_now_ms() - start >= 900, "the drain did not wait for its deadline");
        ck_assert(test_file_holds(p.log, "deadline has passed with 1 working session(s) left"));
        cube_disconnect(stuck);
        proc_done(&p);
        free(o);
}
END_TEST

START_TEST(cubectl_without_a_daemon_exits_3)
{
        static const char *const status[] = { "status", NULL };
        output *o = calloc(1, sizeof(*o));
        const char *socket = "/tmp/cube-ops-nonexistent/cpu7.sock";
        char env[128];

        cubectl(o, socket, status);
        ck_assert_out(o, o->status == 3, "status exited %d", o->status);
        ck_assert_out(o, strstr(o->err, socket), "the message does not name the socket");

        /* The same through $CUBE_SOCKET. */
        snprintf(env, sizeof(env), "CUBE_SOCKET=%s", socket);
        const char *envs[] = { env, NULL };
        const char *argv[] = { getenv("CUBECTL_BIN"), "sessions", NULL };
        run_program(o, NULL, envs, argv);
        ck_assert_out(o, o->status == 3, "sessions exited %d", o->status);
        ck_assert_out(o, strstr(o->err, socket), "the message does not name the socket");
        free(o);
}
END_TEST

/* ------------------------------------------------------------------------
 * Discovery and health: list, selftest, top
 * ------------------------------------------------------------------------ */

START_TEST(cubectl_list_finds_every_instance_and_marks_a_stale_socket)
{
        output *o = calloc(1, sizeof(*o));
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char stale[96], hung[96], line[512], cpu0[256];
        test_group g;
        int fd;

        ck_assert_int_eq(test_group_start(&g, 2, NULL), 0);
        /* A socket whose daemon is gone: bound, then closed, file left. */
        snprintf(stale, sizeof(stale), "%.64s/gone.sock", g.dir);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", stale);
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        ck_assert_int_eq(bind(fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        close(fd);
        /* One that takes connections and never answers: a hung daemon. */
        snprintf(hung, sizeof(hung), "%.64s/hung.sock", g.dir);
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", hung);
        int hung_fd = socket(AF_UNIX, SOCK_STREAM, 0);
        ck_assert_int_eq(bind(hung_fd, (struct sockaddr *) &sa, sizeof(sa)), 0);
        ck_assert_int_eq(listen(hung_fd, 8), 0);
        cube_client *c = test_connect(g.d[1].socket, "held");

        const char *argv[] = { getenv("CUBECTL_BIN"), "list", "--dir", g.dir, NULL };
        run_program(o, NULL, NULL, argv);
        ck_assert_out(o, o->status == 0, "list exited %d", o->status);
        for (int i = 0; i < 2; i++) {
                char want[64];
                ck_assert_out(o, line_with(o->out, g.d[i].socket, line, sizeof(line)),
                              "%s is not listed", g.d[i].socket);
                char backend[32];
                snprintf(want, sizeof(want), "cpu%d ", i);
                snprintf(backend, sizeof(backend), " %s ", test_backend());
                ck_assert_out(o, strstr(line, want) && strstr(line, backend) &&
                              strstr(line, "serving"), "the row is wrong: %s", line);
        }
        unsigned held = 0;
        ck_assert_out(o, line_with(o->out, g.d[1].socket, line, sizeof(line)) &&
                      sscanf(strstr(line, "serving"), "serving %u", &held) == 1 && held == 1,
                      "cpu1's session is not counted");
        ck_assert_out(o, line_with(o->out, stale, line, sizeof(line)) &&
                      strstr(line, "unreachable") && strstr(line, "stale socket"),
                      "the stale socket is not marked unreachable");
        ck_assert_out(o, line_with(o->out, hung, line, sizeof(line)) &&
                      strstr(line, "unreachable") && strstr(line, "no answer within"),
                      "the socket that never answers is not marked unreachable");

        const char *json[] = { getenv("CUBECTL_BIN"), "--json", "list", "--dir", g.dir, NULL };
        run_program(o, NULL, NULL, json);
        ck_assert_out(o, o->status == 0, "list --json exited %d", o->status);
        snprintf(cpu0, sizeof(cpu0), "{\"socket\":\"%s\",\"instance\":\"cpu0\",\"state\":"
                 "\"serving\",\"reachable\":true", g.d[0].socket);
        ck_assert_out(o, strstr(o->out, cpu0), "no cpu0 object");
        ck_assert_out(o, strstr(o->out, "\"instance\":\"gone\",\"state\":\"unreachable\","
                                        "\"reachable\":false,\"reason\":\"stale socket"),
                      "no unreachable object for the stale socket");
        ck_assert_out(o, o->out[0] == '[' && strstr(o->out, "]\n"), "not a JSON array");

        /* A directory that does not exist: nothing can be reached. */
        const char *none[] = { getenv("CUBECTL_BIN"), "list", "--dir", "/nonexistent/cube", NULL };
        run_program(o, NULL, NULL, none);
        ck_assert_out(o, o->status == 3 && strstr(o->err, "/nonexistent/cube"),
                      "list of a missing directory exited %d", o->status);
        cube_disconnect(c);
        close(hung_fd);
        unlink(stale);
        unlink(hung);
        test_group_stop(&g);
        free(o);
}
END_TEST

START_TEST(cubectl_selftest_passes_and_names_the_step_that_fails)
{
        static const char *const selftest[] = { "selftest", NULL };
        static const char *const json_selftest[] = { "--json", "selftest", NULL };
        static const char *const args[] = { "--enable-fault-injection", NULL };
        output *o = calloc(1, sizeof(*o));
        char line[512];
        daemon_proc p;
        cube_client *c;

        proc_init(&p);
        start_daemon(&p, args, NULL);
        cubectl(o, p.socket, selftest);
        ck_assert_out(o, o->status == 0 && strstr(o->out, "selftest passed"),
                      "selftest exited %d", o->status);
        const char *const steps[] = { "status", "register", "write-input", "launch",
                                      "check-output", "round-trip-1 ", "round-trip-4096 ",
                                      "round-trip-1048576 " };
        for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
                char want[64];
                snprintf(want, sizeof(want), "  %s", steps[i]);
                ck_assert_out(o, line_with(o->out, want, line, sizeof(line)) &&
                              strncmp(line, "PASS", 4) == 0 && strstr(line, " ms"),
                              "step %s did not pass", steps[i]);
        }
        cubectl(o, p.socket, json_selftest);
        ck_assert_out(o, o->status == 0 && strncmp(o->out, "{\"passed\":true,\"steps\":[", 24) == 0,
                      "selftest --json exited %d", o->status);

        /* The next launch fails: the launch step says so, with the cause. */
        ck_ok(cube_connect(p.socket, "injector", &c));
        ck_ok(cube_debug_inject(c, CUBE_FAULT_LAUNCH, CUBE_LAUNCH_UNKNOWN, "injected by the test",
                                0));
        cubectl(o, p.socket, selftest);
        ck_assert_out(o, o->status == 1, "selftest with a failing launch exited %d", o->status);
        ck_assert_out(o, line_with(o->out, "  launch ", line, sizeof(line)) &&
                      strncmp(line, "FAIL", 4) == 0 && strstr(line, "injected by the test"),
                      "the launch step is not the failing one");
        ck_assert_out(o, line_with(o->out, "  check-output", line, sizeof(line)) &&
                      strncmp(line, "SKIP", 4) == 0, "the check after it is not skipped");
        ck_assert_out(o, strstr(o->out, "selftest FAILED at launch"), "no verdict");
        ck_assert_out(o, line_with(o->out, "  round-trip-4096 ", line, sizeof(line)) &&
                      strncmp(line, "PASS", 4) == 0, "copies fail with the launch");

        ck_ok(cube_debug_inject(c, CUBE_FAULT_LAUNCH, CUBE_LAUNCH_UNKNOWN, "injected again", 0));
        cubectl(o, p.socket, json_selftest);
        ck_assert_out(o, o->status == 1 && strstr(o->out, "{\"passed\":false,") &&
                      strstr(o->out, "{\"step\":\"launch\",\"result\":\"fail\","),
                      "selftest --json with a failing launch exited %d", o->status);
        cube_disconnect(c);
        ck_assert_int_eq(proc_stop(&p, 10000), 0);
        proc_done(&p);
        free(o);
}
END_TEST

/* A client launching until told to stop, for top to watch. */
typedef struct launcher {
        cube_client *c;
        atomic_bool stop;
        uint64_t kernel;
        cube_handle in, out;
        unsigned long launches;
} launcher;

static void *launch_loop(void *arg)
{
        launcher *l = arg;
        cube_handle bufs[2] = { l->in, l->out };
        cube_info *info = cube_info_new();

        cube_info_buffer_len(info, 1024);
        cube_info_buffer_len(info, 1024);
        while (!atomic_load(&l->stop)) {
                cube_error *e = cube_launch_kernel(l->c, &(cube_launch) {
                        .kernel = l->kernel, .cube_count = { 4, 1, 1 },
                        .cube_dim = { 256, 1, 1 }, .buffers = bufs, .io = test_affine_io,
                        .n_buffers = 2, .info = info });
                cube_error_free(e);
                cube_error_free(cube_sync(l->c, &l->out, 1));
                l->launches++;
        }
        cube_info_free(info);
        return NULL;
}

/* The launcher's row in a top --json frame: its launch rate, or -1. */
static double launcher_rate(const char *frame, uint64_t id)
{
        char key[64];
        const char *at, *rate;

        snprintf(key, sizeof(key), "{\"id\":%" PRIu64 ",\"name\":\"launcher\"", id);
        if (!(at = strstr(frame, key)) || !(rate = strstr(at, "\"launches_per_second\":")))
                return -1;
        return strtod(rate + strlen("\"launches_per_second\":"), NULL);
}

START_TEST(cubectl_top_shows_a_sessions_launch_rate)
{
        static const char *const top[] = { "top", "--interval", "0.5", "--count", "2", NULL };
        static const char *const json_top[] = { "--json", "top", "--interval", "0.5", "--count",
                                                "2", NULL };
        output *o = calloc(1, sizeof(*o));
        uint32_t data[1024] = {0};
        launcher l = {0};
        daemon_proc p;
        pthread_t t;
        char line[512];

        proc_init(&p);
        start_daemon(&p, NULL, NULL);
        l.c = test_connect(p.socket, "launcher");
        l.kernel = test_kernel(l.c, test_affine_source, "affine");
        ck_ok(cube_create(l.c, data, sizeof(data), &l.in));
        ck_ok(cube_empty(l.c, sizeof(data), &l.out));
        /* Compiled first, so that the launches top sees are not one slow one. */
        test_launch_u32(l.c, (cube_launch) { .kernel = l.kernel, .cube_count = { 4, 1, 1 },
                                             .cube_dim = { 256, 1, 1 },
                                             .buffers = (cube_handle[]) { l.in, l.out },
                                             .io = test_affine_io, .n_buffers = 2 }, NULL, 0);
        ck_ok(cube_sync(l.c, &l.out, 1));
        ck_assert_int_eq(pthread_create(&t, NULL, launch_loop, &l), 0);

        cubectl(o, p.socket, json_top);
        ck_assert_out(o, o->status == 0, "top --json exited %d", o->status);
        const char *second = strstr(o->out, "{\"frame\":2,");
        ck_assert_out(o, strncmp(o->out, "{\"frame\":1,", 11) == 0 && second &&
                      !strstr(o->out, "{\"frame\":3,"), "not two frames");
        ck_assert_out(o, launcher_rate(o->out, cube_client_session(l.c)) > 0 &&
                      launcher_rate(second, cube_client_session(l.c)) > 0,
                      "the launcher's rate is not above zero in both frames");
        ck_assert_out(o, strstr(second, "\"self\":true"), "top's own session is not marked");

        /* As text, not a terminal: two plain frames, no escape sequences. */
        cubectl(o, p.socket, top);
        ck_assert_out(o, o->status == 0, "top exited %d", o->status);
        ck_assert_out(o, !strchr(o->out, '\033'), "escape sequences on a pipe");
        ck_assert_out(o, strstr(o->out, "frame 1 ") && strstr(o->out, "frame 2 ") &&
                      !strstr(o->out, "frame 3 "), "not two frames");
        ck_assert_out(o, line_with(strstr(o->out, "frame 2 "), " launcher ", line, sizeof(line)),
                      "no launcher row in frame 2");
        double rate = -1;
        sscanf(line + 24, "%lf", &rate);
        ck_assert_out(o, rate > 0, "the launcher's launches per second read %f: %s", rate, line);

        atomic_store(&l.stop, true);
        pthread_join(t, NULL);
        ck_assert_uint_gt(l.launches, 0);
        cube_disconnect(l.c);
        ck_assert_int_eq(proc_stop(&p, 10000), 0);
        proc_done(&p);
        free(o);
}
END_TEST

/* ------------------------------------------------------------------------
 * Who may act
 * ------------------------------------------------------------------------ */

/* Steps of the unprivileged child; its exit status names the one that failed. */
enum { NOBODY_OK, NOBODY_SETUID, NOBODY_CONNECT, NOBODY_KILL, NOBODY_DRAIN, NOBODY_SESSIONS };

static bool refused_as_not_owner(cube_error *e)
{
        bool ok = e && cube_error_kind_of(e) == CUBE_SERVER_VALIDATION &&
                  strstr(cube_error_message(e), "for the daemon's own user and root");

        if (!ok)
                dprintf(2, "not refused as expected: %s\n", e ? cube_error_message(e) : "ok");
        cube_error_free(e);
        return ok;
}

/* Runs as nobody in a child; never returns. */
static _Noreturn void as_nobody(const char *socket, uint64_t victim)
{
        cube_session_info *v;
        cube_client *c;
        cube_error *e;
        size_t n;

        if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0 ||
            geteuid() != 65534)
                _exit(NOBODY_SETUID);
        if ((e = cube_connect(socket, "nobody", &c))) {
                dprintf(2, "connect as nobody: %s\n", cube_error_message(e));
                _exit(NOBODY_CONNECT);
        }
        if (!refused_as_not_owner(cube_daemon_kill_session(c, victim)))
                _exit(NOBODY_KILL);
        if (!refused_as_not_owner(cube_daemon_drain(c)))
                _exit(NOBODY_DRAIN);
        /* Only its own user's session is listed to it (PROTOCOL.md 5.14a). */
        if ((e = cube_daemon_sessions(c, &v, &n)) || n != 1) {
                dprintf(2, "sessions as nobody: %s (%zu)\n", e ? cube_error_message(e) : "ok", n);
                _exit(NOBODY_SESSIONS);
        }
        free(v);
        cube_disconnect(c);
        _exit(NOBODY_OK);
}

START_TEST(only_the_owner_and_root_may_act)
{
        static const char *const what[] = { "ok", "setuid", "connect", "kill_session",
                                            "drain", "sessions" };
        daemon_proc p;
        cube_client *c, *again;
        int status;
        pid_t child;

        /* Acting needs a peer of another uid, which only root can become. */
        if (geteuid() != 0) {
                fprintf(stderr, "not root: the check of other users is skipped\n");
                return;
        }
        proc_init(&p);
        start_daemon(&p, NULL, NULL);
        ck_assert_int_eq(chmod(run_dir, 0755), 0);
        ck_assert_int_eq(chmod(p.dir, 0755), 0);
        ck_assert_int_eq(chmod(p.socket, 0666), 0);
        ck_ok(cube_connect(p.socket, "owner", &c));

        child = fork();
        ck_assert_int_ge(child, 0);
        if (child == 0)
                as_nobody(p.socket, cube_client_session(c));
        ck_assert_int_eq(waitpid(child, &status, 0), child);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == NOBODY_OK,
                      "as nobody, %s failed (status %d)",
                      WIFEXITED(status) && WEXITSTATUS(status) < 6 ?
                      what[WEXITSTATUS(status)] : "the child", status);
        ck_assert(test_file_holds(p.log, "uid 65534"));

        /* Neither took effect. */
        round_trip(c, 1000, 7);
        ck_ok(cube_connect(p.socket, "again", &again));
        cube_disconnect(again);
        cube_disconnect(c);
        ck_assert_int_eq(proc_stop(&p, test_scaled_ms(10000)), 0);
        proc_done(&p);
}
END_TEST

/* ------------------------------------------------------------------------
 * The socket's path
 * ------------------------------------------------------------------------ */

/* A directory another user may write, sticky or not, is no place for the
 * socket: cubed refuses to start there, naming the directory. */
START_TEST(a_socket_directory_others_may_write_is_refused)
{
        static const mode_t modes[] = { 0777, 01777, 0775 };
        const char *bin = getenv("CUBED_BIN");

        for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
                daemon_proc p;
                output *o = calloc(1, sizeof(*o));
                char open_dir[128], sock[160];

                proc_init(&p);
                snprintf(open_dir, sizeof(open_dir), "%s/open", p.dir);
                ck_assert_int_eq(mkdir(open_dir, 0700), 0);
                ck_assert_int_eq(chmod(open_dir, modes[i]), 0);
                snprintf(sock, sizeof(sock), "%s/s", open_dir);
                const char *argv[] = { bin, "--socket", sock, "--cache-dir", p.cache, NULL };
                run_program(o, NULL, NULL, argv);
                ck_assert_out(o, o->status != 0, "cubed served a socket in a %04o directory",
                              (unsigned) modes[i]);
                ck_assert_out(o, strstr(o->err, open_dir) && strstr(o->err, "another user"),
                              "the refusal does not name %s", open_dir);
                ck_assert(!path_exists(sock));
                ck_assert_int_eq(rmdir(open_dir), 0);
                proc_done(&p);
                free(o);
        }
}
END_TEST

/* A second daemon on a live socket says whose it is. */
START_TEST(a_socket_in_use_names_its_owner)
{
        daemon_proc p;
        output *o = calloc(1, sizeof(*o));
        const char *bin = getenv("CUBED_BIN");
        char pid[32];

        proc_init(&p);
        start_daemon(&p, NULL, NULL);
        const char *argv[] = { bin, "--socket", p.socket, "--cache-dir", p.cache, NULL };
        run_program(o, NULL, NULL, argv);
        snprintf(pid, sizeof(pid), "pid %d", (int) p.pid);
        ck_assert_out(o, o->status != 0 && strstr(o->err, pid),
                      "cubed exited %d without naming %s", o->status, pid);
        ck_assert_int_eq(proc_stop(&p, test_scaled_ms(10000)), 0);
        proc_done(&p);
        free(o);
}
END_TEST

/* ------------------------------------------------------------------------
 * Identity under the unit's own namespaces
 * ------------------------------------------------------------------------ */

/* The value of a unit setting (the last one wins), or "" when absent. */
static void unit_setting(const char *unit_text, const char *key, char *val, size_t cap)
{
        size_t n = strlen(key);

        val[0] = '\0';
        for (const char *p = unit_text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
                if (strncmp(p, key, n) == 0 && p[n] == '=')
                        snprintf(val, cap, "%.*s", (int) strcspn(p + n + 1, "\n"), p + n + 1);
}

/* cubed started the way the shipped unit's namespace settings would start
 * it: in a user namespace when PrivateUsers= says so (only root mapped, as
 * systemd maps only root and the service's user), with /proc mounted
 * hidepid=invisible when ProtectProc=invisible, without a network when
 * PrivateNetwork=yes. */
static void start_like_the_unit(daemon_proc *p, const char *const *extra)
{
        const char *tmpl = getenv("CUBE_UNIT_TEMPLATE"), *bin = getenv("CUBED_BIN");
        char text[16384], users[32], proc[32], net[32], cmd[1024];
        const char *argv[8];
        FILE *f = fopen(tmpl, "r");
        size_t n;
        int k = 0, len;

        ck_assert_msg(f, "cannot read %s", tmpl);
        n = fread(text, 1, sizeof(text) - 1, f);
        fclose(f);
        text[n] = '\0';
        unit_setting(text, "PrivateUsers", users, sizeof(users));
        unit_setting(text, "ProtectProc", proc, sizeof(proc));
        unit_setting(text, "PrivateNetwork", net, sizeof(net));
        len = snprintf(cmd, sizeof(cmd), "%s%sexec %s%s --socket %s --cache-dir %s "
                       "--log-level info",
                       strcmp(proc, "invisible") == 0 ?
                       "mount -t proc -o hidepid=invisible proc /proc || exit 9; " : "",
                       "", strcmp(users, "yes") == 0 ? "unshare --user --map-current-user " : "",
                       bin, p->socket, p->cache);
        for (const char *const *a = extra; a && *a; a++)
                len += snprintf(cmd + len, sizeof(cmd) - (size_t) len, " %s", *a);
        argv[k++] = "unshare";
        argv[k++] = "--mount";
        argv[k++] = "--propagation=private";
        if (strcmp(net, "yes") == 0)
                argv[k++] = "--net";
        argv[k++] = "sh";
        argv[k++] = "-c";
        argv[k++] = cmd;
        argv[k] = NULL;
        fprintf(stderr, "PrivateUsers=%s ProtectProc=%s PrivateNetwork=%s: %s\n", users, proc,
                net, cmd);
        proc_exec(p, argv, NULL);
        wait_ready(p, 0);
}

/* cubectl run as another user through setpriv: uid, gid, and the
 * supplementary groups (NULL: none). */
static void cubectl_as(output *o, const char *socket, unsigned uid, const char *groups,
                       const char *const *args)
{
        char reuid[32], regid[32], grp[64];
        const char *argv[24];
        int n = 0;

        snprintf(reuid, sizeof(reuid), "--reuid=%u", uid);
        snprintf(regid, sizeof(regid), "--regid=%u", uid);
        snprintf(grp, sizeof(grp), "--groups=%s", groups ? groups : "");
        argv[n++] = "setpriv";
        argv[n++] = reuid;
        argv[n++] = regid;
        argv[n++] = groups ? grp : "--clear-groups";
        argv[n++] = "--";
        argv[n++] = getenv("CUBECTL_BIN");
        argv[n++] = "--socket";
        argv[n++] = socket;
        for (const char *const *a = args; *a && n < 23; a++)
                argv[n++] = *a;
        argv[n] = NULL;
        run_program(o, NULL, NULL, argv);
}

/* A session of uid held open by a child until the returned pipe is closed;
 * the child exits 0 when it could connect. */
static pid_t hold_session_as(const char *socket, unsigned uid, int *ret_release)
{
        int ready[2], release[2];
        char byte;
        pid_t pid;

        ck_assert_int_eq(pipe(ready), 0);
        ck_assert_int_eq(pipe(release), 0);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
                cube_client *c;
                cube_error *e;
                close(ready[0]);
                close(release[1]);
                if (setgroups(0, NULL) < 0 || setgid(uid) < 0 || setuid(uid) < 0)
                        _exit(2);
                if ((e = cube_connect(socket, "holder", &c))) {
                        dprintf(2, "holder: %s\n", cube_error_message(e));
                        _exit(3);
                }
                (void) !write(ready[1], "x", 1);
                (void) !read(release[0], &byte, 1);
                cube_disconnect(c);
                _exit(0);
        }
        close(ready[1]);
        close(release[0]);
        ck_assert_msg(read(ready[0], &byte, 1) == 1, "the holder of uid %u could not connect",
                      uid);
        close(ready[0]);
        *ret_release = release[1];
        return pid;
}

static void release_session(pid_t pid, int release)
{
        int status;

        close(release);
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* The unit's namespaces must leave the daemon seeing who its peers are:
 * their uids (in cubectl sessions and the log), allow-uids, allow-groups
 * through supplementary groups, and per-uid session quotas. */
START_TEST(identity_and_access_under_the_units_namespaces)
{
        static const char *const extra[] = { "--allow-uids", "4242,4444", "--allow-groups",
                                             "4545", "--max-sessions-per-uid", "1", NULL };
        static const char *const json_sessions[] = { "--json", "sessions", NULL };
        static const char *const status[] = { "status", NULL };
        output *o = calloc(1, sizeof(*o));
        daemon_proc p;
        int release;
        pid_t holder;

        if (geteuid() != 0 || system("command -v setpriv >/dev/null && "
                                     "command -v unshare >/dev/null") != 0) {
                fprintf(stderr, "not root, or no setpriv and unshare: skipped\n");
                free(o);
                return;
        }
        proc_init(&p);
        ck_assert_int_eq(chmod(run_dir, 0755), 0);
        ck_assert_int_eq(chmod(p.dir, 0755), 0);
        start_like_the_unit(&p, extra);
        ck_assert_int_eq(chmod(p.socket, 0666), 0);

        /* The peer's uid as the daemon sees it. */
        cubectl_as(o, p.socket, 4242, NULL, json_sessions);
        ck_assert_out(o, o->status == 0, "uid 4242 (in allow-uids) exited %d", o->status);
        ck_assert_out(o, strstr(o->out, "\"uid\":4242,\"name\":\"cubectl\""),
                      "the daemon does not see uid 4242");
        ck_assert_out(o, !strstr(o->out, "65534"), "a peer reads as the overflow uid");
        ck_assert_msg(test_file_holds(p.log, "uid 4242"), "the log does not name uid 4242");

        /* Not listed, and in no listed group: refused. */
        cubectl_as(o, p.socket, 4343, NULL, status);
        ck_assert_out(o, o->status == 3 && strstr(o->err, "uid 4343 may not use this daemon"),
                      "uid 4343 was not refused as unlisted (exit %d)", o->status);
        /* Not listed, but a supplementary group is. */
        cubectl_as(o, p.socket, 4343, "4545", status);
        ck_assert_out(o, o->status == 0, "uid 4343 in group 4545 exited %d", o->status);

        /* One session per uid: 4242's second is refused, 4444's first is not. */
        holder = hold_session_as(p.socket, 4242, &release);
        cubectl_as(o, p.socket, 4242, NULL, status);
        ck_assert_out(o, o->status == 3 && strstr(o->err, "max-sessions-per-uid"),
                      "a second session of uid 4242 was not refused (exit %d)", o->status);
        cubectl_as(o, p.socket, 4444, NULL, status);
        ck_assert_out(o, o->status == 0, "uid 4444 counted against uid 4242 (exit %d)",
                      o->status);
        release_session(holder, release);

        ck_assert_int_eq(proc_stop(&p, test_scaled_ms(10000)), 0);
        proc_done(&p);
        free(o);
}
END_TEST

/* Shows what failed tests left in the run's directory (their daemons died
 * with them), then removes it unless $CUBE_TEST_LEAVE. */
static void show_leftovers(void)
{
        DIR *d = opendir(run_dir);
        struct dirent *de;
        char path[192], cmd[96];

        while (d && (de = readdir(d))) {
                if (de->d_name[0] == '.')
                        continue;
                fprintf(stderr, "==== left by a failed test: %s/%s ====\n", run_dir, de->d_name);
                snprintf(path, sizeof(path), "%s/%.32s/log", run_dir, de->d_name);
                dump_file("daemon log", path);
                snprintf(path, sizeof(path), "%s/%.32s/notifications", run_dir, de->d_name);
                dump_file("notifications", path);
        }
        if (d)
                closedir(d);
        if (getenv("CUBE_TEST_LEAVE")) {
                fprintf(stderr, "left in %s\n", run_dir);
                return;
        }
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", run_dir);
        if (system(cmd) != 0)
                fprintf(stderr, "could not remove %s\n", run_dir);
}

int main(void)
{
        Suite *s = suite_create("operations");
        TCase *units = tcase_create("units"), *life = tcase_create("lifecycle");
        TCase *config = tcase_create("config"), *poison = tcase_create("poison");
        TCase *ctl = tcase_create("cubectl"), *admin = tcase_create("admin");
        TCase *all[] = { units, life, config, poison, ctl, admin };
        SRunner *sr;
        int failed;

        for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
                tcase_set_timeout(all[i], 60);
                suite_add_tcase(s, all[i]);
        }
        tcase_add_test(units, the_units_verify_without_a_word);
        tcase_add_test(units, the_service_is_hardened);
        tcase_add_test(life, socket_activation);
        tcase_add_test(life, notifications_from_start_to_stop);
        tcase_add_test(life, the_watchdog_is_fed_only_when_asked);
        tcase_add_test(config, reload_takes_a_good_file_and_keeps_the_running_one_on_a_bad);
        tcase_add_test(config, the_command_line_wins_over_the_file_across_reloads);
        tcase_add_test(config, a_refused_reload_is_reported);
        tcase_add_test(config, a_bad_configuration_file_stops_the_start);
        tcase_add_test(config, config_if_exists_reads_the_file_once_it_exists);
        tcase_add_test(config, a_socket_directory_others_may_write_is_refused);
        tcase_add_test(config, a_socket_in_use_names_its_owner);
        tcase_add_test(poison, poison_policy_exit_ends_with_status_3);
        tcase_add_test(poison, the_default_poison_policy_follows_how_cubed_was_started);
        tcase_add_test(poison, poison_policy_exit_does_not_wait_for_a_silent_session);
        tcase_add_test(poison, poison_policy_reinit_serves_a_new_device);
        tcase_add_test(poison, a_poisoned_device_is_reported_during_the_grace);
        tcase_add_test(poison, a_tenant_that_poisons_again_and_again_is_refused);
        tcase_add_test(ctl, cubectl_shows_sessions_memory_streams_and_metrics);
        tcase_add_test(ctl, cubectl_kernels_shows_the_artifacts_on_disk_after_the_sessions_end);
        tcase_add_test(ctl, cubectl_kill_session);
        tcase_add_test(ctl, metrics_counters_never_go_down);
        tcase_add_test(ctl, post_mortem_of_an_ended_session);
        tcase_add_test(ctl, hostile_session_names);
        tcase_add_test(ctl, cubectl_drain);
        tcase_add_test(ctl, cubectl_drain_with_a_deadline);
        tcase_add_test(ctl, cubectl_without_a_daemon_exits_3);
        tcase_add_test(ctl, cubectl_list_finds_every_instance_and_marks_a_stale_socket);
        tcase_add_test(ctl, cubectl_selftest_passes_and_names_the_step_that_fails);
        tcase_add_test(ctl, cubectl_top_shows_a_sessions_launch_rate);
        tcase_add_test(admin, only_the_owner_and_root_may_act);
        tcase_add_test(admin, identity_and_access_under_the_units_namespaces);

        strcpy(run_dir, "/tmp/cube-ops-XXXXXX");
        if (!mkdtemp(run_dir)) {
                perror("mkdtemp");
                return 1;
        }
        sr = srunner_create(s);
        srunner_run_all(sr, CK_ENV);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        show_leftovers();
        return failed ? 1 : 0;
}

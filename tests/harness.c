/*
 * harness.c - the real daemon, started and stopped the way systemd would:
 * readiness comes as READY=1 on a NOTIFY_SOCKET, and SIGTERM must end it
 * with status 0 and its socket file gone.
 *
 * Every helper more than one suite uses lives here, once (harness.h groups
 * them by subject), which is why the file is long.
 */
#include <check.h>
#include <dirent.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "errors.h"
#include "prescan.h"
#include "wire.h"

static long now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int test_timeout_multiplier(void)
{
        const char *m = getenv("CUBE_TEST_TIMEOUT_MULT");
        int v = m ? atoi(m) : 1;
        return v > 0 ? v : 1;
}

void test_daemon_dump_log(const test_daemon *d)
{
        char line[512];
        FILE *f = fopen(d->log, "r");

        if (!f)
                return;
        fprintf(stderr, "---- cubed log (%s) ----\n", d->log);
        while (fgets(line, sizeof(line), f))
                fputs(line, stderr);
        fprintf(stderr, "---- end of log ----\n");
        fclose(f);
}

void test_close_passed_fds(struct msghdr *mh)
{
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm))
                if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
                        int *fds = (int *) CMSG_DATA(cm);
                        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                        for (size_t i = 0; i < k; i++)
                                close(fds[i]);
                }
}

/* Every directory made here for a daemon or a group, with the daemon in it,
 * until it is stopped. A test that fails is ended by Check with _exit, which
 * runs no handler, and some tests kill their daemon themselves and never
 * stop it; left alone, each would leave its directory in /tmp for good. So
 * the list is shared by the runner and the processes it forks for tests:
 * each process, when it exits, kills and removes what it made and left, and
 * the runner, last, removes whatever its tests left (their daemons were
 * killed with them: PR_SET_PDEATHSIG). */
#define LEFTOVERS 256
static struct leftover {
        pid_t maker, daemon;
        char dir[64];
} *leftovers;
static pid_t runner;

static void remove_dir(const char *dir)
{
        char cmd[128];

        if (getenv("CUBE_TEST_LEAVE"))
                return;
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0)
                fprintf(stderr, "could not remove %s\n", dir);
}

static void clean_up_leftovers(void)
{
        for (size_t i = 0; leftovers && i < LEFTOVERS; i++) {
                struct leftover *l = &leftovers[i];
                pid_t maker = __atomic_load_n(&l->maker, __ATOMIC_ACQUIRE);
                if (maker <= 0 || (maker != getpid() && getpid() != runner))
                        continue;
                /* Only a child not yet reaped is killed: its pid cannot have
                 * been reused. */
                if (maker == getpid() && l->daemon > 0 &&
                    waitpid(l->daemon, NULL, WNOHANG) == 0) {
                        kill(l->daemon, SIGKILL);
                        waitpid(l->daemon, NULL, 0);
                }
                remove_dir(l->dir);
                __atomic_store_n(&l->maker, 0, __ATOMIC_RELEASE);
        }
}

__attribute__((constructor)) static void leftovers_init(void)
{
        void *m = mmap(NULL, LEFTOVERS * sizeof(*leftovers), PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

        if (m == MAP_FAILED)
                return;
        leftovers = m;
        runner = getpid();
        atexit(clean_up_leftovers);
}

static struct leftover *leftover_of(const char *dir)
{
        for (size_t i = 0; leftovers && i < LEFTOVERS; i++)
                if (__atomic_load_n(&leftovers[i].maker, __ATOMIC_ACQUIRE) != 0 &&
                    strcmp(leftovers[i].dir, dir) == 0)
                        return &leftovers[i];
        return NULL;
}

/* Lists dir; its entry, or NULL when the list is full or missing. */
static struct leftover *remember(const char *dir)
{
        for (size_t i = 0; leftovers && i < LEFTOVERS; i++) {
                pid_t free_slot = 0;
                if (__atomic_compare_exchange_n(&leftovers[i].maker, &free_slot, -1, false,
                                                __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
                        leftovers[i].daemon = 0;
                        snprintf(leftovers[i].dir, sizeof(leftovers[i].dir), "%s", dir);
                        __atomic_store_n(&leftovers[i].maker, getpid(), __ATOMIC_RELEASE);
                        return &leftovers[i];
                }
        }
        return NULL;
}

/* The directory is removed and no longer listed. */
static void forget(const char *dir)
{
        struct leftover *l = leftover_of(dir);

        remove_dir(dir);
        if (l)
                __atomic_store_n(&l->maker, 0, __ATOMIC_RELEASE);
}

/* Starts the daemon; with owner not (uid_t) -1, its directory and notify
 * socket are owner's, for a daemon that runs as owner. */
static int start(test_daemon *d, const char *const *wrapper, const char *const *extra_args,
                 uid_t owner)
{
        const char *bin = getenv("CUBED_BIN");
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        char notify[96];
        const char *argv[64];
        int n = 0, fd;
        long deadline;

        memset(d, 0, sizeof(*d));
        if (!bin) {
                fprintf(stderr, "CUBED_BIN is not set\n");
                return -1;
        }
        strcpy(d->dir, "/tmp/cube-test-XXXXXX");
        if (!mkdtemp(d->dir))
                return -1;
        struct leftover *listed = remember(d->dir);
        snprintf(d->socket, sizeof(d->socket), "%s/s", d->dir);
        snprintf(d->log, sizeof(d->log), "%s/log", d->dir);
        snprintf(notify, sizeof(notify), "%s/notify", d->dir);
        snprintf(d->cache, sizeof(d->cache), "%s/cache", d->dir);

        fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        strcpy(sa.sun_path, notify);
        if (fd < 0 || bind(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
                return -1;
        if (owner != (uid_t) -1 && (chown(d->dir, owner, owner) < 0 ||
                                    chown(notify, owner, owner) < 0)) {
                close(fd);
                return -1;
        }

        for (const char *const *w = wrapper; w && *w; w++)
                argv[n++] = *w;
        argv[n++] = bin;
        argv[n++] = "--socket";
        argv[n++] = d->socket;
        argv[n++] = "--log-level";
        argv[n++] = "info";
        argv[n++] = "--cache-dir";
        argv[n++] = d->cache;
        /* CUBE_TEST_BACKEND=cuda runs the very same suites on a GPU
         * (CUBE_TEST_DEVICE picks it); a test's own --backend wins. */
        if (getenv("CUBE_TEST_BACKEND") && *getenv("CUBE_TEST_BACKEND")) {
                argv[n++] = "--backend";
                argv[n++] = getenv("CUBE_TEST_BACKEND");
                argv[n++] = "--device";
                argv[n++] = getenv("CUBE_TEST_DEVICE") ? getenv("CUBE_TEST_DEVICE") : "0";
        }
        /* Kernels here run seconds at most; a loaded test machine must not
         * turn one into a timeout. Tests of the timeout pass their own. */
        argv[n++] = "--kernel-timeout";
        argv[n++] = "30";
        /* A checked launch cannot fault the device; tests that make it fault
         * do it with unchecked launches (test_unchecked), which the test's
         * own user may ask for. A test of the refusal passes its own list. */
        static char self_uid[16];
        snprintf(self_uid, sizeof(self_uid), "%u", (unsigned) getuid());
        argv[n++] = "--unchecked-uids";
        argv[n++] = self_uid;
        for (const char *const *a = extra_args; a && *a && n < 62; a++)
                argv[n++] = *a;
        argv[n] = NULL;

        d->pid = fork();
        if (d->pid < 0)
                return -1;
        if (d->pid > 0 && listed)
                listed->daemon = d->pid;
        if (d->pid == 0) {
                int log = open(d->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
                /* A test that fails an assertion leaves no daemon behind
                 * (on a GPU, one would keep a kernel spinning). */
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (log >= 0) {
                        dup2(log, 2);
                        dup2(log, 1);
                }
                setenv("NOTIFY_SOCKET", notify, 1);
                execvp(argv[0], (char **) argv);
                fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
                _exit(127);
        }

        deadline = now_ms() + 10000L * test_timeout_multiplier();
        for (;;) {
                struct pollfd p = { .fd = fd, .events = POLLIN };
                long left = deadline - now_ms();
                int status;

                if (left <= 0 || waitpid(d->pid, &status, WNOHANG) == d->pid) {
                        fprintf(stderr, "cubed did not become ready\n");
                        test_daemon_dump_log(d);
                        close(fd);
                        if (left <= 0)
                                kill(d->pid, SIGKILL), waitpid(d->pid, NULL, 0);
                        d->pid = 0;
                        return -1;
                }
                if (poll(&p, 1, (int) (left < 100 ? left : 100)) <= 0)
                        continue;

                char buf[512];
                char ctl[CMSG_SPACE(sizeof(int) * 8)];
                struct iovec iov = { buf, sizeof(buf) - 1 };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                                     .msg_control = ctl, .msg_controllen = sizeof(ctl) };
                ssize_t r = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
                if (r <= 0)
                        continue;
                test_close_passed_fds(&mh);
                buf[r] = '\0';
                if (strstr(buf, "READY=1"))
                        break;
        }
        close(fd);
        return 0;
}

int test_daemon_start_wrapped(test_daemon *d, const char *const *wrapper,
                              const char *const *extra_args)
{
        return start(d, wrapper, extra_args, (uid_t) -1);
}

int test_daemon_start_as(test_daemon *d, uid_t uid, const char *const *extra_args)
{
        char reuid[32], regid[32];
        const char *wrapper[] = { "setpriv", reuid, regid, "--clear-groups", NULL };

        snprintf(reuid, sizeof(reuid), "--reuid=%u", (unsigned) uid);
        snprintf(regid, sizeof(regid), "--regid=%u", (unsigned) uid);
        return start(d, wrapper, extra_args, uid);
}

int test_daemon_start(test_daemon *d, const char *const *extra_args)
{
        const char *w = getenv("CUBE_TEST_WRAPPER");
        const char *wrapper[16] = {0};
        char *copy = NULL;

        if (w && *w) {
                int n = 0;
                copy = strdup(w);
                for (char *tok = strtok(copy, " "); tok && n < 15; tok = strtok(NULL, " "))
                        wrapper[n++] = tok;
        }
        int r = test_daemon_start_wrapped(d, wrapper, extra_args);
        free(copy);
        return r;
}

int test_group_start(test_group *g, int n, const char *const *extra_args)
{
        memset(g, 0, sizeof(*g));
        strcpy(g->dir, "/tmp/cube-group-XXXXXX");
        if (n > 8 || !mkdtemp(g->dir))
                return -1;
        remember(g->dir);
        for (int i = 0; i < n; i++) {
                char sock[96];
                const char *args[40] = { "--socket", sock };
                int k = 2;
                snprintf(sock, sizeof(sock), "%s/cpu%d.sock", g->dir, i);
                for (const char *const *a = extra_args; a && *a && k < 39; a++)
                        args[k++] = *a;
                args[k] = NULL;
                if (test_daemon_start(&g->d[i], args) < 0) {
                        g->n = i;
                        test_group_stop(g);
                        return -1;
                }
                snprintf(g->d[i].socket, sizeof(g->d[i].socket), "%s", sock);
                g->n = i + 1;
        }
        return 0;
}

void test_group_stop(test_group *g)
{
        for (int i = 0; i < g->n; i++)
                if (g->d[i].pid > 0)
                        test_daemon_stop(&g->d[i], 10000);
        forget(g->dir);
}

void test_group_stop_clean(test_group *g)
{
        for (int i = 0; i < g->n; i++)
                if (g->d[i].pid > 0) {
                        ck_assert_msg(test_daemon_stop(&g->d[i], 10000) == 0, "cpu%d did not "
                                      "exit cleanly", i);
                        g->d[i].pid = 0;
                }
        test_group_stop(g);
}

test_daemon D;

void test_start_default(void)
{
        ck_assert_int_eq(test_daemon_start(&D, NULL), 0);
}

void test_start_with_faults(void)
{
        static const char *const args[] = { "--enable-fault-injection", NULL };

        ck_assert_int_eq(test_daemon_start(&D, args), 0);
}

void test_stop_clean(void)
{
        ck_assert_int_eq(test_daemon_stop(&D, 10000), 0);
        ck_assert_msg(!test_daemon_socket_exists(&D), "the socket file was left behind");
}

bool test_daemon_socket_exists(const test_daemon *d)
{
        struct stat st;
        return lstat(d->socket, &st) == 0;
}

int test_daemon_stop(test_daemon *d, int timeout_ms)
{
        long deadline;
        int status = 0, result = -1;

        if (d->pid <= 0) {
                /* Killed by the test, or never started: the directory goes. */
                if (leftover_of(d->dir))
                        forget(d->dir);
                return -1;
        }
        kill(d->pid, SIGTERM);
        deadline = now_ms() + (long) timeout_ms * test_timeout_multiplier();
        for (;;) {
                pid_t p = waitpid(d->pid, &status, WNOHANG);
                if (p == d->pid) {
                        if (WIFEXITED(status))
                                result = WEXITSTATUS(status);
                        break;
                }
                if (now_ms() > deadline) {
                        kill(d->pid, SIGKILL);
                        waitpid(d->pid, NULL, 0);
                        break;
                }
                usleep(2000);
        }
        d->pid = 0;
        if (result != 0)
                test_daemon_dump_log(d);
        forget(d->dir);
        return result;
}

int raw_connect(const char *path)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

        strncpy(sa.sun_path, path, sizeof(sa.sun_path) - 1);
        if (fd < 0 || connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
                if (fd >= 0)
                        close(fd);
                return -1;
        }
        return fd;
}

int raw_send(int fd, const void *buf, size_t len)
{
        const char *p = buf;

        while (len > 0) {
                ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w < 0)
                        return -1;
                p += w;
                len -= (size_t) w;
        }
        return 0;
}

int raw_send_sbuffer(int fd, msgpack_sbuffer *sb)
{
        return raw_send(fd, sb->data, sb->size);
}

/* Per-descriptor receive buffers: tests use few sockets at a time. */
static struct rbuf {
        int fd;
        char *p;
        size_t len, cap;
        int passed;             /* a descriptor that came along, or -1 */
} rbufs[32];

static struct rbuf *rbuf_of(int fd)
{
        for (int i = 0; i < 32; i++)
                if (rbufs[i].p && rbufs[i].fd == fd)
                        return &rbufs[i];
        for (int i = 0; i < 32; i++)
                if (!rbufs[i].p) {
                        rbufs[i].fd = fd;
                        rbufs[i].cap = 1 << 16;
                        rbufs[i].p = malloc(rbufs[i].cap);
                        rbufs[i].len = 0;
                        rbufs[i].passed = -1;
                        return &rbufs[i];
                }
        return NULL;
}

int raw_recv(int fd, msgpack_unpacked *up, int timeout_ms)
{
        struct rbuf *b = rbuf_of(fd);
        cube__limits lim;
        long deadline = now_ms() + (long) timeout_ms * test_timeout_multiplier();

        cube__limits_client_default(&lim);
        msgpack_unpacked_init(up);
        for (;;) {
                size_t mlen = 0, off = 0;
                if (b->len > 0 &&
                    cube__prescan((uint8_t *) b->p, b->len, &lim, &mlen) == CUBE__SCAN_COMPLETE) {
                        /* Decode from a copy so the buffer can be compacted. */
                        char *copy = malloc(mlen);
                        memcpy(copy, b->p, mlen);
                        memmove(b->p, b->p + mlen, b->len - mlen);
                        b->len -= mlen;
                        int r = msgpack_unpack_next(up, copy, mlen, &off) == MSGPACK_UNPACK_SUCCESS;
                        /* Keep the copy alive with the zone: strs and bins point into it. */
                        msgpack_zone_push_finalizer(up->zone, free, copy);
                        return r ? 1 : -1;
                }
                if (b->len == b->cap) {
                        b->cap *= 2;
                        b->p = realloc(b->p, b->cap);
                }
                struct pollfd p = { .fd = fd, .events = POLLIN };
                long left = deadline - now_ms();
                if (left <= 0 || poll(&p, 1, (int) left) <= 0)
                        return -1;
                char control[CMSG_SPACE(sizeof(int))];
                struct iovec iov = { b->p + b->len, b->cap - b->len };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                                     .msg_controllen = sizeof(control) };
                ssize_t r = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
                for (struct cmsghdr *cm = r > 0 ? CMSG_FIRSTHDR(&mh) : NULL; cm;
                     cm = CMSG_NXTHDR(&mh, cm))
                        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
                                if (b->passed >= 0)
                                        close(b->passed);
                                memcpy(&b->passed, CMSG_DATA(cm), sizeof(int));
                        }
                if (r == 0 || (r < 0 && errno == ECONNRESET)) {
                        if (b->passed >= 0)
                                close(b->passed);
                        free(b->p);
                        b->p = NULL;
                        return 0;
                }
                if (r < 0)
                        return -1;
                b->len += (size_t) r;
        }
}

bool raw_wait_closed(int fd, int timeout_ms)
{
        for (;;) {
                msgpack_unpacked up;
                int r = raw_recv(fd, &up, timeout_ms);
                msgpack_unpacked_destroy(&up);
                if (r == 0)
                        return true;
                if (r < 0)
                        return false;
        }
}

uint64_t raw_hello(int fd)
{
        uint64_t nonce = 0, session = 0;

        raw_greet(fd, &nonce, &session);
        return nonce;
}

void raw_greet(int fd, uint64_t *ret_nonce, uint64_t *ret_session)
{
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_unpacked up;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        msgpack_pack_array(&pk, 4);
        msgpack_pack_uint32(&pk, 0);
        msgpack_pack_uint32(&pk, 1);
        msgpack_pack_str(&pk, 5);
        msgpack_pack_str_body(&pk, "hello", 5);
        msgpack_pack_array(&pk, 2);
        msgpack_pack_uint32(&pk, CUBE_PROTOCOL_VERSION);
        msgpack_pack_nil(&pk);
        raw_send_sbuffer(fd, &sb);
        msgpack_sbuffer_destroy(&sb);
        if (raw_recv(fd, &up, 5000) == 1) {
                msgpack_object *o = &up.data;
                if (o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size == 4 &&
                    o->via.array.ptr[3].type == MSGPACK_OBJECT_MAP) {
                        msgpack_object_map *m = &o->via.array.ptr[3].via.map;
                        for (uint32_t i = 0; i < m->size; i++)
                                if (m->ptr[i].key.via.str.size == 5 &&
                                    memcmp(m->ptr[i].key.via.str.ptr, "nonce", 5) == 0)
                                        *ret_nonce = m->ptr[i].val.via.u64;
                                else if (m->ptr[i].key.via.str.size == 7 &&
                                         memcmp(m->ptr[i].key.via.str.ptr, "session", 7) == 0)
                                        *ret_session = m->ptr[i].val.via.u64;
                }
        }
        msgpack_unpacked_destroy(&up);
}

int raw_take_fd(int fd)
{
        struct rbuf *b = rbuf_of(fd);
        int passed = b ? b->passed : -1;

        if (b)
                b->passed = -1;
        return passed;
}

int raw_send_fd(int fd, const void *buf, size_t len, int passed)
{
        char control[CMSG_SPACE(sizeof(int))] = {0};
        struct iovec iov = { (void *) buf, len };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                             .msg_controllen = sizeof(control) };
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);

        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &passed, sizeof(int));
        return sendmsg(fd, &mh, MSG_NOSIGNAL) == (ssize_t) len ? 0 : -1;
}

void raw_send_request_u64(int fd, uint32_t msgid, const char *method, const uint64_t *v, size_t n)
{
        msgpack_sbuffer sb;
        msgpack_packer pk;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        cube__pack_request(&pk, msgid, method, (uint32_t) n);
        for (size_t i = 0; i < n; i++)
                msgpack_pack_uint64(&pk, v[i]);
        ck_assert_int_eq(raw_send_sbuffer(fd, &sb), 0);
        msgpack_sbuffer_destroy(&sb);
}

int raw_region(int fd, uint32_t msgid, uint64_t size, uint64_t *ret_id, cube_error **ret_error)
{
        msgpack_unpacked up;
        cube__envelope env;
        const char *why;
        int passed = -1;

        *ret_error = NULL;
        raw_send_request_u64(fd, msgid, "region", &size, 1);
        if (raw_recv(fd, &up, 5000) != 1)
                return -1;
        if (cube__envelope_parse(&up.data, &env, &why) == 0 && env.type == CUBE__MSG_RESPONSE &&
            env.msgid == msgid) {
                if (env.error && env.error->type != MSGPACK_OBJECT_NIL)
                        (void) cube__err_unpack(env.error, CUBE__FAMILY_SERVER, ret_error);
                else if (env.result && env.result->type == MSGPACK_OBJECT_ARRAY &&
                         env.result->via.array.size == 2 &&
                         (passed = raw_take_fd(fd)) >= 0)
                        *ret_id = env.result->via.array.ptr[0].via.u64;
        }
        msgpack_unpacked_destroy(&up);
        return passed;
}

long test_now_ms(void)
{
        return now_ms();
}

int test_scaled_ms(int ms)
{
        return ms * test_timeout_multiplier();
}

/* A figure from /proc/PID/status, in its own unit. */
static long proc_status_field(pid_t pid, const char *field)
{
        char path[64], line[256];
        size_t n = strlen(field);
        long v = -1;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/status", (int) pid);
        if (!(f = fopen(path, "re")))
                return -1;
        while (fgets(line, sizeof(line), f))
                if (strncmp(line, field, n) == 0 && line[n] == ':')
                        v = atol(line + n + 1);
        fclose(f);
        return v;
}

long test_rss_kib(pid_t pid)
{
        return proc_status_field(pid, "VmRSS");
}

long test_shmem_kib(pid_t pid)
{
        return proc_status_field(pid, "RssShmem");
}

long test_sleeps(pid_t pid)
{
        return proc_status_field(pid, "voluntary_ctxt_switches");
}

bool test_under_asan(pid_t pid)
{
        char path[64], line[512];
        bool found = false;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/maps", (int) pid);
        if (!(f = fopen(path, "re")))
                return false;
        while (!found && fgets(line, sizeof(line), f))
                found = strstr(line, "libasan") != NULL;
        fclose(f);
        return found;
}

long test_vm_kib(pid_t pid)
{
        return proc_status_field(pid, "VmSize");
}

/* Lines of a /proc file, or entries of a /proc directory. */
static long proc_count(pid_t pid, const char *what, bool dir)
{
        char path[64];
        long n = 0;

        snprintf(path, sizeof(path), "/proc/%d/%s", (int) pid, what);
        if (dir) {
                DIR *d = opendir(path);
                if (!d)
                        return -1;
                for (struct dirent *e; (e = readdir(d));)
                        n += e->d_name[0] != '.';
                closedir(d);
                return n;
        }
        FILE *f = fopen(path, "re");
        int ch;
        if (!f)
                return -1;
        while ((ch = fgetc(f)) != EOF)
                n += ch == '\n';
        fclose(f);
        return n;
}

long test_open_fds(pid_t pid)
{
        return proc_count(pid, "fd", true);
}

long test_mappings(pid_t pid)
{
        return proc_count(pid, "maps", false);
}

/* The children of parent with arg among their arguments: how many, and the
 * first found in *ret_first (when not NULL and there is one). */
static long scan_children(pid_t parent, const char *arg, pid_t *ret_first)
{
        DIR *d = opendir("/proc");
        long n = 0;

        if (!d)
                return -1;
        for (struct dirent *e; (e = readdir(d));) {
                char path[64], cmd[512];
                pid_t pid = (pid_t) atol(e->d_name);
                size_t len;
                FILE *f;
                if (pid <= 0 || proc_status_field(pid, "PPid") != (long) parent)
                        continue;
                snprintf(path, sizeof(path), "/proc/%d/cmdline", (int) pid);
                if (!(f = fopen(path, "re")))
                        continue;
                len = fread(cmd, 1, sizeof(cmd) - 1, f);
                fclose(f);
                cmd[len] = '\0';
                for (size_t i = 0; i < len; i += strlen(cmd + i) + 1)
                        if (strcmp(cmd + i, arg) == 0) {
                                if (n++ == 0 && ret_first)
                                        *ret_first = pid;
                                break;
                        }
        }
        closedir(d);
        return n;
}

long test_children_running(pid_t parent, const char *arg)
{
        return scan_children(parent, arg, NULL);
}

pid_t test_child_running(pid_t parent, const char *arg)
{
        pid_t pid = -1;

        return scan_children(parent, arg, &pid) > 0 ? pid : -1;
}

int test_maps_count(pid_t pid, const char *part)
{
        char path[64], line[4096], seen[16][512];
        int n = 0;
        FILE *f;

        snprintf(path, sizeof(path), "/proc/%d/maps", (int) pid);
        if (!(f = fopen(path, "re")))
                return -1;
        while (fgets(line, sizeof(line), f)) {
                char *file = strchr(line, '/');
                int i;
                if (!file || !strstr(file, part))
                        continue;
                file[strcspn(file, "\n")] = '\0';
                for (i = 0; i < n && strcmp(seen[i], file) != 0; i++)
                        ;
                if (i == n && n < 16)
                        snprintf(seen[n++], sizeof(seen[0]), "%s", file);
        }
        fclose(f);
        return n;
}

/* The fields of a /proc stat file after the command's name (which may hold
 * anything, in parentheses), from the state on, into buf; NULL when it
 * cannot be read (the process or thread has ended). */
static const char *proc_stat_fields(const char *path, char *buf, size_t cap)
{
        FILE *f = fopen(path, "re");
        char *name_end;
        bool read;

        if (!f)
                return NULL;
        read = fgets(buf, (int) cap, f) != NULL;
        fclose(f);
        return read && (name_end = strrchr(buf, ')')) ? name_end + 1 : NULL;
}

int test_thread_cpu_ms(pid_t pid, long *ret_main, long *ret_others)
{
        char path[64];
        long main_ms = 0, others_ms = 0, tick = sysconf(_SC_CLK_TCK);
        struct dirent *e;
        DIR *dir;

        snprintf(path, sizeof(path), "/proc/%d/task", (int) pid);
        if (tick <= 0 || !(dir = opendir(path)))
                return -1;
        while ((e = readdir(dir))) {
                char stat[384], line[1024];
                const char *fields;
                unsigned long utime, stime;

                if (e->d_name[0] == '.')
                        continue;
                snprintf(stat, sizeof(stat), "%s/%s/stat", path, e->d_name);
                /* The state, 10 fields, then utime and stime, in ticks. */
                if (!(fields = proc_stat_fields(stat, line, sizeof(line))) ||
                    sscanf(fields, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
                           &utime, &stime) != 2)
                        continue;
                long ms = (long) ((utime + stime) * 1000 / (unsigned long) tick);
                if (atoi(e->d_name) == (int) pid)
                        main_ms += ms;
                else
                        others_ms += ms;
        }
        closedir(dir);
        *ret_main = main_ms;
        *ret_others = others_ms;
        return 0;
}

int test_nice_of(pid_t pid, long *ret_nice)
{
        char path[64], line[1024];
        const char *fields;
        long nice;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int) pid);
        /* The state, 15 fields (to the priority), then the nice value. */
        if (!(fields = proc_stat_fields(path, line, sizeof(line))) ||
            sscanf(fields, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %ld",
                   &nice) != 1)
                return -1;
        *ret_nice = nice;
        return 0;
}

bool running_as_root(void)
{
        if (geteuid() == 0)
                return true;
        fprintf(stderr, "not root: the checks of other users are skipped\n");
        return false;
}

void open_socket_to_all(const test_daemon *d)
{
        ck_assert_int_eq(chmod(d->dir, 0755), 0);
        ck_assert_int_eq(chmod(d->socket, 0666), 0);
}

const char *test_backend(void)
{
        const char *b = getenv("CUBE_TEST_BACKEND");
        return b && *b ? b : "cpu";
}

const char *test_fault_word(void)
{
        return strcmp(test_backend(), "cpu") == 0 ? "SEGV" : "CUDA_ERROR";
}

bool test_device_has(const char *name, unsigned needs)
{
        static const struct {
                test_need need;
                const char *why;
        } lacks[] = {
                { TEST_NEEDS_KERNEL_RUNS, "needs kernel bodies to run; the CUDA driver's "
                                          "test double runs none" },
                { TEST_NEEDS_CPU_DEVICE, "needs the CPU device; cubed runs another backend" },
                { TEST_NEEDS_VALGRIND, "needs valgrind; this build's daemon cannot run "
                                       "under it" },
                { TEST_NEEDS_CUDA_DOUBLE, "needs the CUDA driver's test double, whose launches "
                                          "take the time a test sets" },
        };
        const char *driver = getenv("CUBE_TEST_DRIVER");
        unsigned lacking = 0;

        if (strcmp(test_backend(), "cpu") != 0)
                lacking |= TEST_NEEDS_CPU_DEVICE;
        if (driver && strcmp(driver, "double") == 0)
                lacking |= TEST_NEEDS_KERNEL_RUNS;
        else
                lacking |= TEST_NEEDS_CUDA_DOUBLE;
        if (getenv("CUBE_TEST_NO_VALGRIND"))
                lacking |= TEST_NEEDS_VALGRIND;
        for (size_t i = 0; i < sizeof(lacks) / sizeof(lacks[0]); i++)
                if (needs & lacking & lacks[i].need) {
                        /* Flushed now: Check forks each case, and a child
                         * must not carry the line in its buffer. */
                        printf("SKIP %s: %s\n", name, lacks[i].why);
                        fflush(stdout);
                        return false;
                }
        return true;
}

const char *test_instance(void)
{
        static char name[64];
        const char *dev = getenv("CUBE_TEST_DEVICE");

        snprintf(name, sizeof(name), "%s%s", test_backend(), dev && *dev ? dev : "0");
        return name;
}

void nobody_start(nobody *n, const char *socket, nobody_fn fn)
{
        int down[2], up[2];

        ck_assert_int_eq(pipe(down), 0);
        ck_assert_int_eq(pipe(up), 0);
        n->pid = fork();
        ck_assert_int_ge(n->pid, 0);
        if (n->pid == 0) {
                close(down[1]);
                close(up[0]);
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                if (setgroups(0, NULL) < 0 || setgid(NOBODY) < 0 || setuid(NOBODY) < 0 ||
                    geteuid() != NOBODY) {
                        dprintf(2, "could not become nobody: %s\n", strerror(errno));
                        _exit(100);
                }
                _exit(fn(socket, down[0], up[1]));
        }
        close(down[0]);
        close(up[1]);
        n->to_child = down[1];
        n->from_child = up[0];
}

void tell(int fd, char what)
{
        ck_assert_int_eq(write(fd, &what, 1), 1);
}

/* The next byte from fd within timeout_ms, or -1 (EOF, timeout). */
int hear(int fd, int timeout_ms)
{
        struct pollfd p = { .fd = fd, .events = POLLIN };
        char what;

        if (poll(&p, 1, timeout_ms) <= 0 || read(fd, &what, 1) != 1)
                return -1;
        return (unsigned char) what;
}

/* The child's exit status, or -1 when it did not end normally in time. */
int nobody_finish(nobody *n)
{
        long deadline = now_ms() + (long) 20000 * test_timeout_multiplier();
        int status;

        close(n->to_child);
        close(n->from_child);
        for (;;) {
                if (waitpid(n->pid, &status, WNOHANG) == n->pid)
                        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
                if (now_ms() > deadline) {
                        kill(n->pid, SIGKILL);
                        waitpid(n->pid, NULL, 0);
                        return -1;
                }
                usleep(2000);
        }
}


void fill_random(void *buf, size_t n, uint64_t seed)
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

double test_metric_value(const char *text, const char *series)
{
        size_t n = strlen(series);

        for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
                if (strncmp(p, series, n) == 0 && p[n] == ' ')
                        return strtod(p + n + 1, NULL);
        return -1;
}

double test_metric_of(cube_client *c, const char *series)
{
        char *text;
        double v;

        ck_ok(cube_daemon_metrics(c, &text));
        v = test_metric_value(text, series);
        free(text);
        ck_assert_msg(v >= 0, "no %s in the metrics", series);
        return v;
}

cube_status status_of(const char *socket)
{
        cube_client *c;
        cube_status st;

        ck_ok(cube_connect(socket, "status", &c));
        ck_ok(cube_daemon_status(c, &st));
        cube_disconnect(c);
        return st;
}

bool wait_memory_in_use(const char *socket, uint64_t want, int timeout_ms)
{
        long deadline = now_ms() + (long) timeout_ms * test_timeout_multiplier();

        for (;;) {
                cube_status st = status_of(socket);
                if (st.memory_in_use == want)
                        return true;
                if (now_ms() > deadline)
                        return false;
                usleep(10000);
        }
}

void raw_send_create(int fd, uint64_t memory, uint64_t size)
{
        msgpack_sbuffer sb;
        msgpack_packer pk;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        cube__pack_notify(&pk, "create", 3);
        msgpack_pack_uint64(&pk, 1);
        msgpack_pack_uint64(&pk, memory);
        msgpack_pack_uint64(&pk, size);
        ck_assert_int_eq(raw_send_sbuffer(fd, &sb), 0);
        msgpack_sbuffer_destroy(&sb);
}

void raw_send_kernel(int fd, uint64_t id, const char *source, const char *entry)
{
        msgpack_sbuffer sb;
        msgpack_packer pk;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        cube__pack_notify(&pk, "kernel", 3);
        msgpack_pack_uint64(&pk, id);
        cube__pack_str(&pk, source);
        cube__pack_str(&pk, entry);
        ck_assert_int_eq(raw_send_sbuffer(fd, &sb), 0);
        msgpack_sbuffer_destroy(&sb);
}

void raw_send_write(int fd, const cube_handle *h, const void *data, size_t len)
{
        msgpack_sbuffer sb;
        msgpack_packer pk;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        cube__pack_notify(&pk, "write", 3);
        msgpack_pack_uint64(&pk, 1);
        cube__pack_handle(&pk, h);
        msgpack_pack_bin(&pk, len);
        msgpack_pack_bin_body(&pk, data, len);
        ck_assert_int_eq(raw_send_sbuffer(fd, &sb), 0);
        msgpack_sbuffer_destroy(&sb);
}

void raw_send_on_handle(int fd, uint32_t msgid, const char *method, const cube_handle *h)
{
        msgpack_sbuffer sb;
        msgpack_packer pk;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        cube__pack_request(&pk, msgid, method, 2);
        msgpack_pack_uint64(&pk, 1);
        msgpack_pack_array(&pk, 1);
        cube__pack_handle(&pk, h);
        ck_assert_int_eq(raw_send_sbuffer(fd, &sb), 0);
        msgpack_sbuffer_destroy(&sb);
}

cube_client *test_connect(const char *socket, const char *name)
{
        cube_client *c;

        ck_ok(cube_connect(socket, name, &c));
        return c;
}

cube_handle test_empty(cube_client *c, uint64_t size)
{
        cube_handle h;

        ck_ok(cube_empty(c, size, &h));
        return h;
}

uint64_t test_kernel(cube_client *c, const char *source, const char *entry)
{
        uint64_t id;

        ck_ok(cube_kernel_register(c, source, entry, &id));
        return id;
}

void test_launch_u32(cube_client *c, cube_launch l, const uint32_t *scalars, size_t n_scalars)
{
        cube_info *info = cube_info_new();

        ck_assert_ptr_nonnull(info);
        for (size_t i = 0; i < n_scalars; i++)
                ck_assert_int_eq(cube_info_u32(info, scalars[i]), 0);
        for (size_t i = 0; i < l.n_buffers; i++)
                ck_assert_int_eq(cube_info_buffer_len(info, (uint32_t) (cube_handle_len(
                        &l.buffers[i]) / sizeof(uint32_t))), 0);
        l.info = info;
        ck_ok(cube_launch_kernel(c, &l));
        cube_info_free(info);
}

void test_expect_kind(cube_error *e, cube_error_kind kind, const char *what)
{
        ck_assert_msg(e != NULL, "%s: succeeded; %d was expected", what, (int) kind);
        ck_assert_msg(cube_error_kind_of(e) == kind, "%s: got %s (%s): %s", what,
                      cube_error_variant(e), cube_error_family(e), cube_error_message(e));
        cube_error_free(e);
}

void test_expect_bytes(cube_client *c, const cube_handle *h, const void *want, size_t n)
{
        unsigned char *got = malloc(n ? n : 1);
        const unsigned char *w = want;

        ck_assert_ptr_nonnull(got);
        ck_assert_uint_eq(cube_handle_len(h), n);
        /* Every byte starts unlike its expected value, so a read that leaves
         * any of them untouched cannot pass. */
        for (size_t i = 0; i < n; i++)
                got[i] = (unsigned char) ~w[i];
        ck_ok(cube_read(c, h, got, n));
        /* One comparison, and a walk only to name the first byte that
         * differs: an assertion a byte costs Check a mark point each, which
         * is seconds at megabytes under the sanitizers. */
        if (memcmp(got, want, n) != 0) {
                size_t i = 0;

                while (got[i] == w[i])
                        i++;
                ck_abort_msg("byte %zu of the %zu read back is %#x, expected %#x", i, n, got[i],
                             w[i]);
        }
        free(got);
}

size_t test_live_failures(cube_client *c)
{
        cube_failure_info *v;
        size_t n;

        ck_ok(cube_daemon_failures(c, &v, &n));
        cube_failures_free(v, n);
        return n;
}

/* Decodes the C string literal at *pp (after its opening quote) onto out. */
static const char *decode_literal(const char *p, const char *end, char **out, size_t *len,
                                  size_t *cap)
{
        while (p < end && *p != '"') {
                int ch = (unsigned char) *p++;
                if (ch == '\\' && p < end) {
                        ch = (unsigned char) *p++;
                        switch (ch) {
                        case 'n': ch = '\n'; break;
                        case 't': ch = '\t'; break;
                        case 'r': ch = '\r'; break;
                        case '0': case '1': case '2': case '3': case '4': case '5': case '6':
                        case '7': {
                                int v = ch - '0';
                                for (int k = 0; k < 2 && p < end && *p >= '0' && *p <= '7'; k++)
                                        v = v * 8 + (*p++ - '0');
                                ch = v;
                                break;
                        }
                        case 'x': {
                                int v = 0;
                                while (p < end && isxdigit((unsigned char) *p)) {
                                        v = v * 16 + (isdigit((unsigned char) *p) ? *p - '0' :
                                                      (tolower((unsigned char) *p) - 'a' + 10));
                                        p++;
                                }
                                ch = v;
                                break;
                        }
                        default: break;         /* \\ \" \' \? */
                        }
                }
                if (*len + 2 > *cap) {
                        *cap = *cap ? *cap * 2 : 256;
                        *out = realloc(*out, *cap);
                }
                (*out)[(*len)++] = (char) ch;
                (*out)[*len] = '\0';
        }
        return p < end ? p + 1 : p;
}

int test_kernel_sources(const char *path, test_kernel_source **ret, size_t *ret_n)
{
        FILE *f = fopen(path, "r");
        char *text = NULL, *cur = NULL;
        size_t n = *ret_n, len = 0, cap = 0;
        long size;

        if (!f)
                return -1;
        if (fseek(f, 0, SEEK_END) < 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) < 0 ||
            !(text = malloc((size_t) size + 1)) || fread(text, 1, (size_t) size, f) != (size_t) size) {
                fclose(f);
                free(text);
                return -1;
        }
        fclose(f);
        text[size] = '\0';
        const char *p = text, *end = text + size;
        bool in_string = false;         /* gathering adjacent literals */
        /* Object-like macros that are string literals ("#define PARAMS
         * "(float *a, INFO)"), spliced where a run of literals names them. */
        struct { char name[64]; char *value; } macros[64];
        size_t n_macros = 0;
        for (const char *q = strstr(text, "#define "); q && n_macros < 64;
             q = strstr(q + 1, "#define ")) {
                const char *a = q + 8, *b = a;
                while (isalnum((unsigned char) *b) || *b == '_')
                        b++;
                if (b == a || (size_t) (b - a) >= sizeof(macros[0].name) || *b == '(')
                        continue;
                const char *v = b;
                while (*v == ' ' || *v == '\t' || (*v == '\\' && v[1] == '\n'))
                        v += *v == '\\' ? 2 : 1;
                if (*v != '"')
                        continue;
                char *val = NULL;
                size_t vlen = 0, vcap = 0;
                while (*v == '"') {
                        v = decode_literal(v + 1, end, &val, &vlen, &vcap);
                        while (*v == ' ' || *v == '\t' || (*v == '\\' && v[1] == '\n') ||
                               (*v == '\n' && v[-1] == '\\'))
                                v += *v == '\\' ? 2 : 1;
                }
                memcpy(macros[n_macros].name, a, (size_t) (b - a));
                macros[n_macros].name[b - a] = '\0';
                macros[n_macros++].value = val ? val : strdup("");
        }
        while (p <= end) {
                if (p < end && *p == '#' && (p == text || p[-1] == '\n')) {
                        /* A preprocessor line, continuations included. */
                        while (p < end && !(*p == '\n' && p[-1] != '\\'))
                                p++;
                        continue;
                }
                if (p < end && (isalpha((unsigned char) *p) || *p == '_') &&
                    (p == text || !(isalnum((unsigned char) p[-1]) || p[-1] == '_'))) {
                        const char *b = p;
                        while (b < end && (isalnum((unsigned char) *b) || *b == '_'))
                                b++;
                        size_t m = 0;
                        while (m < n_macros && (strlen(macros[m].name) != (size_t) (b - p) ||
                                                memcmp(macros[m].name, p, (size_t) (b - p)) != 0))
                                m++;
                        if (m < n_macros) {
                                if (!in_string) {
                                        len = 0;
                                        cur = NULL;
                                        cap = 0;
                                }
                                in_string = true;
                                for (const char *c = macros[m].value; *c; c++) {
                                        if (len + 2 > cap) {
                                                cap = cap ? cap * 2 : 256;
                                                cur = realloc(cur, cap);
                                        }
                                        cur[len++] = *c;
                                        cur[len] = '\0';
                                }
                                p = b;
                                continue;
                        }
                }
                if (p < end && p[0] == '/' && p[1] == '*') {
                        const char *q = strstr(p + 2, "*/");
                        p = q ? q + 2 : end;
                        continue;
                }
                if (p < end && p[0] == '/' && p[1] == '/') {
                        while (p < end && *p != '\n')
                                p++;
                        continue;
                }
                if (p < end && *p == '\'') {   /* a character constant */
                        p++;
                        while (p < end && *p != '\'')
                                p += *p == '\\' ? 2 : 1;
                        p++;
                        continue;
                }
                if (p < end && *p == '"') {
                        if (!in_string) {
                                len = 0;
                                cur = NULL;
                                cap = 0;
                        }
                        in_string = true;
                        p = decode_literal(p + 1, end, &cur, &len, &cap);
                        continue;
                }
                if (p < end && isspace((unsigned char) *p)) {
                        p++;
                        continue;
                }
                /* Anything else ends a run of literals. */
                if (in_string) {
                        in_string = false;
                        const char *k = cur ? strstr(cur, "KERNEL void") : NULL;
                        if (k) {
                                test_kernel_source *grown = realloc(*ret, (n + 1) * sizeof(*grown));
                                if (!grown)
                                        break;
                                *ret = grown;
                                const char *e = k + strlen("KERNEL void");
                                while (isspace((unsigned char) *e))
                                        e++;
                                size_t el = 0;
                                while (isalnum((unsigned char) e[el]) || e[el] == '_')
                                        el++;
                                grown[n].file = strdup(path);
                                grown[n].entry = strndup(e, el);
                                grown[n].source = cur;
                                n++;
                                cur = NULL;
                        } else {
                                free(cur);
                                cur = NULL;
                        }
                }
                p++;
        }
        free(cur);
        free(text);
        for (size_t m = 0; m < n_macros; m++)
                free(macros[m].value);
        *ret_n = n;
        return 0;
}

const char test_affine_source[] =
        "KERNEL void affine(const uint32_t *in, uint32_t *out, INFO)\n"
        "{\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "\n"
        "        if (i < BUFFER_LEN(1))\n"
        "                out[i] = in[i] * 5u + 7u;\n"
        "}\n";

const char test_forever_source[] =
        "KERNEL void forever(uint32_t *out, INFO)\n"
        "{\n"
        "        volatile uint32_t spin = 1;\n"
        "\n"
        "        while (spin)\n"
        "                out[ABSOLUTE_POS] = spin;\n"
        "}\n";

const cube_buffer_io test_affine_io[2] = { CUBE_BUFFER_READ_ONLY, CUBE_BUFFER_WRITE_ONLY };

uint32_t test_affine(uint32_t x)
{
        return x * 5u + 7u;
}

/* Runs ip(8) with args (NULL-terminated), its output discarded unless
 * loud. Returns its exit status, 127 when it could not run, -1 on a signal. */
static int ip_run(bool loud, const char *const *args)
{
        const char *argv[24] = { "ip" };
        int n = 1, st;
        pid_t pid;

        for (const char *const *a = args; *a && n < 23; a++)
                argv[n++] = *a;
        argv[n] = NULL;
        if ((pid = fork()) < 0)
                return -1;
        if (pid == 0) {
                int null = open("/dev/null", O_WRONLY);
                if (null >= 0) {
                        dup2(null, 1);
                        if (!loud)
                                dup2(null, 2);
                }
                execvp("ip", (char **) argv);
                _exit(127);
        }
        if (waitpid(pid, &st, 0) != pid)
                return -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Kills every process inside namespace name: a daemon a failed test left
 * there would otherwise keep it alive after its name is gone. */
static void netns_kill_all(const char *name)
{
        char path[64];
        struct stat ns, st;
        DIR *d;
        struct dirent *e;

        snprintf(path, sizeof(path), "/run/netns/%s", name);
        if (stat(path, &ns) < 0 || !(d = opendir("/proc")))
                return;
        while ((e = readdir(d))) {
                char p[300];
                if (!isdigit((unsigned char) e->d_name[0]))
                        continue;
                snprintf(p, sizeof(p), "/proc/%s/ns/net", e->d_name);
                if (stat(p, &st) == 0 && st.st_ino == ns.st_ino && st.st_dev == ns.st_dev)
                        kill((pid_t) atoi(e->d_name), SIGKILL);
        }
        closedir(d);
}

/* Namespaces of earlier runs whose process is gone: a run killed before
 * its cleanup must not leave them for ever. */
static void netns_sweep(void)
{
        DIR *d = opendir("/run/netns");
        struct dirent *e;

        if (!d)
                return;
        while ((e = readdir(d))) {
                long pid;
                char *end;
                if (strncmp(e->d_name, "cubetest-", 9) != 0)
                        continue;
                pid = strtol(e->d_name + 9, &end, 10);
                if (pid <= 0 || *end != '-' || (kill((pid_t) pid, 0) < 0 && errno == ESRCH)) {
                        const char *args[] = { "netns", "delete", e->d_name, NULL };
                        netns_kill_all(e->d_name);
                        ip_run(false, args);
                }
        }
        closedir(d);
}

int test_netns_create(test_netns *n, char *why, size_t len)
{
        int pid = (int) getpid(), rc;

        memset(n, 0, sizeof(*n));
        if (geteuid() != 0) {
                snprintf(why, len, "not root: network namespaces cannot be made");
                return -1;
        }
        netns_sweep();
        for (int i = 0; i < 2; i++) {
                snprintf(n->name[i], sizeof(n->name[i]), "cubetest-%d-%d", pid, i);
                snprintf(n->link[i], sizeof(n->link[i]), "cv%d%c", pid, 'a' + i);
                snprintf(n->addr[i], sizeof(n->addr[i]), "10.231.%d.%d", pid % 250, i + 1);
        }
        for (int i = 0; i < 2; i++) {
                const char *add[] = { "netns", "add", n->name[i], NULL };
                if ((rc = ip_run(true, add)) != 0) {
                        snprintf(why, len, rc == 127 ? "ip(8) is not installed" :
                                 "ip netns add %s failed (status %d)", n->name[i], rc);
                        test_netns_destroy(n);
                        return -1;
                }
                n->made[i] = true;
        }
        const char *veth[] = { "link", "add", n->link[0], "netns", n->name[0], "type", "veth",
                               "peer", "name", n->link[1], "netns", n->name[1], NULL };
        if ((rc = ip_run(true, veth)) != 0) {
                snprintf(why, len, "no veth pair between the namespaces (ip status %d)", rc);
                test_netns_destroy(n);
                return -1;
        }
        for (int i = 0; i < 2; i++) {
                char cidr[24];
                snprintf(cidr, sizeof(cidr), "%s/30", n->addr[i]);
                const char *addr[] = { "-n", n->name[i], "addr", "add", cidr, "dev", n->link[i],
                                       NULL };
                const char *up[] = { "-n", n->name[i], "link", "set", n->link[i], "up", NULL };
                const char *lo[] = { "-n", n->name[i], "link", "set", "lo", "up", NULL };
                if (ip_run(true, addr) != 0 || ip_run(true, up) != 0 || ip_run(true, lo) != 0) {
                        snprintf(why, len, "cannot address %s in %s", n->link[i], n->name[i]);
                        test_netns_destroy(n);
                        return -1;
                }
        }
        return 0;
}

void test_netns_destroy(test_netns *n)
{
        for (int i = 0; n && i < 2; i++)
                if (n->made[i]) {
                        const char *del[] = { "netns", "delete", n->name[i], NULL };
                        netns_kill_all(n->name[i]);
                        ip_run(true, del);
                        n->made[i] = false;
                }
}

int test_netns_enter(const test_netns *n, int i)
{
        char path[64];
        int fd, r;

        snprintf(path, sizeof(path), "/run/netns/%s", n->name[i]);
        if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
                return -1;
        r = setns(fd, CLONE_NEWNET);
        close(fd);
        return r;
}

int test_daemon_start_in_netns(test_daemon *d, const test_netns *n, int i,
                               const char *const *extra_args)
{
        const char *w = getenv("CUBE_TEST_WRAPPER");
        const char *wrapper[20] = { "ip", "netns", "exec", n->name[i] };
        char *copy = NULL;
        int k = 4, r;

        if (w && *w) {
                copy = strdup(w);
                for (char *tok = strtok(copy, " "); tok && k < 19; tok = strtok(NULL, " "))
                        wrapper[k++] = tok;
        }
        wrapper[k] = NULL;
        r = test_daemon_start_wrapped(d, wrapper, extra_args);
        free(copy);
        return r;
}

cube_error *test_affine_try(cube_client *c, uint64_t kernel, uint32_t n)
{
        uint32_t *in = calloc(n, sizeof(*in)), *out = calloc(n, sizeof(*out));
        cube_handle bufs[2];
        cube_error *e;

        ck_assert(in && out);
        fill_random(in, n * sizeof(*in), n);
        ck_ok(cube_create(c, in, n * sizeof(*in), &bufs[0]));
        ck_ok(cube_empty(c, n * sizeof(*out), &bufs[1]));
        test_launch_u32(c, (cube_launch) { .kernel = kernel, .cube_count = { (n + 63) / 64, 1, 1 },
                                           .cube_dim = { 64, 1, 1 }, .buffers = bufs,
                                           .io = test_affine_io, .n_buffers = 2 }, NULL, 0);
        e = cube_read(c, &bufs[1], out, n * sizeof(*out));
        for (uint32_t i = 0; !e && i < n; i++)
                ck_assert_msg(out[i] == test_affine(in[i]), "affine: out[%u] = %#x, expected %#x",
                              i, out[i], test_affine(in[i]));
        ck_ok(cube_free(c, &bufs[0]));
        ck_ok(cube_free(c, &bufs[1]));
        free(in);
        free(out);
        return e;
}

bool test_file_holds(const char *path, const char *needle)
{
        char line[4096];
        bool found = false;
        FILE *f = fopen(path, "re");

        while (f && !found && fgets(line, sizeof(line), f))
                found = strstr(line, needle) != NULL;
        if (f)
                fclose(f);
        return found;
}

/*
 * harness.c - the real daemon, started and stopped the way systemd would:
 * readiness comes as READY=1 on a NOTIFY_SOCKET, and SIGTERM must end it
 * with status 0 and its socket file gone.
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
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

#include "harness.h"
#include "prescan.h"
#include "wire.h"

static long now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int timeout_multiplier(void)
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

int test_daemon_start_wrapped(test_daemon *d, const char *const *wrapper,
                              const char *const *extra_args)
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
        snprintf(d->socket, sizeof(d->socket), "%s/s", d->dir);
        snprintf(d->log, sizeof(d->log), "%s/log", d->dir);
        snprintf(notify, sizeof(notify), "%s/notify", d->dir);
        snprintf(d->cache, sizeof(d->cache), "%s/cache", d->dir);

        fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        strcpy(sa.sun_path, notify);
        if (fd < 0 || bind(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0)
                return -1;

        for (const char *const *w = wrapper; w && *w; w++)
                argv[n++] = *w;
        argv[n++] = bin;
        argv[n++] = "--socket";
        argv[n++] = d->socket;
        argv[n++] = "--log-level";
        argv[n++] = "info";
        argv[n++] = "--cache-dir";
        argv[n++] = d->cache;
        /* Kernels here run seconds at most; a loaded test machine must not
         * turn one into a timeout. Tests of the timeout pass their own. */
        argv[n++] = "--kernel-timeout";
        argv[n++] = "30";
        for (const char *const *a = extra_args; a && *a && n < 62; a++)
                argv[n++] = *a;
        argv[n] = NULL;

        d->pid = fork();
        if (d->pid < 0)
                return -1;
        if (d->pid == 0) {
                int log = open(d->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
                if (log >= 0) {
                        dup2(log, 2);
                        dup2(log, 1);
                }
                setenv("NOTIFY_SOCKET", notify, 1);
                execvp(argv[0], (char **) argv);
                fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
                _exit(127);
        }

        deadline = now_ms() + 10000L * timeout_multiplier();
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
                /* Close any descriptor sent along (systemd-notify's barrier). */
                for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
                        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
                                int *fds = (int *) CMSG_DATA(cm);
                                size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                                for (size_t i = 0; i < k; i++)
                                        close(fds[i]);
                        }
                buf[r] = '\0';
                if (strstr(buf, "READY=1"))
                        break;
        }
        close(fd);
        return 0;
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

bool test_daemon_socket_exists(const test_daemon *d)
{
        struct stat st;
        return lstat(d->socket, &st) == 0;
}

int test_daemon_stop(test_daemon *d, int timeout_ms)
{
        long deadline;
        int status = 0, result = -1;
        char path[128];

        if (d->pid <= 0)
                return -1;
        kill(d->pid, SIGTERM);
        deadline = now_ms() + (long) timeout_ms * timeout_multiplier();
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
        if (!getenv("CUBE_TEST_LEAVE")) {
                snprintf(path, sizeof(path), "rm -rf '%s'", d->dir);
                if (system(path) != 0)
                        fprintf(stderr, "could not remove %s\n", d->dir);
        }
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
                        return &rbufs[i];
                }
        return NULL;
}

int raw_recv(int fd, msgpack_unpacked *up, int timeout_ms)
{
        struct rbuf *b = rbuf_of(fd);
        cube__limits lim;
        long deadline = now_ms() + (long) timeout_ms * timeout_multiplier();

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
                ssize_t r = recv(fd, b->p + b->len, b->cap - b->len, 0);
                if (r == 0 || (r < 0 && errno == ECONNRESET)) {
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
        long deadline = now_ms() + (long) timeout_ms * timeout_multiplier();

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

/*
 * bench-baselines.c - the raw Unix-socket baselines of cube-bench: the same
 * traffic shapes as cube's figures with nothing but the kernel in between.
 *
 * Each baseline forks a peer on a socketpair (or, for many clients, one
 * socketpair per client), lets it set itself up, waits for its "ready" byte,
 * and only then starts the clock. Gloo's allreduce is a program of its own
 * (bench-gloo.cc, C++), run from beside cube-bench.
 */
#include "bench-baselines.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <libgen.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MSG 64
#define ACK 16

double bench_now(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

static void fail(const char *what)
{
        perror(what);
        exit(1);
}

static void read_all(int fd, void *buf, size_t len)
{
        char *p = buf;
        while (len > 0) {
                ssize_t n = read(fd, p, len);
                if (n <= 0)
                        fail("baseline read");
                p += n;
                len -= (size_t) n;
        }
}

static void write_all(int fd, const void *buf, size_t len)
{
        const char *p = buf;
        while (len > 0) {
                ssize_t n = write(fd, p, len);
                if (n <= 0)
                        fail("baseline write");
                p += n;
                len -= (size_t) n;
        }
}

/* A page-touched buffer, so that first-touch faults stay out of the clock. */
static char *touched(size_t size)
{
        char *p = malloc(size ? size : 1);
        if (!p)
                fail("malloc");
        memset(p, 1, size);
        return p;
}

typedef void peer_fn(int fd, size_t arg);

/* Forks peer(fd, arg) on the far end of a socketpair, on peer_cpus; returns
 * the near end once the peer said it is ready. */
static int start_peer(const cpu_set_t *peer_cpus, peer_fn *peer, size_t arg, pid_t *ret_pid)
{
        int sv[2];
        char ready;

        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
                fail("socketpair");
        pid_t pid = fork();
        if (pid < 0)
                fail("fork");
        if (pid == 0) {
                close(sv[0]);
                if (peer_cpus)
                        sched_setaffinity(0, sizeof(*peer_cpus), peer_cpus);
                peer(sv[1], arg);
                _exit(0);
        }
        close(sv[1]);
        read_all(sv[0], &ready, 1);
        *ret_pid = pid;
        return sv[0];
}

static void stop_peer(int fd, pid_t pid)
{
        close(fd);
        waitpid(pid, NULL, 0);
}

static void echo_peer(int fd, size_t arg)
{
        char buf[MSG];
        (void) arg;
        write_all(fd, "r", 1);
        for (;;) {
                ssize_t n = read(fd, buf, sizeof(buf));
                if (n <= 0)
                        return;
                write_all(fd, buf, (size_t) n);
        }
}

/* iters 64 B round trips to peer, each timed into out. */
static void round_trips(const cpu_set_t *peer_cpus, peer_fn *peer, int iters, double *out)
{
        char buf[MSG] = { 0 };
        pid_t pid;
        int fd = start_peer(peer_cpus, peer, 0, &pid);

        for (int i = 0; i < iters; i++) {
                double t0 = bench_now();
                write_all(fd, buf, MSG);
                read_all(fd, buf, MSG);
                out[i] = bench_now() - t0;
        }
        stop_peer(fd, pid);
}

/* The echo, passed on: each message goes to a second process (a worker the
 * peer forks, on the peer's CPUs) and back before the peer answers it, as a
 * launch + sync goes from cubed to its device process and back. */
static void relay_peer(int fd, size_t arg)
{
        char buf[MSG], ready;
        pid_t worker;
        int sv[2];

        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
                fail("socketpair");
        if ((worker = fork()) < 0)
                fail("fork");
        if (worker == 0) {
                close(fd);
                close(sv[0]);
                echo_peer(sv[1], arg);
                _exit(0);
        }
        close(sv[1]);
        read_all(sv[0], &ready, 1);
        write_all(fd, "r", 1);
        for (;;) {
                ssize_t n = read(fd, buf, sizeof(buf));
                if (n <= 0)
                        break;
                write_all(sv[0], buf, (size_t) n);
                read_all(sv[0], buf, (size_t) n);
                write_all(fd, buf, (size_t) n);
        }
        close(sv[0]);
        waitpid(worker, NULL, 0);
}

void raw_ping_pong(const cpu_set_t *peer_cpus, int iters, double *out)
{
        round_trips(peer_cpus, echo_peer, iters, out);
}

void raw_relay(const cpu_set_t *peer_cpus, int iters, double *out)
{
        round_trips(peer_cpus, relay_peer, iters, out);
}

/* Reads what has arrived, and acks every whole message in one write. */
static void ack_peer(int fd, size_t arg)
{
        static char in[64 * 1024], acks[sizeof(in) / MSG * ACK];
        size_t have = 0;
        (void) arg;
        write_all(fd, "r", 1);
        for (;;) {
                ssize_t n = read(fd, in + have, sizeof(in) - have);
                if (n <= 0)
                        return;
                have += (size_t) n;
                size_t whole = have / MSG;
                write_all(fd, acks, whole * ACK);
                memmove(in, in + whole * MSG, have - whole * MSG);
                have -= whole * MSG;
        }
}

struct ack_reader {
        int fd;
        int n;
};

static void *read_acks(void *arg)
{
        struct ack_reader *r = arg;
        char buf[4096];
        size_t want = (size_t) r->n * ACK;
        while (want > 0) {
                size_t chunk = want < sizeof(buf) ? want : sizeof(buf);
                read_all(r->fd, buf, chunk);
                want -= chunk;
        }
        return NULL;
}

double raw_pipelined(const cpu_set_t *peer_cpus, int n)
{
        char msg[MSG] = { 0 };
        pid_t pid;
        pthread_t reader;
        int fd = start_peer(peer_cpus, ack_peer, 0, &pid);
        struct ack_reader r = { .fd = fd, .n = n };

        double t0 = bench_now();
        if (pthread_create(&reader, NULL, read_acks, &r) != 0)
                fail("pthread_create");
        for (int i = 0; i < n; i++)
                write_all(fd, msg, MSG);
        pthread_join(reader, NULL);
        double t = bench_now() - t0;
        stop_peer(fd, pid);
        return n / t;
}

static void sink_peer(int fd, size_t size)
{
        char *buf = touched(size);
        write_all(fd, "r", 1);
        read_all(fd, buf, size);
        write_all(fd, "a", 1);
        free(buf);
}

double raw_bulk_send(const cpu_set_t *peer_cpus, size_t size)
{
        char *buf = touched(size), ack;
        pid_t pid;
        int fd = start_peer(peer_cpus, sink_peer, size, &pid);

        double t0 = bench_now();
        write_all(fd, buf, size);
        read_all(fd, &ack, 1);
        double t = bench_now() - t0;
        stop_peer(fd, pid);
        free(buf);
        return t;
}

static void source_peer(int fd, size_t size)
{
        char *buf = touched(size), req;
        write_all(fd, "r", 1);
        read_all(fd, &req, 1);
        write_all(fd, buf, size);
        free(buf);
}

double raw_bulk_receive(const cpu_set_t *peer_cpus, size_t size)
{
        char *buf = touched(size);
        pid_t pid;
        int fd = start_peer(peer_cpus, source_peer, size, &pid);

        double t0 = bench_now();
        write_all(fd, "q", 1);
        read_all(fd, buf, size);
        double t = bench_now() - t0;
        stop_peer(fd, pid);
        free(buf);
        return t;
}

/* One thread, one epoll set, echoing whatever each client sends. */
static void epoll_echo_server(int *fds, int n)
{
        char buf[4096];
        struct epoll_event ev, events[64];
        int ep = epoll_create1(0), open = n;

        if (ep < 0)
                fail("epoll_create1");
        for (int i = 0; i < n; i++) {
                ev = (struct epoll_event) { .events = EPOLLIN, .data.fd = fds[i] };
                if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev) < 0)
                        fail("epoll_ctl");
        }
        while (open > 0) {
                int k = epoll_wait(ep, events, 64, -1);
                for (int i = 0; i < k; i++) {
                        int fd = events[i].data.fd;
                        ssize_t got = read(fd, buf, sizeof(buf));
                        if (got <= 0) {
                                epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
                                close(fd);
                                open--;
                                continue;
                        }
                        write_all(fd, buf, (size_t) got);
                }
        }
}

struct pinger {
        int fd;
        atomic_int *go;
        long count;
};

static void *ping_until_stopped(void *arg)
{
        struct pinger *p = arg;
        char buf[MSG] = { 0 };
        while (atomic_load(p->go) == 0)
                sched_yield();
        while (atomic_load(p->go) == 1) {
                write_all(p->fd, buf, MSG);
                read_all(p->fd, buf, MSG);
                p->count++;
        }
        return NULL;
}

double raw_many_clients(const cpu_set_t *peer_cpus, int clients, double seconds)
{
        int (*sv)[2] = calloc((size_t) clients, sizeof(*sv));
        int *far = calloc((size_t) clients, sizeof(int));
        struct pinger *p = calloc((size_t) clients, sizeof(*p));
        pthread_t *threads = calloc((size_t) clients, sizeof(pthread_t));
        atomic_int go = 0;
        int ready[2];
        char byte;

        if (!sv || !far || !p || !threads || pipe(ready) < 0)
                fail("raw_many_clients");
        for (int i = 0; i < clients; i++) {
                if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv[i]) < 0)
                        fail("socketpair");
                far[i] = sv[i][1];
        }
        pid_t pid = fork();
        if (pid < 0)
                fail("fork");
        if (pid == 0) {
                for (int i = 0; i < clients; i++)
                        close(sv[i][0]);
                if (peer_cpus)
                        sched_setaffinity(0, sizeof(*peer_cpus), peer_cpus);
                write_all(ready[1], "r", 1);
                epoll_echo_server(far, clients);
                _exit(0);
        }
        for (int i = 0; i < clients; i++)
                close(sv[i][1]);
        read_all(ready[0], &byte, 1);
        for (int i = 0; i < clients; i++) {
                p[i] = (struct pinger) { .fd = sv[i][0], .go = &go };
                if (pthread_create(&threads[i], NULL, ping_until_stopped, &p[i]) != 0)
                        fail("pthread_create");
        }
        double t0 = bench_now();
        atomic_store(&go, 1);
        usleep((useconds_t) (seconds * 1e6));
        atomic_store(&go, 2);
        long total = 0;
        for (int i = 0; i < clients; i++) {
                pthread_join(threads[i], NULL);
                total += p[i].count;
        }
        double t = bench_now() - t0;
        for (int i = 0; i < clients; i++)
                close(sv[i][0]);
        waitpid(pid, NULL, 0);
        close(ready[0]);
        close(ready[1]);
        free(sv);
        free(far);
        free(p);
        free(threads);
        return (double) total / t;
}

int gloo_allreduce(const cpu_set_t *cpus, size_t bytes, int iters, int runs,
                   double *ret_per_op, double *ret_single, double *ret_fastest)
{
        char exe[4096], prog[4200], a_bytes[32], a_iters[16], a_runs[16], list[1024] = "";
        char out[128] = "";
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        size_t used = 0, got = 0;
        double per_op, single, fastest;
        int p[2], st;
        pid_t pid;

        if (n <= 0)
                return -1;
        exe[n] = '\0';
        snprintf(prog, sizeof(prog), "%s/bench-gloo", dirname(exe));
        if (access(prog, X_OK) != 0)
                return -1;
        snprintf(a_bytes, sizeof(a_bytes), "%zu", bytes);
        snprintf(a_iters, sizeof(a_iters), "%d", iters);
        snprintf(a_runs, sizeof(a_runs), "%d", runs);
        for (int i = 0; cpus && i < CPU_SETSIZE && used + 8 < sizeof(list); i++)
                if (CPU_ISSET(i, cpus))
                        used += (size_t) snprintf(list + used, sizeof(list) - used, "%s%d",
                                                  used ? "," : "", i);
        if (pipe(p) < 0)
                return -1;
        if ((pid = fork()) == 0) {
                const char *argv[] = { prog, "--bytes", a_bytes, "--iters", a_iters, "--runs",
                                       a_runs, used ? "--cpus" : NULL, list, NULL };
                dup2(p[1], 1);
                close(p[0]);
                close(p[1]);
                execv(prog, (char **) argv);
                _exit(127);
        }
        close(p[1]);
        while (pid > 0 && got + 1 < sizeof(out)) {
                ssize_t r = read(p[0], out + got, sizeof(out) - 1 - got);
                if (r <= 0)
                        break;
                got += (size_t) r;
        }
        close(p[0]);
        if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0 ||
            sscanf(out, "%lf %lf %lf", &per_op, &single, &fastest) != 3)
                return -1;
        *ret_per_op = per_op;
        *ret_single = single;
        *ret_fastest = fastest;
        return 0;
}

/*
 * progress.c - how far this daemon's members of groups have got, told to
 * the other members on request, so that when an operation fails they can
 * name the member they waited for.
 *
 * A collective that times out only tells a member that a message did not
 * come; in a group of more than two, the member it waited for may itself be
 * waiting for another. So each daemon with a transport answers, on a TCP
 * socket of its comm address (its card, which members exchange when they
 * join), how many operations its member of a group has started. A member
 * whose operation failed asks every other at once, and names those that
 * never started the operation (their client has not asked for it), those
 * whose daemon does not answer within PROGRESS_WAIT_MS (stopped, or cut
 * off) and those that left the group.
 *
 * A thread of its own answers, not the loop nor the groups' threads: the
 * question is asked when something is stuck. Each question is one small
 * message and its answer; a peer that sends nothing is dropped after
 * PROGRESS_WAIT_MS, so one cannot keep the others from being answered for
 * longer. An answer tells only a count, to whoever knows the group's id and
 * round.
 *
 * The TCP listener it answers on is opened the way the collectives' stores
 * and mints open theirs, by cube__listen_tcp, which lives here, below them.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "services.h"

int cube__listen_tcp(const char *address, uint16_t *ret_port)
{
        struct sockaddr_in sa = { .sin_family = AF_INET };
        socklen_t len = sizeof(sa);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

        if (fd < 0)
                return -1;
        if (inet_pton(AF_INET, address, &sa.sin_addr) != 1 ||
            bind(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0 || listen(fd, 64) < 0 ||
            getsockname(fd, (struct sockaddr *) &sa, &len) < 0) {
                close(fd);
                return -1;
        }
        *ret_port = ntohs(sa.sin_port);
        return fd;
}

#define PROGRESS_MAGIC 0x63756265706f6773ull    /* "cubepogs" */
#define PROGRESS_WAIT_MS 500
#define UNKNOWN_GROUP UINT64_MAX

typedef struct question {
        uint64_t magic, group, nonce;
} question;

typedef struct answer {
        uint64_t magic, started;        /* UNKNOWN_GROUP: no such group here */
} answer;

struct cube__progress_service {
        int fd, stop_pipe[2];
        pthread_t thread;
        pthread_mutex_t lock;
        cube__progress *members;        /* under lock */
        char card[64];
};

static uint64_t now_ms(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

static bool read_within(int fd, void *buf, size_t len, uint64_t deadline)
{
        char *p = buf;

        while (len) {
                uint64_t now = now_ms();
                struct pollfd pfd = { .fd = fd, .events = POLLIN };
                ssize_t n;
                if (now >= deadline || poll(&pfd, 1, (int) (deadline - now)) <= 0)
                        return false;
                n = recv(fd, p, len, MSG_DONTWAIT);
                if (n <= 0 && !(n < 0 && (errno == EAGAIN || errno == EINTR)))
                        return false;
                if (n > 0) {
                        p += n;
                        len -= (size_t) n;
                }
        }
        return true;
}

static void answer_one(cube__progress_service *ps, int fd)
{
        question q;
        answer a = { PROGRESS_MAGIC, UNKNOWN_GROUP };

        if (!read_within(fd, &q, sizeof(q), now_ms() + PROGRESS_WAIT_MS) ||
            q.magic != PROGRESS_MAGIC)
                return;
        pthread_mutex_lock(&ps->lock);
        for (cube__progress *m = ps->members; m; m = m->next)
                if (m->group == q.group && m->nonce == q.nonce) {
                        a.started = atomic_load(&m->started);
                        break;
                }
        pthread_mutex_unlock(&ps->lock);
        (void) !send(fd, &a, sizeof(a), MSG_NOSIGNAL | MSG_DONTWAIT);
}

static void *serve(void *arg)
{
        cube__progress_service *ps = arg;

        for (;;) {
                struct pollfd pfd[2] = { { .fd = ps->fd, .events = POLLIN },
                                         { .fd = ps->stop_pipe[0], .events = POLLIN } };
                int fd;
                if (poll(pfd, 2, -1) < 0 && errno != EINTR)
                        break;
                if (pfd[1].revents)
                        break;
                if (!(pfd[0].revents & POLLIN))
                        continue;
                if ((fd = accept4(ps->fd, NULL, NULL, SOCK_CLOEXEC)) < 0)
                        continue;
                answer_one(ps, fd);
                close(fd);
        }
        return NULL;
}

cube__progress_service *cube__progress_start(const char *address, char *why, size_t len)
{
        cube__progress_service *ps = calloc(1, sizeof(*ps));
        uint16_t port;

        if (!ps) {
                snprintf(why, len, "out of host memory");
                return NULL;
        }
        ps->stop_pipe[0] = ps->stop_pipe[1] = -1;
        if ((ps->fd = cube__listen_tcp(address, &port)) < 0 ||
            pipe2(ps->stop_pipe, O_CLOEXEC) < 0) {
                snprintf(why, len, "cannot listen on %s: %s", address, strerror(errno));
                goto fail;
        }
        snprintf(ps->card, sizeof(ps->card), "%s:%u", address, port);
        pthread_mutex_init(&ps->lock, NULL);
        if (pthread_create(&ps->thread, NULL, serve, ps) != 0) {
                snprintf(why, len, "cannot start a thread");
                pthread_mutex_destroy(&ps->lock);
                goto fail;
        }
        return ps;
fail:
        if (ps->fd >= 0)
                close(ps->fd);
        if (ps->stop_pipe[0] >= 0) {
                close(ps->stop_pipe[0]);
                close(ps->stop_pipe[1]);
        }
        free(ps);
        return NULL;
}

void cube__progress_stop(cube__progress_service *ps)
{
        if (!ps)
                return;
        (void) !write(ps->stop_pipe[1], "x", 1);
        pthread_join(ps->thread, NULL);
        close(ps->fd);
        close(ps->stop_pipe[0]);
        close(ps->stop_pipe[1]);
        pthread_mutex_destroy(&ps->lock);
        free(ps);
}

const char *cube__progress_card(const cube__progress_service *ps)
{
        return ps ? ps->card : "";
}

void cube__progress_add(cube__progress_service *ps, cube__progress *m)
{
        if (!ps)
                return;
        pthread_mutex_lock(&ps->lock);
        m->next = ps->members;
        ps->members = m;
        pthread_mutex_unlock(&ps->lock);
}

void cube__progress_remove(cube__progress_service *ps, cube__progress *m)
{
        if (!ps)
                return;
        pthread_mutex_lock(&ps->lock);
        for (cube__progress **p = &ps->members; *p; p = &(*p)->next)
                if (*p == m) {
                        *p = m->next;
                        break;
                }
        pthread_mutex_unlock(&ps->lock);
}

/* A non-blocking connection to card "ip:port", or -1. */
static int dial(const char *card)
{
        struct sockaddr_in sa = { .sin_family = AF_INET };
        char host[64];
        unsigned port;
        int fd;

        if (sscanf(card, "%63[^:]:%u", host, &port) != 2 || port == 0 || port > 65535 ||
            inet_pton(AF_INET, host, &sa.sin_addr) != 1)
                return -1;
        sa.sin_port = htons((uint16_t) port);
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *) &sa, sizeof(sa)) < 0 &&
            errno != EINPROGRESS) {
                close(fd);
                return -1;
        }
        return fd;
}

size_t cube__progress_name_silent(const cube__progress *me, uint32_t size,
                                  const char *const *cards, char (*names)[CUBED_NAME_MAX],
                                  char *buf, size_t len)
{
        enum { ASKING, SENT, ANSWERED, SILENT };
        struct pollfd pfd[CUBE__GROUP_MAX];
        int state[CUBE__GROUP_MAX];
        uint64_t started[CUBE__GROUP_MAX], mine = atomic_load(&me->started);
        uint64_t deadline = now_ms() + PROGRESS_WAIT_MS;
        question q = { PROGRESS_MAGIC, me->group, me->nonce };
        size_t used = 0;
        int open = 0;

        if (!len || size > CUBE__GROUP_MAX)
                return 0;
        for (uint32_t r = 0; r < size; r++) {
                pfd[r] = (struct pollfd) { .fd = -1, .events = POLLOUT };
                state[r] = r == me->rank ? ANSWERED : SILENT;
                started[r] = mine;
                if (r != me->rank && cards[r] && (pfd[r].fd = dial(cards[r])) >= 0) {
                        state[r] = ASKING;
                        open++;
                }
        }
        /* Every member is asked at once: the wait is one PROGRESS_WAIT_MS. */
        while (open) {
                uint64_t now = now_ms();
                if (now >= deadline || poll(pfd, size, (int) (deadline - now)) <= 0)
                        break;
                for (uint32_t r = 0; r < size; r++) {
                        answer a;
                        if (pfd[r].fd < 0 || !pfd[r].revents)
                                continue;
                        if (state[r] == ASKING && (pfd[r].revents & POLLOUT) &&
                            send(pfd[r].fd, &q, sizeof(q), MSG_NOSIGNAL) == sizeof(q)) {
                                state[r] = SENT;
                                pfd[r].events = POLLIN;
                                continue;
                        }
                        if (state[r] == SENT && (pfd[r].revents & POLLIN) &&
                            recv(pfd[r].fd, &a, sizeof(a), MSG_WAITALL) == sizeof(a) &&
                            a.magic == PROGRESS_MAGIC) {
                                state[r] = ANSWERED;
                                started[r] = a.started;
                        }
                        close(pfd[r].fd);       /* answered, refused or broken */
                        pfd[r].fd = -1;
                        if (state[r] != ANSWERED)
                                state[r] = SILENT;
                        open--;
                }
        }
        for (uint32_t r = 0; r < size; r++) {
                if (pfd[r].fd >= 0) {
                        close(pfd[r].fd);
                        state[r] = SILENT;
                }
                if (r == me->rank || used >= len)
                        continue;
                if (state[r] == SILENT)
                        used += (size_t) snprintf(buf + used, len - used,
                                "%smember %s (rank %u) does not answer: its daemon is stopped, "
                                "gone or cut off from this one", used ? "; " : "", names[r], r);
                else if (started[r] == UNKNOWN_GROUP)
                        used += (size_t) snprintf(buf + used, len - used,
                                "%smember %s (rank %u) has left the group (its session ended)",
                                used ? "; " : "", names[r], r);
                else if (started[r] < mine)
                        used += (size_t) snprintf(buf + used, len - used,
                                "%smember %s (rank %u) never started it: it has started %" PRIu64
                                " of the group's operations, this is operation %" PRIu64
                                " (has its client asked for it?)", used ? "; " : "", names[r],
                                r, started[r], mine);
        }
        return used < len ? used : len - 1;
}

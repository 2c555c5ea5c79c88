/*
 * closer.c - closing descriptors off the event loop.
 *
 * close() can block: the last close of a TCP socket with unsent data and
 * SO_LINGER waits for the linger time, a file on FUSE waits for its server.
 * A descriptor a client passed us (or one still queued in a connection's
 * socket when it closes, whose last reference the kernel then drops in the
 * closing thread) is therefore never closed on the loop thread: its last
 * reference goes to one closer thread, through a pipe, and the loop closes
 * only a duplicate, which is cheap. Sockets passed to us lose their linger
 * first, so that even the closer thread does not wait on them.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <unistd.h>

#include "services.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int queue[2] = { -1, -1 };       /* the loop writes descriptors, the closer reads them */

static void *closer_main(void *arg)
{
        int fd;

        (void) arg;
        for (;;) {
                ssize_t n = read(queue[0], &fd, sizeof(fd));
                if (n == (ssize_t) sizeof(fd))
                        close(fd);
                else if (n < 0 && errno != EINTR)
                        return NULL;
        }
}

static void closer_start(void)
{
        pthread_t t;

        if (pipe2(queue, O_CLOEXEC) < 0) {
                queue[0] = queue[1] = -1;
                return;
        }
        /* The loop never waits on the closer: a full queue closes in place. */
        (void) fcntl(queue[1], F_SETFL, O_NONBLOCK);
        if (pthread_create(&t, NULL, closer_main, NULL) != 0) {
                close(queue[0]);
                close(queue[1]);
                queue[0] = queue[1] = -1;
                return;
        }
        pthread_detach(t);
}

/* Whether the closer took fd (it closes it); false leaves fd to the caller. */
static bool hand_over(int fd)
{
        pthread_once(&once, closer_start);
        return queue[1] >= 0 && write(queue[1], &fd, sizeof(fd)) == (ssize_t) sizeof(fd);
}

void cube__closer_init(void)
{
        pthread_once(&once, closer_start);
}

void cube__close_later(int fd)
{
        if (fd >= 0 && !hand_over(fd))
                close(fd);
}

void cube__close_received(int fd)
{
        struct linger now = { .l_onoff = 1, .l_linger = 0 };

        if (fd < 0)
                return;
        /* Not a socket: ENOTSOCK, and nothing changes. */
        (void) setsockopt(fd, SOL_SOCKET, SO_LINGER, &now, sizeof(now));
        cube__close_later(fd);
}

int cube__close_keep(int fd)
{
        return fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
}

/*
 * peer.c - peer access for the CPU device: two CPU devices of one user map
 * each other's memory.
 *
 * A daemon exports its device memory as the memfd itself; the peer's daemon
 * maps it, and hands it to its device process, which gives it to PoCL as it
 * gives device memory, so a kernel may bind a buffer of either (queue.h's
 * peer addresses). Copies reach it with memcpy, as they reach device memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cpu.h"
#include "errors.h"
#include "io.h"

/* This device's memory, for a peer daemon to map. */
int cube__cpu_peer_export(cube__device *d, int *ret_fd, uint64_t *ret_size)
{
        int fd = fcntl(d->memory_fd, F_DUPFD_CLOEXEC, 0);

        if (fd < 0)
                return -errno;
        *ret_fd = fd;
        *ret_size = d->memory_limit;
        return 0;
}

uint64_t cube__cpu_peer_offset(cube__device *d, cube__storage *s)
{
        (void) d;
        return s->offset;
}

/* Sends the control message m with fd passed along (SCM_RIGHTS). */
static int send_with_fd(int sock, const cube__msg *m, const void *payload, int fd)
{
        char buf[sizeof(*m) + 8];
        union { struct cmsghdr h; char room[CMSG_SPACE(sizeof(int))]; } u;
        struct iovec iov = { buf, sizeof(*m) + m->len };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.room,
                             .msg_controllen = sizeof(u.room) };
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        ssize_t n;

        if (m->len > 8)
                return -EINVAL;
        memset(&u, 0, sizeof(u));
        memcpy(buf, m, sizeof(*m));
        memcpy(buf + sizeof(*m), payload, m->len);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(int));
        do
                n = sendmsg(sock, &mh, MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        if (n < 0)
                return -errno;
        return (size_t) n == iov.iov_len ? 0 : cube__write_all(sock, buf + n,
                                                               iov.iov_len - (size_t) n);
}

/* Maps a peer's memory here and in the device process, which builds PoCL
 * buffers over it as it does over device memory. Takes fd. */
cube_error *cube__cpu_peer_attach(cube__device *d, int fd, uint64_t size, uint32_t *ret_slot)
{
        cube__msg msg = { .type = CUBE__MSG_PEER, .len = 8 };
        cube__msg_reply rep = { 0 };
        char reason[512] = "";
        struct stat st;
        uint32_t slot;
        char *map;
        int r = 0;

        if (fstat(fd, &st) < 0 || (uint64_t) st.st_size < size || size == 0 ||
            size > CUBE__PEER_SPAN) {
                close(fd);
                return cube__err_validation("the peer's memory descriptor does not hold the "
                                            "%" PRIu64 " bytes it claims", size);
        }
        map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
        if (map == MAP_FAILED) {
                close(fd);
                return cube__cpu_defect(CUBE_IO_UNKNOWN, "cannot map the peer's memory: %s",
                                        strerror(errno));
        }
        pthread_mutex_lock(&d->control_lock);
        slot = atomic_load(&d->n_peers);
        if (slot >= CUBE__PEERS_MAX)
                r = -ENOSPC;
        else if (atomic_load(&d->dead))
                r = -EPIPE;
        msg.id = slot;
        if (r == 0 && (r = send_with_fd(d->control_fd, &msg, &size, fd)) == 0)
                r = cube__cpu_read_reply(d, &rep, reason, sizeof(reason));
        if (r == 0 && rep.status == 0) {
                d->peers[slot] = (peer_map) { map, size };
                atomic_store(&d->n_peers, slot + 1);
        }
        pthread_mutex_unlock(&d->control_lock);
        close(fd);
        if (r == 0 && rep.status == 0) {
                *ret_slot = slot;
                return NULL;
        }
        munmap(map, size);
        if (r == -ENOSPC)
                return cube__err_validation("the CPU device maps at most %u peers",
                                            CUBE__PEERS_MAX);
        if (r < 0)
                return cube__cpu_defect(CUBE_IO_UNKNOWN, "the CPU device did not map the peer's "
                                        "memory: its process is gone");
        return cube__cpu_defect(CUBE_IO_UNKNOWN, "the CPU device could not map the peer's "
                                "memory: %s", reason);
}

cube_error *cube__cpu_peer_storage(cube__device *d, uint32_t slot, uint64_t offset,
                                   uint64_t size, cube__storage **ret_storage)
{
        cube__storage *s;

        if (slot >= atomic_load(&d->n_peers) || offset > d->peers[slot].size ||
            size > d->peers[slot].size - offset || offset / d->window !=
            (offset + (size ? size - 1 : 0)) / d->window)
                return cube__err_validation("%" PRIu64 " bytes at %" PRIu64 " do not lie in one "
                                            "window of the peer's memory", size, offset);
        if (!(s = calloc(1, sizeof(*s))))
                return cube__err_io_size(CUBE_IO_OUT_OF_MEMORY, size);
        *s = (cube__storage) { .size = size, .offset = offset, .extent = size, .peer = slot + 1 };
        *ret_storage = s;
        return NULL;
}

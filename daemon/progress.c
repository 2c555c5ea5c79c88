/*
 * progress.c - how far each member of a same-host group has got, so that
 * when an operation fails the others can name the member they waited for.
 *
 * A collective that times out only tells a member that a message did not
 * come; in a group of more than two, the member it waited for may itself be
 * waiting for another. So every member of a same-host group maps one small
 * file in the comm directory, which rank 0 creates before it publishes the
 * group: a slot per rank holding the member's daemon pid and how many of
 * the group's operations it has started. When an operation fails, a member
 * reads the slots: a member that has not started the operation this one is
 * in is the one everyone waits for (its client has not asked for it, or its
 * daemon is too far behind), and one that started it but whose daemon is
 * stopped is stuck in it.
 *
 * The slots are written only by their own member's group thread, with plain
 * atomic stores; reading a slot another member is writing is harmless, for
 * the figures only name a member in a message. A file that cannot be made
 * or mapped leaves the naming to what the engine and the sockets tell.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cubed.h"

#define PROGRESS_MAGIC 0x63756265706f6773ull    /* "cubepogs" */

typedef struct slot {
        _Atomic uint64_t started;       /* operations this member has started */
        _Atomic int32_t pid;            /* its daemon, 0 until it joined */
        uint32_t pad;
} slot;

typedef struct page {
        uint64_t magic;
        uint64_t nonce;                 /* the group's round */
        uint32_t size;
        uint32_t pad;
        slot slots[];
} page;

struct cube__progress {
        page *p;
        size_t len;
        uint32_t rank, size;
};

void cube__progress_path(const char *comm_dir, uint64_t group, uint64_t nonce, char *buf,
                         size_t len)
{
        snprintf(buf, len, "%s/.cube-comm-%016" PRIx64 "-%016" PRIx64 ".progress", comm_dir,
                 group, nonce);
}

/* Rank 0 creates the file (create) before the others learn the round; they
 * open it once they have (!create). */
cube__progress *cube__progress_open(const char *path, bool create, uint64_t nonce,
                                    uint32_t rank, uint32_t size)
{
        size_t len = sizeof(page) + (size_t) size * sizeof(slot);
        cube__progress *pr;
        struct stat st;
        page *p;
        int fd;

        if (create)
                fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        else
                fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return NULL;
        if ((create && ftruncate(fd, (off_t) len) < 0) || fstat(fd, &st) < 0 ||
            !S_ISREG(st.st_mode) || st.st_uid != geteuid() || (size_t) st.st_size != len) {
                close(fd);
                if (create)
                        unlink(path);
                return NULL;
        }
        p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (p == MAP_FAILED) {
                if (create)
                        unlink(path);
                return NULL;
        }
        if (create) {
                p->nonce = nonce;
                p->size = size;
                p->magic = PROGRESS_MAGIC;
        } else if (p->magic != PROGRESS_MAGIC || p->nonce != nonce || p->size != size) {
                munmap(p, len);
                return NULL;
        }
        if (!(pr = malloc(sizeof(*pr)))) {
                munmap(p, len);
                return NULL;
        }
        *pr = (cube__progress) { p, len, rank, size };
        atomic_store(&p->slots[rank].pid, (int32_t) getpid());
        return pr;
}

void cube__progress_free(cube__progress *pr)
{
        if (!pr)
                return;
        munmap(pr->p, pr->len);
        free(pr);
}

void cube__progress_started(cube__progress *pr, uint64_t op)
{
        if (pr)
                atomic_store(&pr->p->slots[pr->rank].started, op);
}

/* Whether process pid is stopped (SIGSTOP, or a debugger's). */
static bool stopped(int32_t pid)
{
        char path[64], buf[256], *paren;
        ssize_t n;
        int fd;

        snprintf(path, sizeof(path), "/proc/%" PRId32 "/stat", pid);
        if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
                return false;
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return false;
        buf[n] = '\0';
        /* "pid (comm) S ...": comm may hold spaces and parentheses. */
        if (!(paren = strrchr(buf, ')')) || paren[1] != ' ')
                return false;
        return paren[2] == 'T' || paren[2] == 't';
}

size_t cube__progress_name_silent(const cube__progress *pr, char (*names)[CUBED_NAME_MAX],
                                  char *buf, size_t len)
{
        size_t used = 0;
        uint64_t mine;

        if (!pr || !len)
                return 0;
        mine = atomic_load(&pr->p->slots[pr->rank].started);
        for (uint32_t r = 0; r < pr->size && used < len; r++) {
                uint64_t theirs = atomic_load(&pr->p->slots[r].started);
                int32_t pid = atomic_load(&pr->p->slots[r].pid);
                if (r == pr->rank)
                        continue;
                if (theirs < mine)
                        used += (size_t) snprintf(buf + used, len - used,
                                "%smember %s (rank %u) never started it: it has started %" PRIu64
                                " of the group's operations, this is operation %" PRIu64
                                " (has its client asked for it?)", used ? "; " : "", names[r],
                                r, theirs, mine);
                else if (pid > 0 && stopped(pid))
                        used += (size_t) snprintf(buf + used, len - used,
                                "%smember %s (rank %u) is stuck in it: its daemon (pid %" PRId32
                                ") is stopped", used ? "; " : "", names[r], r, pid);
        }
        return used < len ? used : len - 1;
}

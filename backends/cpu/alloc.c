/*
 * alloc.c - the CPU device's memory: one memfd that cubed and the device
 * process both map, handed out in ranges from a list of its free holes.
 *
 * cubed allocates on its loop thread (driver.h). A range never straddles two
 * of the windows kernels address memory in (queue.h's window), and it reads
 * as zeros when it is handed out. Memory freed goes back to the host at
 * once, whole pages of it punched out of the memfd: cubed's resident memory
 * follows what is in use, not what once was. A peer's memory (peer.c) is
 * named by storage too, but never allocated here: it is the peer's.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "errors.h"

#define CPU_PAGE_MIN (64 * 1024)        /* allocations this large are page-aligned */

/* Fresh device memory reads as zeros: memory freed by one session must never
 * show its bytes to another. Whole pages go back to the kernel (a hole in
 * the memfd reads as zeros and costs nothing); anything smaller is cleared. */
static void zero(cube__device *d, uint64_t offset, uint64_t len)
{
        if (len >= CPU_PAGE_MIN && offset % CPU_PAGE == 0 && len % CPU_PAGE == 0 &&
            fallocate(d->memory_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t) offset,
                      (off_t) len) == 0)
                return;
        memset(d->memory + offset, 0, len);
}

/* Punches the whole pages inside [offset, offset + len) out of the memfd:
 * they leave cubed's (and the device process's) resident memory, and read
 * as zeros. */
static void punch(cube__device *d, uint64_t offset, uint64_t len)
{
        uint64_t start = (offset + CPU_PAGE - 1) / CPU_PAGE * CPU_PAGE;
        uint64_t end = (offset + len) / CPU_PAGE * CPU_PAGE;

        if (end >= start + CPU_PAGE_MIN)
                (void) fallocate(d->memory_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                 (off_t) start, (off_t) (end - start));
}

cube_error *cube__cpu_alloc(cube__device *d, uint64_t size, cube__storage **ret_storage)
{
        uint64_t align = size >= CPU_PAGE_MIN ? CPU_PAGE : CPU_ALIGNMENT;
        uint64_t extent = (size + align - 1) / align * align;
        cube__storage *s;

        if (size > d->memory_limit || size > d->window)
                return cube__err_io_size(CUBE_IO_BUFFER_TOO_BIG, size);
        if (extent == 0)
                extent = CPU_ALIGNMENT;
        for (hole **hp = &d->holes; *hp; hp = &(*hp)->next) {
                hole *h = *hp;
                uint64_t start = (h->offset + align - 1) / align * align;
                if (start / d->window != (start + extent - 1) / d->window)
                        start = (start / d->window + 1) * d->window;
                if (start + extent > h->offset + h->len)
                        continue;
                if (!(s = malloc(sizeof(*s))))
                        return cube__err_io_size(CUBE_IO_OUT_OF_MEMORY, size);
                /* Split the hole: [offset, start) stays, [start + extent, end) too. */
                uint64_t end = h->offset + h->len;
                if (start > h->offset) {
                        hole *tail = NULL;
                        if (start + extent < end && !(tail = malloc(sizeof(*tail)))) {
                                free(s);
                                return cube__err_io_size(CUBE_IO_OUT_OF_MEMORY, size);
                        }
                        h->len = start - h->offset;
                        if (tail) {
                                *tail = (hole) { start + extent, end - start - extent, h->next };
                                h->next = tail;
                        }
                } else if (start + extent < end) {
                        h->offset = start + extent;
                        h->len = end - h->offset;
                } else {
                        *hp = h->next;
                        free(h);
                }
                *s = (cube__storage) { .size = size, .offset = start, .extent = extent };
                zero(d, start, extent);
                d->in_use += extent;
                *ret_storage = s;
                return NULL;
        }
        return cube__err_io_size(CUBE_IO_OUT_OF_MEMORY, size);
}

void cube__cpu_release(cube__device *d, cube__storage *s)
{
        hole **hp = &d->holes, *prev = NULL, *h;

        if (!s)
                return;
        if (s->peer) {
                free(s);        /* the peer's memory is the peer's */
                return;
        }
        d->in_use -= s->extent;
        punch(d, s->offset, s->extent);
        while (*hp && (*hp)->offset < s->offset) {
                prev = *hp;
                hp = &(*hp)->next;
        }
        if (prev && prev->offset + prev->len == s->offset) {
                prev->len += s->extent;
                h = prev;
        } else if (!(h = malloc(sizeof(*h)))) {
                free(s);        /* leaks the range: better than a wrong list */
                return;
        } else {
                *h = (hole) { s->offset, s->extent, *hp };
                *hp = h;
        }
        if (h->next && h->offset + h->len == h->next->offset) {
                hole *n = h->next;
                h->len += n->len;
                h->next = n->next;
                free(n);
        }
        free(s);
}

void cube__cpu_discard(cube__device *d, cube__storage *s, uint64_t offset, uint64_t len)
{
        if (!s->peer && offset < s->extent)
                punch(d, s->offset + offset, len < s->extent - offset ? len : s->extent - offset);
}

/* Where a storage's bytes are in cubed: device memory, or a peer's. */
char *cube__cpu_bytes_of(cube__device *d, const cube__storage *s)
{
        return (s->peer ? d->peers[s->peer - 1].map : d->memory) + s->offset;
}

void *cube__cpu_host_view(cube__device *d, cube__storage *s)
{
        return cube__cpu_bytes_of(d, s);
}

/*
 * pools.c - device memory in pages and slices, per stream, as the
 * reference's memory management keeps it.
 *
 * Asking the device for memory is slow, and on a GPU it synchronises, so
 * allocations are carved from pages the stream keeps:
 *
 *   small       slices of at most 64 KiB, first fit, from shared pages
 *   large       one allocation per page, pages of whole MiB, reused by size;
 *               at most 64 page sizes may hold live allocations at once
 *   persistent  one allocation per page, reused only by the exact size
 *   dedicated   one page per allocation, given back at the next cleanup
 *
 * MemoryAllocationMode picks the route: Persistent and Dedicated push a
 * mode, Auto pops one, as in the reference. A page that holds no live slice
 * stays for reuse until memory_cleanup (or a reservation that found the
 * device full) gives it back, but the bytes of a freed allocation go back
 * to the host at once (driver.h's discard). Pages belong to a stream of a session; they
 * outlive it only while exported allocations still live on them.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "services.h"

#define SMALL_SLICE (64u * 1024)
#define SMALL_PAGE_MAX (8u << 20)
#define LARGE_GRANULE (1u << 20)
#define PAGE_SIZES_MAX 64

static const char *const pool_names[CUBE__POOLS] = {
        [CUBE__POOL_SMALL] = "sliced", [CUBE__POOL_LARGE] = "exclusive",
        [CUBE__POOL_PERSISTENT] = "persistent", [CUBE__POOL_DEDICATED] = "dedicated",
};

static uint64_t round_up(uint64_t v, uint64_t to)
{
        return (v + to - 1) / to * to;
}

/* The small pool's page size: 8 MiB, or a 64th of a small device. */
static uint64_t small_page(const cube__pools_device *dev)
{
        uint64_t p = dev->properties->memory_bytes / 64;

        p = p < SMALL_SLICE ? SMALL_SLICE : p > SMALL_PAGE_MAX ? SMALL_PAGE_MAX : p;
        return round_up(p, SMALL_SLICE);
}

cube__pools *cube__pools_new(cube__pools_device *dev)
{
        cube__pools *m = calloc(1, sizeof(*m));

        if (!m)
                return NULL;
        m->device = dev;
        m->refs = 1;
        for (int i = 0; i < CUBE__POOLS; i++)
                m->pools[i].kind = i;
        m->pools[CUBE__POOL_SMALL].page_size = small_page(dev);
        m->pools[CUBE__POOL_SMALL].max_slice = SMALL_SLICE;
        return m;
}

static void page_free(cube__pools_device *dev, cube__pool *pool, cube__page *p)
{
        for (cube__page **q = &pool->pages; *q; q = &(*q)->next)
                if (*q == p) {
                        *q = p->next;
                        break;
                }
        pool->n_pages--;
        pool->bytes_reserved -= p->size;
        dev->reserved -= p->size;
        dev->driver->release(dev->device, p->storage);
        for (cube__slice *s = p->slices, *next; s; s = next) {
                next = s->next;
                free(s);
        }
        free(p);
}

/* Gives back every page of m that holds no live slice. */
uint64_t cube__pools_cleanup(cube__pools *m)
{
        uint64_t freed = 0;

        for (int i = 0; i < CUBE__POOLS; i++) {
                cube__pool *pool = &m->pools[i];
                for (cube__page *p = pool->pages, *next; p; p = next) {
                        next = p->next;
                        if (p->live == 0) {
                                freed += p->size;
                                page_free(m->device, pool, p);
                        }
                }
        }
        return freed;
}

static void memory_put(cube__pools *m)
{
        if (--m->refs > 0)
                return;
        cube__pools_cleanup(m);
        free(m);
}

void cube__pools_close(cube__pools *m)
{
        if (!m)
                return;
        cube__pools_cleanup(m);
        memory_put(m);
}

/* A new page of size bytes from the device, for an allocation of asked
 * bytes. A device that is full now is first relieved of every empty page any
 * stream keeps, and asked once more. Its out-of-memory error names the size
 * asked, as every other error of a reservation does, not the page's. */
static cube_error *page_new(cube__pools *m, cube__pool *pool, uint64_t size, uint64_t asked,
                            cube__page **ret_page)
{
        cube__pools_device *dev = m->device;
        cube__page *p = calloc(1, sizeof(*p));
        cube_error *e;

        if (!p)
                return cube__err_io_size(CUBE_IO_OUT_OF_MEMORY, asked);
        e = dev->driver->alloc(dev->device, size, &p->storage);
        if (e && cube_error_may_succeed_after_reclaim(e) && dev->reclaim) {
                cube_error_free(e);
                dev->reclaim(dev->reclaim_ctx);
                e = dev->driver->alloc(dev->device, size, &p->storage);
        }
        if (e) {
                free(p);
                if (cube_error_kind_of(e) == CUBE_SERVER_IO && cube_error_source(e) &&
                    cube_error_kind_of(cube_error_source(e)) == CUBE_IO_OUT_OF_MEMORY) {
                        cube_error_free(e);
                        e = cube__err_io_size(CUBE_IO_OUT_OF_MEMORY, asked);
                }
                return e;
        }
        p->pool = pool;
        p->size = size;
        p->next = pool->pages;
        pool->pages = p;
        pool->n_pages++;
        if (pool->n_pages > pool->pages_peak)
                pool->pages_peak = pool->n_pages;
        pool->bytes_reserved += size;
        dev->reserved += size;
        *ret_page = p;
        return NULL;
}

/* First fit in a small page: splits a free slice. */
static bool slice_take(cube__page *p, uint64_t size, uint64_t *ret_offset)
{
        for (cube__slice *s = p->slices; s; s = s->next) {
                if (!s->free || s->size < size)
                        continue;
                if (s->size > size) {
                        cube__slice *rest = calloc(1, sizeof(*rest));
                        if (!rest)
                                return false;
                        rest->offset = s->offset + size;
                        rest->size = s->size - size;
                        rest->free = true;
                        rest->next = s->next;
                        s->next = rest;
                        s->size = size;
                }
                s->free = false;
                *ret_offset = s->offset;
                return true;
        }
        return false;
}

/* Returns a slice and fuses it with free neighbours. */
static void slice_give(cube__page *p, uint64_t offset)
{
        cube__slice *prev = NULL;

        for (cube__slice *s = p->slices; s; prev = s, s = s->next) {
                if (s->offset != offset)
                        continue;
                s->free = true;
                if (s->next && s->next->free) {
                        cube__slice *n = s->next;
                        s->size += n->size;
                        s->next = n->next;
                        free(n);
                }
                if (prev && prev->free) {
                        prev->size += s->size;
                        prev->next = s->next;
                        free(s);
                }
                return;
        }
}

static unsigned large_sizes_held(const cube__pool *pool, uint64_t except)
{
        uint64_t seen[PAGE_SIZES_MAX + 1];
        unsigned n = 0;

        for (const cube__page *p = pool->pages; p; p = p->next) {
                bool dup = p->size == except;
                for (unsigned i = 0; i < n && !dup; i++)
                        dup = seen[i] == p->size;
                if (!dup && n <= PAGE_SIZES_MAX)
                        seen[n++] = p->size;
        }
        return n;
}

/* A page of exactly size bytes with no live slice, or NULL. */
static cube__page *free_page(cube__pool *pool, uint64_t size)
{
        for (cube__page *p = pool->pages; p; p = p->next)
                if (p->live == 0 && p->size == size)
                        return p;
        return NULL;
}

cube_error *cube__pools_reserve(cube__pools *m, uint64_t size, cube__carve *ret_carve)
{
        const cube_device_properties *props = m->device->properties;
        uint32_t align = props->alignment ? props->alignment : 64;
        uint64_t aligned = round_up(size ? size : 1, align);
        int mode = m->n_modes ? m->modes[m->n_modes - 1] : CUBE__MODE_AUTO;
        cube__pool *pool;
        cube__page *p = NULL;
        uint64_t offset = 0, page_size;
        cube_error *e;

        if (size > props->max_page_size)
                return cube__err_io_size(CUBE_IO_BUFFER_TOO_BIG, size);

        if (mode == CUBE__MODE_DEDICATED) {
                pool = &m->pools[CUBE__POOL_DEDICATED];
                page_size = aligned;
        } else if (mode == CUBE__MODE_PERSISTENT) {
                pool = &m->pools[CUBE__POOL_PERSISTENT];
                page_size = aligned;
                p = free_page(pool, page_size);
        } else if (aligned <= SMALL_SLICE) {
                pool = &m->pools[CUBE__POOL_SMALL];
                page_size = pool->page_size;
                for (p = pool->pages; p; p = p->next)
                        if (slice_take(p, aligned, &offset))
                                break;
        } else {
                pool = &m->pools[CUBE__POOL_LARGE];
                page_size = round_up(aligned, LARGE_GRANULE);
                if (page_size > props->max_page_size)
                        page_size = aligned;
                p = free_page(pool, page_size);
                if (!p && m->capture == CUBE__CAPTURE_NONE &&
                    large_sizes_held(pool, page_size) >= PAGE_SIZES_MAX) {
                        cube__pools_cleanup(m);
                        if (large_sizes_held(pool, page_size) >= PAGE_SIZES_MAX)
                                return cube__err_io_size(CUBE_IO_PAGE_SIZES_EXHAUSTED, size);
                }
        }

        /* A recording graph capture may reuse what the warm-up left, and
         * add nothing: the recorded launches would name a page that the
         * replays must then keep, and a hardware graph holding an
         * allocation cannot be relaunched. */
        if (!p && m->capture == CUBE__CAPTURE_RECORDING)
                return cube__err_io_size(CUBE_IO_PAGE_UPDATE_FORBIDDEN, size);
        if (!p) {
                if ((e = page_new(m, pool, page_size, size, &p)))
                        return e;
                if (pool->kind == CUBE__POOL_SMALL) {
                        p->slices = calloc(1, sizeof(*p->slices));
                        if (!p->slices || (p->slices->size = page_size,
                                           p->slices->free = true, !slice_take(p, aligned, &offset))) {
                                page_free(m->device, pool, p);
                                return cube__err_io_size(CUBE_IO_OUT_OF_MEMORY, size);
                        }
                }
        }
        p->live++;
        m->refs++;
        pool->allocations++;
        pool->bytes_in_use += size;
        pool->bytes_padding += aligned - size;
        if (size > pool->largest_alloc)
                pool->largest_alloc = size;
        *ret_carve = (cube__carve) { .pools = m, .page = p, .storage = p->storage, .base = offset,
                                     .padding = aligned - size };
        return NULL;
}

void cube__pools_release(const cube__carve *c, uint64_t size)
{
        cube__page *p = c->page;
        cube__pool *pool = p->pool;

        if (pool->kind == CUBE__POOL_SMALL)
                slice_give(p, c->base);
        /* The bytes go back to the host now, though the page stays for
         * reuse (cubed's resident memory follows what is in use). */
        if (c->pools->device->driver->discard)
                c->pools->device->driver->discard(c->pools->device->device, p->storage, c->base,
                                                  size + c->padding);
        p->live--;
        pool->allocations--;
        pool->bytes_in_use -= size;
        pool->bytes_padding -= c->padding;
        memory_put(c->pools);
}

void cube__pools_mode(cube__pools *m, int mode)
{
        if (mode == CUBE__MODE_AUTO) {
                if (m->n_modes > 0)
                        m->n_modes--;
                return;
        }
        if (m->n_modes < (int) (sizeof(m->modes) / sizeof(m->modes[0])))
                m->modes[m->n_modes++] = mode;
}

int cube__pools_pack(const cube__pools *m, uint64_t stream, msgpack_packer *pk)
{
        int r = 0;

        r |= msgpack_pack_map(pk, 2);
        r |= cube__pack_kv_u64(pk, "stream", stream);
        r |= cube__pack_str(pk, "pools");
        r |= msgpack_pack_array(pk, CUBE__POOLS);
        for (int i = 0; i < CUBE__POOLS; i++) {
                const cube__pool *pool = &m->pools[i];
                r |= msgpack_pack_map(pk, 10);
                r |= cube__pack_kv_str(pk, "kind", pool_names[i]);
                r |= cube__pack_kv_u64(pk, "page_size", pool->page_size);
                r |= cube__pack_kv_u64(pk, "max_slice", pool->max_slice);
                r |= cube__pack_kv_u64(pk, "allocations", pool->allocations);
                r |= cube__pack_kv_u64(pk, "bytes_in_use", pool->bytes_in_use);
                r |= cube__pack_kv_u64(pk, "bytes_padding", pool->bytes_padding);
                r |= cube__pack_kv_u64(pk, "bytes_reserved", pool->bytes_reserved);
                r |= cube__pack_kv_u64(pk, "pages", pool->n_pages);
                r |= cube__pack_kv_u64(pk, "pages_peak", pool->pages_peak);
                r |= cube__pack_kv_u64(pk, "largest_alloc", pool->largest_alloc);
        }
        return r ? -ENOMEM : 0;
}

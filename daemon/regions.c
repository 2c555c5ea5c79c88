/*
 * regions.c - staging through shared memory.
 *
 * Bulk data through the socket is copied twice by the kernel. A region is a
 * memfd the daemon creates, maps once and passes to the client (SCM_RIGHTS
 * with the answer), which maps it too: the client writes into it directly,
 * and a write or read then names (region, offset, size) instead of carrying
 * the bytes, so the only copy is the device's own. A region counts against
 * its session's region-memory quota and goes with the session; its mapping
 * stays while queued work still uses it.
 *
 * The client holds the region's descriptor too, so what it could do to it is
 * part of the design: every region is sealed against shrinking and growing
 * (and against unsealing) before it is sent, so that no client can truncate
 * the file under a mapping the daemon copies through (that would be SIGBUS
 * in cubed). A region is charged in whole pages, and a session holds at most
 * max-regions of them: each is a mapping, and the kernel's vm.max_map_count
 * is shared by every session of the daemon.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cubed.h"

/* What a region of size bytes is charged: whole pages, as it is mapped. */
static uint64_t region_charge(uint64_t size)
{
        uint64_t page = (uint64_t) sysconf(_SC_PAGESIZE);

        return size > UINT64_MAX - page ? UINT64_MAX : (size + page - 1) / page * page;
}

static void region_unmap(cube__region *r)
{
        cube__session *s = r->session;
        cube__server *srv = s->server;

        /* A backend that pinned the region unpins and unmaps it off the loop. */
        if (srv->driver->host_release)
                srv->driver->host_release(srv->device, r->map, r->size);
        else
                munmap(r->map, r->size);
        s->region_bytes -= region_charge(r->size);
        s->n_regions--;
        cube__regions_held(&srv->users, s->uid, -1);
        free(r);
}

void cube__region_unref(cube__region *r)
{
        if (--r->pending == 0 && r->freed)
                region_unmap(r);
}

void cube__region_free(cube__region *r)
{
        cube__idmap_remove(&r->session->regions, r->id);
        r->freed = true;
        if (r->pending == 0)
                region_unmap(r);
}

cube_error *cube__region_range(cube__session *s, const msgpack_object *o, bool sized,
                               cube__region **ret_region, uint64_t *ret_offset, uint64_t *ret_size)
{
        const msgpack_object_array *a;
        uint64_t id, offset, size = 0;
        cube__region *r;

        if (!cube__obj_array(o, &a) || a->size != (sized ? 4u : 3u) ||
            a->ptr[0].type != MSGPACK_OBJECT_STR || a->ptr[0].via.str.size != 6 ||
            memcmp(a->ptr[0].via.str.ptr, "region", 6) != 0 || !cube__obj_u64(&a->ptr[1], &id) ||
            !cube__obj_u64(&a->ptr[2], &offset) || (sized && !cube__obj_u64(&a->ptr[3], &size)))
                return cube__err_validation("a region reference must be [\"region\", id, offset%s]",
                                            sized ? ", size" : "");
        r = cube__idmap_get(&s->regions, id);
        if (!r)
                return cube__err_not_found("region %" PRIu64 " was never created in this session, "
                                           "or was freed", id);
        if (offset > r->size || size > r->size - offset)
                return cube__err_validation("bytes [%" PRIu64 ", %" PRIu64 ") lie beyond region %"
                                            PRIu64 " of %" PRIu64 " bytes", offset, offset + size,
                                            id, r->size);
        *ret_region = r;
        *ret_offset = offset;
        *ret_size = size;
        return NULL;
}

cube__dispatched cube__do_region(cube__msg *k)
{
        cube__session *s = k->session;
        cube__server *srv = k->server;
        uint64_t size, charge;
        cube__region *r;
        int fd = -1;
        msgpack_sbuffer sb;
        msgpack_packer pk;

        if (k->n != 1 || !cube__obj_u64(&k->p[0], &size) || size == 0) {
                cube__reply_malformed(k, "params must be [size] with a size above 0");
                return CUBE__DISPATCH_DONE;
        }
        charge = region_charge(size);
        if (charge > srv->opts.region_memory || s->region_bytes > srv->opts.region_memory - charge) {
                cube__reply_owned_error(k, cube__err_io_size(CUBE_IO_OUT_OF_MEMORY, size));
                cube__log_session(CUBE__LOG_INFO, s, 0, "session %" PRIu64 ": a region of %" PRIu64
                                  " bytes (%" PRIu64 " in whole pages) would cross region-memory (%"
                                  PRIu64 " bytes; it holds %" PRIu64 ")", s->id, size, charge,
                                  srv->opts.region_memory, s->region_bytes);
                return CUBE__DISPATCH_DONE;
        }
        if (s->n_regions >= srv->opts.max_regions) {
                cube__reply_owned_error(k, cube__err_validation(
                        "this session holds %u staging regions, the most max-regions allows; "
                        "free one (region_free) or reuse it", s->n_regions));
                cube__log_session(CUBE__LOG_INFO, s, 0, "session %" PRIu64 ": refused a region: "
                                  "it holds max-regions (%u)", s->id, srv->opts.max_regions);
                return CUBE__DISPATCH_DONE;
        }
        /* Each region is a mapping of the daemon's, and every session shares
         * vm.max_map_count: past it, no one could map anything. */
        uint64_t limit;
        const char *bound = cube__region_bound(&srv->opts, &srv->users, s->uid, &limit);
        if (bound) {
                cube__reply_owned_error(k, cube__err_validation(
                        "no more staging regions for uid %u: %s allows %" PRIu64 " %s; free one "
                        "(region_free) or reuse it", (unsigned) s->uid, bound, limit,
                        strcmp(bound, "uid-regions") == 0 ? "for one user's sessions" :
                        "for all sessions together, the rest of the daemon's mappings being "
                        "kept for root and the daemon's own user"));
                cube__log_session(CUBE__LOG_INFO, s, 0, "session %" PRIu64 ": refused a region: "
                                  "%s (%" PRIu64 ")", s->id, bound, limit);
                return CUBE__DISPATCH_DONE;
        }
        r = calloc(1, sizeof(*r));
        if (r)
                fd = memfd_create("cube-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        /* Sealed before anyone else holds it: the client cannot shrink the
         * file under the daemon's mapping, nor lift the seals. */
        if (!r || fd < 0 || ftruncate(fd, (off_t) size) < 0 ||
            fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0 ||
            (r->map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
                cube__reply_owned_error(k, cube__err_io_size(CUBE_IO_OUT_OF_MEMORY, size));
                if (fd >= 0)
                        close(fd);
                free(r);
                return CUBE__DISPATCH_DONE;
        }
        r->id = ++s->next_region;
        r->size = size;
        r->session = s;
        if (cube__idmap_put(&s->regions, r->id, r) < 0) {
                munmap(r->map, size);
                close(fd);
                free(r);
                cube__reply_owned_error(k, NULL);
                return CUBE__DISPATCH_DONE;
        }
        s->region_bytes += charge;
        s->n_regions++;
        cube__regions_held(&srv->users, s->uid, 1);
        if (srv->driver->host_register)
                srv->driver->host_register(srv->device, r->map, size);
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (cube__pack_response_ok(&pk, k->env->msgid) == 0 && msgpack_pack_array(&pk, 2) == 0 &&
            msgpack_pack_uint64(&pk, r->id) == 0 && msgpack_pack_uint64(&pk, size) == 0) {
                s->bytes_out += sb.size;
                cube__reply_sbuffer_fd(k, &sb, fd);
        } else {
                close(fd);
        }
        msgpack_sbuffer_destroy(&sb);
        return CUBE__DISPATCH_DONE;
}

cube__dispatched cube__do_region_free(cube__msg *k)
{
        uint64_t id;
        cube__region *r;

        if (k->n != 1 || !cube__obj_u64(&k->p[0], &id)) {
                cube__reply_malformed(k, "params must be [region]");
                return CUBE__DISPATCH_DONE;
        }
        r = cube__idmap_get(&k->session->regions, id);
        if (r)
                cube__region_free(r);
        return CUBE__DISPATCH_DONE;
}

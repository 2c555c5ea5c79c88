/*
 * copies.c - libcubeclient's bulk and shaped copies: staging regions shared
 * with the daemon, strided views of pitched tensors, and the staging that
 * lets cube_write and cube_read move more than one message holds.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "layout.h"
#include "rpc.h"

static cube_error *oom(void)
{
        return cube__err_generic("out of memory in libcubeclient");
}

uint64_t cube_copy_len(const cube_copy *d)
{
        uint64_t n = d->elem_size;

        for (uint32_t i = 0; i < d->rank && i < CUBE_MAX_RANK; i++)
                n *= d->shape[i];
        return n;
}

static cube_error *check_copy(cube_client *c, const cube_copy *d, uint64_t size)
{
        cube_error *e = cube__check_handle(c, &d->handle);

        if (e)
                return e;
        if (d->rank == 0 || d->rank > CUBE_MAX_RANK || d->elem_size == 0)
                return cube__err_validation("a strided copy needs a rank of 1 to %d and an "
                                            "element size", CUBE_MAX_RANK);
        if (size != cube_copy_len(d))
                return cube__err_validation("a strided copy of shape and element size covering %"
                                            PRIu64 " bytes was given %" PRIu64, cube_copy_len(d),
                                            size);
        return NULL;
}

/* [handle, shape, strides, elem_size]: the daemon checks the layout. */
static int pack_descriptor(msgpack_packer *pk, const cube_copy *d)
{
        int r = msgpack_pack_array(pk, 4) | cube__pack_handle(pk, &d->handle) |
                msgpack_pack_array(pk, d->rank);

        for (uint32_t i = 0; i < d->rank; i++)
                r |= msgpack_pack_uint64(pk, d->shape[i]);
        r |= msgpack_pack_array(pk, d->rank);
        for (uint32_t i = 0; i < d->rank; i++)
                r |= msgpack_pack_uint64(pk, d->strides[i]);
        return r | msgpack_pack_uint64(pk, d->elem_size);
}

static int pack_region_ref(msgpack_packer *pk, uint64_t id, uint64_t offset, const uint64_t *size)
{
        return msgpack_pack_array(pk, size ? 4 : 3) | msgpack_pack_str_with_body(pk, "region", 6) |
               msgpack_pack_uint64(pk, id) | msgpack_pack_uint64(pk, offset) |
               (size ? msgpack_pack_uint64(pk, *size) : 0);
}

/* One write notify: the target is a handle or a descriptor, the data inline
 * (bytes != NULL) or a region reference. */
static cube_error *send_write(cube_client *c, const cube_handle *h, const cube_copy *d,
                              const void *bytes, uint64_t size, const cube_region *r,
                              uint64_t offset)
{
        cube__frame f;
        int rc;

        cube__frame_init(&f);
        rc = cube__pack_notify(&f.pk, "write", 3) | msgpack_pack_uint64(&f.pk, cube_stream_current());
        rc |= d ? pack_descriptor(&f.pk, d) : cube__pack_handle(&f.pk, h);
        rc |= r ? pack_region_ref(&f.pk, r->id, offset, &size) : msgpack_pack_bin(&f.pk, (size_t) size);
        if (rc) {
                cube__frame_destroy(&f);
                return oom();
        }
        return cube__frame_send(c, &f, NULL, r ? NULL : bytes, r ? 0 : (size_t) size);
}

typedef struct read_into {
        void *dst;
        uint64_t size;
        bool staged;
} read_into;

static cube_error *deliver_read(cube__call *call, const msgpack_object *res)
{
        read_into *t = call->ctx;
        const msgpack_object *o = res->type == MSGPACK_OBJECT_ARRAY && res->via.array.size == 1 ?
                                  &res->via.array.ptr[0] : NULL;
        const void *p;
        size_t n;
        uint64_t len;

        if (o && t->staged && cube__obj_u64(o, &len) && len == t->size)
                return NULL;
        if (o && !t->staged && cube__obj_bin(o, &p, &n) && n == t->size) {
                if (n)
                        memcpy(t->dst, p, n);
                return NULL;
        }
        return cube__err_generic("cubed answered a read of %" PRIu64 " bytes with something else",
                                 t->size);
}

/* One read request of one target, inline into dst or into a region. */
static cube_error *call_read(cube_client *c, const cube_handle *h, const cube_copy *d, void *dst,
                             uint64_t size, const cube_region *r, uint64_t offset)
{
        read_into t = { dst, size, r != NULL };
        cube__call call = { .deliver = deliver_read, .ctx = &t, .direct = r ? NULL : dst,
                            .direct_len = size };
        cube__frame f;
        int rc;

        cube__frame_init(&f);
        call.msgid = cube__next_msgid(c);
        rc = cube__pack_request(&f.pk, call.msgid, "read", r ? 3 : 2) |
             msgpack_pack_uint64(&f.pk, cube_stream_current()) | msgpack_pack_array(&f.pk, 1);
        rc |= d ? pack_descriptor(&f.pk, d) : cube__pack_handle(&f.pk, h);
        if (r)
                rc |= pack_region_ref(&f.pk, r->id, offset, NULL);
        if (rc) {
                cube__frame_destroy(&f);
                return oom();
        }
        return cube__frame_send(c, &f, &call, NULL, 0);
}

static bool fits_message(cube_client *c, uint64_t size)
{
        return size + 64 <= c->daemon_limits.max_message_bytes;
}

/* A write too large for one message goes through a region made for it; the
 * daemon keeps the region until the write has run, so it is freed at once. */
static cube_error *write_staged(cube_client *c, const cube_handle *h, const cube_copy *d,
                                const void *data, uint64_t size)
{
        cube_region *r;
        cube_error *e = cube_region_create(c, size, &r);

        if (e)
                return e;
        memcpy(r->data, data, size);
        e = send_write(c, h, d, NULL, size, r, 0);
        cube_region_free(c, r);
        return e;
}

static cube_error *read_staged(cube_client *c, const cube_handle *h, const cube_copy *d,
                               void *dst, uint64_t size)
{
        cube_region *r;
        cube_error *e = cube_region_create(c, size, &r);

        if (e)
                return e;
        e = call_read(c, h, d, NULL, size, r, 0);
        if (!e)
                memcpy(dst, r->data, size);
        cube_region_free(c, r);
        return e;
}

cube_error *cube__write(cube_client *c, const cube_handle *h, const void *data, uint64_t size)
{
        if (!fits_message(c, size))
                return write_staged(c, h, NULL, data, size);
        return send_write(c, h, NULL, data, size, NULL, 0);
}

cube_error *cube__read(cube_client *c, const cube_handle *h, void *dst, uint64_t size)
{
        if (!fits_message(c, size))
                return read_staged(c, h, NULL, dst, size);
        return call_read(c, h, NULL, dst, size, NULL, 0);
}

cube_error *cube_write_strided(cube_client *c, const cube_copy *d, const void *data, uint64_t size)
{
        cube_error *e = check_copy(c, d, size);

        if (!e)
                e = cube__check_writable(c, &d->handle);
        if (e)
                return e;
        if (!fits_message(c, size))
                return write_staged(c, NULL, d, data, size);
        return send_write(c, NULL, d, data, size, NULL, 0);
}

cube_error *cube_read_strided(cube_client *c, const cube_copy *d, void *dst, uint64_t size)
{
        cube_error *e = check_copy(c, d, size);

        if (e)
                return e;
        if (!fits_message(c, size))
                return read_staged(c, NULL, d, dst, size);
        return call_read(c, NULL, d, dst, size, NULL, 0);
}

cube_error *cube_layout_apply(cube_client *c, const cube_layout_descriptor *descs, size_t n,
                              cube_copy *ret_tensors, uint64_t *ret_size)
{
        char why[160];

        if (!descs && n)
                return cube__err_validation("no descriptors for a batch of %zu tensors", n);
        if (cube__layout_apply(c->properties.alignment, descs, n, ret_tensors, ret_size, why,
                               sizeof(why)) < 0)
                return cube__err_validation("%s", why);
        return NULL;
}

/* Sends create_tensors: [stream, memory, [[strategy, shape, elem_size], ...]]. */
static cube_error *send_create_tensors(cube_client *c, const cube_handle *h,
                                       const cube_layout_descriptor *descs, size_t n)
{
        cube__frame f;
        int r;

        cube__frame_init(&f);
        r = cube__pack_notify(&f.pk, "create_tensors", 3) |
            msgpack_pack_uint64(&f.pk, h->stream) | msgpack_pack_uint64(&f.pk, h->memory) |
            msgpack_pack_array(&f.pk, (uint32_t) n);
        for (size_t i = 0; i < n && r == 0; i++) {
                r |= msgpack_pack_array(&f.pk, 3) |
                     msgpack_pack_uint32(&f.pk, (uint32_t) descs[i].strategy) |
                     msgpack_pack_array(&f.pk, descs[i].rank);
                for (uint32_t j = 0; j < descs[i].rank; j++)
                        r |= msgpack_pack_uint64(&f.pk, descs[i].shape[j]);
                r |= msgpack_pack_uint64(&f.pk, descs[i].elem_size);
        }
        if (r) {
                cube__frame_destroy(&f);
                return cube__err_generic("libcubeclient is out of host memory");
        }
        return cube__frame_send(c, &f, NULL, NULL, 0);
}

cube_error *cube_empty_tensors(cube_client *c, const cube_layout_descriptor *descs, size_t n,
                               cube_copy *ret_tensors)
{
        cube_copy *t;
        cube_handle h;
        uint64_t size;
        cube_error *e;

        if (n > UINT32_MAX)
                return cube__err_validation("a batch of %zu tensors is more than one message "
                                            "can name", n);
        if (!(t = calloc(n ? n : 1, sizeof(*t))))
                return cube__err_generic("libcubeclient is out of host memory");
        if ((e = cube_layout_apply(c, descs, n, t, &size))) {
                free(t);
                return e;
        }
        h = (cube_handle) {
                .service = c->nonce,
                .memory = atomic_fetch_add(&c->next_memory, 1),
                .stream = cube_stream_current(),
                .size = size,
        };
        if ((e = send_create_tensors(c, &h, descs, n))) {
                free(t);
                return e;
        }
        for (size_t i = 0; i < n; i++) {
                h.offset_start = t[i].handle.offset_start;
                h.offset_end = t[i].handle.offset_end;
                t[i].handle = h;
                ret_tensors[i] = t[i];
        }
        free(t);
        return NULL;
}

cube_error *cube_create_tensors(cube_client *c, const cube_layout_descriptor *descs,
                                const void *const *data, size_t n, cube_copy *ret_tensors)
{
        cube_copy *t;
        cube_error *e = NULL;

        for (size_t i = 0; i < n; i++)
                if (!data || !data[i])
                        return cube__err_validation("tensor %zu has no data: "
                                                    "cube_empty_tensors makes tensors without "
                                                    "contents", i);
        if (!(t = calloc(n ? n : 1, sizeof(*t))))
                return cube__err_generic("libcubeclient is out of host memory");
        if ((e = cube_empty_tensors(c, descs, n, t))) {
                free(t);
                return e;
        }
        for (size_t i = 0; i < n && !e; i++)
                e = cube_write_strided(c, &t[i], data[i], cube_copy_len(&t[i]));
        if (e)
                cube_error_free(cube_free(c, &t[0].handle));
        else
                memcpy(ret_tensors, t, n * sizeof(*t));
        free(t);
        return e;
}

cube_error *cube_empty_tensor(cube_client *c, const uint64_t *shape, uint32_t rank,
                              uint64_t elem_size, cube_copy *ret_tensor)
{
        cube_layout_descriptor d = {
                .strategy = CUBE_LAYOUT_OPTIMIZED, .rank = rank, .elem_size = elem_size,
        };
        cube_copy t;
        cube_error *e;

        if (rank == 0 || rank > CUBE_MAX_RANK || elem_size == 0)
                return cube__err_validation("a tensor needs a rank of 1 to %d and an element size",
                                            CUBE_MAX_RANK);
        memcpy(d.shape, shape, rank * sizeof(*shape));
        if (!(e = cube_layout_apply(c, &d, 1, &t, &(uint64_t) {0})) &&
            !(e = cube_empty(c, cube_handle_len(&t.handle), &t.handle)))
                *ret_tensor = t;
        return e;
}

typedef struct region_answer {
        uint64_t id, size;
        int fd;
} region_answer;

static cube_error *deliver_region(cube__call *call, const msgpack_object *res)
{
        region_answer *a = call->ctx;

        /* The descriptor came with this answer; take it here, in order, so a
         * concurrent region call cannot take it. */
        a->fd = cube__take_fd(call->client);
        if (res->type != MSGPACK_OBJECT_ARRAY || res->via.array.size != 2 ||
            !cube__obj_u64(&res->via.array.ptr[0], &a->id) ||
            !cube__obj_u64(&res->via.array.ptr[1], &a->size) || a->fd < 0)
                return cube__err_generic("cubed answered a region request without a region");
        return NULL;
}

cube_error *cube_region_create(cube_client *c, uint64_t size, cube_region **ret_region)
{
        region_answer a = { .fd = -1 };
        cube_error *e = cube__request(c, "region", &size, 1, deliver_region, &a);
        cube_region *r;
        void *map;

        if (e) {
                if (a.fd >= 0)
                        close(a.fd);
                return e;
        }
        map = a.size == size ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, a.fd, 0) :
                               MAP_FAILED;
        close(a.fd);
        r = map != MAP_FAILED ? malloc(sizeof(*r)) : NULL;
        if (!r) {
                if (map != MAP_FAILED)
                        munmap(map, size);
                cube_region_free(c, &(cube_region) { .id = a.id });
                return cube__err_generic("libcubeclient could not map a region of %" PRIu64
                                         " bytes", size);
        }
        *r = (cube_region) { .id = a.id, .data = map, .size = size };
        *ret_region = r;
        return NULL;
}

static void send_region_free(cube_client *c, uint64_t id)
{
        cube__frame f;

        cube__frame_init(&f);
        if (cube__pack_notify(&f.pk, "region_free", 1) | msgpack_pack_uint64(&f.pk, id)) {
                cube__frame_destroy(&f);
                return;
        }
        cube_error_free(cube__frame_send(c, &f, NULL, NULL, 0));
}

void cube_region_free(cube_client *c, cube_region *r)
{
        if (!r)
                return;
        send_region_free(c, r->id);
        if (r->data) {
                munmap(r->data, r->size);
                free(r);
        }
}

static cube_error *check_region_range(const cube_region *r, uint64_t offset, uint64_t len)
{
        if (offset > r->size || len > r->size - offset)
                return cube__err_validation("%" PRIu64 " bytes from offset %" PRIu64 " do not fit "
                                            "region %" PRIu64 " of %" PRIu64 " bytes", len, offset,
                                            r->id, r->size);
        return NULL;
}

cube_error *cube_write_region(cube_client *c, const cube_handle *h, const cube_region *r,
                              uint64_t offset)
{
        cube_error *e = cube__check_handle(c, h);

        if (!e)
                e = cube__check_writable(c, h);
        if (!e)
                e = check_region_range(r, offset, cube_handle_len(h));
        return e ? e : send_write(c, h, NULL, NULL, cube_handle_len(h), r, offset);
}

cube_error *cube_read_region(cube_client *c, const cube_handle *h, cube_region *r,
                             uint64_t offset)
{
        cube_error *e = cube__check_handle(c, h);

        if (!e)
                e = check_region_range(r, offset, cube_handle_len(h));
        return e ? e : call_read(c, h, NULL, NULL, cube_handle_len(h), r, offset);
}

/*
 * kernels.c - libcubeclient's kernel calls: register, launch, compile the
 * queue, and list the daemon's cache.
 *
 * Registering and launching are notifications: they return once the frame is
 * on the socket. A launch's failure reaches the caller through the buffers it
 * was to write, as every asynchronous failure does.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "info.h"
#include "rpc.h"

#define PACK(expr) do { if ((expr) < 0) goto oom; } while (0)

cube_error *cube_kernel_register(cube_client *c, const char *source, const char *entry,
                                 uint64_t *ret_kernel)
{
        uint64_t id = atomic_fetch_add(&c->next_kernel, 1);
        size_t n = strlen(source);
        cube__frame f;
        cube_error *e;

        if (n > c->daemon_limits.max_str_bytes)
                return cube__err_validation("a kernel source of %zu bytes exceeds the daemon's "
                                            "string limit of %" PRIu64 " bytes", n,
                                            c->daemon_limits.max_str_bytes);
        cube__frame_init(&f);
        PACK(cube__pack_notify(&f.pk, "kernel", 3));
        PACK(msgpack_pack_uint64(&f.pk, id));
        PACK(cube__pack_str(&f.pk, source));
        PACK(cube__pack_str(&f.pk, entry));
        e = cube__frame_send(c, &f, NULL, NULL, 0);
        if (!e)
                *ret_kernel = id;
        return e;
oom:
        cube__frame_destroy(&f);
        return cube__err_generic("out of memory in libcubeclient");
}

/* A tensor map on the wire (PROTOCOL.md 5.11): [handle, format, elem, shape,
 * strides, box, elem_strides, lower_corner, upper_corner, interleave,
 * swizzle, prefetch, oob_fill]. The daemon judges every value; only a rank
 * the struct cannot hold is refused here, before it is read. */
static int pack_tensor_map(msgpack_packer *pk, const cube_tensor_map *m)
{
        uint32_t rank = m->rank, spatial = rank > 2 ? rank - 2 : 0;
        int r = 0;

        r |= msgpack_pack_array(pk, 13);
        r |= cube__pack_handle(pk, &m->buffer);
        r |= msgpack_pack_uint32(pk, (uint32_t) m->format);
        r |= msgpack_pack_uint32(pk, (uint32_t) m->elem);
        r |= msgpack_pack_array(pk, rank);
        for (uint32_t d = 0; d < rank; d++)
                r |= msgpack_pack_uint64(pk, m->shape[d]);
        r |= msgpack_pack_array(pk, rank);
        for (uint32_t d = 0; d < rank; d++)
                r |= msgpack_pack_uint64(pk, m->strides[d]);
        r |= msgpack_pack_array(pk, rank);
        for (uint32_t d = 0; d < rank; d++)
                r |= msgpack_pack_uint32(pk, m->box[d]);
        r |= msgpack_pack_array(pk, rank);
        for (uint32_t d = 0; d < rank; d++)
                r |= msgpack_pack_uint32(pk, m->elem_strides[d] ? m->elem_strides[d] : 1);
        if (m->format != CUBE_TENSOR_MAP_IM2COL)
                spatial = 0;
        r |= msgpack_pack_array(pk, spatial);
        for (uint32_t d = 0; d < spatial; d++)
                r |= msgpack_pack_int32(pk, m->lower_corner[d]);
        r |= msgpack_pack_array(pk, spatial);
        for (uint32_t d = 0; d < spatial; d++)
                r |= msgpack_pack_int32(pk, m->upper_corner[d]);
        r |= msgpack_pack_uint32(pk, (uint32_t) m->interleave);
        r |= msgpack_pack_uint32(pk, (uint32_t) m->swizzle);
        r |= msgpack_pack_uint32(pk, (uint32_t) m->prefetch);
        r |= msgpack_pack_uint32(pk, (uint32_t) m->oob_fill);
        return r;
}

cube_error *cube_launch_kernel(cube_client *c, const cube_launch *l)
{
        uint8_t *words = NULL;
        size_t words_len = 0;
        uint32_t meta = 0, dyn = 0;
        cube__frame f;
        cube_error *e;

        for (size_t i = 0; i < l->n_buffers; i++)
                if ((e = cube__check_handle(c, &l->buffers[i])))
                        return e;
        /* A read-only import declared as written is refused here; an
         * undeclared one the daemon judges, by what the kernel compiled to. */
        for (size_t i = 0; l->io && i < l->n_buffers; i++)
                if ((l->io[i] == CUBE_BUFFER_WRITE_ONLY || l->io[i] == CUBE_BUFFER_READ_WRITE) &&
                    cube__readonly(c, l->buffers[i].memory))
                        return cube__err_validation("a launch declares buffer %zu written, and "
                                                    "memory %" PRIu64 " is a read-only import; "
                                                    "declare it READ_ONLY or pass it as a "
                                                    "const pointer", i,
                                                    l->buffers[i].memory);
        if (l->dynamic_count && (e = cube__check_handle(c, l->dynamic_count)))
                return e;
        for (size_t i = 0; i < l->n_tensor_maps; i++) {
                if (l->tensor_maps[i].rank < 1 ||
                    l->tensor_maps[i].rank > CUBE_TENSOR_MAP_MAX_RANK)
                        return cube__err_validation("tensor map %zu: rank %u is not 1 to %d", i,
                                                    l->tensor_maps[i].rank,
                                                    CUBE_TENSOR_MAP_MAX_RANK);
                if ((e = cube__check_handle(c, &l->tensor_maps[i].buffer)))
                        return e;
        }
        if (l->mode > CUBE_LAUNCH_UNCHECKED)
                return cube__err_validation("unknown launch mode %d", (int) l->mode);
        if (cube__info_words(l->info, &words, &words_len, &meta, &dyn) < 0)
                return cube__err_generic("out of memory in libcubeclient");

        cube__frame_init(&f);
        PACK(cube__pack_notify(&f.pk, "launch", l->n_tensor_maps ? 11 : 10));
        PACK(msgpack_pack_uint64(&f.pk, cube_stream_current()));
        PACK(msgpack_pack_uint64(&f.pk, l->kernel));
        PACK(msgpack_pack_array(&f.pk, 2));
        if (l->dynamic_count) {
                PACK(cube__pack_str(&f.pk, "dynamic"));
                PACK(cube__pack_handle(&f.pk, l->dynamic_count));
        } else {
                PACK(cube__pack_str(&f.pk, "static"));
                PACK(msgpack_pack_array(&f.pk, 3));
                for (int i = 0; i < 3; i++)
                        PACK(msgpack_pack_uint32(&f.pk, l->cube_count[i]));
        }
        PACK(msgpack_pack_array(&f.pk, 3));
        for (int i = 0; i < 3; i++)
                PACK(msgpack_pack_uint32(&f.pk, l->cube_dim[i]));
        PACK(msgpack_pack_array(&f.pk, (uint32_t) l->n_buffers));
        for (size_t i = 0; i < l->n_buffers; i++)
                PACK(cube__pack_handle(&f.pk, &l->buffers[i]));
        PACK(msgpack_pack_array(&f.pk, l->io ? (uint32_t) l->n_buffers : 0));
        for (size_t i = 0; l->io && i < l->n_buffers; i++) {
                if (l->io[i] == CUBE_BUFFER_UNDECLARED)
                        PACK(msgpack_pack_nil(&f.pk));
                else
                        PACK(msgpack_pack_uint32(&f.pk, (uint32_t) l->io[i]));
        }
        PACK(msgpack_pack_bin(&f.pk, words_len));
        PACK(msgpack_pack_bin_body(&f.pk, words, words_len));
        PACK(msgpack_pack_array(&f.pk, 2));
        PACK(msgpack_pack_uint32(&f.pk, meta));
        PACK(msgpack_pack_uint32(&f.pk, dyn));
        PACK(msgpack_pack_uint32(&f.pk, (uint32_t) l->mode));
        uint32_t counts[6];
        cube__info_scalar_counts(l->info, counts);
        PACK(msgpack_pack_array(&f.pk, 6));
        for (int g = 0; g < 6; g++)
                PACK(msgpack_pack_uint32(&f.pk, counts[g]));
        if (l->n_tensor_maps) {
                PACK(msgpack_pack_array(&f.pk, (uint32_t) l->n_tensor_maps));
                for (size_t i = 0; i < l->n_tensor_maps; i++)
                        PACK(pack_tensor_map(&f.pk, &l->tensor_maps[i]));
        }
        free(words);
        e = cube__send_batched(c, f.data, f.len);
        cube__frame_destroy(&f);
        return e;
oom:
        free(words);
        cube__frame_destroy(&f);
        return cube__err_generic("out of memory in libcubeclient");
}

cube_error *cube_compile_queued(cube_client *c)
{
        return cube__request(c, "compile_queued", NULL, 0, NULL, NULL);
}

static bool map_str(const msgpack_object *m, const char *key, char *buf, size_t cap)
{
        const msgpack_object *v = cube__map_get(m, key);
        return v && cube__obj_str(v, buf, cap);
}

static bool decode_kernel(const msgpack_object *m, void *elem)
{
        cube_kernel_info *k = elem;
        const msgpack_object *v;

        return map_str(m, "hash", k->hash, sizeof(k->hash)) &&
               map_str(m, "entry", k->entry, sizeof(k->entry)) &&
               map_str(m, "backend", k->backend, sizeof(k->backend)) &&
               map_str(m, "state", k->state, sizeof(k->state)) &&
               (v = cube__map_get(m, "from_disk")) && cube__obj_bool(v, &k->from_disk) &&
               (v = cube__map_get(m, "compile_ms")) && cube__obj_double(v, &k->compile_ms) &&
               (v = cube__map_get(m, "hits")) && cube__obj_u64(v, &k->hits);
}

cube_error *cube_daemon_kernels(cube_client *c, cube_kernel_info **ret_kernels, size_t *ret_n)
{
        return cube__request_list(c, "kernels", sizeof(**ret_kernels), decode_kernel, NULL,
                                  (void **) ret_kernels, ret_n);
}

static cube_error *deliver_cache(cube__call *call, const msgpack_object *r)
{
        cube_kernel_cache *kc = call->ctx;
        const msgpack_object *v, *ev;

        if (!map_str(r, "dir", kc->dir, sizeof(kc->dir)) ||
            !(v = cube__map_get(r, "bytes")) || !cube__obj_u64(v, &kc->bytes) ||
            !(v = cube__map_get(r, "max_bytes")) || !cube__obj_u64(v, &kc->max_bytes) ||
            !(v = cube__map_get(r, "artifacts")) || !cube__obj_u64(v, &kc->artifacts) ||
            !(v = cube__map_get(r, "evictions")) || !cube__obj_u64(v, &kc->evictions) ||
            !(v = cube__map_get(r, "evicted_bytes")) || !cube__obj_u64(v, &kc->evicted_bytes) ||
            !(ev = cube__map_get(r, "evicted")) || ev->type != MSGPACK_OBJECT_ARRAY)
                return cube__err_answer("kernel_cache");
        for (uint32_t i = 0; i < ev->via.array.size && kc->n_evicted < CUBE_EVICTED_SHOWN; i++) {
                const msgpack_object *m = &ev->via.array.ptr[i];
                size_t j = kc->n_evicted;
                if (!map_str(m, "artifact", kc->evicted[j].artifact,
                             sizeof(kc->evicted[j].artifact)) ||
                    !(v = cube__map_get(m, "bytes")) || !cube__obj_u64(v, &kc->evicted[j].bytes) ||
                    !(v = cube__map_get(m, "at_s")) || !cube__obj_double(v, &kc->evicted[j].at_s))
                        return cube__err_answer("kernel_cache");
                kc->n_evicted++;
        }
        return NULL;
}

typedef struct stored_call {
        cube_cache_artifact *v;
        size_t n;
} stored_call;

static cube_error *deliver_stored(cube__call *call, const msgpack_object *r)
{
        stored_call *sc = call->ctx;
        const msgpack_object *s = cube__map_get(r, "stored"), *v;

        if (!s || s->type != MSGPACK_OBJECT_ARRAY)
                return cube__err_answer("kernel_cache");
        if (!(sc->v = calloc(s->via.array.size + 1, sizeof(*sc->v))))
                return cube__err_generic("out of memory in libcubeclient");
        for (uint32_t i = 0; i < s->via.array.size; i++) {
                const msgpack_object *m = &s->via.array.ptr[i];
                cube_cache_artifact *a = &sc->v[i];
                if (!map_str(m, "hash", a->hash, sizeof(a->hash)) ||
                    !map_str(m, "source_hash", a->source_hash, sizeof(a->source_hash)) ||
                    !map_str(m, "entry", a->entry, sizeof(a->entry)) ||
                    !map_str(m, "backend", a->backend, sizeof(a->backend)) ||
                    !(v = cube__map_get(m, "bytes")) || !cube__obj_u64(v, &a->bytes) ||
                    !(v = cube__map_get(m, "used_at")) || !cube__obj_double(v, &a->used_at)) {
                        free(sc->v);
                        sc->v = NULL;
                        return cube__err_answer("kernel_cache");
                }
        }
        sc->n = s->via.array.size;
        return NULL;
}

cube_error *cube_daemon_cache_artifacts(cube_client *c, cube_cache_artifact **ret_artifacts,
                                        size_t *ret_n)
{
        stored_call sc = { NULL, 0 };
        cube_error *e = cube__request(c, "kernel_cache", NULL, 0, deliver_stored, &sc);

        if (e)
                return e;
        *ret_artifacts = sc.v;
        *ret_n = sc.n;
        return NULL;
}

cube_error *cube_daemon_kernel_cache(cube_client *c, cube_kernel_cache *ret_cache)
{
        cube_kernel_cache kc = { 0 };
        cube_error *e = cube__request(c, "kernel_cache", NULL, 0, deliver_cache, &kc);

        if (!e)
                *ret_cache = kc;
        return e;
}

/*
 * launches.c - the kernel methods: register a source, launch it, and compile
 * what was queued.
 *
 * A launch is a notification, so whatever stops it lands on the buffers it
 * was to write, chosen as the reference chooses them: the compiled kernel's
 * answer first (a const pointer is only read), then the caller's
 * declaration, then "read and written". A failure before the kernel was
 * compiled therefore taints only the declared outputs, and read-only inputs
 * stay readable. A launch whose input carries a failure does not run: it is
 * skipped, and its outputs claim the same failure.
 *
 * A launch whose kernel is not compiled yet pauses its session until the
 * kernel is ready, so that everything the session sent after it still runs
 * after it; other sessions go on meanwhile.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cubed.h"
#include "frontend.h"
#include "cursor.h"
#include "launch.h"

cube__dispatched cube__do_register(cube__msg *k)
{
        cube__session *s = k->session;
        uint64_t id;
        cube__kernel *kernel;

        if (k->n != 3 || !cube__obj_u64(&k->p[0], &id) || k->p[1].type != MSGPACK_OBJECT_STR ||
            k->p[2].type != MSGPACK_OBJECT_STR) {
                cube__reply_malformed(k, "params must be [kernel, source, entry]");
                return CUBE__DISPATCH_DONE;
        }
        if (cube__idmap_get(&s->kernels, id)) {
                k->server->up->protocol_error(k->conn, -1, "kernel: kernel id %" PRIu64 " is already "
                                          "registered in this session", id);
                return CUBE__DISPATCH_DONE;
        }
        /* A registration is a notification: one past the session's quotas
         * is dropped, and a launch of its id says why (refused_kernel). */
        size_t bytes = k->p[1].via.str.size;
        const cube__options *o = &k->server->opts;
        if (s->kernels.len >= o->max_kernels ||
            bytes > o->max_kernel_source_bytes ||
            s->kernel_source_bytes > o->max_kernel_source_bytes - bytes) {
                s->refused_for_bytes = s->kernels.len < o->max_kernels;
                s->refused_by = NULL;
                if (s->kernels_refused++ == 0)
                        cube__log_session(CUBE__LOG_INFO, s, 0, "session %" PRIu64 ": refused "
                                          "kernel %" PRIu64 ": it holds %zu kernels of %" PRIu64
                                          " source bytes (max-kernels %u, "
                                          "max-kernel-source-bytes %" PRIu64 ")", s->id, id,
                                          s->kernels.len, s->kernel_source_bytes,
                                          o->max_kernels, o->max_kernel_source_bytes);
                return CUBE__DISPATCH_DONE;
        }
        uint64_t limit;
        const char *bound = cube__kernel_bound(o, &k->server->users, s->uid, bytes, &limit);
        if (bound) {
                s->refused_by = bound;
                s->refused_limit = limit;
                if (s->kernels_refused++ == 0)
                        cube__log_session(CUBE__LOG_INFO, s, 0, "session %" PRIu64 ": refused "
                                          "kernel %" PRIu64 ": %s (%" PRIu64 ")", s->id, id,
                                          bound, limit);
                return CUBE__DISPATCH_DONE;
        }
        kernel = cube__kernel_intern(k->server, k->p[1].via.str.ptr, k->p[1].via.str.size,
                                     k->p[2].via.str.ptr, k->p[2].via.str.size);
        if (!kernel || cube__idmap_put(&s->kernels, id, kernel) < 0) {
                cube__kernel_unref(kernel);
                k->server->up->protocol_error(k->conn, -1, "kernel: out of host memory");
                return CUBE__DISPATCH_DONE;
        }
        s->kernel_source_bytes += bytes;
        cube__kernels_held(&k->server->users, s->uid, 1, (int64_t) bytes);
        return CUBE__DISPATCH_DONE;
}

/* The refusal of a launch of an id the session never got registered: the
 * quota that dropped a registration, when one did. */
static cube_error *unknown_kernel(cube__session *s, uint64_t id)
{
        const cube__options *o = &s->server->opts;

        if (!s->kernels_refused)
                return cube__err_validation("kernel %" PRIu64 " was never registered in this "
                                            "session", id);
        if (s->refused_by)
                return cube__err_validation("kernel %" PRIu64 " is not registered: %s (%" PRIu64
                                            ") was reached, %s, so %" PRIu64 " registration(s) "
                                            "were refused; end sessions that hold kernels, or "
                                            "reuse the ids already registered", id, s->refused_by,
                                            s->refused_limit, strncmp(s->refused_by, "uid-", 4)
                                            == 0 ? "over this user's sessions" : "over every "
                                            "session of the daemon", s->kernels_refused);
        if (s->refused_for_bytes)
                return cube__err_validation("kernel %" PRIu64 " is not registered: this "
                                            "session's kernel sources reached "
                                            "max-kernel-source-bytes (%" PRIu64 " bytes, it "
                                            "holds %" PRIu64 "), so %" PRIu64 " registration(s) "
                                            "were refused; register fewer or smaller sources, "
                                            "or reuse the ids already registered", id,
                                            o->max_kernel_source_bytes, s->kernel_source_bytes,
                                            s->kernels_refused);
        return cube__err_validation("kernel %" PRIu64 " is not registered: this session holds "
                                    "%zu kernels, the most max-kernels (%u) allows, so %" PRIu64
                                    " registration(s) were refused; reuse the ids already "
                                    "registered (the same source needs one id)", id,
                                    s->kernels.len, o->max_kernels, s->kernels_refused);
}

/* What one binding takes of a launch's per-binding arrays (handles to io). */
#define SLOT_BYTES (sizeof(cube_handle) + sizeof(cube__alloc *) + sizeof(cube__name *) + \
                    2 * sizeof(uint64_t) + sizeof(cube_buffer_io))
/* Bindings whose arrays fit in the request itself: a launch of up to 8
 * buffers (and the count's slot) allocates nothing for them. */
#define FEW_SLOTS 9

/* What one launch message asks for, decoded and resolved. */
typedef struct launch_req {
        uint64_t stream;
        uint64_t kernel_id;
        bool dynamic;
        uint32_t count[3];
        cube_handle count_handle;
        uint32_t dim[3];
        cube_handle *handles;
        size_t n;
        cube_buffer_io *io;
        size_t n_io;
        const void *info;
        size_t info_len;
        uint32_t metadata_offset, dynamic_offset;
        uint32_t mode;
        bool has_groups;                /* the launch said how many scalars of each type */
        uint32_t groups[CUBE__SCALAR_GROUPS];
        cube__name **names;             /* per buffer; NULL where it did not resolve */
        cube__alloc **allocs;
        uint64_t *start, *end;
        cube__alloc *count_alloc;
        uint64_t count_start;
        /* The tensor maps, bound after the buffers: handles[n_plain + i] is
         * map i's backing buffer, a read-only binding. */
        size_t n_plain, n_maps;
        cube__tmap *maps;
        uint64_t few[(FEW_SLOTS * SLOT_BYTES + 7) / 8];        /* their block, when it fits */
} launch_req;

static void req_free(launch_req *r)
{
        if (r->handles != (void *) r->few)
                free(r->handles);       /* the arrays share one block */
        free(r->maps);
}

/* Lays the per-binding arrays for slots bindings out in one block: the
 * request's own room where they fit. */
static bool req_slots(launch_req *r, size_t slots)
{
        void *block = slots <= FEW_SLOTS ? r->few : calloc(slots, SLOT_BYTES);

        if (!block)
                return false;
        r->handles = block;
        r->allocs = (cube__alloc **) (r->handles + slots);
        r->names = (cube__name **) (r->allocs + slots);
        r->start = (uint64_t *) (r->names + slots);
        r->end = r->start + slots;
        r->io = (cube_buffer_io *) (r->end + slots);
        return true;
}

static bool obj_u32x3(const msgpack_object *o, uint32_t ret[3])
{
        if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 3)
                return false;
        for (int i = 0; i < 3; i++)
                if (!cube__obj_u32(&o->via.array.ptr[i], &ret[i]))
                        return false;
        return true;
}

static bool parse_launch(cube__msg *k, launch_req *r)
{
        const msgpack_object *p = k->p;
        const msgpack_object_array *arr, *count, *offsets;
        uint64_t io;

        if (k->n < 9 || k->n > 11 || !cube__obj_u64(&p[0], &r->stream) ||
            !cube__obj_u64(&p[1], &r->kernel_id) ||
            !cube__obj_array(&p[2], &count) || count->size != 2 ||
            count->ptr[0].type != MSGPACK_OBJECT_STR || !obj_u32x3(&p[3], r->dim) ||
            !cube__obj_array(&p[4], &arr) || p[5].type != MSGPACK_OBJECT_ARRAY ||
            !cube__obj_bin(&p[6], &r->info, &r->info_len) || r->info_len % 8 != 0 ||
            !cube__obj_array(&p[7], &offsets) || offsets->size != 2 ||
            !cube__obj_u32(&offsets->ptr[0], &r->metadata_offset) ||
            !cube__obj_u32(&offsets->ptr[1], &r->dynamic_offset) ||
            !cube__obj_u32(&p[8], &r->mode) || r->mode > CUBE_LAUNCH_UNCHECKED)
                return cube__reply_malformed(k, "params must be [stream, kernel, count, dim, [handle, "
                                       "...], [io, ...], info, [metadata_offset, "
                                       "dynamic_offset], mode, [f32, f64, i32, i64, u32, u64]?, "
                                       "[tensor_map, ...]?]");
        if (k->n >= 10) {
                const msgpack_object_array *groups;
                if (!cube__obj_array(&p[9], &groups) || groups->size != CUBE__SCALAR_GROUPS)
                        return cube__reply_malformed(k, "the scalar counts must be [f32, f64, i32, "
                                               "i64, u32, u64]");
                for (int g = 0; g < CUBE__SCALAR_GROUPS; g++)
                        if (!cube__obj_u32(&groups->ptr[g], &r->groups[g]))
                                return cube__reply_malformed(k, "the scalar counts must be "
                                                       "[f32, f64, i32, i64, u32, u64]");
                r->has_groups = true;
        }
        if (count->ptr[0].via.str.size == 6 && memcmp(count->ptr[0].via.str.ptr, "static", 6) == 0) {
                if (!obj_u32x3(&count->ptr[1], r->count))
                        return cube__reply_malformed(k, "a static count must be [x, y, z]");
        } else if (count->ptr[0].via.str.size == 7 &&
                   memcmp(count->ptr[0].via.str.ptr, "dynamic", 7) == 0) {
                if (!cube__obj_handle(&count->ptr[1], &r->count_handle))
                        return cube__reply_malformed(k, "a dynamic count must name a handle");
                r->dynamic = true;
        } else {
                return cube__reply_malformed(k, "a count must be [\"static\", [x, y, z]] or "
                                       "[\"dynamic\", handle]");
        }

        r->n = r->n_plain = arr->size;
        r->n_io = p[5].via.array.size;
        if (r->n_io > r->n)
                return cube__reply_malformed(k, "more io declarations than buffers");
        if (k->n == 11) {
                const msgpack_object_array *maps;
                if (!cube__obj_array(&p[10], &maps))
                        return cube__reply_malformed(k, "the tensor maps must be an array");
                r->n_maps = maps->size;
                if (r->n_maps && !(r->maps = calloc(r->n_maps, sizeof(*r->maps))))
                        return cube__reply_malformed(k, "out of host memory");
                for (size_t i = 0; i < r->n_maps; i++)
                        if (!cube__tmap_decode(&maps->ptr[i], &r->maps[i]))
                                return cube__reply_malformed(k, "a tensor map must be [handle, "
                                        "format, elem, [shape], [strides], [box], "
                                        "[elem_strides], [lower_corner], [upper_corner], "
                                        "interleave, swizzle, prefetch, oob_fill]");
                r->n += r->n_maps;
        }
        if (!req_slots(r, r->n + 1))
                return cube__reply_malformed(k, "out of host memory");
        for (size_t i = 0; i < r->n_plain; i++)
                if (!cube__obj_handle(&arr->ptr[i], &r->handles[i]))
                        return cube__reply_malformed(k, "a handle must be [service, memory, "
                                               "offset_start, offset_end]");
        for (size_t i = 0; i < r->n_io; i++) {
                const msgpack_object *o = &p[5].via.array.ptr[i];
                if (o->type == MSGPACK_OBJECT_NIL)
                        r->io[i] = CUBE_BUFFER_UNDECLARED;
                else if (cube__obj_u64(o, &io) && io <= CUBE_BUFFER_DEAD)
                        r->io[i] = (cube_buffer_io) io;
                else
                        return cube__reply_malformed(k, "an io declaration must be nil or 0..3");
        }
        /* A tensor map's buffer is only read. */
        if (r->n_maps) {
                for (size_t i = r->n_io; i < r->n_plain; i++)
                        r->io[i] = CUBE_BUFFER_UNDECLARED;
                for (size_t i = 0; i < r->n_maps; i++) {
                        r->handles[r->n_plain + i] = r->maps[i].map.buffer;
                        r->io[r->n_plain + i] = CUBE_BUFFER_READ_ONLY;
                }
                r->n_io = r->n;
        }
        return true;
}

static bool cursor_u32x3(cube__cursor *c, uint32_t ret[3])
{
        uint32_t n;

        return cube__cursor_array(c, &n) && n == 3 && cube__cursor_u32(c, &ret[0]) &&
               cube__cursor_u32(c, &ret[1]) && cube__cursor_u32(c, &ret[2]);
}

/* The fewest bytes a handle takes: [0, 0, 0, 0]. The pre-scan has not
 * bounded the count a launch read in place declares: one its bytes cannot
 * hold is refused before anything is allocated for it. */
#define HANDLE_MIN_BYTES 5

/* parse_launch's params read straight from the first of len bytes
 * (proto/cursor.h): true, with *r filled as parse_launch fills it and
 * *ret_len the params' length, for a launch of the plain form parse_launch
 * accepts (a static count, no tensor maps); false for anything else, which
 * takes parse_launch's way and its answers. The bytes after the params are
 * the next message's. */
static bool read_launch(const uint8_t *params, size_t len, launch_req *r, size_t *ret_len)
{
        cube__cursor c = cube__cursor_of(params, len);
        const char *word;
        size_t word_len;
        uint32_t n, n_count, n_handles, n_offsets;

        if (!cube__cursor_array(&c, &n) || (n != 9 && n != 10) ||
            !cube__cursor_u64(&c, &r->stream) || !cube__cursor_u64(&c, &r->kernel_id) ||
            !cube__cursor_array(&c, &n_count) || n_count != 2 ||
            !cube__cursor_str(&c, &word, &word_len) || word_len != 6 ||
            memcmp(word, "static", 6) != 0 || !cursor_u32x3(&c, r->count) ||
            !cursor_u32x3(&c, r->dim) || !cube__cursor_array(&c, &n_handles) ||
            n_handles > (size_t) (c.end - c.p) / HANDLE_MIN_BYTES ||
            !req_slots(r, (size_t) n_handles + 1))
                return false;
        r->n = r->n_plain = n_handles;
        for (size_t i = 0; i < r->n; i++)
                if (!cube__cursor_handle(&c, &r->handles[i]))
                        return false;
        uint32_t n_io;
        if (!cube__cursor_array(&c, &n_io) || n_io > r->n)
                return false;
        r->n_io = n_io;
        for (size_t i = 0; i < r->n_io; i++) {
                uint64_t io;
                if (cube__cursor_nil(&c))
                        r->io[i] = CUBE_BUFFER_UNDECLARED;
                else if (cube__cursor_u64(&c, &io) && io <= CUBE_BUFFER_DEAD)
                        r->io[i] = (cube_buffer_io) io;
                else
                        return false;
        }
        if (!cube__cursor_bin(&c, &r->info, &r->info_len) || r->info_len % 8 != 0 ||
            !cube__cursor_array(&c, &n_offsets) || n_offsets != 2 ||
            !cube__cursor_u32(&c, &r->metadata_offset) ||
            !cube__cursor_u32(&c, &r->dynamic_offset) || !cube__cursor_u32(&c, &r->mode) ||
            r->mode > CUBE_LAUNCH_UNCHECKED)
                return false;
        if (n == 10) {
                uint32_t n_groups;
                if (!cube__cursor_array(&c, &n_groups) || n_groups != CUBE__SCALAR_GROUPS)
                        return false;
                for (int g = 0; g < CUBE__SCALAR_GROUPS; g++)
                        if (!cube__cursor_u32(&c, &r->groups[g]))
                                return false;
                r->has_groups = true;
        }
        *ret_len = (size_t) (c.p - params);
        return true;
}

/* Resolves every buffer; returns the first resolution error. */
static cube_error *resolve(cube__session *s, launch_req *r)
{
        cube_error *first = NULL;

        for (size_t i = 0; i < r->n; i++) {
                cube_error *e = cube__name_resolve(s, &r->handles[i], &r->names[i], &r->start[i],
                                                   &r->end[i]);
                if (!e)
                        r->allocs[i] = r->names[i]->alloc;
                /* A peer device's memory is bound only while the peer is there. */
                if (!e && r->allocs[i]->peer)
                        e = cube__peer_check(s->server, r->allocs[i]->peer);
                if (e && !first)
                        first = e;
                else
                        cube_error_free(e);
        }
        if (!first && r->dynamic) {
                uint64_t end;
                first = cube__alloc_resolve(s, &r->count_handle, &r->count_alloc, &r->count_start,
                                            &end);
                if (!first && end - r->count_start < 12)
                        first = cube__err_validation("a dynamic count needs 12 bytes (three u32); "
                                                     "its handle covers %" PRIu64,
                                                     end - r->count_start);
        }
        return first;
}

/* The buffers the launch writes, by the reference's fallback chain. */
/* What the parse said of each buffer, once the loop owns it again: a kernel
 * built, or one whose build was refused after the front end read it (a
 * refused launch of it then marks only what it would have written). */
static const cube_buffer_io *parsed_io(const cube__kernel *kernel)
{
        if (!kernel || (kernel->state != CUBE__KERNEL_READY &&
                        kernel->state != CUBE__KERNEL_FAILED) || !kernel->facts)
                return NULL;
        return kernel->io;
}

static bool writes(const launch_req *r, const cube__kernel *kernel, size_t i)
{
        const cube_buffer_io *compiled = parsed_io(kernel);
        size_t n_compiled = compiled ? kernel->desc.n_buffers : 0;

        return cube__io_written(compiled, n_compiled, r->io, r->n_io, i);
}

static bool reads(const launch_req *r, const cube__kernel *kernel, size_t i)
{
        const cube_buffer_io *compiled = parsed_io(kernel);
        size_t n_compiled = compiled ? kernel->desc.n_buffers : 0;

        return cube__io_read(compiled, n_compiled, r->io, r->n_io, i);
}

/* The peers whose memory the launch claimed learn, in stream order, how the
 * claim ended (peer.c). */
static void tell_peers(cube__msg *k, const launch_req *r, const cube__kernel *kernel)
{
        for (size_t i = 0; i < r->n; i++)
                if (r->allocs[i] && r->allocs[i]->peer && writes(r, kernel, i))
                        cube__peer_launch_wrote(k->session, r->stream, r->allocs[i], r->start[i],
                                                r->end[i]);
}

/* A launch that will not run: its failure lands on what it writes. Launches
 * that only compile or queue claim nothing. Takes e. */
static void refuse(cube__msg *k, launch_req *r, const cube__kernel *kernel, cube_error *e)
{
        cube__session *s = k->session;
        cube__server *srv = k->server;
        uint64_t failure;

        if (r->mode != CUBE_LAUNCH_EXECUTE || !e) {
                cube_error_free(e);
                return;
        }
        cube__stream_failed(s, r->stream, e);
        s->errors++;
        failure = cube__failures_insert(&srv->failures, e, s->id, s->uid);
        cube__log_session(CUBE__LOG_INFO, s, failure, "session %" PRIu64 ": a launch of %s "
                          "failed (failure #%" PRIu64 "): %s", s->id,
                          kernel ? kernel->entry : "an unknown kernel", failure,
                          failure ? cube_error_message(e) : "out of memory");
        for (size_t i = 0; i < r->n; i++) {
                if (!r->names[i] || !writes(r, kernel, i))
                        continue;
                if (r->names[i]->read_only)
                        cube__claims_taint(&srv->failures, &r->names[i]->local, r->start[i],
                                           r->end[i], failure);
                else
                        cube__alloc_taint(r->allocs[i], r->start[i], r->end[i], failure);
        }
        tell_peers(k, r, kernel);
        cube__failures_prune(&srv->failures, failure);
}

/* What the launch's inputs are at its place in the order, in binding order:
 * the failures and pending writers that claim the bytes it reads. */
static int inputs(cube__server *srv, const launch_req *r, const cube__kernel *kernel,
                  cube__awaits *ret)
{
        cube__failures *fs = &srv->failures;

        for (size_t i = 0; i < r->n; i++) {
                const cube__alloc *a = r->allocs[i];
                uint64_t start = r->start[i], end = r->end[i];

                if (!reads(r, kernel, i) && a->storage)
                        continue;
                if (!a->storage && start == end) {
                        start = 0;      /* the virtual byte of a failed reservation */
                        end = 1;
                }
                if (cube__awaits_collect(fs, ret, &a->claims, start, end, a->id) < 0)
                        return -ENOMEM;
                /* A read-only name's own failures (refused writes through it)
                 * are what a read of it reports: an input carrying one is as
                 * failed as one whose memory carries it. */
                if (r->names[i]->read_only &&
                    cube__awaits_collect(fs, ret, &r->names[i]->local, start, end, a->id) < 0)
                        return -ENOMEM;
        }
        if (r->count_alloc &&
            cube__awaits_collect(fs, ret, &r->count_alloc->claims, r->count_start,
                                 r->count_start + 12, r->count_alloc->id) < 0)
                return -ENOMEM;
        return 0;
}

/* The launch is skipped: its outputs claim the failure its input carried. */
static void skip(cube__msg *k, launch_req *r, const cube__kernel *kernel, uint64_t failure,
                 uint64_t needed)
{
        cube__failures *fs = &k->server->failures;

        uint64_t *ids = calloc(r->n + 1, sizeof(*ids));
        size_t n = 0;
        cube_error *skipped = cube__err_new(CUBE_SERVER_SKIPPED);

        if (skipped)
                cube__stream_failed(k->session, r->stream, skipped);
        cube_error_free(skipped);

        for (size_t i = 0; i < r->n; i++)
                if (writes(r, kernel, i)) {
                        cube__alloc_taint(r->allocs[i], r->start[i], r->end[i], failure);
                        if (ids)
                                ids[n++] = r->allocs[i]->id;
                }
        if (ids)
                cube__failures_skipped(fs, failure, kernel->entry, needed, ids, n);
        free(ids);
        tell_peers(k, r, kernel);
}

/* Checks the launch against the device before anything is compiled. */
static cube_error *validate(const cube__server *srv, const launch_req *r)
{
        const cube_device_properties *p = &srv->properties;
        uint64_t units = (uint64_t) r->dim[0] * r->dim[1] * r->dim[2];

        for (int i = 0; i < 3; i++)
                if (r->dim[i] == 0 || r->dim[i] > p->max_cube_dim[i])
                        return cube__err_wrap(CUBE_SERVER_LAUNCH,
                                cube__err_wrap(CUBE_LAUNCH_TOO_MANY_RESOURCES,
                                               cube__err_cube_dim(r->dim, p->max_cube_dim)));
        if (units > p->max_units_per_cube)
                return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_wrap(
                        CUBE_LAUNCH_TOO_MANY_RESOURCES,
                        cube__err_resource(CUBE_RESOURCE_UNITS, units, p->max_units_per_cube)));
        if (r->n > p->max_bindings)
                return cube__err_validation("a launch binds %zu buffers; the device takes at "
                                            "most %u", r->n, p->max_bindings);
        for (int i = 0; !r->dynamic && i < 3; i++)
                if (r->count[i] > p->max_cube_count[i])
                        return cube__err_validation("a cube count of (%u, %u, %u) exceeds the "
                                                    "device's maximum of (%u, %u, %u)",
                                                    r->count[0], r->count[1], r->count[2],
                                                    p->max_cube_count[0], p->max_cube_count[1],
                                                    p->max_cube_count[2]);
        if (r->metadata_offset > r->info_len / 8 || r->dynamic_offset > r->info_len / 8)
                return cube__err_validation("the metadata offsets (%u, %u) lie beyond the %zu "
                                            "info words", r->metadata_offset, r->dynamic_offset,
                                            r->info_len / 8);
        for (size_t i = 0; i < r->n_maps; i++) {
                size_t b = r->n_plain + i;
                cube_error *e = cube__tmap_validate(&r->maps[i], i, r->end[b] - r->start[b]);
                if (e)
                        return e;
        }
        return NULL;
}

/* The info words the device gets: the launch's own, then what a checked
 * kernel needs (frontend.h): its tensor maps, each binding's length in
 * bytes, read-only imports marked, then the out-of-bounds record, the sink
 * and the zeros, all cleared. */
static size_t info_words(const launch_req *r)
{
        return r->info_len / 8 + r->n_maps * CUBE__TMAP_WORDS + r->n + CUBE__CHECK_TAIL_WORDS;
}

static void fill_info(const launch_req *r, cube__launch_work *l)
{
        uint64_t *tail = l->info + r->info_len / 8 + r->n_maps * CUBE__TMAP_WORDS;

        memcpy(l->info, r->info, r->info_len);
        for (size_t i = 0; i < r->n_maps; i++)
                cube__tmap_words(&r->maps[i].map, l->info + r->info_len / 8 +
                                                  i * CUBE__TMAP_WORDS);
        for (size_t i = 0; i < r->n; i++)
                tail[i] = (r->end[i] - r->start[i]) |
                          (r->names[i]->read_only ? CUBE__CHECK_READ_ONLY : 0);
        memset(tail + r->n, 0, CUBE__CHECK_TAIL_WORDS * 8);
        l->n_info = (uint32_t) info_words(r);
}

/* Whether the launch's every guarded access the front end could bound is
 * in range in every cube (bounds.c). Asked only of a build for the launch's
 * cube dimension, the one that holds the kernel's bare form, and of a
 * launch without tensor maps, whose words the bounds do not place. */
static bool in_bounds(const launch_req *r, const cube__kernel *kernel,
                      const cube__launch_work *l)
{
        const cube__fe_facts *f = kernel->facts;

        if (kernel->unchecked || !f || !f->bounds || l->module == kernel->module ||
            r->n_maps || f->n_buffers != r->n)
                return false;
        cube__fe_grid g = {
                .info = l->info, .n_info = r->info_len / 8, .meta = r->metadata_offset,
                .dyn = r->dynamic_offset, .bindings = l->info + r->info_len / 8,
                .n_bindings = (uint32_t) r->n,
        };
        memcpy(g.count, l->count, sizeof(g.count));
        memcpy(g.dim, l->dim, sizeof(g.dim));
        return cube__fe_bounds_hold(f->bounds, &g);
}

/* The launch's scalars against the parameters the parse found: the same
 * number of each type, in the same groups. A kernel with scalar parameters
 * cannot be given a scalar it does not take, nor miss one. */
static cube_error *check_scalars(const launch_req *r, const cube__kernel *kernel)
{
        static const char *const names[CUBE__SCALAR_GROUPS] = { "f32", "f64", "i32", "i64",
                                                                 "u32", "u64" };
        const cube__fe_facts *f = kernel->facts;

        /* A kernel without scalar parameters reads its scalars with SCALAR,
         * each read checked against the launch's words. */
        if (!f || f->n_scalars == 0)
                return NULL;
        if (!r->has_groups)
                return cube__err_validation("kernel '%s' takes %u scalar parameter(s), and the "
                                            "launch does not say which scalars it gives",
                                            kernel->entry, f->n_scalars);
        /* A parameter the launch leaves without a value is named first;
         * then a group the launch gives more of than the kernel takes. */
        for (int g = 0; g < CUBE__SCALAR_GROUPS; g++) {
                if (r->groups[g] >= f->group_counts[g])
                        continue;
                /* Name the first parameter of the group the launch does not match. */
                uint32_t seen = 0;
                for (uint32_t i = 0; i < f->n_scalars; i++) {
                        if (f->scalars[i].group != (cube__scalar_group) g)
                                continue;
                        if (seen++ == r->groups[g])
                                return cube__err_validation(
                                        "kernel '%s' takes %s parameter '%s' (%s scalar %u), and "
                                        "the launch gives only %u %s scalar(s)", kernel->entry,
                                        f->scalars[i].type, f->scalars[i].name, names[g], seen,
                                        r->groups[g], names[g]);
                }
        }
        for (int g = 0; g < CUBE__SCALAR_GROUPS; g++)
                if (r->groups[g] != f->group_counts[g])
                        return cube__err_validation("kernel '%s' takes %u %s scalar parameter(s), "
                                                    "and the launch gives %u", kernel->entry,
                                                    f->group_counts[g], names[g], r->groups[g]);
        return NULL;
}

/* The launch's tensor maps against the kernel's TENSOR_MAP parameters: the
 * same number, in the same places (after the buffers), and a map whose
 * element is the size of the parameter's. */
static cube_error *check_tensor_maps(const launch_req *r, const cube__kernel *kernel)
{
        const cube__fe_facts *f = kernel->facts;
        uint32_t n_params = 0;

        for (uint32_t i = 0; f && i < f->n_buffers; i++)
                n_params += f->buffers[i].tensor_map;
        if (n_params != r->n_maps)
                return cube__err_validation("kernel '%s' takes %u tensor map(s); the launch gave "
                                            "%zu", kernel->entry, n_params, r->n_maps);
        for (size_t i = 0; i < r->n_maps; i++) {
                const cube__fe_buffer *b = &f->buffers[r->n_plain + i];
                if (!b->tensor_map)
                        return cube__err_validation("kernel '%s' takes buffer '%s' where the "
                                                    "launch binds tensor map %zu",
                                                    kernel->entry, b->name, i);
                uint32_t eb = cube__elem_bytes(r->maps[i].map.elem);
                if (eb != b->elem_bytes)
                        return cube__err_validation("tensor map %zu: elem is %u bytes; "
                                                    "parameter '%s' of '%s' is TENSOR_MAP(%s), "
                                                    "%u bytes", i, eb, b->name, kernel->entry,
                                                    b->type, b->elem_bytes);
        }
        return NULL;
}

/* An unchecked launch under the check mode: NULL and the kernel to run, or
 * the refusal. */
static cube_error *unchecked_kernel(cube__session *s, cube__kernel *kernel,
                                    cube__kernel **ret_kernel)
{
        const cube__options *o = &s->server->opts;

        switch (o->check_mode) {
        case CUBE__CHECK_VALIDATE:
                *ret_kernel = kernel;   /* run checked: validated */
                return NULL;
        case CUBE__CHECK_ENFORCE:
                return cube__err_validation("an unchecked launch of '%s' is refused: this daemon "
                                            "runs every launch checked (check-mode enforce)",
                                            kernel->entry);
        case CUBE__CHECK_AUTO:
                break;
        }
        if (!cube__id_listed(&o->unchecked_uid_ids, s->uid))
                return cube__err_validation("an unchecked launch of '%s' is refused: uid %u is not "
                                            "in the daemon's unchecked-uids; launch it checked",
                                            kernel->entry, (unsigned) s->uid);
        cube__kernel *twin = cube__kernel_unchecked(kernel);
        if (!twin)
                return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(
                        CUBE_LAUNCH_OUT_OF_MEMORY, "out of host memory preparing an unchecked "
                        "launch"));
        *ret_kernel = twin;
        return NULL;
}

/* Binding i of the device's record: a's storage, from start into a. */
static void set_binding(cube__launch_work *l, size_t i, const cube__alloc *a, uint64_t start)
{
        l->storages[i] = a->storage;
        l->offsets[i] = a->base + start;
        l->extents[2 * i] = a->base;
        l->extents[2 * i + 1] = a->base + a->size;
}

/* Builds the device's record of the launch and queues it. */
static void submit(cube__msg *k, launch_req *r, cube__kernel *kernel, cube__stream *st,
                   cube__awaits *awaits, bool deferred_skip)
{
        cube__session *s = k->session;
        size_t n = r->n, w = 0;
        /* The launch's record and its arrays ride in the op's own block. */
        size_t extra = sizeof(cube__launch_work) + n * sizeof(cube__storage *) +
                       3 * n * sizeof(uint64_t) + n * sizeof(cube__alloc *) + info_words(r) * 8 + 8;
        void *block;
        cube__op *o = cube__op_new(s, st, CUBE__WORK_LAUNCH, n + (r->count_alloc ? 1 : 0), extra,
                                   &block);
        cube__launch_work *l = block;

        /* Only a launch that writes something has a claim to make. */
        for (size_t i = 0; o && i < n && !o->writer; i++)
                if (writes(r, kernel, i) && !(o->writer = cube__writer_new())) {
                        free(o);
                        o = NULL;
                }
        if (!o) {
                refuse(k, r, kernel, cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(
                        CUBE_LAUNCH_OUT_OF_MEMORY, "out of host memory queueing the launch")));
                return;
        }
        o->launch = l;
        o->work.launch = l;
        /* What the inputs were: if a writer of theirs fails, so does this. */
        o->awaits = *awaits;
        *awaits = (cube__awaits) {0};
        l->info = (uint64_t *) (l + 1);
        l->offsets = l->info + info_words(r) + 1;
        l->extents = l->offsets + n;
        l->storages = (cube__storage **) (l->extents + 2 * n);
        o->written = (cube__alloc **) (l->storages + n);
        bool count_shape;
        l->module = cube__kernel_module_for(kernel, r->dim, &count_shape);
        l->kernel = kernel->entry;
        memcpy(l->count, r->count, sizeof(l->count));
        memcpy(l->dim, r->dim, sizeof(l->dim));
        l->n_buffers = (uint32_t) r->n;
        fill_info(r, l);
        l->metadata_offset = r->metadata_offset;
        l->dynamic_offset = r->dynamic_offset;
        l->n_tensor_maps = (uint32_t) r->n_maps;
        l->in_bounds = in_bounds(r, kernel, l);
        for (size_t i = 0; i < r->n; i++) {
                bool written = writes(r, kernel, i);
                set_binding(l, i, r->allocs[i], r->start[i]);
                cube__op_use(o, r->allocs[i], written);
                if (written) {
                        /* Enqueued: the bytes are the launch's now (a failed
                         * reservation's stay its failure's). */
                        if (r->allocs[i]->storage)
                                cube__claims_pending(&k->server->failures,
                                                     &r->allocs[i]->claims, r->start[i],
                                                     r->end[i], o->writer);
                        o->written[w++] = r->allocs[i];
                }
        }
        if (r->count_alloc)
                cube__op_use(o, r->count_alloc, false);
        o->n_written = w;
        if (deferred_skip) {
                /* It will be skipped; which failure it passes on is known once
                 * the writers before it are done. */
                o->deferred_skip = true;
                o->work.op = CUBE__WORK_FENCE;
        } else if ((o->work.error = cube__inject_take(k->server, CUBE_FAULT_DEVICE_LAUNCH))) {
                o->work.op = CUBE__WORK_FENCE;  /* fails in stream order, running nothing */
        }
        s->launches++;
        if (count_shape) {
                o->shape_kernel = kernel;
                kernel->refs++;
        }
        cube__op_enqueue(o);
        tell_peers(k, r, kernel);
}

/* Records the launch into the capture st records, instead of running it:
 * the same record submit() builds, resolved once, for every replay. */
static void record(cube__msg *k, launch_req *r, cube__kernel *kernel, cube__stream *st)
{
        size_t n = r->n;
        cube__launch_work *l = calloc(1, sizeof(*l) + info_words(r) * 8 + 8 +
                                         3 * n * sizeof(uint64_t) +
                                         n * sizeof(cube__storage *) + 2 * n + 2);
        bool *rd, *wr;

        if (!l) {
                cube_error *e = cube__err_generic("out of host memory recording a launch of %s",
                                                  kernel->entry);
                cube__capture_doom(st, e);
                cube_error_free(e);
                return;
        }
        l->info = (uint64_t *) (l + 1);
        l->offsets = l->info + info_words(r) + 1;
        l->extents = l->offsets + n;
        l->storages = (cube__storage **) (l->extents + 2 * n);
        rd = (bool *) (l->storages + n);
        wr = rd + n + 1;
        bool count_shape;
        l->module = cube__kernel_module_for(kernel, r->dim, &count_shape);
        l->kernel = kernel->entry;
        memcpy(l->count, r->count, sizeof(l->count));
        memcpy(l->dim, r->dim, sizeof(l->dim));
        l->n_buffers = (uint32_t) n;
        fill_info(r, l);
        l->metadata_offset = r->metadata_offset;
        l->dynamic_offset = r->dynamic_offset;
        l->n_tensor_maps = (uint32_t) r->n_maps;
        l->in_bounds = in_bounds(r, kernel, l);
        for (size_t i = 0; i < n; i++) {
                set_binding(l, i, r->allocs[i], r->start[i]);
                rd[i] = reads(r, kernel, i);
                wr[i] = writes(r, kernel, i);
        }
        cube__capture_launch(st, l, r->allocs, r->start, r->end, rd, wr, n);
}

/* The dynamic count arrived (or its copy failed): dispatch the launch again. */
static void count_fetched(cube__session *s, void *ctx, cube_error *e)
{
        s->count_ready = true;
        s->count_error = e;
        if (s->conn)
                s->server->up->resume(s->conn);
}

/* Reads a dynamic count in stream order: a 12-byte copy queued behind
 * everything the stream has, with the session held until it lands. */
static bool fetch_count(cube__msg *k, launch_req *r, cube__stream *st)
{
        cube__session *s = k->session;
        cube__pending_reply *p = cube__pending_new(s, 0);

        if (!p)
                return false;
        p->finished = count_fetched;
        cube__submit(s, st, r->count_alloc, CUBE__WORK_COPY_TO_HOST, r->count_start, s->count,
                     sizeof(s->count), NULL, p);
        k->server->up->hold(k->conn);
        cube__pending_arm(p);
        return true;
}

/* Starts compiling what this session queued, now that a launch loads one. */
static void compile_queue(cube__session *s)
{
        for (size_t i = 0; i < s->n_queued; i++)
                cube__kernel_prepare(s->queued[i], NULL);
        free(s->queued);
        s->queued = NULL;
        s->n_queued = 0;
}

static void queue(cube__session *s, cube__kernel *kernel)
{
        cube__kernel **grown;

        for (size_t i = 0; i < s->n_queued; i++)
                if (s->queued[i] == kernel)
                        return;
        grown = realloc(s->queued, (s->n_queued + 1) * sizeof(*grown));
        if (!grown)
                return;
        s->queued = grown;
        s->queued[s->n_queued++] = kernel;
}

/* Runs a launch whose params parsed (parsed) into *r, which it frees. */
static cube__dispatched launch(cube__msg *k, launch_req *r, bool parsed)
{
        cube__session *s = k->session;
        cube__server *srv = k->server;
        cube__kernel *kernel;
        cube__stream *st;
        cube_error *e;
        uint64_t failure, needed;
        cube__awaits awaits = {0};
        bool pending;
        cube__dispatched d = CUBE__DISPATCH_DONE;

        if (!parsed)
                goto out;
        kernel = cube__idmap_get(&s->kernels, r->kernel_id);
        e = resolve(s, r);
        if (!e && !kernel)
                e = unknown_kernel(s, r->kernel_id);
        if (!e && srv->poison)
                e = cube__poisoned(srv);
        if (!e)
                e = validate(srv, r);
        if (!e && r->mode == CUBE_LAUNCH_UNCHECKED) {
                e = unchecked_kernel(s, kernel, &kernel);
                r->mode = CUBE_LAUNCH_EXECUTE;
        }
        if (e) {
                refuse(k, r, kernel, e);
                goto out;
        }

        /* A build that failed for a reason outside the kernel is tried
         * again by the next launch; the launches that waited for it report
         * its failure. */
        if (!k->server->up->redispatching(k->conn))
                cube__kernel_retry(kernel);
        if (kernel->state == CUBE__KERNEL_NEW || kernel->state == CUBE__KERNEL_COMPILING) {
                if (r->mode == CUBE_LAUNCH_QUEUE) {
                        queue(s, kernel);
                        goto out;
                }
                if (r->mode == CUBE_LAUNCH_EXECUTE)
                        compile_queue(s);
                if (k->server->up->wait_for(k->conn, kernel)) {
                        d = CUBE__DISPATCH_PAUSED;
                        goto out;
                }
        } else if (!k->server->up->redispatching(k->conn) && r->mode == CUBE_LAUNCH_EXECUTE) {
                kernel->hits++;
        }

        if (kernel->state != CUBE__KERNEL_READY) {
                refuse(k, r, kernel, cube__kernel_launch_error(kernel));
                goto out;
        }
        if (r->n != kernel->desc.n_buffers) {
                refuse(k, r, NULL, cube__err_validation("kernel '%s' binds %u buffers; the launch "
                                                         "gave %zu", kernel->entry,
                                                         kernel->desc.n_buffers, r->n));
                goto out;
        }
        if ((e = check_tensor_maps(r, kernel))) {
                refuse(k, r, kernel, e);
                goto out;
        }
        if ((e = check_scalars(r, kernel))) {
                refuse(k, r, kernel, e);
                goto out;
        }
        if (kernel->shared_bytes > srv->properties.max_shared_memory_size) {
                refuse(k, r, kernel, cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_wrap(
                        CUBE_LAUNCH_TOO_MANY_RESOURCES,
                        cube__err_resource(CUBE_RESOURCE_SHARED_MEMORY, kernel->shared_bytes,
                                           srv->properties.max_shared_memory_size))));
                goto out;
        }
        /* A GPU kernel's registers may allow fewer units than the device. */
        if (srv->driver->max_units && kernel->module) {
                uint64_t units = (uint64_t) r->dim[0] * r->dim[1] * r->dim[2];
                uint32_t max = srv->driver->max_units(srv->device, kernel->module);
                if (max && units > max) {
                        refuse(k, r, kernel, cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_wrap(
                                CUBE_LAUNCH_TOO_MANY_RESOURCES,
                                cube__err_resource(CUBE_RESOURCE_UNITS, units, max))));
                        goto out;
                }
        }
        if (r->mode != CUBE_LAUNCH_EXECUTE)
                goto out;
        if (!r->dynamic && (r->count[0] == 0 || r->count[1] == 0 || r->count[2] == 0))
                goto out;       /* nothing runs, and no claim changes */

        for (size_t i = 0; i < r->n; i++)
                if (r->names[i]->read_only && kernel->facts && i < kernel->facts->n_buffers &&
                    (kernel->facts->buffers[i].io & CUBE__PARAM_WRITE)) {
                        refuse(k, r, kernel, cube__err_validation(
                                "a launch of %s binds memory %" PRIu64 ", a read-only import, to "
                                "parameter '%s', which the kernel may write; bind it to a "
                                "parameter the kernel only reads", kernel->entry,
                                r->names[i]->id, kernel->facts->buffers[i].name));
                        goto out;
                }
        for (size_t i = 0; i < r->n; i++)
                if (r->names[i]->read_only && writes(r, kernel, i)) {
                        refuse(k, r, kernel, cube__err_validation(
                                "a launch of %s would write memory %" PRIu64 ", a read-only "
                                "import; declare it READ_ONLY or pass it as a const pointer",
                                kernel->entry, r->names[i]->id));
                        goto out;
                }
        if (inputs(srv, r, kernel, &awaits) < 0) {
                refuse(k, r, kernel, cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(
                        CUBE_LAUNCH_OUT_OF_MEMORY, "out of host memory queueing the launch")));
                goto out;
        }
        /* An input known to carry a failure skips the launch, unless a
         * writer still pending comes first: its outcome decides which
         * failure the outputs carry, once the launch completes. */
        failure = cube__awaits_first(&awaits, &needed, &pending);
        if (failure && !pending) {
                skip(k, r, kernel, failure, needed);
                goto out;
        }
        st = cube__stream_get(s, r->stream, &e);
        if (!st) {
                refuse(k, r, kernel, e);
                goto out;
        }
        if (cube__capturing(st) && r->dynamic) {
                /* Reading the count waits on the stream, which a recording
                 * stream cannot; the capture cannot hold the launch. */
                e = cube__graph_state("launch: a launch of %s with a dynamic cube count cannot "
                                      "be recorded: its count is read in stream order, and "
                                      "stream %" PRIu64 " is recording a graph capture",
                                      kernel->entry, r->stream);
                cube__capture_doom(st, e);
                cube_error_free(e);
                goto out;
        }
        /* An input known to have failed behind a writer still pending: the
         * launch will not run (it may bind memory that has no storage), but
         * it is queued so as to pass on the first failure once known. It is
         * a skip all the same, for the stream's windows and its capture. */
        if (failure) {
                cube_error *skipped = cube__err_new(CUBE_SERVER_SKIPPED);

                if (skipped)
                        cube__stream_failed(s, r->stream, skipped);
                cube_error_free(skipped);
                submit(k, r, kernel, st, &awaits, true);
                goto out;
        }
        if (r->dynamic) {
                if (!s->count_ready) {
                        if (fetch_count(k, r, st))
                                d = CUBE__DISPATCH_PAUSED;
                        else
                                refuse(k, r, kernel, cube__err_generic("out of host memory "
                                                                        "reading a dynamic count"));
                        goto out;
                }
                if (s->count_error) {
                        e = s->count_error;
                        s->count_error = NULL;
                        refuse(k, r, kernel, e);
                        goto out;
                }
                memcpy(r->count, s->count, sizeof(r->count));
                r->dynamic = false;
                if (r->count[0] == 0 || r->count[1] == 0 || r->count[2] == 0)
                        goto out;       /* nothing runs, and no claim changes */
                if ((e = validate(srv, r))) {
                        refuse(k, r, kernel, e);
                        goto out;
                }
        }
        if ((e = cube__inject_take(srv, CUBE_FAULT_LAUNCH))) {
                refuse(k, r, kernel, e);       /* the enqueue failed */
                goto out;
        }
        if ((e = cube__inject_take(srv, CUBE_FAULT_TEARDOWN))) {
                /* The write scope was entered and never left: its outputs
                 * keep the provisional TornDown that every scope starts with. */
                refuse(k, r, kernel, e);
                goto out;
        }
        if (cube__capturing(st))
                record(k, r, kernel, st);
        else
                submit(k, r, kernel, st, &awaits, false);
out:
        cube__awaits_release(&srv->failures, &awaits);
        if (d != CUBE__DISPATCH_PAUSED) {
                /* A fetched count belongs to this launch alone, however it
                 * ended. */
                s->count_ready = false;
                cube_error_free(s->count_error);
                s->count_error = NULL;
        }
        req_free(r);
        return d;
}

cube__dispatched cube__do_launch(cube__msg *k)
{
        launch_req r = {0};

        return launch(k, &r, parse_launch(k, &r));
}

bool cube__launch_read(cube__msg *k, const uint8_t *params, size_t len, size_t *ret_len,
                       cube__dispatched *ret_dispatched)
{
        launch_req r = {0};
        size_t used;

        if (!read_launch(params, len, &r, &used)) {
                req_free(&r);
                return false;
        }
        *ret_len = used;
        *ret_dispatched = launch(k, &r, true);
        return true;
}

/* compile_queued's answer, once every kernel it waits for is ready or failed. */
typedef struct queued_wait {
        cube__session *session;
        uint32_t msgid;
        size_t remaining;
} queued_wait;

static void queued_ready(void *ctx)
{
        queued_wait *q = ctx;
        cube__session *s = q->session;
        cube__server *srv = s->server;
        msgpack_sbuffer sb;
        msgpack_packer pk;

        if (--q->remaining > 0)
                return;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (cube__pack_response_ok(&pk, q->msgid) == 0 && msgpack_pack_nil(&pk) == 0)
                cube__reply_sbuffer(s, &sb);
        msgpack_sbuffer_destroy(&sb);
        free(q);
        s->inflight--;
        srv->inflight--;
        srv->up->session_idle(s);
        srv->up->check_stopped(srv);
}

cube__dispatched cube__do_compile_queued(cube__msg *k)
{
        cube__session *s = k->session;
        queued_wait *q;

        if (k->n != 0) {
                cube__reply_malformed(k, "params must be []");
                return CUBE__DISPATCH_DONE;
        }
        q = calloc(1, sizeof(*q));
        if (!q) {
                cube__reply_owned_error(k, NULL);
                return CUBE__DISPATCH_DONE;
        }
        q->session = s;
        q->msgid = k->env->msgid;
        q->remaining = 1;               /* held until every kernel is asked */
        s->inflight++;
        k->server->inflight++;
        for (size_t i = 0; i < s->n_queued; i++) {
                cube__kernel_waiter w = { queued_ready, q };
                if (cube__kernel_prepare(s->queued[i], &w))
                        q->remaining++;
        }
        free(s->queued);
        s->queued = NULL;
        s->n_queued = 0;
        queued_ready(q);
        return CUBE__DISPATCH_DONE;
}

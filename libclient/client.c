/*
 * client.c - libcubeclient's calls: connecting, memory and status.
 *
 * Each call checks what it can locally first (a handle from another service,
 * a size that does not match), so a mistake is reported where it was made,
 * then marshals one message. create, write and free are notifications: they
 * return as soon as the frame is on the socket.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "rpc.h"

/* The most receive-buffer room a client keeps between replies. */
#define READ_KEEP ((size_t) 128 << 20)

static atomic_uint_fast64_t stream_counter;
static __thread uint64_t thread_default_stream;    /* the thread's own, once drawn */
static __thread uint64_t thread_stream;            /* named by cube_stream_set, or 0 */

uint64_t cube_stream_current(void)
{
        if (thread_stream)
                return thread_stream;
        if (thread_default_stream == 0)
                thread_default_stream = atomic_fetch_add(&stream_counter, 1) + 1;
        return thread_default_stream;
}

void cube_stream_set(uint64_t stream)
{
        thread_stream = stream;
}

const char *cube_client_service(const cube_client *c)
{
        return c->service;
}

const char *cube_client_backend(const cube_client *c)
{
        return c->backend;
}

const char *cube_client_check_mode(const cube_client *c)
{
        return c->check_mode;
}

uint64_t cube_client_properties_hash(const cube_client *c)
{
        return c->properties_hash;
}

const char *cube_client_target(const cube_client *c)
{
        return c->target;
}

const char *cube_client_device_transport(const cube_client *c)
{
        return c->transport[0] ? c->transport : NULL;
}

bool cube_client_transport_reduces(const cube_client *c, cube_elem_type t)
{
        return (unsigned) t < 32 && (c->transport_reduces >> t & 1);
}

cube_error *cube_client_require_backend(const cube_client *c, const char *backend)
{
        if (strcmp(c->backend, backend) == 0)
                return NULL;
        return cube__err_service_mismatch(c->service, backend);
}

const cube_device_properties *cube_client_properties(const cube_client *c)
{
        return &c->properties;
}

const cube_protocol_limits *cube_client_limits(const cube_client *c)
{
        return &c->daemon_limits;
}

static cube_error *oom(void)
{
        return cube__err_generic("out of memory in libcubeclient");
}

cube_error *cube__check_handle(cube_client *c, const cube_handle *h)
{
        if (h->service != c->nonce) {
                char handle[64];
                snprintf(handle, sizeof(handle), "the service whose nonce is %016" PRIx64,
                         h->service);
                return cube__err_foreign_handle(handle, c->service);
        }
        if (h->offset_start > h->size || h->offset_end > h->size - h->offset_start)
                return cube__err_validation("the handle's offsets (start %" PRIu64 ", end %" PRIu64
                                            ") do not fit its %" PRIu64 " bytes",
                                            h->offset_start, h->offset_end, h->size);
        return NULL;
}

/* hello's properties_hash, target_properties and device_transport. */
static cube_error *deliver_utilities(cube_client *c, const msgpack_object *r)
{
        static const char *const elems[] = { "f16", "bf16", "f32", "f64", "i32", "i64", "u32",
                                             "u64" };
        const msgpack_object *v, *t, *red;
        char name[16];

        if (!(v = cube__map_get(r, "properties_hash")) || !cube__obj_u64(v, &c->properties_hash) ||
            !(t = cube__map_get(r, "target_properties")) ||
            !(v = cube__map_get(t, "target")) || !cube__obj_str(v, c->target, sizeof(c->target)) ||
            !(t = cube__map_get(r, "device_transport")))
                goto bad;
        if (t->type == MSGPACK_OBJECT_NIL)
                return NULL;
        if (!(v = cube__map_get(t, "name")) || !cube__obj_str(v, c->transport, sizeof(c->transport)) ||
            !(red = cube__map_get(t, "reduces")) || red->type != MSGPACK_OBJECT_ARRAY)
                goto bad;
        for (uint32_t i = 0; i < red->via.array.size; i++) {
                if (!cube__obj_str(&red->via.array.ptr[i], name, sizeof(name)))
                        goto bad;
                for (uint32_t e = 0; e < sizeof(elems) / sizeof(elems[0]); e++)
                        if (strcmp(name, elems[e]) == 0)
                                c->transport_reduces |= 1u << e;
        }
        return NULL;
bad:
        return cube__err_generic("cubed's answer to hello is not protocol version %d's",
                                 CUBE_PROTOCOL_VERSION);
}

static cube_error *deliver_hello(cube__call *call, const msgpack_object *r)
{
        cube_client *c = call->ctx;
        const msgpack_object *v;
        uint64_t version;

        if (!(v = cube__map_get(r, "version")) || !cube__obj_u64(v, &version) ||
            version != CUBE_PROTOCOL_VERSION ||
            !(v = cube__map_get(r, "service")) || !cube__obj_str(v, c->service, sizeof(c->service)) ||
            !(v = cube__map_get(r, "nonce")) || !cube__obj_u64(v, &c->nonce) ||
            !(v = cube__map_get(r, "backend")) || !cube__obj_str(v, c->backend, sizeof(c->backend)) ||
            !(v = cube__map_get(r, "session")) || !cube__obj_u64(v, &c->session) ||
            !(v = cube__map_get(r, "properties")) || !cube__obj_properties(v, &c->properties) ||
            !(v = cube__map_get(r, "limits")) || !cube__obj_limits(v, &c->daemon_limits))
                return cube__err_generic("cubed's answer to hello is not protocol version %d's",
                                         CUBE_PROTOCOL_VERSION);
        if ((v = cube__map_get(r, "check_mode")) && v->type == MSGPACK_OBJECT_STR)
                snprintf(c->check_mode, sizeof(c->check_mode), "%.*s", (int) v->via.str.size,
                         v->via.str.ptr);
        return deliver_utilities(c, r);
}

static void client_free(cube_client *c)
{
        cube__batch_finish(c);
        for (size_t i = 0; i < c->n_fds; i++)
                close(c->fds[i]);
        if (c->fd >= 0)
                close(c->fd);
        cube_error_free(c->dead);
        pthread_mutex_destroy(&c->lock);
        pthread_mutex_destroy(&c->write_lock);
        pthread_cond_destroy(&c->cond);
        pthread_mutex_destroy(&c->ro_lock);
        free(c->ro_ids);
        cube__rbuf_free(&c->rb);
        msgpack_zone_free(c->zone);
        free(c);
}

cube_error *cube_connect(const char *path, const char *name, cube_client **ret_client)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        const char *origin = "given";
        cube_client *c;
        cube__call call = {0};
        cube__frame f;
        cube_error *e;

        if (!path) {
                path = getenv("CUBE_SOCKET");
                origin = "from $CUBE_SOCKET";
        }
        if (!path || !*path) {
                path = CUBE_DEFAULT_SOCKET;
                origin = "the default";
        }
        if (strlen(path) >= sizeof(sa.sun_path))
                return cube__err_validation("the socket path %s (%s) is longer than a Unix socket "
                                            "path can be (%zu bytes)", path, origin,
                                            sizeof(sa.sun_path) - 1);
        c = calloc(1, sizeof(*c));
        if (!c)
                return oom();
        c->fd = -1;
        if (!(c->zone = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE))) {
                free(c);
                return oom();
        }
        pthread_mutex_init(&c->lock, NULL);
        pthread_mutex_init(&c->write_lock, NULL);
        pthread_cond_init(&c->cond, NULL);
        pthread_mutex_init(&c->ro_lock, NULL);
        atomic_init(&c->next_memory, 1);
        atomic_init(&c->next_kernel, 1);
        cube__limits_client_default(&c->limits);
        strcpy(c->path, path);
        strcpy(sa.sun_path, path);

        c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (c->fd < 0 || connect(c->fd, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
                int err = errno;
                client_free(c);
                return cube__err_generic("cannot connect to cubed at %s (%s): %s; is the daemon "
                                         "running, and may this user use its socket?", path,
                                         origin, strerror(err));
        }

        cube__spin_init(&c->spin, c->fd);
        cube__frame_init(&f);
        call.msgid = cube__next_msgid(c);
        call.deliver = deliver_hello;
        call.ctx = c;
        if (cube__pack_request(&f.pk, call.msgid, "hello", 2) < 0 ||
            msgpack_pack_uint32(&f.pk, CUBE_PROTOCOL_VERSION) < 0 ||
            (name ? cube__pack_str(&f.pk, name) : msgpack_pack_nil(&f.pk)) < 0) {
                cube__frame_destroy(&f);
                client_free(c);
                return oom();
        }
        e = cube__frame_send(c, &f, &call, NULL, 0);
        if (e) {
                client_free(c);
                return e;
        }
        /* Memory ids carry the session, so they are never another's. */
        atomic_store(&c->next_memory, (c->session << CUBE__MEMORY_SESSION_SHIFT) | 1);
        /* A read reply is as large as the daemon lets a message be. */
        if (c->daemon_limits.max_message_bytes + (1u << 20) > c->limits.max_message_bytes)
                c->limits.max_message_bytes = c->daemon_limits.max_message_bytes + (1u << 20);
        /* The room of a large reply is kept for the next: faulting in fresh
         * pages for every bulk read costs several times the copy itself. */
        c->rb.keep = READ_KEEP;
        *ret_client = c;
        return NULL;
}

void cube_disconnect(cube_client *c)
{
        if (c)
                client_free(c);
}

cube_error *cube_empty(cube_client *c, uint64_t size, cube_handle *ret_handle)
{
        cube_handle h = {
                .service = c->nonce,
                .memory = atomic_fetch_add(&c->next_memory, 1),
                .stream = cube_stream_current(),
                .size = size,
        };
        cube__frame f;

        cube__frame_init(&f);
        if (cube__pack_notify(&f.pk, "create", 3) < 0 ||
            msgpack_pack_uint64(&f.pk, h.stream) < 0 ||
            msgpack_pack_uint64(&f.pk, h.memory) < 0 ||
            msgpack_pack_uint64(&f.pk, size) < 0) {
                cube__frame_destroy(&f);
                return oom();
        }
        cube_error *e = cube__frame_send(c, &f, NULL, NULL, 0);
        if (!e)
                *ret_handle = h;
        return e;
}

cube_error *cube_write(cube_client *c, const cube_handle *h, const void *data, uint64_t size)
{
        cube_error *e = cube__check_handle(c, h);

        if (!e)
                e = cube__check_writable(c, h);
        if (e)
                return e;
        if (size != cube_handle_len(h))
                return cube__err_validation("a write of %" PRIu64 " bytes for a handle of %" PRIu64
                                            " bytes", size, cube_handle_len(h));
        if (!data && size)
                return cube__err_validation("a write of %" PRIu64 " bytes from NULL", size);
        return cube__write(c, h, data, size);
}

cube_error *cube_create(cube_client *c, const void *data, uint64_t size, cube_handle *ret_handle)
{
        cube_handle h;
        cube_error *e;

        if (!data && size)
                return cube__err_validation("cube_create of %" PRIu64 " bytes from NULL; "
                                            "cube_empty makes a buffer without contents", size);
        if ((e = cube_empty(c, size, &h)))
                return e;
        if ((e = cube_write(c, &h, data, size))) {
                cube_error_free(cube_free(c, &h));
                return e;
        }
        *ret_handle = h;
        return NULL;
}

cube_error *cube_free(cube_client *c, const cube_handle *h)
{
        cube_error *e = cube__check_handle(c, h);
        cube__frame f;

        if (e)
                return e;
        cube__frame_init(&f);
        if (cube__pack_notify(&f.pk, "free", 2) < 0 ||
            msgpack_pack_uint64(&f.pk, cube_stream_current()) < 0 ||
            msgpack_pack_uint64(&f.pk, h->memory) < 0) {
                cube__frame_destroy(&f);
                return oom();
        }
        e = cube__frame_send(c, &f, NULL, NULL, 0);
        if (!e)
                cube__readonly_remove(c, h->memory);
        return e;
}

/* Packs [stream, [handle, ...]] after a request header. */
static int pack_stream_handles(cube__frame *f, uint32_t msgid, const char *method,
                               const cube_handle *handles, size_t n)
{
        if (cube__pack_request(&f->pk, msgid, method, 2) < 0 ||
            msgpack_pack_uint64(&f->pk, cube_stream_current()) < 0 ||
            msgpack_pack_array(&f->pk, (uint32_t) n) < 0)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                if (cube__pack_handle(&f->pk, &handles[i]) < 0)
                        return -ENOMEM;
        return 0;
}

cube_error *cube_read(cube_client *c, const cube_handle *h, void *dst, uint64_t size)
{
        cube_error *e = cube__check_handle(c, h);

        if (e)
                return e;
        if (size != cube_handle_len(h))
                return cube__err_validation("a read into %" PRIu64 " bytes for a handle of %" PRIu64
                                            " bytes", size, cube_handle_len(h));
        if (!dst && size)
                return cube__err_validation("a read of %" PRIu64 " bytes into NULL", size);
        return cube__read(c, h, dst, size);
}

static cube_error *handles_call(cube_client *c, const char *method, const cube_handle *handles,
                                size_t n)
{
        cube__call call = {0};
        cube__frame f;

        for (size_t i = 0; i < n; i++) {
                cube_error *e = cube__check_handle(c, &handles[i]);
                if (e)
                        return e;
        }
        cube__frame_init(&f);
        call.msgid = cube__next_msgid(c);
        if (pack_stream_handles(&f, call.msgid, method, handles, n) < 0) {
                cube__frame_destroy(&f);
                return oom();
        }
        return cube__frame_send(c, &f, &call, NULL, 0);
}

cube_error *cube_sync(cube_client *c, const cube_handle *handles, size_t n)
{
        return handles_call(c, "sync", handles, n);
}

cube_error *cube_check(cube_client *c, const cube_handle *handles, size_t n)
{
        return handles_call(c, "check", handles, n);
}

cube_error *cube_flush(cube_client *c)
{
        uint64_t stream = cube_stream_current();

        return cube__request(c, "flush", &stream, 1, NULL, NULL);
}

cube_error *cube_memory_cleanup(cube_client *c)
{
        uint64_t stream = cube_stream_current();

        return cube__request(c, "memory_cleanup", &stream, 1, NULL, NULL);
}

static cube_error *deliver_status(cube__call *call, const msgpack_object *r)
{
        cube_status *st = call->ctx;
        const msgpack_object *v;
        uint64_t sessions;

        if (!(v = cube__map_get(r, "service")) || !cube__obj_str(v, st->service, sizeof(st->service)) ||
            !(v = cube__map_get(r, "backend")) || !cube__obj_str(v, st->backend, sizeof(st->backend)) ||
            !(v = cube__map_get(r, "uptime_seconds")) || !cube__obj_double(v, &st->uptime_seconds) ||
            !(v = cube__map_get(r, "sessions")) || !cube__obj_u64(v, &sessions) ||
            !(v = cube__map_get(r, "memory_in_use")) || !cube__obj_u64(v, &st->memory_in_use) ||
            !(v = cube__map_get(r, "memory_peak")) || !cube__obj_u64(v, &st->memory_peak) ||
            !(v = cube__map_get(r, "memory_reserved")) || !cube__obj_u64(v, &st->memory_reserved) ||
            !(v = cube__map_get(r, "allocations")) || !cube__obj_u64(v, &st->allocations) ||
            !(v = cube__map_get(r, "compiles")) || !cube__obj_u64(v, &st->compiles) ||
            !(v = cube__map_get(r, "kernels")) || !cube__obj_u64(v, &st->kernels) ||
            !(v = cube__map_get(r, "poisoned")) || !cube__obj_bool(v, &st->poisoned) ||
            !(v = cube__map_get(r, "properties")) || !cube__obj_properties(v, &st->properties))
                return cube__err_answer("status");
        st->sessions = (uint32_t) sessions;
        if (!(v = cube__map_get(r, "poison")) || v->type != MSGPACK_OBJECT_STR)
                return cube__err_answer("status");
        /* A long reason is cut to fit rather than refused. */
        size_t n = v->via.str.size < sizeof(st->poison) - 1 ? v->via.str.size : sizeof(st->poison) - 1;
        memcpy(st->poison, v->via.str.ptr, n);
        st->poison[n] = '\0';
        /* Newer keys: absent from an older daemon. */
        if ((v = cube__map_get(r, "version")) && v->type == MSGPACK_OBJECT_STR)
                snprintf(st->version, sizeof(st->version), "%.*s", (int) v->via.str.size, v->via.str.ptr);
        if ((v = cube__map_get(r, "state")) && v->type == MSGPACK_OBJECT_STR)
                snprintf(st->state, sizeof(st->state), "%.*s", (int) v->via.str.size, v->via.str.ptr);
        if ((v = cube__map_get(r, "drain_seconds_left")))
                (void) cube__obj_double(v, &st->drain_seconds_left);
        if ((v = cube__map_get(r, "reload_error")) && v->type == MSGPACK_OBJECT_STR)
                snprintf(st->reload_error, sizeof(st->reload_error), "%.*s", (int) v->via.str.size,
                         v->via.str.ptr);
        return NULL;
}

cube_error *cube_daemon_status(cube_client *c, cube_status *ret_status)
{
        cube_status st = {0};
        cube_error *e = cube__request(c, "status", NULL, 0, deliver_status, &st);

        if (!e)
                *ret_status = st;
        return e;
}

static cube_error *deliver_token(cube__call *call, const msgpack_object *r)
{
        if (!cube__obj_str(r, call->ctx, 33))
                return cube__err_generic("cubed's answer to export is not a token");
        return NULL;
}

cube_error *cube_export(cube_client *c, const cube_handle *h, char ret_token[33])
{
        char token[33];
        cube__call call = { .deliver = deliver_token, .ctx = token };
        cube_error *e = cube__check_handle(c, h);
        cube__frame f;

        if (e)
                return e;
        cube__frame_init(&f);
        call.msgid = cube__next_msgid(c);
        if (cube__pack_request(&f.pk, call.msgid, "export", 1) < 0 ||
            msgpack_pack_uint64(&f.pk, h->memory) < 0) {
                cube__frame_destroy(&f);
                return oom();
        }
        e = cube__frame_send(c, &f, &call, NULL, 0);
        if (!e)
                memcpy(ret_token, token, 33);
        return e;
}

static cube_error *deliver_size(cube__call *call, const msgpack_object *r)
{
        if (!cube__obj_u64(r, call->ctx))
                return cube__err_generic("cubed's answer to import is not a size");
        return NULL;
}

cube_error *cube_import(cube_client *c, const char *token, bool read_only, cube_handle *ret_handle)
{
        cube_handle h = {
                .service = c->nonce,
                .memory = atomic_fetch_add(&c->next_memory, 1),
                .stream = cube_stream_current(),
        };
        cube__call call = { .deliver = deliver_size, .ctx = &h.size };
        cube_error *e;
        cube__frame f;

        cube__frame_init(&f);
        call.msgid = cube__next_msgid(c);
        if (cube__pack_request(&f.pk, call.msgid, "import", 3) < 0 ||
            cube__pack_str(&f.pk, token) < 0 || msgpack_pack_uint64(&f.pk, h.memory) < 0 ||
            (read_only ? msgpack_pack_true(&f.pk) : msgpack_pack_false(&f.pk)) < 0) {
                cube__frame_destroy(&f);
                return oom();
        }
        e = cube__frame_send(c, &f, &call, NULL, 0);
        /* Known before the handle is handed out, so that no write through
         * it can slip past; without room to remember it, it is given back. */
        if (!e && read_only && cube__readonly_add(c, h.memory) < 0) {
                cube_error_free(cube_free(c, &h));
                return oom();
        }
        if (!e)
                *ret_handle = h;
        return e;
}

/*
 * comms.c - libcubeclient's collectives: groups, the operations, peer access
 * and the daemon's list of groups (PROTOCOL.md, "Collectives").
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc.h"

static int pack_group(msgpack_packer *pk, const cube_group *g)
{
        int r = 0;

        if (!g)
                return msgpack_pack_nil(pk);
        if (g->id)
                return cube__pack_str(pk, g->id);
        r |= msgpack_pack_array(pk, (uint32_t) g->n);
        for (size_t i = 0; i < g->n; i++)
                r |= cube__pack_str(pk, g->devices[i]);
        return r;
}

static int pack_devices(msgpack_packer *pk, const char *const *devices, size_t n)
{
        cube_group g = { devices, n, NULL };
        return pack_group(pk, &g);
}

cube_error *cube_comm_init(cube_client *c, const char *const *devices, size_t n)
{
        cube__call call = { .client = c };
        cube__frame f;

        cube__frame_init(&f);
        call.msgid = cube__next_msgid(c);
        if (cube__pack_request(&f.pk, call.msgid, "comm_init", 1) < 0 ||
            pack_devices(&f.pk, devices, n) < 0) {
                cube__frame_destroy(&f);
                return cube__err_generic("out of memory in libcubeclient");
        }
        return cube__frame_send(c, &f, &call, NULL, 0);
}

typedef struct init_arg {
        cube_client *client;
        const char *const *devices;
        size_t n;
        cube_error *e;
} init_arg;

static void *init_one(void *p)
{
        init_arg *a = p;
        a->e = cube_comm_init(a->client, a->devices, a->n);
        return NULL;
}

cube_error *cube_comm_init_all(cube_client *const *clients, const char *const *devices, size_t n)
{
        init_arg *a = calloc(n ? n : 1, sizeof(*a));
        pthread_t *t = calloc(n ? n : 1, sizeof(*t));
        cube_error *first = NULL;

        if (!a || !t) {
                free(a);
                free(t);
                return cube__err_generic("out of memory in libcubeclient");
        }
        for (size_t i = 0; i < n; i++) {
                a[i] = (init_arg) { clients[i], devices, n, NULL };
                if (pthread_create(&t[i], NULL, init_one, &a[i]) != 0)
                        a[i].e = cube__err_generic("cannot start a thread"), t[i] = 0;
        }
        for (size_t i = 0; i < n; i++) {
                if (t[i])
                        pthread_join(t[i], NULL);
                if (a[i].e && !first)
                        first = a[i].e;
                else
                        cube_error_free(a[i].e);
        }
        free(a);
        free(t);
        return first;
}

static cube_error *deliver_id(cube__call *call, const msgpack_object *r)
{
        if (!cube__obj_str(r, call->ctx, 128))
                return cube__err_answer("comm_mint");
        return NULL;
}

cube_error *cube_comm_mint(cube_client *c, char ret_id[128])
{
        return cube__request(c, "comm_mint", NULL, 0, deliver_id, ret_id);
}

cube_error *cube_comm_init_id(cube_client *c, const char *id, uint32_t rank, uint32_t size)
{
        cube__call call = { .client = c };
        cube__frame f;

        cube__frame_init(&f);
        call.msgid = cube__next_msgid(c);
        if (cube__pack_request(&f.pk, call.msgid, "comm_init", 3) < 0 ||
            cube__pack_str(&f.pk, id) < 0 || msgpack_pack_uint32(&f.pk, rank) < 0 ||
            msgpack_pack_uint32(&f.pk, size) < 0) {
                cube__frame_destroy(&f);
                return cube__err_generic("out of memory in libcubeclient");
        }
        return cube__frame_send(c, &f, &call, NULL, 0);
}

/* [stream, group, src, dst, reduction, peer, wait] */
static cube_error *collective(cube_client *c, const char *method, const cube_group *g,
                              const cube_handle *src, const cube_handle *dst,
                              const cube_reduction *red, const char *peer,
                              cube_compute_wait wait)
{
        cube__call call = { .client = c };
        cube__frame f;
        cube_error *e;
        int r = 0;

        if ((src && (e = cube__check_handle(c, src))) || (dst && (e = cube__check_handle(c, dst))))
                return e;
        if (dst && (e = cube__check_writable(c, dst)))
                return e;
        cube__frame_init(&f);
        call.msgid = cube__next_msgid(c);
        r |= cube__pack_request(&f.pk, call.msgid, method, 7);
        r |= msgpack_pack_uint64(&f.pk, cube_stream_current());
        r |= pack_group(&f.pk, g);
        r |= src ? cube__pack_handle(&f.pk, src) : msgpack_pack_nil(&f.pk);
        r |= dst ? cube__pack_handle(&f.pk, dst) : msgpack_pack_nil(&f.pk);
        if (red) {
                r |= msgpack_pack_array(&f.pk, 2);
                r |= msgpack_pack_uint32(&f.pk, red->dtype);
                r |= msgpack_pack_uint32(&f.pk, red->op);
        } else {
                r |= msgpack_pack_nil(&f.pk);
        }
        if (!peer) {
                r |= msgpack_pack_nil(&f.pk);
        } else {
                char *end;
                unsigned long rank = strtoul(peer, &end, 10);
                if (*peer && !*end)
                        r |= msgpack_pack_uint64(&f.pk, rank);
                else
                        r |= cube__pack_str(&f.pk, peer);
        }
        r |= msgpack_pack_uint32(&f.pk, wait == CUBE_WAIT_NOW ? 1 : 0);
        if (r) {
                cube__frame_destroy(&f);
                return cube__err_generic("out of memory in libcubeclient");
        }
        return cube__frame_send(c, &f, &call, NULL, 0);
}

cube_error *cube_all_reduce(cube_client *c, const cube_group *g, const cube_handle *src,
                            const cube_handle *dst, cube_reduction reduction,
                            cube_compute_wait wait)
{
        return collective(c, "all_reduce", g, src, dst, &reduction, NULL, wait);
}

cube_error *cube_all_gather(cube_client *c, const cube_group *g, const cube_handle *src,
                            const cube_handle *dst, cube_compute_wait wait)
{
        return collective(c, "all_gather", g, src, dst, NULL, NULL, wait);
}

cube_error *cube_reduce_scatter(cube_client *c, const cube_group *g, const cube_handle *src,
                                const cube_handle *dst, cube_reduction reduction,
                                cube_compute_wait wait)
{
        return collective(c, "reduce_scatter", g, src, dst, &reduction, NULL, wait);
}

cube_error *cube_broadcast(cube_client *c, const cube_group *g, const cube_handle *src,
                           const cube_handle *dst, const char *root, cube_compute_wait wait)
{
        return collective(c, "broadcast", g, src, dst, NULL, root, wait);
}

cube_error *cube_all_to_all(cube_client *c, const cube_group *g, const cube_handle *src,
                            const cube_handle *dst, cube_compute_wait wait)
{
        return collective(c, "all_to_all", g, src, dst, NULL, NULL, wait);
}

cube_error *cube_send(cube_client *c, const cube_group *g, const cube_handle *src,
                      const char *peer, cube_compute_wait wait)
{
        return collective(c, "send", g, src, NULL, NULL, peer, wait);
}

cube_error *cube_recv(cube_client *c, const cube_group *g, const cube_handle *dst,
                      const char *peer, cube_compute_wait wait)
{
        return collective(c, "recv", g, NULL, dst, NULL, peer, wait);
}

cube_error *cube_sync_collective(cube_client *c)
{
        uint64_t stream = cube_stream_current();

        return cube__request(c, "sync_collective", &stream, 1, NULL, NULL);
}

static cube_error *deliver_bool(cube__call *call, const msgpack_object *r)
{
        if (!cube__obj_bool(r, call->ctx))
                return cube__err_answer("can_access_peer");
        return NULL;
}

cube_error *cube_can_access_peer(cube_client *c, const char *peer, bool *ret_can)
{
        cube__call call = { .client = c, .deliver = deliver_bool, .ctx = ret_can };
        cube__frame f;

        cube__frame_init(&f);
        call.msgid = cube__next_msgid(c);
        if (cube__pack_request(&f.pk, call.msgid, "can_access_peer", 1) < 0 ||
            cube__pack_str(&f.pk, peer) < 0) {
                cube__frame_destroy(&f);
                return cube__err_generic("out of memory in libcubeclient");
        }
        return cube__frame_send(c, &f, &call, NULL, 0);
}

static cube_error *deliver_u64(cube__call *call, const msgpack_object *r)
{
        if (!cube__obj_u64(r, call->ctx))
                return cube__err_answer("peer_address");
        return NULL;
}

cube_error *cube_peer_address(cube_client *c, const cube_handle *h, uint64_t *ret_address)
{
        cube__call call = { .client = c, .deliver = deliver_u64, .ctx = ret_address };
        cube__frame f;
        cube_error *e;

        if ((e = cube__check_handle(c, h)))
                return e;
        cube__frame_init(&f);
        call.msgid = cube__next_msgid(c);
        if (cube__pack_request(&f.pk, call.msgid, "peer_address", 2) < 0 ||
            msgpack_pack_uint64(&f.pk, cube_stream_current()) < 0 ||
            msgpack_pack_array(&f.pk, 1) < 0 || cube__pack_handle(&f.pk, h) < 0) {
                cube__frame_destroy(&f);
                return cube__err_generic("out of memory in libcubeclient");
        }
        return cube__frame_send(c, &f, &call, NULL, 0);
}

static cube_error *deliver_nil(cube__call *call, const msgpack_object *r)
{
        (void) call;
        if (r->type != MSGPACK_OBJECT_NIL)
                return cube__err_answer("peer_bind");
        return NULL;
}

cube_error *cube_peer_bind(cube_client *c, const char *peer, uint64_t address, uint64_t size,
                           cube_handle *ret_handle)
{
        cube_handle h = {
                .service = c->nonce,
                .memory = atomic_fetch_add(&c->next_memory, 1),
                .stream = cube_stream_current(),
                .size = size,
        };
        cube__call call = { .client = c, .deliver = deliver_nil };
        cube_error *e;
        cube__frame f;

        cube__frame_init(&f);
        call.msgid = cube__next_msgid(c);
        if (cube__pack_request(&f.pk, call.msgid, "peer_bind", 4) < 0 ||
            msgpack_pack_uint64(&f.pk, h.memory) < 0 || cube__pack_str(&f.pk, peer) < 0 ||
            msgpack_pack_uint64(&f.pk, address) < 0 || msgpack_pack_uint64(&f.pk, size) < 0) {
                cube__frame_destroy(&f);
                return cube__err_generic("out of memory in libcubeclient");
        }
        e = cube__frame_send(c, &f, &call, NULL, 0);
        if (!e)
                *ret_handle = h;
        return e;
}

/* Deprecated: the daemon whose memory a peer's launch wrote learns it from
 * the peer itself, so there is nothing left for a client to say. Kept so
 * that programs built against earlier libraries link and run. */
cube_error *cube_peer_wrote(cube_client *c, const cube_handle *handles, size_t n,
                            const char *reason)
{
        (void) c;
        (void) handles;
        (void) n;
        (void) reason;
        return NULL;
}

static bool decode_comm(const msgpack_object *m, void *elem)
{
        cube_comm_info *v = elem;
        const msgpack_object *o, *mem;
        uint64_t rank;

        if (!(o = cube__map_get(m, "id")) || !cube__obj_str(o, v->id, sizeof(v->id)) ||
            !cube__map_u64(m, "session", &v->session) || !(o = cube__map_get(m, "kind")) ||
            !cube__obj_str(o, v->kind, sizeof(v->kind)) || !cube__map_u64(m, "rank", &rank) ||
            !(mem = cube__map_get(m, "members")) || mem->type != MSGPACK_OBJECT_ARRAY ||
            !(o = cube__map_get(m, "state")) || !cube__obj_str(o, v->state, sizeof(v->state)) ||
            !(o = cube__map_get(m, "why")) || !cube__obj_str(o, v->why, sizeof(v->why)) ||
            !cube__map_u64(m, "ops", &v->ops) || !cube__map_u64(m, "bytes", &v->bytes) ||
            !cube__map_u64(m, "refusals", &v->refusals))
                return false;
        v->rank = (uint32_t) rank;
        v->size = mem->via.array.size;
        for (uint32_t i = 0; i < v->size && i < 8; i++)
                if (!cube__obj_str(&mem->via.array.ptr[i], v->members[i], sizeof(v->members[i])))
                        return false;
        return true;
}

cube_error *cube_daemon_comms(cube_client *c, cube_comm_info **ret_comms, size_t *ret_n)
{
        return cube__request_list(c, "comms", sizeof(**ret_comms), decode_comm, NULL,
                                  (void **) ret_comms, ret_n);
}

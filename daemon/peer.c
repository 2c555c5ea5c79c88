/*
 * peer.c - peer access between devices: can_access_peer, peer_address,
 * peer_bind and peer_wrote.
 *
 * Two CPU devices of one host and one user map each other's device memory.
 * When a session of this daemon (A) asks can_access_peer(B), a worker thread
 * connects to B's socket in the comm directory (B.sock, as collectives find
 * their members), checks with SO_PEERCRED that B runs as this daemon's user,
 * and asks peer_memory; B checks the same of A (the session's credentials)
 * and answers with a descriptor of its device memory (SCM_RIGHTS). The
 * driver maps it here and in the device process (peer_attach), and the
 * connection stays open: while it does, B is there; once B hangs up, a
 * launch that binds B's memory fails, on what it writes, and nothing else.
 *
 * peer_address(handle) on B answers the failure the buffer carries, or the
 * buffer's address in B's memory tagged with B (its 16 high bits are B's
 * tag, the rest the offset). peer_bind on A names a range at such an address
 * as a memory id of A's session: launches bind it as any buffer, and its
 * claims order A's work on it. A kernel on A that wrote B's buffer is told
 * to B with peer_wrote, which marks the bytes written (or tainted with the
 * cause), so a read on B sees them.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "cubed.h"

#define PEER_STREAM (UINT64_MAX - 1)    /* the session's stream for peer exchanges */
#define PEER_TIMEOUT_S 5                /* one exchange, connect to answer */
#define PEER_REPLY_MAX (64 * 1024)      /* bytes a peer's answers may take */
#define TAG_SHIFT 48
#define PEER_NAMES_MAX 4096             /* peer ranges one session may hold bound */

struct cube__peer {
        char name[CUBED_NAME_MAX];
        int fd;                         /* the connection to it; its end says it is there */
        uint32_t slot;                  /* the driver's */
        uint64_t tag, size;
        cube__device *device;           /* the device it was attached to */
        struct cube__peer *next;
};

/* One exchange, on its own thread. */
typedef struct exchange {
        cube__server *srv;
        cube__device *device;
        cube__op *op;
        char name[CUBED_NAME_MAX];
        char path[sizeof(((struct sockaddr_un *) 0)->sun_path)];
        bool ok;
        int fd;
        uint32_t slot;
        uint64_t tag, size;
        char why[256];
} exchange;

/* This device's tag in the addresses it hands out: never 0. */
static uint64_t own_tag(const cube__server *srv)
{
        uint64_t n = srv->nonce, t = (n ^ (n >> 16) ^ (n >> 32) ^ (n >> 48)) & 0xffff;

        return t ? t : 1;
}

static bool has_peer_access(const cube__server *srv)
{
        const cube__driver *d = srv->driver;

        return srv->transport && d->peer_export && d->peer_offset && d->peer_attach &&
               d->peer_storage;
}

/* Whether the peer's end of the connection is still open. */
static bool peer_there(const cube__peer *p)
{
        struct pollfd q = { .fd = p->fd, .events = POLLIN | POLLRDHUP };

        if (poll(&q, 1, 0) < 0)
                return false;
        return !(q.revents & (POLLHUP | POLLRDHUP | POLLERR | POLLNVAL));
}

cube_error *cube__peer_check(cube__server *srv, const cube__peer *p)
{
        if (p->device != srv->device)
                return cube__err_generic("the mapping of device %s's memory went with the device "
                                         "this daemon re-initialised", p->name);
        if (!peer_there(p))
                return cube__err_generic("device %s, whose memory the launch binds, is gone",
                                         p->name);
        return NULL;
}

/* The newest attached peer of that name still there, or NULL. */
static cube__peer *find_peer(cube__server *srv, const char *name)
{
        for (cube__peer *p = srv->peers; p; p = p->next)
                if (strcmp(p->name, name) == 0 && p->device == srv->device && peer_there(p))
                        return p;
        return NULL;
}

void cube__peers_done(cube__server *srv)
{
        while (srv->peers) {
                cube__peer *p = srv->peers;
                srv->peers = p->next;
                close(p->fd);
                free(p);
        }
}

/* ---- the exchange (its own thread) --------------------------------------- */

static int send_all(int fd, const char *p, size_t n)
{
        while (n > 0) {
                ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w <= 0)
                        return -1;
                p += w;
                n -= (size_t) w;
        }
        return 0;
}

/* Sends [0, msgid, method, params] with params packed by the caller after
 * n_params. */
static int send_request(int fd, uint32_t msgid, const char *method, const char *name)
{
        msgpack_sbuffer sb;
        msgpack_packer pk;
        int r;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (name) {
                r = cube__pack_request(&pk, msgid, method, 2);
                r |= msgpack_pack_uint32(&pk, CUBE_PROTOCOL_VERSION);
                r |= cube__pack_str(&pk, name);
        } else {
                r = cube__pack_request(&pk, msgid, method, 0);
        }
        if (r == 0)
                r = send_all(fd, sb.data, sb.size);
        msgpack_sbuffer_destroy(&sb);
        return r;
}

/* Receives the answer to msgid into up, keeping a descriptor that came with
 * it (the first; others are closed) in *fd. Answers with why on error. */
static int recv_answer(exchange *x, int sock, msgpack_unpacker *u, msgpack_unpacked *up,
                       uint32_t msgid, int *fd)
{
        size_t total = 0;

        for (;;) {
                msgpack_unpack_return ur = msgpack_unpacker_next(u, up);
                if (ur == MSGPACK_UNPACK_SUCCESS) {
                        const msgpack_object *o = &up->data;
                        uint64_t type, id;
                        if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 4 ||
                            !cube__obj_u64(&o->via.array.ptr[0], &type) ||
                            !cube__obj_u64(&o->via.array.ptr[1], &id))
                                break;
                        if (type != 1 || id != msgid)
                                continue;       /* a notification: not ours */
                        if (o->via.array.ptr[2].type != MSGPACK_OBJECT_NIL) {
                                snprintf(x->why, sizeof(x->why), "device %s refused peer access",
                                         x->name);
                                return -1;
                        }
                        return 0;
                }
                if (ur == MSGPACK_UNPACK_PARSE_ERROR || total > PEER_REPLY_MAX ||
                    !msgpack_unpacker_reserve_buffer(u, 4096))
                        break;
                union { struct cmsghdr h; char room[CMSG_SPACE(4 * sizeof(int))]; } c;
                struct iovec iov = { msgpack_unpacker_buffer(u), msgpack_unpacker_buffer_capacity(u) };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.room,
                                     .msg_controllen = sizeof(c.room) };
                ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        snprintf(x->why, sizeof(x->why), "device %s did not answer: %s", x->name,
                                 n == 0 ? "it hung up" : strerror(errno));
                        return -1;
                }
                for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
                        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                                continue;
                        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                        for (size_t i = 0; i < k; i++) {
                                int got;
                                memcpy(&got, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
                                if (*fd < 0)
                                        *fd = got;
                                else
                                        close(got);
                        }
                }
                msgpack_unpacker_buffer_consumed(u, (size_t) n);
                total += (size_t) n;
        }
        snprintf(x->why, sizeof(x->why), "device %s answered what is not msgpack-RPC", x->name);
        return -1;
}

/* Connects to the peer, checks it is this user's, and takes its memory. */
static void exchange_run(exchange *x)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        struct ucred cred;
        socklen_t len = sizeof(cred);
        struct timeval tv = { PEER_TIMEOUT_S, 0 };
        msgpack_unpacker u;
        msgpack_unpacked up;
        int sock, memfd = -1;
        uint64_t tag = 0, size = 0;
        char name[CUBED_NAME_MAX] = "";
        cube_error *e;

        x->fd = -1;
        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", x->path);
        sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (sock < 0 || setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
            setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0 ||
            connect(sock, (struct sockaddr *) &sa, sizeof(sa)) < 0) {
                snprintf(x->why, sizeof(x->why), "cannot reach device %s at %s: %s", x->name,
                         x->path, strerror(errno));
                if (sock >= 0)
                        close(sock);
                return;
        }
        if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 || cred.uid != geteuid()) {
                snprintf(x->why, sizeof(x->why), "device %s runs as another user", x->name);
                close(sock);
                return;
        }
        if (!msgpack_unpacker_init(&u, 4096)) {
                snprintf(x->why, sizeof(x->why), "out of host memory");
                close(sock);
                return;
        }
        msgpack_unpacked_init(&up);
        char self[CUBED_NAME_MAX + 8];
        snprintf(self, sizeof(self), "peer:%s", x->srv->instance);
        if (send_request(sock, 1, "hello", self) < 0 || send_request(sock, 2, "peer_memory",
                                                                     NULL) < 0) {
                snprintf(x->why, sizeof(x->why), "cannot talk to device %s: %s", x->name,
                         strerror(errno));
        } else if (recv_answer(x, sock, &u, &up, 1, &memfd) == 0 &&
                   recv_answer(x, sock, &u, &up, 2, &memfd) == 0) {
                const msgpack_object *r = &up.data.via.array.ptr[3];
                if (r->type != MSGPACK_OBJECT_ARRAY || r->via.array.size != 3 ||
                    !cube__obj_u64(&r->via.array.ptr[0], &size) ||
                    !cube__obj_u64(&r->via.array.ptr[1], &tag) ||
                    !cube__obj_str(&r->via.array.ptr[2], name, sizeof(name)) || memfd < 0)
                        snprintf(x->why, sizeof(x->why), "device %s answered peer_memory "
                                 "without its memory", x->name);
                else if (strcmp(name, x->name) != 0)
                        snprintf(x->why, sizeof(x->why), "the socket of device %s is device %s's",
                                 x->name, name);
                else if ((e = x->srv->driver->peer_attach(x->device, memfd, size, &x->slot))) {
                        memfd = -1;
                        snprintf(x->why, sizeof(x->why), "%s", cube_error_message(e));
                        cube_error_free(e);
                } else {
                        memfd = -1;
                        x->ok = true;
                }
        }
        msgpack_unpacked_destroy(&up);
        msgpack_unpacker_destroy(&u);
        if (memfd >= 0)
                close(memfd);
        if (!x->ok) {
                close(sock);
                return;
        }
        x->fd = sock;
        x->tag = tag;
        x->size = size;
}

static void *exchange_thread(void *arg)
{
        exchange *x = arg;

        exchange_run(x);
        cube__work_complete(x->srv, &x->op->work);
        return NULL;
}

/* Loop thread, in stream order: the exchange starts, unless another
 * session's attached the peer meanwhile. */
static void exchange_start(cube__op *o)
{
        exchange *x = o->host_ctx;
        pthread_attr_t attr;
        pthread_t t;
        cube__peer *p = find_peer(x->srv, x->name);

        x->device = x->srv->device;
        if (p) {
                x->ok = true;
                x->fd = -1;
                cube__work_complete(x->srv, &o->work);
                return;
        }
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, exchange_thread, x) != 0) {
                snprintf(x->why, sizeof(x->why), "cannot start a thread");
                x->fd = -1;
                cube__work_complete(x->srv, &o->work);
        }
        pthread_attr_destroy(&attr);
}

/* Loop thread: the peer is recorded, and the answer is true or false. */
static void exchange_done(cube__op *o)
{
        exchange *x = o->host_ctx;
        cube__server *srv = x->srv;
        cube__pending_reply *r = o->reply;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        bool can = x->ok;

        if (x->ok && x->fd >= 0) {
                cube__peer *p = calloc(1, sizeof(*p));
                if (p) {
                        memcpy(p->name, x->name, sizeof(p->name));
                        p->fd = x->fd;
                        p->slot = x->slot;
                        p->tag = x->tag;
                        p->size = x->size;
                        p->device = x->device;
                        p->next = srv->peers;
                        srv->peers = p;
                        cube__log(CUBE__LOG_INFO, "peer access: device %s's memory (%" PRIu64
                                  " bytes) is mapped, slot %u", p->name, p->size, p->slot);
                } else {
                        close(x->fd);   /* its memory stays mapped, unreachable */
                        can = false;
                }
        } else if (!x->ok) {
                cube__log(CUBE__LOG_INFO, "peer access to device %s: no: %s", x->name, x->why);
        }
        o->work.error = NULL;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (r && cube__pack_response_ok(&pk, r->msgid) == 0 &&
            (can ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk)) == 0) {
                r->frame_len = sb.size;
                r->frame = msgpack_sbuffer_release(&sb);
                r->session->queued_bytes += r->frame_len;
        }
        msgpack_sbuffer_destroy(&sb);
        free(x);
}

/* ---- requests ------------------------------------------------------------- */

static void reply_bool(cube__msg *k, bool v)
{
        msgpack_sbuffer sb;
        msgpack_packer pk;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (cube__pack_response_ok(&pk, k->env->msgid) == 0 &&
            (v ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk)) == 0)
                cube__reply_sbuffer(k->session, &sb);
        msgpack_sbuffer_destroy(&sb);
}

/* A device name that names a socket in the comm directory and nothing
 * else. */
static bool plain_name(const char *name)
{
        return name[0] && name[0] != '.' && !strchr(name, '/');
}

/* can_access_peer: [device]. Whether kernels here can bind the peer's
 * memory: a peer of this host and user that handed its memory over (the
 * first ask exchanges it, in stream order on the session's peer stream). */
cube__dispatched cube__do_can_access_peer(cube__msg *k)
{
        cube__server *srv = k->server;
        cube__session *s = k->session;
        char name[CUBED_NAME_MAX];
        cube__pending_reply *r;
        cube__stream *st;
        cube__op *o = NULL;
        exchange *x;
        cube_error *e = NULL;

        if (k->n != 1 || !cube__obj_str(&k->p[0], name, sizeof(name))) {
                cube__reply_malformed(k, "params must be [device]");
                return CUBE__DISPATCH_DONE;
        }
        if (!has_peer_access(srv) || srv->poison || !plain_name(name) ||
            strcmp(name, srv->instance) == 0) {
                reply_bool(k, false);
                return CUBE__DISPATCH_DONE;
        }
        if (find_peer(srv, name)) {
                reply_bool(k, true);
                return CUBE__DISPATCH_DONE;
        }
        x = calloc(1, sizeof(*x));
        st = x ? cube__stream_get(s, PEER_STREAM, &e) : NULL;
        o = st ? cube__op_new(s, st, CUBE__WORK_FENCE, 0, 0, NULL) : NULL;
        r = o ? cube__pending_new(s, k->env->msgid) : NULL;
        if (!r) {
                free(o);
                free(x);
                cube__reply_owned_error(k, e);
                return CUBE__DISPATCH_DONE;
        }
        x->srv = srv;
        x->op = o;
        x->fd = -1;
        memcpy(x->name, name, sizeof(name));
        snprintf(x->path, sizeof(x->path), "%s/%s.sock", srv->opts.comm_dir, name);
        o->host_run = exchange_start;
        o->host_done = exchange_done;
        o->host_ctx = x;
        o->reply = r;
        cube__op_enqueue(o);
        cube__pending_arm(r);
        return CUBE__DISPATCH_DONE;
}

/* peer_memory: []. A daemon of this host and user asks for this device's
 * memory: answered [size, tag, name] with its descriptor (SCM_RIGHTS). */
cube__dispatched cube__do_peer_memory(cube__msg *k)
{
        cube__server *srv = k->server;
        cube__session *s = k->session;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        uint64_t size;
        int fd, r = 0;

        if (k->n != 0) {
                cube__reply_malformed(k, "params must be []");
                return CUBE__DISPATCH_DONE;
        }
        if (!has_peer_access(srv)) {
                cube__reply_owned_error(k, cube__err_no_device_transport(
                        CUBE_COLLECTIVE_PEER_ACCESS));
                return CUBE__DISPATCH_DONE;
        }
        if (s->uid != geteuid()) {
                cube__log_session(CUBE__LOG_NOTICE, s, 0, "session %" PRIu64 " (uid %u) asked "
                                  "for this device's memory: refused, peers are this daemon's "
                                  "user only", s->id, (unsigned) s->uid);
                cube__reply_owned_error(k, cube__err_validation(
                        "peer access is between daemons of one user"));
                return CUBE__DISPATCH_DONE;
        }
        if ((r = srv->driver->peer_export(srv->device, &fd, &size)) < 0) {
                cube__reply_owned_error(k, cube__err_generic("cannot hand out device memory: %s",
                                                             strerror(-r)));
                return CUBE__DISPATCH_DONE;
        }
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        r |= cube__pack_response_ok(&pk, k->env->msgid);
        r |= msgpack_pack_array(&pk, 3);
        r |= msgpack_pack_uint64(&pk, size);
        r |= msgpack_pack_uint64(&pk, own_tag(srv));
        r |= cube__pack_str(&pk, srv->instance);
        if (r == 0) {
                s->bytes_out += sb.size;
                cube__log_session(CUBE__LOG_INFO, s, 0, "session %" PRIu64 " (%s) maps this "
                                  "device's memory", s->id, s->name);
                cube__reply_sbuffer_fd(k, &sb, fd);
        } else {
                close(fd);
                cube__reply_owned_error(k, NULL);
        }
        msgpack_sbuffer_destroy(&sb);
        return CUBE__DISPATCH_DONE;
}

/* peer_address: [stream, handle]. The failure the buffer carries first, so a
 * peer never reads bytes a failed launch left unwritten; then the address of
 * the handle's first byte in this device's memory, tagged with this device;
 * NoDeviceTransport{peer_access} where the device has no peer access. */
cube__dispatched cube__do_peer_address(cube__msg *k)
{
        cube__server *srv = k->server;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        uint64_t stream, start, end, address = 0;
        cube_handle *hs;
        cube__name *n;
        size_t count;
        cube_error *e;

        if (!cube__read_stream_handles(k, &stream, &hs, &count))
                return CUBE__DISPATCH_DONE;
        e = count != 1 ? cube__err_validation("peer_address names one handle") :
            cube__ensure_written(k->session, hs, count);
        if (!e && !has_peer_access(srv))
                e = cube__err_no_device_transport(CUBE_COLLECTIVE_PEER_ACCESS);
        if (!e)
                e = cube__name_resolve(k->session, &hs[0], &n, &start, &end);
        free(hs);
        if (!e && (!n->alloc->storage || n->alloc->peer))
                e = cube__err_validation(n->alloc->peer ? "the buffer is another device's "
                                         "memory" : "the buffer has no device memory");
        if (e) {
                cube__reply_owned_error(k, e);
                return CUBE__DISPATCH_DONE;
        }
        address = own_tag(srv) << TAG_SHIFT |
                  (srv->driver->peer_offset(srv->device, n->alloc->storage) + n->alloc->base + start);
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (cube__pack_response_ok(&pk, k->env->msgid) == 0 &&
            msgpack_pack_uint64(&pk, address) == 0)
                cube__reply_sbuffer(k->session, &sb);
        msgpack_sbuffer_destroy(&sb);
        return CUBE__DISPATCH_DONE;
}

/* peer_bind: [memory, device, address, size]. Names size bytes at an address
 * the peer's peer_address gave as a new memory id of this session, for
 * launches here to bind; the peer must be one can_access_peer said yes to.
 * The peer cannot tell here which of its ranges it handed out, so a bound
 * range reaches whatever the peer holds there: only the daemon's own user
 * (and root), whom the peer trusts with all of its memory, may bind. */
cube__dispatched cube__do_peer_bind(cube__msg *k)
{
        cube__server *srv = k->server;
        char name[CUBED_NAME_MAX];
        uint64_t id, address, size, offset;
        cube__storage *storage;
        cube__peer *p;
        cube_error *e;

        if (k->n != 4 || !cube__obj_u64(&k->p[0], &id) ||
            !cube__obj_str(&k->p[1], name, sizeof(name)) || !cube__obj_u64(&k->p[2], &address) ||
            !cube__obj_u64(&k->p[3], &size)) {
                cube__reply_malformed(k, "params must be [memory, device, address, size]");
                return CUBE__DISPATCH_DONE;
        }
        offset = address & ((1ull << TAG_SHIFT) - 1);
        if (!has_peer_access(srv))
                e = cube__err_no_device_transport(CUBE_COLLECTIVE_PEER_ACCESS);
        else if (k->session->uid != geteuid() && k->session->uid != 0)
                e = cube__err_validation("binding a peer's memory is for this daemon's user and "
                                         "root: a bound range reaches whatever the peer holds "
                                         "there");
        else if (k->session->n_peer_names >= PEER_NAMES_MAX)
                e = cube__err_validation("a session may hold at most %u bound peer ranges",
                                         PEER_NAMES_MAX);
        else if (!(p = find_peer(srv, name)))
                e = cube__err_validation("device %s is no peer of this one (can_access_peer "
                                         "answers whether it can be)", name);
        else if (address >> TAG_SHIFT != p->tag)
                e = cube__err_validation("address %016" PRIx64 " is not one of device %s",
                                         address, name);
        else if (size == 0 || offset > p->size || size > p->size - offset)
                e = cube__err_validation("%" PRIu64 " bytes at offset %" PRIu64 " do not fit "
                                         "device %s's memory", size, offset, name);
        else if (!(e = srv->driver->peer_storage(srv->device, p->slot, offset, size, &storage)))
                e = cube__alloc_peer(k->session, id, p, storage, size);
        if (e)
                cube__reply_owned_error(k, e);
        else
                cube__reply_ok_nil(k);
        return CUBE__DISPATCH_DONE;
}

/* peer_wrote: [stream, [handle, ...], reason or nil], a notification. A kernel
 * on another device finished enqueuing its writes to these buffers: a reason
 * taints them as a failed launch would, nil marks them written. */
cube__dispatched cube__do_peer_wrote(cube__msg *k)
{
        cube__session *s = k->session;
        cube__failures *fs = &k->server->failures;
        const msgpack_object_array *arr;
        char reason[512];
        uint64_t stream, failure = 0;
        bool failed;

        if (k->n != 3 || !cube__obj_u64(&k->p[0], &stream) || !cube__obj_array(&k->p[1], &arr) ||
            (k->p[2].type != MSGPACK_OBJECT_NIL &&
             !cube__obj_str(&k->p[2], reason, sizeof(reason)))) {
                cube__reply_malformed(k, "params must be [stream, [handle, ...], reason or nil]");
                return CUBE__DISPATCH_DONE;
        }
        failed = k->p[2].type != MSGPACK_OBJECT_NIL;
        if (failed) {
                s->errors++;
                failure = cube__failures_insert(fs, cube__err_generic("a kernel on a peer device "
                                                                      "failed: %s", reason), s->id, s->uid);
        }
        for (uint32_t i = 0; i < arr->size; i++) {
                cube_handle h;
                cube__name *n;
                uint64_t start, end;
                cube_error *e;
                if (!cube__obj_handle(&arr->ptr[i], &h))
                        continue;
                if ((e = cube__name_resolve(s, &h, &n, &start, &end))) {
                        cube_error_free(e);
                        continue;
                }
                if (failed)
                        cube__alloc_taint(n->alloc, start, end, failure);
                else
                        cube__claims_written(fs, &n->alloc->claims, start, end);
        }
        if (failed)
                cube__failures_prune(fs, failure);
        return CUBE__DISPATCH_DONE;
}

/*
 * peer.c - peer access between devices: can_access_peer, peer_address,
 * peer_bind, and what a peer's kernels wrote (peer_written).
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
 * claims order A's work on it.
 *
 * B's claims cannot see A's work, so A tells B, on that connection, what
 * every launch that claimed B's bytes ended with: in stream order behind the
 * launch, a host step reads what A's claims say of those bytes now and asks
 * B to take it (peer_written: written, or the failure, as the error value
 * it is), and the stream goes on once B has answered. A sync on A that waits
 * for the launch therefore also waits until B knows, and B's reads answer
 * the peer's failure as they would one of B's own launches.
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
#define PEER_SPANS_MAX 1024             /* spans one peer_written names */

struct cube__peer {
        char name[CUBED_NAME_MAX];
        int fd;                         /* the connection to it; its end says it is there */
        uint32_t slot;                  /* the driver's */
        uint64_t tag, size;
        cube__device *device;           /* the device it was attached to */
        pthread_mutex_t lock;           /* one peer_written exchange at a time on fd */
        uint32_t next_msgid;            /* the loop thread's, for peer_written */
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
                pthread_mutex_destroy(&p->lock);
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

/* Receives the answer to msgid from device name on sock into up, keeping a
 * descriptor that came with it (the first; others are closed) in *fd when fd
 * is not NULL. Answers with why on error. */
static int recv_answer(int sock, msgpack_unpacker *u, msgpack_unpacked *up, uint32_t msgid,
                       int *fd, const char *name, char *why, size_t why_len)
{
        size_t total = 0;

        for (;;) {
                msgpack_unpack_return ur = msgpack_unpacker_next(u, up);
                if (ur == MSGPACK_UNPACK_SUCCESS) {
                        const msgpack_object *o = &up->data;
                        uint64_t type, id;
                        cube_error *e = NULL;
                        if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 4 ||
                            !cube__obj_u64(&o->via.array.ptr[0], &type) ||
                            !cube__obj_u64(&o->via.array.ptr[1], &id))
                                break;
                        if (type != 1 || id != msgid)
                                continue;       /* a notification, or a late answer */
                        if (o->via.array.ptr[2].type != MSGPACK_OBJECT_NIL) {
                                (void) cube__err_unpack(&o->via.array.ptr[2], CUBE__FAMILY_SERVER,
                                                        &e);
                                snprintf(why, why_len, "device %s refused: %s", name,
                                         e ? cube_error_message(e) : "an error it did not say");
                                cube_error_free(e);
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
                        snprintf(why, why_len, "device %s did not answer: %s", name,
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
                                if (fd && *fd < 0)
                                        *fd = got;
                                else
                                        close(got);
                        }
                }
                msgpack_unpacker_buffer_consumed(u, (size_t) n);
                total += (size_t) n;
        }
        snprintf(why, why_len, "device %s answered what is not msgpack-RPC", name);
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
        } else if (recv_answer(sock, &u, &up, 1, &memfd, x->name, x->why, sizeof(x->why)) == 0 &&
                   recv_answer(sock, &u, &up, 2, &memfd, x->name, x->why, sizeof(x->why)) == 0) {
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
                        p->next_msgid = 3;      /* 1 and 2 were the exchange's */
                        pthread_mutex_init(&p->lock, NULL);
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

/* ---- telling a peer what a launch here wrote (host steps) ---------------- */

/* One span of the peer's memory and what it is now: failure 0, written. */
typedef struct span {
        uint64_t start, end;            /* of the allocation */
        uint64_t failure;
} span;

/* A launch's claim on one peer range, told in stream order behind it. */
typedef struct tell {
        cube__server *srv;
        cube__op *op;
        cube__peer *peer;
        cube__alloc *alloc;
        uint64_t start, end;
        uint32_t msgid;
        msgpack_sbuffer frame;          /* the peer_written request */
        bool failed;
        char why[256];
} tell;

/* What A's claims say of [t->start, t->end) of the peer range now: spans
 * written, spans carrying a failure; bytes a later launch claims already
 * are left to its own telling. Past PEER_SPANS_MAX the rest goes as one
 * span carrying the first failure in it, if any. */
static size_t spans_now(const tell *t, span *v)
{
        const cube__claims *c = &t->alloc->claims;
        uint64_t at = t->start;
        size_t n = 0;

        for (size_t i = 0; i < c->n && at < t->end; i++) {
                const cube__claim *cl = &c->v[i];
                uint64_t s = cl->start > at ? cl->start : at, e = cl->end < t->end ? cl->end : t->end;
                if (cl->end <= at || s >= e)
                        continue;
                if (n >= PEER_SPANS_MAX - 2) {
                        for (; i < c->n && c->v[i].start < t->end; i++)
                                if (c->v[i].failure) {
                                        v[n++] = (span) { at, t->end, c->v[i].failure };
                                        return n;
                                }
                        break;
                }
                if (s > at)
                        v[n++] = (span) { at, s, 0 };
                if (cl->failure)
                        v[n++] = (span) { s, e, cl->failure };
                at = e;
        }
        if (at < t->end)
                v[n++] = (span) { at, t->end, 0 };
        return n;
}

/* Packs peer_written [[[offset, size, error or nil], ...]]: each failure as
 * its root, the error value the launch here ended with. */
static int pack_told(tell *t, const span *v, size_t n)
{
        cube__failures *fs = &t->srv->failures;
        msgpack_packer pk;
        int r;

        msgpack_sbuffer_init(&t->frame);
        msgpack_packer_init(&pk, &t->frame, msgpack_sbuffer_write);
        r = cube__pack_request(&pk, t->msgid, "peer_written", 1);
        r |= msgpack_pack_array(&pk, (uint32_t) n);
        for (size_t i = 0; r == 0 && i < n; i++) {
                r |= msgpack_pack_array(&pk, 3);
                r |= msgpack_pack_uint64(&pk, t->alloc->peer_at + v[i].start);
                r |= msgpack_pack_uint64(&pk, v[i].end - v[i].start);
                if (!v[i].failure) {
                        r |= msgpack_pack_nil(&pk);
                        continue;
                }
                cube_error *report = cube__failures_report(fs, v[i].failure, t->alloc->id);
                const cube_error *root = report ? cube_error_source(report) : NULL;
                r |= root ? cube__err_pack(&pk, root) : -1;
                cube_error_free(report);
        }
        return r ? -1 : 0;
}

/* Its own thread: one exchange at a time on the peer's connection. */
static void *tell_thread(void *arg)
{
        tell *t = arg;
        msgpack_unpacker u;
        msgpack_unpacked up;

        pthread_mutex_lock(&t->peer->lock);
        if (!msgpack_unpacker_init(&u, 4096)) {
                snprintf(t->why, sizeof(t->why), "out of host memory");
                t->failed = true;
        } else {
                msgpack_unpacked_init(&up);
                if (send_all(t->peer->fd, t->frame.data, t->frame.size) < 0) {
                        snprintf(t->why, sizeof(t->why), "cannot talk to device %s: %s",
                                 t->peer->name, strerror(errno));
                        t->failed = true;
                } else if (recv_answer(t->peer->fd, &u, &up, t->msgid, NULL, t->peer->name,
                                       t->why, sizeof(t->why)) < 0) {
                        t->failed = true;
                }
                msgpack_unpacked_destroy(&up);
                msgpack_unpacker_destroy(&u);
        }
        pthread_mutex_unlock(&t->peer->lock);
        cube__work_complete(t->srv, &t->op->work);
        return NULL;
}

/* Loop thread, in stream order once the launch's claim is settled: what the
 * bytes are now goes to the peer, unless it is gone (a launch that binds it
 * fails now) or nothing of the range is the launch's any more. */
static void tell_start(cube__op *o)
{
        tell *t = o->host_ctx;
        cube_error *gone = cube__peer_check(t->srv, t->peer);
        span *v = gone ? NULL : calloc(PEER_SPANS_MAX, sizeof(*v));
        size_t n = v ? spans_now(t, v) : 0;
        pthread_attr_t attr;
        pthread_t th;
        int r = -1;

        if (n > 0 && pack_told(t, v, n) == 0) {
                pthread_attr_init(&attr);
                pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                r = pthread_create(&th, &attr, tell_thread, t);
                pthread_attr_destroy(&attr);
        }
        if (r != 0 && !gone && (n > 0 || !v)) {
                snprintf(t->why, sizeof(t->why), "out of host memory");
                t->failed = true;
        }
        cube_error_free(gone);
        free(v);
        if (r != 0)
                cube__work_complete(t->srv, &o->work);
}

static void tell_done(cube__op *o)
{
        tell *t = o->host_ctx;

        if (t->failed)
                cube__log_session(CUBE__LOG_WARNING, o->session, 0, "device %s was not told what "
                                  "a launch of session %" PRIu64 " wrote of its memory: %s",
                                  t->peer->name, o->session->id, t->why);
        msgpack_sbuffer_destroy(&t->frame);
}

void cube__peer_launch_wrote(cube__session *s, uint64_t stream, cube__alloc *a, uint64_t start,
                             uint64_t end)
{
        cube_error *e = NULL;
        cube__stream *st = start < end ? cube__stream_get(s, stream, &e) : NULL;
        cube__op *o;
        tell *t;

        if (!st || cube__capturing(st) ||
            !(o = cube__op_new(s, st, CUBE__WORK_FENCE, 1, sizeof(*t), (void **) &t))) {
                if (start < end)
                        cube__log_session(CUBE__LOG_WARNING, s, 0, "device %s will not be told "
                                          "what a launch of session %" PRIu64 " wrote of its "
                                          "memory: %s", a->peer->name, s->id,
                                          e ? cube_error_message(e) : st ? "the stream records "
                                          "a capture" : "out of host memory");
                cube_error_free(e);
                return;
        }
        *t = (tell) { .srv = s->server, .op = o, .peer = a->peer, .alloc = a, .start = start,
                      .end = end, .msgid = a->peer->next_msgid++ };
        msgpack_sbuffer_init(&t->frame);
        if (!a->peer->next_msgid)
                a->peer->next_msgid = 3;
        cube__op_use(o, a, false);
        o->host_run = tell_start;
        o->host_done = tell_done;
        o->host_ctx = t;
        cube__op_enqueue(o);
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
                s->peer_mapped = true;
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
                e = cube__alloc_peer(k->session, id, p, storage, offset, size);
        if (e)
                cube__reply_owned_error(k, e);
        else
                cube__reply_ok_nil(k);
        return CUBE__DISPATCH_DONE;
}

/* peer_wrote: a notification of earlier libraries, whose client said what a
 * peer's kernel wrote. The peer says it itself now (peer_written), so what a
 * client says is not taken: it is accepted and ignored. */
cube__dispatched cube__do_peer_wrote(cube__msg *k)
{
        (void) k;
        return CUBE__DISPATCH_DONE;
}

/* What one peer_written span lands on: every allocation of this device's
 * memory it overlaps. */
typedef struct landing {
        cube__server *srv;
        uint64_t start, end;            /* of the device's memory */
        uint64_t failure;               /* 0: written */
} landing;

static void land_on(uint64_t id, void *value, void *ctx)
{
        cube__name *n = value;
        cube__alloc *a = n->alloc;
        landing *l = ctx;
        uint64_t at, s, e;

        (void) id;
        if (a->peer || !a->storage || a->freed)
                return;
        at = l->srv->driver->peer_offset(l->srv->device, a->storage) + a->base;
        s = l->start > at ? l->start - at : 0;
        e = l->end - at < a->size ? l->end - at : a->size;
        if (l->end <= at || s >= e)
                return;
        if (l->failure)
                cube__alloc_taint(a, s, e, l->failure);
        else
                cube__claims_written(&l->srv->failures, &a->claims, s, e);
}

/* peer_written: [[[offset, size, error or nil], ...]], from a daemon this
 * device's memory was handed to (peer_memory). A launch there that bound
 * these bytes ended: nil marks them written (releasing a failure they
 * carried), an error taints them with it, the peer's own error value, as a
 * failed launch here would. Answered nil once done, so the peer's stream
 * goes on only once reads here see it. */
cube__dispatched cube__do_peer_written(cube__msg *k)
{
        cube__session *s = k->session;
        cube__server *srv = k->server;
        cube__failures *fs = &srv->failures;
        const msgpack_object_array *spans, *one;
        const char *device = strncmp(s->name, "peer:", 5) == 0 ? s->name + 5 : s->name;

        if (k->n != 1 || !cube__obj_array(&k->p[0], &spans)) {
                cube__reply_malformed(k, "params must be [[[offset, size, error or nil], ...]]");
                return CUBE__DISPATCH_DONE;
        }
        if (!s->peer_mapped || s->uid != geteuid() || !has_peer_access(srv)) {
                cube__reply_owned_error(k, cube__err_validation("peer_written is for a daemon "
                                                                "this device's memory was "
                                                                "handed to"));
                return CUBE__DISPATCH_DONE;
        }
        for (uint32_t i = 0; i < spans->size; i++) {
                landing l = { .srv = srv };
                uint64_t offset, size;
                cube_error *root = NULL;
                if (!cube__obj_array(&spans->ptr[i], &one) || one->size != 3 ||
                    !cube__obj_u64(&one->ptr[0], &offset) || !cube__obj_u64(&one->ptr[1], &size) ||
                    offset + size < offset ||
                    (one->ptr[2].type != MSGPACK_OBJECT_NIL &&
                     cube__err_unpack(&one->ptr[2], CUBE__FAMILY_SERVER, &root) < 0)) {
                        cube__reply_malformed(k, "a span must be [offset, size, error or nil], "
                                              "the error a ServerError");
                        return CUBE__DISPATCH_DONE;
                }
                if (root) {
                        s->errors++;
                        l.failure = cube__failures_insert(fs, root, s->id, s->uid);
                        if (!l.failure)
                                continue;
                        char note[CUBED_NAME_MAX + 64];
                        snprintf(note, sizeof(note), "a kernel on device %s was to write these "
                                 "bytes", device);
                        cube__failures_note(fs, l.failure, note);
                        cube__log_session(CUBE__LOG_INFO, s, l.failure, "a launch on device %s "
                                          "that bound this device's memory failed (failure #%"
                                          PRIu64 ")", device, l.failure);
                }
                l.start = offset;
                l.end = offset + size;
                for (cube__session *x = srv->sessions; x; x = x->next)
                        cube__idmap_foreach(&x->memory, land_on, &l);
                if (l.failure)
                        cube__failures_prune(fs, l.failure);
        }
        cube__reply_ok_nil(k);
        return CUBE__DISPATCH_DONE;
}

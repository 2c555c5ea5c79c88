/*
 * rpc.c - one connection shared by every thread of a process.
 *
 * Frames go out whole under a write lock. Answers come back on the same
 * socket in whatever order the daemon finishes them, so whichever waiting
 * thread finds nobody reading becomes the reader: it reads one message,
 * delivers it to the call it answers (copying a read's bytes straight into
 * that caller's buffer), and wakes everyone to look again. The only thread
 * of the library's own is batch.c's flusher, which only sends.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rpc.h"

#define READ_CHUNK (64 * 1024)
/* Answers at least this large are read straight into the caller's buffer. */
#define DIRECT_READ_MIN (1u << 20)

uint32_t cube__next_msgid(cube_client *c)
{
        uint32_t id;

        pthread_mutex_lock(&c->lock);
        id = ++c->next_msgid;
        pthread_mutex_unlock(&c->lock);
        return id;
}

/* Marks the connection unusable; every waiting call then reports why. */
static void mark_dead(cube_client *c, cube_error *why)
{
        if (!c->dead)
                c->dead = why;
        else
                cube_error_free(why);
        pthread_cond_broadcast(&c->cond);
}

static cube_error *lost(cube_client *c, const char *what, int err)
{
        return cube__err_generic("the connection to cubed at %s was lost: %s%s%s", c->path, what,
                                 err ? ": " : "", err ? strerror(err) : "");
}

static cube_error *read_one(cube_client *c);

/* The daemon refuses a connection (a quota, an allow-list) by sending its
 * reason and closing without reading, so a send can fail with EPIPE while the
 * reason waits in our socket: read what is left, so the caller hears the
 * reason rather than a broken pipe. Returns it, or NULL. */
static cube_error *parting_reason(cube_client *c)
{
        cube_error *why = NULL;

        pthread_mutex_lock(&c->lock);
        if (c->reading) {
                pthread_mutex_unlock(&c->lock);
                return NULL;
        }
        c->reading = true;
        pthread_mutex_unlock(&c->lock);
        for (int i = 0; i < 64 && !why; i++)
                why = read_one(c);
        if (why && cube_error_kind_of(why) == CUBE_SERVER_GENERIC) {
                cube_error_free(why);
                why = NULL;
        }
        pthread_mutex_lock(&c->lock);
        c->reading = false;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        return why;
}

cube_error *cube__frame_send(cube_client *c, cube__frame *f, cube__call *call, const void *tail,
                             size_t tail_len)
{
        struct iovec iov[2] = { { f->data, f->len }, { (void *) tail, tail_len } };
        int n = tail_len ? 2 : 1;
        cube_error *e = call ? cube__call_wait(c, call, iov, n) : cube__send(c, iov, n);

        cube__frame_destroy(f);
        return e;
}

cube_error *cube__send_locked(cube_client *c, const struct iovec *iov, int n)
{
        struct iovec v[9];
        struct msghdr mh = { .msg_iov = v };
        cube_error *e = NULL;

        if (n > 8)
                return cube__err_generic("a frame of more than 8 pieces");
        /* Batched launches were queued first: they go first. */
        if (c->batch.len > 0)
                v[mh.msg_iovlen++] = (struct iovec) { c->batch.buf, c->batch.len };
        if (n > 0)
                memcpy(v + mh.msg_iovlen, iov, (size_t) n * sizeof(*v));
        mh.msg_iovlen += (size_t) n;
        c->batch.len = 0;
        while (mh.msg_iovlen > 0) {
                ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
                if (w < 0) {
                        if (errno == EINTR)
                                continue;
                        int err = errno;
                        if (err == EPIPE || err == ECONNRESET)
                                e = parting_reason(c);
                        if (!e)
                                e = lost(c, "sending failed", err);
                        break;
                }
                while (mh.msg_iovlen > 0 && (size_t) w >= mh.msg_iov->iov_len) {
                        w -= (ssize_t) mh.msg_iov->iov_len;
                        mh.msg_iov++;
                        mh.msg_iovlen--;
                }
                if (mh.msg_iovlen > 0) {
                        mh.msg_iov->iov_base = (char *) mh.msg_iov->iov_base + w;
                        mh.msg_iov->iov_len -= (size_t) w;
                }
        }
        if (e) {
                pthread_mutex_lock(&c->lock);
                mark_dead(c, cube_error_clone(e));
                pthread_mutex_unlock(&c->lock);
        }
        return e;
}

cube_error *cube__send(cube_client *c, const struct iovec *iov, int n)
{
        cube_error *e;

        pthread_mutex_lock(&c->write_lock);
        e = cube__send_locked(c, iov, n);
        pthread_mutex_unlock(&c->write_lock);
        return e;
}

static cube__call *find_call(cube_client *c, uint32_t msgid)
{
        for (cube__call *k = c->calls; k; k = k->next)
                if (k->msgid == msgid)
                        return k;
        return NULL;
}

/* Handles one whole message from the daemon. Called with no lock held. */
static cube_error *handle_message(cube_client *c, const msgpack_object *msg)
{
        cube__envelope env;
        const char *why;
        cube__call *call;
        cube_error *result = NULL;

        if (cube__envelope_parse(msg, &env, &why) < 0)
                return cube__err_generic("cubed sent a malformed message: %s", why);
        if (env.type == CUBE__MSG_NOTIFY) {
                if (cube__method_is(&env, "protocol_error") && env.params->via.array.size == 1) {
                        cube_error *e = NULL;
                        if (cube__err_unpack(&env.params->via.array.ptr[0], CUBE__FAMILY_SERVER,
                                             &e) == 0)
                                return e;
                }
                return NULL;
        }
        if (env.type != CUBE__MSG_RESPONSE)
                return cube__err_generic("cubed sent a request, which clients do not serve");

        pthread_mutex_lock(&c->lock);
        call = find_call(c, env.msgid);
        pthread_mutex_unlock(&c->lock);
        if (!call)
                return NULL;    /* nobody waits for it any more */

        if (env.error->type != MSGPACK_OBJECT_NIL) {
                if (cube__err_unpack(env.error, call->family, &result) < 0)
                        result = cube__err_generic("cubed answered with an error this library "
                                                   "cannot decode");
        } else if (call->deliver) {
                result = call->deliver(call, env.result);
        }

        pthread_mutex_lock(&c->lock);
        call->error = result;
        call->done = true;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        return NULL;
}

/* Receives up to cap bytes into buf, waiting for at least one; sets *ret_n.
 * Descriptors (staging regions) come along the answer that names them; they
 * are kept in order for it. Returns an error only when the connection can no
 * longer be used.
 *
 * It waits in poll, not in a blocking recvmsg: a reader blocked in recvmsg
 * is woken each time the daemon takes a request off this socket (the
 * kernel's "room to write" wake-up reaches every sleeper), a wasted context
 * switch per call; poll sleeps until there is something to read. Between
 * messages an answer is rarely there yet, so poll comes first, after a
 * short spin where that pays (spin.c); within one (mid_message), the rest
 * usually is. */
static cube_error *receive(cube_client *c, void *buf, size_t cap, bool mid_message,
                           size_t *ret_n)
{
        bool wait = !mid_message;

        for (;;) {
                char ctl[CMSG_SPACE(sizeof(int) * 4)];
                struct iovec iov = { buf, cap };
                struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                                     .msg_controllen = sizeof(ctl) };

                int w = wait ? cube__spin_wait(&c->spin, c->fd) : 0;
                if (w < 0 && w != -EINTR)
                        return lost(c, "waiting for an answer failed", -w);
                ssize_t r = recvmsg(c->fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
                wait = r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
                if (wait || (r < 0 && errno == EINTR))
                        continue;
                for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); r > 0 && cm; cm = CMSG_NXTHDR(&mh, cm)) {
                        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
                                continue;
                        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
                        for (size_t i = 0; i < k; i++) {
                                int fd;
                                memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd));
                                pthread_mutex_lock(&c->lock);
                                if (c->n_fds < sizeof(c->fds) / sizeof(c->fds[0]))
                                        c->fds[c->n_fds++] = fd;
                                else
                                        close(fd);
                                pthread_mutex_unlock(&c->lock);
                        }
                }
                if (r < 0)
                        return lost(c, "receiving failed", errno);
                if (r == 0)
                        return lost(c, "the daemon closed it", 0);
                *ret_n = (size_t) r;
                return NULL;
        }
}

/* Parses a successful answer [1, msgid, nil, [bin]] up to its payload, from
 * the avail bytes of a message of mlen. */
static bool bin_answer_prefix(const uint8_t *p, size_t avail, size_t mlen, uint32_t *ret_msgid,
                              size_t *ret_header, uint64_t *ret_len)
{
        size_t off = 2;
        uint32_t id;

        if (avail < 16 || p[0] != 0x94 || p[1] != CUBE__MSG_RESPONSE)
                return false;
        if (p[off] <= 0x7f) {
                id = p[off];
                off += 1;
        } else if (p[off] == 0xcc) {
                id = p[off + 1];
                off += 2;
        } else if (p[off] == 0xcd) {
                id = (uint32_t) p[off + 1] << 8 | p[off + 2];
                off += 3;
        } else if (p[off] == 0xce) {
                id = (uint32_t) p[off + 1] << 24 | (uint32_t) p[off + 2] << 16 |
                     (uint32_t) p[off + 3] << 8 | p[off + 4];
                off += 5;
        } else {
                return false;
        }
        if (off + 7 > avail || p[off] != 0xc0 || p[off + 1] != 0x91 || p[off + 2] != 0xc6)
                return false;
        *ret_len = (uint64_t) p[off + 3] << 24 | (uint64_t) p[off + 4] << 16 |
                   (uint64_t) p[off + 5] << 8 | p[off + 6];
        off += 7;
        if (off + *ret_len != mlen)
                return false;
        *ret_msgid = id;
        *ret_header = off;
        return true;
}

/* A large read's answer goes straight into the caller's buffer, not through
 * the receive buffer and a copy: the payload is most of the transfer. Returns
 * whether the message was taken (and *ret_fatal, if the connection failed). */
static bool read_direct(cube_client *c, size_t avail, size_t mlen, cube_error **ret_fatal)
{
        cube__rbuf *b = &c->rb;
        uint32_t msgid;
        size_t header, got;
        uint64_t len;
        cube__call *call;
        char *dst = NULL;

        if (mlen < DIRECT_READ_MIN ||
            !bin_answer_prefix(b->p + b->pos, avail, mlen, &msgid, &header, &len))
                return false;
        pthread_mutex_lock(&c->lock);
        call = find_call(c, msgid);
        if (call && call->direct && call->direct_len == len)
                dst = call->direct;
        pthread_mutex_unlock(&c->lock);
        if (!dst)
                return false;

        got = avail - header;
        memcpy(dst, b->p + b->pos + header, got);
        b->need = 0;
        cube__rbuf_consume(b, avail);
        *ret_fatal = NULL;
        while (got < len) {
                size_t n;
                if ((*ret_fatal = receive(c, dst + got, len - got, true, &n)))
                        return true;
                got += n;
        }
        pthread_mutex_lock(&c->lock);
        call->error = NULL;
        call->done = true;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        return true;
}

/* Reads until one whole message was handled. Returns an error only when the
 * connection can no longer be used. */
static cube_error *read_one(cube_client *c)
{
        cube__rbuf *b = &c->rb;

        for (;;) {
                size_t avail = b->len - b->pos, mlen = 0, off = 0, n;
                cube_error *e;

                if (avail > 0 && avail >= b->need) {
                        const uint8_t *msg = b->p + b->pos;
                        cube__scan scan = cube__prescan(msg, avail, &c->limits, &mlen);
                        if (scan == CUBE__SCAN_COMPLETE) {
                                msgpack_object obj;
                                int u;

                                b->need = 0;
                                /* The reader's zone outlives each message: a
                                 * zone per message costs a malloc and free. */
                                u = msgpack_unpack((const char *) msg, mlen, &off, c->zone, &obj);
                                e = u == MSGPACK_UNPACK_SUCCESS ? handle_message(c, &obj) :
                                    lost(c, "a message from cubed could not be decoded", 0);
                                msgpack_zone_clear(c->zone);
                                if (u == MSGPACK_UNPACK_SUCCESS)
                                        cube__rbuf_consume(b, mlen);
                                return e;
                        }
                        if (scan != CUBE__SCAN_INCOMPLETE)
                                return cube__err_generic("cubed at %s sent a message this library "
                                                         "refuses: %s", c->path,
                                                         cube__scan_describe(scan));
                        if (b->need == 0 && read_direct(c, avail, mlen, &e))
                                return e;
                        b->need = mlen;
                }
                if (cube__rbuf_reserve(b, READ_CHUNK) < 0)
                        return lost(c, "out of memory buffering a reply", 0);
                if ((e = receive(c, b->p + b->len, b->cap - b->len, b->len > b->pos, &n)))
                        return e;
                b->len += n;
        }
}

int cube__take_fd(cube_client *c)
{
        int fd = -1;

        pthread_mutex_lock(&c->lock);
        if (c->n_fds > 0) {
                fd = c->fds[0];
                memmove(c->fds, c->fds + 1, (c->n_fds - 1) * sizeof(c->fds[0]));
                c->n_fds--;
        }
        pthread_mutex_unlock(&c->lock);
        return fd;
}

cube_error *cube__call_wait(cube_client *c, cube__call *call, const struct iovec *iov, int n)
{
        cube_error *e;

        call->done = false;
        call->error = NULL;
        pthread_mutex_lock(&c->lock);
        if (c->dead) {
                e = cube_error_clone(c->dead);
                pthread_mutex_unlock(&c->lock);
                return e;
        }
        call->next = c->calls;
        c->calls = call;
        pthread_mutex_unlock(&c->lock);

        e = cube__send(c, iov, n);

        pthread_mutex_lock(&c->lock);
        while (!e && !call->done) {
                /* Even a dead connection may have a reader still copying into
                 * this call's buffers: wait for it before giving them back. */
                if (c->reading) {
                        pthread_cond_wait(&c->cond, &c->lock);
                        continue;
                }
                if (c->dead)
                        break;
                c->reading = true;
                pthread_mutex_unlock(&c->lock);
                cube_error *fatal = read_one(c);
                pthread_mutex_lock(&c->lock);
                c->reading = false;
                if (fatal)
                        mark_dead(c, fatal);
                pthread_cond_broadcast(&c->cond);
        }
        for (cube__call **p = &c->calls; *p; p = &(*p)->next)
                if (*p == call) {
                        *p = call->next;
                        break;
                }
        if (!e) {
                if (call->done)
                        e = call->error;
                else
                        e = cube_error_clone(c->dead);
        }
        pthread_mutex_unlock(&c->lock);
        return e;
}

cube_error *cube__request(cube_client *c, const char *method, const uint64_t *params, uint32_t n,
                          cube__deliver_fn deliver, void *ctx)
{
        cube__call call = { .deliver = deliver, .ctx = ctx, .client = c };
        cube__frame f;
        int r;

        cube__frame_init(&f);
        call.msgid = cube__next_msgid(c);
        r = cube__pack_request(&f.pk, call.msgid, method, n);
        for (uint32_t i = 0; r == 0 && i < n; i++)
                r = msgpack_pack_uint64(&f.pk, params[i]);
        if (r < 0) {
                cube__frame_destroy(&f);
                return cube__err_generic("out of memory in libcubeclient");
        }
        return cube__frame_send(c, &f, &call, NULL, 0);
}

typedef struct list_call {
        const char *method;
        size_t elem_size;
        cube__decode_fn decode;
        void (*clean)(void *v, size_t n);
        void *v;
        size_t n;
} list_call;

static cube_error *deliver_list(cube__call *call, const msgpack_object *r)
{
        list_call *l = call->ctx;
        char *v;

        if (r->type != MSGPACK_OBJECT_ARRAY)
                return cube__err_answer(l->method);
        if (!(v = calloc(r->via.array.size + 1, l->elem_size)))
                return cube__err_generic("out of memory in libcubeclient");
        for (uint32_t i = 0; i < r->via.array.size; i++)
                if (!l->decode(&r->via.array.ptr[i], v + i * l->elem_size)) {
                        if (l->clean)
                                l->clean(v, i);
                        else
                                free(v);
                        return cube__err_answer(l->method);
                }
        l->v = v;
        l->n = r->via.array.size;
        return NULL;
}

cube_error *cube__request_list(cube_client *c, const char *method, size_t elem_size,
                               cube__decode_fn decode, void (*clean)(void *v, size_t n),
                               void **ret_v, size_t *ret_n)
{
        list_call l = { method, elem_size, decode, clean, NULL, 0 };
        cube_error *e = cube__request(c, method, NULL, 0, deliver_list, &l);

        if (e)
                return e;
        *ret_v = l.v;
        *ret_n = l.n;
        return NULL;
}

cube_error *cube__err_answer(const char *method)
{
        return cube__err_generic("cubed's %s answer is not protocol version %d's", method,
                                 CUBE_PROTOCOL_VERSION);
}

bool cube__map_u64(const msgpack_object *m, const char *key, uint64_t *ret)
{
        const msgpack_object *v = cube__map_get(m, key);
        return v && cube__obj_u64(v, ret);
}

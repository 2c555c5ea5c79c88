/*
 * conn.c - the Unix socket: listening, accepting, framing and writing.
 *
 * Every byte a client sends lands in the connection's read buffer and passes
 * the pre-scan before msgpack-c decodes it, so a declared size can never make
 * the daemon allocate or wait beyond the limits. A message that breaks the
 * protocol is answered with ServerError::Validation where a reply can be
 * framed (its msgid is readable), else with a protocol_error notification,
 * and then its connection is closed; other sessions never notice.
 *
 * What a connection holds is counted at what it really holds: answers queued
 * for a client that does not read (their allocations, as malloc sized them,
 * and their write requests) count in the session's max-queued-bytes, and a
 * message still arriving counts its receive buffer in the session's
 * max-queued-bytes, its user's uid-queued-bytes and the daemon's
 * max-receive-bytes. The receive buffer grows with what arrives, never with
 * what a message declares. A session over any of them is not read until it
 * is under again. A connection must say hello within hello-timeout, and a
 * message that has started must keep arriving: frame-timeout seconds
 * without a byte of it end the connection.
 *
 * It is long (about 970 lines): reading, framing, writing and the flow control
 * between them share one connection's state (its buffers, its holds, its
 * caps), and are easiest to check against each other in one file.
 */
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "requests.h"
#include "rbuf.h"

#define READ_CHUNK (64 * 1024)

struct cube__conn {
        uv_pipe_t pipe;
        cube__server *server;
        cube__session *session;
        cube__rbuf rb;
        cube__direct direct;            /* a write's payload read into its target */
        unsigned writes_pending;
        bool paused;                    /* waiting for a kernel; see cube__conn_wait_for */
        bool held;                      /* accepted during a reinit: no session yet */
        bool throttled;                 /* over max-requests or max-queued-bytes: not read */
        bool rx_blocked;                /* a message arriving would cross a receive cap: not read */
        uint64_t out_bytes;             /* queued answers, as allocated */
        uint64_t rx_held;               /* the receive buffer, as counted */
        uv_timer_t timer;               /* hello-timeout, then frame-timeout */
        int handles_open;
        struct ucred cred;
        gid_t *groups;                  /* the peer's supplementary groups (SO_PEERGROUPS) */
        size_t n_groups;
        cube__kernel *waiting_on;
        bool redispatching;
        bool closing;
        bool close_after_write;
        bool refused;                   /* turned away at accept: not a protocol error */
        cube__conn *prev, *next;
        char answers[2 * CUBE__SMALL_ANSWER];   /* small answers not yet written */
        size_t answers_len;
        bool answers_listed;            /* on server->answering */
        cube__conn *answers_next;
        cube__linger linger;
};

typedef struct write_req {
        uv_write_t req;
        cube__conn *conn;
        char *frame;
        uint64_t charged;               /* what it counts in out_bytes */
        uv_pipe_t *fd_handle;           /* a descriptor sent along, closed once sent */
} write_req;

static void rx_account(cube__conn *c);
static void rx_wake(cube__server *srv);

static void answers_unlist(cube__conn *c)
{
        for (cube__conn **p = &c->server->answering; c->answers_listed && *p; p = &(*p)->answers_next)
                if (*p == c) {
                        *p = c->answers_next;
                        c->answers_listed = false;
                }
}

static void on_closed(uv_handle_t *h)
{
        cube__conn *c = h->data;
        cube__server *srv = c->server;

        if (--c->handles_open > 0)
                return;
        answers_unlist(c);
        if (c->prev)
                c->prev->next = c->next;
        else
                srv->conns = c->next;
        if (c->next)
                c->next->prev = c->prev;
        srv->n_conns--;
        cube__rbuf_free(&c->rb);
        rx_account(c);
        if (c->rx_blocked)
                srv->rx_blocked--;
        rx_wake(srv);
        free(c->groups);
        cube__direct_end(&c->direct);
        if (c->waiting_on)
                cube__kernel_forget(c->waiting_on, c);
        if (c->session)
                cube__session_detach(c->session);
        free(c);
        cube__server_check_stopped(srv);
}

/* The connection's own last close goes off the loop too: descriptors a
 * client left queued in the socket are dropped by the kernel in the thread
 * that closes it. */
void cube__conn_close(cube__conn *c)
{
        uv_os_fd_t fd;
        int keep = -1;

        if (c->closing)
                return;
        c->closing = true;
        uv_read_stop((uv_stream_t *) &c->pipe);
        if (uv_fileno((uv_handle_t *) &c->pipe, &fd) == 0)
                keep = cube__close_keep(fd);
        uv_close((uv_handle_t *) &c->pipe, on_closed);
        if (c->handles_open > 1)
                uv_close((uv_handle_t *) &c->timer, on_closed);
        cube__close_later(keep);
}

cube__session *cube__conn_session(cube__conn *c)
{
        return c->session;
}

void cube__conn_close_all(cube__server *srv)
{
        for (cube__conn *c = srv->conns; c; c = c->next)
                cube__conn_close(c);
}

static void on_written(uv_write_t *req, int status)
{
        write_req *w = (write_req *) req;
        cube__conn *c = w->conn;

        free(w->frame);
        if (w->fd_handle)
                uv_close((uv_handle_t *) w->fd_handle, (uv_close_cb) free);
        c->out_bytes -= w->charged;
        free(w);
        c->writes_pending--;
        if (c->close_after_write && c->writes_pending == 0)
                cube__conn_close(c);
        else
                cube__conn_unthrottle(c);
}

static void send_answers(cube__conn *c);

/* Most answers fit the socket at once: written now, they cost no request,
 * no callback and no second pass of the loop. libuv refuses (EAGAIN) while
 * earlier writes wait, which keeps answers in order. Returns the bytes
 * written. */
static size_t write_now(cube__conn *c, const char *bytes, size_t len)
{
        uv_buf_t b = uv_buf_init((char *) bytes, (unsigned) len);
        int n = uv_try_write((uv_stream_t *) &c->pipe, &b, 1);

        if (n <= 0)
                return 0;
        cube__linger_answered(c->server, &c->linger);
        return (size_t) n;
}

void cube__conn_send_fd(cube__conn *c, char *frame, size_t len, int fd)
{
        write_req *w;
        uv_buf_t b;
        int r;

        if (c && c->answers_len)
                send_answers(c);   /* answers go out in the order they were made */

        if (!c || c->closing) {
                free(frame);
                if (fd >= 0)
                        close(fd);
                return;
        }
        size_t sent = fd < 0 ? write_now(c, frame, len) : 0;
        if (sent == len) {
                free(frame);
                return;
        }
        w = calloc(1, sizeof(*w));
        if (!w || (fd >= 0 && !(w->fd_handle = malloc(sizeof(*w->fd_handle))))) {
                free(w);
                free(frame);
                if (fd >= 0)
                        close(fd);
                cube__conn_close(c);
                return;
        }
        /* A queued answer is kept at its size (an sbuffer's is 8 KiB for a
         * few hundred bytes), and counted at what malloc holds for it. */
        if (sent == 0 && len > 0) {
                char *fit = realloc(frame, len);
                if (fit)
                        frame = fit;
        }
        w->conn = c;
        w->frame = frame;
        w->charged = malloc_usable_size(frame) + sizeof(*w) +
                     (w->fd_handle ? sizeof(*w->fd_handle) : 0);
        b = uv_buf_init(frame + sent, (unsigned) (len - sent));
        if (fd >= 0) {
                /* libuv sends only handles: wrap the descriptor in one. */
                uv_pipe_init(c->server->loop, w->fd_handle, 0);
                uv_pipe_open(w->fd_handle, fd);
                r = uv_write2(&w->req, (uv_stream_t *) &c->pipe, &b, 1,
                              (uv_stream_t *) w->fd_handle, on_written);
        } else {
                r = uv_write(&w->req, (uv_stream_t *) &c->pipe, &b, 1, on_written);
        }
        if (r < 0) {
                free(frame);
                if (w->fd_handle)
                        uv_close((uv_handle_t *) w->fd_handle, (uv_close_cb) free);
                free(w);
                cube__conn_close(c);
                return;
        }
        c->writes_pending++;
        c->out_bytes += w->charged;
}

/* Writes what the connection holds: at once when the socket takes it, else
 * copied and queued. */
static void send_answers(cube__conn *c)
{
        size_t len = c->answers_len, sent;
        char *rest;

        c->answers_len = 0;
        if (!len || c->closing)
                return;
        if ((sent = write_now(c, c->answers, len)) == len)
                return;
        if (!(rest = malloc(len - sent))) {
                cube__conn_close(c);
                return;
        }
        memcpy(rest, c->answers + sent, len - sent);
        cube__conn_send(c, rest, len - sent);
}

/* Holding small answers until a round of I/O is dispatched matters when many
 * clients share the daemon's CPU: each answer written wakes its client,
 * which takes the CPU from the daemon before it reads the next request; held,
 * the round's requests are all read first, and each client's wake-up finds
 * the daemon done. */
void cube__conn_send_small(cube__conn *c, const char *bytes, size_t len)
{
        if (!c || c->closing)
                return;
        if (len > sizeof(c->answers) - c->answers_len)
                send_answers(c);
        memcpy(c->answers + c->answers_len, bytes, len);
        c->answers_len += len;
        if (!c->answers_listed) {
                c->answers_listed = true;
                c->answers_next = c->server->answering;
                c->server->answering = c;
        }
}

static void send_all_answers(cube__server *srv)
{
        while (srv->answering) {
                cube__conn *c = srv->answering;
                srv->answering = c->answers_next;
                c->answers_listed = false;
                send_answers(c);
        }
}

static void on_answers_check(uv_check_t *h)
{
        send_all_answers(h->data);
}

static void on_answers_prepare(uv_prepare_t *h)
{
        send_all_answers(h->data);
}

void cube__conn_answers_init(cube__server *srv)
{
        uv_check_init(srv->loop, &srv->answers_check);
        uv_prepare_init(srv->loop, &srv->answers_prepare);
        srv->answers_check.data = srv->answers_prepare.data = srv;
        uv_check_start(&srv->answers_check, on_answers_check);
        uv_prepare_start(&srv->answers_prepare, on_answers_prepare);
        /* They keep nothing alive: the loop ends when its connections do. */
        uv_unref((uv_handle_t *) &srv->answers_check);
        uv_unref((uv_handle_t *) &srv->answers_prepare);
}

void cube__conn_answers_close(cube__server *srv)
{
        send_all_answers(srv);
        uv_close((uv_handle_t *) &srv->answers_check, NULL);
        uv_close((uv_handle_t *) &srv->answers_prepare, NULL);
}

void cube__conn_send(cube__conn *c, char *frame, size_t len)
{
        cube__conn_send_fd(c, frame, len, -1);
}

/* The msgid of a request whose envelope starts intact, or -1: lets a
 * malformed request be answered on its own msgid. */
static int64_t peek_msgid(const uint8_t *p, size_t n)
{
        if (n < 3 || p[0] != 0x94 || p[1] != 0x00)
                return -1;
        if (p[2] <= 0x7f)
                return p[2];
        if (p[2] == 0xcc && n >= 4)
                return p[3];
        if (p[2] == 0xcd && n >= 5)
                return (int64_t) p[3] << 8 | p[4];
        if (p[2] == 0xce && n >= 7)
                return (int64_t) p[3] << 24 | (int64_t) p[4] << 16 | (int64_t) p[5] << 8 | p[6];
        if (p[2] == 0xcf && n >= 11 && !p[3] && !p[4] && !p[5] && !p[6])
                return (int64_t) p[7] << 24 | (int64_t) p[8] << 16 | (int64_t) p[9] << 8 | p[10];
        return -1;
}

void cube__conn_protocol_error(cube__conn *c, int64_t msgid, const char *fmt, ...)
{
        char reason[512];
        cube_error *e;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        va_list ap;
        int r;

        if (c->closing || c->close_after_write)
                return;
        va_start(ap, fmt);
        vsnprintf(reason, sizeof(reason), fmt, ap);
        va_end(ap);
        cube__log_session(CUBE__LOG_WARNING, c->session, 0, "session %" PRIu64 " (pid %d): protocol error, closing: %s",
                  c->session->id, (int) c->session->pid, reason);
        c->session->errors++;
        if (!c->refused)
                c->server->stats.protocol_errors++;

        e = cube__err_validation("protocol error: %s; the connection is closed", reason);
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (msgid >= 0)
                r = cube__pack_response_error(&pk, (uint32_t) msgid, e);
        else
                r = (cube__pack_notify(&pk, "protocol_error", 1) == 0 && e) ?
                    cube__err_pack(&pk, e) : -ENOMEM;
        cube_error_free(e);
        uv_read_stop((uv_stream_t *) &c->pipe);
        if (r == 0) {
                size_t len = sb.size;
                cube__conn_send(c, msgpack_sbuffer_release(&sb), len);
        }
        msgpack_sbuffer_destroy(&sb);
        c->close_after_write = true;
        if (c->writes_pending == 0)
                cube__conn_close(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *ret)
{
        cube__conn *c = h->data;

        if (c->direct.left) {
                *ret = uv_buf_init(c->direct.dst, (unsigned) (c->direct.left < (1u << 30) ?
                                                              c->direct.left : (1u << 30)));
                return;
        }
        if (cube__rbuf_reserve(&c->rb, READ_CHUNK) < 0) {
                *ret = uv_buf_init(NULL, 0);    /* libuv reports UV_ENOBUFS */
                return;
        }
        *ret = uv_buf_init((char *) c->rb.p + c->rb.len, (unsigned) (c->rb.cap - c->rb.len));
}

/* Whether the session has more in flight than its quotas let it queue. */
static bool over_limits(const cube__conn *c)
{
        const cube__options *o = &c->server->opts;
        const cube__session *s = c->session;

        return s->inflight >= o->max_requests ||
               s->queued_bytes + c->out_bytes >= o->max_queued_bytes;
}

/* Keeps the receive buffer's count in its user's and the daemon's totals. */
static void rx_account(cube__conn *c)
{
        cube__server *srv = c->server;
        uint64_t now = c->rb.cap;
        cube__uid *u = c->session ? cube__idmap_get(&srv->users.uids, c->session->uid) : NULL;

        if (now == c->rx_held)
                return;
        srv->rx_bytes += now - c->rx_held;      /* modular: a decrease works too */
        if (u)
                u->rx_bytes += now - c->rx_held;
        c->rx_held = now;
}

/* Whether a message arriving on c may not grow: its session, its user or
 * the daemon hold as many bytes as they may. */
static bool rx_over(const cube__conn *c)
{
        const cube__server *srv = c->server;
        const cube__options *o = &srv->opts;
        const cube__session *s = c->session;
        const cube__uid *u = cube__idmap_get(&srv->users.uids, s->uid);

        return s->queued_bytes + c->out_bytes + c->rx_held >= o->max_queued_bytes ||
               (o->uid_queued_bytes && u && u->rx_bytes >= o->uid_queued_bytes) ||
               (o->max_receive_bytes && srv->rx_bytes >= o->max_receive_bytes);
}

static void timer_update(cube__conn *c);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *ret);
static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *b);

/* Whether c is read: not paused, throttled, blocked, closing. */
static bool reading(const cube__conn *c)
{
        return !c->paused && !c->throttled && !c->rx_blocked && !c->closing &&
               !c->close_after_write;
}

/* After a read: a message still arriving that crosses a receive cap stops
 * the reading of its connection until room is made. */
static void rx_check(cube__conn *c)
{
        rx_account(c);
        if (c->rx_blocked || c->closing || c->rb.len == c->rb.pos || !rx_over(c))
                return;
        c->rx_blocked = true;
        c->server->rx_blocked++;
        uv_read_stop((uv_stream_t *) &c->pipe);
        timer_update(c);
        cube__log_session(CUBE__LOG_INFO, c->session, 0, "session %" PRIu64 ": not read while "
                          "the message it sends would cross max-queued-bytes, uid-queued-bytes "
                          "or max-receive-bytes", c->session->id);
}

/* Room was made: connections blocked on the receive caps are read again
 * where they fit. */
static void rx_wake(cube__server *srv)
{
        if (!srv->rx_blocked)
                return;
        for (cube__conn *c = srv->conns; c; c = c->next) {
                if (!c->rx_blocked || c->closing || rx_over(c))
                        continue;
                c->rx_blocked = false;
                srv->rx_blocked--;
                if (reading(c))
                        uv_read_start((uv_stream_t *) &c->pipe, on_alloc, on_read);
                timer_update(c);
        }
}

static void on_timeout(uv_timer_t *t)
{
        cube__conn *c = t->data;
        const cube__options *o = &c->server->opts;

        if (!c->session->greeted)
                cube__conn_protocol_error(c, -1, "no hello within hello-timeout (%u s)",
                                          o->hello_timeout_s);
        else
                cube__conn_protocol_error(c, -1, "a message stopped arriving: no byte of it "
                                          "for frame-timeout (%u s)", o->frame_timeout_s);
        /* A peer that does not read is not waited for. */
        cube__conn_close(c);
}

/* The hello clock runs from the start until hello; afterwards, a message
 * begun and not finished has frame-timeout from its last byte, while the
 * connection is read. */
static void timer_update(cube__conn *c)
{
        const cube__options *o = &c->server->opts;

        if (c->handles_open < 2 || c->closing || c->close_after_write)
                return;
        if (!c->session->greeted) {
                if (!uv_is_active((uv_handle_t *) &c->timer) && o->hello_timeout_s)
                        uv_timer_start(&c->timer, on_timeout, (uint64_t) o->hello_timeout_s * 1000, 0);
                return;
        }
        if (o->frame_timeout_s && reading(c) && (c->rb.len > c->rb.pos || c->direct.left))
                uv_timer_start(&c->timer, on_timeout, (uint64_t) o->frame_timeout_s * 1000, 0);
        else
                uv_timer_stop(&c->timer);
}

/* Decodes one whole message, pre-scanned, and dispatches it. It is decoded
 * into the server's zone, cleared after each (a zone per message costs a
 * large allocation and free each time); a dispatch that resumes another
 * connection has that one decode into a zone of its own. Returns false when
 * the message could not be decoded. */
static bool decode_dispatch(cube__conn *c, const uint8_t *msg, size_t mlen,
                            cube__dispatched *ret_dispatched)
{
        cube__server *srv = c->server;
        msgpack_zone *zone = srv->zone_busy ? msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE) : srv->zone;
        bool shared = zone == srv->zone, decoded;
        msgpack_object obj;
        size_t off = 0;

        if (!zone)
                return false;
        srv->zone_busy |= shared;
        decoded = msgpack_unpack((const char *) msg, mlen, &off, zone, &obj) ==
                  MSGPACK_UNPACK_SUCCESS && off == mlen;
        if (decoded)
                *ret_dispatched = cube__dispatch(c, &obj, c->rb.p);
        if (shared) {
                msgpack_zone_clear(zone);
                srv->zone_busy = false;
        } else {
                msgpack_zone_free(zone);
        }
        return decoded;
}

/* Decodes and dispatches every whole message buffered. */
static void process_buffered(cube__conn *c)
{
        const cube__limits *lim = &c->server->opts.limits;
        cube__rbuf *b = &c->rb;

        while (!c->closing && !c->close_after_write && !c->paused && b->len > b->pos) {
                const uint8_t *msg = b->p + b->pos;

                if (over_limits(c)) {
                        /* Backpressure: what the session sends waits in its
                         * socket until its work drains. */
                        c->throttled = true;
                        uv_read_stop((uv_stream_t *) &c->pipe);
                        timer_update(c);
                        return;
                }
                size_t avail = b->len - b->pos, mlen = 0;
                cube__dispatched d;
                cube__scan scan;

                if (avail < b->need)
                        return;
                /* A launch of the plain form is read where it lies. */
                if (cube__dispatch_launch(c, msg, avail, b->p, &mlen, &d)) {
                        b->need = 0;
                        goto dispatched;
                }
                scan = cube__prescan(msg, avail, lim, &mlen);
                if (scan == CUBE__SCAN_INCOMPLETE) {
                        if (cube__direct_begin(c->session, msg, avail, mlen, &c->direct)) {
                                /* The rest of the message is read into its target. */
                                b->need = 0;
                                cube__rbuf_consume(b, avail);
                                return;
                        }
                        b->need = mlen;
                        return;
                }
                b->need = 0;
                if (scan != CUBE__SCAN_COMPLETE) {
                        cube__conn_protocol_error(c, peek_msgid(msg, avail), "%s",
                                                  cube__scan_describe(scan));
                        return;
                }

                if (!decode_dispatch(c, msg, mlen, &d)) {
                        cube__conn_protocol_error(c, peek_msgid(msg, avail),
                                                  "the message could not be decoded");
                        return;
                }
dispatched:
                c->redispatching = false;
                if (d == CUBE__DISPATCH_PAUSED)
                        return;         /* the same message goes again on resume */
                if (d == CUBE__DISPATCH_DONE) {
                        cube__rbuf_consume(b, mlen);
                        continue;
                }
                /* The buffer now belongs to a write in flight: carry the
                 * bytes after this message over to a fresh one. */
                size_t rest = avail - mlen;
                cube__rbuf fresh = {0};
                if (cube__rbuf_reserve(&fresh, rest > READ_CHUNK ? rest : READ_CHUNK) < 0) {
                        *b = (cube__rbuf) {0};
                        cube__conn_close(c);
                        return;
                }
                memcpy(fresh.p, msg + mlen, rest);
                fresh.len = rest;
                *b = fresh;
        }
}

/* The work of everything one read brought goes to the device together. */
static void process(cube__conn *c)
{
        cube__server *srv = c->server;

        cube__schedule_plug(srv);
        process_buffered(c);
        cube__schedule_unplug(srv);
        if (!c->closing) {
                rx_check(c);
                timer_update(c);
        }
        rx_wake(srv);
}

bool cube__conn_wait_for(cube__conn *c, cube__kernel *k)
{
        cube__kernel_waiter w = { cube__conn_resume, c };

        if (!cube__kernel_prepare(k, &w))
                return false;
        c->paused = true;
        c->waiting_on = k;
        uv_read_stop((uv_stream_t *) &c->pipe);
        timer_update(c);
        return true;
}

void cube__conn_hold(cube__conn *c)
{
        c->paused = true;
        uv_read_stop((uv_stream_t *) &c->pipe);
}

void cube__conn_resume(void *conn)
{
        cube__conn *c = conn;

        if (!c->paused)
                return;
        c->paused = false;
        c->waiting_on = NULL;
        c->redispatching = true;
        process(c);
        c->redispatching = false;
        if (reading(c))
                uv_read_start((uv_stream_t *) &c->pipe, on_alloc, on_read);
        timer_update(c);
}

void cube__conn_unthrottle(cube__conn *c)
{
        const cube__options *o;

        if (!c || c->closing)
                return;
        if (c->rx_blocked)
                rx_wake(c->server);
        if (!c->throttled)
                return;
        o = &c->server->opts;
        /* Resume at half the limits, so a session is not woken per reply. */
        if (c->session->inflight > o->max_requests / 2 ||
            c->session->queued_bytes + c->out_bytes > o->max_queued_bytes / 2)
                return;
        c->throttled = false;
        process(c);
        if (reading(c))
                uv_read_start((uv_stream_t *) &c->pipe, on_alloc, on_read);
        timer_update(c);
}

bool cube__conn_redispatching(const cube__conn *c)
{
        return c->redispatching;
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *b)
{
        cube__conn *c = stream->data;

        if (nread < 0) {
                if (nread != UV_EOF)
                        cube__log_session(CUBE__LOG_INFO, c->session, 0, "session %" PRIu64 ": read failed: %s",
                                  c->session->id, uv_strerror((int) nread));
                cube__conn_close(c);
                return;
        }
        /* The protocol never has a client send a descriptor: one that does
         * breaks it. What it sent is closed off the loop (see closer.c). */
        int passed = 0;
        while (uv_pipe_pending_count(&c->pipe) > 0) {
                uv_pipe_t *h = malloc(sizeof(*h));
                uv_os_fd_t fd;
                int keep = -1;
                if (!h)
                        break;
                uv_pipe_init(c->server->loop, h, 0);
                if (uv_accept((uv_stream_t *) &c->pipe, (uv_stream_t *) h) < 0) {
                        free(h);
                        break;
                }
                if (uv_fileno((uv_handle_t *) h, &fd) == 0) {
                        struct linger now = { .l_onoff = 1, .l_linger = 0 };
                        (void) setsockopt(fd, SOL_SOCKET, SO_LINGER, &now, sizeof(now));
                        keep = cube__close_keep(fd);
                }
                uv_close((uv_handle_t *) h, (uv_close_cb) free);
                cube__close_received(keep);
                passed++;
        }
        if (passed) {
                cube__conn_protocol_error(c, -1, "the client sent %d descriptor(s); the protocol "
                                          "never has a client send one", passed);
                return;
        }
        c->session->bytes_in += (uint64_t) nread;
        if (nread > 0)
                cube__linger_heard(c->server, &c->linger);
        if (c->direct.left) {
                cube__direct_advance(&c->direct, (size_t) nread);
                return;
        }
        c->rb.len += (size_t) nread;
        process(c);
}

static void conn_start(cube__conn *c);

void cube__on_connection(uv_stream_t *listener, int status)
{
        cube__server *srv = listener->data;
        cube__conn *c;
        struct ucred cred = {0};
        socklen_t cred_len = sizeof(cred);
        uv_os_fd_t fd;

        if (status == UV_EMFILE || status == UV_ENFILE) {
                cube__log(CUBE__LOG_ERR, "a connection was refused unanswered: out of descriptors "
                          "(%s; %u connections, RLIMIT_NOFILE %" PRIu64 ")", uv_strerror(status),
                          srv->n_conns, srv->fd_limit);
                return;
        }
        if (status < 0) {
                cube__log(CUBE__LOG_WARNING, "accept failed: %s", uv_strerror(status));
                return;
        }
        c = calloc(1, sizeof(*c));
        if (!c)
                return;
        c->server = srv;
        srv->n_conns++;
        /* ipc: staging regions travel as descriptors (SCM_RIGHTS). */
        uv_pipe_init(srv->loop, &c->pipe, 1);
        c->pipe.data = c;
        uv_timer_init(srv->loop, &c->timer);
        c->timer.data = c;
        c->handles_open = 2;
        c->next = srv->conns;
        if (srv->conns)
                srv->conns->prev = c;
        srv->conns = c;
        if (uv_accept(listener, (uv_stream_t *) &c->pipe) < 0) {
                c->closing = true;
                uv_close((uv_handle_t *) &c->pipe, on_closed);
                uv_close((uv_handle_t *) &c->timer, on_closed);
                return;
        }
        if (uv_fileno((uv_handle_t *) &c->pipe, &fd) == 0) {
                (void) getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cred_len);
                (void) cube__peer_groups(fd, &c->groups, &c->n_groups);
        }
        c->cred = cred;
        cube__linger_accept(&c->linger, cred.pid);
        if (srv->stopping) {
                cube__conn_close(c);
                return;
        }
        if (srv->reinit_pending) {
                /* The device is being brought up again: this client is served
                 * by the new one, once it is up. */
                c->held = true;
                return;
        }
        conn_start(c);
}

/* Opens the connection's session and starts reading its messages, unless
 * the peer may not connect or a session quota is full: then it is told why
 * and closed. */
static void conn_start(cube__conn *c)
{
        cube__server *srv = c->server;
        char why[256];
        bool refused;

        c->held = false;
        refused = cube__access_refused(&srv->opts, &c->cred, c->groups, c->n_groups, why, sizeof(why)) ||
                  cube__session_quota_full(&srv->opts, &srv->users, srv->n_sessions, c->cred.uid, why, sizeof(why));
        /* The last descriptors are root's and the daemon's user's. */
        if (!refused && !cube__uid_is_admin(c->cred.uid) &&
            (uint64_t) srv->n_conns + srv->fd_base + CUBE__ADMIN_FDS + CUBE__SPARE_FDS / 2 >= srv->fd_limit) {
                snprintf(why, sizeof(why), "the daemon is short of descriptors (%u connections, "
                         "RLIMIT_NOFILE %" PRIu64 "); the last ones are kept for root and the "
                         "daemon's user; try again once sessions have ended",
                         srv->n_conns, srv->fd_limit);
                refused = true;
        }
        c->session = cube__session_new(srv, c, c->cred.pid, c->cred.uid, c->cred.gid);
        if (!c->session) {
                cube__conn_close(c);
                return;
        }
        c->session->admin_only = srv->draining;
        uv_read_start((uv_stream_t *) &c->pipe, on_alloc, on_read);
        if (refused) {
                srv->stats.sessions_refused++;
                c->refused = true;
                cube__conn_protocol_error(c, -1, "%s", why);
        } else {
                srv->stats.sessions_opened++;
                timer_update(c);
        }
}

void cube__conn_start_held(cube__server *srv)
{
        for (cube__conn *c = srv->conns; c; c = c->next)
                if (c->held && !c->closing)
                        conn_start(c);
}

bool cube__conn_any_active(const cube__server *srv)
{
        for (const cube__conn *c = srv->conns; c; c = c->next)
                if (!c->held)
                        return true;
        return false;
}

/* Whether a daemon answers on path: tells a live socket from a stale file. */
/* Whether a daemon answers on path; if so, who it is (pid 0 when unknown). */
static bool socket_is_live(const char *path, struct ucred *ret_owner)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        socklen_t len = sizeof(*ret_owner);
        bool live;

        *ret_owner = (struct ucred) {0};
        if (fd < 0)
                return false;
        strncpy(sa.sun_path, path, sizeof(sa.sun_path) - 1);
        live = connect(fd, (struct sockaddr *) &sa, sizeof(sa)) == 0;
        if (live && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, ret_owner, &len) < 0)
                *ret_owner = (struct ucred) {0};
        if (!live)
                live = errno != ECONNREFUSED;
        close(fd);
        return live;
}

/* Refuses a socket directory that anyone but its owner may write, or that
 * someone other than this user or root owns: whoever may write there can
 * replace the live socket with one of their own, and so read every client's
 * hello and kernels, or swap the new socket for a symlink before its group
 * is set. The sticky bit does not help: the attacker's own socket is theirs
 * to rename. */
static int check_socket_dir(const char *path)
{
        char dir[sizeof(((struct sockaddr_un *) 0)->sun_path)];
        const char *slash = strrchr(path, '/');
        struct stat st;

        if (!slash)
                snprintf(dir, sizeof(dir), ".");
        else if (slash == path)
                snprintf(dir, sizeof(dir), "/");
        else
                snprintf(dir, sizeof(dir), "%.*s", (int) (slash - path), path);
        if (stat(dir, &st) < 0) {
                cube__log(CUBE__LOG_ERR, "cannot use the socket directory %s: %s", dir,
                          strerror(errno));
                return -errno;
        }
        if ((st.st_mode & 022) || (st.st_uid != geteuid() && st.st_uid != 0)) {
                cube__log(CUBE__LOG_ERR, "the socket directory %s (mode %04o, owner uid %u) may "
                          "be written by another user, who could put a socket of their own in "
                          "cubed's place; bind in a directory only this user or root can write, "
                          "such as /run/cube", dir, (unsigned) (st.st_mode & 07777),
                          (unsigned) st.st_uid);
                return -EPERM;
        }
        return 0;
}

int cube__listen(cube__server *srv, const char *path)
{
        struct sockaddr_un sa;
        struct stat st;
        mode_t old_mask;
        int r;

        if (strlen(path) >= sizeof(sa.sun_path)) {
                cube__log(CUBE__LOG_ERR, "socket path %s is %zu bytes long; a Unix socket path "
                          "holds at most %zu", path, strlen(path), sizeof(sa.sun_path) - 1);
                return -ENAMETOOLONG;
        }
        if ((r = check_socket_dir(path)) < 0)
                return r;
        if (lstat(path, &st) == 0) {
                struct ucred owner;

                if (!S_ISSOCK(st.st_mode)) {
                        cube__log(CUBE__LOG_ERR, "%s exists and is not a socket; refusing to "
                                  "replace it", path);
                        return -EEXIST;
                }
                if (socket_is_live(path, &owner)) {
                        if (owner.pid)
                                cube__log(CUBE__LOG_ERR, "%s is served by pid %d (uid %u); stop "
                                          "it first or choose another --socket", path,
                                          (int) owner.pid, (unsigned) owner.uid);
                        else
                                cube__log(CUBE__LOG_ERR, "%s (a socket of uid %u) is in use; stop "
                                          "what serves it first or choose another --socket",
                                          path, (unsigned) st.st_uid);
                        return -EADDRINUSE;
                }
                cube__log(CUBE__LOG_NOTICE, "replacing stale socket %s", path);
                if (unlink(path) < 0 && errno != ENOENT) {
                        cube__log(CUBE__LOG_ERR, "cannot remove stale socket %s: %s", path,
                                  strerror(errno));
                        return -errno;
                }
        }

        uv_pipe_init(srv->loop, &srv->listener, 0);
        srv->listener.data = srv;
        old_mask = umask(0117);         /* the socket is created 0660 */
        r = uv_pipe_bind(&srv->listener, path);
        umask(old_mask);
        if (r < 0) {
                cube__log(CUBE__LOG_ERR, "cannot bind %s: %s", path, uv_strerror(r));
                uv_close((uv_handle_t *) &srv->listener, NULL);
                return r;
        }
        if (srv->opts.socket_group && (r = cube__socket_set_group(path, srv->opts.socket_group)) < 0) {
                uv_close((uv_handle_t *) &srv->listener, NULL);
                unlink(path);
                return r;
        }
        r = uv_listen((uv_stream_t *) &srv->listener, 128, cube__on_connection);
        if (r < 0) {
                cube__log(CUBE__LOG_ERR, "cannot listen on %s: %s", path, uv_strerror(r));
                uv_close((uv_handle_t *) &srv->listener, NULL);
                unlink(path);
                return r;
        }
        srv->listening = true;
        return 0;
}

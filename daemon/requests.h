/*
 * requests.h - the daemon's top layer: connections, dispatch, the admin
 * methods, sessions and the server's life.
 *
 * Everything here may call down into the work (cubed.h) and the services
 * below it (services.h); the work reaches up only through the upcalls this
 * layer gives it (cube__upcalls, filled in server.c).
 */
#ifndef CUBE_REQUESTS_H
#define CUBE_REQUESTS_H

#include "cubed.h"

/* ---- sessions (session.c) ----------------------------------------------- */
cube__session *cube__session_new(cube__server *srv, cube__conn *conn, pid_t pid, uid_t uid,
                                 gid_t gid);
/* The connection is gone: the session ends once its work completes. */
void cube__session_detach(cube__session *s);
/* Frees the session if it is detached and idle. */
void cube__session_maybe_free(cube__session *s);

/* ---- writes received straight into device memory (direct.c) ------------ */
/* An inline write whose payload is being read into its target. */
typedef struct cube__direct {
        cube__alloc *alloc;             /* NULL: none in progress */
        struct cube__op *scope;         /* a target others can see: the write's place in
                                         * its order (cube__scoped_write_begin) */
        char *dst;                      /* where the next payload byte goes */
        uint64_t left;                  /* payload bytes still to come */
} cube__direct;

/* Whether the message of mlen bytes, of which avail are buffered at msg, is
 * an inline write that may be received into its target; if so, takes the
 * payload bytes already buffered and fills *ret, and every byte of the
 * message buffered so far is consumed. */
bool cube__direct_begin(cube__session *s, const uint8_t *msg, size_t avail, size_t mlen,
                        cube__direct *ret);
/* n more payload bytes were read to d->dst. The write ends with its last. */
void cube__direct_advance(cube__direct *d, size_t n);
/* Ends it, done or abandoned (the connection closed mid-payload). */
void cube__direct_end(cube__direct *d);

/* ---- polling for the next request (linger.c) --------------------------- */
/* One connection's part. */
typedef struct cube__linger {
        bool apart;                     /* the client's CPUs are none of the daemon's */
        uint64_t answered_ns;           /* uv_hrtime() of the last answer not yet followed
                                         * by a request; 0: none */
        uint64_t expect_ns;             /* the gap from answer to request, lately */
} cube__linger;

void cube__linger_init(cube__server *srv);
void cube__linger_close(cube__server *srv);
/* A connection from pid was accepted. */
void cube__linger_accept(cube__linger *ret, pid_t pid);
/* Answers were written to the connection: the loop may poll for its next. */
void cube__linger_answered(cube__server *srv, cube__linger *l);
/* The connection sent something. */
void cube__linger_heard(cube__server *srv, cube__linger *l);

/* ---- connections (conn.c) ----------------------------------------------- */
/* Sends a frame the caller allocated with malloc; takes ownership. */
void cube__conn_send(cube__conn *c, char *frame, size_t len);
/* The same, with a descriptor sent along (taken, closed once sent), or -1. */
void cube__conn_send_fd(cube__conn *c, char *frame, size_t len, int fd);
/* Sends an answer of at most CUBE__SMALL_ANSWER bytes, which the caller
 * keeps. It is held until the loop has dispatched everything this round of
 * I/O brought, then written with the others (see conn.c). */
void cube__conn_send_small(cube__conn *c, const char *bytes, size_t len);
/* Starts and stops the loop handles that send held answers. */
void cube__conn_answers_init(cube__server *srv);
void cube__conn_answers_close(cube__server *srv);
/* Answers a protocol violation, where a reply can be framed, and closes. */
void cube__conn_protocol_error(cube__conn *c, int64_t msgid, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
void cube__conn_close(cube__conn *c);
cube__session *cube__conn_session(cube__conn *c);
void cube__conn_close_all(cube__server *srv);
/* Stops taking messages from c until kernel k is ready or failed (it is
 * being compiled): what c sends meanwhile waits, in order, in the socket.
 * Returns false when k needs no waiting. */
bool cube__conn_wait_for(cube__conn *c, cube__kernel *k);
/* Stops taking messages from c until cube__conn_resume. */
void cube__conn_hold(cube__conn *c);
void cube__conn_resume(void *conn);
/* Takes messages again once the session is under half its quotas. */
void cube__conn_unthrottle(cube__conn *c);
/* Whether the message being dispatched is one dispatched again on resume. */
bool cube__conn_redispatching(const cube__conn *c);
int cube__listen(cube__server *srv, const char *path);
void cube__on_connection(uv_stream_t *listener, int status);
/* Connections accepted while the device was re-initialised start now. */
void cube__conn_start_held(cube__server *srv);
/* Whether any connection is served (held ones are not). */
bool cube__conn_any_active(const cube__server *srv);

/* ---- dispatch (dispatch.c) ---------------------------------------------- */
/* Handles one decoded message. buf is the read buffer the message lives in,
 * which the dispatcher may keep when a write's payload is large. */
cube__dispatched cube__dispatch(cube__conn *c, const msgpack_object *msg, void *buf);
/* Handles a launch of the plain form at the start of the avail bytes
 * buffered, neither pre-scanned nor decoded, *ret_len its length: false,
 * having done nothing, for any other message, or a launch longer than the
 * limits let pass unscanned; that one takes the pre-scan, and
 * cube__dispatch handles it once decoded. */
bool cube__dispatch_launch(cube__conn *c, const uint8_t *msg, size_t avail, void *buf,
                           size_t *ret_len, cube__dispatched *ret_dispatched);

/* ---- the admin methods (admin.c) ---------------------------------------- */
cube__dispatched cube__do_status(cube__msg *k);
cube__dispatched cube__do_kernels(cube__msg *k);
cube__dispatched cube__do_kernel_cache(cube__msg *k);
cube__dispatched cube__do_config(cube__msg *k);
cube__dispatched cube__do_bans(cube__msg *k);
cube__dispatched cube__do_ended_sessions(cube__msg *k);
cube__dispatched cube__do_recent_failures(cube__msg *k);
cube__dispatched cube__do_failures(cube__msg *k);
cube__dispatched cube__do_sessions(cube__msg *k);
cube__dispatched cube__do_streams(cube__msg *k);
cube__dispatched cube__do_memory(cube__msg *k);
cube__dispatched cube__do_metrics(cube__msg *k);
cube__dispatched cube__do_drain(cube__msg *k);
cube__dispatched cube__do_undrain(cube__msg *k);
cube__dispatched cube__do_kill_session(cube__msg *k);

/* ---- the server (server.c) ---------------------------------------------- */
/* Descriptors kept for root and the daemon's own user: others' connections
 * are refused before they would take these, so an operator can always get in. */
#define CUBE__ADMIN_FDS 32
/* Descriptors beyond one a session kept for the rest: regions being sent,
 * compiles, the cache, the device. */
#define CUBE__SPARE_FDS 64
/* Whether max-sessions fits the descriptor limit, lowering the default to
 * fit; why says what to change. */
bool cube__fds_fit(const cube__server *srv, cube__options *o, char *why, size_t len);

/* ---- the server's life (server.c) --------------------------------------- */
/* Takes opts; keeps overrides (the command line's options) for reloads. */
int cube__server_init(cube__server *srv, cube__options *opts, char *const *overrides,
                      size_t n_overrides);
int cube__server_run(cube__server *srv);
void cube__server_stop(cube__server *srv);
/* Takes no new work: sessions opened from now on may only look and act
 * (cubectl); stops once the last working session has ended, or, past
 * timeout_s (0: none), closes them. by is who asked (NULL: a signal). */
void cube__server_drain(cube__server *srv, uint32_t timeout_s, cube__session *by);
/* Ends a drain: new sessions work again. */
void cube__server_undrain(cube__server *srv, cube__session *by);
void cube__server_done(cube__server *srv);
/* Called whenever a session or work ends, to finish a shutdown or a reinit. */
void cube__server_check_stopped(cube__server *srv);
/* The device was just poisoned: start the poison policy's clock. */
void cube__server_poison_started(cube__server *srv);
/* Session s has been told the device is poisoned. */
void cube__server_poison_told(cube__server *srv, cube__session *s);

#endif

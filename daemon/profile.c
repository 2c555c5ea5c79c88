/*
 * profile.c - profiling windows: start_profile, start_profile_at_launch,
 * end_profile and abandon_profile.
 *
 * A window is a span of one stream's order: every piece of work queued on
 * the stream between its start and its end. Its answer is the device time of
 * exactly that work, summed from the timestamps the backend takes where the
 * device runs it (driver.h), never the host's clock around the calls: a
 * window holding a host sleep between two short launches measures the two
 * launches. Windows nest and overlap freely, each under its own token,
 * because each is only a pair of places in the order; a piece of work counts
 * toward every window that holds it.
 *
 * A window in which nothing timed ran answers NotMeasured, not zero: a zero
 * would be the fastest result there is, and an autotuner comparing
 * candidates would pick the one that measured nothing. A failure of work
 * inside the window, known when it is queued (refused, skipped) or when it
 * completes, invalidates it: end_profile answers ProfileError::Launch for a
 * launch error and ProfileError::Server for anything else, as the
 * reference's From impls do.
 *
 * end_profile answers once the stream has run everything the window holds
 * (a fence behind it); abandon_profile forgets the window at once, with no
 * fence and no wait: work still in flight simply finds it gone.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "cubed.h"

#define UNSET UINT64_MAX

typedef struct cube__window {
        uint64_t token;
        cube__session *session;
        cube__stream *stream;
        uint64_t first;                 /* the first seq it holds; UNSET: opens at the next launch */
        uint64_t last;                  /* the first seq it does not hold; UNSET while open */
        bool at_launch;
        bool ending;                    /* end_profile was asked: a fence will answer it */
        uint64_t device_ns;
        uint64_t timed;                 /* pieces of work that brought timestamps */
        cube_error *error;              /* the ProfileError it answers instead */
        uint32_t msgid;
        struct cube__window *next;      /* on its stream */
} cube__window;

static void unlink_window(cube__window *w)
{
        for (cube__window **p = &w->stream->windows; *p; p = &(*p)->next)
                if (*p == w) {
                        *p = w->next;
                        break;
                }
}

static void window_free(cube__window *w)
{
        if (!w)
                return;
        cube_error_free(w->error);
        free(w);
}

/* ProfileError::Launch for a launch error, ProfileError::Server for the rest. */
static cube_error *profile_error(const cube_error *e)
{
        if (cube_error_kind_of(e) == CUBE_SERVER_LAUNCH && cube_error_source(e))
                return cube__err_wrap(CUBE_PROFILE_LAUNCH, cube_error_clone(cube_error_source(e)));
        return cube__err_wrap(CUBE_PROFILE_SERVER, cube_error_clone(e));
}

static void invalidate(cube__window *w, const cube_error *e)
{
        if (!w->error)
                w->error = profile_error(e);
}

void cube__stream_failed(cube__session *s, uint64_t stream, const cube_error *e)
{
        cube__stream *st = cube__idmap_get(&s->streams, stream);

        if (!st || !e)
                return;
        /* The failing work would have been queued now: every window still
         * open holds it, an at-launch window included (it was the launch). */
        for (cube__window *w = st->windows; w; w = w->next)
                if (w->last == UNSET)
                        invalidate(w, e);
        cube__capture_doom(st, e);
}

void cube__profile_launch_queued(cube__stream *st, uint64_t seq)
{
        for (cube__window *w = st->windows; w; w = w->next)
                if (w->first == UNSET && w->last == UNSET)
                        w->first = seq;
}

static bool holds(const cube__window *w, uint64_t seq)
{
        return w->first != UNSET && seq >= w->first && (w->last == UNSET || seq < w->last);
}

void cube__profile_work_done(cube__stream *st, uint64_t seq, const cube__work *w,
                             uint64_t failure)
{
        cube__failures *fs = &st->session->server->failures;
        cube_error *root = NULL;

        for (cube__window *win = st->windows; win; win = win->next) {
                if (!holds(win, seq))
                        continue;
                if (w->start_ns && w->end_ns >= w->start_ns) {
                        win->device_ns += w->end_ns - w->start_ns;
                        win->timed++;
                }
                if (failure && !win->error) {
                        /* The report's root is what the work failed with. */
                        if (!root)
                                root = cube__failures_report(fs, failure, 0);
                        if (root && cube_error_source(root))
                                invalidate(win, cube_error_source(root));
                }
        }
        cube_error_free(root);
}

/* The answer a finished window owes: its duration, or why it has none. */
static void answer(cube__window *w, cube_error *barrier)
{
        cube__session *s = w->session;
        cube_error *e = NULL;

        if (barrier)
                e = profile_error(barrier);
        else if (w->error)
                e = cube_error_clone(w->error);
        else if (w->timed == 0)
                e = cube__err_new(CUBE_PROFILE_NOT_MEASURED);
        if (e || !s->conn) {
                if (s->conn)
                        cube__reply_error(s, w->msgid, e);
                cube_error_free(e);
                return;
        }
        msgpack_sbuffer sb;
        msgpack_packer pk;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (cube__pack_response_ok(&pk, w->msgid) == 0 && msgpack_pack_map(&pk, 2) == 0 &&
            cube__pack_kv_u64(&pk, "device_ns", w->device_ns) == 0 &&
            cube__pack_kv_u64(&pk, "timed", w->timed) == 0)
                cube__reply_sbuffer(s, &sb);
        msgpack_sbuffer_destroy(&sb);
}

/* The fence behind the window's work completed: everything it holds ran. */
static void window_fenced(cube__session *s, void *ctx, cube_error *e)
{
        cube__window *w = ctx;

        unlink_window(w);
        cube__idmap_remove(&s->windows, w->token);
        answer(w, e);
        cube_error_free(e);
        window_free(w);
}

static cube__dispatched start(cube__msg *k)
{
        cube__session *s = k->session;
        cube__server *srv = k->server;
        uint64_t stream;
        bool at_launch;
        cube__stream *st;
        cube__window *w;
        cube_error *e = NULL;
        msgpack_sbuffer sb;
        msgpack_packer pk;

        if (k->n != 2 || !cube__obj_u64(&k->p[0], &stream) || !cube__obj_bool(&k->p[1], &at_launch)) {
                cube__reply_malformed(k, "params must be [stream, at_launch]");
                return CUBE__DISPATCH_DONE;
        }
        if (srv->poison)
                e = cube__poisoned(srv);
        else if (!(e = cube__capture_refusal(s, stream, "start_profile")) &&
                 s->windows.len >= srv->opts.max_profile_windows)
                e = cube__err_validation("a session may hold at most %u profiling windows open "
                                         "(max-profile-windows): end or abandon one first",
                                         srv->opts.max_profile_windows);
        if (e || !(st = cube__stream_get(s, stream, &e)) || !(w = calloc(1, sizeof(*w)))) {
                cube__reply_owned_error(k, e);
                return CUBE__DISPATCH_DONE;
        }
        w->token = ++s->next_token;
        w->session = s;
        w->stream = st;
        w->at_launch = at_launch;
        w->first = at_launch ? UNSET : st->seq;
        w->last = UNSET;
        if (cube__idmap_put(&s->windows, w->token, w) < 0) {
                free(w);
                cube__reply_owned_error(k, NULL);
                return CUBE__DISPATCH_DONE;
        }
        w->next = st->windows;
        st->windows = w;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (cube__pack_response_ok(&pk, k->env->msgid) == 0 &&
            msgpack_pack_uint64(&pk, w->token) == 0)
                cube__reply_sbuffer(s, &sb);
        msgpack_sbuffer_destroy(&sb);
        return CUBE__DISPATCH_DONE;
}

/* start_profile: [stream, at_launch] -> token. */
cube__dispatched cube__do_start_profile(cube__msg *k)
{
        return start(k);
}

/* The window token names on stream, or NULL: an unknown token, one ended
 * already, or one of another stream. */
static cube__window *find(cube__session *s, uint64_t stream, uint64_t token)
{
        cube__window *w = cube__idmap_get(&s->windows, token);

        return w && w->stream->id == stream && !w->ending ? w : NULL;
}

/* end_profile: [stream, token] -> {device_ns, timed}, or a ProfileError. */
cube__dispatched cube__do_end_profile(cube__msg *k)
{
        cube__session *s = k->session;
        uint64_t stream, token;
        cube__window *w;
        cube__stream *st;
        cube__pending_reply *r;
        cube__op *o;
        cube_error *e;

        if (k->n != 2 || !cube__obj_u64(&k->p[0], &stream) || !cube__obj_u64(&k->p[1], &token)) {
                cube__reply_malformed(k, "params must be [stream, token]");
                return CUBE__DISPATCH_DONE;
        }
        if ((e = cube__capture_refusal(s, stream, "end_profile"))) {
                /* Refused, not consumed: the window stays open. */
                cube__reply_owned_error(k, cube__err_wrap(CUBE_PROFILE_SERVER, e));
                return CUBE__DISPATCH_DONE;
        }
        if (!(w = find(s, stream, token))) {
                cube__reply_owned_error(k, cube__err_new(CUBE_PROFILE_NOT_REGISTERED));
                return CUBE__DISPATCH_DONE;
        }
        st = w->stream;
        w->ending = true;
        w->last = st->seq;
        w->msgid = k->env->msgid;
        if (w->first == UNSET)
                w->first = w->last;     /* no launch came: it holds nothing */
        if (st->pending == 0 || w->first == w->last) {
                /* Everything it holds has run (or it holds nothing). */
                window_fenced(s, w, k->server->poison ? cube__poisoned(k->server) : NULL);
                return CUBE__DISPATCH_DONE;
        }
        r = cube__pending_new(s, k->env->msgid);
        o = r ? cube__op_new(s, st, CUBE__WORK_FENCE, 0, 0, NULL) : NULL;
        if (!o) {
                if (r) {
                        r->finished = window_fenced;
                        r->ctx = w;
                        r->error = cube__err_generic("out of host memory ending a profile");
                        cube__pending_arm(r);
                } else {
                        window_fenced(s, w, NULL);
                }
                return CUBE__DISPATCH_DONE;
        }
        r->finished = window_fenced;
        r->ctx = w;
        o->reply = r;
        cube__op_enqueue(o);
        cube__pending_arm(r);
        return CUBE__DISPATCH_DONE;
}

/* abandon_profile: [stream, token], a notification. Costs a map lookup: no
 * fence, no wait, nothing sent. */
cube__dispatched cube__do_abandon_profile(cube__msg *k)
{
        cube__session *s = k->session;
        uint64_t stream, token;
        cube__window *w;

        if (k->n != 2 || !cube__obj_u64(&k->p[0], &stream) || !cube__obj_u64(&k->p[1], &token)) {
                cube__reply_malformed(k, "params must be [stream, token]");
                return CUBE__DISPATCH_DONE;
        }
        if (!(w = find(s, stream, token))) {
                cube__log_session(CUBE__LOG_INFO, s, 0, "session %" PRIu64 ": abandon_profile of "
                                  "token %" PRIu64 ", which no open window of stream %" PRIu64
                                  " has", s->id, token, stream);
                s->errors++;
                return CUBE__DISPATCH_DONE;
        }
        unlink_window(w);
        cube__idmap_remove(&s->windows, token);
        window_free(w);
        return CUBE__DISPATCH_DONE;
}

static void free_window(uint64_t key, void *value, void *ctx)
{
        window_free(value);
}

void cube__profile_session_free(cube__session *s)
{
        cube__idmap_foreach(&s->windows, free_window, NULL);
        cube__idmap_free(&s->windows);
        /* The streams' lists named only these. */
}

typedef struct pack_ctx {
        msgpack_packer *pk;
        int r;
} pack_ctx;

static void pack_window(uint64_t key, void *value, void *ctx)
{
        const cube__window *w = value;
        pack_ctx *c = ctx;

        c->r |= cube__pack_capture_entry(c->pk, w->session->id, "window", w->stream->id,
                                         w->token, w->ending ? "ending" : w->first == UNSET ?
                                         "at-launch" : "open", w->timed, 0, 0, 0, w->device_ns);
}

int cube__profile_pack(const cube__session *s, msgpack_packer *pk)
{
        pack_ctx c = { pk, 0 };

        cube__idmap_foreach(&s->windows, pack_window, &c);
        return c.r ? -1 : 0;
}

/*
 * work.c - device work in flight, and the answers that wait for it.
 *
 * The loop thread queues cube__op items (executor.c decides when each goes
 * to the device) and counts them on their session, stream and allocations,
 * so none of those can go away under the device. The backend hands each item
 * back from its own thread, alone or in a batch; the completion queue
 * carries it to the loop thread (an eventfd written only when the queue was
 * empty, so every wakeup drains the whole queue), where the counts drop and
 * any answer whose last piece of work finished is sent.
 */
#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>

#include "cubed.h"

cube_error *cube__poisoned(cube__server *srv)
{
        return cube__err_wrap(CUBE_SERVER_DEVICE_POISONED, cube_error_clone(srv->poison));
}

cube__pending_reply *cube__pending_new(cube__session *s, uint32_t msgid)
{
        cube__pending_reply *r = calloc(1, sizeof(*r));

        if (!r)
                return NULL;
        r->session = s;
        r->msgid = msgid;
        r->outstanding = 1;     /* held until armed */
        s->inflight++;
        s->server->inflight++;
        return r;
}

/* Sends the answer once all its work is done: a prepared frame, the device's
 * error, or the claim check a sync owes after its barrier. */
static void pending_finish(cube__pending_reply *r)
{
        cube__session *s = r->session;
        cube__server *srv = s->server;
        cube_error *e = r->error;

        if (r->frame)
                s->queued_bytes -= r->frame_len;        /* counted from here as it is sent */
        /* The barrier came after a fault: nothing it waited for can be trusted. */
        if (!e && srv->poison)
                e = cube__poisoned(srv);
        if (!e && r->answer) {
                e = r->answer;
                r->answer = NULL;
        }
        /* Every writer it waited for is done now: a failure of one means the
         * bytes were never written, whatever later work has claimed them. */
        if (!e && r->awaits.n)
                e = cube__awaits_report(&srv->failures, &r->awaits);
        if (r->finished) {
                r->finished(s, r->ctx, e);
        } else if (e) {
                cube__reply_error(s, r->msgid, e);
        } else if (r->frame) {
                if (s->conn) {
                        s->bytes_out += r->frame_len;
                        srv->up->send(s->conn, r->frame, r->frame_len, -1);
                        r->frame = NULL;
                }
        } else {
                msgpack_sbuffer sb;
                msgpack_packer pk;
                msgpack_sbuffer_init(&sb);
                msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
                if (cube__pack_response_ok(&pk, r->msgid) == 0 && msgpack_pack_nil(&pk) == 0)
                        cube__reply_sbuffer(s, &sb);
                msgpack_sbuffer_destroy(&sb);
        }
        if (e && !r->finished)
                cube_error_free(e);
        free(r->frame);
        cube_error_free(r->answer);
        cube__awaits_release(&srv->failures, &r->awaits);
        free(r);
        s->inflight--;
        srv->inflight--;
        if (s->conn)
                srv->up->unthrottle(s->conn);
        srv->up->session_idle(s);
        srv->up->check_stopped(srv);
}

static void pending_put(cube__pending_reply *r)
{
        if (--r->outstanding == 0)
                pending_finish(r);
}

void cube__pending_arm(cube__pending_reply *r)
{
        pending_put(r);
}

void cube__submit(cube__session *s, cube__stream *st, cube__alloc *a, cube__work_op op,
                  uint64_t offset, void *host, uint64_t len, void *owned,
                  cube__pending_reply *reply)
{
        cube__copy copy = { .rows = 1, .width = len, .pitch = len };

        cube__submit_copy(s, st, a, op, offset, host, &copy, owned, reply, NULL);
}

/* A write that never reached the device: its failure lands on its bytes. */
static void lost_write(cube__session *s, cube__alloc *a, uint64_t start, uint64_t end,
                       cube_error *e)
{
        cube__failures *fs = &s->server->failures;
        uint64_t failure = cube__failures_insert(fs, e, s->id, s->uid);

        s->errors++;
        cube__alloc_taint(a, start, end, failure);
        cube__failures_prune(fs, failure);
}

void cube__submit_copy(cube__session *s, cube__stream *st, cube__alloc *a, cube__work_op op,
                       uint64_t offset, void *host, const cube__copy *copy, void *owned,
                       cube__pending_reply *reply, cube__region *region)
{
        uint64_t len = copy->rows * copy->width;
        cube__server *srv = s->server;
        cube__op *o = cube__op_new(s, st, op, a ? 1 : 0, 0, NULL);

        if (!o || (op == CUBE__WORK_COPY_TO_DEVICE && a && !(o->writer = cube__writer_new()))) {
                /* Nothing was queued: the work's target must not read as written. */
                cube_error *e = cube__err_generic("out of host memory queueing device work");
                if (reply && !reply->error)
                        reply->error = e;
                else if (a && op == CUBE__WORK_COPY_TO_DEVICE)
                        lost_write(s, a, offset, offset + copy->rows * copy->width, e);
                else
                        cube_error_free(e);
                free(o);
                free(owned);
                return;
        }
        o->work.storage = a ? a->storage : NULL;
        o->work.offset = (a ? a->base : 0) + offset;
        o->work.host = host;
        o->work.len = copy->width;
        o->work.rows = copy->rows;
        o->work.pitch = copy->pitch;
        if (region) {
                o->region = region;
                region->pending++;
        }
        o->alloc = a;
        o->start = offset;
        o->end = offset + (copy->rows ? (copy->rows - 1) * copy->pitch + copy->width : 0);
        o->reply = reply;
        o->owned = owned;
        if (owned && op == CUBE__WORK_COPY_TO_DEVICE) {
                o->held_bytes = len;
                s->queued_bytes += len;
        }
        if (a)
                cube__op_use(o, a, op == CUBE__WORK_COPY_TO_DEVICE);
        /* Queued: the bytes are this write's now, whatever it ends with. */
        if (o->writer)
                cube__claims_pending(&srv->failures, &a->claims, o->start, o->end, o->writer);
        if (op != CUBE__WORK_FENCE && (o->work.error = cube__inject_take(srv, CUBE_FAULT_COPY)))
                o->work.op = CUBE__WORK_FENCE;  /* fails in stream order, copying nothing */
        cube__op_enqueue(o);
}

/* Where a scoped write stands: the executor reached it (ran), and the
 * payload stopped arriving (ended); it completes once both hold. */
typedef struct scoped_write {
        bool ran, ended;
} scoped_write;

static void scoped_write_run(cube__op *o)
{
        scoped_write *w = o->owned;

        w->ran = true;
        if (w->ended)
                cube__work_complete(o->session->server, &o->work);
}

cube__op *cube__scoped_write_begin(cube__session *s, cube__stream *st, cube__alloc *a,
                                   uint64_t start, uint64_t end)
{
        cube__server *srv = s->server;
        cube__op *o = cube__op_new(s, st, CUBE__WORK_FENCE, 1, 0, NULL);

        if (!o || !(o->owned = calloc(1, sizeof(scoped_write))) ||
            !(o->writer = cube__writer_new())) {
                if (o)
                        free(o->owned);
                free(o);
                return NULL;
        }
        o->alloc = a;
        o->start = start;
        o->end = end;
        o->host_run = scoped_write_run;
        cube__op_use(o, a, true);
        cube__claims_pending(&srv->failures, &a->claims, start, end, o->writer);
        cube__op_enqueue(o);
        return o;
}

void cube__scoped_write_end(cube__op *o, bool whole)
{
        scoped_write *w = o->owned;

        /* The scope never reached its exit: what it was to write carries
         * the provisional error every scope enters with. */
        if (!whole)
                o->work.error = cube__err_new(CUBE_SERVER_TORN_DOWN);
        w->ended = true;
        if (w->ran)
                cube__work_complete(o->session->server, &o->work);
}

void cube__work_poison(cube__server *srv, cube__session *by, cube_error *poison)
{
        if (srv->poison || !poison) {
                cube_error_free(poison);
                return;
        }
        srv->poison = poison;
        srv->stats.poisons++;
        if (by)
                cube__poison_blame(&srv->opts, &srv->users, cube__session_who(by, &(cube__log_who) {0}));
        cube__log_id(CUBE__MSG_POISON, CUBE__LOG_ERR, by, "the device is poisoned: %s; every "
                     "session is told on its next operation", cube_error_reason(poison));
        srv->up->poison_started(srv);
}

/* A launch that failed on the device: a fault poisons the device. Returns
 * the failure its outputs are to carry. */
static uint64_t launch_failed(cube__op *o)
{
        cube__session *s = o->session;
        cube__server *srv = s->server;
        cube_error *e = o->work.error, *root;
        uint64_t failure;

        o->work.error = NULL;
        /* The backend hands back the bare DevicePoison; an injected fault may
         * wrap it: either way the device is poisoned. */
        const cube_error *fault = e;
        while (fault && cube_error_kind_of(fault) != CUBE_DEVICE_POISON)
                fault = cube_error_source(fault);
        if (fault) {
                cube_error *named = cube__err_poison("session %" PRIu64 " (pid %d%s%s): %s",
                                                     s->id, (int) s->pid, *s->name ? ", " : "",
                                                     s->name, cube_error_reason(fault));
                cube_error_free(e);
                cube__work_poison(srv, s, cube_error_clone(named));
                root = cube__err_wrap(CUBE_SERVER_LAUNCH,
                                      cube__err_wrap(CUBE_LAUNCH_DEVICE_POISONED, named));
        } else {
                root = e;
        }
        s->errors++;
        failure = cube__failures_insert(&srv->failures, root, s->id, s->uid);
        if (failure)
                cube__log_session(CUBE__LOG_WARNING, s, failure, "session %" PRIu64 ": kernel '%s' "
                                  "failed on the device (failure #%" PRIu64 ")", s->id,
                                  o->launch->kernel, failure);
        return failure;
}

/* A launch that ran while a writer of its input was pending, and that writer
 * failed: what it wrote was computed from bytes that were never there, so it
 * claims the same failure, as if it had been skipped when queued. A deferred
 * skip ran nothing, and is recorded as the skip it is. */
static uint64_t ran_stale(cube__op *o)
{
        cube__failures *fs = &o->session->server->failures;
        uint64_t needed = 0, failure, *ids;
        bool pending;

        failure = cube__awaits_first(&o->awaits, &needed, &pending);
        if (!failure)
                return 0;
        if ((ids = calloc(o->n_written + 1, sizeof(*ids)))) {
                for (size_t i = 0; i < o->n_written; i++)
                        ids[i] = o->written[i]->id;
                (o->deferred_skip ? cube__failures_skipped : cube__failures_ran_stale)(
                        fs, failure, o->launch->kernel, needed, ids, o->n_written);
                free(ids);
        }
        return failure;
}

/* A write or launch is done: what it claimed carries its failure, or is
 * plain bytes again. Bytes that later work claimed meanwhile are that work's.
 * A launch that writes nothing has no writer, but its fault still counts. */
static void writer_done(cube__op *o)
{
        cube__session *s = o->session;
        cube__failures *fs = &s->server->failures;
        uint64_t failure = 0;

        if (o->work.error && o->launch) {
                failure = launch_failed(o);
        } else if (o->work.error) {
                s->errors++;
                failure = cube__failures_insert(fs, o->work.error, s->id, s->uid);
                o->work.error = NULL;
                if (failure)
                        cube__log_session(CUBE__LOG_INFO, s, failure, "session %" PRIu64 ": a "
                                          "write to memory %" PRIu64 " failed on the device "
                                          "(failure #%" PRIu64 ")", s->id, o->alloc->id, failure);
        } else if (o->launch) {
                failure = ran_stale(o);
        }
        if (o->stream->windows)
                cube__profile_work_done(o->stream, o->seq, &o->work, failure);
        if (!o->writer) {
                /* A launch that writes nothing: its failure lands nowhere. */
                cube__failures_prune(fs, failure);
                return;
        }
        cube__writer_finish(fs, o->writer, failure);
        if (o->launch)
                for (size_t i = 0; i < o->n_written; i++)
                        cube__claims_settle(fs, &o->written[i]->claims, o->writer);
        else
                cube__claims_settle(fs, &o->alloc->claims, o->writer);
        cube__writer_unref(fs, o->writer);
        o->writer = NULL;
        if (failure)
                cube__failures_prune(fs, failure);
}

void cube__work_complete(void *ctx, cube__work *work)
{
        cube__server *srv = ctx;
        cube__work *last = work;
        bool first;

        while (last->next)
                last = last->next;
        uv_mutex_lock(&srv->completions_lock);
        first = !srv->completions_head;
        if (srv->completions_tail)
                srv->completions_tail->next = work;
        else
                srv->completions_head = work;
        srv->completions_tail = last;
        uv_mutex_unlock(&srv->completions_lock);
        /* On the loop thread, the loop drains the queue before it next waits
         * (server.c's idle handle): writing the eventfd would only wake the
         * loop once more to find what it already has. */
        if (uv_thread_equal(&srv->loop_thread, &(uv_thread_t) { uv_thread_self() })) {
                cube__work_drain_soon(srv);
                return;
        }
        /* A queue that was not empty has a wake-up on its way already: the
         * loop takes the whole queue at once. */
        if (first) {
                uint64_t one = 1;
                if (write(srv->completions_fd, &one, sizeof(one)) < 0)
                        abort();        /* an eventfd write fails only on overflow */
        }
}

static void op_finish(cube__op *o)
{
        cube__session *s = o->session;
        cube__server *srv = s->server;

        cube__share_done(o);
        if (o->shape_kernel)
                cube__kernel_shape_ran(o->shape_kernel, o->launch->dim,
                                       o->work.end_ns > o->work.start_ns ?
                                       o->work.end_ns - o->work.start_ns : 0);
        if (o->part_of) {
                /* One launch of a replay: the replay, last in its chain,
                 * settles for all of them. */
                cube__replay_part_done(o);
                return;
        }
        if (!o->writer && !o->launch && o->stream->windows)
                cube__profile_work_done(o->stream, o->seq, &o->work, 0);
        /* A copy that met a device fault poisons the device as a launch does. */
        if (o->work.error && !o->launch &&
            cube_error_kind_of(o->work.error) == CUBE_DEVICE_POISON) {
                cube__work_poison(srv, s, cube_error_clone(o->work.error));
                o->work.error = cube__err_wrap(CUBE_SERVER_DEVICE_POISONED, o->work.error);
        }
        if (o->host_done)
                o->host_done(o);
        if (o->writer || o->launch) {
                writer_done(o);
        } else if (o->work.error) {
                if (o->reply && !o->reply->error)
                        o->reply->error = o->work.error;
                else
                        cube_error_free(o->work.error);
        }
        cube__awaits_release(&srv->failures, &o->awaits);
        free(o->owned);
        s->queued_bytes -= o->held_bytes;
        if (o->region)
                cube__region_unref(o->region);
        if (o->graph)
                cube__replay_done(o);
        cube__op_retire(o);
        for (size_t i = 0; i < o->n_uses; i++)
                cube__alloc_unref(o->uses[i].alloc);
        if (o->reply)
                pending_put(o->reply);
        free(o);
        s->inflight--;
        srv->inflight--;
        if (s->conn)
                srv->up->unthrottle(s->conn);
        srv->up->session_idle(s);
        srv->up->check_stopped(srv);
}

/* Completions that work on the loop thread queued: drained before the loop
 * next waits for I/O (an active idle handle keeps it from blocking). */
static void on_local_completions(uv_idle_t *h)
{
        cube__server *srv = h->data;

        uv_idle_stop(h);
        cube__work_drain(srv);
}

void cube__work_drain_soon(cube__server *srv)
{
        if (!uv_is_closing((uv_handle_t *) &srv->local_completions))
                uv_idle_start(&srv->local_completions, on_local_completions);
}

void cube__work_drain(cube__server *srv)
{
        cube__work *w;

        uv_mutex_lock(&srv->completions_lock);
        w = srv->completions_head;
        srv->completions_head = srv->completions_tail = NULL;
        uv_mutex_unlock(&srv->completions_lock);

        /* Room on the device, and work that waited on what finished, once
         * everything that finished is retired. */
        cube__schedule_plug(srv);
        while (w) {
                cube__work *next = w->next;
                op_finish((cube__op *) ((char *) w - offsetof(cube__op, work)));
                w = next;
        }
        cube__schedule(srv);    /* owed in any case: the device has room */
        cube__schedule_unplug(srv);
}

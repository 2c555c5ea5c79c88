/*
 * executor.c - what runs when: stream order, cross-stream order by buffer,
 * and fairness between sessions.
 *
 * Work is queued per stream in the daemon and handed to the device a little
 * at a time. A stream's work runs in the order it was queued. Work of two
 * streams is ordered only where it touches the same allocation: every piece
 * of work is recorded on each allocation it uses, in queue order, and may be
 * submitted only once no earlier work of another stream on those allocations
 * conflicts with it (a write conflicts with anything; two reads do not). So a
 * read on stream B of a buffer written on stream A sees A's write, and
 * independent streams run side by side. A backend that orders streams on
 * the device (driver.orders_streams, CUDA's events) gets the later work as
 * soon as the earlier is submitted, with no round trip through the host.
 *
 * Sharing: the device holds at most DEVICE_WINDOW pieces of work, launches
 * of at most share-queue-us of expected device time (tenants.c), and each
 * stream at most STREAM_WINDOW while another session has work in flight. A
 * session owed the device whose streams hold their windows keeps its turn:
 * the others wait for its work to drain, or shares would follow the windows
 * rather than the weights. When there is room, the executor offers it
 * to the sessions with queued work in the order tenants.c puts them (class,
 * then device time over weight) and submits one piece of work of the first
 * that may go, then asks again. Equal weights give equal device time, so a
 * session that queues 100k launches delays another's next piece of work by
 * about one of its own, plus what the device already holds.
 */
#include <stdint.h>
#include <stdlib.h>

#include "cubed.h"

#define DEVICE_WINDOW 64
#define STREAM_WINDOW 16

/* One allocation holds the op, its uses and extra bytes for the caller
 * (a launch's record): a launch costs one malloc, not a dozen. */
cube__op *cube__op_new(cube__session *s, cube__stream *st, cube__work_op kind, size_t n_uses,
                       size_t extra, void **ret_extra)
{
        size_t head = (sizeof(cube__op) + n_uses * sizeof(cube__use) + 15) & ~(size_t) 15;
        cube__op *o;

        if (extra > SIZE_MAX - head || !(o = calloc(1, head + extra)))
                return NULL;
        o->uses = (cube__use *) (o + 1);
        o->session = s;
        o->stream = st;
        o->work.op = kind;
        if (ret_extra)
                *ret_extra = (char *) o + head;
        return o;
}

void cube__op_use(cube__op *o, cube__alloc *a, bool writes)
{
        cube__use *u = &o->uses[o->n_uses++];

        u->op = o;
        u->alloc = a;
        u->writes = writes;
}

/* Whether o may be submitted: no earlier work of another stream on the
 * allocations it touches conflicts with it. An allocation whose work is all
 * on one stream (o's) is not walked: behind a stream's pipelined launches of
 * one buffer the walk passed every launch in flight, a tenth of cubed's time
 * per launch. Where the device orders streams,
 * a conflicting predecessor need only have been submitted; if it still sits
 * in this pass's batch for its stream, *ret_flush asks for the batches to go
 * to the device first. Otherwise o's chain could reach the backend before
 * the predecessor's, which would then order o after older work and let it
 * overtake (a kernel on stream B reading what stream A's kernel had not yet
 * written). */
static bool ready(const cube__op *o, bool *ret_flush)
{
        bool device_orders = o->session->server->driver->orders_streams;
        bool flush = false;

        for (size_t i = 0; i < o->n_uses; i++) {
                const cube__use *u = &o->uses[i];
                if (u->alloc->uses_stream)
                        continue;
                for (const cube__use *x = u->alloc->uses_head; x && x != u; x = x->next) {
                        if (x->op->stream == o->stream || !(u->writes || x->writes))
                                continue;
                        if (!device_orders || !x->op->submitted)
                                return false;
                        if (x->op->stream->batch_head)
                                flush = true;
                }
        }
        *ret_flush = flush;
        return true;
}

static void activate(cube__stream *st)
{
        cube__session *s = st->session;

        if (st->active)
                return;
        st->active = true;
        st->active_next = NULL;
        if (s->active_tail)
                s->active_tail->active_next = st;
        else
                s->active_head = st;
        s->active_tail = st;
}

void cube__op_enqueue(cube__op *o)
{
        cube__session *s = o->session;
        cube__server *srv = s->server;
        cube__stream *st = o->stream;

        o->queued_ns = cube__schedule_now(srv);
        for (size_t i = 0; i < o->n_uses; i++) {
                cube__use *u = &o->uses[i];
                cube__alloc *a = u->alloc;
                if (!a->uses_head)
                        a->uses_stream = st;
                else if (a->uses_stream != st)
                        a->uses_stream = NULL;
                u->prev = a->uses_tail;
                u->next = NULL;
                if (a->uses_tail)
                        a->uses_tail->next = u;
                else
                        a->uses_head = u;
                a->uses_tail = u;
                a->pending++;
        }
        o->next = NULL;
        o->seq = st->seq++;
        if (st->windows && (o->work.op == CUBE__WORK_LAUNCH || o->work.op == CUBE__WORK_GRAPH))
                cube__profile_launch_queued(st, o->seq);
        if (st->tail)
                st->tail->next = o;
        else
                st->head = o;
        st->tail = o;
        st->pending++;
        if (!s->inflight)
                cube__share_wake(s);
        s->inflight++;
        srv->inflight++;
        if (o->reply)
                o->reply->outstanding++;
        activate(st);
        cube__schedule(srv);
}

/* Work picked in one pass of the scheduler goes to the device as one chain
 * per stream: the backend takes the chain with one lock and one wake-up. */
static void batch(cube__server *srv, cube__stream *st, cube__work *head, cube__work *w)
{
        w->next = NULL;
        if (st->batch_tail) {
                st->batch_tail->next = head;
        } else {
                st->batch_head = head;
                st->batch_next = srv->batched;
                srv->batched = st;
        }
        st->batch_tail = w;
}

static void submit_batches(cube__server *srv)
{
        while (srv->batched) {
                cube__stream *st = srv->batched;
                cube__work *w = st->batch_head;

                srv->batched = st->batch_next;
                st->batch_head = st->batch_tail = NULL;
                st->batch_next = NULL;
                srv->driver->submit(srv->device, st->device, w);
        }
}

/* Submits one piece of this session's work, taking its streams in turn,
 * at now: the scheduling pass's time, as each read of the clock costs about
 * 4 % of cubed's work on an empty launch. *ret_windowed says whether a
 * stream had work it held back only for its window. */
static bool submit_one(cube__session *s, uint64_t now, bool *ret_windowed)
{
        cube__server *srv = s->server;
        cube__stream *prev = NULL;
        unsigned window = srv->inflight > s->inflight ? STREAM_WINDOW : DEVICE_WINDOW;

        *ret_windowed = false;
        for (cube__stream *st = s->active_head; st; prev = st, st = st->active_next) {
                cube__op *o = st->head;

                if (o && st->submitted >= window && st->submitted < DEVICE_WINDOW)
                        *ret_windowed = true;
                bool flush = false;
                if (!o || st->host_busy || st->submitted >= window || !ready(o, &flush) ||
                    (o->host_run && st->submitted) ||
                    ((o->work.op == CUBE__WORK_LAUNCH || o->work.op == CUBE__WORK_GRAPH) &&
                     !cube__shares_room(srv)))
                        continue;
                if (flush || (o->host_run && srv->batched))
                        submit_batches(srv);
                st->head = o->next;
                if (!st->head)
                        st->tail = NULL;
                /* This stream goes to the back of the line, or off it. */
                if (prev)
                        prev->active_next = st->active_next;
                else
                        s->active_head = st->active_next;
                if (s->active_tail == st)
                        s->active_tail = prev;
                st->active = false;
                if (st->head)
                        activate(st);
                cube__share_submitted(o, now);
                o->submitted = true;
                cube__hist_observe(&srv->stats.queue_wait, now > o->queued_ns ?
                                   (double) (now - o->queued_ns) / 1e9 : 0);
                st->submitted++;
                srv->submitted++;
                if (o->host_run) {
                        /* Never completes before it returns (collectives.c). */
                        st->host_busy = true;
                        o->host_run(o);
                } else {
                        /* A replay goes as its whole chain of launches. */
                        batch(srv, st, o->chain ? o->chain : &o->work, &o->work);
                }
                return true;
        }
        return false;
}

/* Offers the device to the sessions with queued work in the order the
 * shares put them (tenants.c), until one submits a piece of work. */
static bool serve_next(cube__server *srv, uint64_t now)
{
        unsigned pass = ++srv->shares.pass;
        bool windowed;

        cube__shares_pass(srv, now);
        for (;;) {
                cube__session *best = NULL;

                for (cube__session *s = srv->sessions; s; s = s->next)
                        if (s->active_head && s->share_pass != pass &&
                            (!best || cube__share_before(s, best)))
                                best = s;
                if (!best)
                        return false;
                best->share_pass = pass;
                if (!cube__share_may_submit(best, now))
                        continue;
                if (submit_one(best, now, &windowed))
                        return true;
                /* It is owed the device and holds its window: the others
                 * wait for its work to drain rather than take its turn. */
                if (windowed)
                        return false;
        }
}

void cube__schedule(cube__server *srv)
{
        if (srv->scheduling || srv->plugged) {
                srv->reschedule = true;
                return;
        }
        srv->scheduling = true;
        do {
                uint64_t now = uv_hrtime();

                srv->reschedule = false;
                while (srv->submitted < DEVICE_WINDOW && serve_next(srv, now))
                        ;
                submit_batches(srv);
        } while (srv->reschedule);
        cube__shares_hold(srv);
        srv->scheduling = false;
}

void cube__schedule_plug(cube__server *srv)
{
        if (srv->plugged++ == 0)
                srv->plugged_ns = uv_hrtime();
}

uint64_t cube__schedule_now(const cube__server *srv)
{
        return srv->plugged ? srv->plugged_ns : uv_hrtime();
}

void cube__schedule_unplug(cube__server *srv)
{
        if (--srv->plugged == 0 && srv->reschedule)
                cube__schedule(srv);
}

void cube__op_retire(cube__op *o)
{
        cube__server *srv = o->session->server;

        for (size_t i = 0; i < o->n_uses; i++) {
                cube__use *u = &o->uses[i];
                cube__alloc *a = u->alloc;
                if (u->prev)
                        u->prev->next = u->next;
                else
                        a->uses_head = u->next;
                if (u->next)
                        u->next->prev = u->prev;
                else
                        a->uses_tail = u->prev;
        }
        if (o->host_run)
                o->stream->host_busy = false;
        if (o->submitted) {
                o->stream->submitted--;
                srv->submitted--;
        }
        o->stream->pending--;
}

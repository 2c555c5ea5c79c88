/*
 * graphs.c - graph capture and replay: graph_prepare, begin_capture,
 * end_capture, replay and graph_destroy, as a software graph.
 *
 * A stream moves NONE -> PREPARED -> RECORDING -> NONE. graph_prepare comes
 * before the warm-up run, and from then on the stream's pools keep the empty
 * pages the warm-up leaves (no reclaim takes them). Between begin_capture
 * and end_capture the stream's launches are not run: each is resolved and
 * validated as a launch is, and its device record (cube__launch_work:
 * module, storages, offsets, info words) goes into the graph as it stands.
 * A replay hands those records to the device again, one cube__work each in
 * one chain, without the parse, resolve and validate path a launch pays,
 * so a replay of N launches costs one request and N device runs. A device
 * that keeps graphs itself (driver.h's graph_create) is given them once, at
 * end_capture, and a replay is then one piece of device work.
 *
 * The window's rules (the reference's StreamCapture):
 *  - read, sync, start_profile, end_profile and memory_cleanup on the
 *    recording stream wait on the device, which a recording stream cannot;
 *    they are refused with graph_state and the capture goes on;
 *  - an allocation on the recording stream may reuse what the pools hold
 *    and add no page: IoError::PageUpdateForbidden otherwise;
 *  - a launch refused or skipped during the window, a write from the host
 *    (a capture records launches only), and a launch with a dynamic count
 *    doom the capture: end_capture answers the first such failure, and the
 *    graph's write set carries it;
 *  - a capture that crosses max-graph-launches is abandoned: end_capture
 *    answers graph_state, or Several of the doom and the abandonment when
 *    it was doomed too.
 *
 * A graph keeps every allocation its launches touch (and so their pages)
 * for its lifetime, even once the session frees them: a replay writes where
 * the capture saw the launches write. A replay claims and settles like one
 * launch whose read set is what the graph reads before writing it and whose
 * write set is everything it writes: its inputs known to carry a failure
 * skip it (its write set claims the failure), a writer of them still
 * pending decides at completion, and a replay that fails leaves its write
 * set carrying the failure until a replay lands. graph_destroy needs no
 * sync: a replay in flight holds the graph, which goes with the last one.
 *
 * It is a little over 800 lines: capture and replay share the graph's record
 * and its state machine, which read best in one place.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cubed.h"

/* A byte range of one allocation a graph reads or writes. */
typedef struct graph_range {
        cube__alloc *alloc;
        uint64_t start, end;
} graph_range;

typedef struct cube__graph {
        uint64_t id;
        cube__session *session;
        cube__server *server;
        cube__dgraph *device;           /* the device's own copy (graph_create), or NULL */
        uint64_t stream;                /* the stream it was captured on */
        unsigned refs;                  /* the session's, and each replay in flight */
        cube__launch_work **launches;
        size_t n_launches, cap_launches;
        cube__alloc **allocs;           /* every allocation touched, each held once */
        bool *writes;                   /* per allocation: whether the graph writes it */
        size_t n_allocs, cap_allocs;
        graph_range *written;           /* the write set */
        size_t n_written, cap_written;
        graph_range *read;              /* what it reads before writing it */
        size_t n_read, cap_read;
        uint64_t replays;
        uint64_t pages, page_bytes;     /* held for its lifetime, counted at end_capture */
        char label[40];                 /* "graph N": what failures' reports name */
        cube__launch_work as_launch;    /* kernel = label, for the shared writer path */
} cube__graph;

typedef struct cube__capture {
        int state;                      /* CUBE__CAPTURE_PREPARED or _RECORDING */
        cube__graph *graph;             /* being recorded */
        cube_error *doomed;             /* the first failure of the window */
        cube_error *abandoned;          /* why it stopped recording */
} cube__capture;

cube_error *cube__graph_state(const char *fmt, ...)
{
        char reason[512];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(reason, sizeof(reason), fmt, ap);
        va_end(ap);
        return cube__err_generic("%s", reason);
}

/* The reference's graph_capture_unsupported(). */
static cube_error *unsupported(void)
{
        return cube__graph_state("graph capture is not supported by this backend");
}

static bool backend_captures(const cube__server *srv)
{
        return !srv->driver->cannot_capture || !srv->driver->cannot_capture(srv->device);
}

/* Whether a new capture may start: the backend captures and the operator
 * left graphs on (max-graphs 0 turns them off, and the daemon then answers
 * as a backend without graph support). A capture or graph made before a
 * reload turned them off is still ended, replayed and destroyed. */
static bool captures_start(const cube__server *srv)
{
        return srv->opts.max_graphs > 0 && backend_captures(srv);
}

bool cube__capturing(const cube__stream *st)
{
        return st && st->capture && st->capture->state == CUBE__CAPTURE_RECORDING;
}

cube_error *cube__capture_refusal(cube__session *s, uint64_t stream, const char *call)
{
        if (!cube__capturing(cube__idmap_get(&s->streams, stream)))
                return NULL;
        return cube__graph_state("%s: stream %" PRIu64 " is recording a graph capture, and %s "
                                 "waits on the device, which a recording stream cannot; call "
                                 "end_capture first, or use another stream", call, stream, call);
}

void cube__capture_doom(cube__stream *st, const cube_error *e)
{
        if (cube__capturing(st) && !st->capture->doomed)
                st->capture->doomed = cube_error_clone(e);
}

static void *grow(void *v, size_t *cap, size_t n, size_t elem)
{
        if (n < *cap)
                return v;
        size_t want = *cap ? *cap * 2 : 8;
        void *g = realloc(v, want * elem);
        if (g)
                *cap = want;
        return g;
}

static void graph_free(cube__graph *g)
{
        if (!g)
                return;
        if (g->device)
                g->server->driver->graph_destroy(g->server->device, g->device);
        for (size_t i = 0; i < g->n_launches; i++)
                free(g->launches[i]);
        free(g->launches);
        for (size_t i = 0; i < g->n_allocs; i++)
                cube__alloc_unref(g->allocs[i]);
        free(g->allocs);
        free(g->writes);
        free(g->written);
        free(g->read);
        free(g);
}

static void graph_unref(cube__graph *g)
{
        if (--g->refs == 0)
                graph_free(g);
}

/* Holds a, once, for the graph's lifetime; notes whether the graph writes it. */
static int hold(cube__graph *g, cube__alloc *a, bool writes)
{
        for (size_t i = 0; i < g->n_allocs; i++)
                if (g->allocs[i] == a) {
                        g->writes[i] |= writes;
                        return 0;
                }
        size_t cap = g->cap_allocs;
        cube__alloc **allocs = grow(g->allocs, &cap, g->n_allocs, sizeof(*allocs));
        if (!allocs)
                return -1;
        g->allocs = allocs;
        bool *w = g->cap_allocs == cap ? g->writes : realloc(g->writes, cap * sizeof(*w));
        if (!w)
                return -1;
        g->writes = w;
        g->cap_allocs = cap;
        a->pending++;           /* released by cube__alloc_unref in graph_free */
        g->allocs[g->n_allocs] = a;
        g->writes[g->n_allocs++] = writes;
        return 0;
}

static bool covered(const graph_range *v, size_t n, const cube__alloc *a, uint64_t start,
                    uint64_t end)
{
        for (size_t i = 0; i < n; i++)
                if (v[i].alloc == a && v[i].start <= start && end <= v[i].end)
                        return true;
        return false;
}

static int add_range(graph_range **v, size_t *n, size_t *cap, cube__alloc *a, uint64_t start,
                     uint64_t end)
{
        if (covered(*v, *n, a, start, end))
                return 0;
        graph_range *g = grow(*v, cap, *n, sizeof(*g));
        if (!g)
                return -1;
        *v = g;
        g[(*n)++] = (graph_range) { a, start, end };
        return 0;
}

static void abandon(cube__stream *st, cube_error *why)
{
        if (!st->capture->abandoned)
                st->capture->abandoned = why;
        else
                cube_error_free(why);
}

void cube__capture_launch(cube__stream *st, cube__launch_work *l, cube__alloc *const *allocs,
                          const uint64_t *start, const uint64_t *end, const bool *reads,
                          const bool *writes, size_t n)
{
        cube__capture *c = st->capture;
        cube__graph *g = c->graph;
        uint32_t max = st->session->server->opts.max_graph_launches;
        int r = 0;

        if (c->abandoned) {
                free(l);
                return;
        }
        if (g->n_launches >= max) {
                abandon(st, cube__graph_state("end_capture: the capture on stream %" PRIu64 " was "
                                              "abandoned: it recorded more than %u launches "
                                              "(max-graph-launches)", st->id, max));
                free(l);
                return;
        }
        cube__launch_work **v = grow(g->launches, &g->cap_launches, g->n_launches, sizeof(*v));
        if (!v) {
                free(l);
                abandon(st, cube__graph_state("end_capture: the capture on stream %" PRIu64 " was "
                                              "abandoned: out of host memory recording", st->id));
                return;
        }
        g->launches = v;
        g->launches[g->n_launches++] = l;
        /* Reads first: a launch that reads and writes a buffer reads what
         * was there before it. */
        for (size_t i = 0; i < n && r == 0; i++)
                if (reads[i] && !covered(g->written, g->n_written, allocs[i], start[i], end[i]))
                        r = add_range(&g->read, &g->n_read, &g->cap_read, allocs[i], start[i],
                                      end[i]);
        for (size_t i = 0; i < n && r == 0; i++) {
                r = hold(g, allocs[i], writes[i]);
                if (r == 0 && writes[i])
                        r = add_range(&g->written, &g->n_written, &g->cap_written, allocs[i],
                                      start[i], end[i]);
        }
        if (r < 0)
                abandon(st, cube__graph_state("end_capture: the capture on stream %" PRIu64 " was "
                                              "abandoned: out of host memory recording", st->id));
}

/* Lands failure on the graph's write set: a doomed capture's outputs, a
 * replay that never ran. */
static void taint_written(cube__server *srv, const cube__graph *g, uint64_t failure)
{
        for (size_t i = 0; i < g->n_written; i++)
                cube__alloc_taint(g->written[i].alloc, g->written[i].start, g->written[i].end,
                                  failure);
}

static void capture_free(cube__stream *st)
{
        cube__capture *c = st->capture;

        if (!c)
                return;
        if (st->memory)
                st->memory->capture = CUBE__CAPTURE_NONE;
        if (c->graph)
                graph_unref(c->graph);
        cube_error_free(c->doomed);
        cube_error_free(c->abandoned);
        free(c);
        st->capture = NULL;
        st->session->captures--;
}

static bool get_stream(cube__msg *k, uint64_t *ret_stream)
{
        if (k->n != 1 || !cube__obj_u64(&k->p[0], ret_stream))
                return cube__reply_malformed(k, "params must be [stream]");
        return true;
}

/* graph_prepare: [stream]. */
cube__dispatched cube__do_graph_prepare(cube__msg *k)
{
        cube__session *s = k->session;
        cube__server *srv = k->server;
        uint64_t stream;
        cube__stream *st;
        cube_error *e = NULL;

        if (!get_stream(k, &stream))
                return CUBE__DISPATCH_DONE;
        if (!captures_start(srv)) {
                cube__reply_ok_nil(k);  /* the reference's default: a no-op */
                return CUBE__DISPATCH_DONE;
        }
        if (srv->poison) {
                cube__reply_owned_error(k, cube__poisoned(srv));
                return CUBE__DISPATCH_DONE;
        }
        if (!(st = cube__stream_get(s, stream, &e))) {
                cube__reply_owned_error(k, e);
                return CUBE__DISPATCH_DONE;
        }
        if (st->capture) {
                cube__reply_owned_error(k, cube__graph_state(
                        "graph_prepare: stream %" PRIu64 " is already %s a capture; one stream "
                        "holds one capture at a time", stream,
                        st->capture->state == CUBE__CAPTURE_RECORDING ? "recording" : "preparing"));
                return CUBE__DISPATCH_DONE;
        }
        if (s->graphs.len + s->captures >= srv->opts.max_graphs) {
                cube__reply_owned_error(k, cube__err_validation(
                        "a session may hold at most %u graphs, captures under way included "
                        "(max-graphs); destroy one first", srv->opts.max_graphs));
                return CUBE__DISPATCH_DONE;
        }
        if ((!st->memory && !(st->memory = cube__pools_new(&srv->pools))) ||
            !(st->capture = calloc(1, sizeof(*st->capture)))) {
                cube__reply_owned_error(k, NULL);
                return CUBE__DISPATCH_DONE;
        }
        st->capture->state = CUBE__CAPTURE_PREPARED;
        st->memory->capture = CUBE__CAPTURE_PREPARED;
        s->captures++;
        cube__reply_ok_nil(k);
        return CUBE__DISPATCH_DONE;
}

/* begin_capture: [stream]. */
cube__dispatched cube__do_begin_capture(cube__msg *k)
{
        cube__session *s = k->session;
        uint64_t stream;
        cube__stream *st;
        cube__graph *g;

        if (!get_stream(k, &stream))
                return CUBE__DISPATCH_DONE;
        if (!captures_start(k->server)) {
                cube__reply_owned_error(k, unsupported());
                return CUBE__DISPATCH_DONE;
        }
        st = cube__idmap_get(&s->streams, stream);
        if (!st || !st->capture) {
                cube__reply_owned_error(k, cube__graph_state(
                        "begin_capture: stream %" PRIu64 " was not prepared: call graph_prepare, "
                        "then warm up with the workload, then begin_capture", stream));
                return CUBE__DISPATCH_DONE;
        }
        if (st->capture->state == CUBE__CAPTURE_RECORDING) {
                cube__reply_owned_error(k, cube__graph_state(
                        "begin_capture: stream %" PRIu64 " is already recording a capture; "
                        "end_capture it first", stream));
                return CUBE__DISPATCH_DONE;
        }
        if (!(g = calloc(1, sizeof(*g)))) {
                cube__reply_owned_error(k, NULL);
                return CUBE__DISPATCH_DONE;
        }
        g->session = s;
        g->stream = stream;
        g->refs = 1;
        st->capture->graph = g;
        st->capture->state = CUBE__CAPTURE_RECORDING;
        st->memory->capture = CUBE__CAPTURE_RECORDING;
        cube__reply_ok_nil(k);
        return CUBE__DISPATCH_DONE;
}

/* Counts the distinct pages the graph keeps. */
static void count_pages(cube__graph *g)
{
        for (size_t i = 0; i < g->n_allocs; i++) {
                const cube__page *p = g->allocs[i]->page;
                bool seen = !p;
                for (size_t j = 0; j < i && !seen; j++)
                        seen = g->allocs[j]->page == p;
                if (!seen) {
                        g->pages++;
                        g->page_bytes += p->size;
                }
        }
}

/* end_capture: [stream] -> graph. */
cube__dispatched cube__do_end_capture(cube__msg *k)
{
        cube__session *s = k->session;
        cube__server *srv = k->server;
        uint64_t stream;
        cube__stream *st;
        cube__capture *c;
        cube__graph *g;
        cube_error *e;
        msgpack_sbuffer sb;
        msgpack_packer pk;

        if (!get_stream(k, &stream))
                return CUBE__DISPATCH_DONE;
        if (!backend_captures(srv)) {
                cube__reply_owned_error(k, unsupported());
                return CUBE__DISPATCH_DONE;
        }
        st = cube__idmap_get(&s->streams, stream);
        if (!cube__capturing(st) && !captures_start(srv)) {
                cube__reply_owned_error(k, unsupported());
                return CUBE__DISPATCH_DONE;
        }
        if (!cube__capturing(st)) {
                cube__reply_owned_error(k, cube__graph_state(
                        "end_capture: stream %" PRIu64 " is not recording a capture (%s)", stream,
                        st && st->capture ? "it was prepared; begin_capture starts recording" :
                        "begin_capture was not called, or its capture has ended"));
                return CUBE__DISPATCH_DONE;
        }
        c = st->capture;
        g = c->graph;
        if (c->doomed || c->abandoned) {
                /* Owed all of it: the failure, and that it stopped recording. */
                if (c->doomed && c->abandoned) {
                        cube_error *doomed = c->doomed, *abandoned = c->abandoned;
                        c->doomed = c->abandoned = NULL;
                        /* several_add takes each member, even when it fails. */
                        if (!(e = cube__err_several())) {
                                cube_error_free(doomed);
                                cube_error_free(abandoned);
                        } else if (cube__err_several_add(e, doomed) < 0) {
                                cube_error_free(abandoned);
                                cube_error_free(e);
                                e = NULL;
                        } else if (cube__err_several_add(e, abandoned) < 0) {
                                cube_error_free(e);
                                e = NULL;
                        }
                } else if (c->doomed) {
                        e = c->doomed;
                        c->doomed = NULL;
                } else {
                        e = c->abandoned;
                        c->abandoned = NULL;
                }
                /* What the capture was to write was never written by it. */
                if (e) {
                        uint64_t failure = cube__failures_insert(&srv->failures,
                                                                 cube_error_clone(e), s->id, s->uid);
                        s->errors++;
                        taint_written(srv, g, failure);
                        cube__failures_prune(&srv->failures, failure);
                }
                capture_free(st);
                cube__reply_owned_error(k, e);
                return CUBE__DISPATCH_DONE;
        }
        g->id = ++s->next_graph;
        snprintf(g->label, sizeof(g->label), "graph %" PRIu64, g->id);
        g->as_launch.kernel = g->label;
        count_pages(g);
        if (cube__idmap_put(&s->graphs, g->id, g) < 0) {
                capture_free(st);
                cube__reply_owned_error(k, NULL);
                return CUBE__DISPATCH_DONE;
        }
        c->graph = NULL;
        capture_free(st);
        g->server = srv;
        if (srv->driver->graph_create && g->n_launches > 0 &&
            (e = srv->driver->graph_create(srv->device, g->launches, g->n_launches, g->label,
                                           &g->device))) {
                cube__log_session(CUBE__LOG_INFO, s, 0, "session %" PRIu64 ": %s replays "
                                  "through its launches: %s", s->id, g->label,
                                  cube_error_message(e));
                cube_error_free(e);
                g->device = NULL;
        }
        cube__log_session(CUBE__LOG_DEBUG, s, 0, "session %" PRIu64 ": %s captured on stream %"
                          PRIu64 ": %zu launches, %" PRIu64 " pages held%s", s->id, g->label,
                          stream, g->n_launches, g->pages, g->device ? ", kept by the device" : "");
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (cube__pack_response_ok(&pk, k->env->msgid) == 0 &&
            msgpack_pack_uint64(&pk, g->id) == 0)
                cube__reply_sbuffer(s, &sb);
        msgpack_sbuffer_destroy(&sb);
        return CUBE__DISPATCH_DONE;
}

/* A replay that will not run: its failure lands on the write set. Takes e. */
static cube_error *refuse(cube__session *s, cube__stream *st, cube__graph *g, cube_error *e)
{
        cube__failures *fs = &s->server->failures;
        uint64_t failure;

        cube__stream_failed(s, st->id, e);
        failure = cube__failures_insert(fs, cube_error_clone(e), s->id, s->uid);
        s->errors++;
        taint_written(s->server, g, failure);
        cube__failures_prune(fs, failure);
        return e;
}

/* What the graph's inputs are at the replay's place in the order. */
static int inputs(cube__failures *fs, const cube__graph *g, cube__awaits *ret)
{
        for (size_t i = 0; i < g->n_read; i++)
                if (cube__awaits_collect(fs, ret, &g->read[i].alloc->claims, g->read[i].start,
                                         g->read[i].end, g->read[i].alloc->id) < 0)
                        return -1;
        return 0;
}

/* The replay is skipped: its write set claims the failure an input carried. */
static cube_error *skip(cube__session *s, cube__stream *st, cube__graph *g, uint64_t failure,
                        uint64_t needed)
{
        cube__failures *fs = &s->server->failures;
        uint64_t *ids = calloc(g->n_allocs + 1, sizeof(*ids));
        size_t n = 0;
        cube_error *e = cube__err_new(CUBE_SERVER_SKIPPED);

        cube__stream_failed(s, st->id, e);
        taint_written(s->server, g, failure);
        for (size_t i = 0; ids && i < g->n_allocs; i++)
                if (g->writes[i])
                        ids[n++] = g->allocs[i]->id;
        if (ids)
                cube__failures_skipped(fs, failure, g->label, needed, ids, n);
        free(ids);
        return e;
}

/* Queues the replay: one op, claiming the write set as one launch would,
 * whose work is the last launch of a chain of all of them. */
static cube_error *enqueue(cube__session *s, cube__stream *st, cube__graph *g)
{
        cube__server *srv = s->server;
        cube__failures *fs = &srv->failures;
        cube__awaits awaits = {0};
        uint64_t failure, needed;
        bool pending;
        size_t n = g->n_launches, parts = g->device ? 0 : n - 1, w = 0;
        size_t extra = parts * sizeof(cube__op) + g->n_allocs * sizeof(cube__alloc *);
        void *block;
        cube__op *o, *part;
        cube_error *e;

        if (srv->poison)
                return cube__poisoned(srv);
        if ((e = cube__inject_take(srv, CUBE_FAULT_LAUNCH)))
                return refuse(s, st, g, e);     /* the enqueue failed */
        if (inputs(fs, g, &awaits) < 0) {
                cube__awaits_release(fs, &awaits);
                return refuse(s, st, g, cube__err_generic("out of host memory replaying %s",
                                                          g->label));
        }
        failure = cube__awaits_first(&awaits, &needed, &pending);
        if (failure && !pending) {
                e = skip(s, st, g, failure, needed);
                cube__awaits_release(fs, &awaits);
                return e;
        }
        o = cube__op_new(s, st, CUBE__WORK_LAUNCH, g->n_allocs, extra, &block);
        if (o && !(o->writer = cube__writer_new())) {
                free(o);
                o = NULL;
        }
        if (!o) {
                cube__awaits_release(fs, &awaits);
                return refuse(s, st, g, cube__err_generic("out of host memory replaying %s",
                                                          g->label));
        }
        part = block;
        o->written = (cube__alloc **) (part + parts);
        o->awaits = awaits;
        o->launch = &g->as_launch;
        if (g->device) {
                o->work.op = CUBE__WORK_GRAPH;  /* one piece of work runs them all */
                o->work.graph = g->device;
        } else {
                o->work.launch = g->launches[n - 1];
        }
        o->graph = g;
        g->refs++;
        g->replays++;
        for (size_t i = 0; i < parts; i++) {
                part[i].session = s;
                part[i].stream = st;
                part[i].part_of = o;
                part[i].work.op = CUBE__WORK_LAUNCH;
                part[i].work.launch = g->launches[i];
                part[i].work.next = i + 1 < parts ? &part[i + 1].work : &o->work;
        }
        o->chain = parts ? &part[0].work : NULL;
        for (size_t i = 0; i < g->n_allocs; i++) {
                cube__op_use(o, g->allocs[i], g->writes[i]);
                if (g->writes[i])
                        o->written[w++] = g->allocs[i];
        }
        o->n_written = w;
        /* Enqueued: the write set is the replay's now. */
        for (size_t i = 0; i < g->n_written; i++)
                cube__claims_pending(fs, &g->written[i].alloc->claims, g->written[i].start,
                                     g->written[i].end, o->writer);
        if ((o->work.error = cube__inject_take(srv, CUBE_FAULT_DEVICE_LAUNCH))) {
                o->work.op = CUBE__WORK_FENCE;  /* fails in stream order, running nothing */
                o->chain = NULL;
        }
        s->launches += n;
        cube__op_enqueue(o);
        return NULL;
}

/* replay: [stream, graph] or [stream, graph, times]. Answered once the
 * replays are queued: times of them, one after another, each its own
 * piece of work that claims and settles as one replay, so a loop that
 * replays a graph pays one round trip, not one per replay. The first that
 * fails to queue stops the rest and is the answer. */
#define REPLAY_TIMES_MAX 65536
cube__dispatched cube__do_replay(cube__msg *k)
{
        cube__session *s = k->session;
        uint64_t stream, id, times = 1;
        cube__stream *st;
        cube__graph *g;
        cube_error *e = NULL;

        if ((k->n != 2 && k->n != 3) || !cube__obj_u64(&k->p[0], &stream) ||
            !cube__obj_u64(&k->p[1], &id) ||
            (k->n == 3 && (!cube__obj_u64(&k->p[2], &times) || times == 0 ||
                           times > REPLAY_TIMES_MAX))) {
                cube__reply_malformed(k, "params must be [stream, graph] or [stream, graph, times] "
                                "with times from 1 to 65536");
                return CUBE__DISPATCH_DONE;
        }
        if (!backend_captures(k->server)) {
                cube__reply_owned_error(k, unsupported());
                return CUBE__DISPATCH_DONE;
        }
        g = cube__idmap_get(&s->graphs, id);
        st = g ? cube__stream_get(s, stream, &e) : NULL;
        if (!g && !captures_start(k->server))
                e = unsupported();
        else if (!g)
                e = cube__graph_state("replay: graph %" PRIu64 " %s", id, id && id <= s->next_graph ?
                                      "was destroyed (graph_destroy)" :
                                      "is unknown: end_capture of this session never made it");
        else if (st && cube__capturing(st))
                e = cube__graph_state("replay: stream %" PRIu64 " is recording a capture; a "
                                      "replay cannot be recorded into another graph", stream);
        for (uint64_t t = 0; !e && st && g->n_launches > 0 && t < times; t++)
                e = enqueue(s, st, g);
        if (e)
                cube__reply_owned_error(k, e);
        else
                cube__reply_ok_nil(k);
        return CUBE__DISPATCH_DONE;
}

/* graph_destroy: [stream, graph], a notification. A replay still in flight
 * holds the graph; what it retained goes once the last one is done. */
cube__dispatched cube__do_graph_destroy(cube__msg *k)
{
        cube__session *s = k->session;
        uint64_t stream, id;
        cube__graph *g;

        if (k->n != 2 || !cube__obj_u64(&k->p[0], &stream) || !cube__obj_u64(&k->p[1], &id)) {
                cube__reply_malformed(k, "params must be [stream, graph]");
                return CUBE__DISPATCH_DONE;
        }
        if (!(g = cube__idmap_remove(&s->graphs, id))) {
                cube__log_session(CUBE__LOG_DEBUG, s, 0, "session %" PRIu64 ": graph_destroy of "
                                  "unknown graph %" PRIu64 " (a no-op)", s->id, id);
                return CUBE__DISPATCH_DONE;
        }
        graph_unref(g);
        return CUBE__DISPATCH_DONE;
}

void cube__replay_part_done(cube__op *part)
{
        cube__op *o = part->part_of;

        if (o->stream->windows)
                cube__profile_work_done(o->stream, o->seq, &part->work, 0);
        /* The first failure is the replay's. */
        if (part->work.error && !o->work.error)
                o->work.error = part->work.error;
        else
                cube_error_free(part->work.error);
        part->work.error = NULL;
}

void cube__replay_done(cube__op *o)
{
        graph_unref(o->graph);
        o->graph = NULL;
}

static void free_graph(uint64_t key, void *value, void *ctx)
{
        graph_unref(value);
}

static void free_capture(uint64_t key, void *value, void *ctx)
{
        capture_free(value);
}

void cube__graphs_session_free(cube__session *s)
{
        cube__idmap_foreach(&s->streams, free_capture, NULL);
        cube__idmap_foreach(&s->graphs, free_graph, NULL);
        cube__idmap_free(&s->graphs);
}

typedef struct pack_ctx {
        msgpack_packer *pk;
        int r;
        uint64_t n;
} pack_ctx;


static void pack_graph(uint64_t key, void *value, void *ctx)
{
        const cube__graph *g = value;
        pack_ctx *c = ctx;

        c->r |= cube__pack_capture_entry(c->pk, g->session->id, "graph", g->stream, g->id,
                                         g->device ? "kept" : "ready", g->n_launches, g->pages, g->page_bytes,
                                         g->replays, 0);
}

static void pack_capture(uint64_t key, void *value, void *ctx)
{
        const cube__stream *st = value;
        const cube__capture *cap = st->capture;
        pack_ctx *c = ctx;

        if (!cap)
                return;
        c->r |= cube__pack_capture_entry(c->pk, st->session->id, "capture", st->id, 0,
                                         cap->doomed || cap->abandoned ? "doomed" :
                                         cap->state == CUBE__CAPTURE_RECORDING ? "recording" :
                                         "prepared", cap->graph ? cap->graph->n_launches : 0,
                                         0, 0, 0, 0);
}

int cube__graphs_pack(const cube__session *s, msgpack_packer *pk)
{
        pack_ctx c = { pk, 0, 0 };

        cube__idmap_foreach(&s->graphs, pack_graph, &c);
        cube__idmap_foreach(&s->streams, pack_capture, &c);
        return c.r ? -1 : 0;
}

int cube__pack_capture_entry(msgpack_packer *pk, uint64_t session, const char *kind,
                             uint64_t stream, uint64_t id, const char *state, uint64_t launches,
                             uint64_t pages, uint64_t page_bytes, uint64_t replays,
                             uint64_t device_ns)
{
        int r = 0;

        r |= msgpack_pack_map(pk, 10);
        r |= cube__pack_kv_u64(pk, "session", session);
        r |= cube__pack_kv_str(pk, "kind", kind);
        r |= cube__pack_kv_u64(pk, "stream", stream);
        r |= cube__pack_kv_u64(pk, "id", id);
        r |= cube__pack_kv_str(pk, "state", state);
        r |= cube__pack_kv_u64(pk, "launches", launches);
        r |= cube__pack_kv_u64(pk, "pages", pages);
        r |= cube__pack_kv_u64(pk, "page_bytes", page_bytes);
        r |= cube__pack_kv_u64(pk, "replays", replays);
        r |= cube__pack_kv_u64(pk, "device_ns", device_ns);
        return r ? -1 : 0;
}

/* captures: [] -> [entry, ...]: every session's profiling windows, graphs
 * and captures under way, one flat entry each (cubectl graphs). */
cube__dispatched cube__do_captures(cube__msg *k)
{
        msgpack_sbuffer sb;
        msgpack_packer pk;
        uint64_t n = 0;
        int r = 0;

        for (cube__session *s = k->server->sessions; s; s = s->next)
                n += s->windows.len + s->graphs.len + s->captures;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        r |= cube__pack_response_ok(&pk, k->env->msgid);
        r |= msgpack_pack_array(&pk, (uint32_t) n);
        for (cube__session *s = k->server->sessions; s; s = s->next) {
                r |= cube__profile_pack(s, &pk);
                r |= cube__graphs_pack(s, &pk);
        }
        if (r == 0)
                cube__reply_sbuffer(k->session, &sb);
        else
                cube__reply_owned_error(k, NULL);
        msgpack_sbuffer_destroy(&sb);
        return CUBE__DISPATCH_DONE;
}

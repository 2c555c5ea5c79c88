/*
 * collectives.c - the collective operations: all_reduce, all_gather,
 * reduce_scatter, broadcast, all_to_all, send and recv, and
 * sync_collective, run on the groups of groups.c.
 *
 * A collective is a host op (cubed.h): it waits in stream order like device
 * work, on the caller's stream (ComputeWait::Now) or on the session's
 * collective stream (AtSync, which sync_collective waits for), reads its
 * source and writes its destination. When it starts, its source is checked
 * as a read checks it: a member whose source carries a failure still takes
 * part, saying so in the status exchange the transport fuses with the
 * operation, and no member writes its destination; each one's destination
 * carries the failure (the refusing member's own, the others' naming it).
 * A transport error or the collective timeout fails the operation on every
 * member, its destination carries an error naming the lost member, and the
 * group refuses later work until a new comm_init.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "comms.h"

/* ---- host ops: starting on the loop, finishing on the loop --------------- */

void cube__collective_done(cube__op *o)
{
        job *j = o->host_ctx;
        cube__group *g = j->group;
        cube__session *s = o->session;
        cube__failures *fs = &s->server->failures;
        const char *op = cube__collective_names[j->collective];

        o->host_ctx = NULL;
        g->jobs--;
        if (j->kind == JOB_JOIN) {
                if (j->rc == 0 && g->state == JOINING) {
                        g->state = READY;
                        cube__log_session(CUBE__LOG_INFO, s, 0, "session %" PRIu64 ": joined "
                                          "group %016" PRIx64 " as rank %u of %u", s->id, g->id,
                                          g->rank, g->size);
                } else {
                        if (g->state != CLOSED)
                                g->state = FAILED;
                        snprintf(g->why, sizeof(g->why), "%s", j->rc ? j->why : "closed");
                        o->work.error = cube__err_generic("comm_init of group %016" PRIx64
                                                          " failed: %s", g->id, g->why);
                }
                free(j);
                return;
        }
        g->ops++;
        if (j->rc < 0) {
                if (g->state != CLOSED)
                        g->state = FAILED;
                snprintf(g->why, sizeof(g->why), "%s", j->why);
                cube__log_session(CUBE__LOG_WARNING, s, 0, "session %" PRIu64 ": %s over group "
                                  "%016" PRIx64 " failed: %s", s->id, op, g->id, j->why);
                o->work.error = cube__err_generic("%s over group %016" PRIx64 " failed: %s; the "
                                                  "group refuses later work until a new "
                                                  "comm_init", op, g->id, j->why);
        } else if (j->refused) {
                /* Its own source carried the failure: the destination claims
                 * it, as a skipped launch's outputs do. */
                uint64_t dst = o->alloc ? o->alloc->id : 0;
                g->refusals++;
                if (o->writer) {
                        cube__writer_finish(fs, o->writer, j->refused);
                        cube__claims_settle(fs, &o->alloc->claims, o->writer);
                        cube__writer_unref(fs, o->writer);
                        o->writer = NULL;
                        cube__failures_skipped(fs, j->refused, op, j->src_memory, &dst, 1);
                }
                cube__failures_prune(fs, j->refused);
        } else if (j->rc > 0) {
                g->refusals++;
                o->work.error = cube__err_generic("%s over group %016" PRIx64 " wrote nothing: "
                                                  "%s", op, g->id, j->why);
        } else {
                char who[256] = "";
                size_t used = 0;
                uint32_t n = j->collective == CUBE_COLLECTIVE_RECV ||
                             j->collective == CUBE_COLLECTIVE_SEND ? 0 : g->size;
                uint64_t mine = j->status[g->rank] >> 1;

                if (j->collective == CUBE_COLLECTIVE_RECV) {
                        uint32_t p = j->coll.root;
                        if (j->status[p] & 1)
                                snprintf(who, sizeof(who), "member %s (rank %u) refused its part: "
                                         "its source carries a failure", g->names[p], p);
                        else if ((j->status[p] >> 1) != j->coll.dst_bytes)
                                snprintf(who, sizeof(who), "member %s (rank %u) sends %" PRIu64
                                         " bytes where this member receives %" PRIu64,
                                         g->names[p], p, j->status[p] >> 1, j->coll.dst_bytes);
                }
                for (uint32_t r = 0; r < n && used < sizeof(who); r++) {
                        if (j->status[r] & 1)
                                used += (size_t) snprintf(who + used, sizeof(who) - used,
                                        "%smember %s (rank %u) refused its part: its source "
                                        "carries a failure", used ? "; " : "", g->names[r], r);
                        else if ((j->status[r] >> 1) != mine)
                                used += (size_t) snprintf(who + used, sizeof(who) - used,
                                        "%smember %s (rank %u) contributes %" PRIu64 " bytes "
                                        "where this member contributes %" PRIu64,
                                        used ? "; " : "", g->names[r], r, j->status[r] >> 1, mine);
                }
                if (*who) {
                        g->refusals++;
                        o->work.error = cube__err_generic("%s over group %016" PRIx64 " wrote "
                                                          "nothing: %s", op, g->id, who);
                } else {
                        g->bytes += j->coll.src_bytes + j->coll.dst_bytes;
                }
        }
        if (o->work.error && !o->writer && !o->reply) {
                /* A send: nothing here carries it. */
                cube__log_session(CUBE__LOG_INFO, s, 0, "%s", cube_error_message(o->work.error));
                cube_error_free(o->work.error);
                o->work.error = NULL;
        }
        free(j);
}

/* The collective reached its place in the order: what its source is now
 * decides whether this member refuses; then the group's thread runs it. */
void cube__collective_start(cube__op *o)
{
        job *j = o->host_ctx;
        cube__group *g = j->group;
        cube__server *srv = o->session->server;
        uint64_t needed = 0;
        bool pending;

        if (j->kind == JOB_JOIN) {
                /* The join was handed to the thread when asked for. */
                bool go;
                uv_mutex_lock(&g->lock);
                j->op_started = true;
                go = j->finished;
                uv_mutex_unlock(&g->lock);
                if (go)
                        cube__work_complete(srv, &o->work);
                return;
        }
        if (j->kind == JOB_RUN) {
                if (g->state != READY && g->state != JOINING) {
                        j->rc = -1;
                        snprintf(j->why, sizeof(j->why), "the group is %s: %.400s",
                                 cube__group_state_names[g->state], g->why);
                        cube__work_complete(srv, &o->work);
                        return;
                }
                j->refused = cube__awaits_first(&o->awaits, &needed, &pending);
                j->src_memory = needed;
                /* Pointers into device memory, through the host's view. */
                for (size_t i = 0; i < o->n_uses; i++) {
                        cube__alloc *a = o->uses[i].alloc;
                        char *base = a->storage && srv->driver->host_view ?
                                     srv->driver->host_view(srv->device, a->storage) : NULL;
                        if (o->uses[i].writes)
                                j->coll.dst = base ? base + a->base + o->end : NULL;
                        else
                                j->coll.src = base ? base + a->base + o->start : NULL;
                }
                j->status[g->rank] = ((j->collective == CUBE_COLLECTIVE_RECV ||
                                       (j->collective == CUBE_COLLECTIVE_BROADCAST &&
                                        !j->coll.src_bytes) ? j->coll.dst_bytes :
                                       j->coll.src_bytes) << 1) | (j->refused ? 1 : 0);
                if (!j->refused && ((j->coll.src_bytes && !j->coll.src) ||
                                    (j->coll.dst_bytes && !j->coll.dst)))
                        j->status[g->rank] |= 1;        /* no storage to move: refuse */
        }
        cube__group_push(g, j);
}

static int collective_of(const cube__envelope *env)
{
        for (int i = CUBE_COLLECTIVE_ALL_REDUCE; i <= CUBE_COLLECTIVE_RECV; i++)
                if (cube__method_is(env, cube__collective_names[i]))
                        return i;
        return -1;
}

static size_t dtype_size(uint32_t dt)
{
        return dt <= CUBE__DT_BF16 ? 2 : dt == CUBE__DT_F32 || dt == CUBE__DT_I32 ||
               dt == CUBE__DT_U32 ? 4 : 8;
}

static cube_error *expect_size(const char *which, uint64_t size, uint64_t needed)
{
        if (size == needed)
                return NULL;
        return cube__err_generic("the collective's %s holds %" PRIu64 " bytes where it needs %"
                                 PRIu64, which, size, needed);
}

/* all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, send, recv:
 * [stream, group, src, dst, reduction, peer, wait]. Answered once queued:
 * what goes wrong later lands on the destination. */
cube__dispatched cube__do_collective(cube__msg *k)
{
        cube__session *s = k->session;
        cube__server *srv = k->server;
        int op = collective_of(k->env);
        uint64_t stream, s_start = 0, s_end = 0, d_start = 0, d_end = 0, sb = 0, db = 0;
        uint32_t wait = 1, dtype = CUBE__DT_U32, mean = 0, peer = 0;
        cube_handle src = {0}, dst = {0};
        bool has_src, has_dst, reduces = op == CUBE_COLLECTIVE_ALL_REDUCE ||
                                         op == CUBE_COLLECTIVE_REDUCE_SCATTER;
        cube__name *sn = NULL, *dn = NULL;
        cube__group *g = NULL;
        cube__stream *st;
        cube_error *e = NULL;
        cube__awaits awaits = {0};
        job *j;
        cube__op *o;

        if (k->n != 7 || !cube__obj_u64(&k->p[0], &stream) || !cube__obj_u32(&k->p[6], &wait) ||
            wait > 1) {
                cube__reply_malformed(k, "params must be [stream, group, src, dst, reduction, peer, "
                                "wait] with wait 0 (AtSync) or 1 (Now)");
                return CUBE__DISPATCH_DONE;
        }
        has_src = k->p[2].type != MSGPACK_OBJECT_NIL;
        has_dst = k->p[3].type != MSGPACK_OBJECT_NIL;
        if ((has_src && !cube__obj_handle(&k->p[2], &src)) ||
            (has_dst && !cube__obj_handle(&k->p[3], &dst))) {
                cube__reply_malformed(k, "src and dst are handles or nil");
                return CUBE__DISPATCH_DONE;
        }
        if (reduces && (k->p[4].type != MSGPACK_OBJECT_ARRAY || k->p[4].via.array.size != 2 ||
                        !cube__obj_u32(&k->p[4].via.array.ptr[0], &dtype) ||
                        !cube__obj_u32(&k->p[4].via.array.ptr[1], &mean) || mean > 1 ||
                        dtype >= CUBE__DT_MAX)) {
                cube__reply_malformed(k, "a reduction is [dtype 0..7, op 0 (Sum) or 1 (Mean)]");
                return CUBE__DISPATCH_DONE;
        }
        /* Before any buffer is touched. */
        if ((e = cube__groups_no_transport(srv, (cube_collective) op)))
                goto refuse;
        if (srv->poison && (e = cube__poisoned(srv)))
                goto refuse;
        if (reduces && !srv->transport->reduces((int) dtype)) {
                e = cube__err_validation("%s: the %s transport does not reduce dtype %u",
                                         cube__collective_names[op], srv->transport->name, dtype);
                goto refuse;
        }
        if (has_src && (e = cube__name_resolve(s, &src, &sn, &s_start, &s_end)))
                goto refuse;
        if (has_dst && (e = cube__name_resolve(s, &dst, &dn, &d_start, &d_end)))
                goto refuse;
        if (dn && dn->read_only) {
                e = cube__err_validation("%s would write memory %" PRIu64 ", a read-only import",
                                         cube__collective_names[op], dn->id);
                goto refuse;
        }
        if ((e = cube__group_find_for(k, op, &k->p[1], &k->p[5], &g, &peer)))
                goto refuse;
        sb = s_end - s_start;
        db = d_end - d_start;
        switch (op) {
        case CUBE_COLLECTIVE_ALL_REDUCE:
        case CUBE_COLLECTIVE_ALL_TO_ALL:
                if (!has_src || !has_dst)
                        e = cube__err_validation("%s needs a source and a destination",
                                                 cube__collective_names[op]);
                else
                        e = expect_size("destination", db, sb);
                if (!e && reduces && sb % dtype_size(dtype))
                        e = cube__err_validation("all_reduce: %" PRIu64 " bytes are not whole "
                                                 "elements of %zu bytes", sb, dtype_size(dtype));
                if (!e && op == CUBE_COLLECTIVE_ALL_TO_ALL && sb % g->size)
                        e = cube__err_validation("all_to_all: %" PRIu64 " bytes do not split "
                                                 "into %u chunks", sb, g->size);
                break;
        case CUBE_COLLECTIVE_ALL_GATHER:
                e = !has_src || !has_dst ? cube__err_validation("all_gather needs a source and "
                                                                "a destination") :
                    expect_size("destination", db, sb * g->size);
                break;
        case CUBE_COLLECTIVE_REDUCE_SCATTER:
                e = !has_src || !has_dst ? cube__err_validation("reduce_scatter needs a source "
                                                                "and a destination") :
                    expect_size("source", sb, db * g->size);
                if (!e && db % dtype_size(dtype))
                        e = cube__err_validation("reduce_scatter: %" PRIu64 " bytes are not whole "
                                                 "elements of %zu bytes", db, dtype_size(dtype));
                break;
        case CUBE_COLLECTIVE_BROADCAST:
                if (!has_dst)
                        e = cube__err_validation("broadcast needs a destination");
                else if ((peer == g->rank) != has_src)
                        e = cube__err_validation("broadcast: only the root has a source");
                else if (has_src)
                        e = expect_size("destination", db, sb);
                break;
        case CUBE_COLLECTIVE_SEND:
                if (!has_src || has_dst)
                        e = cube__err_validation("send takes a source and no destination");
                break;
        case CUBE_COLLECTIVE_RECV:
                if (has_src || !has_dst)
                        e = cube__err_validation("recv takes a destination and no source");
                break;
        }
        if (e)
                goto refuse;
        st = cube__stream_get(s, wait ? stream : COMM_STREAM, &e);
        if (!st)
                goto refuse;
        if (has_src && (e = cube__await_handles(s, &src, 1, &awaits)))
                goto refuse;
        j = calloc(1, sizeof(*j));
        o = j ? cube__op_new(s, st, CUBE__WORK_FENCE, (has_src ? 1 : 0) + (has_dst ? 1 : 0), 0,
                             NULL) : NULL;
        if (o && has_dst && dn->alloc->storage && !(o->writer = cube__writer_new())) {
                free(o);
                o = NULL;
        }
        if (!o) {
                free(j);
                e = cube__err_generic("out of host memory queueing %s", cube__collective_names[op]);
                goto refuse;
        }
        j->kind = JOB_RUN;
        j->op = o;
        j->group = g;
        j->collective = op;
        j->coll = (cube__coll) {
                .op = op, .dtype = (int) dtype, .mean = mean == 1, .src_bytes = sb,
                .dst_bytes = db, .root = peer,
        };
        /* Placeholders until start: start/end name the buffers' offsets. */
        j->coll.src = has_src ? (void *) 1 : NULL;
        j->coll.dst = has_dst ? (void *) 1 : NULL;
        o->start = s_start;
        o->end = d_start;
        o->host_run = cube__collective_start;
        o->host_done = cube__collective_done;
        o->host_ctx = j;
        g->jobs++;
        o->awaits = awaits;
        awaits = (cube__awaits) {0};
        if (has_src)
                cube__op_use(o, sn->alloc, false);
        if (has_dst) {
                o->alloc = dn->alloc;
                cube__op_use(o, dn->alloc, true);
                if (o->writer)
                        cube__claims_pending(&srv->failures, &dn->alloc->claims, d_start, d_end,
                                             o->writer);
        }
        cube__op_enqueue(o);
        cube__reply_ok_nil(k);
        return CUBE__DISPATCH_DONE;
refuse:
        cube__awaits_release(&srv->failures, &awaits);
        cube__reply_owned_error(k, e);
        return CUBE__DISPATCH_DONE;
}

/* sync_collective: [stream]. Answered once every collective queued before
 * it with ComputeWait::AtSync has finished. */
cube__dispatched cube__do_sync_collective(cube__msg *k)
{
        cube__session *s = k->session;
        uint64_t stream;
        cube__stream *st;
        cube_error *e = NULL;
        cube__pending_reply *r;

        if (k->n != 1 || !cube__obj_u64(&k->p[0], &stream)) {
                cube__reply_malformed(k, "params must be [stream]");
                return CUBE__DISPATCH_DONE;
        }
        if ((e = cube__groups_no_transport(k->server, CUBE_COLLECTIVE_SYNC_COLLECTIVE))) {
                cube__reply_owned_error(k, e);
                return CUBE__DISPATCH_DONE;
        }
        st = cube__idmap_get(&s->streams, COMM_STREAM);
        if (!st || !st->pending) {
                cube__reply_ok_nil(k);
                return CUBE__DISPATCH_DONE;
        }
        if (!(r = cube__pending_new(s, k->env->msgid))) {
                cube__reply_owned_error(k, NULL);
                return CUBE__DISPATCH_DONE;
        }
        cube__submit(s, st, NULL, CUBE__WORK_FENCE, 0, NULL, 0, NULL, r);
        cube__pending_arm(r);
        return CUBE__DISPATCH_DONE;
}

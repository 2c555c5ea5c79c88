/*
 * session.c - one client connection's namespace: its memory, its streams,
 * and what it has used.
 *
 * A session outlives its connection while device work of it is in flight:
 * the device may still be copying into its memory. Once the connection is
 * gone and the work has drained, everything the session held is reclaimed.
 */
#include <inttypes.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "requests.h"

cube__session *cube__session_new(cube__server *srv, cube__conn *conn, pid_t pid, uid_t uid,
                                 gid_t gid)
{
        cube__session *s = calloc(1, sizeof(*s));

        if (!s)
                return NULL;
        s->id = ++srv->next_session_id;
        s->server = srv;
        s->conn = conn;
        s->pid = pid;
        s->uid = uid;
        s->gid = gid;
        s->opened_ns = uv_hrtime();
        s->next = srv->sessions;
        if (srv->sessions)
                srv->sessions->prev = s;
        srv->sessions = s;
        srv->n_sessions++;
        cube__share_attach(s);
        cube__uid *u = cube__uid_get(&srv->users, uid);
        if (u)
                u->sessions++;
        cube__log_session(CUBE__LOG_INFO, s, 0, "session %" PRIu64 " opened (pid %d, uid %u)", s->id,
                  (int) pid, (unsigned) uid);
        return s;
}

/* The session's line in cubectl history. */
static void remember(cube__server *srv, const cube__session *s)
{
        cube__ended e = {
                .id = s->id, .pid = s->pid, .uid = s->uid, .launches = s->launches,
                .bytes_in = s->bytes_in, .bytes_out = s->bytes_out, .errors = s->errors,
                .memory_peak = s->memory_peak,
                .opened_s = (double) (s->opened_ns - srv->history.started_ns) / 1e9,
                .duration_s = (double) (uv_hrtime() - s->opened_ns) / 1e9,
        };

        memcpy(e.name, s->name, sizeof(e.name));
        cube__history_session(&srv->history, &e);
}

void cube__session_detach(cube__session *s)
{
        s->conn = NULL;
        cube__groups_session_detach(s);
        cube__session_maybe_free(s);
}

static void free_name(uint64_t key, void *value, void *ctx)
{
        cube__name_free(value);
}

static void unref_kernel(uint64_t key, void *value, void *ctx)
{
        cube__kernel_unref(value);
}

static void free_region(uint64_t key, void *value, void *ctx)
{
        cube__region_free(value);
}

static void close_stream(uint64_t key, void *value, void *ctx)
{
        cube__session *s = ctx;
        cube__stream *st = value;

        cube__pools_close(st->memory);
        s->server->driver->stream_close(s->server->device, st->device);
        free(st);
}

void cube__session_maybe_free(cube__session *s)
{
        cube__server *srv = s->server;
        cube__idmap memory;

        if (s->conn || s->inflight > 0)
                return;
        cube__groups_session_free(s);

        /* cube__name_free removes entries from the map it is called for, so
         * walk a moved-out copy. */
        memory = s->memory;
        s->memory = (cube__idmap) {0};
        cube__idmap_foreach(&memory, free_name, NULL);
        cube__idmap_free(&memory);
        cube__idmap_free(&s->memory);
        /* What graphs retained goes with them, before the pools it is on. */
        cube__profile_session_free(s);
        cube__graphs_session_free(s);
        cube__idmap_foreach(&s->streams, close_stream, s);
        cube__idmap_free(&s->streams);
        /* After the graphs and the work: nothing of the session runs its
         * kernels any more. An entry no other session holds goes now. */
        cube__kernels_held(&srv->users, s->uid, -(int64_t) s->kernels.len,
                           -(int64_t) s->kernel_source_bytes);
        cube__idmap_foreach(&s->kernels, unref_kernel, NULL);
        cube__idmap_free(&s->kernels);
        memory = s->regions;
        s->regions = (cube__idmap) {0};
        cube__idmap_foreach(&memory, free_region, NULL);
        cube__idmap_free(&memory);
        free(s->queued);
        cube_error_free(s->count_error);

        cube__share_detach(s);
        cube__uid *u = cube__idmap_get(&srv->users.uids, s->uid);
        if (u)
                u->sessions--;
        if (s->prev)
                s->prev->next = s->next;
        else
                srv->sessions = s->next;
        if (s->next)
                s->next->prev = s->prev;
        srv->n_sessions--;
        /* Bulk payloads and half-received messages are served from the
         * heap and kept there when freed (main.c's M_TRIM_THRESHOLD): once
         * no session is left, the heap goes back to the host. */
        if (!srv->sessions)
                malloc_trim(0);
        srv->stats.launches += s->launches;
        srv->stats.bytes_in += s->bytes_in;
        srv->stats.bytes_out += s->bytes_out;
        srv->stats.errors += s->errors;
        /* At notice: what a session did and how it ended is the first thing
         * a post-mortem asks for. */
        if (s->greeted)
                cube__log_id(CUBE__MSG_SESSION_END, CUBE__LOG_NOTICE, s, "session %" PRIu64
                             " (pid %d, uid %u, '%s') closed after %.1f s: %" PRIu64 " launches, %"
                             PRIu64 " bytes in, %" PRIu64 " out, peak memory %" PRIu64 " bytes, %"
                             PRIu64 " error(s)", s->id, (int) s->pid, (unsigned) s->uid, s->name,
                             (double) (uv_hrtime() - s->opened_ns) / 1e9, s->launches,
                             s->bytes_in, s->bytes_out, s->memory_peak, s->errors);
        else
                cube__log_session(CUBE__LOG_INFO, s, 0, "session %" PRIu64 " (pid %d, uid %u) "
                                  "closed before hello", s->id, (int) s->pid, (unsigned) s->uid);
        if (s->greeted)
                remember(srv, s);
        free(s);
        cube__server_check_stopped(srv);
}

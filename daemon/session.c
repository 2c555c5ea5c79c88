/*
 * session.c - one client connection's namespace: its memory, its streams,
 * and what it has used.
 *
 * A session outlives its connection while device work of it is in flight:
 * the device may still be copying into its memory. Once the connection is
 * gone and the work has drained, everything the session held is reclaimed.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "cubed.h"

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
        s->next = srv->sessions;
        if (srv->sessions)
                srv->sessions->prev = s;
        srv->sessions = s;
        srv->n_sessions++;
        cube__uid *u = cube__uid_get(srv, uid);
        if (u)
                u->sessions++;
        cube__log_session(CUBE__LOG_INFO, s, 0, "session %" PRIu64 " opened (pid %d, uid %u)", s->id,
                  (int) pid, (unsigned) uid);
        return s;
}

void cube__session_detach(cube__session *s)
{
        s->conn = NULL;
        cube__session_maybe_free(s);
}

static void free_name(uint64_t key, void *value, void *ctx)
{
        cube__name_free(value);
}

static void free_region(uint64_t key, void *value, void *ctx)
{
        cube__region_free(value);
}

static void close_stream(uint64_t key, void *value, void *ctx)
{
        cube__session *s = ctx;
        cube__stream *st = value;

        cube__memory_close(st->memory);
        s->server->driver->stream_close(s->server->device, st->device);
        free(st);
}

void cube__session_maybe_free(cube__session *s)
{
        cube__server *srv = s->server;
        cube__idmap memory;

        if (s->conn || s->inflight > 0)
                return;

        /* cube__name_free removes entries from the map it is called for, so
         * walk a moved-out copy. */
        memory = s->memory;
        s->memory = (cube__idmap) {0};
        cube__idmap_foreach(&memory, free_name, NULL);
        cube__idmap_free(&memory);
        cube__idmap_free(&s->memory);
        cube__idmap_foreach(&s->streams, close_stream, s);
        cube__idmap_free(&s->streams);
        cube__idmap_free(&s->kernels);  /* the cache keeps the entries */
        memory = s->regions;
        s->regions = (cube__idmap) {0};
        cube__idmap_foreach(&memory, free_region, NULL);
        cube__idmap_free(&memory);
        free(s->queued);
        cube_error_free(s->count_error);

        if (srv->rr == s)
                srv->rr = s->next;
        cube__uid *u = cube__idmap_get(&srv->uids, s->uid);
        if (u)
                u->sessions--;
        if (s->prev)
                s->prev->next = s->next;
        else
                srv->sessions = s->next;
        if (s->next)
                s->next->prev = s->prev;
        srv->n_sessions--;
        srv->stats.launches += s->launches;
        srv->stats.bytes_in += s->bytes_in;
        srv->stats.bytes_out += s->bytes_out;
        srv->stats.errors += s->errors;
        cube__log_session(CUBE__LOG_INFO, s, 0, "session %" PRIu64 " closed (pid %d): peak memory %" PRIu64
                  " bytes, %" PRIu64 " bytes in, %" PRIu64 " out", s->id, (int) s->pid,
                  s->memory_peak, s->bytes_in, s->bytes_out);
        free(s);
        cube__server_check_stopped(srv);
}

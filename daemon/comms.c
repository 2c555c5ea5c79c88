/*
 * comms.c - collectives between daemons: groups, their members, the
 * tainted-buffer rules and failure detection, over transports/transport.h.
 *
 * A group is a session's: comm_init over a sorted list of devices (on one
 * host, a device is a daemon instance such as cpu1, and the members meet
 * through a file in the comm directory that names rank 0's rendezvous
 * store), or over a group id one member minted (comm_mint; across hosts, the
 * caller's launcher hands the id to every rank). send/recv between two
 * devices use a group of their own (CommunicationId::transfers_between),
 * joined on first use. Each group has a worker thread that joins it and
 * runs its operations in the order they were queued, as members must.
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
 * member, its destination carries an error naming the lost member (its
 * daemon gone, or what the other members tell of how far they got:
 * progress.c), and the group refuses later work until a new comm_init.
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

#include "dispatch.h"
#include "transport.h"

#define GROUP_MAX CUBE__GROUP_MAX
#define COMM_STREAM UINT64_MAX          /* the session's collective stream (AtSync) */

enum { JOINING, READY, FAILED, CLOSED };
static const char *const state_names[] = { "joining", "ready", "failed", "closed" };
enum { JOB_JOIN, JOB_RUN, JOB_CLOSE };

typedef struct cube__group cube__group;

/* One piece of a group's work, handed to its thread. */
typedef struct job {
        int kind;
        cube__group *group;
        cube__op *op;                   /* completed through the server's queue */
        int collective;                 /* cube_collective, for reports */
        cube__coll coll;
        uint64_t status[GROUP_MAX];
        uint64_t refused;               /* this member's source failure, when it refused */
        uint64_t src_memory;
        bool finished, op_started;      /* a join: under the group's lock */
        int rc;
        char why[512];
        struct job *next;
} job;

/* A group id minted here: the listening socket rank 0 serves its store on. */
typedef struct cube__mint {
        uint64_t nonce;
        int fd;
        struct cube__mint *next;
} cube__mint;

struct cube__group {
        uint64_t id;
        cube__session *session;
        cube__server *server;
        uint32_t rank, size;
        char names[GROUP_MAX][CUBED_NAME_MAX]; /* by rank; from the engine for id groups */
        bool by_id, pair;
        int state;
        char why[512];
        /* Rendezvous. */
        int store_fd;                   /* rank 0 */
        char host[64];
        uint16_t port;
        uint64_t nonce;
        /* The thread's. */
        cube__comm *comm;
        cube__progress progress;        /* what progress.c tells the other members */
        char cards[GROUP_MAX][64];      /* where each member's daemon tells its own */
        uv_thread_t thread;
        uv_mutex_t lock;
        uv_cond_t cond;
        job *head, *tail;
        bool stop, started;
        unsigned jobs;                  /* loop thread: jobs whose op has not finished */
        /* Traffic. */
        uint64_t ops, bytes, refusals;
        struct cube__group *next;
};

static const char *const op_names[] = {
        "comm_init", "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all",
        "send", "recv", "sync_collective", "peer_access",
};

static uint64_t now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000 + (uint64_t) ts.tv_nsec / 1000000;
}

/* CommunicationId: one id for one sorted set of devices (FNV-1a over the
 * names), and another for the transfers between two of them. */
static uint64_t group_hash(char (*names)[CUBED_NAME_MAX], uint32_t n, bool transfers)
{
        uint64_t h = 0xcbf29ce484222325ull;

        for (uint32_t i = 0; i < n; i++)
                for (const char *p = names[i];; p++) {
                        h = (h ^ (uint8_t) *p) * 0x100000001b3ull;
                        if (!*p)
                                break;
                }
        if (transfers)
                for (const char *p = "transfers"; *p; p++)
                        h = (h ^ (uint8_t) *p) * 0x100000001b3ull;
        return h;
}

static int cmp_names(const void *a, const void *b)
{
        return strcmp(a, b);
}

/* ---- the group's thread -------------------------------------------------- */

/* Same-host rendezvous: the file in the comm directory naming rank 0's store. */
static void rendezvous_path(const cube__group *g, char *buf, size_t len)
{
        snprintf(buf, len, "%s/.cube-comm-%016" PRIx64, g->server->opts.comm_dir, g->id);
}

static bool can_connect(const char *host, uint16_t port)
{
        struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        bool ok;

        if (fd < 0)
                return false;
        ok = inet_pton(AF_INET, host, &sa.sin_addr) == 1 &&
             connect(fd, (struct sockaddr *) &sa, sizeof(sa)) == 0;
        close(fd);
        return ok;
}

/* Rank 0 publishes its store; the others wait for a file that names a live
 * one. A file left by a rank 0 that died names a store nobody serves. */
static int rendezvous(cube__group *g, uint64_t deadline, char *why, size_t len)
{
        char path[256], tmp[280];

        rendezvous_path(g, path, sizeof(path));
        if (g->rank == 0) {
                FILE *f;
                snprintf(g->host, sizeof(g->host), "%s", g->server->opts.comm_address);
                if (getrandom(&g->nonce, sizeof(g->nonce), 0) != sizeof(g->nonce))
                        g->nonce = now_ms() ^ (uint64_t) getpid() << 32;
                if ((g->store_fd = cube__listen_tcp(g->host, &g->port)) < 0) {
                        snprintf(why, len, "cannot listen on %s: %s", g->host, strerror(errno));
                        return -1;
                }
                snprintf(tmp, sizeof(tmp), "%s.%d", path, (int) getpid());
                if (!(f = fopen(tmp, "w"))) {
                        snprintf(why, len, "cannot write %s: %s", tmp, strerror(errno));
                        return -1;
                }
                fprintf(f, "%s %u %" PRIu64 "\n", g->host, g->port, g->nonce);
                if (fclose(f) != 0 || rename(tmp, path) < 0) {
                        snprintf(why, len, "cannot publish %s: %s", path, strerror(errno));
                        unlink(tmp);
                        return -1;
                }
                return 0;
        }
        while (now_ms() < deadline) {
                FILE *f = fopen(path, "r");
                unsigned port;
                if (f) {
                        int n = fscanf(f, "%63s %u %" SCNu64, g->host, &port, &g->nonce);
                        fclose(f);
                        g->port = (uint16_t) port;
                        if (n == 3 && can_connect(g->host, g->port))
                                return 0;
                }
                usleep(10000);
        }
        snprintf(why, len, "%s (rank 0) did not open the group within the collective timeout "
                 "of %u ms", g->names[0], g->server->opts.collective_timeout_ms);
        return -1;
}

static void do_join(cube__group *g, job *j)
{
        cube__server *srv = g->server;
        uint32_t timeout = srv->opts.collective_timeout_ms;
        char path[256];
        cube__comm_setup setup = {
                .rank = g->rank, .size = g->size, .address = srv->opts.comm_address,
                .name = srv->instance, .timeout_ms = timeout,
        };

        j->rc = 0;
        if (!g->by_id && rendezvous(g, now_ms() + timeout, j->why, sizeof(j->why)) < 0) {
                j->rc = -1;
                return;
        }
        setup.store_fd = g->store_fd;
        setup.store_host = g->host;
        setup.store_port = g->port;
        setup.nonce = g->nonce;
        setup.card = cube__progress_card(srv->progress);
        j->rc = srv->transport->join(&setup, &g->comm, j->why, sizeof(j->why));
        if (g->rank == 0) {
                if (!g->by_id) {
                        rendezvous_path(g, path, sizeof(path));
                        unlink(path);
                }
                if (g->store_fd >= 0)
                        close(g->store_fd);
                g->store_fd = -1;
        }
        if (j->rc != 0)
                return;
        for (uint32_t r = 0; r < g->size; r++) {
                snprintf(g->names[r], sizeof(g->names[r]), "%s",
                         srv->transport->member(g->comm, r));
                snprintf(g->cards[r], sizeof(g->cards[r]), "%s",
                         srv->transport->member_card(g->comm, r));
        }
        g->progress.group = g->id;
        g->progress.nonce = g->nonce;
        g->progress.rank = g->rank;
        cube__progress_add(srv->progress, &g->progress);
}

/* Whether member's daemon still answers on its socket (same-host groups). */
static bool daemon_alive(const cube__group *g, uint32_t r)
{
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        bool ok;

        snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s.sock", g->server->opts.comm_dir,
                 g->names[r]);
        ok = fd >= 0 && connect(fd, (struct sockaddr *) &sa, sizeof(sa)) == 0;
        if (fd >= 0)
                close(fd);
        return ok;
}

/* Names the member a transport error lost: one whose daemon is gone, else
 * those that never started the operation, do not answer or left the group
 * (progress.c), else the only other member, else what the engine said. */
static size_t name_silent(cube__group *g, char *buf, size_t len)
{
        const char *cards[GROUP_MAX];

        for (uint32_t r = 0; r < g->size; r++)
                cards[r] = g->cards[r][0] ? g->cards[r] : NULL;
        return cube__progress_name_silent(&g->progress, g->size, cards, g->names, buf, len);
}

static void name_lost(cube__group *g, job *j)
{
        char engine[512];
        size_t used = 0;

        snprintf(engine, sizeof(engine), "%s", j->why);
        j->why[0] = '\0';
        for (uint32_t r = 0; !g->by_id && r < g->size; r++)
                if (r != g->rank && !daemon_alive(g, r))
                        used += (size_t) snprintf(j->why + used, sizeof(j->why) - used,
                                                  "%smember %s (rank %u) is lost: its daemon is "
                                                  "gone", used ? "; " : "", g->names[r], r);
        if (!used)
                used = name_silent(g, j->why, sizeof(j->why));
        if (!used && g->size == 2)
                used = (size_t) snprintf(j->why, sizeof(j->why), "member %s (rank %u) is lost",
                                         g->names[1 - g->rank], 1 - g->rank);
        if (!used)
                used = (size_t) snprintf(j->why, sizeof(j->why), "a member is lost");
        if (used < sizeof(j->why))
                snprintf(j->why + used, sizeof(j->why) - used, " (%.400s)", engine);
}

static void do_run(cube__group *g, job *j)
{
        if (!g->comm) {
                j->rc = -1;
                snprintf(j->why, sizeof(j->why), "the group was never joined");
                return;
        }
        j->coll.status = j->status;
        atomic_fetch_add(&g->progress.started, 1);
        j->rc = g->server->transport->run(g->comm, &j->coll, j->why, sizeof(j->why));
        if (j->rc < 0)
                name_lost(g, j);
}

static void group_thread(void *arg)
{
        cube__group *g = arg;

        for (;;) {
                job *j;
                uv_mutex_lock(&g->lock);
                while (!g->head && !g->stop)
                        uv_cond_wait(&g->cond, &g->lock);
                j = g->head;
                if (j && !(g->head = j->next))
                        g->tail = NULL;
                uv_mutex_unlock(&g->lock);
                if (!j)
                        break;
                if (j->kind == JOB_JOIN)
                        do_join(g, j);
                else if (j->kind == JOB_RUN)
                        do_run(g, j);
                if (j->kind == JOB_CLOSE || (j->rc < 0 && j->kind == JOB_RUN)) {
                        /* Tearing the communicator down is what tells the
                         * other members now rather than at their timeout;
                         * a member that closes says it has left first, so
                         * the others that ask then hear it. */
                        if (j->kind == JOB_CLOSE)
                                cube__progress_remove(g->server->progress, &g->progress);
                        if (g->comm) {
                                g->server->transport->close(g->comm);
                                g->comm = NULL;
                        }
                }
                if (j->kind == JOB_JOIN) {
                        /* Its op may not have reached its place yet. */
                        bool go;
                        uv_mutex_lock(&g->lock);
                        j->finished = true;
                        go = j->op_started;
                        uv_mutex_unlock(&g->lock);
                        if (go)
                                cube__server_complete(g->server, &j->op->work);
                } else if (j->op) {
                        cube__server_complete(g->server, &j->op->work);
                } else {
                        free(j);
                }
        }
        if (g->comm)
                g->server->transport->close(g->comm);
        g->comm = NULL;
}

static void group_push(cube__group *g, job *j)
{
        j->group = g;
        uv_mutex_lock(&g->lock);
        if (g->tail)
                g->tail->next = j;
        else
                g->head = j;
        g->tail = j;
        uv_cond_signal(&g->cond);
        uv_mutex_unlock(&g->lock);
}

static void group_free(cube__group *g)
{
        if (g->started) {
                uv_mutex_lock(&g->lock);
                g->stop = true;
                uv_cond_signal(&g->cond);
                uv_mutex_unlock(&g->lock);
                uv_thread_join(&g->thread);
        }
        if (g->store_fd >= 0)
                close(g->store_fd);
        cube__progress_remove(g->server->progress, &g->progress);
        uv_mutex_destroy(&g->lock);
        uv_cond_destroy(&g->cond);
        free(g);
}

static cube__group *group_new(cube__session *s, uint64_t id)
{
        cube__group *g = calloc(1, sizeof(*g));

        if (!g)
                return NULL;
        g->id = id;
        g->session = s;
        g->server = s->server;
        g->store_fd = -1;
        uv_mutex_init(&g->lock);
        uv_cond_init(&g->cond);
        if (uv_thread_create(&g->thread, group_thread, g) != 0) {
                uv_mutex_destroy(&g->lock);
                uv_cond_destroy(&g->cond);
                free(g);
                return NULL;
        }
        g->started = true;
        g->next = s->groups;
        s->groups = g;
        s->n_groups++;
        return g;
}

static void group_unlink(cube__session *s, cube__group *g)
{
        for (cube__group **p = &s->groups; *p; p = &(*p)->next)
                if (*p == g) {
                        *p = g->next;
                        s->n_groups--;
                        return;
                }
}

static cube__group *group_find(cube__session *s, uint64_t id)
{
        for (cube__group *g = s->groups; g; g = g->next)
                if (g->id == id && g->state != CLOSED)
                        return g;
        return NULL;
}

/* ---- host ops: starting on the loop, finishing on the loop --------------- */

static void job_done(cube__op *o)
{
        job *j = o->host_ctx;
        cube__group *g = j->group;
        cube__session *s = o->session;
        cube__failures *fs = &s->server->failures;
        const char *op = op_names[j->collective];

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
static void job_start(cube__op *o)
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
                        cube__server_complete(srv, &o->work);
                return;
        }
        if (j->kind == JOB_RUN) {
                if (g->state != READY && g->state != JOINING) {
                        j->rc = -1;
                        snprintf(j->why, sizeof(j->why), "the group is %s: %.400s",
                                 state_names[g->state], g->why);
                        cube__server_complete(srv, &o->work);
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
        group_push(g, j);
}

/* ---- requests ------------------------------------------------------------- */

static cube_error *no_transport(cube__server *srv, cube_collective op)
{
        return srv->transport ? NULL : cube__err_no_device_transport(op);
}

/* Reads [name, ...] into names, sorted. */
static cube_error *read_devices(const msgpack_object *o, char (*names)[CUBED_NAME_MAX],
                                uint32_t *ret_n)
{
        if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size == 0 ||
            o->via.array.size > GROUP_MAX)
                return cube__err_validation("a group is a list of 1 to %d device names",
                                            GROUP_MAX);
        for (uint32_t i = 0; i < o->via.array.size; i++)
                if (!cube__obj_str(&o->via.array.ptr[i], names[i], CUBED_NAME_MAX) || !*names[i])
                        return cube__err_validation("a device name is a string of 1 to %d bytes",
                                                    CUBED_NAME_MAX - 1);
        qsort(names, o->via.array.size, CUBED_NAME_MAX, cmp_names);
        for (uint32_t i = 1; i < o->via.array.size; i++)
                if (strcmp(names[i], names[i - 1]) == 0)
                        return cube__err_validation("device %s is named twice", names[i]);
        *ret_n = o->via.array.size;
        return NULL;
}

/* An id minted by comm_mint: "gloo:HOST:PORT:NONCE". */
static bool parse_id(const char *id, char *host, size_t host_len, uint16_t *port,
                     uint64_t *nonce)
{
        unsigned p;
        char h[64];

        if (sscanf(id, "gloo:%63[^:]:%u:%" SCNx64, h, &p, nonce) != 3 || p == 0 || p > 65535)
                return false;
        snprintf(host, host_len, "%s", h);
        *port = (uint16_t) p;
        return true;
}

/* Starts joining g: a host op on the session's collective stream, answered
 * once the group is formed or failed. */
static void start_join(cube__msg *k, cube__group *g, cube__pending_reply *r)
{
        cube__session *s = k->session;
        cube_error *e = NULL;
        cube__stream *st = cube__stream_get(s, COMM_STREAM, &e);
        job *j = calloc(1, sizeof(*j));
        cube__op *o = st && j ? cube__op_new(s, st, CUBE__WORK_FENCE, 0, 0, NULL) : NULL;

        if (!o) {
                free(j);
                g->state = FAILED;
                snprintf(g->why, sizeof(g->why), "out of host memory");
                if (r) {
                        r->error = e ? e : cube__err_generic("out of host memory joining a group");
                        cube__pending_arm(r);
                } else {
                        cube_error_free(e);
                }
                return;
        }
        j->kind = JOB_JOIN;
        j->op = o;
        j->collective = CUBE_COLLECTIVE_COMM_INIT;
        o->host_run = job_start;
        o->host_done = job_done;
        o->host_ctx = j;
        o->reply = r;
        /* To the thread now, so the group's operations queued after it, on
         * any stream, run after it. */
        g->jobs++;
        group_push(g, j);
        cube__op_enqueue(o);
        if (r)
                cube__pending_arm(r);
}

static bool member_of(cube__server *srv, char (*names)[CUBED_NAME_MAX], uint32_t n,
                      uint32_t *ret_rank)
{
        for (uint32_t i = 0; i < n; i++)
                if (strcmp(names[i], srv->instance) == 0) {
                        *ret_rank = i;
                        return true;
                }
        return false;
}

/* Replaces a group that failed or was never joined; refuses one in use. */
static cube_error *make_room(cube__session *s, uint64_t id)
{
        cube__group *old = group_find(s, id);

        if (old && old->state == JOINING)
                return cube__err_validation("group %016" PRIx64 " is being joined already", id);
        if (old) {
                job *j = calloc(1, sizeof(*j));
                old->state = CLOSED;
                snprintf(old->why, sizeof(old->why), "replaced by a new comm_init");
                if (j) {
                        j->kind = JOB_CLOSE;
                        group_push(old, j);
                }
        }
        if (s->n_groups >= s->server->opts.max_groups) {
                /* Closed groups go first. */
                for (cube__group **p = &s->groups; *p;) {
                        cube__group *g = *p;
                        if (g->state == CLOSED && !g->jobs) {
                                *p = g->next;
                                s->n_groups--;
                                group_free(g);
                        } else {
                                p = &g->next;
                        }
                }
        }
        if (s->n_groups >= s->server->opts.max_groups)
                return cube__err_validation("a session may hold at most %u groups (max-groups)",
                                            s->server->opts.max_groups);
        return NULL;
}

/* comm_init: [[device, ...]] or [id, rank, size]. Answered once joined. */
cube__dispatched cube__do_comm_init(cube__msg *k)
{
        cube__session *s = k->session;
        cube__server *srv = k->server;
        char names[GROUP_MAX][CUBED_NAME_MAX], id_text[128];
        uint32_t n = 0, rank = 0, size = 0;
        uint64_t id, nonce = 0;
        char host[64];
        uint16_t port = 0;
        cube_error *e;
        cube__group *g;
        cube__pending_reply *r;
        bool by_id = k->n == 3;

        if (!(k->n == 1 || (by_id && cube__obj_str(&k->p[0], id_text, sizeof(id_text)) &&
                            cube__obj_u32(&k->p[1], &rank) && cube__obj_u32(&k->p[2], &size)))) {
                cube__malformed(k, "params must be [[device, ...]] or [id, rank, size]");
                return CUBE__DISPATCH_DONE;
        }
        if ((e = no_transport(srv, CUBE_COLLECTIVE_COMM_INIT))) {
                cube__reply_owned_error(k, e);
                return CUBE__DISPATCH_DONE;
        }
        if (by_id) {
                if (!parse_id(id_text, host, sizeof(host), &port, &nonce))
                        e = cube__err_validation("'%s' is not a group id from comm_mint", id_text);
                else if (size == 0 || size > GROUP_MAX || rank >= size)
                        e = cube__err_validation("rank %u of %u: a group has 1 to %d members, "
                                                 "ranked from 0", rank, size, GROUP_MAX);
                id = nonce;
        } else if (!(e = read_devices(&k->p[0], names, &n)) && !member_of(srv, names, n, &rank)) {
                e = cube__err_validation("this device %s is not among the %u devices of the group",
                                         srv->instance, n);
        }
        if (!e && !by_id)
                id = group_hash(names, n, false);
        if (!e)
                e = make_room(s, id);
        if (e) {
                cube__reply_owned_error(k, e);
                return CUBE__DISPATCH_DONE;
        }
        r = cube__pending_new(s, k->env->msgid);
        g = r ? group_new(s, id) : NULL;
        if (!g) {
                if (r) {
                        r->error = cube__err_generic("out of host memory creating a group");
                        cube__pending_arm(r);
                } else {
                        cube__reply_owned_error(k, NULL);
                }
                return CUBE__DISPATCH_DONE;
        }
        g->rank = rank;
        g->size = by_id ? size : n;
        g->by_id = by_id;
        if (!by_id)
                memcpy(g->names, names, sizeof(names[0]) * n);
        if (by_id && rank == 0) {
                /* Rank 0 is the member that minted the id: it serves the store. */
                for (cube__mint **p = &srv->mints; *p; p = &(*p)->next)
                        if ((*p)->nonce == nonce) {
                                cube__mint *m = *p;
                                *p = m->next;
                                g->store_fd = m->fd;
                                free(m);
                                break;
                        }
                if (g->store_fd < 0) {
                        g->state = FAILED;
                        snprintf(g->why, sizeof(g->why), "not minted here");
                        r->error = cube__err_validation("rank 0 must be the member whose daemon "
                                                        "minted the group id");
                        cube__pending_arm(r);
                        return CUBE__DISPATCH_DONE;
                }
        }
        snprintf(g->host, sizeof(g->host), "%s", host);
        g->port = port;
        g->nonce = nonce;
        start_join(k, g, r);
        return CUBE__DISPATCH_DONE;
}

/* comm_mint: []. A group id for comm_init [id, rank, size]; this daemon is
 * rank 0, serving the group's rendezvous on its comm-address. */
cube__dispatched cube__do_comm_mint(cube__msg *k)
{
        cube__server *srv = k->server;
        cube__mint *m;
        uint16_t port;
        char id[128];
        msgpack_sbuffer sb;
        msgpack_packer pk;
        cube_error *e = no_transport(srv, CUBE_COLLECTIVE_COMM_INIT);

        if (!e && !(m = calloc(1, sizeof(*m))))
                e = cube__err_generic("out of host memory");
        if (!e && (m->fd = cube__listen_tcp(srv->opts.comm_address, &port)) < 0) {
                e = cube__err_generic("cannot listen on %s: %s", srv->opts.comm_address,
                                      strerror(errno));
                free(m);
        }
        if (e) {
                cube__reply_owned_error(k, e);
                return CUBE__DISPATCH_DONE;
        }
        if (getrandom(&m->nonce, sizeof(m->nonce), 0) != sizeof(m->nonce))
                m->nonce = now_ms() * 0x9e3779b97f4a7c15ull;
        m->next = srv->mints;
        srv->mints = m;
        snprintf(id, sizeof(id), "gloo:%s:%u:%016" PRIx64, srv->opts.comm_address, port, m->nonce);
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (cube__pack_response_ok(&pk, k->env->msgid) == 0 && cube__pack_str(&pk, id) == 0)
                cube__reply_sbuffer(k->session, &sb);
        msgpack_sbuffer_destroy(&sb);
        return CUBE__DISPATCH_DONE;
}

static int collective_of(const cube__envelope *env)
{
        for (int i = CUBE_COLLECTIVE_ALL_REDUCE; i <= CUBE_COLLECTIVE_RECV; i++)
                if (cube__method_is(env, op_names[i]))
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

/* The group a collective names: [device, ...] (joined by comm_init), an id
 * (comm_init [id, rank, size]), or, for send and recv, nil: the transfers
 * group of this device and the peer, joined on first use. */
static cube_error *find_group(cube__msg *k, int op, const msgpack_object *go,
                              const msgpack_object *peer, cube__group **ret, uint32_t *ret_peer)
{
        cube__session *s = k->session;
        cube__server *srv = k->server;
        char names[GROUP_MAX][CUBED_NAME_MAX], text[128], host[64];
        uint32_t n, rank = 0;
        uint64_t id, nonce;
        uint16_t port;
        cube_error *e;
        cube__group *g;
        bool p2p = op == CUBE_COLLECTIVE_SEND || op == CUBE_COLLECTIVE_RECV;

        *ret_peer = 0;
        if (go->type == MSGPACK_OBJECT_NIL && p2p) {
                if (!cube__obj_str(peer, names[0], CUBED_NAME_MAX))
                        return cube__err_validation("%s without a group names its peer device",
                                                    op_names[op]);
                snprintf(names[1], CUBED_NAME_MAX, "%s", srv->instance);
                if (strcmp(names[0], names[1]) == 0)
                        return cube__err_validation("%s: the peer is this device", op_names[op]);
                qsort(names, 2, CUBED_NAME_MAX, cmp_names);
                id = group_hash(names, 2, true);
                member_of(srv, names, 2, &rank);
                *ret_peer = 1 - rank;
                if ((g = group_find(s, id)) && g->state != FAILED) {
                        *ret = g;
                        return NULL;
                }
                if ((e = make_room(s, id)))
                        return e;
                if (!(g = group_new(s, id)))
                        return cube__err_generic("out of host memory creating a group");
                g->rank = rank;
                g->size = 2;
                g->pair = true;
                memcpy(g->names, names, sizeof(names[0]) * 2);
                start_join(k, g, NULL);
                *ret = g;
                return NULL;
        }
        if (go->type == MSGPACK_OBJECT_STR && cube__obj_str(go, text, sizeof(text)) &&
            parse_id(text, host, sizeof(host), &port, &nonce)) {
                id = nonce;
        } else if ((e = read_devices(go, names, &n))) {
                return e;
        } else {
                id = group_hash(names, n, false);
        }
        if (!(g = group_find(s, id)))
                return cube__err_validation("%s: this session never ran comm_init for the group",
                                            op_names[op]);
        if (g->state == FAILED)
                return cube__err_generic("%s: the group failed (%s) and refuses later work until "
                                         "a new comm_init", op_names[op], g->why);
        if (op == CUBE_COLLECTIVE_BROADCAST || p2p) {
                /* The root, or the peer: a device name, or a rank. */
                uint32_t r;
                char name[CUBED_NAME_MAX];
                if (cube__obj_u32(peer, &r) && r < g->size) {
                        *ret_peer = r;
                } else if (cube__obj_str(peer, name, sizeof(name))) {
                        for (r = 0; r < g->size && strcmp(g->names[r], name) != 0; r++)
                                ;
                        if (r == g->size)
                                return cube__err_validation("%s: %s is not a member of the group",
                                                            op_names[op], name);
                        *ret_peer = r;
                } else {
                        return cube__err_validation("%s names its %s as a device or a rank",
                                                    op_names[op], p2p ? "peer" : "root");
                }
                if (p2p && *ret_peer == g->rank)
                        return cube__err_validation("%s: the peer is this device", op_names[op]);
        }
        *ret = g;
        return NULL;
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
                cube__malformed(k, "params must be [stream, group, src, dst, reduction, peer, "
                                "wait] with wait 0 (AtSync) or 1 (Now)");
                return CUBE__DISPATCH_DONE;
        }
        has_src = k->p[2].type != MSGPACK_OBJECT_NIL;
        has_dst = k->p[3].type != MSGPACK_OBJECT_NIL;
        if ((has_src && !cube__obj_handle(&k->p[2], &src)) ||
            (has_dst && !cube__obj_handle(&k->p[3], &dst))) {
                cube__malformed(k, "src and dst are handles or nil");
                return CUBE__DISPATCH_DONE;
        }
        if (reduces && (k->p[4].type != MSGPACK_OBJECT_ARRAY || k->p[4].via.array.size != 2 ||
                        !cube__obj_u32(&k->p[4].via.array.ptr[0], &dtype) ||
                        !cube__obj_u32(&k->p[4].via.array.ptr[1], &mean) || mean > 1 ||
                        dtype >= CUBE__DT_MAX)) {
                cube__malformed(k, "a reduction is [dtype 0..7, op 0 (Sum) or 1 (Mean)]");
                return CUBE__DISPATCH_DONE;
        }
        /* Before any buffer is touched. */
        if ((e = no_transport(srv, (cube_collective) op)))
                goto refuse;
        if (srv->poison && (e = cube__poisoned(srv)))
                goto refuse;
        if (reduces && !srv->transport->reduces((int) dtype)) {
                e = cube__err_validation("%s: the %s transport does not reduce dtype %u",
                                         op_names[op], srv->transport->name, dtype);
                goto refuse;
        }
        if (has_src && (e = cube__name_resolve(s, &src, &sn, &s_start, &s_end)))
                goto refuse;
        if (has_dst && (e = cube__name_resolve(s, &dst, &dn, &d_start, &d_end)))
                goto refuse;
        if (dn && dn->read_only) {
                e = cube__err_validation("%s would write memory %" PRIu64 ", a read-only import",
                                         op_names[op], dn->id);
                goto refuse;
        }
        if ((e = find_group(k, op, &k->p[1], &k->p[5], &g, &peer)))
                goto refuse;
        sb = s_end - s_start;
        db = d_end - d_start;
        switch (op) {
        case CUBE_COLLECTIVE_ALL_REDUCE:
        case CUBE_COLLECTIVE_ALL_TO_ALL:
                if (!has_src || !has_dst)
                        e = cube__err_validation("%s needs a source and a destination",
                                                 op_names[op]);
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
                e = cube__err_generic("out of host memory queueing %s", op_names[op]);
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
        o->host_run = job_start;
        o->host_done = job_done;
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
                cube__malformed(k, "params must be [stream]");
                return CUBE__DISPATCH_DONE;
        }
        if ((e = no_transport(k->server, CUBE_COLLECTIVE_SYNC_COLLECTIVE))) {
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

/* comms: []. Every session's groups, for cubectl comms. */
cube__dispatched cube__do_comms(cube__msg *k)
{
        uint32_t n = 0;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        int r = 0;

        for (cube__session *s = k->server->sessions; s; s = s->next)
                n += s->n_groups;
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        r |= cube__pack_response_ok(&pk, k->env->msgid);
        r |= msgpack_pack_array(&pk, n);
        for (cube__session *s = k->server->sessions; s; s = s->next)
                for (cube__group *g = s->groups; g; g = g->next) {
                        char id[17];
                        snprintf(id, sizeof(id), "%016" PRIx64, g->id);
                        r |= msgpack_pack_map(&pk, 10);
                        r |= cube__pack_kv_str(&pk, "id", id);
                        r |= cube__pack_kv_u64(&pk, "session", s->id);
                        r |= cube__pack_kv_str(&pk, "kind", g->by_id ? "id" : g->pair ?
                                               "transfers" : "devices");
                        r |= cube__pack_kv_u64(&pk, "rank", g->rank);
                        r |= cube__pack_str(&pk, "members");
                        r |= msgpack_pack_array(&pk, g->size);
                        for (uint32_t i = 0; i < g->size; i++)
                                r |= cube__pack_str(&pk, g->names[i][0] ? g->names[i] : "?");
                        r |= cube__pack_kv_str(&pk, "state", state_names[g->state]);
                        r |= cube__pack_kv_str(&pk, "why", g->why);
                        r |= cube__pack_kv_u64(&pk, "ops", g->ops);
                        r |= cube__pack_kv_u64(&pk, "bytes", g->bytes);
                        r |= cube__pack_kv_u64(&pk, "refusals", g->refusals);
                }
        if (r == 0)
                cube__reply_sbuffer(k->session, &sb);
        else
                cube__reply_owned_error(k, NULL);
        msgpack_sbuffer_destroy(&sb);
        return CUBE__DISPATCH_DONE;
}

/* ---- lifetime ------------------------------------------------------------- */

void cube__comms_init(cube__server *srv)
{
        const char *sock = srv->opts.socket_path, *slash = strrchr(sock, '/');
        const char *base = slash ? slash + 1 : sock;
        size_t len = strlen(base);

        srv->transport = srv->opts.transport && strcmp(srv->opts.transport, "none") == 0 ? NULL :
                         cube__transport_for(srv->driver->name);
        /* The instance is the socket's name without .sock (cpu0 for
         * /run/cube/cpu0.sock), else the backend and index. */
        if (len > 5 && strcmp(base + len - 5, ".sock") == 0 && len - 5 < CUBED_NAME_MAX)
                snprintf(srv->instance, sizeof(srv->instance), "%.*s", (int) (len - 5), base);
        else
                snprintf(srv->instance, sizeof(srv->instance), "%s%u", srv->driver->name,
                         srv->opts.device_index);
        if (!srv->opts.comm_dir)
                srv->opts.comm_dir = slash ? strndup(sock, (size_t) (slash - sock)) : strdup(".");
        if (!srv->opts.comm_address)
                srv->opts.comm_address = strdup("127.0.0.1");
        if (srv->transport && !srv->progress) {
                char why[256];
                if (!(srv->progress = cube__progress_start(srv->opts.comm_address, why,
                                                           sizeof(why))))
                        cube__log(CUBE__LOG_WARNING, "collectives: members will not be told how "
                                  "far this one has got, so a failed operation may not name "
                                  "the member it waited for: %s", why);
        }
        cube__log(CUBE__LOG_INFO, "collectives: %s as %s, meeting in %s, listening on %s",
                  srv->transport ? srv->transport->name : "none (NoDeviceTransport)",
                  srv->instance, srv->opts.comm_dir, srv->opts.comm_address);
}

void cube__comms_done(cube__server *srv)
{
        cube__progress_stop(srv->progress);
        srv->progress = NULL;
        while (srv->mints) {
                cube__mint *m = srv->mints;
                srv->mints = m->next;
                close(m->fd);
                free(m);
        }
}

void cube__comms_session_detach(cube__session *s)
{
        for (cube__group *g = s->groups; g; g = g->next) {
                job *j = calloc(1, sizeof(*j));
                g->state = CLOSED;
                snprintf(g->why, sizeof(g->why), "its session ended");
                if (j) {
                        j->kind = JOB_CLOSE;
                        group_push(g, j);
                }
        }
}

void cube__comms_session_free(cube__session *s)
{
        while (s->groups) {
                cube__group *g = s->groups;
                group_unlink(s, g);
                group_free(g);
        }
}

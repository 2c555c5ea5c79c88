/*
 * groups.c - collective groups between daemons: their members, their
 * worker threads, rendezvous and failure detection, over
 * transports/transport.h; the operations run on them in collectives.c.
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
 * A member whose operation fails names the member it waited for: one whose
 * daemon is gone, or what the other members tell of how far they got
 * (progress.c); the group then refuses later work until a new comm_init.
 * groups.c is 817 lines: the group's thread and its requests share the
 * group's lock discipline, which reads best in one place.
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

const char *const cube__group_state_names[] = { "joining", "ready", "failed", "closed" };
const char *const cube__collective_names[] = {
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
        while (now_ms() < deadline && !atomic_load(&g->server->groups_stopping)) {
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
        /* A join given up at a stop may end after the daemon's services. */
        uv_mutex_lock(&g->lock);
        if (!g->abandoned)
                cube__progress_add(srv->progress, &g->progress);
        uv_mutex_unlock(&g->lock);
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
                g->running = j;
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
                        cube__comm *comm;
                        if (j->kind == JOB_CLOSE)
                                cube__progress_remove(g->server->progress, &g->progress);
                        uv_mutex_lock(&g->lock);
                        comm = g->comm;
                        g->comm = NULL;
                        uv_mutex_unlock(&g->lock);
                        if (comm)
                                g->server->transport->close(comm);
                }
                if (j->kind == JOB_JOIN) {
                        /* Its op may not have reached its place yet. */
                        bool go, abandoned;
                        uv_mutex_lock(&g->lock);
                        j->finished = true;
                        go = j->op_started;
                        abandoned = j->abandoned;
                        g->running = NULL;
                        uv_mutex_unlock(&g->lock);
                        if (abandoned)
                                free(j);
                        else if (go)
                                cube__work_complete(g->server, &j->op->work);
                } else {
                        /* Done with before the loop may free it. */
                        uv_mutex_lock(&g->lock);
                        g->running = NULL;
                        uv_mutex_unlock(&g->lock);
                        if (j->op)
                                cube__work_complete(g->server, &j->op->work);
                        else
                                free(j);
                }
        }
        if (g->comm)
                g->server->transport->close(g->comm);
        g->comm = NULL;
}

void cube__group_push(cube__group *g, job *j)
{
        j->group = g;
        uv_mutex_lock(&g->lock);
        if (g->abandoned && !j->op) {
                /* A teardown after the stop gave the group up: nothing to do. */
                uv_mutex_unlock(&g->lock);
                free(j);
                return;
        }
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
                bool orphan;
                uv_mutex_lock(&g->lock);
                g->stop = true;
                uv_cond_signal(&g->cond);
                orphan = g->abandoned && g->running;
                uv_mutex_unlock(&g->lock);
                if (orphan) {
                        /* A join given up at a stop may wait its whole
                         * timeout: its thread is left to end with the
                         * process, and the group with it. */
                        g->server->orphan_threads++;
                        return;
                }
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

/* ---- requests ------------------------------------------------------------- */

cube_error *cube__groups_no_transport(cube__server *srv, cube_collective op)
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
        o->host_run = cube__collective_start;
        o->host_done = cube__collective_done;
        o->host_ctx = j;
        o->reply = r;
        /* To the thread now, so the group's operations queued after it, on
         * any stream, run after it. */
        g->jobs++;
        cube__group_push(g, j);
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
                        cube__group_push(old, j);
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
                cube__reply_malformed(k, "params must be [[device, ...]] or [id, rank, size]");
                return CUBE__DISPATCH_DONE;
        }
        if ((e = cube__groups_no_transport(srv, CUBE_COLLECTIVE_COMM_INIT))) {
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
        cube_error *e = cube__groups_no_transport(srv, CUBE_COLLECTIVE_COMM_INIT);

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

/* The group a collective names: [device, ...] (joined by comm_init), an id
 * (comm_init [id, rank, size]), or, for send and recv, nil: the transfers
 * group of this device and the peer, joined on first use. */
cube_error *cube__group_find_for(cube__msg *k, int op, const msgpack_object *go,
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
                                                    cube__collective_names[op]);
                snprintf(names[1], CUBED_NAME_MAX, "%s", srv->instance);
                if (strcmp(names[0], names[1]) == 0)
                        return cube__err_validation("%s: the peer is this device", cube__collective_names[op]);
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
                                            cube__collective_names[op]);
        if (g->state == FAILED)
                return cube__err_generic("%s: the group failed (%s) and refuses later work until "
                                         "a new comm_init", cube__collective_names[op], g->why);
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
                                                            cube__collective_names[op], name);
                        *ret_peer = r;
                } else {
                        return cube__err_validation("%s names its %s as a device or a rank",
                                                    cube__collective_names[op], p2p ? "peer" : "root");
                }
                if (p2p && *ret_peer == g->rank)
                        return cube__err_validation("%s: the peer is this device", cube__collective_names[op]);
        }
        *ret = g;
        return NULL;
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
                        r |= cube__pack_kv_str(&pk, "state", cube__group_state_names[g->state]);
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

void cube__groups_init(cube__server *srv)
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

void cube__groups_done(cube__server *srv)
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

static void fail_job(cube__server *srv, job *j)
{
        if (!j->op) {
                free(j);
                return;
        }
        j->rc = -1;
        snprintf(j->why, sizeof(j->why), "the daemon is stopping");
        if (j->kind == JOB_JOIN) {
                /* Answered when its op reaches its place, if it has not. */
                j->finished = true;
                if (!j->op_started)
                        return;
        }
        cube__work_complete(srv, &j->op->work);
}

/* Gives g up at a stop: what is queued fails now, a run under way is
 * aborted, and a join under way is answered at once (the members that
 * asked learn the daemon is stopping) while its thread finishes it alone. */
static void abandon(cube__server *srv, cube__group *g)
{
        job *queued, *stand_in = NULL;

        uv_mutex_lock(&g->lock);
        g->abandoned = true;
        queued = g->head;
        g->head = g->tail = NULL;
        if (g->running && g->running->kind == JOB_RUN && g->comm)
                srv->transport->abort(g->comm);
        if (g->running && g->running->kind == JOB_JOIN && g->running->op &&
            (stand_in = calloc(1, sizeof(*stand_in)))) {
                job *j = g->running;
                *stand_in = (job) {
                        .kind = JOB_JOIN, .group = g, .op = j->op,
                        .collective = j->collective, .op_started = j->op_started,
                };
                stand_in->op->host_ctx = stand_in;
                j->op = NULL;
                j->abandoned = true;
        }
        uv_mutex_unlock(&g->lock);
        if (stand_in)
                fail_job(srv, stand_in);
        for (job *j = queued, *next; j; j = next) {
                next = j->next;
                fail_job(srv, j);
        }
}

void cube__groups_stop(cube__server *srv)
{
        atomic_store(&srv->groups_stopping, true);
        for (cube__session *s = srv->sessions; s; s = s->next)
                for (cube__group *g = s->groups; g; g = g->next)
                        if (g->started)
                                abandon(srv, g);
}

void cube__groups_session_detach(cube__session *s)
{
        for (cube__group *g = s->groups; g; g = g->next) {
                job *j = calloc(1, sizeof(*j));
                g->state = CLOSED;
                snprintf(g->why, sizeof(g->why), "its session ended");
                if (j) {
                        j->kind = JOB_CLOSE;
                        cube__group_push(g, j);
                }
        }
}

void cube__groups_session_free(cube__session *s)
{
        while (s->groups) {
                cube__group *g = s->groups;
                group_unlink(s, g);
                group_free(g);
        }
}

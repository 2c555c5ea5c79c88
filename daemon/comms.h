/*
 * comms.h - what groups.c and collectives.c share: a collective group, the
 * jobs its worker thread runs, and the calls each makes of the other.
 *
 * groups.c keeps the groups (membership, their threads, rendezvous, failure
 * detection); collectives.c runs the operations on them as host ops.
 */
#ifndef CUBE_COMMS_H
#define CUBE_COMMS_H

#include "cubed.h"
#include "transport.h"

#define GROUP_MAX CUBE__GROUP_MAX
#define COMM_STREAM UINT64_MAX          /* the session's collective stream (AtSync) */

enum { JOINING, READY, FAILED, CLOSED };
/* By state, and by cube_collective. */
extern const char *const cube__group_state_names[];
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
        bool abandoned;                 /* a join answered without it at a stop: the
                                         * thread frees it (under the group's lock) */
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
        job *running;                   /* under the lock: the job the thread runs */
        bool stop, started;
        bool abandoned;                 /* under the lock: the daemon stops; queued
                                         * work was failed, a join under way given up */
        unsigned jobs;                  /* loop thread: jobs whose op has not finished */
        /* Traffic. */
        uint64_t ops, bytes, refusals;
        struct cube__group *next;
};

extern const char *const cube__collective_names[];

/* Hands j to g's thread. */
void cube__group_push(cube__group *g, job *j);
/* NoDeviceTransport for op when this daemon has no transport, else NULL. */
cube_error *cube__groups_no_transport(cube__server *srv, cube_collective op);
/* The group a collective names, joined first if need be (groups.c). */
cube_error *cube__group_find_for(cube__msg *k, int op, const msgpack_object *go,
                                 const msgpack_object *peer, cube__group **ret,
                                 uint32_t *ret_peer);
/* A job's host op reached its place in the order: it starts (collectives.c). */
void cube__collective_start(cube__op *o);
/* A job's host op completed: what it did lands where it belongs. */
void cube__collective_done(cube__op *o);

#endif

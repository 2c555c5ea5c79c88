/*
 * transport.h - the small interface between cubed's collective bookkeeping
 * (daemon/groups.c, daemon/collectives.c) and an engine that moves bytes
 * between devices.
 *
 * The core owns groups, their members, the taint rules and failure
 * detection; an engine only forms a communicator, runs one operation on it
 * and tears it down. Every call except abort blocks, and is made from the
 * group's own worker thread, never from the loop thread. An engine knows
 * nothing of cube's error taxonomy: it answers 0, or -1 with a sentence for
 * a person in why.
 *
 * Engines: gloo (transports/gloo, the CPU device, on one host or across
 * hosts). An NCCL engine for CUDA devices fits behind the same table: join
 * maps to ncclCommInitRank with the unique id carried through the same
 * rendezvous store (rank 0 sets it, the others get it), run to the nccl*
 * calls on the device's comm stream, abort to ncclCommAbort.
 */
#ifndef CUBE_TRANSPORT_H
#define CUBE_TRANSPORT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cube__comm cube__comm;

/* Element types a reduction knows (cube_elem_type in cube.h, same values). */
enum { CUBE__DT_F16, CUBE__DT_BF16, CUBE__DT_F32, CUBE__DT_F64, CUBE__DT_I32, CUBE__DT_I64,
       CUBE__DT_U32, CUBE__DT_U64, CUBE__DT_MAX };

/* The operations run knows (the cube_collective values). */
enum { CUBE__OP_ALL_REDUCE = 1, CUBE__OP_ALL_GATHER, CUBE__OP_REDUCE_SCATTER,
       CUBE__OP_BROADCAST, CUBE__OP_ALL_TO_ALL, CUBE__OP_SEND, CUBE__OP_RECV };

/* An engine in C++ sees only the numbers above; the C side, which passes
 * cube.h's values straight through, fails to build if the two disagree. */
#ifndef __cplusplus
#include "cube.h"
#define CUBE__SAME(a, b) ((int)(a) == (int)(b))
_Static_assert(CUBE__SAME(CUBE__DT_F16, CUBE_ELEM_F16) &&
               CUBE__SAME(CUBE__DT_BF16, CUBE_ELEM_BF16) &&
               CUBE__SAME(CUBE__DT_F32, CUBE_ELEM_F32) && CUBE__SAME(CUBE__DT_F64, CUBE_ELEM_F64) &&
               CUBE__SAME(CUBE__DT_I32, CUBE_ELEM_I32) && CUBE__SAME(CUBE__DT_I64, CUBE_ELEM_I64) &&
               CUBE__SAME(CUBE__DT_U32, CUBE_ELEM_U32) && CUBE__SAME(CUBE__DT_U64, CUBE_ELEM_U64) &&
               CUBE__SAME(CUBE__DT_MAX, CUBE_ELEM_U64 + 1),
               "transport.h's element types are cube.h's cube_elem_type");
_Static_assert(CUBE__SAME(CUBE__OP_ALL_REDUCE, CUBE_COLLECTIVE_ALL_REDUCE) &&
               CUBE__SAME(CUBE__OP_ALL_GATHER, CUBE_COLLECTIVE_ALL_GATHER) &&
               CUBE__SAME(CUBE__OP_REDUCE_SCATTER, CUBE_COLLECTIVE_REDUCE_SCATTER) &&
               CUBE__SAME(CUBE__OP_BROADCAST, CUBE_COLLECTIVE_BROADCAST) &&
               CUBE__SAME(CUBE__OP_ALL_TO_ALL, CUBE_COLLECTIVE_ALL_TO_ALL) &&
               CUBE__SAME(CUBE__OP_SEND, CUBE_COLLECTIVE_SEND) &&
               CUBE__SAME(CUBE__OP_RECV, CUBE_COLLECTIVE_RECV),
               "transport.h's operations are cube.h's cube_collective");
#undef CUBE__SAME
#endif

/* How members meet: a rendezvous store served by rank 0 on a TCP socket. */
typedef struct cube__comm_setup {
        uint32_t rank, size;
        int store_fd;                   /* rank 0: a listening socket it serves the store on */
        const char *store_host;         /* the others: where rank 0 serves it */
        uint16_t store_port;
        uint64_t nonce;                 /* the round: a store answers only its own */
        const char *address;            /* where this member's engine listens (an IP) */
        const char *name;               /* this member's name, for the others' reports */
        const char *card;               /* where this member's daemon says how far it got
                                         * (daemon/progress.c), for the others */
        uint32_t timeout_ms;            /* for joining, and for every operation */
} cube__comm_setup;

/* One operation. The status exchange is fused with it: on the way in,
 * status[rank] is this member's (bytes << 1) | refused, bytes what it
 * contributes and refused 1 when its source carries a failure (it moves no
 * bytes of its own); on the way out, status[r] is member r's. When any
 * member refused, or the sizes differ, dst was not written. */
typedef struct cube__coll {
        int op;                         /* CUBE__OP_* */
        int dtype;                      /* CUBE__DT_*, for reductions */
        bool mean;                      /* the reduction is a mean, not a sum */
        const void *src;                /* src_bytes; NULL for a non-root broadcast, a recv */
        void *dst;                      /* dst_bytes; NULL for a send */
        uint64_t src_bytes, dst_bytes;
        uint32_t root;                  /* broadcast: the root's rank; send/recv: the peer */
        uint64_t *status;               /* size entries */
} cube__coll;

typedef struct cube__transport {
        const char *name;
        /* Whether reductions over dtype run. */
        bool (*reduces)(int dtype);
        /* Forms the communicator; every member calls it with the same nonce. */
        int (*join)(const cube__comm_setup *setup, cube__comm **ret_comm, char *why, size_t len);
        /* Members' names and cards, as they gave them at join. */
        const char *(*member)(cube__comm *c, uint32_t rank);
        const char *(*member_card)(cube__comm *c, uint32_t rank);
        /* 0 once done, with status filled in; 1 when the members do not run
         * the same operation (its kind, dtype, reduction or root differ):
         * nothing was written, why says how, and the group goes on; -1 when
         * a member is lost or the group was torn down. */
        int (*run)(cube__comm *c, cube__coll *op, char *why, size_t len);
        /* Any thread: makes a run in progress, and every later one, fail. */
        void (*abort)(cube__comm *c);
        void (*close)(cube__comm *c);
} cube__transport;

/* The engine built in, or NULL where there is none (NoDeviceTransport). */
const cube__transport *cube__transport_for(const char *backend);

#ifdef __cplusplus
}
#endif

#endif

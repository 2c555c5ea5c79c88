/*
 * rpc.h - libcubeclient's connection: one socket shared by every thread, and
 * the calls waiting on it.
 */
#ifndef CUBE_CLIENT_RPC_H
#define CUBE_CLIENT_RPC_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "cube.h"
#include "errors.h"
#include "frame.h"
#include "prescan.h"
#include "rbuf.h"
#include "spin.h"
#include "wire.h"

typedef struct cube__call cube__call;

/* Called on the reading thread with the response's result (error is nil):
 * copies out what the caller needs while the message is still buffered.
 * Returns NULL, or the error the call should report. */
typedef cube_error *(*cube__deliver_fn)(cube__call *call, const msgpack_object *result);

struct cube__call {
        uint32_t msgid;
        bool done;
        cube_error *error;
        cube__deliver_fn deliver;
        void *ctx;
        cube_client *client;            /* for deliver functions that need it */
        cube__err_family family;        /* the family its error answer is of: ServerError
                                         * (0) for every call but end_profile */
        /* A bin answer [bytes] of direct_len bytes may be read straight into
         * direct, with no deliver call; NULL where the caller has no such
         * buffer. */
        void *direct;
        uint64_t direct_len;
        cube__call *next;
};

/* Launches waiting to go out together (batch.c); under write_lock. */
typedef struct cube__batch {
        char *buf;
        size_t len, cap;
        uint64_t since;                 /* CLOCK_MONOTONIC ns when the oldest was queued */
        bool started, stop;             /* the flusher thread */
        pthread_t thread;
        pthread_cond_t cond;            /* wakes the flusher; waited on with write_lock */
        struct cube_client *next_live;  /* batch.c's list of connections with a flusher */
        pid_t owner;                    /* the process that started the flusher */
} cube__batch;

struct cube_client {
        int fd;
        char path[108];

        pthread_mutex_t write_lock;     /* one frame at a time on the socket */
        cube__batch batch;
        pthread_mutex_t lock;           /* everything below */
        pthread_cond_t cond;
        bool reading;                   /* a thread is reading for everyone */
        cube_error *dead;               /* why the connection is unusable */
        cube__call *calls;
        uint32_t next_msgid;

        atomic_uint_fast64_t next_memory;
        atomic_uint_fast64_t next_kernel;

        cube__rbuf rb;                  /* the reading thread's */
        cube__spin spin;                /* the reading thread's */
        msgpack_zone *zone;             /* the reading thread's, cleared per message */
        int fds[16];                    /* descriptors received, in order, not yet taken */
        size_t n_fds;
        cube__limits limits;

        char service[64];
        uint64_t nonce;
        char backend[16];
        char check_mode[16];            /* hello's: which launches the daemon checks */
        uint64_t session;
        cube_device_properties properties;
        cube_protocol_limits daemon_limits;
        uint64_t properties_hash;
        char target[512];               /* the longest a backend gives (cpu.h) */
        char transport[32];             /* "" when the daemon has none */
        uint32_t transport_reduces;     /* a bit per cube_elem_type */

        pthread_mutex_t ro_lock;        /* the three below (readonly.c) */
        uint64_t *ro_ids;               /* memory ids imported read-only, sorted */
        size_t n_ro, cap_ro;
};

/* Sends the frame and then tail_len bytes at tail (a payload not copied into
 * it), waits for call's answer when call is given, and destroys f. */
cube_error *cube__frame_send(cube_client *c, cube__frame *f, cube__call *call, const void *tail,
                             size_t tail_len);

/* Sends one frame made of iov pieces (at most 8), whole, after any batched
 * launches, or marks the client dead. */
cube_error *cube__send(cube_client *c, const struct iovec *iov, int n);
/* cube__send with write_lock held; n may be 0 to send only the batch. */
cube_error *cube__send_locked(cube_client *c, const struct iovec *iov, int n);
/* Queues a frame that needs no answer in the batch (batch.c). */
cube_error *cube__send_batched(cube_client *c, const void *frame, size_t len);
/* Sends what the batch holds and stops its flusher; before disconnecting. */
void cube__batch_finish(cube_client *c);
/* Sends a request frame and waits for its response. pack fills the frame's
 * params: it is called with the msgid the frame must carry. */
cube_error *cube__call_wait(cube_client *c, cube__call *call, const struct iovec *iov, int n);
uint32_t cube__next_msgid(cube_client *c);
/* One copy of the handle's whole range, through a region when it is larger
 * than one message. The handle and size are checked. */
cube_error *cube__write(cube_client *c, const cube_handle *h, const void *data, uint64_t size);
cube_error *cube__read(cube_client *c, const cube_handle *h, void *dst, uint64_t size);
/* The memory ids imported read-only (readonly.c): add answers -1 when out
 * of memory; check_writable answers Validation for a read-only handle. */
int cube__readonly_add(cube_client *c, uint64_t memory);
void cube__readonly_remove(cube_client *c, uint64_t memory);
bool cube__readonly(cube_client *c, uint64_t memory);
cube_error *cube__check_writable(cube_client *c, const cube_handle *h);
/* The oldest descriptor received and not yet taken, or -1. */
int cube__take_fd(cube_client *c);
/* Sends a request whose params are n u64 values, and waits for its answer. */
cube_error *cube__request(cube_client *c, const char *method, const uint64_t *params, uint32_t n,
                          cube__deliver_fn deliver, void *ctx);
/* Decodes one element of a list answer into *elem; false when it is not one. */
typedef bool (*cube__decode_fn)(const msgpack_object *o, void *elem);
/* A request (no params) answered with an array: decoded element by element
 * into a calloc'd array (one spare element, so never NULL) the caller frees.
 * clean, when given, releases the first n elements and the array after a
 * malformed element. */
cube_error *cube__request_list(cube_client *c, const char *method, size_t elem_size,
                               cube__decode_fn decode, void (*clean)(void *v, size_t n),
                               void **ret_v, size_t *ret_n);
/* The error for an answer that is not the protocol's. */
cube_error *cube__err_answer(const char *method);
/* Whether map m holds key with an unsigned integer, stored in *ret. */
bool cube__map_u64(const msgpack_object *m, const char *key, uint64_t *ret);
/* A handle this client may use: stamped with its service, offsets that fit. */
cube_error *cube__check_handle(cube_client *c, const cube_handle *h);

#endif

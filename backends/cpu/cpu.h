/*
 * cpu.h - cubed's side of the CPU device, as its files share it: the
 * device's structures, and the calls each file makes of another.
 */
#ifndef CUBE_CPU_H
#define CUBE_CPU_H

#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "driver.h"
#include "queue.h"

#define CPU_ALIGNMENT 64
#define CPU_PAGE 4096
#define CPU_WORKER_BATCH 16
#define CPU_MAX_WORKERS 8               /* x CPU_WORKER_BATCH < CUBE__Q_SLOTS */
#define CPU_DIRECT_MAX 96               /* launches posted from the loop thread, unharvested */

_Static_assert(CPU_MAX_WORKERS <= CUBE__Q_WAITERS,
               "each worker waits in a wanted entry of its own");
/* A post finds its slot held only when its last poster was lapped (submit.c's post). */
_Static_assert(CPU_MAX_WORKERS * CPU_WORKER_BATCH + CPU_DIRECT_MAX < CUBE__Q_SLOTS,
               "the ring must hold every launch the workers and the loop may have in flight");

struct cube__storage {
        uint64_t size;
        uint64_t offset;                /* in device memory, or in the peer's */
        uint64_t extent;                /* bytes reserved there */
        uint32_t peer;                  /* 0: this device's memory; else peer slot + 1 */
};

/* A peer device's memory, mapped here and in the device process. */
typedef struct peer_map {
        char *map;
        uint64_t size;
} peer_map;

struct cube__module {
        uint32_t id;
        uint32_t n_buffers;
        const cube__fe_facts *facts;    /* the kernel's, for reports */
};

/* A graph the device process keeps (queue.h's CUBE__MSG_GRAPH). */
struct cube__dgraph {
        uint32_t id;
        uint32_t n;
        char label[40];
        char (*kernels)[48];            /* per launch: its kernel, for reports */
        const cube__fe_facts **facts;   /* per launch: its kernel's facts */
};

/* A free range of device memory; the list is sorted by offset. */
typedef struct hole {
        uint64_t offset, len;
        struct hole *next;
} hole;

/* A stream: its work in order. A stream is on the ready list while it has
 * work and no worker runs it, so one stream's work never overlaps itself. */
struct cube__dstream {
        cube__work *head, *tail;
        unsigned direct_n;              /* of its work among the device's direct */
        bool busy;
        bool ready;
        bool closed;    /* by the daemon, while a worker still held it */
        cube__dstream *next_ready;
};

struct cube__device {
        cube__device_config config;
        uint64_t spin_ns;               /* harvest's spin before it sleeps */
        uint64_t memory_limit;
        uint64_t window;                /* bytes of each of PoCL's windows (queue.h) */
        uint64_t in_use;                /* loop thread only, as holes */
        hole *holes;

        int memory_fd, queue_fd, control_fd;
        char *memory;
        void *queue;
        cube__qctl *ctl;
        pid_t pid;
        int pidfd;
        char kcache[PATH_MAX];          /* the device's runtime directory */
        int owner_fd;                   /* kcache/.owner, locked while this daemon runs */
        char helper[PATH_MAX];
        char target[512];
        pthread_mutex_t control_lock;   /* the control socket */
        uint32_t next_module;
        peer_map peers[CUBE__PEERS_MAX]; /* under control_lock while being attached */
        _Atomic uint32_t n_peers;

        pthread_t monitor;
        bool monitor_started;
        atomic_bool dead;
        atomic_bool closing;
        pthread_mutex_t dead_lock;
        char dead_reason[768];
        char timeout_reason[512];       /* set just before the monitor kills */

        uint32_t next_graph;            /* loop thread only */
        uint32_t graph_launches;        /* in every kept graph; loop thread only */

        pthread_mutex_t post_lock;
        uint64_t next_seq;
        bool bell_owed;                 /* a post found the device asleep (under post_lock) */
        const char *slot_kernel[CUBE__Q_SLOTS];
        const cube__fe_facts *slot_facts[CUBE__Q_SLOTS];
        const cube__dgraph *slot_graph[CUBE__Q_SLOTS]; /* a replay's graph, or NULL */

        sem_t compiles;                 /* builders that may run at once */

        /* Work posted from the loop thread, in the order posted (so in the
         * ring's order): a launch's seq, or 0 for a fence or a launch that
         * failed to post, which end when everything before them has. */
        struct {
                cube__work *w;
                uint64_t seq;
                cube__dstream *s;
        } direct[CPU_DIRECT_MAX];
        unsigned direct_first, direct_n; /* under lock */

        pthread_t *workers;
        unsigned n_workers;
        _Atomic unsigned worker_ids;    /* each worker's index in the ring's wanted */
        pthread_mutex_t lock;
        pthread_cond_t wake;
        cube__dstream *ready_head, *ready_tail; /* under lock */
        bool stopping;
};

/* ---- the device process and the driver (cpu.c) -------------------------- */

/* Has the core call loop_ready on its loop thread (driver.h's loop_fd). */
void cube__cpu_notify_loop(cube__device *d);

/* A signal's name without SIG ("SEGV"), or "?". */
const char *cube__cpu_signal_name(int sig);

/* Sends a control message that has no answer, with m->len bytes of
 * payload; a device that is gone is not written to. */
int cube__cpu_send_notice(cube__device *d, const cube__msg *m, const void *payload);

/* Reads the device's answer to a control message: its status, and its
 * reason, cut to cap bytes with the '\0'. */
int cube__cpu_read_reply(cube__device *d, cube__msg_reply *ret_reply, char *reason, size_t cap);

/* ---- device memory (alloc.c) -------------------------------------------- */

/* The driver's alloc, release and host_view (driver.h). */
cube_error *cube__cpu_alloc(cube__device *d, uint64_t size, cube__storage **ret_storage);
void cube__cpu_release(cube__device *d, cube__storage *s);
void cube__cpu_discard(cube__device *d, cube__storage *s, uint64_t offset, uint64_t len);
void *cube__cpu_host_view(cube__device *d, cube__storage *s);

/* Where a storage's bytes are in cubed: device memory, or a peer's. */
char *cube__cpu_bytes_of(cube__device *d, const cube__storage *s);

/* ---- streams and their work (submit.c) ---------------------------------- */

/* The driver's stream_open, stream_close, submit and loop_ready (driver.h). */
cube_error *cube__cpu_stream_open(cube__device *d, cube__dstream **ret_stream);
void cube__cpu_stream_close(cube__device *d, cube__dstream *s);
void cube__cpu_submit(cube__device *d, cube__dstream *s, cube__work *w);
void cube__cpu_loop_ready(cube__device *d);
void cube__cpu_loop_idle(cube__device *d);

/* A worker thread (pthread_create's start routine; arg: the device). */
void *cube__cpu_worker(void *arg);

/* Hands back what the loop thread posted and has ended (under d->lock). */
void cube__cpu_harvest_direct(cube__device *d);

/* Where buffer i of launch l lies for the device: device memory, or a
 * peer's (queue.h). */
uint64_t cube__cpu_device_address(const cube__launch_work *l, uint32_t i);

/* ---- sandboxed builds and loads (build.c) ------------------------------- */

/* The driver's compile, compile_shape, load and unload (driver.h). */
cube_error *cube__cpu_compile(cube__device *d, const cube__kernel_desc *desc, const char *path);
cube_error *cube__cpu_compile_shape(cube__device *d, const cube__kernel_desc *desc,
                                   const uint32_t dim[3], const char *path,
                                   const atomic_bool *abandon);
cube_error *cube__cpu_load(cube__device *d, const cube__kernel_desc *desc, const char *path,
                           cube__module **ret_module, uint32_t *ret_shared_bytes);
void cube__cpu_unload(cube__device *d, cube__module *m);

/* A failure of the host, not of the kernel: a defect, never a refusal
 * (kind: CUBE_IO_UNKNOWN, or a launch kind). */
cube_error *cube__cpu_defect(cube_error_kind kind, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* ---- peer access (peer.c) ----------------------------------------------- */

/* The driver's peer_export, peer_offset, peer_attach and peer_storage
 * (driver.h). */
int cube__cpu_peer_export(cube__device *d, int *ret_fd, uint64_t *ret_size);
uint64_t cube__cpu_peer_offset(cube__device *d, cube__storage *s);
cube_error *cube__cpu_peer_attach(cube__device *d, int fd, uint64_t size, uint32_t *ret_slot);
cube_error *cube__cpu_peer_storage(cube__device *d, uint32_t slot, uint64_t offset,
                                   uint64_t size, cube__storage **ret_storage);

/* ---- graphs the device keeps (graphs.c) --------------------------------- */

/* The driver's graph_create and graph_destroy (driver.h). */
cube_error *cube__cpu_graph_create(cube__device *d, cube__launch_work *const *launches,
                                   size_t n, const char *label, cube__dgraph **ret_graph);
void cube__cpu_graph_destroy(cube__device *d, cube__dgraph *g);

/* ---- the dialect as OpenCL C (opencl.c) --------------------------------- */

/* The OpenCL C prelude that makes the dialect of docs/KERNELS.md. */
extern const char cube__cpu_prelude[];

/* The source as OpenCL C for the device: the prelude, then the source with
 * its entry point's parameters rewritten. */
cube_error *cube__cpu_translate(const cube__kernel_desc *desc, char **ret_source);

#endif

/*
 * cubed.h - the daemon's middle layer, the work: allocations and streams,
 * device work and its executor, the kernel cache, launches, the memory
 * methods, profiling, graphs, collectives and peer access, and the server's
 * state they share.
 *
 * It stands on services.h, and knows the layer above it (requests.h:
 * connections, dispatch, admin, sessions, the server's life) only through
 * the upcalls that layer fills (cube__upcalls), as the driver interface is
 * known only through its table.
 *
 * Ownership in one paragraph: the loop thread owns every structure here. The
 * device sees only cube__work items; it hands each back through
 * cube__work_complete(), and the loop thread finishes it. A session lives
 * until its connection is gone *and* no work of it is in flight; an
 * allocation's storage lives until it is freed *and* no work uses it.
 */
#ifndef CUBED_H
#define CUBED_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <uv.h>
#include <msgpack.h>

#include "cube.h"
#include "driver.h"
#include "errors.h"

/* cubed's exit status when the device or its driver is not there. */
#define CUBE__EXIT_NO_DEVICE 4
#include "prescan.h"
#include "services.h"
#include "wire.h"


typedef struct cube__server cube__server;
typedef struct cube__session cube__session;
typedef struct cube__conn cube__conn;
typedef struct cube__msg cube__msg;

/* What handling a message came to. */
typedef enum cube__dispatched {
        CUBE__DISPATCH_DONE,            /* the message was handled */
        CUBE__DISPATCH_KEPT,            /* handled, and its read buffer is now a write's */
        CUBE__DISPATCH_PAUSED,          /* not handled yet: dispatch it again on resume */
} cube__dispatched;

/* ---- logging about a session (log.c, services.h) ----------------------- */
/* An entry about session s (and failure, when not 0): under journald these
 * become fields of the entry. */
#define cube__log_session(level, s, failure, ...) \
        cube__log_at(CUBE__HERE(NULL), (level), cube__session_who((s), &(cube__log_who) {0}), \
                     (failure), __VA_ARGS__)
/* An entry of one of the kinds an operator filters on by MESSAGE_ID. */
#define cube__log_id(id, level, s, ...) \
        cube__log_at(CUBE__HERE(id), (level), cube__session_who((s), &(cube__log_who) {0}), 0, \
                     __VA_ARGS__)

/* ---- allocations and streams (allocations.c) --------------------------- */
struct cube__op;

/* One piece of work's use of one allocation, kept on the allocation in the
 * order the work was queued: what orders work of different streams. */
typedef struct cube__use {
        struct cube__op *op;
        struct cube__alloc *alloc;
        bool writes;
        struct cube__use *prev, *next;
} cube__use;

/* Device memory: one reservation, its claims and its ordering, named by one
 * or more sessions (its creator, and those that imported it). */
typedef struct cube__alloc {
        uint64_t id;                    /* the creator's memory id */
        uint64_t size;
        cube__server *server;
        cube__session *charged;         /* the holder its bytes count against */
        uid_t charged_uid;
        cube__storage *storage;         /* its page's storage; NULL: the reservation failed */
        cube__pools *memory;            /* the pools it was carved from */
        struct cube__page *page;
        uint64_t base;                  /* where it starts in its page */
        uint64_t padding;               /* bytes after it the alignment costs */
        cube__claims claims;
        unsigned pending;               /* queued or submitted work that uses it */
        unsigned holders;               /* names */
        struct cube__name *names;
        bool freed;                     /* no name is left */
        cube__use *uses_head, *uses_tail;
        /* While uses_head is not empty: the one stream all its work is on,
         * or NULL once several streams have had work there since the list
         * was last empty (ready() then walks the list). */
        struct cube__stream *uses_stream;
        char token[33];                 /* its export token, or "" */
        struct cube__peer *peer;        /* a peer device's memory it names (peer.c), or NULL */
        uint64_t peer_at;               /* ...where it starts in the peer's memory */
} cube__alloc;

/* A session's name for an allocation. A read-only import may not be
 * written; a write it refused is a failure of this name alone (local), so
 * no other holder ever sees it. */
typedef struct cube__name {
        uint64_t id;
        cube__session *session;
        cube__alloc *alloc;
        bool read_only;
        cube__claims local;
        struct cube__name *next_holder;
} cube__name;

typedef struct cube__stream {
        uint64_t id;
        cube__session *session;
        cube__pools *memory;            /* its pools, from its first allocation */
        cube__dstream *device;
        unsigned pending;               /* queued and submitted work */
        unsigned submitted;
        struct cube__op *head, *tail;   /* queued, not yet submitted */
        bool active;                    /* on the session's list of streams with queued work */
        struct cube__stream *active_next;
        cube__work *batch_head, *batch_tail;    /* picked, about to be submitted */
        struct cube__stream *batch_next;
        uint64_t seq;                   /* work queued on it so far: the next op's place */
        struct cube__window *windows;   /* profiling windows open or ending (profile.c) */
        struct cube__capture *capture;  /* a graph capture being prepared or recorded */
        bool host_busy;                 /* a host op of it runs: its later work waits */
} cube__stream;

cube__stream *cube__stream_get(cube__session *s, uint64_t id, cube_error **ret_error);
/* Creates memory id of size bytes on stream's pools. A failed reservation is
 * recorded on the allocation, as the reference's initialize_memory does;
 * so is refused (taken), an error found before reserving: the memory then
 * reserves nothing. */
int cube__alloc_create(cube__session *s, uint64_t id, uint64_t size, uint64_t stream,
                       cube_error *refused);
/* Drops a session's name; the storage goes once no name and no work uses it. */
void cube__name_free(cube__name *n);
void cube__alloc_unref(cube__alloc *a);
/* Resolves a handle to this session's name for an allocation, checking the
 * service stamp, the session and the range. */
cube_error *cube__name_resolve(cube__session *s, const cube_handle *h, cube__name **ret_name,
                               uint64_t *ret_start, uint64_t *ret_end);
cube_error *cube__alloc_resolve(cube__session *s, const cube_handle *h, cube__alloc **ret_alloc,
                                uint64_t *ret_start, uint64_t *ret_end);
/* The claim check a read makes over resolved handles: NULL or Several. */
cube_error *cube__ensure_written(cube__session *s, const cube_handle *handles, size_t n);
/* What the handles' bytes are at this place in the order, failures and
 * pending writers both, for an answer that is decided after the barrier.
 * Returns a resolution error, or NULL. */
cube_error *cube__await_handles(cube__session *s, const cube_handle *handles, size_t n,
                                cube__awaits *a);
/* Gives back every empty page of every stream of every session (the pools'
 * reclaim, cube__pools_device; server is the cube__server). */
void cube__reclaim_pages(void *server);
/* Lands failure on [start, end) of a. A failed reservation keeps its own
 * failure over every byte: it is what every read of it reports, whatever
 * later work failed to write there. */
void cube__alloc_taint(cube__alloc *a, uint64_t start, uint64_t end, uint64_t failure);
/* Names storage, size bytes at offset at of peer device p's memory (peer.c),
 * as memory id of s: an allocation that is the peer's, charged to no one
 * here. Takes storage. */
struct cube__peer;
cube_error *cube__alloc_peer(cube__session *s, uint64_t id, struct cube__peer *p,
                             cube__storage *storage, uint64_t at, uint64_t size);
/* Export: a token another session imports the allocation with. */
const char *cube__alloc_export(cube__name *n);
/* Import: a new name in s for the exported allocation, or an error. */
cube_error *cube__alloc_import(cube__session *s, const char *token, uint64_t id, bool read_only,
                               cube__name **ret_name);

/* ---- staging regions (regions.c) --------------------------------------- */
typedef struct cube__region {
        uint64_t id;
        uint64_t size;
        void *map;
        cube__session *session;
        unsigned pending;               /* queued work that reads or writes it */
        bool freed;
} cube__region;

/* Resolves ["region", id, offset(, size)] of session s. */
cube_error *cube__region_range(cube__session *s, const msgpack_object *o, bool sized,
                               cube__region **ret_region, uint64_t *ret_offset, uint64_t *ret_size);
void cube__region_free(cube__region *r);
void cube__region_unref(cube__region *r);

/* What one user holds across its sessions, for the per-user quotas. */

cube__dispatched cube__do_region(cube__msg *k);
cube__dispatched cube__do_region_free(cube__msg *k);

/* ---- device work (work.c) ----------------------------------------------- */
typedef struct cube__pending_reply cube__pending_reply;

typedef struct cube__op {
        cube__work work;
        cube__session *session;
        cube__stream *stream;
        struct cube__op *next;          /* in its stream's queue */
        cube__alloc *alloc;             /* a copy's allocation; NULL for fences */
        uint64_t start, end;            /* a copy's span of it, allocation-relative */
        cube__pending_reply *reply;     /* the answer this work counts toward, or NULL */
        void *owned;                    /* freed once the work completes */
        cube__launch_work *launch;      /* a launch's own record */
        cube__use *uses;                /* every allocation the work touches */
        size_t n_uses;
        cube__alloc **written;          /* what a launch writes: where its writer's claims are */
        size_t n_written;
        cube__writer *writer;           /* a write or launch: its claim on what it writes */
        cube__awaits awaits;            /* a launch: what its inputs were when it was queued */
        uint64_t held_bytes;            /* a write's payload, counted in queued_bytes */
        cube__region *region;           /* the staging region it copies from or into */
        uint64_t queued_ns;             /* when it was queued, for the queue-wait histogram */
        uint64_t est_ns;                /* the device time it was charged when submitted */
        uint8_t est_class;              /* ...to this class (tenants.c) */
        bool submitted;
        bool deferred_skip;             /* a launch that cannot run, queued only to learn
                                         * which failure its outputs carry */
        uint64_t seq;                   /* its place on its stream (profiling windows) */
        cube__work *chain;              /* a replay: its launches, ending with work; or NULL */
        struct cube__op *part_of;       /* a replay's launch: the replay it belongs to */
        struct cube__graph *graph;      /* a replay: the graph it runs */
        struct cube__kernel *shape_kernel; /* a launch whose device time counts toward
                                            * its shape's build (shapes.c), with a ref */
        /* Work the daemon runs itself rather than the device (a collective):
         * the executor calls host_run on the loop thread once everything
         * before it on its stream is done, holds the stream's later work until
         * it completes (through cube__work_complete, from any thread), and
         * op_finish calls host_done on the loop thread first. */
        void (*host_run)(struct cube__op *o);
        void (*host_done)(struct cube__op *o);
        void *host_ctx;
} cube__op;

/* A request whose answer waits for device work. */
struct cube__pending_reply {
        cube__session *session;
        uint32_t msgid;
        unsigned outstanding;
        cube_error *error;              /* the first the device reported */
        char *frame;                    /* a prepared response (read), or NULL */
        size_t frame_len;
        cube_error *answer;             /* decided when queued, answered after the barrier */
        cube__awaits awaits;            /* writers still pending when it was queued: a
                                         * failure of theirs is the answer */
        /* When set, called with the outcome (which it takes) instead of
         * answering msgid: work the daemon does for itself. */
        void (*finished)(cube__session *s, void *ctx, cube_error *e);
        void *ctx;
};

/* Queues one copy (or, with a NULL allocation, a fence) on a stream. */
void cube__submit(cube__session *s, cube__stream *st, cube__alloc *a, cube__work_op op,
                  uint64_t offset, void *host, uint64_t len, void *owned,
                  cube__pending_reply *reply);

/* A copy's layout: rows of width bytes, pitch apart on the device, packed
 * on the host. */
typedef struct cube__copy {
        uint64_t rows, width, pitch;
} cube__copy;

/* Queues a copy of that layout, from or into host memory that belongs to a
 * staging region (kept mapped until the copy is done) when region is set. */
struct cube__region;
void cube__submit_copy(cube__session *s, cube__stream *st, cube__alloc *a, cube__work_op op,
                       uint64_t offset, void *host, const cube__copy *copy, void *owned,
                       cube__pending_reply *reply, struct cube__region *region);

/* A write whose payload the connection reads straight into the allocation
 * (direct.c), queued as host work so that later work of any session on the
 * allocation waits for it. Its range is the write's from now on; it ends
 * with cube__scoped_write_end, whole or not: a payload cut short leaves the
 * range claimed by the reference's TornDown, the error a write scope that
 * never reached its exit carries. NULL when out of host memory. */
cube__op *cube__scoped_write_begin(cube__session *s, cube__stream *st, cube__alloc *a,
                                   uint64_t start, uint64_t end);
void cube__scoped_write_end(cube__op *o, bool whole);

/* Marks the device poisoned (once) with why; every later operation reports it. */
void cube__work_poison(cube__server *srv, cube__session *by, cube_error *poison);
/* ServerError::DevicePoisoned for the poisoned device. */
cube_error *cube__poisoned(cube__server *srv);
cube__pending_reply *cube__pending_new(cube__session *s, uint32_t msgid);
/* Called when every piece of work for the reply was submitted. */
void cube__pending_arm(cube__pending_reply *r);
/* Any thread: the backend's completion function. */
void cube__work_complete(void *ctx, cube__work *work);
/* Loop thread: finishes completed work. */
void cube__work_drain(cube__server *srv);
/* Loop thread: the loop drains the completions before it next waits, for
 * work the loop thread itself completed (cube__work_complete). */
void cube__work_drain_soon(cube__server *srv);

/* ---- the executor (executor.c) ------------------------------------------ */
/* A new piece of work on st that will touch n_uses allocations, or NULL.
 * extra bytes (16-aligned, zeroed) come with it at *ret_extra and go with it;
 * freeing o frees everything. */
cube__op *cube__op_new(cube__session *s, cube__stream *st, cube__work_op kind, size_t n_uses,
                       size_t extra, void **ret_extra);
/* Declares the next allocation o touches, and whether it writes it. */
void cube__op_use(cube__op *o, cube__alloc *a, bool writes);
/* Queues o: it runs after everything queued before it on its stream, and
 * after everything queued before it on other streams that touches the same
 * allocations (unless both only read). */
void cube__op_enqueue(cube__op *o);
/* Submits what may run now, one piece of work per session in turn. */
void cube__schedule(cube__server *srv);
/* While plugged, cube__schedule only notes that it is owed: the loop plugs
 * while it dispatches everything one read brought, so a burst of requests
 * reaches the device as one batch. The last unplug runs what was owed. */
void cube__schedule_plug(cube__server *srv);
void cube__schedule_unplug(cube__server *srv);
/* The clock, read once for a plugged burst (when it began) rather than once
 * for each request or completion in it: two reads a launch were a
 * twentieth of cubed's time per launch. */
uint64_t cube__schedule_now(const cube__server *srv);
/* The work is done: it no longer orders anything. */
void cube__op_retire(cube__op *o);
/* ---- the kernel cache (kernels.c) --------------------------------------- */
typedef enum cube__kernel_state {
        CUBE__KERNEL_NEW,               /* registered, never compiled or loaded */
        CUBE__KERNEL_COMPILING,
        CUBE__KERNEL_READY,
        CUBE__KERNEL_FAILED,
} cube__kernel_state;

/* Called on the loop thread once a kernel is ready or failed. */
typedef struct cube__kernel_waiter {
        void (*ready)(void *ctx);
        void *ctx;
} cube__kernel_waiter;

/* Refused sources remembered after their entries are gone. */
#define CUBE__REFUSALS_KEPT 256

/* One entry of the cache every session shares. */
/* A cube dimension a kernel is launched with, and the build of the kernel
 * for it (shapes.c). */
#define CUBE__SHAPES 4
typedef enum cube__shape_state {
        CUBE__SHAPE_COUNTING,           /* its launches' device time, toward a build */
        CUBE__SHAPE_BUILDING,
        CUBE__SHAPE_READY,              /* module serves its launches */
        CUBE__SHAPE_FAILED,             /* its launches keep the kernel's module */
} cube__shape_state;

typedef struct cube__shape {
        uint32_t dim[3];
        cube__shape_state state;
        uint64_t device_ns;             /* counted toward its build */
        uint64_t brief_ns;              /* its briefest launch so far */
        cube__module *module;
} cube__shape;

typedef struct cube__kernel {
        char hash[65];
        char program[65];               /* the key of the build every entry point of
                                         * the source shares: its artifact's name */
        char *source;
        char *entry;
        cube__kernel_desc desc;
        cube_buffer_io *io;             /* the parse's answer, per buffer parameter */
        cube__fe_facts *facts;          /* the front end's, once checked */
        char *checked;                  /* the source the backend compiles */
        char *facts_text;               /* the facts as the front end wrote them */
        char entries[64];               /* the source's entry points, comma-separated
                                         * (as many as fit): its artifact's record */
        bool unchecked;                 /* compiled without bounds checks */
        struct cube__kernel *unchecked_twin; /* the same source unchecked, once asked for */
        cube__kernel_state state;
        cube__module *module;
        uint32_t shared_bytes;
        cube__shape shapes[CUBE__SHAPES]; /* the first cube dimensions it ran with */
        unsigned n_shapes;
        cube_error *error;              /* when FAILED: a CompilationError (the source's
                                         * fault), or, with retry, the whole ServerError */
        bool retry;                     /* failed for a reason outside the kernel (no
                                         * compiler, no memory, no disk): a later launch
                                         * compiles it again */
        bool from_disk;
        bool pinned;                    /* its artifact is pinned in the disk cache */
        bool stored;                    /* the compile stored an artifact of artifact_bytes */
        uint64_t artifact_bytes;
        unsigned refs;                  /* sessions' kernel ids, and a compile in flight */
        double compile_ms;
        double check_ms;                /* the front end's part of compile_ms */
        uint64_t hits;
        cube__kernel_waiter *waiters;
        size_t n_waiters;
        cube__server *server;
        uv_work_t work;
        uid_t build_uid;                /* whose request started its build (kernels.c) */
        struct cube__kernel *build_next; /* the build queue */
        /* The running builds, holding a slot each; running_prev NULL: none. */
        struct cube__kernel **running_prev, *running_next;
        struct cube__kernel *next;      /* the next entry whose hash has the same prefix */
        struct cube__kernel *all_next;  /* the server's list of every entry */
} cube__kernel;

/* Finds or adds the cache entry for source and entry, with a reference the
 * caller keeps (cube__kernel_unref). Never NULL unless out of memory; a
 * source whose signature cannot be read is an entry that failed. */
cube__kernel *cube__kernel_intern(cube__server *srv, const char *source, size_t source_len,
                                  const char *entry, size_t entry_len);
/* Makes the kernel ready: starts compiling (or loading from disk) if it is
 * new, and calls waiter once it is ready or failed. Returns false, calling
 * nothing, when there is nothing to wait for. */
bool cube__kernel_prepare(cube__kernel *k, const cube__kernel_waiter *waiter);
/* The unchecked form of checked kernel k (the reference's unsafe launch),
 * an entry of its own in the cache, which k keeps; NULL when out of memory. */
cube__kernel *cube__kernel_unchecked(cube__kernel *k);
/* The daemon stops: builds still waiting for a slot fail (a defect: a later
 * run builds them), so the drain waits only for those under way. */
void cube__kernels_stop(cube__server *srv);
/* A build slot was given back: starts queued builds while slots are free. */
void cube__kernel_builds_resume(cube__server *srv);
/* Whether a build slot is free that no queued build waits for (and the
 * daemon is not stopping): what a build nobody waits for may take. */
bool cube__kernel_build_slot_idle(const cube__server *srv);
/* Loads a build of k from the artifact fd holds: the backend reads it
 * through the descriptor that was checked, not through a name that could
 * change in between. */
cube_error *cube__kernel_load_fd(const cube__kernel *k, int fd, cube__module **ret_module,
                                 uint32_t *ret_shared_bytes);
/* Drops every waiter of k whose ctx is ctx (a connection that closed). */
void cube__kernel_forget(cube__kernel *k, void *ctx);
/* The launch error for a kernel that failed: Launch(CompilationError(...))
 * when the source was at fault, else the defect as it was. */
cube_error *cube__kernel_launch_error(const cube__kernel *k);
/* A kernel that failed for a reason outside itself is new again, so the
 * launch asking now compiles it; any other kernel is left as it is. */
void cube__kernel_retry(cube__kernel *k);
void cube__kernels_free(cube__server *srv);

/* Drops a reference cube__kernel_intern gave; the entry, its source, log and program go with the last, once
 * no compile of it is in flight (the artifact stays on disk). */
void cube__kernel_unref(cube__kernel *k);

/* ---- builds of a kernel for a cube dimension (shapes.c) ---------------- */

/* The module a launch of READY kernel k with cubes of dim runs: the kernel
 * built for dim once it is loaded, else k's own. *ret_count: the launch's
 * device time counts toward that build; the caller then takes a reference
 * of k, which cube__kernel_shape_ran drops. */
cube__module *cube__kernel_module_for(cube__kernel *k, const uint32_t dim[3], bool *ret_count);
/* A launch module_for counted ended after ns of device time. */
void cube__kernel_shape_ran(cube__kernel *k, const uint32_t dim[3], uint64_t ns);
/* Unloads the modules built for k's shapes (k is being freed). */
void cube__kernel_shapes_unload(cube__kernel *k);
/* The daemon stops: builds for a cube dimension that run give up, and no
 * other starts. A stop waits for no code that nothing will run. */
void cube__kernel_shapes_abandon(cube__server *srv);

/* ---- the kernel front end's run and facts (kernel-check.c) ------------- */
/* Runs the front end on k's source: fills k->facts and k->checked, or
 * answers the refusal or the defect. Off the loop thread. */
cube_error *cube__kernel_check(cube__kernel *k, bool in_cache);
/* The facts kept beside a stored artifact: loads them into k (false when
 * there are none to trust), or stores k's. Off the loop thread. */
bool cube__kernel_facts_load(cube__kernel *k);
void cube__kernel_facts_store(cube__kernel *k);

/* ---- answering the request being handled (reply.c) ---------------------- */

/* One message being handled. */
struct cube__msg {
        cube__conn *conn;
        cube__session *session;
        cube__server *server;
        const cube__envelope *env;
        const msgpack_object *p;        /* params */
        uint32_t n;                     /* number of params */
        void *buf;                      /* the read buffer, for a write to keep */
};

/* What the work asks of the layer above it, the connections and sessions:
 * that layer fills the table at start (server.c), as a backend fills
 * driver.h's, so the work calls up only through it. */
typedef struct cube__upcalls {
        /* Sends a frame allocated with malloc (taken), with a descriptor
         * (taken, closed once sent) or -1. */
        void (*send)(cube__conn *c, char *frame, size_t len, int fd);
        /* Sends an answer of at most CUBE__SMALL_ANSWER bytes (kept by the
         * caller) with the others this round of I/O brought. */
        void (*send_small)(cube__conn *c, const char *bytes, size_t len);
        /* Answers a protocol violation, where a reply can be framed, and closes. */
        void (*protocol_error)(cube__conn *c, int64_t msgid, const char *fmt, ...)
                __attribute__((format(printf, 3, 4)));
        /* Stops taking messages from c until resume. */
        void (*hold)(cube__conn *c);
        void (*resume)(void *conn);
        /* Stops taking messages from c until kernel k is ready or failed;
         * false when k needs no waiting. */
        bool (*wait_for)(cube__conn *c, cube__kernel *k);
        /* Takes messages again once the session is under half its quotas. */
        void (*unthrottle)(cube__conn *c);
        /* Whether the message being dispatched is one dispatched again on resume. */
        bool (*redispatching)(const cube__conn *c);
        /* The session's work is done: it is freed if its connection is gone. */
        void (*session_idle)(cube__session *s);
        /* A session or work ended: a shutdown or a reinit may finish now. */
        void (*check_stopped)(cube__server *srv);
        /* The device was just poisoned: the poison policy's clock starts. */
        void (*poison_started)(cube__server *srv);
        /* Session s has been told the device is poisoned. */
        void (*poison_told)(cube__server *srv, cube__session *s);
} cube__upcalls;

#define CUBE__SMALL_ANSWER 32
/* Sends a response, or an error response, for msgid. */
void cube__reply_error(cube__session *s, uint32_t msgid, const cube_error *error);
void cube__reply_sbuffer(cube__session *s, msgpack_sbuffer *sb);
/* The same, with a descriptor sent along (taken). */
void cube__reply_sbuffer_fd(cube__msg *k, msgpack_sbuffer *sb, int fd);
/* Answers a message whose params have the wrong shape, and closes. */
bool cube__reply_malformed(cube__msg *k, const char *what);
void cube__reply_ok_nil(cube__msg *k);
/* Answers with e (or an out-of-memory error when e is NULL), and frees it. */
void cube__reply_owned_error(cube__msg *k, cube_error *e);

/* ---- the memory methods (memory-methods.c) ------------------------------ */
/* Reads [stream, [handle, ...]]: the shape of read, sync and check. */
bool cube__read_stream_handles(cube__msg *k, uint64_t *ret_stream, cube_handle **ret_handles,
                               size_t *ret_n);
/* Records e as the failure of bytes [start, end) of a: the work that was to
 * write them did not. Takes e. */
void cube__fail_range(cube__session *s, cube__name *n, uint64_t start, uint64_t end,
                      cube_error *e);
cube__dispatched cube__do_create(cube__msg *k);
cube__dispatched cube__do_create_tensors(cube__msg *k);
cube__dispatched cube__do_write(cube__msg *k);
cube__dispatched cube__do_free(cube__msg *k);
cube__dispatched cube__do_read(cube__msg *k);
cube__dispatched cube__do_sync(cube__msg *k);
cube__dispatched cube__do_check(cube__msg *k);
cube__dispatched cube__do_flush(cube__msg *k);
cube__dispatched cube__do_memory_cleanup(cube__msg *k);
cube__dispatched cube__do_memory_report(cube__msg *k);
cube__dispatched cube__do_stream_ids(cube__msg *k);
cube__dispatched cube__do_allocation_mode(cube__msg *k);

/* ---- profiling windows (profile.c) -------------------------------------- */
struct cube__msg;
/* Work on st that was to run inside its open windows failed, at enqueue
 * (refused or skipped): those windows answer the failure, and a capture
 * recording on st is doomed by it. Borrows e. */
void cube__stream_failed(cube__session *s, uint64_t stream, const cube_error *e);
/* A launch (or replay) was queued on st: windows opened at the next launch
 * open here. */
void cube__profile_launch_queued(cube__stream *st, uint64_t seq);
/* A piece of work of st completed: its device time counts toward the
 * windows that hold it, and its failure (0: none) invalidates them. */
void cube__profile_work_done(cube__stream *st, uint64_t seq, const cube__work *w,
                             uint64_t failure);
/* Forgets every window of a session that is ending (no work in flight). */
void cube__profile_session_free(cube__session *s);
/* Packs one captures entry per open window of the session (no header). */
int cube__profile_pack(const cube__session *s, msgpack_packer *pk);

cube__dispatched cube__do_start_profile(cube__msg *k);
cube__dispatched cube__do_end_profile(cube__msg *k);
cube__dispatched cube__do_abandon_profile(cube__msg *k);

/* ---- graph capture and replay (graphs.c) -------------------------------- */
/* Whether st records a capture now: its launches go into the graph. */
bool cube__capturing(const cube__stream *st);
/* graph_state: a refusal naming the call and what was wrong. */
cube_error *cube__graph_state(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The refusal a call that waits on the device owes on a recording stream, or
 * NULL when stream records nothing. */
cube_error *cube__capture_refusal(cube__session *s, uint64_t stream, const char *call);
/* Dooms the capture recording on st, if any: end_capture reports e. Borrows e. */
void cube__capture_doom(cube__stream *st, const cube_error *e);
/* Records one launch into st's capture: l is a complete record the graph
 * takes (one malloc'd block); per buffer, its allocation, range, and whether
 * the launch reads and writes it. */
void cube__capture_launch(cube__stream *st, cube__launch_work *l, cube__alloc *const *allocs,
                          const uint64_t *start, const uint64_t *end, const bool *reads,
                          const bool *writes, size_t n);
/* A replay's launch completed: its timing and error go to the replay. */
void cube__replay_part_done(cube__op *part);
/* A replay completed: the graph it ran may go. */
void cube__replay_done(cube__op *o);
/* Frees every graph and capture of a session that is ending. */
void cube__graphs_session_free(cube__session *s);
/* Packs one captures entry per graph and capture under way (no header). */
int cube__graphs_pack(const cube__session *s, msgpack_packer *pk);
/* One entry of the captures admin method (PROTOCOL.md 5.17). */
int cube__pack_capture_entry(msgpack_packer *pk, uint64_t session, const char *kind,
                             uint64_t stream, uint64_t id, const char *state, uint64_t launches,
                             uint64_t pages, uint64_t page_bytes, uint64_t replays,
                             uint64_t device_ns);

cube__dispatched cube__do_graph_prepare(cube__msg *k);
cube__dispatched cube__do_begin_capture(cube__msg *k);
cube__dispatched cube__do_end_capture(cube__msg *k);
cube__dispatched cube__do_replay(cube__msg *k);
cube__dispatched cube__do_graph_destroy(cube__msg *k);
cube__dispatched cube__do_captures(cube__msg *k);

/* ---- device time: weights, classes, tenants (tenants.c) ----------------- */
/* Device time in the current window and the one before it. */
typedef struct cube__window_ns {
        uint64_t idx;                   /* windows since the daemon started */
        uint64_t cur, last;
} cube__window_ns;

/* Sessions under one name (the operator's tenant=, else their uid): what a
 * cap holds, and what the views add up. */
typedef struct cube__tenant {
        char name[CUBE__TENANT_MAX + 8];
        unsigned sessions;
        uint32_t cap_percent;           /* 0: none */
        bool cap_alone;
        double credit_ns;               /* the cap's bucket */
        uint64_t refilled_ns;
        uint64_t device_ns;
        cube__window_ns window;
        bool shown;                     /* on the shares view being packed */
        struct cube__tenant *next;
} cube__tenant;

#define CUBE__ESTIMATES 16

/* One session's part of the device's time. */
typedef struct cube__share {
        cube__share_terms terms;        /* the operator's */
        uint32_t weight;                /* in force: the terms, lowered by the session */
        cube__class class_;
        uint32_t asked_weight;          /* what the session asked (0: nothing) */
        int asked_class;                /* -1: nothing */
        cube__tenant *tenant;
        double vtime;                   /* device time over weight, ns */
        uint64_t est_ns;                /* expected device time of its work on the device */
        uint64_t device_ns;             /* measured device time of its completed work */
        cube__window_ns window;
        struct { const void *key; uint64_t ns; } est[CUBE__ESTIMATES];
        unsigned est_next;
        uint64_t mean_ns;
} cube__share;

/* The device's side: classes and tenants. */
typedef struct cube__shares {
        cube__tenant *tenants;
        double vnow[CUBE__CLASSES];     /* each class's virtual time: the most served */
        double credit[CUBE__CLASSES];   /* a lower class's minimum share owed, ns */
        uint64_t est_ns[CUBE__CLASSES]; /* expected device time on the device */
        uint64_t active_ns[CUBE__CLASSES];      /* when a session of it last had work there */
        cube__window_ns window;         /* all device time */
        int top;                        /* the best class present, this pass */
        unsigned pass;
        uint64_t hold_ns;               /* a cap holds work back for this long */
        uv_timer_t timer;
        bool timer_ready;
} cube__shares;

/* A new session takes its terms, from the configuration, and its tenant. */
void cube__share_attach(cube__session *s);
void cube__share_detach(cube__session *s);
/* The configuration was reloaded: every session takes its terms again. */
void cube__shares_reload(cube__server *srv);
/* The session lowers its class (-1: unchanged) or weight (0: unchanged);
 * a raise above the operator's terms is refused. */
cube_error *cube__share_lower(cube__session *s, int class_, uint32_t weight);
/* The executor: a scheduling pass begins; whether s's work may go now;
 * whether a's goes before b's; o went to the device; o completed. */
void cube__shares_pass(cube__server *srv, uint64_t now);
bool cube__share_may_submit(cube__session *s, uint64_t now);
/* Whether the device holds less than share-queue-us of expected work, for
 * a launch: the device runs launches in the order it was handed them, so
 * what waits here can still be ordered by the shares. Copies run beside
 * launches, and are not held back. */
bool cube__shares_room(const cube__server *srv);
bool cube__share_before(const cube__session *a, const cube__session *b);
/* o goes to the device; now: the scheduling pass's time. */
void cube__share_submitted(cube__op *o, uint64_t now);
/* s had no work queued or in flight, and now has: it takes up its class's
 * virtual time, having banked nothing while it had no work. */
void cube__share_wake(cube__session *s);
void cube__share_done(cube__op *o);
/* A cap held work back: the executor is called again when it may go. */
void cube__shares_hold(cube__server *srv);
void cube__shares_done(cube__server *srv);
/* Device time in the last whole window. */
uint64_t cube__window_last(const cube__server *srv, cube__window_ns *w);
/* The share s is owed now, per mille. */
uint32_t cube__share_owed(cube__session *s);

/* The shares view in the Prometheus text format, for metrics. */
void cube__shares_metrics(cube__server *srv, FILE *f, const char *instance);
cube__dispatched cube__do_share(cube__msg *k);
cube__dispatched cube__do_shares(cube__msg *k);

/* ---- sessions (session.c) ----------------------------------------------- */
struct cube__session {
        uint64_t id;
        cube__server *server;
        cube__conn *conn;               /* NULL once the connection is gone */
        pid_t pid;
        uid_t uid;
        gid_t gid;
        char name[CUBED_NAME_MAX];
        bool greeted;                   /* hello was answered */
        bool admin_only;                /* opened during a drain: may look and act, not work */
        bool poison_told;               /* has been answered DevicePoisoned */
        uint64_t opened_ns;
        cube__idmap memory;             /* memory id -> cube__name */
        cube__idmap streams;            /* stream id -> cube__stream */
        cube__idmap kernels;            /* kernel id -> cube__kernel, one reference each */
        uint64_t kernel_source_bytes;   /* the sources of those ids (max-kernel-source-bytes) */
        uint64_t kernels_refused;       /* registrations refused by max-kernels and
                                         * max-kernel-source-bytes */
        bool refused_for_bytes;         /* the last refusal was max-kernel-source-bytes' */
        const char *refused_by;         /* the last refusal was this per-user or daemon-wide
                                         * bound's (access.c), of this value */
        uint64_t refused_limit;
        cube__kernel **queued;          /* LaunchMode::Queue, for compile_queued */
        size_t n_queued;
        /* A dynamic cube count fetched for the launch being dispatched. */
        bool count_ready;
        uint32_t count[3];
        cube_error *count_error;
        uint64_t launches;
        unsigned inflight;              /* queued or submitted work not yet complete */
        cube__stream *active_head, *active_tail; /* streams with queued work */
        uint64_t memory_in_use;
        uint64_t memory_peak;
        uint64_t queued_bytes;          /* write payloads held by queued work */
        cube__idmap windows;            /* profiling token -> cube__window (profile.c) */
        uint64_t next_token;
        cube__idmap graphs;             /* graph id -> cube__graph (graphs.c) */
        uint64_t next_graph;
        unsigned captures;              /* streams recording a capture */
        cube__idmap regions;            /* region id -> cube__region */
        uint64_t next_region;
        uint64_t region_bytes;          /* in whole pages */
        uint32_t n_regions;
        uint64_t bytes_in, bytes_out;
        uint64_t errors;
        struct cube__group *groups;     /* its collective groups (groups.c) */
        uint32_t n_groups;
        uint32_t n_peer_names;          /* names of a peer's memory it holds (peer_bind) */
        bool peer_mapped;               /* a peer daemon that was handed this device's memory */
        cube__share share;              /* its part of the device's time (tenants.c) */
        unsigned share_pass;            /* the executor's pass that last tried it */
        cube__session *prev, *next;
};

/* s as the log names it, in w; NULL for no session. */
static inline const cube__log_who *cube__session_who(const cube__session *s, cube__log_who *w)
{
        if (!s)
                return NULL;
        *w = (cube__log_who) { .session = s->id, .pid = s->pid, .uid = s->uid, .name = s->name };
        return w;
}

/* ---- fault injection (inject.c) ----------------------------------------- */
#define CUBE__FAULT_SITES (CUBE_FAULT_DEVICE_LAUNCH + 1)
/* The fault injected at site, once (the caller takes it), or NULL. */
cube_error *cube__inject_take(cube__server *srv, cube_fault_site site);

cube__dispatched cube__do_inject(cube__msg *k);

/* ---- the server (server.c) ---------------------------------------------- */


/* Lifetime counters of this daemon: they never go down while it runs,
 * whatever sessions come and go. The per-session figures of sessions that
 * have ended are added here as they end. */
typedef struct cube__stats {
        uint64_t launches, bytes_in, bytes_out, errors;         /* of ended sessions */
        uint64_t sessions_opened, sessions_refused;
        uint64_t protocol_errors;
        uint64_t poisons;
        uint64_t reloads, reloads_refused;
        uint64_t request_polls, request_polls_caught;   /* linger.c */
        cube__hist compile;             /* compiling a kernel (not loading it from disk) */
        cube__hist queue_wait;          /* work queued in the daemon until it was submitted */
} cube__stats;

struct cube__server {
        uv_loop_t *loop;
        cube__options opts;
        char *const *overrides;         /* the command line's options, kept for reloads */
        size_t n_overrides;
        uv_pipe_t listener;
        bool listening;
        uv_signal_t sigterm, sigint, sighup;
        uv_timer_t watchdog;
        uv_timer_t drain_timer;
        uv_timer_t poison_timer;
        uv_timer_t drain_deadline;      /* cubectl drain --timeout */
        uint64_t drain_deadline_ns;     /* when it acts; 0: none */
        bool socket_inherited;          /* passed by systemd: not ours to unlink */
        bool reinit_pending;
        bool draining;
        bool poison_grace_over;
        int exit_code;                  /* 3: poisoned; CUBE__EXIT_NO_DEVICE */
        char *const *argv;              /* how cubed was started, to start it afresh */
        uv_poll_t completions_poll;     /* an eventfd the device's threads signal */
        uv_idle_t local_completions;    /* drains what the loop thread itself completed */
        uv_thread_t loop_thread;
        cube__conn *answering;          /* connections holding small answers (conn.c) */
        uv_check_t answers_check;          /* sends them after each round of I/O... */
        uv_prepare_t answers_prepare;      /* ...and before the loop waits */
        uv_idle_t linger_idle;          /* active while the loop polls for requests (linger.c) */
        uint64_t linger_until;          /* uv_hrtime() when it stops */
        bool lingering;                 /* it polls now (its rules held last pass) */
        int completions_fd;
        uv_poll_t device_poll;          /* an eventfd the device itself writes (loop_fd) */
        uv_prepare_t device_prepare;    /* driver.h's loop_idle, before the loop waits */
        int device_fd;
        msgpack_zone *zone;             /* decodes requests, one at a time */
        bool zone_busy;

        uv_mutex_t completions_lock;
        cube__work *completions_head, *completions_tail;

        const cube__driver *driver;
        cube__device *device;
        cube_device_properties properties;
        char service[64];
        uint64_t nonce;
        uint64_t started_ns;

        cube__failures failures;
        cube__idmap exports;            /* token prefix -> cube__alloc */
        cube__users users;              /* what each user holds, and the names refused */
        cube__session *sessions;
        uint32_t n_sessions;
        uint64_t next_session_id;
        uint64_t memory_in_use;
        uint64_t memory_peak;
        cube__pools_device pools;       /* what every stream's pools carve from */
        uint64_t allocations;
        unsigned inflight;
        unsigned submitted;             /* work on the device now */
        cube__shares shares;            /* device time by weight, class and tenant */
        bool scheduling, reschedule;
        unsigned plugged;               /* see cube__schedule_plug */
        uint64_t plugged_ns;            /* when the outermost plug began */
        cube__stream *batched;          /* streams with work picked this pass */
        cube__kernel *kernels;          /* every cache entry of this run */
        cube__idmap kernel_index;       /* hash prefix -> first entry with it */
        uint64_t n_kernels;
        uint64_t compiles;
        unsigned compiling;             /* compile jobs in flight, queued ones included */
        unsigned builds_running;        /* of those, holding a build slot */
        atomic_bool shapes_abandoned;   /* set at stop: builds for a cube dimension give up */
        struct cube__kernel *running_builds; /* those, linked (kernels.c) */
        cube__kernel *build_queue;      /* waiting for a slot, oldest first */
        struct cube__refusal {          /* sources refused for good, kept after their
                                         * entries go (kernels.c); the oldest goes first */
                char hash[65];
                cube_error *error;
        } refusals[CUBE__REFUSALS_KEPT];
        unsigned next_refusal;
        uid_t asking_uid;               /* whose request is being dispatched (dispatch.c) */
        bool cache_trusted;             /* the cache directory is ours alone: artifacts may load */
        cube__disk_cache disk_cache;    /* what it holds (cache.c) */
        cube_error *poison;             /* the DevicePoison, once the device is poisoned */
        cube_error *inject[CUBE__FAULT_SITES]; /* the next fault of each site, when injected */
        cube__conn *conns;
        bool stopping;
        /* Descriptors (server.c): the soft RLIMIT_NOFILE, those open at
         * start, and the connections open now. */
        uint64_t fd_limit;
        uint32_t fd_base;
        uint32_t n_conns;
        uint64_t rx_bytes;              /* every connection's receive buffer (conn.c) */
        uint32_t rx_blocked;            /* connections not read for the receive caps */
        const struct cube__transport *transport; /* NULL: NoDeviceTransport */
        struct cube__mint *mints;       /* group ids minted here, not yet joined */
        atomic_bool groups_stopping;    /* joins waiting for a rendezvous give up */
        unsigned orphan_threads;        /* group threads left to end with the process */
        struct cube__progress_service *progress; /* NULL without a transport, or when it
                                                  * could not start (progress.c) */
        char instance[CUBED_NAME_MAX];  /* this device's name among devices: "cpu0" */
        struct cube__peer *peers;       /* devices whose memory kernels here bind (peer.c) */
        cube__stats stats;
        cube__history history;
        char reload_error[512];         /* why the last reload was refused; "" when it was not */
        const struct cube__upcalls *up; /* what the work asks of the requests (reply.c) */
};

/* ---- collective groups (groups.c) --------------------------------------- */
void cube__groups_init(cube__server *srv);
void cube__groups_done(cube__server *srv);
/* The session's connection is gone: its groups are torn down, so the other
 * members learn it now rather than at their timeout. */
void cube__groups_session_detach(cube__session *s);
/* The session is freed: its groups' threads are joined. */
void cube__groups_session_free(cube__session *s);
/* The daemon stops: every group's queued work fails, a run under way is
 * aborted and a join under way answered at once, so the drain waits on
 * none of them. */
void cube__groups_stop(cube__server *srv);

cube__dispatched cube__do_comm_init(cube__msg *k);
cube__dispatched cube__do_comm_mint(cube__msg *k);
cube__dispatched cube__do_comms(cube__msg *k);

/* ---- peer access (peer.c) ----------------------------------------------- */
/* A peer device of this host and user whose memory kernels here bind. */
typedef struct cube__peer cube__peer;
/* NULL while the peer is there, else why its memory may not be bound now. */
cube_error *cube__peer_check(cube__server *srv, const cube__peer *p);
/* A launch of s on stream claimed [start, end) of a, a peer's memory: once
 * the claim is settled, in stream order, the peer learns what those bytes
 * are (written, or the failure they carry) before the stream goes on. */
void cube__peer_launch_wrote(cube__session *s, uint64_t stream, cube__alloc *a, uint64_t start,
                             uint64_t end);
void cube__peers_done(cube__server *srv);

cube__dispatched cube__do_can_access_peer(cube__msg *k);
cube__dispatched cube__do_peer_memory(cube__msg *k);
cube__dispatched cube__do_peer_address(cube__msg *k);
cube__dispatched cube__do_peer_bind(cube__msg *k);
cube__dispatched cube__do_peer_wrote(cube__msg *k);
cube__dispatched cube__do_peer_written(cube__msg *k);

/* ---- collective operations (collectives.c) ------------------------------ */
cube__dispatched cube__do_collective(cube__msg *k);
cube__dispatched cube__do_sync_collective(cube__msg *k);

/* ---- sharing by export and import (share.c) ----------------------------- */
cube__dispatched cube__do_export(cube__msg *k);
cube__dispatched cube__do_import(cube__msg *k);

/* ---- launches (launches.c) ---------------------------------------------- */
cube__dispatched cube__do_register(cube__msg *k);
cube__dispatched cube__do_launch(cube__msg *k);
/* cube__do_launch of a launch's params read straight from the first of len
 * bytes (proto/cursor.h), *ret_len their length: false, having done
 * nothing, when they are not of the plain form that reader takes; then the
 * message is decoded as a tree. */
bool cube__launch_read(cube__msg *k, const uint8_t *params, size_t len, size_t *ret_len,
                       cube__dispatched *ret_dispatched);
cube__dispatched cube__do_compile_queued(cube__msg *k);

/* ---- a launch's tensor maps (tensormaps.c) -------------------------- */
typedef struct cube__tmap {
        cube_tensor_map map;            /* rank: the length of shape as sent */
        uint32_t n_strides, n_box, n_elem_strides, n_lower, n_upper;
} cube__tmap;

/* The map's wire form decoded; false when it is not one. */
bool cube__tmap_decode(const msgpack_object *o, cube__tmap *ret);
/* The map i judged against the bytes its buffer binds: Validation naming
 * the field, or NULL. */
cube_error *cube__tmap_validate(const cube__tmap *t, size_t i, uint64_t binding_bytes);
/* The CUBE__TMAP_WORDS words a checked kernel reads the map from (frontend.h). */
void cube__tmap_words(const cube_tensor_map *m, uint64_t *ret);
uint32_t cube__elem_bytes(cube_elem_type t);

#endif

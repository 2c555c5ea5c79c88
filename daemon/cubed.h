/*
 * cubed.h - the daemon's shared declarations: the server, sessions,
 * allocations, the failure store and the work that flows to the device.
 *
 * Ownership in one paragraph: the loop thread owns every structure here. The
 * device sees only cube__work items; it hands each back through
 * cube__server_complete(), and the loop thread finishes it. A session lives
 * until its connection is gone *and* no work of it is in flight; an
 * allocation's storage lives until it is freed *and* no work uses it.
 */
#ifndef CUBED_H
#define CUBED_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
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
#include "wire.h"

#define CUBED_NAME_MAX 64

typedef struct cube__server cube__server;
typedef struct cube__session cube__session;
typedef struct cube__conn cube__conn;

/* ---- logging (log.c) ---------------------------------------------------- */
enum { CUBE__LOG_ERR = 3, CUBE__LOG_WARNING = 4, CUBE__LOG_NOTICE = 5, CUBE__LOG_INFO = 6,
       CUBE__LOG_DEBUG = 7 };
void cube__log_init(int max_level);
/* Where a log call is, for CODE_FILE/CODE_LINE/CODE_FUNC, and the entry's
 * MESSAGE_ID (NULL: none). */
typedef struct cube__log_site {
        const char *file;
        int line;
        const char *func;
        const char *message_id;
} cube__log_site;
void cube__log_at(const cube__log_site *at, int level, const struct cube__session *s,
                  uint64_t failure, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
#define CUBE__HERE(id) (&(const cube__log_site) { __FILE__, __LINE__, __func__, (id) })
#define cube__log(level, ...) cube__log_at(CUBE__HERE(NULL), (level), NULL, 0, __VA_ARGS__)
/* The same, about session s (and failure, when not 0): under journald these
 * become fields of the entry. */
#define cube__log_session(level, s, failure, ...) \
        cube__log_at(CUBE__HERE(NULL), (level), (s), (failure), __VA_ARGS__)
/* An entry of one of the kinds an operator filters on by MESSAGE_ID. */
#define cube__log_id(id, level, s, ...) cube__log_at(CUBE__HERE(id), (level), (s), 0, __VA_ARGS__)
/* journalctl MESSAGE_ID=... (docs/OPERATIONS.md lists them). */
#define CUBE__MSG_START    "7d3c1c5e8a2f4f0b9b6e1d2a4c5f6e70"
#define CUBE__MSG_STOP     "7d3c1c5e8a2f4f0b9b6e1d2a4c5f6e71"
#define CUBE__MSG_RELOAD   "7d3c1c5e8a2f4f0b9b6e1d2a4c5f6e72"
#define CUBE__MSG_POISON   "7d3c1c5e8a2f4f0b9b6e1d2a4c5f6e73"
#define CUBE__MSG_SESSION_END "7d3c1c5e8a2f4f0b9b6e1d2a4c5f6e74"

/* ---- a map from u64 ids to pointers (idmap.c) --------------------------- */
typedef struct cube__idmap {
        struct cube__idmap_slot *slots;
        size_t cap, len, used;          /* used counts tombstones too */
} cube__idmap;

void *cube__idmap_get(const cube__idmap *m, uint64_t key);
int cube__idmap_put(cube__idmap *m, uint64_t key, void *value);
void *cube__idmap_remove(cube__idmap *m, uint64_t key);
/* Visits every entry; fn may not change the map. */
void cube__idmap_foreach(const cube__idmap *m, void (*fn)(uint64_t key, void *value, void *ctx),
                         void *ctx);
void cube__idmap_free(cube__idmap *m);

/* ---- the failure store (failures.c) ------------------------------------- */
/* Work on the device that is to write some bytes and has not completed: its
 * outcome is not known yet. Claims name it while the bytes are its; answers
 * queued behind it (a read, a sync, a launch reading them) hold it, so they
 * learn how it ended even once later work has claimed the bytes. */
typedef struct cube__writer {
        unsigned refs;
        bool done;
        uint64_t failure;               /* once done: what it ended with, 0 if it wrote */
} cube__writer;

/* A range of one allocation whose bytes are not simply there: either a
 * failure claims them (their writer failed) or a writer still pending does.
 * Exactly one of failure and writer is set; a writer here is never done
 * (claims are settled as their writer completes). */
typedef struct cube__claim {
        uint64_t failure;
        cube__writer *writer;
        uint64_t start, end;            /* [start, end) of the allocation */
} cube__claim;

/* The claims of one allocation: sorted, disjoint ranges. */
typedef struct cube__claims {
        cube__claim *v;
        size_t n, cap;
} cube__claims;

/* What some bytes were, as seen at one request's place in the order: the
 * failures and pending writers claiming them then, in binding and offset
 * order. Holds every record and writer it names. */
typedef struct cube__await {
        uint64_t failure;
        cube__writer *writer;
        uint64_t memory;                /* the memory they were found on */
} cube__await;

typedef struct cube__awaits {
        cube__await *v;
        size_t n, cap;
} cube__awaits;

/* Recent sessions and failures, kept after they end for cubectl history:
 * two rings of `history` entries each. */
typedef struct cube__ended {
        uint64_t id;
        pid_t pid;
        uid_t uid;
        char name[CUBED_NAME_MAX];
        uint64_t launches, bytes_in, bytes_out, errors, memory_peak;
        double opened_s, duration_s;    /* opened: seconds after the daemon started */
} cube__ended;

typedef struct cube__recent_failure {
        uint64_t id, session;
        uid_t uid;
        char root[256];                 /* the root error's message, cut */
        double at_s;
} cube__recent_failure;

typedef struct cube__history {
        uint32_t cap;
        cube__ended *sessions;
        size_t n_sessions, next_session;
        cube__recent_failure *failures;
        size_t n_failures, next_failure;
        uint64_t started_ns;
} cube__history;

int cube__history_init(cube__history *h, uint32_t cap, uint64_t started_ns);
void cube__history_free(cube__history *h);
void cube__history_session(cube__history *h, const struct cube__session *s);
void cube__history_failure(cube__history *h, uint64_t id, uint64_t session, uid_t uid,
                           const cube_error *root);

typedef struct cube__failures {
        uint64_t minted;                /* ids are never reused */
        cube__idmap records;
        cube__history *history;         /* where new failures are remembered, or NULL */
        const struct cube__server *server;
} cube__failures;

/* Records a failure and returns its id (0 on allocation failure). Takes root. */
uint64_t cube__failures_insert(cube__failures *fs, cube_error *root, uint64_t session);
/* Marks [start, end) as carrying failure: set, not add. */
int cube__claims_taint(cube__failures *fs, cube__claims *c, uint64_t start, uint64_t end,
                       uint64_t failure);
/* Marks [start, end) as written: whatever it carried is repaired. */
int cube__claims_written(cube__failures *fs, cube__claims *c, uint64_t start, uint64_t end);
/* Marks [start, end) as the pending writer's: what it carried is replaced,
 * and what the writer ends with will land there, unless later work claims
 * the bytes first. */
int cube__claims_pending(cube__failures *fs, cube__claims *c, uint64_t start, uint64_t end,
                         cube__writer *writer);
/* The writer is done: the bytes it still claims carry its failure, or are
 * plain bytes again. Call once per allocation it wrote, after
 * cube__writer_finish. */
void cube__claims_settle(cube__failures *fs, cube__claims *c, cube__writer *writer);
/* Forgets every claim (the allocation is gone). */
void cube__claims_clear(cube__failures *fs, cube__claims *c);

/* A pending writer with one reference, for the work that is to write. */
cube__writer *cube__writer_new(void);
/* The work ended: failure 0 if it wrote its bytes. A failure is held for as
 * long as the writer is, so answers waiting on it can still report it. */
void cube__writer_finish(cube__failures *fs, cube__writer *w, uint64_t failure);
void cube__writer_unref(cube__failures *fs, cube__writer *w);

/* Appends the claims on [start, end) of c, in order, to a. */
int cube__awaits_collect(cube__failures *fs, cube__awaits *a, const cube__claims *c,
                         uint64_t start, uint64_t end, uint64_t memory);
/* The first failure in a once its writers are done (or known so far): 0 if
 * none. Sets *ret_memory to where it was found, and *ret_pending to whether a
 * writer still pending comes before it (the answer may still change). */
uint64_t cube__awaits_first(const cube__awaits *a, uint64_t *ret_memory, bool *ret_pending);
/* Every distinct failure a names, as ServerError::Several of Unwritten, or
 * NULL when there is none. */
cube_error *cube__awaits_report(cube__failures *fs, const cube__awaits *a);
void cube__awaits_release(cube__failures *fs, cube__awaits *a);
/* Adds failure's report, walked back from memory, to *several (made on
 * first use) unless it is there already. */
int cube__failures_add_report(cube__failures *fs, cube_error **several, uint64_t failure,
                              uint64_t memory);

/* Drops a record that no allocation carries. */
void cube__failures_prune(cube__failures *fs, uint64_t failure);
/* Records that a launch of kernel was skipped because memory needed carried
 * failure, and that the memory it was to write claims it now: the hop a read
 * downstream reports in its chain. */
void cube__failures_skipped(cube__failures *fs, uint64_t failure, const char *kernel,
                            uint64_t needed, const uint64_t *produced, size_t n_produced);
/* The same hop for a launch that ran before its input's writer was known to
 * have failed: what it wrote claims the failure as if it had been skipped. */
void cube__failures_ran_stale(cube__failures *fs, uint64_t failure, const char *kernel,
                              uint64_t needed, const uint64_t *produced, size_t n_produced);
/* Adds a line to what a failure's reports say after the chain: why the root
 * happened, when the root alone does not say (a quota). */
void cube__failures_note(cube__failures *fs, uint64_t failure, const char *note);
/* ServerError::Unwritten for a failure, its chain walked back from memory
 * (0: every hop, newest first). */
cube_error *cube__failures_report(cube__failures *fs, uint64_t failure, uint64_t memory);
size_t cube__failures_live(const cube__failures *fs);
/* Every live failure as [{id, session, report: Unwritten}, ...]. */
int cube__failures_pack(cube__failures *fs, msgpack_packer *pk);
void cube__failures_free(cube__failures *fs);

/* ---- allocations and streams (memory.c) --------------------------------- */
struct cube__op;
struct cube__memory;

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
        struct cube__memory *memory;    /* the pools it was carved from */
        struct cube__page *page;
        uint64_t base;                  /* where it starts in its page */
        uint64_t padding;               /* bytes after it the alignment costs */
        cube__claims claims;
        unsigned pending;               /* queued or submitted work that uses it */
        unsigned holders;               /* names */
        struct cube__name *names;
        bool freed;                     /* no name is left */
        cube__use *uses_head, *uses_tail;
        char token[33];                 /* its export token, or "" */
        struct cube__peer *peer;        /* a peer device's memory it names (peer.c), or NULL */
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
        struct cube__memory *memory;    /* its pools, from its first allocation */
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
 * recorded on the allocation, as the reference's initialize_memory does. */
int cube__alloc_create(cube__session *s, uint64_t id, uint64_t size, uint64_t stream);
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
/* Lands failure on [start, end) of a. A failed reservation keeps its own
 * failure over every byte: it is what every read of it reports, whatever
 * later work failed to write there. */
void cube__alloc_taint(cube__alloc *a, uint64_t start, uint64_t end, uint64_t failure);
/* Names storage, size bytes of peer device p's memory (peer.c), as memory
 * id of s: an allocation that is the peer's, charged to no one here. Takes
 * storage. */
struct cube__peer;
cube_error *cube__alloc_peer(cube__session *s, uint64_t id, struct cube__peer *p,
                             cube__storage *storage, uint64_t size);
/* Export: a token another session imports the allocation with. */
const char *cube__alloc_export(cube__name *n);
/* Import: a new name in s for the exported allocation, or an error. */
cube_error *cube__alloc_import(cube__session *s, const char *token, uint64_t id, bool read_only,
                               cube__name **ret_name);

/* ---- pools of pages and slices (pools.c) -------------------------------- */
enum { CUBE__POOL_SMALL, CUBE__POOL_LARGE, CUBE__POOL_PERSISTENT, CUBE__POOL_DEDICATED,
       CUBE__POOLS };
enum { CUBE__MODE_AUTO = 0, CUBE__MODE_PERSISTENT = 1, CUBE__MODE_DEDICATED = 2 };

typedef struct cube__slice {
        uint64_t offset, size;
        bool free;
        struct cube__slice *next;
} cube__slice;

typedef struct cube__page {
        struct cube__pool *pool;
        cube__storage *storage;
        uint64_t size;
        uint32_t live;                  /* allocations on it */
        cube__slice *slices;            /* small pages: every slice, in order */
        struct cube__page *next;
} cube__page;

typedef struct cube__pool {
        int kind;
        uint64_t page_size;             /* small pool: its pages' size */
        uint64_t max_slice;
        cube__page *pages;
        uint32_t n_pages, pages_peak;
        uint64_t allocations, bytes_in_use, bytes_padding, bytes_reserved, largest_alloc;
} cube__pool;

/* One stream's memory. */
typedef struct cube__memory {
        cube__server *server;
        cube__pool pools[CUBE__POOLS];
        int modes[16];                  /* MemoryAllocationMode, nested */
        int n_modes;
        int capture;                    /* CUBE__CAPTURE_*: a prepared stream keeps its empty
                                         * pages; a recording one may add none */
        unsigned refs;                  /* live allocations, and the stream while it lives */
} cube__memory;

enum { CUBE__CAPTURE_NONE, CUBE__CAPTURE_PREPARED, CUBE__CAPTURE_RECORDING };

cube__memory *cube__memory_new(cube__server *srv);
/* The stream is gone: its empty pages go, the rest once their allocations do. */
void cube__memory_close(cube__memory *m);
/* Carves size bytes for a: IoError::BufferTooBig, OutOfMemory (after one
 * reclaim of every empty page of the device) or PageSizesExhausted. */
cube_error *cube__memory_reserve(cube__memory *m, uint64_t size, cube__alloc *a);
void cube__memory_release(cube__alloc *a);
/* Gives back every page of m that holds no allocation; returns the bytes. */
uint64_t cube__memory_cleanup(cube__memory *m);
/* The same for every stream of every session. */
void cube__memory_reclaim(cube__server *srv);
void cube__memory_mode(cube__memory *m, int mode);
/* The stream's report: {stream, pools: [...]} (PROTOCOL.md, memory_report). */
int cube__memory_pack(const cube__memory *m, uint64_t stream, msgpack_packer *pk);

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
typedef struct cube__uid {
        uint32_t sessions;
        uint64_t memory;
        uint64_t rx_bytes;              /* receive buffers of its connections */
        uint32_t poisons;               /* times its sessions poisoned the device */
        uint64_t banned_until_ns;       /* refused until then (poison-ban-after) */
} cube__uid;

/* A session name whose sessions poisoned the device (poison-ban-after). */
#define CUBE__NAME_BANS 64
typedef struct cube__name_ban {
        char name[CUBED_NAME_MAX];
        uint32_t poisons;
        uint64_t banned_until_ns;
} cube__name_ban;

/* Counts a poison against the session's uid and name; past poison-ban-after,
 * they are refused for poison-ban-seconds. */
void cube__poison_blame(cube__server *srv, const struct cube__session *s);
/* Whether the name is refused now; why says for how long. */
bool cube__name_banned(cube__server *srv, const char *name, char *why, size_t len);

cube__uid *cube__uid_get(cube__server *srv, uid_t uid);

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
        bool submitted;
        bool deferred_skip;             /* a launch that cannot run, queued only to learn
                                         * which failure its outputs carry */
        uint64_t seq;                   /* its place on its stream (profiling windows) */
        cube__work *chain;              /* a replay: its launches, ending with work; or NULL */
        struct cube__op *part_of;       /* a replay's launch: the replay it belongs to */
        struct cube__graph *graph;      /* a replay: the graph it runs */
        /* Work the daemon runs itself rather than the device (a collective):
         * the executor calls host_run on the loop thread once everything
         * before it on its stream is done, holds the stream's later work until
         * it completes (through cube__server_complete, from any thread), and
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
/* The work is done: it no longer orders anything. */
void cube__op_retire(cube__op *o);
/* Marks the device poisoned (once) with why; every later operation reports it. */
void cube__server_poison(cube__server *srv, cube__session *by, cube_error *poison);
/* ServerError::DevicePoisoned for the poisoned device. */
cube_error *cube__poisoned(cube__server *srv);
cube__pending_reply *cube__pending_new(cube__session *s, uint32_t msgid);
/* Called when every piece of work for the reply was submitted. */
void cube__pending_arm(cube__pending_reply *r);
/* Any thread: the backend's completion function. */
void cube__server_complete(void *ctx, cube__work *work);
/* Loop thread: finishes completed work. */
void cube__server_drain_completions(cube__server *srv);

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

/* One entry of the cache every session shares. */
typedef struct cube__kernel {
        char hash[65];
        char *source;
        char *entry;
        cube__kernel_desc desc;
        cube_buffer_io *io;             /* the compiled answer, per buffer parameter */
        cube__kernel_state state;
        cube__module *module;
        uint32_t shared_bytes;
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
        uint64_t hits;
        cube__kernel_waiter *waiters;
        size_t n_waiters;
        cube__server *server;
        uv_work_t work;
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

/* ---- the kernel cache on disk (cache.c) --------------------------------- */
#define CUBE__ARTIFACT_NAME 80          /* KEY.EXT, NUL included */
#define CUBE__EVICTED_KEPT 16           /* evictions remembered for cubectl kernels */

typedef struct cube__artifact {
        char name[CUBE__ARTIFACT_NAME];
        uint64_t bytes;                 /* the artifact and its digest */
        uint64_t used_ns;               /* last written or loaded, wall clock */
        unsigned pins;                  /* compile jobs that may load it now */
} cube__artifact;

typedef struct cube__evicted {
        char name[CUBE__ARTIFACT_NAME];
        uint64_t bytes;
        double at_s;                    /* seconds after the daemon started */
} cube__evicted;

typedef struct cube__disk_cache {
        cube__artifact *v;
        size_t n, cap;
        uint64_t bytes;
        uint64_t evictions, evicted_bytes;
        cube__evicted recent[CUBE__EVICTED_KEPT];
        size_t n_recent, next_recent;
} cube__disk_cache;

/* KEY.EXT, the artifact's name in the cache directory. */
void cube__artifact_name(const cube__server *srv, const char *hash,
                         char name[CUBE__ARTIFACT_NAME]);
/* Any thread: opens a cached artifact through the held directory, checked
 * on the descriptor (owner, mode, no symlink) and against its recorded
 * digest. Returns the descriptor to load from, or -ENOENT, -EPERM (not a
 * file of ours), -EBADMSG (no or another digest). */
int cube__artifact_open(const cube__server *srv, const char *name, uint64_t *ret_bytes);
/* Any thread: opens an artifact a compile just wrote, checked the same way,
 * and records its digest; returns the descriptor or a negative errno. */
int cube__artifact_seal(const cube__server *srv, const char *name, uint64_t *ret_bytes);
/* Any thread: marks an artifact used now (its mtime), for later runs. */
void cube__artifact_touch(int fd);
/* Loop thread: the index, from what the directory holds at start. */
int cube__disk_cache_init(cube__server *srv);
void cube__disk_cache_free(cube__server *srv);
/* A compile job of hash is about to run: its artifact is not evicted until
 * unpinned. Returns whether the cache holds it. */
bool cube__disk_cache_pin(cube__server *srv, const char *hash);
/* The job is done; used: it loaded the artifact. */
void cube__disk_cache_unpin(cube__server *srv, const char *hash, bool used);
/* A compile stored hash's artifact of bytes: evicts what no longer fits. */
void cube__disk_cache_stored(cube__server *srv, const char *hash, uint64_t bytes);
/* The kernel_cache admin reply (PROTOCOL.md); names: with the evicted
 * artifacts' names (an administrator asks). */
int cube__disk_cache_pack(const cube__server *srv, msgpack_packer *pk, bool names);

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

/* ---- access and session quotas (access.c) ------------------------------ */
/* Whether the peer, of these credentials and supplementary groups, may not
 * connect (allow-uids, allow-groups); why says why. */
bool cube__access_refused(cube__server *srv, const struct ucred *cred, const gid_t *groups,
                          size_t n_groups, char *why, size_t len);
/* The peer's supplementary groups, from the kernel (SO_PEERGROUPS): an array
 * the caller frees. */
int cube__peer_groups(int fd, gid_t **ret_groups, size_t *ret_n);
/* Whether another session of uid would cross max-sessions or
 * max-sessions-per-uid; why names the quota. */
bool cube__session_quota_full(cube__server *srv, uid_t uid, char *why, size_t len);
/* Gives the socket the configured group, when cubed bound it. */
int cube__socket_set_group(const char *path, const char *group);

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
        struct cube__group *groups;     /* its collective groups (comms.c) */
        uint32_t n_groups;
        uint32_t n_peer_names;          /* names of a peer's memory it holds (peer_bind) */
        cube__session *prev, *next;
};

cube__session *cube__session_new(cube__server *srv, cube__conn *conn, pid_t pid, uid_t uid,
                                 gid_t gid);
/* The connection is gone: the session ends once its work completes. */
void cube__session_detach(cube__session *s);
/* Frees the session if it is detached and idle. */
void cube__session_maybe_free(cube__session *s);

/* ---- writes received straight into device memory (direct.c) ------------ */
/* An inline write whose payload is being read into its target. */
typedef struct cube__direct {
        cube__alloc *alloc;             /* NULL: none in progress */
        char *dst;                      /* where the next payload byte goes */
        uint64_t left;                  /* payload bytes still to come */
} cube__direct;

/* Whether the message of mlen bytes, of which avail are buffered at msg, is
 * an inline write that may be received into its target; if so, takes the
 * payload bytes already buffered and fills *ret, and every byte of the
 * message buffered so far is consumed. */
bool cube__direct_begin(cube__session *s, const uint8_t *msg, size_t avail, size_t mlen,
                        cube__direct *ret);
/* n more payload bytes were read to d->dst. The write ends with its last. */
void cube__direct_advance(cube__direct *d, size_t n);
/* Ends it, done or abandoned (the connection closed mid-payload). */
void cube__direct_end(cube__direct *d);

/* ---- closing descriptors off the loop (closer.c) ----------------------- */
/* Starts the closer thread (at start, so its stack is in the baseline). */
void cube__closer_init(void);
/* Closes fd on the closer thread (in place when it cannot take it). */
void cube__close_later(int fd);
/* The same for a descriptor a client passed: a socket loses its linger. */
void cube__close_received(int fd);
/* A duplicate of fd, to close a handle's descriptor on the loop while the
 * duplicate's close, the last one, goes to cube__close_later; -1 on failure. */
int cube__close_keep(int fd);

/* ---- connections (conn.c) ----------------------------------------------- */
/* Sends a frame the caller allocated with malloc; takes ownership. */
void cube__conn_send(cube__conn *c, char *frame, size_t len);
/* The same, with a descriptor sent along (taken, closed once sent). */
void cube__conn_send_fd(cube__conn *c, char *frame, size_t len, int fd);
/* Sends an answer of at most CUBE__SMALL_ANSWER bytes, which the caller
 * keeps. It is held until the loop has dispatched everything this round of
 * I/O brought, then written with the others (see conn.c). */
#define CUBE__SMALL_ANSWER 32
void cube__conn_send_small(cube__conn *c, const char *bytes, size_t len);
/* Starts and stops the loop handles that send held answers. */
void cube__conn_answers_init(cube__server *srv);
void cube__conn_answers_close(cube__server *srv);
/* Sends a response, or an error response, for msgid. */
void cube__reply_error(cube__session *s, uint32_t msgid, const cube_error *error);
void cube__reply_sbuffer(cube__session *s, msgpack_sbuffer *sb);
/* Answers a protocol violation, where a reply can be framed, and closes. */
void cube__conn_protocol_error(cube__conn *c, int64_t msgid, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
void cube__conn_close(cube__conn *c);
cube__session *cube__conn_session(cube__conn *c);
void cube__conn_close_all(cube__server *srv);
/* Stops taking messages from c until kernel k is ready or failed (it is
 * being compiled): what c sends meanwhile waits, in order, in the socket.
 * Returns false when k needs no waiting. */
bool cube__conn_wait_for(cube__conn *c, cube__kernel *k);
/* Stops taking messages from c until cube__conn_resume. */
void cube__conn_hold(cube__conn *c);
void cube__conn_resume(void *conn);
/* Takes messages again once the session is under half its quotas. */
void cube__conn_unthrottle(cube__conn *c);
/* Whether the message being dispatched is one dispatched again on resume. */
bool cube__conn_redispatching(const cube__conn *c);
int cube__listen(cube__server *srv, const char *path);
void cube__on_connection(uv_stream_t *listener, int status);
/* Connections accepted while the device was re-initialised start now. */
void cube__conn_start_held(cube__server *srv);
/* Whether any connection is served (held ones are not). */
bool cube__conn_any_active(const cube__server *srv);

/* ---- dispatch (dispatch.c) ---------------------------------------------- */
typedef enum cube__dispatched {
        CUBE__DISPATCH_DONE,            /* the message was handled */
        CUBE__DISPATCH_KEPT,            /* handled, and its read buffer is now a write's */
        CUBE__DISPATCH_PAUSED,          /* not handled yet: dispatch it again on resume */
} cube__dispatched;

/* Handles one decoded message. buf is the read buffer the message lives in,
 * which the dispatcher may keep when a write's payload is large. */
cube__dispatched cube__dispatch(cube__conn *c, const msgpack_object *msg, void *buf);

/* ---- fault injection (inject.c) ----------------------------------------- */
/* The fault injected at site, once (the caller takes it), or NULL. */
cube_error *cube__inject_take(cube__server *srv, cube_fault_site site);

/* ---- the server (server.c) ---------------------------------------------- */
typedef enum cube__poison_policy {
        CUBE__POISON_EXIT,              /* exit non-zero once sessions were told; systemd restarts */
        CUBE__POISON_REINIT,            /* bring the device up again once sessions were told */
} cube__poison_policy;

/* allow-uids or allow-groups, resolved to numeric ids when loaded. */
typedef struct cube__id_list {
        uint32_t *ids;
        size_t n;
        bool set;                       /* the option was given (even if empty of ids) */
} cube__id_list;

/* Resolves a comma-separated list of names or numbers; why names an entry
 * that names no user or group. */
int cube__id_list_parse(const char *list, bool group, cube__id_list *ret, char *why, size_t len);

/* Where an option's value came from, for cubectl config. */
enum { CUBE__FROM_DEFAULT, CUBE__FROM_FILE, CUBE__FROM_COMMAND_LINE };
#define CUBE__OPTIONS_MAX 48

/* Every option, from defaults, the configuration file and the command line
 * (config.c). Strings are owned. */
typedef struct cube__options {
        char *socket_path;
        char *backend;
        unsigned device_index;
        char *cache_dir;
        char *config_path;              /* the file read, or NULL */
        bool config_optional;           /* --config-if-exists: a missing file is no error */
        uint64_t memory_limit;
        cube__limits limits;
        int log_level;
        cube__poison_policy poison_policy;
        uint32_t drain_timeout_s;
        /* Quotas (0: none). */
        uint64_t session_memory;        /* device memory one session may hold */
        uint64_t uid_memory;            /* device memory one user's sessions may hold */
        uint32_t max_sessions;
        uint32_t max_sessions_per_uid;
        uint32_t max_streams;           /* per session */
        uint32_t max_requests;          /* per session: work queued and answers owed */
        uint64_t max_queued_bytes;      /* per session: payloads held and replies unsent */
        uint64_t region_memory;         /* per session: staging regions, in whole pages */
        uint32_t max_regions;           /* per session: staging regions (each is a mapping) */
        uint64_t uid_queued_bytes;      /* per user: messages being received */
        uint64_t max_receive_bytes;     /* the daemon: messages being received */
        uint32_t hello_timeout_s;       /* from accept to hello */
        uint32_t frame_timeout_s;       /* a message begun and not arriving */
        uint32_t max_profile_windows;   /* per session: profiling windows open at once */
        uint32_t max_graphs;            /* per session: graphs held, captures included */
        uint32_t max_graph_launches;    /* per graph: launches one capture may record */
        uint32_t max_kernels;           /* per session: kernel ids registered */
        uint64_t max_kernel_source_bytes; /* per session: source bytes of those registrations */
        uint64_t cache_max_bytes;       /* the disk cache's artifacts (0: no limit) */
        /* Access. */
        char *socket_group;             /* the socket's group, when we bind it */
        char *allow_uids;               /* comma-separated; empty: anyone the socket lets in */
        char *allow_groups;
        cube__id_list allow_uid_ids;    /* the lists, resolved at load */
        cube__id_list allow_gid_ids;
        uint32_t poison_grace_s;        /* how long a poisoned device is reported before the policy acts */
        uint32_t history;               /* ended sessions and failures kept for cubectl history */
        uint32_t poison_ban_after;      /* poisons by one uid or name before it is refused (0: never) */
        uint32_t poison_ban_s;          /* for how long */
        uint32_t kernel_timeout_s;      /* a launch running longer poisons the device; 0: none */
        uint32_t compile_limit_s;       /* CPU time one kernel build may take */
        bool fault_injection;           /* tests only */
        /* Collectives (comms.c). */
        char *transport;                /* "none": no collectives (NoDeviceTransport) */
        char *comm_dir;                 /* where same-host groups meet; default: the socket's */
        char *comm_address;             /* the IP this daemon's transport listens on */
        uint32_t collective_timeout_ms; /* a member silent this long is lost */
        uint32_t max_groups;            /* per session */
        uint8_t source[CUBE__OPTIONS_MAX];      /* per option (cube__option_key): CUBE__FROM_* */
        uint32_t line[CUBE__OPTIONS_MAX];       /* the file's line, when from the file */
} cube__options;

void cube__options_default(cube__options *o);
void cube__options_done(cube__options *o);
/* Sets one option by its key (the long command-line option's name). */
int cube__option_set(cube__options *o, const char *key, const char *value, const char **ret_why);
/* Builds the options from defaults, the file at path (may be NULL), then
 * overrides (key, value pairs). On failure, why says what and where. */
int cube__config_load(const char *path, bool optional, char *const *overrides, size_t n_overrides,
                      cube__options *ret, char *why, size_t why_len);
/* The options by index, for listing them: key, value as the file would
 * spell it, and whether a reload changes it. NULL past the last. */
const char *cube__option_key(size_t i, bool *ret_reloadable);
void cube__option_format(const cube__options *o, size_t i, char *buf, size_t len);
/* Applies what a reload may change. */
void cube__options_reload(cube__options *cur, const cube__options *next);

#define CUBE__FAULT_SITES (CUBE_FAULT_DEVICE_LAUNCH + 1)

/* A histogram of seconds, for the metrics: fixed bucket bounds. */
#define CUBE__HIST_BUCKETS 12
typedef struct cube__hist {
        uint64_t buckets[CUBE__HIST_BUCKETS];   /* observations <= bound i (not cumulative) */
        uint64_t count;
        double sum;
} cube__hist;

extern const double cube__hist_bounds[CUBE__HIST_BUCKETS];
void cube__hist_observe(cube__hist *h, double seconds);

/* Lifetime counters of this daemon: they never go down while it runs,
 * whatever sessions come and go. The per-session figures of sessions that
 * have ended are added here as they end. */
typedef struct cube__stats {
        uint64_t launches, bytes_in, bytes_out, errors;         /* of ended sessions */
        uint64_t sessions_opened, sessions_refused;
        uint64_t protocol_errors;
        uint64_t poisons;
        uint64_t reloads, reloads_refused;
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
        uv_poll_t completions_poll;     /* an eventfd the device's threads signal */
        cube__conn *answering;          /* connections holding small answers (conn.c) */
        uv_check_t answers_check;          /* sends them after each round of I/O... */
        uv_prepare_t answers_prepare;      /* ...and before the loop waits */
        int completions_fd;
        uv_poll_t device_poll;          /* an eventfd the device itself writes (loop_fd) */
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
        cube__idmap uids;               /* uid -> cube__uid: what each user holds */
        cube__session *sessions;
        uint32_t n_sessions;
        uint64_t next_session_id;
        uint64_t memory_in_use;
        uint64_t memory_peak;
        uint64_t memory_reserved;       /* pages taken from the device */
        uint64_t allocations;
        unsigned inflight;
        unsigned submitted;             /* work on the device now */
        cube__session *rr;              /* the session the executor serves first next */
        bool scheduling, reschedule;
        unsigned plugged;               /* see cube__schedule_plug */
        cube__stream *batched;          /* streams with work picked this pass */
        cube__kernel *kernels;          /* every cache entry of this run */
        cube__idmap kernel_index;       /* hash prefix -> first entry with it */
        uint64_t n_kernels;
        uint64_t compiles;
        unsigned compiling;             /* compile jobs in flight */
        bool cache_trusted;             /* the cache directory is ours alone: artifacts may load */
        int cache_fd;                   /* the cache directory, held open since start */
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
        struct cube__progress_service *progress; /* NULL without a transport, or when it
                                                  * could not start (progress.c) */
        char instance[CUBED_NAME_MAX];  /* this device's name among devices: "cpu0" */
        struct cube__peer *peers;       /* devices whose memory kernels here bind (peer.c) */
        cube__stats stats;
        cube__history history;
        cube__name_ban name_bans[CUBE__NAME_BANS];
        char reload_error[512];         /* why the last reload was refused; "" when it was not */
};

/* Descriptors kept for root and the daemon's own user: others' connections
 * are refused before they would take these, so an operator can always get in. */
#define CUBE__ADMIN_FDS 32
/* Descriptors beyond one a session kept for the rest: regions being sent,
 * compiles, the cache, the device. */
#define CUBE__SPARE_FDS 64
/* Whether max-sessions fits the descriptor limit; why says what to change. */
bool cube__fds_fit(const cube__server *srv, const cube__options *o, char *why, size_t len);
/* Whether an administrative peer (root, the daemon's uid). */
bool cube__uid_is_admin(uid_t uid);

/* ---- collectives (comms.c) ---------------------------------------------- */
void cube__comms_init(cube__server *srv);
void cube__comms_done(cube__server *srv);
/* A socket listening on address (an IPv4 address) at a port of the kernel's
 * choosing, told in *ret_port; -1 with errno set. */
int cube__listen_tcp(const char *address, uint16_t *ret_port);

/* ---- how far members have got, asked when an operation fails (progress.c) */
#define CUBE__GROUP_MAX 64              /* members of one group */
/* This daemon's member of a group, as the service tells it. */
typedef struct cube__progress {
        uint64_t group, nonce;          /* the group and its round */
        uint32_t rank;
        _Atomic uint64_t started;       /* operations it has started */
        struct cube__progress *next;    /* the service's */
} cube__progress;
typedef struct cube__progress_service cube__progress_service;
/* Answers on a TCP socket of address; NULL with why when it cannot. */
cube__progress_service *cube__progress_start(const char *address, char *why, size_t len);
void cube__progress_stop(cube__progress_service *ps);
/* "ip:port", which members exchange when they join; "" without a service. */
const char *cube__progress_card(const cube__progress_service *ps);
void cube__progress_add(cube__progress_service *ps, cube__progress *m);
void cube__progress_remove(cube__progress_service *ps, cube__progress *m);
/* Asks every other member (cards by rank, NULL where unknown) how far it
 * has got, waiting at most half a second in all, and names in buf those
 * that never started the operation me is in, do not answer, or left the
 * group; answers the length written (0: none). */
size_t cube__progress_name_silent(const cube__progress *me, uint32_t size,
                                  const char *const *cards, char (*names)[CUBED_NAME_MAX],
                                  char *buf, size_t len);

/* ---- peer access (peer.c) ----------------------------------------------- */
/* A peer device of this host and user whose memory kernels here bind. */
typedef struct cube__peer cube__peer;
/* NULL while the peer is there, else why its memory may not be bound now. */
cube_error *cube__peer_check(cube__server *srv, const cube__peer *p);
void cube__peers_done(cube__server *srv);
/* The session's connection is gone: its groups are torn down, so the other
 * members learn it now rather than at their timeout. */
void cube__comms_session_detach(cube__session *s);
/* The session is freed: its groups' threads are joined. */
void cube__comms_session_free(cube__session *s);

/* Takes opts; keeps overrides (the command line's options) for reloads. */
int cube__server_init(cube__server *srv, cube__options *opts, char *const *overrides,
                      size_t n_overrides);
int cube__server_run(cube__server *srv);
void cube__server_stop(cube__server *srv);
/* Takes no new work: sessions opened from now on may only look and act
 * (cubectl); stops once the last working session has ended, or, past
 * timeout_s (0: none), closes them. by is who asked (NULL: a signal). */
void cube__server_drain(cube__server *srv, uint32_t timeout_s, cube__session *by);
/* Ends a drain: new sessions work again. */
void cube__server_undrain(cube__server *srv, cube__session *by);
void cube__server_done(cube__server *srv);
/* Called whenever a session or work ends, to finish a shutdown or a reinit. */
void cube__server_check_stopped(cube__server *srv);
/* The device was just poisoned: start the poison policy's clock. */
void cube__server_poison_started(cube__server *srv);
/* Session s has been told the device is poisoned. */
void cube__server_poison_told(cube__server *srv, cube__session *s);

#endif

/*
 * services.h - the daemon's lower layer: state and services that know
 * nothing of connections, requests or device work.
 *
 * ids, the log and what is remembered for operators, the failure store,
 * pools of device memory, the kernel cache on disk, options, access and what
 * each user holds, the progress service of collective groups, and the
 * closer. Everything above (the work in cubed.h, and the requests) may call
 * down into these; nothing here calls up, includes cubed.h, or reads the
 * server: what a function needs of the daemon is passed to it.
 * tests/check-layers.py fails the suite when a file crosses that wall.
 */
#ifndef CUBE_SERVICES_H
#define CUBE_SERVICES_H

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
#include "prescan.h"
#include "wire.h"

#define CUBED_NAME_MAX 64

struct cube__options;

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
/* Whom an entry is about: a session's id, its peer and its name (NULL:
 * nobody). Under journald these become fields of the entry. */
typedef struct cube__log_who {
        uint64_t session;
        pid_t pid;
        uid_t uid;
        const char *name;
} cube__log_who;
void cube__log_at(const cube__log_site *at, int level, const cube__log_who *who,
                  uint64_t failure, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
#define CUBE__HERE(id) (&(const cube__log_site) { __FILE__, __LINE__, __func__, (id) })
#define cube__log(level, ...) cube__log_at(CUBE__HERE(NULL), (level), NULL, 0, __VA_ARGS__)
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

/* ---- what the daemon remembers for its operators (history.c) ----------- */
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
void cube__history_session(cube__history *h, const cube__ended *ended);
void cube__history_failure(cube__history *h, uint64_t id, uint64_t session, uid_t uid,
                           const cube_error *root);

/* A histogram of seconds, for the metrics: fixed bucket bounds. */
#define CUBE__HIST_BUCKETS 12
typedef struct cube__hist {
        uint64_t buckets[CUBE__HIST_BUCKETS];   /* observations <= bound i (not cumulative) */
        uint64_t count;
        double sum;
} cube__hist;

extern const double cube__hist_bounds[CUBE__HIST_BUCKETS];
void cube__hist_observe(cube__hist *h, double seconds);

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

typedef struct cube__failures {
        uint64_t minted;                /* ids are never reused */
        cube__idmap records;
        cube__history *history;         /* where new failures are remembered, or NULL */
} cube__failures;

/* Records a failure of session (of user uid) and returns its id (0 on
 * allocation failure). Takes root. */
uint64_t cube__failures_insert(cube__failures *fs, cube_error *root, uint64_t session, uid_t uid);
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

/* ---- pools of pages and slices (pools.c) -------------------------------- */
/* What every stream's pools carve from: the device, and how much of it
 * pages hold. */
typedef struct cube__pools_device {
        const cube__driver *driver;
        cube__device *device;
        const cube_device_properties *properties;
        uint64_t reserved;              /* bytes of pages taken from the device */
        /* Gives back every empty page any stream keeps; a reservation that
         * finds the device full calls it once before it asks again. */
        void (*reclaim)(void *ctx);
        void *reclaim_ctx;
} cube__pools_device;

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
typedef struct cube__pools {
        cube__pools_device *device;
        cube__pool pools[CUBE__POOLS];
        int modes[16];                  /* MemoryAllocationMode, nested */
        int n_modes;
        int capture;                    /* CUBE__CAPTURE_*: a prepared stream keeps its empty
                                         * pages; a recording one may add none */
        unsigned refs;                  /* live allocations, and the stream while it lives */
} cube__pools;

/* Where a reservation was carved. */
typedef struct cube__carve {
        cube__pools *pools;
        cube__page *page;
        cube__storage *storage;         /* the page's */
        uint64_t base;                  /* where it starts in its page */
        uint64_t padding;               /* bytes after it the alignment costs */
} cube__carve;

enum { CUBE__CAPTURE_NONE, CUBE__CAPTURE_PREPARED, CUBE__CAPTURE_RECORDING };

cube__pools *cube__pools_new(cube__pools_device *dev);
/* The stream is gone: its empty pages go, the rest once their allocations do. */
void cube__pools_close(cube__pools *m);
/* Carves size bytes: IoError::BufferTooBig, OutOfMemory (after one reclaim
 * of every empty page of the device) or PageSizesExhausted. */
cube_error *cube__pools_reserve(cube__pools *m, uint64_t size, cube__carve *ret_carve);
/* Gives back what cube__pools_reserve carved for size bytes. */
void cube__pools_release(const cube__carve *c, uint64_t size);
/* Gives back every page of m that holds no allocation; returns the bytes. */
uint64_t cube__pools_cleanup(cube__pools *m);
void cube__pools_mode(cube__pools *m, int mode);
/* The stream's report: {stream, pools: [...]} (PROTOCOL.md, memory_report). */
int cube__pools_pack(const cube__pools *m, uint64_t stream, msgpack_packer *pk);

/* ---- the kernel cache on disk (cache.c) --------------------------------- */
#define CUBE__ARTIFACT_NAME 80          /* KEY.EXT, NUL included */
#define CUBE__EVICTED_KEPT 16           /* evictions remembered for cubectl kernels */

typedef struct cube__artifact {
        char name[CUBE__ARTIFACT_NAME];
        char entry[64];                 /* its kernel's entry point, from its digest file */
        char source_hash[65];           /* SHA-256 of its kernel's source, likewise */
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
        int fd;                         /* the cache directory, held open since start */
        const struct cube__options *opts;       /* cache-dir, cache-max-bytes */
        const char *ext;                /* the backend's artifacts' extension */
        uint64_t started_ns;            /* the daemon's start, for eviction times */
        cube__artifact *v;
        size_t n, cap;
        uint64_t bytes;
        uint64_t evictions, evicted_bytes;
        cube__evicted recent[CUBE__EVICTED_KEPT];
        size_t n_recent, next_recent;
} cube__disk_cache;

/* KEY.EXT, the artifact's name in the cache directory. */
void cube__artifact_name(const cube__disk_cache *dc, const char *hash,
                         char name[CUBE__ARTIFACT_NAME]);
/* Any thread: opens a cached artifact through the held directory, checked
 * on the descriptor (owner, mode, no symlink) and against its recorded
 * digest. Returns the descriptor to load from, or -ENOENT, -EPERM (not a
 * file of ours), -EBADMSG (no or another digest). */
int cube__artifact_open(const cube__disk_cache *dc, const char *name, uint64_t *ret_bytes);
/* Any thread: opens an artifact a compile just wrote, checked the same way,
 * and records its digest, with the entry point and the SHA-256 of the source
 * it was built from (what cubectl kernels shows of the disk); returns the
 * descriptor or a negative errno. */
int cube__artifact_seal(const cube__disk_cache *dc, const char *name, const char *entry,
                        const char *source, uint64_t *ret_bytes);
/* Any thread: marks an artifact used now (its mtime), for later runs. */
void cube__artifact_touch(int fd);
/* Loop thread: the index, from what the directory at fd holds at start. */
int cube__disk_cache_init(cube__disk_cache *dc, int fd, const struct cube__options *opts,
                          const char *ext, uint64_t started_ns);
void cube__disk_cache_free(cube__disk_cache *dc);
/* A compile job of hash is about to run: its artifact is not evicted until
 * unpinned. Returns whether the cache holds it. */
bool cube__disk_cache_pin(cube__disk_cache *dc, const char *hash);
/* The job is done; used: it loaded the artifact. */
void cube__disk_cache_unpin(cube__disk_cache *dc, const char *hash, bool used);
/* A compile stored hash's artifact of bytes: evicts what no longer fits. */
void cube__disk_cache_stored(cube__disk_cache *dc, const char *hash, uint64_t bytes);
/* The kernel_cache admin reply (PROTOCOL.md); names: with the evicted
 * artifacts' names (an administrator asks). */
int cube__disk_cache_pack(const cube__disk_cache *dc, msgpack_packer *pk, bool names);

/* ---- options, from defaults, the file and the command line (config.c) -- */
typedef enum cube__poison_policy {
        CUBE__POISON_EXIT,              /* exit non-zero once sessions were told; systemd restarts */
        CUBE__POISON_REINIT,            /* bring the device up again once sessions were told */
} cube__poison_policy;

/* The reference's BoundsCheckMode: which launches run checked
 * (docs/KERNELS.md, "Checked kernels"). */
typedef enum cube__check_mode {
        CUBE__CHECK_AUTO,               /* checked, unless an unchecked launch by an unchecked-uids user */
        CUBE__CHECK_ENFORCE,            /* every launch checked; unchecked launches refused */
        CUBE__CHECK_VALIDATE,           /* every launch checked; unchecked launches run checked */
} cube__check_mode;

/* allow-uids or allow-groups, resolved to numeric ids when loaded. */
typedef struct cube__id_list {
        uint32_t *ids;
        size_t n;
        bool set;                       /* the option was given (even if empty of ids) */
} cube__id_list;

/* Resolves a comma-separated list of names or numbers; why names an entry
 * that names no user or group. */
int cube__id_list_parse(const char *list, bool group, cube__id_list *ret, char *why, size_t len);
const char *cube__check_mode_name(cube__check_mode m);

/* Where an option's value came from, for cubectl config. */
enum { CUBE__FROM_DEFAULT, CUBE__FROM_FILE, CUBE__FROM_COMMAND_LINE };
#define CUBE__OPTIONS_MAX 96

/* Priority classes of device time, best first (tenants.c). */
typedef enum cube__class {
        CUBE__CLASS_LATENCY,
        CUBE__CLASS_NORMAL,
        CUBE__CLASS_BATCH,
        CUBE__CLASSES
} cube__class;
#define CUBE__WEIGHT_MAX 1000
#define CUBE__TENANT_MAX 32

/* One entry of the shares option: what the sessions it selects get. Unset
 * fields (weight 0, class -1, cap 0, tenant "") leave what a less specific
 * entry said. */
typedef struct cube__share_rule {
        enum { CUBE__RULE_DEFAULT, CUBE__RULE_GROUP, CUBE__RULE_UID } kind;
        uint32_t id;                    /* the uid or gid */
        uint32_t weight;
        int class_;
        uint32_t cap_percent;           /* the tenant's ceiling on device time */
        int cap_alone;                  /* -1 unset; 1: held to the cap even alone */
        char tenant[CUBE__TENANT_MAX];
} cube__share_rule;

/* What one session is given: its rules folded, most specific last. */
typedef struct cube__share_terms {
        uint32_t weight;
        cube__class class_;
        uint32_t cap_percent;           /* 0: none */
        bool cap_alone;
        char tenant[CUBE__TENANT_MAX];  /* "" : the session is a tenant of its own uid */
} cube__share_terms;

/* Parses the shares option: `;`-separated entries of a selector (default,
 * uid:USER, group:GROUP) and `key=value` words (weight, class, tenant, cap,
 * cap-alone). */
int cube__share_rules_parse(const char *text, cube__share_rule **ret, size_t *ret_n, char *why,
                            size_t len);

/* Every option, from defaults, the configuration file and the command line
 * (config.c). Strings are owned. */
/* max-sessions unless the operator sets it, and the fewest sessions the
 * default is lowered to where the descriptor limit holds fewer. */
#define CUBE__DEFAULT_MAX_SESSIONS 4096u
#define CUBE__MIN_FITTED_SESSIONS 64u

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
        uint32_t request_poll_us;       /* linger.c: 0, never */
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
        uint32_t uid_kernels;           /* per user, over its sessions: kernel ids */
        uint64_t uid_kernel_source_bytes; /* per user: their source bytes */
        uint32_t daemon_kernels;        /* every session's kernel ids */
        uint64_t daemon_kernel_source_bytes; /* every session's source bytes */
        uint32_t uid_regions;           /* per user, over its sessions: staging regions */
        uint32_t map_reserve;           /* mappings below vm.max_map_count only admins' regions take */
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
        cube__check_mode check_mode;
        char *unchecked_uids;           /* who may launch unchecked under check-mode auto */
        cube__id_list unchecked_uid_ids;
        uint64_t compile_memory;        /* address space one kernel build may take */
        uint64_t compile_output;        /* bytes one kernel build may write to one file */
        uint32_t build_slots;           /* kernel builds (and loads) that run at once */
        uint32_t uid_build_slots;       /* of those, one user's; 0: all but one */
        bool fault_injection;           /* tests only */
        /* Collectives (groups.c, collectives.c). */
        char *transport;                /* "none": no collectives (NoDeviceTransport) */
        char *comm_dir;                 /* where same-host groups meet; default: the socket's */
        char *comm_address;             /* the IP this daemon's transport listens on */
        uint32_t collective_timeout_ms; /* a member silent this long is lost */
        uint32_t max_groups;            /* per session */
        /* Device time (tenants.c). */
        char *shares;                   /* the rules as written */
        cube__share_rule *share_rules;  /* ...and parsed at load */
        size_t n_share_rules;
        uint32_t share_min_percent;     /* each lower class's floor while a higher saturates */
        uint32_t share_bound_us;        /* lower-class work on the device while a higher waits */
        uint32_t share_window_ms;       /* the window shares are measured over */
        uint32_t share_queue_us;        /* expected device time the device holds at once */
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
/* The terms for a session of uid and gid under o's rules. */
void cube__share_terms_for(const cube__options *o, uid_t uid, gid_t gid,
                           cube__share_terms *ret_terms);
/* "latency", "normal", "batch"; and back (-1: none of them). */
const char *cube__class_name(cube__class c);
int cube__class_parse(const char *name);

/* ---- access, and what each user holds (access.c) ----------------------- */
/* Whether id is in the list. */
bool cube__id_listed(const cube__id_list *l, uint32_t id);
/* What one user holds across its sessions, for the per-user quotas. */
typedef struct cube__uid {
        uint32_t sessions;
        uint64_t memory;
        uint64_t rx_bytes;              /* receive buffers of its connections */
        uint64_t kernels;               /* kernel ids its sessions registered */
        uint64_t kernel_source_bytes;   /* the sources of those ids */
        uint32_t regions;               /* staging regions its sessions hold */
        uint32_t builds;                /* kernel builds running for it (kernels.c) */
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

/* The users of the daemon: what each holds, and the names refused. */
typedef struct cube__users {
        cube__idmap uids;               /* uid -> cube__uid */
        uint64_t kernels;               /* every user's, summed */
        uint64_t kernel_source_bytes;
        uint64_t regions;
        uint64_t map_room;              /* mappings regions may take: vm.max_map_count less
                                         * those the daemon had at start and a margin */
        cube__name_ban name_bans[CUBE__NAME_BANS];
} cube__users;

/* What uid holds (made on first use); NULL when out of memory. */
cube__uid *cube__uid_get(cube__users *users, uid_t uid);
/* Counts a poison against the session's uid and name; past poison-ban-after,
 * they are refused for poison-ban-seconds. */
void cube__poison_blame(const struct cube__options *o, cube__users *users,
                        const cube__log_who *who);
/* The bound a registration of one more kernel id, of bytes of source, by
 * uid would cross: the option's key, with its value in *ret_limit; NULL
 * when it crosses none. */
const char *cube__kernel_bound(const struct cube__options *o, const cube__users *users, uid_t uid,
                               uint64_t bytes, uint64_t *ret_limit);
/* Counts kernel ids (and their source bytes) registered (+) or let go (-). */
void cube__kernels_held(cube__users *users, uid_t uid, int64_t kernels, int64_t bytes);
/* The bound one more staging region of uid would cross (uid-regions, or
 * map-reserve below vm.max_map_count), as cube__kernel_bound says it. */
const char *cube__region_bound(const struct cube__options *o, const cube__users *users, uid_t uid,
                               uint64_t *ret_limit);
void cube__regions_held(cube__users *users, uid_t uid, int delta);
/* What the daemon's mappings leave to regions: vm.max_map_count less the
 * mappings it has now and a margin for its own later ones. */
uint64_t cube__map_room(void);
/* Whether the name is refused now; why says for how long. */
bool cube__name_banned(const struct cube__options *o, const cube__users *users, const char *name,
                       char *why, size_t len);
/* Whether the peer, of these credentials and supplementary groups, may not
 * connect (allow-uids, allow-groups); why says why. */
bool cube__access_refused(const struct cube__options *o, const struct ucred *cred,
                          const gid_t *groups, size_t n_groups, char *why, size_t len);
/* The peer's supplementary groups, from the kernel (SO_PEERGROUPS): an array
 * the caller frees. */
int cube__peer_groups(int fd, gid_t **ret_groups, size_t *ret_n);
/* Whether another session of uid, with n_sessions open, would cross
 * max-sessions or max-sessions-per-uid; why names the quota. */
bool cube__session_quota_full(const struct cube__options *o, const cube__users *users,
                              uint32_t n_sessions, uid_t uid, char *why, size_t len);
/* Gives the socket the configured group, when cubed bound it. */
int cube__socket_set_group(const char *path, const char *group);
/* Whether an administrative peer (root, the daemon's uid). */
bool cube__uid_is_admin(uid_t uid);

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
/* A socket listening on address (an IPv4 address) at a port of the kernel's
 * choosing, told in *ret_port; -1 with errno set. */
int cube__listen_tcp(const char *address, uint16_t *ret_port);

/* Asks every other member (cards by rank, NULL where unknown) how far it
 * has got, waiting at most half a second in all, and names in buf those
 * that never started the operation me is in, do not answer, or left the
 * group; answers the length written (0: none). */
size_t cube__progress_name_silent(const cube__progress *me, uint32_t size,
                                  const char *const *cards, char (*names)[CUBED_NAME_MAX],
                                  char *buf, size_t len);

#endif

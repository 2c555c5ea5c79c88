/*
 * cube.h - the public interface of libcubeclient, and the vocabulary every
 * part of cube stands on: the error taxonomy, handles, bindings and device
 * properties mean the same in proto/, the daemon, the backends and here.
 *
 * A process links libcubeclient to use a device that a cubed daemon owns. The
 * library marshals every call onto the daemon's Unix socket and hands every
 * failure back as one value of the error taxonomy (cube_error), whatever layer
 * it came from: the daemon, the device, the wire or the socket itself.
 *
 * Conventions:
 *  - Every call that can fail returns a cube_error *: NULL on success, else an
 *    error the caller owns and releases with cube_error_free().
 *  - Output parameters are named ret_* and are written only on success.
 *  - Destructors accept NULL.
 *  - A cube_client is safe to share between threads. Each thread works on its
 *    own stream unless it names one with cube_stream_set().
 *
 * One header for the whole library, as libuv keeps one: it is long (about 830
 * lines) because every call carries the comment that says what it does.
 */
#ifndef CUBE_H
#define CUBE_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Only what this header declares is exported from libcubeclient. */
#pragma GCC visibility push(default)

#define CUBE_PROTOCOL_VERSION 1

/* Marks what is kept only for programs built against earlier libraries. */
#if defined(__GNUC__) || defined(__clang__)
#define CUBE_DEPRECATED __attribute__((deprecated))
#else
#define CUBE_DEPRECATED
#endif

/* Where cube_connect() looks when neither a path nor $CUBE_SOCKET is given. */
#define CUBE_DEFAULT_SOCKET "/run/cube/cpu0.sock"

/* ---------------------------------------------------------------------------
 * The error taxonomy
 *
 * A cube_error is one node of a tree that mirrors the reference's enums
 * exactly: ServerError, LaunchError, CompilationError, ResourceLimitError,
 * IoError, ProfileError and DevicePoison. A wrapping variant such as
 * CUBE_SERVER_LAUNCH has the wrapped error as its source; Several has its
 * members; Unwritten has its root as source.
 * ------------------------------------------------------------------------- */
typedef enum cube_error_kind {
        /* ServerError */
        CUBE_SERVER_VALIDATION = 1,     /* message */
        CUBE_SERVER_GENERIC,            /* reason */
        CUBE_SERVER_NO_DEVICE_TRANSPORT,/* operation */
        CUBE_SERVER_FOREIGN_HANDLE,     /* handle, client */
        CUBE_SERVER_SERVICE_MISMATCH,   /* client, requested */
        CUBE_SERVER_DEVICE_POISONED,    /* source: CUBE_DEVICE_POISON */
        CUBE_SERVER_LAUNCH,             /* source: a CUBE_LAUNCH_* */
        CUBE_SERVER_IO,                 /* source: a CUBE_IO_* */
        CUBE_SERVER_TORN_DOWN,
        CUBE_SERVER_UNWRITTEN,          /* failure, claimed, chain, source: root */
        CUBE_SERVER_SKIPPED,
        CUBE_SERVER_SEVERAL,            /* members */

        /* LaunchError */
        CUBE_LAUNCH_COMPILATION_ERROR = 32, /* source: a CUBE_COMPILATION_* */
        CUBE_LAUNCH_OUT_OF_MEMORY,      /* reason */
        CUBE_LAUNCH_TOO_MANY_RESOURCES, /* source: a CUBE_RESOURCE_* */
        CUBE_LAUNCH_DEVICE_POISONED,    /* source: CUBE_DEVICE_POISON */
        CUBE_LAUNCH_UNKNOWN,            /* reason */

        /* CompilationError */
        CUBE_COMPILATION_UNSUPPORTED_INSTRUCTION = 64, /* reason */
        CUBE_COMPILATION_GENERIC,       /* reason */
        CUBE_COMPILATION_VALIDATION,    /* reason */
        CUBE_COMPILATION_EXPANSION_PANICKED, /* kernel, message */
        CUBE_COMPILATION_DEVICE_POISONED,    /* source: CUBE_DEVICE_POISON */

        /* ResourceLimitError */
        CUBE_RESOURCE_SHARED_MEMORY = 96, /* requested, max */
        CUBE_RESOURCE_UNITS,            /* requested, max */
        CUBE_RESOURCE_CUBE_DIM,         /* requested_dim, max_dim */

        /* IoError */
        CUBE_IO_BUFFER_TOO_BIG = 128,   /* size */
        CUBE_IO_OUT_OF_MEMORY,          /* size */
        CUBE_IO_PAGE_UPDATE_FORBIDDEN,  /* size */
        CUBE_IO_PAGE_SIZES_EXHAUSTED,   /* size */
        CUBE_IO_UNSUPPORTED_STRIDES,
        CUBE_IO_NOT_FOUND,              /* reason */
        CUBE_IO_STORAGE_HANDLE_NOT_FOUND, /* reason */
        CUBE_IO_STORAGE_MAPPING_FAILED, /* size, source: a CUBE_IO_* */
        CUBE_IO_DEVICE_POISONED,        /* source: CUBE_DEVICE_POISON */
        CUBE_IO_UNKNOWN,                /* description */
        CUBE_IO_UNSUPPORTED_IO_OPERATION,

        /* ProfileError */
        CUBE_PROFILE_UNKNOWN = 160,     /* reason */
        CUBE_PROFILE_NOT_REGISTERED,
        CUBE_PROFILE_NOT_MEASURED,
        CUBE_PROFILE_LAUNCH,            /* source: a CUBE_LAUNCH_* */
        CUBE_PROFILE_SERVER,            /* source: a CUBE_SERVER_* */

        /* DevicePoison: the sticky fault itself */
        CUBE_DEVICE_POISON = 192,       /* reason */
} cube_error_kind;

/* The collective a NoDeviceTransport error names. */
typedef enum cube_collective {
        CUBE_COLLECTIVE_COMM_INIT,
        CUBE_COLLECTIVE_ALL_REDUCE,
        CUBE_COLLECTIVE_ALL_GATHER,
        CUBE_COLLECTIVE_REDUCE_SCATTER,
        CUBE_COLLECTIVE_BROADCAST,
        CUBE_COLLECTIVE_ALL_TO_ALL,
        CUBE_COLLECTIVE_SEND,
        CUBE_COLLECTIVE_RECV,
        CUBE_COLLECTIVE_SYNC_COLLECTIVE,
        CUBE_COLLECTIVE_PEER_ACCESS,
        CUBE_COLLECTIVE_MAX_,
} cube_collective;

typedef struct cube_error cube_error;

void cube_error_free(cube_error *e);
cube_error *cube_error_clone(const cube_error *e);

cube_error_kind cube_error_kind_of(const cube_error *e);
/* The variant's name as the reference spells it, e.g. "Unwritten". */
const char *cube_error_variant(const cube_error *e);
/* The enum the variant belongs to, e.g. "ServerError". */
const char *cube_error_family(const cube_error *e);

/* The whole report, nested causes included, as a person reads it. The string
 * lives as long as the error. */
const char *cube_error_message(const cube_error *e);

/* The predicates, exactly as the reference defines them on ServerError (and
 * on LaunchError, CompilationError and IoError for their own nodes). */
bool cube_error_is_refusal(const cube_error *e);
bool cube_error_is_device_poisoned(const cube_error *e);
/* IoError::may_succeed_after_reclaim; false for anything that is not IoError. */
bool cube_error_may_succeed_after_reclaim(const cube_error *e);

/* Field accessors. Each answers for the variants named beside its field in
 * cube_error_kind, and NULL or 0 for any other. */
const char *cube_error_reason(const cube_error *e);    /* reason, message, description */
const char *cube_error_kernel(const cube_error *e);    /* ExpansionPanicked */
const char *cube_error_panic_message(const cube_error *e); /* ExpansionPanicked */
const char *cube_error_handle_service(const cube_error *e);/* ForeignHandle */
const char *cube_error_client_service(const cube_error *e);/* ForeignHandle, ServiceMismatch */
const char *cube_error_requested_service(const cube_error *e); /* ServiceMismatch */
uint64_t cube_error_size(const cube_error *e);         /* IoError sizes */
uint64_t cube_error_requested(const cube_error *e);    /* SharedMemory, Units */
uint64_t cube_error_max(const cube_error *e);          /* SharedMemory, Units */
bool cube_error_requested_dim(const cube_error *e, uint32_t ret_dim[3]); /* CubeDim */
bool cube_error_max_dim(const cube_error *e, uint32_t ret_dim[3]);       /* CubeDim */
int cube_error_operation(const cube_error *e);         /* NoDeviceTransport: a cube_collective, or -1 */
uint64_t cube_error_failure(const cube_error *e);      /* Unwritten */
uint32_t cube_error_claimed(const cube_error *e);      /* Unwritten */
size_t cube_error_chain_len(const cube_error *e);      /* Unwritten */
const char *cube_error_chain_at(const cube_error *e, size_t i);
/* The wrapped error: the source of a wrapping variant, Unwritten's root,
 * StorageMappingFailed's source. */
const cube_error *cube_error_source(const cube_error *e);
/* The innermost error: cube_error_source followed to its end (through a
 * Several of one member too). What to act on, e.g. IoError::OutOfMemory
 * inside Unwritten inside Several. A Several of more than one member is its
 * own root. NULL only when e is. */
const cube_error *cube_error_root(const cube_error *e);
size_t cube_error_count(const cube_error *e);          /* Several */
const cube_error *cube_error_at(const cube_error *e, size_t i);

/* ---------------------------------------------------------------------------
 * Connection
 * ------------------------------------------------------------------------- */
typedef struct cube_client cube_client;

/* Connects to a daemon. path: an explicit socket path, else $CUBE_SOCKET,
 * else CUBE_DEFAULT_SOCKET. name labels the session in cubectl (may be NULL):
 * at most 63 bytes of UTF-8 text without control characters; the daemon
 * refuses any other name with ServerError::Validation. Negotiates the
 * protocol version before returning. */
cube_error *cube_connect(const char *path, const char *name, cube_client **ret_client);
/* Sends the batched launches and closes the connection. The daemon reclaims
 * everything the session held once its queued work has run. No other thread
 * may be inside a call on c while it runs. A connection belongs to the
 * process that made it: a forked child connects afresh (it may disconnect
 * its copy, which sends nothing). */
void cube_disconnect(cube_client *c);

/* The service this connection reaches, e.g. "cpu0-4f1c9a0d2e3b5a67". */
const char *cube_client_service(const cube_client *c);
/* The backend's name, "cpu" or "cuda". */
const char *cube_client_backend(const cube_client *c);
/* The daemon's check mode, as hello said it: "auto" (every launch checked,
 * unchecked ones honoured for the operator's unchecked-uids), "enforce"
 * (every launch checked, unchecked ones refused) or "validate" (every launch
 * checked, unchecked ones too); docs/KERNELS.md, "Checked kernels". */
const char *cube_client_check_mode(const cube_client *c);
/* NULL when the client reaches a daemon of that backend, else
 * ServiceMismatch{client, requested}: for a caller that can only use one
 * kind of device and must not run its work on another. */
cube_error *cube_client_require_backend(const cube_client *c, const char *backend);

typedef struct cube_device_properties {
        char name[64];
        uint64_t memory_bytes;          /* device memory the daemon may hand out */
        uint64_t max_page_size;         /* the largest single allocation */
        uint32_t alignment;             /* of every allocation, in bytes */
        uint32_t plane_size_min, plane_size_max;
        uint32_t max_bindings;
        uint32_t max_shared_memory_size;
        uint32_t max_cube_count[3];
        uint32_t max_units_per_cube;
        uint32_t max_cube_dim[3];
        uint32_t num_streaming_multiprocessors;
        uint32_t num_cpu_cores;
} cube_device_properties;

const cube_device_properties *cube_client_properties(const cube_client *c);
/* A stable checksum of the device properties, as hello reported it: the
 * same on every run of a device with the same properties, so tuning
 * results can be kept per device under it. */
uint64_t cube_client_properties_hash(const cube_client *c);
/* What compiled code depends on (the compiler, its version, the machine
 * and the options): the target the daemon compiles kernels for. */
const char *cube_client_target(const cube_client *c);

/* The limits the daemon enforces on every message, as hello reported them. */
typedef struct cube_protocol_limits {
        uint64_t max_message_bytes;
        uint32_t max_depth;
        uint32_t max_container;
        uint64_t max_str_bytes;
        uint64_t max_objects;
} cube_protocol_limits;

const cube_protocol_limits *cube_client_limits(const cube_client *c);

/* ---------------------------------------------------------------------------
 * Streams
 *
 * Work on one stream runs in order. By default each thread gets a stream of
 * its own the first time it calls into a client; cube_stream_set() names one
 * explicitly for the calling thread (0 returns it to its own stream).
 * ------------------------------------------------------------------------- */
uint64_t cube_stream_current(void);
void cube_stream_set(uint64_t stream);

/* ---------------------------------------------------------------------------
 * Memory
 *
 * A handle names a byte range of one allocation, as the reference's Handle:
 * the range is [offset_start, size - offset_end). Memory ids are minted by the
 * client, so creating, writing and freeing need no round trip: a failure of
 * that work lands on the memory and surfaces at the next read, sync or check.
 * ------------------------------------------------------------------------- */
typedef struct cube_handle {
        uint64_t service;       /* the service nonce the handle is stamped with */
        uint64_t memory;        /* the memory id, unique within the session */
        uint64_t stream;        /* the stream that allocated it */
        uint64_t offset_start;
        uint64_t offset_end;
        uint64_t size;          /* of the whole allocation */
} cube_handle;

/* Bytes the handle covers: size - offset_start - offset_end. */
uint64_t cube_handle_len(const cube_handle *h);
/* A narrower view: offsets add to the handle's own. */
cube_handle cube_handle_slice(const cube_handle *h, uint64_t offset_start, uint64_t offset_end);

/* Allocates size bytes, uninitialised. */
cube_error *cube_empty(cube_client *c, uint64_t size, cube_handle *ret_handle);
/* Allocates size bytes and writes data into them. NULL data is Validation,
 * and nothing stays allocated when the write fails. */
cube_error *cube_create(cube_client *c, const void *data, uint64_t size, cube_handle *ret_handle);
/* Writes exactly cube_handle_len(h) bytes from data into the handle's range. */
cube_error *cube_write(cube_client *c, const cube_handle *h, const void *data, uint64_t size);
/* Reads the handle's range into dst, which holds size == cube_handle_len(h) bytes. */
cube_error *cube_read(cube_client *c, const cube_handle *h, void *dst, uint64_t size);
/* Waits for all work the session queued, on every one of its streams (the
 * calling thread's and any other), then answers for the handles as a read
 * would. n == 0: the barrier and device faults only. */
cube_error *cube_sync(cube_client *c, const cube_handle *handles, size_t n);
/* The claim check a read makes, instantly and without a barrier. */
cube_error *cube_check(cube_client *c, const cube_handle *handles, size_t n);
/* Sends the batched launches and flushes the stream; reports only device
 * faults. */
cube_error *cube_flush(cube_client *c);
/* Releases the allocation; the daemon frees it once no queued work uses it. */
cube_error *cube_free(cube_client *c, const cube_handle *h);
/* Returns every page that holds no live allocation. */
cube_error *cube_memory_cleanup(cube_client *c);

/* A pitched row-major view of a handle's range, in elements: the last
 * dimension's stride is 1, each row starts strides[rank-2] elements after the
 * one before, and outer strides nest contiguously. The host side of a strided
 * copy is always dense: the product of shape times elem_size bytes. Other
 * layouts are refused with CUBE_IO_UNSUPPORTED_STRIDES. */
#define CUBE_MAX_RANK 8
typedef struct cube_copy {
        cube_handle handle;
        uint32_t rank;
        uint64_t shape[CUBE_MAX_RANK];
        uint64_t strides[CUBE_MAX_RANK];
        uint64_t elem_size;
} cube_copy;

/* Dense bytes the copy moves: the product of shape, times elem_size. */
uint64_t cube_copy_len(const cube_copy *d);
/* Allocates a tensor whose rows start on an aligned pitch (the device's
 * alignment, or the next power of two of a row when that is smaller), as
 * kernels and pitched copies want; rank 1 and rows of one element are dense. */
cube_error *cube_empty_tensor(cube_client *c, const uint64_t *shape, uint32_t rank,
                              uint64_t elem_size, cube_copy *ret_tensor);

/* Many tensors in one allocation, as the reference's MemoryLayoutPolicy
 * lays them out (its MemoryLayoutStrategy and MemoryLayoutDescriptor).
 * Each tensor is a cube_copy whose handle is a slice of the shared
 * allocation: tensor i starts where tensor i-1's bytes, rounded up to the
 * device's alignment, end. A contiguous tensor packs its rows; an optimized
 * one starts each row on the pitch cube_empty_tensor gives it. */
typedef enum cube_layout_strategy {
        CUBE_LAYOUT_CONTIGUOUS = 0,     /* rows packed, no padding */
        CUBE_LAYOUT_OPTIMIZED = 1,      /* rows on an aligned pitch */
} cube_layout_strategy;

typedef struct cube_layout_descriptor {
        cube_layout_strategy strategy;
        uint32_t rank;                  /* 1 to CUBE_MAX_RANK */
        uint64_t shape[CUBE_MAX_RANK];  /* each below 2^32 */
        uint64_t elem_size;
} cube_layout_descriptor;

/* The policy alone (MemoryLayoutPolicy::apply), allocating nothing: each
 * tensor's shape and strides, its handle's offsets, and in *ret_size the
 * bytes of the allocation the n tensors share. The handles name no memory
 * yet. n of 0, a rank outside 1..CUBE_MAX_RANK, an element size of 0 or of
 * 2^32 or more, a dimension of 2^32 or more or a size beyond 64 bits is
 * Validation. */
cube_error *cube_layout_apply(cube_client *c, const cube_layout_descriptor *descs, size_t n,
                              cube_copy *ret_tensors, uint64_t *ret_size);
/* Allocates the n tensors of cube_layout_apply as one allocation (one
 * create_tensors message, no round trip), uninitialised. Freeing any of
 * them frees the allocation; a failed reservation claims all of them. */
cube_error *cube_empty_tensors(cube_client *c, const cube_layout_descriptor *descs, size_t n,
                               cube_copy *ret_tensors);
/* As cube_empty_tensors, then writes data[i], cube_copy_len dense bytes,
 * into tensor i. NULL data is Validation; nothing stays allocated when a
 * write fails. */
cube_error *cube_create_tensors(cube_client *c, const cube_layout_descriptor *descs,
                                const void *const *data, size_t n, cube_copy *ret_tensors);
/* Writes cube_copy_len(d) dense bytes into the strided view. */
cube_error *cube_write_strided(cube_client *c, const cube_copy *d, const void *data, uint64_t size);
/* Reads the strided view into size == cube_copy_len(d) dense bytes. */
cube_error *cube_read_strided(cube_client *c, const cube_copy *d, void *dst, uint64_t size);

/* A staging region: memory the daemon and this process both map, so bulk
 * data crosses without passing through the socket. It counts against the
 * session's region-memory quota and is unmapped with the session. */
typedef struct cube_region {
        uint64_t id;
        void *data;
        uint64_t size;
} cube_region;

cube_error *cube_region_create(cube_client *c, uint64_t size, cube_region **ret_region);
/* Unmaps the region here; the daemon keeps it until queued work that uses
 * it has run. Takes NULL. */
void cube_region_free(cube_client *c, cube_region *r);
/* Queues a write of the handle's range from the region's bytes at offset.
 * The bytes are read when the write runs: change them only after a
 * cube_sync on the stream. */
cube_error *cube_write_region(cube_client *c, const cube_handle *h, const cube_region *r,
                              uint64_t offset);
/* Reads the handle's range into the region at offset, and waits for it. */
cube_error *cube_read_region(cube_client *c, const cube_handle *h, cube_region *r,
                             uint64_t offset);

/* How allocations on the calling thread's stream are made, nested as in the
 * reference: PERSISTENT (reused only by exact size) and DEDICATED (a page of
 * their own, given back at the next cleanup) push a mode, AUTO pops one. */
typedef enum cube_allocation_mode {
        CUBE_ALLOCATION_AUTO = 0,
        CUBE_ALLOCATION_PERSISTENT,
        CUBE_ALLOCATION_DEDICATED,
} cube_allocation_mode;

cube_error *cube_set_allocation_mode(cube_client *c, cube_allocation_mode mode);

/* One pool of a stream's memory, as memory_report gives it. */
typedef struct cube_pool_report {
        char kind[16];                  /* "sliced", "exclusive", "persistent", "dedicated" */
        uint64_t page_size;             /* sliced: the page size */
        uint64_t max_slice;             /* sliced: the largest slice */
        uint64_t allocations;
        uint64_t bytes_in_use;          /* as requested */
        uint64_t bytes_padding;         /* what alignment added */
        uint64_t bytes_reserved;        /* pages taken from the device */
        uint64_t pages, pages_peak;
        uint64_t largest_alloc;         /* ever */
} cube_pool_report;

typedef struct cube_memory_report {
        uint64_t session;
        uint64_t stream;
        size_t n_pools;
        cube_pool_report pools[4];      /* in routing order */
} cube_memory_report;

/* The report of one of this session's streams; *ret_exists is false (and
 * ret_report untouched) for a stream that was never created. */
cube_error *cube_stream_memory_report(cube_client *c, uint64_t stream, bool *ret_exists,
                               cube_memory_report *ret_report);
/* The streams this session has created, to iterate for a device-wide view. */
cube_error *cube_stream_ids(cube_client *c, uint64_t **ret_ids, size_t *ret_n);
/* Every session's streams' reports (what cubectl memory shows). */
cube_error *cube_daemon_memory(cube_client *c, cube_memory_report **ret_reports, size_t *ret_n);

/* Sharing. export gives an unguessable token for the handle's allocation;
 * another session imports it under a handle of its own, optionally
 * read-only. A write through a read-only import (cube_write, a slice of it,
 * cube_write_strided, cube_write_region), a collective whose destination it
 * is, and a launch that declares it WRITE_ONLY or READ_WRITE are refused at
 * the call with ServerError::Validation, and nothing is sent: the import's
 * later reads see the shared bytes unharmed. A launch that leaves it
 * undeclared and whose kernel writes it is refused by the daemon, which
 * only then knows; that failure lands on the import alone, as on any
 * launch's outputs. The memory lives until every holder has freed it or
 * ended. */
cube_error *cube_export(cube_client *c, const cube_handle *h, char ret_token[33]);
cube_error *cube_import(cube_client *c, const char *token, bool read_only, cube_handle *ret_handle);

/* ---------------------------------------------------------------------------
 * Kernels
 *
 * A kernel is C source written against the prelude every backend supplies
 * (docs/KERNELS.md), plus the name of its entry point. It is registered once
 * and launched any number of times; the daemon compiles it on first use and
 * keeps the result in a cache that every session, and every later run of the
 * daemon, shares. Registering and launching need no round trip: a launch
 * that fails (a compile error, a resource limit) leaves its failure on the
 * buffers it was to write, for the next read, sync or check to report.
 * ------------------------------------------------------------------------- */

/* What a kernel does with one buffer (the reference's BufferIOAttr). A launch
 * declares it per buffer; the compiled kernel's own answer wins where it has
 * one (a const pointer parameter is READ_ONLY). An undeclared buffer counts as
 * both read and written. */
typedef enum cube_buffer_io {
        CUBE_BUFFER_READ_ONLY = 0,
        CUBE_BUFFER_WRITE_ONLY,
        CUBE_BUFFER_READ_WRITE,
        CUBE_BUFFER_DEAD,
        CUBE_BUFFER_UNDECLARED = -1,
} cube_buffer_io;

typedef enum cube_launch_mode {
        CUBE_LAUNCH_EXECUTE = 0,        /* compile if needed, then run */
        CUBE_LAUNCH_COMPILE,            /* compile and validate now, run nothing */
        CUBE_LAUNCH_QUEUE,              /* queue the compile for cube_compile_queued, run nothing */
        /* Run without bounds checks (the reference's unsafe launch): honoured
         * only under check-mode auto for the operator's unchecked-uids, and
         * refused for anyone else; under check-mode validate it runs checked. */
        CUBE_LAUNCH_UNCHECKED,
} cube_launch_mode;

/* The info words a kernel reads: scalars first, grouped by type in the order
 * f32, f64, i32, i64, u32, u64, each group padded to 8 bytes; then the
 * metadata (buffer lengths, then tensor shape and stride offsets), then the
 * tensors' shapes and strides, as the reference lays them out. */
typedef struct cube_info cube_info;

cube_info *cube_info_new(void);
void cube_info_free(cube_info *info);
/* Empties info for the next launch, keeping the memory it grew: a loop of
 * launches needs one cube_info, not one per launch (a launch copies the words
 * when it is made). NULL is accepted. */
void cube_info_reset(cube_info *info);
int cube_info_f32(cube_info *info, float v);
int cube_info_f64(cube_info *info, double v);
int cube_info_i32(cube_info *info, int32_t v);
int cube_info_i64(cube_info *info, int64_t v);
int cube_info_u32(cube_info *info, uint32_t v);
int cube_info_u64(cube_info *info, uint64_t v);
/* One per bound buffer, in binding order: its length in elements. */
int cube_info_buffer_len(cube_info *info, uint32_t len);
/* A tensor's shape and strides, in elements. */
int cube_info_tensor(cube_info *info, size_t rank, const uint32_t *shape, const uint32_t *strides);

/* ---------------------------------------------------------------------------
 * Tensor maps (the reference's TensorMapBinding and TensorMapMeta)
 *
 * A tensor map is a buffer binding plus a description of the tensor it
 * holds, from which a kernel loads whole boxes at once (tensor_map_load in
 * docs/KERNELS.md): the bounds-safe tiled load of Hopper kernels. Elements
 * of a box that fall outside the tensor read as the map's oob_fill, never as
 * memory. A launch binds its tensor maps after its buffers; the backing
 * buffer is read, never written, and joins the launch's inputs as a buffer
 * does: a failure it carries skips the launch.
 * ------------------------------------------------------------------------- */
/* The element types of tensor maps and collectives. */
typedef enum cube_elem_type {
        CUBE_ELEM_F16, CUBE_ELEM_BF16, CUBE_ELEM_F32, CUBE_ELEM_F64, CUBE_ELEM_I32,
        CUBE_ELEM_I64, CUBE_ELEM_U32, CUBE_ELEM_U64,
} cube_elem_type;

#define CUBE_TENSOR_MAP_MAX_RANK 5
#define CUBE_TENSOR_MAP_MAX_SPATIAL 3      /* im2col: rank - 2 */

typedef enum cube_tensor_map_format {
        CUBE_TENSOR_MAP_TILED = 0,      /* boxes of box[] elements */
        CUBE_TENSOR_MAP_IM2COL,         /* im2col patches of a NC...HW tensor */
} cube_tensor_map_format;

typedef enum cube_tensor_map_interleave {
        CUBE_TENSOR_MAP_INTERLEAVE_NONE = 0,
        CUBE_TENSOR_MAP_INTERLEAVE_16B,
        CUBE_TENSOR_MAP_INTERLEAVE_32B,
} cube_tensor_map_interleave;

typedef enum cube_tensor_map_swizzle {
        CUBE_TENSOR_MAP_SWIZZLE_NONE = 0,
        CUBE_TENSOR_MAP_SWIZZLE_32B,
        CUBE_TENSOR_MAP_SWIZZLE_64B,
        CUBE_TENSOR_MAP_SWIZZLE_128B,
} cube_tensor_map_swizzle;

typedef enum cube_tensor_map_prefetch {
        CUBE_TENSOR_MAP_PREFETCH_NONE = 0,
        CUBE_TENSOR_MAP_PREFETCH_64B,
        CUBE_TENSOR_MAP_PREFETCH_128B,
        CUBE_TENSOR_MAP_PREFETCH_256B,
} cube_tensor_map_prefetch;

typedef enum cube_tensor_map_oob_fill {
        CUBE_TENSOR_MAP_OOB_ZERO = 0,   /* elements outside the tensor read as 0 */
        CUBE_TENSOR_MAP_OOB_NAN,        /* as NaN (a float element type only) */
} cube_tensor_map_oob_fill;

/* Dimension 0 is the innermost (contiguous) one, as cuTensorMapEncode*
 * counts them; shape and strides are in elements, strides[0] is 1. */
typedef struct cube_tensor_map {
        cube_handle buffer;             /* the backing tensor: read only */
        cube_tensor_map_format format;
        cube_elem_type elem;            /* the element type (its size is what a load copies) */
        uint32_t rank;                  /* 1 .. CUBE_TENSOR_MAP_MAX_RANK (3 .. 5 for im2col) */
        uint64_t shape[CUBE_TENSOR_MAP_MAX_RANK];
        uint64_t strides[CUBE_TENSOR_MAP_MAX_RANK];
        /* Tiled: the box a load copies, per dimension (1 .. 256). Im2col:
         * box[0] is the channels per pixel and box[1] the pixels per column. */
        uint32_t box[CUBE_TENSOR_MAP_MAX_RANK];
        /* Traversal stride per dimension (1 .. 8), 0 read as 1: a load takes
         * every elem_strides[d]-th element of the box (for im2col, the
         * convolution's stride). */
        uint32_t elem_strides[CUBE_TENSOR_MAP_MAX_RANK];
        /* Im2col only, per spatial dimension (1 .. rank - 2, W first): the
         * bounding box pixels are taken from, [lower_corner, size +
         * upper_corner) moved by a load's offsets (docs/KERNELS.md). */
        int32_t lower_corner[CUBE_TENSOR_MAP_MAX_SPATIAL];
        int32_t upper_corner[CUBE_TENSOR_MAP_MAX_SPATIAL];
        cube_tensor_map_interleave interleave;
        cube_tensor_map_swizzle swizzle;
        cube_tensor_map_prefetch prefetch;
        cube_tensor_map_oob_fill oob_fill;
} cube_tensor_map;

typedef struct cube_launch {
        uint64_t kernel;                /* from cube_kernel_register */
        uint32_t cube_count[3];         /* cubes in x, y, z */
        const cube_handle *dynamic_count; /* if set: three u32 read from it, in stream order */
        uint32_t cube_dim[3];           /* units per cube in x, y, z */
        const cube_handle *buffers;     /* bound in parameter order */
        const cube_buffer_io *io;       /* declared io per buffer, or NULL */
        size_t n_buffers;
        const cube_info *info;          /* or NULL */
        cube_launch_mode mode;
        /* bound after the buffers, to the kernel's TENSOR_MAP parameters */
        const cube_tensor_map *tensor_maps;
        size_t n_tensor_maps;
} cube_launch;

/* ---------------------------------------------------------------------------
 * Grid helpers (the reference's CubeCount, CubeCountSelection and CubeDim)
 *
 * A device caps each dimension of a launch's cube count (max_cube_count) and
 * a cube's units (max_cube_dim, max_units_per_cube); a count beyond them is
 * refused when the launch is handled. cube_count_select spreads a count of
 * cubes over the dimensions as the reference does, so an oversized count
 * runs, its kernel checking bounds when the selection is not exact.
 * ------------------------------------------------------------------------- */
typedef struct cube_dim3 {
        uint32_t x, y, z;
} cube_dim3;

cube_dim3 cube_dim3_single(void);                       /* (1, 1, 1) */
cube_dim3 cube_dim3_1d(uint32_t x);                     /* (x, 1, 1) */
cube_dim3 cube_dim3_2d(uint32_t x, uint32_t y);         /* (x, y, 1) */
cube_dim3 cube_dim3_3d(uint32_t x, uint32_t y, uint32_t z);
/* Whether a static count dispatches nothing (a zero in any dimension). A
 * dynamic count is never known to be empty before it is read. */
bool cube_count_is_empty(cube_dim3 count);
/* The units of a cube: x * y * z. */
uint32_t cube_dim_num_elems(cube_dim3 dim);
/* Whether dim is at least other in every dimension. */
bool cube_dim_can_contain(cube_dim3 dim, cube_dim3 other);
/* CubeDim::new: a cube of (plane_size_max, planes) for working_units units,
 * one plane per core on a device with cores (else a power of two, at most
 * 8), within max_units_per_cube and never empty. */
cube_dim3 cube_dim_new(const cube_device_properties *p, uint32_t working_units);

/* CubeCountSelection: num_cubes spread over max_cube_count. Exact when the
 * spread count is num_cubes; Approx otherwise, with num_cubes the cubes it
 * dispatches (more than asked: the kernel must check its bounds). */
typedef struct cube_count_selection {
        cube_dim3 count;
        bool exact;                     /* false: Approx, some cubes idle */
        uint32_t num_cubes;             /* what count dispatches */
} cube_count_selection;

cube_count_selection cube_count_select(const cube_device_properties *p, uint32_t num_cubes);
/* Sets a launch's cube count and cube dim from the helpers' values. */
void cube_launch_grid(cube_launch *l, cube_dim3 count, cube_dim3 dim);

/* Registers a kernel's source and entry point under a new kernel id. */
cube_error *cube_kernel_register(cube_client *c, const char *source, const char *entry,
                                 uint64_t *ret_kernel);
/* Launches on the calling thread's stream. Only mistakes the library can see
 * itself are returned here; everything else lands on the written buffers.
 * The launch joins the connection's batch: it goes out ahead of the next
 * frame any thread sends, when the batch fills, or at most 50 us later. */
cube_error *cube_launch_kernel(cube_client *c, const cube_launch *launch);
/* Compiles every kernel this session queued with CUBE_LAUNCH_QUEUE, and waits
 * for them. A kernel that failed reports it when it is launched. */
cube_error *cube_compile_queued(cube_client *c);

/* ---------------------------------------------------------------------------
 * Profiling windows
 *
 * A window measures the device time of exactly the work queued on the
 * calling thread's stream between its start and its end, timed by the
 * device where it runs (never the host's clock around the calls). Windows
 * nest and overlap, each under its own token. End or abandon every window:
 * an open one holds a slot of the session's max-profile-windows.
 * ------------------------------------------------------------------------- */
typedef struct cube_profile_duration {
        uint64_t device_ns;             /* device time of the window's work */
        uint64_t timed;                 /* pieces of work the device timed */
} cube_profile_duration;

/* Opens a window where the stream is now. */
cube_error *cube_start_profile(cube_client *c, uint64_t *ret_token);
/* Opens a window at the next launch queued on the stream, so that what the
 * host does before it (and any copy queued first) is not in it. */
cube_error *cube_start_profile_at_launch(cube_client *c, uint64_t *ret_token);
/* Closes the window once the stream has run its work, and answers its
 * device time. Errors are ProfileError (CUBE_PROFILE_*): NotMeasured when
 * nothing timed ran in it (never read it as zero: it would win every
 * comparison), NotRegistered for a token unknown on this stream or ended
 * already, Launch or Server when work inside it failed. */
cube_error *cube_end_profile(cube_client *c, uint64_t token, cube_profile_duration *ret_duration);
/* Drops the window without measuring it: no wait, no round trip. */
cube_error *cube_abandon_profile(cube_client *c, uint64_t token);

/* ---------------------------------------------------------------------------
 * Graph capture
 *
 * On the calling thread's stream: cube_graph_prepare, then a warm-up run of
 * the workload (it leaves the pools holding what the recorded run needs),
 * then cube_begin_capture ... cube_end_capture, which records the stream's
 * launches instead of running them. cube_replay runs the recorded launches
 * again, against the buffers they were recorded with, with one request; it
 * returns once they are queued. Inside the window a read, sync, profile or
 * memory_cleanup on the stream is refused (ServerError::Generic, the
 * reference's graph_state), an allocation that needs a new page fails with
 * IoError::PageUpdateForbidden, and a failed, skipped or unrecordable
 * operation (a write, a dynamic cube count) dooms the capture: end_capture
 * reports it. A graph keeps the buffers it touches until it is destroyed.
 * ------------------------------------------------------------------------- */
cube_error *cube_graph_prepare(cube_client *c);
cube_error *cube_begin_capture(cube_client *c);
cube_error *cube_end_capture(cube_client *c, uint64_t *ret_graph);
cube_error *cube_replay(cube_client *c, uint64_t graph);
/* times replays (1 to 65536) with one request: a loop replaying a graph
 * pays one round trip. They queue in order; the first that cannot queue
 * stops the rest and is returned. */
cube_error *cube_replay_times(cube_client *c, uint64_t graph, uint32_t times);
/* Releases the graph; a replay still running finishes first. Unknown ids
 * are ignored, as the reference does. */
cube_error *cube_graph_destroy(cube_client *c, uint64_t graph);

/* One entry of cubectl graphs: an open profiling window, a graph, or a
 * capture under way. */
typedef struct cube_capture_info {
        uint64_t session;
        char kind[16];                  /* "window", "graph" or "capture" */
        uint64_t stream;
        uint64_t id;                    /* the window's token, the graph's id; 0 for a capture */
        char state[16];                 /* window: open, at-launch, ending; graph: kept (by
                                         * the device) or ready; capture: prepared,
                                         * recording, doomed */
        uint64_t launches;              /* graph, capture: launches recorded; window: timed */
        uint64_t pages, page_bytes;     /* graph: pages it keeps */
        uint64_t replays;               /* graph */
        uint64_t device_ns;             /* window: measured so far */
} cube_capture_info;

/* Every session's windows, graphs and captures. The caller frees the array. */
cube_error *cube_daemon_captures(cube_client *c, cube_capture_info **ret_captures, size_t *ret_n);

/* One entry of the daemon's kernel cache, as cubectl kernels shows it. */
typedef struct cube_kernel_info {
        char hash[65];                  /* the key of its build (its artifact's name), which
                                         * the entry points of one source share */
        char entry[64];
        char backend[16];
        char state[16];                 /* "compiled", "failed", "compiling", "new" */
        bool from_disk;                 /* loaded from the persistent cache */
        double compile_ms;              /* how long compiling it took, when it was compiled */
        uint64_t hits;                  /* launches served without compiling */
} cube_kernel_info;

/* The daemon's kernel cache. *ret_kernels is an array the caller frees. */
cube_error *cube_daemon_kernels(cube_client *c, cube_kernel_info **ret_kernels, size_t *ret_n);

/* The kernel cache on disk: its size against cache-max-bytes, and the
 * artifacts evicted to stay under it (newest first; named to an
 * administrator only). */
#define CUBE_EVICTED_SHOWN 16
typedef struct cube_kernel_cache {
        char dir[256];
        uint64_t bytes, max_bytes;      /* max_bytes 0: no limit */
        uint64_t artifacts;
        uint64_t evictions, evicted_bytes;
        size_t n_evicted;
        struct {
                char artifact[80];      /* KEY.EXT */
                uint64_t bytes;
                double at_s;            /* seconds after the daemon started */
        } evicted[CUBE_EVICTED_SHOWN];
} cube_kernel_cache;

cube_error *cube_daemon_kernel_cache(cube_client *c, cube_kernel_cache *ret_cache);

/* One compiled artifact the kernel cache directory holds, whether or not a
 * session still registers its kernel. */
typedef struct cube_cache_artifact {
        char hash[65];                  /* the cache key, as cube_kernel_info's hash */
        char source_hash[65];           /* SHA-256 of the kernel's source ("" if unrecorded) */
        char entry[64];                 /* its source's entry points, comma-separated, as
                                         * many as fit ("" if unrecorded) */
        char backend[16];
        uint64_t bytes;                 /* the artifact and its digest */
        double used_at;                 /* last written or loaded, seconds since the epoch */
} cube_cache_artifact;

/* The artifacts of the kernel cache directory. Named to root and the
 * daemon's user only (they are others' kernels): anyone else gets none.
 * *ret_artifacts is an array the caller frees. */
cube_error *cube_daemon_cache_artifacts(cube_client *c, cube_cache_artifact **ret_artifacts,
                                        size_t *ret_n);

/* ---------------------------------------------------------------------------
 * Inspecting and operating a daemon (what cubectl does)
 * ------------------------------------------------------------------------- */

/* This connection's session id, as cubectl sessions lists it. */
uint64_t cube_client_session(const cube_client *c);

typedef struct cube_session_info {
        uint64_t id;
        uint32_t pid, uid;
        char name[64];
        uint64_t streams;
        uint64_t memory_in_use, memory_peak; /* bytes */
        uint64_t allocations;
        uint64_t launches;
        uint64_t bytes_in, bytes_out;
        uint64_t errors;
        bool connected;                 /* false while its last work drains */
} cube_session_info;

/* Every session of the daemon. *ret_sessions is an array the caller frees. */
cube_error *cube_daemon_sessions(cube_client *c, cube_session_info **ret_sessions, size_t *ret_n);

typedef struct cube_stream_info {
        uint64_t session;
        uint64_t stream;
        uint64_t pending;               /* work queued on the device */
} cube_stream_info;

cube_error *cube_daemon_streams(cube_client *c, cube_stream_info **ret_streams, size_t *ret_n);
/* A line of the shares view: a session's (session != 0), or a tenant's, its
 * sessions added up. Shares are per mille of the device time of the last
 * whole window (cubed.conf(5), share-window-ms). */
typedef struct cube_share_info {
        uint64_t session;               /* 0: a tenant's line */
        uint32_t uid;
        char name[64];                  /* the session's name, or "" */
        char tenant[48];                /* the tenant it counts in: tenant= or "uid:N" */
        uint32_t weight;
        char class_name[16];            /* "latency", "normal" or "batch" */
        uint32_t cap;                   /* the tenant's cap, percent (0: none) */
        uint64_t device_ns;             /* device time of its completed work */
        uint64_t window_ns;             /* ...in the last whole window */
        uint32_t share;                 /* its part of that window's device time, per mille */
        uint32_t owed;                  /* the part it is owed, per mille */
} cube_share_info;

/* The shares view: every session this user may see, then their tenants.
 * *ret_shares is an array the caller frees. */
cube_error *cube_daemon_shares(cube_client *c, cube_share_info **ret_shares, size_t *ret_n);
/* Sets this session's class ("latency", "normal", "batch"; NULL keeps it)
 * or weight (0 keeps it) at or below what the operator gave it: anything
 * above the operator's terms is refused (Validation). */
cube_error *cube_share_lower(cube_client *c, const char *class_name, uint32_t weight);

/* The daemon's figures in the Prometheus text format; the caller frees it. */
cube_error *cube_daemon_metrics(cube_client *c, char **ret_text);
/* Takes no new work, and stops once the last working session ends (the
 * daemon's own user and root only). Sessions opened during a drain may
 * look and act (status, sessions, undrain, ...) but not work. With a
 * timeout (seconds, 0: none), the sessions still open then are closed. A
 * second drain sets the deadline anew. */
cube_error *cube_daemon_drain(cube_client *c);
cube_error *cube_daemon_drain_timeout(cube_client *c, uint32_t timeout_seconds);
/* Ends a drain: new work is taken again. */
cube_error *cube_daemon_undrain(cube_client *c);
/* Closes a session; everything it held is reclaimed (the daemon's own user
 * and root only). */
cube_error *cube_daemon_kill_session(cube_client *c, uint64_t session);

/* ---------------------------------------------------------------------------
 * Failures and fault injection
 * ------------------------------------------------------------------------- */

/* One live failure of the daemon's store, as cubectl failures shows it. */
typedef struct cube_failure_info {
        uint64_t id;
        uint64_t session;               /* the session whose work failed */
        cube_error *report;             /* Unwritten{failure, claimed, chain, root} */
} cube_failure_info;

/* Every live failure of the daemon. Release with cube_failures_free. */
cube_error *cube_daemon_failures(cube_client *c, cube_failure_info **ret_failures, size_t *ret_n);
void cube_failures_free(cube_failure_info *failures, size_t n);

/* Where an injected fault strikes: the next one of these, daemon-wide. */
typedef enum cube_fault_site {
        CUBE_FAULT_ALLOC = 0,           /* the next reservation fails */
        CUBE_FAULT_COPY,                /* the next copy on the device fails */
        CUBE_FAULT_LAUNCH,              /* the next launch fails to enqueue */
        CUBE_FAULT_COMPILE,             /* the next compile fails */
        CUBE_FAULT_POISON,              /* the device is poisoned now */
        CUBE_FAULT_TEARDOWN,            /* the next launch's write scope never ends */
        CUBE_FAULT_DEVICE_LAUNCH,       /* the next launch is queued, and fails on the device */
} cube_fault_site;

/* Makes the daemon fail as asked, for tests. Only a daemon started with
 * --enable-fault-injection accepts it. kind is the variant to fail with (a
 * leaf of the taxonomy: CUBE_IO_OUT_OF_MEMORY, CUBE_COMPILATION_GENERIC,
 * CUBE_LAUNCH_UNKNOWN, ...), wrapped as the site's path wraps it; reason and
 * size fill its fields. POISON takes reason; TEARDOWN takes nothing. */
cube_error *cube_debug_inject(cube_client *c, cube_fault_site site, cube_error_kind kind,
                              const char *reason, uint64_t size);

/* ---------------------------------------------------------------------------
 * Daemon status (what cubectl status shows)
 * ------------------------------------------------------------------------- */
typedef struct cube_status {
        char service[64];
        char backend[16];
        cube_device_properties properties;
        double uptime_seconds;
        uint32_t sessions;
        uint64_t memory_in_use;         /* bytes of device memory held by sessions */
        uint64_t memory_peak;
        uint64_t memory_reserved;       /* bytes in pages taken from the device */
        uint64_t allocations;
        uint64_t compiles;              /* kernels compiled by this run of the daemon */
        uint64_t kernels;               /* entries in the kernel cache */
        bool poisoned;
        char poison[256];               /* what poisoned the device, when it is */
        char version[32];               /* the daemon's version */
        char state[16];                 /* "serving", "draining", "poisoned", "stopping" */
        char reload_error[256];         /* why the last reload was refused; "" if it was not */
        double drain_seconds_left;      /* until a drain's deadline closes what is left; 0: none */
} cube_status;

cube_error *cube_daemon_status(cube_client *c, cube_status *ret_status);

/* ---------------------------------------------------------------------------
 * Collectives between devices (ServerCommunication). A device is a daemon
 * instance ("cpu0", "cpu1", ...): on one host the daemons find each other
 * through their sockets' directory. A group is one sorted set of devices
 * (cube_comm_init, on every member, each through its own client) or a group
 * id one member minted (cube_comm_mint on rank 0, then cube_comm_init_id on
 * every rank, the launcher handing the id around). Every operation is
 * answered once queued; what goes wrong later lands on the destination, and
 * a read of it names the cause (a member whose source carried a failure, or
 * a member lost). Members must queue a group's operations in one order.
 * ------------------------------------------------------------------------- */
typedef enum cube_reduce_op { CUBE_REDUCE_SUM, CUBE_REDUCE_MEAN } cube_reduce_op;

/* How a collective reduces its members' elements (Reduction). */
typedef struct cube_reduction {
        cube_elem_type dtype;
        cube_reduce_op op;
} cube_reduction;

/* ComputeWait. AT_SYNC: the collective runs beside compute, and the caller
 * keeps its buffers alive until cube_sync_collective. NOW: it runs before
 * anything queued after it on the stream. */
typedef enum cube_compute_wait { CUBE_WAIT_AT_SYNC, CUBE_WAIT_NOW } cube_compute_wait;

/* A group: devices (n of them, any order) or, when id is set, a minted id. */
typedef struct cube_group {
        const char *const *devices;
        size_t n;
        const char *id;
} cube_group;

/* Joins the group of devices; blocks until every member has joined, so a
 * process holding a client per device calls it from one thread per client
 * (or uses cube_comm_init_all). */
cube_error *cube_comm_init(cube_client *c, const char *const *devices, size_t n);
/* The daemon's transport between devices, as hello reported it; NULL when
 * it has none (every collective answers NoDeviceTransport). */
const char *cube_client_device_transport(const cube_client *c);
/* Whether that transport reduces elements of type t (all_reduce and
 * reduce_scatter over t); false without a transport. */
bool cube_client_transport_reduces(const cube_client *c, cube_elem_type t);
/* The same for n clients at once, client i being devices[i]'s. */
cube_error *cube_comm_init_all(cube_client *const *clients, const char *const *devices, size_t n);
/* A group id whose rank 0 is this client's daemon (id has room for 128 bytes). */
cube_error *cube_comm_mint(cube_client *c, char ret_id[128]);
cube_error *cube_comm_init_id(cube_client *c, const char *id, uint32_t rank, uint32_t size);

cube_error *cube_all_reduce(cube_client *c, const cube_group *g, const cube_handle *src,
                            const cube_handle *dst, cube_reduction reduction,
                            cube_compute_wait wait);
/* dst holds one src per member, in rank order. */
cube_error *cube_all_gather(cube_client *c, const cube_group *g, const cube_handle *src,
                            const cube_handle *dst, cube_compute_wait wait);
/* src holds one dst per member; dst receives this member's chunk of the result. */
cube_error *cube_reduce_scatter(cube_client *c, const cube_group *g, const cube_handle *src,
                                const cube_handle *dst, cube_reduction reduction,
                                cube_compute_wait wait);
/* root's src to every dst; src is NULL on every other member. */
cube_error *cube_broadcast(cube_client *c, const cube_group *g, const cube_handle *src,
                           const cube_handle *dst, const char *root, cube_compute_wait wait);
/* Chunk r of src to member r; chunk r of dst from member r. */
cube_error *cube_all_to_all(cube_client *c, const cube_group *g, const cube_handle *src,
                            const cube_handle *dst, cube_compute_wait wait);
/* Point to point. With g NULL, peer names a device and the pair's own
 * group (transfers_between) is joined on first use; with g, peer names a
 * member (a device name, or its rank as decimal text). */
cube_error *cube_send(cube_client *c, const cube_group *g, const cube_handle *src,
                      const char *peer, cube_compute_wait wait);
cube_error *cube_recv(cube_client *c, const cube_group *g, const cube_handle *dst,
                      const char *peer, cube_compute_wait wait);
/* Waits for every AT_SYNC collective this client queued. */
cube_error *cube_sync_collective(cube_client *c);

/* Peer access: kernels on this device bind a buffer of another.
 *
 * On the CPU device, two daemons of one host and one user (their sockets in
 * one comm directory, named after the devices: cpu0.sock, cpu1.sock) map
 * each other's device memory. The first cube_can_access_peer(peer) hands
 * the memory over; it answers false for a peer of another user or host,
 * one that is not there, this device itself, a daemon with no transport
 * (--transport none) and the CUDA device.
 *
 * The owner's client asks cube_peer_address(h) on its daemon: the address
 * of h's first byte, tagged with the owner's device, or the failure h
 * carries (so no peer reads bytes a failed launch left unwritten);
 * NoDeviceTransport{peer_access} where the device has no peer access. It
 * keeps h alive for as long as the address is in use.
 *
 * The other client names size bytes at that address as a handle of its
 * own with cube_peer_bind, and binds it in launches as any buffer (only a
 * client of the daemon's own user, or root, may: a bound range reaches
 * whatever the peer holds there); a launch that binds it after the peer is
 * gone fails, on what it writes. The daemon that ran a launch writing the
 * buffer tells the owner's daemon itself how it ended, in stream order: a
 * sync there that waited for the launch answers once the owner knows, and
 * reads on the owner see the bytes, or fail on the launch's own error (a
 * poisoned device's DevicePoisoned included) as they would on one of its
 * own launches. */
cube_error *cube_can_access_peer(cube_client *c, const char *peer, bool *ret_can);
cube_error *cube_peer_address(cube_client *c, const cube_handle *h, uint64_t *ret_address);
cube_error *cube_peer_bind(cube_client *c, const char *peer, uint64_t address, uint64_t size,
                           cube_handle *ret_handle);
/* Deprecated, does nothing: the owner's daemon learns what a peer's launch
 * wrote from the peer. Kept for programs built against earlier libraries. */
cube_error *cube_peer_wrote(cube_client *c, const cube_handle *handles, size_t n,
                            const char *reason) CUBE_DEPRECATED;

typedef struct cube_comm_info {
        char id[17];
        uint64_t session;
        char kind[16];                  /* devices, transfers, id */
        uint32_t rank, size;
        char members[8][64];            /* the first 8 */
        char state[16];                 /* joining, ready, failed, closed */
        char why[512];
        uint64_t ops, bytes, refusals;
} cube_comm_info;

cube_error *cube_daemon_comms(cube_client *c, cube_comm_info **ret_comms, size_t *ret_n);

/* A session that has ended, from the daemon's bounded history. */
typedef struct cube_ended_session {
        uint64_t id;
        uint32_t pid, uid;
        char name[64];
        uint64_t launches, bytes_in, bytes_out, errors, memory_peak;
        double opened_seconds;          /* after the daemon started */
        double duration_seconds;
} cube_ended_session;

/* A failure recorded recently, live or not. */
typedef struct cube_recent_failure {
        uint64_t id;
        uint64_t session;
        char root[256];                 /* the root error's message */
        double at_seconds;              /* after the daemon started */
} cube_recent_failure;

/* The last sessions to end and failures to happen (`history` of each, the
 * oldest first). A caller other than root and the daemon's user sees only
 * its own user's. The arrays are the caller's to free. */
cube_error *cube_daemon_ended_sessions(cube_client *c, cube_ended_session **ret_sessions,
                                       size_t *ret_n);
cube_error *cube_daemon_recent_failures(cube_client *c, cube_recent_failure **ret_failures,
                                        size_t *ret_n);

/* A uid or session name refused for poisoning the device too often. */
typedef struct cube_ban {
        char kind[8];                   /* "uid" or "name" */
        char who[64];
        uint64_t seconds_left;
} cube_ban;

cube_error *cube_daemon_bans(cube_client *c, cube_ban **ret_bans, size_t *ret_n);

/* One option of the daemon's running configuration. */
typedef struct cube_config_entry {
        char key[32];
        char value[256];
        char source[160];               /* "default", "command line", or "FILE:LINE" */
        bool reloadable;                /* a reload changes it; otherwise only a restart */
} cube_config_entry;

/* The daemon's running configuration. *ret_entries is an array the caller frees. */
cube_error *cube_daemon_config(cube_client *c, cube_config_entry **ret_entries, size_t *ret_n);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif

/*
 * driver.h - the small interface between cubed's generic core and a device.
 *
 * The core owns everything that is the same on every device: sessions,
 * handles, streams and their order, accounting, the failure store. A backend
 * implements only what touches the device: storage, streams, copies, fences
 * and kernels (compiled, loaded, launched), and where it can, graphs it keeps
 * itself and peer access. It is shaped for an asynchronous device:
 * a copy is *submitted* on a stream and *completes* later, from whatever
 * thread the backend likes, through the completion function the core gave it
 * at open. The core never waits on the device on its event-loop thread.
 *
 * Threading: open/close/properties/alloc/release/stream_open/stream_close and
 * every submission are called from the core's loop thread only.
 */
#ifndef CUBE_DRIVER_H
#define CUBE_DRIVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "cube.h"

typedef struct cube__device cube__device;
typedef struct cube__storage cube__storage;
typedef struct cube__dstream cube__dstream;
typedef struct cube__work cube__work;
typedef struct cube__module cube__module;
typedef struct cube__dgraph cube__dgraph;
typedef struct cube__fe_facts cube__fe_facts;

/* What a submitted piece of work asks of the device. */
typedef enum cube__work_op {
        CUBE__WORK_COPY_TO_DEVICE,      /* host -> storage + offset, len bytes */
        CUBE__WORK_COPY_TO_HOST,        /* storage + offset -> host, len bytes */
        CUBE__WORK_FENCE,               /* completes once everything before it on the stream has */
        CUBE__WORK_LAUNCH,              /* runs launch */
        CUBE__WORK_GRAPH,               /* runs graph's launches in order (graph_create) */
} cube__work_op;

/* What the core learned from a kernel's source through the front end
 * (backends/frontend/; the dialect is the same on every backend). source
 * is the checked form the front end wrote, which each backend compiles
 * behind its own prelude (the CUBE__ macros). */
typedef struct cube__kernel_desc {
        const char *source;
        const char *entry;
        uint32_t n_buffers;             /* buffer parameters, before the scalars */
        bool uses_sync;                 /* calls sync_cube() */
        /* The parse's facts, valid while the module lives: a launch that went
         * out of bounds is described with them. */
        const cube__fe_facts *facts;
} cube__kernel_desc;

/* One kernel launch, as the device runs it. */
typedef struct cube__launch_work {
        cube__module *module;
        const char *kernel;             /* the entry point, for reports */
        uint32_t count[3];
        uint32_t dim[3];
        uint32_t n_buffers;
        cube__storage **storages;       /* per buffer */
        uint64_t *offsets;              /* per buffer: where its range starts */
        /* Per buffer two words: the allocation it lies in, [begin, end) in
         * its storage (NULL: the whole storage). A backend that orders
         * streams itself (orders_streams) orders by these, so that work on
         * two allocations sharing a page does not wait for each other. */
        uint64_t *extents;
        uint64_t *info;
        uint32_t n_info;
        uint32_t metadata_offset;       /* in words */
        uint32_t dynamic_offset;        /* in words */
        /* The last n_tensor_maps buffers back tensor maps, whose words
         * (frontend.h, CUBE__TMAP_*) precede the bindings' lengths. */
        uint32_t n_tensor_maps;
        /* The core proved every bound the kernel's facts name in range over
         * the whole grid (frontend.h's cube__fe_bounds_hold): a backend whose
         * module holds the entry's bare form (CUBE__BARE) may run that. */
        bool in_bounds;
} cube__launch_work;
/* n_info counts the words the core adds after the launch's own (frontend.h's
 * CUBE__CHECK_TAIL_WORDS and the bindings' lengths): a checked launch that
 * goes out of bounds writes its record there, and the backend that ran it
 * completes it with ServerError::Validation describing the record
 * (cube__fe_describe_oob) instead of handing back clean work. */

/* One unit of device work. The core embeds it in its own bookkeeping and
 * fills the fields; the backend sets error on failure and hands the work back
 * through the completion function, exactly once. A fence hands back whatever
 * error it was submitted with, untouched.
 *
 * Device timing: before handing work back, the backend sets start_ns and
 * end_ns to when the device began and finished running it, CLOCK_MONOTONIC
 * nanoseconds taken where the device runs the work (the CPU device: on the
 * thread that runs the kernel, around the kernel only, not the wait for the
 * kernel pool; CUDA: the elapsed time of events recorded around it, placed
 * on that clock). Both stay 0 for work the backend does not time: a
 * profiling window that holds only such work reports NotMeasured, never a
 * zero duration. Launches must be timed; copies and fences may be. The core
 * zeroes both before submitting. */
struct cube__work {
        cube__work *next;               /* free for the backend's queues while it holds the work */
        cube__work_op op;
        cube__storage *storage;
        uint64_t offset;
        void *host;                     /* source or destination in host memory */
        uint64_t len;                   /* bytes, or bytes per row */
        uint64_t rows;                  /* copies: rows of len bytes, pitch apart on the device */
        uint64_t pitch;                 /* (0 or 1 row: one linear copy); packed on the host */
        cube__launch_work *launch;      /* CUBE__WORK_LAUNCH */
        cube__dgraph *graph;            /* CUBE__WORK_GRAPH */
        cube_error *error;              /* set by the backend; the core takes it */
        uint64_t start_ns, end_ns;      /* set by the backend: device timing (above) */
};

/* Hands back one piece of work, or several linked by next (NULL-terminated):
 * a backend that finishes a batch hands it back with one call. */
typedef void (*cube__complete_fn)(void *ctx, cube__work *work);

typedef struct cube__device_config {
        unsigned index;                 /* the device's index on its backend */
        uint64_t memory_limit;          /* 0: the backend's default */
        uint32_t kernel_timeout_ms;     /* a launch running longer poisons the device; 0: none */
        uint32_t compile_cpu_s;         /* CPU time one kernel build may take; 0: the default */
        uint64_t compile_memory;        /* address space of one build; 0: the default */
        uint64_t compile_output;        /* bytes one build may write to a file; 0: the default */
        uint32_t compile_slots;         /* builds the core runs at once; 0: the default */
        cube__complete_fn complete;     /* callable from any thread */
        void *complete_ctx;
        /* An eventfd of the core's, or -1. Any thread or process the backend
         * gives it to may write it; the core then calls loop_ready on its
         * loop thread. A backend that completes work there saves the
         * wake-ups of a thread of its own in between. */
        int loop_fd;
} cube__device_config;

typedef struct cube__driver {
        const char *name;               /* "cpu", "cuda" */

        /* Brings the device up. On failure returns a negative errno and, when
         * it can say more, a message for a person in *ret_why (static). */
        int (*open)(const cube__device_config *config, cube__device **ret_device,
                    const char **ret_why);
        /* Waits for all submitted work to complete, then releases the device. */
        void (*close)(cube__device *d);
        void (*properties)(cube__device *d, cube_device_properties *ret);

        /* Device memory. alloc answers with the taxonomy: IoError::BufferTooBig
         * when the size can never fit, IoError::OutOfMemory when it does not
         * fit now. release is called only once no submitted work uses it. */
        cube_error *(*alloc)(cube__device *d, uint64_t size, cube__storage **ret_storage);
        void (*release)(cube__device *d, cube__storage *s);
        /* Bytes [offset, offset + len) of s hold nothing any more (an
         * allocation freed from a page the core keeps): the backend may give
         * their memory back to the host. Optional; called when no work uses
         * them. */
        void (*discard)(cube__device *d, cube__storage *s, uint64_t offset, uint64_t len);
        /* The storage's bytes, for backends whose memory the host can address
         * (NULL elsewhere). */
        void *(*host_view)(cube__device *d, cube__storage *s);

        cube_error *(*stream_open)(cube__device *d, cube__dstream **ret_stream);
        /* Called once no submitted work remains on the stream. */
        void (*stream_close)(cube__device *d, cube__dstream *s);

        /* Queues work on a stream: w and whatever is linked after it by next
         * (NULL-terminated), in that order. Work on one stream completes in
         * order. A launch that faults completes with DevicePoison as its error.
         * A replayed graph arrives here too, as its recorded launches in
         * order (each its own cube__work, with a cube__launch_work the core
         * resolved once at capture and reuses on every replay): a software
         * graph needs nothing more of a backend. A backend that keeps graphs
         * of its own gets one CUBE__WORK_GRAPH instead (graph_create). */
        void (*submit)(cube__device *d, cube__dstream *s, cube__work *w);
        /* The loop_fd was written (optional, NULL: the backend never writes
         * it). Called on the loop thread, as submit is. */
        void (*loop_ready)(cube__device *d);
        /* The loop thread is about to wait for events (optional): a backend
         * that holds back starting the device while the loop submits, so a
         * round of requests reaches it together, starts it now. */
        void (*loop_idle)(cube__device *d);

        /* Kernels. artifact_ext names the compiled form's files ("so").
         * target() says what compiled code depends on, for cache keys: the
         * compiler, its version, the machine and the options. compile and
         * load run off the loop thread; compile answers with a
         * CompilationError carrying the compiler's log. */
        const char *artifact_ext;
        const char *(*target)(cube__device *d);
        cube_error *(*compile)(cube__device *d, const cube__kernel_desc *desc,
                               const char *artifact_path);
        cube_error *(*load)(cube__device *d, const cube__kernel_desc *desc,
                            const char *artifact_path, cube__module **ret_module,
                            uint32_t *ret_shared_bytes);
        void (*unload)(cube__device *d, cube__module *m);
        /* Builds, at artifact_path, the kernel's source again with work-group
         * code specialised for cubes of dim (optional; NULL: the backend's
         * code is as fast for every cube dimension). Off the loop thread, as
         * compile. Loaded with load, the artifact serves every launch of that
         * cube dimension; launches of others keep the generic module. No one
         * waits for it: once *abandon is set (the daemon stops), a build
         * gives up as soon as it can and answers an error, so that a stop
         * never waits for code nothing will run. */
        cube_error *(*compile_shape)(cube__device *d, const cube__kernel_desc *desc,
                                     const uint32_t dim[3], const char *artifact_path,
                                     const atomic_bool *abandon);

        /* Graph capture (optional; NULL: the backend captures). The core
         * records a capture's launches and replays them through submit (a
         * software graph), which needs nothing more of a backend. One that
         * cannot replay recorded launch records (device state a record
         * cannot hold) answers true, and begin_capture, end_capture and
         * replay then answer the reference's graph_capture_unsupported(). */
        bool (*cannot_capture)(cube__device *d);
        /* A graph the device keeps (optional, NULL: replays go through
         * submit as their launches). graph_create takes a captured graph's
         * launches, which stay valid (and what they name, allocated) until
         * graph_destroy; label names it in reports ("graph 3"). A replay is
         * then one CUBE__WORK_GRAPH, which runs them in order, times them as
         * one piece of work and fails with the first launch that fails;
         * none is started once that is known. An error from graph_create is
         * no refusal: the core replays that graph through submit instead.
         * graph_destroy is called once no submitted work uses the graph. */
        cube_error *(*graph_create)(cube__device *d, cube__launch_work *const *launches,
                                    size_t n, const char *label, cube__dgraph **ret_graph);
        void (*graph_destroy)(cube__device *d, cube__dgraph *g);
        /* Optional hooks (NULL where a backend has no use for them). */

        /* The most units per cube a loaded kernel can run with (a GPU's
         * registers lower it below max_units_per_cube); a launch asking
         * more is refused with TooManyResources(Units) before it runs. */
        uint32_t (*max_units)(cube__device *d, cube__module *m);
        /* A staging region was mapped at [addr, addr + len): the backend may
         * pin it (off the loop thread) so copies from it are one DMA. */
        void (*host_register)(cube__device *d, void *addr, uint64_t len);
        /* The region is done with: the backend unpins it and unmaps it (off
         * the loop thread); the core must not touch it any more. Without
         * this hook the core unmaps it itself. */
        void (*host_release)(cube__device *d, void *addr, uint64_t len);
        /* The backend orders work of different streams on a storage they
         * share itself (on the device), so the core may submit work whose
         * conflicting predecessor on another stream is submitted but not
         * complete. false: the core waits for that predecessor. */
        bool orders_streams;

        /* Peer access (optional, all NULL where kernels here cannot bind
         * another device's memory: can_access_peer then answers false and
         * peer_address NoDeviceTransport{peer_access}).
         *
         * peer_export: a descriptor of this device's memory (the caller
         * closes it) and its size, for a daemon of the same user on this
         * host to map. peer_offset: where s starts in that memory, the
         * address a peer binds. peer_attach (off the loop thread) maps a
         * peer's memory, taking fd, and answers the slot kernels here reach
         * it through. peer_storage names size bytes at offset of an attached
         * peer's memory, as storage launches bind and copies reach; release
         * frees it and leaves the peer's memory alone. */
        int (*peer_export)(cube__device *d, int *ret_fd, uint64_t *ret_size);
        uint64_t (*peer_offset)(cube__device *d, cube__storage *s);
        cube_error *(*peer_attach)(cube__device *d, int fd, uint64_t size, uint32_t *ret_slot);
        cube_error *(*peer_storage)(cube__device *d, uint32_t slot, uint64_t offset,
                                    uint64_t size, cube__storage **ret_storage);
} cube__driver;

/* The dialect's rules that no compiler enforces (backends/dialect-check.c):
 * NULL, or a CompilationError::Validation naming the line that breaks one.
 * The core asks it of every source, whatever the backend. */
cube_error *cube__dialect_check(const char *source);

extern const cube__driver cube__driver_cpu;
#ifdef CUBE_HAVE_CUDA
extern const cube__driver cube__driver_cuda;
#endif

/* The names of the drivers this build has ("cpu, cuda"). */
const char *cube__driver_names(void);

/* The driver registered under name, or NULL. */
const cube__driver *cube__driver_find(const char *name);

#endif

/*
 * double.c - a test double of the CUDA driver (libcuda.so.1), for CI
 * machines without a GPU.
 *
 * It exports cuGetProcAddress and hands out the entry points the backend
 * resolves (backends/cuda/internal.h), keeping the driver's rules the
 * backend relies on:
 *
 * - cuInit first; a current context per thread (cuCtxSetCurrent), and a
 *   call that needs one fails with CUDA_ERROR_INVALID_CONTEXT without it;
 * - every stream runs its work in order on a thread of its own; an event
 *   completes when its stream reaches it, with the CLOCK_MONOTONIC time it
 *   did (cuEventElapsedTime, unless created with CU_EVENT_DISABLE_TIMING);
 *   a host function blocks its stream while it runs;
 * - device memory is host memory between two guard pages, so a copy past
 *   an allocation faults here as it would on a GPU;
 * - cuLaunchKernel checks its parameters against the CUBIN's own table
 *   (.nv.info.ENTRY, EIATTR_KPARAM_INFO): count, and that every one is
 *   there to read. Kernel bodies never run: a launch takes
 *   CUBE_CUDA_DOUBLE_LAUNCH_US microseconds (default 20) and does nothing;
 * - a sticky fault leaves every later call failing with it until the
 *   primary context is reset, which ends whatever still runs; as on an
 *   H200 with driver 580, a process that met one cannot retain the primary
 *   context again (cuDevicePrimaryCtxRetain answers the fault) until it
 *   ends;
 * - cuTensorMapEncodeTiled and cuTensorMapEncodeIm2col refuse what the
 *   driver documents as invalid (rank, alignment, dimensions, strides,
 *   boxes, element strides, swizzle, fill) and write the address into the
 *   map.
 *
 * Faults are injected from the environment, read at cuInit:
 *   CUBE_CUDA_DOUBLE_FAULT_LAUNCH=N  the Nth launch of the process faults
 *                                    (CUDA_ERROR_ILLEGAL_ADDRESS, sticky)
 *   CUBE_CUDA_DOUBLE_HANG_LAUNCH=N   the Nth launch never ends (until a reset)
 *   CUBE_CUDA_DOUBLE_FAIL_REGISTER=1 cuMemHostRegister fails
 *   CUBE_CUDA_DOUBLE_FAIL_ALLOC=N    the Nth device allocation fails, out of memory
 *   CUBE_CUDA_DOUBLE_FAIL_EVENT=N    every cuEventCreate from the Nth on fails, out of
 *                                    memory
 *   CUBE_CUDA_DOUBLE_RECORD_US=N     cuEventRecord takes N microseconds (a busy driver)
 *   CUBE_CUDA_DOUBLE_VERSION=N       the CUDA version the driver says it is (12040)
 *   CUBE_CUDA_DOUBLE_MEMORY=BYTES    the device's memory (default 2 GiB);
 *                                    beyond it allocations fail, out of memory
 *
 * It is a test double: nothing it measures says anything about a GPU.
 */
#include <elf.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#define EXPORT __attribute__((visibility("default")))
#define DEVICE_NAME "cube CUDA test double"
#define MAX_PARAMS 256

/* ---- state ------------------------------------------------------------ */

struct CUctx_st {
        unsigned retained;
        unsigned generation;            /* bumped by a reset: older objects are dead */
        CUresult sticky;                /* CUDA_SUCCESS, or the fault every call answers */
};

typedef struct alloc {
        struct alloc *next;
        char *base;                     /* the mapping, guard pages included */
        size_t map_len, size;
        bool device;                    /* device memory (counted), or pinned host */
} alloc;

typedef struct region {
        struct region *next;
        char *addr;
        size_t len;
} region;

typedef enum op_kind { OP_COPY, OP_COPY2D, OP_MEMSET, OP_RECORD, OP_WAIT, OP_HOST_FN, OP_LAUNCH,
                       OP_FREE } op_kind;

typedef struct op {
        struct op *next;
        op_kind kind;
        void *dst;
        const void *src;
        size_t len;
        CUDA_MEMCPY2D m;
        unsigned char byte;
        CUevent event;
        uint64_t seq;
        CUhostFn fn;
        void *arg;
        bool fault, hang;
        CUdeviceptr ptr;
} op;

struct CUstream_st {
        unsigned generation;
        op *head, *tail;
        bool destroyed, exited;
        pthread_t thread;
};

struct CUevent_st {
        unsigned generation;
        unsigned refs;                  /* the handle, and each queued op naming it */
        bool timing;
        uint64_t recorded, completed;   /* sequence numbers */
        uint64_t ns;                    /* CLOCK_MONOTONIC when it completed */
};

typedef struct param {
        uint16_t offset, size;
} param;

struct CUfunc_st {
        char name[128];
        unsigned n_params;
        param params[MAX_PARAMS];
        unsigned param_bytes;
};

struct CUmod_st {
        unsigned generation;
        struct CUfunc_st *funcs;
        unsigned n_funcs;
        struct CUmod_st *next, *prev;   /* the process's modules, as the driver holds them */
};

/* Every module loaded and not unloaded: one a poisoned context keeps stays
 * the process's until it ends, as on a GPU. */
static struct CUmod_st *modules;

struct CUmemPoolHandle_st {
        int unused;
};

/* One lock for everything, one condition for every change: a test double
 * wants simple and correct, not fast. */
static pthread_mutex_t big = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static bool initialised;
static struct CUctx_st primary;
/* The first sticky fault of the process: it outlives every reset. */
static CUresult process_fault;
static __thread CUcontext current;
static alloc *allocs;
static region *regions;
static uint64_t memory_total, memory_used;
static uint64_t launches, device_allocs, fail_alloc, events_made, fail_event;
static uint64_t fault_launch, hang_launch, launch_us, record_us;
static bool fail_register;

static uint64_t now_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
        const char *v = getenv(name);
        return v && *v ? strtoull(v, NULL, 0) : dflt;
}

/* What a call that needs the calling thread's context answers: its sticky
 * fault, or no context at all. Called with big held. */
static CUresult need_ctx(void)
{
        if (!initialised)
                return CUDA_ERROR_NOT_INITIALIZED;
        if (!current || !current->retained)
                return CUDA_ERROR_INVALID_CONTEXT;
        return current->sticky;
}

#define ENTER() \
        CUresult r_; \
        pthread_mutex_lock(&big); \
        if ((r_ = need_ctx()) != CUDA_SUCCESS) { \
                pthread_mutex_unlock(&big); \
                return r_; \
        }
/* Destroying calls free what they are given even after a sticky fault (and
 * answer it), as the driver's reset would. */
#define ENTER_DESTROY() \
        CUresult r_; \
        pthread_mutex_lock(&big); \
        if (!initialised || !current || !current->retained) { \
                pthread_mutex_unlock(&big); \
                return initialised ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_NOT_INITIALIZED; \
        } \
        r_ = current->sticky;
#define LEAVE(r) do { CUresult l_ = (r); pthread_mutex_unlock(&big); return l_; } while (0)

/* ---- memory ----------------------------------------------------------- */

static size_t page_size(void)
{
        return (size_t) sysconf(_SC_PAGESIZE);
}

/* size bytes between two PROT_NONE pages, the end of the bytes against the
 * second, so an overrun faults at once. Called with big held. */
static void *map_guarded(size_t size, bool device)
{
        size_t pg = page_size(), body = (size + pg - 1) / pg * pg;
        alloc *a = calloc(1, sizeof(*a));
        char *base;

        if (!a)
                return NULL;
        a->map_len = body + 2 * pg;
        base = mmap(NULL, a->map_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                    -1, 0);
        if (base == MAP_FAILED || mprotect(base + pg, body, PROT_READ | PROT_WRITE) < 0) {
                if (base != MAP_FAILED)
                        munmap(base, a->map_len);
                free(a);
                return NULL;
        }
        a->base = base;
        a->size = size;
        a->device = device;
        a->next = allocs;
        allocs = a;
        /* 512-byte aligned like the driver's, the end near the guard page. */
        return base + pg + (body - size) / 512 * 512;
}

static alloc *find_alloc(const void *p)
{
        for (alloc *a = allocs; a; a = a->next)
                if ((const char *) p >= a->base && (const char *) p < a->base + a->map_len)
                        return a;
        return NULL;
}

static void unmap_alloc(alloc *a)
{
        for (alloc **pp = &allocs; *pp; pp = &(*pp)->next)
                if (*pp == a) {
                        *pp = a->next;
                        break;
                }
        if (a->device)
                memory_used -= a->size;
        munmap(a->base, a->map_len);
        free(a);
}

/* ---- streams ---------------------------------------------------------- */

/* Called with big held. */
static void event_unref(CUevent e)
{
        if (--e->refs == 0)
                free(e);
}

static void run_launch(CUstream s, op *o)
{
        if (o->fault) {
                pthread_mutex_lock(&big);
                if (s->generation == primary.generation && !primary.sticky)
                        primary.sticky = process_fault = CUDA_ERROR_ILLEGAL_ADDRESS;
                pthread_cond_broadcast(&changed);
                pthread_mutex_unlock(&big);
                return;
        }
        if (o->hang) {
                pthread_mutex_lock(&big);
                while (s->generation == primary.generation)
                        pthread_cond_wait(&changed, &big);
                pthread_mutex_unlock(&big);
                return;
        }
        if (launch_us)
                usleep((useconds_t) launch_us);
}

static void run_op(CUstream s, op *o)
{
        switch (o->kind) {
        case OP_COPY:
                memcpy(o->dst, o->src, o->len);
                break;
        case OP_COPY2D:
                for (size_t row = 0; row < o->m.Height; row++) {
                        const char *src = o->m.srcMemoryType == CU_MEMORYTYPE_HOST ?
                                (const char *) o->m.srcHost : (const char *) o->m.srcDevice;
                        char *dst = o->m.dstMemoryType == CU_MEMORYTYPE_HOST ?
                                (char *) o->m.dstHost : (char *) o->m.dstDevice;
                        memcpy(dst + row * o->m.dstPitch, src + row * o->m.srcPitch,
                               o->m.WidthInBytes);
                }
                break;
        case OP_MEMSET:
                memset(o->dst, o->byte, o->len);
                break;
        case OP_HOST_FN:
                o->fn(o->arg);
                break;
        case OP_LAUNCH:
                run_launch(s, o);
                break;
        case OP_RECORD:
                pthread_mutex_lock(&big);
                if (o->seq > o->event->completed) {
                        o->event->completed = o->seq;
                        o->event->ns = now_ns();
                }
                pthread_mutex_unlock(&big);
                break;
        case OP_WAIT:
                pthread_mutex_lock(&big);
                while (o->event->completed < o->seq && s->generation == primary.generation &&
                       !primary.sticky)
                        pthread_cond_wait(&changed, &big);
                pthread_mutex_unlock(&big);
                break;
        case OP_FREE: {
                pthread_mutex_lock(&big);
                alloc *a = find_alloc((void *) (uintptr_t) o->ptr);
                if (a && s->generation == primary.generation)
                        unmap_alloc(a);
                pthread_mutex_unlock(&big);
                break;
        }
        }
}

/* A stream's thread: its work in order; after a sticky fault or a reset
 * nothing runs any more. The last of the thread and cuStreamDestroy frees
 * the stream. */
static void *stream_main(void *arg)
{
        CUstream s = arg;

        pthread_mutex_lock(&big);
        for (;;) {
                while (!s->head && !s->destroyed)
                        pthread_cond_wait(&changed, &big);
                if (!s->head)
                        break;
                op *o = s->head;
                bool dead = s->generation != primary.generation || primary.sticky;
                pthread_mutex_unlock(&big);
                if (!dead)
                        run_op(s, o);
                pthread_mutex_lock(&big);
                s->head = o->next;
                if (!s->head)
                        s->tail = NULL;
                if (o->event)
                        event_unref(o->event);
                free(o);
                pthread_cond_broadcast(&changed);
        }
        s->exited = true;
        pthread_mutex_unlock(&big);
        free(s);
        return NULL;
}

/* Queues o on s. Called with big held. */
static CUresult push(CUstream s, op *o)
{
        /* NULL, the legacy stream, is one the backend never uses. */
        if (!s || s->generation != primary.generation || s->destroyed) {
                if (o->event)
                        event_unref(o->event);
                free(o);
                return CUDA_ERROR_INVALID_HANDLE;
        }
        o->next = NULL;
        if (s->tail)
                s->tail->next = o;
        else
                s->head = o;
        s->tail = o;
        pthread_cond_broadcast(&changed);
        return CUDA_SUCCESS;
}

static op *new_op(op_kind kind)
{
        op *o = calloc(1, sizeof(*o));
        if (o)
                o->kind = kind;
        return o;
}

/* ---- the entry points ------------------------------------------------- */

static CUresult d_cuInit(unsigned flags)
{
        if (flags)
                return CUDA_ERROR_INVALID_VALUE;
        pthread_mutex_lock(&big);
        if (!initialised) {
                memory_total = env_u64("CUBE_CUDA_DOUBLE_MEMORY", 2ull << 30);
                fault_launch = env_u64("CUBE_CUDA_DOUBLE_FAULT_LAUNCH", 0);
                hang_launch = env_u64("CUBE_CUDA_DOUBLE_HANG_LAUNCH", 0);
                fail_alloc = env_u64("CUBE_CUDA_DOUBLE_FAIL_ALLOC", 0);
                fail_event = env_u64("CUBE_CUDA_DOUBLE_FAIL_EVENT", 0);
                fail_register = env_u64("CUBE_CUDA_DOUBLE_FAIL_REGISTER", 0) != 0;
                launch_us = env_u64("CUBE_CUDA_DOUBLE_LAUNCH_US", 20);
                record_us = env_u64("CUBE_CUDA_DOUBLE_RECORD_US", 0);
                initialised = true;
        }
        pthread_mutex_unlock(&big);
        return CUDA_SUCCESS;
}

static CUresult d_cuDriverGetVersion(int *v)
{
        if (!v)
                return CUDA_ERROR_INVALID_VALUE;
        *v = (int) env_u64("CUBE_CUDA_DOUBLE_VERSION", CUDA_VERSION);
        return CUDA_SUCCESS;
}

static CUresult d_cuGetErrorName(CUresult r, const char **ret)
{
        static __thread char name[32];

        snprintf(name, sizeof(name), "CUDA_ERROR_%d", (int) r);
        *ret = r == CUDA_SUCCESS ? "CUDA_SUCCESS" : name;
        return CUDA_SUCCESS;
}

static CUresult d_cuDeviceGetCount(int *n)
{
        if (!initialised)
                return CUDA_ERROR_NOT_INITIALIZED;
        *n = 1;
        return CUDA_SUCCESS;
}

static CUresult d_cuDeviceGet(CUdevice *dev, int ordinal)
{
        if (!initialised)
                return CUDA_ERROR_NOT_INITIALIZED;
        if (ordinal != 0)
                return CUDA_ERROR_INVALID_DEVICE;
        *dev = 0;
        return CUDA_SUCCESS;
}

static CUresult d_cuDeviceGetName(char *name, int len, CUdevice dev)
{
        if (!initialised)
                return CUDA_ERROR_NOT_INITIALIZED;
        if (dev != 0 || len <= 0)
                return CUDA_ERROR_INVALID_VALUE;
        snprintf(name, (size_t) len, "%s", DEVICE_NAME);
        return CUDA_SUCCESS;
}

static CUresult d_cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice dev)
{
        if (!initialised)
                return CUDA_ERROR_NOT_INITIALIZED;
        if (dev != 0)
                return CUDA_ERROR_INVALID_DEVICE;
        switch (a) {
        case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
        case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
        case CU_DEVICE_ATTRIBUTE_WARP_SIZE: *v = 32; break;
        case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: *v = 48 << 10; break;
        case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: *v = 0x7fffffff; break;
        case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
        case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: *v = 65535; break;
        case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
        case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
        case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: *v = 1024; break;
        case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: *v = 64; break;
        case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *v = 4; break;
        case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: *v = 2048; break;
        default: *v = 0; break;
        }
        return CUDA_SUCCESS;
}

static CUresult d_cuDeviceTotalMem(size_t *bytes, CUdevice dev)
{
        if (!initialised)
                return CUDA_ERROR_NOT_INITIALIZED;
        if (dev != 0)
                return CUDA_ERROR_INVALID_DEVICE;
        *bytes = memory_total;
        return CUDA_SUCCESS;
}

static CUresult d_cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice dev)
{
        if (!initialised)
                return CUDA_ERROR_NOT_INITIALIZED;
        if (dev != 0)
                return CUDA_ERROR_INVALID_DEVICE;
        pthread_mutex_lock(&big);
        if (process_fault)
                LEAVE(process_fault);
        primary.retained++;
        *ctx = &primary;
        pthread_mutex_unlock(&big);
        return CUDA_SUCCESS;
}

/* Ends everything of the context: what runs stops, memory comes back, the
 * sticky fault is gone. Called with big held. */
static void reset_locked(void)
{
        primary.generation++;
        primary.sticky = CUDA_SUCCESS;
        for (alloc *a = allocs, *next; a; a = next) {
                next = a->next;
                unmap_alloc(a);
        }
        for (region *g = regions, *next; g; g = next) {
                next = g->next;
                free(g);
        }
        regions = NULL;
        pthread_cond_broadcast(&changed);
}

static CUresult d_cuDevicePrimaryCtxRelease(CUdevice dev)
{
        if (dev != 0)
                return CUDA_ERROR_INVALID_DEVICE;
        pthread_mutex_lock(&big);
        if (!primary.retained)
                LEAVE(CUDA_ERROR_INVALID_CONTEXT);
        if (--primary.retained == 0)
                reset_locked();
        LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuDevicePrimaryCtxReset(CUdevice dev)
{
        if (dev != 0)
                return CUDA_ERROR_INVALID_DEVICE;
        pthread_mutex_lock(&big);
        reset_locked();
        LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned flags)
{
        (void) flags;
        return dev == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

static CUresult d_cuCtxSetCurrent(CUcontext ctx)
{
        if (!initialised)
                return CUDA_ERROR_NOT_INITIALIZED;
        if (ctx && ctx != &primary)
                return CUDA_ERROR_INVALID_CONTEXT;
        current = ctx;
        return CUDA_SUCCESS;
}

static CUresult d_cuMemGetInfo(size_t *free_bytes, size_t *total)
{
        ENTER();
        *free_bytes = memory_total - memory_used;
        *total = memory_total;
        LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuStreamCreate(CUstream *ret, unsigned flags)
{
        (void) flags;
        ENTER();
        CUstream s = calloc(1, sizeof(*s));
        if (!s)
                LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
        s->generation = primary.generation;
        if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
                free(s);
                LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
        }
        pthread_detach(s->thread);
        *ret = s;
        LEAVE(CUDA_SUCCESS);
}

/* Like the driver's: returns at once; the work queued still runs. */
static CUresult d_cuStreamDestroy(CUstream s)
{
        pthread_mutex_lock(&big);
        if (!s || s->destroyed)
                LEAVE(CUDA_ERROR_INVALID_HANDLE);
        s->destroyed = true;
        pthread_cond_broadcast(&changed);
        LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuStreamSynchronize(CUstream s)
{
        ENTER();
        if (!s || s->destroyed)
                LEAVE(CUDA_ERROR_INVALID_HANDLE);
        while (s->head && !primary.sticky && s->generation == primary.generation)
                pthread_cond_wait(&changed, &big);
        LEAVE(primary.sticky);
}

static CUresult d_cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags)
{
        (void) flags;
        ENTER();
        if (!e || e->generation != primary.generation)
                LEAVE(CUDA_ERROR_INVALID_HANDLE);
        if (e->completed >= e->recorded)
                LEAVE(CUDA_SUCCESS);
        op *o = new_op(OP_WAIT);
        if (!o)
                LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
        o->event = e;
        o->seq = e->recorded;
        e->refs++;
        LEAVE(push(s, o));
}

static CUresult d_cuEventCreate(CUevent *ret, unsigned flags)
{
        ENTER();
        if (fail_event && ++events_made >= fail_event)
                LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
        CUevent e = calloc(1, sizeof(*e));
        if (!e)
                LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
        e->generation = primary.generation;
        e->refs = 1;
        e->timing = !(flags & CU_EVENT_DISABLE_TIMING);
        *ret = e;
        LEAVE(CUDA_SUCCESS);
}

/* Like the driver's: the event may still be queued on a stream, and is
 * freed once nothing refers to it. */
static CUresult d_cuEventDestroy(CUevent e)
{
        ENTER_DESTROY();
        if (!e)
                LEAVE(CUDA_ERROR_INVALID_HANDLE);
        e->generation = (unsigned) -1;
        event_unref(e);
        LEAVE(r_);
}

static CUresult d_cuEventRecord(CUevent e, CUstream s)
{
        ENTER();
        if (!e || e->generation != primary.generation)
                LEAVE(CUDA_ERROR_INVALID_HANDLE);
        op *o = new_op(OP_RECORD);
        if (!o)
                LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
        o->event = e;
        o->seq = ++e->recorded;
        e->refs++;
        CUresult r = push(s, o);
        pthread_mutex_unlock(&big);
        if (record_us)
                usleep((useconds_t) record_us);
        return r;
}

static CUresult d_cuEventQuery(CUevent e)
{
        ENTER();
        if (!e || e->generation != primary.generation)
                LEAVE(CUDA_ERROR_INVALID_HANDLE);
        LEAVE(e->completed >= e->recorded ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY);
}

static CUresult d_cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
        ENTER();
        if (!a || !b || a->generation != primary.generation ||
            b->generation != primary.generation)
                LEAVE(CUDA_ERROR_INVALID_HANDLE);
        if (!a->timing || !b->timing || !a->recorded || !b->recorded)
                LEAVE(CUDA_ERROR_INVALID_HANDLE);
        if (a->completed < a->recorded || b->completed < b->recorded)
                LEAVE(CUDA_ERROR_NOT_READY);
        *ms = (float) ((double) ((int64_t) (b->ns - a->ns)) / 1e6);
        LEAVE(CUDA_SUCCESS);
}

static struct CUmemPoolHandle_st the_pool;

static CUresult d_cuMemPoolCreate(CUmemoryPool *ret, const CUmemPoolProps *props)
{
        ENTER();
        if (!props || props->location.id != 0)
                LEAVE(CUDA_ERROR_INVALID_VALUE);
        *ret = &the_pool;
        LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuMemPoolDestroy(CUmemoryPool p)
{
        ENTER();
        LEAVE(p == &the_pool ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

static CUresult d_cuMemPoolSetAttribute(CUmemoryPool p, CUmemPool_attribute a, void *v)
{
        (void) a;
        (void) v;
        ENTER();
        LEAVE(p == &the_pool ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

/* The memory is there at once (a stream-ordered allocation may be): what
 * the order changes is only when a free gives it back. */
static CUresult d_cuMemAllocFromPoolAsync(CUdeviceptr *ret, size_t size, CUmemoryPool p,
                                          CUstream s)
{
        ENTER();
        if (p != &the_pool || !s || !size)
                LEAVE(CUDA_ERROR_INVALID_VALUE);
        if (++device_allocs == fail_alloc || size > memory_total - memory_used)
                LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
        void *m = map_guarded(size, true);
        if (!m)
                LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
        memory_used += size;
        *ret = (CUdeviceptr) (uintptr_t) m;
        LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuMemFreeAsync(CUdeviceptr ptr, CUstream s)
{
        ENTER();
        alloc *a = find_alloc((void *) (uintptr_t) ptr);
        if (!a || !a->device)
                LEAVE(CUDA_ERROR_INVALID_VALUE);
        op *o = new_op(OP_FREE);
        if (!o)
                LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
        o->ptr = ptr;
        LEAVE(push(s, o));
}

/* Device memory [ptr, ptr + len) lies inside one live allocation. */
static bool device_range(CUdeviceptr ptr, size_t len)
{
        alloc *a = find_alloc((void *) (uintptr_t) ptr);
        size_t pg = page_size();

        return a && a->device && (char *) (uintptr_t) ptr >= a->base + pg &&
               len <= (size_t) (a->base + a->map_len - pg - (char *) (uintptr_t) ptr);
}

static CUresult d_cuMemsetD8Async(CUdeviceptr ptr, unsigned char v, size_t n, CUstream s)
{
        ENTER();
        if (!device_range(ptr, n))
                LEAVE(CUDA_ERROR_INVALID_VALUE);
        op *o = new_op(OP_MEMSET);
        if (!o)
                LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
        o->dst = (void *) (uintptr_t) ptr;
        o->byte = v;
        o->len = n;
        LEAVE(push(s, o));
}

static CUresult d_cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
        ENTER();
        if (!device_range(dst, n) || !src)
                LEAVE(CUDA_ERROR_INVALID_VALUE);
        op *o = new_op(OP_COPY);
        if (!o)
                LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
        o->dst = (void *) (uintptr_t) dst;
        o->src = src;
        o->len = n;
        LEAVE(push(s, o));
}

static CUresult d_cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
        ENTER();
        if (!device_range(src, n) || !dst)
                LEAVE(CUDA_ERROR_INVALID_VALUE);
        op *o = new_op(OP_COPY);
        if (!o)
                LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
        o->dst = dst;
        o->src = (const void *) (uintptr_t) src;
        o->len = n;
        LEAVE(push(s, o));
}

static CUresult d_cuMemcpy2DAsync(const CUDA_MEMCPY2D *m, CUstream s)
{
        ENTER();
        if (!m || !m->Height || m->srcXInBytes || m->srcY || m->dstXInBytes || m->dstY)
                LEAVE(CUDA_ERROR_INVALID_VALUE);
        size_t span_src = (m->Height - 1) * m->srcPitch + m->WidthInBytes;
        size_t span_dst = (m->Height - 1) * m->dstPitch + m->WidthInBytes;
        if (m->srcPitch < m->WidthInBytes || m->dstPitch < m->WidthInBytes ||
            (m->srcMemoryType == CU_MEMORYTYPE_DEVICE && !device_range(m->srcDevice, span_src)) ||
            (m->dstMemoryType == CU_MEMORYTYPE_DEVICE && !device_range(m->dstDevice, span_dst)))
                LEAVE(CUDA_ERROR_INVALID_VALUE);
        op *o = new_op(OP_COPY2D);
        if (!o)
                LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
        o->m = *m;
        LEAVE(push(s, o));
}

static CUresult d_cuMemHostRegister(void *p, size_t len, unsigned flags)
{
        (void) flags;
        ENTER();
        if (!p || !len)
                LEAVE(CUDA_ERROR_INVALID_VALUE);
        if (fail_register)
                LEAVE(CUDA_ERROR_NOT_PERMITTED);
        for (region *g = regions; g; g = g->next)
                if ((char *) p < g->addr + g->len && g->addr < (char *) p + len)
                        LEAVE(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
        region *g = calloc(1, sizeof(*g));
        if (!g)
                LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
        g->addr = p;
        g->len = len;
        g->next = regions;
        regions = g;
        LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuMemHostUnregister(void *p)
{
        ENTER_DESTROY();
        for (region **pp = &regions; *pp; pp = &(*pp)->next)
                if ((*pp)->addr == p) {
                        region *g = *pp;
                        *pp = g->next;
                        free(g);
                        LEAVE(r_);
                }
        LEAVE(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
}

static CUresult d_cuMemAllocHost(void **ret, size_t size)
{
        ENTER();
        void *p = size ? map_guarded(size, false) : NULL;
        if (!p)
                LEAVE(size ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE);
        *ret = p;
        LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuMemFreeHost(void *p)
{
        ENTER_DESTROY();
        alloc *a = find_alloc(p);
        if (!a || a->device)
                LEAVE(CUDA_ERROR_INVALID_VALUE);
        unmap_alloc(a);
        LEAVE(r_);
}

/* ---- modules ---------------------------------------------------------- */

enum { EIFMT_SVAL = 4, EIATTR_KPARAM_INFO = 0x17, EIATTR_PARAM_CBANK = 0x0a };

static bool within(size_t size, uint64_t off, uint64_t len)
{
        return off <= size && len <= size - off;
}

/* A function's parameter table from its .nv.info.NAME section. */
static bool read_params(const uint8_t *p, uint64_t len, struct CUfunc_st *f)
{
        for (uint64_t i = 0; i + 4 <= len;) {
                uint8_t fmt = p[i], attr = p[i + 1];
                uint16_t v;
                memcpy(&v, p + i + 2, 2);
                if (fmt != EIFMT_SVAL) {
                        i += 4;
                        continue;
                }
                if (i + 4 + v > len)
                        return false;
                if (attr == EIATTR_KPARAM_INFO && v >= 12) {
                        uint16_t ordinal, offset;
                        uint32_t bits;
                        memcpy(&ordinal, p + i + 8, 2);
                        memcpy(&offset, p + i + 10, 2);
                        memcpy(&bits, p + i + 12, 4);
                        if (ordinal >= MAX_PARAMS)
                                return false;
                        f->params[ordinal].offset = offset;
                        f->params[ordinal].size = (uint16_t) ((bits >> 18) & 0x3fff);
                        if (ordinal + 1u > f->n_params)
                                f->n_params = ordinal + 1u;
                } else if (attr == EIATTR_PARAM_CBANK && v >= 8) {
                        uint32_t b;
                        memcpy(&b, p + i + 8, 4);
                        f->param_bytes = b >> 16;
                }
                i += 4 + v;
        }
        for (unsigned k = 0; k < f->n_params; k++)
                if (!f->params[k].size)
                        return false;           /* a hole in the table */
        return true;
}

/* A CUBIN: an ELF whose .nv.info.NAME sections are its kernels. Anything
 * else (PTX, a fatbin, garbage) is refused as the driver refuses an image
 * it cannot load. */
static CUresult parse_module(const void *image, struct CUmod_st *m)
{
        const uint8_t *img = image;
        const Elf64_Ehdr *eh = image;
        size_t size;

        if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
            eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shstrndx >= eh->e_shnum)
                return CUDA_ERROR_INVALID_IMAGE;
        /* The ELF's own extent: the section table is its end. */
        size = eh->e_shoff + (size_t) eh->e_shnum * sizeof(Elf64_Shdr);
        const Elf64_Shdr *sh = (const Elf64_Shdr *) (img + eh->e_shoff);
        const Elf64_Shdr *names = &sh[eh->e_shstrndx];
        if (!within(size, names->sh_offset, names->sh_size))
                return CUDA_ERROR_INVALID_IMAGE;
        m->funcs = calloc(eh->e_shnum, sizeof(*m->funcs));
        if (!m->funcs)
                return CUDA_ERROR_OUT_OF_MEMORY;
        for (unsigned i = 0; i < eh->e_shnum; i++) {
                if (sh[i].sh_name >= names->sh_size || sh[i].sh_type == SHT_NOBITS ||
                    !within(size, sh[i].sh_offset, sh[i].sh_size))
                        continue;
                const char *name = (const char *) img + names->sh_offset + sh[i].sh_name;
                if (strncmp(name, ".nv.info.", 9) != 0 || !memchr(name, 0,
                                                                   names->sh_size - sh[i].sh_name))
                        continue;
                struct CUfunc_st *f = &m->funcs[m->n_funcs];
                snprintf(f->name, sizeof(f->name), "%s", name + 9);
                if (!read_params(img + sh[i].sh_offset, sh[i].sh_size, f))
                        return CUDA_ERROR_INVALID_IMAGE;
                m->n_funcs++;
        }
        return m->n_funcs ? CUDA_SUCCESS : CUDA_ERROR_INVALID_IMAGE;
}

static CUresult d_cuModuleLoadData(CUmodule *ret, const void *image)
{
        ENTER();
        struct CUmod_st *m = calloc(1, sizeof(*m));
        CUresult r;
        if (!m || !image)
                LEAVE(CUDA_ERROR_INVALID_VALUE);
        if ((r = parse_module(image, m)) != CUDA_SUCCESS) {
                free(m->funcs);
                free(m);
                LEAVE(r);
        }
        m->generation = primary.generation;
        m->next = modules;
        if (modules)
                modules->prev = m;
        modules = m;
        *ret = m;
        LEAVE(CUDA_SUCCESS);
}

static CUresult d_cuModuleUnload(CUmodule m)
{
        ENTER_DESTROY();
        if (!m)
                LEAVE(CUDA_ERROR_INVALID_HANDLE);
        if (m->prev)
                m->prev->next = m->next;
        else
                modules = m->next;
        if (m->next)
                m->next->prev = m->prev;
        free(m->funcs);
        free(m);
        LEAVE(r_);
}

static CUresult d_cuModuleGetFunction(CUfunction *ret, CUmodule m, const char *name)
{
        ENTER();
        if (!m || m->generation != primary.generation)
                LEAVE(CUDA_ERROR_INVALID_HANDLE);
        for (unsigned i = 0; i < m->n_funcs; i++)
                if (strcmp(m->funcs[i].name, name) == 0) {
                        *ret = &m->funcs[i];
                        LEAVE(CUDA_SUCCESS);
                }
        LEAVE(CUDA_ERROR_NOT_FOUND);
}

static CUresult d_cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f)
{
        ENTER();
        if (!f)
                LEAVE(CUDA_ERROR_INVALID_HANDLE);
        switch (a) {
        case CU_FUNC_ATTRIBUTE_NUM_REGS: *v = 32; break;
        case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *v = 1024; break;
        default: *v = 0; break;
        }
        LEAVE(CUDA_SUCCESS);
}

/* Checks the launch as the driver does (dimensions, every parameter the
 * CUBIN's table names there to read) and queues it. */
static CUresult d_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                 unsigned bx, unsigned by, unsigned bz, unsigned shared,
                                 CUstream s, void **params, void **extra)
{
        ENTER();
        if (!f)
                LEAVE(CUDA_ERROR_INVALID_HANDLE);
        if (!gx || !gy || !gz || !bx || !by || !bz || gy > 65535 || gz > 65535 ||
            bx > 1024 || by > 1024 || bz > 64 || (uint64_t) bx * by * bz > 1024 ||
            shared > (48u << 10))
                LEAVE(CUDA_ERROR_INVALID_VALUE);
        if (extra || (f->n_params && !params))
                LEAVE(CUDA_ERROR_INVALID_VALUE);
        volatile uint8_t sink = 0;
        for (unsigned i = 0; i < f->n_params; i++) {
                const uint8_t *p = params[i];
                if (!p)
                        LEAVE(CUDA_ERROR_INVALID_VALUE);
                for (unsigned b = 0; b < f->params[i].size; b++)
                        sink ^= p[b];           /* the driver reads every byte */
        }
        (void) sink;
        op *o = new_op(OP_LAUNCH);
        if (!o)
                LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
        launches++;
        o->fault = launches == fault_launch;
        o->hang = launches == hang_launch;
        LEAVE(push(s, o));
}

static CUresult d_cuLaunchHostFunc(CUstream s, CUhostFn fn, void *arg)
{
        ENTER();
        if (!fn)
                LEAVE(CUDA_ERROR_INVALID_VALUE);
        op *o = new_op(OP_HOST_FN);
        if (!o)
                LEAVE(CUDA_ERROR_OUT_OF_MEMORY);
        o->fn = fn;
        o->arg = arg;
        LEAVE(push(s, o));
}

/* ---- tensor maps ------------------------------------------------------ */

/* Bytes per element of each CUtensorMapDataType. */
static const unsigned tm_bytes[] = { 1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4 };

/* The rules cuTensorMapEncodeTiled and cuTensorMapEncodeIm2col document,
 * shared by both: a map the real driver refuses is refused here. */
static CUresult check_tensor_map(CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank,
                                 void *address, const cuuint64_t *dim,
                                 const cuuint64_t *strides, const cuuint32_t *es,
                                 CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                                 CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill fill)
{
        unsigned align = il == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16;

        if (!initialised)
                return CUDA_ERROR_NOT_INITIALIZED;
        if (!map || (uintptr_t) map % 64 || !address || !dim || !es ||
            (unsigned) type >= sizeof(tm_bytes) / sizeof(tm_bytes[0]) || rank < 1 || rank > 5 ||
            (il != CU_TENSOR_MAP_INTERLEAVE_NONE && rank < 3) || (uintptr_t) address % align ||
            (unsigned) il > CU_TENSOR_MAP_INTERLEAVE_32B ||
            (unsigned) sw > CU_TENSOR_MAP_SWIZZLE_128B ||
            (unsigned) l2 > CU_TENSOR_MAP_L2_PROMOTION_L2_256B ||
            (unsigned) fill > CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA ||
            (il == CU_TENSOR_MAP_INTERLEAVE_32B && sw != CU_TENSOR_MAP_SWIZZLE_32B))
                return CUDA_ERROR_INVALID_VALUE;
        if (fill != CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE &&
            (type < CU_TENSOR_MAP_DATA_TYPE_FLOAT16 || type == CU_TENSOR_MAP_DATA_TYPE_INT32 ||
             type == CU_TENSOR_MAP_DATA_TYPE_UINT32))
                return CUDA_ERROR_INVALID_VALUE;
        for (cuuint32_t i = 0; i < rank; i++) {
                if (dim[i] == 0 || dim[i] > (1ull << 32) || es[i] == 0 || es[i] > 8)
                        return CUDA_ERROR_INVALID_VALUE;
                if (i > 0 && (!strides || strides[i - 1] % align ||
                              strides[i - 1] >= (1ull << 40)))
                        return CUDA_ERROR_INVALID_VALUE;
        }
        memset(map, 0, sizeof(*map));
        memcpy(map, &address, sizeof(address));
        return CUDA_SUCCESS;
}

static CUresult d_cuTensorMapEncodeTiled(CUtensorMap *map, CUtensorMapDataType type,
                                         cuuint32_t rank, void *address, const cuuint64_t *dim,
                                         const cuuint64_t *strides, const cuuint32_t *box,
                                         const cuuint32_t *es, CUtensorMapInterleave il,
                                         CUtensorMapSwizzle sw, CUtensorMapL2promotion l2,
                                         CUtensorMapFloatOOBfill fill)
{
        if (!box || (unsigned) type >= sizeof(tm_bytes) / sizeof(tm_bytes[0]) || rank > 5)
                return CUDA_ERROR_INVALID_VALUE;
        for (cuuint32_t i = 0; i < rank; i++)
                if (box[i] == 0 || box[i] > 256)
                        return CUDA_ERROR_INVALID_VALUE;
        if (rank && il == CU_TENSOR_MAP_INTERLEAVE_NONE && box[0] * tm_bytes[type] % 16)
                return CUDA_ERROR_INVALID_VALUE;
        if (rank && il == CU_TENSOR_MAP_INTERLEAVE_NONE && sw != CU_TENSOR_MAP_SWIZZLE_NONE &&
            box[0] * tm_bytes[type] > 16u << sw)
                return CUDA_ERROR_INVALID_VALUE;
        return check_tensor_map(map, type, rank, address, dim, strides, es, il, sw, l2, fill);
}

static CUresult d_cuTensorMapEncodeIm2col(CUtensorMap *map, CUtensorMapDataType type,
                                          cuuint32_t rank, void *address, const cuuint64_t *dim,
                                          const cuuint64_t *strides, const int *lower,
                                          const int *upper, cuuint32_t channels,
                                          cuuint32_t pixels, const cuuint32_t *es,
                                          CUtensorMapInterleave il, CUtensorMapSwizzle sw,
                                          CUtensorMapL2promotion l2,
                                          CUtensorMapFloatOOBfill fill)
{
        if (rank < 3 || rank > 5 || !lower || !upper || channels == 0 || channels > 256 ||
            pixels == 0 || pixels > 1024)
                return CUDA_ERROR_INVALID_VALUE;
        int range = rank == 3 ? 1 << 15 : rank == 4 ? 1 << 7 : 1 << 4;
        for (cuuint32_t i = 0; i + 2 < rank; i++)
                if (lower[i] < -range || lower[i] >= range || upper[i] < -range ||
                    upper[i] >= range)
                        return CUDA_ERROR_INVALID_VALUE;
        return check_tensor_map(map, type, rank, address, dim, strides, es, il, sw, l2, fill);
}

/* ---- cuGetProcAddress ------------------------------------------------- */

#define ENTRY(name) { #name, (void *) d_##name }
static const struct { const char *name; void *fn; } entries[] = {
        ENTRY(cuInit), ENTRY(cuDriverGetVersion), ENTRY(cuGetErrorName),
        ENTRY(cuDeviceGetCount), ENTRY(cuDeviceGet), ENTRY(cuDeviceGetName),
        ENTRY(cuDeviceGetAttribute), ENTRY(cuDeviceTotalMem), ENTRY(cuDevicePrimaryCtxRetain),
        ENTRY(cuDevicePrimaryCtxRelease), ENTRY(cuDevicePrimaryCtxReset),
        ENTRY(cuDevicePrimaryCtxSetFlags), ENTRY(cuCtxSetCurrent), ENTRY(cuMemGetInfo),
        ENTRY(cuStreamCreate), ENTRY(cuStreamDestroy), ENTRY(cuStreamSynchronize),
        ENTRY(cuStreamWaitEvent), ENTRY(cuEventCreate), ENTRY(cuEventDestroy),
        ENTRY(cuEventRecord), ENTRY(cuEventQuery), ENTRY(cuEventElapsedTime),
        ENTRY(cuMemPoolCreate), ENTRY(cuMemPoolDestroy), ENTRY(cuMemPoolSetAttribute),
        ENTRY(cuMemAllocFromPoolAsync), ENTRY(cuMemFreeAsync), ENTRY(cuMemsetD8Async),
        ENTRY(cuMemcpyHtoDAsync), ENTRY(cuMemcpyDtoHAsync), ENTRY(cuMemcpy2DAsync),
        ENTRY(cuMemHostRegister), ENTRY(cuMemHostUnregister), ENTRY(cuMemAllocHost),
        ENTRY(cuMemFreeHost), ENTRY(cuModuleLoadData), ENTRY(cuModuleUnload),
        ENTRY(cuModuleGetFunction), ENTRY(cuFuncGetAttribute), ENTRY(cuLaunchKernel),
        ENTRY(cuLaunchHostFunc), ENTRY(cuTensorMapEncodeTiled), ENTRY(cuTensorMapEncodeIm2col),
};

/* The type checks: each entry has the type cuda.h gives its name. */
#define SAME(name) _Static_assert(__builtin_types_compatible_p(__typeof__(&d_##name), \
                                                               __typeof__(&name)), #name);
SAME(cuInit) SAME(cuMemcpyHtoDAsync) SAME(cuMemcpy2DAsync) SAME(cuLaunchKernel)
SAME(cuEventElapsedTime) SAME(cuMemGetInfo) SAME(cuDeviceTotalMem)
SAME(cuTensorMapEncodeTiled) SAME(cuTensorMapEncodeIm2col)

/* Says to a test that this libcuda.so.1 is the test double. */
EXPORT const char cube_cuda_test_double[] = "cube CUDA driver test double";

EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
                                    cuuint64_t flags, CUdriverProcAddressQueryResult *status);

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *status)
{
        (void) flags;
        if (!symbol || !pfn)
                return CUDA_ERROR_INVALID_VALUE;
        *pfn = NULL;
        if (version > (int) env_u64("CUBE_CUDA_DOUBLE_VERSION", CUDA_VERSION) &&
            strcmp(symbol, "cuDriverGetVersion") != 0) {
                if (status)
                        *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
                return CUDA_ERROR_NOT_FOUND;
        }
        for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++)
                if (strcmp(entries[i].name, symbol) == 0) {
                        *pfn = entries[i].fn;
                        if (status)
                                *status = CU_GET_PROC_ADDRESS_SUCCESS;
                        return CUDA_SUCCESS;
                }
        if (status)
                *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        return CUDA_ERROR_NOT_FOUND;
}

/*
 * cpu.c - the host backend: device memory is host memory, and one worker
 * thread plays the device's copy engine.
 *
 * It exists so that the whole system runs, and is tested, on a machine with
 * no GPU. It keeps the asynchronous contract of a real device: work is queued
 * and completes later, off the caller's thread, in stream order, and work on
 * different streams runs at the same time, on as many workers as there are
 * cores. Kernels run on the kernel pool, one launch at a time.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cpu.h"
#include "errors.h"

#define CPU_DEFAULT_MEMORY (4ull << 30)
#define CPU_MAX_UNITS 1024
#define CPU_ALIGNMENT 64
#define CPU_WORKER_BATCH 16
/* Allocations at least this large are mapped straight from the kernel. */
#define CPU_MMAP_MIN (128 * 1024)

/* A stream: its work in order. A stream is on the ready list while it has
 * work and no worker runs it, so one stream's work never overlaps itself. */
struct cube__dstream {
        cube__work *head, *tail;
        bool busy;
        bool ready;
        bool closed;    /* by the daemon, while a worker still held it */
        cube__dstream *next_ready;
};

struct cube__device {
        cube__device_config config;
        uint64_t memory_limit;
        uint64_t in_use;                /* loop thread only */
        cube__cpu_pool *pool;           /* runs kernels, one launch at a time */
        pthread_mutex_t launch_lock;

        pthread_t *workers;
        unsigned n_workers;
        pthread_mutex_t lock;
        pthread_cond_t wake;
        cube__dstream *ready_head, *ready_tail; /* under lock */
        bool stopping;
};

static void make_ready(cube__device *d, cube__dstream *s)
{
        if (s->ready || s->busy || !s->head)
                return;
        s->ready = true;
        s->next_ready = NULL;
        if (d->ready_tail)
                d->ready_tail->next_ready = s;
        else
                d->ready_head = s;
        d->ready_tail = s;
        pthread_cond_signal(&d->wake);
}

/* Device timing (driver.h): the clock the core measures windows on. */
static uint64_t device_now_ns(void)
{
        struct timespec t;

        clock_gettime(CLOCK_MONOTONIC, &t);
        return (uint64_t) t.tv_sec * 1000000000u + (uint64_t) t.tv_nsec;
}

static void perform(cube__device *d, cube__work *w)
{
        switch (w->op) {
        case CUBE__WORK_COPY_TO_DEVICE:
                for (uint64_t r = 0; r < (w->rows > 1 ? w->rows : 1); r++)
                        memcpy((char *) w->storage->bytes + w->offset + r * w->pitch,
                               (const char *) w->host + r * w->len, w->len);
                break;
        case CUBE__WORK_COPY_TO_HOST:
                for (uint64_t r = 0; r < (w->rows > 1 ? w->rows : 1); r++)
                        memcpy((char *) w->host + r * w->len,
                               (const char *) w->storage->bytes + w->offset + r * w->pitch, w->len);
                break;
        case CUBE__WORK_FENCE:
                break;
        case CUBE__WORK_LAUNCH:
                /* The pool runs one launch at a time, on every core. */
                pthread_mutex_lock(&d->launch_lock);
                w->start_ns = device_now_ns();
                w->error = cube__cpu_run(d->pool, w->launch);
                w->end_ns = device_now_ns();
                pthread_mutex_unlock(&d->launch_lock);
                break;
        }
}

/* A worker: takes a ready stream and up to CPU_WORKER_BATCH pieces of work
 * queued on it, performs them in order, hands them back with one completion,
 * and puts the stream at the back of the ready list if more is queued.
 * Taking a batch is what makes a burst of small launches cost one wake-up,
 * not one each; bounding it keeps another stream from waiting behind a
 * whole queue. */
static void *cpu_worker(void *arg)
{
        cube__device *d = arg;

        pthread_mutex_lock(&d->lock);
        for (;;) {
                while (!d->ready_head && !d->stopping)
                        pthread_cond_wait(&d->wake, &d->lock);
                if (!d->ready_head)
                        break;
                cube__dstream *s = d->ready_head;
                d->ready_head = s->next_ready;
                if (!d->ready_head)
                        d->ready_tail = NULL;
                s->ready = false;
                s->busy = true;
                cube__work *batch = s->head, *last = batch;
                for (int n = 1; n < CPU_WORKER_BATCH && last->next; n++)
                        last = last->next;
                s->head = last->next;
                if (!s->head)
                        s->tail = NULL;
                last->next = NULL;
                pthread_mutex_unlock(&d->lock);

                for (cube__work *w = batch; w; w = w->next)
                        perform(d, w);
                d->config.complete(d->config.complete_ctx, batch);

                /* The completion may already have let the daemon close the
                 * stream: then it is ours to free. */
                pthread_mutex_lock(&d->lock);
                s->busy = false;
                if (s->closed)
                        free(s);
                else
                        make_ready(d, s);
        }
        pthread_mutex_unlock(&d->lock);
        cube__cpu_pool_leave(d->pool);
        return NULL;
}

static int cpu_open(const cube__device_config *config, cube__device **ret_device, const char **ret_why)
{
        cube__device *d;

        if (config->index != 0) {
                *ret_why = "the cpu backend has one device, cpu0";
                return -ENODEV;
        }
        d = calloc(1, sizeof(*d));
        if (!d)
                return -ENOMEM;
        d->config = *config;
        d->memory_limit = config->memory_limit ? config->memory_limit : CPU_DEFAULT_MEMORY;
        pthread_mutex_init(&d->lock, NULL);
        pthread_mutex_init(&d->launch_lock, NULL);
        pthread_cond_init(&d->wake, NULL);
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        unsigned n = cores > 1 ? (unsigned) cores : 2;
        d->pool = cube__cpu_pool_new(cores > 1 ? (unsigned) cores - 1 : 0, CPU_MAX_UNITS);
        d->workers = calloc(n, sizeof(*d->workers));
        for (unsigned i = 0; d->pool && d->workers && i < n; i++) {
                if (pthread_create(&d->workers[i], NULL, cpu_worker, d) != 0)
                        break;
                d->n_workers++;
        }
        if (d->n_workers == 0) {
                *ret_why = "could not start the cpu backend's worker threads";
                cube__cpu_pool_free(d->pool);
                free(d->workers);
                pthread_mutex_destroy(&d->lock);
                pthread_mutex_destroy(&d->launch_lock);
                pthread_cond_destroy(&d->wake);
                free(d);
                return -EAGAIN;
        }
        /* The compiler's identity is part of every kernel's cache key; asking
         * the compiler now keeps that out of the first launch. */
        (void) cube__cpu_target();
        *ret_device = d;
        return 0;
}

static void cpu_close(cube__device *d)
{
        if (!d)
                return;
        pthread_mutex_lock(&d->lock);
        d->stopping = true;
        pthread_cond_broadcast(&d->wake);
        pthread_mutex_unlock(&d->lock);
        for (unsigned i = 0; i < d->n_workers; i++)
                pthread_join(d->workers[i], NULL);
        free(d->workers);
        cube__cpu_pool_free(d->pool);
        pthread_mutex_destroy(&d->lock);
        pthread_mutex_destroy(&d->launch_lock);
        pthread_cond_destroy(&d->wake);
        free(d);
}

static void cpu_properties(cube__device *d, cube_device_properties *ret)
{
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        long l1d = sysconf(_SC_LEVEL1_DCACHE_SIZE);

        *ret = (cube_device_properties) {
                .name = "cpu",
                .memory_bytes = d->memory_limit,
                .max_page_size = d->memory_limit,
                .alignment = CPU_ALIGNMENT,
                .plane_size_min = 1,
                .plane_size_max = 1,
                .max_bindings = 1024,
                .max_shared_memory_size = l1d > 0 ? (uint32_t) l1d : 64 * 1024,
                .max_cube_count = { 65535, 65535, 65535 },
                .max_units_per_cube = CPU_MAX_UNITS,
                .max_cube_dim = { 1024, 1024, 64 },
                .num_streaming_multiprocessors = cores > 0 ? (uint32_t) cores : 1,
                .num_cpu_cores = cores > 0 ? (uint32_t) cores : 1,
        };
}

/* Fresh device memory reads as zeros: memory freed by one session must never
 * show its bytes to another. Large allocations come zeroed from the kernel
 * (and cost nothing until touched); small ones are cleared. */
static void *zeroed_bytes(uint64_t rounded)
{
        void *p;

        if (rounded >= CPU_MMAP_MIN) {
                p = mmap(NULL, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                return p == MAP_FAILED ? NULL : p;
        }
        if (posix_memalign(&p, CPU_ALIGNMENT, rounded) != 0)
                return NULL;
        memset(p, 0, rounded);
        return p;
}

static uint64_t rounded_size(uint64_t size)
{
        return (size + CPU_ALIGNMENT - 1) / CPU_ALIGNMENT * CPU_ALIGNMENT;
}

static cube_error *cpu_alloc(cube__device *d, uint64_t size, cube__storage **ret_storage)
{
        cube__storage *s;
        uint64_t rounded;

        if (size > d->memory_limit)
                return cube__err_io_size(CUBE_IO_BUFFER_TOO_BIG, size);
        rounded = rounded_size(size);
        if (rounded > d->memory_limit - d->in_use)
                return cube__err_io_size(CUBE_IO_OUT_OF_MEMORY, size);
        s = malloc(sizeof(*s));
        if (!s)
                return cube__err_io_size(CUBE_IO_OUT_OF_MEMORY, size);
        s->size = size;
        s->bytes = NULL;
        if (rounded > 0 && !(s->bytes = zeroed_bytes(rounded))) {
                free(s);
                return cube__err_io_size(CUBE_IO_OUT_OF_MEMORY, size);
        }
        d->in_use += rounded;
        *ret_storage = s;
        return NULL;
}

static void cpu_release(cube__device *d, cube__storage *s)
{
        uint64_t rounded;

        if (!s)
                return;
        rounded = rounded_size(s->size);
        d->in_use -= rounded;
        if (rounded >= CPU_MMAP_MIN)
                munmap(s->bytes, rounded);
        else
                free(s->bytes);
        free(s);
}

static void *cpu_host_view(cube__device *d, cube__storage *s)
{
        return s->bytes;
}

static cube_error *cpu_stream_open(cube__device *d, cube__dstream **ret_stream)
{
        cube__dstream *s = calloc(1, sizeof(*s));

        if (!s)
                return cube__err_generic("out of host memory creating a stream");
        *ret_stream = s;
        return NULL;
}

static void cpu_stream_close(cube__device *d, cube__dstream *s)
{
        bool busy;

        pthread_mutex_lock(&d->lock);
        busy = s->busy;
        s->closed = true;
        pthread_mutex_unlock(&d->lock);
        if (!busy)
                free(s);
}

static void cpu_submit(cube__device *d, cube__dstream *s, cube__work *w)
{
        cube__work *last = w;

        while (last->next)
                last = last->next;
        pthread_mutex_lock(&d->lock);
        if (s->tail)
                s->tail->next = w;
        else
                s->head = w;
        s->tail = last;
        make_ready(d, s);
        pthread_mutex_unlock(&d->lock);
}

static const char *cpu_target(cube__device *d)
{
        return cube__cpu_target();
}

static cube_error *cpu_compile(cube__device *d, const cube__kernel_desc *desc, const char *path)
{
        return cube__cpu_compile(desc, path);
}

static cube_error *cpu_load(cube__device *d, const cube__kernel_desc *desc, const char *path,
                            cube__module **ret_module, uint32_t *ret_shared_bytes)
{
        return cube__cpu_load(desc, path, ret_module, ret_shared_bytes);
}

static void cpu_unload(cube__device *d, cube__module *m)
{
        cube__cpu_unload(m);
}

const cube__driver cube__driver_cpu = {
        .name = "cpu",
        .open = cpu_open,
        .close = cpu_close,
        .properties = cpu_properties,
        .alloc = cpu_alloc,
        .release = cpu_release,
        .host_view = cpu_host_view,
        .stream_open = cpu_stream_open,
        .stream_close = cpu_stream_close,
        .submit = cpu_submit,
        .artifact_ext = "so",
        .target = cpu_target,
        .compile = cpu_compile,
        .load = cpu_load,
        .unload = cpu_unload,
};

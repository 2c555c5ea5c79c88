/*
 * device.c - the CUDA backend: one GPU through the driver API.
 *
 * The device is the GPU's primary context (the one NCCL and cudart share).
 * Each cube stream is a non-blocking CUDA stream; allocation and frees run
 * stream-ordered on an internal stream from a memory pool that keeps freed
 * memory cached, so a free never synchronises the device.
 *
 * Threads. The core calls in from its loop thread; no CUDA call that can
 * wait runs there. Submissions, allocations, frees and host registrations
 * become commands for the device's submitter thread, which issues them to
 * CUDA in order (copying through pinned bounce buffers where a host buffer
 * is pageable). Every issued piece of work is followed by an event; the
 * completion thread, woken by a host-function doorbell, hands work back to
 * the core once its event has completed, in stream order. The doorbell
 * rings from each stream's bell stream, behind an event of the work: a
 * host function on the work's own stream would hold every launch queued
 * behind it until the host had run it (about 40 us a batch on an H200).
 *
 * Order. Work of two streams on one allocation is ordered on the device:
 * each allocation has an event recorded after the last work that touched
 * it, and work on another stream waits for it (cuStreamWaitEvent), so the
 * core may submit work behind a predecessor on another stream that has not
 * finished (driver.orders_streams). Reads are ordered like writes: simpler,
 * and only concurrent readers on different streams pay for it.
 *
 * Faults. A sticky CUresult (illegal address, launch failure, ...) kills
 * the context. The first one seen poisons the device: every piece of work
 * in flight completes with a DevicePoison naming the kernels that were in
 * flight, every later one at once; the core's poison policy then closes the
 * device (which resets the primary context) and opens it again, or exits.
 *
 * It is long (about 1,670 lines): the submitter, the completion thread and the
 * driver table share one device lock and the invariants around it.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "errors.h"
#include "frontend.h"
#include "internal.h"

#define CUDA_ALIGNMENT 512
#define BOUNCE_BYTES (8u << 20)
#define BOUNCE_COUNT 8
#define INFO_SLOT 4096
#define INFO_SLOTS 1024
#define EVENT_POOL 1024
/* Device memory left to the context, stacks and the driver. */
#define CUDA_RESERVE (512ull << 20)

typedef struct rec rec;

/* An event recorded after one piece of work, shared by the marks it left
 * on the storages the work touched. */
typedef struct order_event {
        CUevent event;
        unsigned refs;
} order_event;

/* What work on one stream left on a storage: the bytes it may have touched,
 * and an event behind it. Work of another stream on bytes that overlap
 * waits for the event; work on other bytes of the storage (another
 * allocation of a shared page) does not. */
typedef struct mark mark;
struct mark {
        mark *next;
        uint64_t lo, hi;
        cube__dstream *stream;          /* NULL: the alloc stream */
        order_event *after;
};

struct cube__storage {
        CUdeviceptr ptr;
        uint64_t size, rounded;
        mark *marks;                    /* the submitter's alone */
        unsigned n_marks;
        bool failed;                    /* the stream-ordered allocation failed */
};

struct cube__dstream {
        CUstream stream;
        CUstream bell;                  /* the doorbells' host functions, behind stream */
        rec *head, *tail;               /* issued, not complete; under d->lock */
        cube__dstream *next;
};

struct cube__module {
        CUmodule module;
        CUfunction fn;
        cube__cuda_resources res;
        uint32_t n_buffers;
        uint8_t *align;                 /* per buffer: the bytes its elements load at */
        const cube__fe_facts *facts;    /* the kernel's, for reports */
};

/* A piece of issued work the completion thread waits for. */
struct rec {
        rec *next;
        CUevent event;                  /* NULL: complete as soon as it is seen */
        CUevent start;                  /* a launch: recorded before it, for its timing */
        bool event_timed;               /* event came from the timed pool */
        uint64_t running_since;         /* a launch: when start was first seen complete */
        cube__work *work;               /* handed back when this rec completes; NULL for a chunk */
        void *bounce;                   /* a bounce chunk to give back */
        void *copy_to;                  /* a read through the bounce: where its bytes go */
        uint64_t copy_len;
        int info_slot;                  /* -1: none */
        int64_t record_at;              /* a checked launch: its out-of-bounds record's byte
                                         * offset in the info slot, copied back; -1: none */
        const cube__fe_facts *facts;
        const char *kernel;             /* a launch: its entry point, for the poison report */
};

typedef enum cmd_kind { CMD_SUBMIT, CMD_ALLOC, CMD_FREE, CMD_REGISTER, CMD_RELEASE_HOST,
                        CMD_STREAM_CLOSE } cmd_kind;

typedef struct cmd {
        struct cmd *next;
        cmd_kind kind;
        cube__dstream *stream;
        cube__work *work;
        cube__storage *storage;
        void *addr;
        uint64_t len;
} cmd;

typedef struct pinned_range {
        struct pinned_range *next;
        char *addr;
        uint64_t len;
} pinned_range;

struct cube__device {
        cube__device_config config;
        const cube__cuda_api *cu;
        CUdevice dev;
        CUcontext ctx;
        CUmemoryPool pool;
        CUstream alloc_stream;
        cube_device_properties props;
        int arch;                       /* 90 for sm_90 */
        uint64_t resident_units;        /* units the whole device holds at once */
        uint64_t limit, in_use;         /* in_use: loop thread only */
        char target[256];

        pthread_t submitter, completer;
        bool have_submitter, have_completer;
        int doorbell;                   /* eventfd */

        pthread_mutex_t lock;           /* guards what follows */
        pthread_cond_t cmd_wake, bounce_free, slot_free;
        cmd *cmd_head, *cmd_tail;
        bool stopping, done_submitting;
        cube__dstream *streams;
        void *bounce[BOUNCE_COUNT];
        bool bounce_busy[BOUNCE_COUNT];
        bool slot_busy[INFO_SLOTS];
        cube_error *poison;             /* the first sticky fault */

        /* Launch times: events measure against the anchor, an event whose
         * CLOCK_MONOTONIC time is known. Completion thread only. */
        CUstream anchor_stream;
        CUevent anchor;
        uint64_t anchor_ns;

        uint8_t *info_host;             /* pinned, INFO_SLOTS x INFO_SLOT */
        CUdeviceptr info_dev;
        pinned_range *pinned;           /* submitter thread only */

        /* Events kept for reuse, [0] without timing, [1] timed (event_take). */
        pthread_mutex_t events_lock;
        CUevent events[2][EVENT_POOL];
        unsigned n_events[2];
};

/* A launch records up to three events (its start, its end, its order
 * mark) and a copy two; made once and kept, they cost a record each, not a
 * create and a destroy as well. An event may be recorded again once
 * nothing queries it: cuStreamWaitEvent has taken the record it waits for
 * when it returns. */
static bool check(cube__device *d, CUresult r, const char *what);

/* An event from the pool, or a new one; NULL where the driver makes none
 * (a sticky fault it answers with poisons the device). Never called with
 * d->lock held. */
static CUevent event_take(cube__device *d, bool timed)
{
        CUevent ev = NULL;

        pthread_mutex_lock(&d->events_lock);
        if (d->n_events[timed])
                ev = d->events[timed][--d->n_events[timed]];
        pthread_mutex_unlock(&d->events_lock);
        if (!ev && !check(d, d->cu->cuEventCreate(&ev, timed ? CU_EVENT_DEFAULT :
                                                  CU_EVENT_DISABLE_TIMING), "cuEventCreate"))
                ev = NULL;
        return ev;
}

static void event_give(cube__device *d, CUevent ev, bool timed)
{
        if (!ev)
                return;
        pthread_mutex_lock(&d->events_lock);
        if (d->n_events[timed] < EVENT_POOL) {
                d->events[timed][d->n_events[timed]++] = ev;
                ev = NULL;
        }
        pthread_mutex_unlock(&d->events_lock);
        if (ev)
                d->cu->cuEventDestroy(ev);
}

static void ring(cube__device *d)
{
        uint64_t one = 1;
        ssize_t n = write(d->doorbell, &one, sizeof(one));
        (void) n;
}

static void CUDA_CB doorbell_cb(void *arg)
{
        ring(arg);
}

/* ---- poison ---------------------------------------------------------- */

/* The first sticky fault: every rec in flight completes with it, naming the
 * kernels in flight; later work fails at once. why says what happened.
 * Called with d->lock held. */
static void poison_why_locked(cube__device *d, const char *why)
{
        char kernels[1024] = "";
        size_t n = 0;

        if (d->poison)
                return;
        for (cube__dstream *s = d->streams; s; s = s->next)
                for (rec *x = s->head; x; x = x->next)
                        if (x->kernel && n < sizeof(kernels) - 80)
                                n += (size_t) snprintf(kernels + n, sizeof(kernels) - n, "%s%s",
                                                       n ? ", " : "", x->kernel);
        d->poison = cube__err_poison("%s; the CUDA context is lost; kernels in flight: %s", why,
                                     n ? kernels : "none");
        /* Complete now, with the poison. */
        for (cube__dstream *s = d->streams; s; s = s->next)
                for (rec *x = s->head; x; x = x->next) {
                        event_give(d, x->event, x->event_timed);
                        event_give(d, x->start, true);
                        x->event = x->start = NULL;
                }
}

static void poison_locked(cube__device *d, CUresult r, const char *what)
{
        char why[256];

        snprintf(why, sizeof(why), "%s failed: %s (%d)", what, cube__cuda_name(r), (int) r);
        poison_why_locked(d, why);
}

/* d->poison is written by the submitter and the completion thread. */
static bool poisoned(cube__device *d)
{
        pthread_mutex_lock(&d->lock);
        bool p = d->poison != NULL;
        pthread_mutex_unlock(&d->lock);
        return p;
}

static bool check(cube__device *d, CUresult r, const char *what)
{
        if (r == CUDA_SUCCESS)
                return true;
        if (cube__cuda_class(r) == CUBE__CU_POISON) {
                pthread_mutex_lock(&d->lock);
                poison_locked(d, r, what);
                pthread_mutex_unlock(&d->lock);
                ring(d);
        }
        return false;
}

/* ---- pinned staging --------------------------------------------------- */

static void *bounce_take(cube__device *d)
{
        void *p = NULL;

        pthread_mutex_lock(&d->lock);
        while (!p) {
                for (int i = 0; i < BOUNCE_COUNT && !p; i++)
                        if (!d->bounce_busy[i]) {
                                d->bounce_busy[i] = true;
                                p = d->bounce[i];
                        }
                /* Every chunk is in flight: the completion thread gives them
                 * back, and must not sleep through it in its idle poll. */
                if (!p) {
                        ring(d);
                        pthread_cond_wait(&d->bounce_free, &d->lock);
                }
        }
        pthread_mutex_unlock(&d->lock);
        return p;
}

static void bounce_give_locked(cube__device *d, void *p)
{
        for (int i = 0; i < BOUNCE_COUNT; i++)
                if (d->bounce[i] == p)
                        d->bounce_busy[i] = false;
        pthread_cond_signal(&d->bounce_free);
}

static int slot_take(cube__device *d)
{
        int slot = -1;

        pthread_mutex_lock(&d->lock);
        while (slot < 0) {
                for (int i = 0; i < INFO_SLOTS && slot < 0; i++)
                        if (!d->slot_busy[i]) {
                                d->slot_busy[i] = true;
                                slot = i;
                        }
                if (slot < 0) {
                        ring(d);
                        pthread_cond_wait(&d->slot_free, &d->lock);
                }
        }
        pthread_mutex_unlock(&d->lock);
        return slot;
}

static bool is_pinned(cube__device *d, const void *p, uint64_t len)
{
        for (pinned_range *r = d->pinned; r; r = r->next)
                if ((const char *) p >= r->addr && len <= r->len &&
                    (uint64_t) ((const char *) p - r->addr) <= r->len - len)
                        return true;
        return false;
}

/* ---- the submitter ---------------------------------------------------- */

/* Queues a rec after the work just issued on s: an event (timed after a
 * launch), unless the device is poisoned (then it completes at once with the
 * poison). Once pushed, x and its work belong to the completion thread. */
static void push_rec(cube__device *d, cube__dstream *s, rec *x)
{
        bool timed = x->start != NULL;
        CUevent ev = NULL;

        if (!poisoned(d) && (ev = event_take(d, timed)) &&
            !check(d, d->cu->cuEventRecord(ev, s->stream), "cuEventRecord")) {
                event_give(d, ev, timed);
                ev = NULL;
        }
        /* A rec without an event completes as soon as it is seen: without
         * one the work is waited for here, or it would be handed back
         * before the device had done it (and a fault the wait finds
         * poisons the device, which every rec in flight then carries). */
        if (!ev && !poisoned(d))
                check(d, d->cu->cuStreamSynchronize(s->stream), "cuStreamSynchronize");
        x->event = ev;
        x->event_timed = timed;
        pthread_mutex_lock(&d->lock);
        if (d->poison && x->event) {
                event_give(d, x->event, timed);
                x->event = NULL;
        }
        if (!x->event && x->start) {
                event_give(d, x->start, true);
                x->start = NULL;
        }
        x->next = NULL;
        if (s->tail)
                s->tail->next = x;
        else
                s->head = x;
        s->tail = x;
        pthread_mutex_unlock(&d->lock);
}

/* A record is what brings work back to the core; without host memory for
 * one there is no way to keep the asynchronous contract, so cubed stops
 * (as a failed malloc in redis does) and systemd restarts it. */
static rec *new_rec(void)
{
        rec *x = calloc(1, sizeof(*x));

        if (!x) {
                fprintf(stderr, "cubed: out of host memory tracking CUDA work\n");
                abort();
        }
        x->info_slot = -1;
        x->record_at = -1;
        return x;
}

/* ---- order between streams, by byte range ----------------------------- */

/* Marks a storage keeps before those whose work has finished are dropped. */
#define MARKS_KEPT 16

static order_event *order_event_new(cube__device *d, CUstream stream)
{
        order_event *e = calloc(1, sizeof(*e));

        if (!e)
                return NULL;
        if (!(e->event = event_take(d, false))) {
                free(e);
                return NULL;
        }
        if (!check(d, d->cu->cuEventRecord(e->event, stream), "cuEventRecord")) {
                event_give(d, e->event, false);
                free(e);
                return NULL;
        }
        e->refs = 1;
        return e;
}

static void order_event_put(cube__device *d, order_event *e)
{
        if (e && --e->refs == 0) {
                event_give(d, e->event, false);
                free(e);
        }
}

static void mark_drop(cube__device *d, cube__storage *st, mark **pp)
{
        mark *m = *pp;

        *pp = m->next;
        st->n_marks--;
        order_event_put(d, m->after);
        free(m);
}

/* Orders work on s touching [lo, hi) of st after the work of other streams
 * that touched those bytes. */
static void order_before(cube__device *d, cube__dstream *s, cube__storage *st, uint64_t lo,
                         uint64_t hi)
{
        for (mark *m = st->marks; m; m = m->next)
                if (m->stream != s && lo < m->hi && m->lo < hi)
                        check(d, d->cu->cuStreamWaitEvent(s->stream, m->after->event, 0),
                              "cuStreamWaitEvent");
}

/* Leaves the mark of work just issued on s (after: its event). Earlier
 * marks of s on overlapping bytes are folded into it: s runs in order, so
 * waiting for the new event waits for them too. Once a storage holds many,
 * those whose work has finished go. */
static void order_after(cube__device *d, cube__dstream *s, cube__storage *st, uint64_t lo,
                        uint64_t hi, order_event *after)
{
        mark *m;

        if (!after)
                return;
        for (mark **pp = &st->marks; *pp;) {
                m = *pp;
                if (m->stream == s && lo < m->hi && m->lo < hi) {
                        lo = m->lo < lo ? m->lo : lo;
                        hi = m->hi > hi ? m->hi : hi;
                        mark_drop(d, st, pp);
                } else if (st->n_marks >= MARKS_KEPT &&
                           d->cu->cuEventQuery(m->after->event) == CUDA_SUCCESS) {
                        mark_drop(d, st, pp);
                } else {
                        pp = &m->next;
                }
        }
        if (!(m = malloc(sizeof(*m)))) {
                /* Without it, later work of another stream could overtake. */
                fprintf(stderr, "cubed: out of host memory ordering CUDA work\n");
                abort();
        }
        *m = (mark) { .next = st->marks, .lo = lo, .hi = hi, .stream = s, .after = after };
        after->refs++;
        st->marks = m;
        st->n_marks++;
}

static cube_error *storage_error(const cube__storage *st)
{
        return cube__err_io_size(CUBE_IO_OUT_OF_MEMORY, st->size);
}

/* One linear or pitched copy of rows x len bytes between host and st. */
static CUresult copy_direct(cube__device *d, cube__dstream *s, bool to_device, cube__storage *st,
                            uint64_t offset, void *host, uint64_t len, uint64_t rows,
                            uint64_t pitch)
{
        CUdeviceptr dev = st->ptr + offset;

        if (rows <= 1)
                return to_device ? d->cu->cuMemcpyHtoDAsync(dev, host, len, s->stream) :
                                   d->cu->cuMemcpyDtoHAsync(host, dev, len, s->stream);
        CUDA_MEMCPY2D m = {
                .WidthInBytes = len,
                .Height = rows,
        };
        if (to_device) {
                m.srcMemoryType = CU_MEMORYTYPE_HOST;
                m.srcHost = host;
                m.srcPitch = len;
                m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
                m.dstDevice = dev;
                m.dstPitch = pitch;
        } else {
                m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
                m.srcDevice = dev;
                m.srcPitch = pitch;
                m.dstMemoryType = CU_MEMORYTYPE_HOST;
                m.dstHost = host;
                m.dstPitch = len;
        }
        return d->cu->cuMemcpy2DAsync(&m, s->stream);
}

/* A copy: one DMA from pinned memory, else through bounce chunks, a batch of
 * whole rows (or a piece of one long row) each. The last rec hands the work
 * back; a read's chunks are copied out by the completion thread. Once that
 * rec is pushed the work may be gone: everything is read from it first. */
static void issue_copy(cube__device *d, cube__dstream *s, cube__work *w)
{
        const bool to_device = w->op == CUBE__WORK_COPY_TO_DEVICE;
        const uint64_t len = w->len, offset = w->offset;
        const uint64_t rows = w->rows > 1 ? w->rows : 1, pitch = w->rows > 1 ? w->pitch : w->len;
        char *const base = w->host;
        cube__storage *const st = w->storage;
        const char *what = to_device ? "cuMemcpyHtoDAsync" : "cuMemcpyDtoHAsync";
        CUresult r = CUDA_SUCCESS;
        rec *x;

        if (!len) {
                x = new_rec();
                x->work = w;
                push_rec(d, s, x);
                return;
        }
        if (is_pinned(d, base, len * rows)) {
                r = copy_direct(d, s, to_device, st, offset, base, len, rows, pitch);
                if (!check(d, r, what))
                        w->error = cube__cuda_error(CUBE__CU_SITE_IO, r, 0, "a copy");
                x = new_rec();
                x->work = w;
                push_rec(d, s, x);
                return;
        }
        /* Pieces: rows_per whole rows, or (rows longer than a chunk) one row
         * in chunk-sized parts. */
        const uint64_t rows_per = len <= BOUNCE_BYTES ? BOUNCE_BYTES / len : 1;
        const uint64_t part = len <= BOUNCE_BYTES ? len : BOUNCE_BYTES;
        bool handed_back = false;
        for (uint64_t row = 0; row < rows && !handed_back;) {
                uint64_t n_rows = rows - row < rows_per ? rows - row : rows_per;
                for (uint64_t at = 0; at < len && !handed_back; at += part) {
                        uint64_t piece = len - at < part ? len - at : part;
                        char *host = base + row * len + at;
                        uint64_t bytes = n_rows > 1 ? n_rows * len : piece;
                        void *chunk = bounce_take(d);
                        bool last = row + n_rows >= rows && at + piece >= len;

                        if (to_device)
                                memcpy(chunk, host, bytes);
                        if (n_rows > 1)
                                r = copy_direct(d, s, to_device, st, offset + row * pitch, chunk,
                                                len, n_rows, pitch);
                        else
                                r = copy_direct(d, s, to_device, st, offset + row * pitch + at,
                                                chunk, piece, 1, 0);
                        if (!check(d, r, what))
                                w->error = cube__cuda_error(CUBE__CU_SITE_IO, r, 0, "a copy");
                        x = new_rec();
                        x->bounce = chunk;
                        if (!to_device) {
                                x->copy_to = host;
                                x->copy_len = bytes;
                        }
                        if (last || r != CUDA_SUCCESS) {
                                x->work = w;
                                handed_back = true;
                        }
                        push_rec(d, s, x);
                        if (n_rows > 1)
                                break;
                }
                row += n_rows;
        }
}

/* The CUtensorMap of the launch's tensor map m, from the words the core
 * judged (frontend.h) and the address of its buffer; NULL, or the
 * launch's Validation naming what the driver refused. */
static cube_error *encode_tensor_map(cube__device *d, const cube__launch_work *l, uint32_t m,
                                     CUdeviceptr at, CUtensorMap *ret)
{
        static const CUtensorMapDataType types[] = {
                CU_TENSOR_MAP_DATA_TYPE_FLOAT16, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                CU_TENSOR_MAP_DATA_TYPE_FLOAT32, CU_TENSOR_MAP_DATA_TYPE_FLOAT64,
                CU_TENSOR_MAP_DATA_TYPE_INT32, CU_TENSOR_MAP_DATA_TYPE_INT64,
                CU_TENSOR_MAP_DATA_TYPE_UINT32, CU_TENSOR_MAP_DATA_TYPE_UINT64,
        };
        uint32_t ntm = l->n_tensor_maps, n = l->n_buffers;
        const uint64_t *w = l->info + l->n_info - CUBE__CHECK_TAIL_WORDS - n -
                            (uint64_t) (ntm - m) * CUBE__TMAP_WORDS;
        uint32_t rank = (uint32_t) w[CUBE__TMAP_RANK], eb = (uint32_t) w[CUBE__TMAP_ELEM_BYTES];
        cuuint64_t dim[5], strides[4];
        cuuint32_t box[5], es[5];
        int lower[3], upper[3];
        CUresult r;

        if (rank < 1 || rank > 5 || w[CUBE__TMAP_ELEM] >= sizeof(types) / sizeof(types[0]))
                return cube__err_validation("launch of '%s': tensor map %u is not one", l->kernel,
                                            m);
        uint32_t align = w[CUBE__TMAP_INTERLEAVE] == CU_TENSOR_MAP_INTERLEAVE_32B ? 32 : 16;
        if (at % align)
                return cube__err_validation("launch of '%s': tensor map %u's buffer is bound at "
                                            "device address %#llx; a tensor map's starts at a "
                                            "multiple of %u bytes", l->kernel, m,
                                            (unsigned long long) at, align);
        for (uint32_t i = 0; i < rank; i++) {
                dim[i] = w[CUBE__TMAP_SHAPE + i];
                if (i > 0)
                        strides[i - 1] = w[CUBE__TMAP_STRIDES + i] * eb;
                box[i] = (cuuint32_t) w[CUBE__TMAP_BOX + i];
                es[i] = (cuuint32_t) w[CUBE__TMAP_ELEM_STRIDES + i];
        }
        for (uint32_t i = 0; i < 3; i++) {
                lower[i] = (int) (int64_t) w[CUBE__TMAP_LOWER + i];
                upper[i] = (int) (int64_t) w[CUBE__TMAP_UPPER + i];
        }
        CUtensorMapDataType type = types[w[CUBE__TMAP_ELEM]];
        CUtensorMapInterleave il = (CUtensorMapInterleave) w[CUBE__TMAP_INTERLEAVE];
        CUtensorMapSwizzle sw = (CUtensorMapSwizzle) w[CUBE__TMAP_SWIZZLE];
        CUtensorMapL2promotion l2 = (CUtensorMapL2promotion) w[CUBE__TMAP_PREFETCH];
        CUtensorMapFloatOOBfill fill = (CUtensorMapFloatOOBfill) w[CUBE__TMAP_OOB];
        if (w[CUBE__TMAP_FORMAT] == 1)
                r = d->cu->cuTensorMapEncodeIm2col(ret, type, rank, (void *) at, dim, strides,
                                                   lower, upper, box[0], box[1], es, il, sw, l2,
                                                   fill);
        else
                r = d->cu->cuTensorMapEncodeTiled(ret, type, rank, (void *) at, dim, strides, box,
                                                  es, il, sw, l2, fill);
        if (r != CUDA_SUCCESS)
                return cube__err_validation("launch of '%s': the driver refused tensor map %u: "
                                            "%s (%d)", l->kernel, m, cube__cuda_name(r), (int) r);
        return NULL;
}

static void issue_launch(cube__device *d, cube__dstream *s, cube__work *w)
{
        const cube__launch_work *l = w->launch;
        uint32_t n = l->n_buffers, ntm = l->n_tensor_maps;
        CUdeviceptr *ptrs = calloc(n + 1, sizeof(*ptrs));
        void **params = calloc(n + ntm + 4, sizeof(*params));
        CUtensorMap *maps = ntm ? aligned_alloc(64, ntm * sizeof(*maps)) : NULL;
        CUdeviceptr info = 0;
        uint64_t info_bytes = (uint64_t) l->n_info * 8;
        uint32_t meta = l->metadata_offset, dyn = l->dynamic_offset, words = l->n_info;
        void *big = NULL;
        int slot = -1;
        int64_t record_at = -1;
        CUresult r = CUDA_SUCCESS;
        rec *x = new_rec();

        if (!ptrs || !params || (ntm && !maps) || ntm > n) {
                w->error = cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(
                        CUBE_LAUNCH_OUT_OF_MEMORY, "out of host memory launching '%s'", l->kernel));
                goto done;
        }
        /* A GPU loads an element only from an address aligned to its size;
         * anything else is CUDA_ERROR_MISALIGNED_ADDRESS, sticky, which would
         * poison the device for every session. */
        for (uint32_t i = 0; i < n && i < l->module->n_buffers; i++)
                if (l->offsets[i] % l->module->align[i]) {
                        w->error = cube__err_validation(
                                "launch of '%s': buffer %u is bound at byte %" PRIu64 ", where "
                                "its %u-byte elements cannot be loaded on a GPU (bind it at a "
                                "multiple of %u)", l->kernel, i, l->offsets[i],
                                l->module->align[i], l->module->align[i]);
                        goto done;
                }
        for (uint32_t i = 0; i < n; i++)
                ptrs[i] = l->storages[i]->ptr + l->offsets[i];
        for (uint32_t m = 0; m < ntm; m++)
                if ((w->error = encode_tensor_map(d, l, m, ptrs[n - ntm + m], &maps[m])))
                        goto done;
        /* The info words go to device memory first, in stream order. */
        if (info_bytes > 0 && info_bytes <= INFO_SLOT) {
                slot = slot_take(d);
                memcpy(d->info_host + (size_t) slot * INFO_SLOT, l->info, info_bytes);
                info = d->info_dev + (CUdeviceptr) slot * INFO_SLOT;
                r = d->cu->cuMemcpyHtoDAsync(info, d->info_host + (size_t) slot * INFO_SLOT,
                                             info_bytes, s->stream);
        } else if (info_bytes > 0 && info_bytes <= BOUNCE_BYTES) {
                big = bounce_take(d);
                memcpy(big, l->info, info_bytes);
                r = d->cu->cuMemAllocFromPoolAsync(&info, info_bytes, d->pool, s->stream);
                if (r == CUDA_SUCCESS)
                        r = d->cu->cuMemcpyHtoDAsync(info, big, info_bytes, s->stream);
        } else if (info_bytes > 0) {
                w->error = cube__err_validation("launch of '%s': %" PRIu64 " bytes of info words, "
                                                "more than the %u the CUDA backend takes",
                                                l->kernel, info_bytes, BOUNCE_BYTES);
                goto done;
        }
        if (!check(d, r, "copying the info words")) {
                w->error = cube__cuda_error(CUBE__CU_SITE_LAUNCH, r, 0, "copying the info words");
                goto done;
        }
        for (uint32_t i = 0; i < n; i++)
                params[i] = &ptrs[i];
        for (uint32_t m = 0; m < ntm; m++)
                params[n + m] = &maps[m];
        params[n + ntm] = &info;
        params[n + ntm + 1] = &meta;
        params[n + ntm + 2] = &dyn;
        params[n + ntm + 3] = &words;
        if ((x->start = event_take(d, true)) &&
            !check(d, d->cu->cuEventRecord(x->start, s->stream), "cuEventRecord")) {
                event_give(d, x->start, true);
                x->start = NULL;
        }
        r = d->cu->cuLaunchKernel(l->module->fn, l->count[0], l->count[1], l->count[2],
                                  l->dim[0], l->dim[1], l->dim[2], 0, s->stream, params, NULL);
        if (!check(d, r, "cuLaunchKernel")) {
                char what[128];
                snprintf(what, sizeof(what), "cuLaunchKernel of '%s'", l->kernel);
                w->error = cube__cuda_error(CUBE__CU_SITE_LAUNCH, r,
                                            (uint64_t) l->dim[0] * l->dim[1] * l->dim[2], what);
        }
        /* The record of the launch's first access out of bounds (the info
         * words' tail, frontend.h) comes back in stream order behind it; a
         * kernel without a guarded access has none to write. */
        if (r == CUDA_SUCCESS && slot >= 0 && l->n_info >= CUBE__CHECK_TAIL_WORDS + l->n_buffers &&
            !(l->module->facts && l->module->facts->n_sites == 0)) {
                uint64_t at = ((uint64_t) l->n_info - CUBE__CHECK_TAIL_WORDS) * 8;
                if (check(d, d->cu->cuMemcpyDtoHAsync(d->info_host + (size_t) slot * INFO_SLOT + at,
                                                      info + at, sizeof(cube__oob_record),
                                                      s->stream), "cuMemcpyDtoHAsync"))
                        record_at = (int64_t) at;
        }
        if (big)
                check(d, d->cu->cuMemFreeAsync(info, s->stream), "cuMemFreeAsync");
done:
        free(ptrs);
        free(params);
        free(maps);
        x->work = w;
        x->kernel = l->kernel;
        x->info_slot = slot;
        x->record_at = record_at;
        x->facts = l->module->facts;
        x->bounce = big;
        push_rec(d, s, x);
}

/* Issues one piece of work between the order events of what it touches.
 * The storages are taken first: once issued, the work may already have
 * been handed back and freed (they stay: their release is queued behind). */
static void issue(cube__device *d, cube__dstream *s, cube__work *w)
{
        enum { TOUCHED = 8 };
        cube__storage *touched[TOUCHED], **sts = touched;
        uint64_t span[2 * TOUCHED], *range = span;
        uint32_t n = w->op == CUBE__WORK_FENCE ? 0 : 1;

        touched[0] = w->storage;
        if (n && w->op != CUBE__WORK_LAUNCH) {
                span[0] = w->offset;
                span[1] = w->offset + (w->rows > 1 ? w->pitch * (w->rows - 1) + w->len : w->len);
        }
        if (w->op == CUBE__WORK_LAUNCH) {
                const cube__launch_work *l = w->launch;
                n = l->n_buffers;
                if (n > TOUCHED && (!(sts = malloc(n * sizeof(*sts))) ||
                                    !(range = malloc(2 * n * sizeof(*range))))) {
                        if (sts != touched)
                                free(sts);
                        w->error = cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(
                                CUBE_LAUNCH_OUT_OF_MEMORY, "out of host memory launching '%s'",
                                l->kernel));
                        sts = touched;
                        range = span;
                        n = 0;
                } else {
                        memcpy(sts, l->storages, n * sizeof(*sts));
                        for (uint32_t i = 0; i < n; i++) {
                                range[2 * i] = l->extents ? l->extents[2 * i] : 0;
                                range[2 * i + 1] = l->extents ? l->extents[2 * i + 1] :
                                                   UINT64_MAX;
                        }
                }
        }
        pthread_mutex_lock(&d->lock);
        bool dead = d->poison != NULL;
        if (dead && !w->error && w->op != CUBE__WORK_FENCE)
                w->error = cube_error_clone(d->poison);
        pthread_mutex_unlock(&d->lock);
        for (uint32_t i = 0; i < n && !w->error && !dead; i++)
                if (sts[i]->failed)
                        w->error = storage_error(sts[i]);
        if (w->error || dead || w->op == CUBE__WORK_FENCE) {
                rec *x = new_rec();
                x->work = w;
                push_rec(d, s, x);
        } else {
                for (uint32_t i = 0; i < n; i++)
                        order_before(d, s, sts[i], range[2 * i], range[2 * i + 1]);
                if (w->op == CUBE__WORK_LAUNCH)
                        issue_launch(d, s, w);
                else
                        issue_copy(d, s, w);
                if (n) {
                        order_event *after = order_event_new(d, s->stream);
                        for (uint32_t i = 0; i < n; i++)
                                order_after(d, s, sts[i], range[2 * i], range[2 * i + 1], after);
                        order_event_put(d, after);
                }
        }
        if (sts != touched)
                free(sts);
        if (range != span)
                free(range);
}

/* Rings the doorbell once s's work issued so far has completed: on s's bell
 * stream, behind the event of the last work on s. A last rec without an
 * event needs none: push_rec waited for the stream before it (or the device
 * is poisoned), and the ring that follows every batch finds it done. The
 * tail's event is used under the lock, which the completion thread holds to
 * retire it; the result is checked after, as a fault found there poisons
 * under the same lock. */
static void doorbell_after(cube__device *d, cube__dstream *s)
{
        CUresult r = CUDA_SUCCESS;

        pthread_mutex_lock(&d->lock);
        bool on_tail = !d->poison && s->tail && s->tail->event;
        if (on_tail)
                r = d->cu->cuStreamWaitEvent(s->bell, s->tail->event, 0);
        pthread_mutex_unlock(&d->lock);
        if (on_tail && check(d, r, "cuStreamWaitEvent"))
                check(d, d->cu->cuLaunchHostFunc(s->bell, doorbell_cb, d), "cuLaunchHostFunc");
}

static void run_cmd(cube__device *d, cmd *c)
{
        cube__storage *st = c->storage;
        CUresult r;

        switch (c->kind) {
        case CMD_SUBMIT:
                for (cube__work *w = c->work, *next; w; w = next) {
                        next = w->next;
                        w->next = NULL;
                        issue(d, c->stream, w);
                }
                doorbell_after(d, c->stream);
                ring(d);
                break;
        case CMD_ALLOC: {
                order_event *after = NULL;
                r = CUDA_SUCCESS;
                if (st->rounded)
                        r = d->cu->cuMemAllocFromPoolAsync(&st->ptr, st->rounded, d->pool,
                                                           d->alloc_stream);
                /* Fresh memory reads as zeros: no session sees another's bytes. */
                if (r == CUDA_SUCCESS && st->rounded)
                        r = d->cu->cuMemsetD8Async(st->ptr, 0, st->rounded, d->alloc_stream);
                if (!check(d, r, "allocating device memory") ||
                    !(after = order_event_new(d, d->alloc_stream)))
                        st->failed = true;
                /* Every stream's first work on it waits for the zeros. */
                order_after(d, NULL, st, 0, UINT64_MAX, after);
                order_event_put(d, after);
                break;
        }
        case CMD_FREE:
                while (st->marks) {
                        if (st->marks->stream)
                                d->cu->cuStreamWaitEvent(d->alloc_stream,
                                                         st->marks->after->event, 0);
                        mark_drop(d, st, &st->marks);
                }
                if (st->ptr)
                        check(d, d->cu->cuMemFreeAsync(st->ptr, d->alloc_stream), "cuMemFreeAsync");
                free(st);
                break;
        case CMD_REGISTER: {
                /* A region is pinned once, so that every staged copy from it is
                 * one DMA; where the driver refuses (a sandbox), copies from it
                 * go through the bounce buffers. */
                pinned_range *p = malloc(sizeof(*p));
                r = d->cu->cuMemHostRegister(c->addr, c->len, CU_MEMHOSTREGISTER_PORTABLE);
                if (p && r == CUDA_SUCCESS) {
                        p->addr = c->addr;
                        p->len = c->len;
                        p->next = d->pinned;
                        d->pinned = p;
                } else {
                        fprintf(stderr, "cubed: cuda%u: cuMemHostRegister of a %" PRIu64 "-byte "
                                "staging region failed: %s (%d); copies from it go through the "
                                "bounce buffers, slower\n", d->config.index, c->len,
                                p ? cube__cuda_name(r) : "out of host memory", (int) r);
                        free(p);
                }
                break;
        }
        case CMD_RELEASE_HOST:
                for (pinned_range **pp = &d->pinned; *pp; pp = &(*pp)->next)
                        if ((*pp)->addr == c->addr) {
                                pinned_range *p = *pp;
                                *pp = p->next;
                                d->cu->cuMemHostUnregister(c->addr);
                                free(p);
                                break;
                        }
                munmap(c->addr, c->len);
                break;
        case CMD_STREAM_CLOSE:
                pthread_mutex_lock(&d->lock);
                for (cube__dstream **pp = &d->streams; *pp; pp = &(*pp)->next)
                        if (*pp == c->stream) {
                                *pp = c->stream->next;
                                break;
                        }
                pthread_mutex_unlock(&d->lock);
                d->cu->cuStreamDestroy(c->stream->stream);
                /* Its last doorbell may still be to ring. */
                if (!poisoned(d))
                        d->cu->cuStreamSynchronize(c->stream->bell);
                d->cu->cuStreamDestroy(c->stream->bell);
                free(c->stream);
                break;
        }
        free(c);
}

static void *submitter_main(void *arg)
{
        cube__device *d = arg;

        d->cu->cuCtxSetCurrent(d->ctx);
        pthread_mutex_lock(&d->lock);
        for (;;) {
                while (!d->cmd_head && !d->stopping)
                        pthread_cond_wait(&d->cmd_wake, &d->lock);
                if (!d->cmd_head)
                        break;
                cmd *c = d->cmd_head;
                d->cmd_head = c->next;
                if (!d->cmd_head)
                        d->cmd_tail = NULL;
                pthread_mutex_unlock(&d->lock);
                run_cmd(d, c);
                pthread_mutex_lock(&d->lock);
        }
        d->done_submitting = true;
        pthread_mutex_unlock(&d->lock);
        ring(d);
        return NULL;
}

/* ---- the completion thread -------------------------------------------- */

static uint64_t now_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

/* Records the anchor on its own idle stream and waits for it: its
 * CLOCK_MONOTONIC time is the middle of that wait, kept only when the wait
 * was short (a loaded machine may leave this thread unscheduled), so an
 * anchor is never more than ANCHOR_SLACK_NS off. Renewed every few seconds,
 * as event times are floats of milliseconds from it. */
#define ANCHOR_SLACK_NS 4000000ull

static void renew_anchor(cube__device *d)
{
        if (!d->anchor || (d->anchor_ns && now_ns() - d->anchor_ns < 4000000000ull))
                return;
        d->anchor_ns = 0;                       /* no timing until a good one */
        for (int tries = 0; tries < 3 && !d->anchor_ns; tries++) {
                uint64_t t0 = now_ns();
                if (d->cu->cuEventRecord(d->anchor, d->anchor_stream) != CUDA_SUCCESS ||
                    d->cu->cuStreamSynchronize(d->anchor_stream) != CUDA_SUCCESS)
                        return;
                uint64_t t1 = now_ns();
                if (t1 - t0 <= 2 * ANCHOR_SLACK_NS)
                        d->anchor_ns = t0 + (t1 - t0) / 2;
        }
}

/* A completed launch's device times, placed on CLOCK_MONOTONIC. */
static void time_launch(cube__device *d, rec *x, cube__work *w)
{
        float from_anchor, took;

        if (!x->start || !d->anchor_ns ||
            d->cu->cuEventElapsedTime(&from_anchor, d->anchor, x->start) != CUDA_SUCCESS ||
            d->cu->cuEventElapsedTime(&took, x->start, x->event) != CUDA_SUCCESS)
                return;
        int64_t start = (int64_t) d->anchor_ns + (int64_t) ((double) from_anchor * 1e6);
        if (start <= 0)
                return;
        w->start_ns = (uint64_t) start;
        w->end_ns = w->start_ns + (uint64_t) ((double) (took > 0 ? took : 0) * 1e6);
}

/* The longest a launch may run: the kernel timeout, and at close a bound
 * even without one, so that close never waits on a kernel that never ends. */
#define CLOSE_GRACE_MS 10000

/* A launch at the head of its stream that has started (its start event is
 * done) and runs past the limit poisons the device, naming it. Called with
 * d->lock held; true when it did. */
static bool stopped_stuck_launch(cube__device *d, rec *x, uint64_t now)
{
        uint64_t limit_ms = d->config.kernel_timeout_ms;
        char why[256];

        if (d->stopping && (!limit_ms || limit_ms > CLOSE_GRACE_MS))
                limit_ms = CLOSE_GRACE_MS;
        if (!x->start || !limit_ms)
                return false;
        if (!x->running_since) {
                if (d->cu->cuEventQuery(x->start) == CUDA_SUCCESS)
                        x->running_since = now;
                return false;
        }
        if (now - x->running_since < limit_ms * 1000000ull)
                return false;
        snprintf(why, sizeof(why), "kernel '%s' ran longer than %" PRIu64 " ms (%s)", x->kernel,
                 limit_ms, d->stopping ? "the device is closing" : "kernel_timeout_ms");
        poison_why_locked(d, why);
        return true;
}

/* Hands back, in stream order, every rec whose event has completed; the
 * first failing query poisons the device. The completed recs leave the
 * lists under the lock; their reads are copied out of the bounce buffers
 * after it, so the loop thread never waits on a copy. Returns whether any
 * remain. */
static bool reap(cube__device *d)
{
        cube__work *done = NULL, **tail = &done;
        rec *taken = NULL, **taken_tail = &taken;
        bool left = false;
        uint64_t now = now_ns();

        renew_anchor(d);
        pthread_mutex_lock(&d->lock);
        for (cube__dstream *s = d->streams; s; s = s->next) {
                /* A stream runs in order: once its last event has completed,
                 * so has everything before it, and one query does for all. */
                bool all_done = s->tail && s->tail->event &&
                                d->cu->cuEventQuery(s->tail->event) == CUDA_SUCCESS;
                while (s->head) {
                        rec *x = s->head;
                        if (x->event && !all_done) {
                                CUresult r = d->cu->cuEventQuery(x->event);
                                if (r == CUDA_ERROR_NOT_READY) {
                                        if (stopped_stuck_launch(d, x, now))
                                                continue;       /* its event is gone now */
                                        left = true;
                                        break;
                                }
                                if (r != CUDA_SUCCESS && cube__cuda_class(r) == CUBE__CU_POISON)
                                        poison_locked(d, r, "a stream's work");
                        }
                        s->head = x->next;
                        if (!s->head)
                                s->tail = NULL;
                        x->next = NULL;
                        *taken_tail = x;
                        taken_tail = &x->next;
                }
        }
        bool dead = d->poison != NULL;
        pthread_mutex_unlock(&d->lock);

        for (rec *x = taken; x; x = x->next) {
                if (x->copy_to && !dead)
                        memcpy(x->copy_to, x->bounce, x->copy_len);
                if (x->work && x->event && !dead && x->work->op == CUBE__WORK_LAUNCH)
                        time_launch(d, x, x->work);
                event_give(d, x->event, x->event_timed);
                event_give(d, x->start, true);
        }

        pthread_mutex_lock(&d->lock);
        for (rec *x = taken, *next; x; x = next) {
                next = x->next;
                if (x->bounce)
                        bounce_give_locked(d, x->bounce);
                if (x->info_slot >= 0 && x->record_at >= 0 && x->work && !x->work->error &&
                    !d->poison) {
                        cube__oob_record r;
                        memcpy(&r, d->info_host + (size_t) x->info_slot * INFO_SLOT +
                               x->record_at, sizeof(r));
                        if (r.site_plus_one) {
                                char text[768];
                                cube__fe_describe_oob(x->facts, x->kernel, &r, text, sizeof(text));
                                x->work->error = cube__err_validation("%s", text);
                        }
                }
                if (x->info_slot >= 0) {
                        d->slot_busy[x->info_slot] = false;
                        pthread_cond_signal(&d->slot_free);
                }
                if (x->work) {
                        cube__work *w = x->work;
                        if (d->poison && w->op != CUBE__WORK_FENCE) {
                                cube_error_free(w->error);
                                w->error = cube_error_clone(d->poison);
                                w->start_ns = w->end_ns = 0;
                        }
                        w->next = NULL;
                        *tail = w;
                        tail = &w->next;
                }
                free(x);
        }
        pthread_mutex_unlock(&d->lock);
        if (done)
                d->config.complete(d->config.complete_ctx, done);
        return left;
}

static void *completer_main(void *arg)
{
        cube__device *d = arg;
        struct pollfd p = { .fd = d->doorbell, .events = POLLIN };

        d->cu->cuCtxSetCurrent(d->ctx);
        for (;;) {
                bool left = reap(d);
                pthread_mutex_lock(&d->lock);
                bool finished = d->done_submitting && !left;
                pthread_mutex_unlock(&d->lock);
                if (finished)
                        break;
                /* The doorbell rings when a stream reaches its host function
                 * and when the submitter waits for a bounce buffer; a short
                 * poll covers work that completed without one. */
                if (poll(&p, 1, left ? 2 : 200) > 0) {
                        uint64_t v;
                        ssize_t n = read(d->doorbell, &v, sizeof(v));
                        (void) n;
                }
        }
        return NULL;
}

/* ---- the driver interface --------------------------------------------- */

static void push_cmd(cube__device *d, cmd *c)
{
        c->next = NULL;
        pthread_mutex_lock(&d->lock);
        if (d->cmd_tail)
                d->cmd_tail->next = c;
        else
                d->cmd_head = c;
        d->cmd_tail = c;
        pthread_cond_signal(&d->cmd_wake);
        pthread_mutex_unlock(&d->lock);
}

static int attr(cube__device *d, CUdevice_attribute a)
{
        int v = 0;
        d->cu->cuDeviceGetAttribute(&v, a, d->dev);
        return v;
}

/* Set once a device of this process was closed poisoned. A GPU keeps a
 * sticky fault in the primary context until the process ends (an H200 with
 * driver 580 answers cuDevicePrimaryCtxRetain with it after a reset), and a
 * reset or release waits for a kernel that never ends. So a poisoned
 * device's context is left alone, and no device opens again in this
 * process: the core then starts cubed afresh, and the driver lets go of the
 * context as the old process's descriptors close. */
static bool context_abandoned;

static void free_device(cube__device *d)
{
        /* Destroying an event never waits, even in a dead context. */
        if (d->cu && d->ctx)
                d->cu->cuCtxSetCurrent(d->ctx);
        for (int timed = 0; timed < 2 && d->cu && d->ctx; timed++)
                while (d->n_events[timed])
                        d->cu->cuEventDestroy(d->events[timed][--d->n_events[timed]]);
        if (d->cu && d->ctx && d->poison) {
                context_abandoned = true;
        } else if (d->cu && d->ctx) {
                for (int i = 0; i < BOUNCE_COUNT; i++)
                        if (d->bounce[i])
                                d->cu->cuMemFreeHost(d->bounce[i]);
                if (d->info_host)
                        d->cu->cuMemFreeHost(d->info_host);
                if (d->info_dev)
                        d->cu->cuMemFreeAsync(d->info_dev, d->alloc_stream);
                if (d->alloc_stream) {
                        d->cu->cuStreamSynchronize(d->alloc_stream);
                        d->cu->cuStreamDestroy(d->alloc_stream);
                }
                if (d->anchor)
                        d->cu->cuEventDestroy(d->anchor);
                if (d->anchor_stream)
                        d->cu->cuStreamDestroy(d->anchor_stream);
                if (d->pool)
                        d->cu->cuMemPoolDestroy(d->pool);
                d->cu->cuDevicePrimaryCtxRelease(d->dev);
        }
        if (d->doorbell >= 0)
                close(d->doorbell);
        cube_error_free(d->poison);
        pthread_mutex_destroy(&d->lock);
        pthread_mutex_destroy(&d->events_lock);
        pthread_cond_destroy(&d->cmd_wake);
        pthread_cond_destroy(&d->bounce_free);
        pthread_cond_destroy(&d->slot_free);
        free(d);
}

static int open_failed(cube__device *d, const char **ret_why, const char *what, CUresult r,
                       int err)
{
        static __thread char why[256];

        snprintf(why, sizeof(why), "%s: %s (%d)", what, cube__cuda_name(r), (int) r);
        *ret_why = why;
        free_device(d);
        return err;
}

static int cuda_open(const cube__device_config *config, cube__device **ret_device,
                     const char **ret_why)
{
        const cube__cuda_api *cu;
        cube__device *d;
        size_t free_mem = 0, total = 0;
        int count = 0, r;
        CUresult cr;

        if (context_abandoned) {
                *ret_why = "this process closed a poisoned CUDA device, whose context the driver "
                           "keeps until the process ends; start the process again";
                return -EAGAIN;
        }
        if ((r = cube__cuda_load_driver(&cu, ret_why)) < 0)
                return r;
        if (!(d = calloc(1, sizeof(*d))))
                return -ENOMEM;
        d->config = *config;
        d->cu = cu;
        d->doorbell = -1;
        pthread_mutex_init(&d->lock, NULL);
        pthread_mutex_init(&d->events_lock, NULL);
        pthread_cond_init(&d->cmd_wake, NULL);
        pthread_cond_init(&d->bounce_free, NULL);
        pthread_cond_init(&d->slot_free, NULL);
        if ((cr = cu->cuDeviceGetCount(&count)) != CUDA_SUCCESS)
                return open_failed(d, ret_why, "cuDeviceGetCount", cr, -ENODEV);
        if (config->index >= (unsigned) count) {
                static __thread char why[128];
                snprintf(why, sizeof(why), "there is no CUDA device %u (the driver sees %d)",
                         config->index, count);
                *ret_why = why;
                free_device(d);
                return -ENODEV;
        }
        if ((cr = cu->cuDeviceGet(&d->dev, (int) config->index)) != CUDA_SUCCESS)
                return open_failed(d, ret_why, "cuDeviceGet", cr, -ENODEV);
        /* Flags go before the retain; blocking sync lets threads sleep. */
        cu->cuDevicePrimaryCtxSetFlags(d->dev, CU_CTX_SCHED_BLOCKING_SYNC);
        if ((cr = cu->cuDevicePrimaryCtxRetain(&d->ctx, d->dev)) != CUDA_SUCCESS)
                return open_failed(d, ret_why, "cuDevicePrimaryCtxRetain", cr, -ENODEV);
        cu->cuCtxSetCurrent(d->ctx);

        d->arch = attr(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) * 10 +
                  attr(d, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
        cu->cuDeviceGetName(d->props.name, sizeof(d->props.name), d->dev);
        if ((cr = cu->cuMemGetInfo(&free_mem, &total)) != CUDA_SUCCESS)
                return open_failed(d, ret_why, "cuMemGetInfo", cr, -ENODEV);
        d->limit = free_mem > CUDA_RESERVE + INFO_SLOT * INFO_SLOTS ?
                   free_mem - CUDA_RESERVE - INFO_SLOT * INFO_SLOTS : 0;
        if (config->memory_limit && config->memory_limit < d->limit)
                d->limit = config->memory_limit;
        d->props.memory_bytes = d->limit;
        d->props.max_page_size = d->limit;
        d->props.alignment = CUDA_ALIGNMENT;
        d->props.plane_size_min = d->props.plane_size_max =
                (uint32_t) attr(d, CU_DEVICE_ATTRIBUTE_WARP_SIZE);
        d->props.max_bindings = 1024;
        d->props.max_shared_memory_size =
                (uint32_t) attr(d, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
        d->props.max_cube_count[0] = (uint32_t) attr(d, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
        d->props.max_cube_count[1] = (uint32_t) attr(d, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
        d->props.max_cube_count[2] = (uint32_t) attr(d, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
        d->props.max_units_per_cube = (uint32_t) attr(d, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
        d->props.max_cube_dim[0] = (uint32_t) attr(d, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
        d->props.max_cube_dim[1] = (uint32_t) attr(d, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
        d->props.max_cube_dim[2] = (uint32_t) attr(d, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
        d->props.num_streaming_multiprocessors =
                (uint32_t) attr(d, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        d->props.num_cpu_cores = cores > 0 ? (uint32_t) cores : 1;
        d->resident_units = (uint64_t) attr(d, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR) *
                            d->props.num_streaming_multiprocessors;

        /* A pool that keeps what is freed (up to the limit) for reuse. */
        CUmemPoolProps pp = {
                .allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
                .handleTypes = CU_MEM_HANDLE_TYPE_NONE,
                .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int) config->index },
        };
        cuuint64_t threshold = d->limit;
        if ((cr = cu->cuMemPoolCreate(&d->pool, &pp)) != CUDA_SUCCESS)
                return open_failed(d, ret_why, "cuMemPoolCreate", cr, -ENODEV);
        cu->cuMemPoolSetAttribute(d->pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
        if ((cr = cu->cuStreamCreate(&d->alloc_stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS ||
            (cr = cu->cuStreamCreate(&d->anchor_stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS)
                return open_failed(d, ret_why, "cuStreamCreate", cr, -ENODEV);
        if ((cr = cu->cuEventCreate(&d->anchor, CU_EVENT_DEFAULT)) != CUDA_SUCCESS)
                return open_failed(d, ret_why, "cuEventCreate", cr, -ENODEV);
        for (int i = 0; i < BOUNCE_COUNT; i++)
                if ((cr = cu->cuMemAllocHost(&d->bounce[i], BOUNCE_BYTES)) != CUDA_SUCCESS)
                        return open_failed(d, ret_why, "cuMemAllocHost (bounce buffers)", cr,
                                           -ENOMEM);
        if ((cr = cu->cuMemAllocHost((void **) &d->info_host, INFO_SLOT * INFO_SLOTS)) !=
                    CUDA_SUCCESS ||
            (cr = cu->cuMemAllocFromPoolAsync(&d->info_dev, INFO_SLOT * INFO_SLOTS, d->pool,
                                              d->alloc_stream)) != CUDA_SUCCESS ||
            (cr = cu->cuStreamSynchronize(d->alloc_stream)) != CUDA_SUCCESS)
                return open_failed(d, ret_why, "allocating the info words' staging", cr, -ENOMEM);
        /* The info words' staging is the device's own, not the tenants':
         * it sits in the reserve, outside the limit (which it could exceed). */
        d->in_use = 0;

        const cube__nvrtc_api *nv;
        const char *nvwhy;
        int nvmajor = 0, nvminor = 0;
        if (cube__cuda_load_nvrtc(&nv, &nvwhy) == 0) {
                nvmajor = nv->major;
                nvminor = nv->minor;
        }
        snprintf(d->target, sizeof(d->target), "nvrtc %d.%d sm_%d prelude %.16s %s", nvmajor,
                 nvminor, d->arch, cube__cuda_prelude_digest, cube__cuda_options());

        if ((d->doorbell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
                return open_failed(d, ret_why, "eventfd", CUDA_SUCCESS, -errno);
        if (pthread_create(&d->submitter, NULL, submitter_main, d) != 0)
                return open_failed(d, ret_why, "starting the submitter thread", CUDA_SUCCESS,
                                   -EAGAIN);
        d->have_submitter = true;
        if (pthread_create(&d->completer, NULL, completer_main, d) != 0) {
                pthread_mutex_lock(&d->lock);
                d->stopping = true;
                pthread_cond_signal(&d->cmd_wake);
                pthread_mutex_unlock(&d->lock);
                pthread_join(d->submitter, NULL);
                return open_failed(d, ret_why, "starting the completion thread", CUDA_SUCCESS,
                                   -EAGAIN);
        }
        d->have_completer = true;
        *ret_device = d;
        return 0;
}

static void cuda_close(cube__device *d)
{
        if (!d)
                return;
        pthread_mutex_lock(&d->lock);
        d->stopping = true;
        pthread_cond_signal(&d->cmd_wake);
        pthread_mutex_unlock(&d->lock);
        pthread_join(d->submitter, NULL);
        ring(d);
        pthread_join(d->completer, NULL);
        /* A poisoned context is left as it is (free_device). */
        bool dead = poisoned(d);
        for (cube__dstream *s = d->streams, *next; s; s = next) {
                next = s->next;
                if (!dead) {
                        d->cu->cuStreamDestroy(s->stream);
                        /* A doorbell rung after this would find d freed. */
                        d->cu->cuStreamSynchronize(s->bell);
                        d->cu->cuStreamDestroy(s->bell);
                }
                free(s);
        }
        for (pinned_range *p = d->pinned, *next; p; p = next) {
                next = p->next;
                if (!dead)
                        d->cu->cuMemHostUnregister(p->addr);
                free(p);
        }
        free_device(d);
}

static void cuda_properties(cube__device *d, cube_device_properties *ret)
{
        *ret = d->props;
}

static cube_error *cuda_alloc(cube__device *d, uint64_t size, cube__storage **ret_storage)
{
        uint64_t rounded = (size + CUDA_ALIGNMENT - 1) / CUDA_ALIGNMENT * CUDA_ALIGNMENT;
        cube__storage *st;
        cmd *c;

        if (size > d->limit)
                return cube__err_io_size(CUBE_IO_BUFFER_TOO_BIG, size);
        if (rounded > d->limit - d->in_use)
                return cube__err_io_size(CUBE_IO_OUT_OF_MEMORY, size);
        st = calloc(1, sizeof(*st));
        c = calloc(1, sizeof(*c));
        if (!st || !c) {
                free(st);
                free(c);
                return cube__err_io_size(CUBE_IO_OUT_OF_MEMORY, size);
        }
        st->size = size;
        st->rounded = rounded;
        c->kind = CMD_ALLOC;
        c->storage = st;
        d->in_use += rounded;
        push_cmd(d, c);
        *ret_storage = st;
        return NULL;
}

static void cuda_release(cube__device *d, cube__storage *st)
{
        cmd *c;

        if (!st)
                return;
        d->in_use -= st->rounded;
        if (!(c = calloc(1, sizeof(*c))))
                return;         /* leaks the allocation, never frees under work */
        c->kind = CMD_FREE;
        c->storage = st;
        push_cmd(d, c);
}

static cube_error *cuda_stream_open(cube__device *d, cube__dstream **ret_stream)
{
        cube__dstream *s = calloc(1, sizeof(*s));
        CUresult r;

        if (!s)
                return cube__err_generic("out of host memory creating a stream");
        /* Creating a stream waits for nothing on the device. */
        d->cu->cuCtxSetCurrent(d->ctx);
        r = d->cu->cuStreamCreate(&s->stream, CU_STREAM_NON_BLOCKING);
        if (r == CUDA_SUCCESS &&
            (r = d->cu->cuStreamCreate(&s->bell, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS)
                d->cu->cuStreamDestroy(s->stream);
        if (r != CUDA_SUCCESS) {
                free(s);
                return cube__cuda_error(CUBE__CU_SITE_IO, r, 0, "cuStreamCreate");
        }
        pthread_mutex_lock(&d->lock);
        s->next = d->streams;
        d->streams = s;
        pthread_mutex_unlock(&d->lock);
        *ret_stream = s;
        return NULL;
}

static void cuda_stream_close(cube__device *d, cube__dstream *s)
{
        cmd *c = calloc(1, sizeof(*c));

        if (!c)
                return;
        c->kind = CMD_STREAM_CLOSE;
        c->stream = s;
        push_cmd(d, c);
}

static void cuda_submit(cube__device *d, cube__dstream *s, cube__work *w)
{
        cmd *c = calloc(1, sizeof(*c));

        if (!c) {
                for (cube__work *x = w; x; x = x->next)
                        if (!x->error && x->op != CUBE__WORK_FENCE)
                                x->error = cube__err_generic("out of host memory queueing work");
                d->config.complete(d->config.complete_ctx, w);
                return;
        }
        c->kind = CMD_SUBMIT;
        c->stream = s;
        c->work = w;
        push_cmd(d, c);
}

static void cuda_host_register(cube__device *d, void *addr, uint64_t len)
{
        cmd *c = calloc(1, sizeof(*c));

        if (!c)
                return;
        c->kind = CMD_REGISTER;
        c->addr = addr;
        c->len = len;
        push_cmd(d, c);
}

static void cuda_host_release(cube__device *d, void *addr, uint64_t len)
{
        cmd *c = calloc(1, sizeof(*c));

        if (!c) {
                munmap(addr, len);
                return;
        }
        c->kind = CMD_RELEASE_HOST;
        c->addr = addr;
        c->len = len;
        push_cmd(d, c);
}

static const char *cuda_target(cube__device *d)
{
        return d->target;
}

static cube_error *cuda_compile(cube__device *d, const cube__kernel_desc *desc, const char *path)
{
        const cube__nvrtc_api *nv;
        const char *why;

        if (cube__cuda_load_nvrtc(&nv, &why) < 0)
                return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(CUBE_LAUNCH_UNKNOWN,
                                      "cannot compile kernel '%s': %s", desc->entry, why));
        return cube__cuda_compile_confined(desc, d->arch, d->config.compile_cpu_s, path);
}

static cube_error *cuda_load(cube__device *d, const cube__kernel_desc *desc, const char *path,
                             cube__module **ret_module, uint32_t *ret_shared_bytes)
{
        cube__module *m = calloc(1, sizeof(*m));
        FILE *f = fopen(path, "rbe");
        char *image = NULL;
        long len = -1;
        int v;
        CUresult r;
        cube_error *e = NULL;

        if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
            (image = malloc((size_t) len)) && fread(image, 1, (size_t) len, f) != (size_t) len)
                len = -1;
        if (f)
                fclose(f);
        if (!m || !image || len <= 0) {
                e = cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(CUBE_LAUNCH_UNKNOWN,
                        "cannot read the compiled kernel '%s' at %s", desc->entry, path));
                goto fail;
        }
        d->cu->cuCtxSetCurrent(d->ctx);
        if ((r = d->cu->cuModuleLoadData(&m->module, image)) != CUDA_SUCCESS) {
                e = cube__cuda_error(CUBE__CU_SITE_MODULE, r, 0, "cuModuleLoadData");
                goto fail;
        }
        if ((r = d->cu->cuModuleGetFunction(&m->fn, m->module, desc->entry)) != CUDA_SUCCESS) {
                e = cube__cuda_error(CUBE__CU_SITE_MODULE, r, 0, "cuModuleGetFunction");
                goto fail;
        }
        /* What the compiled kernel needs, as the driver sees it. */
        d->cu->cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, m->fn);
        m->res.registers = (uint32_t) v;
        d->cu->cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, m->fn);
        m->res.shared_bytes = (uint32_t) v;
        d->cu->cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, m->fn);
        m->res.local_bytes = (uint32_t) v;
        d->cu->cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, m->fn);
        m->res.max_units = (uint32_t) v;
        if ((e = cube__cuda_check_stack(&m->res, desc->entry, d->resident_units,
                                        d->props.memory_bytes)))
                goto fail;
        if (desc->n_buffers && !(m->align = malloc(desc->n_buffers))) {
                e = cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(CUBE_LAUNCH_OUT_OF_MEMORY,
                                   "out of host memory loading '%s'", desc->entry));
                goto fail;
        }
        m->n_buffers = desc->n_buffers;
        m->facts = desc->facts;
        /* The front end's facts say each buffer's element size; a source
         * compiled without them is read for it. */
        if (desc->facts && desc->facts->n_buffers == m->n_buffers) {
                for (uint32_t i = 0; i < m->n_buffers; i++)
                        m->align[i] = (uint8_t) desc->facts->buffers[i].elem_bytes;
        } else if (desc->source) {
                cube__cuda_buffer_alignments(desc->source, desc->entry, m->align, m->n_buffers);
        } else {
                memset(m->align, 1, m->n_buffers);
        }
        free(image);
        *ret_shared_bytes = m->res.shared_bytes;
        *ret_module = m;
        return NULL;
fail:
        if (m && m->module)
                d->cu->cuModuleUnload(m->module);
        if (m)
                free(m->align);
        free(m);
        free(image);
        return e;
}

static void cuda_unload(cube__device *d, cube__module *m)
{
        if (!m)
                return;
        if (!poisoned(d)) {     /* a module a kernel still runs in holds the unload */
                d->cu->cuCtxSetCurrent(d->ctx);
                d->cu->cuModuleUnload(m->module);
        }
        free(m->align);
        free(m);
}

static uint32_t cuda_max_units(cube__device *d, cube__module *m)
{
        return m->res.max_units;
}

const cube__driver cube__driver_cuda = {
        .name = "cuda",
        .open = cuda_open,
        .close = cuda_close,
        .properties = cuda_properties,
        .alloc = cuda_alloc,
        .release = cuda_release,
        .host_view = NULL,
        .stream_open = cuda_stream_open,
        .stream_close = cuda_stream_close,
        .submit = cuda_submit,
        .artifact_ext = "cubin",
        .target = cuda_target,
        .compile = cuda_compile,
        .load = cuda_load,
        .unload = cuda_unload,
        .max_units = cuda_max_units,
        .host_register = cuda_host_register,
        .host_release = cuda_host_release,
        .orders_streams = true,
};

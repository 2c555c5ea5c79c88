/*
 * test-cuda-driver.c - the CUDA backend driven through its driver interface
 * (cube__driver_cuda), as the core drives it: open, memory, copies of every
 * path, streams, kernels compiled by NVRTC and launched, sticky faults,
 * kernels that never end, close and open again.
 *
 * In CI it runs against the driver's test double (tests/cuda-double), where
 * kernel bodies do not run: what it checks there is the backend's own
 * bookkeeping (order, staging, timing, poison, teardown), never a figure
 * of a GPU. On a GPU the same cases run on the real driver (tools/gpu-check),
 * and check the kernels' exact results too. Each case runs in a child of its own (Check's
 * fork mode), so a fault injected from the environment is its own.
 */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "driver.h"
#include "errors.h"
#include "frontend.h"
#include "internal.h"

static const cube__driver *drv = &cube__driver_cuda;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t done_cond = PTHREAD_COND_INITIALIZER;
static cube__work *done_list;

/* When set, work is freed as soon as it is handed back, as the core may:
 * counted, and its error dropped. */
static bool free_on_complete;
static unsigned freed, freed_errors;

static void complete(void *ctx, cube__work *w)
{
        (void) ctx;
        pthread_mutex_lock(&lock);
        if (free_on_complete) {
                for (cube__work *x = w, *next; x; x = next) {
                        next = x->next;
                        if (x->error)
                                freed_errors++;
                        cube_error_free(x->error);
                        memset(x, 0x5a, sizeof(*x));
                        free(x);
                        freed++;
                }
                pthread_cond_broadcast(&done_cond);
                pthread_mutex_unlock(&lock);
                return;
        }
        for (cube__work *x = w, *next; x; x = next) {
                next = x->next;
                x->next = done_list;
                done_list = x;
        }
        pthread_cond_broadcast(&done_cond);
        pthread_mutex_unlock(&lock);
}

static uint64_t now_ns(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t) ts.tv_sec * 1000000000ull + (uint64_t) ts.tv_nsec;
}

/* Waits up to ms for w to be handed back; false on timeout. */
static bool wait_for(cube__work *w, long ms)
{
        struct timespec until;
        bool found = false;

        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += ms / 1000;
        until.tv_nsec += (ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
        }
        pthread_mutex_lock(&lock);
        while (!found) {
                for (cube__work **pp = &done_list; *pp; pp = &(*pp)->next)
                        if (*pp == w) {
                                *pp = w->next;
                                w->next = NULL;
                                found = true;
                                break;
                        }
                if (!found && pthread_cond_timedwait(&done_cond, &lock, &until) != 0)
                        break;
        }
        pthread_mutex_unlock(&lock);
        return found;
}

static cube__device *open_device_limits(uint32_t timeout_ms, uint32_t compile_cpu_s)
{
        cube__device_config c = {
                .index = 0,
                .kernel_timeout_ms = timeout_ms,
                .compile_cpu_s = compile_cpu_s,
                .complete = complete,
                .loop_fd = -1,
        };
        cube__device *d = NULL;
        const char *why = NULL;
        int r = drv->open(&c, &d, &why);

        ck_assert_msg(r == 0, "open: %d %s", r, why ? why : "");
        return d;
}

static cube__device *open_device(uint32_t timeout_ms)
{
        return open_device_limits(timeout_ms, 0);
}

static cube__storage *alloc_ok(cube__device *d, uint64_t size)
{
        cube__storage *st = NULL;
        cube_error *e = drv->alloc(d, size, &st);

        ck_assert_msg(!e, "alloc: %s", e ? cube_error_message(e) : "");
        return st;
}

/* Runs one copy and waits for it; returns its error (the caller frees). */
static cube_error *copy(cube__device *d, cube__dstream *s, bool to_device, cube__storage *st,
                        uint64_t offset, void *host, uint64_t len)
{
        cube__work w = { .op = to_device ? CUBE__WORK_COPY_TO_DEVICE : CUBE__WORK_COPY_TO_HOST,
                         .storage = st, .offset = offset, .host = host, .len = len };

        drv->submit(d, s, &w);
        ck_assert_msg(wait_for(&w, 30000), "a copy of %llu bytes never completed",
                      (unsigned long long) len);
        return w.error;
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
        for (size_t i = 0; i < n; i++)
                p[i] = (uint8_t) (i * 131 + seed + (i >> 12));
}

static const char kernel_src[] =
        "KERNEL void scale(const float *in, float *out, INFO)\n"
        "{\n"
        "        uint64_t i = ABSOLUTE_POS;\n"
        "        out[i] = in[i] * 2.0f;\n"
        "}\n";

/* On a GPU these fault and never end; on the test double, whose kernels do
 * not run, the same is injected from the environment. */
static const char wild_src[] =
        "KERNEL void wild(const float *in, float *out, INFO)\n"
        "{\n"
        "        float *p = (float *) (uintptr_t) 0x10;\n"
        "        p[ABSOLUTE_POS] = in[0];\n"
        "        out[0] = 1.0f;\n"
        "}\n";
static const char spin_src[] =
        "KERNEL void spin(const float *in, float *out, INFO)\n"
        "{\n"
        "        volatile const float *v = in;\n"
        "        while (v[0] == 0.0f)\n"
        "                ;\n"
        "        out[0] = v[0];\n"
        "}\n";

/* Kernel bodies run: the driver is not the test double (which says so by
 * a symbol of its own). */
static bool real_gpu(void)
{
        void *dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        bool real = dl && !dlsym(dl, "cube_cuda_test_double");

        if (dl)
                dlclose(dl);
        return real;
}

typedef struct loaded {
        cube__module *module;
        char dir[64], path[128];
} loaded;

/* Compiles and loads a kernel; skips the case without NVRTC. */
static bool load_named(cube__device *d, loaded *k, const char *src, const char *entry)
{
        cube__kernel_desc desc = { .source = src, .entry = entry, .n_buffers = 2 };
        const cube__nvrtc_api *nv;
        const char *why;
        uint32_t shared = 0;
        cube_error *e;

        if (cube__cuda_load_nvrtc(&nv, &why) < 0) {
                printf("no NVRTC (%s): kernel cases skipped\n", why);
                return false;
        }
        strcpy(k->dir, "/tmp/cube-cudadrv-XXXXXX");
        ck_assert_ptr_nonnull(mkdtemp(k->dir));
        snprintf(k->path, sizeof(k->path), "%s/%s.cubin", k->dir, entry);
        e = drv->compile(d, &desc, k->path);
        ck_assert_msg(!e, "compile: %s", e ? cube_error_message(e) : "");
        e = drv->load(d, &desc, k->path, &k->module, &shared);
        ck_assert_msg(!e, "load: %s", e ? cube_error_message(e) : "");
        return true;
}

static bool load_kernel(cube__device *d, loaded *k)
{
        return load_named(d, k, kernel_src, "scale");
}

static void unload_kernel(cube__device *d, loaded *k)
{
        drv->unload(d, k->module);
        unlink(k->path);
        rmdir(k->dir);
}

/* Reads out back and, where kernels run, checks scale's exact result. */
static void expect_doubled(cube__device *d, cube__dstream *s, cube__storage *out,
                           const float *vin, int n)
{
        float *vout = calloc((size_t) n, sizeof(*vout));

        ck_assert_ptr_nonnull(vout);
        ck_assert_ptr_null(copy(d, s, false, out, 0, vout, (uint64_t) n * sizeof(*vout)));
        if (real_gpu())
                for (int i = 0; i < n; i++)
                        ck_assert_float_eq(vout[i], vin[i] * 2.0f);
        free(vout);
}

/* Releases what a launch case made, and closes the device. */
static void finish(cube__device *d, cube__dstream *s, cube__storage *in, cube__storage *out,
                   loaded *k)
{
        drv->release(d, in);
        drv->release(d, out);
        drv->stream_close(d, s);
        unload_kernel(d, k);
        drv->close(d);
}

/* A launch of scale over n floats of in and out, and its records. */
typedef struct launch {
        cube__launch_work l;
        cube__storage *sts[2];
        uint64_t offsets[2];
        uint64_t info[4];
        cube__work w;
} launch;

static void launch_init(launch *x, loaded *k, cube__storage *in, cube__storage *out, uint32_t n)
{
        const char *entry = strrchr(k->path, '/') + 1;
        static char name[64];
        snprintf(name, sizeof(name), "%.*s", (int) (strchr(entry, '.') - entry), entry);
        memset(x, 0, sizeof(*x));
        x->sts[0] = in;
        x->sts[1] = out;
        x->info[0] = n;
        x->l = (cube__launch_work) {
                .module = k->module, .kernel = name,
                .count = { (n + 255) / 256, 1, 1 }, .dim = { 256, 1, 1 },
                .n_buffers = 2, .storages = x->sts, .offsets = x->offsets,
                .info = x->info, .n_info = 4,
        };
        x->w.op = CUBE__WORK_LAUNCH;
        x->w.launch = &x->l;
}

/* ---- cases ------------------------------------------------------------ */

START_TEST(t_open_properties)
{
        cube__device *d = open_device(0);
        cube_device_properties p;

        drv->properties(d, &p);
        ck_assert_uint_gt(p.memory_bytes, 0);
        ck_assert_uint_eq(p.plane_size_min, 32);
        ck_assert_str_ne(drv->target(d), "");
        drv->close(d);
}
END_TEST

/* Copies of 4 KiB, 64 MiB and 256 MiB, from pageable memory (through the
 * bounce buffers) and from a registered region (one DMA), come back equal. */
START_TEST(t_copies_round_trip)
{
        static const uint64_t sizes[] = { 4096, 64ull << 20, (256ull << 20) + 4096 };
        cube__device *d = open_device(0);
        cube__dstream *s;

        ck_assert_ptr_null(drv->stream_open(d, &s));
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
                uint64_t n = sizes[i];
                cube__storage *st = alloc_ok(d, n);
                uint8_t *src = malloc(n), *dst = malloc(n);
                ck_assert(src && dst);
                fill(src, n, (unsigned) i);
                memset(dst, 0xee, n);
                ck_assert_ptr_null(copy(d, s, true, st, 0, src, n));
                ck_assert_ptr_null(copy(d, s, false, st, 0, dst, n));
                ck_assert_msg(memcmp(src, dst, n) == 0, "%llu bytes came back different",
                              (unsigned long long) n);
                free(src);
                free(dst);
                drv->release(d, st);
        }
        drv->stream_close(d, s);
        drv->close(d);
}
END_TEST

/* A driver that makes no more events: each piece of work is waited for as
 * it is issued, so that none is handed back before the device has done it.
 * A read into a registered region (one DMA) behind a slow launch would
 * otherwise come back before its bytes were there. */
START_TEST(t_work_without_events_completes_after_the_device)
{
        setenv("CUBE_CUDA_DOUBLE_LAUNCH_US", "200000", 1);
        /* The anchor's and the allocation's order mark, then none. */
        setenv("CUBE_CUDA_DOUBLE_FAIL_EVENT", "3", 1);
        cube__device *d = open_device(0);
        uint64_t n = 1u << 20;
        cube__storage *st = alloc_ok(d, n);
        uint8_t *src = malloc(n);
        uint8_t *dst = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        cube__dstream *s;
        cube_error *e;
        loaded k;
        launch x;

        ck_assert(src && dst != MAP_FAILED);
        if (!load_kernel(d, &k)) {
                drv->close(d);
                free(src);
                munmap(dst, n);
                return;
        }
        ck_assert_ptr_null(drv->stream_open(d, &s));
        drv->host_register(d, dst, n);
        fill(src, n, 7);
        memset(dst, 0xee, n);
        e = copy(d, s, true, st, 0, src, n);
        ck_assert_msg(!e, "the write: %s", e ? cube_error_message(e) : "");
        launch_init(&x, &k, st, st, 256);
        drv->submit(d, s, &x.w);
        e = copy(d, s, false, st, 0, dst, n);
        ck_assert_msg(!e, "the read: %s", e ? cube_error_message(e) : "");
        ck_assert_msg(memcmp(src, dst, n) == 0, "the read came back before the device had "
                      "copied its bytes");
        ck_assert_msg(wait_for(&x.w, 10000), "the launch never completed");
        free(src);
        drv->host_release(d, dst, n);
        drv->release(d, st);
        drv->stream_close(d, s);
        unload_kernel(d, &k);
        drv->close(d);
}
END_TEST

/* A staged copy of many bounce chunks runs at the speed of the copies: no
 * chunk waits for a completion thread asleep in its idle poll. 40 chunks
 * each way; a 200 ms sleep per 8 chunks would add 1.6 s. */
START_TEST(t_staged_copy_no_stall)
{
        uint64_t n = 320ull << 20, best = UINT64_MAX;
        cube__device *d = open_device(0);
        cube__dstream *s;
        cube__storage *st = alloc_ok(d, n);
        uint8_t *buf = malloc(n);

        ck_assert_ptr_nonnull(buf);
        fill(buf, n, 3);
        ck_assert_ptr_null(drv->stream_open(d, &s));
        for (int run = 0; run < 3; run++) {
                uint64_t t0 = now_ns();
                ck_assert_ptr_null(copy(d, s, true, st, 0, buf, n));
                ck_assert_ptr_null(copy(d, s, false, st, 0, buf, n));
                if (now_ns() - t0 < best)
                        best = now_ns() - t0;
        }
        if (real_gpu())
                printf("staged 2 x %llu MiB: %.0f ms (%.1f GB/s through the bounce buffers)\n",
                       (unsigned long long) (n >> 20), best / 1e6, 2.0 * (double) n / best);
        else
                printf("staged 2 x %llu MiB: %.0f ms (test double: says nothing of a GPU)\n",
                       (unsigned long long) (n >> 20), best / 1e6);
        const char *mult = getenv("CUBE_TEST_TIMEOUT_MULT");     /* sanitizers are slower */
        uint64_t limit = 1200000000ull * (uint64_t) (mult && atoi(mult) > 0 ? atoi(mult) : 1);
        ck_assert_msg(best < limit, "staged copies took %.0f ms", best / 1e6);
        free(buf);
        drv->release(d, st);
        drv->stream_close(d, s);
        drv->close(d);
}
END_TEST

/* A copy at an offset and a copy of rows into a pitched layout land where
 * they should. */
START_TEST(t_copies_offset_and_rows)
{
        cube__device *d = open_device(0);
        cube__dstream *s;
        cube__storage *st = alloc_ok(d, 1 << 16);
        uint8_t rows[4 * 100], back[1 << 16];

        ck_assert_ptr_null(drv->stream_open(d, &s));
        fill(rows, sizeof(rows), 9);
        cube__work w = { .op = CUBE__WORK_COPY_TO_DEVICE, .storage = st, .offset = 1000,
                         .host = rows, .len = 100, .rows = 4, .pitch = 256 };
        drv->submit(d, s, &w);
        ck_assert(wait_for(&w, 10000));
        ck_assert_ptr_null(w.error);
        ck_assert_ptr_null(copy(d, s, false, st, 0, back, sizeof(back)));
        for (int r = 0; r < 4; r++)
                ck_assert_mem_eq(back + 1000 + r * 256, rows + r * 100, 100);
        ck_assert_uint_eq(back[1000 + 100], 0);
        drv->release(d, st);
        drv->stream_close(d, s);
        drv->close(d);
}
END_TEST

/* Work of two streams on one storage runs in submission order: a write on
 * one stream, then a read of it submitted at once on another. */
START_TEST(t_cross_stream_order)
{
        uint64_t n = 24ull << 20;
        cube__device *d = open_device(0);
        cube__dstream *a, *b;
        cube__storage *st = alloc_ok(d, n);
        uint8_t *src = malloc(n), *dst = malloc(n);

        ck_assert(src && dst);
        ck_assert_ptr_null(drv->stream_open(d, &a));
        ck_assert_ptr_null(drv->stream_open(d, &b));
        fill(src, n, 5);
        cube__work w = { .op = CUBE__WORK_COPY_TO_DEVICE, .storage = st, .host = src, .len = n };
        cube__work r = { .op = CUBE__WORK_COPY_TO_HOST, .storage = st, .host = dst, .len = n };
        drv->submit(d, a, &w);
        drv->submit(d, b, &r);
        ck_assert(wait_for(&w, 30000));
        ck_assert(wait_for(&r, 30000));
        ck_assert_ptr_null(w.error);
        ck_assert_ptr_null(r.error);
        ck_assert(memcmp(src, dst, n) == 0);
        free(src);
        free(dst);
        drv->release(d, st);
        drv->stream_close(d, a);
        drv->stream_close(d, b);
        drv->close(d);
}
END_TEST

/* A copy from a region the driver would not pin still works (through the
 * bounce buffers), and the log says why copies from it are slower. */
START_TEST(t_register_refused)
{
        if (real_gpu())
                return;         /* a fault only the test double injects */
        char log[] = "/tmp/cube-cudadrv-log-XXXXXX", text[4096] = "";
        int fd = mkstemp(log), saved = dup(2);
        size_t len = 1 << 20;
        uint8_t back[4096];

        setenv("CUBE_CUDA_DOUBLE_FAIL_REGISTER", "1", 1);
        ck_assert_int_ge(fd, 0);
        dup2(fd, 2);
        cube__device *d = open_device(0);
        cube__dstream *s;
        uint8_t *region = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                               -1, 0);
        ck_assert_ptr_ne(region, MAP_FAILED);
        cube__storage *st = alloc_ok(d, 4096);
        ck_assert_ptr_null(drv->stream_open(d, &s));
        drv->host_register(d, region, len);
        fill(region, 4096, 7);
        ck_assert_ptr_null(copy(d, s, true, st, 0, region, 4096));
        ck_assert_ptr_null(copy(d, s, false, st, 0, back, 4096));
        ck_assert_mem_eq(back, region, 4096);
        drv->host_release(d, region, len);
        drv->release(d, st);
        drv->stream_close(d, s);
        drv->close(d);
        dup2(saved, 2);
        ck_assert_int_ge(pread(fd, text, sizeof(text) - 1, 0), 0);
        close(fd);
        unlink(log);
        ck_assert_msg(strstr(text, "cuMemHostRegister"), "no log line: '%s'", text);
}
END_TEST

/* The driver runs out of memory for an allocation the backend's own count
 * allowed: work on it fails with OutOfMemory, and the device lives on. */
START_TEST(t_alloc_out_of_memory)
{
        if (real_gpu())
                return;         /* a fault only the test double injects */
        setenv("CUBE_CUDA_DOUBLE_FAIL_ALLOC", "3", 1);  /* the info words, st1, st2 */
        cube__device *d = open_device(0);
        cube__dstream *s;
        cube__storage *ok = alloc_ok(d, 4096), *bad = alloc_ok(d, 4096);
        uint8_t buf[4096];

        ck_assert_ptr_null(drv->stream_open(d, &s));
        cube_error *e = copy(d, s, true, bad, 0, buf, sizeof(buf));
        ck_assert_ptr_nonnull(e);
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_SERVER_IO);
        ck_assert(!cube_error_is_device_poisoned(e));
        cube_error_free(e);
        ck_assert_ptr_null(copy(d, s, true, ok, 0, buf, sizeof(buf)));
        drv->release(d, ok);
        drv->release(d, bad);
        drv->stream_close(d, s);
        drv->close(d);
}
END_TEST

/* A launch passes the CUBIN's parameter table (count and sizes) and is
 * timed: start and end on CLOCK_MONOTONIC, inside the submit-to-completion
 * window. */
START_TEST(t_launch_timed)
{
        cube__device *d = open_device(0);
        cube__dstream *s;
        loaded k;
        launch x;

        if (!load_kernel(d, &k)) {
                drv->close(d);
                return;
        }
        cube__storage *in = alloc_ok(d, 4096), *out = alloc_ok(d, 4096);
        float vin[1024];
        ck_assert_ptr_null(drv->stream_open(d, &s));
        for (int i = 0; i < 1024; i++)
                vin[i] = (float) i * 0.5f - 7.0f;
        ck_assert_ptr_null(copy(d, s, true, in, 0, vin, sizeof(vin)));
        launch_init(&x, &k, in, out, 1024);
        uint64_t before = now_ns();
        drv->submit(d, s, &x.w);
        ck_assert(wait_for(&x.w, 10000));
        uint64_t after = now_ns();
        ck_assert_msg(!x.w.error, "launch: %s", cube_error_message(x.w.error));
        ck_assert_msg(x.w.start_ns && x.w.end_ns, "the launch was not timed");
        ck_assert_uint_le(x.w.start_ns, x.w.end_ns);
        ck_assert_msg(x.w.start_ns + 4000000 >= before && x.w.end_ns <= after + 4000000,
                      "timed at [%llu, %llu], outside [%llu, %llu]",
                      (unsigned long long) x.w.start_ns, (unsigned long long) x.w.end_ns,
                      (unsigned long long) before, (unsigned long long) after);
        expect_doubled(d, s, out, vin, 1024);
        finish(d, s, in, out, &k);
}
END_TEST

/* A binding at an offset a float cannot be loaded from is refused at the
 * launch (Validation, as the core's other binding checks), and the device
 * is not poisoned by it. */
START_TEST(t_misaligned_binding_refused)
{
        cube__device *d = open_device(0);
        cube__dstream *s;
        loaded k;
        launch x, y;

        if (!load_kernel(d, &k)) {
                drv->close(d);
                return;
        }
        cube__storage *in = alloc_ok(d, 8192), *out = alloc_ok(d, 8192);
        ck_assert_ptr_null(drv->stream_open(d, &s));
        launch_init(&x, &k, in, out, 256);
        x.offsets[0] = 3;
        drv->submit(d, s, &x.w);
        ck_assert(wait_for(&x.w, 10000));
        ck_assert_msg(x.w.error, "a float bound at byte 3 was launched");
        ck_assert_msg(cube_error_kind_of(x.w.error) == CUBE_SERVER_VALIDATION &&
                      !cube_error_is_device_poisoned(x.w.error), "%s",
                      cube_error_message(x.w.error));
        cube_error_free(x.w.error);
        launch_init(&y, &k, in, out, 256);
        y.offsets[0] = 4;
        drv->submit(d, s, &y.w);
        ck_assert(wait_for(&y.w, 10000));
        ck_assert_ptr_null(y.w.error);
        finish(d, s, in, out, &k);
}
END_TEST

/* A tensor map: the front end's checked form of a kernel with a TENSOR_MAP
 * parameter, launched with the map's words as the core lays them out. The
 * backend encodes the map through the driver (the test double checks the
 * arguments as the driver documents them, and the launch's parameters
 * against the CUBIN's), refuses a buffer the map cannot start at, and
 * reports what the driver refuses as the launch's Validation. On a GPU the
 * box is the Tensor Memory Accelerator's, and its contents are checked. */
static const char tmap_src[] =
        "KERNEL void tbox(float *out, TENSOR_MAP(float) src, int32_t x, int32_t y)\n"
        "{\n"
        "        SHARED float tile[32];\n"
        "\n"
        "        tensor_map_load(src, tile, x, y);\n"
        "        out[UNIT_POS] = tile[UNIT_POS];\n"
        "}\n";

enum { TM_W = 12, TM_H = 5, TM_WORDS = 1 + CUBE__TMAP_WORDS + 2 + CUBE__CHECK_TAIL_WORDS };

typedef struct tmap_launch {
        cube__launch_work l;
        cube__storage *sts[2];
        uint64_t offsets[2];
        uint64_t info[TM_WORDS];
        cube__work w;
} tmap_launch;

/* box { 8, 4 } of a TM_W x TM_H float tensor at (x, y) = (-2, 3), written to
 * out[0..31]. */
static void tmap_init(tmap_launch *x, cube__module *m, cube__storage *out, cube__storage *src,
                      uint64_t src_at, uint32_t box0)
{
        uint64_t *w = x->info + 1;

        memset(x, 0, sizeof(*x));
        x->sts[0] = out;
        x->sts[1] = src;
        x->offsets[1] = src_at;
        /* the scalars: x, y as i32 in word 0 */
        x->info[0] = (uint32_t) -2 | (uint64_t) 3 << 32;
        w[CUBE__TMAP_RANK] = 2;
        w[CUBE__TMAP_ELEM_BYTES] = 4;
        w[CUBE__TMAP_ELEM] = CUBE_ELEM_F32;
        for (int i = 0; i < 5; i++) {
                w[CUBE__TMAP_SHAPE + i] = 1;
                w[CUBE__TMAP_BOX + i] = 1;
                w[CUBE__TMAP_ELEM_STRIDES + i] = 1;
        }
        w[CUBE__TMAP_SHAPE] = TM_W;
        w[CUBE__TMAP_SHAPE + 1] = TM_H;
        w[CUBE__TMAP_STRIDES] = 1;
        w[CUBE__TMAP_STRIDES + 1] = TM_W;
        w[CUBE__TMAP_BOX] = box0;
        w[CUBE__TMAP_BOX + 1] = 4;
        x->info[1 + CUBE__TMAP_WORDS] = 32 * sizeof(float);
        x->info[2 + CUBE__TMAP_WORDS] = TM_W * TM_H * sizeof(float) | CUBE__CHECK_READ_ONLY;
        x->l = (cube__launch_work) {
                .module = m, .kernel = "tbox", .count = { 1, 1, 1 }, .dim = { 32, 1, 1 },
                .n_buffers = 2, .storages = x->sts, .offsets = x->offsets, .info = x->info,
                .n_info = TM_WORDS, .metadata_offset = 1, .dynamic_offset = 1,
                .n_tensor_maps = 1,
        };
        x->w.op = CUBE__WORK_LAUNCH;
        x->w.launch = &x->l;
}

START_TEST(t_tensor_map_encoded_and_bound)
{
        cube__device *d = open_device(0);
        char *checked = NULL, *facts = NULL, *why = NULL;
        cube__dstream *s;
        tmap_launch x;
        loaded k;

        ck_assert_int_eq(cube__frontend_run(tmap_src, "tbox", &checked, &facts, &why),
                         CUBE__FE_OK);
        cube__fe_facts *f = cube__fe_facts_parse(facts, "tbox");
        ck_assert_ptr_nonnull(f);
        ck_assert(f->n_buffers == 2 && f->buffers[1].tensor_map);
        if (!load_named(d, &k, checked, "tbox")) {
                cube__fe_facts_free(f);
                free(checked);
                free(facts);
                drv->close(d);
                return;
        }
        cube__storage *out = alloc_ok(d, 4096), *src = alloc_ok(d, 4096);
        float t[TM_W * TM_H + 4], got[32];
        for (int i = 0; i < TM_W * TM_H + 4; i++)
                t[i] = (float) (i + 1);
        ck_assert_ptr_null(drv->stream_open(d, &s));
        ck_assert_ptr_null(copy(d, s, true, src, 0, t, sizeof(t)));

        tmap_init(&x, k.module, out, src, 0, 8);
        drv->submit(d, s, &x.w);
        ck_assert(wait_for(&x.w, 10000));
        ck_assert_msg(!x.w.error, "launch: %s", cube_error_message(x.w.error));
        ck_assert_ptr_null(copy(d, s, false, out, 0, got, sizeof(got)));
        for (int j = 0; real_gpu() && j < 4; j++)
                for (int i = 0; i < 8; i++) {
                        int gx = i - 2, gy = j + 3;
                        float want = gx >= 0 && gy < TM_H ? t[gy * TM_W + gx] : 0.0f;
                        ck_assert_float_eq(got[j * 8 + i], want);
                }

        /* A buffer bound 8 bytes in: no tensor map starts there. */
        tmap_init(&x, k.module, out, src, 8, 8);
        drv->submit(d, s, &x.w);
        ck_assert(wait_for(&x.w, 10000));
        ck_assert_msg(x.w.error && cube_error_kind_of(x.w.error) == CUBE_SERVER_VALIDATION &&
                      strstr(cube_error_message(x.w.error), "multiple of 16 bytes"), "%s",
                      x.w.error ? cube_error_message(x.w.error) : "launched");
        cube_error_free(x.w.error);

        /* A box of 12 bytes per row: the driver refuses the map. */
        tmap_init(&x, k.module, out, src, 0, 3);
        drv->submit(d, s, &x.w);
        ck_assert(wait_for(&x.w, 10000));
        ck_assert_msg(x.w.error && cube_error_kind_of(x.w.error) == CUBE_SERVER_VALIDATION &&
                      strstr(cube_error_message(x.w.error), "the driver refused tensor map 0"),
                      "%s", x.w.error ? cube_error_message(x.w.error) : "launched");
        ck_assert(!cube_error_is_device_poisoned(x.w.error));
        cube_error_free(x.w.error);
        cube__fe_facts_free(f);
        free(checked);
        free(facts);
        finish(d, s, src, out, &k);
}
END_TEST

/* Work handed back may be freed at once: the backend reads nothing of a
 * launch or a copy once it could have been handed back (the storages it
 * orders, a copy's length). Each piece here is freed, poisoned, on
 * completion. */
typedef struct heap_launch {
        cube__work w;                   /* first: freeing it frees all */
        cube__launch_work l;
        cube__storage *sts[2];
        uint64_t offsets[2];
        uint64_t info[4];
} heap_launch;

START_TEST(t_work_freed_on_completion)
{
        setenv("CUBE_CUDA_DOUBLE_LAUNCH_US", "0", 1);
        /* A driver slow to record: a launch completes while its storages'
         * order is still being recorded. */
        setenv("CUBE_CUDA_DOUBLE_RECORD_US", "3000", 1);
        cube__device *d = open_device(0);
        cube__dstream *a, *b;
        uint64_t big = 20ull << 20;
        uint8_t *src = calloc(1, big), *dst = calloc(1, big);
        unsigned sent = 0;
        loaded k;

        ck_assert(src && dst);
        if (!load_kernel(d, &k)) {
                drv->close(d);
                free(src);
                free(dst);
                return;
        }
        cube__storage *in = alloc_ok(d, big), *out = alloc_ok(d, big);
        ck_assert_ptr_null(drv->stream_open(d, &a));
        ck_assert_ptr_null(drv->stream_open(d, &b));
        free_on_complete = true;
        for (int i = 0; i < 60; i++) {
                heap_launch *x = calloc(1, sizeof(*x));
                cube__work *c = calloc(1, sizeof(*c));
                ck_assert(x && c);
                x->sts[0] = in;
                x->sts[1] = out;
                x->info[0] = 256;
                x->l = (cube__launch_work) {
                        .module = k.module, .kernel = "scale", .count = { 1, 1, 1 },
                        .dim = { 256, 1, 1 }, .n_buffers = 2, .storages = x->sts,
                        .offsets = x->offsets, .info = x->info, .n_info = 4,
                };
                x->w.op = CUBE__WORK_LAUNCH;
                x->w.launch = &x->l;
                *c = (cube__work) { .op = i % 2 ? CUBE__WORK_COPY_TO_DEVICE :
                                                  CUBE__WORK_COPY_TO_HOST,
                                    .storage = i % 3 ? in : out, .host = i % 2 ? src : dst,
                                    .len = i % 8 ? 4096 : big };
                drv->submit(d, i % 2 ? a : b, &x->w);
                drv->submit(d, i % 2 ? b : a, c);
                sent += 2;
        }
        pthread_mutex_lock(&lock);
        while (freed < sent) {
                struct timespec until;
                clock_gettime(CLOCK_REALTIME, &until);
                until.tv_sec += 30;
                if (pthread_cond_timedwait(&done_cond, &lock, &until) != 0)
                        break;
        }
        unsigned got = freed, errors = freed_errors;
        pthread_mutex_unlock(&lock);
        ck_assert_uint_eq(got, sent);
        ck_assert_uint_eq(errors, 0);
        drv->release(d, in);
        drv->release(d, out);
        drv->stream_close(d, a);
        drv->stream_close(d, b);
        unload_kernel(d, &k);
        drv->close(d);
        free(src);
        free(dst);
}
END_TEST

/* A sticky fault poisons the device naming the kernel; close returns at
 * once, and the process cannot open the device again (cubed starts afresh:
 * test-failures, a_device_fault_under_reinit_serves_a_fresh_device). */
START_TEST(t_sticky_fault_poisons_for_the_process)
{
        setenv("CUBE_CUDA_DOUBLE_FAULT_LAUNCH", "1", 1);
        cube__device *d = open_device(0);
        cube__dstream *s;
        loaded k;
        launch x;

        if (!load_named(d, &k, wild_src, "wild")) {
                drv->close(d);
                return;
        }
        cube__storage *in = alloc_ok(d, 4096), *out = alloc_ok(d, 64ull << 20);
        ck_assert_ptr_null(drv->stream_open(d, &s));
        launch_init(&x, &k, in, out, 1024);
        drv->submit(d, s, &x.w);
        ck_assert(wait_for(&x.w, 10000));
        ck_assert_ptr_nonnull(x.w.error);
        ck_assert_msg(cube_error_is_device_poisoned(x.w.error), "%s",
                      cube_error_message(x.w.error));
        ck_assert_msg(strstr(cube_error_message(x.w.error), "wild"), "%s",
                      cube_error_message(x.w.error));
        cube_error_free(x.w.error);
        /* Later work fails at once with the same poison. */
        uint8_t buf[64];
        cube_error *e = copy(d, s, false, in, 0, buf, sizeof(buf));
        ck_assert(e && cube_error_is_device_poisoned(e));
        cube_error_free(e);
        drv->release(d, in);
        drv->release(d, out);
        drv->stream_close(d, s);
        uint64_t t0 = now_ns();
        unload_kernel(d, &k);
        drv->close(d);
        ck_assert_uint_lt(now_ns() - t0, 3000000000ull);

        /* The process cannot have the device again (a GPU keeps the fault
         * until the process ends): the open says so, and cubed starts
         * afresh. */
        cube__device_config c = { .index = 0, .complete = complete, .loop_fd = -1 };
        const char *why = NULL;
        d = NULL;
        ck_assert_int_eq(drv->open(&c, &d, &why), -EAGAIN);
        ck_assert_ptr_null(d);
        ck_assert_msg(why && strstr(why, "start the process again"), "%s", why ? why : "");
}
END_TEST

/* A kernel that never ends is stopped by the kernel timeout: its launch
 * fails with a poison naming it, and close does not wait on it. */
START_TEST(t_never_ending_kernel)
{
        setenv("CUBE_CUDA_DOUBLE_HANG_LAUNCH", "1", 1);
        cube__device *d = open_device(300);
        cube__dstream *s;
        loaded k;
        launch x;

        if (!load_named(d, &k, spin_src, "spin")) {
                drv->close(d);
                return;
        }
        cube__storage *in = alloc_ok(d, 4096), *out = alloc_ok(d, 4096);
        ck_assert_ptr_null(drv->stream_open(d, &s));
        launch_init(&x, &k, in, out, 1024);
        uint64_t t0 = now_ns();
        drv->submit(d, s, &x.w);
        ck_assert_msg(wait_for(&x.w, 5000), "a never-ending kernel was never stopped");
        ck_assert_ptr_nonnull(x.w.error);
        ck_assert_msg(cube_error_is_device_poisoned(x.w.error) &&
                      strstr(cube_error_message(x.w.error), "spin"), "%s",
                      cube_error_message(x.w.error));
        ck_assert_uint_ge(now_ns() - t0, 300000000ull);
        cube_error_free(x.w.error);
        drv->release(d, in);
        drv->release(d, out);
        drv->stream_close(d, s);
        drv->unload(d, k.module);
        t0 = now_ns();
        drv->close(d);
        ck_assert_uint_lt(now_ns() - t0, 3000000000ull);
        unlink(k.path);
        rmdir(k.dir);
}
END_TEST

/* A driver older than the headers the backend was built with, but with
 * every entry it calls, is used at its own version; one older than that is
 * refused with a line that says so. */
START_TEST(t_older_driver)
{
        if (real_gpu())
                return;         /* a fault only the test double injects */
        setenv("CUBE_CUDA_DOUBLE_VERSION", "12040", 1);
        cube__device *d = open_device(0);
        drv->close(d);
}
END_TEST

START_TEST(t_ancient_driver)
{
        if (real_gpu())
                return;         /* a fault only the test double injects */
        cube__device_config c = { .complete = complete, .loop_fd = -1 };
        cube__device *d = NULL;
        const char *why = NULL;

        setenv("CUBE_CUDA_DOUBLE_VERSION", "11080", 1);
        ck_assert_int_lt(drv->open(&c, &d, &why), 0);
        ck_assert_msg(why && strstr(why, "11.8") && strstr(why, "upgrade"), "%s", why);
}
END_TEST

/* Compiling: a source NVRTC rejects is a refusal with the compiler's log;
 * one that runs the compiler past its CPU limit is stopped there, outside
 * cubed, and refused; a missing NVRTC is a defect, never a refusal. */
static cube_error *compile_source(cube__device *d, const char *src, const char *entry)
{
        cube__kernel_desc desc = { .source = src, .entry = entry, .n_buffers = 2 };
        char dir[] = "/tmp/cube-cudadrv-XXXXXX", path[128];
        cube_error *e;

        ck_assert_ptr_nonnull(mkdtemp(dir));
        snprintf(path, sizeof(path), "%s/k.cubin", dir);
        e = drv->compile(d, &desc, path);
        unlink(path);
        rmdir(dir);
        return e;
}

static bool have_nvrtc(void)
{
        const cube__nvrtc_api *nv;
        const char *why;
        return cube__cuda_load_nvrtc(&nv, &why) == 0;
}

START_TEST(t_compile_error_refused)
{
        cube__device *d = open_device(0);

        if (have_nvrtc()) {
                cube_error *e = compile_source(d, "KERNEL void bad(const float *in, float *out, "
                                               "INFO) { out[0] = no_such_thing; }\n", "bad");
                ck_assert_ptr_nonnull(e);
                ck_assert_msg(cube_error_is_refusal(e) && strstr(cube_error_message(e),
                                                                 "no_such_thing"),
                              "%s", cube_error_message(e));
                cube_error_free(e);
        }
        drv->close(d);
}
END_TEST

START_TEST(t_compiler_bomb_stopped)
{
        cube__device *d = open_device_limits(0, 2);
        char src[8192];
        size_t n = (size_t) snprintf(src, sizeof(src), "#define B0 x = x + 1;\n");

        for (int i = 1; i <= 40; i++)
                n += (size_t) snprintf(src + n, sizeof(src) - n, "#define B%d B%d B%d\n", i,
                                       i - 1, i - 1);
        snprintf(src + n, sizeof(src) - n, "KERNEL void bomb(const float *in, float *out, INFO)\n"
                 "{\n        uint32_t x = 0;\n        B40\n        out[0] = x;\n}\n");
        if (have_nvrtc()) {
                uint64_t t0 = now_ns();
                cube_error *e = compile_source(d, src, "bomb");
                ck_assert_ptr_nonnull(e);
                ck_assert_msg(cube_error_is_refusal(e) && strstr(cube_error_message(e), "2 s"),
                              "%s", cube_error_message(e));
                ck_assert_uint_lt(now_ns() - t0, 20000000000ull);
                cube_error_free(e);
        }
        drv->close(d);
}
END_TEST

START_TEST(t_missing_nvrtc_is_a_defect)
{
        setenv("CUBE_NVRTC", "/nonexistent/libnvrtc.so", 1);
        cube__device *d = open_device(0);
        cube_error *e = compile_source(d, kernel_src, "scale");

        ck_assert_ptr_nonnull(e);
        ck_assert_msg(!cube_error_is_refusal(e) && strstr(cube_error_message(e), "NVRTC"), "%s",
                      cube_error_message(e));
        cube_error_free(e);
        drv->close(d);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("cuda-driver");
        TCase *tc = tcase_create("backend");

        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, t_open_properties);
        tcase_add_test(tc, t_older_driver);
        tcase_add_test(tc, t_ancient_driver);
        tcase_add_test(tc, t_copies_round_trip);
        tcase_add_test(tc, t_work_without_events_completes_after_the_device);
        tcase_add_test(tc, t_staged_copy_no_stall);
        tcase_add_test(tc, t_copies_offset_and_rows);
        tcase_add_test(tc, t_cross_stream_order);
        tcase_add_test(tc, t_register_refused);
        tcase_add_test(tc, t_alloc_out_of_memory);
        tcase_add_test(tc, t_launch_timed);
        tcase_add_test(tc, t_misaligned_binding_refused);
        tcase_add_test(tc, t_tensor_map_encoded_and_bound);
        tcase_add_test(tc, t_sticky_fault_poisons_for_the_process);
        tcase_add_test(tc, t_never_ending_kernel);
        tcase_add_test(tc, t_work_freed_on_completion);
        tcase_add_test(tc, t_compile_error_refused);
        tcase_add_test(tc, t_compiler_bomb_stopped);
        tcase_add_test(tc, t_missing_nvrtc_is_a_defect);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        void *dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        SRunner *sr;
        int failed;

        if (!dl) {
                printf("SKIP: no libcuda.so.1 (the test double's folder is not on the path)\n");
                return 77;
        }
        dlclose(dl);
        sr = srunner_create(suite());
        srunner_run_all(sr, CK_NORMAL);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? 1 : 0;
}

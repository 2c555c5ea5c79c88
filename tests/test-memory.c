/*
 * test-memory.c - device memory and staging end to end: the per-stream pools
 * (sliced pages, exclusive pages reused by size, persistent and dedicated
 * allocation modes), their reports field by field, cleanup and the reclaim
 * that follows a full device, the size errors (OutOfMemory, BufferTooBig,
 * PageSizesExhausted), pitched tensors and strided copies, batches of tensors
 * in one allocation (the layout policy), staging regions,
 * and the transparent staging of copies larger than one message.
 *
 * Every test starts its own cubed (with the options its test case needs) and
 * ends by stopping it with SIGTERM, which must exit 0 and remove the socket.
 */
#include <check.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "errors.h"
#include "wire.h"

#define KiB ((uint64_t) 1 << 10)
#define MiB ((uint64_t) 1 << 20)
#define LEN(a) (sizeof(a) / sizeof((a)[0]))

enum { P_SLICED, P_EXCLUSIVE, P_PERSISTENT, P_DEDICATED };

static void start(const char *const *args)
{
        ck_assert_int_eq(test_daemon_start(&D, args), 0);
}

static void start_64m(void)
{
        static const char *const args[] = { "--memory-limit", "64M", NULL };
        start(args);
}

static void start_1g(void)
{
        static const char *const args[] = { "--memory-limit", "1G", NULL };
        start(args);
}

static void start_default(void)
{
        start(NULL);
}

static void start_region_4m(void)
{
        static const char *const args[] = { "--memory-limit", "64M", "--region-memory", "4M",
                                            NULL };
        start(args);
}

static void start_message_16m(void)
{
        static const char *const args[] = { "--max-message", "16M", NULL };
        start(args);
}

/* ---------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------- */

static void mode(cube_client *c, cube_allocation_mode m)
{
        ck_ok(cube_set_allocation_mode(c, m));
}

static cube_memory_report report_of(cube_client *c, uint64_t stream)
{
        cube_memory_report r;
        bool exists = false;

        memset(&r, 0, sizeof(r));
        ck_ok(cube_stream_memory_report(c, stream, &exists, &r));
        ck_assert_msg(exists, "stream %" PRIu64 " has no report", stream);
        ck_assert_uint_eq(r.stream, stream);
        ck_assert_uint_eq(r.session, cube_client_session(c));
        ck_assert_uint_eq(r.n_pools, 4);
        ck_assert_str_eq(r.pools[P_SLICED].kind, "sliced");
        ck_assert_str_eq(r.pools[P_EXCLUSIVE].kind, "exclusive");
        ck_assert_str_eq(r.pools[P_PERSISTENT].kind, "persistent");
        ck_assert_str_eq(r.pools[P_DEDICATED].kind, "dedicated");
        return r;
}

/* Every field of one pool, exactly. */
#define expect_pool(rep, i, page_size_, max_slice_, allocations_, in_use_, padding_, reserved_, \
                    pages_, peak_, largest_) do { \
        const cube_pool_report *p_ = &(rep).pools[i]; \
        ck_assert_msg(p_->page_size == (page_size_) && p_->max_slice == (max_slice_) && \
                      p_->allocations == (allocations_) && p_->bytes_in_use == (in_use_) && \
                      p_->bytes_padding == (padding_) && p_->bytes_reserved == (reserved_) && \
                      p_->pages == (pages_) && p_->pages_peak == (peak_) && \
                      p_->largest_alloc == (largest_), \
                      "pool %s at line %d: page_size %" PRIu64 " max_slice %" PRIu64 \
                      " allocations %" PRIu64 " in_use %" PRIu64 " padding %" PRIu64 \
                      " reserved %" PRIu64 " pages %" PRIu64 " peak %" PRIu64 " largest %" PRIu64 \
                      "; expected %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64 \
                      " %" PRIu64 " %" PRIu64 " %" PRIu64 " %" PRIu64, p_->kind, __LINE__, \
                      p_->page_size, p_->max_slice, p_->allocations, p_->bytes_in_use, \
                      p_->bytes_padding, p_->bytes_reserved, p_->pages, p_->pages_peak, \
                      p_->largest_alloc, (uint64_t) (page_size_), (uint64_t) (max_slice_), \
                      (uint64_t) (allocations_), (uint64_t) (in_use_), (uint64_t) (padding_), \
                      (uint64_t) (reserved_), (uint64_t) (pages_), (uint64_t) (peak_), \
                      (uint64_t) (largest_)); \
} while (0)

/* A pool nothing was ever taken from (the sliced pool keeps its geometry). */
#define expect_untouched(rep, i) do { \
        bool sliced_ = (i) == P_SLICED; \
        expect_pool(rep, i, sliced_ ? (rep).pools[P_SLICED].page_size : 0, \
                    sliced_ ? 64 * KiB : 0, 0, 0, 0, 0, 0, 0, 0); \
} while (0)

/* Asserts that e is Several of one Unwritten whose root is
 * ServerIo(io_kind{size}), and frees it. */
static void expect_io_failure(cube_error *e, cube_error_kind io_kind, uint64_t size,
                              bool may_succeed)
{
        const cube_error *u, *io, *leaf;

        ck_assert_msg(e != NULL, "the memory reads as fine; IoError kind %d was expected",
                      (int) io_kind);
        ck_assert_msg(cube_error_kind_of(e) == CUBE_SERVER_SEVERAL, "expected Several, got %s: %s",
                      cube_error_variant(e), cube_error_message(e));
        ck_assert_uint_eq(cube_error_count(e), 1);
        u = cube_error_at(e, 0);
        ck_assert_int_eq(cube_error_kind_of(u), CUBE_SERVER_UNWRITTEN);
        io = cube_error_source(u);
        ck_assert_ptr_nonnull(io);
        ck_assert_msg(cube_error_kind_of(io) == CUBE_SERVER_IO, "the root is %s: %s",
                      cube_error_variant(io), cube_error_message(e));
        leaf = cube_error_source(io);
        ck_assert_ptr_nonnull(leaf);
        ck_assert_msg(cube_error_kind_of(leaf) == io_kind, "the IoError is %s, not kind %d: %s",
                      cube_error_variant(leaf), (int) io_kind, cube_error_message(e));
        if (io_kind != CUBE_IO_UNSUPPORTED_STRIDES)
                ck_assert_uint_eq(cube_error_size(leaf), size);
        ck_assert(cube_error_may_succeed_after_reclaim(io) == may_succeed);
        ck_assert(cube_error_may_succeed_after_reclaim(leaf) == may_succeed);
        cube_error_free(e);
}

/* Asserts that e is ServerIo(io_kind{size}) itself, and frees it. */
static void expect_io_error(cube_error *e, cube_error_kind io_kind, uint64_t size)
{
        ck_assert_msg(e != NULL, "the call succeeded; IoError kind %d was expected", (int) io_kind);
        ck_assert_msg(cube_error_kind_of(e) == CUBE_SERVER_IO, "expected ServerIo, got %s: %s",
                      cube_error_variant(e), cube_error_message(e));
        ck_assert_ptr_nonnull(cube_error_source(e));
        ck_assert_msg(cube_error_kind_of(cube_error_source(e)) == io_kind, "the IoError is %s: %s",
                      cube_error_variant(cube_error_source(e)), cube_error_message(e));
        if (io_kind != CUBE_IO_UNSUPPORTED_STRIDES)
                ck_assert_uint_eq(cube_error_size(cube_error_source(e)), size);
        cube_error_free(e);
}

/* Asserts that e is a Validation error whose message holds needle. */
static void expect_validation(cube_error *e, const char *needle)
{
        ck_assert_msg(e != NULL, "the call succeeded; a Validation error was expected");
        ck_assert_msg(cube_error_kind_of(e) == CUBE_SERVER_VALIDATION,
                      "expected Validation, got %s: %s", cube_error_variant(e),
                      cube_error_message(e));
        ck_assert_msg(strstr(cube_error_reason(e), needle), "\"%s\" does not say \"%s\"",
                      cube_error_reason(e), needle);
        cube_error_free(e);
}

/* A pattern that differs for every 8 bytes and every seed, fast to make and
 * to check at hundreds of MiB. */
static uint64_t mix(uint64_t x)
{
        x += 0x9e3779b97f4a7c15ull;
        x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
        x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
        return x ^ (x >> 31);
}

static void pattern(void *buf, uint64_t n, uint64_t seed)
{
        unsigned char *p = buf;

        for (uint64_t i = 0; i < n; i += 8) {
                uint64_t v = mix(seed * 0x100000001b3ull + i / 8);
                memcpy(p + i, &v, n - i < 8 ? n - i : 8);
        }
}

/* The first byte that differs from the pattern, or n. */
static uint64_t pattern_mismatch(const void *buf, uint64_t n, uint64_t seed)
{
        const unsigned char *p = buf;

        for (uint64_t i = 0; i < n; i += 8) {
                uint64_t v = mix(seed * 0x100000001b3ull + i / 8);
                uint64_t k = n - i < 8 ? n - i : 8;
                if (memcmp(p + i, &v, k) != 0) {
                        for (uint64_t j = 0; j < k; j++)
                                if (p[i + j] != ((unsigned char *) &v)[j])
                                        return i + j;
                }
        }
        return n;
}

static void expect_pattern(const void *buf, uint64_t n, uint64_t seed)
{
        uint64_t at = pattern_mismatch(buf, n, seed);

        ck_assert_msg(at == n, "byte %" PRIu64 " of %" PRIu64 " differs from pattern %" PRIu64,
                      at, n, seed);
}

/* Reads h through the socket and checks it holds the pattern. */
static void expect_read_pattern(cube_client *c, const cube_handle *h, uint64_t seed)
{
        uint64_t n = cube_handle_len(h);
        void *got = malloc(n ? n : 1);

        ck_assert_ptr_nonnull(got);
        ck_ok(cube_read(c, h, got, n));
        expect_pattern(got, n, seed);
        free(got);
}

static void write_pattern(cube_client *c, const cube_handle *h, uint64_t seed)
{
        uint64_t n = cube_handle_len(h);
        void *data = malloc(n ? n : 1);

        ck_assert_ptr_nonnull(data);
        pattern(data, n, seed);
        ck_ok(cube_write(c, h, data, n));
        free(data);
}

static cube_status status(cube_client *c)
{
        cube_status st;

        ck_ok(cube_daemon_status(c, &st));
        return st;
}

/* How many staging regions the daemon has mapped now. */
static int daemon_regions(void)
{
        char path[64], line[512];
        FILE *f;
        int n = 0;

        snprintf(path, sizeof(path), "/proc/%d/maps", (int) D.pid);
        f = fopen(path, "r");
        ck_assert_msg(f != NULL, "cannot read %s", path);
        while (fgets(line, sizeof(line), f))
                if (strstr(line, "/memfd:cube-region"))
                        n++;
        fclose(f);
        return n;
}

/* Waits for the daemon to map want regions: a backend that pins regions
 * (CUDA) unmaps a freed one on its own thread, a moment after the answer. */
static bool wait_daemon_regions(int want, int timeout_ms)
{
        for (int waited = 0;; waited += 10) {
                if (daemon_regions() == want)
                        return true;
                if (waited >= timeout_ms)
                        return false;
                usleep(10000);
        }
}

/* ---------------------------------------------------------------------------
 * Pools (a 64 MiB device: sliced pages are 64 MiB / 64 = 1 MiB)
 * ------------------------------------------------------------------------- */

START_TEST(small_allocations_share_one_sliced_page)
{
        cube_client *c = test_connect(D.socket, "sliced");
        uint64_t s = cube_stream_current();
        cube_memory_report r;
        cube_handle h[20];
        int n = 0;

        ck_assert_uint_eq(cube_client_properties(c)->alignment, 64);
        h[n++] = test_empty(c, 100);        /* 128 with its padding */
        h[n++] = test_empty(c, 1000);       /* 1024 */
        h[n++] = test_empty(c, 64 * KiB);   /* the largest slice */
        ck_assert_uint_eq(h[0].stream, s);
        r = report_of(c, s);
        expect_pool(r, P_SLICED, 1 * MiB, 64 * KiB, 3, 100 + 1000 + 64 * KiB, 28 + 24, 1 * MiB,
                    1, 1, 64 * KiB);
        expect_untouched(r, P_EXCLUSIVE);
        expect_untouched(r, P_PERSISTENT);
        expect_untouched(r, P_DEDICATED);

        /* 128 + 1024 + 15 slices of 64 KiB fill all but 64384 bytes of it. */
        while (n < 17)
                h[n++] = test_empty(c, 64 * KiB);
        r = report_of(c, s);
        expect_pool(r, P_SLICED, 1 * MiB, 64 * KiB, 17, 1100 + 15 * 64 * KiB, 52, 1 * MiB, 1, 1,
                    64 * KiB);
        /* The rest holds 64384 bytes exactly, and no more. */
        h[n++] = test_empty(c, 64384);
        r = report_of(c, s);
        expect_pool(r, P_SLICED, 1 * MiB, 64 * KiB, 18, 1100 + 15 * 64 * KiB + 64384, 52, 1 * MiB,
                    1, 1, 64 * KiB);
        h[n++] = test_empty(c, 1);
        r = report_of(c, s);
        expect_pool(r, P_SLICED, 1 * MiB, 64 * KiB, 19, 1101 + 15 * 64 * KiB + 64384, 52 + 63,
                    2 * MiB, 2, 2, 64 * KiB);

        /* A freed slice is taken again, first fit: no page is added. */
        ck_ok(cube_free(c, &h[1]));
        h[1] = test_empty(c, 1024);
        r = report_of(c, s);
        expect_pool(r, P_SLICED, 1 * MiB, 64 * KiB, 19, 1125 + 15 * 64 * KiB + 64384, 28 + 63,
                    2 * MiB, 2, 2, 64 * KiB);

        /* Every slice holds its own bytes. */
        for (int i = 0; i < n; i++)
                write_pattern(c, &h[i], 100 + (uint64_t) i);
        for (int i = 0; i < n; i++)
                expect_read_pattern(c, &h[i], 100 + (uint64_t) i);

        /* Freed, the pages stay until a cleanup. */
        for (int i = 0; i < n; i++)
                ck_ok(cube_free(c, &h[i]));
        r = report_of(c, s);
        expect_pool(r, P_SLICED, 1 * MiB, 64 * KiB, 0, 0, 0, 2 * MiB, 2, 2, 64 * KiB);
        ck_ok(cube_memory_cleanup(c));
        r = report_of(c, s);
        expect_pool(r, P_SLICED, 1 * MiB, 64 * KiB, 0, 0, 0, 0, 0, 2, 64 * KiB);
        cube_disconnect(c);
}
END_TEST

START_TEST(a_large_allocation_gets_an_exclusive_page_reused_by_size)
{
        cube_client *c = test_connect(D.socket, "exclusive");
        uint64_t s = cube_stream_current();
        cube_memory_report r;
        cube_handle a, b, c1, d;

        a = test_empty(c, 64 * KiB + 1);            /* 65600 aligned: a 1 MiB page */
        r = report_of(c, s);
        expect_pool(r, P_EXCLUSIVE, 0, 0, 1, 64 * KiB + 1, 63, 1 * MiB, 1, 1, 64 * KiB + 1);
        expect_untouched(r, P_SLICED);
        ck_assert_uint_eq(r.pools[P_SLICED].page_size, 1 * MiB);

        b = test_empty(c, 3 * MiB + 1);             /* a 4 MiB page */
        r = report_of(c, s);
        expect_pool(r, P_EXCLUSIVE, 0, 0, 2, 3 * MiB + 64 * KiB + 2, 126, 5 * MiB, 2, 2,
                    3 * MiB + 1);

        /* The freed 1 MiB page is taken by the next 1 MiB allocation. */
        ck_ok(cube_free(c, &a));
        r = report_of(c, s);
        expect_pool(r, P_EXCLUSIVE, 0, 0, 1, 3 * MiB + 1, 63, 5 * MiB, 2, 2, 3 * MiB + 1);
        c1 = test_empty(c, 1 * MiB);
        r = report_of(c, s);
        expect_pool(r, P_EXCLUSIVE, 0, 0, 2, 4 * MiB + 1, 63, 5 * MiB, 2, 2, 3 * MiB + 1);

        /* Another one of that size needs a page of its own. */
        d = test_empty(c, 1 * MiB - 100);
        r = report_of(c, s);
        expect_pool(r, P_EXCLUSIVE, 0, 0, 3, 5 * MiB + 1 - 100, 63 + 36, 6 * MiB, 3, 3,
                    3 * MiB + 1);
        expect_untouched(r, P_SLICED);
        expect_untouched(r, P_PERSISTENT);
        expect_untouched(r, P_DEDICATED);

        /* The reused page holds what is written to it. */
        write_pattern(c, &c1, 7);
        write_pattern(c, &b, 8);
        write_pattern(c, &d, 9);
        expect_read_pattern(c, &c1, 7);
        expect_read_pattern(c, &b, 8);
        expect_read_pattern(c, &d, 9);
        ck_assert_uint_eq(status(c).memory_reserved, 6 * MiB);
        ck_assert_uint_eq(status(c).memory_in_use, 5 * MiB + 1 - 100);
        cube_disconnect(c);
}
END_TEST

START_TEST(persistent_pages_are_reused_only_by_exact_size)
{
        cube_client *c = test_connect(D.socket, "persistent");
        uint64_t s = cube_stream_current();
        cube_memory_report r;
        cube_handle p1, p2, p3, p4, p5, a1, a2;

        mode(c, CUBE_ALLOCATION_PERSISTENT);
        p1 = test_empty(c, 3 * MiB);
        r = report_of(c, s);
        expect_pool(r, P_PERSISTENT, 0, 0, 1, 3 * MiB, 0, 3 * MiB, 1, 1, 3 * MiB);

        ck_ok(cube_free(c, &p1));
        p2 = test_empty(c, 3 * MiB);                /* the same page */
        r = report_of(c, s);
        expect_pool(r, P_PERSISTENT, 0, 0, 1, 3 * MiB, 0, 3 * MiB, 1, 1, 3 * MiB);

        p3 = test_empty(c, 3 * MiB - 64);           /* no granule: a page of its exact size */
        r = report_of(c, s);
        expect_pool(r, P_PERSISTENT, 0, 0, 2, 6 * MiB - 64, 0, 6 * MiB - 64, 2, 2, 3 * MiB);

        /* A free 3 MiB page is no page for 2 MiB. */
        ck_ok(cube_free(c, &p2));
        p4 = test_empty(c, 2 * MiB);
        r = report_of(c, s);
        expect_pool(r, P_PERSISTENT, 0, 0, 2, 5 * MiB - 64, 0, 8 * MiB - 64, 3, 3, 3 * MiB);

        /* Small sizes are persistent too: a 128-byte page, not a slice. */
        p5 = test_empty(c, 100);
        r = report_of(c, s);
        expect_pool(r, P_PERSISTENT, 0, 0, 3, 5 * MiB - 64 + 100, 28, 8 * MiB - 64 + 128, 4, 4,
                    3 * MiB);
        expect_untouched(r, P_SLICED);

        /* Auto pops the mode: back to slices and exclusive pages. */
        mode(c, CUBE_ALLOCATION_AUTO);
        a1 = test_empty(c, 100);
        a2 = test_empty(c, 3 * MiB);
        r = report_of(c, s);
        expect_pool(r, P_SLICED, 1 * MiB, 64 * KiB, 1, 100, 28, 1 * MiB, 1, 1, 100);
        expect_pool(r, P_EXCLUSIVE, 0, 0, 1, 3 * MiB, 0, 3 * MiB, 1, 1, 3 * MiB);
        expect_pool(r, P_PERSISTENT, 0, 0, 3, 5 * MiB - 64 + 100, 28, 8 * MiB - 64 + 128, 4, 4,
                    3 * MiB);
        expect_untouched(r, P_DEDICATED);

        write_pattern(c, &p3, 31);
        write_pattern(c, &p5, 32);
        expect_read_pattern(c, &p3, 31);
        expect_read_pattern(c, &p5, 32);
        (void) p4;
        (void) a1;
        (void) a2;
        cube_disconnect(c);
}
END_TEST

START_TEST(dedicated_pages_are_never_reused_and_go_back_at_cleanup)
{
        cube_client *c = test_connect(D.socket, "dedicated");
        uint64_t s = cube_stream_current();
        cube_memory_report r;
        cube_handle d1, d2, d3, d4, x;

        mode(c, CUBE_ALLOCATION_DEDICATED);
        d1 = test_empty(c, 1 * MiB);
        d2 = test_empty(c, 1 * MiB);
        r = report_of(c, s);
        expect_pool(r, P_DEDICATED, 0, 0, 2, 2 * MiB, 0, 2 * MiB, 2, 2, 1 * MiB);

        ck_ok(cube_free(c, &d1));
        d3 = test_empty(c, 1 * MiB);                /* not d1's page: one of its own */
        r = report_of(c, s);
        expect_pool(r, P_DEDICATED, 0, 0, 2, 2 * MiB, 0, 3 * MiB, 3, 3, 1 * MiB);

        ck_ok(cube_memory_cleanup(c));
        r = report_of(c, s);
        expect_pool(r, P_DEDICATED, 0, 0, 2, 2 * MiB, 0, 2 * MiB, 2, 3, 1 * MiB);

        d4 = test_empty(c, 100);
        r = report_of(c, s);
        expect_pool(r, P_DEDICATED, 0, 0, 3, 2 * MiB + 100, 28, 2 * MiB + 128, 3, 3, 1 * MiB);

        /* Modes nest: persistent over dedicated, then back. */
        mode(c, CUBE_ALLOCATION_PERSISTENT);
        x = test_empty(c, 5 * MiB);
        r = report_of(c, s);
        expect_pool(r, P_PERSISTENT, 0, 0, 1, 5 * MiB, 0, 5 * MiB, 1, 1, 5 * MiB);
        mode(c, CUBE_ALLOCATION_AUTO);
        (void) test_empty(c, 1 * MiB);
        r = report_of(c, s);
        expect_pool(r, P_DEDICATED, 0, 0, 4, 3 * MiB + 100, 28, 3 * MiB + 128, 4, 4, 1 * MiB);
        expect_untouched(r, P_SLICED);
        expect_untouched(r, P_EXCLUSIVE);
        mode(c, CUBE_ALLOCATION_AUTO);
        mode(c, CUBE_ALLOCATION_AUTO);          /* nothing left to pop: still auto */
        (void) test_empty(c, 200);
        (void) test_empty(c, 2 * MiB);
        r = report_of(c, s);
        expect_pool(r, P_SLICED, 1 * MiB, 64 * KiB, 1, 200, 56, 1 * MiB, 1, 1, 200);
        expect_pool(r, P_EXCLUSIVE, 0, 0, 1, 2 * MiB, 0, 2 * MiB, 1, 1, 2 * MiB);
        expect_pool(r, P_PERSISTENT, 0, 0, 1, 5 * MiB, 0, 5 * MiB, 1, 1, 5 * MiB);
        expect_pool(r, P_DEDICATED, 0, 0, 4, 3 * MiB + 100, 28, 3 * MiB + 128, 4, 4, 1 * MiB);

        /* Freed dedicated pages all go at the next cleanup. */
        ck_ok(cube_free(c, &d2));
        ck_ok(cube_free(c, &d3));
        ck_ok(cube_free(c, &d4));
        ck_ok(cube_memory_cleanup(c));
        r = report_of(c, s);
        expect_pool(r, P_DEDICATED, 0, 0, 1, 1 * MiB, 0, 1 * MiB, 1, 4, 1 * MiB);
        (void) x;
        cube_disconnect(c);
}
END_TEST

START_TEST(cleanup_returns_every_page_without_a_live_allocation)
{
        cube_client *c = test_connect(D.socket, "cleanup");
        uint64_t s = cube_stream_current(), other = 9001;
        cube_memory_report r;
        cube_handle s1, s2, l1, l2, l3;
        cube_status st;

        s1 = test_empty(c, 100);
        s2 = test_empty(c, 200);
        l1 = test_empty(c, 2 * MiB);
        l2 = test_empty(c, 5 * MiB);
        cube_stream_set(other);
        l3 = test_empty(c, 1 * MiB);
        cube_stream_set(s);
        ck_assert_uint_eq(l3.stream, other);

        ck_ok(cube_free(c, &s1));
        ck_ok(cube_free(c, &l1));
        st = status(c);
        ck_assert_uint_eq(st.memory_reserved, 1 * MiB + 7 * MiB + 1 * MiB);
        ck_assert_uint_eq(st.memory_in_use, 200 + 5 * MiB + 1 * MiB);

        /* The slice's page still holds s2; l1's page goes; the other stream
         * keeps its own. */
        ck_ok(cube_memory_cleanup(c));
        r = report_of(c, s);
        expect_pool(r, P_SLICED, 1 * MiB, 64 * KiB, 1, 200, 56, 1 * MiB, 1, 1, 200);
        expect_pool(r, P_EXCLUSIVE, 0, 0, 1, 5 * MiB, 0, 5 * MiB, 1, 2, 5 * MiB);
        st = status(c);
        ck_assert_uint_eq(st.memory_reserved, 1 * MiB + 5 * MiB + 1 * MiB);

        ck_ok(cube_free(c, &s2));
        ck_ok(cube_free(c, &l2));
        ck_ok(cube_memory_cleanup(c));
        r = report_of(c, s);
        expect_pool(r, P_SLICED, 1 * MiB, 64 * KiB, 0, 0, 0, 0, 0, 1, 200);
        expect_pool(r, P_EXCLUSIVE, 0, 0, 0, 0, 0, 0, 0, 2, 5 * MiB);
        r = report_of(c, other);
        expect_pool(r, P_EXCLUSIVE, 0, 0, 1, 1 * MiB, 0, 1 * MiB, 1, 1, 1 * MiB);
        st = status(c);
        ck_assert_uint_eq(st.memory_reserved, 1 * MiB);
        ck_assert_uint_eq(st.memory_in_use, 1 * MiB);

        ck_ok(cube_free(c, &l3));
        cube_stream_set(other);
        ck_ok(cube_memory_cleanup(c));
        cube_stream_set(s);
        r = report_of(c, other);
        expect_pool(r, P_EXCLUSIVE, 0, 0, 0, 0, 0, 0, 0, 1, 1 * MiB);
        st = status(c);
        ck_assert_uint_eq(st.memory_reserved, 0);
        ck_assert_uint_eq(st.memory_in_use, 0);
        ck_assert_uint_eq(st.allocations, 0);
        cube_disconnect(c);
}
END_TEST

typedef struct thread_alloc {
        cube_client *c;
        uint64_t stream;
        cube_handle h;
        cube_error *e;
} thread_alloc;

static void *alloc_on_own_stream(void *arg)
{
        thread_alloc *t = arg;

        t->stream = cube_stream_current();
        t->e = cube_empty(t->c, 3 * MiB, &t->h);
        if (!t->e)
                t->e = cube_sync(t->c, NULL, 0);
        return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *) a, y = *(const uint64_t *) b;

        return x < y ? -1 : x > y;
}

START_TEST(reports_exist_only_for_created_streams_and_stream_ids_lists_them)
{
        cube_client *c = test_connect(D.socket, "streams"), *c2;
        uint64_t s = cube_stream_current(), *ids, want[3];
        cube_memory_report r, sentinel, *all;
        thread_alloc t = {0};
        pthread_t th;
        bool exists = true;
        size_t n;

        /* Nothing yet: no streams, no report, and the report left alone. */
        ck_ok(cube_stream_ids(c, &ids, &n));
        ck_assert_uint_eq(n, 0);
        free(ids);
        memset(&sentinel, 0xab, sizeof(sentinel));
        r = sentinel;
        ck_ok(cube_stream_memory_report(c, 424242, &exists, &r));
        ck_assert(!exists);
        ck_assert(memcmp(&r, &sentinel, sizeof(r)) == 0);
        exists = true;
        ck_ok(cube_stream_memory_report(c, s, &exists, &r));
        ck_assert(!exists);

        /* A stream created by a sync has a report of empty pools. */
        ck_ok(cube_sync(c, NULL, 0));
        r = report_of(c, s);
        expect_pool(r, P_SLICED, 1 * MiB, 64 * KiB, 0, 0, 0, 0, 0, 0, 0);
        expect_untouched(r, P_EXCLUSIVE);
        expect_untouched(r, P_PERSISTENT);
        expect_untouched(r, P_DEDICATED);

        /* One named explicitly, and a thread's own. */
        cube_stream_set(77);
        (void) test_empty(c, 100);
        cube_stream_set(0);
        ck_assert_uint_eq(cube_stream_current(), s);
        t.c = c;
        ck_assert_int_eq(pthread_create(&th, NULL, alloc_on_own_stream, &t), 0);
        ck_assert_int_eq(pthread_join(th, NULL), 0);
        ck_ok(t.e);
        ck_assert_uint_ne(t.stream, s);
        ck_assert_uint_ne(t.stream, 77);
        ck_assert_uint_eq(t.h.stream, t.stream);

        ck_ok(cube_stream_ids(c, &ids, &n));
        ck_assert_uint_eq(n, 3);
        want[0] = s;
        want[1] = 77;
        want[2] = t.stream;
        qsort(ids, n, sizeof(*ids), cmp_u64);
        qsort(want, 3, sizeof(*want), cmp_u64);
        for (size_t i = 0; i < 3; i++)
                ck_assert_uint_eq(ids[i], want[i]);
        free(ids);

        r = report_of(c, 77);
        expect_pool(r, P_SLICED, 1 * MiB, 64 * KiB, 1, 100, 28, 1 * MiB, 1, 1, 100);
        r = report_of(c, t.stream);
        expect_pool(r, P_EXCLUSIVE, 0, 0, 1, 3 * MiB, 0, 3 * MiB, 1, 1, 3 * MiB);
        expect_untouched(r, P_SLICED);
        exists = true;
        ck_ok(cube_stream_memory_report(c, 424242, &exists, &r));
        ck_assert(!exists);

        /* The daemon-wide view holds every session's streams. */
        c2 = test_connect(D.socket, "streams-2");
        (void) test_empty(c2, 5 * MiB);
        ck_ok(cube_sync(c2, NULL, 0));
        ck_ok(cube_daemon_memory(c, &all, &n));
        {
                size_t mine = 0, theirs = 0;
                for (size_t i = 0; i < n; i++) {
                        if (all[i].session == cube_client_session(c)) {
                                mine++;
                                if (all[i].stream == 77)
                                        expect_pool(all[i], P_SLICED, 1 * MiB, 64 * KiB, 1, 100,
                                                    28, 1 * MiB, 1, 1, 100);
                                else if (all[i].stream == t.stream)
                                        expect_pool(all[i], P_EXCLUSIVE, 0, 0, 1, 3 * MiB, 0,
                                                    3 * MiB, 1, 1, 3 * MiB);
                                else
                                        ck_assert_uint_eq(all[i].stream, s);
                        } else if (all[i].session == cube_client_session(c2)) {
                                theirs++;
                                ck_assert_uint_eq(all[i].stream, s);
                                expect_pool(all[i], P_EXCLUSIVE, 0, 0, 1, 5 * MiB, 0, 5 * MiB, 1,
                                            1, 5 * MiB);
                        }
                }
                ck_assert_uint_eq(mine, 3);
                ck_assert_uint_eq(theirs, 1);
        }
        free(all);
        cube_disconnect(c2);
        cube_disconnect(c);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Out of memory and the size errors
 * ------------------------------------------------------------------------- */

START_TEST(a_full_device_is_out_of_memory_until_empty_pages_are_reclaimed)
{
        cube_client *c = test_connect(D.socket, "oom");
        uint64_t s = cube_stream_current(), other = 5005;
        cube_memory_report r;
        cube_handle a, b, cc;
        cube_status st;

        ck_assert_uint_eq(cube_client_properties(c)->memory_bytes, 64 * MiB);
        cube_stream_set(other);
        a = test_empty(c, 40 * MiB);
        cube_stream_set(s);
        b = test_empty(c, 30 * MiB);                /* 40 + 30 > 64 */
        expect_io_failure(cube_check(c, &b, 1), CUBE_IO_OUT_OF_MEMORY, 30 * MiB, true);
        ck_ok(cube_check(c, &a, 1));
        st = status(c);
        ck_assert_uint_eq(st.memory_in_use, 40 * MiB);
        ck_assert_uint_eq(st.memory_reserved, 40 * MiB);

        /* a's page stays with its stream once a is freed... */
        ck_ok(cube_free(c, &a));
        r = report_of(c, other);
        expect_pool(r, P_EXCLUSIVE, 0, 0, 0, 0, 0, 40 * MiB, 1, 1, 40 * MiB);

        /* ...until a reservation that finds the device full reclaims it: no
         * cleanup is asked for. */
        cc = test_empty(c, 30 * MiB);
        ck_ok(cube_check(c, &cc, 1));
        r = report_of(c, other);
        expect_pool(r, P_EXCLUSIVE, 0, 0, 0, 0, 0, 0, 0, 1, 40 * MiB);
        r = report_of(c, s);
        expect_pool(r, P_EXCLUSIVE, 0, 0, 1, 30 * MiB, 0, 30 * MiB, 1, 1, 30 * MiB);
        st = status(c);
        ck_assert_uint_eq(st.memory_in_use, 30 * MiB);
        ck_assert_uint_eq(st.memory_reserved, 30 * MiB);
        write_pattern(c, &cc, 11);
        expect_read_pattern(c, &cc, 11);

        /* b still reports its own failure. */
        expect_io_failure(cube_check(c, &b, 1), CUBE_IO_OUT_OF_MEMORY, 30 * MiB, true);
        cube_disconnect(c);
}
END_TEST

START_TEST(above_the_largest_page_is_buffer_too_big)
{
        cube_client *c = test_connect(D.socket, "too-big");
        uint64_t s = cube_stream_current(), max = cube_client_properties(c)->max_page_size;
        cube_memory_report r;
        cube_handle big, whole;

        ck_assert_uint_eq(max, 64 * MiB);
        big = test_empty(c, max + 1);
        expect_io_failure(cube_check(c, &big, 1), CUBE_IO_BUFFER_TOO_BIG, max + 1, false);
        r = report_of(c, s);
        expect_untouched(r, P_EXCLUSIVE);

        /* The largest page itself is fine. */
        whole = test_empty(c, max);
        ck_ok(cube_check(c, &whole, 1));
        r = report_of(c, s);
        expect_pool(r, P_EXCLUSIVE, 0, 0, 1, max, 0, max, 1, 1, max);

        /* So is it in a mode of its own. */
        ck_ok(cube_free(c, &whole));
        ck_ok(cube_memory_cleanup(c));
        mode(c, CUBE_ALLOCATION_DEDICATED);
        big = test_empty(c, max + 1);
        expect_io_failure(cube_check(c, &big, 1), CUBE_IO_BUFFER_TOO_BIG, max + 1, false);
        cube_disconnect(c);
}
END_TEST

START_TEST(sixty_five_live_page_sizes_are_page_sizes_exhausted)
{
        cube_client *c = test_connect(D.socket, "sizes");
        uint64_t s = cube_stream_current(), sum = 0;
        cube_memory_report r;
        cube_handle h[65], extra;

        for (int i = 1; i <= 64; i++) {
                h[i] = test_empty(c, (uint64_t) i * MiB);
                sum += (uint64_t) i * MiB;
        }
        ck_ok(cube_check(c, &h[1], 64));
        r = report_of(c, s);
        expect_pool(r, P_EXCLUSIVE, 0, 0, 64, sum, 0, sum, 64, 64, 64 * MiB);

        extra = test_empty(c, 65 * MiB);
        expect_io_failure(cube_check(c, &extra, 1), CUBE_IO_PAGE_SIZES_EXHAUSTED, 65 * MiB, true);
        r = report_of(c, s);
        expect_pool(r, P_EXCLUSIVE, 0, 0, 64, sum, 0, sum, 64, 64, 64 * MiB);

        /* A size already held is no new size. */
        extra = test_empty(c, 5 * MiB);
        ck_ok(cube_check(c, &extra, 1));

        /* Once a size holds nothing live, its page is cleaned up to make room. */
        ck_ok(cube_free(c, &h[1]));
        extra = test_empty(c, 65 * MiB);
        ck_ok(cube_check(c, &extra, 1));
        r = report_of(c, s);
        expect_pool(r, P_EXCLUSIVE, 0, 0, 65, sum - 1 * MiB + 5 * MiB + 65 * MiB, 0,
                    sum - 1 * MiB + 5 * MiB + 65 * MiB, 65, 65, 65 * MiB);
        cube_disconnect(c);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Deferred frees
 * ------------------------------------------------------------------------- */

START_TEST(a_free_waits_for_the_work_queued_on_the_memory)
{
        cube_client *c = test_connect(D.socket, "deferred");
        uint64_t s = cube_stream_current(), s2 = 4242;
        cube_region *big_src, *small_src;
        cube_memory_report r;
        cube_handle big, a, b;
        void *got;

        ck_ok(cube_region_create(c, 64 * MiB, &big_src));
        pattern(big_src->data, 64 * MiB, 1);
        ck_ok(cube_region_create(c, 2 * MiB, &small_src));
        pattern(small_src->data, 1 * MiB, 2);                           /* for a */
        pattern((char *) small_src->data + 1 * MiB, 1 * MiB, 3);        /* for b */

        /* Work that keeps the stream busy a while, then a write to a, and a
         * free of a while that write is still queued. */
        big = test_empty(c, 64 * MiB);
        for (int i = 0; i < 4; i++)
                ck_ok(cube_write_region(c, &big, big_src, 0));
        a = test_empty(c, 1 * MiB);
        ck_ok(cube_write_region(c, &a, small_src, 0));
        ck_ok(cube_free(c, &a));

        /* b, of a's size on a's stream, must not get a's page while a's write
         * is pending: written and read on another stream, it holds its own
         * bytes now and after a's write has run. */
        b = test_empty(c, 1 * MiB);
        cube_stream_set(s2);
        ck_ok(cube_write_region(c, &b, small_src, 1 * MiB));
        got = malloc(1 * MiB);
        ck_ok(cube_read(c, &b, got, 1 * MiB));
        expect_pattern(got, 1 * MiB, 3);
        cube_stream_set(s);
        ck_ok(cube_sync(c, NULL, 0));
        cube_stream_set(s2);
        ck_ok(cube_read(c, &b, got, 1 * MiB));
        expect_pattern(got, 1 * MiB, 3);
        cube_stream_set(s);
        free(got);

        r = report_of(c, s);
        expect_pool(r, P_EXCLUSIVE, 0, 0, 2, 65 * MiB, 0, 66 * MiB, 3, 3, 64 * MiB);
        ck_ok(cube_read_region(c, &big, big_src, 0));
        expect_pattern(big_src->data, 64 * MiB, 1);
        cube_region_free(c, big_src);
        cube_region_free(c, small_src);
        cube_disconnect(c);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Pitched tensors and strided copies
 * ------------------------------------------------------------------------- */

static void check_tensor(cube_client *c, const uint64_t *shape, uint32_t rank, uint64_t elem,
                         const uint64_t *want_strides, uint64_t want_pitch, uint64_t seed)
{
        cube_copy t;
        uint64_t dense = elem, rows = 1, row = shape[rank - 1] * elem;
        unsigned char *data, *back, *raw;

        ck_ok(cube_empty_tensor(c, shape, rank, elem, &t));
        ck_assert_uint_eq(t.rank, rank);
        ck_assert_uint_eq(t.elem_size, elem);
        for (uint32_t i = 0; i < rank; i++) {
                ck_assert_uint_eq(t.shape[i], shape[i]);
                ck_assert_msg(t.strides[i] == want_strides[i], "stride %u is %" PRIu64
                              ", expected %" PRIu64, i, t.strides[i], want_strides[i]);
                dense *= shape[i];
                if (i + 1 < rank)
                        rows *= shape[i];
        }
        ck_assert_uint_eq(cube_copy_len(&t), dense);
        ck_assert_uint_eq(cube_handle_len(&t.handle), rows * want_pitch);
        data = malloc(dense);
        back = malloc(dense);
        raw = malloc(rows * want_pitch);
        pattern(data, dense, seed);
        ck_ok(cube_write_strided(c, &t, data, dense));
        memset(back, 0, dense);
        ck_ok(cube_read_strided(c, &t, back, dense));
        ck_assert(memcmp(back, data, dense) == 0);

        /* The raw pitched buffer: each row at its pitch, zeros between. */
        ck_ok(cube_read(c, &t.handle, raw, rows * want_pitch));
        for (uint64_t i = 0; i < rows; i++) {
                ck_assert_msg(memcmp(raw + i * want_pitch, data + i * row, row) == 0,
                              "row %" PRIu64 " is not at offset %" PRIu64, i, i * want_pitch);
                for (uint64_t j = row; j < want_pitch; j++)
                        ck_assert_msg(raw[i * want_pitch + j] == 0, "padding byte %" PRIu64
                                      " of row %" PRIu64 " was written", j, i);
        }
        free(data);
        free(back);
        free(raw);
}

START_TEST(strided_round_trips_land_rows_on_their_pitch)
{
        cube_client *c = test_connect(D.socket, "strided");

        /* 2-D, a 20-byte row on a 32-byte pitch (the next power of two). */
        check_tensor(c, (uint64_t[]) { 3, 5 }, 2, 4, (uint64_t[]) { 8, 1 }, 32, 1);
        /* 3-D, 10-byte rows on 16-byte pitches; outer strides nest. */
        check_tensor(c, (uint64_t[]) { 2, 3, 5 }, 3, 2, (uint64_t[]) { 24, 8, 1 }, 16, 2);
        /* A 400-byte row is aligned to the device's 64 bytes: 448. */
        check_tensor(c, (uint64_t[]) { 4, 100 }, 2, 4, (uint64_t[]) { 112, 1 }, 448, 3);
        /* 3-D with a wide row: 3 * 4 rows of 100 bytes on 128. */
        check_tensor(c, (uint64_t[]) { 3, 4, 25 }, 3, 4, (uint64_t[]) { 128, 32, 1 }, 128, 4);
        /* A pitch of 64 would split a 12-byte element: rows stay dense. */
        check_tensor(c, (uint64_t[]) { 2, 3 }, 2, 12, (uint64_t[]) { 3, 1 }, 36, 5);
        /* Rank 1 and rows of one element are dense. */
        check_tensor(c, (uint64_t[]) { 37 }, 1, 4, (uint64_t[]) { 1 }, 148, 6);
        check_tensor(c, (uint64_t[]) { 7, 1 }, 2, 8, (uint64_t[]) { 1, 1 }, 8, 7);
        cube_disconnect(c);
}
END_TEST

/* A write whose layout is not pitched row-major claims the handle's range
 * and nothing more: the rest of the allocation was never its to write. */
START_TEST(unsupported_strides_claim_only_the_handles_range)
{
        cube_client *c = test_connect(D.socket, "strided-slice");
        unsigned char data[64], back[256];
        cube_handle whole;
        cube_copy bad = { .rank = 2, .shape = { 4, 4 }, .strides = { 1, 4 }, .elem_size = 4 };

        pattern(data, sizeof(data), 11);
        ck_ok(cube_empty(c, 256, &whole));
        memset(back, 0x5a, sizeof(back));
        ck_ok(cube_write(c, &whole, back, sizeof(back)));
        /* The middle 64 bytes, written column-major. */
        bad.handle = cube_handle_slice(&whole, 64, 128);
        ck_assert_uint_eq(cube_handle_len(&bad.handle), 64);
        ck_ok(cube_write_strided(c, &bad, data, cube_copy_len(&bad)));
        expect_io_failure(cube_check(c, &bad.handle, 1), CUBE_IO_UNSUPPORTED_STRIDES, 0, true);
        {
                cube_handle before = cube_handle_slice(&whole, 0, 192);
                cube_handle after = cube_handle_slice(&whole, 128, 0);
                unsigned char want[128];

                memset(want, 0x5a, sizeof(want));
                ck_ok(cube_check(c, &before, 1));
                ck_ok(cube_check(c, &after, 1));
                ck_ok(cube_read(c, &after, back, 128));
                ck_assert(memcmp(back, want, 128) == 0);
        }
        cube_disconnect(c);
}
END_TEST

/* Host memory that is NULL is the caller's mistake, said before anything is
 * sent: no buffer is left behind and the session goes on. */
START_TEST(null_host_memory_is_validation_and_allocates_nothing)
{
        cube_client *c = test_connect(D.socket, "null-host");
        cube_handle h = test_empty(c, 256), made = { 0 };
        uint64_t before = status(c).memory_in_use;

        expect_validation(cube_create(c, NULL, 4096, &made), "from NULL");
        ck_assert_uint_eq(made.size, 0);
        expect_validation(cube_write(c, &h, NULL, 256), "from NULL");
        expect_validation(cube_read(c, &h, NULL, 256), "into NULL");
        ck_assert_uint_eq(status(c).memory_in_use, before);
        write_pattern(c, &h, 7);
        expect_read_pattern(c, &h, 7);
        cube_disconnect(c);
}
END_TEST

START_TEST(other_layouts_are_unsupported_strides_and_overruns_are_validation)
{
        cube_client *c = test_connect(D.socket, "layouts");
        unsigned char data[256], back[256];
        cube_copy t, bad;
        struct {
                uint32_t rank;
                uint64_t shape[3], strides[3];
        } unsupported[] = {
                { 2, { 5, 3 }, { 1, 5 } },              /* column-major: transposed */
                { 2, { 3, 5 }, { 4, 1 } },              /* rows overlap: pitch < row */
                { 2, { 3, 5 }, { 8, 2 } },              /* last stride not 1 */
                { 3, { 2, 3, 5 }, { 30, 8, 1 } },       /* outer stride not nested */
        };

        pattern(data, sizeof(data), 9);
        for (size_t i = 0; i < LEN(unsupported); i++) {
                t = (cube_copy) { .rank = unsupported[i].rank, .elem_size = 4 };
                ck_ok(cube_empty_tensor(c, (uint64_t[]) { 2, 3, 8 }, 3, 4, &t));
                ck_assert_uint_eq(cube_handle_len(&t.handle), 2 * 3 * 32);
                bad = t;
                bad.rank = unsupported[i].rank;
                memcpy(bad.shape, unsupported[i].shape, sizeof(unsupported[i].shape));
                memcpy(bad.strides, unsupported[i].strides, sizeof(unsupported[i].strides));

                /* A read answers at once... */
                expect_io_error(cube_read_strided(c, &bad, back, cube_copy_len(&bad)),
                                CUBE_IO_UNSUPPORTED_STRIDES, 0);
                /* ...a write leaves it on the memory, and a dense write repairs
                 * exactly what it covers. */
                ck_ok(cube_check(c, &t.handle, 1));
                ck_ok(cube_write_strided(c, &bad, data, cube_copy_len(&bad)));
                expect_io_failure(cube_check(c, &t.handle, 1), CUBE_IO_UNSUPPORTED_STRIDES, 0,
                                  true);
                ck_ok(cube_write(c, &t.handle, data, 192));
                ck_ok(cube_check(c, &t.handle, 1));
                ck_ok(cube_read(c, &t.handle, back, 192));
                ck_assert(memcmp(back, data, 192) == 0);
        }

        /* A layout that reaches past the handle: 4 rows of 32 bytes in 96. */
        ck_ok(cube_empty_tensor(c, (uint64_t[]) { 3, 5 }, 2, 4, &t));
        ck_assert_uint_eq(t.strides[0], 8);
        bad = t;
        bad.shape[0] = 4;
        expect_validation(cube_read_strided(c, &bad, back, cube_copy_len(&bad)),
                          "does not fit the handle's 96 bytes");
        ck_ok(cube_write_strided(c, &bad, data, cube_copy_len(&bad)));
        {
                cube_error *e = cube_check(c, &t.handle, 1);
                const cube_error *root;
                ck_assert_ptr_nonnull(e);
                ck_assert_int_eq(cube_error_kind_of(e), CUBE_SERVER_SEVERAL);
                ck_assert_uint_eq(cube_error_count(e), 1);
                root = cube_error_source(cube_error_at(e, 0));
                ck_assert_ptr_nonnull(root);
                ck_assert_int_eq(cube_error_kind_of(root), CUBE_SERVER_VALIDATION);
                ck_assert_ptr_nonnull(strstr(cube_error_reason(root),
                                             "does not fit the handle's 96 bytes"));
                cube_error_free(e);
        }
        /* A pitch past the end does too: 3 rows 40 bytes apart. */
        bad = t;
        bad.strides[0] = 10;
        expect_validation(cube_read_strided(c, &bad, back, cube_copy_len(&bad)),
                          "does not fit the handle's 96 bytes");
        /* The last row may end short of its pitch: 3 rows of 20 in 84 bytes. */
        bad.strides[0] = 8;
        bad.handle = cube_handle_slice(&t.handle, 0, 12);
        memset(back, 0, sizeof(back));
        ck_ok(cube_write_strided(c, &bad, data, 60));
        ck_ok(cube_read_strided(c, &bad, back, 60));
        ck_assert(memcmp(back, data, 60) == 0);
        /* A dense size that does not match the shape is the library's. */
        expect_validation(cube_write_strided(c, &t, data, 61), "covering 60 bytes");
        cube_disconnect(c);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Batched layouts (the reference's MemoryLayoutPolicy)
 * ------------------------------------------------------------------------- */

static uint64_t round_to(uint64_t v, uint64_t a)
{
        return (v + a - 1) / a * a;
}

/* Each tensor at the offset the policy gives it, with the strides its
 * strategy asks for, all in one allocation the daemon sized the same way. */
START_TEST(a_batch_of_tensors_shares_one_allocation_laid_out_by_the_policy)
{
        cube_client *c = test_connect(D.socket, "layouts");
        const uint64_t al = cube_client_properties(c)->alignment;
        static const struct {
                cube_layout_descriptor d;
                uint64_t strides[3], bytes;
        } want[] = {
                /* 20-byte rows on the next power of two. */
                { { CUBE_LAYOUT_OPTIMIZED, 2, { 3, 5 }, 4 }, { 8, 1 }, 96 },
                /* The same shape packed. */
                { { CUBE_LAYOUT_CONTIGUOUS, 2, { 3, 5 }, 4 }, { 5, 1 }, 60 },
                /* Rank 1 is dense, optimized or not. */
                { { CUBE_LAYOUT_OPTIMIZED, 1, { 7 }, 1 }, { 1 }, 7 },
                /* Rows of one element are not padded. */
                { { CUBE_LAYOUT_OPTIMIZED, 3, { 2, 3, 1 }, 8 }, { 3, 1, 1 }, 48 },
                /* A 36-byte row would pitch to 64, which holds no whole number
                 * of 12-byte elements: the rows stay packed. */
                { { CUBE_LAYOUT_OPTIMIZED, 2, { 4, 3 }, 12 }, { 3, 1 }, 144 },
                /* 100-byte rows on the device's alignment, past 64 bytes. */
                { { CUBE_LAYOUT_OPTIMIZED, 2, { 2, 100 }, 1 }, { 0, 1 }, 0 },
        };
        enum { N = LEN(want) };
        cube_layout_descriptor descs[N];
        cube_copy t[N], applied[N];
        uint64_t size, offset = 0, s = cube_stream_current(), pitch100 = round_to(100, al < 128 ? al : 128);
        cube_memory_report before, after;
        unsigned char *whole;

        ck_assert_uint_ge(al, 16);
        for (size_t i = 0; i < N; i++)
                descs[i] = want[i].d;
        ck_ok(cube_layout_apply(c, descs, N, applied, &size));
        ck_ok(cube_empty(c, 1, &(cube_handle) {0}));    /* the stream's report exists */
        before = report_of(c, s);
        ck_ok(cube_empty_tensors(c, descs, N, t));
        for (size_t i = 0; i < N; i++) {
                uint64_t bytes = want[i].bytes, strides0 = want[i].strides[0];
                if (i == N - 1) {
                        bytes = 2 * pitch100;
                        strides0 = pitch100;
                }
                ck_assert_uint_eq(t[i].handle.memory, t[0].handle.memory);
                ck_assert_uint_eq(t[i].handle.service, t[0].handle.service);
                ck_assert_uint_eq(t[i].handle.size, size);
                ck_assert_msg(t[i].handle.offset_start == offset, "tensor %zu starts at %" PRIu64
                              ", expected %" PRIu64, i, t[i].handle.offset_start, offset);
                ck_assert_uint_eq(cube_handle_len(&t[i].handle), bytes);
                ck_assert_uint_eq(t[i].rank, want[i].d.rank);
                ck_assert_uint_eq(t[i].elem_size, want[i].d.elem_size);
                ck_assert_msg(t[i].strides[0] == strides0, "tensor %zu's outer stride is %"
                              PRIu64 ", expected %" PRIu64, i, t[i].strides[0], strides0);
                for (uint32_t j = 1; j < t[i].rank; j++)
                        ck_assert_uint_eq(t[i].strides[j], want[i].strides[j]);
                /* apply alone says the same, naming no memory. */
                ck_assert_uint_eq(applied[i].handle.offset_start, t[i].handle.offset_start);
                ck_assert_uint_eq(applied[i].handle.offset_end, t[i].handle.offset_end);
                ck_assert_uint_eq(applied[i].handle.memory, 0);
                offset += round_to(bytes, al);
        }
        ck_assert_uint_eq(size, offset);

        /* One allocation of exactly that size in the daemon. */
        after = report_of(c, s);
        ck_assert_uint_eq(after.pools[P_SLICED].allocations + after.pools[P_EXCLUSIVE].allocations,
                          before.pools[P_SLICED].allocations +
                          before.pools[P_EXCLUSIVE].allocations + 1);
        ck_assert_uint_eq(after.pools[P_SLICED].bytes_in_use + after.pools[P_EXCLUSIVE].bytes_in_use,
                          before.pools[P_SLICED].bytes_in_use +
                          before.pools[P_EXCLUSIVE].bytes_in_use + size);

        /* Each tensor round-trips, and lands where its layout says. */
        whole = calloc(1, size);
        ck_assert_ptr_nonnull(whole);
        for (size_t i = 0; i < N; i++) {
                uint64_t n = cube_copy_len(&t[i]);
                unsigned char *data = malloc(n), *back = calloc(1, n);
                pattern(data, n, 100 + i);
                ck_ok(cube_write_strided(c, &t[i], data, n));
                ck_ok(cube_read_strided(c, &t[i], back, n));
                ck_assert_msg(memcmp(back, data, n) == 0, "tensor %zu did not round-trip", i);
                free(data);
                free(back);
        }
        cube_handle all = t[0].handle;
        all.offset_start = all.offset_end = 0;
        ck_ok(cube_read(c, &all, whole, size));
        for (size_t i = 0; i < N; i++) {
                uint64_t n = cube_copy_len(&t[i]), row = t[i].shape[t[i].rank - 1] * t[i].elem_size;
                uint64_t pitch = t[i].rank > 1 ? t[i].strides[t[i].rank - 2] * t[i].elem_size : row;
                unsigned char *data = malloc(n);
                pattern(data, n, 100 + i);
                for (uint64_t r = 0; r < n / row; r++)
                        ck_assert_msg(memcmp(whole + t[i].handle.offset_start + r * pitch,
                                             data + r * row, row) == 0,
                                      "row %" PRIu64 " of tensor %zu is not at its pitch", r, i);
                free(data);
        }
        free(whole);

        /* Freeing one frees the allocation they share. */
        ck_ok(cube_free(c, &t[2].handle));
        ck_ok(cube_sync(c, NULL, 0));
        after = report_of(c, s);
        ck_assert_uint_eq(after.pools[P_SLICED].bytes_in_use + after.pools[P_EXCLUSIVE].bytes_in_use,
                          before.pools[P_SLICED].bytes_in_use +
                          before.pools[P_EXCLUSIVE].bytes_in_use);
        cube_disconnect(c);
}
END_TEST

/* cube_create_tensors writes each tensor's dense bytes into its layout. */
START_TEST(created_tensors_hold_their_data)
{
        cube_client *c = test_connect(D.socket, "create-tensors");
        cube_layout_descriptor descs[2] = {
                { CUBE_LAYOUT_OPTIMIZED, 3, { 2, 3, 5 }, 4 },
                { CUBE_LAYOUT_CONTIGUOUS, 2, { 4, 3 }, 2 },
        };
        unsigned char a[120], b[24], back[120];
        const void *data[2] = { a, b };
        cube_copy t[2];

        pattern(a, sizeof(a), 1);
        pattern(b, sizeof(b), 2);
        ck_ok(cube_create_tensors(c, descs, data, 2, t));
        ck_assert_uint_eq(t[0].strides[1], 8);
        ck_assert_uint_eq(t[0].strides[0], 24);
        ck_ok(cube_read_strided(c, &t[0], back, sizeof(a)));
        ck_assert(memcmp(back, a, sizeof(a)) == 0);
        ck_ok(cube_read_strided(c, &t[1], back, sizeof(b)));
        ck_assert(memcmp(back, b, sizeof(b)) == 0);
        data[1] = NULL;
        expect_validation(cube_create_tensors(c, descs, data, 2, t), "tensor 1 has no data");
        cube_disconnect(c);
}
END_TEST

/* The request msgid's answer on a raw peer: its error, or NULL. */
static cube_error *raw_answer(int fd, uint32_t msgid)
{
        msgpack_unpacked up;
        cube_error *e = NULL;
        bool found = false;

        msgpack_unpacked_init(&up);
        while (!found && raw_recv(fd, &up, test_scaled_ms(10000)) == 1) {
                const msgpack_object *o = &up.data;
                if (o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size == 4 &&
                    o->via.array.ptr[0].via.u64 == 1 && o->via.array.ptr[1].via.u64 == msgid) {
                        found = true;
                        if (o->via.array.ptr[2].type != MSGPACK_OBJECT_NIL)
                                ck_assert_int_eq(cube__err_unpack(&o->via.array.ptr[2],
                                                                  CUBE__FAMILY_SERVER, &e), 0);
                }
        }
        msgpack_unpacked_destroy(&up);
        ck_assert_msg(found, "no answer to request %u", msgid);
        return e;
}

/* A batch the library would refuse, sent by hand: the daemon creates the
 * memory all the same, claimed by Validation, and reserves nothing. */
START_TEST(hostile_batches_are_refused_with_validation)
{
        cube_client *c = test_connect(D.socket, "hostile-layouts");
        static const struct {
                cube_layout_descriptor d;
                const char *why;
        } bad[] = {
                { { CUBE_LAYOUT_OPTIMIZED, 0, { 0 }, 4 }, "rank of 1 to 8" },
                { { CUBE_LAYOUT_OPTIMIZED, 9, { 1, 1, 1, 1, 1, 1, 1, 1 }, 4 }, "rank of 1 to 8" },
                { { CUBE_LAYOUT_CONTIGUOUS, 1, { 4 }, 0 }, "an element size" },
                { { (cube_layout_strategy) 7, 1, { 4 }, 4 }, "a strategy" },
                { { CUBE_LAYOUT_CONTIGUOUS, 1, { 1ull << 32 }, 4 }, "above 2^32" },
                { { CUBE_LAYOUT_CONTIGUOUS, 1, { 4 }, 1ull << 32 }, "above 2^32" },
                { { CUBE_LAYOUT_CONTIGUOUS, 4, { UINT32_MAX, UINT32_MAX, UINT32_MAX, 4 }, 4 },
                  "overflows 64 bits" },
        };
        uint64_t nonce, session, in_use = status(c).memory_in_use, size;
        cube_copy t[2];
        int fd;

        /* The library refuses each at the call, sending nothing. */
        expect_validation(cube_empty_tensors(c, &bad[0].d, 0, t),
                          "at least one descriptor");
        for (size_t i = 0; i < LEN(bad); i++) {
                cube_layout_descriptor two[2] = {
                        { CUBE_LAYOUT_OPTIMIZED, 1, { 4 }, 4 }, bad[i].d,
                };
                expect_validation(cube_empty_tensors(c, two, 2, t), bad[i].why);
                expect_validation(cube_layout_apply(c, two, 2, t, &size), "tensor 1");
        }
        ck_assert_uint_eq(status(c).memory_in_use, in_use);

        /* Sent by hand, each lands on its memory. */
        fd = raw_connect(D.socket);
        ck_assert_int_ge(fd, 0);
        raw_greet(fd, &nonce, &session);
        for (size_t i = 0; i <= LEN(bad); i++) {
                uint64_t memory = session << 40 | (i + 1);
                msgpack_sbuffer sb;
                msgpack_packer pk;
                cube_error *e;

                msgpack_sbuffer_init(&sb);
                msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
                cube__pack_notify(&pk, "create_tensors", 3);
                msgpack_pack_uint64(&pk, 1);
                msgpack_pack_uint64(&pk, memory);
                if (i == LEN(bad)) {
                        msgpack_pack_array(&pk, 0);     /* no tensor at all */
                } else {
                        const cube_layout_descriptor *d = &bad[i].d;
                        msgpack_pack_array(&pk, 1);
                        msgpack_pack_array(&pk, 3);
                        msgpack_pack_uint64(&pk, d->strategy);
                        msgpack_pack_array(&pk, d->rank);
                        for (uint32_t j = 0; j < d->rank; j++)
                                msgpack_pack_uint64(&pk, j < CUBE_MAX_RANK ? d->shape[j] : 1);
                        msgpack_pack_uint64(&pk, d->elem_size);
                }
                cube__pack_request(&pk, (uint32_t) (10 + i), "check", 2);
                msgpack_pack_uint64(&pk, 1);
                msgpack_pack_array(&pk, 1);
                cube__pack_handle(&pk, &(cube_handle) { .service = nonce, .memory = memory });
                ck_assert_int_eq(raw_send_sbuffer(fd, &sb), 0);
                msgpack_sbuffer_destroy(&sb);
                e = raw_answer(fd, (uint32_t) (10 + i));
                ck_assert_msg(e && cube_error_kind_of(e) == CUBE_SERVER_SEVERAL,
                              "batch %zu was not refused", i);
                const cube_error *root = cube_error_source(cube_error_at(e, 0));
                ck_assert_int_eq(cube_error_kind_of(root), CUBE_SERVER_VALIDATION);
                ck_assert_msg(strstr(cube_error_reason(root),
                                     i == LEN(bad) ? "at least one descriptor" : bad[i].why),
                              "batch %zu: %s", i, cube_error_reason(root));
                cube_error_free(e);
        }
        ck_assert_uint_eq(status(c).memory_in_use, in_use);
        close(fd);
        cube_disconnect(c);
}
END_TEST

/* A batch is one allocation: together its tensors may be too big for any
 * page, and then every one of them reports it. */
START_TEST(a_batch_above_the_largest_page_is_buffer_too_big)
{
        cube_client *c = test_connect(D.socket, "big-batch");
        uint64_t max = cube_client_properties(c)->max_page_size;
        cube_layout_descriptor descs[2] = {
                { CUBE_LAYOUT_CONTIGUOUS, 2, { 4096, 4096 }, 2 },       /* 32 MiB */
                { CUBE_LAYOUT_OPTIMIZED, 2, { 4096, 4096 }, 2 },
        };
        cube_copy t[2];
        uint64_t size;

        ck_assert_uint_eq(max, 64 * MiB);
        descs[1].shape[0] = 4097;               /* the two cross 64 MiB */
        ck_ok(cube_layout_apply(c, descs, 2, t, &size));
        ck_assert_uint_gt(size, max);
        ck_ok(cube_empty_tensors(c, descs, 2, t));
        expect_io_failure(cube_check(c, &t[0].handle, 1), CUBE_IO_BUFFER_TOO_BIG, size, false);
        expect_io_failure(cube_check(c, &t[1].handle, 1), CUBE_IO_BUFFER_TOO_BIG, size, false);
        cube_disconnect(c);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Staging regions
 * ------------------------------------------------------------------------- */

START_TEST(staged_round_trips_at_every_size)
{
        static const uint64_t sizes[] = { 1, 4 * KiB + 1, 1 * MiB, 64 * MiB, 256 * MiB };
        cube_client *c = test_connect(D.socket, "staging");

        for (size_t i = 0; i < LEN(sizes); i++) {
                uint64_t n = sizes[i];
                cube_region *in, *out;
                cube_handle h;

                ck_ok(cube_region_create(c, n, &in));
                ck_assert_uint_eq(in->size, n);
                ck_assert_ptr_nonnull(in->data);
                pattern(in->data, n, 1000 + i);
                h = test_empty(c, n);
                ck_ok(cube_write_region(c, &h, in, 0));
                ck_ok(cube_region_create(c, n, &out));
                ck_ok(cube_read_region(c, &h, out, 0));
                expect_pattern(out->data, n, 1000 + i);
                ck_assert(in->id != out->id);
                /* What the device holds is what the socket reads too. */
                if (n <= 1 * MiB)
                        expect_read_pattern(c, &h, 1000 + i);
                cube_region_free(c, in);
                cube_region_free(c, out);
                ck_ok(cube_free(c, &h));
        }

        /* Offsets into a region, both ways. */
        {
                cube_region *r;
                cube_handle h = test_empty(c, 4 * KiB + 1);
                ck_ok(cube_region_create(c, 8 * KiB, &r));
                memset(r->data, 0xee, 8 * KiB);
                pattern((char *) r->data + 100, 4 * KiB + 1, 77);
                ck_ok(cube_write_region(c, &h, r, 100));
                ck_ok(cube_sync(c, NULL, 0));
                memset(r->data, 0xee, 8 * KiB);
                ck_ok(cube_read_region(c, &h, r, 4000));
                expect_pattern((char *) r->data + 4000, 4 * KiB + 1, 77);
                for (uint64_t j = 0; j < 4000; j++)
                        ck_assert_uint_eq(((unsigned char *) r->data)[j], 0xee);
                for (uint64_t j = 4000 + 4 * KiB + 1; j < 8 * KiB; j++)
                        ck_assert_uint_eq(((unsigned char *) r->data)[j], 0xee);
                /* A slice of a handle reads into the region's last bytes. */
                cube_handle tail = cube_handle_slice(&h, 4 * KiB - 9, 0);
                ck_assert_uint_eq(cube_handle_len(&tail), 10);
                ck_ok(cube_read_region(c, &tail, r, 8 * KiB - 10));
                {
                        unsigned char want[4 * KiB + 1];
                        pattern(want, sizeof(want), 77);
                        ck_assert(memcmp((char *) r->data + 8 * KiB - 10, want + 4 * KiB - 9,
                                         10) == 0);
                }
                cube_region_free(c, r);
        }
        cube_disconnect(c);
}
END_TEST

START_TEST(a_region_is_reused_for_several_writes_after_a_sync)
{
        cube_client *c = test_connect(D.socket, "reuse");
        cube_handle h[4];
        cube_region *r;

        ck_ok(cube_region_create(c, 1 * MiB, &r));
        for (int i = 0; i < 4; i++) {
                h[i] = test_empty(c, 1 * MiB);
                pattern(r->data, 1 * MiB, 50 + (uint64_t) i);
                ck_ok(cube_write_region(c, &h[i], r, 0));
                ck_ok(cube_sync(c, NULL, 0));
        }
        /* Each write took the bytes the region held when it ran. */
        for (int i = 0; i < 4; i++)
                expect_read_pattern(c, &h[i], 50 + (uint64_t) i);
        /* Reading into it works as often. */
        for (int i = 3; i >= 0; i--) {
                ck_ok(cube_read_region(c, &h[i], r, 0));
                expect_pattern(r->data, 1 * MiB, 50 + (uint64_t) i);
        }
        cube_region_free(c, r);
        cube_disconnect(c);
}
END_TEST

START_TEST(regions_count_against_the_session_quota)
{
        cube_client *c = test_connect(D.socket, "quota");
        cube_region *a, *b, *d, *e;
        cube_region *dummy = NULL;

        ck_ok(cube_region_create(c, 3 * MiB, &a));
        expect_io_error(cube_region_create(c, 2 * MiB, &dummy), CUBE_IO_OUT_OF_MEMORY, 2 * MiB);
        ck_assert_ptr_null(dummy);
        expect_io_error(cube_region_create(c, 5 * MiB, &dummy), CUBE_IO_OUT_OF_MEMORY, 5 * MiB);
        ck_ok(cube_region_create(c, 1 * MiB, &b));      /* exactly the quota */
        expect_io_error(cube_region_create(c, 1, &dummy), CUBE_IO_OUT_OF_MEMORY, 1);
        ck_assert_msg(wait_daemon_regions(2, 5000), "the daemon maps %d region(s), not 2", daemon_regions());

        /* Freeing gives the quota back. */
        cube_region_free(c, a);
        ck_ok(cube_region_create(c, 2 * MiB, &d));
        ck_ok(cube_region_create(c, 1 * MiB, &e));
        expect_io_error(cube_region_create(c, 1, &dummy), CUBE_IO_OUT_OF_MEMORY, 1);
        ck_assert_msg(wait_daemon_regions(3, 5000), "the daemon maps %d region(s), not 3", daemon_regions());

        /* The quota is the session's: another has all of its own. */
        {
                cube_client *c2 = test_connect(D.socket, "quota-2");
                cube_region *f;
                ck_ok(cube_region_create(c2, 4 * MiB, &f));
                expect_io_error(cube_region_create(c2, 1, &dummy), CUBE_IO_OUT_OF_MEMORY, 1);
                cube_region_free(c2, f);
                cube_disconnect(c2);
        }
        cube_region_free(c, b);
        cube_region_free(c, d);
        cube_region_free(c, e);
        ck_ok(cube_sync(c, NULL, 0));
        ck_assert(wait_daemon_regions(0, 5000));
        cube_disconnect(c);
}
END_TEST

START_TEST(a_range_beyond_the_region_is_validation)
{
        cube_client *c = test_connect(D.socket, "range");
        cube_handle h = test_empty(c, 4 * KiB), h2;
        cube_region *r;

        ck_ok(cube_region_create(c, 8 * KiB, &r));
        pattern(r->data, 8 * KiB, 3);
        expect_validation(cube_write_region(c, &h, r, 8 * KiB + 1), "do not fit region");
        expect_validation(cube_write_region(c, &h, r, 4 * KiB + 1), "do not fit region");
        expect_validation(cube_read_region(c, &h, r, 8 * KiB + 1), "do not fit region");
        expect_validation(cube_read_region(c, &h, r, 6 * KiB), "do not fit region");
        expect_validation(cube_write_region(c, &h, r, UINT64_MAX), "do not fit region");
        /* None of them touched the memory. */
        ck_ok(cube_check(c, &h, 1));

        /* The last range that fits does. */
        ck_ok(cube_write_region(c, &h, r, 4 * KiB));
        ck_ok(cube_read_region(c, &h, r, 0));
        {
                unsigned char want[8 * KiB];
                pattern(want, sizeof(want), 3);
                ck_assert(memcmp(r->data, want + 4 * KiB, 4 * KiB) == 0);
        }
        /* A handle longer than the whole region does not fit at offset 0. */
        h2 = test_empty(c, 8 * KiB + 1);
        expect_validation(cube_write_region(c, &h2, r, 0), "do not fit region");
        cube_region_free(c, r);
        cube_disconnect(c);
}
END_TEST

/* A client process that makes regions, uses one, and then ends without
 * freeing them or disconnecting: it says 'r' once they exist, and exits
 * when told to (status 0, or the step that failed). */
static int leave_regions(int ready_fd, int go_fd)
{
        cube_client *c;
        cube_region *a, *b;
        cube_handle h;
        char x = 'r';

        if (cube_connect(D.socket, "leaver", &c))
                return 2;
        if (cube_region_create(c, 1 * MiB, &a) || cube_region_create(c, 3 * MiB, &b))
                return 3;
        if (cube_empty(c, 1 * MiB, &h))
                return 4;
        pattern(a->data, 1 * MiB, 4);
        if (cube_write_region(c, &h, a, 0) || cube_sync(c, &h, 1))
                return 5;
        if (write(ready_fd, &x, 1) != 1 || read(go_fd, &x, 1) != 1)
                return 6;
        return 0;
}

START_TEST(regions_are_reclaimed_when_the_session_ends)
{
        cube_client *c2;
        cube_session_info *ss;
        cube_region *a;
        int ready[2], go[2], wstatus;
        char x;
        pid_t pid;
        size_t n;

        ck_assert_msg(wait_daemon_regions(0, 5000), "the daemon maps %d region(s), not 0", daemon_regions());
        ck_assert_int_eq(pipe(ready), 0);
        ck_assert_int_eq(pipe(go), 0);
        pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0)
                _exit(leave_regions(ready[1], go[0]));
        ck_assert_int_eq(read(ready[0], &x, 1), 1);
        ck_assert_msg(wait_daemon_regions(2, 5000), "the daemon maps %d region(s), not 2", daemon_regions());

        /* Its session is one of the daemon's. */
        c2 = test_connect(D.socket, "after");
        ck_ok(cube_daemon_sessions(c2, &ss, &n));
        ck_assert_uint_eq(n, 2);
        free(ss);
        ck_assert_uint_eq(status(c2).memory_in_use, 1 * MiB);

        /* It ends without freeing anything: the session's end takes them. */
        ck_assert_int_eq(write(go[1], "g", 1), 1);
        ck_assert_int_eq(waitpid(pid, &wstatus, 0), pid);
        ck_assert_msg(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0,
                      "the client failed at step %d", WEXITSTATUS(wstatus));
        ck_assert_msg(wait_daemon_regions(0, 5000), "the daemon still maps %d region(s)",
                      daemon_regions());
        for (int waited = 0;; waited += 10) {
                ck_ok(cube_daemon_sessions(c2, &ss, &n));
                if (n == 1)
                        break;
                free(ss);
                ck_assert_msg(waited < 5000, "the leaver's session is still listed");
                usleep(10000);
        }
        ck_assert_uint_eq(ss[0].id, cube_client_session(c2));
        free(ss);
        ck_assert_uint_eq(status(c2).memory_in_use, 0);

        /* And the new session has its whole quota. */
        ck_ok(cube_region_create(c2, 4 * MiB, &a));
        ck_assert_msg(wait_daemon_regions(1, 5000), "the daemon maps %d region(s), not 1", daemon_regions());
        cube_region_free(c2, a);
        cube_disconnect(c2);
        close(ready[0]);
        close(ready[1]);
        close(go[0]);
        close(go[1]);
}
END_TEST

/* Large inline writes are read from the socket straight into their memory
 * when nothing else can see it; these hold that path to what a queued write
 * does. */
START_TEST(a_large_inline_write_lands_on_exactly_its_range)
{
        const uint64_t n = 8 * MiB, at = 1 * MiB + 5, len = 3 * MiB + 3;
        cube_client *c = test_connect(D.socket, "direct-range");
        cube_handle h = test_empty(c, n), mid = cube_handle_slice(&h, at, n - at - len);
        unsigned char *want = malloc(n);

        ck_assert_ptr_nonnull(want);
        write_pattern(c, &h, 40);
        write_pattern(c, &mid, 41);
        pattern(want, n, 40);
        pattern(want + at, len, 41);
        test_expect_bytes(c, &h, want, n);
        free(want);
        cube_disconnect(c);
}
END_TEST

START_TEST(a_large_write_behind_queued_work_keeps_its_place)
{
        cube_client *c = test_connect(D.socket, "direct-order");
        cube_region *busy, *first;
        cube_handle big = test_empty(c, 64 * MiB), a = test_empty(c, 2 * MiB);

        ck_ok(cube_region_create(c, 64 * MiB, &busy));
        ck_ok(cube_region_create(c, 2 * MiB, &first));
        pattern(first->data, 2 * MiB, 50);
        /* The stream is busy a while; a region write to a waits behind that,
         * and the inline write to a sent after it must land after it. */
        for (int i = 0; i < 4; i++)
                ck_ok(cube_write_region(c, &big, busy, 0));
        ck_ok(cube_write_region(c, &a, first, 0));
        write_pattern(c, &a, 51);
        expect_read_pattern(c, &a, 51);
        cube_region_free(c, busy);
        cube_region_free(c, first);
        cube_disconnect(c);
}
END_TEST

/* The request msgid's answer on a raw peer: whether its error is set. */
static bool raw_answer_failed(int fd, uint32_t msgid)
{
        cube_error *e = raw_answer(fd, msgid);
        bool failed = e != NULL;

        cube_error_free(e);
        return failed;
}

START_TEST(a_large_write_to_a_read_only_import_changes_nothing)
{
        cube_client *owner = test_connect(D.socket, "direct-owner");
        cube_client *reader = test_connect(D.socket, "direct-reader");
        cube_handle h = test_empty(owner, 2 * MiB), imported;
        char token[33];
        void *data = malloc(2 * MiB);
        uint64_t nonce, session;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        cube_error *e;
        int fd;

        ck_assert_ptr_nonnull(data);
        write_pattern(owner, &h, 60);
        ck_ok(cube_sync(owner, NULL, 0));
        ck_ok(cube_export(owner, &h, token));
        ck_ok(cube_import(reader, token, true, &imported));

        /* The library refuses it at the call, and the import reads as ever. */
        pattern(data, 2 * MiB, 61);
        e = cube_write(reader, &imported, data, 2 * MiB);
        ck_assert_msg(e && cube_error_kind_of(e) == CUBE_SERVER_VALIDATION &&
                      strstr(cube_error_message(e), "read-only import"),
                      "the importer's write was not refused: %s",
                      e ? cube_error_message(e) : "it was sent");
        cube_error_free(e);
        expect_read_pattern(reader, &imported, 60);

        /* A peer that sends it all the same (read straight into memory as
         * it arrives, were it writable) is refused by the daemon. */
        fd = raw_connect(D.socket);
        ck_assert_int_ge(fd, 0);
        raw_greet(fd, &nonce, &session);
        cube_handle raw = { .service = nonce, .memory = session << 40 | 1, .size = 2 * MiB };
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        cube__pack_request(&pk, 7, "import", 3);
        cube__pack_str(&pk, token);
        msgpack_pack_uint64(&pk, raw.memory);
        msgpack_pack_true(&pk);
        raw_send_sbuffer(fd, &sb);
        ck_assert(!raw_answer_failed(fd, 7));
        msgpack_sbuffer_clear(&sb);
        cube__pack_notify(&pk, "write", 3);
        msgpack_pack_uint64(&pk, 1);
        cube__pack_handle(&pk, &raw);
        msgpack_pack_bin(&pk, 2 * MiB);
        msgpack_pack_bin_body(&pk, data, 2 * MiB);
        cube__pack_request(&pk, 8, "sync", 2);
        msgpack_pack_uint64(&pk, 1);
        msgpack_pack_array(&pk, 1);
        cube__pack_handle(&pk, &raw);
        raw_send_sbuffer(fd, &sb);
        msgpack_sbuffer_destroy(&sb);
        ck_assert_msg(raw_answer_failed(fd, 8), "the raw write to a read-only import was not "
                      "refused");
        close(fd);

        expect_read_pattern(owner, &h, 60);
        expect_read_pattern(reader, &imported, 60);
        free(data);
        cube_disconnect(reader);
        cube_disconnect(owner);
}
END_TEST

/* Sends the header of an inline write of size bytes to memory, then the
 * first sent bytes of payload. */
static void send_write_head(int fd, uint64_t nonce, uint64_t memory, uint64_t size,
                            const void *payload, uint64_t sent)
{
        msgpack_sbuffer sb;
        msgpack_packer pk;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        cube__pack_notify(&pk, "write", 3);
        msgpack_pack_uint64(&pk, 1);
        cube__pack_handle(&pk, &(cube_handle) { .service = nonce, .memory = memory,
                                                .size = size });
        msgpack_pack_bin(&pk, size);
        raw_send_sbuffer(fd, &sb);
        msgpack_sbuffer_destroy(&sb);
        ck_assert_int_eq(raw_send(fd, payload, sent), 0);
}

/* The same, then hangs up. */
static void hang_up_mid_write(int fd, uint64_t nonce, uint64_t memory, uint64_t size,
                              uint64_t sent)
{
        char *payload = calloc(1, sent);

        ck_assert_ptr_nonnull(payload);
        send_write_head(fd, nonce, memory, size, payload, sent);
        free(payload);
        close(fd);
}

/* A raw peer that creates memory 1 of size bytes and exports it, and a
 * client that imports it (writable) and writes pattern seed into it. */
typedef struct shared_target {
        int fd;
        uint64_t nonce, session, memory;
        cube_client *holder;
        cube_handle imported;
} shared_target;

static shared_target share_raw_memory(uint64_t size, uint64_t seed)
{
        shared_target t = { .fd = raw_connect(D.socket) };
        char token[33] = "";
        msgpack_unpacked up;

        ck_assert_int_ge(t.fd, 0);
        raw_greet(t.fd, &t.nonce, &t.session);
        t.memory = t.session << 40 | 1;
        raw_send_create(t.fd, t.memory, size);
        raw_send_request_u64(t.fd, 7, "export", &t.memory, 1);
        msgpack_unpacked_init(&up);
        while (!token[0] && raw_recv(t.fd, &up, test_scaled_ms(10000)) == 1) {
                const msgpack_object *o = &up.data;
                if (o->type == MSGPACK_OBJECT_ARRAY && o->via.array.size == 4 &&
                    o->via.array.ptr[1].via.u64 == 7) {
                        const msgpack_object *tok = &o->via.array.ptr[3];
                        ck_assert_int_eq(tok->type, MSGPACK_OBJECT_STR);
                        ck_assert_uint_lt(tok->via.str.size, sizeof(token));
                        memcpy(token, tok->via.str.ptr, tok->via.str.size);
                }
        }
        msgpack_unpacked_destroy(&up);
        ck_assert_msg(token[0], "no export token");
        t.holder = test_connect(D.socket, "holder");
        ck_ok(cube_import(t.holder, token, false, &t.imported));
        write_pattern(t.holder, &t.imported, seed);
        ck_ok(cube_sync(t.holder, &t.imported, 1));
        return t;
}

/* A large inline write is read straight into its memory as it arrives; a
 * peer that hangs up halfway must leave no allocation held behind it. */
START_TEST(a_peer_gone_halfway_through_a_large_write_leaves_nothing_held)
{
        const uint64_t size = 4u << 20, sent = 1u << 20;
        int fd = raw_connect(D.socket);
        uint64_t nonce, session;

        ck_assert_int_ge(fd, 0);
        raw_greet(fd, &nonce, &session);
        uint64_t memory = session << 40 | 1;
        raw_send_create(fd, memory, size);
        ck_assert(wait_memory_in_use(D.socket, size, 5000));

        hang_up_mid_write(fd, nonce, memory, size, sent);

        ck_assert_msg(wait_memory_in_use(D.socket, 0, 5000),
                      "the allocation outlived its session");
        cube_disconnect(test_connect(D.socket, "next"));   /* and a new peer is served */
}
END_TEST

/* A large write to memory another session holds is received straight into
 * it in its place in the allocation's order. A peer that hangs up halfway
 * leaves that write scope unfinished: the other holder's read reports
 * TornDown rather than handing back half-written bytes, and a later write
 * repairs the range. */
START_TEST(a_write_cut_short_leaves_torn_down_for_the_other_holders)
{
        const uint64_t size = 4u << 20, sent = 1u << 20;
        shared_target t = share_raw_memory(size, 70);
        cube_client *holder = t.holder;
        cube_handle imported = t.imported;
        const cube_error *u;
        cube_error *e;
        void *back = malloc(size);

        ck_assert_ptr_nonnull(back);
        /* The owner's write: its header and a quarter of its payload. */
        hang_up_mid_write(t.fd, t.nonce, t.memory, size, sent);
        for (long until = test_now_ms() + test_scaled_ms(10000);
             status(holder).sessions > 1 && test_now_ms() < until;)
                usleep(10000);
        ck_assert_uint_eq(status(holder).sessions, 1);

        e = cube_read(holder, &imported, back, size);
        ck_assert_msg(e != NULL, "the half-written memory read as written");
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_SERVER_SEVERAL);
        ck_assert_uint_eq(cube_error_count(e), 1);
        u = cube_error_at(e, 0);
        ck_assert_int_eq(cube_error_kind_of(u), CUBE_SERVER_UNWRITTEN);
        ck_assert_str_eq(cube_error_variant(cube_error_source(u)), "TornDown");
        ck_assert(!cube_error_is_refusal(e));
        ck_assert(!cube_error_is_device_poisoned(e));
        cube_error_free(e);

        write_pattern(holder, &imported, 71);
        expect_read_pattern(holder, &imported, 71);
        free(back);
        cube_disconnect(holder);
}
END_TEST

typedef struct pending_read {
        cube_client *c;
        cube_handle h;
        void *dst;
        uint64_t size;
        cube_error *e;
        volatile int done;
} pending_read;

static void *read_in_thread(void *arg)
{
        pending_read *r = arg;

        r->e = cube_read(r->c, &r->h, r->dst, r->size);
        r->done = 1;
        return NULL;
}

/* Whether session's stream has work queued in the daemon. */
static bool stream_busy(cube_client *c, uint64_t session, uint64_t stream)
{
        cube_stream_info *v;
        bool busy = false;
        size_t n;

        ck_ok(cube_daemon_streams(c, &v, &n));
        for (size_t i = 0; i < n; i++)
                busy |= v[i].session == session && v[i].stream == stream && v[i].pending > 0;
        free(v);
        return busy;
}

/* While a large write to memory another session holds arrives, that
 * session's read of it waits for the payload and then sees all of it. */
START_TEST(a_read_of_shared_memory_waits_for_a_large_write_arriving)
{
        const uint64_t size = 4u << 20, sent = 1u << 20;
        shared_target t = share_raw_memory(size, 80);
        char *payload = malloc(size);
        pending_read r = { .c = t.holder, .h = t.imported, .dst = malloc(size), .size = size };
        pthread_t th;

        ck_assert_ptr_nonnull(payload);
        ck_assert_ptr_nonnull(r.dst);
        pattern(payload, size, 81);
        send_write_head(t.fd, t.nonce, t.memory, size, payload, sent);
        for (long until = test_now_ms() + test_scaled_ms(10000);
             !stream_busy(t.holder, t.session, 1) && test_now_ms() < until;)
                usleep(5000);
        ck_assert_msg(stream_busy(t.holder, t.session, 1),
                      "the write was not queued in its place as its payload arrived");

        ck_assert_int_eq(pthread_create(&th, NULL, read_in_thread, &r), 0);
        usleep(300 * 1000);
        ck_assert_msg(!r.done, "the read returned before the write's payload was whole");
        ck_assert_int_eq(raw_send(t.fd, payload + sent, size - sent), 0);
        pthread_join(th, NULL);
        ck_ok(r.e);
        ck_assert_msg(memcmp(r.dst, payload, size) == 0, "the read did not see the whole write");
        close(t.fd);
        free(payload);
        free(r.dst);
        cube_disconnect(t.holder);
}
END_TEST


START_TEST(copies_beyond_one_message_go_through_staging)
{
        const uint64_t n = 100 * MiB, inline_n = 8 * MiB;
        cube_client *c = test_connect(D.socket, "big-copies");
        cube_session_info *ss;
        uint64_t in0 = 0, out0 = 0, in1 = 0, out1 = 0, in2 = 0, out2 = 0;
        unsigned char *data, *back;
        cube_handle h, small;
        size_t k;

        ck_assert_uint_eq(cube_client_limits(c)->max_message_bytes, 16 * MiB);
        data = malloc(n);
        back = malloc(n);
        ck_assert_ptr_nonnull(data);
        ck_assert_ptr_nonnull(back);
        pattern(data, n, 123);
        h = test_empty(c, n);

#define SESSION_BYTES(in, out) do { \
        ck_ok(cube_daemon_sessions(c, &ss, &k)); \
        for (size_t i_ = 0; i_ < k; i_++) \
                if (ss[i_].id == cube_client_session(c)) { \
                        in = ss[i_].bytes_in; \
                        out = ss[i_].bytes_out; \
                } \
        free(ss); \
} while (0)

        SESSION_BYTES(in0, out0);
        ck_ok(cube_write(c, &h, data, n));
        memset(back, 0, n);
        ck_ok(cube_read(c, &h, back, n));
        ck_assert(memcmp(back, data, n) == 0);
        SESSION_BYTES(in1, out1);
        /* Neither copy crossed the socket. */
        ck_assert_msg(in1 - in0 < 64 * KiB, "%" PRIu64 " bytes came in", in1 - in0);
        ck_assert_msg(out1 - out0 < 64 * KiB, "%" PRIu64 " bytes went out", out1 - out0);
        /* And the regions made for them are gone. */
        ck_ok(cube_sync(c, NULL, 0));
        ck_assert(wait_daemon_regions(0, 5000));

        /* Below one message, the bytes go inline. */
        small = cube_handle_slice(&h, 0, n - inline_n);
        pattern(data, inline_n, 124);
        ck_ok(cube_write(c, &small, data, inline_n));
        ck_ok(cube_read(c, &small, back, inline_n));
        ck_assert(memcmp(back, data, inline_n) == 0);
        SESSION_BYTES(in2, out2);
        ck_assert_uint_ge(in2 - in1, inline_n);
        ck_assert_uint_ge(out2 - out1, inline_n);
        /* The rest of the big buffer was left alone. */
        {
                cube_handle rest = cube_handle_slice(&h, inline_n, 0);
                ck_ok(cube_read(c, &rest, back, n - inline_n));
                pattern(data, n, 123);
                ck_assert(memcmp(back, data + inline_n, n - inline_n) == 0);
        }
#undef SESSION_BYTES
        free(data);
        free(back);
        cube_disconnect(c);
}
END_TEST

/* A freed gigabyte leaves the daemon's resident memory at once, before any
 * memory_cleanup, and what reuses its page reads zeros, not its bytes. */
START_TEST(freed_device_memory_goes_back_to_the_host)
{
        const uint64_t size = 1024 * MiB;
        cube_client *c = test_connect(D.socket, "gigabyte");
        char *buf = malloc(size), *back = malloc(MiB), zeros[4096] = { 0 };
        long before, held, after, shmem_after;
        cube_handle h;

        ck_assert_ptr_nonnull(buf);
        ck_assert_ptr_nonnull(back);
        memset(buf, 0x5a, size);
        ck_ok(cube_sync(c, NULL, 0));
        before = test_rss_kib(D.pid);
        ck_ok(cube_create(c, buf, size, &h));
        ck_ok(cube_sync(c, &h, 1));
        held = test_rss_kib(D.pid);
        ck_assert_msg(held - before > 900 * 1024, "writing 1 GiB made the daemon %ld KiB larger",
                      held - before);
        ck_ok(cube_free(c, &h));
        ck_assert(wait_memory_in_use(D.socket, 0, 5000));
        after = test_rss_kib(D.pid);
        shmem_after = test_shmem_kib(D.pid);
        ck_assert_msg(after - before < 64 * 1024, "the daemon's resident memory is %ld KiB above "
                      "where it was before 1 GiB was written and freed (%ld KiB of shared "
                      "memory)", after - before, shmem_after);

        /* The same size reuses the page: it shows none of the freed bytes. */
        ck_ok(cube_empty(c, size, &h));
        cube_handle first = cube_handle_slice(&h, 0, size - MiB);
        ck_ok(cube_read(c, &first, back, MiB));
        for (uint64_t i = 0; i < MiB; i += sizeof(zeros))
                ck_assert_msg(memcmp(back + i, zeros, sizeof(zeros)) == 0, "byte %" PRIu64
                              " of a reused page still holds what was freed", i);
        ck_ok(cube_free(c, &h));
        free(back);
        free(buf);
        cube_disconnect(c);
}
END_TEST

static Suite *memory_suite(void)
{
        Suite *s = suite_create("memory");
        TCase *pools = tcase_create("pools");           /* a 64 MiB device */
        TCase *sizes = tcase_create("sizes");           /* the default 4 GiB device */
        TCase *staging = tcase_create("staging");       /* a 1 GiB device */
        TCase *quota = tcase_create("quota");           /* region-memory 4M */
        TCase *message = tcase_create("message");       /* max-message 16M */
        TCase *all[] = { pools, sizes, staging, quota, message };

        tcase_add_checked_fixture(pools, start_64m, test_stop_clean);
        tcase_add_checked_fixture(sizes, start_default, test_stop_clean);
        tcase_add_checked_fixture(staging, start_1g, test_stop_clean);
        tcase_add_checked_fixture(quota, start_region_4m, test_stop_clean);
        tcase_add_checked_fixture(message, start_message_16m, test_stop_clean);
        for (size_t i = 0; i < LEN(all); i++) {
                tcase_set_timeout(all[i], 60);
                suite_add_tcase(s, all[i]);
        }

        tcase_add_test_needing(pools, small_allocations_share_one_sliced_page,
                               TEST_NEEDS_CPU_DEVICE);
        tcase_add_test_needing(pools, a_large_allocation_gets_an_exclusive_page_reused_by_size,
                               TEST_NEEDS_CPU_DEVICE);
        tcase_add_test_needing(pools, persistent_pages_are_reused_only_by_exact_size,
                               TEST_NEEDS_CPU_DEVICE);
        tcase_add_test_needing(pools, dedicated_pages_are_never_reused_and_go_back_at_cleanup,
                               TEST_NEEDS_CPU_DEVICE);
        tcase_add_test_needing(pools, cleanup_returns_every_page_without_a_live_allocation,
                               TEST_NEEDS_CPU_DEVICE);
        tcase_add_test_needing(pools, reports_exist_only_for_created_streams_and_stream_ids_lists_them,
                               TEST_NEEDS_CPU_DEVICE);
        tcase_add_test(pools, a_full_device_is_out_of_memory_until_empty_pages_are_reclaimed);
        tcase_add_test(pools, above_the_largest_page_is_buffer_too_big);
        tcase_add_test(pools, a_batch_above_the_largest_page_is_buffer_too_big);

        tcase_add_test(sizes, sixty_five_live_page_sizes_are_page_sizes_exhausted);
        tcase_add_test_needing(sizes, strided_round_trips_land_rows_on_their_pitch,
                               TEST_NEEDS_CPU_DEVICE);
        tcase_add_test(sizes, null_host_memory_is_validation_and_allocates_nothing);
        tcase_add_test(sizes, other_layouts_are_unsupported_strides_and_overruns_are_validation);
        tcase_add_test(sizes, unsupported_strides_claim_only_the_handles_range);
        tcase_add_test(sizes, a_batch_of_tensors_shares_one_allocation_laid_out_by_the_policy);
        tcase_add_test(sizes, created_tensors_hold_their_data);
        tcase_add_test(sizes, hostile_batches_are_refused_with_validation);
        tcase_add_test_needing(sizes, freed_device_memory_goes_back_to_the_host,
                               TEST_NEEDS_CPU_DEVICE);

        tcase_add_test(staging, a_free_waits_for_the_work_queued_on_the_memory);
        tcase_add_test(staging, staged_round_trips_at_every_size);
        tcase_add_test(staging, a_region_is_reused_for_several_writes_after_a_sync);
        tcase_add_test(staging, a_large_inline_write_lands_on_exactly_its_range);
        tcase_add_test(staging, a_large_write_behind_queued_work_keeps_its_place);
        tcase_add_test(staging, a_large_write_to_a_read_only_import_changes_nothing);
        tcase_add_test(staging, a_peer_gone_halfway_through_a_large_write_leaves_nothing_held);
        /* Payloads read straight into memory need memory the host can
         * address: the CPU device's. */
        tcase_add_test_needing(staging, a_write_cut_short_leaves_torn_down_for_the_other_holders,
                               TEST_NEEDS_CPU_DEVICE);
        tcase_add_test_needing(staging, a_read_of_shared_memory_waits_for_a_large_write_arriving,
                               TEST_NEEDS_CPU_DEVICE);

        tcase_add_test(quota, regions_count_against_the_session_quota);
        tcase_add_test(quota, a_range_beyond_the_region_is_validation);
        tcase_add_test(quota, regions_are_reclaimed_when_the_session_ends);

        tcase_add_test(message, copies_beyond_one_message_go_through_staging);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(memory_suite());
        int failed;

        srunner_run_all(sr, CK_ENV);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? 1 : 0;
}

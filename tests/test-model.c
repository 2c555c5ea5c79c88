/*
 * test-model.c - the failure store against a reference model.
 *
 * One real cubed, started with --enable-fault-injection, is driven through
 * libcubeclient by random sequences of writes, launches, reads, syncs,
 * checks and reallocations on two streams, some of them with an injected
 * fault. A small model kept here says what every read and sync must answer
 * if every operation ran in program order, whatever the timing: per buffer,
 * per element, a value, or the label of the failure that claims it. Each
 * injected fault carries a unique label ("m<sequence>-<step>") as its
 * reason, so a reported failure maps back to the step that caused it.
 *
 * CUBE_MODEL_SEED picks the seed (default: the time), CUBE_MODEL_SEQUENCES
 * the number of sequences (default 10000), CUBE_MODEL_FIRST the first
 * sequence to run; every sequence is generated from the seed and its own
 * number alone, so a failure replays with the seed and the sequence number
 * it prints.
 *
 * A few fixed cases pin the orderings that matter most.
 */
#include <check.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"

#define ELEMS 16u                               /* u32 elements in a model buffer */
#define BYTES ((uint64_t) ELEMS * sizeof(uint32_t))
#define MAX_BUFS 4
#define MAX_OPS 20
#define LEN(a) (sizeof(a) / sizeof((a)[0]))
/* A reservation failure has no reason field: its label rides in the size. */
#define ALLOC_CODE_BASE (1ull << 40)

/* ---------------------------------------------------------------------------
 * Kernels
 * ------------------------------------------------------------------------- */

/* Spins about scalar 0 microseconds, then writes it into out[0]: device work
 * that later work on its stream queues behind. */
static const char nap_source[] =
        "KERNEL void nap(uint32_t *out, INFO)\n"
        "{\n"
        "        uint32_t us = SCALAR(uint32_t, 0, 0);\n"
        "        uint64_t n = (uint64_t) us * 1000, x = out[1] | 1;\n"
        "\n"
        "        for (uint64_t i = 0; i < n; i++) {\n"
        "                x ^= x << 13;\n"
        "                x ^= x >> 7;\n"
        "                x ^= x << 17;\n"
        "        }\n"
        "        out[0] = us;\n"
        "        out[1] = (uint32_t) x;\n"
        "}\n";

static const cube_buffer_io nap_io[1] = { CUBE_BUFFER_WRITE_ONLY };

/* Sends a launch of k over bufs on the current stream: the u32 scalars
 * given, then each buffer's length in u32 elements. */
static void launch(cube_client *c, uint64_t k, const cube_handle *bufs, const cube_buffer_io *io,
                   size_t n, uint32_t units, const uint32_t *scalars, size_t n_scalars,
                   cube_launch_mode mode)
{
        cube_launch l = {
                .kernel = k, .cube_count = { 1, 1, 1 }, .cube_dim = { units, 1, 1 },
                .buffers = bufs, .io = io, .n_buffers = n, .mode = mode,
        };

        test_launch_u32(c, l, scalars, n_scalars);
}

static void launch_affine(cube_client *c, uint64_t k, cube_handle in, cube_handle out)
{
        launch(c, k, (cube_handle[]) { in, out }, test_affine_io, 2, ELEMS, NULL, 0,
               CUBE_LAUNCH_EXECUTE);
}

static void launch_nap(cube_client *c, uint64_t k, const cube_handle *scratch, uint32_t us)
{
        launch(c, k, scratch, nap_io, 1, 1, &us, 1, CUBE_LAUNCH_EXECUTE);
}

/* Compiles both kernels now, so that nothing later waits for the compiler. */
static void precompile(cube_client *c, uint64_t affine_k, uint64_t nap_k)
{
        cube_handle a, b;

        ck_ok(cube_empty(c, BYTES, &a));
        ck_ok(cube_empty(c, BYTES, &b));
        launch(c, affine_k, (cube_handle[]) { a, b }, test_affine_io, 2, ELEMS, NULL, 0,
               CUBE_LAUNCH_COMPILE);
        launch(c, nap_k, &a, nap_io, 1, 1, (uint32_t[]) { 0 }, 1, CUBE_LAUNCH_COMPILE);
        ck_ok(cube_sync(c, NULL, 0));
        ck_ok(cube_free(c, &a));
        ck_ok(cube_free(c, &b));
}

/* ---------------------------------------------------------------------------
 * Labels: what an injected fault is called, and how a report names it
 * ------------------------------------------------------------------------- */

static void label_text(char *buf, size_t n, uint32_t seq, uint32_t step)
{
        snprintf(buf, n, "m%" PRIu32 "-%" PRIu32, seq, step);
}

/* The label an Unwritten report's root carries (the first reason on the way
 * down, or a reservation failure's coded size), into buf; false when it
 * carries none (then buf says what it is). */
static bool root_label(const cube_error *u, char *buf, size_t n)
{
        const cube_error *e = cube_error_source(u);

        for (; e; e = cube_error_source(e)) {
                const char *reason = cube_error_reason(e);
                if (cube_error_kind_of(e) == CUBE_IO_OUT_OF_MEMORY &&
                    cube_error_size(e) >= ALLOC_CODE_BASE) {
                        uint64_t code = cube_error_size(e) - ALLOC_CODE_BASE;
                        label_text(buf, n, (uint32_t) (code / 1000), (uint32_t) (code % 1000));
                        return true;
                }
                if (reason && reason[0]) {
                        snprintf(buf, n, "%s", reason);
                        return true;
                }
        }
        snprintf(buf, n, "(not an injected fault: %s)",
                 cube_error_source(u) ? cube_error_message(cube_error_source(u)) : "no root");
        return false;
}

/* ---------------------------------------------------------------------------
 * The model
 * ------------------------------------------------------------------------- */

/* A label is the step that injected the fault, plus one; 0 is clean. A set of
 * labels is a mask with bit `step` set. */
typedef uint64_t label_set;

typedef struct mbuf {
        cube_handle h;
        bool reserved;                  /* false: its reservation failed */
        uint32_t value[ELEMS];
        uint8_t label[ELEMS];
} mbuf;

typedef struct run {
        cube_client *c;
        uint64_t seed;
        uint32_t seq, step;
        uint64_t rng;
        uint64_t affine_k, nap_k;
        cube_handle scratch[2];         /* what naps write, one per stream */
        mbuf b[MAX_BUFS];
        size_t n;
        char log[8192];                 /* this sequence's steps, for a failure */
        size_t log_len;
} run;

static uint64_t splitmix(uint64_t *x)
{
        uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
}

static uint32_t pick(run *r, uint32_t n)
{
        return (uint32_t) (splitmix(&r->rng) % n);
}

static bool chance(run *r, uint32_t percent)
{
        return pick(r, 100) < percent;
}

static void random_values(run *r, uint32_t *v, size_t n)
{
        for (size_t i = 0; i < n; i++)
                v[i] = (uint32_t) splitmix(&r->rng);
}

__attribute__((format(printf, 2, 3)))
static void note(run *r, const char *fmt, ...)
{
        char line[256];
        va_list ap;
        int k;

        va_start(ap, fmt);
        vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);
        k = snprintf(r->log + r->log_len, sizeof(r->log) - r->log_len, "  step %2" PRIu32 ": %s\n",
                     r->step, line);
        if (k > 0)
                r->log_len += (size_t) k;
        if (r->log_len >= sizeof(r->log))
                r->log_len = sizeof(r->log) - 1;
}

/* Fails the test, naming the seed, the sequence and the step, and printing
 * the sequence's steps so far. */
__attribute__((format(printf, 2, 3), noreturn))
static void model_fail(run *r, const char *fmt, ...)
{
        char what[2048];
        va_list ap;

        va_start(ap, fmt);
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        fprintf(stderr, "model: seed %" PRIu64 ", sequence %" PRIu32 ", step %" PRIu32 ": %s\n"
                "model: the sequence so far (replay with CUBE_MODEL_SEED=%" PRIu64
                " CUBE_MODEL_FIRST=%" PRIu32 " CUBE_MODEL_SEQUENCES=1):\n%s", r->seed, r->seq,
                r->step, what, r->seed, r->seq, r->log);
        ck_abort_msg("seed %" PRIu64 ", sequence %" PRIu32 ", step %" PRIu32 ": %s", r->seed,
                     r->seq, r->step, what);
        abort();        /* not reached: ck_abort_msg ends the test */
}

static void format_set(const run *r, label_set s, char *buf, size_t n)
{
        size_t len = 0;

        buf[0] = '\0';
        if (!s) {
                snprintf(buf, n, "{}");
                return;
        }
        for (uint32_t i = 0; i < 64 && len + 1 < n; i++) {
                if (!(s & (1ull << i)))
                        continue;
                int k = snprintf(buf + len, n - len, "%sm%" PRIu32 "-%" PRIu32,
                                 len ? " " : "{", r->seq, i);
                if (k > 0)
                        len += (size_t) k;
        }
        if (len + 1 < n)
                snprintf(buf + len, n - len, "}");
}

/* The labels over elements [a, b) of buffer i. */
static label_set labels_of(const run *r, size_t i, uint32_t a, uint32_t b)
{
        label_set s = 0;

        for (uint32_t e = a; e < b; e++)
                if (r->b[i].label[e])
                        s |= 1ull << (r->b[i].label[e] - 1);
        return s;
}

static bool all_clean(const run *r, size_t i)
{
        return labels_of(r, i, 0, ELEMS) == 0;
}

/* What e reports, as a set of labels of this sequence. Fails on anything
 * that is not Several of Unwritten (or a lone Unwritten), and on a label
 * that is not of this sequence. */
static label_set reported(run *r, const cube_error *e, const char *what)
{
        label_set got = 0;
        size_t n;

        if (!e)
                return 0;
        if (cube_error_kind_of(e) != CUBE_SERVER_SEVERAL &&
            cube_error_kind_of(e) != CUBE_SERVER_UNWRITTEN)
                model_fail(r, "%s answered %s, not a failure report: %s", what,
                           cube_error_variant(e), cube_error_message(e));
        n = cube_error_kind_of(e) == CUBE_SERVER_SEVERAL ? cube_error_count(e) : 1;
        if (n == 0)
                model_fail(r, "%s answered an empty Several", what);
        for (size_t i = 0; i < n; i++) {
                const cube_error *u = cube_error_kind_of(e) == CUBE_SERVER_SEVERAL ?
                                      cube_error_at(e, i) : e;
                char label[256];
                uint32_t seq, step;
                int end = 0;

                if (cube_error_kind_of(u) != CUBE_SERVER_UNWRITTEN)
                        model_fail(r, "%s: member %zu is %s, not Unwritten: %s", what, i,
                                   cube_error_variant(u), cube_error_message(e));
                if (!root_label(u, label, sizeof(label)))
                        model_fail(r, "%s reported a failure no step injected: %s", what, label);
                if (sscanf(label, "m%" SCNu32 "-%" SCNu32 "%n", &seq, &step, &end) != 2 ||
                    label[end] != '\0' || step >= 64)
                        model_fail(r, "%s reported a label the model does not make: \"%s\"",
                                   what, label);
                if (seq != r->seq)
                        model_fail(r, "%s reported %s, a failure of sequence %" PRIu32
                                   ", which freed everything it made", what, label, seq);
                got |= 1ull << step;
        }
        return got;
}

/* Asserts that e reports exactly the failures want (exact), or a non-empty
 * part of them (a read, which answers with what is known when it is
 * handled). Frees e. */
static void expect_set(run *r, cube_error *e, label_set want, bool exact, const char *what)
{
        char ws[512], gs[512];
        label_set got = reported(r, e, what);
        bool ok = exact ? got == want : (want ? got != 0 && (got & ~want) == 0 : got == 0);

        if (!ok) {
                format_set(r, want, ws, sizeof(ws));
                format_set(r, got, gs, sizeof(gs));
                model_fail(r, "%s reported %s; the model says %s%s%s", what, gs,
                           exact || !want ? "exactly " : "a non-empty part of ", ws,
                           e ? "" : " (it succeeded)");
        }
        cube_error_free(e);
}

/* Step: creates buffer i afresh with random data, its reservation failing
 * when fault. */
static void op_create(run *r, size_t i, uint64_t stream, bool fault, const char *verb)
{
        mbuf *m = &r->b[i];

        random_values(r, m->value, ELEMS);
        note(r, "stream %" PRIu64 ": %s b%zu%s", stream, verb, i,
             fault ? " with an injected reservation failure" : "");
        if (fault)
                ck_ok(cube_debug_inject(r->c, CUBE_FAULT_ALLOC, CUBE_IO_OUT_OF_MEMORY, "",
                                        ALLOC_CODE_BASE + (uint64_t) r->seq * 1000 + r->step));
        cube_stream_set(stream);
        ck_ok(cube_create(r->c, m->value, BYTES, &m->h));
        m->reserved = !fault;
        memset(m->label, fault ? (int) (r->step + 1) : 0, sizeof(m->label));
}

/* Step: frees buffer i and creates a new one in its place. */
static void op_realloc(run *r, size_t i, uint64_t stream, bool fault)
{
        ck_ok(cube_free(r->c, &r->b[i].h));
        op_create(r, i, stream, fault, "free and create again");
}

static cube_handle elements(const cube_handle *h, uint32_t a, uint32_t b)
{
        return cube_handle_slice(h, a * sizeof(uint32_t), (ELEMS - b) * sizeof(uint32_t));
}

/* Step: writes random data into elements [a, b) of buffer i; the device copy
 * fails when fault. */
static void op_write(run *r, size_t i, uint32_t a, uint32_t b, uint64_t stream, bool fault)
{
        mbuf *m = &r->b[i];
        uint32_t data[ELEMS];
        cube_handle h = elements(&m->h, a, b);

        ck_assert(!fault || (m->reserved && a < b));
        random_values(r, data, b - a);
        note(r, "stream %" PRIu64 ": write b%zu[%" PRIu32 ", %" PRIu32 ")%s", stream, i, a, b,
             fault ? " with an injected copy fault" : "");
        if (fault) {
                char label[32];
                label_text(label, sizeof(label), r->seq, r->step);
                ck_ok(cube_debug_inject(r->c, CUBE_FAULT_COPY, CUBE_SERVER_GENERIC, label, 0));
        }
        cube_stream_set(stream);
        ck_ok(cube_write(r->c, &h, data, (b - a) * sizeof(uint32_t)));
        if (!m->reserved)
                return;         /* nowhere to put the bytes: nothing changes */
        for (uint32_t e = a; e < b; e++) {
                if (fault) {
                        m->label[e] = (uint8_t) (r->step + 1);
                } else {
                        m->value[e] = data[e - a];
                        m->label[e] = 0;
                }
        }
}

enum launch_fault { NO_FAULT, ENQUEUE_FAULT, DEVICE_FAULT };

/* Step: affine over all of buffer in into buffer out. */
static void op_launch(run *r, size_t in, size_t out, uint64_t stream, enum launch_fault fault)
{
        mbuf *mi = &r->b[in], *mo = &r->b[out];
        static const char *const how[] = {
                "", " with an injected enqueue fault", " with an injected device fault",
        };
        uint8_t first = 0;

        ck_assert(fault == NO_FAULT || (all_clean(r, in) && mo->reserved));
        note(r, "stream %" PRIu64 ": launch affine(b%zu -> b%zu)%s", stream, in, out, how[fault]);
        if (fault != NO_FAULT) {
                char label[32];
                label_text(label, sizeof(label), r->seq, r->step);
                ck_ok(cube_debug_inject(r->c, fault == ENQUEUE_FAULT ? CUBE_FAULT_LAUNCH :
                                        CUBE_FAULT_DEVICE_LAUNCH, CUBE_LAUNCH_UNKNOWN, label, 0));
        }
        cube_stream_set(stream);
        launch_affine(r->c, r->affine_k, mi->h, mo->h);

        for (uint32_t e = 0; e < ELEMS && !first; e++)
                first = mi->label[e];
        if (!mo->reserved)
                return;         /* skipped, or nowhere to write: out keeps its failure */
        for (uint32_t e = 0; e < ELEMS; e++) {
                if (first) {
                        mo->label[e] = first;           /* skipped on in's first failure */
                } else if (fault != NO_FAULT) {
                        mo->label[e] = (uint8_t) (r->step + 1);
                } else {
                        mo->value[e] = test_affine(mi->value[e]);
                        mo->label[e] = 0;
                }
        }
}

/* Step: reads elements [a, b) of buffer i. */
static void op_read(run *r, size_t i, uint32_t a, uint32_t b, uint64_t stream)
{
        mbuf *m = &r->b[i];
        cube_handle h = elements(&m->h, a, b);
        label_set want = labels_of(r, i, a, b);
        uint32_t got[ELEMS];
        char what[96];
        cube_error *e;

        note(r, "stream %" PRIu64 ": read b%zu[%" PRIu32 ", %" PRIu32 ")", stream, i, a, b);
        snprintf(what, sizeof(what), "the read of b%zu[%" PRIu32 ", %" PRIu32 ")", i, a, b);
        cube_stream_set(stream);
        memset(got, 0, sizeof(got));
        e = cube_read(r->c, &h, got, (b - a) * sizeof(uint32_t));
        if (e || want) {
                expect_set(r, e, want, false, what);
                return;
        }
        for (uint32_t k = a; k < b; k++)
                if (got[k - a] != m->value[k])
                        model_fail(r, "%s returned 0x%08" PRIx32 " for element %" PRIu32
                                   "; the model says 0x%08" PRIx32, what, got[k - a], k,
                                   m->value[k]);
}

/* Step: syncs stream on buffers idx[0..n), then, when check, checks them. */
static void op_sync(run *r, const size_t *idx, size_t n, uint64_t stream, bool check)
{
        cube_handle hs[MAX_BUFS];
        label_set want = 0;
        char names[64] = "", what[128];
        size_t len = 0;

        for (size_t k = 0; k < n; k++) {
                hs[k] = r->b[idx[k]].h;
                want |= labels_of(r, idx[k], 0, ELEMS);
                len += (size_t) snprintf(names + len, sizeof(names) - len, "%sb%zu",
                                         k ? ", " : "", idx[k]);
        }
        note(r, "stream %" PRIu64 ": sync [%s]%s", stream, names, check ? ", then check" : "");
        cube_stream_set(stream);
        snprintf(what, sizeof(what), "the sync on stream %" PRIu64 " of [%s]", stream, names);
        expect_set(r, cube_sync(r->c, hs, n), want, true, what);
        if (check) {
                snprintf(what, sizeof(what), "the check of [%s] after a sync", names);
                expect_set(r, cube_check(r->c, hs, n), want, true, what);
        }
}

/* Step: a nap on stream, so that later work queues behind it. */
static void op_nap(run *r, uint64_t stream, uint32_t us)
{
        note(r, "stream %" PRIu64 ": nap %" PRIu32 " us", stream, us);
        cube_stream_set(stream);
        launch_nap(r->c, r->nap_k, &r->scratch[stream - 1], us);
}

/* One random step. */
static void random_step(run *r)
{
        uint64_t stream = 1 + pick(r, 2);
        uint32_t what = pick(r, 100);
        size_t i = pick(r, (uint32_t) r->n);

        if (what < 26) {
                uint32_t a = pick(r, ELEMS), b = a + 1 + pick(r, ELEMS - a);
                if (chance(r, 8))
                        b = a;          /* an empty write: it changes nothing */
                op_write(r, i, a, b, stream, r->b[i].reserved && a < b && chance(r, 30));
        } else if (what < 46) {
                size_t out = (i + 1 + pick(r, (uint32_t) r->n - 1)) % r->n;
                enum launch_fault f = NO_FAULT;
                if (all_clean(r, i) && r->b[out].reserved) {
                        uint32_t p = pick(r, 100);
                        f = p < 15 ? ENQUEUE_FAULT : p < 30 ? DEVICE_FAULT : NO_FAULT;
                }
                op_launch(r, i, out, stream, f);
        } else if (what < 72) {
                uint32_t a = 0, b = ELEMS;
                if (chance(r, 40)) {
                        a = pick(r, ELEMS);
                        b = a + 1 + pick(r, ELEMS - a);
                }
                op_read(r, i, a, b, stream);
        } else if (what < 88) {
                size_t idx[2] = { i, (i + 1 + pick(r, (uint32_t) r->n - 1)) % r->n };
                op_sync(r, idx, chance(r, 30) ? 2 : 1, stream, chance(r, 40));
        } else if (what < 95) {
                op_realloc(r, i, stream, chance(r, 30));
        } else {
                op_nap(r, stream, 100 + pick(r, 400));
        }
}

/* One whole sequence: fresh buffers, random steps, then every buffer
 * compared exactly, and freed. */
static void run_sequence(run *r, uint32_t seq)
{
        size_t all[MAX_BUFS];
        uint32_t steps;

        r->seq = seq;
        r->step = 0;
        r->rng = r->seed ^ (0x2545f4914f6cdd1dull * (seq + 1ull));
        (void) splitmix(&r->rng);
        r->log_len = 0;
        r->log[0] = '\0';
        r->n = 3 + pick(r, 2);
        steps = 8 + pick(r, MAX_OPS - 8 + 1);

        for (size_t i = 0; i < r->n; i++, r->step++)
                op_create(r, i, 1 + pick(r, 2), chance(r, 10), "create");
        for (uint32_t s = 0; s < steps; s++, r->step++)
                random_step(r);

        /* The end: a sync over everything, then each buffer on its own. */
        for (size_t i = 0; i < r->n; i++)
                all[i] = i;
        op_sync(r, all, r->n, 1, false);
        r->step++;
        for (size_t i = 0; i < r->n; i++, r->step++) {
                op_sync(r, &all[i], 1, 2, true);
                op_read(r, i, 0, ELEMS, 1 + pick(r, 2));
        }
        for (size_t i = 0; i < r->n; i++)
                ck_ok(cube_free(r->c, &r->b[i].h));
}

static uint64_t env_u64(const char *name, uint64_t fallback)
{
        const char *v = getenv(name);
        char *end;
        unsigned long long x;

        if (!v || !*v)
                return fallback;
        x = strtoull(v, &end, 0);
        ck_assert_msg(*end == '\0', "%s=%s is not a number", name, v);
        return x;
}

static double now_s(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

START_TEST(random_sequences_agree_with_the_model)
{
        struct timespec ts;
        uint64_t count, first;
        static run r;
        double t0;

        clock_gettime(CLOCK_REALTIME, &ts);
        memset(&r, 0, sizeof(r));
        r.seed = env_u64("CUBE_MODEL_SEED", (uint64_t) ts.tv_sec * 1000003u + (uint64_t) ts.tv_nsec);
        count = env_u64("CUBE_MODEL_SEQUENCES", 10000);
        first = env_u64("CUBE_MODEL_FIRST", 0);
        fprintf(stderr, "model: seed %" PRIu64 ", sequences %" PRIu64 " to %" PRIu64
                " (CUBE_MODEL_SEED, CUBE_MODEL_FIRST, CUBE_MODEL_SEQUENCES)\n", r.seed, first,
                first + count);

        ck_ok(cube_connect(D.socket, "model", &r.c));
        r.affine_k = test_kernel(r.c, test_affine_source, "affine");
        r.nap_k = test_kernel(r.c, nap_source, "nap");
        precompile(r.c, r.affine_k, r.nap_k);
        for (uint64_t s = 0; s < 2; s++) {
                cube_stream_set(s + 1);
                ck_ok(cube_empty(r.c, BYTES, &r.scratch[s]));
        }

        t0 = now_s();
        for (uint64_t s = first; s < first + count; s++) {
                run_sequence(&r, (uint32_t) s);
                /* Every failure of the sequence died with its buffers. */
                if ((s + 1) % 1000 == 0 || s + 1 == first + count) {
                        cube_stream_set(1);
                        ck_ok(cube_sync(r.c, NULL, 0));
                        ck_assert_msg(test_live_failures(r.c) == 0, "seed %" PRIu64 ", after "
                                      "sequence %" PRIu64 ": %zu failure record(s) outlived "
                                      "every buffer", r.seed, s, test_live_failures(r.c));
                }
        }
        fprintf(stderr, "model: %" PRIu64 " sequences in %.2f s\n", count, now_s() - t0);
        cube_stream_set(0);
        cube_disconnect(r.c);
}
END_TEST

/* ---------------------------------------------------------------------------
 * Fixed orderings
 * ------------------------------------------------------------------------- */

/* What a fixed case needs: a client with both kernels compiled, a buffer to
 * nap on, and a nap long enough that work queued behind it is handled
 * before it ends. */
typedef struct fixed {
        cube_client *c;
        uint64_t affine_k, nap_k;
        cube_handle scratch;
        uint32_t nap_us;
} fixed;

static void fixed_start(fixed *f, const char *name)
{
        ck_ok(cube_connect(D.socket, name, &f->c));
        f->affine_k = test_kernel(f->c, test_affine_source, "affine");
        f->nap_k = test_kernel(f->c, nap_source, "nap");
        precompile(f->c, f->affine_k, f->nap_k);
        cube_stream_set(1);
        ck_ok(cube_empty(f->c, BYTES, &f->scratch));
        f->nap_us = 100000u * (uint32_t) test_timeout_multiplier();
}

static void fixed_stop(fixed *f)
{
        cube_stream_set(0);
        cube_disconnect(f->c);
}

static cube_handle created(cube_client *c, const uint32_t *data)
{
        cube_handle h;

        ck_ok(cube_create(c, data, BYTES, &h));
        return h;
}

/* Asserts e reports exactly one failure, whose root has reason label; frees
 * e. */
static void expect_label(cube_error *e, const char *label, const char *what)
{
        char got[256];

        ck_assert_msg(e != NULL, "%s succeeded; it should report %s", what, label);
        ck_assert_msg(cube_error_kind_of(e) == CUBE_SERVER_SEVERAL && cube_error_count(e) == 1,
                      "%s: expected Several of one failure, got %s: %s", what,
                      cube_error_variant(e), cube_error_message(e));
        ck_assert_msg(cube_error_kind_of(cube_error_at(e, 0)) == CUBE_SERVER_UNWRITTEN,
                      "%s: the member is %s: %s", what, cube_error_variant(cube_error_at(e, 0)),
                      cube_error_message(e));
        ck_assert_msg(root_label(cube_error_at(e, 0), got, sizeof(got)) &&
                      strcmp(got, label) == 0, "%s reported %s, not %s: %s", what, got, label,
                      cube_error_message(e));
        cube_error_free(e);
}

static void expect_values(cube_client *c, const cube_handle *h, const uint32_t *want,
                          const char *what)
{
        uint32_t got[ELEMS];

        ck_ok(cube_read(c, h, got, BYTES));
        for (uint32_t i = 0; i < ELEMS; i++)
                ck_assert_msg(got[i] == want[i], "%s: element %u reads 0x%08x, not 0x%08x", what,
                              i, got[i], want[i]);
}

/* A late copy fault lands only on bytes no later write claimed: a good
 * write over the same range, sent while the failing one is still queued,
 * wins. Once on the failing write's stream, once on the other. */
START_TEST(a_later_write_wins_over_an_earlier_copy_that_fails_late)
{
        fixed f;
        uint32_t d0[ELEMS], d1[ELEMS], d2[ELEMS];

        fixed_start(&f, "later-write");
        fill_random(d0, sizeof(d0), 1);
        fill_random(d1, sizeof(d1), 2);
        fill_random(d2, sizeof(d2), 3);
        for (uint64_t w2_stream = 1; w2_stream <= 2; w2_stream++) {
                cube_handle b;

                cube_stream_set(1);
                b = created(f.c, d0);
                ck_ok(cube_sync(f.c, &b, 1));
                launch_nap(f.c, f.nap_k, &f.scratch, f.nap_us);
                ck_ok(cube_debug_inject(f.c, CUBE_FAULT_COPY, CUBE_SERVER_GENERIC, "W1", 0));
                ck_ok(cube_write(f.c, &b, d1, BYTES));
                cube_stream_set(w2_stream);
                ck_ok(cube_write(f.c, &b, d2, BYTES));
                cube_stream_set(1);
                ck_ok(cube_sync(f.c, &b, 1));
                ck_ok(cube_check(f.c, &b, 1));
                expect_values(f.c, &b, d2, "the buffer W2 wrote over W1");
                ck_ok(cube_free(f.c, &b));
        }
        ck_ok(cube_sync(f.c, NULL, 0));
        ck_assert_uint_eq(test_live_failures(f.c), 0);
        fixed_stop(&f);
}
END_TEST

/* A read queued right behind a write that fails late reports the write's
 * failure, never the bytes from before it: on the write's stream, and on
 * the other. */
START_TEST(a_read_behind_a_copy_that_fails_late_reports_it)
{
        fixed f;
        uint32_t d0[ELEMS], d1[ELEMS], got[ELEMS];

        fixed_start(&f, "read-behind");
        fill_random(d0, sizeof(d0), 4);
        fill_random(d1, sizeof(d1), 5);
        for (uint64_t read_stream = 1; read_stream <= 2; read_stream++) {
                cube_handle b;

                cube_stream_set(1);
                b = created(f.c, d0);
                ck_ok(cube_sync(f.c, &b, 1));
                launch_nap(f.c, f.nap_k, &f.scratch, f.nap_us);
                ck_ok(cube_debug_inject(f.c, CUBE_FAULT_COPY, CUBE_SERVER_GENERIC, "W1", 0));
                ck_ok(cube_write(f.c, &b, d1, BYTES));
                cube_stream_set(read_stream);
                expect_label(cube_read(f.c, &b, got, BYTES), "W1",
                             "the read behind the failing write");
                cube_stream_set(1);
                expect_label(cube_sync(f.c, &b, 1), "W1", "the sync after it");
                ck_ok(cube_free(f.c, &b));
        }
        fixed_stop(&f);
}
END_TEST

/* A launch queued right behind a write of its input that fails late, and a
 * read of its output: the read reports the write's failure. On the write's
 * stream, and with the launch and the read on the other. */
START_TEST(a_launch_behind_a_copy_that_fails_late_passes_the_failure_on)
{
        fixed f;
        uint32_t d0[ELEMS], d1[ELEMS], got[ELEMS];

        fixed_start(&f, "launch-behind");
        fill_random(d0, sizeof(d0), 6);
        fill_random(d1, sizeof(d1), 7);
        for (uint64_t later = 1; later <= 2; later++) {
                cube_handle in, out;

                cube_stream_set(1);
                in = created(f.c, d0);
                out = created(f.c, d0);
                ck_ok(cube_sync(f.c, (cube_handle[]) { in, out }, 2));
                launch_nap(f.c, f.nap_k, &f.scratch, f.nap_us);
                ck_ok(cube_debug_inject(f.c, CUBE_FAULT_COPY, CUBE_SERVER_GENERIC, "W1", 0));
                ck_ok(cube_write(f.c, &in, d1, BYTES));
                cube_stream_set(later);
                launch_affine(f.c, f.affine_k, in, out);
                expect_label(cube_read(f.c, &out, got, BYTES), "W1",
                             "the read of the launch's output");
                cube_stream_set(1);
                expect_label(cube_sync(f.c, &out, 1), "W1", "the sync of the launch's output");
                expect_label(cube_sync(f.c, &in, 1), "W1", "the sync of the launch's input");
                ck_ok(cube_free(f.c, &in));
                ck_ok(cube_free(f.c, &out));
        }
        fixed_stop(&f);
}
END_TEST

/* A launch whose output's reservation failed runs nothing and leaves that
 * failure in place, also when a write of its input is still queued when the
 * launch is handled. */
START_TEST(a_launch_into_a_failed_reservation_behind_a_queued_write_runs_nothing)
{
        fixed f;
        uint32_t d0[ELEMS], d1[ELEMS];
        cube_handle in, out;
        cube_status st;

        fixed_start(&f, "launch-unreserved");
        fill_random(d0, sizeof(d0), 8);
        fill_random(d1, sizeof(d1), 9);
        cube_stream_set(1);
        in = created(f.c, d0);
        ck_ok(cube_debug_inject(f.c, CUBE_FAULT_ALLOC, CUBE_IO_OUT_OF_MEMORY, "",
                                ALLOC_CODE_BASE + 1));
        out = created(f.c, d0);
        ck_ok(cube_sync(f.c, &in, 1));
        launch_nap(f.c, f.nap_k, &f.scratch, f.nap_us);
        ck_ok(cube_write(f.c, &in, d1, BYTES));
        launch_affine(f.c, f.affine_k, in, out);
        expect_label(cube_sync(f.c, &out, 1), "m0-1", "the sync of the unreserved output");
        ck_ok(cube_daemon_status(f.c, &st));
        ck_assert_msg(!st.poisoned, "the launch poisoned the device: %s", st.poison);
        ck_ok(cube_sync(f.c, &in, 1));
        expect_values(f.c, &in, d1, "the launch's input");
        fixed_stop(&f);
}
END_TEST

static Suite *model_suite(void)
{
        Suite *s = suite_create("model");
        TCase *orderings = tcase_create("orderings");
        TCase *random = tcase_create("random");
        int mult = test_timeout_multiplier();

        tcase_add_checked_fixture(orderings, test_start_with_faults, test_stop_clean);
        tcase_set_timeout(orderings, 60.0 * mult);
        tcase_add_test(orderings, a_later_write_wins_over_an_earlier_copy_that_fails_late);
        tcase_add_test(orderings, a_read_behind_a_copy_that_fails_late_reports_it);
        tcase_add_test(orderings, a_launch_behind_a_copy_that_fails_late_passes_the_failure_on);
        tcase_add_test(orderings,
                       a_launch_into_a_failed_reservation_behind_a_queued_write_runs_nothing);
        suite_add_tcase(s, orderings);

        tcase_add_checked_fixture(random, test_start_with_faults, test_stop_clean);
        tcase_set_timeout(random, 240.0 * mult);
        tcase_add_test(random, random_sequences_agree_with_the_model);
        suite_add_tcase(s, random);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(model_suite());
        int failed;

        srunner_run_all(sr, CK_ENV);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? 1 : 0;
}

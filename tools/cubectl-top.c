/*
 * cubectl-top.c - cubectl top: one daemon's sessions, polled, with their
 * rates of launches and bytes since the previous frame.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "cubectl.h"

#define TOP_MAX_COUNT 1000000

static double top_interval = 1.0;               /* --interval */
static unsigned long top_count;                 /* --count; 0: until interrupted */

int top_option(int opt, const char *arg)
{
        char *end;

        switch (opt) {
        case 'I': {
                double v = strtod(arg, &end);
                if (!*arg || *end || !isfinite(v) || v < 0.1 || v > 3600) {
                        fprintf(stderr, "cubectl: --interval takes seconds, 0.1 to 3600\n");
                        return EXIT_USAGE;
                }
                top_interval = v;
                return EXIT_OK;
        }
        case 'C': {
                unsigned long v = strtoul(arg, &end, 10);
                if (!*arg || *end || v == 0 || v > TOP_MAX_COUNT) {
                        fprintf(stderr, "cubectl: --count takes a number of frames, 1 to %d\n",
                                TOP_MAX_COUNT);
                        return EXIT_USAGE;
                }
                top_count = v;
                return EXIT_OK;
        }
        }
        return EXIT_USAGE;
}

typedef struct sample {
        double at;
        cube_session_info *sessions;
        size_t n;
        uint64_t max_id;                /* the newest session seen */
} sample;

static void sample_free(sample *s)
{
        free(s->sessions);
        s->sessions = NULL;
        s->n = 0;
}

static const cube_session_info *find_session(const sample *s, uint64_t id)
{
        for (size_t i = 0; i < s->n; i++)
                if (s->sessions[i].id == id)
                        return &s->sessions[i];
        return NULL;
}

/* A counter's rate over dt. A session the last sample did not hold but
 * could have (an id not newer than any it saw) has no rate yet: it opened
 * while that sample was taken. One newer than any it saw opened since,
 * from zero. A counter that went back (it never should) counts as still. */
static double rate(const cube_session_info *prev, bool new_since, uint64_t now_v,
                   uint64_t prev_v, double dt)
{
        if (!prev && !new_since)
                return NAN;
        if (!prev)
                prev_v = 0;
        return now_v >= prev_v ? (double) (now_v - prev_v) / dt : 0;
}

static uint64_t queued_of(const cube_stream_info *v, size_t n, uint64_t session)
{
        uint64_t q = 0;

        for (size_t i = 0; i < n; i++)
                if (v[i].session == session)
                        q += v[i].pending;
        return q;
}

/* A session's row in a frame: its rates since the previous sample (NaN
 * until it has one), and what it holds now. */
typedef struct top_row {
        uint64_t id;
        char name[64];
        double launches, bytes_in, bytes_out;   /* per second */
        uint64_t memory_in_use, queued, errors;
        bool self;
} top_row;

typedef struct top_frame {
        uint64_t number;
        double interval_seconds;        /* measured */
        char state[16];
        cube_status st;
        top_row *rows;
        size_t n;
} top_frame;

static const field top_row_fields[] = {
        { "id", "ID", U64(top_row, id), .width = 6 },
        { "name", "NAME", TEXT(top_row, name), .show = SHOW_NAME, .empty = "-", .width = -16,
          .max = 16 },
        { "launches_per_second", "LAUNCH/S", F64(top_row, launches), .prec = 1, .width = 10 },
        { "bytes_in_per_second", "IN/S", F64(top_row, bytes_in), .show = SHOW_BYTES,
          .after = "/s", .width = 12 },
        { "bytes_out_per_second", "OUT/S", F64(top_row, bytes_out), .show = SHOW_BYTES,
          .after = "/s", .width = 12 },
        { "memory_in_use", "MEMORY", U64(top_row, memory_in_use), .show = SHOW_BYTES,
          .width = 10 },
        { "queued", "QUEUED", U64(top_row, queued), .width = 8 },
        { "errors", "ERRORS", U64(top_row, errors), .width = 6 },
        { "self", "", BOOL(top_row, self), .yes = "(cubectl)", .no = "", .optional = true },
};
static const view top_row_view = VIEW(top_row, top_row_fields, .header = true);

/* The frame's first line: the daemon at a glance. */
static value frame_line(const void *row, const void *ctx, char *buf, size_t cap)
{
        const top_frame *f = row;
        char mem[32], total[32];

        human_bytes(f->st.memory_in_use, mem, sizeof(mem));
        human_bytes(f->st.properties.memory_bytes, total, sizeof(total));
        snprintf(buf, cap, "cubectl top: %s, %s, uptime %.0f s, %zu session(s), memory %s of "
                 "%s, frame %" PRIu64 " every %.1f s", f->st.service,
                 f->st.poisoned ? "POISONED" : *f->st.state ? f->st.state : "serving",
                 f->st.uptime_seconds, f->n, mem, total, f->number, top_interval);
        return (value) { .s = buf };
}

static const field top_frame_fields[] = {
        { "frame", NULL, U64(top_frame, number) },
        { "interval_seconds", NULL, F64(top_frame, interval_seconds) },
        { "service", NULL, TEXT(top_frame, st.service) },
        { "state", NULL, TEXT(top_frame, state) },
        { "memory_in_use", NULL, U64(top_frame, st.memory_in_use) },
        { "memory_bytes", NULL, U64(top_frame, st.properties.memory_bytes) },
        { NULL, "", .kind = FIELD_TEXT, .get = frame_line },
        { "sessions", "", ROWS(top_frame, rows, n, top_row_view) },
};
static const view top_frame_view = VIEW(top_frame, top_frame_fields);

/* One frame: the daemon's line, then a row per session with its rates
 * since the previous sample. */
static int print_frame(cube_client *c, bool json, unsigned long number, const cube_status *st,
                       const sample *prev, const sample *cur, const cube_stream_info *streams,
                       size_t n_streams)
{
        top_frame f = { .number = number, .interval_seconds = cur->at - prev->at, .st = *st,
                        .n = cur->n };

        if (f.interval_seconds <= 0)
                f.interval_seconds = 1e-9;
        snprintf(f.state, sizeof(f.state), "%s",
                 st->poisoned ? "poisoned" : *st->state ? st->state : "serving");
        if (cur->n && !(f.rows = calloc(cur->n, sizeof(*f.rows)))) {
                print_error("top", NULL, "out of memory");
                return EXIT_ERROR;
        }
        for (size_t i = 0; i < cur->n; i++) {
                const cube_session_info *s = &cur->sessions[i];
                const cube_session_info *p = find_session(prev, s->id);
                bool fresh = s->id > prev->max_id;
                top_row *r = &f.rows[i];
                double dt = f.interval_seconds;
                *r = (top_row) {
                        .id = s->id,
                        .launches = rate(p, fresh, s->launches, p ? p->launches : 0, dt),
                        .bytes_in = rate(p, fresh, s->bytes_in, p ? p->bytes_in : 0, dt),
                        .bytes_out = rate(p, fresh, s->bytes_out, p ? p->bytes_out : 0, dt),
                        .memory_in_use = s->memory_in_use,
                        .queued = queued_of(streams, n_streams, s->id),
                        .errors = s->errors,
                        .self = s->id == cube_client_session(c),
                };
                snprintf(r->name, sizeof(r->name), "%s", s->name);
        }
        if (!json && isatty(STDOUT_FILENO))
                fputs("\033[H\033[2J", stdout);
        print_record(&top_frame_view, &f, c, json);
        if (!json)
                putchar('\n');
        fflush(stdout);
        free(f.rows);
        return EXIT_OK;
}

static cube_error *take_sample(cube_client *c, sample *s)
{
        cube_error *e = cube_daemon_sessions(c, &s->sessions, &s->n);

        s->at = now_seconds();
        if (e)
                return e;
        for (size_t i = 0; i < s->n; i++)
                if (s->sessions[i].id > s->max_id)
                        s->max_id = s->sessions[i].id;
        return NULL;
}

static void sleep_seconds(double s)
{
        struct timespec ts = { (time_t) s, (long) ((s - (double) (time_t) s) * 1e9) };

        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

int cmd_top(cube_client *c, bool json, const char *arg)
{
        sample prev = {0}, cur = {0};
        cube_error *e;
        int r = EXIT_OK;

        (void) arg;
        /* A first sample, so that the first frame has rates already. */
        if ((e = take_sample(c, &prev)))
                return report("top", e);
        for (unsigned long frame = 1; !top_count || frame <= top_count; frame++) {
                cube_stream_info *streams = NULL;
                size_t n_streams = 0;
                cube_status st;
                sleep_seconds(top_interval);
                cur = (sample) { .max_id = prev.max_id };
                if ((e = take_sample(c, &cur)) || (e = cube_daemon_status(c, &st)) ||
                    (e = cube_daemon_streams(c, &streams, &n_streams))) {
                        r = report("top", e);
                        sample_free(&cur);
                        break;
                }
                r = print_frame(c, json, frame, &st, &prev, &cur, streams, n_streams);
                free(streams);
                sample_free(&prev);
                prev = cur;
                cur = (sample) {0};
                if (r != EXIT_OK)
                        break;
        }
        sample_free(&prev);
        return r;
}

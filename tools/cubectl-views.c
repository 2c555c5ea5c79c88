/*
 * cubectl-views.c - the daemon's state as cubectl shows it: each command
 * that inspects, and the one description of what it shows.
 *
 * A view lists its fields once; print_rows and print_record render it as a
 * table or as JSON. Where the two forms put a value in another order, or say
 * it in another way, the view has a field for each.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cubectl.h"

/* A command that shows a list of rows the daemon answers with: what,
 * which the call of the client library fetches as an array of T. */
#define ROWS_COMMAND(name, what, T, fetch, view_)                               \
        int name(cube_client *c, bool json, const char *arg)                    \
        {                                                                       \
                T *v;                                                           \
                size_t n;                                                       \
                cube_error *e = fetch(c, &v, &n);                               \
                                                                                \
                if (e)                                                          \
                        return report(what, e);                                 \
                print_rows(&(view_), v, n, c, json);                            \
                free(v);                                                        \
                return EXIT_OK;                                                 \
        }

/* status: the daemon at a glance. The table sums up in a few lines, in an
 * order of its own, what JSON gives member by member: hence the fields only
 * one of them shows. */
static const field device_fields[] = {
        { "name", NULL, TEXT(cube_device_properties, name) },
        { "memory_bytes", NULL, U64(cube_device_properties, memory_bytes) },
        { "max_page_size", NULL, U64(cube_device_properties, max_page_size) },
        { "alignment", NULL, U32(cube_device_properties, alignment) },
        { "max_bindings", NULL, U32(cube_device_properties, max_bindings) },
        { "max_shared_memory_size", NULL, U32(cube_device_properties, max_shared_memory_size) },
        { "max_cube_count", NULL, U32S(cube_device_properties, max_cube_count) },
        { "max_units_per_cube", NULL, U32(cube_device_properties, max_units_per_cube) },
        { "max_cube_dim", NULL, U32S(cube_device_properties, max_cube_dim) },
        { "num_cpu_cores", NULL, U32(cube_device_properties, num_cpu_cores) },
};
static const view device_view = VIEW(cube_device_properties, device_fields);

/* status's lines that say in words what JSON gives as figures. */
static value device_line(const void *row, const void *ctx, char *buf, size_t cap)
{
        const cube_device_properties *p = &((const cube_status *) row)->properties;
        char total[32];

        human_bytes(p->memory_bytes, total, sizeof(total));
        snprintf(buf, cap, "%s, %s, %u cores, max cube dim %ux%ux%u, %u units per cube",
                 p->name, total, p->num_cpu_cores, p->max_cube_dim[0], p->max_cube_dim[1],
                 p->max_cube_dim[2], p->max_units_per_cube);
        return (value) { .s = buf };
}

static value state_line(const void *row, const void *ctx, char *buf, size_t cap)
{
        const cube_status *st = row;

        return (value) { .s = st->poisoned ? "POISONED" : *st->state ? st->state : "serving" };
}

static value memory_line(const void *row, const void *ctx, char *buf, size_t cap)
{
        const cube_status *st = row;
        char mem[32], peak[32];

        human_bytes(st->memory_in_use, mem, sizeof(mem));
        human_bytes(st->memory_peak, peak, sizeof(peak));
        snprintf(buf, cap, "%s in use in %" PRIu64 " allocations, peak %s", mem,
                 st->allocations, peak);
        return (value) { .s = buf };
}

static value check_mode_line(const void *row, const void *ctx, char *buf, size_t cap)
{
        const char *mode = cube_client_check_mode(ctx);

        snprintf(buf, cap, "%s (%s)", *mode ? mode : "?",
                 strcmp(mode, "enforce") == 0 ? "every launch checked, unchecked ones refused" :
                 strcmp(mode, "validate") == 0 ? "every launch checked, unchecked ones too" :
                 "every launch checked but unchecked-uids' unchecked ones");
        return (value) { .s = buf };
}

static value kernels_line(const void *row, const void *ctx, char *buf, size_t cap)
{
        const cube_status *st = row;

        snprintf(buf, cap, "%" PRIu64 " cached, %" PRIu64 " compiled by this run", st->kernels,
                 st->compiles);
        return (value) { .s = buf };
}

static bool draining(const void *row)
{
        return ((const cube_status *) row)->drain_seconds_left > 0;
}

static bool poisoned(const void *row)
{
        return ((const cube_status *) row)->poisoned;
}

static const field status_fields[] = {
        { "service", "service:", TEXT(cube_status, service) },
        { "backend", "backend:", TEXT(cube_status, backend) },
        { NULL, "device:", .kind = FIELD_TEXT, .get = device_line },
        { NULL, "version:", TEXT(cube_status, version), .empty = "?" },
        { NULL, "state:", .kind = FIELD_TEXT, .get = state_line },
        { NULL, "reload:", TEXT(cube_status, reload_error),
          .before = "REFUSED, running the previous configuration: ", .optional = true },
        { NULL, "drain:", F64(cube_status, drain_seconds_left), .when = draining,
          .before = "what is left is closed in ", .after = " s" },
        { "uptime_seconds", "uptime:", F64(cube_status, uptime_seconds), .prec = 1,
          .after = " s" },
        { "sessions", "sessions:", U32(cube_status, sessions), .after = " (this one included)" },
        { "memory_in_use", NULL, U64(cube_status, memory_in_use) },
        { "memory_peak", NULL, U64(cube_status, memory_peak) },
        { "allocations", NULL, U64(cube_status, allocations) },
        { NULL, "memory:", .kind = FIELD_TEXT, .get = memory_line },
        { "kernels", NULL, U64(cube_status, kernels) },
        { "compiles", NULL, U64(cube_status, compiles) },
        { NULL, "kernels:", .kind = FIELD_TEXT, .get = kernels_line },
        { "check_mode", "checks:", .kind = FIELD_TEXT, .get = check_mode_line },
        { "poisoned", NULL, BOOL(cube_status, poisoned) },
        { "poison", NULL, TEXT(cube_status, poison) },
        { NULL, "poison:", TEXT(cube_status, poison), .when = poisoned },
        { "version", NULL, TEXT(cube_status, version) },
        { "state", NULL, TEXT(cube_status, state) },
        { "reload_error", NULL, TEXT(cube_status, reload_error) },
        { "device", NULL, OBJECT(cube_status, properties, device_view) },
};
static const view status_view = VIEW(cube_status, status_fields, .label_width = 13);

int cmd_status(cube_client *c, bool json, const char *arg)
{
        cube_status st;
        cube_error *e = cube_daemon_status(c, &st);

        if (e)
                return report("status", e);
        print_record(&status_view, &st, c, json);
        return EXIT_OK;
}

/* What kernels shows: the kernel cache's entries, and the cache on disk
 * with what it evicted. */
typedef struct kernels_shown {
        cube_kernel_info *kernels;
        size_t n;
        cube_kernel_cache cache;
        cube_cache_artifact *stored;    /* what the directory holds, live or not */
        size_t n_stored;
} kernels_shown;

typedef __typeof__(((cube_kernel_cache *) 0)->evicted[0]) evicted_artifact;

/* The table gives a compile time only to a kernel this run compiled. */
static value compile_time(const void *row, const void *ctx, char *buf, size_t cap)
{
        const cube_kernel_info *k = row;

        return (value) { .f = k->from_disk || strcmp(k->state, "compiled") != 0 ? NAN :
                              k->compile_ms };
}

static const field kernel_fields[] = {
        { "hash", "HASH", TEXT(cube_kernel_info, hash), .width = -12, .max = 12 },
        { "entry", "ENTRY", TEXT(cube_kernel_info, entry), .width = -20 },
        { "backend", "BACKEND", TEXT(cube_kernel_info, backend), .width = -7 },
        { "state", "STATE", TEXT(cube_kernel_info, state), .width = -9 },
        { "from_disk", "ORIGIN", BOOL(cube_kernel_info, from_disk), .yes = "disk",
          .no = "compiled", .width = -8 },
        { "compile_ms", NULL, F64(cube_kernel_info, compile_ms) },
        { NULL, "COMPILE", .kind = FIELD_F64, .get = compile_time, .prec = 1, .after = " ms",
          .width = 10 },
        { "hits", "HITS", U64(cube_kernel_info, hits), .width = 8 },
};
static const view kernel_view = VIEW(cube_kernel_info, kernel_fields, .header = true);

static const field evicted_fields[] = {
        { "artifact", "", TEXT(evicted_artifact, artifact), .width = -12, .max = 12 },
        { "bytes", "", U64(evicted_artifact, bytes), .after = " bytes", .width = 16 },
        { "at_s", "", F64(evicted_artifact, at_s), .prec = 1, .before = "at ", .after = " s" },
};
static const view evicted_view = VIEW(evicted_artifact, evicted_fields, .indent = "  evicted ");

/* How long ago an artifact was last written or loaded. */
static value last_use(const void *row, const void *ctx, char *buf, size_t cap)
{
        const cube_cache_artifact *a = row;
        struct timespec now;
        double ago;

        clock_gettime(CLOCK_REALTIME, &now);
        ago = (double) now.tv_sec + (double) now.tv_nsec / 1e9 - a->used_at;
        if (ago < 0)
                ago = 0;
        if (ago < 120)
                snprintf(buf, cap, "%.0f s ago", ago);
        else if (ago < 7200)
                snprintf(buf, cap, "%.0f min ago", ago / 60);
        else if (ago < 172800)
                snprintf(buf, cap, "%.0f h ago", ago / 3600);
        else
                snprintf(buf, cap, "%.0f days ago", ago / 86400);
        return (value) { .s = buf };
}

static const field stored_fields[] = {
        { "hash", "ARTIFACT", TEXT(cube_cache_artifact, hash), .width = -12, .max = 12 },
        { "source_hash", "SOURCE", TEXT(cube_cache_artifact, source_hash), .width = -12,
          .max = 12 },
        { "entry", "ENTRY", TEXT(cube_cache_artifact, entry), .width = -20 },
        { "backend", "BACKEND", TEXT(cube_cache_artifact, backend), .width = -7 },
        { "bytes", "BYTES", U64(cube_cache_artifact, bytes), .width = 10 },
        { "used_at", NULL, F64(cube_cache_artifact, used_at) },
        { NULL, "LAST USE", .kind = FIELD_TEXT, .get = last_use, .width = -12 },
};
static const view stored_view = VIEW(cube_cache_artifact, stored_fields, .header = true);

/* The disk cache in a sentence: its size against its limit, its evictions. */
static value cache_line(const void *row, const void *ctx, char *buf, size_t cap)
{
        const cube_kernel_cache *kc = row;
        int n = snprintf(buf, cap, "\ncache %s: %" PRIu64 " artifacts, %" PRIu64 " bytes",
                         kc->dir, kc->artifacts, kc->bytes);

        if (kc->max_bytes)
                n += snprintf(buf + n, cap - (size_t) n, " of %" PRIu64 " (cache-max-bytes)",
                              kc->max_bytes);
        else
                n += snprintf(buf + n, cap - (size_t) n, " (no limit)");
        snprintf(buf + n, cap - (size_t) n, "; %" PRIu64 " evicted, %" PRIu64 " bytes",
                 kc->evictions, kc->evicted_bytes);
        return (value) { .s = buf };
}

static const field cache_fields[] = {
        { "dir", NULL, TEXT(cube_kernel_cache, dir) },
        { "bytes", NULL, U64(cube_kernel_cache, bytes) },
        { "max_bytes", NULL, U64(cube_kernel_cache, max_bytes) },
        { "artifacts", NULL, U64(cube_kernel_cache, artifacts) },
        { "evictions", NULL, U64(cube_kernel_cache, evictions) },
        { "evicted_bytes", NULL, U64(cube_kernel_cache, evicted_bytes) },
        { NULL, "", .kind = FIELD_TEXT, .get = cache_line },
        { "evicted", "", ARRAY(cube_kernel_cache, evicted, n_evicted, evicted_view) },
};
static const view cache_view = VIEW(cube_kernel_cache, cache_fields);

static const field kernels_fields[] = {
        { "kernels", "", ROWS(kernels_shown, kernels, n, kernel_view) },
        { "cache", "", OBJECT(kernels_shown, cache, cache_view) },
        { "stored", "", ROWS(kernels_shown, stored, n_stored, stored_view) },
};
static const view kernels_view = VIEW(kernels_shown, kernels_fields);

int cmd_kernels(cube_client *c, bool json, const char *arg)
{
        kernels_shown k;
        cube_error *e = cube_daemon_kernels(c, &k.kernels, &k.n);

        if (e)
                return report("kernels", e);
        if ((e = cube_daemon_kernel_cache(c, &k.cache)) ||
            (e = cube_daemon_cache_artifacts(c, &k.stored, &k.n_stored))) {
                free(k.kernels);
                return report("kernels", e);
        }
        print_record(&kernels_view, &k, c, json);
        free(k.kernels);
        free(k.stored);
        return EXIT_OK;
}

/* Each live failure: its first line, then the skip chain and the root
 * error on lines of their own. */
static const cube_error *report_of(const void *row)
{
        return ((const cube_failure_info *) row)->report;
}

static value failure_claimed(const void *row, const void *ctx, char *buf, size_t cap)
{
        return (value) { .u = cube_error_claimed(report_of(row)) };
}

static value root_variant(const void *row, const void *ctx, char *buf, size_t cap)
{
        const cube_error *root = cube_error_source(report_of(row));

        return (value) { .s = root ? cube_error_variant(root) : "" };
}

static value root_message(const void *row, const void *ctx, char *buf, size_t cap)
{
        const cube_error *root = cube_error_source(report_of(row));

        return (value) { .s = root ? cube_error_message(root) : "" };
}

static value chain_len(const void *row, const void *ctx, char *buf, size_t cap)
{
        return (value) { .n = cube_error_chain_len(report_of(row)) };
}

static const char *chain_at(const void *row, size_t i)
{
        return cube_error_chain_at(report_of(row), i);
}

static const field failure_fields[] = {
        { "id", "", U64(cube_failure_info, id), .before = "failure #", .after = ":" },
        { "session", "", U64(cube_failure_info, session), .before = "session ", .after = "," },
        { "claimed", "", .kind = FIELD_U32, .get = failure_claimed, .before = "claiming ",
          .after = " buffer(s)" },
        { "root_variant", NULL, .kind = FIELD_TEXT, .get = root_variant },
        { "root", NULL, .kind = FIELD_TEXT, .get = root_message },
        { "chain", "", .kind = FIELD_TEXTS, .get = chain_len, .item = chain_at, .below = true,
          .before = "  " },
        { NULL, "", .kind = FIELD_TEXT, .get = root_message, .below = true,
          .before = "  root: " },
};
static const view failure_view = VIEW(cube_failure_info, failure_fields, .sep = " ",
                                      .none = "no live failures");

int cmd_failures(cube_client *c, bool json, const char *arg)
{
        cube_failure_info *v;
        size_t n;
        cube_error *e = cube_daemon_failures(c, &v, &n);

        if (e)
                return report("failures", e);
        print_rows(&failure_view, v, n, c, json);
        cube_failures_free(v, n);
        return EXIT_OK;
}

/* Whether the session is the one cubectl itself opened. */
static value is_self(const void *row, const void *ctx, char *buf, size_t cap)
{
        return (value) { .b = ((const cube_session_info *) row)->id == cube_client_session(ctx) };
}

static const field session_fields[] = {
        { "id", "ID", U64(cube_session_info, id), .width = 6 },
        { "pid", "PID", U32(cube_session_info, pid), .width = 7 },
        { "uid", "UID", U32(cube_session_info, uid), .width = 6 },
        { "name", "NAME", TEXT(cube_session_info, name), .show = SHOW_NAME, .empty = "-",
          .width = -16, .max = 16 },
        { "streams", "STREAMS", U64(cube_session_info, streams), .width = 7 },
        { "memory_in_use", "MEMORY", U64(cube_session_info, memory_in_use),
          .show = SHOW_BYTES, .width = 10 },
        { "memory_peak", "PEAK", U64(cube_session_info, memory_peak), .show = SHOW_BYTES,
          .width = 10 },
        { "allocations", NULL, U64(cube_session_info, allocations) },
        { "launches", "LAUNCHES", U64(cube_session_info, launches), .width = 8 },
        { "bytes_in", "IN", U64(cube_session_info, bytes_in), .show = SHOW_BYTES, .width = 10 },
        { "bytes_out", "OUT", U64(cube_session_info, bytes_out), .show = SHOW_BYTES,
          .width = 10 },
        { "errors", "ERRORS", U64(cube_session_info, errors), .width = 6 },
        { "connected", NULL, BOOL(cube_session_info, connected) },
        { "self", "", .kind = FIELD_BOOL, .get = is_self, .yes = "(cubectl)", .no = "",
          .optional = true },
};
static const view session_view = VIEW(cube_session_info, session_fields, .header = true);

ROWS_COMMAND(cmd_sessions, "sessions", cube_session_info, cube_daemon_sessions, session_view)

/* Device time by weight and class: each session, then each tenant. */
static value share_percent(const void *row, const void *ctx, char *buf, size_t cap)
{
        return (value) { .f = ((const cube_share_info *) row)->share / 10.0 };
}

static value owed_percent(const void *row, const void *ctx, char *buf, size_t cap)
{
        return (value) { .f = ((const cube_share_info *) row)->owed / 10.0 };
}

static value device_seconds(const void *row, const void *ctx, char *buf, size_t cap)
{
        return (value) { .f = (double) ((const cube_share_info *) row)->device_ns / 1e9 };
}

static const field share_fields[] = {
        { "session", "SESSION", U64(cube_share_info, session), .width = 7 },
        { "uid", "UID", U32(cube_share_info, uid), .width = 6 },
        { "name", "NAME", TEXT(cube_share_info, name), .show = SHOW_NAME, .empty = "-",
          .width = -16, .max = 16 },
        { "tenant", "TENANT", TEXT(cube_share_info, tenant), .show = SHOW_NAME, .width = -16,
          .max = 24 },
        { "class", "CLASS", TEXT(cube_share_info, class_name), .width = -7 },
        { "weight", "WEIGHT", U32(cube_share_info, weight), .width = 6 },
        { "cap", "CAP%", U32(cube_share_info, cap), .width = 4 },
        { "device_seconds", "DEVICE-S", .kind = FIELD_F64, .get = device_seconds, .prec = 3,
          .width = 9 },
        { "share_percent", "SHARE%", .kind = FIELD_F64, .get = share_percent, .prec = 1,
          .width = 6 },
        { "owed_percent", "OWED%", .kind = FIELD_F64, .get = owed_percent, .prec = 1,
          .width = 6 },
};
static const view share_view = VIEW(cube_share_info, share_fields, .header = true,
                                    .none = "no sessions");

ROWS_COMMAND(cmd_shares, "shares", cube_share_info, cube_daemon_shares, share_view)

/* Device memory: the daemon's, each session's, and each stream's pools. */
typedef struct memory_shown {
        cube_status st;
        cube_session_info *sessions;
        size_t n_sessions;
        cube_memory_report *streams;
        size_t n_streams;
} memory_shown;

static const field session_memory_fields[] = {
        { "id", "", U64(cube_session_info, id), .before = "session ", .after = ":" },
        { "memory_in_use", "", U64(cube_session_info, memory_in_use), .show = SHOW_BYTES,
          .after = " in use in" },
        { "memory_peak", NULL, U64(cube_session_info, memory_peak) },
        { "allocations", "", U64(cube_session_info, allocations), .after = " allocations," },
        { NULL, "", U64(cube_session_info, memory_peak), .show = SHOW_BYTES, .before = "peak " },
};
static const view session_memory_view = VIEW(cube_session_info, session_memory_fields,
                                             .sep = " ");

/* The table leaves out the pools that never took a page. */
static bool had_pages(const void *row)
{
        return ((const cube_pool_report *) row)->pages_peak != 0;
}

static const field pool_fields[] = {
        { "kind", "", TEXT(cube_pool_report, kind), .width = -10 },
        { "page_size", NULL, U64(cube_pool_report, page_size) },
        { "max_slice", NULL, U64(cube_pool_report, max_slice) },
        { "allocations", "", U64(cube_pool_report, allocations), .after = " allocation(s),",
          .width = 21 },
        { "bytes_in_use", "", U64(cube_pool_report, bytes_in_use), .show = SHOW_BYTES,
          .after = " in use," },
        { "bytes_padding", "", U64(cube_pool_report, bytes_padding), .show = SHOW_BYTES,
          .after = " padding," },
        { "bytes_reserved", "", U64(cube_pool_report, bytes_reserved), .show = SHOW_BYTES,
          .after = " in" },
        { "pages", "", U64(cube_pool_report, pages), .after = " pages" },
        { "pages_peak", "", U64(cube_pool_report, pages_peak), .before = "(peak ",
          .after = ")," },
        { "largest_alloc", "", U64(cube_pool_report, largest_alloc), .show = SHOW_BYTES,
          .before = "largest " },
};
static const view pool_view = VIEW(cube_pool_report, pool_fields, .indent = "  ", .sep = " ",
                                   .shown = had_pages);

static const field stream_memory_fields[] = {
        { "session", "", U64(cube_memory_report, session), .before = "session ", .after = "," },
        { "stream", "", U64(cube_memory_report, stream), .before = "stream ", .after = ":" },
        { "pools", "", ARRAY(cube_memory_report, pools, n_pools, pool_view) },
};
static const view stream_memory_view = VIEW(cube_memory_report, stream_memory_fields,
                                            .sep = " ");

static value device_memory_line(const void *row, const void *ctx, char *buf, size_t cap)
{
        const cube_status *st = &((const memory_shown *) row)->st;
        char total[32], mem[32], peak[32], reserved[32];

        human_bytes(st->properties.memory_bytes, total, sizeof(total));
        human_bytes(st->memory_in_use, mem, sizeof(mem));
        human_bytes(st->memory_peak, peak, sizeof(peak));
        human_bytes(st->memory_reserved, reserved, sizeof(reserved));
        snprintf(buf, cap, "%s in use in %" PRIu64 " allocations, %s in pages, of %s; peak %s",
                 mem, st->allocations, reserved, total, peak);
        return (value) { .s = buf };
}

static const field memory_fields[] = {
        { "memory_bytes", NULL, U64(memory_shown, st.properties.memory_bytes) },
        { "memory_in_use", NULL, U64(memory_shown, st.memory_in_use) },
        { "memory_peak", NULL, U64(memory_shown, st.memory_peak) },
        { "memory_reserved", NULL, U64(memory_shown, st.memory_reserved) },
        { "allocations", NULL, U64(memory_shown, st.allocations) },
        { NULL, "device:", .kind = FIELD_TEXT, .get = device_memory_line },
        { "sessions", "", ROWS(memory_shown, sessions, n_sessions, session_memory_view) },
        { "streams", "", ROWS(memory_shown, streams, n_streams, stream_memory_view) },
};
static const view memory_view = VIEW(memory_shown, memory_fields, .label_width = 8);

int cmd_memory(cube_client *c, bool json, const char *arg)
{
        memory_shown m;
        cube_error *e = cube_daemon_status(c, &m.st);

        if (e)
                return report("memory", e);
        if ((e = cube_daemon_memory(c, &m.streams, &m.n_streams)))
                return report("memory", e);
        if ((e = cube_daemon_sessions(c, &m.sessions, &m.n_sessions))) {
                free(m.streams);
                return report("memory", e);
        }
        print_record(&memory_view, &m, c, json);
        free(m.streams);
        free(m.sessions);
        return EXIT_OK;
}

static const field stream_fields[] = {
        { "session", "SESSION", U64(cube_stream_info, session), .width = 8 },
        { "stream", "STREAM", U64(cube_stream_info, stream), .width = 20 },
        { "pending", "PENDING", U64(cube_stream_info, pending), .width = 8 },
};
static const view stream_view = VIEW(cube_stream_info, stream_fields, .header = true);

ROWS_COMMAND(cmd_streams, "streams", cube_stream_info, cube_daemon_streams, stream_view)

/* Every session's open profiling windows, graphs (launches recorded, pages
 * kept) and captures under way. */
static const field capture_fields[] = {
        { "session", "SESSION", U64(cube_capture_info, session), .width = 8 },
        { "kind", "KIND", TEXT(cube_capture_info, kind), .width = -8 },
        { "stream", "STREAM", U64(cube_capture_info, stream), .width = 20 },
        { "id", "ID", U64(cube_capture_info, id), .width = 8 },
        { "state", "STATE", TEXT(cube_capture_info, state), .width = -10 },
        { "launches", "LAUNCHES", U64(cube_capture_info, launches), .width = 8 },
        { "pages", "PAGES", U64(cube_capture_info, pages), .width = 6 },
        { "page_bytes", "PAGE_BYTES", U64(cube_capture_info, page_bytes), .width = 10 },
        { "replays", "REPLAYS", U64(cube_capture_info, replays), .width = 8 },
        { "device_ns", "DEVICE_NS", U64(cube_capture_info, device_ns), .width = 12 },
};
static const view capture_view = VIEW(cube_capture_info, capture_fields, .header = true);

ROWS_COMMAND(cmd_graphs, "graphs", cube_capture_info, cube_daemon_captures, capture_view)

/* The collective groups of every session: members, state and traffic. */
static value comm_members(const void *row, const void *ctx, char *buf, size_t cap)
{
        const cube_comm_info *g = row;
        size_t most = sizeof(g->members) / sizeof(g->members[0]);

        return (value) { .n = g->size < most ? g->size : most };
}

static const char *comm_member(const void *row, size_t i)
{
        return ((const cube_comm_info *) row)->members[i];
}

static const field comm_fields[] = {
        { "id", "GROUP", TEXT(cube_comm_info, id), .width = -16 },
        { "session", "SESSION", U64(cube_comm_info, session), .width = 7 },
        { "kind", "KIND", TEXT(cube_comm_info, kind), .width = -9 },
        { "rank", "RANK", U32(cube_comm_info, rank), .width = 4 },
        { "size", NULL, U32(cube_comm_info, size) },
        { "state", "STATE", TEXT(cube_comm_info, state), .width = -8 },
        { "ops", "OPS", U64(cube_comm_info, ops), .width = 8 },
        { "bytes", "BYTES", U64(cube_comm_info, bytes), .width = 12 },
        { "refusals", NULL, U64(cube_comm_info, refusals) },
        { "members", "MEMBERS", .kind = FIELD_TEXTS, .get = comm_members, .item = comm_member },
        { NULL, "", TEXT(cube_comm_info, why), .optional = true },
};
static const view comm_view = VIEW(cube_comm_info, comm_fields, .header = true);

ROWS_COMMAND(cmd_comms, "comms", cube_comm_info, cube_daemon_comms, comm_view)

/* The sessions that have ended and the failures of late, kept by the daemon
 * after they are gone. */
typedef struct history {
        cube_ended_session *sessions;
        size_t n_sessions;
        cube_recent_failure *failures;
        size_t n_failures;
} history;

static const field ended_fields[] = {
        { "id", "ID", U64(cube_ended_session, id), .width = 6 },
        { "pid", "PID", U32(cube_ended_session, pid), .width = 7 },
        { "uid", "UID", U32(cube_ended_session, uid), .width = 6 },
        { "name", "NAME", TEXT(cube_ended_session, name), .show = SHOW_NAME, .empty = "-",
          .width = -16, .max = 16 },
        { NULL, "LASTED", F64(cube_ended_session, duration_seconds), .prec = 1, .after = "s",
          .width = 9 },
        { "launches", "LAUNCHES", U64(cube_ended_session, launches), .width = 8 },
        { "bytes_in", "IN", U64(cube_ended_session, bytes_in), .show = SHOW_BYTES, .width = 10 },
        { "bytes_out", "OUT", U64(cube_ended_session, bytes_out), .show = SHOW_BYTES,
          .width = 10 },
        { "errors", "ERRORS", U64(cube_ended_session, errors), .width = 6 },
        { "memory_peak", NULL, U64(cube_ended_session, memory_peak) },
        { "opened_seconds", NULL, F64(cube_ended_session, opened_seconds) },
        { "duration_seconds", NULL, F64(cube_ended_session, duration_seconds) },
};
static const view ended_view = VIEW(cube_ended_session, ended_fields, .header = true);

static const field recent_fields[] = {
        { "id", "", U64(cube_recent_failure, id), .before = "failure #" },
        { "session", NULL, U64(cube_recent_failure, session) },
        { "at_seconds", "", F64(cube_recent_failure, at_seconds), .prec = 1, .before = "at ",
          .after = " s," },
        { NULL, "", U64(cube_recent_failure, session), .before = "session ", .after = ":" },
        { "root", "", TEXT(cube_recent_failure, root), .show = SHOW_TEXT },
};
static const view recent_view = VIEW(cube_recent_failure, recent_fields, .indent = "  ",
                                     .sep = " ");

static const field history_fields[] = {
        { "sessions", "ended sessions (oldest first):",
          ROWS(history, sessions, n_sessions, ended_view) },
        { "failures", "recent failures (oldest first):",
          ROWS(history, failures, n_failures, recent_view) },
};
static const view history_view = VIEW(history, history_fields);

int cmd_history(cube_client *c, bool json, const char *arg)
{
        history h;
        cube_error *e = cube_daemon_ended_sessions(c, &h.sessions, &h.n_sessions);

        if (e)
                return report("history", e);
        if ((e = cube_daemon_recent_failures(c, &h.failures, &h.n_failures))) {
                free(h.sessions);
                return report("history", e);
        }
        print_record(&history_view, &h, c, json);
        free(h.sessions);
        free(h.failures);
        return EXIT_OK;
}

static const field ban_fields[] = {
        { "kind", "", TEXT(cube_ban, kind), .width = -4 },
        { "who", "", TEXT(cube_ban, who), .show = SHOW_NAME, .width = -24 },
        { "seconds_left", "", U64(cube_ban, seconds_left), .before = "refused for another ",
          .after = " s (poisoned the device)" },
};
static const view ban_view = VIEW(cube_ban, ban_fields, .sep = " ",
                                  .none = "no uid or name is refused");

ROWS_COMMAND(cmd_bans, "bans", cube_ban, cube_daemon_bans, ban_view)

static const field config_fields[] = {
        { "key", "KEY", TEXT(cube_config_entry, key), .width = -22 },
        { "value", "VALUE", TEXT(cube_config_entry, value), .empty = "-", .width = -28 },
        { "source", NULL, TEXT(cube_config_entry, source) },
        { "reload", "RELOAD", BOOL(cube_config_entry, reloadable), .yes = "yes", .no = "restart",
          .width = -7 },
        { NULL, "FROM", TEXT(cube_config_entry, source) },
};
static const view config_view = VIEW(cube_config_entry, config_fields, .header = true);

ROWS_COMMAND(cmd_config, "config", cube_config_entry, cube_daemon_config, config_view)

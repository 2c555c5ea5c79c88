/*
 * admin.c - what cubectl asks of a running daemon: status, sessions, streams,
 * kernels, failures and metrics to look at, and drain and kill_session to act.
 *
 * Looking is open to every session (its peer may use the socket already),
 * but a caller sees only what is its own user's: the sessions of its uid,
 * their streams and memory reports, the kernels they registered and the
 * failures of their sessions. Root and the daemon's own user see everything.
 * Acting is for the daemon's own user and root only, checked against the
 * peer's credentials taken at accept.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "requests.h"

/* Whether the caller may see what session s holds. */
static bool visible(const cube__msg *k, const cube__session *s)
{
        return cube__uid_is_admin(k->session->uid) || s->uid == k->session->uid;
}

/* Starts an answer: [1, msgid, nil, ...]. */
static void begin(msgpack_sbuffer *sb, msgpack_packer *pk, cube__msg *k)
{
        msgpack_sbuffer_init(sb);
        msgpack_packer_init(pk, sb, msgpack_sbuffer_write);
        (void) cube__pack_response_ok(pk, k->env->msgid);
}

static cube__dispatched finish(msgpack_sbuffer *sb, cube__msg *k, int r)
{
        if (r == 0)
                cube__reply_sbuffer(k->session, sb);
        else
                cube__reply_owned_error(k, NULL);
        msgpack_sbuffer_destroy(sb);
        return CUBE__DISPATCH_DONE;
}

static bool admin_allowed(cube__msg *k)
{
        uid_t uid = k->session->uid;

        if (uid == 0 || uid == geteuid())
                return true;
        cube__reply_owned_error(k, cube__err_validation(
                "%.*s is for the daemon's own user and root; uid %u may only look",
                (int) k->env->method_len, k->env->method, (unsigned) uid));
        return false;
}

cube__dispatched cube__do_status(cube__msg *k)
{
        cube__server *srv = k->server;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        int r = 0;

        begin(&sb, &pk, k);
        r |= msgpack_pack_map(&pk, 19);
        r |= cube__pack_kv_str(&pk, "check_mode", cube__check_mode_name(srv->opts.check_mode));
        r |= cube__pack_str(&pk, "drain_seconds_left");
        r |= msgpack_pack_double(&pk, srv->drain_deadline_ns ?
                                 (double) (srv->drain_deadline_ns - uv_hrtime()) / 1e9 : 0);
        r |= cube__pack_kv_str(&pk, "version", CUBE_VERSION);
        r |= cube__pack_kv_str(&pk, "state", srv->stopping ? "stopping" : srv->poison ? "poisoned" :
                               srv->draining ? "draining" : "serving");
        r |= cube__pack_kv_str(&pk, "reload_error", srv->reload_error);
        r |= cube__pack_kv_str(&pk, "service", srv->service);
        r |= cube__pack_kv_str(&pk, "backend", srv->driver->name);
        r |= cube__pack_str(&pk, "uptime_seconds");
        r |= msgpack_pack_double(&pk, (double) (uv_hrtime() - srv->started_ns) / 1e9);
        r |= cube__pack_kv_u64(&pk, "sessions", srv->n_sessions);
        r |= cube__pack_kv_u64(&pk, "memory_in_use", srv->memory_in_use);
        r |= cube__pack_kv_u64(&pk, "memory_peak", srv->memory_peak);
        r |= cube__pack_kv_u64(&pk, "memory_reserved", srv->pools.reserved);
        r |= cube__pack_kv_u64(&pk, "allocations", srv->allocations);
        r |= cube__pack_kv_u64(&pk, "failures", cube__failures_live(&srv->failures));
        r |= cube__pack_kv_u64(&pk, "compiles", srv->compiles);
        r |= cube__pack_kv_u64(&pk, "kernels", srv->n_kernels);
        r |= cube__pack_str(&pk, "poisoned");
        r |= srv->poison ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk);
        r |= cube__pack_kv_str(&pk, "poison", srv->poison ? cube_error_reason(srv->poison) : "");
        r |= cube__pack_str(&pk, "properties");
        r |= cube__pack_properties(&pk, &srv->properties);
        return finish(&sb, k, r);
}

typedef struct find_ctx {
        const void *want;
        bool found;
} find_ctx;

static void find_value(uint64_t key, void *value, void *ctx)
{
        find_ctx *f = ctx;

        f->found |= value == f->want;
}

/* Whether a session the caller may see registered kernel kn. */
static bool kernel_visible(const cube__msg *k, const cube__kernel *kn)
{
        find_ctx f = { kn, false };

        if (cube__uid_is_admin(k->session->uid))
                return true;
        for (const cube__session *s = k->server->sessions; s && !f.found; s = s->next)
                if (visible(k, s))
                        cube__idmap_foreach(&s->kernels, find_value, &f);
        return f.found;
}

/* The running configuration: every option, its value, where it came from
 * and whether a reload changes it. */
cube__dispatched cube__do_config(cube__msg *k)
{
        const cube__options *o = &k->server->opts;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        size_t n = 0;
        int r = 0;

        while (cube__option_key(n, NULL))
                n++;
        begin(&sb, &pk, k);
        r |= msgpack_pack_array(&pk, (uint32_t) n);
        for (size_t i = 0; i < n; i++) {
                bool reloadable;
                const char *key = cube__option_key(i, &reloadable);
                char value[1024], from[1100];
                cube__option_format(o, i, value, sizeof(value));
                if (o->source[i] == CUBE__FROM_FILE)
                        snprintf(from, sizeof(from), "%s:%u", o->config_path ? o->config_path : "file",
                                 o->line[i]);
                else
                        snprintf(from, sizeof(from), "%s", o->source[i] == CUBE__FROM_COMMAND_LINE ?
                                 "command line" : "default");
                r |= msgpack_pack_map(&pk, 4);
                r |= cube__pack_kv_str(&pk, "key", key);
                r |= cube__pack_kv_str(&pk, "value", value);
                r |= cube__pack_kv_str(&pk, "source", from);
                r |= cube__pack_str(&pk, "reload");
                r |= reloadable ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk);
        }
        return finish(&sb, k, r);
}

/* Whether the asking session sees every user's entries of a list, or only
 * its own user's: root and the daemon's own user see all. */
static bool sees_all(const cube__msg *k)
{
        return cube__uid_is_admin(k->session->uid);
}

/* Sessions that have ended, oldest first, from the history ring. */
cube__dispatched cube__do_ended_sessions(cube__msg *k)
{
        const cube__history *h = &k->server->history;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        uint32_t n = 0;
        int r = 0;

        for (size_t i = 0; i < h->n_sessions; i++)
                n += sees_all(k) || h->sessions[i].uid == k->session->uid;
        begin(&sb, &pk, k);
        r |= msgpack_pack_array(&pk, n);
        for (size_t j = 0; j < h->n_sessions; j++) {
                const cube__ended *e = &h->sessions[(h->next_session + h->cap - h->n_sessions + j) % h->cap];
                if (!sees_all(k) && e->uid != k->session->uid)
                        continue;
                r |= msgpack_pack_map(&pk, 11);
                r |= cube__pack_kv_u64(&pk, "id", e->id);
                r |= cube__pack_kv_u64(&pk, "pid", (uint64_t) e->pid);
                r |= cube__pack_kv_u64(&pk, "uid", (uint64_t) e->uid);
                r |= cube__pack_kv_str(&pk, "name", e->name);
                r |= cube__pack_kv_u64(&pk, "launches", e->launches);
                r |= cube__pack_kv_u64(&pk, "bytes_in", e->bytes_in);
                r |= cube__pack_kv_u64(&pk, "bytes_out", e->bytes_out);
                r |= cube__pack_kv_u64(&pk, "errors", e->errors);
                r |= cube__pack_kv_u64(&pk, "memory_peak", e->memory_peak);
                r |= cube__pack_str(&pk, "opened_seconds");
                r |= msgpack_pack_double(&pk, e->opened_s);
                r |= cube__pack_str(&pk, "duration_seconds");
                r |= msgpack_pack_double(&pk, e->duration_s);
        }
        return finish(&sb, k, r);
}

/* Failures recorded recently, oldest first, live or long pruned. */
cube__dispatched cube__do_recent_failures(cube__msg *k)
{
        const cube__history *h = &k->server->history;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        uint32_t n = 0;
        int r = 0;

        for (size_t i = 0; i < h->n_failures; i++)
                n += sees_all(k) || h->failures[i].uid == k->session->uid;
        begin(&sb, &pk, k);
        r |= msgpack_pack_array(&pk, n);
        for (size_t j = 0; j < h->n_failures; j++) {
                const cube__recent_failure *f = &h->failures[(h->next_failure + h->cap - h->n_failures + j) % h->cap];
                if (!sees_all(k) && f->uid != k->session->uid)
                        continue;
                r |= msgpack_pack_map(&pk, 4);
                r |= cube__pack_kv_u64(&pk, "id", f->id);
                r |= cube__pack_kv_u64(&pk, "session", f->session);
                r |= cube__pack_kv_str(&pk, "root", f->root);
                r |= cube__pack_str(&pk, "at_seconds");
                r |= msgpack_pack_double(&pk, f->at_s);
        }
        return finish(&sb, k, r);
}

typedef struct ban_ctx {
        msgpack_packer *pk;
        uint64_t now;
        uint32_t n;
        int r;
        bool pack;
} ban_ctx;

static void pack_uid_ban(uint64_t uid, void *value, void *ctx)
{
        ban_ctx *b = ctx;
        const cube__uid *u = value;
        char who[32];

        if (u->banned_until_ns <= b->now)
                return;
        b->n++;
        if (!b->pack)
                return;
        snprintf(who, sizeof(who), "%llu", (unsigned long long) uid);
        b->r |= msgpack_pack_map(b->pk, 3);
        b->r |= cube__pack_kv_str(b->pk, "kind", "uid");
        b->r |= cube__pack_kv_str(b->pk, "who", who);
        b->r |= cube__pack_kv_u64(b->pk, "seconds_left", (u->banned_until_ns - b->now) / 1000000000ull + 1);
}

/* Uids and session names refused for poisoning the device too often. */
cube__dispatched cube__do_bans(cube__msg *k)
{
        cube__server *srv = k->server;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        ban_ctx b = { &pk, uv_hrtime(), 0, 0, false };

        cube__idmap_foreach(&srv->users.uids, pack_uid_ban, &b);
        for (size_t i = 0; i < CUBE__NAME_BANS; i++)
                b.n += srv->users.name_bans[i].banned_until_ns > b.now;
        begin(&sb, &pk, k);
        b.r |= msgpack_pack_array(&pk, b.n);
        b.pack = true;
        cube__idmap_foreach(&srv->users.uids, pack_uid_ban, &b);
        for (size_t i = 0; i < CUBE__NAME_BANS; i++) {
                const cube__name_ban *nb = &srv->users.name_bans[i];
                if (nb->banned_until_ns <= b.now)
                        continue;
                b.r |= msgpack_pack_map(&pk, 3);
                b.r |= cube__pack_kv_str(&pk, "kind", "name");
                b.r |= cube__pack_kv_str(&pk, "who", nb->name);
                b.r |= cube__pack_kv_u64(&pk, "seconds_left",
                                         (nb->banned_until_ns - b.now) / 1000000000ull + 1);
        }
        return finish(&sb, k, b.r);
}

cube__dispatched cube__do_kernels(cube__msg *k)
{
        cube__server *srv = k->server;
        static const char *const states[] = { "new", "compiling", "compiled", "failed" };
        msgpack_sbuffer sb;
        msgpack_packer pk;
        uint32_t n = 0;
        int r = 0;

        for (cube__kernel *kn = srv->kernels; kn; kn = kn->all_next)
                n += kernel_visible(k, kn);
        begin(&sb, &pk, k);
        r |= msgpack_pack_array(&pk, n);
        for (cube__kernel *kn = srv->kernels; kn; kn = kn->all_next) {
                if (!kernel_visible(k, kn))
                        continue;
                /* A compiling kernel's figures are the thread pool's until it
                 * is done: they read as zeros until then. */
                bool done = kn->state != CUBE__KERNEL_COMPILING;
                r |= msgpack_pack_map(&pk, 9);
                r |= cube__pack_kv_str(&pk, "hash", kn->program);
                r |= cube__pack_kv_str(&pk, "entry", kn->entry);
                r |= cube__pack_kv_str(&pk, "backend", srv->driver->name);
                r |= cube__pack_kv_str(&pk, "state", states[kn->state]);
                r |= cube__pack_str(&pk, "from_disk");
                r |= done && kn->from_disk ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk);
                r |= cube__pack_str(&pk, "compile_ms");
                r |= msgpack_pack_double(&pk, done ? kn->compile_ms : 0);
                r |= cube__pack_kv_u64(&pk, "hits", kn->hits);
                r |= cube__pack_kv_u64(&pk, "buffers", kn->desc.n_buffers);
                r |= cube__pack_kv_u64(&pk, "shared_bytes", done ? kn->shared_bytes : 0);
        }
        return finish(&sb, k, r);
}

/* The kernel cache on disk: its size, its limit and what it evicted (the
 * artifacts' names only to an administrator: they are others' kernels). */
cube__dispatched cube__do_kernel_cache(cube__msg *k)
{
        msgpack_sbuffer sb;
        msgpack_packer pk;
        int r;

        begin(&sb, &pk, k);
        r = cube__disk_cache_pack(&k->server->disk_cache, &pk, cube__uid_is_admin(k->session->uid));
        return finish(&sb, k, r);
}

/* Whether the failure entry {id, session, report} is of a session the
 * caller may see (a live one: an ended session's user is not known). */
static bool failure_visible(const cube__msg *k, const msgpack_object *entry)
{
        if (cube__uid_is_admin(k->session->uid))
                return true;
        if (entry->type != MSGPACK_OBJECT_MAP)
                return false;
        for (uint32_t i = 0; i < entry->via.map.size; i++) {
                const msgpack_object_kv *kv = &entry->via.map.ptr[i];
                if (kv->key.type != MSGPACK_OBJECT_STR || kv->key.via.str.size != 7 ||
                    memcmp(kv->key.via.str.ptr, "session", 7) != 0 ||
                    kv->val.type != MSGPACK_OBJECT_POSITIVE_INTEGER)
                        continue;
                for (const cube__session *s = k->server->sessions; s; s = s->next)
                        if (s->id == kv->val.via.u64)
                                return visible(k, s);
        }
        return false;
}

/* The failure store packs every record; the caller gets those of its own
 * user's sessions, filtered here so that the store stays as it is. */
cube__dispatched cube__do_failures(cube__msg *k)
{
        msgpack_sbuffer sb, all;
        msgpack_packer pk, all_pk;
        msgpack_unpacked up;
        size_t off = 0;
        int r = 0;

        msgpack_sbuffer_init(&all);
        msgpack_packer_init(&all_pk, &all, msgpack_sbuffer_write);
        msgpack_unpacked_init(&up);
        begin(&sb, &pk, k);
        r |= cube__failures_pack(&k->server->failures, &all_pk);
        if (r == 0 && msgpack_unpack_next(&up, all.data, all.size, &off) == MSGPACK_UNPACK_SUCCESS &&
            up.data.type == MSGPACK_OBJECT_ARRAY) {
                const msgpack_object_array *a = &up.data.via.array;
                uint32_t n = 0;
                for (uint32_t i = 0; i < a->size; i++)
                        n += failure_visible(k, &a->ptr[i]);
                r |= msgpack_pack_array(&pk, n);
                for (uint32_t i = 0; i < a->size; i++)
                        if (failure_visible(k, &a->ptr[i]))
                                r |= msgpack_pack_object(&pk, a->ptr[i]);
        } else {
                r = -1;
        }
        msgpack_unpacked_destroy(&up);
        msgpack_sbuffer_destroy(&all);
        return finish(&sb, k, r);
}

cube__dispatched cube__do_sessions(cube__msg *k)
{
        msgpack_sbuffer sb;
        msgpack_packer pk;
        int r = 0;

        uint32_t n = 0;
        for (cube__session *s = k->server->sessions; s; s = s->next)
                n += visible(k, s);
        begin(&sb, &pk, k);
        r |= msgpack_pack_array(&pk, n);
        for (cube__session *s = k->server->sessions; s; s = s->next) {
                if (!visible(k, s))
                        continue;
                r |= msgpack_pack_map(&pk, 13);
                r |= cube__pack_kv_u64(&pk, "id", s->id);
                r |= cube__pack_kv_u64(&pk, "pid", (uint64_t) s->pid);
                r |= cube__pack_kv_u64(&pk, "uid", (uint64_t) s->uid);
                r |= cube__pack_kv_str(&pk, "name", s->name);
                r |= cube__pack_kv_u64(&pk, "streams", s->streams.len);
                r |= cube__pack_kv_u64(&pk, "memory_in_use", s->memory_in_use);
                r |= cube__pack_kv_u64(&pk, "memory_peak", s->memory_peak);
                r |= cube__pack_kv_u64(&pk, "allocations", s->memory.len);
                r |= cube__pack_kv_u64(&pk, "launches", s->launches);
                r |= cube__pack_kv_u64(&pk, "bytes_in", s->bytes_in);
                r |= cube__pack_kv_u64(&pk, "bytes_out", s->bytes_out);
                r |= cube__pack_kv_u64(&pk, "errors", s->errors);
                r |= cube__pack_str(&pk, "connected");
                r |= s->conn ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk);
        }
        return finish(&sb, k, r);
}

/* What packs one stream's entry of a daemon-wide list. */
typedef struct stream_ctx {
        msgpack_packer *pk;
        uint64_t session;
        int r;
} stream_ctx;

/* Answers with an array of one entry per stream of every session. */
static cube__dispatched answer_every_stream(cube__msg *k,
                                            void (*pack)(uint64_t, void *, void *))
{
        msgpack_sbuffer sb;
        msgpack_packer pk;
        uint64_t n = 0;
        stream_ctx c = { &pk, 0, 0 };

        for (cube__session *s = k->server->sessions; s; s = s->next)
                n += visible(k, s) ? s->streams.len : 0;
        begin(&sb, &pk, k);
        c.r |= msgpack_pack_array(&pk, (uint32_t) n);
        for (cube__session *s = k->server->sessions; s; s = s->next) {
                if (!visible(k, s))
                        continue;
                c.session = s->id;
                cube__idmap_foreach(&s->streams, pack, &c);
        }
        return finish(&sb, k, c.r);
}

static void pack_stream(uint64_t key, void *value, void *ctx)
{
        stream_ctx *c = ctx;
        cube__stream *st = value;

        c->r |= msgpack_pack_map(c->pk, 3);
        c->r |= cube__pack_kv_u64(c->pk, "session", c->session);
        c->r |= cube__pack_kv_u64(c->pk, "stream", st->id);
        c->r |= cube__pack_kv_u64(c->pk, "pending", st->pending);
}

cube__dispatched cube__do_streams(cube__msg *k)
{
        return answer_every_stream(k, pack_stream);
}

static void pack_report(uint64_t key, void *value, void *ctx)
{
        stream_ctx *c = ctx;
        cube__stream *st = value;
        cube__pools *m = st->memory ? st->memory : cube__pools_new(&st->session->server->pools);

        c->r |= msgpack_pack_map(c->pk, 2);
        c->r |= cube__pack_kv_u64(c->pk, "session", c->session);
        c->r |= cube__pack_str(c->pk, "report");
        c->r |= m ? cube__pools_pack(m, st->id, c->pk) : -1;
        if (m != st->memory)
                cube__pools_close(m);
}

/* Every session's streams' memory reports: the device-wide view. */
cube__dispatched cube__do_memory(cube__msg *k)
{
        return answer_every_stream(k, pack_report);
}

static void put_hist(FILE *f, const char *name, const char *help, const char *instance,
                     const cube__hist *h)
{
        uint64_t cumulative = 0;

        fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
        for (size_t i = 0; i < CUBE__HIST_BUCKETS; i++) {
                cumulative += h->buckets[i];
                fprintf(f, "%s_bucket{instance=\"%s\",le=\"%g\"} %" PRIu64 "\n", name, instance,
                        cube__hist_bounds[i], cumulative);
        }
        fprintf(f, "%s_bucket{instance=\"%s\",le=\"+Inf\"} %" PRIu64 "\n", name, instance,
                h->count);
        fprintf(f, "%s_sum{instance=\"%s\"} %.9f\n", name, instance, h->sum);
        fprintf(f, "%s_count{instance=\"%s\"} %" PRIu64 "\n", name, instance, h->count);
}

/* The daemon's figures in the Prometheus text exposition format. Counters
 * are the daemon's lifetime counters (ended sessions' figures included), so
 * they never go down while it runs; every series is labelled with the
 * instance ("cpu0"), which is the same across restarts, never with the
 * service id, whose nonce changes at every start. */
cube__dispatched cube__do_metrics(cube__msg *k)
{
        cube__server *srv = k->server;
        const cube__stats *t = &srv->stats;
        uint64_t launches = t->launches, bytes_in = t->bytes_in, bytes_out = t->bytes_out;
        uint64_t errors = t->errors;
        char instance[48];
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        msgpack_sbuffer sb;
        msgpack_packer pk;
        int r = 0;

        if (!f) {
                cube__reply_owned_error(k, NULL);
                return CUBE__DISPATCH_DONE;
        }
        snprintf(instance, sizeof(instance), "%s%u", srv->driver->name, srv->opts.device_index);
        for (cube__session *s = srv->sessions; s; s = s->next) {
                launches += s->launches;
                bytes_in += s->bytes_in;
                bytes_out += s->bytes_out;
                errors += s->errors;
        }
#define METRIC(name, type, help, fmt, value) \
        fprintf(f, "# HELP " name " " help "\n# TYPE " name " " type "\n" name "{instance=\"%s\"} " fmt "\n", \
                instance, value)
        fprintf(f, "# HELP cube_build_info The daemon's version and protocol; always 1.\n"
                "# TYPE cube_build_info gauge\ncube_build_info{instance=\"%s\",version=\"%s\","
                "protocol=\"%d\",backend=\"%s\"} 1\n", instance, CUBE_VERSION,
                CUBE_PROTOCOL_VERSION, srv->driver->name);
        METRIC("cube_up", "gauge", "Whether the daemon serves.", "%d", 1);
        METRIC("cube_uptime_seconds", "gauge", "Seconds since the daemon started.", "%.3f",
               (double) (uv_hrtime() - srv->started_ns) / 1e9);
        METRIC("cube_sessions", "gauge", "Sessions alive.", "%u", srv->n_sessions);
        METRIC("cube_draining", "gauge", "Whether the daemon is draining.", "%d",
               srv->draining ? 1 : 0);
        METRIC("cube_device_memory_bytes", "gauge", "Device memory the daemon may hand out.",
               "%" PRIu64, srv->properties.memory_bytes);
        METRIC("cube_memory_in_use_bytes", "gauge", "Device memory held by sessions.", "%" PRIu64,
               srv->memory_in_use);
        METRIC("cube_memory_peak_bytes", "gauge", "The most device memory held at once.",
               "%" PRIu64, srv->memory_peak);
        METRIC("cube_allocations", "gauge", "Live allocations.", "%" PRIu64, srv->allocations);
        METRIC("cube_memory_reserved_bytes", "gauge", "Device memory held in pages.", "%" PRIu64,
               srv->pools.reserved);
        METRIC("cube_work_in_flight", "gauge", "Device work submitted and not yet complete.",
               "%u", srv->inflight);
        METRIC("cube_kernels", "gauge", "Entries in the kernel cache.", "%" PRIu64, srv->n_kernels);
        METRIC("cube_compiles_total", "counter", "Kernels compiled by this run.", "%" PRIu64,
               srv->compiles);
        METRIC("cube_kernel_cache_bytes", "gauge", "Bytes of artifacts in the kernel cache "
               "directory.", "%" PRIu64, srv->disk_cache.bytes);
        METRIC("cube_kernel_cache_evictions_total", "counter", "Artifacts evicted from the "
               "kernel cache to stay under cache-max-bytes.", "%" PRIu64,
               srv->disk_cache.evictions);
        METRIC("cube_kernel_cache_evicted_bytes_total", "counter", "Bytes of the artifacts "
               "evicted.", "%" PRIu64, srv->disk_cache.evicted_bytes);
        METRIC("cube_failures", "gauge", "Live failures in the failure store.", "%zu",
               cube__failures_live(&srv->failures));
        METRIC("cube_poisoned", "gauge", "Whether the device is poisoned.", "%d",
               srv->poison ? 1 : 0);
        METRIC("cube_launches_total", "counter", "Launches by every session of this run.",
               "%" PRIu64, launches);
        METRIC("cube_received_bytes_total", "counter", "Bytes received from every session.",
               "%" PRIu64, bytes_in);
        METRIC("cube_sent_bytes_total", "counter", "Bytes sent to every session.", "%" PRIu64,
               bytes_out);
        METRIC("cube_errors_total", "counter", "Errors answered to every session.", "%" PRIu64,
               errors);
        METRIC("cube_sessions_opened_total", "counter", "Sessions accepted.", "%" PRIu64,
               t->sessions_opened);
        METRIC("cube_sessions_refused_total", "counter", "Connections refused (access, quotas, "
               "names, poison backoff).", "%" PRIu64, t->sessions_refused);
        METRIC("cube_protocol_errors_total", "counter", "Connections closed for breaking the "
               "protocol.", "%" PRIu64, t->protocol_errors);
        METRIC("cube_poisons_total", "counter", "Times the device was poisoned.", "%" PRIu64,
               t->poisons);
        METRIC("cube_reloads_total", "counter", "Reloads asked for (SIGHUP).", "%" PRIu64,
               t->reloads);
        METRIC("cube_reloads_refused_total", "counter", "Reloads refused: the configuration did "
               "not load, the running one was kept.", "%" PRIu64, t->reloads_refused);
        METRIC("cube_request_polls_total", "counter", "Times the loop polled for a client's "
               "next request before sleeping (request-poll-us).", "%" PRIu64, t->request_polls);
        METRIC("cube_request_polls_caught_total", "counter", "Requests that arrived while it "
               "polled.", "%" PRIu64, t->request_polls_caught);
#undef METRIC
        put_hist(f, "cube_compile_seconds", "Time compiling a kernel.", instance, &t->compile);
        put_hist(f, "cube_queue_wait_seconds", "Time work waited in the daemon's queues before "
                 "it was submitted to the device.", instance, &t->queue_wait);
        cube__shares_metrics(srv, f, instance);
        fclose(f);
        begin(&sb, &pk, k);
        r |= msgpack_pack_str(&pk, len);
        r |= msgpack_pack_str_body(&pk, text, len);
        free(text);
        return finish(&sb, k, r);
}

/* drain [] or [timeout seconds]: takes no new work, stops once the working
 * sessions have ended, or closes them past the timeout. */
cube__dispatched cube__do_drain(cube__msg *k)
{
        uint32_t timeout = 0;

        if (k->n > 1 || (k->n == 1 && !cube__obj_u32(&k->p[0], &timeout))) {
                cube__reply_malformed(k, "params must be [] or [timeout seconds]");
                return CUBE__DISPATCH_DONE;
        }
        if (!admin_allowed(k))
                return CUBE__DISPATCH_DONE;
        cube__reply_ok_nil(k);
        cube__server_drain(k->server, timeout, k->session);
        return CUBE__DISPATCH_DONE;
}

cube__dispatched cube__do_undrain(cube__msg *k)
{
        if (!admin_allowed(k))
                return CUBE__DISPATCH_DONE;
        if (!k->server->draining) {
                cube__reply_owned_error(k, cube__err_validation("the daemon is not draining"));
                return CUBE__DISPATCH_DONE;
        }
        cube__server_undrain(k->server, k->session);
        cube__reply_ok_nil(k);
        return CUBE__DISPATCH_DONE;
}

cube__dispatched cube__do_kill_session(cube__msg *k)
{
        uint64_t id;
        cube__session *s;

        if (k->n != 1 || !cube__obj_u64(&k->p[0], &id)) {
                cube__reply_malformed(k, "params must be [session]");
                return CUBE__DISPATCH_DONE;
        }
        if (!admin_allowed(k))
                return CUBE__DISPATCH_DONE;
        for (s = k->server->sessions; s; s = s->next)
                if (s->id == id && s->conn)
                        break;
        if (!s) {
                cube__reply_owned_error(k, cube__err_validation("no connected session %" PRIu64,
                                                                id));
                return CUBE__DISPATCH_DONE;
        }
        cube__log(CUBE__LOG_NOTICE, "session %" PRIu64 " (pid %d) killed by session %" PRIu64
                  " (pid %d)", s->id, (int) s->pid, k->session->id, (int) k->session->pid);
        if (s != k->session)
                cube__conn_close(s->conn);
        cube__reply_ok_nil(k);
        if (s == k->session)
                cube__conn_close(k->conn);
        return CUBE__DISPATCH_DONE;
}

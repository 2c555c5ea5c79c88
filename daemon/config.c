/*
 * config.c - cubed's options: one table of every option, its default, its
 * limits and whether a reload may change it, shared by the command line and
 * the configuration file.
 *
 * The file is lines of `key = value`, with `#` starting a comment; the keys
 * are the long command-line options. Options given on the command line win
 * over the file, at start and at every reload. A reload builds a whole new set
 * of options and validates it before anything changes: a file that does not
 * parse leaves the running configuration exactly as it was.
 */
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "services.h"

enum kind { K_STRING, K_SIZE, K_U32, K_BOOL, K_LEVEL, K_POLICY, K_SECONDS, K_INSTANCE, K_LIST,
            K_CHECK };

typedef struct option_spec {
        const char *key;
        enum kind kind;
        size_t offset;
        uint64_t min, max;
        bool reloadable;
} option_spec;

#define OFF(field) offsetof(cube__options, field)

static const option_spec specs[] = {
        { "instance", K_INSTANCE, 0, 0, 0, false },
        { "socket", K_STRING, OFF(socket_path), 0, 0, false },
        { "backend", K_STRING, OFF(backend), 0, 0, false },
        { "device", K_U32, OFF(device_index), 0, 255, false },
        { "cache-dir", K_STRING, OFF(cache_dir), 0, 0, false },
        { "memory-limit", K_SIZE, OFF(memory_limit), 0, UINT64_MAX, false },
        { "max-message", K_SIZE, OFF(limits.max_message_bytes), 1024, 1ull << 32, true },
        { "max-depth", K_U32, OFF(limits.max_depth), 1, 32, true },
        { "max-container", K_U32, OFF(limits.max_container), 1, UINT32_MAX, true },
        { "max-str", K_SIZE, OFF(limits.max_str_bytes), 1, 1ull << 32, true },
        { "max-objects", K_SIZE, OFF(limits.max_objects), 16, UINT64_MAX, true },
        { "log-level", K_LEVEL, OFF(log_level), 0, 0, true },
        { "poison-policy", K_POLICY, OFF(poison_policy), 0, 0, true },
        { "drain-timeout", K_SECONDS, OFF(drain_timeout_s), 1, 3600, true },
        { "request-poll-us", K_U32, OFF(request_poll_us), 0, 10000, true },
        { "poison-grace", K_SECONDS, OFF(poison_grace_s), 1, 3600, true },
        { "kernel-timeout", K_SECONDS, OFF(kernel_timeout_s), 0, 86400, false },
        { "compile-limit", K_SECONDS, OFF(compile_limit_s), 1, 3600, false },
        { "check-mode", K_CHECK, OFF(check_mode), 0, 0, false },
        { "unchecked-uids", K_LIST, OFF(unchecked_uids), 0, 0, true },
        { "compile-memory", K_SIZE, OFF(compile_memory), 256u << 20, 1ull << 40, false },
        { "compile-output", K_SIZE, OFF(compile_output), 1u << 20, 128u << 20, false },
        { "build-slots", K_U32, OFF(build_slots), 1, 64, false },
        { "uid-build-slots", K_U32, OFF(uid_build_slots), 0, 64, true },
        { "fault-injection", K_BOOL, OFF(fault_injection), 0, 0, true },
        { "session-memory", K_SIZE, OFF(session_memory), 0, UINT64_MAX, true },
        { "uid-memory", K_SIZE, OFF(uid_memory), 0, UINT64_MAX, true },
        { "max-sessions", K_U32, OFF(max_sessions), 0, UINT32_MAX, true },
        { "max-sessions-per-uid", K_U32, OFF(max_sessions_per_uid), 0, UINT32_MAX, true },
        { "max-streams", K_U32, OFF(max_streams), 1, 1u << 20, true },
        { "max-requests", K_U32, OFF(max_requests), 1, UINT32_MAX, true },
        { "max-queued-bytes", K_SIZE, OFF(max_queued_bytes), 1u << 20, UINT64_MAX, true },
        { "region-memory", K_SIZE, OFF(region_memory), 1u << 20, UINT64_MAX, true },
        { "max-regions", K_U32, OFF(max_regions), 1, 1u << 20, true },
        { "uid-queued-bytes", K_SIZE, OFF(uid_queued_bytes), 0, UINT64_MAX, true },
        { "max-receive-bytes", K_SIZE, OFF(max_receive_bytes), 0, UINT64_MAX, true },
        { "hello-timeout", K_SECONDS, OFF(hello_timeout_s), 0, 3600, true },
        { "frame-timeout", K_SECONDS, OFF(frame_timeout_s), 0, 3600, true },
        { "max-profile-windows", K_U32, OFF(max_profile_windows), 1, 1u << 20, true },
        { "max-graphs", K_U32, OFF(max_graphs), 0, 1u << 20, true },
        { "max-graph-launches", K_U32, OFF(max_graph_launches), 1, 1u << 24, true },
        { "max-kernels", K_U32, OFF(max_kernels), 1, 1u << 20, true },
        { "max-kernel-source-bytes", K_SIZE, OFF(max_kernel_source_bytes), 4096, UINT64_MAX, true },
        { "uid-kernels", K_U32, OFF(uid_kernels), 1, UINT32_MAX, true },
        { "uid-kernel-source-bytes", K_SIZE, OFF(uid_kernel_source_bytes), 4096, UINT64_MAX, true },
        { "daemon-kernels", K_U32, OFF(daemon_kernels), 1, UINT32_MAX, true },
        { "daemon-kernel-source-bytes", K_SIZE, OFF(daemon_kernel_source_bytes), 4096, UINT64_MAX, true },
        { "uid-regions", K_U32, OFF(uid_regions), 1, 1u << 20, true },
        { "map-reserve", K_U32, OFF(map_reserve), 0, 1u << 20, true },
        { "cache-max-bytes", K_SIZE, OFF(cache_max_bytes), 0, UINT64_MAX, true },
        { "socket-group", K_STRING, OFF(socket_group), 0, 0, false },
        { "allow-uids", K_LIST, OFF(allow_uids), 0, 0, true },
        { "allow-groups", K_LIST, OFF(allow_groups), 0, 0, true },
        { "transport", K_STRING, OFF(transport), 0, 0, false },
        { "comm-dir", K_STRING, OFF(comm_dir), 0, 0, false },
        { "comm-address", K_STRING, OFF(comm_address), 0, 0, false },
        { "collective-timeout", K_U32, OFF(collective_timeout_ms), 100, 3600000, true },
        { "max-groups", K_U32, OFF(max_groups), 1, 65536, true },
        { "history", K_U32, OFF(history), 0, 65536, false },
        { "poison-ban-after", K_U32, OFF(poison_ban_after), 0, 1000000, true },
        { "poison-ban-seconds", K_SECONDS, OFF(poison_ban_s), 1, 7 * 86400, true },
        { "shares", K_LIST, OFF(shares), 0, 0, true },
        { "share-min-percent", K_U32, OFF(share_min_percent), 0, 50, true },
        { "share-bound-us", K_U32, OFF(share_bound_us), 100, 1000000, true },
        { "share-window-ms", K_U32, OFF(share_window_ms), 100, 60000, true },
        { "share-queue-us", K_U32, OFF(share_queue_us), 100, 10000000, true },
};

_Static_assert(sizeof(specs) / sizeof(specs[0]) <= CUBE__OPTIONS_MAX, "CUBE__OPTIONS_MAX is too small");

/* The defaults that are a share of the host: a build's memory and output,
 * and what one user's messages may hold while they arrive. cubed.conf(5)
 * says why each share is what it is. */
static uint64_t host_memory(void)
{
        long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);

        return pages > 0 && size > 0 ? (uint64_t) pages * (uint64_t) size : 4ull << 30;
}

static uint64_t clamp_u64(uint64_t v, uint64_t lo, uint64_t hi)
{
        return v < lo ? lo : v > hi ? hi : v;
}

/* The builds that run at once: one per core, up to four, and one more.
 * A user holds all but one (uid-build-slots), so one user's builds of
 * several sources run side by side on every core, and another user's build
 * still finds a slot at once; one slot per core without the extra one left
 * a single user's builds one after another on two cores. */
static uint64_t build_slots(void)
{
        long cores = sysconf(_SC_NPROCESSORS_ONLN);

        return (cores < 1 ? 1 : cores > 4 ? 4 : (uint64_t) cores) + 1;
}

static const char *const levels[] = { "error", "warning", "notice", "info", "debug" };
static const char *const check_modes[] = { "auto", "enforce", "validate" };

const char *cube__check_mode_name(cube__check_mode m)
{
        return m <= CUBE__CHECK_VALIDATE ? check_modes[m] : "?";
}

/* Whether a service manager started the daemon: systemd passes one of these
 * to every service (NOTIFY_SOCKET to Type=notify units). */
static bool under_service_manager(void)
{
        return getenv("NOTIFY_SOCKET") || getenv("INVOCATION_ID");
}

/* The poison policy's default follows how cubed was started: under a service
 * manager, exit, and a fresh daemon is started on a clean device; by hand, in
 * a terminal, nothing would start it again, so the device is brought up anew
 * in place. */
void cube__options_default(cube__options *o)
{
        *o = (cube__options) {
                .backend = strdup("cpu"),
                .log_level = CUBE__LOG_NOTICE,
                .poison_policy = under_service_manager() ? CUBE__POISON_EXIT : CUBE__POISON_REINIT,
                .drain_timeout_s = 10,
                .request_poll_us = 50,
                .max_sessions = CUBE__DEFAULT_MAX_SESSIONS,
                .max_sessions_per_uid = 1024,
                .max_streams = 1024,
                .max_requests = 4096,
                .max_queued_bytes = 256ull << 20,
                .region_memory = 1ull << 30,
                .max_regions = 64,
                .uid_queued_bytes = clamp_u64(host_memory() / 32, 64ull << 20, 1ull << 30),
                .max_receive_bytes = 2ull << 30,
                .hello_timeout_s = 10,
                .frame_timeout_s = 30,
                .max_profile_windows = 1024,
                .max_graphs = 256,
                .max_graph_launches = 65536,
                .max_kernels = 1024,
                .max_kernel_source_bytes = 64ull << 20,
                .uid_kernels = 4096,
                .uid_kernel_source_bytes = 256ull << 20,
                .daemon_kernels = 65536,
                .daemon_kernel_source_bytes = clamp_u64(host_memory() / 16, 256ull << 20,
                                                        4ull << 30),
                .uid_regions = 4096,
                .map_reserve = 4096,
                .cache_max_bytes = 1ull << 30,
                .poison_grace_s = 5,
                .collective_timeout_ms = 30000,
                .max_groups = 64,
                .history = 64,
                .poison_ban_after = 3,
                .poison_ban_s = 600,
                .kernel_timeout_s = 5,
                .compile_limit_s = 60,
                .share_min_percent = 5,
                .share_bound_us = 1000,
                .share_window_ms = 1000,
                .share_queue_us = 10000,
                .compile_memory = clamp_u64(host_memory() / 4 / build_slots(), 2ull << 30,
                                            4ull << 30),
                .compile_output = clamp_u64(host_memory() / 256, 16ull << 20, 128ull << 20),
                .build_slots = (uint32_t) build_slots(),
        };
        cube__limits_daemon_default(&o->limits);
}

void cube__options_done(cube__options *o)
{
        free(o->socket_path);
        free(o->backend);
        free(o->cache_dir);
        free(o->config_path);
        free(o->socket_group);
        free(o->comm_dir);
        free(o->transport);
        free(o->comm_address);
        free(o->allow_uids);
        free(o->allow_groups);
        free(o->allow_uid_ids.ids);
        free(o->allow_gid_ids.ids);
        free(o->unchecked_uids);
        free(o->unchecked_uid_ids.ids);
        free(o->shares);
        free(o->share_rules);
        *o = (cube__options) {0};
}

static int spec_index(const char *key)
{
        for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++)
                if (strcmp(specs[i].key, key) == 0)
                        return (int) i;
        return -1;
}

const char *cube__option_key(size_t i, bool *ret_reloadable)
{
        if (i >= sizeof(specs) / sizeof(specs[0]))
                return NULL;
        if (ret_reloadable)
                *ret_reloadable = specs[i].reloadable;
        return specs[i].key;
}


/* The numeric id a list entry names: a number, or a user or group name.
 * Called when the configuration loads, never on the loop's accept path. */
static bool entry_id(const char *entry, bool group, unsigned long *ret)
{
        char *end;

        errno = 0;
        *ret = strtoul(entry, &end, 10);
        if (!errno && end != entry && *end == '\0')
                return true;
        if (group) {
                struct group *g = getgrnam(entry);
                if (g)
                        *ret = g->gr_gid;
                return g != NULL;
        }
        struct passwd *p = getpwnam(entry);
        if (p)
                *ret = p->pw_uid;
        return p != NULL;
}

int cube__id_list_parse(const char *list, bool group, cube__id_list *ret, char *why, size_t len)
{
        cube__id_list l = {0};
        char *copy, *save = NULL;

        *ret = l;
        if (!list || !*list)
                return 0;
        if (!(copy = strdup(list)))
                return -ENOMEM;
        for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                unsigned long v;
                while (isspace((unsigned char) *tok))
                        tok++;
                for (char *e = tok + strlen(tok); e > tok && isspace((unsigned char) e[-1]); e--)
                        e[-1] = '\0';
                if (!*tok)
                        continue;
                if (!entry_id(tok, group, &v) || v > UINT32_MAX) {
                        snprintf(why, len, "%s: '%s' names no %s", group ? "allow-groups" :
                                 "allow-uids", tok, group ? "group" : "user");
                        free(copy);
                        free(l.ids);
                        return -ENOENT;
                }
                uint32_t *grown = realloc(l.ids, (l.n + 1) * sizeof(*l.ids));
                if (!grown) {
                        free(copy);
                        free(l.ids);
                        return -ENOMEM;
                }
                l.ids = grown;
                l.ids[l.n++] = (uint32_t) v;
        }
        free(copy);
        l.set = true;
        *ret = l;
        return 0;
}

static int parse_size(const char *s, uint64_t *ret);

static const char *const classes[] = { "latency", "normal", "batch" };

const char *cube__class_name(cube__class c)
{
        return c < CUBE__CLASSES ? classes[c] : "?";
}

int cube__class_parse(const char *name)
{
        for (int i = 0; i < CUBE__CLASSES; i++)
                if (strcmp(name, classes[i]) == 0)
                        return i;
        return -1;
}

/* One `key=value` word of a shares entry into r. */
static bool share_word(cube__share_rule *r, const char *word, char *why, size_t len)
{
        const char *v = strchr(word, '=');
        uint64_t n;

        if (!v) {
                snprintf(why, len, "shares: '%s' is not key=value", word);
                return false;
        }
        v++;
        if (strncmp(word, "weight=", 7) == 0 && parse_size(v, &n) == 0 && n >= 1 &&
            n <= CUBE__WEIGHT_MAX) {
                r->weight = (uint32_t) n;
        } else if (strncmp(word, "class=", 6) == 0 && cube__class_parse(v) >= 0) {
                r->class_ = cube__class_parse(v);
        } else if (strncmp(word, "cap=", 4) == 0 && parse_size(v, &n) == 0 && n >= 1 &&
                   n <= 100) {
                r->cap_percent = (uint32_t) n;
        } else if (strncmp(word, "cap-alone=", 10) == 0 &&
                   (strcmp(v, "yes") == 0 || strcmp(v, "no") == 0)) {
                r->cap_alone = strcmp(v, "yes") == 0;
        } else if (strncmp(word, "tenant=", 7) == 0 && *v && strlen(v) < CUBE__TENANT_MAX &&
                   !strchr(v, ':')) {
                snprintf(r->tenant, sizeof(r->tenant), "%s", v);
        } else {
                snprintf(why, len, "shares: '%s': say weight=1..%d, class=latency|normal|batch, "
                         "cap=1..100, cap-alone=yes|no or tenant=NAME (no ':', under %d bytes)",
                         word, CUBE__WEIGHT_MAX, CUBE__TENANT_MAX);
                return false;
        }
        return true;
}

int cube__share_rules_parse(const char *text, cube__share_rule **ret, size_t *ret_n, char *why,
                            size_t len)
{
        cube__share_rule *rules = NULL;
        size_t n = 0;
        char *copy, *save = NULL;

        *ret = NULL;
        *ret_n = 0;
        if (!text || !*text)
                return 0;
        if (!(copy = strdup(text)))
                return -ENOMEM;
        for (char *entry = strtok_r(copy, ";", &save); entry; entry = strtok_r(NULL, ";", &save)) {
                char *wsave = NULL, *sel = strtok_r(entry, " \t", &wsave);
                cube__share_rule r = { .class_ = -1, .cap_alone = -1 };
                unsigned long id;

                if (!sel)
                        continue;
                if (strcmp(sel, "default") == 0) {
                        r.kind = CUBE__RULE_DEFAULT;
                } else if ((strncmp(sel, "uid:", 4) == 0 || strncmp(sel, "group:", 6) == 0) &&
                           entry_id(strchr(sel, ':') + 1, sel[0] == 'g', &id) && id <= UINT32_MAX) {
                        r.kind = sel[0] == 'g' ? CUBE__RULE_GROUP : CUBE__RULE_UID;
                        r.id = (uint32_t) id;
                } else {
                        snprintf(why, len, "shares: '%s' selects nothing: say default, uid:USER "
                                 "or group:GROUP", sel);
                        goto fail;
                }
                for (char *w = strtok_r(NULL, " \t", &wsave); w; w = strtok_r(NULL, " \t", &wsave))
                        if (!share_word(&r, w, why, len))
                                goto fail;
                cube__share_rule *grown = realloc(rules, (n + 1) * sizeof(*rules));
                if (!grown) {
                        free(copy);
                        free(rules);
                        return -ENOMEM;
                }
                rules = grown;
                rules[n++] = r;
        }
        free(copy);
        *ret = rules;
        *ret_n = n;
        return 0;
fail:
        free(copy);
        free(rules);
        return -EINVAL;
}

static void share_fold(cube__share_terms *t, const cube__share_rule *r)
{
        if (r->weight)
                t->weight = r->weight;
        if (r->class_ >= 0)
                t->class_ = (cube__class) r->class_;
        if (r->cap_percent)
                t->cap_percent = r->cap_percent;
        if (r->cap_alone >= 0)
                t->cap_alone = r->cap_alone;
        if (*r->tenant)
                memcpy(t->tenant, r->tenant, sizeof(t->tenant));
}

/* default, then the session's group, then its uid: the most specific wins. */
void cube__share_terms_for(const cube__options *o, uid_t uid, gid_t gid,
                           cube__share_terms *ret_terms)
{
        cube__share_terms t = { .weight = 1, .class_ = CUBE__CLASS_NORMAL };

        for (int kind = CUBE__RULE_DEFAULT; kind <= CUBE__RULE_UID; kind++)
                for (size_t i = 0; i < o->n_share_rules; i++) {
                        const cube__share_rule *r = &o->share_rules[i];
                        if ((int) r->kind == kind &&
                            (kind == CUBE__RULE_DEFAULT ||
                             r->id == (kind == CUBE__RULE_UID ? (uint32_t) uid : (uint32_t) gid)))
                                share_fold(&t, r);
                }
        *ret_terms = t;
}

/* One option's value, spelt as the configuration file takes it. */
void cube__option_format(const cube__options *o, size_t i, char *buf, size_t len)
{
        const option_spec *spec = &specs[i];
        const char *base = (const char *) o;
        static const char *const policies[] = { "exit", "reinit" };

        switch (spec->kind) {
        case K_INSTANCE:
                snprintf(buf, len, "%s%u", o->backend, o->device_index);
                return;
        case K_STRING:
        case K_LIST: {
                const char *v = *(char *const *) (base + spec->offset);
                snprintf(buf, len, "%s", v ? v : "");
                return;
        }
        case K_SIZE:
                snprintf(buf, len, "%llu", (unsigned long long) *(const uint64_t *) (base + spec->offset));
                return;
        case K_U32:
        case K_SECONDS:
                snprintf(buf, len, "%u", *(const uint32_t *) (base + spec->offset));
                return;
        case K_BOOL:
                snprintf(buf, len, "%s", *(const bool *) (base + spec->offset) ? "yes" : "no");
                return;
        case K_LEVEL:
                snprintf(buf, len, "%s", levels[o->log_level - CUBE__LOG_ERR]);
                return;
        case K_POLICY:
                snprintf(buf, len, "%s", policies[o->poison_policy]);
                return;
        case K_CHECK:
                snprintf(buf, len, "%s", cube__check_mode_name(o->check_mode));
                return;
        }
        snprintf(buf, len, "?");
}

/* "64M", "1G", "4096": a whole size in bytes, suffixes in powers of 1024. */
static int parse_size(const char *s, uint64_t *ret)
{
        char *end;
        unsigned long long v;
        uint64_t mult = 1;

        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno || end == s || *s == '-')
                return -EINVAL;
        switch (*end) {
        case 'K': case 'k': mult = 1ull << 10; end++; break;
        case 'M': case 'm': mult = 1ull << 20; end++; break;
        case 'G': case 'g': mult = 1ull << 30; end++; break;
        case 'T': case 't': mult = 1ull << 40; end++; break;
        default: break;
        }
        if (*end != '\0' || (v && mult > UINT64_MAX / v))
                return -EINVAL;
        *ret = v * mult;
        return 0;
}

static int set_string(char **field, const char *value)
{
        char *copy = strdup(value);

        if (!copy)
                return -ENOMEM;
        free(*field);
        *field = copy;
        return 0;
}

int cube__option_set(cube__options *o, const char *key, const char *value, const char **ret_why)
{
        const option_spec *spec = NULL;
        char *base = (char *) o;
        uint64_t v;

        for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++)
                if (strcmp(specs[i].key, key) == 0)
                        spec = &specs[i];
        if (!spec) {
                *ret_why = "unknown option";
                return -ENOENT;
        }
        switch (spec->kind) {
        case K_LIST:
                return set_string((char **) (base + spec->offset), value);
        case K_STRING:
                if (!*value) {
                        *ret_why = "must not be empty";
                        return -EINVAL;
                }
                return set_string((char **) (base + spec->offset), value);
        case K_INSTANCE: {
                /* "cpu0", "cuda1": a backend name and a device index. */
                size_t n = strlen(value), d = n;
                char name[32];
                while (d > 0 && isdigit((unsigned char) value[d - 1]))
                        d--;
                if (d == 0 || d == n || d >= sizeof(name) || n - d > 3) {
                        *ret_why = "must be a backend and an index, such as cpu0";
                        return -EINVAL;
                }
                memcpy(name, value, d);
                name[d] = '\0';
                o->device_index = (unsigned) atoi(value + d);
                return set_string(&o->backend, name);
        }
        case K_SIZE:
        case K_U32:
        case K_SECONDS:
                if (parse_size(value, &v) < 0 || v < spec->min || v > spec->max) {
                        *ret_why = spec->kind == K_SIZE ? "must be a size in range (K, M, G, T "
                                                          "suffixes allowed)" :
                                                          "must be a whole number in range";
                        return -EINVAL;
                }
                if (spec->kind == K_SIZE)
                        *(uint64_t *) (base + spec->offset) = v;
                else
                        *(uint32_t *) (base + spec->offset) = (uint32_t) v;
                return 0;
        case K_BOOL:
                if (strcmp(value, "yes") == 0 || strcmp(value, "true") == 0 ||
                    strcmp(value, "1") == 0)
                        *(bool *) (base + spec->offset) = true;
                else if (strcmp(value, "no") == 0 || strcmp(value, "false") == 0 ||
                         strcmp(value, "0") == 0)
                        *(bool *) (base + spec->offset) = false;
                else {
                        *ret_why = "must be yes or no";
                        return -EINVAL;
                }
                return 0;
        case K_LEVEL:
                for (int i = 0; i < 5; i++)
                        if (strcmp(value, levels[i]) == 0) {
                                o->log_level = CUBE__LOG_ERR + i;
                                return 0;
                        }
                *ret_why = "must be error, warning, notice, info or debug";
                return -EINVAL;
        case K_POLICY:
                if (strcmp(value, "exit") == 0)
                        o->poison_policy = CUBE__POISON_EXIT;
                else if (strcmp(value, "reinit") == 0)
                        o->poison_policy = CUBE__POISON_REINIT;
                else {
                        *ret_why = "must be exit or reinit";
                        return -EINVAL;
                }
                return 0;
        case K_CHECK:
                for (int i = 0; i < 3; i++)
                        if (strcmp(value, check_modes[i]) == 0) {
                                o->check_mode = (cube__check_mode) i;
                                return 0;
                        }
                *ret_why = "must be auto, enforce or validate";
                return -EINVAL;
        }
        *ret_why = "unknown option";
        return -ENOENT;
}

/* Reads `key = value` lines into o. Reports the first bad line. */
static int read_file(cube__options *o, const char *path, char *why, size_t why_len)
{
        FILE *f = fopen(path, "re");
        char line[1024];
        unsigned n = 0;

        if (!f) {
                snprintf(why, why_len, "cannot read %s: %s", path, strerror(errno));
                return -errno;
        }
        while (fgets(line, sizeof(line), f)) {
                char *p = line, *eq, *key, *value, *end;
                const char *reason = NULL;
                n++;
                if (!strchr(line, '\n') && !feof(f)) {
                        snprintf(why, why_len, "%s:%u: line too long", path, n);
                        fclose(f);
                        return -EINVAL;
                }
                if ((end = strchr(p, '#')))
                        *end = '\0';
                while (isspace((unsigned char) *p))
                        p++;
                if (!*p)
                        continue;
                eq = strchr(p, '=');
                if (!eq) {
                        snprintf(why, why_len, "%s:%u: expected `key = value`", path, n);
                        fclose(f);
                        return -EINVAL;
                }
                key = p;
                for (end = eq; end > key && isspace((unsigned char) end[-1]); end--)
                        ;
                *end = '\0';
                value = eq + 1;
                while (isspace((unsigned char) *value))
                        value++;
                for (end = value + strlen(value); end > value && isspace((unsigned char) end[-1]); end--)
                        ;
                *end = '\0';
                if (strcmp(key, "instance") != 0 && cube__option_set(o, key, value, &reason) < 0) {
                        snprintf(why, why_len, "%s:%u: %s: %s", path, n, key,
                                 reason ? reason : "out of memory");
                        fclose(f);
                        return -EINVAL;
                }
                int i = spec_index(key);
                if (i >= 0) {
                        o->source[i] = CUBE__FROM_FILE;
                        o->line[i] = n;
                }
        }
        fclose(f);
        return 0;
}

int cube__config_load(const char *path, bool optional, char *const *overrides, size_t n_overrides,
                      cube__options *ret, char *why, size_t why_len)
{
        cube__options o;
        int r = 0;

        cube__options_default(&o);
        /* instance first: it sets the backend and device the file may refine. */
        for (size_t i = 0; i + 1 < n_overrides; i += 2)
                if (strcmp(overrides[i], "instance") == 0) {
                        const char *reason = "";
                        if (cube__option_set(&o, "instance", overrides[i + 1], &reason) < 0) {
                                snprintf(why, why_len, "--instance: %s", reason);
                                r = -EINVAL;
                        }
                        o.source[spec_index("instance")] = CUBE__FROM_COMMAND_LINE;
                }
        if (r == 0 && path) {
                /* An optional file is remembered even while it is missing,
                 * so that a reload reads it once it exists. */
                o.config_optional = optional;
                if (!optional || access(path, F_OK) == 0)
                        r = read_file(&o, path, why, why_len);
                if (r == 0 && set_string(&o.config_path, path) < 0)
                        r = -ENOMEM;
        }
        for (size_t i = 0; r == 0 && i + 1 < n_overrides; i += 2) {
                const char *reason = "out of memory";
                if (strcmp(overrides[i], "instance") != 0 &&
                    cube__option_set(&o, overrides[i], overrides[i + 1], &reason) < 0) {
                        snprintf(why, why_len, "--%s: %s", overrides[i], reason);
                        r = -EINVAL;
                } else if (spec_index(overrides[i]) >= 0) {
                        o.source[spec_index(overrides[i])] = CUBE__FROM_COMMAND_LINE;
                }
        }
        if (r == 0 && !o.socket_path) {
                char path_buf[128];
                snprintf(path_buf, sizeof(path_buf), "/run/cube/%s%u.sock", o.backend,
                         o.device_index);
                r = set_string(&o.socket_path, path_buf);
        }
        if (r == 0 && !o.cache_dir) {
                char dir[128];
                snprintf(dir, sizeof(dir), "/var/cache/cube/%s%u", o.backend, o.device_index);
                r = set_string(&o.cache_dir, dir);
        }
        /* A misspelt engine must not leave collectives on unnoticed. */
        if (r == 0 && o.transport && strcmp(o.transport, "none") != 0 &&
            strcmp(o.transport, "gloo") != 0) {
                snprintf(why, why_len, "transport: '%s' is no transport: say gloo or none",
                         o.transport);
                r = -EINVAL;
        }
        /* Names resolve now, not at every accept: a name that names no one
         * is a bad configuration like any other. */
        if (r == 0)
                r = cube__id_list_parse(o.allow_uids, false, &o.allow_uid_ids, why, why_len);
        if (r == 0)
                r = cube__id_list_parse(o.allow_groups, true, &o.allow_gid_ids, why, why_len);
        if (r == 0)
                r = cube__id_list_parse(o.unchecked_uids, false, &o.unchecked_uid_ids, why,
                                        why_len);
        if (r == 0)
                r = cube__share_rules_parse(o.shares, &o.share_rules, &o.n_share_rules, why,
                                            why_len);
        if (r < 0) {
                cube__options_done(&o);
                return r;
        }
        *ret = o;
        return 0;
}

static void *memdup(const void *p, size_t n)
{
        void *q = malloc(n);

        if (q)
                memcpy(q, p, n);
        return q;
}

/* Takes what a reload may change from next into cur; says what it cannot. */
void cube__options_reload(cube__options *cur, const cube__options *next)
{
        if (strcmp(cur->socket_path, next->socket_path) != 0 ||
            strcmp(cur->backend, next->backend) != 0 || cur->device_index != next->device_index ||
            strcmp(cur->cache_dir, next->cache_dir) != 0 || cur->memory_limit != next->memory_limit ||
            cur->kernel_timeout_s != next->kernel_timeout_s ||
            cur->compile_limit_s != next->compile_limit_s || cur->check_mode != next->check_mode ||
            cur->compile_memory != next->compile_memory ||
            cur->compile_output != next->compile_output ||
            cur->build_slots != next->build_slots)
                cube__log(CUBE__LOG_NOTICE, "the socket, backend, device, cache directory, "
                          "memory limit, kernel timeout, compile limit and check mode change only when the "
                          "device is opened again; they keep their values");
        cur->limits = next->limits;
        cur->log_level = next->log_level;
        cur->poison_policy = next->poison_policy;
        cur->drain_timeout_s = next->drain_timeout_s;
        cur->request_poll_us = next->request_poll_us;
        cur->poison_grace_s = next->poison_grace_s;
        cur->session_memory = next->session_memory;
        cur->uid_memory = next->uid_memory;
        cur->max_sessions = next->max_sessions;
        cur->max_sessions_per_uid = next->max_sessions_per_uid;
        cur->max_streams = next->max_streams;
        cur->collective_timeout_ms = next->collective_timeout_ms;
        cur->max_groups = next->max_groups;
        cur->max_requests = next->max_requests;
        cur->max_queued_bytes = next->max_queued_bytes;
        cur->region_memory = next->region_memory;
        cur->max_regions = next->max_regions;
        cur->max_kernels = next->max_kernels;
        cur->max_kernel_source_bytes = next->max_kernel_source_bytes;
        cur->uid_kernels = next->uid_kernels;
        cur->uid_kernel_source_bytes = next->uid_kernel_source_bytes;
        cur->daemon_kernels = next->daemon_kernels;
        cur->daemon_kernel_source_bytes = next->daemon_kernel_source_bytes;
        cur->uid_regions = next->uid_regions;
        cur->uid_build_slots = next->uid_build_slots;
        cur->map_reserve = next->map_reserve;
        cur->cache_max_bytes = next->cache_max_bytes;
        cur->uid_queued_bytes = next->uid_queued_bytes;
        cur->max_receive_bytes = next->max_receive_bytes;
        cur->hello_timeout_s = next->hello_timeout_s;
        cur->frame_timeout_s = next->frame_timeout_s;
        cur->max_profile_windows = next->max_profile_windows;
        cur->max_graphs = next->max_graphs;
        cur->max_graph_launches = next->max_graph_launches;
        free(cur->allow_uids);
        free(cur->allow_groups);
        cur->allow_uids = next->allow_uids ? strdup(next->allow_uids) : NULL;
        cur->allow_groups = next->allow_groups ? strdup(next->allow_groups) : NULL;
        free(cur->allow_uid_ids.ids);
        free(cur->allow_gid_ids.ids);
        cur->allow_uid_ids = next->allow_uid_ids;
        cur->allow_gid_ids = next->allow_gid_ids;
        cur->allow_uid_ids.ids = next->allow_uid_ids.n ?
                memdup(next->allow_uid_ids.ids, next->allow_uid_ids.n * sizeof(uint32_t)) : NULL;
        cur->allow_gid_ids.ids = next->allow_gid_ids.n ?
                memdup(next->allow_gid_ids.ids, next->allow_gid_ids.n * sizeof(uint32_t)) : NULL;
        if ((next->allow_uid_ids.n && !cur->allow_uid_ids.ids) ||
            (next->allow_gid_ids.n && !cur->allow_gid_ids.ids))
                cur->allow_uid_ids.n = cur->allow_gid_ids.n = 0;
        free(cur->unchecked_uids);
        free(cur->unchecked_uid_ids.ids);
        cur->unchecked_uids = next->unchecked_uids ? strdup(next->unchecked_uids) : NULL;
        cur->unchecked_uid_ids = next->unchecked_uid_ids;
        cur->unchecked_uid_ids.ids = next->unchecked_uid_ids.n ?
                memdup(next->unchecked_uid_ids.ids, next->unchecked_uid_ids.n * sizeof(uint32_t)) :
                NULL;
        if (next->unchecked_uid_ids.n && !cur->unchecked_uid_ids.ids)
                cur->unchecked_uid_ids.n = 0;
        cur->fault_injection = next->fault_injection;
        cur->poison_ban_after = next->poison_ban_after;
        cur->poison_ban_s = next->poison_ban_s;
        free(cur->shares);
        free(cur->share_rules);
        cur->shares = next->shares ? strdup(next->shares) : NULL;
        cur->share_rules = next->n_share_rules ?
                memdup(next->share_rules, next->n_share_rules * sizeof(cube__share_rule)) : NULL;
        cur->n_share_rules = cur->share_rules ? next->n_share_rules : 0;
        cur->share_min_percent = next->share_min_percent;
        cur->share_bound_us = next->share_bound_us;
        cur->share_window_ms = next->share_window_ms;
        cur->share_queue_us = next->share_queue_us;
        for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++)
                if (specs[i].reloadable) {
                        cur->source[i] = next->source[i];
                        cur->line[i] = next->line[i];
                }
        cube__log_init(cur->log_level);
}

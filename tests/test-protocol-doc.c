/*
 * test-protocol-doc.c - proto/PROTOCOL.md against the daemon: every method
 * cubed dispatches is in the document's method tables with its kind, and
 * every documented method is dispatched; every variant the error codec
 * knows is in section 6; every key a real daemon sends in hello, status and
 * the admin replies is named where the document describes that reply; the
 * fault-injection sites and kinds are in section 5.15.
 *
 * The document is the only description an independent client has, so a
 * method, key or variant added without it fails here. The daemon is asked
 * wherever it can answer for itself; its source is read only for what no
 * request reveals (the whole list of its methods and fault sites).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "errors.h"
#include "harness.h"
#include "wire.h"

#define MAX_NAMES 256

typedef struct name_list {
        size_t n;
        char *name[MAX_NAMES];
        int kind[MAX_NAMES];            /* CUBE__MSG_REQUEST or CUBE__MSG_NOTIFY; -1 daemon-sent */
} name_list;

static char *doc;                       /* PROTOCOL.md, whole */

static char *slurp(const char *path)
{
        FILE *f = fopen(path, "rb");
        char *buf;
        long n;

        ck_assert_msg(f != NULL, "cannot open %s", path);
        ck_assert_int_eq(fseek(f, 0, SEEK_END), 0);
        n = ftell(f);
        ck_assert_int_ge(n, 0);
        rewind(f);
        buf = malloc((size_t) n + 1);
        ck_assert_ptr_nonnull(buf);
        ck_assert_int_eq(fread(buf, 1, (size_t) n, f), (size_t) n);
        buf[n] = '\0';
        fclose(f);
        return buf;
}

/* A file of the source tree, whole. */
static char *source_file(const char *rel)
{
        const char *root = getenv("CUBE_SOURCE_ROOT");
        char path[4096];

        ck_assert_msg(root != NULL, "CUBE_SOURCE_ROOT is not set");
        snprintf(path, sizeof(path), "%s/%s", root, rel);
        return slurp(path);
}

static void load_doc(void)
{
        doc = source_file("proto/PROTOCOL.md");
}

static void free_doc(void)
{
        free(doc);
        doc = NULL;
}

/* The part of the document from the first occurrence of start up to the
 * next occurrence of end after it (or the document's end), as a new string.
 * Fails the test when start is not there. */
static char *span(const char *start, const char *end)
{
        const char *a = strstr(doc, start), *b;

        ck_assert_msg(a != NULL, "PROTOCOL.md has no \"%s\"", start);
        b = end ? strstr(a + strlen(start), end) : NULL;
        if (!b)
                b = a + strlen(a);
        return strndup(a, (size_t) (b - a));
}

/* Whether text names word in backquotes, `word`. */
static bool quoted_in(const char *text, const char *word, size_t len)
{
        char needle[160];

        if (len + 3 > sizeof(needle))
                return false;
        needle[0] = '`';
        memcpy(needle + 1, word, len);
        needle[len + 1] = '`';
        needle[len + 2] = '\0';
        return strstr(text, needle) != NULL;
}

static void list_add(name_list *l, const char *name, size_t len, int kind)
{
        ck_assert_uint_lt(l->n, MAX_NAMES);
        l->name[l->n] = strndup(name, len);
        l->kind[l->n] = kind;
        l->n++;
}

static int list_find(const name_list *l, const char *name)
{
        for (size_t i = 0; i < l->n; i++)
                if (strcmp(l->name[i], name) == 0)
                        return (int) i;
        return -1;
}

static void list_free(name_list *l)
{
        for (size_t i = 0; i < l->n; i++)
                free(l->name[i]);
        l->n = 0;
}

/* The methods daemon/dispatch.c's table holds: { "name", CUBE__MSG_KIND, ... }. */
static void dispatched_methods(name_list *ret)
{
        char *src = source_file("daemon/dispatch.c");
        const char *p = strstr(src, "static const method methods[]");

        ck_assert_msg(p != NULL, "dispatch.c has no method table");
        while ((p = strstr(p, "{ \"")) != NULL) {
                const char *name = p + 3, *q = strchr(name, '"');
                ck_assert_ptr_nonnull(q);
                const char *kind = q + 1;
                while (*kind == ',' || *kind == ' ')
                        kind++;
                if (strncmp(kind, "CUBE__MSG_REQUEST", 17) == 0)
                        list_add(ret, name, (size_t) (q - name), CUBE__MSG_REQUEST);
                else if (strncmp(kind, "CUBE__MSG_NOTIFY", 16) == 0)
                        list_add(ret, name, (size_t) (q - name), CUBE__MSG_NOTIFY);
                else
                        break;          /* past the table */
                p = q;
        }
        free(src);
        ck_assert_uint_gt(ret->n, 10);
}

/* The methods section 5's tables document: every row whose kind cell says
 * request or notification, each backquoted name in its first cell. */
static void documented_methods(name_list *ret)
{
        char *methods = span("## 5. Methods", "\n## 6. ");

        for (const char *line = methods; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
                const char *eol = strchr(line, '\n'), *cell2, *cell3;
                int kind;
                if (!eol)
                        eol = line + strlen(line);
                if (strncmp(line, "| `", 3) != 0)
                        continue;
                cell2 = memchr(line + 1, '|', (size_t) (eol - line - 1));
                if (!cell2)
                        continue;
                cell3 = cell2 + 1;
                while (*cell3 == ' ')
                        cell3++;
                if (strncmp(cell3, "notification from the daemon", 28) == 0)
                        kind = -1;
                else if (strncmp(cell3, "request", 7) == 0)
                        kind = CUBE__MSG_REQUEST;
                else if (strncmp(cell3, "notification", 12) == 0)
                        kind = CUBE__MSG_NOTIFY;
                else
                        continue;
                for (const char *a = line + 1; a < cell2; ) {
                        const char *b;
                        a = memchr(a, '`', (size_t) (cell2 - a));
                        if (!a)
                                break;
                        b = memchr(a + 1, '`', (size_t) (cell2 - a - 1));
                        if (!b)
                                break;
                        list_add(ret, a + 1, (size_t) (b - a - 1), kind);
                        a = b + 1;
                }
        }
        free(methods);
        ck_assert_uint_gt(ret->n, 10);
}

START_TEST(every_dispatched_method_is_documented)
{
        name_list daemon = { 0 }, documented = { 0 };

        dispatched_methods(&daemon);
        documented_methods(&documented);
        for (size_t i = 0; i < daemon.n; i++) {
                int j = list_find(&documented, daemon.name[i]);
                ck_assert_msg(j >= 0, "cubed dispatches '%s', which no method table of "
                              "PROTOCOL.md lists", daemon.name[i]);
                ck_assert_msg(documented.kind[j] == daemon.kind[i], "PROTOCOL.md gives '%s' "
                              "another kind than cubed dispatches it as", daemon.name[i]);
        }
        for (size_t i = 0; i < documented.n; i++) {
                int j = list_find(&daemon, documented.name[i]);
                if (documented.kind[i] < 0)
                        ck_assert_msg(j < 0, "'%s' is documented as sent by the daemon, yet "
                                      "cubed dispatches it", documented.name[i]);
                else
                        ck_assert_msg(j >= 0, "PROTOCOL.md documents '%s', which cubed does not "
                                      "dispatch", documented.name[i]);
        }
        list_free(&daemon);
        list_free(&documented);
}
END_TEST

/* The protocol error or error response the daemon sends next on fd, as the
 * message of its error; NULL when none came. */
static char *next_error_text(int fd)
{
        msgpack_unpacked up;
        cube__envelope env;
        const char *why;
        const msgpack_object *err = NULL;
        cube_error *e = NULL;
        char *text = NULL;

        if (raw_recv(fd, &up, test_scaled_ms(5000)) != 1)
                return NULL;
        if (cube__envelope_parse(&up.data, &env, &why) == 0) {
                if (env.type == CUBE__MSG_RESPONSE)
                        err = env.error;
                else if (env.type == CUBE__MSG_NOTIFY && env.params->via.array.size == 1)
                        err = &env.params->via.array.ptr[0];
        }
        if (err && err->type != MSGPACK_OBJECT_NIL &&
            cube__err_unpack(err, CUBE__FAMILY_SERVER, &e) == 0) {
                text = strdup(cube_error_message(e));
                cube_error_free(e);
        }
        msgpack_unpacked_destroy(&up);
        return text;
}

/* Each documented method sent as the other kind: a method the daemon knows
 * is refused with "<method> must be sent as a <kind>", one it does not know
 * with "unknown method" or "unknown notification". */
START_TEST(every_documented_method_is_known_to_the_daemon)
{
        name_list documented = { 0 };
        test_daemon d;

        documented_methods(&documented);
        ck_assert_int_eq(test_daemon_start(&d, NULL), 0);
        for (size_t i = 0; i < documented.n; i++) {
                const char *m = documented.name[i];
                msgpack_sbuffer sb;
                msgpack_packer pk;
                char want[128];
                char *got;
                int fd;

                if (documented.kind[i] < 0)
                        continue;
                fd = raw_connect(d.socket);
                ck_assert_int_ge(fd, 0);
                msgpack_sbuffer_init(&sb);
                msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
                /* Ten nils fit no method's params: should the kind be
                 * wrong in the document, the daemon still acts on nothing. */
                if (documented.kind[i] == CUBE__MSG_REQUEST)
                        cube__pack_notify(&pk, m, 10);
                else
                        cube__pack_request(&pk, 7, m, 10);
                for (int j = 0; j < 10; j++)
                        msgpack_pack_nil(&pk);
                ck_assert_int_eq(raw_send_sbuffer(fd, &sb), 0);
                msgpack_sbuffer_destroy(&sb);
                snprintf(want, sizeof(want), "%s must be sent as a %s", m,
                         documented.kind[i] == CUBE__MSG_REQUEST ? "request" : "notification");
                got = next_error_text(fd);
                ck_assert_msg(got && strstr(got, want), "PROTOCOL.md documents '%s' as a %s; "
                              "cubed answered: %s", m, documented.kind[i] == CUBE__MSG_REQUEST ?
                              "request" : "notification", got ? got : "nothing");
                free(got);
                close(fd);
        }
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
        list_free(&documented);
}
END_TEST

/* One node of kind, standing on a node of whatever family it wraps; NULL
 * for a number the codec gives no variant. */
static cube_error *node_of(int kind)
{
        cube_error *e;

        if (cube__err_family_of((cube_error_kind) kind) == CUBE__FAMILY_INVALID)
                return NULL;
        if (kind == CUBE_SERVER_UNWRITTEN)
                return cube__err_unwritten(1, 1, NULL, 0, cube__err_new(CUBE_SERVER_SKIPPED));
        if (kind == CUBE_IO_STORAGE_MAPPING_FAILED)
                return cube__err_storage_mapping_failed(1, cube__err_new(CUBE_IO_UNSUPPORTED_STRIDES));
        if ((e = cube__err_new((cube_error_kind) kind)) != NULL)
                return e;
        /* A wrapping variant: try a source of each family. */
        for (int i = 0; i < 6; i++) {
                cube_error *source = i == 0 ? cube__err_poison("x") :
                                     i == 1 ? cube__err_new(CUBE_SERVER_SKIPPED) :
                                     i == 2 ? cube__err_new(CUBE_IO_UNSUPPORTED_STRIDES) :
                                     i == 3 ? cube__err_text(CUBE_LAUNCH_UNKNOWN, "x") :
                                     i == 4 ? cube__err_text(CUBE_COMPILATION_GENERIC, "x") :
                                              cube__err_resource(CUBE_RESOURCE_UNITS, 1, 1);
                if ((e = cube__err_wrap((cube_error_kind) kind, source)) != NULL)
                        return e;
        }
        ck_abort_msg("kind %d has a family but no node can be made of it", kind);
        return NULL;
}

/* Every variant of every family the error codec encodes has its row in
 * section 6's table of that family. */
START_TEST(every_error_variant_is_in_section_6)
{
        char *errors = span("## 6. Errors", "\n## 7. ");
        int seen = 0;

        for (int kind = 0; kind < 256; kind++) {
                cube_error *e;
                char head[64], row[96], *table;
                const char *family, *variant;

                if ((e = node_of(kind)) == NULL)
                        continue;
                family = cube_error_family(e);
                variant = cube_error_variant(e);
                snprintf(head, sizeof(head), "\n**%s**", family);
                ck_assert_msg(strstr(errors, head), "section 6 has no table of %s", family);
                table = strndup(strstr(errors, head) + 1, strlen(strstr(errors, head) + 1));
                if (strstr(table + 2, "\n**"))
                        *strstr(table + 2, "\n**") = '\0';
                snprintf(row, sizeof(row), "\n| `%s` |", variant);
                ck_assert_msg(strstr(table, row), "section 6's %s table has no row for %s "
                              "(kind %d)", family, variant, kind);
                free(table);
                cube_error_free(e);
                seen++;
        }
        ck_assert_int_gt(seen, 40);
        free(errors);
}
END_TEST

/* The fault sites of daemon/inject.c, in section 5.15's table of sites, and
 * every kind of the codec in its table of kinds, by number. */
START_TEST(every_fault_site_and_kind_is_in_section_5_15)
{
        char *src = source_file("daemon/inject.c");
        char *header = source_file("libclient/include/cube.h");
        char *inject = span("### 5.15 debug_inject", "\n### ");
        const char *p = strstr(src, "sites[CUBE__FAULT_SITES]");
        int sites = 0, enumerated = 0;

        ck_assert_ptr_nonnull(p);
        while ((p = strstr(p, "[CUBE_FAULT_")) != NULL && (p = strstr(p, "= \"")) != NULL) {
                const char *name = p + 3, *q = strchr(name, '"');
                char row[64];
                snprintf(row, sizeof(row), "\n| `%.*s` |", (int) (q - name), name);
                ck_assert_msg(strstr(inject, row), "section 5.15 has no row for the fault site "
                              "'%.*s'", (int) (q - name), name);
                sites++;
                p = q;
        }
        for (p = strstr(header, "typedef enum cube_fault_site"); p && (p = strstr(p, "CUBE_FAULT_"));
             p++) {
                if (strncmp(p, "CUBE_FAULT_SITE", 15) == 0)
                        break;
                enumerated++;
        }
        ck_assert_int_gt(sites, 5);
        ck_assert_msg(sites == enumerated, "cube.h names %d fault sites, inject.c %d",
                      enumerated, sites);

        for (int kind = 0; kind < 256; kind++) {
                cube_error *e;
                char row[64], entry[96], *line;
                const char *at;

                if ((e = node_of(kind)) == NULL)
                        continue;
                snprintf(row, sizeof(row), "\n| `%s` |", cube_error_family(e));
                at = strstr(inject, row);
                ck_assert_msg(at, "section 5.15's table of kinds has no row for %s",
                              cube_error_family(e));
                line = strndup(at + 1, strcspn(at + 1, "\n"));
                snprintf(entry, sizeof(entry), " %d `%s`", kind, cube_error_variant(e));
                ck_assert_msg(strstr(line, entry), "section 5.15 does not give %s::%s its kind "
                              "%d", cube_error_family(e), cube_error_variant(e), kind);
                free(line);
                cube_error_free(e);
        }
        free(inject);
        free(header);
        free(src);
}
END_TEST

/* ---- the keys of hello, status and the admin replies ---------------------- */

/* Sends [0, msgid, method, []] and returns the result of its answer (in up:
 * destroy it); fails the test on an error answer. */
static const msgpack_object *ask(int fd, uint32_t msgid, const char *method, msgpack_unpacked *up)
{
        msgpack_sbuffer sb;
        msgpack_packer pk;
        cube__envelope env;
        const char *why;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        cube__pack_request(&pk, msgid, method, 0);
        ck_assert_int_eq(raw_send_sbuffer(fd, &sb), 0);
        msgpack_sbuffer_destroy(&sb);
        ck_assert_int_eq(raw_recv(fd, up, test_scaled_ms(10000)), 1);
        ck_assert_int_eq(cube__envelope_parse(&up->data, &env, &why), 0);
        ck_assert_int_eq(env.type, CUBE__MSG_RESPONSE);
        ck_assert_uint_eq(env.msgid, msgid);
        ck_assert_msg(env.error->type == MSGPACK_OBJECT_NIL, "%s was answered with an error",
                      method);
        return env.result;
}

/* Every key of map is named, in backquotes, in the document's text from
 * start to end. Returns how many keys it checked. */
static int keys_documented(const char *what, const msgpack_object *map, const char *start,
                           const char *end)
{
        char *text = span(start, end);

        ck_assert_msg(map->type == MSGPACK_OBJECT_MAP, "%s is not a map", what);
        for (uint32_t i = 0; i < map->via.map.size; i++) {
                const msgpack_object *key = &map->via.map.ptr[i].key;
                ck_assert_int_eq(key->type, MSGPACK_OBJECT_STR);
                ck_assert_msg(quoted_in(text, key->via.str.ptr, key->via.str.size),
                              "cubed sends the key '%.*s' in %s, which PROTOCOL.md does not "
                              "name where it describes it (from \"%s\")", (int) key->via.str.size,
                              key->via.str.ptr, what, start);
        }
        free(text);
        return (int) map->via.map.size;
}

/* Each element of an array reply is a map whose keys are documented; the
 * array must not be empty, or it checks nothing. */
static void element_keys_documented(const char *what, const msgpack_object *arr,
                                    const char *start, const char *end)
{
        ck_assert_msg(arr->type == MSGPACK_OBJECT_ARRAY && arr->via.array.size > 0,
                      "%s answered no entries to check", what);
        for (uint32_t i = 0; i < arr->via.array.size; i++)
                keys_documented(what, &arr->via.array.ptr[i], start, end);
}

/* Every key a table of the document lists (rows "| `key` |" from start to
 * end) is in map: the table promises nothing the daemon does not send. */
static void table_keys_sent(const char *what, const msgpack_object *map, const char *start,
                            const char *end)
{
        char *text = span(start, end);

        for (const char *p = strstr(text, "\n| `"); p; p = strstr(p + 1, "\n| `")) {
                const char *k = p + 4, *q = strchr(k, '`');
                char *key;
                ck_assert_ptr_nonnull(q);
                key = strndup(k, (size_t) (q - k));
                ck_assert_msg(cube__map_get(map, key) != NULL, "PROTOCOL.md lists the key '%s' "
                              "of %s, which cubed does not send", key, what);
                free(key);
        }
        free(text);
}

static const msgpack_object *member(const msgpack_object *map, const char *key)
{
        const msgpack_object *v = cube__map_get(map, key);

        ck_assert_msg(v != NULL, "no key '%s'", key);
        return v;
}

START_TEST(every_key_cubed_sends_is_documented)
{
        const char *args[] = { "--memory-limit", "1M", NULL };
        const uint32_t data[4] = { 1, 2, 3, 4 };
        cube_handle in, out, big;
        cube_client *c, *gone;
        msgpack_unpacked up;
        const msgpack_object *r;
        test_daemon d;
        uint64_t k, token;
        int fd;

        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        /* Something in every list: an ended session, a kernel that ran, a
         * failure, an open profiling window, memory on a stream. */
        gone = test_connect(d.socket, "gone");
        cube_disconnect(gone);
        c = test_connect(d.socket, "doc");
        k = test_kernel(c, test_affine_source, "affine");
        ck_ok(cube_create(c, data, sizeof(data), &in));
        ck_ok(cube_empty(c, sizeof(data), &out));
        test_launch_u32(c, (cube_launch) {
                .kernel = k, .cube_count = { 1, 1, 1 }, .cube_dim = { 4, 1, 1 },
                .buffers = (cube_handle[]) { in, out }, .io = test_affine_io, .n_buffers = 2,
        }, NULL, 0);
        ck_ok(cube_sync(c, &out, 1));
        ck_ok(cube_empty(c, 2 << 20, &big));
        ck_assert_ptr_nonnull(cube_check(c, &big, 1));
        ck_ok(cube_start_profile(c, &token));

        fd = raw_connect(d.socket);
        ck_assert_int_ge(fd, 0);
        {
                msgpack_sbuffer sb;
                msgpack_packer pk;
                cube__envelope env;
                const char *why;

                msgpack_sbuffer_init(&sb);
                msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
                cube__pack_request(&pk, 1, "hello", 2);
                msgpack_pack_uint32(&pk, CUBE_PROTOCOL_VERSION);
                msgpack_pack_nil(&pk);
                ck_assert_int_eq(raw_send_sbuffer(fd, &sb), 0);
                msgpack_sbuffer_destroy(&sb);
                ck_assert_int_eq(raw_recv(fd, &up, test_scaled_ms(5000)), 1);
                ck_assert_int_eq(cube__envelope_parse(&up.data, &env, &why), 0);
                r = env.result;
                keys_documented("hello", r, "### 5.1 hello", "\n### ");
                table_keys_sent("hello", r, "### 5.1 hello", "\n`properties`");
                keys_documented("hello's properties", member(r, "properties"),
                                "`properties` (the same map", "\n\n");
                keys_documented("hello's limits", member(r, "limits"), "`limits`: ", "\n\n");
                msgpack_unpacked_destroy(&up);
        }

        r = ask(fd, 2, "status", &up);
        ck_assert_int_eq(keys_documented("status", r, "### 5.2 status", "\n### "), 18);
        table_keys_sent("status", r, "### 5.2 status", "\n### ");
        msgpack_unpacked_destroy(&up);

        r = ask(fd, 3, "kernels", &up);
        element_keys_documented("kernels", r, "### 5.13 kernels", "\n### ");
        msgpack_unpacked_destroy(&up);

        r = ask(fd, 4, "failures", &up);
        element_keys_documented("failures", r, "### 5.14 failures", "\n### ");
        msgpack_unpacked_destroy(&up);

        r = ask(fd, 5, "sessions", &up);
        element_keys_documented("sessions", r, "- `sessions`, params", "\n- ");
        msgpack_unpacked_destroy(&up);

        r = ask(fd, 6, "streams", &up);
        element_keys_documented("streams", r, "- `streams`, params", "\n- ");
        msgpack_unpacked_destroy(&up);

        r = ask(fd, 7, "config", &up);
        element_keys_documented("config", r, "- `config`, params", "\n- ");
        msgpack_unpacked_destroy(&up);

        r = ask(fd, 8, "ended_sessions", &up);
        element_keys_documented("ended_sessions", r, "- `ended_sessions`, params", "\n- ");
        msgpack_unpacked_destroy(&up);

        r = ask(fd, 9, "recent_failures", &up);
        element_keys_documented("recent_failures", r, "- `recent_failures`, params", "\n- ");
        msgpack_unpacked_destroy(&up);

        r = ask(fd, 10, "captures", &up);
        element_keys_documented("captures", r, "`captures`, params `[]`", "\n\n");
        msgpack_unpacked_destroy(&up);

        r = ask(fd, 11, "memory", &up);
        element_keys_documented("memory", r, "`stream_ids`, params", "\n\n");
        for (uint32_t i = 0; i < r->via.array.size; i++) {
                const msgpack_object *report = member(&r->via.array.ptr[i], "report");
                const msgpack_object *pools = member(report, "pools");
                keys_documented("memory_report", report, "`memory_report`, params", "\n\n");
                element_keys_documented("memory_report's pools", pools,
                                        "`memory_report`, params", "`stream_ids`, params");
                table_keys_sent("memory_report's pools", &pools->via.array.ptr[0],
                                "`memory_report`, params", "`stream_ids`, params");
        }
        msgpack_unpacked_destroy(&up);

        close(fd);
        ck_ok(cube_abandon_profile(c, token));
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
}
END_TEST

/* bans, which only a poisoning fills. */
START_TEST(the_keys_of_bans_are_documented)
{
        const char *args[] = { "--enable-fault-injection", "--poison-ban-after", "1", NULL };
        msgpack_unpacked up;
        const msgpack_object *r;
        test_daemon d;
        cube_client *c;
        int fd;

        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        c = test_connect(d.socket, "poisoner");
        ck_ok(cube_debug_inject(c, CUBE_FAULT_POISON, CUBE_DEVICE_POISON, "for the test", 0));
        cube_disconnect(c);
        fd = raw_connect(d.socket);
        ck_assert_int_ge(fd, 0);
        raw_hello(fd);
        for (int tries = 0; ; tries++) {
                r = ask(fd, (uint32_t) (2 + tries), "bans", &up);
                if (r->type == MSGPACK_OBJECT_ARRAY && r->via.array.size > 0)
                        break;
                msgpack_unpacked_destroy(&up);
                ck_assert_msg(tries < 50, "no ban after a poisoning with poison-ban-after 1");
                usleep(100000);
        }
        element_keys_documented("bans", r, "- `bans`, params", "\n\n");
        msgpack_unpacked_destroy(&up);
        close(fd);
        test_daemon_stop(&d, 10000);
}
END_TEST

static Suite *suite(void)
{
        Suite *s = suite_create("protocol-doc");
        TCase *tc = tcase_create("document");

        tcase_add_checked_fixture(tc, load_doc, free_doc);
        tcase_set_timeout(tc, 120);
        tcase_add_test(tc, every_dispatched_method_is_documented);
        tcase_add_test(tc, every_documented_method_is_known_to_the_daemon);
        tcase_add_test(tc, every_error_variant_is_in_section_6);
        tcase_add_test(tc, every_fault_site_and_kind_is_in_section_5_15);
        tcase_add_test(tc, every_key_cubed_sends_is_documented);
        tcase_add_test(tc, the_keys_of_bans_are_documented);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(suite());
        int nf;

        srunner_run_all(sr, CK_ENV);
        nf = srunner_ntests_failed(sr);
        srunner_free(sr);
        return nf == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

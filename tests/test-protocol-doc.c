/*
 * test-protocol-doc.c - proto/PROTOCOL.md against the daemon: every method
 * cubed dispatches is in the document's method tables with its kind, and
 * every documented method is dispatched; every variant the error codec
 * knows is in section 6; every key a real daemon sends in hello, status and
 * the admin replies is named where the document describes that reply; the
 * fault-injection sites and kinds are in section 5.15; the requests served
 * during a drain are those 5.14a lists; and the refusals the test provokes
 * read as the document quotes them.
 *
 * The document is the only description an independent client has, so a
 * method, key or variant added without it fails here. The daemon is asked
 * wherever it can answer for itself; its source is read only for what no
 * request reveals (the whole list of its methods and fault sites).
 */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errors.h"
#include "harness.h"
#include "wire.h"

#define MAX_NAMES 256

typedef struct name_list {
        size_t n;
        char *name[MAX_NAMES];
        int kind[MAX_NAMES];            /* CUBE__MSG_REQUEST or CUBE__MSG_NOTIFY; -1 daemon-sent */
        bool admin[MAX_NAMES];          /* served to a session opened during a drain */
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
                const char *close = strchr(kind, '}');
                if (strncmp(kind, "CUBE__MSG_REQUEST", 17) == 0)
                        list_add(ret, name, (size_t) (q - name), CUBE__MSG_REQUEST);
                else if (strncmp(kind, "CUBE__MSG_NOTIFY", 16) == 0)
                        list_add(ret, name, (size_t) (q - name), CUBE__MSG_NOTIFY);
                else
                        break;          /* past the table */
                ck_assert_ptr_nonnull(close);
                ret->admin[ret->n - 1] = close - kind > 6 && memcmp(close - 6, " true ", 6) == 0;
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

/* The requests 5.14a says a session opened during a drain may send are
 * those dispatch.c serves then, and no others. */
START_TEST(the_requests_served_during_a_drain_are_documented)
{
        const char *start = "drain may still send every request that looks or acts (";
        name_list daemon = { 0 };
        char *text, *list;
        int listed = 0;

        dispatched_methods(&daemon);
        text = span("- `drain`, params", "\n- ");
        for (char *p = text; *p; p++)
                if (*p == '\n')
                        *p = ' ';
        for (char *p = text, *o = text; ; p++) {
                if (*p == ' ' && o > text && o[-1] == ' ')
                        continue;
                if (!(*o++ = *p))
                        break;
        }
        list = strstr(text, start);
        ck_assert_msg(list != NULL, "5.14a no longer says which requests a drain serves");
        list += strlen(start);
        *strchrnul(list, ')') = '\0';
        for (size_t i = 0; i < daemon.n; i++) {
                bool documented = quoted_in(list, daemon.name[i], strlen(daemon.name[i]));
                ck_assert_msg(documented == daemon.admin[i], "cubed %s '%s' to a session opened "
                              "during a drain, and 5.14a says %s", daemon.admin[i] ? "serves" :
                              "refuses", daemon.name[i], documented ? "it may" : "it may not");
                listed += documented;
        }
        ck_assert_int_gt(listed, 10);
        free(text);
        list_free(&daemon);
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
        char *header = source_file("include/cube.h");
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
        cube_error *failed;
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
        failed = cube_check(c, &big, 1);
        ck_assert_ptr_nonnull(failed);
        cube_error_free(failed);
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
        ck_assert_int_eq(keys_documented("status", r, "### 5.2 status", "\n### "), 19);
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
        /* A long grace, so that the poisoned daemon is still there to ask. */
        const char *args[] = { "--enable-fault-injection", "--poison-ban-after", "1",
                               "--poison-grace", "600", NULL };
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

/* ---- the texts of refusals ------------------------------------------------ */

/* The document with every run of white space made one space, markdown's
 * escaped bars and quotes undone (quotes inside a quoted text become \1). */
static char *normalized_doc(void)
{
        char *out = malloc(strlen(doc) + 1), *o = out;

        ck_assert_ptr_nonnull(out);
        for (const char *p = doc; *p; p++) {
                if (p[0] == '\\' && p[1] == '|') {
                        *o++ = '|';
                        p++;
                } else if (p[0] == '\\' && p[1] == '"') {
                        *o++ = '\1';
                        p++;
                } else if (*p == ' ' || *p == '\n' || *p == '\t') {
                        if (o == out || o[-1] != ' ')
                                *o++ = ' ';
                } else {
                        *o++ = *p;
                }
        }
        *o = '\0';
        return out;
}

/* Whether a wildcard ("<name>", "...", "…") starts at t; its length if so. */
static size_t wildcard(const char *t, const char *end)
{
        if (*t == '<') {
                const char *q = memchr(t, '>', (size_t) (end - t));
                if (q && q - t < 32 && !memchr(t + 1, ' ', (size_t) (q - t - 1)))
                        return (size_t) (q - t + 1);
        }
        if (end - t >= 3 && memcmp(t, "...", 3) == 0)
                return 3;
        if (end - t >= 3 && memcmp(t, "\xe2\x80\xa6", 3) == 0)
                return 3;
        return 0;
}

/* Whether the template [t, end) matches all of m, its wildcards standing
 * for any text. */
static bool template_matches(const char *t, const char *end, const char *m)
{
        size_t w;

        if (t == end)
                return *m == '\0';
        if ((w = wildcard(t, end)) != 0) {
                for (const char *q = m; ; q++) {
                        if (template_matches(t + w, end, q))
                                return true;
                        if (!*q)
                                return false;
                }
        }
        if (*m == '\0')
                return false;
        if ((*t == '\1' ? '"' : *t) != *m)
                return false;
        return template_matches(t + 1, end, m + 1);
}

/* Whether the document quotes text: some "..." or `...` of it, read as a
 * template, matches all of text. */
static bool doc_quotes(const char *norm, const char *text)
{
        for (const char *p = norm; *p; p++) {
                const char *q;
                if (*p != '"' && *p != '`')
                        continue;
                size_t literal = 0, w;
                q = strchr(p + 1, *p);
                if (!q)
                        break;
                /* A quote of wildcards alone would match anything. */
                for (const char *t = p + 1; t < q; t += w ? w : 1)
                        if (!(w = wildcard(t, q)))
                                literal++;
                if (literal >= 12 && template_matches(p + 1, q, text))
                        return true;
        }
        return false;
}

/* Packs a request or notification whose params follow fmt: u (uint64_t),
 * s (a string), n (nil), b (a bool, as int), h (a cube_handle *), l (a list
 * of one handle, a cube_handle *), e (an empty list), y (a bin: a const void *
 * then its length, a size_t). */
static void send_fmt(int fd, bool request, uint32_t msgid, const char *method, const char *fmt,
                     ...)
{
        msgpack_sbuffer sb;
        msgpack_packer pk;
        va_list ap;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (request)
                cube__pack_request(&pk, msgid, method, (uint32_t) strlen(fmt));
        else
                cube__pack_notify(&pk, method, (uint32_t) strlen(fmt));
        va_start(ap, fmt);
        for (const char *f = fmt; *f; f++) {
                const cube_handle *h;
                const char *str;
                size_t n;
                switch (*f) {
                case 'u':
                        msgpack_pack_uint64(&pk, va_arg(ap, uint64_t));
                        break;
                case 's':
                        str = va_arg(ap, const char *);
                        msgpack_pack_str(&pk, strlen(str));
                        msgpack_pack_str_body(&pk, str, strlen(str));
                        break;
                case 'n':
                        msgpack_pack_nil(&pk);
                        break;
                case 'b':
                        if (va_arg(ap, int))
                                msgpack_pack_true(&pk);
                        else
                                msgpack_pack_false(&pk);
                        break;
                case 'e':
                        msgpack_pack_array(&pk, 0);
                        break;
                case 'y':
                        str = va_arg(ap, const char *);
                        n = va_arg(ap, size_t);
                        msgpack_pack_bin(&pk, n);
                        msgpack_pack_bin_body(&pk, str, n);
                        break;
                case 'l':
                        msgpack_pack_array(&pk, 1);
                        /* fall through */
                case 'h':
                        h = va_arg(ap, const cube_handle *);
                        msgpack_pack_array(&pk, 4);
                        msgpack_pack_uint64(&pk, h->service);
                        msgpack_pack_uint64(&pk, h->memory);
                        msgpack_pack_uint64(&pk, h->offset_start);
                        msgpack_pack_uint64(&pk, h->offset_end);
                        break;
                default:
                        ck_abort_msg("bad format %c", *f);
                }
        }
        va_end(ap);
        ck_assert_int_eq(raw_send_sbuffer(fd, &sb), 0);
        msgpack_sbuffer_destroy(&sb);
}

/* The text a person is shown of the error the daemon sends next on fd: the
 * leaf's text field, or a protocol error's reason. NULL when no error came. */
static char *next_refusal(int fd)
{
        static const char head[] = "protocol error: ", tail[] = "; the connection is closed";
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
                const cube_error *leaf = e;
                while (cube_error_source(leaf))
                        leaf = cube_error_source(leaf);
                if (cube_error_reason(leaf))
                        text = strdup(cube_error_reason(leaf));
                cube_error_free(e);
        }
        msgpack_unpacked_destroy(&up);
        if (text && strncmp(text, head, strlen(head)) == 0 && strlen(text) > strlen(head) +
            strlen(tail) && strcmp(text + strlen(text) - strlen(tail), tail) == 0) {
                size_t n = strlen(text) - strlen(head) - strlen(tail);
                memmove(text, text + strlen(head), n);
                text[n] = '\0';
        }
        return text;
}

/* The answer to a request that succeeds, discarded. */
static void expect_ok(int fd)
{
        msgpack_unpacked up;
        cube__envelope env;
        const char *why;

        ck_assert_int_eq(raw_recv(fd, &up, test_scaled_ms(5000)), 1);
        ck_assert_int_eq(cube__envelope_parse(&up.data, &env, &why), 0);
        ck_assert_int_eq(env.type, CUBE__MSG_RESPONSE);
        ck_assert_msg(env.error->type == MSGPACK_OBJECT_NIL, "a request the test needs failed");
        msgpack_unpacked_destroy(&up);
}

#define REFUSED(fd, norm, what) do { \
        char *t_ = next_refusal(fd); \
        ck_assert_msg(t_ != NULL, "%s: no refusal came", what); \
        ck_assert_msg(doc_quotes(norm, t_), "%s: cubed says \"%s\", which PROTOCOL.md does " \
                      "not quote", what, t_); \
        free(t_); \
} while (0)

/* Each refusal the test can provoke, as the daemon words it, is quoted in
 * the document (a <name> or ... of the quote standing for any text). */
START_TEST(refusals_read_as_the_document_quotes_them)
{
        const char *args[] = { "--max-streams", "2", "--max-regions", "1",
                               "--max-profile-windows", "1", "--max-graphs", "1",
                               "--max-message", "1K", NULL };
        char *norm = normalized_doc();
        uint64_t nonce, session, m1, m2;
        cube_error *err = NULL;
        uint64_t region;
        test_daemon d;
        int fd, passed;

        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        fd = raw_connect(d.socket);
        ck_assert_int_ge(fd, 0);
        raw_greet(fd, &nonce, &session);
        m1 = session << 40 | 1;
        m2 = session << 40 | 2;

        send_fmt(fd, true, 2, "teleport", "");
        REFUSED(fd, norm, "an unknown method");
        send_fmt(fd, true, 3, "hello", "un", (uint64_t) 2);
        REFUSED(fd, norm, "hello of version 2");
        send_fmt(fd, true, 4, "hello", "us", (uint64_t) 1, "tab\there");
        REFUSED(fd, norm, "hello with a control character in the name");
        send_fmt(fd, true, 5, "undrain", "");
        REFUSED(fd, norm, "undrain of a daemon not draining");
        send_fmt(fd, true, 6, "debug_inject", "susu", "alloc", (uint64_t) 129, "x", (uint64_t) 0);
        REFUSED(fd, norm, "debug_inject without fault injection");
        send_fmt(fd, true, 7, "kill_session", "u", (uint64_t) 999);
        REFUSED(fd, norm, "kill_session of no session");
        send_fmt(fd, true, 8, "export", "u", session << 40 | 77);
        REFUSED(fd, norm, "export of an unknown memory");
        send_fmt(fd, true, 9, "import", "sub", "0123456789abcdef0123456789abcdef",
                 session << 40 | 78, 0);
        REFUSED(fd, norm, "import of an unknown token");
        send_fmt(fd, true, 10, "read", "ul", (uint64_t) 1,
                 &(cube_handle) { .service = nonce, .memory = (session + 5) << 40 | 1, .offset_start = 0, .offset_end = 0 });
        REFUSED(fd, norm, "a read of another session's memory");
        send_fmt(fd, true, 11, "read", "ul", (uint64_t) 1, &(cube_handle) { .service = nonce, .memory = m1, .offset_start = 0, .offset_end = 0 });
        REFUSED(fd, norm, "a read of memory never created");

        raw_send_create(fd, m1, 16);
        raw_send_create(fd, m2, 2048);
        send_fmt(fd, true, 12, "read", "ul", (uint64_t) 1, &(cube_handle) { .service = nonce, .memory = m1, .offset_start = 8, .offset_end = 16 });
        REFUSED(fd, norm, "a read whose offsets do not fit");
        send_fmt(fd, true, 13, "read", "ul", (uint64_t) 1, &(cube_handle) { .service = nonce, .memory = m2, .offset_start = 0, .offset_end = 0 });
        REFUSED(fd, norm, "a read larger than one reply");
        send_fmt(fd, true, 14, "sync", "ue", (uint64_t) 2);
        expect_ok(fd);
        send_fmt(fd, true, 15, "sync", "ue", (uint64_t) 3);
        REFUSED(fd, norm, "a sync on one stream more than max-streams");

        passed = raw_region(fd, 16, 4096, &region, &err);
        ck_assert_int_ge(passed, 0);
        close(passed);
        ck_assert_int_lt(raw_region(fd, 17, 4096, &region, &err), 0);
        ck_assert_ptr_nonnull(err);
        ck_assert_msg(doc_quotes(norm, cube_error_reason(err)), "a region past max-regions: "
                      "cubed says \"%s\", which PROTOCOL.md does not quote",
                      cube_error_reason(err));
        cube_error_free(err);
        send_fmt(fd, true, 18, "read", "uls", (uint64_t) 1, &(cube_handle) { .service = nonce, .memory = m1, .offset_start = 0, .offset_end = 0 },
                 "region");
        REFUSED(fd, norm, "a read into a malformed region reference");

        send_fmt(fd, true, 19, "start_profile", "ub", (uint64_t) 1, 0);
        expect_ok(fd);
        send_fmt(fd, true, 20, "start_profile", "ub", (uint64_t) 1, 0);
        REFUSED(fd, norm, "a window past max-profile-windows");
        send_fmt(fd, true, 21, "graph_prepare", "u", (uint64_t) 1);
        expect_ok(fd);
        send_fmt(fd, true, 22, "graph_prepare", "u", (uint64_t) 2);
        REFUSED(fd, norm, "a graph past max-graphs");
        send_fmt(fd, true, 23, "graph_prepare", "u", (uint64_t) 1);
        REFUSED(fd, norm, "graph_prepare of a stream preparing a capture");
        send_fmt(fd, true, 24, "replay", "uu", (uint64_t) 2, (uint64_t) 9);
        REFUSED(fd, norm, "a replay of an unknown graph");
        close(fd);

        /* Protocol errors, each on a connection of its own. */
        fd = raw_connect(d.socket);
        send_fmt(fd, true, 1, "status", "");
        REFUSED(fd, norm, "a request before hello");
        close(fd);

        fd = raw_connect(d.socket);
        raw_greet(fd, &nonce, &session);
        raw_send_create(fd, (session + 100) << 40 | 1, 16);
        REFUSED(fd, norm, "a create of another session's id");
        close(fd);

        fd = raw_connect(d.socket);
        raw_greet(fd, &nonce, &session);
        raw_send_create(fd, session << 40 | 1, 16);
        raw_send_create(fd, session << 40 | 1, 16);
        REFUSED(fd, norm, "a create of a live id");
        close(fd);

        fd = raw_connect(d.socket);
        raw_greet(fd, &nonce, &session);
        send_fmt(fd, false, 0, "kernel", "uss", (uint64_t) 5, "KERNEL void k(INFO) {}", "k");
        send_fmt(fd, false, 0, "kernel", "uss", (uint64_t) 5, "KERNEL void k(INFO) {}", "k");
        REFUSED(fd, norm, "a kernel id registered twice");
        close(fd);

        fd = raw_connect(d.socket);
        raw_greet(fd, &nonce, &session);
        send_fmt(fd, false, 0, "teleport", "");
        REFUSED(fd, norm, "an unknown notification");
        close(fd);

        fd = raw_connect(d.socket);
        raw_greet(fd, &nonce, &session);
        send_fmt(fd, true, 2, "sync", "u", (uint64_t) 1);
        REFUSED(fd, norm, "sync with malformed params");
        close(fd);

        free(norm);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
}
END_TEST

/* ---- what the documents say the daemon does --------------------------------
 *
 * Each test below provokes one behaviour a document describes and holds the
 * daemon's answer against the document's words: the variant a failure
 * arrives as, the size an error carries, what a profiling window reports,
 * which streams a call waits for, and what a failed build leaves behind. */

/* A file of the source tree with every run of white space made one space. */
static char *normalized_file(const char *rel)
{
        char *text = source_file(rel), *o = text;

        for (const char *p = text; *p; p++) {
                if (*p == ' ' || *p == '\n' || *p == '\t') {
                        if (o == text || o[-1] != ' ')
                                *o++ = ' ';
                } else {
                        *o++ = *p;
                }
        }
        *o = '\0';
        return text;
}

/* The root of the one Unwritten report e holds (Several of one), or NULL. */
static const cube_error *unwritten_root(const cube_error *e)
{
        if (!e || cube_error_kind_of(e) != CUBE_SERVER_SEVERAL || cube_error_count(e) != 1)
                return NULL;
        e = cube_error_at(e, 0);
        if (cube_error_kind_of(e) != CUBE_SERVER_UNWRITTEN)
                return NULL;
        return cube_error_source(e);
}

/* 5.11: a build that fails on the cache directory is the variant the section
 * names for it. The digest's name is taken by a directory, so the compiled
 * artifact cannot be sealed there. */
START_TEST(a_cache_directory_failure_is_the_variant_5_11_names)
{
        char *norm = normalized_doc(), *sec = strstr(norm, "### 5.11 launch");
        cube_kernel_info *v;
        const cube_error *root;
        char path[512];
        test_daemon d;
        cube_error *e;
        cube_client *c;
        uint64_t kernel;
        size_t n;

        ck_assert_ptr_nonnull(sec);
        ck_assert_msg(strstr(sec, "`Io(Unknown{description})` for the cache directory"),
                      "5.11 no longer names Io(Unknown) for the cache directory");
        ck_assert_int_eq(test_daemon_start(&d, NULL), 0);
        c = test_connect(d.socket, "cache-dir");
        kernel = test_kernel(c, test_affine_source, "affine");
        ck_ok(cube_daemon_kernels(c, &v, &n));
        ck_assert_uint_eq(n, 1);
        ck_assert_str_eq(v[0].backend, test_backend());
        /* The artifact's name ends as the backend's compiled form does. */
        snprintf(path, sizeof(path), "%s/%s.%s.sha256", d.cache, v[0].hash,
                 strcmp(test_backend(), "cuda") == 0 ? "cubin" : "ocl");
        free(v);
        ck_assert_int_eq(mkdir(path, 0700), 0);

        e = test_affine_try(c, kernel, 64);
        root = unwritten_root(e);
        ck_assert_msg(root && cube_error_kind_of(root) == CUBE_SERVER_IO &&
                      cube_error_kind_of(cube_error_source(root)) == CUBE_IO_UNKNOWN,
                      "a cache directory failure reads as %s, where 5.11 says Io(Unknown)",
                      e ? cube_error_message(e) : "nothing");
        ck_assert(!cube_error_is_refusal(root));
        cube_error_free(e);

        /* Not the kernel's fault: once the directory is mended, the next
         * launch builds it again. */
        ck_assert_int_eq(rmdir(path), 0);
        ck_ok(test_affine_try(c, kernel, 64));
        cube_disconnect(c);
        free(norm);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
}
END_TEST

/* 5.3: the size an IoError of a create carries is the size asked, not the
 * page the daemon would have taken for it. */
START_TEST(a_create_on_a_full_device_carries_the_size_asked)
{
        const char *args[] = { "--memory-limit", "64M", NULL };
        const cube_error *root;
        cube_handle a, b, small;
        test_daemon d;
        cube_error *e;
        cube_client *c;

        ck_assert_ptr_nonnull(strstr(doc, "`Io(OutOfMemory{size})`: the device is full now"));
        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        c = test_connect(d.socket, "full");
        a = test_empty(c, 40 << 20);
        b = test_empty(c, 24 << 20);
        ck_ok(cube_check(c, &a, 1));
        ck_ok(cube_check(c, &b, 1));
        small = test_empty(c, 100);
        e = cube_check(c, &small, 1);
        root = unwritten_root(e);
        ck_assert_msg(root && cube_error_kind_of(cube_error_source(root)) ==
                      CUBE_IO_OUT_OF_MEMORY, "a create on a full device reads as %s",
                      e ? cube_error_message(e) : "nothing");
        ck_assert_uint_eq(cube_error_size(cube_error_source(root)), 100);
        cube_error_free(e);
        cube_disconnect(c);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
}
END_TEST

/* The next answer on fd, whose result or error the caller reads. */
static void next_answer(int fd, msgpack_unpacked *up, cube__envelope *env)
{
        const char *why;

        ck_assert_int_eq(raw_recv(fd, up, test_scaled_ms(5000)), 1);
        ck_assert_int_eq(cube__envelope_parse(&up->data, env, &why), 0);
        ck_assert_int_eq(env->type, CUBE__MSG_RESPONSE);
}

/* 5.16: a write the daemon refuses when it handles it (its length is not the
 * handle's) is a failure inside the window, answered as Server(...), never
 * hidden behind NotMeasured. */
START_TEST(a_refused_write_inside_a_window_is_its_answer)
{
        static const char four[4] = { 1, 2, 3, 4 };
        uint64_t nonce, session, token;
        msgpack_unpacked up;
        cube__envelope env;
        cube_error *e = NULL;
        test_daemon d;
        int fd;

        ck_assert_ptr_nonnull(strstr(doc, "`Server(ServerError)`: any other failure inside the "
                                     "window (`Skipped`,\n    a failed write"));
        ck_assert_int_eq(test_daemon_start(&d, NULL), 0);
        fd = raw_connect(d.socket);
        raw_greet(fd, &nonce, &session);
        raw_send_create(fd, session << 40 | 1, 16);
        send_fmt(fd, true, 2, "start_profile", "ub", (uint64_t) 1, 0);
        next_answer(fd, &up, &env);
        ck_assert(env.error->type == MSGPACK_OBJECT_NIL);
        ck_assert(cube__obj_u64(env.result, &token));
        msgpack_unpacked_destroy(&up);
        send_fmt(fd, false, 0, "write", "uhy", (uint64_t) 1, &(cube_handle) {
                 .service = nonce, .memory = session << 40 | 1 }, four, sizeof(four));
        send_fmt(fd, true, 3, "end_profile", "uu", (uint64_t) 1, token);
        next_answer(fd, &up, &env);
        ck_assert_int_eq(cube__err_unpack(env.error, CUBE__FAMILY_PROFILE, &e), 0);
        msgpack_unpacked_destroy(&up);
        ck_assert_msg(cube_error_kind_of(e) == CUBE_PROFILE_SERVER &&
                      cube_error_kind_of(cube_error_source(e)) == CUBE_SERVER_VALIDATION,
                      "a window holding a refused write answers %s, where 5.16 says "
                      "Server(...)", cube_error_message(e));
        cube_error_free(e);
        close(fd);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
}
END_TEST

/* Which streams a description says a call waits for: 'E' every stream of
 * the session, 'T' the calling thread's alone, 0 neither. */
static char stream_scope(const char *text, size_t len)
{
        char *t = strndup(text, len);
        char scope = 0;

        ck_assert_ptr_nonnull(t);
        if (strstr(t, "every stream") || strstr(t, "every one of its streams"))
                scope = 'E';
        else if (strstr(t, "calling thread's stream"))
                scope = 'T';
        free(t);
        return scope;
}

/* README's table of calls and cube.h's comment on each say the same of
 * which streams the call covers. */
START_TEST(readme_and_cube_h_agree_on_the_streams_a_call_covers)
{
        char *readme = normalized_file("README.md"), *header = source_file("include/cube.h");
        size_t compared = 0;

        for (const char *row = strstr(readme, "| `cube_"); row; row = strstr(row + 1, "| `cube_")) {
                const char *name = row + 3, *paren = strchr(name, '('), *end = strstr(row, " |");
                const char *row_end = strstr(end ? end + 2 : row, " | ");
                char decl[96];

                if (!paren || paren - name > 60 || !end || !row_end)
                        continue;
                snprintf(decl, sizeof(decl), "*%.*s(", (int) (paren - name), name);
                const char *at = strstr(header, decl);
                if (!at) {
                        decl[0] = ' ';
                        at = strstr(header, decl);
                }
                if (!at)
                        continue;
                /* The comment just before the declaration. */
                const char *close = NULL;
                for (const char *q = at; q > header + 1; q--)
                        if (q[-2] == '*' && q[-1] == '/') {
                                close = q;
                                break;
                        }
                if (!close || at - close > 40)
                        continue;
                const char *open = close;
                while (open > header + 1 && !(open[-2] == '/' && open[-1] == '*'))
                        open--;
                char doc_scope = stream_scope(row, (size_t) (row_end - row));
                char header_scope = stream_scope(open, (size_t) (close - open));
                if (!doc_scope || !header_scope)
                        continue;
                compared++;
                ck_assert_msg(doc_scope == header_scope, "README and cube.h disagree on the "
                              "streams %.*s covers", (int) (paren - name), name);
        }
        ck_assert_uint_ge(compared, 1);
        free(readme);
        free(header);
}
END_TEST

/* KERNELS.md on failed builds: the daemon remembers only a failure the
 * source caused; one outside it (here an injected killed compiler) is
 * built again by the next launch, and the document says so. */
START_TEST(a_build_failure_outside_the_source_is_retried_as_kernels_md_says)
{
        const char *args[] = { "--enable-fault-injection", NULL };
        char *kernels = normalized_file("docs/KERNELS.md");
        const cube_error *root;
        test_daemon d;
        cube_error *e;
        cube_client *c;
        uint64_t kernel;

        for (const char *p = strstr(kernels, "remembered"); p; p = strstr(p + 1, "remembered")) {
                const char *start = p, *stop = strstr(p, "- ");
                while (start > kernels && !(start[0] == '-' && start[1] == ' '))
                        start--;
                if (!stop)
                        stop = p + strlen(p);
                char *item = strndup(start, (size_t) (stop - start));
                ck_assert_ptr_nonnull(item);
                if (strstr(item, "compile") || strstr(item, "build"))
                        ck_assert_msg(strstr(item, "builds it again") != NULL,
                                      "KERNELS.md says a failed build is remembered without "
                                      "saying which failures are built again: %s", item);
                free(item);
        }
        ck_assert_int_eq(test_daemon_start(&d, args), 0);
        c = test_connect(d.socket, "retry");
        kernel = test_kernel(c, test_affine_source, "affine");
        ck_ok(cube_debug_inject(c, CUBE_FAULT_COMPILE, CUBE_LAUNCH_UNKNOWN,
                                "the compiler was killed", 0));
        e = test_affine_try(c, kernel, 64);
        root = unwritten_root(e);
        ck_assert_msg(root && cube_error_kind_of(root) == CUBE_SERVER_LAUNCH,
                      "the injected build failure reads as %s", e ? cube_error_message(e) : "nothing");
        cube_error_free(e);
        ck_ok(test_affine_try(c, kernel, 64));
        cube_disconnect(c);
        free(kernels);
        ck_assert_int_eq(test_daemon_stop(&d, 10000), 0);
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
        tcase_add_test(tc, the_requests_served_during_a_drain_are_documented);
        tcase_add_test(tc, every_error_variant_is_in_section_6);
        tcase_add_test(tc, every_fault_site_and_kind_is_in_section_5_15);
        tcase_add_test(tc, every_key_cubed_sends_is_documented);
        tcase_add_test(tc, the_keys_of_bans_are_documented);
        tcase_add_test(tc, refusals_read_as_the_document_quotes_them);
        tcase_add_test_needing(tc, a_cache_directory_failure_is_the_variant_5_11_names,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test(tc, a_create_on_a_full_device_carries_the_size_asked);
        tcase_add_test(tc, a_refused_write_inside_a_window_is_its_answer);
        tcase_add_test(tc, readme_and_cube_h_agree_on_the_streams_a_call_covers);
        tcase_add_test_needing(tc, a_build_failure_outside_the_source_is_retried_as_kernels_md_says,
                               TEST_NEEDS_KERNEL_RUNS);
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

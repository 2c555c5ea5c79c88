/*
 * cubectl-print.c - cubectl's output: JSON strings, table cells, byte
 * counts and errors, and the printer of views.
 *
 * A view describes once what a command shows (cubectl.h); the printer
 * renders that one description as a table, or as JSON with --json, so
 * that the two forms cannot drift apart.
 */
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cubectl.h"

/* The length of the valid UTF-8 sequence at s, or 0 when it is not one. */
static size_t utf8_len(const unsigned char *s)
{
        size_t n;
        uint32_t cp;

        if (s[0] < 0x80)
                return 1;
        if ((s[0] & 0xe0) == 0xc0)
                n = 2, cp = s[0] & 0x1f;
        else if ((s[0] & 0xf0) == 0xe0)
                n = 3, cp = s[0] & 0x0f;
        else if ((s[0] & 0xf8) == 0xf0)
                n = 4, cp = s[0] & 0x07;
        else
                return 0;
        for (size_t i = 1; i < n; i++) {
                if ((s[i] & 0xc0) != 0x80)
                        return 0;
                cp = cp << 6 | (s[i] & 0x3f);
        }
        if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
                return 0;
        return n;
}

/* A JSON string: control characters escaped, bytes that are not UTF-8 as
 * U+FFFD, so that whatever a daemon or a client named, the output parses. */
void print_json_string(const char *s)
{
        putchar('"');
        while (*s) {
                unsigned char ch = (unsigned char) *s;
                size_t n = utf8_len((const unsigned char *) s);
                if (ch == '"' || ch == '\\')
                        printf("\\%c", ch);
                else if (ch < 0x20 || ch == 0x7f)
                        printf("\\u%04x", ch);
                else if (n == 0)
                        fputs("\\ufffd", stdout);
                else
                        fwrite(s, 1, n, stdout);
                s += n ? n : 1;
        }
        putchar('"');
}

/* A text for a table cell: control characters and bytes that are not UTF-8
 * as \xNN, so that a name cannot forge rows or columns. */
const char *cell_text(const char *s, char *buf, size_t cap, bool spaces)
{
        size_t o = 0;

        while (*s && o + 5 < cap) {
                unsigned char ch = (unsigned char) *s;
                size_t n = utf8_len((const unsigned char *) s);
                if (ch < 0x20 || ch == 0x7f || (ch == ' ' && !spaces) || n == 0) {
                        o += (size_t) snprintf(buf + o, cap - o, "\\x%02x", ch);
                        s++;
                        continue;
                }
                if (o + n >= cap)
                        break;
                memcpy(buf + o, s, n);
                o += n;
                s += n;
        }
        buf[o] = '\0';
        return buf;
}

void human_bytes(uint64_t n, char *buf, size_t cap)
{
        static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
        double v = (double) n;
        int u = 0;

        while (v >= 1024 && u < 4) {
                v /= 1024;
                u++;
        }
        if (u == 0)
                snprintf(buf, cap, "%" PRIu64 " B", n);
        else
                snprintf(buf, cap, "%.1f %s", v, units[u]);
}

bool json_output;                       /* --json: errors are JSON too */

/* An error, as text on stderr, or with --json as one JSON object on stdout
 * ({"error": {"command", "variant", "message"}}) so that scripts parse it. */
void print_error(const char *what, const cube_error *e, const char *text)
{
        if (!json_output) {
                fprintf(stderr, "cubectl: %s failed: %s\n", what, text);
                return;
        }
        printf("{\"error\":{\"command\":");
        print_json_string(what);
        printf(",\"variant\":");
        print_json_string(e ? cube_error_variant(e) : "");
        printf(",\"message\":");
        print_json_string(text);
        printf("}}\n");
}

int report(const char *what, cube_error *e)
{
        print_error(what, e, cube_error_message(e));
        cube_error_free(e);
        return EXIT_ERROR;
}

/* ---------------------------------------------------------------------------
 * Views
 * ------------------------------------------------------------------------- */

enum { CELL_MAX = 4096 };

static const char *row_at(const view *v, const void *rows, size_t i)
{
        return (const char *) rows + i * v->size;
}

static bool present(const field *f, const void *row)
{
        return !f->when || f->when(row);
}

/* Whether f holds rows of another view, or one. */
static bool nested(const field *f)
{
        return f->kind == FIELD_ROWS || f->kind == FIELD_ARRAY || f->kind == FIELD_OBJECT;
}

static value field_value(const field *f, const void *row, const void *ctx, char *buf,
                         size_t cap)
{
        const char *p = (const char *) row + f->off;
        const size_t *count = (const size_t *) ((const char *) row + f->n_off);
        value v = { .n = 0 };

        if (f->get)
                return f->get(row, ctx, buf, cap);
        switch (f->kind) {
        case FIELD_U64: v.u = *(const uint64_t *) p; break;
        case FIELD_U32: v.u = *(const uint32_t *) p; break;
        case FIELD_F64: v.f = *(const double *) p; break;
        case FIELD_BOOL: v.b = *(const bool *) p; break;
        case FIELD_TEXT: v.s = p; break;
        case FIELD_U32S: v.rows = p; v.n = f->count; break;
        case FIELD_TEXTS: break;        /* made by get */
        case FIELD_ROWS: v.rows = *(const void *const *) p; v.n = *count; break;
        case FIELD_ARRAY: v.rows = p; v.n = *count; break;
        case FIELD_OBJECT: v.rows = p; v.n = 1; break;
        }
        return v;
}

static void json_object(const view *v, const void *row, const void *ctx);

static void json_rows(const view *v, const void *rows, size_t n, const void *ctx)
{
        putchar('[');
        for (size_t i = 0; i < n; i++) {
                if (i)
                        putchar(',');
                json_object(v, row_at(v, rows, i), ctx);
        }
        putchar(']');
}

static void json_value(const field *f, value v, const void *row, const void *ctx)
{
        switch (f->kind) {
        case FIELD_U64:
        case FIELD_U32:
                printf("%" PRIu64, v.u);
                break;
        case FIELD_F64:
                if (isnan(v.f))
                        fputs("null", stdout);
                else
                        printf("%.3f", v.f);
                break;
        case FIELD_BOOL:
                fputs(v.b ? "true" : "false", stdout);
                break;
        case FIELD_TEXT:
                if (v.s)
                        print_json_string(v.s);
                else
                        fputs("null", stdout);
                break;
        case FIELD_U32S:
                putchar('[');
                for (size_t i = 0; i < v.n; i++)
                        printf("%s%" PRIu32, i ? "," : "", ((const uint32_t *) v.rows)[i]);
                putchar(']');
                break;
        case FIELD_TEXTS:
                putchar('[');
                for (size_t i = 0; i < v.n; i++) {
                        if (i)
                                putchar(',');
                        print_json_string(f->item(row, i));
                }
                putchar(']');
                break;
        case FIELD_ROWS:
        case FIELD_ARRAY:
                json_rows(f->of, v.rows, v.n, ctx);
                break;
        case FIELD_OBJECT:
                json_object(f->of, v.rows, ctx);
                break;
        }
}

static void json_object(const view *v, const void *row, const void *ctx)
{
        char buf[CELL_MAX];
        bool first = true;

        putchar('{');
        for (const field *f = v->fields; f < v->fields + v->n_fields; f++) {
                if (!f->key || !present(f, row))
                        continue;
                printf("%s\"%s\":", first ? "" : ",", f->key);
                json_value(f, field_value(f, row, ctx, buf, sizeof(buf)), row, ctx);
                first = false;
        }
        putchar('}');
}

/* The text of f's value in row, before the words around it are added:
 * NULL when absent. */
static const char *value_text(const field *f, value v, const void *row, char *buf,
                              size_t cap)
{
        size_t used = 0;

        switch (f->kind) {
        case FIELD_U64:
        case FIELD_U32:
                if (f->show == SHOW_BYTES)
                        human_bytes(v.u, buf, cap);
                else
                        snprintf(buf, cap, "%" PRIu64, v.u);
                return buf;
        case FIELD_F64:
                if (isnan(v.f))
                        return NULL;
                if (f->show == SHOW_BYTES)
                        human_bytes((uint64_t) llround(v.f), buf, cap);
                else
                        snprintf(buf, cap, "%.*f", f->prec, v.f);
                return buf;
        case FIELD_BOOL:
                return v.b ? f->yes : f->no;
        case FIELD_TEXT:
                if (!v.s || f->show == SHOW_PLAIN)
                        return v.s;
                return cell_text(v.s, buf, cap, f->show == SHOW_TEXT);
        case FIELD_TEXTS:
                buf[0] = '\0';
                for (size_t i = 0; i < v.n && used < cap; i++)
                        used += (size_t) snprintf(buf + used, cap - used, "%s%s", i ? "," : "",
                                                  f->item(row, i));
                return buf;
        default:
                return NULL;
        }
}

/* f's cell in row, with the words around its value: NULL when it is left
 * out. An empty text shows as f's word for one, and an absent value as
 * absent (NULL in a record, '-' in a row), both bare. */
static const char *cell_of(const field *f, const void *row, const void *ctx,
                           const char *absent, char *out, size_t cap)
{
        char buf[CELL_MAX], text[CELL_MAX];
        const char *t = NULL;

        if (present(f, row))
                t = value_text(f, field_value(f, row, ctx, buf, sizeof(buf)), row, text,
                               sizeof(text));
        if ((!t || !*t) && f->optional)
                return NULL;
        if (!t)
                return absent;
        if (!*t && f->empty)
                return f->empty;
        snprintf(out, cap, "%s%.*s%s", f->before ? f->before : "", f->max ? f->max : INT_MAX,
                 t, f->after ? f->after : "");
        return out;
}

/* A text on lines of its own: the later lines indented under the first. */
static void print_below(const char *before, const char *t)
{
        int indent = (int) strlen(before);

        fputs(before, stdout);
        for (; *t; t++) {
                putchar(*t);
                if (*t == '\n')
                        printf("%*s", indent, "");
        }
        putchar('\n');
}

static bool in_line(const field *f)
{
        return f->head && !f->below && !nested(f);
}

static void table_rows(const view *v, const void *rows, size_t n, const void *ctx);
static void table_record(const view *v, const void *row, const void *ctx);

/* What a nested field holds, as its own table or record. */
static void table_nested(const field *f, value x, const void *ctx)
{
        if (f->kind == FIELD_OBJECT)
                table_record(f->of, x.rows, ctx);
        else
                table_rows(f->of, x.rows, x.n, ctx);
}

/* A row's line, then what it shows below it; the heads when row is NULL. */
static void table_row(const view *v, const void *row, const void *ctx)
{
        const char *sep = v->sep ? v->sep : "  ";
        char cell[CELL_MAX], buf[CELL_MAX];
        bool first = true;

        fputs(v->indent ? v->indent : "", stdout);
        for (const field *f = v->fields; f < v->fields + v->n_fields; f++) {
                const char *t;
                if (!in_line(f))
                        continue;
                t = row ? cell_of(f, row, ctx, "-", cell, sizeof(cell)) : f->head;
                if (!t || (!*t && f->optional))
                        continue;
                printf("%s%*s", first ? "" : sep, f->width, t);
                first = false;
        }
        putchar('\n');
        for (const field *f = v->fields; row && f < v->fields + v->n_fields; f++) {
                const char *before = f->before ? f->before : "";
                value x;
                if (!f->head || in_line(f) || !present(f, row))
                        continue;
                x = field_value(f, row, ctx, buf, sizeof(buf));
                if (nested(f))
                        table_nested(f, x, ctx);
                else if (f->kind == FIELD_TEXTS)
                        for (size_t i = 0; i < x.n; i++)
                                print_below(before, f->item(row, i));
                else if (x.s)
                        print_below(before, x.s);
        }
}

static void table_rows(const view *v, const void *rows, size_t n, const void *ctx)
{
        if (n == 0 && v->none)
                printf("%s\n", v->none);
        else if (v->header)
                table_row(v, NULL, ctx);
        for (size_t i = 0; i < n; i++)
                if (!v->shown || v->shown(row_at(v, rows, i)))
                        table_row(v, row_at(v, rows, i), ctx);
}

/* A record: a line for each field, labelled by its head; what it nests
 * after a line of its head, when it has one. */
static void table_record(const view *v, const void *row, const void *ctx)
{
        char cell[CELL_MAX], buf[CELL_MAX];

        for (const field *f = v->fields; f < v->fields + v->n_fields; f++) {
                const char *t;
                if (!f->head || !present(f, row))
                        continue;
                if (nested(f)) {
                        if (*f->head)
                                printf("%s\n", f->head);
                        table_nested(f, field_value(f, row, ctx, buf, sizeof(buf)), ctx);
                } else if ((t = cell_of(f, row, ctx, NULL, cell, sizeof(cell)))) {
                        printf("%-*s%s\n", v->label_width, f->head, t);
                }
        }
}

void print_rows(const view *v, const void *rows, size_t n, const void *ctx, bool json)
{
        if (!json) {
                table_rows(v, rows, n, ctx);
                return;
        }
        json_rows(v, rows, n, ctx);
        putchar('\n');
}

void print_record(const view *v, const void *record, const void *ctx, bool json)
{
        if (!json) {
                table_record(v, record, ctx);
                return;
        }
        json_object(v, record, ctx);
        putchar('\n');
}

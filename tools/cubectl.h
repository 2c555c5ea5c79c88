/*
 * cubectl.h - what cubectl's files share: the exit statuses, the output
 * helpers and the views of cubectl-print.c, and the commands of
 * cubectl-views.c, cubectl-health.c and cubectl-top.c.
 */
#ifndef CUBECTL_H
#define CUBECTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cube.h"

enum { EXIT_OK = 0, EXIT_ERROR = 1, EXIT_USAGE = 2, EXIT_UNREACHABLE = 3 };

/* cubectl-print.c: a JSON string, escaped; a table cell with spaces kept or
 * not; a byte count as a person reads it; an error as text or JSON. */
extern bool json_output;
void print_json_string(const char *s);
const char *cell_text(const char *s, char *buf, size_t cap, bool spaces);
void human_bytes(uint64_t n, char *buf, size_t cap);
void print_error(const char *what, const cube_error *e, const char *text);
int report(const char *what, cube_error *e);

/* A view: what one command shows, described once. Each field is a JSON
 * member, a table column (a line, in a record), or both; print_rows and
 * print_record render the description as a table or as JSON. Where the two
 * forms show a value differently, the field says how the table does. */
typedef enum field_kind {
        FIELD_U64, FIELD_U32, FIELD_F64, FIELD_BOOL,
        FIELD_TEXT,                     /* a char array in the row */
        FIELD_U32S,                     /* an array of uint32_t: JSON only */
        FIELD_TEXTS,                    /* texts: a JSON array; joined by ',' */
        FIELD_ROWS, FIELD_ARRAY,        /* rows of another view: behind a
                                         * pointer, or in an array */
        FIELD_OBJECT,                   /* one row of another view */
} field_kind;

typedef enum field_show {
        SHOW_PLAIN,                     /* as it is */
        SHOW_BYTES,                     /* a byte count as a person reads it */
        SHOW_NAME,                      /* escaped for a cell, spaces too */
        SHOW_TEXT,                      /* escaped for a cell, spaces kept */
} field_show;

/* A field's value. A text that is NULL, or a number that is NaN, is
 * absent: JSON says null, a table '-', a record has no line for it. */
typedef struct value {
        union {
                uint64_t u;
                double f;
                bool b;
                const char *s;
                const void *rows;
        };
        size_t n;                       /* TEXTS, ROWS: how many */
} value;

typedef struct view view;

typedef struct field {
        const char *key;                /* the JSON member; NULL: the table's only */
        const char *head;               /* the column's head, a record line's label;
                                         * NULL: JSON's only */
        field_kind kind;
        size_t off, n_off;              /* where it lies in the row (and its count), */
        value (*get)(const void *row, const void *ctx, char *buf, size_t cap);
                                        /* or how it is made from the row */
        const char *(*item)(const void *row, size_t i); /* TEXTS: the i-th */
        bool (*when)(const void *row);  /* there only when this says so; else
                                         * absent, and no JSON member */
        const view *of;                 /* ROWS, ARRAY, OBJECT */
        size_t count;                   /* U32S */
        /* How the table shows it. */
        field_show show;
        int width;                      /* of the cell; negative: left-aligned */
        int max;                        /* the most bytes of a text kept */
        int prec;                       /* F64: decimals */
        const char *before, *after;     /* words around the value */
        const char *empty;              /* for an empty text */
        const char *yes, *no;           /* BOOL: the words */
        bool optional;                  /* empty or absent: left out, separator
                                         * and all */
        bool below;                     /* on lines of its own after the row's,
                                         * later lines indented under the first */
} field;

struct view {
        const field *fields;
        size_t n_fields;
        size_t size;                    /* of one row */
        const char *sep;                /* between cells; NULL: two spaces */
        const char *indent;             /* before each row */
        bool header;                    /* the table opens with the heads */
        const char *none;               /* the table's line for no rows */
        bool (*shown)(const void *row); /* the table shows only these rows */
        int label_width;                /* a record's labels, padded */
};

/* A view of rows of type T: fields is an array. */
#define VIEW(T, fields_, ...) { .fields = (fields_), .size = sizeof(T), \
        .n_fields = sizeof(fields_) / sizeof((fields_)[0]), __VA_ARGS__ }

/* offsetof(T, m), which does not compile unless m is a M: a description
 * cannot read a member as another type. */
#define MEMBER(T, m, M) (offsetof(T, m) + \
        0 * sizeof(char[_Generic(((T *) 0)->m, M: 1, default: -1)]))
#define U64(T, m)       .kind = FIELD_U64, .off = MEMBER(T, m, uint64_t)
#define U32(T, m)       .kind = FIELD_U32, .off = MEMBER(T, m, uint32_t)
#define F64(T, m)       .kind = FIELD_F64, .off = MEMBER(T, m, double)
#define BOOL(T, m)      .kind = FIELD_BOOL, .off = MEMBER(T, m, bool)
#define TEXT(T, m)      .kind = FIELD_TEXT, .off = MEMBER(T, m, char *)
#define U32S(T, m)      .kind = FIELD_U32S, .off = MEMBER(T, m, uint32_t *), \
        .count = sizeof(((T *) 0)->m) / sizeof(uint32_t)
#define ROWS(T, m, n, v) .kind = FIELD_ROWS, .off = offsetof(T, m), \
        .n_off = MEMBER(T, n, size_t), .of = &(v)
#define ARRAY(T, m, n, v) .kind = FIELD_ARRAY, .off = offsetof(T, m), \
        .n_off = MEMBER(T, n, size_t), .of = &(v)
#define OBJECT(T, m, v) .kind = FIELD_OBJECT, .off = offsetof(T, m), .of = &(v)

/* n rows as a table (or JSON's array), one record as its lines (or JSON's
 * object); ctx is handed to the fields' get. */
void print_rows(const view *v, const void *rows, size_t n, const void *ctx, bool json);
void print_record(const view *v, const void *record, const void *ctx, bool json);

/* cubectl-views.c: the commands that inspect the daemon's state. */
int cmd_status(cube_client *c, bool json, const char *arg);
int cmd_kernels(cube_client *c, bool json, const char *arg);
int cmd_failures(cube_client *c, bool json, const char *arg);
int cmd_sessions(cube_client *c, bool json, const char *arg);
int cmd_shares(cube_client *c, bool json, const char *arg);
int cmd_memory(cube_client *c, bool json, const char *arg);
int cmd_streams(cube_client *c, bool json, const char *arg);
int cmd_graphs(cube_client *c, bool json, const char *arg);
int cmd_comms(cube_client *c, bool json, const char *arg);
int cmd_history(cube_client *c, bool json, const char *arg);
int cmd_bans(cube_client *c, bool json, const char *arg);
int cmd_config(cube_client *c, bool json, const char *arg);

/* cubectl-health.c: list's option (--dir, as the option letter 'D'), which
 * answers EXIT_USAGE for a bad value after saying why; a monotonic clock. */
int health_option(int opt, const char *arg);
double now_seconds(void);
/* list needs no connection: c is NULL, and it scans the sockets' directory. */
int cmd_list(cube_client *c, bool json, const char *arg);
int cmd_selftest(cube_client *c, bool json, const char *arg);

/* cubectl-top.c: top's options (--interval, --count, as 'I', 'C'), as
 * health_option. */
int top_option(int opt, const char *arg);
int cmd_top(cube_client *c, bool json, const char *arg);

#endif

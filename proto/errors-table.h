/*
 * errors-table.h - what errors.c and errors-wire.c share inside proto/: the
 * table that says, per variant, its name, family and payload, and the few
 * calls that build and walk a tree.
 */
#ifndef CUBE_ERRORS_TABLE_H
#define CUBE_ERRORS_TABLE_H

#include "errors.h"

/* Error levels a decoded tree may nest, the top level included. */
#define CUBE_ERR_MAX_DEPTH 64

/* What a variant carries, which is also how its payload is encoded. */
enum cube__err_payload {
        PAYLOAD_UNIT,           /* nil */
        PAYLOAD_WRAP,           /* the wrapped value itself, in members[0] */
        PAYLOAD_TEXT,           /* {key: text} */
        PAYLOAD_TEXT_PAIR,      /* {key: text, key2: text2} */
        PAYLOAD_SIZE,           /* {size: a} */
        PAYLOAD_LIMIT,          /* {requested: a, max: b} */
        PAYLOAD_DIM,            /* {requested: [3], max: [3]} */
        PAYLOAD_OPERATION,      /* {operation: name} */
        PAYLOAD_MAPPING,        /* {size: a, source: members[0]} */
        PAYLOAD_UNWRITTEN,      /* {failure: a, claimed: b, chain, root: members[0]} */
        PAYLOAD_SEVERAL,        /* {errors: members} */
};

struct cube__err_info {
        const char *name;               /* the reference's variant name */
        cube__err_family family;
        enum cube__err_payload payload;
        cube__err_family inner;         /* family of the source, root or members */
        const char *key, *key2;         /* map keys of the text fields */
        bool narrow;                    /* LIMIT: the fields are u32 in the reference */
        const char *lead, *mid, *tail;  /* the message around the fields */
};

/* ---- the taxonomy (errors.c) -------------------------------------------- */
#define CUBE__ERR_KINDS (CUBE_DEVICE_POISON + 1)
/* Every variant, indexed by kind; a kind that is none has no name. */
extern const struct cube__err_info cube__err_table[CUBE__ERR_KINDS];
/* The names of the cube_collective values, as the wire and messages spell them. */
extern const char *const cube__err_collective_names[CUBE_COLLECTIVE_MAX_];
/* The variant's entry of the table, or NULL for a kind that is none. */
const struct cube__err_info *cube__err_info(cube_error_kind kind);
/* How e's payload is shaped (PAYLOAD_UNIT for NULL). */
enum cube__err_payload cube__err_payload(const cube_error *e);
/* The single error a wrapping variant, StorageMappingFailed or Unwritten
 * stands on; NULL for every other kind. */
const cube_error *cube__err_source(const cube_error *e);
/* A node of kind with nothing set. */
cube_error *cube__err_node_new(cube_error_kind kind);
/* Takes ownership of source: it becomes members[0], or is freed. */
int cube__err_attach(cube_error *e, cube_error *source);

#endif

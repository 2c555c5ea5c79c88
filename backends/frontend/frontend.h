/*
 * frontend.h - the kernel front end: every kernel source read by a real C
 * compiler front end (libclang), checked against the dialect's rules, and
 * rewritten so that it reaches only what is its own.
 *
 * It runs in the confined build process (cube-device --check), never in
 * cubed: a hostile source can make a compiler front end burn time and
 * memory, and that happens under the build's limits. What it answers is two
 * texts: the checked source each backend compiles behind its prelude, and
 * the facts the daemon needs at launch (frontend-facts.c).
 */
#ifndef CUBE_FRONTEND_H
#define CUBE_FRONTEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bump when the rewrite changes: it is part of every kernel's cache key, so
 * an artifact built from an older rewrite is never loaded. */
#define CUBE__FRONTEND_VERSION "cube-frontend 8"

/* The most parameters, sites and scalars one entry point may have: limits on
 * what a source controls. */
#define CUBE__FE_MAX_PARAMS 1024u
#define CUBE__FE_MAX_SITES 65535u

/* The launch's scalar groups, in the order the info words lay them
 * (docs/KERNELS.md, "The info words"). */
typedef enum cube__scalar_group {
        CUBE__SCALAR_F32,
        CUBE__SCALAR_F64,
        CUBE__SCALAR_I32,
        CUBE__SCALAR_I64,
        CUBE__SCALAR_U32,
        CUBE__SCALAR_U64,
        CUBE__SCALAR_GROUPS
} cube__scalar_group;

typedef enum cube__fe_status {
        CUBE__FE_OK = 0,
        CUBE__FE_REFUSED = 1,           /* the source breaks a rule: *ret_error says which */
        CUBE__FE_DEFECT = 2,            /* the front end itself failed (no memory, no libclang) */
        CUBE__FE_DOES_NOT_PARSE = 3,    /* not C the dialect accepts: *ret_error has the compiler's words */
} cube__fe_status;

/* Reads source, whose entry point is entry, and answers the checked source
 * (the entry point renamed and rewritten, every access it cannot prove in
 * range guarded) and its facts (frontend-facts.c's text form). On
 * CUBE__FE_REFUSED, *ret_error names the line, the column and the rule. The
 * returned texts are the caller's to free. */
cube__fe_status cube__frontend_run(const char *source, const char *entry, char **ret_checked,
                                   char **ret_facts, char **ret_error);

/* ---------------------------------------------------------------------------
 * Facts: what the parse says of one entry point, read by the daemon.
 * ------------------------------------------------------------------------- */

typedef enum cube__param_io {
        CUBE__PARAM_READ = 1,
        CUBE__PARAM_WRITE = 2,
        CUBE__PARAM_READ_WRITE = 3,
} cube__param_io;

typedef struct cube__fe_buffer {
        char name[64];
        char type[32];                  /* the element type, as C spells it */
        uint32_t elem_bytes;
        bool is_const;
        bool tensor_map;                /* a TENSOR_MAP parameter: bound to a tensor map */
        cube__param_io io;              /* what the body may do with it */
} cube__fe_buffer;

typedef struct cube__fe_scalar {
        char name[64];
        char type[32];
        cube__scalar_group group;
} cube__fe_scalar;

/* An entry point's test of every bound, in a form the host evaluates over
 * a launch's whole grid (bounds.c). */
typedef struct cube__fe_bounds cube__fe_bounds;

typedef struct cube__fe_facts {
        uint32_t n_buffers;
        cube__fe_buffer *buffers;
        uint32_t n_scalars;
        cube__fe_scalar *scalars;
        uint32_t group_counts[CUBE__SCALAR_GROUPS];
        bool uses_sync;
        uint32_t n_sites;
        char **sites;                   /* per guarded access: "LINE:COL what", for reports */
        cube__fe_bounds *bounds;        /* NULL: the entry has no bare form */
} cube__fe_facts;

/* Parses the text form, for the entry point named entry (NULL: the first
 * the text holds); NULL when it is not one, or holds no such entry point
 * (out of memory included). */
cube__fe_facts *cube__fe_facts_parse(const char *text, const char *entry);
void cube__fe_facts_free(cube__fe_facts *f);

/* The info words the daemon adds after a launch's own, for a checked
 * kernel: each binding's length in bytes (the top bit set for a binding the
 * kernel may not write), then the record of the first out-of-bounds access,
 * then a sink that dropped writes land in, then zeros that reads past the
 * launch's info words yield. */
#define CUBE__CHECK_RECORD_WORDS 4u
#define CUBE__CHECK_SINK_WORDS 16u
#define CUBE__CHECK_ZERO_WORDS 16u
#define CUBE__CHECK_TAIL_WORDS (CUBE__CHECK_RECORD_WORDS + CUBE__CHECK_SINK_WORDS + \
                                CUBE__CHECK_ZERO_WORDS)
#define CUBE__CHECK_READ_ONLY (1ull << 63)

/* A tensor map as a checked kernel reads it: CUBE__TMAP_WORDS words per map
 * of the launch, in binding order, before the bindings' lengths. Dimensions
 * past the rank read as shape 1, box 1, element stride 1. */
#define CUBE__TMAP_RANK 0
#define CUBE__TMAP_FORMAT 1             /* 0 tiled, 1 im2col */
#define CUBE__TMAP_ELEM_BYTES 2
#define CUBE__TMAP_OOB 3                /* 0 zero, 1 NaN */
#define CUBE__TMAP_SWIZZLE 4            /* 0 none, 1 32B, 2 64B, 3 128B */
#define CUBE__TMAP_SHAPE 5              /* 5 words each from here */
#define CUBE__TMAP_STRIDES 10
#define CUBE__TMAP_BOX 15
#define CUBE__TMAP_ELEM_STRIDES 20
#define CUBE__TMAP_LOWER 25             /* im2col: 3 words each, signed */
#define CUBE__TMAP_UPPER 28
#define CUBE__TMAP_ELEM 31              /* cube_elem_type */
#define CUBE__TMAP_INTERLEAVE 32
#define CUBE__TMAP_PREFETCH 33
#define CUBE__TMAP_WORDS 40u

/* The record: word 0 is the site + 1 of the first access out of bounds (0:
 * none), word 1 the index it asked for, word 2 the binding's or array's
 * length in elements, word 3 has bit 0 set for a write. */
typedef struct cube__oob_record {
        uint64_t site_plus_one, index, length, flags;
} cube__oob_record;

/* What a launch gives the bounds to read: its grid, its own info words
 * (the scalars, then meta and dynamic words from those offsets, in words),
 * and per binding its length in bytes, CUBE__CHECK_READ_ONLY set for one
 * the kernel may not write. */
typedef struct cube__fe_grid {
        uint32_t count[3], dim[3];
        const uint64_t *info;
        uint64_t n_info, meta, dyn;
        const uint64_t *bindings;
        uint32_t n_bindings;
} cube__fe_grid;

/* The facts' "bounds" text (len bytes, without the word itself) read, or
 * NULL where it is not one (a bound the host cannot read is no bound). */
cube__fe_bounds *cube__fe_bounds_parse(const char *text, size_t len);
void cube__fe_bounds_free(cube__fe_bounds *b);
/* Whether every access the bounds name lies in its binding or array in
 * every cube of the launch g: then the entry's bare form may run it. */
bool cube__fe_bounds_hold(const cube__fe_bounds *b, const cube__fe_grid *g);

/* A person's account of an out-of-bounds record, for the launch's failure. */
void cube__fe_describe_oob(const cube__fe_facts *f, const char *kernel,
                           const cube__oob_record *r, char *buf, size_t cap);

#endif

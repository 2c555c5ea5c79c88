/*
 * frontend.c - a kernel source read by libclang, checked against the
 * dialect's rules, and rewritten into its checked form.
 *
 * Why a compiler front end and not a scan of the text: a kernel that can
 * name memory by any expression C allows can reach any byte the device
 * holds, and only a parse knows which expressions touch memory, through
 * which pointer, with which element type. The rewrite works on the user's
 * own text, by insertions around the expressions the parse found, so the
 * result keeps the user's lines and columns (compiler messages point at
 * them) and every backend compiles it behind its own prelude.
 *
 * What the rewrite does (docs/KERNELS.md, "Checked kernels"):
 * - every function gets the launch's check context as a first parameter,
 *   and every call of a function of the source passes it on;
 * - the entry point takes its buffers as the backend binds them, then
 *   reads its scalars from the launch's info words;
 * - an access through a pointer becomes a guarded load or a guarded store:
 *   through a buffer parameter the body never moves, a check of the index
 *   against that binding's length; through any other pointer, a check that
 *   the bytes lie in one of the launch's bindings (a writable one for a
 *   store);
 * - an index into an array (shared, private, constant) is checked against
 *   the array's length;
 * - what cannot be guarded is refused: integer/pointer casts, pointer type
 *   punning, casting away const, pointers to anything but numbers, pointers
 *   into arrays or variables, function pointers, inline assembly, calls
 *   that hand a pointer to a function the source does not define, the
 *   names cube reserves, and the spellings of one device's language.
 */
#include <clang-c/Index.h>
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "frontend.h"

/* The dialect as C, for the parse only: each backend has its own prelude for
 * compiling. The positions and info readers are functions here so that they
 * read as values, never as memory, and so that a bound (bound_of) can name
 * each position whole: libclang cannot say which operator a macro's
 * expansion holds. Their types are the backends' own. */
static const char parse_prelude[] =
"typedef signed char int8_t; typedef short int16_t; typedef int int32_t; typedef long int64_t;\n"
"typedef unsigned char uint8_t; typedef unsigned short uint16_t; typedef unsigned int uint32_t;\n"
"typedef unsigned long uint64_t; typedef unsigned long size_t; typedef long ptrdiff_t;\n"
"typedef _Bool bool;\n#define true 1\n#define false 0\n#define NULL 0\n"
"#define INT8_MIN (-128)\n#define INT16_MIN (-32768)\n#define INT32_MIN (-2147483647 - 1)\n"
"#define INT64_MIN (-9223372036854775807L - 1)\n#define INT8_MAX 127\n#define INT16_MAX 32767\n"
"#define INT32_MAX 2147483647\n#define INT64_MAX 9223372036854775807L\n#define UINT8_MAX 255\n"
"#define UINT16_MAX 65535\n#define UINT32_MAX 4294967295U\n#define UINT64_MAX 18446744073709551615UL\n"
"#define SIZE_MAX UINT64_MAX\n#define CHAR_BIT 8\n#define INT_MIN INT32_MIN\n#define INT_MAX INT32_MAX\n"
"#define UINT_MAX UINT32_MAX\n#define LONG_MIN INT64_MIN\n#define LONG_MAX INT64_MAX\n"
"#define ULONG_MAX UINT64_MAX\n#define FLT_MAX 3.402823466e+38F\n#define FLT_MIN 1.175494351e-38F\n"
"#define FLT_EPSILON 1.192092896e-07F\n#define DBL_MAX 1.7976931348623158e+308\n"
"#define DBL_MIN 2.2250738585072014e-308\n#define DBL_EPSILON 2.2204460492503131e-16\n"
"float cube__inf(void);\n#define INFINITY cube__inf()\n#define NAN cube__inf()\n"
"#define HUGE_VALF INFINITY\n#define HUGE_VAL ((double) INFINITY)\n"
"#define M_E 2.7182818284590452354\n#define M_LN2 0.69314718055994530942\n"
"#define M_PI 3.14159265358979323846\n#define M_PI_2 1.57079632679489661923\n"
"#define M_SQRT2 1.41421356237309504880\n"
"#define KERNEL __attribute__((annotate(\"cube_kernel\")))\n"
"#define SHARED __attribute__((annotate(\"cube_shared\")))\n"
"#define GLOBAL\n#define CONSTANT const\n#define DEVICE_FN\n"
"#define INFO int cube__info_param\n"
"unsigned cube__unit(int); unsigned cube__cube(int); unsigned cube__dim(int); unsigned cube__count(int);\n"
"unsigned cube__abs(int); unsigned long cube__abs64(void);\n"
"#define UNIT_POS_X cube__unit(0)\n#define UNIT_POS_Y cube__unit(1)\n#define UNIT_POS_Z cube__unit(2)\n"
"#define CUBE_POS_X cube__cube(0)\n#define CUBE_POS_Y cube__cube(1)\n#define CUBE_POS_Z cube__cube(2)\n"
"#define CUBE_DIM_X cube__dim(0)\n#define CUBE_DIM_Y cube__dim(1)\n#define CUBE_DIM_Z cube__dim(2)\n"
"#define CUBE_COUNT_X cube__count(0)\n#define CUBE_COUNT_Y cube__count(1)\n"
"#define CUBE_COUNT_Z cube__count(2)\n"
"#define ABSOLUTE_POS_X cube__abs(0)\n#define ABSOLUTE_POS_Y cube__abs(1)\n"
"#define ABSOLUTE_POS_Z cube__abs(2)\n#define UNIT_POS cube__unit(3)\n#define CUBE_DIM cube__dim(3)\n"
"#define CUBE_POS cube__cube(3)\n#define CUBE_COUNT cube__count(3)\n#define ABSOLUTE_POS cube__abs64()\n"
"void cube__sync(void);\n#define sync_cube() cube__sync()\n"
"double cube__scalar(unsigned long, unsigned long);\n"
"#define SCALAR(type, word, i) ((type) cube__scalar((word), (i)))\n"
"unsigned cube__meta(unsigned long); unsigned cube__dyn(unsigned long);\n"
"#define META_U32(i) cube__meta(i)\n#define DYN_U32(i) cube__dyn(i)\n"
"#define BUFFER_LEN(b) META_U32(b)\n"
"#define TENSOR_MAP(T) __attribute__((annotate(\"cube_tensor_map\"))) const T *\n"
"void tensor_map_load(const void *map, void *dst, ...);\n";

/* Where the guards find a tensor map's fields among its words (frontend.h). */
#define CUBE__STR_(x) #x
#define CUBE__STR(x) CUBE__STR_(x)
#define CUBE__TMAP_DEFINE(name) "#define " #name " " CUBE__STR(name) "\n"
static const char tmap_layout[] =
        CUBE__TMAP_DEFINE(CUBE__TMAP_RANK) CUBE__TMAP_DEFINE(CUBE__TMAP_FORMAT)
        CUBE__TMAP_DEFINE(CUBE__TMAP_ELEM_BYTES) CUBE__TMAP_DEFINE(CUBE__TMAP_OOB)
        CUBE__TMAP_DEFINE(CUBE__TMAP_SWIZZLE) CUBE__TMAP_DEFINE(CUBE__TMAP_SHAPE)
        CUBE__TMAP_DEFINE(CUBE__TMAP_STRIDES) CUBE__TMAP_DEFINE(CUBE__TMAP_BOX)
        CUBE__TMAP_DEFINE(CUBE__TMAP_ELEM_STRIDES) CUBE__TMAP_DEFINE(CUBE__TMAP_ELEM)
        CUBE__TMAP_DEFINE(CUBE__TMAP_LOWER) CUBE__TMAP_DEFINE(CUBE__TMAP_UPPER)
        CUBE__TMAP_DEFINE(CUBE__TMAP_WORDS);

/* The guards every checked source starts with, after the backend's prelude
 * (which defines GLOBAL, CUBE__CAS32 and the fixed-width types). The daemon
 * sets CUBE__CHECKED (0 for an unchecked launch) and CUBE__CHECK_REPORT (0
 * under check-mode enforce: out-of-bounds accesses are dropped silently). */
static const char guards[] =
"#ifndef CUBE__CHECKED\n#define CUBE__CHECKED 1\n#endif\n"
"#ifndef CUBE__CHECK_REPORT\n#define CUBE__CHECK_REPORT 1\n#endif\n"
"/* A backend that defines CUBE__BARE builds each entry point whose bounds\n"
" * the host can test (the facts' \"bounds\") a second time, as\n"
" * CUBE__BARE_NAME(entry), for the launches it proved in bounds. */\n"
"#ifndef CUBE__BARE\n#define CUBE__BARE 0\n#endif\n"
"/* A backend that defines CUBE__CAN_LOOP runs an entry point that needs no\n"
" * other unit of its cube (no sync_cube, no SHARED, no tensor map: the front\n"
" * end's CUBE__LOOPED_KERNEL) as one work-item per cube, which walks the\n"
" * cube's units itself between CUBE__UNITS_BEGIN and CUBE__UNITS_END, after\n"
" * CUBE__UNITS_SETUP has declared the cube's shape (its bounds read it). Its\n"
" * guards then keep each site's worst index out of bounds in a cube__acc_t\n"
" * and the cube reports once, after its units: a store on the guards' cold\n"
" * path inside the loop over units would keep that loop from vectorizing.\n"
" * Such an entry takes its arguments with CUBE__LOOPED_PARAMS_HEAD,\n"
" * _ENTRY_BEGIN, _BUFFER, _BUFFER_PTR and _BINDING_BYTES, which such a\n"
" * backend may define apart from the others. */\n"
"#ifndef CUBE__CAN_LOOP\n#define CUBE__CAN_LOOP 0\n#define CUBE__LOOPED_KERNEL CUBE__KERNEL\n"
"#define CUBE__LOOPED_PARAMS_HEAD CUBE__PARAMS_HEAD\n"
"#define CUBE__LOOPED_ENTRY_BEGIN CUBE__ENTRY_BEGIN\n"
"#define CUBE__LOOPED_BUFFER CUBE__BUFFER\n#define CUBE__LOOPED_BUFFER_PTR CUBE__BUFFER_PTR\n"
"#define CUBE__LOOPED_BINDING_BYTES CUBE__BINDING_BYTES\n"
"#define CUBE__UNITS_SETUP\n#define CUBE__UNITS_BEGIN {\n#define CUBE__UNITS_END }\n"
"#define CUBE__UNIT_RETURN return\n#endif\n"
"/* The index a report keeps: 32 bits, an index further out is clamped and\n"
" * flagged (bit 1 of the record's flags). */\n"
"#define CUBE__IDX_MAX 2147483647l\n"
"typedef struct cube__acc_t {\n"
"        uint32_t bad[CUBE__SITES];      /* worst index out of bounds + CUBE__IDX_MAX + 1, or 0 */\n"
"} cube__acc_t;\n"
"typedef struct cube__ctx_t {\n"
"        GLOBAL const char *base[CUBE__NB];\n"
"        uint64_t bytes[CUBE__NB];\n"
"        uint32_t ro[CUBE__NB];\n"
"        GLOBAL uint64_t *rec;\n"
"        GLOBAL char *sink;\n"
"        GLOBAL const char *zero;\n"
"        GLOBAL const uint64_t *info;\n"
"        GLOBAL const uint64_t *tmap;\n"
"        const void *tmd[CUBE__NTM ? CUBE__NTM : 1];\n"
"        uint64_t meta, dyn, words;\n"
"        cube__acc_t *acc;               /* set in a looped entry only */\n"
"} cube__ctx_t;\n"
"static inline void cube__oob(cube__ctx_t *c, uint32_t site, uint64_t i, uint64_t n, uint32_t w)\n"
"{\n#if CUBE__CHECK_REPORT\n"
"        if (CUBE__CAS32((GLOBAL uint32_t *) c->rec, 0u, site + 1u) == 0u) {\n"
"                c->rec[1] = i; c->rec[2] = n; c->rec[3] = w;\n"
"        }\n#endif\n}\n"
"/* A looped entry's guard: no branch, no store outside the unit's registers. */\n"
"static inline void cube__note(cube__ctx_t *c, uint32_t site, int ok, int64_t i)\n"
"{\n#if CUBE__CHECK_REPORT\n"
"        int64_t s = i < -CUBE__IDX_MAX ? -CUBE__IDX_MAX : (i > CUBE__IDX_MAX ? CUBE__IDX_MAX : i);\n"
"        uint32_t key = ok ? 0u : (uint32_t) (s + CUBE__IDX_MAX + 1);\n"
"        c->acc->bad[site] = c->acc->bad[site] > key ? c->acc->bad[site] : key;\n"
"#endif\n}\n"
"/* The cube's report of site, whose accesses are checked against n elements\n"
" * (0: against every binding) and write when w is set. */\n"
"static inline void cube__report(cube__ctx_t *c, uint32_t site, uint64_t n, uint32_t w)\n"
"{\n"
"        int64_t s = (int64_t) c->acc->bad[site] - CUBE__IDX_MAX - 1;\n"
"        cube__oob(c, site, (uint64_t) s, n, w | (s == CUBE__IDX_MAX || s == -CUBE__IDX_MAX ? 2u : 0u));\n"
"}\n"
"static inline uint64_t cube__ix(cube__ctx_t *c, uint32_t site, uint64_t n, int64_t i, int fast)\n"
"{\n#if CUBE__CHECKED\n"
"        if (fast) return (uint64_t) i;\n"
"        int ok = (uint64_t) i < n;\n"
"        if (c->acc) { cube__note(c, site, ok, i); return ok ? (uint64_t) i : 0; }\n"
"        if (!ok) { cube__oob(c, site, (uint64_t) i, n, 0u); return 0; }\n"
"#endif\n        (void) fast;\n        return (uint64_t) i;\n}\n"
"static inline int cube__in(cube__ctx_t *c, GLOBAL const char *q, uint64_t size, int w)\n"
"{\n"
"        for (uint32_t b = 0; b < CUBE__NB; b++) {\n"
"                uint64_t off = (uint64_t) q - (uint64_t) c->base[b];\n"
"                if (off < c->bytes[b] && c->bytes[b] - off >= size && !(w && c->ro[b]))\n"
"                        return 1;\n"
"        }\n"
"        return 0;\n"
"}\n"
"static inline GLOBAL const char *cube__info_at(cube__ctx_t *c, uint64_t from, uint64_t to,\n"
"                                               uint64_t byte, uint64_t size)\n"
"{\n#if CUBE__CHECKED\n"
"        if (byte < from * 8 || byte + size > to * 8) {\n"
"                cube__oob(c, 0u, byte / size, (to * 8 - from * 8) / size, 0u);\n"
"                return c->zero;\n"
"        }\n#endif\n"
"        return (GLOBAL const char *) c->info + byte;\n"
"}\n"
"/* Bounds (the front end's bound_of): the range an index takes over every\n"
" * unit of the cube, from what the cube knows before its units run. A\n"
" * range that may have wrapped in its C type, or that the arithmetic here\n"
" * could overflow, is not ok; a not-ok range proves nothing, and its site\n"
" * keeps its guard. Every value kept within 2^62 so no step overflows. */\n"
"typedef struct cube__iv { int64_t lo, hi; int ok; } cube__iv;\n"
"#define CUBE__IV_LIM 4611686018427387904l\n"
"static inline cube__iv cube__iv_r(int ok, int64_t lo, int64_t hi)\n"
"{\n"
"        cube__iv r;\n"
"        r.ok = ok && lo <= hi && lo >= -CUBE__IV_LIM && hi <= CUBE__IV_LIM;\n"
"        r.lo = r.ok ? lo : 0; r.hi = r.ok ? hi : 0;\n"
"        return r;\n"
"}\n"
"static inline cube__iv cube__iv_k(int64_t v) { return cube__iv_r(1, v, v); }\n"
"static inline cube__iv cube__iv_u(uint64_t v)\n"
"{ int ok = v <= (uint64_t) CUBE__IV_LIM; return cube__iv_r(ok, ok ? (int64_t) v : 0, ok ? (int64_t) v : 0); }\n"
"static inline int64_t cube__iv_min(int64_t a, int64_t b) { return a < b ? a : b; }\n"
"static inline int64_t cube__iv_max(int64_t a, int64_t b) { return a > b ? a : b; }\n"
"static inline cube__iv cube__iv_fit(cube__iv a, int64_t lo, int64_t hi)\n"
"{ return cube__iv_r(a.ok && a.lo >= lo && a.hi <= hi, a.lo, a.hi); }\n"
"static inline cube__iv cube__iv_or(cube__iv a, cube__iv b)\n"
"{ return cube__iv_r(a.ok && b.ok, cube__iv_min(a.lo, b.lo), cube__iv_max(a.hi, b.hi)); }\n"
"static inline cube__iv cube__iv_add(cube__iv a, cube__iv b)\n"
"{ return cube__iv_r(a.ok && b.ok, a.lo + b.lo, a.hi + b.hi); }\n"
"static inline cube__iv cube__iv_sub(cube__iv a, cube__iv b)\n"
"{ return cube__iv_r(a.ok && b.ok, a.lo - b.hi, a.hi - b.lo); }\n"
"static inline cube__iv cube__iv_corners(int ok, int64_t p, int64_t q, int64_t r, int64_t s)\n"
"{ return cube__iv_r(ok, cube__iv_min(cube__iv_min(p, q), cube__iv_min(r, s)),\n"
"                   cube__iv_max(cube__iv_max(p, q), cube__iv_max(r, s))); }\n"
"static inline cube__iv cube__iv_mul(cube__iv a, cube__iv b)\n"
"{\n"
"        int64_t m = 2147483648l;\n"
"        int ok = a.ok && b.ok && a.lo >= -m && a.hi <= m && b.lo >= -m && b.hi <= m;\n"
"        if (!ok) return cube__iv_r(0, 0, 0);\n"
"        return cube__iv_corners(1, a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi);\n"
"}\n"
"static inline cube__iv cube__iv_div(cube__iv a, cube__iv b)\n"
"{\n"
"        if (!a.ok || !b.ok || (b.lo <= 0 && b.hi >= 0)) return cube__iv_r(0, 0, 0);\n"
"        return cube__iv_corners(1, a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi);\n"
"}\n"
"static inline cube__iv cube__iv_rem(cube__iv a, cube__iv b)\n"
"{ return cube__iv_r(a.ok && b.ok && a.lo >= 0 && b.lo > 0, 0, cube__iv_min(a.hi, b.hi - 1)); }\n"
"static inline cube__iv cube__iv_shl(cube__iv a, cube__iv b)\n"
"{\n"
"        if (!a.ok || !b.ok || a.lo < 0 || b.lo < 0 || b.hi > 62 || a.hi > (CUBE__IV_LIM >> b.hi))\n"
"                return cube__iv_r(0, 0, 0);\n"
"        return cube__iv_r(1, a.lo << b.lo, a.hi << b.hi);\n"
"}\n"
"static inline cube__iv cube__iv_shr(cube__iv a, cube__iv b)\n"
"{\n"
"        if (!a.ok || !b.ok || a.lo < 0 || b.lo < 0 || b.hi > 63) return cube__iv_r(0, 0, 0);\n"
"        return cube__iv_r(1, a.lo >> b.hi, a.hi >> b.lo);\n"
"}\n"
"static inline cube__iv cube__iv_and(cube__iv a, cube__iv b)\n"
"{\n"
"        int64_t hi = a.lo >= 0 && b.lo >= 0 ? cube__iv_min(a.hi, b.hi) : (a.lo >= 0 ? a.hi : b.hi);\n"
"        return cube__iv_r(a.ok && b.ok && (a.lo >= 0 || b.lo >= 0), 0, hi);\n"
"}\n"
"/* Whether every index of the range lies in n elements. */\n"
"static inline int cube__iv_in(cube__iv a, uint64_t n)\n"
"{ return a.ok && a.lo >= 0 && (uint64_t) a.hi < n; }\n"
"/* An info word's value for a bound: read as SCALAR or META_U32 would, but\n"
" * a word outside the launch's reads as zero without failing it (the unit\n"
" * that reads it, if any, fails it). */\n"
"static inline GLOBAL const char *cube__info_peek(cube__ctx_t *c, uint64_t from, uint64_t to,\n"
"                                                 uint64_t byte, uint64_t size)\n"
"{\n"
"        if (byte < from * 8 || byte + size > to * 8) return c->zero;\n"
"        return (GLOBAL const char *) c->info + byte;\n"
"}\n"
"#define CUBE__PEEK_SCALAR(type, word, i) (*(GLOBAL const type *) cube__info_peek(cube__ctx, 0, \\\n"
"        cube__ctx->meta, (uint64_t) (word) * 8 + (uint64_t) (i) * sizeof(type), sizeof(type)))\n"
"#define CUBE__PEEK_META(i) (*(GLOBAL const uint32_t *) cube__info_peek(cube__ctx, cube__ctx->meta, \\\n"
"        cube__ctx->dyn, cube__ctx->meta * 8 + (uint64_t) (i) * 4, 4))\n"
"#undef SCALAR\n#undef META_U32\n#undef DYN_U32\n#undef BUFFER_LEN\n"
"#define SCALAR(type, word, i) (*(GLOBAL const type *) cube__info_at(cube__ctx, 0, cube__ctx->meta, \\\n"
"        (uint64_t) (word) * 8 + (uint64_t) (i) * sizeof(type), sizeof(type)))\n"
"#define META_U32(i) (*(GLOBAL const uint32_t *) cube__info_at(cube__ctx, cube__ctx->meta, \\\n"
"        cube__ctx->dyn, cube__ctx->meta * 8 + (uint64_t) (i) * 4, 4))\n"
"#define DYN_U32(i) (*(GLOBAL const uint32_t *) cube__info_at(cube__ctx, cube__ctx->dyn, \\\n"
"        cube__ctx->words, cube__ctx->dyn * 8 + (uint64_t) (i) * 4, 4))\n"
"#define BUFFER_LEN(b) META_U32(b)\n"
"#if CUBE__CHECKED\n"
"#define CUBE__GUARDS(T, S) \\\n"
"static inline T cube__pld_##S(cube__ctx_t *c, uint32_t site, uint32_t k, GLOBAL const T *p, int64_t i, \\\n"
"                              int fast) \\\n"
"{ if (fast) return p[i]; \\\n"
"  uint64_t n = c->bytes[k] / sizeof(T); int ok = (uint64_t) i < n; \\\n"
"  if (c->acc) { cube__note(c, site, ok, i); return ok ? p[i] : (T) 0; } \\\n"
"  if (ok) return p[i]; \\\n"
"  cube__oob(c, site, (uint64_t) i, n, 0u); return (T) 0; } \\\n"
"static inline GLOBAL T *cube__pst_##S(cube__ctx_t *c, uint32_t site, uint32_t k, GLOBAL T *p, int64_t i, \\\n"
"                                     int fast) \\\n"
"{ if (fast) return p + i; \\\n"
"  uint64_t n = c->bytes[k] / sizeof(T); int ok = (uint64_t) i < n && !c->ro[k]; \\\n"
"  if (c->acc) { cube__note(c, site, ok, i); return ok ? p + i : (GLOBAL T *) c->sink; } \\\n"
"  if (ok) return p + i; \\\n"
"  cube__oob(c, site, (uint64_t) i, n, 1u); return (GLOBAL T *) c->sink; } \\\n"
"static inline T cube__ld_##S(cube__ctx_t *c, uint32_t site, GLOBAL const T *p, int64_t i) \\\n"
"{ GLOBAL const T *q = p + i; int ok = cube__in(c, (GLOBAL const char *) q, sizeof(T), 0); \\\n"
"  if (c->acc) { cube__note(c, site, ok, i); return ok ? *q : (T) 0; } \\\n"
"  if (ok) return *q; \\\n"
"  cube__oob(c, site, (uint64_t) i, 0, 0u); return (T) 0; } \\\n"
"static inline GLOBAL T *cube__st_##S(cube__ctx_t *c, uint32_t site, GLOBAL T *p, int64_t i) \\\n"
"{ GLOBAL T *q = p + i; int ok = cube__in(c, (GLOBAL const char *) q, sizeof(T), 1); \\\n"
"  if (c->acc) { cube__note(c, site, ok, i); return ok ? q : (GLOBAL T *) c->sink; } \\\n"
"  if (ok) return q; \\\n"
"  cube__oob(c, site, (uint64_t) i, 0, 1u); return (GLOBAL T *) c->sink; } \\\n"
"static inline T cube__pput_##S(cube__ctx_t *c, uint32_t site, uint32_t k, GLOBAL T *p, int64_t i, \\\n"
"                               int fast, T v) \\\n"
"{ if (fast) { p[i] = v; return v; } \\\n"
"  uint64_t n = c->bytes[k] / sizeof(T); int ok = (uint64_t) i < n && !c->ro[k]; \\\n"
"  if (c->acc) { cube__note(c, site, ok, i); if (ok) p[i] = v; return v; } \\\n"
"  if (ok) p[i] = v; \\\n"
"  else cube__oob(c, site, (uint64_t) i, n, 1u); return v; } \\\n"
"static inline T cube__put_##S(cube__ctx_t *c, uint32_t site, GLOBAL T *p, int64_t i, T v) \\\n"
"{ GLOBAL T *q = p + i; int ok = cube__in(c, (GLOBAL const char *) q, sizeof(T), 1); \\\n"
"  if (c->acc) { cube__note(c, site, ok, i); if (ok) *q = v; return v; } \\\n"
"  if (ok) *q = v; \\\n"
"  else cube__oob(c, site, (uint64_t) i, 0, 1u); return v; }\n"
"#else\n"
"#define CUBE__GUARDS(T, S) \\\n"
"static inline T cube__pld_##S(cube__ctx_t *c, uint32_t site, uint32_t k, GLOBAL const T *p, int64_t i, \\\n"
"                              int fast) \\\n"
"{ (void) c; (void) site; (void) k; (void) fast; return p[i]; } \\\n"
"static inline GLOBAL T *cube__pst_##S(cube__ctx_t *c, uint32_t site, uint32_t k, GLOBAL T *p, int64_t i, \\\n"
"                                     int fast) \\\n"
"{ (void) c; (void) site; (void) k; (void) fast; return p + i; } \\\n"
"static inline T cube__ld_##S(cube__ctx_t *c, uint32_t site, GLOBAL const T *p, int64_t i) \\\n"
"{ (void) c; (void) site; return p[i]; } \\\n"
"static inline GLOBAL T *cube__st_##S(cube__ctx_t *c, uint32_t site, GLOBAL T *p, int64_t i) \\\n"
"{ (void) c; (void) site; return p + i; } \\\n"
"static inline T cube__pput_##S(cube__ctx_t *c, uint32_t site, uint32_t k, GLOBAL T *p, int64_t i, \\\n"
"                               int fast, T v) \\\n"
"{ (void) c; (void) site; (void) k; (void) fast; p[i] = v; return v; } \\\n"
"static inline T cube__put_##S(cube__ctx_t *c, uint32_t site, GLOBAL T *p, int64_t i, T v) \\\n"
"{ (void) c; (void) site; p[i] = v; return v; }\n"
"#endif\n"
"CUBE__GUARDS(char, char)\nCUBE__GUARDS(signed char, schar)\nCUBE__GUARDS(unsigned char, uchar)\n"
"CUBE__GUARDS(short, short)\nCUBE__GUARDS(unsigned short, ushort)\nCUBE__GUARDS(int, int)\n"
"CUBE__GUARDS(unsigned int, uint)\nCUBE__GUARDS(long, long)\nCUBE__GUARDS(unsigned long, ulong)\n"
"CUBE__GUARDS(float, float)\nCUBE__GUARDS(double, double)\n"
"static inline void cube__ctx_init(cube__ctx_t *c, GLOBAL const uint64_t *info, uint64_t words,\n"
"                                  uint64_t meta, uint64_t dyn, uint32_t nb, uint32_t ntm)\n"
"{\n"
"        uint64_t own = words - nb - " "36" " - ntm * " "CUBE__TMAP_WORDS" ";\n"
"        c->info = info;\n"
"        c->tmap = info + own;\n"
"        info += ntm * " "CUBE__TMAP_WORDS" ";\n"

"        c->words = own;\n"
"        c->meta = meta < own ? meta : own;\n"
"        c->dyn = dyn < own && dyn > c->meta ? dyn : (dyn < c->meta ? c->meta : own);\n"
"        c->rec = (GLOBAL uint64_t *) (info + own + nb);\n"
"        c->sink = (GLOBAL char *) (info + own + nb + 4);\n"
"        c->zero = (GLOBAL const char *) (info + own + nb + 20);\n"
"        c->acc = 0;\n"
"        /* Only the slots a sibling entry binds and this one does not: a\n"
"         * loop over every slot made a checked vector add 4x slower on\n"
"         * PoCL, where one from nb folds away. */\n"
"        for (uint32_t b = nb; b < CUBE__NB; b++) {\n"
"                c->bytes[b] = 0;\n"
"                c->ro[b] = 0;\n"
"                c->base[b] = (GLOBAL const char *) 0;\n"
"        }\n"
"}\n"
"/* A binding's length in bytes, the top bit set when it may not be written:\n"
" * the backend passes it as an argument where it can (CUBE__BINDING_BYTES). */\n"
"static inline void cube__bind(cube__ctx_t *c, uint32_t k, GLOBAL const char *base, uint64_t w)\n"
"{\n"
"        c->base[k] = base;\n"
"        c->bytes[k] = w & ~(1ul << 63);\n"
"        c->ro[k] = (uint32_t) (w >> 63);\n"
"}\n"
"#ifndef CUBE__SHARED_PTR\n#define CUBE__SHARED_PTR\n#endif\n"
"#ifndef CUBE__TENSOR_MAP\n#define CUBE__TENSOR_MAP(m)\n#define CUBE__TENSOR_MAP_PTR(m) 0\n#endif\n"
"#ifndef CUBE__TMA_LOAD\n#define CUBE__TMA_LOAD(c, d, m, dst, bytes, n, at) 0\n#endif\n"
"/* tensor_map_load: the cube's units copy the box together, element e by the\n"
" * unit e % CUBE_DIM, each element outside the tensor the map's fill; a\n"
" * swizzled map places 16-byte chunks as the hardware does. */\n"
"static inline uint64_t cube__tm_nan(GLOBAL const uint64_t *d)\n"
"{\n"
"        return d[CUBE__TMAP_ELEM_BYTES] == 2 ? (d[CUBE__TMAP_ELEM] == 0 ? 0x7e00u : 0x7fc0u) :\n"
"               d[CUBE__TMAP_ELEM_BYTES] == 4 ? 0x7fc00000u :\n"
"               0x7ff8000000000000ul;\n"
"}\n"
"/* Per element type: cube__tmp, one element of a load, read where it lies\n"
" * in the tensor (else the fill) and placed as the swizzle puts it; and\n"
" * cube__tmi, an im2col map's load: pixels_per_column pixels of channels_per_pixel\n"
" * elements each, from the pixel at c, w[, h[, d]], n (the coordinates, then\n"
" * the offsets w, h, d). Pixels are taken along W, then H, then D inside the\n"
" * bounding box [lower + offset, size + upper + offset) of each, by the\n"
" * element strides, and on into the next image (N); one outside the tensor\n"
" * reads as the fill. A start outside the box fails the launch. */\n"
"#define CUBE__TMAP_IM2COL(T, S, NANV) \\\n"
"static inline void cube__tmp_##S(cube__ctx_t *c, uint32_t site, CUBE__SHARED_PTR T *dst, \\\n"
"                                 uint64_t len, GLOBAL const T *src, uint64_t held, int in, \\\n"
"                                 uint64_t off, T fill, uint64_t e, uint64_t sw) \\\n"
"{ \\\n"
"        T v = fill; \\\n"
"        if (in && off < held) v = src[off]; \\\n"
"        else if (in) cube__oob(c, site, off, held, 0u); \\\n"
"        uint64_t b = e * sizeof(T); \\\n"
"        b ^= ((b >> 7) & sw) << 4; \\\n"
"        if (b / sizeof(T) < len) dst[b / sizeof(T)] = v; \\\n"
"        else cube__oob(c, site, b / sizeof(T), len, 1u); \\\n"
"} \\\n"
"static inline void cube__tmi_##S(cube__ctx_t *c, uint32_t site, uint32_t k, \\\n"
"                                 GLOBAL const uint64_t *d, CUBE__SHARED_PTR T *dst, \\\n"
"                                 uint64_t len, uint32_t n, const int64_t *at) \\\n"
"{ \\\n"
"        uint64_t r = d[CUBE__TMAP_RANK], ns = r - 2; \\\n"
"        uint64_t chans = d[CUBE__TMAP_BOX], total = chans * d[CUBE__TMAP_BOX + 1]; \\\n"
"        int64_t lo[3], cnt[3], step[3], first = 0, span = 1; \\\n"
"        int ok = r >= 3 && r <= 5 && n == 2 * r - 2 && \\\n"
"                 d[CUBE__TMAP_ELEM_BYTES] == sizeof(T); \\\n"
"        for (uint64_t s = ns; ok && s-- > 0;) { \\\n"
"                int64_t off = at[r + s], hi; \\\n"
"                step[s] = d[CUBE__TMAP_ELEM_STRIDES + 1 + s] ? \\\n"
"                          (int64_t) d[CUBE__TMAP_ELEM_STRIDES + 1 + s] : 1; \\\n"
"                lo[s] = (int64_t) d[CUBE__TMAP_LOWER + s] + off; \\\n"
"                hi = (int64_t) d[CUBE__TMAP_SHAPE + 1 + s] + \\\n"
"                     (int64_t) d[CUBE__TMAP_UPPER + s] + off; \\\n"
"                cnt[s] = hi > lo[s] ? (hi - lo[s] + step[s] - 1) / step[s] : 0; \\\n"
"                int64_t i = at[1 + s] + off - lo[s]; \\\n"
"                ok = cnt[s] > 0 && i >= 0 && i % step[s] == 0 && i / step[s] < cnt[s]; \\\n"
"                first = first * (ok ? cnt[s] : 1) + (ok ? i / step[s] : 0); \\\n"
"                span *= ok ? cnt[s] : 1; \\\n"
"        } \\\n"
"        if (!ok || total > len) { \\\n"
"                if (UNIT_POS == 0) \\\n"
"                        cube__oob(c, site, ok ? total : n, ok ? len : 2 * r - 2, 1u); \\\n"
"                total = 0; \\\n"
"        } \\\n"
"        T fill = d[CUBE__TMAP_OOB] ? (T) (NANV) : (T) 0; \\\n"
"        uint64_t held = c->bytes[k] / sizeof(T); \\\n"
"        GLOBAL const T *src = (GLOBAL const T *) c->base[k]; \\\n"
"        uint64_t sw = d[CUBE__TMAP_SWIZZLE] ? (1u << d[CUBE__TMAP_SWIZZLE]) - 1u : 0u; \\\n"
"        for (uint64_t e = UNIT_POS; e < total; e += CUBE_DIM) { \\\n"
"                int64_t q = first + (int64_t) (e / chans), ch = at[0] + (int64_t) (e % chans); \\\n"
"                int64_t img = at[r - 1] + q / span; \\\n"
"                int in = ch >= 0 && (uint64_t) ch < d[CUBE__TMAP_SHAPE] && img >= 0 && \\\n"
"                         (uint64_t) img < d[CUBE__TMAP_SHAPE + r - 1]; \\\n"
"                uint64_t off = (uint64_t) ch * d[CUBE__TMAP_STRIDES] + \\\n"
"                               (uint64_t) img * d[CUBE__TMAP_STRIDES + r - 1]; \\\n"
"                q %= span; \\\n"
"                for (uint64_t s = 0; s < ns; s++) { \\\n"
"                        int64_t x = lo[s] + (q % cnt[s]) * step[s]; \\\n"
"                        q /= cnt[s]; \\\n"
"                        if (x < 0 || (uint64_t) x >= d[CUBE__TMAP_SHAPE + 1 + s]) in = 0; \\\n"
"                        else off += (uint64_t) x * d[CUBE__TMAP_STRIDES + 1 + s]; \\\n"
"                } \\\n"
"                cube__tmp_##S(c, site, dst, len, src, held, in, off, fill, e, sw); \\\n"
"        } \\\n"
"        sync_cube(); \\\n"
"}\n"
"#define CUBE__TMAP_LOAD(T, S, NANV) \\\n"
"CUBE__TMAP_IM2COL(T, S, NANV) \\\n"
"static inline void cube__tml_##S(cube__ctx_t *c, uint32_t site, uint32_t k, uint32_t m, \\\n"
"                                 CUBE__SHARED_PTR T *dst, uint64_t len, uint32_t n, \\\n"
"                                 int64_t c0, int64_t c1, int64_t c2, int64_t c3, \\\n"
"                                 int64_t c4, int64_t c5, int64_t c6, int64_t c7) \\\n"
"{ \\\n"
"        GLOBAL const uint64_t *d = c->tmap + (uint64_t) m * " "CUBE__TMAP_WORDS" "; \\\n"
"        int64_t at[8] = { c0, c1, c2, c3, c4, c5, c6, c7 }; \\\n"
"        uint64_t cnt[5], total = 1; \\\n"
"        if (d[CUBE__TMAP_FORMAT] == 1) { \\\n"
"                cube__tmi_##S(c, site, k, d, dst, len, n, at); \\\n"
"                return; \\\n"
"        } \\\n"
"        int ok = d[CUBE__TMAP_RANK] == n && d[CUBE__TMAP_FORMAT] == 0 && \\\n"
"                 d[CUBE__TMAP_ELEM_BYTES] == sizeof(T); \\\n"
"        for (uint32_t i = 0; i < 5; i++) { \\\n"
"                cnt[i] = (d[CUBE__TMAP_BOX + i] + d[CUBE__TMAP_ELEM_STRIDES + i] - 1) / \\\n"
"                         d[CUBE__TMAP_ELEM_STRIDES + i]; \\\n"
"                total *= cnt[i]; \\\n"
"        } \\\n"
"        if (!ok || total > len) { \\\n"
"                if (UNIT_POS == 0) \\\n"
"                        cube__oob(c, site, ok ? total : n, \\\n"
"                                  ok ? len : d[CUBE__TMAP_RANK], 1u); \\\n"
"                total = 0; \\\n"
"        } \\\n"
"        if (total && CUBE__TMA_LOAD(c, d, m, dst, total * sizeof(T), n, at)) return; \\\n"
"        T fill = d[CUBE__TMAP_OOB] ? (T) (NANV) : (T) 0; \\\n"
"        uint64_t held = c->bytes[k] / sizeof(T); \\\n"
"        GLOBAL const T *src = (GLOBAL const T *) c->base[k]; \\\n"
"        uint64_t sw = d[CUBE__TMAP_SWIZZLE] ? (1u << d[CUBE__TMAP_SWIZZLE]) - 1u : 0u; \\\n"
"        for (uint64_t e = UNIT_POS; e < total; e += CUBE_DIM) { \\\n"
"                uint64_t r = e, off = 0; \\\n"
"                int in = 1; \\\n"
"                for (uint32_t i = 0; i < 5; i++) { \\\n"
"                        uint64_t step = (r % cnt[i]) * d[CUBE__TMAP_ELEM_STRIDES + i]; \\\n"
"                        int64_t x = at[i] + (int64_t) step; \\\n"
"                        r /= cnt[i]; \\\n"
"                        if (x < 0 || (uint64_t) x >= d[CUBE__TMAP_SHAPE + i]) in = 0; \\\n"
"                        else off += (uint64_t) x * d[CUBE__TMAP_STRIDES + i]; \\\n"
"                } \\\n"
"                cube__tmp_##S(c, site, dst, len, src, held, in, off, fill, e, sw); \\\n"
"        } \\\n"
"        sync_cube(); \\\n"
"}\n"
"CUBE__TMAP_LOAD(char, char, cube__tm_nan(d))\n"
"CUBE__TMAP_LOAD(signed char, schar, cube__tm_nan(d))\n"
"CUBE__TMAP_LOAD(unsigned char, uchar, cube__tm_nan(d))\n"
"CUBE__TMAP_LOAD(short, short, cube__tm_nan(d))\n"
"CUBE__TMAP_LOAD(unsigned short, ushort, cube__tm_nan(d))\n"
"CUBE__TMAP_LOAD(int, int, cube__tm_nan(d))\n"
"CUBE__TMAP_LOAD(unsigned int, uint, cube__tm_nan(d))\n"
"CUBE__TMAP_LOAD(long, long, cube__tm_nan(d))\n"
"CUBE__TMAP_LOAD(unsigned long, ulong, cube__tm_nan(d))\n"
"CUBE__TMAP_LOAD(float, float, NAN)\n"
"CUBE__TMAP_LOAD(double, double, NAN)\n";

/* ---------------------------------------------------------------------------
 * The tree: libclang's cursors with parents, and offsets into the source.
 * ------------------------------------------------------------------------- */

typedef struct sbuf {
        char *p;
        size_t len, cap;
        bool oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...)
{
        va_list ap;
        char *t = NULL;
        int n;

        va_start(ap, fmt);
        n = vasprintf(&t, fmt, ap);
        va_end(ap);
        if (n < 0) {
                b->oom = true;
                return;
        }
        if (b->len + (size_t) n + 1 > b->cap) {
                size_t cap = (b->len + (size_t) n + 1) * 2;
                char *g = realloc(b->p, cap);
                if (!g) {
                        free(t);
                        b->oom = true;
                        return;
                }
                b->p = g;
                b->cap = cap;
        }
        memcpy(b->p + b->len, t, (size_t) n + 1);
        b->len += (size_t) n;
        free(t);
}

typedef struct node {
        CXCursor c;
        enum CXCursorKind kind;
        struct node *parent;
        struct node **kids;
        unsigned n_kids, cap;
        unsigned start, end;            /* byte offsets in the source; end exclusive */
        bool located;                   /* start and end are in the source */
} node;

typedef struct edit {
        unsigned at, cut;               /* replace cut bytes at at */
        int order;                      /* among edits at one offset */
        char *text;
} edit;

/* One entry point of the source, and what its body does with its
 * parameters. */
typedef struct fe_entry {
        node *fn;
        char name[64];
        node **params;
        unsigned n_params;
        bool *moved;                    /* assigned, incremented or its address taken */
        bool *read, *written;
        bool looped;                    /* may run as one work-item per cube (CUBE__CAN_LOOP) */
        sbuf fast;                      /* "&& cube__iv_in(...)" per site it may run unguarded */
        sbuf grid;                      /* the same test in bounds.c's words, for the host */
        bool grid_lost;                 /* a site in fast that grid cannot say */
        unsigned n_fast, n_bounds;      /* sites in fast; bounds tried */
} fe_entry;

/* A variable the kernel declares, found by its cursor's hash: a bound
 * follows an index into the initializer of a variable never assigned. */
typedef struct fe_var {
        unsigned hash;
        node *decl;
        bool moved;                     /* assigned, incremented or its address taken */
} fe_var;

/* A guarded access: "line:col what" for the facts, and what a looped
 * entry's report of it says (put_loop_report): the length its index is
 * checked against, an expression of the context c (NULL: against every
 * binding), and whether it writes. */
typedef struct fe_site {
        char *what;
        char *len;
        bool write;
} fe_site;

typedef struct fe {
        CXTranslationUnit tu;
        CXFile file;
        const char *src;
        size_t len;
        const char *entry;
        node *root;
        edit *edits;
        size_t n_edits, cap_edits;
        char *error;                    /* the first refusal */
        bool oom;
        /* the entry points: every KERNEL function the source does not call */
        struct fe_entry *entries;
        unsigned n_entries;
        fe_site *sites;
        unsigned n_sites, cap_sites;
        fe_var *vars;                   /* sorted by hash once find_moves is done */
        size_t n_vars, cap_vars;
        CXCursor *moves;                /* what find_moves saw moved, until then */
        size_t n_moves, cap_moves;
        unsigned depth;
} fe;

static void line_col(fe *f, unsigned offset, unsigned *ret_line, unsigned *ret_col)
{
        unsigned line = 1, col = 1;

        for (unsigned i = 0; i < offset && i < f->len; i++) {
                if (f->src[i] == '\n') {
                        line++;
                        col = 1;
                } else {
                        col++;
                }
        }
        *ret_line = line;
        *ret_col = col;
}

/* Refuses the source at offset, naming the rule. Only the first counts. */
static void refuse(fe *f, unsigned offset, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void refuse(fe *f, unsigned offset, const char *fmt, ...)
{
        char text[512];
        unsigned line, col;
        va_list ap;

        if (f->error)
                return;
        va_start(ap, fmt);
        vsnprintf(text, sizeof(text), fmt, ap);
        va_end(ap);
        line_col(f, offset, &line, &col);
        char *msg = NULL;
        if (asprintf(&msg, "%s.c:%u:%u: %s (docs/KERNELS.md, \"Checked kernels\")", f->entry, line,
                     col, text) < 0)
                f->oom = true;
        else
                f->error = msg;
}

static bool offset_of(fe *f, CXSourceLocation loc, unsigned *ret)
{
        CXFile file;
        unsigned off;

        clang_getFileLocation(loc, &file, NULL, NULL, &off);
        if (!file || !clang_File_isEqual(file, f->file) || off > f->len)
                return false;
        *ret = off;
        return true;
}

static node *node_new(fe *f, CXCursor c, node *parent)
{
        node *n = calloc(1, sizeof(*n));
        if (!n) {
                f->oom = true;
                return NULL;
        }
        n->c = c;
        n->kind = clang_getCursorKind(c);
        n->parent = parent;
        CXSourceRange r = clang_getCursorExtent(c);
        unsigned a, b;
        if (offset_of(f, clang_getRangeStart(r), &a) && offset_of(f, clang_getRangeEnd(r), &b) &&
            a <= b) {
                n->start = a;
                n->end = b;
                n->located = true;
        }
        return n;
}

static void node_free(node *n)
{
        if (!n)
                return;
        for (unsigned i = 0; i < n->n_kids; i++)
                node_free(n->kids[i]);
        free(n->kids);
        free(n);
}

typedef struct build_ctx {
        fe *f;
        node *parent;
} build_ctx;

static enum CXChildVisitResult build_visit(CXCursor c, CXCursor parent, CXClientData data)
{
        build_ctx *b = data;
        fe *f = b->f;
        (void) parent;

        if (f->oom || f->depth > 512) {
                if (f->depth > 512)
                        refuse(f, b->parent->start, "the source nests deeper than 512 levels");
                return CXChildVisit_Break;
        }
        /* The parse prelude's own declarations are not the user's. */
        if (b->parent == f->root && !clang_Location_isFromMainFile(clang_getCursorLocation(c)))
                return CXChildVisit_Continue;
        node *n = node_new(f, c, b->parent);
        if (!n)
                return CXChildVisit_Break;
        node *p = b->parent;
        if (p->n_kids == p->cap) {
                unsigned cap = p->cap ? p->cap * 2 : 4;
                node **g = realloc(p->kids, cap * sizeof(*g));
                if (!g) {
                        f->oom = true;
                        node_free(n);
                        return CXChildVisit_Break;
                }
                p->kids = g;
                p->cap = cap;
        }
        p->kids[p->n_kids++] = n;
        build_ctx sub = { f, n };
        f->depth++;
        clang_visitChildren(c, build_visit, &sub);
        f->depth--;
        return CXChildVisit_Continue;
}

/* ---------------------------------------------------------------------------
 * Edits
 * ------------------------------------------------------------------------- */

static void add_edit(fe *f, unsigned at, unsigned cut, int order, const char *fmt, ...)
        __attribute__((format(printf, 5, 6)));
static void add_edit(fe *f, unsigned at, unsigned cut, int order, const char *fmt, ...)
{
        va_list ap;
        char *text = NULL;

        va_start(ap, fmt);
        if (vasprintf(&text, fmt, ap) < 0)
                text = NULL;
        va_end(ap);
        if (!text) {
                f->oom = true;
                return;
        }
        if (f->n_edits == f->cap_edits) {
                size_t cap = f->cap_edits ? f->cap_edits * 2 : 64;
                edit *g = realloc(f->edits, cap * sizeof(*g));
                if (!g) {
                        free(text);
                        f->oom = true;
                        return;
                }
                f->edits = g;
                f->cap_edits = cap;
        }
        f->edits[f->n_edits++] = (edit) { at, cut, order, text };
}

static int edit_cmp(const void *a, const void *b)
{
        const edit *x = a, *y = b;

        if (x->at != y->at)
                return x->at < y->at ? -1 : 1;
        if (x->order != y->order)
                return x->order < y->order ? -1 : 1;
        return strcmp(x->text, y->text);
}

/* Applies the edits to the source. A macro argument used twice shows one
 * access twice: identical edits are one; edits that disagree on one byte are
 * a refusal. */
static char *apply_edits(fe *f)
{
        qsort(f->edits, f->n_edits, sizeof(*f->edits), edit_cmp);
        size_t cap = f->len + 1;
        for (size_t i = 0; i < f->n_edits; i++)
                cap += strlen(f->edits[i].text);
        char *out = malloc(cap), *o = out;
        if (!out) {
                f->oom = true;
                return NULL;
        }
        unsigned at = 0;
        for (size_t i = 0; i < f->n_edits; i++) {
                edit *e = &f->edits[i];
                if (i > 0 && e->at == e[-1].at && e->cut == e[-1].cut && e->order == e[-1].order &&
                    strcmp(e->text, e[-1].text) == 0)
                        continue;
                if (e->at < at) {
                        refuse(f, e->at, "this expression is checked in two different ways "
                               "(a macro argument used twice?): write it out");
                        free(out);
                        return NULL;
                }
                memcpy(o, f->src + at, e->at - at);
                o += e->at - at;
                size_t tl = strlen(e->text);
                memcpy(o, e->text, tl);
                o += tl;
                at = e->at + e->cut;
        }
        memcpy(o, f->src + at, f->len - at);
        o += f->len - at;
        *o = '\0';
        return out;
}

/* ---------------------------------------------------------------------------
 * Types
 * ------------------------------------------------------------------------- */

/* The guard suffix for an element type, or NULL when a buffer cannot hold it. */
static const char *elem_suffix(CXType t)
{
        switch (clang_getCanonicalType(t).kind) {
        case CXType_Char_S: return "char";
        case CXType_SChar: return "schar";
        case CXType_Char_U: return "char";
        case CXType_UChar: return "uchar";
        case CXType_Short: return "short";
        case CXType_UShort: return "ushort";
        case CXType_Int: return "int";
        case CXType_UInt: return "uint";
        case CXType_Long: return "long";
        case CXType_ULong: return "ulong";
        case CXType_Float: return "float";
        case CXType_Double: return "double";
        default: return NULL;
        }
}

/* The C spelling of a guard suffix's element type. */
static const char *elem_type_name(const char *sfx)
{
        static const char *const names[][2] = {
                { "char", "char" }, { "schar", "signed char" }, { "uchar", "unsigned char" },
                { "short", "short" }, { "ushort", "unsigned short" }, { "int", "int" },
                { "uint", "unsigned int" }, { "long", "long" }, { "ulong", "unsigned long" },
                { "float", "float" }, { "double", "double" },
        };
        for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
                if (strcmp(names[i][0], sfx) == 0)
                        return names[i][1];
        return sfx;
}

static bool is_pointer(CXType t)
{
        return clang_getCanonicalType(t).kind == CXType_Pointer;
}

static bool is_array(CXType t)
{
        enum CXTypeKind k = clang_getCanonicalType(t).kind;
        return k == CXType_ConstantArray || k == CXType_IncompleteArray ||
               k == CXType_VariableArray || k == CXType_DependentSizedArray;
}

/* Says what is wrong with a type a kernel declares, or NULL: a pointer may
 * point only at numbers, the element types a buffer holds. */
static const char *type_problem(CXType t)
{
        t = clang_getCanonicalType(t);
        if (t.kind == CXType_Pointer) {
                CXType p = clang_getCanonicalType(clang_getPointeeType(t));
                if (p.kind == CXType_Void)
                        return "a void pointer cannot be checked: point at the element type";
                if (p.kind == CXType_FunctionProto || p.kind == CXType_FunctionNoProto)
                        return "function pointers are not allowed";
                if (p.kind == CXType_Pointer)
                        return "a pointer to a pointer cannot be checked";
                if (p.kind == CXType_Record)
                        return "a pointer to a struct or union cannot be checked: a buffer "
                               "holds numbers";
                if (is_array(p))
                        return "a pointer to an array cannot be checked: index the buffer";
                if (!elem_suffix(p))
                        return "a pointer may point only at char, short, int, long (signed or "
                               "unsigned), float or double";
                return NULL;
        }
        if (is_array(t))
                return type_problem(clang_getArrayElementType(t));
        return NULL;
}

/* ---------------------------------------------------------------------------
 * The walk
 * ------------------------------------------------------------------------- */

static node *strip(node *n)
{
        while (n && (n->kind == CXCursor_UnexposedExpr || n->kind == CXCursor_ParenExpr) &&
               n->n_kids == 1)
                n = n->kids[0];
        return n;
}

static node *up(node *n)
{
        node *p = n->parent;
        while (p && (p->kind == CXCursor_UnexposedExpr || p->kind == CXCursor_ParenExpr))
                p = p->parent;
        return p;
}

/* The text of an operator between (or around) a node's operands. */
static void op_text(fe *f, unsigned a, unsigned b, char *buf, size_t cap)
{
        size_t n = 0;

        for (unsigned i = a; i < b && i < f->len && n + 1 < cap; i++)
                if (!isspace((unsigned char) f->src[i]) && f->src[i] != '(' && f->src[i] != ')')
                        buf[n++] = f->src[i];
        buf[n] = '\0';
}

/* For a unary operator: its text ("*", "&", "++", "-", ...) and whether it
 * comes after its operand. */
static void unary_op(fe *f, node *n, char *buf, size_t cap, bool *ret_postfix)
{
        node *o = n->n_kids ? n->kids[0] : NULL;

        buf[0] = '\0';
        *ret_postfix = false;
        if (!o || !o->located || !n->located)
                return;
        if (o->start > n->start) {
                op_text(f, n->start, o->start, buf, cap);
        } else {
                op_text(f, o->end, n->end, buf, cap);
                *ret_postfix = true;
        }
}

static void binary_op(fe *f, node *n, char *buf, size_t cap)
{
        buf[0] = '\0';
        if (n->n_kids == 2 && n->kids[0]->located && n->kids[1]->located)
                op_text(f, n->kids[0]->end, n->kids[1]->start, buf, cap);
}

/* How an expression's value is used: an access needs to know whether it is
 * read, written, or both. */
typedef enum use { USE_READ, USE_WRITE, USE_READ_WRITE, USE_ADDRESS, USE_NONE } use;

/* The expression n's value goes into, past parentheses and implicit
 * conversions, with the node of n's own that it holds in *ret_child. */
static node *user_of(node *n, node **ret_child)
{
        node *child = n, *p = n->parent;

        while (p && (p->kind == CXCursor_UnexposedExpr || p->kind == CXCursor_ParenExpr)) {
                child = p;
                p = p->parent;
        }
        *ret_child = child;
        return p;
}

static use use_of(fe *f, node *n)
{
        node *child, *p = user_of(n, &child);
        char op[8];
        bool postfix;

        if (!p)
                return USE_READ;
        switch (p->kind) {
        case CXCursor_BinaryOperator:
                binary_op(f, p, op, sizeof(op));
                if (strcmp(op, "=") == 0 && p->kids[0] == child)
                        return USE_WRITE;
                return USE_READ;
        case CXCursor_CompoundAssignOperator:
                return p->kids[0] == child ? USE_READ_WRITE : USE_READ;
        case CXCursor_UnaryOperator:
                unary_op(f, p, op, sizeof(op), &postfix);
                if (strcmp(op, "++") == 0 || strcmp(op, "--") == 0)
                        return USE_READ_WRITE;
                if (strcmp(op, "&") == 0)
                        return USE_ADDRESS;
                return USE_READ;
        case CXCursor_UnaryExpr:        /* sizeof, alignof */
                return USE_NONE;
        default:
                return USE_READ;
        }
}

/* The entry point whose definition n is, or NULL. */
static fe_entry *entry_by_fn(fe *f, const node *n)
{
        for (unsigned i = 0; i < f->n_entries; i++)
                if (f->entries[i].fn == n)
                        return &f->entries[i];
        return NULL;
}

/* The entry point n lies in, or NULL (a helper's body, file scope). */
static fe_entry *entry_of(fe *f, node *n)
{
        for (; n && n->parent && n->parent != f->root; n = n->parent)
                ;
        return n ? entry_by_fn(f, n) : NULL;
}

static fe_entry *entry_by_name(fe *f, const char *name)
{
        for (unsigned i = 0; i < f->n_entries; i++)
                if (strcmp(f->entries[i].name, name) == 0)
                        return &f->entries[i];
        return NULL;
}

/* Which parameter of the entry point it lies in ref names: its index, with
 * the entry in *ret_entry, or -1. */
static int param_index(fe *f, node *ref, fe_entry **ret_entry)
{
        fe_entry *e;

        if (!ref || ref->kind != CXCursor_DeclRefExpr || !(e = entry_of(f, ref)))
                return -1;
        CXCursor d = clang_getCursorReferenced(ref->c);
        for (unsigned i = 0; i < e->n_params; i++)
                if (clang_equalCursors(d, e->params[i]->c)) {
                        *ret_entry = e;
                        return (int) i;
                }
        return -1;
}

static unsigned new_site(fe *f, unsigned offset, bool write, const char *len, const char *what)
{
        unsigned line, col;

        if (f->n_sites >= CUBE__FE_MAX_SITES) {
                refuse(f, offset, "more than %u memory accesses in one source",
                       CUBE__FE_MAX_SITES);
                return 0;
        }
        if (f->n_sites == f->cap_sites) {
                unsigned cap = f->cap_sites ? f->cap_sites * 2 : 64;
                fe_site *g = realloc(f->sites, cap * sizeof(*g));
                if (!g) {
                        f->oom = true;
                        return 0;
                }
                f->sites = g;
                f->cap_sites = cap;
        }
        line_col(f, offset, &line, &col);
        char *s = NULL, *l = NULL;
        /* Line and column first, and no file: the facts serve every entry
         * point of the source, and a report names the kernel's own. */
        if (asprintf(&s, "%u:%u %s", line, col, what) < 0 || (len && !(l = strdup(len)))) {
                free(s);
                f->oom = true;
                return 0;
        }
        f->sites[f->n_sites] = (fe_site) { .what = s, .len = l, .write = write };
        return f->n_sites++;
}

/* Finds c after offset a, skipping spaces; returns its offset or -1. */
static long next_char(fe *f, unsigned a, unsigned b, char c)
{
        for (unsigned i = a; i < b && i < f->len; i++) {
                if (f->src[i] == c)
                        return i;
                if (!isspace((unsigned char) f->src[i]))
                        return -1;
        }
        return -1;
}

/* A guarded access's site: through buffer parameter k of entry e, or
 * (k < 0) through a pointer the kernel computed; of elements of type tn.
 * Through a parameter the body never moves, the index is checked against
 * the binding's length; otherwise the address against every binding. */
static unsigned pointer_site(fe *f, node *n, const fe_entry *e, int k, bool write,
                             const char *tn)
{
        char what[128], len[160];

        if (k >= 0) {
                CXString s = clang_getCursorSpelling(e->params[k]->c);
                snprintf(what, sizeof(what), "parameter '%s' (buffer %d)", clang_getCString(s), k);
                clang_disposeString(s);
        } else {
                snprintf(what, sizeof(what), "a pointer");
        }
        snprintf(len, sizeof(len), "c->bytes[%d] / sizeof(%s)", k, tn);
        return new_site(f, n->start, write, k >= 0 && !e->moved[k] ? len : NULL, what);
}

/* ---------------------------------------------------------------------------
 * Bounds: an index the cube can prove in range before its units run
 * ------------------------------------------------------------------------- */

/* The most sites of one entry whose bound the cube evaluates, and the most
 * tried: each is a little arithmetic per cube, and a long source would
 * otherwise pay for thousands. */
#define FE_MAX_FAST_SITES 64
#define FE_MAX_BOUNDS 256
/* The most nodes one bound may read: a chain of variables each twice the
 * one before would otherwise grow without end. */
#define FE_BOUND_BUDGET 96

static fe_var *var_of(fe *f, CXCursor d);

/* A bound written twice: as C for the cube (cube__iv calls), and in the
 * words of bounds.c for the host, which evaluates the test over the whole
 * grid (postfix, the same operations in the same order). */
typedef struct bound_text {
        sbuf c, r;
} bound_text;

static void put_both(bound_text *b, const char *c, const char *r)
{
        put(&b->c, "%s", c);
        put(&b->r, "%s", r);
}

/* An integer type's range, cut to the bounds' own 2^62. */
static bool int_range(CXType t, long long *ret_lo, long long *ret_hi)
{
        const long long lim = 4611686018427387904ll;
        CXType c = clang_getCanonicalType(t);
        bool is_signed;

        switch (c.kind) {
        case CXType_Bool:
        case CXType_Char_U: case CXType_UChar: case CXType_UShort: case CXType_UInt:
        case CXType_ULong: case CXType_ULongLong:
                is_signed = false;
                break;
        case CXType_Char_S: case CXType_SChar: case CXType_Short: case CXType_Int:
        case CXType_Long: case CXType_LongLong:
                is_signed = true;
                break;
        default:
                return false;
        }
        long long bytes = clang_Type_getSizeOf(c);
        if (bytes < 1 || bytes > 8)
                return false;
        if (c.kind == CXType_Bool) {
                *ret_lo = 0;
                *ret_hi = 1;
        } else if (bytes == 8) {
                *ret_lo = is_signed ? -lim : 0;
                *ret_hi = lim;
        } else {
                long long span = 1ll << (bytes * 8);
                *ret_lo = is_signed ? -span / 2 : 0;
                *ret_hi = (is_signed ? span / 2 : span) - 1;
        }
        return true;
}

/* A constant the parser can work out (a literal, sizeof, an enumerator). */
static bool bound_const(node *n, bound_text *b)
{
        CXEvalResult r = clang_Cursor_Evaluate(n->c);
        bool ok = false;

        if (!r)
                return false;
        if (clang_EvalResult_getKind(r) == CXEval_Int) {
                if (clang_EvalResult_isUnsignedInt(r)) {
                        put(&b->c, "cube__iv_u(%lluul)", clang_EvalResult_getAsUnsigned(r));
                        put(&b->r, " u%llu", clang_EvalResult_getAsUnsigned(r));
                        ok = true;
                } else {
                        long long v = clang_EvalResult_getAsLongLong(r);
                        ok = v > -4611686018427387904ll;
                        if (ok) {
                                put(&b->c, "cube__iv_k(%lldl)", v);
                                put(&b->r, " k%lld", v);
                        }
                }
        }
        clang_EvalResult_dispose(r);
        return ok;
}

static bool const_arg(node *call, unsigned i, long long *ret)
{
        if (i >= call->n_kids)
                return false;
        CXEvalResult r = clang_Cursor_Evaluate(call->kids[i]->c);
        bool ok = r && clang_EvalResult_getKind(r) == CXEval_Int;
        if (ok)
                *ret = clang_EvalResult_getAsLongLong(r);
        if (r)
                clang_EvalResult_dispose(r);
        return ok;
}

/* The dialect's positions, as the backend computes them: a unit's position
 * is any of its cube's, the rest are the cube's own values. */
static bool bound_position(node *n, bound_text *b)
{
        static const char xyz[] = "XYZ";
        CXString s = clang_getCursorSpelling(n->c);
        char name[32];
        long long d = 3;

        snprintf(name, sizeof(name), "%s", clang_getCString(s));
        clang_disposeString(s);
        if (strcmp(name, "cube__abs64") != 0 && (!const_arg(n, 1, &d) || d < 0 || d > 3))
                return false;
        const char dims[] = "cube__iv_mul(cube__iv_mul(cube__iv_u(CUBE_DIM_X), "
                            "cube__iv_u(CUBE_DIM_Y)), cube__iv_u(CUBE_DIM_Z))";
        const char dims_r[] = " dim0 dim1 mul dim2 mul";
        char dim[160], unit[320], dim_r[64], unit_r[96], r[256];
        if (d < 3) {
                snprintf(dim, sizeof(dim), "cube__iv_u(CUBE_DIM_%c)", xyz[d]);
                snprintf(unit, sizeof(unit), "cube__iv_r(1, 0, (int64_t) CUBE_DIM_%c - 1)", xyz[d]);
                snprintf(dim_r, sizeof(dim_r), " dim%lld", d);
                snprintf(unit_r, sizeof(unit_r), " unit%lld", d);
        } else {
                snprintf(dim, sizeof(dim), "%s", dims);
                snprintf(unit, sizeof(unit), "cube__iv_or(cube__iv_k(0), cube__iv_sub(%s, "
                         "cube__iv_k(1)))", dims);
                snprintf(dim_r, sizeof(dim_r), "%s", dims_r);
                snprintf(unit_r, sizeof(unit_r), " k0%s k1 sub or", dims_r);
        }
        if (strcmp(name, "cube__unit") == 0) {
                put_both(b, unit, unit_r);
        } else if (strcmp(name, "cube__dim") == 0) {
                put_both(b, dim, dim_r);
        } else if (strcmp(name, "cube__cube") == 0) {
                put(&b->c, d < 3 ? "cube__iv_u(CUBE_POS_%c)" : "cube__iv_u(CUBE_POS)", xyz[d % 3]);
                put(&b->r, " pos%lld", d);
        } else if (strcmp(name, "cube__count") == 0) {
                put(&b->c, d < 3 ? "cube__iv_u(CUBE_COUNT_%c)" : "cube__iv_u(CUBE_COUNT)",
                    xyz[d % 3]);
                put(&b->r, " count%lld", d);
        } else if (strcmp(name, "cube__abs") == 0 && d < 3) {
                put(&b->c, "cube__iv_add(cube__iv_mul(cube__iv_u(CUBE_POS_%c), %s), %s)", xyz[d],
                    dim, unit);
                snprintf(r, sizeof(r), " pos%lld%s mul%s add", d, dim_r, unit_r);
                put(&b->r, "%s", r);
        } else if (strcmp(name, "cube__abs64") == 0) {
                /* (uint64_t) CUBE_POS * CUBE_DIM + UNIT_POS, each 32 bits */
                put(&b->c, "cube__iv_add(cube__iv_mul(cube__iv_u(CUBE_POS), cube__iv_u(CUBE_DIM)), "
                    "cube__iv_fit(%s, 0, 4294967295l))", unit);
                put(&b->r, " pos3 dim mul%s fit0,4294967295 add", unit_r);
        } else if (strcmp(name, "cube__meta") == 0 && d >= 0) {
                put(&b->c, "cube__iv_u(CUBE__PEEK_META(%lld))", d);
                put(&b->r, " meta%lld", d);
        } else {
                return false;
        }
        return true;
}

static bool bound_of(fe *f, const fe_entry *e, node *n, bound_text *b, int *budget);

/* n's value without the range of its own type. */
static bool bound_inner(fe *f, const fe_entry *e, node *n, bound_text *b, int *budget)
{
        char op[8];
        static const struct { const char *op, *fn; } ops[] = {
                { "+", "add" }, { "-", "sub" }, { "*", "mul" }, { "/", "div" }, { "%", "rem" },
                { "<<", "shl" }, { ">>", "shr" }, { "&", "and" },
        };

        switch (n->kind) {
        case CXCursor_IntegerLiteral:
        case CXCursor_CharacterLiteral:
        case CXCursor_UnaryExpr:
                return bound_const(n, b);
        case CXCursor_UnexposedExpr:
        case CXCursor_ParenExpr:
                return n->n_kids == 1 && bound_of(f, e, n->kids[0], b, budget);
        case CXCursor_BinaryOperator:
                /* Only an operator written in the source between its operands:
                 * one a macro's expansion holds cannot be read. */
                if (n->n_kids != 2 || !n->located || !n->kids[0]->located ||
                    !n->kids[1]->located || n->start != n->kids[0]->start ||
                    n->end != n->kids[1]->end)
                        return false;
                binary_op(f, n, op, sizeof(op));
                for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
                        if (strcmp(op, ops[i].op) != 0)
                                continue;
                        put(&b->c, "cube__iv_%s(", ops[i].fn);
                        if (!bound_of(f, e, n->kids[0], b, budget))
                                return false;
                        put(&b->c, ", ");
                        if (!bound_of(f, e, n->kids[1], b, budget))
                                return false;
                        put_both(b, ")", " ");
                        put(&b->r, "%s", ops[i].fn);
                        return true;
                }
                return false;
        case CXCursor_ConditionalOperator:
                if (n->n_kids != 3)
                        return false;
                put(&b->c, "cube__iv_or(");
                if (!bound_of(f, e, n->kids[1], b, budget))
                        return false;
                put(&b->c, ", ");
                if (!bound_of(f, e, n->kids[2], b, budget))
                        return false;
                put_both(b, ")", " or");
                return true;
        case CXCursor_CStyleCastExpr: {
                if (!n->n_kids)
                        return false;
                node *x = n->kids[n->n_kids - 1], *call = strip(x);
                long long w, i, lo, hi;
                CXString s = clang_getCursorSpelling(call->c);
                bool scalar = call->kind == CXCursor_CallExpr &&
                              strcmp(clang_getCString(s), "cube__scalar") == 0;
                clang_disposeString(s);
                if (!scalar)
                        return bound_of(f, e, x, b, budget);
                /* SCALAR(type, word, i): the launch's own word, as the unit reads it */
                CXType t = clang_getCanonicalType(clang_getCursorType(n->c));
                if (!const_arg(call, 1, &w) || !const_arg(call, 2, &i) || w < 0 || i < 0 ||
                    !int_range(t, &lo, &hi))
                        return false;
                CXString ts = clang_getTypeSpelling(t);
                put(&b->c, "cube__iv_%s((%s) CUBE__PEEK_SCALAR(%s, %lld, %lld))",
                    lo < 0 ? "k" : "u", lo < 0 ? "int64_t" : "uint64_t", clang_getCString(ts),
                    w, i);
                clang_disposeString(ts);
                put(&b->r, " scalar%lld%c:%lld:%lld", clang_Type_getSizeOf(t), lo < 0 ? 's' : 'u',
                    w, i);
                return true;
        }
        case CXCursor_CallExpr:
                return bound_position(n, b);
        case CXCursor_DeclRefExpr: {
                CXCursor d = clang_getCursorReferenced(n->c);
                if (d.kind == CXCursor_EnumConstantDecl)
                        return bound_const(n, b);
                if (d.kind == CXCursor_ParmDecl) {
                        /* A scalar parameter of this entry point, which its
                         * head reads once. */
                        for (unsigned i = 0; i < e->n_params; i++) {
                                if (!clang_equalCursors(d, e->params[i]->c))
                                        continue;
                                long long lo, hi;
                                if (e->moved[i] ||
                                    !int_range(clang_getCursorType(d), &lo, &hi))
                                        return false;
                                CXString s = clang_getCursorSpelling(d);
                                put(&b->c, "cube__iv_%s((%s) %s)", lo < 0 ? "k" : "u",
                                    lo < 0 ? "int64_t" : "uint64_t", clang_getCString(s));
                                clang_disposeString(s);
                                /* its word is known once the head is written */
                                put(&b->r, " param%u", i);
                                return true;
                        }
                        return false;
                }
                /* A variable of this entry's own body, never changed after
                 * its initializer. */
                fe_var *v = d.kind == CXCursor_VarDecl ? var_of(f, d) : NULL;
                if (!v || v->moved || entry_of(f, v->decl) != e || !v->decl->n_kids)
                        return false;
                node *init = v->decl->kids[v->decl->n_kids - 1];
                if (clang_Cursor_hasVarDeclGlobalStorage(d) ||
                    !clang_equalCursors(clang_Cursor_getVarDeclInitializer(d), init->c))
                        return false;
                return bound_of(f, e, init, b, budget);
        }
        default:
                return false;
        }
}

/* Writes a cube__iv expression into b: the range of n's value over every
 * unit of the cube, in n's own type, from what the cube knows before its
 * units run. False: n is not an expression a bound can follow. */
static bool bound_of(fe *f, const fe_entry *e, node *n, bound_text *b, int *budget)
{
        long long lo, hi;

        if (!n || --*budget < 0 || !int_range(clang_getCursorType(n->c), &lo, &hi))
                return false;
        put(&b->c, "cube__iv_fit(");
        if (!bound_inner(f, e, n, b, budget))
                return false;
        put(&b->c, ", %lldl, %lldl)", lo, hi);
        put(&b->r, " fit%lld,%lld", lo, hi);
        return true;
}

/* The fast argument of a guard at an access of entry e with this index:
 * "cube__fast" when the cube can check the index's whole range before its
 * units run (the range is added to e's test, against len elements and, for
 * a store, a binding that may be written; len_r is len in bounds.c's
 * words), else "0". */
static const char *fast_arg(fe *f, fe_entry *e, node *index, const char *len, const char *len_r,
                            int k, bool write)
{
        if (!e || e->n_fast >= FE_MAX_FAST_SITES || e->n_bounds >= FE_MAX_BOUNDS)
                return "0";
        e->n_bounds++;
        bound_text b = { { 0 }, { 0 } };
        int budget = FE_BOUND_BUDGET;
        bool ok = index ? bound_of(f, e, index, &b, &budget) :
                          (put_both(&b, "cube__iv_k(0)", " k0"), true);
        if (ok && !b.c.oom && !b.r.oom) {
                put(&e->fast, " && cube__iv_in(%s, %s)", b.c.p, len);
                if (len_r)
                        put(&e->grid, "%s%s", b.r.p, len_r);
                e->grid_lost |= !len_r;
                if (write && k >= 0) {
                        put(&e->fast, " && !cube__ctx->ro[%d]", k);
                        put(&e->grid, " writable%d", k);
                }
                e->n_fast++;
        }
        if (b.c.oom || b.r.oom || e->fast.oom || e->grid.oom)
                f->oom = true;
        free(b.c.p);
        free(b.r.p);
        return ok ? "cube__fast" : "0";
}

/* The bytes of an element of a guard's type (elem_type_name's). */
static long long elem_bytes(const char *tn)
{
        static const struct { const char *name; long long bytes; } sizes[] = {
                { "char", 1 }, { "signed char", 1 }, { "unsigned char", 1 }, { "short", 2 },
                { "unsigned short", 2 }, { "int", 4 }, { "unsigned int", 4 }, { "float", 4 },
                { "long", 8 }, { "unsigned long", 8 }, { "double", 8 },
        };
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
                if (strcmp(sizes[i].name, tn) == 0)
                        return sizes[i].bytes;
        return 0;
}

/* fast_arg for an access through buffer parameter k the body never moves
 * (index NULL: *p), checked against its binding's elements of type tn. */
static const char *binding_fast_arg(fe *f, fe_entry *e, node *index, int k, const char *tn,
                                    bool write)
{
        char len[96], len_r[48];
        long long bytes = elem_bytes(tn);

        snprintf(len, sizeof(len), "cube__ctx->bytes[%d] / sizeof(%s)", k, tn);
        snprintf(len_r, sizeof(len_r), " inbinding%d:%lld", k, bytes);
        return fast_arg(f, e, index, len, bytes ? len_r : NULL, k, write);
}

/* base[index]: a guarded load or store through a pointer, or a checked
 * index into an array. */
static void on_subscript(fe *f, node *n)
{
        if (n->n_kids != 2 || !n->located) {
                refuse(f, n->start, "an array access the checker cannot place");
                return;
        }
        node *a = n->kids[0], *b = n->kids[1];
        node *base = a, *index = b;
        CXType bt = clang_getCursorType(strip(a)->c);
        if (!is_pointer(clang_getCursorType(a->c)) && !is_array(bt)) {
                base = b;       /* index[base] */
                index = a;
        }
        node *sb = strip(base);
        CXType st = clang_getCursorType(sb->c);
        if (!base->located || !index->located || base->end > index->start ||
            f->src[n->end - 1] != ']') {
                refuse(f, n->start, "a memory access written inside a macro cannot be "
                       "checked: write the access out, or pass the index to the macro");
                return;
        }
        long lb = next_char(f, base->end, index->start, '[');
        if (lb < 0) {
                refuse(f, n->start, "a memory access written inside a macro cannot be "
                       "checked: write the access out");
                return;
        }
        unsigned rb = n->end - 1;
        use u = use_of(f, n);

        if (is_array(st)) {
                long long len = clang_getArraySize(clang_getCanonicalType(st));
                if (len < 0) {
                        refuse(f, n->start, "an array without a constant length cannot be "
                               "checked");
                        return;
                }
                char what[128] = "an array", n_text[32];
                if (sb->kind == CXCursor_DeclRefExpr || sb->kind == CXCursor_MemberRefExpr) {
                        CXString s = clang_getCursorSpelling(sb->c);
                        snprintf(what, sizeof(what), "array '%s'", clang_getCString(s));
                        clang_disposeString(s);
                }
                snprintf(n_text, sizeof(n_text), "%lluu", len);
                unsigned site = new_site(f, index->start, false, n_text, what);
                char len_r[40];
                snprintf(len_r, sizeof(len_r), " inside%lld", len);
                const char *fast = fast_arg(f, entry_of(f, n), index, n_text, len_r, -1, false);
                add_edit(f, (unsigned) lb, 1, 0, "[cube__ix(cube__ctx, %uu, %lluu, (", site, len);
                add_edit(f, rb, 1, 0, "), %s)]", fast);
                return;
        }
        if (!is_pointer(st)) {
                refuse(f, n->start, "an access through something that is not a pointer");
                return;
        }
        if (u == USE_ADDRESS || u == USE_NONE)
                return;         /* &p[i] and sizeof touch nothing */
        const char *sfx = elem_suffix(clang_getPointeeType(clang_getCanonicalType(st)));
        if (!sfx) {
                refuse(f, n->start, "an access of an element type a buffer cannot hold");
                return;
        }
        fe_entry *e = NULL;
        int k = param_index(f, sb, &e);
        bool direct = k >= 0 && !e->moved[k];
        bool write = u != USE_READ;
        /* The element type's own pointer: volatile has no meaning through a
         * guard, and const is kept by the compiler's own check of the store. */
        const char *tn = elem_type_name(sfx);
        unsigned site = pointer_site(f, n, e, k, write, tn);
        if (direct) {
                if (u == USE_READ || u == USE_READ_WRITE)
                        e->read[k] = true;
                if (write)
                        e->written[k] = true;
        }
        int ord = -1000 + (int) f->depth;
        const char *fast = direct ? binding_fast_arg(f, e, index, k, tn, write) : "0";
        /* A plain store `B[I] = E` becomes a call that stores or drops:
         * a conditional store the compiler can vectorize, where a store
         * through a chosen pointer cannot be. */
        node *assign = u == USE_WRITE ? up(n) : NULL;
        long eq = -1;
        if (assign && assign->located && assign->n_kids == 2) {
                for (unsigned i = rb + 1; i < assign->kids[1]->start && i < f->len; i++) {
                        if (f->src[i] == '=') {
                                eq = i;
                                break;
                        }
                        if (!isspace((unsigned char) f->src[i]))
                                break;
                }
        }
        if (eq >= 0 && strip(assign->kids[0]) == n) {
                if (direct)
                        add_edit(f, base->start, 0, ord, "cube__pput_%s(cube__ctx, %uu, %du, "
                                 "(GLOBAL %s *) ", sfx, site, k, tn);
                else
                        add_edit(f, base->start, 0, ord, "cube__put_%s(cube__ctx, %uu, "
                                 "(GLOBAL %s *) ", sfx, site, tn);
                add_edit(f, (unsigned) lb, 1, 0, ", (");
                add_edit(f, rb, (unsigned) eq + 1 - rb, 0, direct ? "), %s, (" : "), (", fast);
                add_edit(f, assign->end, 0, 3000 - (int) f->depth, "))");
                return;
        }
        if (!write && direct)
                add_edit(f, base->start, 0, ord, "cube__pld_%s(cube__ctx, %uu, %du, "
                         "(GLOBAL const %s *) ", sfx, site, k, tn);
        else if (!write)
                add_edit(f, base->start, 0, ord, "cube__ld_%s(cube__ctx, %uu, (GLOBAL const %s *) ",
                         sfx, site, tn);
        else if (direct)
                add_edit(f, base->start, 0, ord, "(*cube__pst_%s(cube__ctx, %uu, %du, (GLOBAL %s *) ",
                         sfx, site, k, tn);
        else
                add_edit(f, base->start, 0, ord, "(*cube__st_%s(cube__ctx, %uu, (GLOBAL %s *) ", sfx,
                         site, tn);
        add_edit(f, (unsigned) lb, 1, 0, ", (");
        if (direct)
                add_edit(f, rb, 1, 0, write ? "), %s))" : "), %s)", fast);
        else
                add_edit(f, rb, 1, 0, write ? ")))" : "))");
}

/* *p: a guarded load or store through a pointer. */
static void on_deref(fe *f, node *n)
{
        node *o = n->kids[0], *so = strip(o);
        CXType t = clang_getCursorType(so->c);

        if (!is_pointer(t)) {
                /* *array: index 0 of it */
                if (is_array(t))
                        refuse(f, n->start, "dereferencing an array: index it instead");
                return;
        }
        use u = use_of(f, n);
        if (u == USE_ADDRESS || u == USE_NONE)
                return;
        if (!n->located || !o->located || f->src[n->start] != '*') {
                refuse(f, n->start, "a memory access written inside a macro cannot be "
                       "checked: write the access out");
                return;
        }
        const char *sfx = elem_suffix(clang_getPointeeType(clang_getCanonicalType(t)));
        if (!sfx) {
                refuse(f, n->start, "an access of an element type a buffer cannot hold");
                return;
        }
        fe_entry *e = NULL;
        int k = param_index(f, so, &e);
        bool write = u != USE_READ;
        bool direct = k >= 0 && !e->moved[k];
        const char *tn = elem_type_name(sfx);
        unsigned site = pointer_site(f, n, e, k, write, tn);
        if (direct) {
                if (u != USE_WRITE)
                        e->read[k] = true;
                if (write)
                        e->written[k] = true;
        }
        const char *fast = direct ? binding_fast_arg(f, e, NULL, k, tn, write) : "0";
        if (direct)
                add_edit(f, n->start, 1, 0, write ? "(*cube__pst_%s(cube__ctx, %uu, %du, (GLOBAL %s *) (" :
                         "cube__pld_%s(cube__ctx, %uu, %du, (GLOBAL const %s *) (", sfx, site, k, tn);
        else if (write)
                add_edit(f, n->start, 1, 0, "(*cube__st_%s(cube__ctx, %uu, (GLOBAL %s *) (", sfx, site,
                         tn);
        else
                add_edit(f, n->start, 1, 0, "cube__ld_%s(cube__ctx, %uu, (GLOBAL const %s *) (", sfx,
                         site, tn);
        if (direct)
                add_edit(f, o->end, 0, -2000 - (int) f->depth, write ? "), 0, %s))" : "), 0, %s)",
                         fast);
        else
                add_edit(f, o->end, 0, -2000 - (int) f->depth, write ? "), 0))" : "), 0)");
}

/* (T) e: no integer becomes a pointer or back, no pointer changes its
 * element type, nothing loses const. */
static void on_cast(fe *f, node *n)
{
        CXType to = clang_getCanonicalType(clang_getCursorType(n->c));
        node *o = n->n_kids ? n->kids[n->n_kids - 1] : NULL;
        if (!o)
                return;
        CXType from = clang_getCanonicalType(clang_getCursorType(o->c));

        if (to.kind == CXType_Pointer && from.kind == CXType_Pointer) {
                CXType tp = clang_getPointeeType(to), fp = clang_getPointeeType(from);
                if (clang_getCanonicalType(tp).kind != clang_getCanonicalType(fp).kind ||
                    !elem_suffix(tp))
                        refuse(f, n->start, "a cast from one pointer type to another (type "
                               "punning) cannot be checked");
                else if (clang_isConstQualifiedType(fp) && !clang_isConstQualifiedType(tp))
                        refuse(f, n->start, "casting away const is not allowed: a const buffer "
                               "is read-only");
        } else if (to.kind == CXType_Pointer && from.kind != CXType_Pointer) {
                if (is_array(from))
                        refuse(f, n->start, "a pointer into an array or a variable cannot be "
                               "checked: index the array");
                else
                        refuse(f, n->start, "an integer cast to a pointer cannot be checked");
        } else if (from.kind == CXType_Pointer && to.kind != CXType_Void) {
                refuse(f, n->start, "a pointer cast to an integer is not allowed");
        }
}

/* The names one device's language spells, with the dialect's own. */
static const struct { const char *name, *instead; } foreign[] = {
        { "__global", "GLOBAL" }, { "__local", "SHARED" }, { "__kernel", "KERNEL" },
        { "__constant", "CONSTANT" }, { "__private", "nothing (locals are private)" },
        { "get_global_id", "ABSOLUTE_POS_X/_Y/_Z" },
        { "get_local_id", "UNIT_POS_X/_Y/_Z" }, { "get_group_id", "CUBE_POS_X/_Y/_Z" },
        { "get_local_size", "CUBE_DIM_X/_Y/_Z" }, { "get_num_groups", "CUBE_COUNT_X/_Y/_Z" },
        { "get_global_size", "CUBE_COUNT_X * CUBE_DIM_X" },
        { "get_local_linear_id", "UNIT_POS" }, { "barrier", "sync_cube()" },
        { "mem_fence", "sync_cube()" }, { "__global__", "KERNEL" }, { "__shared__", "SHARED" },
        { "__device__", "nothing (helpers are plain functions)" },
        { "__constant__", "CONSTANT" }, { "threadIdx", "UNIT_POS_X/_Y/_Z" },
        { "blockIdx", "CUBE_POS_X/_Y/_Z" }, { "blockDim", "CUBE_DIM_X/_Y/_Z" },
        { "gridDim", "CUBE_COUNT_X/_Y/_Z" }, { "__syncthreads", "sync_cube()" },
};

/* Whether d is a function the source itself declares (not one the parse
 * declared implicitly at a call, nor one of the dialect's). */
static bool is_source_function(fe *f, CXCursor d)
{
        if (clang_Cursor_isNull(d) || d.kind != CXCursor_FunctionDecl)
                return false;
        CXCursor c = clang_getCanonicalCursor(d);
        for (unsigned i = 0; i < f->root->n_kids; i++)
                if (f->root->kids[i]->kind == CXCursor_FunctionDecl &&
                    clang_equalCursors(clang_getCanonicalCursor(f->root->kids[i]->c), c))
                        return true;
        return false;
}

static enum CXChildVisitResult find_annotation(CXCursor c, CXCursor parent, CXClientData data)
{
        (void) parent;
        if (clang_getCursorKind(c) == CXCursor_AnnotateAttr) {
                CXString s = clang_getCursorSpelling(c);
                if (strcmp(clang_getCString(s), "cube_shared") == 0)
                        *(bool *) data = true;
                clang_disposeString(s);
        }
        return CXChildVisit_Continue;
}

static bool annotated(node *n, const char *what);

static bool is_tensor_map_param(const fe_entry *e, int k)
{
        return e && k >= 0 && annotated(e->params[k], "cube_tensor_map");
}

/* tensor_map_load(map, dst, c0, ...): the box of the entry point's TENSOR_MAP
 * parameter map at coordinates c0 ... (innermost first; an im2col map's
 * offsets after them) loaded into the SHARED array dst, every unit of the
 * cube taking part. It becomes the guard's load, which knows the map's
 * binding and the array's length. */
static void on_tensor_load(fe *f, node *n)
{
        unsigned nc = n->n_kids >= 3 ? n->n_kids - 3 : 0;

        if (!n->located || n->n_kids == 0 || !n->kids[0]->located || f->src[n->end - 1] != ')') {
                refuse(f, n->start, "a tensor_map_load written inside a macro cannot be "
                       "checked: write the call out");
                return;
        }
        if (nc < 1 || nc > 8) {
                refuse(f, n->start, "tensor_map_load takes a TENSOR_MAP parameter, a SHARED "
                       "array and 1 to 5 coordinates (an im2col map's 3 to 5, then its 1 to 3 "
                       "offsets)");
                return;
        }
        node *map = strip(n->kids[1]), *dst = strip(n->kids[2]);
        fe_entry *e = NULL;
        int k = param_index(f, map, &e);
        if (!is_tensor_map_param(e, k) || entry_of(f, n) != e) {
                refuse(f, n->kids[1]->start, "the first argument of tensor_map_load is a "
                       "TENSOR_MAP parameter of the entry point");
                return;
        }
        CXType dt = clang_getCanonicalType(clang_getCursorType(dst->c));
        bool shared = false;
        if (dst->kind == CXCursor_DeclRefExpr && dt.kind == CXType_ConstantArray)
                clang_visitChildren(clang_getCursorReferenced(dst->c), find_annotation, &shared);
        if (!shared) {
                refuse(f, n->kids[2]->start, "the second argument of tensor_map_load is a "
                       "SHARED array");
                return;
        }
        CXType et = clang_getArrayElementType(dt);
        CXType mt = clang_getPointeeType(clang_getCanonicalType(clang_getCursorType(
                e->params[k]->c)));
        const char *sfx = elem_suffix(et);
        CXString mn = clang_getCursorSpelling(e->params[k]->c);
        CXString an = clang_getCursorSpelling(dst->c);
        if (!sfx || clang_Type_getSizeOf(et) != clang_Type_getSizeOf(mt)) {
                refuse(f, n->kids[2]->start, "array '%s' of tensor_map_load holds %lld-byte "
                       "elements, and tensor map '%s' %lld-byte ones", clang_getCString(an),
                       clang_Type_getSizeOf(et), clang_getCString(mn), clang_Type_getSizeOf(mt));
        } else {
                unsigned m = 0;
                for (int i = 0; i < k; i++)
                        m += is_tensor_map_param(e, i);
                char what[160];
                snprintf(what, sizeof(what), "tensor_map_load of '%s' into array '%s'",
                         clang_getCString(mn), clang_getCString(an));
                unsigned site = new_site(f, n->start, true, NULL, what);
                add_edit(f, n->kids[0]->start, n->kids[3]->start - n->kids[0]->start, 0,
                         "cube__tml_%s(cube__ctx, %uu, %du, %uu, %s, %lluu, %uu, ", sfx, site, k,
                         m, clang_getCString(an), clang_getArraySize(dt), nc);
                add_edit(f, n->end - 1, 0, 4000, "%s",
                         &", 0, 0, 0, 0, 0, 0, 0, 0"[3 * nc]);
        }
        clang_disposeString(mn);
        clang_disposeString(an);
}

/* A call: of a function of the source, it passes the check context on; of
 * anything else, it may not hand over a pointer. */
static void on_call(fe *f, node *n)
{
        CXCursor d = clang_getCursorReferenced(n->c);
        CXString name = clang_getCursorSpelling(n->c);
        const char *s = clang_getCString(name);
        bool ours = is_source_function(f, d);

        if (!ours && strcmp(s, "tensor_map_load") == 0) {
                clang_disposeString(name);
                on_tensor_load(f, n);
                return;
        }
        if (!ours) {
                if (d.kind != CXCursor_FunctionDecl && !clang_Cursor_isNull(d) &&
                    d.kind != CXCursor_NoDeclFound) {
                        refuse(f, n->start, "a call through something that is not a function");
                } else {
                        for (unsigned i = 1; i < n->n_kids; i++)
                                if (is_pointer(clang_getCursorType(n->kids[i]->c)) ||
                                    is_array(clang_getCursorType(strip(n->kids[i])->c))) {
                                        refuse(f, n->kids[i]->start, "'%s' is not a function of "
                                               "the source or the dialect, and a pointer cannot "
                                               "be handed to it unchecked", s);
                                        break;
                                }
                }
                clang_disposeString(name);
                return;
        }
        clang_disposeString(name);
        if (!n->located || n->n_kids == 0 || !n->kids[0]->located) {
                refuse(f, n->start, "a call of a function of the source written inside a macro "
                       "cannot be checked: write the call out");
                return;
        }
        long lp = next_char(f, n->kids[0]->end, n->end, '(');
        node *callee = strip(n->kids[0]);
        if (lp < 0 || !callee->located || callee->kind != CXCursor_DeclRefExpr) {
                refuse(f, n->start, "a call the checker cannot place");
                return;
        }
        for (unsigned i = 0; i < f->n_entries; i++)
                if (clang_equalCursors(clang_getCanonicalCursor(d),
                                       clang_getCanonicalCursor(f->entries[i].fn->c))) {
                        refuse(f, n->start, "the entry point '%s' cannot be called",
                               f->entries[i].name);
                        return;
                }
        /* The source's functions get names of their own: a helper named
         * like a device builtin (dot, clamp, mix) would clash with it. */
        add_edit(f, callee->start, 0, -4500, "cube__u_");
        add_edit(f, (unsigned) lp + 1, 0, -5000, n->n_kids > 1 ? "cube__ctx, " : "cube__ctx");
}

/* A function of the source other than the entry point: it takes the check
 * context first. */
static void on_function(fe *f, node *n)
{
        CXType t = clang_getCursorType(n->c);
        const char *p;

        if (!n->located) {
                refuse(f, n->start, "a function declared inside a macro cannot be checked");
                return;
        }
        /* The '(' after the name. */
        CXSourceLocation loc = clang_getCursorLocation(n->c);
        unsigned at;
        if (!offset_of(f, loc, &at)) {
                refuse(f, n->start, "a function declared inside a macro cannot be checked");
                return;
        }
        CXString name = clang_getCursorSpelling(n->c);
        add_edit(f, at, 0, -4500, "cube__u_");
        at += (unsigned) strlen(clang_getCString(name));
        clang_disposeString(name);
        long lp = next_char(f, at, n->end, '(');
        if (lp < 0) {
                refuse(f, n->start, "a function the checker cannot place");
                return;
        }
        bool none = clang_getNumArgTypes(t) == 0;
        if (none) {
                /* f(void) or f() */
                p = f->src + lp + 1;
                while (isspace((unsigned char) *p))
                        p++;
                if (strncmp(p, "void", 4) == 0) {
                        add_edit(f, (unsigned) (p - f->src), 4, 0, "cube__ctx_t *cube__ctx");
                        return;
                }
        }
        add_edit(f, (unsigned) lp + 1, 0, -5000, none ? "cube__ctx_t *cube__ctx" :
                 "cube__ctx_t *cube__ctx, ");
}

static bool annotated(node *n, const char *what)
{
        for (unsigned i = 0; i < n->n_kids; i++)
                if (n->kids[i]->kind == CXCursor_AnnotateAttr) {
                        CXString s = clang_getCursorSpelling(n->kids[i]->c);
                        bool yes = strcmp(clang_getCString(s), what) == 0;
                        clang_disposeString(s);
                        if (yes)
                                return true;
                }
        return false;
}

static void check_decl_type(fe *f, node *n)
{
        const char *why = type_problem(clang_getCursorType(n->c));
        if (why)
                refuse(f, n->start, "%s", why);
        if (n->kind == CXCursor_FieldDecl && is_pointer(clang_getCursorType(n->c)))
                refuse(f, n->start, "a struct or union may not hold a pointer");
}

static void note_var(fe *f, node *n)
{
        if (f->n_vars == f->cap_vars) {
                size_t cap = f->cap_vars ? f->cap_vars * 2 : 64;
                fe_var *v = realloc(f->vars, cap * sizeof(*v));
                if (!v) {
                        f->oom = true;
                        return;
                }
                f->vars = v;
                f->cap_vars = cap;
        }
        f->vars[f->n_vars++] = (fe_var) { .hash = clang_hashCursor(n->c), .decl = n };
}

static void note_move(fe *f, CXCursor d)
{
        if (f->n_moves == f->cap_moves) {
                size_t cap = f->cap_moves ? f->cap_moves * 2 : 64;
                CXCursor *m = realloc(f->moves, cap * sizeof(*m));
                if (!m) {
                        f->oom = true;
                        return;
                }
                f->moves = m;
                f->cap_moves = cap;
        }
        f->moves[f->n_moves++] = d;
}

/* Whether the variable ref names may change there. Anything but a read
 * the source's own text shows plainly counts: an operator inside a
 * macro's expansion cannot be read, and a variable a bound took for fixed
 * but that moved would let an index out of bounds run unguarded. */
static bool may_move(fe *f, node *ref)
{
        node *child, *p = user_of(ref, &child);
        char op[8];
        bool postfix;

        if (!p)
                return false;
        switch (p->kind) {
        case CXCursor_CompoundAssignOperator:
                return p->kids[0] == child;
        case CXCursor_BinaryOperator: {
                /* An assignment a macro spells reads as the text between its
                 * arguments ("SET(j, 5)": ","), which is no operator. */
                static const char *const reads[] = {
                        "+", "-", "*", "/", "%", "<<", ">>", "&", "|", "^", "<", ">", "<=",
                        ">=", "==", "!=", "&&", "||",
                };
                if (p->n_kids != 2)
                        return true;
                if (p->kids[0] != child)
                        return false;
                binary_op(f, p, op, sizeof(op));
                for (size_t i = 0; i < sizeof(reads) / sizeof(reads[0]); i++)
                        if (strcmp(op, reads[i]) == 0)
                                return false;
                return true;
        }
        case CXCursor_UnaryOperator:
                unary_op(f, p, op, sizeof(op), &postfix);
                return strcmp(op, "-") != 0 && strcmp(op, "+") != 0 && strcmp(op, "~") != 0 &&
                       strcmp(op, "!") != 0 && strcmp(op, "*") != 0;
        default:
                return false;
        }
}

static int var_cmp(const void *a, const void *b)
{
        unsigned x = ((const fe_var *) a)->hash, y = ((const fe_var *) b)->hash;
        return x < y ? -1 : x > y;
}

static fe_var *var_of(fe *f, CXCursor d)
{
        unsigned h = clang_hashCursor(d);
        size_t lo = 0, hi = f->n_vars;

        while (lo < hi) {
                size_t mid = (lo + hi) / 2;
                if (f->vars[mid].hash < h)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        for (; lo < f->n_vars && f->vars[lo].hash == h; lo++)
                if (clang_equalCursors(f->vars[lo].decl->c, d))
                        return &f->vars[lo];
        return NULL;
}

/* After find_moves: the variables in hash order, each marked if it moved. */
static void index_vars(fe *f)
{
        if (f->n_vars)
                qsort(f->vars, f->n_vars, sizeof(*f->vars), var_cmp);
        for (size_t i = 0; i < f->n_moves; i++) {
                fe_var *v = var_of(f, f->moves[i]);
                if (v)
                        v->moved = true;
        }
}

/* Marks the entry points' parameters that their bodies move: a moved
 * parameter no longer points at its binding's start, so its accesses get
 * the general guard. */
static void find_moves(fe *f, node *n)
{
        for (unsigned i = 0; i < n->n_kids; i++)
                find_moves(f, n->kids[i]);
        if (n->kind == CXCursor_VarDecl)
                note_var(f, n);
        if (n->kind != CXCursor_DeclRefExpr)
                return;
        fe_entry *e = NULL;
        int k = param_index(f, n, &e);
        if (k < 0) {
                CXCursor d = clang_getCursorReferenced(n->c);
                if (d.kind == CXCursor_VarDecl && may_move(f, n))
                        note_move(f, d);
                return;
        }
        use u = use_of(f, n);
        if (u == USE_WRITE || u == USE_READ_WRITE || u == USE_ADDRESS || may_move(f, n))
                e->moved[k] = true;
        /* Handed on as a pointer value (to a variable, a helper, arithmetic):
         * what happens there is not this parameter's direct access. */
        node *p = up(n);
        if (p && p->kind != CXCursor_ArraySubscriptExpr &&
            !(p->kind == CXCursor_UnaryOperator && f->src[p->start] == '*')) {
                e->read[k] = true;
                if (!clang_isConstQualifiedType(clang_getPointeeType(
                            clang_getCanonicalType(clang_getCursorType(e->params[k]->c)))))
                        e->written[k] = true;
        }
}

/* Every pointer of a checked kernel points into a buffer, so a pointer
 * declared without GLOBAL gets it: `const float *row = a + i * n` is the
 * same on every device (OpenCL C has no generic address space to default
 * to). */
static void add_global(fe *f, node *n)
{
        if (!n->located || !is_pointer(clang_getCursorType(n->c)) || entry_by_fn(f, n) ||
            (n->kind == CXCursor_ParmDecl && entry_by_fn(f, n->parent)))
                return;
        const char *p = f->src + n->start;
        if (strncmp(p, "GLOBAL", 6) == 0)
                return;
        /* GLOBAL expands to nothing in the parse, so a declaration may start
         * just after one. */
        const char *q = p;
        while (q > f->src && isspace((unsigned char) q[-1]))
                q--;
        if (q - f->src >= 6 && strncmp(q - 6, "GLOBAL", 6) == 0)
                return;
        /* Only where the declaration's text is the user's own words. */
        if (!isalpha((unsigned char) *p) && *p != '_')
                return;
        for (unsigned i = n->start; i < n->end; i++)
                if (strncmp(f->src + i, "GLOBAL", 6) == 0)
                        return;
        add_edit(f, n->start, 0, -3000, "GLOBAL ");
}

static void walk(fe *f, node *n)
{
        char op[8];
        bool postfix;

        if (f->error || f->oom)
                return;
        switch (n->kind) {
        case CXCursor_FunctionDecl:
                check_decl_type(f, n);
                if (!entry_by_fn(f, n))
                        on_function(f, n);
                break;
        case CXCursor_VarDecl:
        case CXCursor_ParmDecl:
        case CXCursor_FieldDecl:
        case CXCursor_TypedefDecl:
                check_decl_type(f, n);
                if (n->kind == CXCursor_VarDecl || n->kind == CXCursor_ParmDecl)
                        add_global(f, n);
                if (n->kind == CXCursor_ParmDecl && !entry_by_fn(f, n->parent) &&
                    annotated(n, "cube_tensor_map"))
                        refuse(f, n->start, "TENSOR_MAP is for the entry point's parameters "
                               "only");
                if (n->kind == CXCursor_ParmDecl && !entry_by_fn(f, n->parent)) {
                        CXString s = clang_getCursorSpelling(n->c);
                        if (strcmp(clang_getCString(s), "cube__info_param") == 0)
                                refuse(f, n->start, "INFO is the entry point's last parameter "
                                       "only");
                        clang_disposeString(s);
                }
                if (n->kind == CXCursor_VarDecl && annotated(n, "cube_shared") &&
                    !entry_of(f, n))
                        refuse(f, n->start, "SHARED belongs in the entry point's own body");
                break;
        case CXCursor_AsmStmt:
        case CXCursor_MSAsmStmt:
                refuse(f, n->start, "inline assembly is not allowed");
                return;
        case CXCursor_CStyleCastExpr:
                on_cast(f, n);
                if (n->located && f->src[n->start] == '(' &&
                    is_pointer(clang_getCursorType(n->c))) {
                        unsigned close = n->start;
                        while (close < n->end && f->src[close] != ')')
                                close++;
                        bool has = false;
                        for (unsigned i = n->start; i < close; i++)
                                has |= strncmp(f->src + i, "GLOBAL", 6) == 0;
                        if (!has)
                                add_edit(f, n->start + 1, 0, -3000, "GLOBAL ");
                }
                break;
        case CXCursor_ArraySubscriptExpr:
                on_subscript(f, n);
                break;
        case CXCursor_UnaryOperator:
                unary_op(f, n, op, sizeof(op), &postfix);
                if (strcmp(op, "*") == 0) {
                        on_deref(f, n);
                } else if (strcmp(op, "&") == 0) {
                        node *o = strip(n->kids[0]);
                        bool ok = o->kind == CXCursor_ArraySubscriptExpr &&
                                  is_pointer(clang_getCursorType(strip(o->kids[0])->c));
                        if (o->kind == CXCursor_UnaryOperator && f->src[o->start] == '*')
                                ok = true;
                        if (!ok)
                                refuse(f, n->start, "a pointer into a variable or an array "
                                       "cannot be checked: only buffer elements have "
                                       "addresses");
                }
                break;
        case CXCursor_DeclRefExpr:
        case CXCursor_MemberRefExpr: {
                CXType t = clang_getCursorType(n->c);
                if (is_array(t)) {
                        node *p = up(n);
                        bool ok = p && ((p->kind == CXCursor_ArraySubscriptExpr) ||
                                        p->kind == CXCursor_UnaryExpr ||
                                        p->kind == CXCursor_MemberRefExpr);
                        /* tensor_map_load's destination: on_tensor_load checks it. */
                        if (p && p->kind == CXCursor_CallExpr && p->n_kids > 2 &&
                            strip(p->kids[2]) == n) {
                                CXString cs = clang_getCursorSpelling(p->c);
                                ok |= strcmp(clang_getCString(cs), "tensor_map_load") == 0;
                                clang_disposeString(cs);
                        }
                        if (!ok)
                                refuse(f, n->start, "an array used as a pointer cannot be "
                                       "checked: index it where it is declared");
                }
                CXCursor d = clang_getCursorReferenced(n->c);
                if (d.kind == CXCursor_FunctionDecl && n->kind == CXCursor_DeclRefExpr) {
                        node *p = up(n);
                        if (!p || p->kind != CXCursor_CallExpr || strip(p->kids[0]) != n)
                                refuse(f, n->start, "a function used as a value (a function "
                                       "pointer) is not allowed");
                }
                break;
        }
        case CXCursor_CallExpr:
                on_call(f, n);
                break;
        case CXCursor_ReturnStmt: {
                /* A unit of a looped entry that returns goes on to the next. */
                fe_entry *e = entry_of(f, n);
                if (e && e->looped)
                        add_edit(f, n->start, 6, 0, "CUBE__UNIT_RETURN");
                break;
        }
        default:
                break;
        }
        f->depth++;
        for (unsigned i = 0; i < n->n_kids && !f->error; i++)
                walk(f, n->kids[i]);
        f->depth--;
}

/* ---------------------------------------------------------------------------
 * Tokens: reserved names and another language's spellings
 * ------------------------------------------------------------------------- */

static void check_tokens(fe *f)
{
        CXSourceRange all = clang_getRange(clang_getLocationForOffset(f->tu, f->file, 0),
                                           clang_getLocationForOffset(f->tu, f->file,
                                                                      (unsigned) f->len));
        CXToken *toks = NULL;
        unsigned n = 0;

        clang_tokenize(f->tu, all, &toks, &n);
        for (unsigned i = 0; i < n && !f->error; i++) {
                CXTokenKind k = clang_getTokenKind(toks[i]);
                if (k != CXToken_Identifier && k != CXToken_Keyword)
                        continue;
                CXString s = clang_getTokenSpelling(f->tu, toks[i]);
                const char *t = clang_getCString(s);
                unsigned off = 0;
                offset_of(f, clang_getTokenLocation(f->tu, toks[i]), &off);
                if (strncasecmp(t, "cube__", 6) == 0 || strcmp(t, "cube__info_param") == 0)
                        refuse(f, off, "'%s': names beginning with cube__ are reserved", t);
                /* Builtins count only where they are called: a variable may be
                 * named barrier. */
                bool called = false;
                if (i + 1 < n && clang_getTokenKind(toks[i + 1]) == CXToken_Punctuation) {
                        CXString ps = clang_getTokenSpelling(f->tu, toks[i + 1]);
                        called = strcmp(clang_getCString(ps), "(") == 0;
                        clang_disposeString(ps);
                }
                bool keyword = t[0] == '_' || strncmp(t, "threadIdx", 9) == 0 ||
                               strncmp(t, "blockIdx", 8) == 0 || strncmp(t, "blockDim", 8) == 0 ||
                               strncmp(t, "gridDim", 7) == 0;
                for (size_t j = 0; j < sizeof(foreign) / sizeof(foreign[0]) && !f->error; j++)
                        if (strcmp(t, foreign[j].name) == 0 && (keyword || called))
                                refuse(f, off, "'%s' belongs to one device's language; the "
                                       "dialect says %s", t, foreign[j].instead);
                /* The compiler's own names: the parse's compiler defines
                 * them for its target, each device's compiler for its own
                 * (__STDC_VERSION__ is 201112 here and 199901 on PoCL,
                 * __func__ names the entry as the backend renames it), so a
                 * bound read from one would not be the index that runs. */
                if (t[0] == '_' && t[1] == '_' && strcmp(t, "__VA_ARGS__") != 0)
                        refuse(f, off, "'%s': names beginning with __ are the compiler's own, "
                               "and need not mean where the kernel runs what they mean where "
                               "it is checked; write the value out", t);
                clang_disposeString(s);
        }
        clang_disposeTokens(f->tu, toks, n);
}

/* ---------------------------------------------------------------------------
 * The entry point
 * ------------------------------------------------------------------------- */

static const char *scalar_group(CXType t, cube__scalar_group *ret)
{
        switch (clang_getCanonicalType(t).kind) {
        case CXType_Float: *ret = CUBE__SCALAR_F32; return "float";
        case CXType_Double: *ret = CUBE__SCALAR_F64; return "double";
        case CXType_Int: *ret = CUBE__SCALAR_I32; return "int32_t";
        case CXType_Long: *ret = CUBE__SCALAR_I64; return "int64_t";
        case CXType_UInt: *ret = CUBE__SCALAR_U32; return "uint32_t";
        case CXType_ULong: *ret = CUBE__SCALAR_U64; return "uint64_t";
        default: return NULL;
        }
}

/* The functions called anywhere in the source (their canonical cursors),
 * in a growing array: a call missed would make its KERNEL callee an entry. */
typedef struct called_set {
        CXCursor *v;
        size_t n, cap;
} called_set;

static void find_called(fe *f, node *n, called_set *set)
{
        for (unsigned i = 0; i < n->n_kids && !f->oom; i++)
                find_called(f, n->kids[i], set);
        if (n->kind != CXCursor_CallExpr || f->oom)
                return;
        CXCursor d = clang_getCursorReferenced(n->c);
        if (clang_Cursor_isNull(d))
                return;
        if (set->n == set->cap) {
                size_t cap = set->cap ? set->cap * 2 : 256;
                CXCursor *v = realloc(set->v, cap * sizeof(*v));
                if (!v) {
                        f->oom = true;
                        return;
                }
                set->v = v;
                set->cap = cap;
        }
        set->v[set->n++] = clang_getCanonicalCursor(d);
}

/* Whether function n (a helper when helper is set) keeps its cube's units
 * from running one after another in a loop: a barrier, a tensor map's load
 * (the units copy together), SHARED memory; a helper that reads the unit's
 * position or the cube's shape (only the entry's own body has the loop's);
 * a return the rewrite cannot place. */
static bool blocks_loop(fe *f, node *n, bool helper)
{
        if (n->kind == CXCursor_CallExpr) {
                CXString s = clang_getCursorSpelling(n->c);
                const char *name = clang_getCString(s);
                bool blocks = strcmp(name, "cube__sync") == 0 ||
                              strcmp(name, "tensor_map_load") == 0 ||
                              (helper && (strcmp(name, "cube__unit") == 0 ||
                                          strcmp(name, "cube__dim") == 0 ||
                                          strncmp(name, "cube__abs", 9) == 0));
                clang_disposeString(s);
                if (blocks)
                        return true;
        }
        if (n->kind == CXCursor_VarDecl && annotated(n, "cube_shared"))
                return true;
        if (n->kind == CXCursor_ReturnStmt && !helper &&
            (!n->located || n->end - n->start < 6 || strncmp(f->src + n->start, "return", 6) != 0))
                return true;
        for (unsigned i = 0; i < n->n_kids; i++)
                if (blocks_loop(f, n->kids[i], helper))
                        return true;
        return false;
}

/* Marks the entry points whose cubes may run as one work-item each, looping
 * over their units (CUBE__CAN_LOOP): neither they nor any function of the
 * source they reach needs another unit of the cube. */
static void find_looped(fe *f)
{
        for (unsigned i = 0; i < f->n_entries && !f->oom; i++) {
                fe_entry *e = &f->entries[i];
                node **todo = calloc(f->root->n_kids + 1, sizeof(*todo));
                bool *seen = calloc(f->root->n_kids + 1, sizeof(*seen));
                unsigned n_todo = 0;
                bool blocked = false;

                if (!todo || !seen) {
                        f->oom = true;
                        free(todo);
                        free(seen);
                        return;
                }
                todo[n_todo++] = e->fn;
                while (n_todo > 0 && !blocked && !f->oom) {
                        node *fn = todo[--n_todo];
                        called_set called = { 0 };
                        blocked = blocks_loop(f, fn, fn != e->fn);
                        find_called(f, fn, &called);
                        for (unsigned j = 0; j < f->root->n_kids && !blocked; j++) {
                                node *g = f->root->kids[j];
                                if (seen[j] || g->kind != CXCursor_FunctionDecl ||
                                    !clang_isCursorDefinition(g->c))
                                        continue;
                                for (size_t c = 0; c < called.n; c++)
                                        if (clang_equalCursors(called.v[c],
                                                               clang_getCanonicalCursor(g->c))) {
                                                seen[j] = true;
                                                todo[n_todo++] = g;
                                                break;
                                        }
                        }
                        free(called.v);
                }
                e->looped = !blocked && !f->oom;
                free(todo);
                free(seen);
        }
}

/* The entry points: every KERNEL function the source defines and does not
 * call (a KERNEL function it calls is a helper), and the one asked for
 * whatever it is. One build serves them all, each by its own name. */
static bool find_entries(fe *f)
{
        called_set called = { 0 };

        f->entries = calloc(f->root->n_kids + 1, sizeof(*f->entries));
        if (f->entries)
                find_called(f, f->root, &called);
        if (!f->entries || f->oom) {
                free(called.v);
                f->oom = true;
                return false;
        }
        for (unsigned i = 0; i < f->root->n_kids; i++) {
                node *n = f->root->kids[i];
                if (n->kind != CXCursor_FunctionDecl || !clang_isCursorDefinition(n->c))
                        continue;
                CXString s = clang_getCursorSpelling(n->c);
                const char *name = clang_getCString(s);
                bool asked = strcmp(name, f->entry) == 0, is_called = false;
                for (size_t j = 0; j < called.n && !is_called; j++)
                        is_called = clang_equalCursors(called.v[j], clang_getCanonicalCursor(n->c));
                if (asked || (annotated(n, "cube_kernel") && !is_called && strlen(name) < 64)) {
                        fe_entry *e = &f->entries[f->n_entries++];
                        e->fn = n;
                        snprintf(e->name, sizeof(e->name), "%s", name);
                }
                clang_disposeString(s);
        }
        free(called.v);
        return true;
}

/* Takes the parameters of entry e, with room for what the body does with
 * each. */
static bool entry_params(fe *f, fe_entry *e)
{
        for (unsigned i = 0; i < e->fn->n_kids; i++)
                if (e->fn->kids[i]->kind == CXCursor_ParmDecl)
                        e->n_params++;
        if (e->n_params > CUBE__FE_MAX_PARAMS) {
                refuse(f, e->fn->start, "more than %u parameters", CUBE__FE_MAX_PARAMS);
                return false;
        }
        e->params = calloc(e->n_params + 1, sizeof(*e->params));
        e->moved = calloc(e->n_params + 1, sizeof(bool));
        e->read = calloc(e->n_params + 1, sizeof(bool));
        e->written = calloc(e->n_params + 1, sizeof(bool));
        if (!e->params || !e->moved || !e->read || !e->written) {
                f->oom = true;
                return false;
        }
        for (unsigned i = 0, j = 0; i < e->fn->n_kids; i++)
                if (e->fn->kids[i]->kind == CXCursor_ParmDecl)
                        e->params[j++] = e->fn->kids[i];
        return true;
}

/* Whether entry e gets a bare form, its test of every bound evaluated by
 * the host over the whole grid (bounds.c) instead of by each cube at run
 * time; if so, writes that test to the facts ("bounds ..."), each scalar
 * parameter named by its word (param_r). A cube's branch on its own test
 * keeps PoCL's loops over units from vectorizing, and a checked reduction
 * ran 1.2x its unchecked time for it (docs/PERFORMANCE.md).
 *
 * Only where the copy is the same code: an entry that walks its cube
 * itself (looped) has its test once per cube, outside the loop, already;
 * a body with a preprocessor line could define, below the entry, what the
 * copy would then read differently (__COUNTER__, which would count on in
 * the copy, is refused with the compiler's other names: check_tokens). */
static bool bare_form(fe *f, const fe_entry *e, char (*param_r)[48], sbuf *facts)
{
        node *fn = e->fn;

        if (e->looped || !e->n_fast || e->grid_lost || !e->grid.p)
                return false;
        for (unsigned i = fn->start; i < fn->end && i < f->len; i++)
                if (f->src[i] == '#')
                        return false;
        sbuf line = { 0 };
        put(&line, "bounds");
        for (const char *t = e->grid.p; *t;) {
                t += strspn(t, " ");
                size_t n = strcspn(t, " ");
                unsigned i;
                int at = 0;
                if (sscanf(t, "param%u%n", &i, &at) == 1 && (size_t) at == n) {
                        if (i >= e->n_params || !param_r[i][0]) {
                                free(line.p);
                                return false;
                        }
                        put(&line, "%s", param_r[i]);
                } else if (n) {
                        put(&line, " %.*s", (int) n, t);
                }
                t += n;
        }
        if (line.oom) {
                free(line.p);
                f->oom = true;
                return false;
        }
        put(facts, "%s\n", line.p);
        free(line.p);
        return true;
}

/* Replaces the first from in s, in place; s has room for to (no longer). */
static bool replace_once(char *s, const char *from, const char *to)
{
        char *at = strstr(s, from);
        size_t lf = strlen(from), lt = strlen(to);

        if (!at || lt > lf)
                return false;
        memmove(at + lt, at + lf, strlen(at + lf) + 1);
        memcpy(at, to, lt);
        return true;
}

/* Writes entry e a second time right after itself, as CUBE__BARE_NAME(e)
 * with its test of every bound taken as true, where the backend builds
 * bare forms (CUBE__BARE): a launch the host has proved in bounds over its
 * whole grid runs it (bounds.c). Right after, so that every macro reads as
 * it did in the first; #line keeps the compiler's words on the user's
 * lines. head is the entry's new head (rewrite_entry's). */
static void bare_copy(fe *f, const fe_entry *e, node *body, const char *head)
{
        node *fn = e->fn;
        char name[96], bare_name[96];
        unsigned line, col, end_line;
        sbuf copy = { 0 };

        snprintf(name, sizeof(name), "CUBE__ENTRY_NAME(%s)", e->name);
        snprintf(bare_name, sizeof(bare_name), "CUBE__BARE_NAME(%s) ", e->name);
        char *h = strdup(head);
        if (!h || !replace_once(h, name, bare_name) ||
            !replace_once(h, "const int cube__bare = 0;", "const int cube__bare = 1;")) {
                free(h);
                f->oom |= !h;
                return;
        }
        line_col(f, fn->start, &line, &col);
        line_col(f, body->end, &end_line, &col);
        put(&copy, "\n#if CUBE__CHECKED && CUBE__BARE\n#line %u \"%s.c\"\n%s", line, f->entry, h);
        free(h);
        /* The body with its edits, as apply_edits writes them. */
        qsort(f->edits, f->n_edits, sizeof(*f->edits), edit_cmp);
        unsigned at = body->start + 1;
        for (size_t i = 0; i < f->n_edits; i++) {
                edit *d = &f->edits[i];
                if (d->at < body->start + 1 || d->at >= body->end)
                        continue;
                if (i > 0 && d->at == d[-1].at && d->cut == d[-1].cut &&
                    d->order == d[-1].order && strcmp(d->text, d[-1].text) == 0)
                        continue;
                if (d->at < at || d->at + d->cut > body->end) {
                        free(copy.p);   /* apply_edits refuses the source */
                        return;
                }
                put(&copy, "%.*s%s", (int) (d->at - at), f->src + at, d->text);
                at = d->at + d->cut;
        }
        put(&copy, "%.*s\n#endif\n#line %u \"%s.c\"\n", (int) (body->end - at), f->src + at,
            end_line, f->entry);
        if (copy.oom)
                f->oom = true;
        else
                add_edit(f, body->end, 0, -2000000000, "%s", copy.p);
        free(copy.p);
}

/* Rewrites the entry point's head: its buffers as the backend binds them,
 * the check context, its buffers' pointers and its scalars, on the line of
 * its opening brace so that every later line keeps its number. Writes the
 * signature facts. */
static void rewrite_entry(fe *f, const fe_entry *e, sbuf *facts, uint32_t *ret_nb)
{
        node *fn = e->fn, *body = NULL;
        uint32_t nb = 0, ns = 0, counts[CUBE__SCALAR_GROUPS] = { 0 };
        bool seen_scalar = false, seen_info = false, seen_map = false;

        for (unsigned i = 0; i < fn->n_kids; i++)
                if (fn->kids[i]->kind == CXCursor_CompoundStmt)
                        body = fn->kids[i];
        CXType rt = clang_getResultType(clang_getCursorType(fn->c));
        if (rt.kind != CXType_Void) {
                refuse(f, fn->start, "the entry point '%s' must return void", e->name);
                return;
        }
        if (!annotated(fn, "cube_kernel")) {
                refuse(f, fn->start, "the entry point '%s' must be marked KERNEL", e->name);
                return;
        }
        if (!body || !body->located || !fn->located || f->src[body->start] != '{') {
                refuse(f, fn->start, "the entry point '%s' cannot be placed", e->name);
                return;
        }
        /* Scalars in their groups, for their words. */
        cube__scalar_group groups[CUBE__FE_MAX_PARAMS];
        for (unsigned i = 0; i < e->n_params; i++) {
                node *p = e->params[i];
                CXType t = clang_getCursorType(p->c);
                CXString s = clang_getCursorSpelling(p->c);
                const char *name = clang_getCString(s);
                if (strcmp(name, "cube__info_param") == 0) {
                        if (i + 1 != e->n_params)
                                refuse(f, p->start, "INFO must be the last parameter");
                        seen_info = true;
                } else if (is_pointer(t)) {
                        bool map = is_tensor_map_param(e, (int) i);
                        if (seen_scalar)
                                refuse(f, p->start, "buffer parameter '%s' comes after a scalar: "
                                       "buffers come first, then tensor maps, then scalars",
                                       name);
                        else if (seen_map && !map)
                                refuse(f, p->start, "buffer parameter '%s' comes after a tensor "
                                       "map: buffers come first, then tensor maps, then scalars",
                                       name);
                        seen_map |= map;
                        nb++;
                } else {
                        const char *ty = scalar_group(t, &groups[i]);
                        if (!ty)
                                refuse(f, p->start, "scalar parameter '%s' must be float, double, "
                                       "int32_t, int64_t, uint32_t or uint64_t", name);
                        else
                                counts[groups[i]]++;
                        seen_scalar = true;
                        ns++;
                }
                if (!name[0])
                        refuse(f, p->start, "every parameter of the entry point needs a name");
                clang_disposeString(s);
        }
        if (f->error)
                return;
        (void) seen_info;
        /* The words each group starts at: groups are packed in a fixed order,
         * each padded to whole words. */
        static const unsigned group_bytes[CUBE__SCALAR_GROUPS] = { 4, 8, 4, 8, 4, 8 };
        uint64_t group_word[CUBE__SCALAR_GROUPS], word = 0;
        for (int g = 0; g < CUBE__SCALAR_GROUPS; g++) {
                group_word[g] = word;
                word += (counts[g] * group_bytes[g] + 7) / 8;
        }

        /* A looped entry may take its arguments another way (CUBE__CAN_LOOP). */
        const char *form = e->looped ? "CUBE__LOOPED_" : "CUBE__";
        sbuf head = { 0 };
        put(&head, "%s void CUBE__ENTRY_NAME(%s)(%sPARAMS_HEAD",
            e->looped ? "CUBE__LOOPED_KERNEL" : "CUBE__KERNEL", e->name, form);
        uint32_t ntm = 0;
        for (uint32_t k = 0; k < nb; k++)
                put(&head, " %sBUFFER(%u)", form, k);
        for (unsigned i = 0; i < e->n_params; i++)
                if (is_tensor_map_param(e, (int) i))
                        put(&head, " CUBE__TENSOR_MAP(%u)", ntm++);
        put(&head, " CUBE__PARAMS_TAIL)");
        /* Keep the lines the old head spanned. */
        for (unsigned i = fn->start; i < body->start; i++)
                if (f->src[i] == '\n')
                        put(&head, "\n");
        put(&head, "{ %sENTRY_BEGIN; cube__ctx_t cube__c0; cube__ctx_t *cube__ctx = &cube__c0; "
            "cube__ctx_init(cube__ctx, cube__info, cube__nw, cube__meta, cube__dyn, %uu, %uu); ",
            form, nb, ntm);
        for (uint32_t m = 0; m < ntm; m++)
                put(&head, "cube__ctx->tmd[%u] = CUBE__TENSOR_MAP_PTR(%u); ", m, m);
        uint32_t in_group[CUBE__SCALAR_GROUPS] = { 0 };
        uint32_t k = 0;
        char param_r[CUBE__FE_MAX_PARAMS][48] = { { 0 } };   /* a scalar, in bounds.c's words */
        for (unsigned i = 0; i < e->n_params; i++) {
                node *p = e->params[i];
                CXType t = clang_getCursorType(p->c);
                CXString s = clang_getCursorSpelling(p->c);
                const char *name = clang_getCString(s);
                if (strcmp(name, "cube__info_param") == 0) {
                        clang_disposeString(s);
                        continue;
                }
                if (is_pointer(t)) {
                        CXType pt = clang_getPointeeType(clang_getCanonicalType(t));
                        bool is_const = clang_isConstQualifiedType(pt);
                        CXString ts = clang_getTypeSpelling(clang_getCanonicalType(pt));
                        const char *tn = clang_getCString(ts);
                        if (strncmp(tn, "const ", 6) == 0)
                                tn += 6;
                        put(&head, "cube__bind(cube__ctx, %uu, (GLOBAL const char *) "
                            "%sBUFFER_PTR(%u, %u), %sBINDING_BYTES(%u, %u)); "
                            "GLOBAL %s%s *%s = (GLOBAL %s%s *) %sBUFFER_PTR(%u, %u); ", k, form,
                            k, nb, form, k, nb, is_const ? "const " : "", tn, name,
                            is_const ? "const " : "", tn, form, k, nb);
                        int io = (e->read[k] ? CUBE__PARAM_READ : 0) |
                                 (e->written[k] ? CUBE__PARAM_WRITE : 0);
                        if (is_const)
                                io = CUBE__PARAM_READ;
                        if (!io)
                                io = CUBE__PARAM_READ;
                        put(facts, "buffer %u %d %s %lld %s\n", k, io, is_const ? "const" : "mut",
                            clang_Type_getSizeOf(pt), name);
                        put(facts, "buffertype %u %s\n", k, tn);
                        if (is_tensor_map_param(e, (int) i))
                                put(facts, "tensormap %u\n", k);
                        clang_disposeString(ts);
                        k++;
                } else {
                        cube__scalar_group g = groups[i];
                        const char *ty = scalar_group(t, &g);
                        uint64_t w = group_word[g], idx = in_group[g]++;
                        put(&head, "%s %s = SCALAR(%s, %llu, %llu); ", ty, name, ty,
                            (unsigned long long) w, (unsigned long long) idx);
                        if (ty)
                                snprintf(param_r[i], sizeof(param_r[i]), " scalar%d%c:%llu:%llu",
                                         strstr(ty, "64") || strcmp(ty, "double") == 0 ? 8 : 4,
                                         ty[0] == 'u' ? 'u' : 's', (unsigned long long) w,
                                         (unsigned long long) idx);
                        put(facts, "scalar %d %s %s\n", (int) g, ty, name);
                }
                clang_disposeString(s);
        }
        /* The test of every bound at once: in a cube where it holds, each
         * of those sites runs as an unchecked access would. In the bare
         * form (bare_copy) it holds by the host's word. */
        bool bare = bare_form(f, e, param_r, facts);
        put(&head, "%sconst int cube__bare = 0; const int cube__fast = cube__bare || (1%s); "
            "(void) cube__fast; ", e->looped ? "CUBE__UNITS_SETUP " : "",
            e->fast.p ? e->fast.p : "");
        if (e->looped) {
                if (f->src[body->end - 1] != '}') {
                        free(head.p);
                        refuse(f, fn->start, "the entry point '%s' cannot be placed", e->name);
                        return;
                }
                put(&head, "CUBE__UNITS_BEGIN ");
                add_edit(f, body->end - 1, 0, 0, " CUBE__UNITS_END ");
        }
        if (head.oom) {
                free(head.p);
                f->oom = true;
                return;
        }
        add_edit(f, fn->start, body->start + 1 - fn->start, 0, "%s", head.p);
        if (bare)
                bare_copy(f, e, body, head.p);
        free(head.p);
        *ret_nb = nb;
}

/* KERNEL functions the source calls are helpers: they lose the mark. */
static void unmark_helpers(fe *f)
{
        for (unsigned i = 0; i < f->root->n_kids; i++) {
                node *n = f->root->kids[i];
                if (entry_by_fn(f, n) || n->kind != CXCursor_FunctionDecl || !n->located)
                        continue;
                if (annotated(n, "cube_kernel") && strncmp(f->src + n->start, "KERNEL", 6) == 0)
                        add_edit(f, n->start, 6, 0, "      ");
        }
}

/* Blanks what the parse did not see (skipped conditional branches) and the
 * conditionals themselves, so every backend compiles exactly what was
 * checked; keeps the newlines. Drops OpenCL's fp64 pragma, which the CPU
 * prelude already enables. */
static void blank_preprocessor(fe *f, char *out_src)
{
        CXSourceRangeList *skipped = clang_getAllSkippedRanges(f->tu);
        for (unsigned i = 0; skipped && i < skipped->count; i++) {
                unsigned a, b;
                if (!offset_of(f, clang_getRangeStart(skipped->ranges[i]), &a) ||
                    !offset_of(f, clang_getRangeEnd(skipped->ranges[i]), &b))
                        continue;
                for (unsigned j = a; j < b && j < f->len; j++)
                        if (out_src[j] != '\n')
                                out_src[j] = ' ';
        }
        clang_disposeSourceRangeList(skipped);
        /* Directive lines: #if, #ifdef, #ifndef, #elif, #else, #endif, #pragma. */
        for (size_t i = 0; i < f->len;) {
                size_t j = i;
                while (j < f->len && (out_src[j] == ' ' || out_src[j] == '\t'))
                        j++;
                size_t eol = j;
                while (eol < f->len && out_src[eol] != '\n')
                        eol++;
                if (j < f->len && out_src[j] == '#') {
                        const char *d = out_src + j + 1;
                        while (*d == ' ' || *d == '\t')
                                d++;
                        if (strncmp(d, "if", 2) == 0 || strncmp(d, "el", 2) == 0 ||
                            strncmp(d, "endif", 5) == 0 || strncmp(d, "pragma", 6) == 0) {
                                /* A continued directive goes on to later lines. */
                                size_t e = eol;
                                while (e > j && e < f->len && out_src[e - 1] == '\\') {
                                        e++;
                                        while (e < f->len && out_src[e] != '\n')
                                                e++;
                                }
                                for (size_t q = j; q < e; q++)
                                        if (out_src[q] != '\n')
                                                out_src[q] = ' ';
                                eol = e;
                        }
                }
                i = eol + 1;
        }
}

/* ---------------------------------------------------------------------------
 * The run
 * ------------------------------------------------------------------------- */

static char *diagnostics(fe *f, bool *ret_fatal)
{
        sbuf b = { 0 };
        unsigned n = clang_getNumDiagnostics(f->tu);

        *ret_fatal = false;
        for (unsigned i = 0; i < n; i++) {
                CXDiagnostic d = clang_getDiagnostic(f->tu, i);
                enum CXDiagnosticSeverity sev = clang_getDiagnosticSeverity(d);
                if (sev >= CXDiagnostic_Error) {
                        CXString s = clang_getDiagnosticSpelling(d);
                        CXFile file;
                        unsigned line = 0, col = 0;
                        clang_getFileLocation(clang_getDiagnosticLocation(d), &file, &line, &col,
                                              NULL);
                        bool ours = file && clang_File_isEqual(file, f->file);
                        if (ours)
                                put(&b, "%s.c:%u:%u: error: %s\n", f->entry, line, col,
                                    clang_getCString(s));
                        else
                                put(&b, "error: %s\n", clang_getCString(s));
                        clang_disposeString(s);
                        *ret_fatal = true;
                }
                clang_disposeDiagnostic(d);
        }
        return b.p;
}

static void fe_free(fe *f)
{
        node_free(f->root);
        for (size_t i = 0; i < f->n_edits; i++)
                free(f->edits[i].text);
        free(f->edits);
        for (unsigned i = 0; i < f->n_entries; i++) {
                free(f->entries[i].params);
                free(f->entries[i].moved);
                free(f->entries[i].read);
                free(f->entries[i].written);
                free(f->entries[i].fast.p);
                free(f->entries[i].grid.p);
        }
        free(f->entries);
        for (unsigned i = 0; i < f->n_sites; i++) {
                free(f->sites[i].what);
                free(f->sites[i].len);
        }
        free(f->sites);
        free(f->vars);
        free(f->moves);
        free(f->error);
}

/* A looped entry's bookkeeping, one line per site, no loop: a loop over the
 * accumulators would index them by a variable, and they would leave the
 * unit's registers. cube__acc_init clears them before the units run;
 * cube__publish reports the first site that saw an index out of bounds.
 * Without a looped entry both stay empty. */
static void put_loop_report(fe *f, sbuf *out)
{
        unsigned n = 0;

        for (unsigned i = 0; i < f->n_entries; i++)
                if (f->entries[i].looped)
                        n = f->n_sites;
        put(out, "static inline void cube__acc_init(cube__acc_t *a)\n{\n");
        for (unsigned i = 0; i < n; i++)
                put(out, "        a->bad[%u] = 0;\n", i);
        put(out, "        (void) a;\n}\nstatic inline void cube__publish(cube__ctx_t *c)\n{\n"
            "#if CUBE__CHECKED && CUBE__CHECK_REPORT\n");
        for (unsigned i = 0; i < n; i++)
                put(out, "        if (c->acc->bad[%u]) { cube__report(c, %uu, %s, %uu); return; }\n",
                    i, i, f->sites[i].len ? f->sites[i].len : "0", f->sites[i].write ? 1u : 0u);
        put(out, "#endif\n        (void) c;\n}\n");
}

static bool is_identifier(const char *s)
{
        size_t n = strlen(s);

        if (n == 0 || n > 63 || isdigit((unsigned char) s[0]))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!isalnum((unsigned char) s[i]) && s[i] != '_')
                        return false;
        return true;
}

cube__fe_status cube__frontend_run(const char *source, const char *entry, char **ret_checked,
                                   char **ret_facts, char **ret_error)
{
        static const char *const args[] = {
                "-x", "c", "-std=c11", "-nostdinc", "-ffreestanding", "-fno-builtin",
                "--target=x86_64-unknown-linux-gnu", "-include", "/cube/dialect.h",
                "-Wno-implicit-function-declaration", "-Wno-unknown-pragmas",
                "-Werror=int-conversion", "-Werror=incompatible-pointer-types",
                "-Werror=incompatible-pointer-types-discards-qualifiers",
                "-Werror=int-to-pointer-cast", "-Werror=pointer-to-int-cast",
                "-Werror=incompatible-function-pointer-types", "-Werror=return-type",
                "-ferror-limit=8",
        };
        char file_name[96];
        fe f = { .src = source, .len = strlen(source), .entry = entry };
        cube__fe_status st = CUBE__FE_DEFECT;
        sbuf facts = { 0 }, out = { 0 };
        char *edited = NULL;

        *ret_checked = *ret_facts = *ret_error = NULL;
        /* The entry's name becomes the file's, and libclang reads a file
         * name that starts with '-' as an option and fails the whole parse. */
        if (!is_identifier(entry)) {
                if (asprintf(ret_error, "the entry point '%.64s' is not a C identifier",
                             entry) < 0)
                        *ret_error = NULL;
                return *ret_error ? CUBE__FE_REFUSED : CUBE__FE_DEFECT;
        }
        snprintf(file_name, sizeof(file_name), "%s.c", entry);
        struct CXUnsavedFile files[2] = {
                { file_name, source, (unsigned long) f.len },
                { "/cube/dialect.h", parse_prelude, sizeof(parse_prelude) - 1 },
        };
        CXIndex index = clang_createIndex(0, 0);
        if (!index) {
                *ret_error = strdup("libclang could not start");
                return CUBE__FE_DEFECT;
        }
        enum CXErrorCode ec = clang_parseTranslationUnit2(
                index, file_name, args, (int) (sizeof(args) / sizeof(args[0])), files, 2,
                CXTranslationUnit_DetailedPreprocessingRecord | CXTranslationUnit_KeepGoing |
                CXTranslationUnit_RetainExcludedConditionalBlocks * 0, &f.tu);
        if (ec == CXError_Crashed) {
                /* libclang recovered from a crash of its own on this text: the
                 * same text crashes it again, so it is the source's answer. */
                *ret_error = strdup("libclang crashed reading the source (a fault of the "
                                    "parser's, on text it should refuse): change the source "
                                    "near what was last edited");
                clang_disposeIndex(index);
                return *ret_error ? CUBE__FE_DOES_NOT_PARSE : CUBE__FE_DEFECT;
        }
        if (ec != CXError_Success || !f.tu) {
                *ret_error = strdup("libclang could not parse the source");
                clang_disposeIndex(index);
                return CUBE__FE_DEFECT;
        }
        f.file = clang_getFile(f.tu, file_name);
        /* The dialect's own words first: `__global` is better answered with
         * GLOBAL than with the parser's "unknown type name". */
        check_tokens(&f);
        if (f.error)
                goto refused;
        bool fatal;
        char *diag = diagnostics(&f, &fatal);
        if (fatal) {
                *ret_error = diag;
                st = CUBE__FE_DOES_NOT_PARSE;
                goto out;
        }
        free(diag);
        f.root = node_new(&f, clang_getTranslationUnitCursor(f.tu), NULL);
        if (!f.root)
                goto out;
        build_ctx b = { &f, f.root };
        clang_visitChildren(f.root->c, build_visit, &b);
        if (f.oom)
                goto out;
        if (f.error)
                goto refused;
        if (!find_entries(&f))
                goto out;
        if (!entry_by_name(&f, entry)) {
                refuse(&f, 0, "the source defines no entry point '%s' (KERNEL void %s(...) "
                       "{ ... })", entry, entry);
                goto refused;
        }
        for (unsigned i = 0; i < f.n_entries; i++)
                if (!entry_params(&f, &f.entries[i]))
                        goto stopped;
        /* The info words' own site comes first (the guards' site 0). */
        new_site(&f, 0, false, NULL, "the launch's info words (SCALAR, META_U32, DYN_U32, "
                 "BUFFER_LEN)");
        find_moves(&f, f.root);
        index_vars(&f);
        find_looped(&f);
        walk(&f, f.root);
        if (f.oom)
                goto out;
        if (f.error)
                goto refused;
        /* The context's arrays hold the most bindings and tensor maps any
         * entry point takes. */
        uint32_t max_nb = 1, max_ntm = 0;
        for (unsigned i = 0; i < f.n_entries; i++) {
                uint32_t nb = 0, ntm = 0;
                put(&facts, "entry %s\n", f.entries[i].name);
                rewrite_entry(&f, &f.entries[i], &facts, &nb);
                for (unsigned j = 0; j < f.entries[i].n_params; j++)
                        ntm += is_tensor_map_param(&f.entries[i], (int) j);
                if (nb > max_nb)
                        max_nb = nb;
                if (ntm > max_ntm)
                        max_ntm = ntm;
        }
        unmark_helpers(&f);
        if (f.oom)
                goto out;
        if (f.error)
                goto refused;
        put(&facts, "sync %d\n", strstr(source, "sync_cube") != NULL ||
            strstr(source, "tensor_map_load") != NULL);
        for (unsigned i = 0; i < f.n_sites; i++)
                put(&facts, "site %s\n", f.sites[i].what);
        edited = malloc(f.len + 1);
        if (!edited)
                goto out;
        memcpy(edited, source, f.len + 1);
        {
                const char *orig = f.src;
                blank_preprocessor(&f, edited);
                f.src = edited;
                char *applied = apply_edits(&f);
                f.src = orig;
                if (!applied) {
                        if (f.error)
                                goto refused;
                        goto out;
                }
                put(&out, "#define CUBE__NB %u\n#define CUBE__NTM %u\n#define CUBE__SITES %u\n%s%s",
                    max_nb, max_ntm, f.n_sites, tmap_layout, guards);
                put_loop_report(&f, &out);
                put(&out, "#line 1 \"%s.c\"\n%s\n", entry, applied);
                free(applied);
        }
        if (out.oom || facts.oom)
                goto out;
        *ret_checked = out.p;
        *ret_facts = facts.p;
        out.p = facts.p = NULL;
        st = CUBE__FE_OK;
        goto out;
stopped:
        if (f.oom || !f.error)
                goto out;
refused:
        *ret_error = f.error;
        f.error = NULL;
        st = CUBE__FE_REFUSED;
out:
        if (st == CUBE__FE_DEFECT && !*ret_error)
                *ret_error = strdup("out of memory in the kernel front end");
        free(edited);
        free(out.p);
        free(facts.p);
        fe_free(&f);
        clang_disposeTranslationUnit(f.tu);
        clang_disposeIndex(index);
        return st;
}

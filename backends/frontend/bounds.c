/*
 * bounds.c - an entry point's test of every bound, evaluated by the host
 * over a launch's whole grid.
 *
 * A checked kernel runs an access unguarded in a cube whose test holds:
 * the front end proved the index's range from what the cube knows before
 * its units run (frontend.c's bound_of), and the cube checks that range
 * against the binding once. That test is a branch in the cube's body, and
 * on PoCL a branch inside its loops over units keeps them from vectorizing.
 * So the front end also writes the test in the words read here (the facts'
 * "bounds" line), the daemon evaluates it once per launch with every cube
 * position at once, and a launch it holds for may run the entry's bare form
 * (frontend.h's CUBE__BARE), which takes the test as true.
 *
 * Evaluating with ranges in place of one cube's position is sound because
 * every operation here is that of the cube's cube__iv functions, each of
 * which bounds its result over all values in its operands' ranges: what
 * holds for the grid holds for each cube. Anything this cannot read the way
 * the cube reads it makes the test fail, which costs only speed.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "frontend.h"

#define IV_LIM 4611686018427387904ll   /* the prelude's CUBE__IV_LIM */
#define BOUNDS_MAX_OPS 65536u
#define BOUNDS_MAX_DEPTH 256u

typedef enum op_kind {
        OP_K, OP_U, OP_FIT, OP_OR, OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_REM, OP_SHL, OP_SHR,
        OP_AND, OP_POS, OP_COUNT, OP_DIM, OP_DIMS, OP_UNIT, OP_META, OP_SCALAR, OP_INSIDE,
        OP_INBINDING, OP_WRITABLE,
} op_kind;

typedef struct bounds_op {
        op_kind kind;
        int64_t a, b;           /* constants, or what the operation reads */
        uint32_t c, d;
} bounds_op;

struct cube__fe_bounds {
        uint32_t n;
        bounds_op ops[];
};

/* A range of values, as the prelude's cube__iv. */
typedef struct iv {
        int64_t lo, hi;
        bool ok;
} iv;

static iv iv_r(bool ok, int64_t lo, int64_t hi)
{
        ok = ok && lo <= hi && lo >= -IV_LIM && hi <= IV_LIM;
        return (iv) { ok ? lo : 0, ok ? hi : 0, ok };
}

static iv iv_u(uint64_t v)
{
        bool ok = v <= (uint64_t) IV_LIM;
        return iv_r(ok, ok ? (int64_t) v : 0, ok ? (int64_t) v : 0);
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

static iv iv_corners(int64_t p, int64_t q, int64_t r, int64_t s)
{
        return iv_r(true, min64(min64(p, q), min64(r, s)), max64(max64(p, q), max64(r, s)));
}

static iv iv_binary(op_kind k, iv a, iv b)
{
        const int64_t m = 2147483648ll;

        switch (k) {
        case OP_OR:
                return iv_r(a.ok && b.ok, min64(a.lo, b.lo), max64(a.hi, b.hi));
        case OP_ADD: {
                /* Within 2^62 each, a sum can reach 2^63: no range then. */
                int64_t lo, hi;
                bool over = __builtin_add_overflow(a.lo, b.lo, &lo) |
                            __builtin_add_overflow(a.hi, b.hi, &hi);
                return iv_r(a.ok && b.ok && !over, lo, hi);
        }
        case OP_SUB: {
                int64_t lo, hi;
                bool over = __builtin_sub_overflow(a.lo, b.hi, &lo) |
                            __builtin_sub_overflow(a.hi, b.lo, &hi);
                return iv_r(a.ok && b.ok && !over, lo, hi);
        }
        case OP_MUL:
                if (!a.ok || !b.ok || a.lo < -m || a.hi > m || b.lo < -m || b.hi > m)
                        return iv_r(false, 0, 0);
                return iv_corners(a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi);
        case OP_DIV:
                if (!a.ok || !b.ok || (b.lo <= 0 && b.hi >= 0))
                        return iv_r(false, 0, 0);
                return iv_corners(a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi);
        case OP_REM:
                return iv_r(a.ok && b.ok && a.lo >= 0 && b.lo > 0, 0, min64(a.hi, b.hi - 1));
        case OP_SHL:
                if (!a.ok || !b.ok || a.lo < 0 || b.lo < 0 || b.hi > 62 || a.hi > (IV_LIM >> b.hi))
                        return iv_r(false, 0, 0);
                return iv_r(true, a.lo << b.lo, a.hi << b.hi);
        case OP_SHR:
                if (!a.ok || !b.ok || a.lo < 0 || b.lo < 0 || b.hi > 63)
                        return iv_r(false, 0, 0);
                return iv_r(true, a.lo >> b.hi, a.hi >> b.lo);
        case OP_AND: {
                int64_t hi = a.lo >= 0 && b.lo >= 0 ? min64(a.hi, b.hi) : (a.lo >= 0 ? a.hi : b.hi);
                return iv_r(a.ok && b.ok && (a.lo >= 0 || b.lo >= 0), 0, hi);
        }
        default:
                return iv_r(false, 0, 0);
        }
}

static bool iv_in(iv a, uint64_t n)
{
        return a.ok && a.lo >= 0 && (uint64_t) a.hi < n;
}

/* ---- the text ---------------------------------------------------------- */

/* Whether the word at *p (n bytes) starts with name; if so, moves past it. */
static bool prefix(const char **p, size_t n, const char *name)
{
        size_t l = strlen(name);

        if (n < l || strncmp(*p, name, l) != 0)
                return false;
        *p += l;
        return true;
}

/* A decimal number that ends at or before end; one out of range is no number. */
static bool number(const char **p, const char *end, bool is_signed, int64_t *ret)
{
        char *e;

        const char *d = *p + (is_signed && *p < end && **p == '-');

        if (d >= end || *d < '0' || *d > '9')
                return false;
        errno = 0;
        if (is_signed)
                *ret = strtoll(*p, &e, 10);
        else
                *ret = (int64_t) strtoull(*p, &e, 10);
        if (errno || e == *p || e > end)
                return false;
        *p = e;
        return true;
}

/* One word of the text as an operation, with how it changes the stack. */
static bool parse_op(const char *p, const char *end, bounds_op *o, int *ret_pops, int *ret_pushes)
{
        static const struct { const char *name; op_kind kind; } binaries[] = {
                { "or", OP_OR }, { "add", OP_ADD }, { "sub", OP_SUB }, { "mul", OP_MUL },
                { "div", OP_DIV }, { "rem", OP_REM }, { "shl", OP_SHL }, { "shr", OP_SHR },
                { "and", OP_AND }, { "dim", OP_DIMS },
        };
        static const struct { const char *name; op_kind kind; int64_t max; } reads[] = {
                { "pos", OP_POS, 3 }, { "count", OP_COUNT, 3 }, { "dim", OP_DIM, 2 },
                { "unit", OP_UNIT, 2 }, { "meta", OP_META, 1 << 24 },
                { "inside", OP_INSIDE, INT64_MAX },
                { "writable", OP_WRITABLE, CUBE__FE_MAX_PARAMS - 1 },
        };
        size_t n = (size_t) (end - p);
        int64_t v;

        memset(o, 0, sizeof(*o));
        *ret_pops = 0;
        *ret_pushes = 1;
        for (size_t i = 0; i < sizeof(binaries) / sizeof(binaries[0]); i++)
                if (n == strlen(binaries[i].name) && strncmp(p, binaries[i].name, n) == 0) {
                        o->kind = binaries[i].kind;
                        *ret_pops = o->kind == OP_DIMS ? 0 : 2;
                        return true;
                }
        for (size_t i = 0; i < sizeof(reads) / sizeof(reads[0]); i++) {
                const char *q = p;
                if (!prefix(&q, n, reads[i].name))
                        continue;
                o->kind = reads[i].kind;
                if (!number(&q, end, false, &o->a) || q != end || o->a > reads[i].max)
                        return false;
                if (o->kind == OP_INSIDE || o->kind == OP_WRITABLE) {
                        *ret_pops = o->kind == OP_INSIDE;
                        *ret_pushes = 0;
                }
                return true;
        }
        if (prefix(&p, n, "inbinding")) {
                o->kind = OP_INBINDING;
                *ret_pops = 1;
                *ret_pushes = 0;
                return number(&p, end, false, &o->a) && o->a < CUBE__FE_MAX_PARAMS && p < end &&
                       *p++ == ':' && number(&p, end, false, &o->b) && p == end &&
                       (o->b == 1 || o->b == 2 || o->b == 4 || o->b == 8);
        }
        if (prefix(&p, n, "scalar")) {
                /* scalar<bytes><s|u>:<word>:<index> */
                int64_t w, i;
                o->kind = OP_SCALAR;
                if (!number(&p, end, false, &v) || (v != 1 && v != 2 && v != 4 && v != 8) ||
                    p >= end || (*p != 's' && *p != 'u'))
                        return false;
                o->c = (uint32_t) v;
                o->d = *p++ == 's';
                if (p >= end || *p++ != ':' || !number(&p, end, false, &w) || p >= end ||
                    *p++ != ':' || !number(&p, end, false, &i) || p != end || w > (1 << 24) ||
                    i > (1 << 24))
                        return false;
                o->a = w;
                o->b = i;
                return true;
        }
        if (prefix(&p, n, "fit")) {
                o->kind = OP_FIT;
                *ret_pops = 1;
                return number(&p, end, true, &o->a) && p < end && *p++ == ',' &&
                       number(&p, end, true, &o->b) && p == end;
        }
        if (prefix(&p, n, "k")) {
                o->kind = OP_K;
                return number(&p, end, true, &o->a) && p == end && o->a > -IV_LIM;
        }
        if (prefix(&p, n, "u")) {
                o->kind = OP_U;
                return number(&p, end, false, &o->a) && p == end;
        }
        return false;
}

cube__fe_bounds *cube__fe_bounds_parse(const char *text, size_t len)
{
        const char *p = text, *end = text + len;
        uint32_t n = 0, depth = 0;

        for (const char *q = p; q < end; q++)
                n += *q == ' ';
        if (n + 1 > BOUNDS_MAX_OPS)
                return NULL;
        cube__fe_bounds *b = calloc(1, sizeof(*b) + (n + 1) * sizeof(bounds_op));
        if (!b)
                return NULL;
        while (p < end) {
                while (p < end && *p == ' ')
                        p++;
                const char *w = p;
                while (p < end && *p != ' ')
                        p++;
                if (w == p)
                        break;
                int pops, pushes;
                if (b->n > n || !parse_op(w, p, &b->ops[b->n], &pops, &pushes) ||
                    depth < (uint32_t) pops)
                        goto bad;
                depth += (uint32_t) pushes - (uint32_t) pops;
                if (depth > BOUNDS_MAX_DEPTH)
                        goto bad;
                /* The front end fits a value to each type it passes
                 * through; a fit to the range just fitted does nothing. */
                bounds_op *o = &b->ops[b->n];
                if (b->n && o->kind == OP_FIT && o[-1].kind == OP_FIT && o->a == o[-1].a &&
                    o->b == o[-1].b)
                        continue;
                b->n++;
        }
        /* Every range ends in a test: nothing is left on the stack. */
        if (depth != 0 || b->n == 0)
                goto bad;
        return b;
bad:
        free(b);
        return NULL;
}

void cube__fe_bounds_free(cube__fe_bounds *b)
{
        free(b);
}

/* ---- the evaluation ---------------------------------------------------- */

/* A value the cube reads among its launch's words: the `bytes` at byte,
 * inside [from, to) words, as the prelude's cube__info_peek and
 * cube__info_at find it. Outside, the cube reads zero (or fails), so the
 * host cannot vouch for the value: false. */
static bool info_read(const cube__fe_grid *g, uint64_t from, uint64_t to, uint64_t byte,
                      uint32_t bytes, bool is_signed, iv *ret)
{
        if (byte < from * 8 || byte + bytes > to * 8)
                return false;
        const unsigned char *at = (const unsigned char *) g->info + byte;
        uint64_t v = 0;
        memcpy(&v, at, bytes);                  /* little-endian, as the device */
        if (is_signed && bytes < 8 && (v >> (bytes * 8 - 1) & 1))
                v |= ~0ull << (bytes * 8);      /* sign-extended */
        *ret = is_signed ? iv_r(true, (int64_t) v, (int64_t) v) : iv_u(v);
        return true;
}

/* The product of three 32-bit counts as the cube's uint arithmetic makes
 * it, or false where it would wrap. */
static bool product32(const uint32_t v[3], uint64_t *ret)
{
        uint64_t p = (uint64_t) v[0] * v[1];

        if (p > UINT32_MAX || (p *= v[2]) > UINT32_MAX)
                return false;
        *ret = p;
        return true;
}

bool cube__fe_bounds_hold(const cube__fe_bounds *b, const cube__fe_grid *g)
{
        iv stack[BOUNDS_MAX_DEPTH + 1];
        uint32_t sp = 0;
        uint64_t own = g->n_info;
        /* The words the cube reads its scalars and meta words among
         * (cube__ctx_init). */
        uint64_t meta = g->meta < own ? g->meta : own;
        uint64_t dyn = g->dyn < own && g->dyn > meta ? g->dyn : (g->dyn < meta ? meta : own);

        if (!b)
                return false;
        for (uint32_t i = 0; i < b->n; i++) {
                const bounds_op *o = &b->ops[i];
                iv v = { 0, 0, false };
                uint64_t p;
                switch (o->kind) {
                case OP_K:
                        v = iv_r(true, o->a, o->a);
                        break;
                case OP_U:
                        v = iv_u((uint64_t) o->a);
                        break;
                case OP_FIT:
                        v = stack[--sp];
                        v = iv_r(v.ok && v.lo >= o->a && v.hi <= o->b, v.lo, v.hi);
                        break;
                case OP_OR: case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_REM:
                case OP_SHL: case OP_SHR: case OP_AND:
                        sp -= 2;
                        v = iv_binary(o->kind, stack[sp], stack[sp + 1]);
                        break;
                case OP_POS:
                        /* Every cube's position at once. */
                        if (o->a < 3)
                                p = g->count[o->a];
                        else if (!product32(g->count, &p))
                                return false;
                        v = iv_r(p > 0, 0, (int64_t) p - 1);
                        break;
                case OP_COUNT:
                        if (o->a < 3)
                                p = g->count[o->a];
                        else if (!product32(g->count, &p))
                                return false;
                        v = iv_u(p);
                        break;
                case OP_DIM:
                        v = iv_u(g->dim[o->a]);
                        break;
                case OP_DIMS:
                        if (!product32(g->dim, &p))
                                return false;
                        v = iv_u(p);
                        break;
                case OP_UNIT:
                        v = iv_r(true, 0, (int64_t) g->dim[o->a] - 1);
                        break;
                case OP_META:
                        if (!info_read(g, meta, dyn, meta * 8 + (uint64_t) o->a * 4, 4, false, &v))
                                return false;
                        break;
                case OP_SCALAR:
                        if (!info_read(g, 0, meta, (uint64_t) o->a * 8 + (uint64_t) o->b * o->c,
                                       o->c, o->d, &v))
                                return false;
                        break;
                case OP_INSIDE:
                        if (!iv_in(stack[--sp], (uint64_t) o->a))
                                return false;
                        continue;
                case OP_INBINDING:
                        if ((uint64_t) o->a >= g->n_bindings ||
                            !iv_in(stack[--sp], (g->bindings[o->a] & ~CUBE__CHECK_READ_ONLY) /
                                                (uint64_t) o->b))
                                return false;
                        continue;
                case OP_WRITABLE:
                        if ((uint64_t) o->a >= g->n_bindings ||
                            (g->bindings[o->a] & CUBE__CHECK_READ_ONLY))
                                return false;
                        continue;
                }
                stack[sp++] = v;
        }
        return true;
}

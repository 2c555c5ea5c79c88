/*
 * opencl.c - the kernel dialect (docs/KERNELS.md) rewritten as OpenCL C, for
 * PoCL on the CPU device.
 *
 * One source runs on every device, so the dialect is the part of C that both
 * OpenCL C and CUDA C++ compile, without a C library (backends/dialect-check.c
 * checks the rules no compiler would catch). This file rewrites the entry
 * point for the CPU device: every buffer parameter becomes a window of
 * device memory and a byte offset into it, rebased at the top of the body,
 * and INFO becomes a pointer into the launch ring. The prelude supplies the
 * rest.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "errors.h"

const char cube__cpu_prelude[] =
"#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
"typedef uchar uint8_t;\n"
"typedef char int8_t;\n"
"typedef ushort uint16_t;\n"
"typedef short int16_t;\n"
"typedef uint uint32_t;\n"
"typedef int int32_t;\n"
"typedef ulong uint64_t;\n"
"typedef long int64_t;\n"
"#ifndef NULL\n#define NULL ((void *) 0)\n#endif\n"
"#define UINT32_MAX 0xffffffffu\n"
"#define INT32_MAX 0x7fffffff\n"
"#define UINT64_MAX 0xffffffffffffffffull\n"
"#define KERNEL\n"
"#define SHARED __local\n"
"#define GLOBAL __global\n"
"#define CONSTANT __constant\n"
"#define DEVICE_FN\n"
"#define INFO __global const ulong *cube__info, uint cube__meta, uint cube__dyn\n"
"#define UNIT_POS_X ((uint) get_local_id(0))\n"
"#define UNIT_POS_Y ((uint) get_local_id(1))\n"
"#define UNIT_POS_Z ((uint) get_local_id(2))\n"
"#define CUBE_POS_X ((uint) get_group_id(0))\n"
"#define CUBE_POS_Y ((uint) get_group_id(1))\n"
"#define CUBE_POS_Z ((uint) get_group_id(2))\n"
"#define CUBE_DIM_X ((uint) get_local_size(0))\n"
"#define CUBE_DIM_Y ((uint) get_local_size(1))\n"
"#define CUBE_DIM_Z ((uint) get_local_size(2))\n"
"#define CUBE_COUNT_X ((uint) get_num_groups(0))\n"
"#define CUBE_COUNT_Y ((uint) get_num_groups(1))\n"
"#define CUBE_COUNT_Z ((uint) get_num_groups(2))\n"
"#define ABSOLUTE_POS_X (CUBE_POS_X * CUBE_DIM_X + UNIT_POS_X)\n"
"#define ABSOLUTE_POS_Y (CUBE_POS_Y * CUBE_DIM_Y + UNIT_POS_Y)\n"
"#define ABSOLUTE_POS_Z (CUBE_POS_Z * CUBE_DIM_Z + UNIT_POS_Z)\n"
"#define UNIT_POS ((uint) get_local_linear_id())\n"
"#define CUBE_DIM (CUBE_DIM_X * CUBE_DIM_Y * CUBE_DIM_Z)\n"
"#define CUBE_POS (CUBE_POS_X + CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_Z * CUBE_COUNT_X * CUBE_COUNT_Y)\n"
"#define CUBE_COUNT (CUBE_COUNT_X * CUBE_COUNT_Y * CUBE_COUNT_Z)\n"
"#define ABSOLUTE_POS ((ulong) CUBE_POS * CUBE_DIM + UNIT_POS)\n"
"#define sync_cube() barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)\n"
"#define SCALAR(type, word, i) (((__global const type *) (cube__info + (word)))[i])\n"
"#define META_U32(i) (((__global const uint *) (cube__info + cube__meta))[i])\n"
"#define DYN_U32(i) (((__global const uint *) (cube__info + cube__dyn))[i])\n"
"#define BUFFER_LEN(b) META_U32(b)\n";

static bool ident_char(int c)
{
        return isalnum(c) || c == '_';
}

/* A growing string. */
typedef struct sbuf {
        char *p;
        size_t len, cap;
        bool oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...)
{
        va_list ap;
        int n;

        for (;;) {
                va_start(ap, fmt);
                n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
                va_end(ap);
                if (n < 0) {
                        b->oom = true;
                        return;
                }
                if (b->p && b->len + (size_t) n < b->cap) {
                        b->len += (size_t) n;
                        return;
                }
                size_t cap = (b->cap + (size_t) n + 1) * 2;
                char *g = realloc(b->p, cap);
                if (!g) {
                        b->oom = true;
                        return;
                }
                b->p = g;
                b->cap = cap;
        }
}

static unsigned lines_in(const char *a, const char *b)
{
        unsigned n = 0;

        for (; a < b; a++)
                n += *a == '\n';
        return n;
}

/* Finds `KERNEL void ENTRY(`; returns where KERNEL starts and the '('. */
static const char *find_entry(const char *src, const char *entry, const char **ret_paren)
{
        size_t elen = strlen(entry);

        for (const char *p = src; (p = strstr(p, "KERNEL")) != NULL; p += 6) {
                const char *q = p + 6;
                if ((p > src && ident_char((unsigned char) p[-1])) || ident_char((unsigned char) *q))
                        continue;
                while (isspace((unsigned char) *q))
                        q++;
                if (strncmp(q, "void", 4) != 0 || ident_char((unsigned char) q[4]))
                        continue;
                q += 4;
                while (isspace((unsigned char) *q))
                        q++;
                if (strncmp(q, entry, elen) != 0 || ident_char((unsigned char) q[elen]))
                        continue;
                q += elen;
                while (isspace((unsigned char) *q))
                        q++;
                if (*q == '(') {
                        *ret_paren = q;
                        return p;
                }
        }
        return NULL;
}

cube_error *cube__cpu_translate(const cube__kernel_desc *desc, char **ret_source)
{
        const char *paren, *start = find_entry(desc->source, desc->entry, &paren), *p, *body;
        sbuf out = { 0 }, prologue = { 0 };
        uint32_t n = 0;
        int depth = 0;
        cube_error *e;

        if ((e = cube__dialect_check(desc->source)))
                return e;
        if (!start)
                return cube__err_text(CUBE_COMPILATION_VALIDATION, "the source defines no "
                                      "`KERNEL void %s(...)`", desc->entry);
        put(&out, "%s#line 1 \"%s.c\"\n%.*s", cube__cpu_prelude, desc->entry,
            (int) (start - desc->source), desc->source);
        /* One name for every entry point: an entry named like an OpenCL
         * builtin (rotate, dot) would hide behind it. */
        put(&out, "__kernel void cube__entry(__global const ulong *cube__arena, "
            "ulong cube__info_off, uint cube__meta, uint cube__dyn");
        put(&prologue, "__global const ulong *cube__info = cube__arena + cube__info_off; ");

        const char *param = paren + 1;
        for (p = paren + 1; *p; p++) {
                if (*p == '(') {
                        depth++;
                } else if (*p == ')' && depth > 0) {
                        depth--;
                } else if ((*p == ',' || *p == ')') && depth == 0) {
                        const char *a = param, *b = p;
                        while (a < b && isspace((unsigned char) *a))
                                a++;
                        while (b > a && isspace((unsigned char) b[-1]))
                                b--;
                        if (*p == ')')
                                break;
                        /* `T *name`: the name is the last identifier. */
                        const char *name = b;
                        while (name > a && ident_char((unsigned char) name[-1]))
                                name--;
                        const char *type_end = name;
                        while (type_end > a && isspace((unsigned char) type_end[-1]))
                                type_end--;
                        if (name == b || type_end == a || type_end[-1] != '*') {
                                free(out.p);
                                free(prologue.p);
                                return cube__err_text(CUBE_COMPILATION_VALIDATION, "line %u: "
                                                      "parameter %u of kernel '%s' must be "
                                                      "written `T *name`", 1 + lines_in(
                                                      desc->source, a), n + 1, desc->entry);
                        }
                        put(&out, ", __global char *cube__m%u, ulong cube__o%u", n, n);
                        put(&prologue, "__global %.*s = (__global %.*s) (cube__m%u + cube__o%u); ",
                            (int) (b - a), a, (int) (type_end - a), a, n, n);
                        n++;
                        param = p + 1;
                }
        }
        body = *p ? p + 1 : p;
        while (isspace((unsigned char) *body))
                body++;
        if (*body != '{') {
                free(out.p);
                free(prologue.p);
                return cube__err_text(CUBE_COMPILATION_VALIDATION, "kernel '%s' has no body "
                                      "after its parameters", desc->entry);
        }
        body++;
        put(&out, ")\n{ %s\n#line %u \"%s.c\"\n%s\n", prologue.p ? prologue.p : "",
            1 + lines_in(desc->source, body), desc->entry, body);
        free(prologue.p);
        if (out.oom) {
                free(out.p);
                return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(
                        CUBE_LAUNCH_OUT_OF_MEMORY, "out of host memory translating a kernel"));
        }
        *ret_source = out.p;
        return NULL;
}

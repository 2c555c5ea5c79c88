/*
 * opencl.c - the kernel dialect (docs/KERNELS.md) rewritten as OpenCL C, for
 * PoCL on the CPU device.
 *
 * One source runs on every device, so the dialect is the part of C that both
 * OpenCL C and CUDA C++ compile, without a C library. The kernel front end
 * (backends/frontend/) has already checked the source and rewritten its
 * entry point in terms of the CUBE__ macros; the prelude here says what
 * they are on the CPU device: every buffer a pointer into device memory, the
 * info words a pointer into the launch ring.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"
#include "errors.h"
#include "frontend.h"

_Static_assert(CUBE__CHECK_TAIL_WORDS == 36, "the prelude's CUBE__BINDING_BYTES");

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
"#define CUBE__SHARED_PTR __local\n"
"#define GLOBAL __global\n"
"#define CONSTANT __constant\n"
"#define DEVICE_FN\n"
"#define INFO __global const ulong *cube__info, uint cube__meta, uint cube__dyn\n"
"/* A looped entry (the front end's CUBE__LOOPED_KERNEL) runs as one work-item\n"
" * per cube that walks the cube's units: its own cube__looped, cube__u* and\n"
" * cube__d* hide these, which every other function sees. */\n"
"__constant int cube__looped = 0;\n"
"__constant uint cube__ux = 0, cube__uy = 0, cube__uz = 0;\n"
"__constant uint cube__dx = 1, cube__dy = 1, cube__dz = 1;\n"
"#define UNIT_POS_X (cube__looped ? cube__ux : (uint) get_local_id(0))\n"
"#define UNIT_POS_Y (cube__looped ? cube__uy : (uint) get_local_id(1))\n"
"#define UNIT_POS_Z (cube__looped ? cube__uz : (uint) get_local_id(2))\n"
"#define CUBE_POS_X ((uint) get_group_id(0))\n"
"#define CUBE_POS_Y ((uint) get_group_id(1))\n"
"#define CUBE_POS_Z ((uint) get_group_id(2))\n"
"#define CUBE_DIM_X (cube__looped ? cube__dx : (uint) get_local_size(0))\n"
"#define CUBE_DIM_Y (cube__looped ? cube__dy : (uint) get_local_size(1))\n"
"#define CUBE_DIM_Z (cube__looped ? cube__dz : (uint) get_local_size(2))\n"
"#define CUBE_COUNT_X ((uint) get_num_groups(0))\n"
"#define CUBE_COUNT_Y ((uint) get_num_groups(1))\n"
"#define CUBE_COUNT_Z ((uint) get_num_groups(2))\n"
"#define ABSOLUTE_POS_X (CUBE_POS_X * CUBE_DIM_X + UNIT_POS_X)\n"
"#define ABSOLUTE_POS_Y (CUBE_POS_Y * CUBE_DIM_Y + UNIT_POS_Y)\n"
"#define ABSOLUTE_POS_Z (CUBE_POS_Z * CUBE_DIM_Z + UNIT_POS_Z)\n"
"#define UNIT_POS (cube__looped ? cube__ux + cube__uy * cube__dx + cube__uz * cube__dx * cube__dy : \\\n"
"                  (uint) get_local_linear_id())\n"
"#define CUBE_DIM (CUBE_DIM_X * CUBE_DIM_Y * CUBE_DIM_Z)\n"
"#define CUBE_POS (CUBE_POS_X + CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_Z * CUBE_COUNT_X * CUBE_COUNT_Y)\n"
"#define CUBE_COUNT (CUBE_COUNT_X * CUBE_COUNT_Y * CUBE_COUNT_Z)\n"
"#define ABSOLUTE_POS ((ulong) CUBE_POS * CUBE_DIM + UNIT_POS)\n"
"#define sync_cube() barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)\n"
"#define SCALAR(type, word, i) (((__global const type *) (cube__info + (word)))[i])\n"
"#define META_U32(i) (((__global const uint *) (cube__info + cube__meta))[i])\n"
"#define DYN_U32(i) (((__global const uint *) (cube__info + cube__dyn))[i])\n"
"#define BUFFER_LEN(b) META_U32(b)\n"
"#define CUBE__KERNEL __kernel\n"
"#define CUBE__CAN_LOOP 1\n"
"#define CUBE__LOOPED_KERNEL __kernel __attribute__((reqd_work_group_size(1, 1, 1)))\n"
"/* A build for one cube dimension (shapes: the device's build with\n"
" * CUBE__SHAPE_X/Y/Z) walks a cube in loops of a fixed count, which the\n"
" * compiler may unroll and vectorise; it runs only launches of that shape.\n"
" * It holds each entry's bare form too (the front end's CUBE__BARE). */\n"
"#ifdef CUBE__SHAPE_X\n"
"#define CUBE__BARE 1\n"
"#define CUBE__DX CUBE__SHAPE_X\n"
"#define CUBE__DY CUBE__SHAPE_Y\n"
"#define CUBE__DZ CUBE__SHAPE_Z\n"
"#else\n"
"#define CUBE__DX cube__cdx\n"
"#define CUBE__DY cube__cdy\n"
"#define CUBE__DZ cube__cdz\n"
"#endif\n"
"/* The cube's shape first (its bounds read it), then its units. The loop\n"
" * over a row of units runs four vectors at a time: vectorised alone, a\n"
" * small step (4,096 floats) took three times PoCL's own work-group\n"
" * function, which runs its units unrolled (docs/PERFORMANCE.md). */\n"
"#define CUBE__UNITS_SETUP const int cube__looped = 1; \\\n"
"        const uint cube__dx = CUBE__DX, cube__dy = CUBE__DY, cube__dz = CUBE__DZ;\n"
"#define CUBE__UNITS_BEGIN cube__acc_t cube__acc; cube__acc_init(&cube__acc); \\\n"
"        cube__ctx->acc = &cube__acc; \\\n"
"        for (uint cube__uz = 0; cube__uz < cube__dz; cube__uz++) \\\n"
"        for (uint cube__uy = 0; cube__uy < cube__dy; cube__uy++) \\\n"
"        _Pragma(\"clang loop interleave_count(4)\") \\\n"
"        for (uint cube__ux = 0; cube__ux < cube__dx; cube__ux++) {\n"
"#define CUBE__UNITS_END cube__next: ; } cube__publish(cube__ctx);\n"
"#define CUBE__UNIT_RETURN goto cube__next\n"
"#define CUBE__ENTRY_NAME(n) cube__k_##n\n"
"#define CUBE__BARE_NAME(n) cube__kb_##n\n"
"/* PoCL copies each of a launch's arguments into an allocation of its own,\n"
" * so they are few (device.h): the ring, the launch's words in one vector\n"
" * (cube__launch_arg), and each buffer's place and length. A looped entry\n"
" * reads its words through a pointer the device seldom changes, and takes\n"
" * no buffer: the device wrote their places in the ring just before the info\n"
" * words, and their lengths are at the info words' tail (frontend.h's\n"
" * CUBE__CHECK_TAIL_WORDS), as on CUDA. */\n"
"#define CUBE__PARAMS_HEAD __global ulong *cube__arena, ulong4 cube__launch\n"
"#define CUBE__BUFFER(k) , __global char *cube__m##k, ulong cube__b##k\n"
"#define CUBE__BINDING_BYTES(k, nb) cube__b##k\n"
"#define CUBE__BUFFER_PTR(k, nb) cube__m##k\n"
"#define CUBE__LOOPED_PARAMS_HEAD __global ulong *cube__arena, \\\n"
"        __global const ulong *cube__launch_at\n"
"#define CUBE__LOOPED_BUFFER(k)\n"
"#define CUBE__LOOPED_BINDING_BYTES(k, nb) \\\n"
"        (cube__nw >= 36u + (nb) ? cube__info[cube__nw - 36u - (nb) + (k)] : 0ul)\n"
"#define CUBE__LOOPED_BUFFER_PTR(k, nb) ((__global char *) cube__info[(int) (k) - (int) (nb)])\n"
"#define CUBE__PARAMS_TAIL\n"
"#define CUBE__ENTRY_BEGIN __global const ulong *cube__info = cube__arena + cube__launch.s0; \\\n"
"        const uint cube__meta = (uint) cube__launch.s1, \\\n"
"        cube__dyn = (uint) (cube__launch.s1 >> 32), \\\n"
"        cube__nw = (uint) cube__launch.s2, cube__cdx = (uint) (cube__launch.s2 >> 32), \\\n"
"        cube__cdy = (uint) cube__launch.s3, cube__cdz = (uint) (cube__launch.s3 >> 32)\n"
"#define CUBE__LOOPED_ENTRY_BEGIN const ulong4 cube__launch = vload4(0, cube__launch_at); \\\n"
"        CUBE__ENTRY_BEGIN\n"
"#define CUBE__CAS32(p, o, n) atomic_cmpxchg((volatile __global uint *) (p), (o), (n))\n";

cube_error *cube__cpu_translate(const cube__kernel_desc *desc, char **ret_source)
{
        char *out = NULL;

        /* The front end wrote the entry point in the checked form the
         * prelude's CUBE__ macros complete: one name for every entry point
         * (an entry named like an OpenCL builtin, rotate or dot, would hide
         * behind it), every buffer a pointer into device memory. */
        if (asprintf(&out, "%s%s", cube__cpu_prelude, desc->source) < 0)
                return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(
                        CUBE_LAUNCH_OUT_OF_MEMORY, "out of host memory translating a kernel"));
        *ret_source = out;
        return NULL;
}

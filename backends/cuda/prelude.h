/*
 * prelude.h - the kernel dialect of docs/KERNELS.md in CUDA C++, as NVRTC
 * compiles it in front of every kernel's source.
 *
 * NVRTC has no C library headers: the fixed-width types, limits and math
 * constants a kernel may use are defined here, and kernels that include
 * <stdint.h>, <stddef.h>, <stdbool.h>, <math.h>, <limits.h> or <float.h> get
 * empty ones (compile.c). Math functions are NVRTC built-ins.
 *
 * The launch passes the bound buffers in binding order, then the info words
 * in device memory, the word offsets of the static and dynamic metadata and
 * the number of info words (device.c; CUBE__PARAMS_TAIL below).
 *
 * This file is part of every CUDA kernel's cache key (its SHA-256).
 */
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long uint64_t;
typedef long intptr_t;
typedef unsigned long uintptr_t;
typedef unsigned long size_t;
typedef long ptrdiff_t;

#define INT8_MIN (-128)
#define INT16_MIN (-32768)
#define INT32_MIN (-2147483647 - 1)
#define INT64_MIN (-9223372036854775807L - 1)
#define INT8_MAX 127
#define INT16_MAX 32767
#define INT32_MAX 2147483647
#define INT64_MAX 9223372036854775807L
#define UINT8_MAX 255
#define UINT16_MAX 65535
#define UINT32_MAX 4294967295U
#define UINT64_MAX 18446744073709551615UL
#define SIZE_MAX UINT64_MAX
#define CHAR_BIT 8
#define INT_MIN INT32_MIN
#define INT_MAX INT32_MAX
#define UINT_MAX UINT32_MAX
#define LONG_MIN INT64_MIN
#define LONG_MAX INT64_MAX
#define ULONG_MAX UINT64_MAX
#define FLT_MAX 3.402823466e+38F
#define FLT_MIN 1.175494351e-38F
#define FLT_EPSILON 1.192092896e-07F
#define DBL_MAX 1.7976931348623158e+308
#define DBL_MIN 2.2250738585072014e-308
#define DBL_EPSILON 2.2204460492503131e-16
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
#define HUGE_VALF INFINITY
#define HUGE_VAL __longlong_as_double(0x7ff0000000000000LL)
#define M_E 2.7182818284590452354
#define M_LN2 0.69314718055994530942
#define M_PI 3.14159265358979323846
#define M_PI_2 1.57079632679489661923
#define M_SQRT2 1.41421356237309504880
#ifndef NULL
#define NULL 0
#endif

/* C spellings C++ lacks. */
#define restrict __restrict__
#define _Bool bool
#define _Static_assert static_assert
#define _Alignof alignof
#define _Noreturn
template <class T> struct cube__noref { typedef T type; };
template <class T> struct cube__noref<T &> { typedef T type; };
#define typeof(x) cube__noref<decltype(x)>::type
#define __typeof__(x) cube__noref<decltype(x)>::type
__device__ __forceinline__ int cube__popcount(unsigned x) { return __popc(x); }
__device__ __forceinline__ int cube__popcountll(unsigned long long x) { return __popcll(x); }
__device__ __forceinline__ int cube__clz(unsigned x) { return __clz((int) x); }
__device__ __forceinline__ int cube__clzll(unsigned long long x) { return __clzll((long long) x); }
__device__ __forceinline__ int cube__ctz(unsigned x) { return __ffs((int) x) - 1; }
__device__ __forceinline__ int cube__ctzll(unsigned long long x) { return __ffsll((long long) x) - 1; }
__device__ __forceinline__ int cube__ffs(int x) { return __ffs(x); }
#define __builtin_popcount cube__popcount
#define __builtin_popcountl cube__popcountll
#define __builtin_popcountll cube__popcountll
#define __builtin_clz cube__clz
#define __builtin_clzl cube__clzll
#define __builtin_clzll cube__clzll
#define __builtin_ctz cube__ctz
#define __builtin_ctzl cube__ctzll
#define __builtin_ctzll cube__ctzll
#define __builtin_ffs cube__ffs
#define __builtin_trap __trap

/* The dialect. */
#define KERNEL extern "C" __global__
#define SHARED __shared__
#define GLOBAL
#define CONSTANT __constant__
#define INFO const uint64_t *__restrict__ cube__info, uint32_t cube__meta, uint32_t cube__dyn, \
        uint32_t cube__nw
#define UNIT_POS_X ((uint32_t) threadIdx.x)
#define UNIT_POS_Y ((uint32_t) threadIdx.y)
#define UNIT_POS_Z ((uint32_t) threadIdx.z)
#define CUBE_POS_X ((uint32_t) blockIdx.x)
#define CUBE_POS_Y ((uint32_t) blockIdx.y)
#define CUBE_POS_Z ((uint32_t) blockIdx.z)
#define CUBE_DIM_X ((uint32_t) blockDim.x)
#define CUBE_DIM_Y ((uint32_t) blockDim.y)
#define CUBE_DIM_Z ((uint32_t) blockDim.z)
#define CUBE_COUNT_X ((uint32_t) gridDim.x)
#define CUBE_COUNT_Y ((uint32_t) gridDim.y)
#define CUBE_COUNT_Z ((uint32_t) gridDim.z)
#define ABSOLUTE_POS_X (CUBE_POS_X * CUBE_DIM_X + UNIT_POS_X)
#define ABSOLUTE_POS_Y (CUBE_POS_Y * CUBE_DIM_Y + UNIT_POS_Y)
#define ABSOLUTE_POS_Z (CUBE_POS_Z * CUBE_DIM_Z + UNIT_POS_Z)
#define UNIT_POS (UNIT_POS_X + UNIT_POS_Y * CUBE_DIM_X + UNIT_POS_Z * CUBE_DIM_X * CUBE_DIM_Y)
#define CUBE_DIM (CUBE_DIM_X * CUBE_DIM_Y * CUBE_DIM_Z)
#define CUBE_POS (CUBE_POS_X + CUBE_POS_Y * CUBE_COUNT_X + CUBE_POS_Z * CUBE_COUNT_X * CUBE_COUNT_Y)
#define CUBE_COUNT (CUBE_COUNT_X * CUBE_COUNT_Y * CUBE_COUNT_Z)
#define ABSOLUTE_POS ((uint64_t) CUBE_POS * CUBE_DIM + UNIT_POS)
#define sync_cube() __syncthreads()
#define SCALAR(type, word, i) (((const type *) (cube__info + (word)))[i])
#define META_U32(i) (((const uint32_t *) (cube__info + cube__meta))[i])
#define DYN_U32(i) (((const uint32_t *) (cube__info + cube__dyn))[i])
#define BUFFER_LEN(b) META_U32(b)

/* The checked form the kernel front end writes (backends/frontend/): the
 * entry point keeps its name, takes its buffers as bytes, then the info
 * words (read and, for the out-of-bounds record, written), the metadata
 * offsets and the number of info words. */
#define CUBE__KERNEL extern "C" __global__
#define CUBE__ENTRY_NAME(n) n
#define CUBE__PARAMS_HEAD
#define CUBE__BUFFER(k) char *cube__p##k,
#define CUBE__BUFFER_PTR(k, nb) cube__p##k
#define CUBE__BINDING_BYTES(k, nb) cube__info[cube__nw - 36u - (nb) + (k)]
#define CUBE__PARAMS_TAIL const uint64_t *cube__info, uint32_t cube__meta, uint32_t cube__dyn, \
        uint32_t cube__nw
#define CUBE__ENTRY_BEGIN
#define CUBE__CAS32(p, o, n) atomicCAS((unsigned *) (p), (o), (n))

/* Tensor maps: each TENSOR_MAP parameter arrives as the CUtensorMap the
 * backend encoded with cuTensorMapEncodeTiled (device.c), a 128-byte
 * __grid_constant__ parameter after the buffers. The checked guards copy
 * a tensor_map_load's box themselves, the map's words telling them how. */
typedef struct __align__(64) cube__tensor_map_t {
        unsigned long long opaque[16];
} cube__tensor_map_t;
#define CUBE__TENSOR_MAP(m) const __grid_constant__ cube__tensor_map_t cube__tm##m,
#define CUBE__TENSOR_MAP_PTR(m) ((const void *) &cube__tm##m)
/* The Tensor Memory Accelerator's path below is off: on an H200 (driver
 * 580) its first launch failed with CUDA_ERROR_ILLEGAL_INSTRUCTION, which
 * kills the context, and the cause is not known yet. The checked guards
 * copy the box instead, with the same result. CUBE__TMA_HARDWARE turns it
 * back on for the one who finds the cause. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(CUBE__TMA_HARDWARE)
/* Every unit calls it with the same arguments; returns 1 once the box is in
 * dst for all of them, 0 (having done nothing) where the copy cannot go. */
static __device__ int cube__tma_load(const void *map, void *dst, uint32_t bytes, uint32_t n,
                                     const int64_t *at, uint64_t swizzle)
{
        __shared__ __align__(8) uint64_t bar;
        uint32_t align = swizzle ? 256u << (swizzle - 1) : 128u;
        uint32_t s = (uint32_t) __cvta_generic_to_shared(dst);
        uint32_t b = (uint32_t) __cvta_generic_to_shared(&bar);
        uint32_t unit = threadIdx.x + threadIdx.y * blockDim.x +
                        threadIdx.z * blockDim.x * blockDim.y;
        int32_t c0 = (int32_t) at[0], c1 = (int32_t) at[1], c2 = (int32_t) at[2];
        int32_t c3 = (int32_t) at[3], c4 = (int32_t) at[4];
        uint32_t done = 0;

        if (!map || s % align != 0)
                return 0;
        __syncthreads();        /* every unit is past its reads of dst */
        if (unit == 0) {
                asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b) : "memory");
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                             :: "r"(b), "r"(bytes) : "memory");
                switch (n) {
                case 1:
                        asm volatile("cp.async.bulk.tensor.1d.shared::cluster.global.tile"
                                     ".mbarrier::complete_tx::bytes [%0], [%1, {%2}], [%3];"
                                     :: "r"(s), "l"(map), "r"(c0), "r"(b) : "memory");
                        break;
                case 2:
                        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile"
                                     ".mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                                     :: "r"(s), "l"(map), "r"(c0), "r"(c1), "r"(b) : "memory");
                        break;
                case 3:
                        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile"
                                     ".mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], "
                                     "[%5];" :: "r"(s), "l"(map), "r"(c0), "r"(c1), "r"(c2),
                                     "r"(b) : "memory");
                        break;
                case 4:
                        asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile"
                                     ".mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
                                     "[%6];" :: "r"(s), "l"(map), "r"(c0), "r"(c1), "r"(c2),
                                     "r"(c3), "r"(b) : "memory");
                        break;
                default:
                        asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile"
                                     ".mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5, "
                                     "%6}], [%7];" :: "r"(s), "l"(map), "r"(c0), "r"(c1),
                                     "r"(c2), "r"(c3), "r"(c4), "r"(b) : "memory");
                        break;
                }
        }
        __syncthreads();        /* the barrier is initialised before anyone waits on it */
        while (!done)
                asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; "
                             "selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(b) : "memory");
        __syncthreads();        /* every unit saw the phase complete */
        if (unit == 0)
                asm volatile("mbarrier.inval.shared::cta.b64 [%0];" :: "r"(b) : "memory");
        return 1;
}
#define CUBE__TMA_LOAD(c, d, m, dst, bytes, n, at) \
        cube__tma_load((c)->tmd[m], (void *) (dst), (uint32_t) (bytes), (n), (at), \
                       (d)[CUBE__TMAP_SWIZZLE])
#endif

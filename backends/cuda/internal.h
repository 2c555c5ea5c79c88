/*
 * internal.h - what the CUDA backend's files share: the driver and NVRTC
 * entry points resolved at run time, the error table, and the compiler.
 *
 * Nothing here links libcuda or NVRTC. The driver's entry points are
 * resolved through cuGetProcAddress at the ABI of the headers the build
 * used (CUDA_VERSION), so each pointer has exactly the type cuda.h gives the
 * name (cuMemAlloc is cuMemAlloc_v2's type, never the 32-bit one dlsym
 * would find).
 */
#ifndef CUBE_CUDA_INTERNAL_H
#define CUBE_CUDA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>
#include <nvrtc.h>

#include "driver.h"

/* The driver entry points the backend calls. X(name) once per entry. */
#define CUBE__CUDA_ENTRIES(X) \
        X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuDeviceGetCount) X(cuDeviceGet) \
        X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDeviceTotalMem) \
        X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease) X(cuDevicePrimaryCtxReset) \
        X(cuDevicePrimaryCtxSetFlags) X(cuCtxSetCurrent) X(cuMemGetInfo) \
        X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuStreamWaitEvent) \
        X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord) X(cuEventQuery) X(cuEventElapsedTime) \
        X(cuMemPoolCreate) X(cuMemPoolDestroy) X(cuMemPoolSetAttribute) \
        X(cuMemAllocFromPoolAsync) X(cuMemFreeAsync) X(cuMemsetD8Async) \
        X(cuMemcpyHtoDAsync) X(cuMemcpyDtoHAsync) X(cuMemcpy2DAsync) \
        X(cuMemHostRegister) X(cuMemHostUnregister) X(cuMemAllocHost) X(cuMemFreeHost) \
        X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuFuncGetAttribute) \
        X(cuLaunchKernel) X(cuLaunchHostFunc) X(cuTensorMapEncodeTiled) \
        X(cuTensorMapEncodeIm2col)

#define CUBE__CUDA_FIELD(name) __typeof__(name) *name;
typedef struct cube__cuda_api {
        CUBE__CUDA_ENTRIES(CUBE__CUDA_FIELD)
        int driver_version;
} cube__cuda_api;

#define CUBE__NVRTC_ENTRIES(X) \
        X(nvrtcVersion) X(nvrtcGetErrorString) X(nvrtcCreateProgram) X(nvrtcDestroyProgram) \
        X(nvrtcCompileProgram) X(nvrtcGetProgramLogSize) X(nvrtcGetProgramLog) \
        X(nvrtcGetCUBINSize) X(nvrtcGetCUBIN) X(nvrtcGetPTXSize) X(nvrtcGetPTX)

typedef struct cube__nvrtc_api {
        CUBE__NVRTC_ENTRIES(CUBE__CUDA_FIELD)
        int major, minor;
} cube__nvrtc_api;

/* Loads libcuda.so.1 and resolves every entry (once per process). Returns 0,
 * or -ENODEV / -ENOSYS with one line for a person in *ret_why. */
int cube__cuda_load_driver(const cube__cuda_api **ret_api, const char **ret_why);
/* Loads NVRTC (libnvrtc.so.13, libnvrtc.so); the same contract. */
int cube__cuda_load_nvrtc(const cube__nvrtc_api **ret_api, const char **ret_why);
/* Loads NCCL if it is there; its version (e.g. 22809), or 0 without it. */
int cube__cuda_nccl_version(void);

/* What a CUresult means to the daemon: every code cuda.h defines has one. */
typedef enum cube__cu_class {
        CUBE__CU_OK,            /* CUDA_SUCCESS */
        CUBE__CU_NOT_READY,     /* cuEventQuery: not yet; not an error */
        CUBE__CU_POISON,        /* sticky: the context is dead; every launch in flight is named */
        CUBE__CU_OUT_OF_MEMORY, /* device memory: worth a reclaim and a retry */
        CUBE__CU_RESOURCES,     /* the launch asks more than the kernel's resources allow */
        CUBE__CU_COMPILE,       /* the compiled module cannot run here: the source's refusal */
        CUBE__CU_NO_DEVICE,     /* no usable device or driver: open fails */
        CUBE__CU_DEFECT,        /* anything else: a defect of the daemon or the machine */
} cube__cu_class;

typedef struct cube__cu_entry {
        int code;
        const char *name;
        cube__cu_class cls;
} cube__cu_entry;

/* The table, for tests. */
const cube__cu_entry *cube__cuda_results(size_t *ret_n);
/* The entry of a code; an unknown code is a defect named by its number. */
cube__cu_class cube__cuda_class(CUresult r);
const char *cube__cuda_name(CUresult r);

/* Where a CUDA call failed decides the variant that carries it. */
typedef enum cube__cu_site {
        CUBE__CU_SITE_LAUNCH,   /* a launch: Launch(...) */
        CUBE__CU_SITE_IO,       /* memory and copies: Io(...) */
        CUBE__CU_SITE_MODULE,   /* loading a compiled kernel */
} cube__cu_site;

/* The taxonomy for a failed call, what naming the call ("cuLaunchKernel of
 * 'k'"): POISON is a bare DevicePoison (the core wraps it per path), the
 * rest a ServerError. size is the bytes an allocation asked for (IO site). */
cube_error *cube__cuda_error(cube__cu_site site, CUresult r, uint64_t size, const char *what);

/* NVRTC statuses: COMPILATION is the source's fault (CompilationError with
 * the log); OUT_OF_MEMORY, INTERNAL_ERROR, CANCELLED... are defects. */
bool cube__nvrtc_is_source_fault(nvrtcResult r);
cube_error *cube__nvrtc_error(nvrtcResult r, const char *entry, const char *log);

/* The CUDA prelude (prelude.h, embedded by embed.py) and its SHA-256. */
extern const char cube__cuda_prelude[];
extern const char cube__cuda_prelude_digest[];

/* What a compiled kernel needs of the device, read from the CUBIN (ELF) or
 * from cuFuncGetAttribute. */
typedef struct cube__cuda_resources {
        uint32_t registers;     /* per unit */
        uint32_t shared_bytes;  /* static SHARED */
        uint32_t local_bytes;   /* per-unit stack frame (spills, local arrays) */
        uint32_t param_bytes;
        uint32_t max_units;     /* cuFuncGetAttribute only; 0 from the ELF */
} cube__cuda_resources;

/* Compiles desc for sm_<arch> into *ret_cubin (malloc'd); the NVRTC options
 * are those of cube__cuda_options. ptx asks for compute_<arch> PTX instead. */
cube_error *cube__cuda_compile(const cube__nvrtc_api *nv, const cube__kernel_desc *desc,
                               int arch, bool ptx, char **ret_image, size_t *ret_size);
/* Compiles desc into a CUBIN at path in a child process (this program
 * started again) under limits: cpu_s seconds of CPU (0: 60), and address
 * space and output bounds. */
cube_error *cube__cuda_compile_confined(const cube__kernel_desc *desc, int arch, unsigned cpu_s,
                                        const char *path);
/* The options every kernel is compiled with, for the cache key. */
const char *cube__cuda_options(void);
/* Reads the resources of entry from a CUBIN. Returns 0 or -EINVAL. */
int cube__cuda_cubin_resources(const void *cubin, size_t size, const char *entry,
                               cube__cuda_resources *ret);
/* The bytes each buffer parameter of entry loads its elements at (4 for
 * float *, 16 for float4 *), read from the kernel's signature: a binding at
 * an offset that is not a multiple is refused at launch. 1 where the type is
 * not one the dialect names. */
void cube__cuda_buffer_alignments(const char *source, const char *entry, uint8_t *ret_align,
                                  uint32_t n_buffers);
/* The per-unit stack a kernel may have, and the refusal of one beyond it:
 * the driver reserves local memory for every unit the device can hold
 * (local_bytes x resident units), at the first launch, and keeps it. NULL
 * when res fits. */
cube_error *cube__cuda_check_stack(const cube__cuda_resources *res, const char *entry,
                                   uint64_t resident_units, uint64_t device_memory);

#endif

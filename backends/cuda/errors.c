/*
 * errors.c - one table from every CUresult to what it means to the daemon,
 * and from there to the error taxonomy; and NVRTC's statuses.
 *
 * No CUDA error leaves the backend as a bare number: each becomes a
 * cube_error whose variant says whose fault it is (a refusal of the source,
 * memory worth a reclaim, a poisoned device, a defect), and whose text names
 * the call, the code's name and its number. The sticky codes (the context
 * is dead, cuda.h: "must be terminated and relaunched") poison the device;
 * so do ECC and NVLink uncorrectable errors and CUDA_ERROR_UNKNOWN, which
 * cuda.h does not call sticky but after which nothing can be trusted.
 */
#include <stdio.h>

#include "errors.h"
#include "internal.h"

#define E(code, cls) { code, #code, CUBE__CU_##cls }

static const cube__cu_entry table[] = {
        E(CUDA_SUCCESS, OK),
        E(CUDA_ERROR_INVALID_VALUE, DEFECT),
        E(CUDA_ERROR_OUT_OF_MEMORY, OUT_OF_MEMORY),
        E(CUDA_ERROR_NOT_INITIALIZED, DEFECT),
        E(CUDA_ERROR_DEINITIALIZED, POISON),
        E(CUDA_ERROR_PROFILER_DISABLED, DEFECT),
        E(CUDA_ERROR_PROFILER_NOT_INITIALIZED, DEFECT),
        E(CUDA_ERROR_PROFILER_ALREADY_STARTED, DEFECT),
        E(CUDA_ERROR_PROFILER_ALREADY_STOPPED, DEFECT),
        E(CUDA_ERROR_STUB_LIBRARY, NO_DEVICE),
        E(CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER, NO_DEVICE),
        E(CUDA_ERROR_DEVICE_UNAVAILABLE, NO_DEVICE),
        E(CUDA_ERROR_NO_DEVICE, NO_DEVICE),
        E(CUDA_ERROR_INVALID_DEVICE, NO_DEVICE),
        E(CUDA_ERROR_DEVICE_NOT_LICENSED, NO_DEVICE),
        E(CUDA_ERROR_INVALID_IMAGE, COMPILE),
        E(CUDA_ERROR_INVALID_CONTEXT, DEFECT),
        E(CUDA_ERROR_CONTEXT_ALREADY_CURRENT, DEFECT),
        E(CUDA_ERROR_MAP_FAILED, DEFECT),
        E(CUDA_ERROR_UNMAP_FAILED, DEFECT),
        E(CUDA_ERROR_ARRAY_IS_MAPPED, DEFECT),
        E(CUDA_ERROR_ALREADY_MAPPED, DEFECT),
        E(CUDA_ERROR_NO_BINARY_FOR_GPU, COMPILE),
        E(CUDA_ERROR_ALREADY_ACQUIRED, DEFECT),
        E(CUDA_ERROR_NOT_MAPPED, DEFECT),
        E(CUDA_ERROR_NOT_MAPPED_AS_ARRAY, DEFECT),
        E(CUDA_ERROR_NOT_MAPPED_AS_POINTER, DEFECT),
        E(CUDA_ERROR_ECC_UNCORRECTABLE, POISON),
        E(CUDA_ERROR_UNSUPPORTED_LIMIT, DEFECT),
        E(CUDA_ERROR_CONTEXT_ALREADY_IN_USE, DEFECT),
        E(CUDA_ERROR_PEER_ACCESS_UNSUPPORTED, DEFECT),
        E(CUDA_ERROR_INVALID_PTX, COMPILE),
        E(CUDA_ERROR_INVALID_GRAPHICS_CONTEXT, DEFECT),
        E(CUDA_ERROR_NVLINK_UNCORRECTABLE, POISON),
        E(CUDA_ERROR_JIT_COMPILER_NOT_FOUND, DEFECT),
        E(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, COMPILE),
        E(CUDA_ERROR_JIT_COMPILATION_DISABLED, DEFECT),
        E(CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY, DEFECT),
        E(CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC, COMPILE),
        E(CUDA_ERROR_CONTAINED, POISON),
        E(CUDA_ERROR_INVALID_SOURCE, COMPILE),
        E(CUDA_ERROR_FILE_NOT_FOUND, DEFECT),
        E(CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND, DEFECT),
        E(CUDA_ERROR_SHARED_OBJECT_INIT_FAILED, DEFECT),
        E(CUDA_ERROR_OPERATING_SYSTEM, DEFECT),
        E(CUDA_ERROR_INVALID_HANDLE, DEFECT),
        E(CUDA_ERROR_ILLEGAL_STATE, DEFECT),
        E(CUDA_ERROR_LOSSY_QUERY, DEFECT),
        E(CUDA_ERROR_NOT_FOUND, DEFECT),
        E(CUDA_ERROR_NOT_READY, NOT_READY),
        E(CUDA_ERROR_ILLEGAL_ADDRESS, POISON),
        E(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, RESOURCES),
        E(CUDA_ERROR_LAUNCH_TIMEOUT, POISON),
        E(CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING, DEFECT),
        E(CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, DEFECT),
        E(CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, DEFECT),
        E(CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE, DEFECT),
        E(CUDA_ERROR_CONTEXT_IS_DESTROYED, POISON),
        E(CUDA_ERROR_ASSERT, POISON),
        E(CUDA_ERROR_TOO_MANY_PEERS, DEFECT),
        E(CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, DEFECT),
        E(CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, DEFECT),
        E(CUDA_ERROR_HARDWARE_STACK_ERROR, POISON),
        E(CUDA_ERROR_ILLEGAL_INSTRUCTION, POISON),
        E(CUDA_ERROR_MISALIGNED_ADDRESS, POISON),
        E(CUDA_ERROR_INVALID_ADDRESS_SPACE, POISON),
        E(CUDA_ERROR_INVALID_PC, POISON),
        E(CUDA_ERROR_LAUNCH_FAILED, POISON),
        E(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, RESOURCES),
        E(CUDA_ERROR_TENSOR_MEMORY_LEAK, POISON),
        E(CUDA_ERROR_NOT_PERMITTED, DEFECT),
        E(CUDA_ERROR_NOT_SUPPORTED, DEFECT),
        E(CUDA_ERROR_SYSTEM_NOT_READY, NO_DEVICE),
        E(CUDA_ERROR_SYSTEM_DRIVER_MISMATCH, NO_DEVICE),
        E(CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE, NO_DEVICE),
        E(CUDA_ERROR_MPS_CONNECTION_FAILED, NO_DEVICE),
        E(CUDA_ERROR_MPS_RPC_FAILURE, DEFECT),
        E(CUDA_ERROR_MPS_SERVER_NOT_READY, NO_DEVICE),
        E(CUDA_ERROR_MPS_MAX_CLIENTS_REACHED, NO_DEVICE),
        E(CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED, NO_DEVICE),
        E(CUDA_ERROR_MPS_CLIENT_TERMINATED, POISON),
        E(CUDA_ERROR_CDP_NOT_SUPPORTED, DEFECT),
        E(CUDA_ERROR_CDP_VERSION_MISMATCH, DEFECT),
        E(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, DEFECT),
        E(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, DEFECT),
        E(CUDA_ERROR_STREAM_CAPTURE_MERGE, DEFECT),
        E(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, DEFECT),
        E(CUDA_ERROR_STREAM_CAPTURE_UNJOINED, DEFECT),
        E(CUDA_ERROR_STREAM_CAPTURE_ISOLATION, DEFECT),
        E(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, DEFECT),
        E(CUDA_ERROR_CAPTURED_EVENT, DEFECT),
        E(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD, DEFECT),
        E(CUDA_ERROR_TIMEOUT, DEFECT),
        E(CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, DEFECT),
        E(CUDA_ERROR_EXTERNAL_DEVICE, POISON),
        E(CUDA_ERROR_INVALID_CLUSTER_SIZE, RESOURCES),
        E(CUDA_ERROR_FUNCTION_NOT_LOADED, DEFECT),
        E(CUDA_ERROR_INVALID_RESOURCE_TYPE, DEFECT),
        E(CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION, DEFECT),
        E(CUDA_ERROR_KEY_ROTATION, DEFECT),
        E(CUDA_ERROR_UNKNOWN, POISON),
};

const cube__cu_entry *cube__cuda_results(size_t *ret_n)
{
        *ret_n = sizeof(table) / sizeof(table[0]);
        return table;
}

static const cube__cu_entry *entry_of(CUresult r)
{
        for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
                if (table[i].code == (int) r)
                        return &table[i];
        return NULL;
}

cube__cu_class cube__cuda_class(CUresult r)
{
        const cube__cu_entry *e = entry_of(r);
        return e ? e->cls : CUBE__CU_DEFECT;
}

const char *cube__cuda_name(CUresult r)
{
        const cube__cu_entry *e = entry_of(r);
        return e ? e->name : "an unknown CUresult";
}

cube_error *cube__cuda_error(cube__cu_site site, CUresult r, uint64_t size, const char *what)
{
        char reason[512];

        snprintf(reason, sizeof(reason), "%s failed: %s (%d)", what, cube__cuda_name(r), (int) r);
        switch (cube__cuda_class(r)) {
        case CUBE__CU_POISON:
                return cube__err_poison("%s", reason);
        case CUBE__CU_OUT_OF_MEMORY:
                if (site == CUBE__CU_SITE_IO)
                        return cube__err_io_size(CUBE_IO_OUT_OF_MEMORY, size);
                return cube__err_wrap(CUBE_SERVER_LAUNCH,
                                      cube__err_text(CUBE_LAUNCH_OUT_OF_MEMORY, "%s", reason));
        case CUBE__CU_RESOURCES:
                /* The units a kernel allows are checked before any launch
                 * (max_units); the driver's own refusal carries the units asked
                 * for, and 0 for a maximum it did not say. */
                if (site == CUBE__CU_SITE_LAUNCH)
                        return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_wrap(
                                CUBE_LAUNCH_TOO_MANY_RESOURCES,
                                cube__err_resource(CUBE_RESOURCE_UNITS, size, 0)));
                break;
        case CUBE__CU_COMPILE:
                if (site == CUBE__CU_SITE_MODULE)
                        return cube__err_text(CUBE_COMPILATION_GENERIC, "%s; the compiled kernel "
                                              "cannot run on this device", reason);
                break;
        default:
                break;
        }
        if (site == CUBE__CU_SITE_IO)
                return cube__err_wrap(CUBE_SERVER_IO, cube__err_text(CUBE_IO_UNKNOWN, "%s", reason));
        return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(CUBE_LAUNCH_UNKNOWN, "%s", reason));
}

bool cube__nvrtc_is_source_fault(nvrtcResult r)
{
        /* NVRTC_ERROR_COMPILATION is the source's; an invalid option or
         * input is ours (a defect), as are memory, internals and a cancel. */
        return r == NVRTC_ERROR_COMPILATION;
}

cube_error *cube__nvrtc_error(nvrtcResult r, const char *entry, const char *log)
{
        static const char *const names[] = {
                "NVRTC_SUCCESS", "NVRTC_ERROR_OUT_OF_MEMORY",
                "NVRTC_ERROR_PROGRAM_CREATION_FAILURE", "NVRTC_ERROR_INVALID_INPUT",
                "NVRTC_ERROR_INVALID_PROGRAM", "NVRTC_ERROR_INVALID_OPTION",
                "NVRTC_ERROR_COMPILATION", "NVRTC_ERROR_BUILTIN_OPERATION_FAILURE",
                "NVRTC_ERROR_NO_NAME_EXPRESSIONS_AFTER_COMPILATION",
                "NVRTC_ERROR_NO_LOWERED_NAMES_BEFORE_COMPILATION",
                "NVRTC_ERROR_NAME_EXPRESSION_NOT_VALID", "NVRTC_ERROR_INTERNAL_ERROR",
                "NVRTC_ERROR_TIME_FILE_WRITE_FAILED", "NVRTC_ERROR_NO_PCH_CREATE_ATTEMPTED",
                "NVRTC_ERROR_PCH_CREATE_HEAP_EXHAUSTED", "NVRTC_ERROR_PCH_CREATE",
                "NVRTC_ERROR_CANCELLED", "NVRTC_ERROR_TIME_TRACE_FILE_WRITE_FAILED",
        };
        const char *name = (unsigned) r < sizeof(names) / sizeof(names[0]) ? names[r] :
                           "an unknown nvrtcResult";

        if (cube__nvrtc_is_source_fault(r))
                return cube__err_text(CUBE_COMPILATION_GENERIC, "NVRTC could not build kernel "
                                      "'%s':\n%s", entry, log ? log : "");
        if (r == NVRTC_ERROR_OUT_OF_MEMORY)
                return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(
                        CUBE_LAUNCH_OUT_OF_MEMORY, "NVRTC ran out of host memory building '%s'",
                        entry));
        return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(CUBE_LAUNCH_UNKNOWN,
                "NVRTC failed while building kernel '%s': %s (%d); a later launch tries "
                "again%s%s", entry, name, (int) r, log && *log ? ":\n" : "", log ? log : ""));
}

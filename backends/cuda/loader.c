/*
 * loader.c - finds the CUDA driver, NVRTC and NCCL at run time.
 *
 * cubed never links them: a binary linked to libcuda cannot even start on a
 * machine without a driver. libcuda.so.1 is opened with dlopen, and only
 * cuGetProcAddress is looked up by symbol; every other entry point is asked
 * of the driver by its base name at one fixed ABI version, the headers'
 * CUDA_VERSION. dlsym("cuMemAlloc") would find the CUDA 2.0 ABI (32-bit
 * sizes) that libcuda still exports beside cuMemAlloc_v2, and about forty
 * other such pairs; cuGetProcAddress hands out the one cuda.h declares.
 * A driver older than the headers is used at its own version, as long as
 * it has every entry the backend calls (CUDA 12.0 or later): the ABI of
 * those entries has not changed since.
 * Each library is opened once per process and kept.
 */
#include <dlfcn.h>
#include <errno.h>
#include <glob.h>
#include <stdlib.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static cube__cuda_api driver_api;
static int driver_status;
static char driver_why[512];

typedef CUresult (*get_proc_fn)(const char *symbol, void **pfn, int version, cuuint64_t flags,
                                CUdriverProcAddressQueryResult *status);

/* The oldest driver the backend's entries exist in, at the ABI cuda.h gives. */
#define DRIVER_VERSION_MIN 12000

static int resolve(get_proc_fn get, int version, const char *name, void **ret)
{
        CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        CUresult r = get(name, ret, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);

        if (r == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS && *ret)
                return 0;
        if (r == CUDA_ERROR_STUB_LIBRARY)
                snprintf(driver_why, sizeof(driver_why), "libcuda.so.1 is the CUDA toolkit's "
                         "link stub, not a driver: install the NVIDIA driver");
        else if (status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
                snprintf(driver_why, sizeof(driver_why), "the NVIDIA driver (CUDA %d.%d) lacks "
                         "%s: upgrade the driver", version / 1000, version % 1000 / 10, name);
        else
                snprintf(driver_why, sizeof(driver_why), "the NVIDIA driver does not provide %s "
                         "(%s)", name, cube__cuda_name(r));
        return -ENOSYS;
}

static void load_driver(void)
{
        void *dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        get_proc_fn get;
        void *p;
        int r;

        if (!dl) {
                snprintf(driver_why, sizeof(driver_why), "no NVIDIA driver: %s", dlerror());
                driver_status = -ENODEV;
                return;
        }
        *(void **) &get = dlsym(dl, "cuGetProcAddress_v2");
        if (!get) {
                snprintf(driver_why, sizeof(driver_why), "the NVIDIA driver is too old: "
                         "libcuda.so.1 has no cuGetProcAddress_v2 (CUDA 12 or later)");
                driver_status = -ENOSYS;
                return;
        }
        /* The driver's own version first: entries are asked for at the
         * older of it and the headers'. */
        int version = CUDA_VERSION;
        if ((r = resolve(get, CUDA_VERSION, "cuDriverGetVersion", &p)) < 0) {
                driver_status = r;
                return;
        }
        if (((CUresult (*)(int *)) p)(&version) != CUDA_SUCCESS || version > CUDA_VERSION)
                version = CUDA_VERSION;
        if (version < DRIVER_VERSION_MIN) {
                snprintf(driver_why, sizeof(driver_why), "the NVIDIA driver supports CUDA %d.%d; "
                         "cubed needs %d.%d or later: upgrade the driver", version / 1000,
                         version % 1000 / 10, DRIVER_VERSION_MIN / 1000,
                         DRIVER_VERSION_MIN % 1000 / 10);
                driver_status = -ENOSYS;
                return;
        }
#define RESOLVE(name) \
        if ((r = resolve(get, version, #name, &p)) < 0) { driver_status = r; return; } \
        *(void **) &driver_api.name = p;
        CUBE__CUDA_ENTRIES(RESOLVE)
#undef RESOLVE
        CUresult cr = driver_api.cuInit(0);
        if (cr != CUDA_SUCCESS) {
                snprintf(driver_why, sizeof(driver_why), "the NVIDIA driver did not start: "
                         "cuInit: %s (%d)", cube__cuda_name(cr), (int) cr);
                driver_status = -ENODEV;
                return;
        }
        driver_api.cuDriverGetVersion(&driver_api.driver_version);
}

int cube__cuda_load_driver(const cube__cuda_api **ret_api, const char **ret_why)
{
        pthread_once(&driver_once, load_driver);
        if (driver_status < 0) {
                *ret_why = driver_why;
                return driver_status;
        }
        *ret_api = &driver_api;
        return 0;
}

static pthread_once_t nvrtc_once = PTHREAD_ONCE_INIT;
static cube__nvrtc_api nvrtc_api;
static int nvrtc_status;
static char nvrtc_why[512];

/* NVRTC by soname (the loader path), then where toolkits are installed:
 * a machine with a driver often has the toolkit only under its own prefix,
 * off the loader path. CUBE_NVRTC names the library outright. */
static void *open_nvrtc(void)
{
        static const char *const names[] = { "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so" };
        static const char *const dirs[] = { "CUDA_HOME", "CUDA_PATH", NULL };
        char path[1024];
        void *dl = NULL;
        glob_t g;

        if (getenv("CUBE_NVRTC") && *getenv("CUBE_NVRTC"))
                return dlopen(getenv("CUBE_NVRTC"), RTLD_NOW | RTLD_LOCAL);
        for (size_t i = 0; !dl && i < sizeof(names) / sizeof(names[0]); i++)
                dl = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        for (size_t i = 0; !dl && dirs[i]; i++)
                for (size_t j = 0; !dl && getenv(dirs[i]) &&
                                   j < sizeof(names) / sizeof(names[0]); j++) {
                        snprintf(path, sizeof(path), "%s/lib64/%s", getenv(dirs[i]), names[j]);
                        dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
                }
        if (!dl && glob("/usr/local/cuda{,-1[2-9]*}/lib64/libnvrtc.so.1[2-9]", GLOB_BRACE, NULL,
                        &g) == 0) {
                for (size_t i = g.gl_pathc; !dl && i > 0; i--)  /* the newest first */
                        dl = dlopen(g.gl_pathv[i - 1], RTLD_NOW | RTLD_LOCAL);
                globfree(&g);
        }
        return dl;
}

static void load_nvrtc(void)
{
        void *dl = open_nvrtc();

        if (!dl) {
                snprintf(nvrtc_why, sizeof(nvrtc_why), "no NVRTC: %s (install the CUDA "
                         "toolkit's NVRTC, put its lib64 on the loader path, or name it in "
                         "CUBE_NVRTC)", dlerror());
                nvrtc_status = -ENODEV;
                return;
        }
#define RESOLVE(name) \
        if (!(*(void **) &nvrtc_api.name = dlsym(dl, #name))) { \
                snprintf(nvrtc_why, sizeof(nvrtc_why), "NVRTC lacks %s", #name); \
                nvrtc_status = -ENOSYS; \
                return; \
        }
        CUBE__NVRTC_ENTRIES(RESOLVE)
#undef RESOLVE
        nvrtc_api.nvrtcVersion(&nvrtc_api.major, &nvrtc_api.minor);
        if (nvrtc_api.major < DRIVER_VERSION_MIN / 1000) {
                snprintf(nvrtc_why, sizeof(nvrtc_why), "NVRTC %d.%d is older than CUDA %d",
                         nvrtc_api.major, nvrtc_api.minor, DRIVER_VERSION_MIN / 1000);
                nvrtc_status = -ENOSYS;
        }
}

int cube__cuda_load_nvrtc(const cube__nvrtc_api **ret_api, const char **ret_why)
{
        pthread_once(&nvrtc_once, load_nvrtc);
        if (nvrtc_status < 0) {
                *ret_why = nvrtc_why;
                return nvrtc_status;
        }
        *ret_api = &nvrtc_api;
        return 0;
}

static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;
static int nccl_version;

/* NCCL is for collectives (the transport layer); the device opens it only
 * to say in the log whether collectives will be there. It dlopens libcuda
 * itself, hence RTLD_LOCAL. */
static void load_nccl(void)
{
        void *dl = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
        int (*get_version)(int *);

        if (!dl)
                return;
        *(void **) &get_version = dlsym(dl, "ncclGetVersion");
        if (!get_version || get_version(&nccl_version) != 0)
                nccl_version = 0;
}

int cube__cuda_nccl_version(void)
{
        pthread_once(&nccl_once, load_nccl);
        return nccl_version;
}

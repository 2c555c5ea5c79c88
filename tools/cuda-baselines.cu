/*
 * cuda-baselines.cu - native CUDA figures for cube-bench to be compared with,
 * measured in the same run on the same GPU (tools/gpu-check builds it with
 * nvcc). Prints one "name value unit" line per figure.
 *
 *   empty_launch_us     empty kernel, cuLaunchKernel pipelined 10000 times
 *   h2d_pinned_gbs      cuMemcpyHtoDAsync of 256 MiB from pinned memory
 *   d2h_pinned_gbs      cuMemcpyDtoHAsync of 256 MiB to pinned memory
 *   sync_rtt_us         cuStreamSynchronize on an idle stream
 *   pattern_*_us        what the CUDA backend issues for one launch of a
 *                       checked kernel (backends/cuda/device.c: the info
 *                       words' copy in, a timed start event, the launch,
 *                       the out-of-bounds record's copy back, an event
 *                       after), pipelined 10000 times, per launch: bare;
 *                       with a host function after each launch on its
 *                       stream (hostfn), after every 16th (hostfn16); with
 *                       one after each launch on a second stream that waits
 *                       for the launch's event (bell); and bare less one
 *                       part: no copy in (no_in), no copy back (no_back),
 *                       no start event (no_start), all three (launch_only)
 *   vadd16_gelems       16 processes, each vector_add of 2^24 floats x 20
 *   tma_load_2d         whether the Tensor Memory Accelerator's tiled load
 *                       (cp.async.bulk.tensor through an mbarrier, the map a
 *                       __grid_constant__ parameter) runs and places its box:
 *                       1 it does, 0 it does not (the reason follows); taken
 *                       last, as a fault here ends the context
 *
 * The 16 processes are forked before this one touches CUDA (a child of a
 * process that initialised CUDA cannot use it) and wait on a pipe until
 * the single-process figures are taken. Every call is checked: a figure
 * is printed only for work that ran. Built on a machine without a GPU
 * (tools/gpu-check), for the architectures it names with -gencode.
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char *n_; \
        cuGetErrorName(r_, &n_); fprintf(stderr, "%s: %s\n", #x, n_); exit(1); } } while (0)

extern "C" __global__ void empty(void) {}
extern "C" __global__ void empty_info(unsigned long long *info, unsigned meta, unsigned dyn,
                                      unsigned words)
{
        if (words == 0xffffffffu)
                info[meta + dyn] = 0;
}
extern "C" __global__ void vadd(const float *a, const float *b, float *o, unsigned n)
{
        unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) o[i] = a[i] + b[i];
}

/* The tiled load cube's prelude would make (backends/cuda/prelude.h), in
 * its plainest form: one unit loads an 8 x 4 float box at (x, y). */
struct __align__(64) tmap { unsigned long long opaque[16]; };
extern "C" __global__ void tma_box(float *out, const __grid_constant__ tmap map, int x, int y)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        __shared__ __align__(128) float tile[32];
        __shared__ __align__(8) unsigned long long bar;
        unsigned s = (unsigned) __cvta_generic_to_shared(tile);
        unsigned b = (unsigned) __cvta_generic_to_shared(&bar);
        unsigned done = 0;

        if (threadIdx.x == 0) {
                asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b) : "memory");
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
                asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                             :: "r"(b), "r"(128) : "memory");
                asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile"
                             ".mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                             :: "r"(s), "l"(&map), "r"(x), "r"(y), "r"(b) : "memory");
        }
        __syncthreads();
        while (!done)
                asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; "
                             "selp.u32 %0, 1, 0, p; }" : "=r"(done) : "r"(b) : "memory");
        out[threadIdx.x] = tile[threadIdx.x];
#endif
}

/* tma_load_2d: 1 where the load ran and placed the box, else 0 and why. */
static void probe_tma(void)
{
        float host[60], got[32];
        CUdeviceptr t, out;
        CUtensorMap map;
        cuuint64_t dims[2] = { 12, 5 }, strides[1] = { 48 };
        cuuint32_t box[2] = { 8, 4 }, es[2] = { 1, 1 };
        int major = 0, right = 1;
        const char *why = "";
        CUresult r;

        cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0);
        if (major < 9) {
                printf("tma_load_2d 0 (compute capability %d: no Tensor Memory Accelerator)\n",
                       major);
                return;
        }
        for (int i = 0; i < 60; i++)
                host[i] = (float) i;
        CK(cuMemAlloc(&t, sizeof(host)));
        CK(cuMemAlloc(&out, sizeof(got)));
        CK(cuMemcpyHtoD(t, host, sizeof(host)));
        r = cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (void *) t, dims,
                                   strides, box, es, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                   CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (r == CUDA_SUCCESS) {
                tmap m;
                memcpy(&m, &map, sizeof(m));
                tma_box<<<1, 32>>>((float *) out, m, 2, 1);
                r = cuCtxSynchronize();
        }
        if (r == CUDA_SUCCESS && cuMemcpyDtoH(got, out, sizeof(got)) == CUDA_SUCCESS) {
                for (int i = 0; i < 32; i++)
                        right &= got[i] == (float) ((1 + i / 8) * 12 + 2 + i % 8);
                printf("tma_load_2d %d%s\n", right, right ? "" : " (the box holds other bytes)");
                return;
        }
        cuGetErrorName(r, &why);
        printf("tma_load_2d 0 (%s)\n", why ? why : "an unknown error");
}

static double now(void)
{
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return t.tv_sec + t.tv_nsec * 1e-9;
}

#define CKR(x) do { cudaError_t r_ = (x); if (r_ != cudaSuccess) { \
        fprintf(stderr, "%s: %s\n", #x, cudaGetErrorName(r_)); _exit(1); } } while (0)

static void CUDA_CB host_noop(void *arg)
{
        __atomic_fetch_add((unsigned *) arg, 1u, __ATOMIC_RELAXED);
}

/* The backend's issue pattern for one launch, 10000 times; hostfn_every
 * 0: no host function; bell: it goes on a second stream behind the
 * launch's last event rather than on the launch's own stream. */
enum { NO_IN = 1, NO_BACK = 2, NO_START = 4 };
static double launch_pattern(CUstream s, CUstream bell, unsigned hostfn_every, bool use_bell,
                             unsigned less)
{
        enum { N = 10000, POOL = 64, SLOT = 4096 };
        static CUevent start[POOL], end[POOL];
        static unsigned char *host;
        static CUdeviceptr dev;
        static unsigned fired;
        if (!host) {
                CK(cuMemAllocHost((void **) &host, POOL * SLOT));
                CK(cuMemAlloc(&dev, POOL * SLOT));
                for (int i = 0; i < POOL; i++) {
                        CK(cuEventCreate(&start[i], CU_EVENT_DEFAULT));
                        CK(cuEventCreate(&end[i], CU_EVENT_DEFAULT));
                }
        }
        CK(cuStreamSynchronize(s));
        double t = now();
        for (int i = 0; i < N; i++) {
                int k = i % POOL;
                unsigned long long *info = (unsigned long long *) (dev + (CUdeviceptr) k * SLOT);
                if (!(less & NO_IN))
                        CK(cuMemcpyHtoDAsync(dev + (CUdeviceptr) k * SLOT, host + k * SLOT, 64,
                                             s));
                if (!(less & NO_START))
                        CK(cuEventRecord(start[k], s));
                empty_info<<<1, 1, 0, (cudaStream_t) s>>>(info, 1, 2, 8);
                if (!(less & NO_BACK))
                        CK(cuMemcpyDtoHAsync(host + k * SLOT + 32,
                                             dev + (CUdeviceptr) k * SLOT + 32, 16, s));
                CK(cuEventRecord(end[k], s));
                if (hostfn_every && (i + 1) % hostfn_every == 0) {
                        if (use_bell) {
                                CK(cuStreamWaitEvent(bell, end[k], 0));
                                CK(cuLaunchHostFunc(bell, host_noop, &fired));
                        } else {
                                CK(cuLaunchHostFunc(s, host_noop, &fired));
                        }
                }
        }
        CKR(cudaGetLastError());
        CK(cuStreamSynchronize(s));
        CK(cuStreamSynchronize(bell));
        return (now() - t) / N * 1e6;
}

/* One of the 16: waits for the go, then runs its vector adds. */
static void vadd_proc(int go, int reps)
{
        unsigned n = 1u << 24;
        float *a, *b, *o;
        char c;

        if (read(go, &c, 1) != 1)
                _exit(2);
        CKR(cudaMalloc(&a, n * 4));
        CKR(cudaMalloc(&b, n * 4));
        CKR(cudaMalloc(&o, n * 4));
        for (int i = 0; i < reps; i++)
                vadd<<<(n + 255) / 256, 256>>>(a, b, o, n);
        CKR(cudaGetLastError());
        CKR(cudaDeviceSynchronize());
        _exit(0);
}

int main(void)
{
        CUstream s;
        CUdeviceptr dev;
        void *host;
        size_t big = 256u << 20;
        double t;
        int go[2];
        pid_t kids[16];

        if (pipe(go) < 0)
                return 1;
        for (int p = 0; p < 16; p++)
                if ((kids[p] = fork()) == 0) {
                        close(go[1]);
                        vadd_proc(go[0], 20);
                }
        close(go[0]);

        CKR(cudaFree(0));       /* the runtime's primary context */
        CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        empty<<<1, 1, 0, s>>>();
        CKR(cudaGetLastError());
        CK(cuStreamSynchronize(s));
        t = now();
        for (int i = 0; i < 10000; i++)
                empty<<<1, 1, 0, s>>>();
        CKR(cudaGetLastError());
        CK(cuStreamSynchronize(s));
        printf("empty_launch_us %.3f us\n", (now() - t) / 10000 * 1e6);

        CK(cuMemAlloc(&dev, big));
        CK(cuMemAllocHost(&host, big));
        CK(cuMemcpyHtoDAsync(dev, host, big, s));
        CK(cuStreamSynchronize(s));
        t = now();
        for (int i = 0; i < 5; i++)
                CK(cuMemcpyHtoDAsync(dev, host, big, s));
        CK(cuStreamSynchronize(s));
        printf("h2d_pinned_gbs %.2f GB/s\n", 5.0 * big / (now() - t) / 1e9);
        t = now();
        for (int i = 0; i < 5; i++)
                CK(cuMemcpyDtoHAsync(host, dev, big, s));
        CK(cuStreamSynchronize(s));
        printf("d2h_pinned_gbs %.2f GB/s\n", 5.0 * big / (now() - t) / 1e9);

        t = now();
        for (int i = 0; i < 10000; i++)
                CK(cuStreamSynchronize(s));
        printf("sync_rtt_us %.3f us\n", (now() - t) / 10000 * 1e6);

        CUstream bell;
        CK(cuStreamCreate(&bell, CU_STREAM_NON_BLOCKING));
        launch_pattern(s, bell, 0, false, 0);
        printf("pattern_bare_us %.3f us\n", launch_pattern(s, bell, 0, false, 0));
        printf("pattern_hostfn_us %.3f us\n", launch_pattern(s, bell, 1, false, 0));
        printf("pattern_hostfn16_us %.3f us\n", launch_pattern(s, bell, 16, false, 0));
        printf("pattern_bell_us %.3f us\n", launch_pattern(s, bell, 1, true, 0));
        printf("pattern_no_in_us %.3f us\n", launch_pattern(s, bell, 0, false, NO_IN));
        printf("pattern_no_back_us %.3f us\n", launch_pattern(s, bell, 0, false, NO_BACK));
        printf("pattern_no_start_us %.3f us\n", launch_pattern(s, bell, 0, false, NO_START));
        printf("pattern_launch_only_us %.3f us\n",
               launch_pattern(s, bell, 0, false, NO_IN | NO_BACK | NO_START));

        fflush(stdout);
        t = now();
        if (write(go[1], "gggggggggggggggg", 16) != 16)
                return 1;
        int failed = 0;
        for (int p = 0; p < 16; p++) {
                int status;
                if (waitpid(kids[p], &status, 0) < 0 || !WIFEXITED(status) ||
                    WEXITSTATUS(status) != 0)
                        failed++;
        }
        if (failed) {
                fprintf(stderr, "vadd16: %d of 16 processes failed\n", failed);
                return 1;
        }
        printf("vadd16_gelems %.2f Gelem/s\n", 16.0 * 20 * (1u << 24) / (now() - t) / 1e9);
        fflush(stdout);
        probe_tma();
        return 0;
}

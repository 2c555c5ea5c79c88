/*
 * cuda-baselines.cu - native CUDA figures for cube-bench to be compared with,
 * measured in the same run on the same GPU (tools/gpu-check builds it with
 * nvcc). Prints one "name value unit" line per figure.
 *
 *   empty_launch_us     empty kernel, cuLaunchKernel pipelined 10000 times
 *   h2d_pinned_gbs      cuMemcpyHtoDAsync of 256 MiB from pinned memory
 *   d2h_pinned_gbs      cuMemcpyDtoHAsync of 256 MiB to pinned memory
 *   sync_rtt_us         cuStreamSynchronize on an idle stream
 *   vadd16_gelems       16 processes, each vector_add of 2^24 floats x 20
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
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { const char *n_; \
        cuGetErrorName(r_, &n_); fprintf(stderr, "%s: %s\n", #x, n_); exit(1); } } while (0)

extern "C" __global__ void empty(void) {}
extern "C" __global__ void vadd(const float *a, const float *b, float *o, unsigned n)
{
        unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) o[i] = a[i] + b[i];
}

static double now(void)
{
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return t.tv_sec + t.tv_nsec * 1e-9;
}

#define CKR(x) do { cudaError_t r_ = (x); if (r_ != cudaSuccess) { \
        fprintf(stderr, "%s: %s\n", #x, cudaGetErrorName(r_)); _exit(1); } } while (0)

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
        return 0;
}

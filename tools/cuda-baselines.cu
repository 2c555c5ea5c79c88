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
 */
#include <cuda.h>
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

static void vadd_proc(int reps)
{
        unsigned n = 1u << 24;
        float *a, *b, *o;
        cudaMalloc(&a, n * 4); cudaMalloc(&b, n * 4); cudaMalloc(&o, n * 4);
        for (int i = 0; i < reps; i++)
                vadd<<<(n + 255) / 256, 256>>>(a, b, o, n);
        cudaDeviceSynchronize();
}

int main(void)
{
        CUstream s;
        CUdeviceptr dev;
        void *host;
        size_t big = 256u << 20;
        double t;

        cudaFree(0);    /* the runtime's primary context */
        CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        empty<<<1, 1, 0, s>>>();
        CK(cuStreamSynchronize(s));
        t = now();
        for (int i = 0; i < 10000; i++)
                empty<<<1, 1, 0, s>>>();
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
        for (int p = 0; p < 16; p++)
                if (fork() == 0) {
                        vadd_proc(20);
                        _exit(0);
                }
        for (int p = 0; p < 16; p++)
                wait(NULL);
        printf("vadd16_gelems %.2f Gelem/s\n", 16.0 * 20 * (1u << 24) / (now() - t) / 1e9);
        return 0;
}

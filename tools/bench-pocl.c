/*
 * bench-pocl.c - PoCL through OpenCL in this process: what the CPU device
 * is measured against (bench-pocl.h).
 */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench-pocl.h"

#define MAX_KERNELS 16

struct pocl_bench {
        cl_context context;
        cl_device_id device;
        cl_command_queue queue;
        cl_kernel kernels[MAX_KERNELS];
        int n_kernels;
};

static double now(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

pocl_bench *pocl_bench_new(void)
{
        pocl_bench *b = calloc(1, sizeof(*b));
        cl_platform_id platform;
        cl_uint n = 0;
        cl_int err;

        if (!b || clGetPlatformIDs(1, &platform, &n) != CL_SUCCESS || n == 0 ||
            clGetDeviceIDs(platform, CL_DEVICE_TYPE_CPU, 1, &b->device, NULL) != CL_SUCCESS) {
                fprintf(stderr, "cube-bench: no OpenCL CPU device for the PoCL baseline\n");
                free(b);
                return NULL;
        }
        b->context = clCreateContext(NULL, 1, &b->device, NULL, NULL, &err);
        b->queue = b->context ? clCreateCommandQueueWithProperties(b->context, b->device, NULL,
                                                                   &err) : NULL;
        if (!b->queue) {
                fprintf(stderr, "cube-bench: cannot open the OpenCL CPU device (%d)\n", err);
                free(b);
                return NULL;
        }
        return b;
}

void pocl_bench_free(pocl_bench *b)
{
        if (!b)
                return;
        for (int i = 0; i < b->n_kernels; i++)
                clReleaseKernel(b->kernels[i]);
        clReleaseCommandQueue(b->queue);
        clReleaseContext(b->context);
        free(b);
}

int pocl_bench_kernel(pocl_bench *b, const char *src, const char *name)
{
        cl_int err;
        cl_program p = clCreateProgramWithSource(b->context, 1, &src, NULL, &err);

        if (!p || b->n_kernels == MAX_KERNELS ||
            clBuildProgram(p, 1, &b->device, "", NULL, NULL) != CL_SUCCESS) {
                fprintf(stderr, "cube-bench: the PoCL baseline kernel %s does not build\n", name);
                return -1;
        }
        b->kernels[b->n_kernels] = clCreateKernel(p, name, &err);
        clReleaseProgram(p);
        if (!b->kernels[b->n_kernels]) {
                fprintf(stderr, "cube-bench: the PoCL baseline has no kernel %s (%d)\n", name,
                        err);
                return -1;
        }
        return b->n_kernels++;
}

void *pocl_bench_buffer(pocl_bench *b, size_t bytes, const void *init)
{
        cl_int err;

        return clCreateBuffer(b->context, CL_MEM_READ_WRITE | (init ? CL_MEM_COPY_HOST_PTR : 0),
                              bytes, (void *) init, &err);
}

double pocl_bench_run(pocl_bench *b, int kernel, void *const *bufs, int n_bufs,
                      const uint32_t *args, int n_args, const size_t global[3],
                      const size_t local[3], int times)
{
        cl_kernel k = b->kernels[kernel];
        double t0;

        for (int i = 0; i < n_bufs; i++)
                clSetKernelArg(k, (cl_uint) i, sizeof(cl_mem), &bufs[i]);
        for (int i = 0; i < n_args; i++)
                clSetKernelArg(k, (cl_uint) (n_bufs + i), sizeof(cl_uint), &args[i]);
        t0 = now();
        for (int i = 0; i < times; i++)
                clEnqueueNDRangeKernel(b->queue, k, 3, NULL, global, local, 0, NULL, NULL);
        clFinish(b->queue);
        return now() - t0;
}

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *) a, y = *(const double *) b;

        return x < y ? -1 : x > y;
}

double pocl_bench_enqueue_floor(int batch, int runs)
{
        static const char *src = "__kernel void nop(__global uint *u, ulong at, uint m, uint d)\n"
                                 "{\n}\n";
        const size_t one[3] = { 1, 1, 1 };
        cl_device_id devices[8], basic = NULL;
        cl_platform_id platform;
        cl_uint n = 0, m = 0, zero = 0;
        cl_ulong at = 0;
        cl_int err;
        double result = -1;

        if (clGetPlatformIDs(1, &platform, &n) != CL_SUCCESS || n == 0 ||
            clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 8, devices, &m) != CL_SUCCESS)
                return -1;
        for (cl_uint i = 0; i < m && !basic; i++) {
                char name[128] = "";
                clGetDeviceInfo(devices[i], CL_DEVICE_NAME, sizeof(name), name, NULL);
                if (strncmp(name, "basic", 5) == 0)
                        basic = devices[i];
        }
        if (!basic)
                return -1;
        cl_context ctx = clCreateContext(NULL, 1, &basic, NULL, NULL, &err);
        cl_command_queue q = ctx ? clCreateCommandQueueWithProperties(ctx, basic, NULL, &err) : NULL;
        cl_program p = q ? clCreateProgramWithSource(ctx, 1, &src, NULL, &err) : NULL;
        cl_kernel k = p && clBuildProgram(p, 1, &basic, "", NULL, NULL) == CL_SUCCESS ?
                      clCreateKernel(p, "nop", &err) : NULL;
        cl_mem buf = k ? clCreateBuffer(ctx, CL_MEM_READ_WRITE, 64, NULL, &err) : NULL;
        double *t = calloc((size_t) runs, sizeof(double));

        for (int r = 0; buf && t && r <= runs; r++) {   /* run 0 warms up */
                double t0 = now();
                for (int i = 0; i < batch; i++) {
                        clSetKernelArg(k, 0, sizeof(buf), &buf);
                        clSetKernelArg(k, 1, sizeof(at), &at);
                        clSetKernelArg(k, 2, sizeof(zero), &zero);
                        clSetKernelArg(k, 3, sizeof(zero), &zero);
                        clEnqueueNDRangeKernel(q, k, 3, NULL, one, one, 0, NULL, NULL);
                }
                clFinish(q);
                if (r > 0)
                        t[r - 1] = (now() - t0) / batch;
        }
        if (buf && t) {
                qsort(t, (size_t) runs, sizeof(double), cmp_double);
                result = t[runs / 2];
        }
        free(t);
        if (buf)
                clReleaseMemObject(buf);
        if (k)
                clReleaseKernel(k);
        if (p)
                clReleaseProgram(p);
        if (q)
                clReleaseCommandQueue(q);
        if (ctx)
                clReleaseContext(ctx);
        return result;
}

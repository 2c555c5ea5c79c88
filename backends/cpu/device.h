/*
 * device.h - cube-device, the CPU device's own process, as its files share
 * it: PoCL's devices, and the calls each file makes of another.
 */
#ifndef CUBE_CPU_DEVICE_H
#define CUBE_CPU_DEVICE_H

#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <sys/resource.h>

#include "queue.h"

/* PoCL's CPU devices, as the device uses them: "spread" (PoCL's pthread
 * device) runs a launch's cubes on a thread per core; "inline" (its basic
 * device) runs them on the calling thread. A launch of one cube cannot be
 * spread, and waking PoCL's workers for it costs tens of microseconds, so
 * such launches run inline, in about one. Without a basic device every
 * launch is spread. */
typedef struct cpu_devices {
        cl_platform_id platform;
        cl_device_id ids[2];            /* [0] spread, [1] inline when n == 2 */
        cl_uint n;
} cpu_devices;

/* ---- the modes, and what they share (device-main.c) --------------------- */

int cube__dev_find_devices(cpu_devices *ret);

/* Sets a resource's soft and hard limit. */
void cube__dev_limit(int resource, rlim_t value);

/* ---- the launch server (device-serve.c) --------------------------------- */

/* The control block, at the start of the ring. */
extern cube__qctl *cube__ctl;

/* cube-device --serve. */
int cube__dev_serve_main(int argc, char **argv);

/* Everything the device does to itself before a client's code can run. */
int cube__dev_seal_self(const char *kcache);

#endif

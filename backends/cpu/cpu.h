/*
 * cpu.h - cubed's side of the CPU device, as its files share it.
 */
#ifndef CUBE_CPU_H
#define CUBE_CPU_H

#include "driver.h"

/* The OpenCL C prelude that makes the dialect of docs/KERNELS.md. */
extern const char cube__cpu_prelude[];

/* The source as OpenCL C for the device: the prelude, then the source with
 * its entry point's parameters rewritten (dialect.c). */
cube_error *cube__cpu_translate(const cube__kernel_desc *desc, char **ret_source);

#endif

/*
 * drivers.c - the registry of device backends cubed can run on.
 */
#include <string.h>

#include "driver.h"

static const cube__driver *const drivers[] = {
        &cube__driver_cpu,
#ifdef CUBE_HAVE_CUDA
        &cube__driver_cuda,
#endif
};

const char *cube__driver_names(void)
{
#ifdef CUBE_HAVE_CUDA
        return "cpu, cuda";
#else
        return "cpu (built without the CUDA backend: no CUDA headers)";
#endif
}

const cube__driver *cube__driver_find(const char *name)
{
        for (size_t i = 0; i < sizeof(drivers) / sizeof(drivers[0]); i++)
                if (strcmp(drivers[i]->name, name) == 0)
                        return drivers[i];
        return NULL;
}

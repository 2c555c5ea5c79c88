/*
 * inject.c - fault injection, for tests: make the next reservation, copy,
 * launch or compile fail with a chosen error, poison the device, or abandon a
 * launch's write scope. The copy and device-launch sites fail on the device,
 * in stream order, as a real device's faults arrive: after the request was
 * handled, often after later work was queued behind it.
 *
 * Off unless the daemon was started with --enable-fault-injection; the
 * shipped configuration never enables it. A request to inject into a daemon
 * that does not allow it is answered with an error and changes nothing.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cubed.h"

static const char *const sites[CUBE__FAULT_SITES] = {
        [CUBE_FAULT_ALLOC] = "alloc",
        [CUBE_FAULT_COPY] = "copy",
        [CUBE_FAULT_LAUNCH] = "launch",
        [CUBE_FAULT_COMPILE] = "compile",
        [CUBE_FAULT_POISON] = "poison",
        [CUBE_FAULT_TEARDOWN] = "teardown",
        [CUBE_FAULT_DEVICE_LAUNCH] = "device-launch",
};

/* The compilation-family node for kind, bare. */
static cube_error *compilation(cube_error_kind kind, const char *reason)
{
        switch (kind) {
        case CUBE_COMPILATION_EXPANSION_PANICKED:
                return cube__err_expansion_panicked(reason, reason);
        case CUBE_COMPILATION_DEVICE_POISONED:
                return cube__err_wrap(kind, cube__err_poison("%s", reason));
        default:
                return cube__err_text(kind, "%s", reason);
        }
}

/* The whole ServerError a failure of leaf kind reads as, wrapped the way the
 * path that fails would wrap it. NULL for a kind that names no leaf. */
static cube_error *server_error(cube_error_kind kind, const char *reason, uint64_t size)
{
        static const uint32_t zero[3];
        uint32_t dims[3] = { (uint32_t) size, 1, 1 };

        switch (cube__err_family_of(kind)) {
        case CUBE__FAMILY_IO:
                switch (kind) {
                case CUBE_IO_BUFFER_TOO_BIG:
                case CUBE_IO_OUT_OF_MEMORY:
                case CUBE_IO_PAGE_UPDATE_FORBIDDEN:
                case CUBE_IO_PAGE_SIZES_EXHAUSTED:
                        return cube__err_io_size(kind, size);
                case CUBE_IO_STORAGE_MAPPING_FAILED:
                        return cube__err_wrap(CUBE_SERVER_IO, cube__err_storage_mapping_failed(size,
                                cube__err_size(CUBE_IO_OUT_OF_MEMORY, size)));
                case CUBE_IO_DEVICE_POISONED:
                        return cube__err_wrap(CUBE_SERVER_IO, cube__err_wrap(kind,
                                cube__err_poison("%s", reason)));
                case CUBE_IO_UNSUPPORTED_STRIDES:
                case CUBE_IO_UNSUPPORTED_IO_OPERATION:
                        return cube__err_wrap(CUBE_SERVER_IO, cube__err_new(kind));
                default:
                        return cube__err_wrap(CUBE_SERVER_IO, cube__err_text(kind, "%s", reason));
                }
        case CUBE__FAMILY_LAUNCH:
                switch (kind) {
                case CUBE_LAUNCH_COMPILATION_ERROR:
                        return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_wrap(kind,
                                compilation(CUBE_COMPILATION_GENERIC, reason)));
                case CUBE_LAUNCH_TOO_MANY_RESOURCES:
                        return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_wrap(kind,
                                cube__err_resource(CUBE_RESOURCE_UNITS, size, 0)));
                case CUBE_LAUNCH_DEVICE_POISONED:
                        return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_wrap(kind,
                                cube__err_poison("%s", reason)));
                default:
                        return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_text(kind, "%s", reason));
                }
        case CUBE__FAMILY_COMPILATION:
                return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_wrap(
                        CUBE_LAUNCH_COMPILATION_ERROR, compilation(kind, reason)));
        case CUBE__FAMILY_RESOURCE:
                return cube__err_wrap(CUBE_SERVER_LAUNCH, cube__err_wrap(
                        CUBE_LAUNCH_TOO_MANY_RESOURCES,
                        kind == CUBE_RESOURCE_CUBE_DIM ? cube__err_cube_dim(dims, zero)
                                                       : cube__err_resource(kind, size, 0)));
        case CUBE__FAMILY_POISON:
                return cube__err_wrap(CUBE_SERVER_DEVICE_POISONED, cube__err_poison("%s", reason));
        case CUBE__FAMILY_SERVER:
                switch (kind) {
                case CUBE_SERVER_VALIDATION:
                        return cube__err_validation("%s", reason);
                case CUBE_SERVER_GENERIC:
                        return cube__err_generic("%s", reason);
                case CUBE_SERVER_DEVICE_POISONED:
                        return cube__err_wrap(kind, cube__err_poison("%s", reason));
                case CUBE_SERVER_TORN_DOWN:
                case CUBE_SERVER_SKIPPED:
                        return cube__err_new(kind);
                default:
                        return NULL;
                }
        default:
                return NULL;
        }
}

cube_error *cube__inject_take(cube__server *srv, cube_fault_site site)
{
        cube_error *e = srv->inject[site];

        srv->inject[site] = NULL;
        if (e)
                cube__log(CUBE__LOG_NOTICE, "injecting a fault at %s: %s", sites[site],
                          cube_error_message(e));
        return e;
}

cube__dispatched cube__do_inject(cube__msg *k)
{
        cube__server *srv = k->server;
        char site_name[16], reason[256];
        uint32_t kind;
        uint64_t size;
        int site = -1;
        cube_error *e;

        if (k->n != 4 || !cube__obj_str(&k->p[0], site_name, sizeof(site_name)) ||
            !cube__obj_u32(&k->p[1], &kind) || !cube__obj_str(&k->p[2], reason, sizeof(reason)) ||
            !cube__obj_u64(&k->p[3], &size)) {
                cube__reply_malformed(k, "params must be [site, kind, reason, size]");
                return CUBE__DISPATCH_DONE;
        }
        if (!srv->opts.fault_injection) {
                cube__reply_owned_error(k, cube__err_validation(
                        "fault injection is off; start cubed with --enable-fault-injection to "
                        "use it (never in production)"));
                return CUBE__DISPATCH_DONE;
        }
        for (int i = 0; i < CUBE__FAULT_SITES; i++)
                if (strcmp(site_name, sites[i]) == 0)
                        site = i;
        if (site < 0) {
                cube__reply_owned_error(k, cube__err_validation("unknown fault site '%s'; the "
                        "sites are alloc, copy, launch, compile, poison, teardown and device-launch", site_name));
                return CUBE__DISPATCH_DONE;
        }

        switch (site) {
        case CUBE_FAULT_POISON:
                cube__work_poison(srv, k->session, cube__err_poison("%s", reason));
                cube__reply_ok_nil(k);
                return CUBE__DISPATCH_DONE;
        case CUBE_FAULT_TEARDOWN:
                e = cube__err_new(CUBE_SERVER_TORN_DOWN);
                break;
        case CUBE_FAULT_COMPILE:
                /* The source's fault, or a defect of the build (no compiler,
                 * no memory, no disk), which a later launch retries. */
                if (cube__err_family_of(kind) == CUBE__FAMILY_COMPILATION)
                        e = compilation(kind, reason);
                else if (kind == CUBE_LAUNCH_UNKNOWN || kind == CUBE_LAUNCH_OUT_OF_MEMORY ||
                         kind == CUBE_IO_UNKNOWN)
                        e = server_error(kind, reason, size);
                else
                        e = NULL;
                break;
        default:
                e = server_error(kind, reason, size);
                break;
        }
        if (!e) {
                cube__reply_owned_error(k, cube__err_validation("kind %u is not a failure the %s "
                                                                "site can have", kind, site_name));
                return CUBE__DISPATCH_DONE;
        }
        cube_error_free(srv->inject[site]);
        srv->inject[site] = e;
        cube__reply_ok_nil(k);
        return CUBE__DISPATCH_DONE;
}

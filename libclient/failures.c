/*
 * failures.c - libcubeclient's view of the daemon's failure store, and fault
 * injection for tests.
 */
#include <stdlib.h>
#include <string.h>

#include "rpc.h"

void cube_failures_free(cube_failure_info *failures, size_t n)
{
        for (size_t i = 0; failures && i < n; i++)
                cube_error_free(failures[i].report);
        free(failures);
}

static void free_failures(void *v, size_t n)
{
        cube_failures_free(v, n);
}

static bool decode_failure(const msgpack_object *m, void *elem)
{
        cube_failure_info *f = elem;
        const msgpack_object *v;

        return (v = cube__map_get(m, "id")) && cube__obj_u64(v, &f->id) &&
               (v = cube__map_get(m, "session")) && cube__obj_u64(v, &f->session) &&
               (v = cube__map_get(m, "report")) &&
               cube__err_unpack(v, CUBE__FAMILY_SERVER, &f->report) == 0;
}

cube_error *cube_daemon_failures(cube_client *c, cube_failure_info **ret_failures, size_t *ret_n)
{
        return cube__request_list(c, "failures", sizeof(**ret_failures), decode_failure,
                                  free_failures, (void **) ret_failures, ret_n);
}

cube_error *cube_debug_inject(cube_client *c, cube_fault_site site, cube_error_kind kind,
                              const char *reason, uint64_t size)
{
        static const char *const sites[] = {
                [CUBE_FAULT_ALLOC] = "alloc", [CUBE_FAULT_COPY] = "copy",
                [CUBE_FAULT_LAUNCH] = "launch", [CUBE_FAULT_COMPILE] = "compile",
                [CUBE_FAULT_POISON] = "poison", [CUBE_FAULT_TEARDOWN] = "teardown",
                [CUBE_FAULT_DEVICE_LAUNCH] = "device-launch",
        };
        cube__call call = {0};
        cube__frame f;
        cube_error *e;

        if ((unsigned) site > CUBE_FAULT_DEVICE_LAUNCH)
                return cube__err_validation("unknown fault site %d", (int) site);
        cube__frame_init(&f);
        call.msgid = cube__next_msgid(c);
        if (cube__pack_request(&f.pk, call.msgid, "debug_inject", 4) < 0 ||
            cube__pack_str(&f.pk, sites[site]) < 0 ||
            msgpack_pack_uint32(&f.pk, (uint32_t) kind) < 0 ||
            cube__pack_str(&f.pk, reason ? reason : "") < 0 ||
            msgpack_pack_uint64(&f.pk, size) < 0) {
                cube__frame_destroy(&f);
                return cube__err_generic("out of memory in libcubeclient");
        }
        e = cube__frame_send(c, &f, &call, NULL, 0);
        return e;
}

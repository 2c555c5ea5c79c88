/*
 * profile.c - libcubeclient's profiling windows: start_profile,
 * start_profile_at_launch, end_profile and abandon_profile on the calling
 * thread's stream.
 *
 * end_profile is the one call whose error answer is a ProfileError rather
 * than a ServerError, so its call decodes the answer in that family.
 */
#include <stdlib.h>

#include "rpc.h"

static cube_error *deliver_token(cube__call *call, const msgpack_object *r)
{
        if (!cube__obj_u64(r, call->ctx))
                return cube__err_answer("start_profile");
        return NULL;
}

static cube_error *start(cube_client *c, bool at_launch, uint64_t *ret_token)
{
        uint64_t token;
        cube__call call = { .deliver = deliver_token, .ctx = &token, .client = c };
        cube__frame f;
        cube_error *e;

        cube__frame_init(&f);
        call.msgid = cube__next_msgid(c);
        if (cube__pack_request(&f.pk, call.msgid, "start_profile", 2) < 0 ||
            msgpack_pack_uint64(&f.pk, cube_stream_current()) < 0 ||
            (at_launch ? msgpack_pack_true(&f.pk) : msgpack_pack_false(&f.pk)) < 0) {
                cube__frame_destroy(&f);
                return cube__err_generic("out of memory in libcubeclient");
        }
        if ((e = cube__frame_send(c, &f, &call, NULL, 0)))
                return e;
        *ret_token = token;
        return NULL;
}

cube_error *cube_start_profile(cube_client *c, uint64_t *ret_token)
{
        return start(c, false, ret_token);
}

cube_error *cube_start_profile_at_launch(cube_client *c, uint64_t *ret_token)
{
        return start(c, true, ret_token);
}

static cube_error *deliver_duration(cube__call *call, const msgpack_object *r)
{
        cube_profile_duration *d = call->ctx;

        if (!cube__map_u64(r, "device_ns", &d->device_ns) || !cube__map_u64(r, "timed", &d->timed))
                return cube__err_answer("end_profile");
        return NULL;
}

cube_error *cube_end_profile(cube_client *c, uint64_t token, cube_profile_duration *ret_duration)
{
        cube_profile_duration d = {0};
        cube__call call = { .deliver = deliver_duration, .ctx = &d, .client = c,
                            .family = CUBE__FAMILY_PROFILE };
        uint64_t params[2] = { cube_stream_current(), token };
        cube__frame f;
        cube_error *e;
        int r;

        cube__frame_init(&f);
        call.msgid = cube__next_msgid(c);
        r = cube__pack_request(&f.pk, call.msgid, "end_profile", 2);
        for (int i = 0; r == 0 && i < 2; i++)
                r = msgpack_pack_uint64(&f.pk, params[i]);
        if (r < 0) {
                cube__frame_destroy(&f);
                return cube__err_generic("out of memory in libcubeclient");
        }
        if ((e = cube__frame_send(c, &f, &call, NULL, 0)))
                return e;
        if (ret_duration)
                *ret_duration = d;
        return NULL;
}

/* A notification: it joins the batch of launches, so abandoning costs no
 * system call of its own. */
cube_error *cube_abandon_profile(cube_client *c, uint64_t token)
{
        cube__frame f;
        cube_error *e;

        cube__frame_init(&f);
        if (cube__pack_notify(&f.pk, "abandon_profile", 2) < 0 ||
            msgpack_pack_uint64(&f.pk, cube_stream_current()) < 0 ||
            msgpack_pack_uint64(&f.pk, token) < 0) {
                cube__frame_destroy(&f);
                return cube__err_generic("out of memory in libcubeclient");
        }
        e = cube__send_batched(c, f.data, f.len);
        cube__frame_destroy(&f);
        return e;
}

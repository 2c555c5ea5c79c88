/*
 * fuzz-envelope.c - holds the envelope to its promise on every message the
 * pre-scan lets through, decoded as cubed decodes it: cube__envelope_parse
 * refuses it with a sentence, or splits it into fields that are what they
 * claim, and that pack back into the same envelope. Every typed reader a
 * method's params pass through (wire.c), and the error decoder a response or
 * a protocol_error carries (errors.c), reads each value without reaching
 * past what msgpack-c decoded; an error it accepts packs and decodes again
 * to an equal one.
 */

#include <msgpack.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "fuzz-decode.h"
#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* An error value decoded once must decode again, equal, from its own
 * encoding. */
static void check_error(const msgpack_object *o)
{
        cube_error *e = NULL, *again = NULL;
        msgpack_unpacked up;
        msgpack_sbuffer sb;
        msgpack_packer pk;
        size_t off = 0;

        if (cube__err_unpack(o, CUBE__FAMILY_SERVER, &e) < 0)
                return;
        if (!e || !cube_error_message(e))
                abort();
        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        if (cube__err_pack(&pk, e) == 0) {
                msgpack_unpacked_init(&up);
                if (msgpack_unpack_next(&up, sb.data, sb.size, &off) != MSGPACK_UNPACK_SUCCESS ||
                    cube__err_unpack(&up.data, CUBE__FAMILY_SERVER, &again) < 0 ||
                    !cube__err_equal(e, again))
                        abort();
                cube_error_free(again);
                msgpack_unpacked_destroy(&up);
        }
        msgpack_sbuffer_destroy(&sb);
        cube_error_free(e);
}

/* Every typed reader over one value; what a reader accepts must be what the
 * value holds. */
static void read_value(const msgpack_object *o)
{
        const msgpack_object_array *arr;
        cube_device_properties props;
        cube_protocol_limits limits;
        const void *bin;
        cube_handle h;
        uint64_t u64;
        uint32_t u32;
        double d;
        size_t len;
        char str[64];
        bool b;

        if (cube__obj_u64(o, &u64) && u64 != o->via.u64)
                abort();
        if (cube__obj_u32(o, &u32) && u32 != o->via.u64)
                abort();
        (void) cube__obj_bool(o, &b);
        (void) cube__obj_double(o, &d);
        if (cube__obj_str(o, str, sizeof(str)) &&
            (strlen(str) > o->via.str.size || (*str && memcmp(str, o->via.str.ptr, strlen(str)))))
                abort();
        if (cube__obj_bin(o, &bin, &len) && (bin != o->via.bin.ptr || len != o->via.bin.size))
                abort();
        if (cube__obj_array(o, &arr) && arr != &o->via.array)
                abort();
        if (cube__obj_handle(o, &h))
                (void) cube_handle_len(&h);
        (void) cube__map_get(o, "message");
        (void) cube__obj_properties(o, &props);
        (void) cube__obj_limits(o, &limits);
        check_error(o);
}

/* Packs a request or a notification from its parsed fields, as
 * cube__pack_request and cube__pack_notify send one; method is the method as
 * a C string. */
static void pack_envelope(const cube__envelope *env, const char *method, msgpack_sbuffer *sb)
{
        uint32_t n = env->params->via.array.size;
        msgpack_packer pk;

        msgpack_sbuffer_init(sb);
        msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
        if (env->type == CUBE__MSG_REQUEST ? cube__pack_request(&pk, env->msgid, method, n) < 0 :
            cube__pack_notify(&pk, method, n) < 0)
                abort();
        for (uint32_t i = 0; i < n; i++)
                if (msgpack_pack_object(&pk, env->params->via.array.ptr[i]) < 0)
                        abort();
}

/* A parsed envelope packed back parses to the same fields, which pack to
 * the same bytes. */
static void repack(const cube__envelope *env)
{
        msgpack_sbuffer sb, sb_again;
        cube__envelope again;
        msgpack_unpacked up;
        const char *why;
        char *method;
        size_t off = 0;

        /* A method is packed from a C string: one holding a NUL cannot be. */
        if (memchr(env->method, '\0', env->method_len))
                return;
        method = strndup(env->method, env->method_len);
        if (!method)
                abort();
        pack_envelope(env, method, &sb);
        msgpack_unpacked_init(&up);
        if (msgpack_unpack_next(&up, sb.data, sb.size, &off) != MSGPACK_UNPACK_SUCCESS ||
            off != sb.size || cube__envelope_parse(&up.data, &again, &why) < 0 ||
            again.type != env->type || again.msgid != env->msgid ||
            !cube__method_is(&again, method))
                abort();
        pack_envelope(&again, method, &sb_again);
        if (sb_again.size != sb.size || memcmp(sb_again.data, sb.data, sb.size) != 0)
                abort();
        msgpack_sbuffer_destroy(&sb_again);
        msgpack_unpacked_destroy(&up);
        msgpack_sbuffer_destroy(&sb);
        free(method);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        cube__envelope env;
        msgpack_object obj;
        msgpack_zone zone;
        const char *why = NULL;
        size_t len;

        if (!msgpack_zone_init(&zone, MSGPACK_ZONE_CHUNK_SIZE))
                abort();
        if (!fuzz_decode(data, size, &zone, &obj, &len))
                goto out;

        if (cube__envelope_parse(&obj, &env, &why) < 0) {
                if (!why || !*why)
                        abort();
                goto out;
        }
        if (env.type == CUBE__MSG_RESPONSE) {
                if (!env.error || !env.result || env.method || env.params)
                        abort();
                check_error(env.error);
                read_value(env.result);
                goto out;
        }
        if ((env.type != CUBE__MSG_REQUEST && env.type != CUBE__MSG_NOTIFY) || !env.method ||
            env.method_len == 0 || !env.params || env.params->type != MSGPACK_OBJECT_ARRAY)
                abort();
        for (uint32_t i = 0; i < env.params->via.array.size; i++)
                read_value(&env.params->via.array.ptr[i]);
        repack(&env);
out:
        msgpack_zone_destroy(&zone);
        return 0;
}

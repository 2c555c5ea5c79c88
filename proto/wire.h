/*
 * wire.h - the msgpack-RPC envelope and the shapes both sides put in it.
 *
 * Everything here follows proto/PROTOCOL.md: a request is
 * [0, msgid, method, params], a response [1, msgid, error, result] and a
 * notification [2, method, params]. The helpers decode only from msgpack
 * objects that passed the pre-scan, and never trust a type or a size.
 */
#ifndef CUBE_PROTO_WIRE_H
#define CUBE_PROTO_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <msgpack.h>

#include "cube.h"

enum {
        CUBE__MSG_REQUEST = 0,
        CUBE__MSG_RESPONSE = 1,
        CUBE__MSG_NOTIFY = 2,
};

typedef struct cube__envelope {
        int type;
        uint32_t msgid;                 /* requests and responses */
        const char *method;             /* requests and notifications; not NUL-terminated */
        size_t method_len;
        const msgpack_object *params;   /* requests and notifications: an array */
        const msgpack_object *error;    /* responses */
        const msgpack_object *result;   /* responses */
} cube__envelope;

/* Splits a message into its envelope. Returns 0, or -EBADMSG with a sentence
 * for a person in *ret_why. */
int cube__envelope_parse(const msgpack_object *o, cube__envelope *ret, const char **ret_why);

bool cube__method_is(const cube__envelope *env, const char *name);

/* Typed reads of one msgpack object; each returns false on a type mismatch or
 * a value that does not fit. */
bool cube__obj_u64(const msgpack_object *o, uint64_t *ret);
bool cube__obj_u32(const msgpack_object *o, uint32_t *ret);
bool cube__obj_bool(const msgpack_object *o, bool *ret);
bool cube__obj_double(const msgpack_object *o, double *ret);
/* Copies a str into a NUL-terminated buffer of cap bytes; false if it does not fit. */
bool cube__obj_str(const msgpack_object *o, char *buf, size_t cap);
bool cube__obj_bin(const msgpack_object *o, const void **ret_ptr, size_t *ret_len);
bool cube__obj_array(const msgpack_object *o, const msgpack_object_array **ret);
/* The value under key in a map with str keys, or NULL. */
const msgpack_object *cube__map_get(const msgpack_object *map, const char *key);

/* Memory ids carry the session that minted them: (session << 40) | n, n > 0.
 * A session reaches only ids of its own, so one session's id used in another
 * is unknown there rather than an alias of that session's memory. */
#define CUBE__MEMORY_SESSION_SHIFT 40
#define CUBE__MEMORY_SESSION(id) ((id) >> CUBE__MEMORY_SESSION_SHIFT)

/* A handle travels as [service, memory, offset_start, offset_end]; the
 * daemon knows each allocation's size. */
bool cube__obj_handle(const msgpack_object *o, cube_handle *ret);
int cube__pack_handle(msgpack_packer *pk, const cube_handle *h);

/* Envelope headers; the caller packs the params array's elements / result. */
int cube__pack_request(msgpack_packer *pk, uint32_t msgid, const char *method, uint32_t n_params);
int cube__pack_notify(msgpack_packer *pk, const char *method, uint32_t n_params);
/* [1, msgid, nil, ...]: the caller packs the result next. */
int cube__pack_response_ok(msgpack_packer *pk, uint32_t msgid);
/* [1, msgid, error, nil] */
int cube__pack_response_error(msgpack_packer *pk, uint32_t msgid, const cube_error *error);

int cube__pack_str(msgpack_packer *pk, const char *s);
int cube__pack_kv_str(msgpack_packer *pk, const char *key, const char *value);
int cube__pack_kv_u64(msgpack_packer *pk, const char *key, uint64_t value);
int cube__pack_kv_u32x3(msgpack_packer *pk, const char *key, const uint32_t v[3]);

/* The device properties as hello and status carry them: a map. */
int cube__pack_properties(msgpack_packer *pk, const cube_device_properties *p);
bool cube__obj_properties(const msgpack_object *o, cube_device_properties *ret);

/* The protocol limits as hello carries them: a map. */
int cube__pack_limits(msgpack_packer *pk, const cube_protocol_limits *l);
bool cube__obj_limits(const msgpack_object *o, cube_protocol_limits *ret);

#endif

/*
 * fuzz-decode.h - the first message of a fuzz input, decoded as cubed
 * decodes one (daemon/conn.c): only what the pre-scan calls whole under the
 * daemon's limits reaches msgpack-c, and only a message that decodes to
 * exactly the length the pre-scan named goes on.
 */
#ifndef CUBE_FUZZ_DECODE_H
#define CUBE_FUZZ_DECODE_H

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

#include "prescan.h"

/* Decodes the message data starts with into zone, which the caller made and
 * destroys, and sets its length; false where cubed would dispatch nothing. */
static inline bool fuzz_decode(const uint8_t *data, size_t size, msgpack_zone *zone,
                               msgpack_object *ret, size_t *ret_len)
{
        cube__limits limits;
        size_t len = 0, off = 0;

        cube__limits_daemon_default(&limits);
        if (cube__prescan(data, size, &limits, &len) != CUBE__SCAN_COMPLETE ||
            msgpack_unpack((const char *) data, len, &off, zone, ret) != MSGPACK_UNPACK_SUCCESS ||
            off != len)
                return false;
        *ret_len = len;
        return true;
}

#endif

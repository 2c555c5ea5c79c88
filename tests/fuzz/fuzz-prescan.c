/*
 * fuzz-prescan.c - holds the pre-scan to its promise against msgpack-c: a
 * message it calls complete decodes, to exactly the length it named, and a
 * message it calls incomplete is one msgpack-c is still waiting on too.
 * Runs with the daemon's limits, which are the ones facing untrusted peers.
 */

#include <msgpack.h>
#include <stdint.h>
#include <stdlib.h>

#include "prescan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        cube__limits limits;
        msgpack_unpacked unpacked;
        msgpack_unpack_return r;
        size_t len = 0, offset = 0;
        cube__scan s;

        cube__limits_daemon_default(&limits);
        s = cube__prescan(data, size, &limits, &len);

        switch (s) {
        case CUBE__SCAN_COMPLETE:
                if (len == 0 || len > size)
                        abort();
                msgpack_unpacked_init(&unpacked);
                r = msgpack_unpack_next(&unpacked, (const char *) data, len, &offset);
                msgpack_unpacked_destroy(&unpacked);
                if (r != MSGPACK_UNPACK_SUCCESS || offset != len)
                        abort();
                break;

        case CUBE__SCAN_INCOMPLETE:
                /* The bound must ask for more than is there, and msgpack-c
                 * must not find a whole message in what is. */
                if (len <= size)
                        abort();
                msgpack_unpacked_init(&unpacked);
                r = msgpack_unpack_next(&unpacked, (const char *) data, size, &offset);
                msgpack_unpacked_destroy(&unpacked);
                if (r == MSGPACK_UNPACK_SUCCESS || r == MSGPACK_UNPACK_PARSE_ERROR)
                        abort();
                break;

        default:
                break;
        }

        return 0;
}

/*
 * prescan.h - the guard every byte from a socket passes before msgpack-c sees it.
 *
 * msgpack-c 4 trusts the sizes a message declares: five bytes can make it
 * allocate 96 GiB, and a str32 header makes it wait for 4 GiB. The pre-scan
 * walks the raw bytes, checks every declared size against the limits and
 * against what the message could still hold, and answers whether one whole
 * message is present and how long it is. Only a message it called complete
 * is handed to the decoder.
 */
#ifndef CUBE_PROTO_PRESCAN_H
#define CUBE_PROTO_PRESCAN_H

#include <stddef.h>
#include <stdint.h>

/* The limits one peer enforces on the messages it receives. Documented, with
 * defaults, in proto/PROTOCOL.md ("Limits"). */
typedef struct cube__limits {
        uint64_t max_message_bytes;     /* one whole message */
        uint32_t max_depth;             /* nesting of arrays and maps */
        uint32_t max_container;         /* elements of one array, pairs of one map */
        uint64_t max_str_bytes;         /* one str */
        uint64_t max_objects;           /* objects in one message, all levels */
} cube__limits;

#define CUBE__DAEMON_MAX_MESSAGE   (80ull << 20)  /* 64 MiB inline payload and headroom */
#define CUBE__DAEMON_MAX_DEPTH     16
#define CUBE__DAEMON_MAX_CONTAINER 65536
#define CUBE__DAEMON_MAX_STR       (1ull << 20)
#define CUBE__DAEMON_MAX_OBJECTS   (1ull << 20)

/* The width-byte big-endian number at p: how msgpack writes its sizes and
 * its wider numbers. */
static inline uint64_t cube__read_be(const uint8_t *p, unsigned width)
{
        uint64_t v = 0;

        for (unsigned i = 0; i < width; i++)
                v = v << 8 | p[i];
        return v;
}

/* The daemon's defaults, and the client's (which reads errors that nest deeper
 * and replies that carry whole reads). */
void cube__limits_daemon_default(cube__limits *ret);
void cube__limits_client_default(cube__limits *ret);

typedef enum cube__scan {
        CUBE__SCAN_COMPLETE = 0,        /* one whole message of *ret_len bytes */
        CUBE__SCAN_INCOMPLETE,          /* more bytes needed: at least *ret_len in all */
        CUBE__SCAN_INVALID,             /* a byte no msgpack value starts with, or an ext */
        CUBE__SCAN_TOO_DEEP,            /* nesting beyond max_depth */
        CUBE__SCAN_TOO_BIG,             /* the message would exceed max_message_bytes */
        CUBE__SCAN_TOO_MANY,            /* a container beyond max_container, or max_objects */
        CUBE__SCAN_TOO_LONG,            /* a str beyond max_str_bytes */
} cube__scan;

/* Scans buf[0..len) for one message. On COMPLETE, *ret_len is its length; on
 * INCOMPLETE, *ret_len is a lower bound of the total length needed, so a
 * caller can wait for that many bytes before scanning again. Other results
 * leave *ret_len alone: the stream cannot be resynchronised. */
cube__scan cube__prescan(const uint8_t *buf, size_t len, const cube__limits *limits, size_t *ret_len);

/* The longest message the pre-scan certainly takes whole, given that it is
 * valid msgpack, nests no deeper than depth and holds no str longer than
 * str_len: every object takes at least a byte, so such a message cannot
 * declare more elements in one container, nor more objects in all, than it
 * has bytes. 0 where the nesting or the str alone is over the limits. A
 * reader that checks a message's form itself may skip the pre-scan for
 * messages no longer than this; a longer one must take the pre-scan, or a
 * limit would no longer hold. */
size_t cube__limits_shallow_bound(const cube__limits *limits, uint32_t depth, uint64_t str_len);

/* A sentence for a person, e.g. "nesting deeper than 16 levels". */
const char *cube__scan_describe(cube__scan s);

#endif

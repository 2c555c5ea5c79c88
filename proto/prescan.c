/*
 * prescan.c - the guard every byte from a socket passes before msgpack-c
 * sees it.
 *
 * One forward walk over the raw bytes of one message. Every declared size is
 * checked against the limits before anything trusts it, and against the
 * smallest message it could still belong to: each object still owed by an
 * open container needs at least one more byte. str and bin bodies are
 * skipped by their declared length, so the walk costs one step per object,
 * and the stack of open containers is a fixed array, so hostile nesting
 * costs nothing but a refusal.
 */

#include "prescan.h"

/* The deepest nesting the walk tracks, whatever the limits say. Both sides'
 * defaults sit far below it; a larger max_depth is treated as this one. */
#define PRESCAN_DEPTH_CAP 1024u

#define MIB (1ull << 20)

void cube__limits_daemon_default(cube__limits *ret)
{
        *ret = (cube__limits) {
                .max_message_bytes = CUBE__DAEMON_MAX_MESSAGE,
                .max_depth = CUBE__DAEMON_MAX_DEPTH,
                .max_container = CUBE__DAEMON_MAX_CONTAINER,
                .max_str_bytes = CUBE__DAEMON_MAX_STR,
                .max_objects = CUBE__DAEMON_MAX_OBJECTS,
        };
}

void cube__limits_client_default(cube__limits *ret)
{
        *ret = (cube__limits) {
                .max_message_bytes = 80 * MIB + 1 * MIB,
                .max_depth = 32,             /* msgpack-c decodes no deeper */
                .max_container = 65536,
                .max_str_bytes = 16 * MIB,
                .max_objects = 1ull << 20,
        };
}

typedef enum item_kind {
        ITEM_SCALAR,            /* the header is the whole object */
        ITEM_STR,               /* header, then a body of the declared size */
        ITEM_BIN,
        ITEM_ARRAY,             /* header, then the declared count of objects */
        ITEM_MAP,               /* header, then twice the declared count */
        ITEM_INVALID,           /* 0xc1, or an ext type */
} item_kind;

/* What the first byte of an object says about it. The size is either
 * inline_size, or a big-endian field of size_width bytes right after the
 * first byte. */
typedef struct item_head {
        item_kind kind;
        uint8_t header_len;
        uint8_t size_width;
        uint8_t inline_size;
} item_head;

static item_head classify(uint8_t b)
{
        if (b <= 0x7f || b >= 0xe0)
                return (item_head) { ITEM_SCALAR, 1, 0, 0 };
        if (b <= 0x8f)
                return (item_head) { ITEM_MAP, 1, 0, b & 0x0f };
        if (b <= 0x9f)
                return (item_head) { ITEM_ARRAY, 1, 0, b & 0x0f };
        if (b <= 0xbf)
                return (item_head) { ITEM_STR, 1, 0, b & 0x1f };

        switch (b) {
        case 0xc0: /* nil */
        case 0xc2: /* false */
        case 0xc3: /* true */
                return (item_head) { ITEM_SCALAR, 1, 0, 0 };
        case 0xc4: return (item_head) { ITEM_BIN, 2, 1, 0 };
        case 0xc5: return (item_head) { ITEM_BIN, 3, 2, 0 };
        case 0xc6: return (item_head) { ITEM_BIN, 5, 4, 0 };
        case 0xca: return (item_head) { ITEM_SCALAR, 5, 0, 0 };  /* float32 */
        case 0xcb: return (item_head) { ITEM_SCALAR, 9, 0, 0 };  /* float64 */
        case 0xcc: return (item_head) { ITEM_SCALAR, 2, 0, 0 };  /* uint8 */
        case 0xcd: return (item_head) { ITEM_SCALAR, 3, 0, 0 };
        case 0xce: return (item_head) { ITEM_SCALAR, 5, 0, 0 };
        case 0xcf: return (item_head) { ITEM_SCALAR, 9, 0, 0 };  /* uint64 */
        case 0xd0: return (item_head) { ITEM_SCALAR, 2, 0, 0 };  /* int8 */
        case 0xd1: return (item_head) { ITEM_SCALAR, 3, 0, 0 };
        case 0xd2: return (item_head) { ITEM_SCALAR, 5, 0, 0 };
        case 0xd3: return (item_head) { ITEM_SCALAR, 9, 0, 0 };  /* int64 */
        case 0xd9: return (item_head) { ITEM_STR, 2, 1, 0 };
        case 0xda: return (item_head) { ITEM_STR, 3, 2, 0 };
        case 0xdb: return (item_head) { ITEM_STR, 5, 4, 0 };
        case 0xdc: return (item_head) { ITEM_ARRAY, 3, 2, 0 };
        case 0xdd: return (item_head) { ITEM_ARRAY, 5, 4, 0 };
        case 0xde: return (item_head) { ITEM_MAP, 3, 2, 0 };
        case 0xdf: return (item_head) { ITEM_MAP, 5, 4, 0 };
        default:
                /* 0xc1 is never used; 0xc7..0xc9 and 0xd4..0xd8 are the ext
                 * types, which the protocol has no use for. */
                return (item_head) { ITEM_INVALID, 1, 0, 0 };
        }
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
        return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Answers "more bytes needed" with a lower bound on the whole message, or
 * TOO_BIG when even that bound is over the limit: waiting for bytes that can
 * only make the message too long is pointless. */
static cube__scan need_more(uint64_t min_total, const cube__limits *limits, size_t *ret_len)
{
        if (min_total > limits->max_message_bytes)
                return CUBE__SCAN_TOO_BIG;
        *ret_len = min_total > SIZE_MAX ? SIZE_MAX : (size_t) min_total;
        return CUBE__SCAN_INCOMPLETE;
}

cube__scan cube__prescan(const uint8_t *buf, size_t len, const cube__limits *limits, size_t *ret_len)
{
        /* Objects each open container still owes, innermost last. A container
         * is popped as soon as it owes nothing, so depth counts only the
         * containers the next object would be nested in. The innermost one's
         * count is kept in inner, not in owed_by[depth - 1]: a count stored
         * and loaded again for every object made each wait for the last. */
        uint64_t owed_by[PRESCAN_DEPTH_CAP];
        uint32_t max_depth = limits->max_depth < PRESCAN_DEPTH_CAP ? limits->max_depth : PRESCAN_DEPTH_CAP;
        unsigned depth = 0;
        uint64_t inner = 0;     /* owed_by[depth - 1], while depth > 0 */
        uint64_t owed = 0;      /* sum of owed_by[], each at least one more byte */
        uint64_t objects = 1;   /* the root, and every element declared so far */
        uint64_t pos = 0;

        for (;;) {
                /* pos is at the start of an object no longer counted in owed. */
                if (pos >= len)
                        return need_more(add_sat(pos + 1, owed), limits, ret_len);

                item_head h = classify(buf[pos]);
                if (h.kind == ITEM_INVALID)
                        return CUBE__SCAN_INVALID;
                if ((h.kind == ITEM_ARRAY || h.kind == ITEM_MAP) && depth >= max_depth)
                        return CUBE__SCAN_TOO_DEEP;
                if (pos + h.header_len > len)
                        return need_more(add_sat(pos + h.header_len, owed), limits, ret_len);

                uint64_t size = h.size_width > 0 ? cube__read_be(buf + pos + 1, h.size_width) :
                                h.inline_size;
                pos += h.header_len;
                if (h.kind == ITEM_STR && size > limits->max_str_bytes)
                        return CUBE__SCAN_TOO_LONG;

                switch (h.kind) {
                case ITEM_STR:
                case ITEM_BIN: {
                        uint64_t end = pos + size;

                        if (add_sat(end, owed) > limits->max_message_bytes)
                                return CUBE__SCAN_TOO_BIG;
                        if (end > len)
                                return need_more(end + owed, limits, ret_len);
                        pos = end;
                        break;
                }
                case ITEM_ARRAY:
                case ITEM_MAP: {
                        if (size > limits->max_container)
                                return CUBE__SCAN_TOO_MANY;
                        uint64_t n = h.kind == ITEM_MAP ? 2 * size : size;
                        objects = add_sat(objects, n);
                        if (objects > limits->max_objects)
                                return CUBE__SCAN_TOO_MANY;
                        owed = add_sat(owed, n);
                        if (add_sat(pos, owed) > limits->max_message_bytes)
                                return CUBE__SCAN_TOO_BIG;
                        if (n > 0) {
                                if (depth > 0)
                                        owed_by[depth - 1] = inner;
                                inner = n;
                                depth++;
                        }
                        break;
                }
                default:
                        if (add_sat(pos, owed) > limits->max_message_bytes)
                                return CUBE__SCAN_TOO_BIG;
                        break;
                }

                while (depth > 0 && inner == 0)
                        inner = --depth > 0 ? owed_by[depth - 1] : 0;
                if (depth == 0) {
                        *ret_len = (size_t) pos;
                        return CUBE__SCAN_COMPLETE;
                }
                inner--;
                owed--;
        }
}

size_t cube__limits_shallow_bound(const cube__limits *limits, uint32_t depth, uint64_t str_len)
{
        uint32_t max_depth = limits->max_depth < PRESCAN_DEPTH_CAP ? limits->max_depth : PRESCAN_DEPTH_CAP;
        uint64_t bound = limits->max_message_bytes;

        if (depth > max_depth || str_len > limits->max_str_bytes)
                return 0;
        if (bound > limits->max_container)
                bound = limits->max_container;
        if (bound > limits->max_objects)
                bound = limits->max_objects;
        return bound > SIZE_MAX ? SIZE_MAX : (size_t) bound;
}

const char *cube__scan_describe(cube__scan s)
{
        switch (s) {
        case CUBE__SCAN_COMPLETE:
                return "a whole message is present";
        case CUBE__SCAN_INCOMPLETE:
                return "the message is not complete yet; more bytes are needed";
        case CUBE__SCAN_INVALID:
                return "the bytes are not a message of this protocol: a byte no msgpack value starts with, or an ext type, which the protocol never uses";
        case CUBE__SCAN_TOO_DEEP:
                return "arrays and maps nest deeper than the limit allows";
        case CUBE__SCAN_TOO_BIG:
                return "the message is, or declares it will be, longer than the limit on one message allows";
        case CUBE__SCAN_TOO_MANY:
                return "a container declares more elements than the limit allows, or the message more objects in all";
        case CUBE__SCAN_TOO_LONG:
                return "a string is longer than the limit on one string allows";
        }
        return "an unknown pre-scan result";
}

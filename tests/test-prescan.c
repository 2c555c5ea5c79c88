/*
 * test-prescan.c - the pre-scan against every msgpack format, every limit
 * (at the limit passes, one over fails), the hostile headers it exists for,
 * every truncation of valid messages, and random messages packed by
 * msgpack-c itself.
 */

#include <check.h>
#include <inttypes.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prescan.h"

#define MIB (1ull << 20)

/* A growable byte string to assemble messages byte by byte, for the formats
 * and sizes msgpack-c's packer would not choose on its own. */
typedef struct bytes {
        uint8_t *data;
        size_t len;
        size_t cap;
} bytes;

static void put_n(bytes *b, const void *p, size_t n)
{
        if (b->len + n > b->cap) {
                size_t cap = b->cap ? b->cap : 64;

                while (cap < b->len + n)
                        cap *= 2;
                b->data = realloc(b->data, cap);
                ck_assert_ptr_nonnull(b->data);
                b->cap = cap;
        }
        if (n > 0)
                memcpy(b->data + b->len, p, n);
        b->len += n;
}

static void put_u8(bytes *b, uint8_t v)
{
        put_n(b, &v, 1);
}

static void put_be(bytes *b, uint64_t v, unsigned width)
{
        for (unsigned i = width; i > 0; i--)
                put_u8(b, (uint8_t) (v >> (8 * (i - 1))));
}

static void put_fill(bytes *b, uint8_t v, size_t n)
{
        for (size_t i = 0; i < n; i++)
                put_u8(b, v);
}

/* Headers in the widest form, so counts and sizes can be set freely. */
static void put_array32(bytes *b, uint32_t n)
{
        put_u8(b, 0xdd);
        put_be(b, n, 4);
}

static void put_map32(bytes *b, uint32_t n)
{
        put_u8(b, 0xdf);
        put_be(b, n, 4);
}

static void put_str32(bytes *b, uint32_t n)
{
        put_u8(b, 0xdb);
        put_be(b, n, 4);
}

static void put_bin32(bytes *b, uint32_t n)
{
        put_u8(b, 0xc6);
        put_be(b, n, 4);
}

static void bytes_free(bytes *b)
{
        free(b->data);
        *b = (bytes) {};
}

static cube__limits daemon_limits(void)
{
        cube__limits l;

        cube__limits_daemon_default(&l);
        return l;
}

static cube__limits client_limits(void)
{
        cube__limits l;

        cube__limits_client_default(&l);
        return l;
}

static cube__scan scan(const void *buf, size_t len, const cube__limits *l, size_t *ret_len)
{
        return cube__prescan(buf, len, l, ret_len);
}

/* Scans with a sentinel in *ret_len, so a result that must leave it alone is
 * seen to. */
static cube__scan scan_untouched(const void *buf, size_t len, const cube__limits *l)
{
        size_t ret_len = 0xdeadbeef;
        cube__scan s = scan(buf, len, l, &ret_len);

        if (s != CUBE__SCAN_COMPLETE && s != CUBE__SCAN_INCOMPLETE)
                ck_assert_uint_eq(ret_len, 0xdeadbeef);
        return s;
}

static void assert_complete(const void *buf, size_t len, const cube__limits *l, size_t expected)
{
        size_t ret_len = 0;

        ck_assert_int_eq(scan(buf, len, l, &ret_len), CUBE__SCAN_COMPLETE);
        ck_assert_uint_eq(ret_len, expected);
}

/* Every proper prefix of a whole message of full bytes is INCOMPLETE, with a
 * bound that is more than what is there and no more than the message. */
static void assert_every_prefix_incomplete(const uint8_t *buf, size_t full, const cube__limits *l)
{
        for (size_t len = 0; len < full; len++) {
                size_t ret_len = 0;
                cube__scan s = cube__prescan(buf, len, l, &ret_len);

                if (s != CUBE__SCAN_INCOMPLETE)
                        ck_abort_msg("prefix %zu of %zu: %d, not INCOMPLETE", len, full, (int) s);
                if (ret_len <= len || ret_len > full)
                        ck_abort_msg("prefix %zu of %zu: bound %zu", len, full, ret_len);
        }
}

START_TEST(limits_defaults) {
        cube__limits d = daemon_limits(), c = client_limits();

        ck_assert_uint_eq(d.max_message_bytes, 80 * MIB);
        ck_assert_uint_eq(d.max_depth, 16);
        ck_assert_uint_eq(d.max_container, 65536);
        ck_assert_uint_eq(d.max_str_bytes, MIB);
        ck_assert_uint_eq(d.max_objects, 1u << 20);

        ck_assert_uint_eq(c.max_message_bytes, 81 * MIB);
        ck_assert_uint_eq(c.max_depth, 32);
        ck_assert_uint_eq(c.max_container, 65536);
        ck_assert_uint_eq(c.max_str_bytes, 16 * MIB);
        ck_assert_uint_eq(c.max_objects, 1u << 20);
}
END_TEST

START_TEST(describe_every_result) {
        for (int i = CUBE__SCAN_COMPLETE; i <= CUBE__SCAN_TOO_LONG; i++) {
                const char *d = cube__scan_describe((cube__scan) i);

                ck_assert_ptr_nonnull(d);
                ck_assert_uint_gt(strlen(d), 10);
                for (int j = CUBE__SCAN_COMPLETE; j < i; j++)
                        ck_assert_str_ne(d, cube__scan_describe((cube__scan) j));
        }
        ck_assert_ptr_nonnull(strstr(cube__scan_describe(CUBE__SCAN_TOO_MANY), "container"));
        ck_assert_ptr_nonnull(cube__scan_describe((cube__scan) 99));
}
END_TEST

START_TEST(complete_envelope) {
        /* [0, 1, "hello", [1, "x"]] */
        static const uint8_t msg[] = {
                0x94, 0x00, 0x01, 0xa5, 'h', 'e', 'l', 'l', 'o', 0x92, 0x01, 0xa1, 'x',
        };
        cube__limits l = daemon_limits();

        assert_complete(msg, sizeof msg, &l, sizeof msg);
        assert_every_prefix_incomplete(msg, sizeof msg, &l);
}
END_TEST

START_TEST(complete_scalar_at_top_level) {
        static const uint8_t nil[] = { 0xc0 }, u64[] = { 0xcf, 1, 2, 3, 4, 5, 6, 7, 8 }, neg[] = { 0xff };
        cube__limits l = daemon_limits();

        l.max_depth = 0;  /* a scalar at top level is depth 0 */
        assert_complete(nil, sizeof nil, &l, 1);
        assert_complete(u64, sizeof u64, &l, 9);
        assert_complete(neg, sizeof neg, &l, 1);
}
END_TEST

START_TEST(empty_buffer_needs_a_byte) {
        cube__limits l = daemon_limits();
        size_t ret_len = 0;

        ck_assert_int_eq(scan("", 0, &l, &ret_len), CUBE__SCAN_INCOMPLETE);
        ck_assert_uint_eq(ret_len, 1);
}
END_TEST

/* One message holding every format the protocol allows, each in the form
 * named, then every truncation of it. */
START_TEST(every_format_and_every_truncation) {
        cube__limits l = daemon_limits();
        bytes b = {};

        put_array32(&b, 32);
        put_u8(&b, 0x05);                               /* positive fixint */
        put_u8(&b, 0xe3);                               /* negative fixint */
        put_u8(&b, 0xc0);                               /* nil */
        put_u8(&b, 0xc2);                               /* false */
        put_u8(&b, 0xc3);                               /* true */
        put_u8(&b, 0xc4); put_be(&b, 3, 1); put_fill(&b, 'b', 3);
        put_u8(&b, 0xc5); put_be(&b, 2, 2); put_fill(&b, 'b', 2);
        put_bin32(&b, 1); put_fill(&b, 'b', 1);
        put_u8(&b, 0xca); put_be(&b, 0x3f800000, 4);    /* float32 */
        put_u8(&b, 0xcb); put_be(&b, 0x3ff0000000000000ull, 8);
        put_u8(&b, 0xcc); put_be(&b, 0xff, 1);          /* uint8..64 */
        put_u8(&b, 0xcd); put_be(&b, 0xffff, 2);
        put_u8(&b, 0xce); put_be(&b, 0xffffffff, 4);
        put_u8(&b, 0xcf); put_be(&b, UINT64_MAX, 8);
        put_u8(&b, 0xd0); put_be(&b, 0x80, 1);          /* int8..64 */
        put_u8(&b, 0xd1); put_be(&b, 0x8000, 2);
        put_u8(&b, 0xd2); put_be(&b, 0x80000000, 4);
        put_u8(&b, 0xd3); put_be(&b, 0x8000000000000000ull, 8);
        put_u8(&b, 0xa3); put_n(&b, "abc", 3);          /* fixstr */
        put_u8(&b, 0xa0);                               /* empty fixstr */
        put_u8(&b, 0xd9); put_be(&b, 2, 1); put_n(&b, "de", 2);
        put_u8(&b, 0xda); put_be(&b, 1, 2); put_n(&b, "f", 1);
        put_str32(&b, 0);
        put_u8(&b, 0x81); put_u8(&b, 0x01); put_u8(&b, 0x90);   /* fixmap {1: []} */
        put_u8(&b, 0x80);                               /* empty fixmap */
        put_u8(&b, 0xdc); put_be(&b, 2, 2); put_u8(&b, 0x01); put_u8(&b, 0x02);
        put_array32(&b, 1); put_u8(&b, 0xc3);
        put_u8(&b, 0xde); put_be(&b, 1, 2); put_u8(&b, 0xa1); put_u8(&b, 'k'); put_u8(&b, 0xc0);
        put_map32(&b, 1); put_u8(&b, 0x01); put_map32(&b, 0);
        put_u8(&b, 0x92); put_u8(&b, 0x91); put_u8(&b, 0x90); put_u8(&b, 0x7f);
        put_u8(&b, 0xdc); put_be(&b, 0, 2);             /* empty array16 */
        put_u8(&b, 0xde); put_be(&b, 0, 2);             /* empty map16 */

        assert_complete(b.data, b.len, &l, b.len);
        assert_every_prefix_incomplete(b.data, b.len, &l);

        /* What msgpack-c makes of it agrees. */
        msgpack_unpacked u;
        size_t off = 0;
        msgpack_unpacked_init(&u);
        ck_assert_int_eq(msgpack_unpack_next(&u, (const char *) b.data, b.len, &off), MSGPACK_UNPACK_SUCCESS);
        ck_assert_uint_eq(off, b.len);
        ck_assert_int_eq(u.data.type, MSGPACK_OBJECT_ARRAY);
        ck_assert_uint_eq(u.data.via.array.size, 32);
        msgpack_unpacked_destroy(&u);

        bytes_free(&b);
}
END_TEST

START_TEST(exact_length_with_a_second_message_behind) {
        /* [1, 5, nil, ["ok"]] then [2, "write", [7]] */
        static const uint8_t two[] = {
                0x94, 0x01, 0x05, 0xc0, 0x91, 0xa2, 'o', 'k',
                0x93, 0x02, 0xa5, 'w', 'r', 'i', 't', 'e', 0x91, 0x07,
        };
        cube__limits l = daemon_limits();

        assert_complete(two, sizeof two, &l, 8);
        assert_complete(two + 8, sizeof two - 8, &l, sizeof two - 8);
        /* A part of the second message behind the first changes nothing. */
        assert_complete(two, 9, &l, 8);
}
END_TEST

/* The message as a whole: at max_message_bytes it passes, one over fails,
 * and it fails from the header that declares it, not after the bytes. */
START_TEST(message_size_at_and_over_the_limit) {
        cube__limits l = daemon_limits();
        bytes b = {};

        l.max_message_bytes = 100;

        /* [nil, bin8 of 96]: 1 + 1 + 2 + 96 */
        put_u8(&b, 0x92); put_u8(&b, 0xc0);
        put_u8(&b, 0xc4); put_be(&b, 96, 1); put_fill(&b, 0, 96);
        ck_assert_uint_eq(b.len, 100);
        assert_complete(b.data, b.len, &l, 100);
        bytes_free(&b);

        put_u8(&b, 0x92); put_u8(&b, 0xc0);
        put_u8(&b, 0xc4); put_be(&b, 97, 1);
        ck_assert_int_eq(scan_untouched(b.data, b.len, &l), CUBE__SCAN_TOO_BIG);
        bytes_free(&b);

        /* A bin that would fit, but not with the element still owed after it. */
        put_u8(&b, 0x93); put_u8(&b, 0xc0);
        put_u8(&b, 0xc4); put_be(&b, 96, 1);
        ck_assert_int_eq(scan_untouched(b.data, b.len, &l), CUBE__SCAN_TOO_BIG);
        bytes_free(&b);

        /* Small objects one after another, up to the limit... */
        put_u8(&b, 0xdc); put_be(&b, 97, 2); put_fill(&b, 0xc0, 97);
        ck_assert_uint_eq(b.len, 100);
        assert_complete(b.data, b.len, &l, 100);
        bytes_free(&b);

        /* ...and past it, with no whole message in sight. */
        put_u8(&b, 0xdc); put_be(&b, 2, 2); put_u8(&b, 0xd9); put_be(&b, 50, 1); put_fill(&b, 'a', 50);
        put_u8(&b, 0xd9); put_be(&b, 50, 1); put_fill(&b, 'a', 50);
        ck_assert_int_eq(scan_untouched(b.data, b.len, &l), CUBE__SCAN_TOO_BIG);
        bytes_free(&b);

        /* A header cut short that could only end past the limit. */
        l.max_message_bytes = 10;
        ck_assert_int_eq(scan_untouched("\x92\xc4\x04" "abcd\xcf", 8, &l), CUBE__SCAN_TOO_BIG);
        ck_assert_int_eq(scan_untouched("\x92\xc4\x03" "abc\xcd", 7, &l), CUBE__SCAN_INCOMPLETE);
        ck_assert_int_eq(scan_untouched("\x92\xc4\x03" "abc\xdb\x00", 8, &l), CUBE__SCAN_TOO_BIG);
        l.max_message_bytes = 100;

        /* More buffered than the limit, but the message ends in time. */
        put_u8(&b, 0x92); put_u8(&b, 0xcb); put_fill(&b, 0, 8); put_fill(&b, 0xc0, 91);
        ck_assert_uint_eq(b.len, 101);
        assert_complete(b.data, b.len, &l, 11);
        bytes_free(&b);
}
END_TEST

START_TEST(message_size_at_the_daemon_limit) {
        cube__limits l = daemon_limits();
        size_t full = CUBE__DAEMON_MAX_MESSAGE;
        uint8_t *msg = calloc(1, full + 1);
        size_t ret_len = 0;

        ck_assert_ptr_nonnull(msg);

        /* [bin32 of 80 MiB - 6]: exactly 80 MiB. */
        msg[0] = 0x91;
        msg[1] = 0xc6;
        msg[2] = (uint8_t) ((full - 6) >> 24);
        msg[3] = (uint8_t) ((full - 6) >> 16);
        msg[4] = (uint8_t) ((full - 6) >> 8);
        msg[5] = (uint8_t) (full - 6);
        assert_complete(msg, full + 1, &l, full);

        ck_assert_int_eq(scan(msg, 6, &l, &ret_len), CUBE__SCAN_INCOMPLETE);
        ck_assert_uint_eq(ret_len, full);

        /* One more byte declared: refused from the six header bytes. */
        msg[5]++;
        ck_assert_int_eq(scan_untouched(msg, 6, &l), CUBE__SCAN_TOO_BIG);

        free(msg);
}
END_TEST

/* 16 levels is the daemon's limit: the envelope counts as one. */
static void put_nested(bytes *b, unsigned levels, uint8_t innermost)
{
        for (unsigned i = 1; i < levels; i++)
                put_u8(b, 0x91);
        put_u8(b, innermost);
}

START_TEST(depth_at_and_over_the_limit) {
        cube__limits l = daemon_limits();
        bytes b = {};

        put_nested(&b, 16, 0x90);           /* 16 arrays, the innermost empty */
        assert_complete(b.data, b.len, &l, 16);
        bytes_free(&b);

        put_nested(&b, 17, 0x90);
        ck_assert_int_eq(scan_untouched(b.data, b.len, &l), CUBE__SCAN_TOO_DEEP);
        bytes_free(&b);

        put_nested(&b, 16, 0x91); put_u8(&b, 0xc0);   /* 16 arrays around a nil */
        assert_complete(b.data, b.len, &l, 17);
        bytes_free(&b);

        put_nested(&b, 17, 0x91);           /* refused before the rest arrives */
        ck_assert_int_eq(scan_untouched(b.data, b.len, &l), CUBE__SCAN_TOO_DEEP);
        bytes_free(&b);

        /* Maps nest too, as keys or values. */
        for (unsigned i = 0; i < 15; i++) {
                put_u8(&b, 0x81);
                put_u8(&b, 0xc0);
        }
        put_u8(&b, 0x80);
        assert_complete(b.data, b.len, &l, b.len);
        b.data[b.len - 1] = 0x81;
        put_u8(&b, 0x80);
        put_u8(&b, 0xc0);
        ck_assert_int_eq(scan_untouched(b.data, b.len, &l), CUBE__SCAN_TOO_DEEP);
        bytes_free(&b);

        /* Siblings do not add up: depth is nesting, not a count. */
        for (unsigned i = 0; i < 15; i++)
                put_u8(&b, 0x92);
        put_u8(&b, 0x90);
        put_u8(&b, 0x90);
        for (unsigned i = 0; i < 14; i++)
                put_u8(&b, 0x90);
        assert_complete(b.data, b.len, &l, b.len);
        bytes_free(&b);

        l.max_depth = 0;
        ck_assert_int_eq(scan_untouched("\x90", 1, &l), CUBE__SCAN_TOO_DEEP);
        assert_complete("\xc0", 1, &l, 1);
        l.max_depth = 1;
        assert_complete("\x91\xc0", 2, &l, 2);
        assert_complete("\x90", 1, &l, 1);
        ck_assert_int_eq(scan_untouched("\x91\x90", 2, &l), CUBE__SCAN_TOO_DEEP);
}
END_TEST

START_TEST(array_count_at_and_over_the_limit) {
        cube__limits l = daemon_limits();
        bytes b = {};

        put_array32(&b, 65536);
        put_fill(&b, 0xc0, 65536);
        assert_complete(b.data, b.len, &l, b.len);
        bytes_free(&b);

        put_array32(&b, 65537);
        ck_assert_int_eq(scan_untouched(b.data, b.len, &l), CUBE__SCAN_TOO_MANY);
        bytes_free(&b);

        l.max_container = 3;
        assert_complete("\x93\x01\x02\x03", 4, &l, 4);
        ck_assert_int_eq(scan_untouched("\x94\x01\x02\x03\x04", 5, &l), CUBE__SCAN_TOO_MANY);
        /* Nested: the inner one is over. */
        ck_assert_int_eq(scan_untouched("\x92\x01\x94", 3, &l), CUBE__SCAN_TOO_MANY);
}
END_TEST

START_TEST(map_count_at_and_over_the_limit) {
        cube__limits l = daemon_limits();
        bytes b = {};

        put_map32(&b, 65536);
        put_fill(&b, 0xc0, 2 * 65536);
        assert_complete(b.data, b.len, &l, b.len);
        bytes_free(&b);

        put_map32(&b, 65537);
        ck_assert_int_eq(scan_untouched(b.data, b.len, &l), CUBE__SCAN_TOO_MANY);
        bytes_free(&b);

        l.max_container = 3;
        assert_complete("\x83\x01\x02\x03\x04\x05\x06", 7, &l, 7);
        ck_assert_int_eq(scan_untouched("\x84\x01\x02\x03\x04\x05\x06\x07\x08", 9, &l), CUBE__SCAN_TOO_MANY);
}
END_TEST

/* Objects: the root, plus every element, keys and values each counting. */
START_TEST(objects_at_and_over_the_limit) {
        cube__limits l = daemon_limits();
        bytes b = {};

        l.max_objects = 10;
        put_u8(&b, 0x99); put_fill(&b, 0x00, 9);
        assert_complete(b.data, b.len, &l, 10);
        bytes_free(&b);

        put_u8(&b, 0x9a); put_fill(&b, 0x00, 10);
        ck_assert_int_eq(scan_untouched(b.data, b.len, &l), CUBE__SCAN_TOO_MANY);
        bytes_free(&b);

        /* [[1, 2], [3, 4, 5]]: 1 + 2 + 2 + 3 = 8 */
        l.max_objects = 8;
        assert_complete("\x92\x92\x01\x02\x93\x03\x04\x05", 8, &l, 8);
        l.max_objects = 7;
        ck_assert_int_eq(scan_untouched("\x92\x92\x01\x02\x93\x03\x04\x05", 8, &l), CUBE__SCAN_TOO_MANY);

        /* {1: 2, 3: [4]}: 1 + 4 + 1 = 6 */
        l.max_objects = 6;
        assert_complete("\x82\x01\x02\x03\x91\x04", 6, &l, 6);
        l.max_objects = 5;
        ck_assert_int_eq(scan_untouched("\x82\x01\x02\x03\x91\x04", 6, &l), CUBE__SCAN_TOO_MANY);

        /* The daemon's own limit, reached by many arrays that each fit:
         * 1 + 16 + 15 * 65535 + 65534 = 2^20 objects. */
        l = daemon_limits();
        for (unsigned last = 65534; last <= 65535; last++) {
                put_array32(&b, 16);
                for (unsigned i = 0; i < 16; i++) {
                        unsigned n = i == 15 ? last : 65535;

                        put_array32(&b, n);
                        put_fill(&b, 0xc0, n);
                }
                if (last == 65534)
                        assert_complete(b.data, b.len, &l, b.len);
                else
                        ck_assert_int_eq(scan_untouched(b.data, b.len, &l), CUBE__SCAN_TOO_MANY);
                bytes_free(&b);
        }
}
END_TEST

START_TEST(str_length_at_and_over_the_limit) {
        cube__limits l = daemon_limits();
        bytes b = {};
        size_t ret_len = 0;

        put_str32(&b, MIB);
        put_fill(&b, 'a', MIB);
        assert_complete(b.data, b.len, &l, b.len);
        bytes_free(&b);

        put_str32(&b, MIB + 1);
        ck_assert_int_eq(scan_untouched(b.data, b.len, &l), CUBE__SCAN_TOO_LONG);
        bytes_free(&b);

        /* bin is bounded by the message alone. */
        put_bin32(&b, MIB + 1);
        ck_assert_int_eq(scan(b.data, b.len, &l, &ret_len), CUBE__SCAN_INCOMPLETE);
        ck_assert_uint_eq(ret_len, 5 + MIB + 1);
        bytes_free(&b);

        /* Every str form is held to it. */
        l.max_str_bytes = 3;
        assert_complete("\xa3" "abc", 4, &l, 4);
        ck_assert_int_eq(scan_untouched("\xa4" "abcd", 5, &l), CUBE__SCAN_TOO_LONG);
        assert_complete("\xd9\x03" "abc", 5, &l, 5);
        ck_assert_int_eq(scan_untouched("\xd9\x04", 2, &l), CUBE__SCAN_TOO_LONG);
        assert_complete("\xda\x00\x03" "abc", 6, &l, 6);
        ck_assert_int_eq(scan_untouched("\xda\x00\x04", 3, &l), CUBE__SCAN_TOO_LONG);
        /* Map keys too. */
        ck_assert_int_eq(scan_untouched("\x81\xa4" "abcd\xc0", 7, &l), CUBE__SCAN_TOO_LONG);
}
END_TEST

START_TEST(hostile_array32_of_four_billion) {
        cube__limits d = daemon_limits(), c = client_limits();
        cube__scan s;

        s = scan_untouched("\xdd\xff\xff\xff\xff", 5, &d);
        ck_assert(s == CUBE__SCAN_TOO_MANY || s == CUBE__SCAN_TOO_BIG);
        s = scan_untouched("\xdd\xff\xff\xff\xff", 5, &c);
        ck_assert(s == CUBE__SCAN_TOO_MANY || s == CUBE__SCAN_TOO_BIG);
        s = scan_untouched("\xdf\xff\xff\xff\xff", 5, &d);
        ck_assert(s == CUBE__SCAN_TOO_MANY || s == CUBE__SCAN_TOO_BIG);

        /* Within the container limit, but more than the message could hold. */
        d.max_container = UINT32_MAX;
        d.max_objects = UINT64_MAX;
        ck_assert_int_eq(scan_untouched("\xdd\xff\xff\xff\xff", 5, &d), CUBE__SCAN_TOO_BIG);
        ck_assert_int_eq(scan_untouched("\xdf\xff\xff\xff\xff", 5, &d), CUBE__SCAN_TOO_BIG);
}
END_TEST

START_TEST(hostile_array16_header) {
        cube__limits l = daemon_limits();
        size_t ret_len = 0;
        cube__scan s;

        /* dc ff ff: 65535 elements owed, none there. */
        ck_assert_int_eq(scan("\xdc\xff\xff", 3, &l, &ret_len), CUBE__SCAN_INCOMPLETE);
        ck_assert_uint_eq(ret_len, 3 + 65535);
        l.max_container = 1000;
        s = scan_untouched("\xdc\xff\xff", 3, &l);
        ck_assert_int_eq(s, CUBE__SCAN_TOO_MANY);
}
END_TEST

START_TEST(hostile_nesting) {
        cube__limits d = daemon_limits(), c = client_limits();
        uint8_t buf[1000];

        memset(buf, 0x91, sizeof buf);
        ck_assert_int_eq(scan_untouched(buf, sizeof buf, &d), CUBE__SCAN_TOO_DEEP);
        ck_assert_int_eq(scan_untouched(buf, sizeof buf, &c), CUBE__SCAN_TOO_DEEP);
        /* A limit beyond what the walk can track is met at its own cap. */
        d.max_depth = UINT32_MAX;
        ck_assert_int_eq(scan_untouched(buf, sizeof buf, &d), CUBE__SCAN_INCOMPLETE);

        uint8_t *deep = malloc(5000);
        ck_assert_ptr_nonnull(deep);
        memset(deep, 0x91, 5000);
        ck_assert_int_eq(scan_untouched(deep, 5000, &d), CUBE__SCAN_TOO_DEEP);
        free(deep);
}
END_TEST

START_TEST(hostile_str32_refused_from_its_header) {
        cube__limits d = daemon_limits(), c = client_limits();
        static const uint8_t msg[] = { 0xdb, 0xff, 0xff, 0xff, 0xff, 'a', 'b' };
        cube__scan s;

        s = scan_untouched(msg, 5, &d);
        ck_assert(s == CUBE__SCAN_TOO_LONG || s == CUBE__SCAN_TOO_BIG);
        s = scan_untouched(msg, sizeof msg, &c);
        ck_assert(s == CUBE__SCAN_TOO_LONG || s == CUBE__SCAN_TOO_BIG);

        /* bin32 of 4 GiB: the message limit refuses it. */
        ck_assert_int_eq(scan_untouched("\xc6\xff\xff\xff\xff", 5, &d), CUBE__SCAN_TOO_BIG);
        ck_assert_int_eq(scan_untouched("\x92\x01\xc6\xff\xff\xff\xff", 7, &c), CUBE__SCAN_TOO_BIG);
}
END_TEST

START_TEST(never_used_byte_is_invalid) {
        cube__limits l = daemon_limits();

        ck_assert_int_eq(scan_untouched("\xc1", 1, &l), CUBE__SCAN_INVALID);
        ck_assert_int_eq(scan_untouched("\x93\x01\xc1", 3, &l), CUBE__SCAN_INVALID);
        ck_assert_int_eq(scan_untouched("\x81\xc1\x01", 3, &l), CUBE__SCAN_INVALID);
}
END_TEST

START_TEST(ext_types_are_invalid) {
        static const uint8_t ext_bytes[] = { 0xc7, 0xc8, 0xc9, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8 };
        cube__limits l = daemon_limits();

        ck_assert_int_eq(scan_untouched("\xd4\x01\x00", 3, &l), CUBE__SCAN_INVALID);
        ck_assert_int_eq(scan_untouched("\xc7\x01\x05\x00", 4, &l), CUBE__SCAN_INVALID);
        for (size_t i = 0; i < sizeof ext_bytes; i++) {
                uint8_t msg[3] = { 0x92, 0x01, ext_bytes[i] };

                /* Known from the type byte alone. */
                ck_assert_int_eq(scan_untouched(&ext_bytes[i], 1, &l), CUBE__SCAN_INVALID);
                ck_assert_int_eq(scan_untouched(msg, sizeof msg, &l), CUBE__SCAN_INVALID);
        }
}
END_TEST

/* The first violation walking the bytes in order is the one reported. */
START_TEST(first_violation_wins) {
        cube__limits l = daemon_limits();

        l.max_str_bytes = 3;
        l.max_container = 3;
        /* A long str, then an ext. */
        ck_assert_int_eq(scan_untouched("\x92\xa4" "abcd\xd4", 7, &l), CUBE__SCAN_TOO_LONG);
        /* An ext, then a long str. */
        ck_assert_int_eq(scan_untouched("\x92\xd4\x01\x00\xa4" "abcd", 9, &l), CUBE__SCAN_INVALID);
        /* A big container, then an invalid byte. */
        ck_assert_int_eq(scan_untouched("\x92\x94\xc1", 3, &l), CUBE__SCAN_TOO_MANY);
}
END_TEST

START_TEST(incomplete_bound_counts_what_is_owed) {
        cube__limits l = daemon_limits();
        size_t ret_len = 0;

        /* [bin 3 with 1 byte there, ?, ?]: 1 + 2 + 3 + 2 */
        ck_assert_int_eq(scan("\x93\xc4\x03\x61", 4, &l, &ret_len), CUBE__SCAN_INCOMPLETE);
        ck_assert_uint_eq(ret_len, 8);
        /* A header cut short: the header, and what is owed. */
        ck_assert_int_eq(scan("\x92\xcf\x00", 3, &l, &ret_len), CUBE__SCAN_INCOMPLETE);
        ck_assert_uint_eq(ret_len, 11);
        /* Nested owing: [[x, ?], ?] with x cut. */
        ck_assert_int_eq(scan("\x92\x92\xcd", 3, &l, &ret_len), CUBE__SCAN_INCOMPLETE);
        ck_assert_uint_eq(ret_len, 2 + 3 + 1 + 1);
}
END_TEST

START_TEST(bin_of_64_mib_bound_from_ten_bytes) {
        /* [0, 1, <bin 64 MiB>] with 2 body bytes there */
        static const uint8_t msg[] = { 0x93, 0x00, 0x01, 0xc6, 0x04, 0x00, 0x00, 0x00, 0xab, 0xcd };
        cube__limits l = daemon_limits();
        size_t ret_len = 0;

        ck_assert_int_eq(scan(msg, sizeof msg, &l, &ret_len), CUBE__SCAN_INCOMPLETE);
        ck_assert_uint_ge(ret_len, 64 * MIB);
        ck_assert_uint_eq(ret_len, 8 + 64 * MIB);
}
END_TEST

/* A reader that rescans only once the bound is buffered scans a large bin a
 * handful of times, not once per chunk. */
START_TEST(bound_spares_rescanning) {
        cube__limits l = daemon_limits();
        bytes b = {};
        size_t need = 1, scans = 0, got = 0, ret_len = 0;
        cube__scan s = CUBE__SCAN_INCOMPLETE;

        put_u8(&b, 0x92); put_u8(&b, 0x07);
        put_bin32(&b, 4 * MIB); put_fill(&b, 0x5a, 4 * MIB);

        for (got = 1024; s == CUBE__SCAN_INCOMPLETE; got += 1024) {
                if (got > b.len)
                        got = b.len;
                if (got < need)
                        continue;
                scans++;
                s = scan(b.data, got, &l, &ret_len);
                if (s == CUBE__SCAN_INCOMPLETE)
                        need = ret_len;
        }
        ck_assert_int_eq(s, CUBE__SCAN_COMPLETE);
        ck_assert_uint_eq(ret_len, b.len);
        ck_assert_uint_le(scans, 2);
        bytes_free(&b);
}
END_TEST

/* A small deterministic generator, so a failure can be replayed. */
static uint64_t rng_state;

static uint64_t rng(void)
{
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        return rng_state;
}

static uint64_t rng_below(uint64_t n)
{
        return n ? rng() % n : 0;
}

/* Lengths that land on every boundary between the str and bin forms. */
static size_t random_length(void)
{
        static const size_t edges[] = { 0, 1, 31, 32, 255, 256, 65535, 65536 };

        switch (rng_below(16)) {
        case 0:
                return edges[rng_below(sizeof edges / sizeof edges[0])];
        case 1:
                return rng_below(1000);
        default:
                return rng_below(40);
        }
}

static void pack_random(msgpack_packer *pk, unsigned depth, char *fill)
{
        unsigned choice = (unsigned) rng_below(depth < 6 ? 14 : 11);
        size_t n;

        switch (choice) {
        case 0:
                msgpack_pack_nil(pk);
                break;
        case 1:
                if (rng() & 1)
                        msgpack_pack_true(pk);
                else
                        msgpack_pack_false(pk);
                break;
        case 2:
                msgpack_pack_uint64(pk, rng() >> rng_below(64));
                break;
        case 3:
                msgpack_pack_int64(pk, -(int64_t) (rng() >> (1 + rng_below(63))));
                break;
        case 4:
                msgpack_pack_int64(pk, (int64_t) rng_below(256) - 128);
                break;
        case 5:
                msgpack_pack_float(pk, (float) rng_below(1000) / 7.0f);
                break;
        case 6:
                msgpack_pack_double(pk, (double) rng() / 3.0);
                break;
        case 7:
        case 8:
                n = random_length();
                msgpack_pack_str(pk, n);
                msgpack_pack_str_body(pk, fill, n);
                break;
        case 9:
        case 10:
                n = random_length();
                msgpack_pack_bin(pk, n);
                msgpack_pack_bin_body(pk, fill, n);
                break;
        case 11:
        case 12:
                n = rng_below(rng_below(8) == 0 ? 40 : 6);
                msgpack_pack_array(pk, n);
                for (size_t i = 0; i < n; i++)
                        pack_random(pk, depth + 1, fill);
                break;
        default:
                n = rng_below(rng_below(8) == 0 ? 20 : 5);
                msgpack_pack_map(pk, n);
                for (size_t i = 0; i < 2 * n; i++)
                        pack_random(pk, depth + 1, fill);
                break;
        }
}

/* Messages msgpack-c packs are COMPLETE at exactly their length, whatever
 * follows, and every proper prefix is INCOMPLETE with a sound bound. */
START_TEST(random_messages_packed_by_msgpack_c) {
        cube__limits l = client_limits();
        char *fill = malloc(65536);
        size_t checked_prefixes = 0;

        ck_assert_ptr_nonnull(fill);
        memset(fill, 'z', 65536);

        for (uint64_t seed = 1; seed <= 600; seed++) {
                msgpack_sbuffer sbuf;
                msgpack_packer pk;
                size_t ret_len = 0;

                rng_state = seed * 0x9e3779b97f4a7c15ull;
                msgpack_sbuffer_init(&sbuf);
                msgpack_packer_init(&pk, &sbuf, msgpack_sbuffer_write);
                if (rng() & 3) {
                        /* An envelope, as the protocol sends. */
                        size_t n = 1 + rng_below(5);
                        msgpack_pack_array(&pk, n);
                        for (size_t i = 0; i < n; i++)
                                pack_random(&pk, 1, fill);
                } else
                        pack_random(&pk, 0, fill);
                size_t full = sbuf.size;
                /* A second message behind the first. */
                msgpack_pack_array(&pk, 1);
                msgpack_pack_nil(&pk);

                const uint8_t *data = (const uint8_t *) sbuf.data;
                cube__scan s = cube__prescan(data, sbuf.size, &l, &ret_len);
                if (s != CUBE__SCAN_COMPLETE || ret_len != full)
                        ck_abort_msg("seed %" PRIu64 ": %d, %zu of %zu", seed, (int) s, ret_len, full);
                s = cube__prescan(data, full, &l, &ret_len);
                if (s != CUBE__SCAN_COMPLETE || ret_len != full)
                        ck_abort_msg("seed %" PRIu64 " alone: %d, %zu of %zu", seed, (int) s, ret_len, full);

                /* msgpack-c reads the same length back. */
                msgpack_unpacked u;
                size_t off = 0;
                msgpack_unpacked_init(&u);
                if (msgpack_unpack_next(&u, sbuf.data, sbuf.size, &off) != MSGPACK_UNPACK_SUCCESS || off != full)
                        ck_abort_msg("seed %" PRIu64 ": msgpack-c read %zu of %zu", seed, off, full);
                msgpack_unpacked_destroy(&u);

                /* Every prefix of small messages; a sample of large ones. */
                for (size_t len = 0; len < full; len++) {
                        if (full > 4096 && len > 64 && len + 64 < full && rng_below(full / 256) != 0)
                                continue;
                        s = cube__prescan(data, len, &l, &ret_len);
                        if (s != CUBE__SCAN_INCOMPLETE || ret_len <= len || ret_len > full)
                                ck_abort_msg("seed %" PRIu64 ": prefix %zu of %zu: %d, bound %zu",
                                             seed, len, full, (int) s, ret_len);
                        checked_prefixes++;
                }

                msgpack_sbuffer_destroy(&sbuf);
        }

        ck_assert_uint_gt(checked_prefixes, 10000);
        free(fill);
}
END_TEST

/* How deep o's containers nest (an empty one counts), and its longest str. */
static void measure(const msgpack_object *o, uint32_t *ret_depth, uint64_t *ret_str)
{
        uint32_t deepest = 0;
        uint64_t longest = o->type == MSGPACK_OBJECT_STR ? o->via.str.size : 0;

        if (o->type == MSGPACK_OBJECT_ARRAY || o->type == MSGPACK_OBJECT_MAP) {
                uint32_t n = o->type == MSGPACK_OBJECT_ARRAY ? o->via.array.size : o->via.map.size;
                for (uint32_t i = 0; i < n; i++) {
                        const msgpack_object *kids[2] = {
                                o->type == MSGPACK_OBJECT_ARRAY ? &o->via.array.ptr[i] :
                                &o->via.map.ptr[i].key,
                                o->type == MSGPACK_OBJECT_ARRAY ? NULL : &o->via.map.ptr[i].val,
                        };
                        for (int j = 0; j < 2 && kids[j]; j++) {
                                uint32_t d;
                                uint64_t str;
                                measure(kids[j], &d, &str);
                                deepest = d > deepest ? d : deepest;
                                longest = str > longest ? str : longest;
                        }
                }
                deepest++;
        }
        *ret_depth = deepest;
        *ret_str = longest;
}

/* A message no longer than the shallow bound of its nesting and its longest
 * str is taken whole under any limits: a reader that checks its form itself
 * may skip the pre-scan without letting a limit go. Tight random limits, so
 * that each one is what bounds some of the messages. */
START_TEST(within_the_shallow_bound_every_limit_holds) {
        char *fill = malloc(65536);
        size_t within = 0, beyond = 0;

        ck_assert_ptr_nonnull(fill);
        memset(fill, 'z', 65536);
        for (uint64_t seed = 1; seed <= 3000; seed++) {
                msgpack_sbuffer sbuf;
                msgpack_packer pk;
                msgpack_unpacked u;
                size_t off = 0, ret_len = 0;
                uint32_t depth;
                uint64_t str;

                rng_state = seed * 0x9e3779b97f4a7c15ull;
                msgpack_sbuffer_init(&sbuf);
                msgpack_packer_init(&pk, &sbuf, msgpack_sbuffer_write);
                pack_random(&pk, (unsigned) rng_below(6), fill);
                msgpack_unpacked_init(&u);
                ck_assert_int_eq(msgpack_unpack_next(&u, sbuf.data, sbuf.size, &off),
                                 MSGPACK_UNPACK_SUCCESS);
                measure(&u.data, &depth, &str);
                msgpack_unpacked_destroy(&u);

                cube__limits l = {
                        .max_message_bytes = 1 + rng_below(2000),
                        .max_depth = (uint32_t) (1 + rng_below(8)),
                        .max_container = (uint32_t) (1 + rng_below(200)),
                        .max_str_bytes = rng_below(100),
                        .max_objects = 1 + rng_below(rng() & 1 ? 600 : 30),
                };
                size_t bound = cube__limits_shallow_bound(&l, depth, str);
                if (depth > l.max_depth || str > l.max_str_bytes)
                        ck_assert_uint_eq(bound, 0);
                if (sbuf.size > bound) {
                        beyond++;
                } else {
                        cube__scan s = cube__prescan((const uint8_t *) sbuf.data, sbuf.size, &l,
                                                     &ret_len);
                        if (s != CUBE__SCAN_COMPLETE || ret_len != sbuf.size)
                                ck_abort_msg("seed %" PRIu64 ": %zu bytes, bound %zu: %s",
                                             seed, sbuf.size, bound, cube__scan_describe(s));
                        within++;
                }
                msgpack_sbuffer_destroy(&sbuf);
        }
        ck_assert_uint_gt(within, 300);
        ck_assert_uint_gt(beyond, 300);
        free(fill);
}
END_TEST

static Suite *prescan_suite(void)
{
        Suite *s = suite_create("prescan");
        TCase *formats = tcase_create("formats");
        TCase *limits = tcase_create("limits");
        TCase *hostile = tcase_create("hostile");
        TCase *property = tcase_create("property");

        tcase_add_test(formats, limits_defaults);
        tcase_add_test(formats, describe_every_result);
        tcase_add_test(formats, complete_envelope);
        tcase_add_test(formats, complete_scalar_at_top_level);
        tcase_add_test(formats, empty_buffer_needs_a_byte);
        tcase_add_test(formats, every_format_and_every_truncation);
        tcase_add_test(formats, exact_length_with_a_second_message_behind);
        tcase_add_test(formats, incomplete_bound_counts_what_is_owed);
        tcase_add_test(formats, bin_of_64_mib_bound_from_ten_bytes);
        tcase_add_test(formats, bound_spares_rescanning);
        suite_add_tcase(s, formats);

        tcase_add_test(limits, message_size_at_and_over_the_limit);
        tcase_add_test(limits, message_size_at_the_daemon_limit);
        tcase_add_test(limits, depth_at_and_over_the_limit);
        tcase_add_test(limits, array_count_at_and_over_the_limit);
        tcase_add_test(limits, map_count_at_and_over_the_limit);
        tcase_add_test(limits, objects_at_and_over_the_limit);
        tcase_add_test(limits, str_length_at_and_over_the_limit);
        tcase_add_test(limits, first_violation_wins);
        tcase_set_timeout(limits, 60);
        suite_add_tcase(s, limits);

        tcase_add_test(hostile, hostile_array32_of_four_billion);
        tcase_add_test(hostile, hostile_array16_header);
        tcase_add_test(hostile, hostile_nesting);
        tcase_add_test(hostile, hostile_str32_refused_from_its_header);
        tcase_add_test(hostile, never_used_byte_is_invalid);
        tcase_add_test(hostile, ext_types_are_invalid);
        suite_add_tcase(s, hostile);

        tcase_add_test(property, random_messages_packed_by_msgpack_c);
        tcase_add_test(property, within_the_shallow_bound_every_limit_holds);
        tcase_set_timeout(property, 120);
        suite_add_tcase(s, property);

        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(prescan_suite());
        srunner_run_all(sr, CK_ENV);
        int nf = srunner_ntests_failed(sr);
        srunner_free(sr);
        return nf ? 1 : 0;
}

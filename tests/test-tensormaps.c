/*
 * test-tensormaps.c - tensor maps end to end: a kernel's tiled loads of a
 * box into shared memory, with the map's out-of-bounds fill where the box
 * crosses the tensor's edge, element strides and swizzle; the refusal of
 * every hostile field, naming it; the front end's rules for TENSOR_MAP and
 * tensor_map_load; and the backing buffer's place in the failure store (an
 * input, never an output).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "wire.h"

enum { W = 12, H = 5, BOX_X = 8, BOX_Y = 4, BOX = BOX_X * BOX_Y };

/* One cube loads the box at (x, y) and writes it out as it landed. */
static const char box_source[] =
        "KERNEL void box(float *out, TENSOR_MAP(float) src, int32_t x, int32_t y)\n"
        "{\n"
        "        SHARED float tile[64];\n"
        "        uint32_t t = UNIT_POS;\n"
        "\n"
        "        tensor_map_load(src, tile, x, y);\n"
        "        out[t] = tile[t];\n"
        "        out[t + 32] = tile[t + 32];\n"
        "}\n";

static float element(int x, int y)
{
        return (float) (y * 100 + x + 1);
}

static cube_handle tensor(cube_client *c)
{
        float t[W * H];
        cube_handle h;

        for (int y = 0; y < H; y++)
                for (int x = 0; x < W; x++)
                        t[y * W + x] = element(x, y);
        ck_ok(cube_create(c, t, sizeof(t), &h));
        return h;
}

static cube_tensor_map map_of(const cube_handle *h)
{
        return (cube_tensor_map) {
                .buffer = *h, .format = CUBE_TENSOR_MAP_TILED, .elem = CUBE_ELEM_F32,
                .rank = 2, .shape = { W, H }, .strides = { 1, W },
                .box = { BOX_X, BOX_Y }, .elem_strides = { 1, 1 },
        };
}

/* Launches box over map at (x, y) into out (64 floats). */
static void launch_box(cube_client *c, uint64_t k, const cube_handle *out,
                       const cube_tensor_map *map, int32_t x, int32_t y)
{
        cube_info *info = cube_info_new();

        ck_assert_int_eq(cube_info_i32(info, x), 0);
        ck_assert_int_eq(cube_info_i32(info, y), 0);
        cube_launch l = {
                .kernel = k, .cube_count = { 1, 1, 1 }, .cube_dim = { 32, 1, 1 },
                .buffers = out, .n_buffers = 1, .info = info,
                .tensor_maps = map, .n_tensor_maps = 1,
        };
        ck_ok(cube_launch_kernel(c, &l));
        cube_info_free(info);
}

/* What the load must leave: the box at (x, y), traversed every es[d]-th
 * element, filled where it leaves the tensor. */
static void expected_box(float want[64], int32_t x, int32_t y, int bx, int by,
                         const uint32_t es[2], float fill)
{
        int nx = (bx + (int) es[0] - 1) / (int) es[0];
        int ny = (by + (int) es[1] - 1) / (int) es[1];

        for (int i = 0; i < 64; i++)
                want[i] = INFINITY;     /* past the box: shared memory's leftovers */
        for (int j = 0; j < ny; j++)
                for (int i = 0; i < nx; i++) {
                        int gx = x + i * (int) es[0], gy = y + j * (int) es[1];
                        bool in = gx >= 0 && gx < W && gy >= 0 && gy < H;
                        want[j * nx + i] = in ? element(gx, gy) : fill;
                }
}

static void expected(float want[64], int32_t x, int32_t y, const uint32_t es[2], float fill)
{
        expected_box(want, x, y, BOX_X, BOX_Y, es, fill);
}

static void check_box(cube_client *c, const cube_handle *out, const float want[64],
                      const char *what)
{
        float got[64];

        ck_ok(cube_read(c, out, got, sizeof(got)));
        for (int i = 0; i < 64; i++) {
                if (isinf(want[i]))
                        continue;
                bool same = isnan(want[i]) ? isnan(got[i]) : got[i] == want[i];
                ck_assert_msg(same, "%s: element %d is %g, expected %g", what, i,
                              (double) got[i], (double) want[i]);
        }
}

static void reset(cube_client *c, const cube_handle *out)
{
        float minus[64];

        for (int i = 0; i < 64; i++)
                minus[i] = -1.0f;
        ck_ok(cube_write(c, out, minus, sizeof(minus)));
}

/* What most cases start from: a session, box registered, the tensor, an
 * output and the plain map over the tensor. */
typedef struct box_case {
        cube_client *c;
        uint64_t k;
        cube_handle src, out;
        cube_tensor_map map;
} box_case;

static box_case box_start(const char *name)
{
        box_case b;

        b.c = test_connect(D.socket, name);
        b.k = test_kernel(b.c, box_source, "box");
        b.src = tensor(b.c);
        b.out = test_empty(b.c, 64 * sizeof(float));
        b.map = map_of(&b.src);
        return b;
}

START_TEST(a_tiled_load_crossing_the_edge_reads_the_fill)
{
        static const int32_t at[][2] = {
                { 2, 1 },       /* inside */
                { -3, -2 },     /* crosses the low edges */
                { 8, 3 },       /* crosses the high edges */
                { 40, 40 },     /* wholly outside */
        };
        static const uint32_t unit[2] = { 1, 1 };
        box_case b = box_start("tiled");
        cube_client *c = b.c;
        uint64_t k = b.k;
        cube_handle out = b.out;
        cube_tensor_map map = b.map;
        float want[64];
        char what[64];

        for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
                reset(c, &out);
                launch_box(c, k, &out, &map, at[i][0], at[i][1]);
                expected(want, at[i][0], at[i][1], unit, 0.0f);
                snprintf(what, sizeof(what), "zero fill at (%d, %d)", at[i][0], at[i][1]);
                check_box(c, &out, want, what);
        }
        map.oob_fill = CUBE_TENSOR_MAP_OOB_NAN;
        reset(c, &out);
        launch_box(c, k, &out, &map, 9, -1);
        expected(want, 9, -1, unit, NAN);
        check_box(c, &out, want, "NaN fill at (9, -1)");
        cube_disconnect(c);
}
END_TEST

/* Element strides traverse every nth element of the box, except in the
 * innermost dimension, where (without interleave) the driver ignores them
 * and so does every device. */
START_TEST(element_strides_take_every_nth_element_of_the_box)
{
        static const uint32_t es[2] = { 2, 3 }, taken[2] = { 1, 3 };
        box_case b = box_start("strided");
        cube_client *c = b.c;
        uint64_t k = b.k;
        cube_handle out = b.out;
        cube_tensor_map map = b.map;
        float want[64];

        map.elem_strides[0] = es[0];
        map.elem_strides[1] = es[1];
        reset(c, &out);
        launch_box(c, k, &out, &map, 5, 1);
        expected(want, 5, 1, taken, 0.0f);
        check_box(c, &out, want, "element strides (2, 3) at (5, 1)");
        cube_disconnect(c);
}
END_TEST

/* A 32-byte swizzle flips 16-byte chunk bit 4 with bit 7 of the byte offset:
 * in the second 128 bytes of the box, its two 16-byte halves of each 32
 * bytes trade places. */
START_TEST(a_swizzled_map_places_chunks_as_the_hardware_does)
{
        static const uint32_t unit[2] = { 1, 1 };
        box_case b = box_start("swizzle");
        cube_client *c = b.c;
        uint64_t k = b.k;
        cube_handle out = b.out;
        cube_tensor_map map = b.map;
        float plain[64], want[64];

        map.swizzle = CUBE_TENSOR_MAP_SWIZZLE_32B;
        map.box[1] = 8;
        reset(c, &out);
        launch_box(c, k, &out, &map, 1, 0);
        expected_box(plain, 1, 0, BOX_X, 8, unit, 0.0f);
        for (int e = 0; e < 64; e++) {
                unsigned at = (unsigned) e * 4;
                at ^= ((at >> 7) & 1u) << 4;
                want[at / 4] = plain[e];
        }
        check_box(c, &out, want, "swizzle 32B");
        ck_assert(want[4] == plain[4] && want[36] == plain[32]);      /* it did move some */
        cube_disconnect(c);
}
END_TEST

/* Half-precision maps: NaN is the element type's own quiet NaN, f16's
 * 0x7e00 and bf16's 0x7fc0, written through a 16-bit array. */
static const char half_source[] =
        "KERNEL void half_box(uint16_t *out, TENSOR_MAP(uint16_t) src)\n"
        "{\n"
        "        SHARED uint16_t tile[16];\n"
        "\n"
        "        tensor_map_load(src, tile, 12, 0);\n"
        "        out[UNIT_POS] = tile[UNIT_POS];\n"
        "}\n";

START_TEST(a_half_map_fills_with_its_own_nan)
{
        static const struct { cube_elem_type elem; uint16_t nan; } kinds[] = {
                { CUBE_ELEM_F16, 0x7e00 }, { CUBE_ELEM_BF16, 0x7fc0 },
        };
        cube_client *c = test_connect(D.socket, "half");
        uint64_t k = test_kernel(c, half_source, "half_box");
        uint16_t t[2 * 16], got[16];
        cube_handle src, out = test_empty(c, sizeof(got));

        for (int i = 0; i < 32; i++)
                t[i] = (uint16_t) (0x1000 + i);
        ck_ok(cube_create(c, t, sizeof(t), &src));
        for (size_t i = 0; i < 2; i++) {
                cube_tensor_map m = {
                        .buffer = src, .elem = kinds[i].elem, .rank = 2, .shape = { 16, 2 },
                        .strides = { 1, 16 }, .box = { 8, 2 }, .elem_strides = { 1, 1 },
                        .oob_fill = CUBE_TENSOR_MAP_OOB_NAN,
                };
                cube_launch l = { .kernel = k, .cube_count = { 1, 1, 1 },
                                  .cube_dim = { 16, 1, 1 }, .buffers = &out, .n_buffers = 1,
                                  .tensor_maps = &m, .n_tensor_maps = 1 };
                ck_ok(cube_launch_kernel(c, &l));
                ck_ok(cube_read(c, &out, got, sizeof(got)));
                for (int j = 0; j < 2; j++)
                        for (int x = 0; x < 8; x++) {
                                uint16_t want = 12 + x < 16 ? t[j * 16 + 12 + x] : kinds[i].nan;
                                ck_assert_msg(got[j * 8 + x] == want, "elem %d: (%d, %d) is "
                                              "%#x, expected %#x", (int) kinds[i].elem, x, j,
                                              got[j * 8 + x], want);
                        }
        }
        cube_disconnect(c);
}
END_TEST

/* A captured launch keeps its map: each replay loads the box again, from
 * the tensor as it is then. */
START_TEST(a_replayed_graph_loads_through_its_map)
{
        static const uint32_t unit[2] = { 1, 1 };
        box_case b = box_start("graph");
        float want[64], t[W * H];
        uint64_t graph;

        launch_box(b.c, b.k, &b.out, &b.map, -4, 2);    /* the warm-up */
        ck_ok(cube_graph_prepare(b.c));
        launch_box(b.c, b.k, &b.out, &b.map, -4, 2);
        ck_ok(cube_begin_capture(b.c));
        launch_box(b.c, b.k, &b.out, &b.map, -4, 2);
        ck_ok(cube_end_capture(b.c, &graph));
        for (int i = 0; i < W * H; i++)
                t[i] = -element(i % W, i / W);
        ck_ok(cube_write(b.c, &b.src, t, sizeof(t)));
        reset(b.c, &b.out);
        ck_ok(cube_replay(b.c, graph));
        expected(want, -4, 2, unit, 0.0f);
        for (int i = 0; i < 64; i++)
                want[i] = isinf(want[i]) || want[i] == 0.0f ? want[i] : -want[i];
        check_box(b.c, &b.out, want, "a replay after the tensor changed");
        ck_ok(cube_graph_destroy(b.c, graph));
        cube_disconnect(b.c);
}
END_TEST

/* A hostile map: refused before it runs, Validation naming the field; the
 * output takes the failure and the backing buffer stays readable. */
static void expect_refused(cube_client *c, uint64_t k, const cube_tensor_map *map,
                           const cube_handle *src, const char *needle)
{
        cube_handle out = test_empty(c, 64 * sizeof(float));
        float got[64], back[W * H];
        cube_error *e;

        launch_box(c, k, &out, map, 0, 0);
        e = cube_read(c, &out, got, sizeof(got));
        ck_assert_msg(e != NULL, "a map that should say '%s' ran", needle);
        ck_assert_int_eq(cube_error_kind_of(e), CUBE_SERVER_SEVERAL);
        const cube_error *root = cube_error_source(cube_error_at(e, 0));
        ck_assert_msg(root && cube_error_kind_of(root) == CUBE_SERVER_VALIDATION, "%s",
                      cube_error_message(e));
        ck_assert_msg(strstr(cube_error_message(e), needle) != NULL, "'%s' not in: %s", needle,
                      cube_error_message(e));
        cube_error_free(e);
        ck_ok(cube_read(c, src, back, sizeof(back)));
        ck_assert(back[W + 1] == element(1, 1));
        ck_ok(cube_free(c, &out));
}

START_TEST(every_hostile_field_is_refused_by_name)
{
        cube_client *c = test_connect(D.socket, "hostile");
        uint64_t k = test_kernel(c, box_source, "box");
        cube_handle src = tensor(c);
        cube_handle small = cube_handle_slice(&src, 0, W * sizeof(float));
        cube_tensor_map m;

#define REFUSED(change, needle) do { m = map_of(&src); change; \
                expect_refused(c, k, &m, &src, needle); } while (0)
        REFUSED(m.format = 7, "format 7");
        REFUSED(m.elem = 99, "elem 99");
        REFUSED(m.strides[0] = 2, "strides[0] = 2");
        REFUSED(m.strides[1] = 13, "strides[1] = 13");
        REFUSED(m.strides[1] = 1ull << 45, "strides[1]");
        REFUSED(m.shape[1] = 0, "shape[1] = 0");
        REFUSED(m.shape[0] = (1ull << 32) + 1, "shape[0]");
        REFUSED(m.shape[1] = 6, "reach 288 bytes; the buffer binds 240");
        REFUSED(m.buffer = small, "the buffer binds 192");
        REFUSED(m.box[1] = 257, "box[1] = 257");
        REFUSED(m.box[0] = 6, "box[0] = 6 elements is 24 bytes");
        REFUSED(m.elem_strides[0] = 9, "elem_strides[0] = 9");
        REFUSED(m.interleave = 3, "interleave 3");
        REFUSED(m.swizzle = 4, "swizzle 4");
        REFUSED(m.prefetch = 4, "prefetch 4");
        REFUSED(m.oob_fill = 2, "oob_fill 2");
        REFUSED((m.elem = CUBE_ELEM_U32, m.oob_fill = CUBE_TENSOR_MAP_OOB_NAN),
                "NaN needs a float element type");
        REFUSED((m.elem = CUBE_ELEM_F16, m.strides[1] = 24), "elem is 2 bytes; parameter 'src'");
        REFUSED((m.box[0] = 16, m.swizzle = CUBE_TENSOR_MAP_SWIZZLE_32B),
                "more than swizzle's span of 32");
        REFUSED(m.format = CUBE_TENSOR_MAP_IM2COL, "rank 2 (the length of shape) is not 3");
#undef REFUSED
        /* A rank the struct cannot hold never leaves the library. */
        m = map_of(&src);
        m.rank = CUBE_TENSOR_MAP_MAX_RANK + 1;
        cube_launch l = { .kernel = k, .cube_count = { 1, 1, 1 }, .cube_dim = { 32, 1, 1 },
                          .buffers = &src, .n_buffers = 1, .tensor_maps = &m,
                          .n_tensor_maps = 1 };
        test_expect_kind(cube_launch_kernel(c, &l), CUBE_SERVER_VALIDATION, "rank 6");
        cube_disconnect(c);
}
END_TEST

START_TEST(a_launch_must_bind_the_kernels_tensor_maps)
{
        cube_client *c = test_connect(D.socket, "count");
        uint64_t k = test_kernel(c, box_source, "box");
        cube_handle src = tensor(c), out = test_empty(c, 64 * sizeof(float));
        cube_handle both[2] = { out, src };
        cube_info *info = cube_info_new();
        float got[64];
        cube_error *e;

        /* The backing buffer bound as a plain buffer is not a map. */
        cube_info_i32(info, 0);
        cube_info_i32(info, 0);
        cube_launch l = { .kernel = k, .cube_count = { 1, 1, 1 }, .cube_dim = { 32, 1, 1 },
                          .buffers = both, .n_buffers = 2, .info = info };
        ck_ok(cube_launch_kernel(c, &l));
        e = cube_read(c, &out, got, sizeof(got));
        ck_assert_msg(e && strstr(cube_error_message(e), "takes 1 tensor map(s); the launch "
                                  "gave 0"), "%s", e ? cube_error_message(e) : "ran");
        cube_error_free(e);
        cube_info_free(info);
        cube_disconnect(c);
}
END_TEST

/* The backing buffer is an input: a failure it carries skips the launch
 * and reaches its output; a launch reading it never taints it. */
START_TEST(the_backing_buffer_is_an_input_of_the_failure_store)
{
        cube_client *c = test_connect(D.socket, "store");
        uint64_t k = test_kernel(c, box_source, "box");
        uint64_t broken = test_kernel(c, "KERNEL void broken(float *x) { x[0] = nope; }\n",
                                      "broken");
        cube_handle src = tensor(c), out = test_empty(c, 64 * sizeof(float));
        cube_tensor_map map = map_of(&src);
        float got[64], back[W * H];
        cube_error *e;

        /* A launch that cannot compile fails on src, its undeclared output. */
        cube_launch bad = { .kernel = broken, .cube_count = { 1, 1, 1 },
                            .cube_dim = { 32, 1, 1 }, .buffers = &src, .n_buffers = 1 };
        ck_ok(cube_launch_kernel(c, &bad));
        e = cube_read(c, &src, back, sizeof(back));
        ck_assert_msg(e != NULL, "the failed launch left its output clean");
        cube_error_free(e);

        /* The map reads src: the launch is skipped, its output takes the
         * failure. */
        reset(c, &out);
        launch_box(c, k, &out, &map, 0, 0);
        e = cube_read(c, &out, got, sizeof(got));
        ck_assert_msg(e != NULL, "a launch whose tensor map carries a failure ran");
        ck_assert_msg(strstr(cube_error_message(e), "nope") != NULL, "%s",
                      cube_error_message(e));
        cube_error_free(e);

        /* A launch through the map that fails leaves the map's buffer as it
         * was: a fresh tensor, a map refused, the tensor still readable. */
        cube_handle fresh = tensor(c);
        map = map_of(&fresh);
        map.box[0] = 3;
        reset(c, &out);
        launch_box(c, k, &out, &map, 0, 0);
        e = cube_read(c, &out, got, sizeof(got));
        ck_assert_msg(e != NULL, "a refused map ran");
        cube_error_free(e);
        ck_ok(cube_read(c, &fresh, back, sizeof(back)));
        ck_assert(back[2 * W + 3] == element(3, 2));
        cube_disconnect(c);
}
END_TEST

START_TEST(the_front_end_keeps_tensor_maps_to_their_rules)
{
        static const struct { const char *source, *needle; } cases[] = {
                { "KERNEL void k(TENSOR_MAP(float) m, float *out)\n"
                  "{ out[0] = 1.0f; }\n", "comes after a tensor map" },
                { "KERNEL void k(float *out, TENSOR_MAP(float) m)\n"
                  "{ float t[32]; tensor_map_load(m, t, 0, 0); out[0] = t[0]; }\n",
                  "is a SHARED array" },
                { "KERNEL void k(float *out, const float *m)\n"
                  "{ SHARED float t[32]; tensor_map_load(m, t, 0); out[0] = t[0]; }\n",
                  "is a TENSOR_MAP parameter" },
                { "KERNEL void k(float *out, TENSOR_MAP(float) m)\n"
                  "{ SHARED double t[32]; tensor_map_load(m, t, 0); out[0] = t[0]; }\n",
                  "holds 8-byte elements" },
                { "KERNEL void k(float *out, TENSOR_MAP(float) m)\n"
                  "{ SHARED float t[32]; tensor_map_load(m, t, 0, 0, 0, 0, 0, 0, 0, 0, 0); }\n",
                  "1 to 5 coordinates" },
                { "static float h(TENSOR_MAP(float) m) { return m[0]; }\n"
                  "KERNEL void k(float *out, TENSOR_MAP(float) m) { out[0] = h(m); }\n",
                  "entry point's parameters only" },
        };
        cube_client *c = test_connect(D.socket, "rules");
        cube_handle out = test_empty(c, 64 * sizeof(float)), src = tensor(c);
        cube_tensor_map map = map_of(&src);
        float got[64];

        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
                uint64_t k = test_kernel(c, cases[i].source, "k");
                cube_launch l = { .kernel = k, .cube_count = { 1, 1, 1 },
                                  .cube_dim = { 32, 1, 1 }, .buffers = &out, .n_buffers = 1,
                                  .tensor_maps = &map, .n_tensor_maps = 1 };
                ck_ok(cube_launch_kernel(c, &l));
                cube_error *e = cube_read(c, &out, got, sizeof(got));
                ck_assert_msg(e != NULL, "case %zu compiled", i);
                ck_assert_msg(strstr(cube_error_message(e), cases[i].needle) != NULL,
                              "case %zu: '%s' not in: %s", i, cases[i].needle,
                              cube_error_message(e));
                cube_error_free(e);
                ck_ok(cube_write(c, &out, got, sizeof(got)));
        }
        cube_disconnect(c);
}
END_TEST

/* A launch with one tensor map, sent by hand: map writes the map's fields
 * (the 13 of PROTOCOL.md 5.11, or not). */
static void raw_launch_with_map(int fd, uint64_t nonce, uint64_t memory,
                                void (*map)(msgpack_packer *pk, uint64_t nonce, uint64_t memory))
{
        msgpack_sbuffer sb;
        msgpack_packer pk;

        msgpack_sbuffer_init(&sb);
        msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
        cube__pack_notify(&pk, "launch", 11);
        msgpack_pack_uint64(&pk, 1);
        msgpack_pack_uint64(&pk, 1);
        msgpack_pack_array(&pk, 2);
        cube__pack_str(&pk, "static");
        msgpack_pack_array(&pk, 3);
        for (int i = 0; i < 3; i++)
                msgpack_pack_uint32(&pk, 1);
        msgpack_pack_array(&pk, 3);
        for (int i = 0; i < 3; i++)
                msgpack_pack_uint32(&pk, 1);
        msgpack_pack_array(&pk, 0);
        msgpack_pack_array(&pk, 0);
        msgpack_pack_bin(&pk, 0);
        msgpack_pack_array(&pk, 2);
        msgpack_pack_uint32(&pk, 0);
        msgpack_pack_uint32(&pk, 0);
        msgpack_pack_uint32(&pk, 0);
        msgpack_pack_array(&pk, 6);
        for (int i = 0; i < 6; i++)
                msgpack_pack_uint32(&pk, 0);
        msgpack_pack_array(&pk, 1);
        map(&pk, nonce, memory);
        ck_assert_int_eq(raw_send_sbuffer(fd, &sb), 0);
        msgpack_sbuffer_destroy(&sb);
}

static void pack_u64s(msgpack_packer *pk, uint32_t n, uint64_t v)
{
        msgpack_pack_array(pk, n);
        for (uint32_t i = 0; i < n; i++)
                msgpack_pack_uint64(pk, v);
}

/* 13 fields, shape and the rest of rank 9 (no corners): more than a map
 * holds. */
static void map_rank_nine(msgpack_packer *pk, uint64_t nonce, uint64_t memory)
{
        msgpack_pack_array(pk, 13);
        msgpack_pack_array(pk, 4);
        msgpack_pack_uint64(pk, nonce);
        msgpack_pack_uint64(pk, memory);
        msgpack_pack_uint64(pk, 0);
        msgpack_pack_uint64(pk, 0);
        msgpack_pack_uint32(pk, 0);
        msgpack_pack_uint32(pk, CUBE_ELEM_F32);
        for (int i = 0; i < 4; i++)
                pack_u64s(pk, 9, 1);
        pack_u64s(pk, 0, 0);
        pack_u64s(pk, 0, 0);
        for (int i = 0; i < 4; i++)
                msgpack_pack_uint32(pk, 0);
}

/* 12 fields: not a map. */
static void map_short(msgpack_packer *pk, uint64_t nonce, uint64_t memory)
{
        (void) nonce;
        (void) memory;
        msgpack_pack_array(pk, 12);
        for (int i = 0; i < 12; i++)
                msgpack_pack_uint32(pk, 0);
}

/* From the wire, as no library sends it: a map of rank 9 is judged with the
 * others (the daemon keeps reading the session), and a map that is not 13
 * fields is a protocol error that closes the connection. */
START_TEST(a_hostile_map_on_the_wire_is_judged_or_closes_the_connection)
{
        uint64_t nonce, session;
        int fd = raw_connect(D.socket);

        raw_greet(fd, &nonce, &session);
        uint64_t memory = session << 40 | 1;
        raw_send_create(fd, memory, 4096);
        raw_send_kernel(fd, 1, box_source, "box");
        raw_launch_with_map(fd, nonce, memory, map_rank_nine);
        raw_send_request_u64(fd, 7, "stream_ids", NULL, 0);
        msgpack_unpacked up;
        cube__envelope env;
        const char *why;
        ck_assert_int_eq(raw_recv(fd, &up, test_scaled_ms(5000)), 1);
        ck_assert_int_eq(cube__envelope_parse(&up.data, &env, &why), 0);
        ck_assert_int_eq(env.type, CUBE__MSG_RESPONSE);
        ck_assert_uint_eq(env.msgid, 7);
        msgpack_unpacked_destroy(&up);

        raw_launch_with_map(fd, nonce, memory, map_short);
        ck_assert(raw_wait_closed(fd, test_scaled_ms(5000)));
}
END_TEST

/* ---------------------------------------------------------------------------
 * Im2col loads: a column of pixels, channels innermost. The cases are the
 * TMA's im2col mode as documented by its users (an NHWC tensor, a bounding
 * box per spatial dimension of [lower + offset, size + upper + offset),
 * pixels taken along W, then H, then on into the next image).
 * ------------------------------------------------------------------------- */

enum { IC = 4, IW = 4, IH = 4, PIXELS = 16 };

/* One cube loads 16 pixels of 4 channels from (c, w, h, n), offsets
 * (ow, oh), and writes them out as they landed. */
static const char column_source[] =
        "KERNEL void column(float *out, TENSOR_MAP(float) src, int32_t c, int32_t w, int32_t h,\n"
        "                   int32_t n, int32_t ow, int32_t oh)\n"
        "{\n"
        "        SHARED float tile[64];\n"
        "\n"
        "        tensor_map_load(src, tile, c, w, h, n, ow, oh);\n"
        "        for (uint32_t i = UNIT_POS; i < 64; i += CUBE_DIM)\n"
        "                out[i] = tile[i];\n"
        "}\n";

/* Pixel (w, h) of image n holds n * 16 + h * 4 + w + 1 in channel 0, and
 * 1000 times that plus the channel in the others. */
static float pixel_value(int n, int h, int w, int ch)
{
        float v = (float) (n * IH * IW + h * IW + w + 1);

        return ch ? v * 1000 + (float) ch : v;
}

static cube_handle images(cube_client *c, int n_images)
{
        float t[2 * IH * IW * IC];
        cube_handle h;

        for (int n = 0; n < n_images; n++)
                for (int y = 0; y < IH; y++)
                        for (int x = 0; x < IW; x++)
                                for (int ch = 0; ch < IC; ch++)
                                        t[((n * IH + y) * IW + x) * IC + ch] =
                                                pixel_value(n, y, x, ch);
        ck_ok(cube_create(c, t, (uint64_t) n_images * IH * IW * IC * sizeof(float), &h));
        return h;
}

static cube_tensor_map column_map(const cube_handle *h, int n_images, int lower, int upper)
{
        return (cube_tensor_map) {
                .buffer = *h, .format = CUBE_TENSOR_MAP_IM2COL, .elem = CUBE_ELEM_F32,
                .rank = 4, .shape = { IC, IW, IH, (uint64_t) n_images },
                .strides = { 1, IC, IC * IW, IC * IW * IH },
                .box = { IC, PIXELS }, .elem_strides = { 1, 1, 1, 1 },
                .lower_corner = { lower, lower }, .upper_corner = { upper, upper },
        };
}

/* Loads the column at at = (c, w, h, n, ow, oh) and checks channel 0
 * of each pixel against want (0: the fill), and every channel of the first
 * pixel that is not the fill. */
static void expect_column(cube_client *c, uint64_t k, const cube_tensor_map *map,
                          const int32_t at[6], const float want[PIXELS], const char *what)
{
        cube_handle out = test_empty(c, 64 * sizeof(float));
        cube_info *info = cube_info_new();
        float got[64];

        for (int i = 0; i < 6; i++)
                ck_assert_int_eq(cube_info_i32(info, at[i]), 0);
        cube_launch l = {
                .kernel = k, .cube_count = { 1, 1, 1 }, .cube_dim = { 32, 1, 1 },
                .buffers = &out, .n_buffers = 1, .info = info,
                .tensor_maps = map, .n_tensor_maps = 1,
        };
        ck_ok(cube_launch_kernel(c, &l));
        cube_info_free(info);
        ck_ok(cube_read(c, &out, got, sizeof(got)));
        for (int p = 0; p < PIXELS; p++) {
                ck_assert_msg(got[p * IC] == want[p], "%s: pixel %d holds %g, expected %g", what,
                              p, (double) got[p * IC], (double) want[p]);
                for (int ch = 1; ch < IC; ch++)
                        ck_assert_msg(got[p * IC + ch] == (want[p] ? want[p] * 1000 + (float) ch :
                                                           0.0f),
                                      "%s: pixel %d channel %d holds %g", what, p, ch,
                                      (double) got[p * IC + ch]);
        }
        ck_ok(cube_free(c, &out));
}

START_TEST(an_im2col_load_takes_a_column_of_pixels_in_its_bounding_box)
{
        cube_client *c = test_connect(D.socket, "im2col");
        uint64_t k = test_kernel(c, column_source, "column");
        cube_handle one = images(c, 1), two = images(c, 2);
        cube_tensor_map plain = column_map(&one, 1, 0, 0), padded = column_map(&one, 1, -1, -1);
        cube_tensor_map batch = column_map(&two, 2, 0, 0);
        float want[PIXELS];

        /* The whole image, pixel by pixel along W, then H. */
        for (int p = 0; p < PIXELS; p++)
                want[p] = (float) (p + 1);
        expect_column(c, k, &plain, (const int32_t[6]) { 0, 0, 0, 0, 0, 0 }, want, "basic");

        /* A box one pixel up and left of the image: its first row and
         * column are the fill. */
        for (int p = 0; p < PIXELS; p++) {
                int w = p % 4 - 1, h = p / 4 - 1;
                want[p] = w < 0 || h < 0 ? 0.0f : pixel_value(0, h, w, 0);
        }
        expect_column(c, k, &padded, (const int32_t[6]) { 0, -1, -1, 0, 0, 0 }, want, "padded");

        /* The same box moved by offsets (1, 1): the image again. */
        for (int p = 0; p < PIXELS; p++)
                want[p] = (float) (p + 1);
        expect_column(c, k, &padded, (const int32_t[6]) { 0, -1, -1, 0, 1, 1 }, want, "offset");

        /* From (w 3, h 1) of image 0 on into image 1. */
        for (int p = 0; p < PIXELS; p++)
                want[p] = (float) (8 + p);
        expect_column(c, k, &batch, (const int32_t[6]) { 0, 3, 1, 0, 0, 0 }, want, "batches");
        cube_disconnect(c);
}
END_TEST

/* A start outside the bounding box, or coordinates that are not the map's
 * rank and then one offset per spatial dimension, fail the launch as an
 * access out of bounds naming the load. */
START_TEST(an_im2col_load_outside_its_rules_fails_the_launch)
{
        cube_client *c = test_connect(D.socket, "im2col-bad");
        uint64_t k = test_kernel(c, column_source, "column");
        cube_handle one = images(c, 1), out = test_empty(c, 64 * sizeof(float));
        cube_tensor_map plain = column_map(&one, 1, 0, 0);
        cube_info *info = cube_info_new();
        cube_error *e;

        ck_assert_int_eq(cube_info_i32(info, 0), 0);
        ck_assert_int_eq(cube_info_i32(info, -2), 0);   /* w: left of the box [0, 4) */
        for (int i = 0; i < 4; i++)
                ck_assert_int_eq(cube_info_i32(info, 0), 0);
        cube_launch l = {
                .kernel = k, .cube_count = { 1, 1, 1 }, .cube_dim = { 32, 1, 1 },
                .buffers = &out, .n_buffers = 1, .info = info,
                .tensor_maps = &plain, .n_tensor_maps = 1,
        };
        ck_ok(cube_launch_kernel(c, &l));
        cube_info_free(info);
        e = cube_sync(c, &out, 1);
        ck_assert_msg(e && strstr(cube_error_message(e), "tensor_map_load"),
                      "a start outside the box: %s", e ? cube_error_message(e) : "ok");
        cube_error_free(e);
        cube_disconnect(c);
}
END_TEST

static Suite *tensormaps_suite(void)
{
        Suite *s = suite_create("tensormaps");
        TCase *tc = tcase_create("tensormaps");

        tcase_add_checked_fixture(tc, test_start_default, test_stop_clean);
        tcase_set_timeout(tc, 60);
        tcase_add_test(tc, a_tiled_load_crossing_the_edge_reads_the_fill);
        tcase_add_test(tc, element_strides_take_every_nth_element_of_the_box);
        tcase_add_test(tc, a_swizzled_map_places_chunks_as_the_hardware_does);
        tcase_add_test(tc, a_half_map_fills_with_its_own_nan);
        tcase_add_test_needing(tc, an_im2col_load_takes_a_column_of_pixels_in_its_bounding_box,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test_needing(tc, an_im2col_load_outside_its_rules_fails_the_launch,
                               TEST_NEEDS_KERNEL_RUNS);
        tcase_add_test(tc, a_replayed_graph_loads_through_its_map);
        tcase_add_test(tc, every_hostile_field_is_refused_by_name);
        tcase_add_test(tc, a_launch_must_bind_the_kernels_tensor_maps);
        tcase_add_test(tc, the_backing_buffer_is_an_input_of_the_failure_store);
        tcase_add_test(tc, the_front_end_keeps_tensor_maps_to_their_rules);
        tcase_add_test(tc, a_hostile_map_on_the_wire_is_judged_or_closes_the_connection);
        suite_add_tcase(s, tc);
        return s;
}

int main(void)
{
        SRunner *sr = srunner_create(tensormaps_suite());
        int failed;

        srunner_run_all(sr, CK_ENV);
        failed = srunner_ntests_failed(sr);
        srunner_free(sr);
        return failed ? 1 : 0;
}

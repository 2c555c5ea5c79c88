"""Kernels: launches checked against numpy, and the info words KERNELS.md lays out."""
import time

import numpy as np
import pytest

import cubeclient as cube

VADD = """
KERNEL void vector_add(const float *a, const float *b, float *out, INFO)
{
        uint64_t i = ABSOLUTE_POS;

        if (i < BUFFER_LEN(2))
                out[i] = a[i] + b[i];
}
"""

SAXPY = """
KERNEL void saxpy(const float *x, float *y, float a, uint32_t n)
{
        uint64_t i = ABSOLUTE_POS;

        if (i < n)
                y[i] = a * x[i] + y[i];
}
"""

# One of each group, out of order, then lengths and a tensor: every value read
# back where KERNELS.md says it lies.
WORDS = """
KERNEL void words(const float *in, double *out, INFO)
{
        if (ABSOLUTE_POS != 0)
                return;
        out[0] = SCALAR(float, 0, 0);
        out[1] = SCALAR(float, 0, 1);
        out[2] = SCALAR(float, 0, 2);
        out[3] = SCALAR(double, 2, 0);
        out[4] = SCALAR(int32_t, 3, 0);
        out[5] = SCALAR(int64_t, 4, 0);
        out[6] = SCALAR(int64_t, 4, 1);
        out[7] = SCALAR(uint32_t, 6, 0);
        out[8] = (double) SCALAR(uint64_t, 7, 0);
        out[9] = BUFFER_LEN(0);
        out[10] = BUFFER_LEN(1);
        out[11] = DYN_U32(META_U32(2 + 0) + 0);
        out[12] = DYN_U32(META_U32(2 + 0) + 1);
        out[13] = DYN_U32(META_U32(2 + 1 + 0) + 0);
        out[14] = DYN_U32(META_U32(2 + 1 + 0) + 1);
        out[15] = META_U32(2 + 1) - META_U32(2 + 0);
}
"""


def test_vector_add_against_numpy(client):
    rng = np.random.default_rng(3)
    n = 100_003
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    k = client.kernel(VADD, "vector_add")
    bufs = [client.create(a), client.create(b), client.create(np.full(n, np.nan, np.float32))]
    k.launch((n + 255) // 256, 256, bufs)      # lengths from the buffers' dtypes
    np.testing.assert_allclose(bufs[2].to_numpy(), a + b, rtol=1e-6)


def test_scalars_with_explicit_lengths(client):
    n = 1000
    x = np.arange(n, dtype=np.float32)
    y = np.ones(n, dtype=np.float32)
    k = client.kernel(SAXPY, "saxpy")
    bx, by = client.create(x), client.create(y)
    k.launch((n + 255) // 256, 256, [bx, by], scalars=[cube.u32(n), cube.f32(2.5)], lengths=[])
    np.testing.assert_allclose(by.to_numpy(), 2.5 * x + y, rtol=1e-6)
    # numpy scalars carry their type
    k.launch((n + 255) // 256, (256,), [bx, by], scalars=[np.float32(-1), np.uint32(n)])
    np.testing.assert_allclose(by.to_numpy(), 1.5 * x + y, rtol=1e-6)


def test_checked_launch_out_of_bounds_fails_only_itself(client):
    assert client.check_mode == "auto"
    k = client.kernel("KERNEL void far(float *x, uint32_t k) { x[k] = 1; }", "far")
    x = client.create(np.zeros(16, np.float32))
    k.launch(1, 1, [x], scalars=[cube.u32(1 << 20)])
    with pytest.raises(cube.CubeError) as info:
        x.to_numpy()
    assert "out of bounds" in str(info.value) and "'x'" in str(info.value)
    # A scalar the signature does not take is refused, naming the parameter.
    k.launch(1, 1, [x], scalars=[cube.f32(1)])
    with pytest.raises(cube.CubeError) as info:
        x.to_numpy()
    assert "'k'" in str(info.value)
def test_a_prepared_launch_rebinds_its_scalars(client):
    n = 512
    x = np.arange(n, dtype=np.float32)
    k = client.kernel(SAXPY, "saxpy")
    bx, by = client.create(x), client.create(np.zeros(n, np.float32))
    go = k.prepare((n + 255) // 256, 256, [bx, by], scalars=[cube.u32(n), cube.f32(1)],
                   lengths=[])
    want = np.zeros(n, np.float32)
    for a in (1, 2, 3, 4):
        go.rebind(scalars=[cube.u32(n), cube.f32(a)], lengths=[])
        go()
        want = a * x + want
    np.testing.assert_allclose(by.to_numpy(), want, rtol=1e-6)


def test_cache_artifacts_outlive_their_sessions(fresh_daemon):
    d = fresh_daemon()
    with cube.Client(d.socket, name="compiler") as c:
        k = c.kernel(SAXPY, "saxpy")
        k.launch(1, 1, [c.create(np.zeros(1, np.float32)), c.create(np.zeros(1, np.float32))],
                 scalars=[cube.u32(1), cube.f32(1)], lengths=[])
        c.sync()
    with cube.Client(d.socket, name="watcher") as w:
        assert w.kernels() == []
        (a,) = w.cache_artifacts()
    assert a.entry == "saxpy" and a.backend == "cpu" and a.bytes > 64
    assert len(a.source_hash) == 64 and a.source_hash != a.hash
    assert abs(a.used_at - time.time()) < 600


def test_hello_utilities(client, fresh_daemon):
    assert client.properties_hash != 0 and client.target
    name, reduces = client.device_transport
    assert name and cube.ElemType.F32 in reduces
    none = fresh_daemon("--transport", "none")
    with cube.Client(none.socket, name="none") as c:
        assert c.device_transport is None
        assert c.properties_hash == client.properties_hash or c.properties != client.properties


def test_grid_helpers(client):
    assert cube.num_elems((4, 2, 3)) == 24 and cube.num_elems(5) == 5
    assert cube.count_is_empty((3, 0)) and not cube.count_is_empty(1)
    assert cube.can_contain((8, 4), (8, 2, 1)) and not cube.can_contain(8, (8, 2))
    p = client.properties
    sel = client.count_select(p.max_cube_count[0] + 3)
    assert sel.count[1] > 1 and sel.num_cubes >= p.max_cube_count[0] + 3
    assert client.count_select(10) == cube.CountSelection((10, 1, 1), True, 10)
    x, y, z = client.cube_dim(1 << 20)
    assert x == p.plane_size_max and z == 1 and 1 <= x * y <= p.max_units_per_cube
    n = p.max_cube_count[0] + 3
    k = client.kernel("KERNEL void mark(uint32_t *x, INFO) { uint64_t i = ABSOLUTE_POS;"
                      " if (i < BUFFER_LEN(0)) x[i] = 1; }", "mark")
    out = client.create(np.zeros(n, np.uint32))
    k.launch(sel.count, 1, [out])
    assert int(out.to_numpy().sum()) == n


def test_untyped_scalar_is_refused(client):
    k = client.kernel(SAXPY, "saxpy")
    with pytest.raises(TypeError):
        k.launch(1, 1, [client.empty(4), client.empty(4)], scalars=[2.5])


def test_info_words_layout(client):
    k = client.kernel(WORDS, "words")
    inp = client.create(np.zeros(3, np.float32))
    out = client.create(np.zeros(16, np.float64))
    scalars = [cube.u64(2**40 + 3), cube.i64(-5), cube.f32(1.5), cube.i32(-7), cube.f64(0.25),
               cube.f32(2.5), cube.u32(9), cube.i64(11), cube.f32(-4)]
    k.launch(1, 1, [inp, out], scalars=scalars, lengths=[3, 16],
             tensors=[((4, 6), (6, 1))])
    got = out.to_numpy()
    expect = [1.5, 2.5, -4, 0.25, -7, -5, 11, 9, 2**40 + 3, 3, 16, 4, 6, 6, 1, 2]
    assert got.tolist() == expect


def test_prepared_launch_and_streams(client):
    n = 256
    k = client.kernel("KERNEL void inc(float *x, INFO) { uint64_t i = ABSOLUTE_POS;"
                      " if (i < BUFFER_LEN(0)) x[i] += 1; }", "inc")
    s = client.stream()
    x = s.create(np.zeros(n, np.float32))
    go = k.prepare(1, n, [x])
    for _ in range(100):
        go(stream=s)
    s.launch(go)
    assert np.array_equal(s.to_numpy(x), np.full(n, 101, np.float32))


def test_dynamic_count(client):
    k = client.kernel("KERNEL void mark(uint32_t *x, INFO) { x[ABSOLUTE_POS] = 1; }", "mark")
    x = client.create(np.zeros(64, np.uint32))
    count = client.create(np.array([5, 1, 1], np.uint32))
    k.launch(count, 4, [x], lengths=[])
    got = x.to_numpy()
    assert got[:20].tolist() == [1] * 20 and got[20:].sum() == 0


def test_launch_modes_and_kernel_cache(client):
    src = "KERNEL void q1(float *x, INFO) { x[0] = 7; }"
    k = client.kernel(src, "q1")
    x = client.create(np.zeros(1, np.float32))
    k.launch(1, 1, [x], mode=cube.LaunchMode.QUEUE)
    client.compile_queued()
    entries = [e for e in client.kernels() if e.entry == "q1"]
    assert entries and entries[0].state == "compiled" and isinstance(entries[0], cube.KernelInfo)
    assert x.to_numpy()[0] == 0            # queued launches run nothing
    k.launch(1, 1, [x])
    assert x.to_numpy()[0] == 7


def test_kernel_cache_reports_size_and_evictions(fresh_daemon):
    def run(c, value):
        k = c.kernel("KERNEL void w(float *x, INFO) { x[0] = %d; }" % value, "w")
        x = c.create(np.zeros(1, np.float32))
        k.launch(1, 1, [x])
        assert x.to_numpy()[0] == value

    d = fresh_daemon()
    with cube.Client(d.socket, name="sizes") as c:
        run(c, 1)
        kc = c.kernel_cache()
        assert isinstance(kc, cube.KernelCache)
        assert kc.artifacts >= 1 and kc.bytes > 0 and kc.max_bytes == 1 << 30
        assert kc.evictions == 0 and kc.evicted == ()
        one = kc.bytes
    # Room for one artifact: storing the second evicts the first.
    d = fresh_daemon("--cache-max-bytes", str(one + 16))
    with cube.Client(d.socket, name="evict") as c:
        run(c, 2)
        run(c, 3)
        kc = c.kernel_cache()
        assert kc.max_bytes == one + 16 and kc.bytes <= kc.max_bytes
        assert kc.evictions == 1 and len(kc.evicted) == 1
        assert kc.evicted[0].artifact and kc.evicted[0].bytes > 0


BOX = """
KERNEL void box(float *out, TENSOR_MAP(float) src, int32_t x, int32_t y)
{
        SHARED float tile[32];

        tensor_map_load(src, tile, x, y);
        out[UNIT_POS] = tile[UNIT_POS];
}
"""


def test_tensor_map_box_crossing_the_edge_reads_the_fill(client):
    t = (np.arange(5 * 12, dtype=np.float32) + 1).reshape(5, 12)
    src = client.create(t)
    out = client.create(np.full(32, -1, np.float32))
    k = client.kernel(BOX, "box")
    for fill, pad in ((cube.OobFill.ZERO, 0.0), (cube.OobFill.NAN, np.nan)):
        m = cube.TensorMap(src, shape=(12, 5), box=(8, 4), oob_fill=fill)
        k.launch(1, 32, [out], scalars=[cube.i32(9), cube.i32(-2)], lengths=[],
                 tensor_maps=[m])
        want = np.full((4 + 2, 12 + 8), pad, np.float32)
        want[2:2 + 5, 0:12] = t[:4, :]
        np.testing.assert_array_equal(out.to_numpy().reshape(4, 8), want[0:4, 9:17])
    # A field out of its limits fails the launch, naming it.
    bad = cube.TensorMap(src, shape=(12, 5), box=(3, 4))
    k.launch(1, 32, [out], scalars=[cube.i32(0), cube.i32(0)], lengths=[], tensor_maps=[bad])
    with pytest.raises(cube.CubeError) as info:
        out.to_numpy()
    assert "box[0] = 3" in str(info.value)


COLUMN = """
KERNEL void column(float *out, TENSOR_MAP(float) src, int32_t c, int32_t w, int32_t h,
                   int32_t n, int32_t ow, int32_t oh)
{
        SHARED float tile[64];

        tensor_map_load(src, tile, c, w, h, n, ow, oh);
        for (uint32_t i = UNIT_POS; i < 64; i += CUBE_DIM)
                out[i] = tile[i];
}
"""


def test_tensor_map_im2col_loads_pixels_of_its_bounding_box(client):
    img = (np.arange(16, dtype=np.float32) + 1).repeat(4).reshape(1, 4, 4, 4)    # NHWC
    src = client.create(img)
    out = client.create(np.full(64, -1, np.float32))
    k = client.kernel(COLUMN, "column")
    m = cube.TensorMap(src, shape=(4, 4, 4, 1), box=(4, 16), format=cube.TensorMapFormat.IM2COL,
                       lower_corner=(-1, -1), upper_corner=(-1, -1))
    for offsets, want in (((0, 0), [0, 0, 0, 0, 0, 1, 2, 3, 0, 5, 6, 7, 0, 9, 10, 11]),
                          ((1, 1), list(range(1, 17)))):
        k.launch(1, 32, [out], scalars=[cube.i32(v) for v in (0, -1, -1, 0) + offsets],
                 lengths=[], tensor_maps=[m])
        np.testing.assert_array_equal(out.to_numpy().reshape(16, 4)[:, 0], want)

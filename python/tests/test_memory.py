"""Buffers, round trips, regions, tensors and sharing against a real cubed."""
import array

import numpy as np
import pytest

import cubeclient as cube

DTYPES = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_roundtrip_every_dtype(client, dtype):
    rng = np.random.default_rng(7)
    a = (rng.standard_normal((37, 5)) * 100).astype(dtype)
    b = client.create(a)
    assert b.nbytes == a.nbytes and b.dtype == a.dtype and b.shape == a.shape
    out = b.to_numpy()
    assert out.dtype == a.dtype and out.shape == a.shape
    assert np.array_equal(out, a)
    # a write from the same kind of array, then a read into one
    a2 = a[::-1].copy()
    client.write(b, a2)
    dst = np.empty_like(a)
    b.read_into(dst)
    assert np.array_equal(dst, a2)
    assert b.read() == a2.tobytes()


@pytest.mark.parametrize("data", [b"hello cube", bytearray(b"\x00\x01\x02" * 99),
                                  memoryview(b"abcdefgh"), array.array("d", [1.5, -2.0, 3.25])])
def test_roundtrip_buffer_protocol(client, data):
    b = client.create(data)
    assert b.read() == bytes(memoryview(data).cast("B"))


@pytest.mark.parametrize("make", [
    lambda a: a[:, ::2],                # strided
    lambda a: a.T,                      # transposed
    lambda a: np.asfortranarray(a),     # Fortran order
    lambda a: a[::-1],                  # negative stride
], ids=["strided", "transposed", "fortran", "reversed"])
def test_non_contiguous_input_is_copied_in_c_order(client, make):
    a = make(np.arange(48, dtype=np.int32).reshape(6, 8))
    assert not a.flags.c_contiguous
    b = client.create(a)
    assert np.array_equal(b.to_numpy(), a)
    assert b.read() == np.ascontiguousarray(a).tobytes()
    # writes too
    c = client.empty(a.nbytes)
    client.write(c, a)
    assert c.read() == np.ascontiguousarray(a).tobytes()
    # a strided memoryview
    mv = memoryview(bytes(range(20)))[::3]
    assert client.create(mv).read() == bytes(range(20))[::3]


def test_non_contiguous_destination_is_refused(client):
    b = client.create(np.arange(8, dtype=np.int32))
    out = np.empty((8, 2), np.int32)[:, 0]
    with pytest.raises(TypeError):
        b.read_into(out)


def test_write_of_the_wrong_size_is_validation(client):
    b = client.empty(16)
    with pytest.raises(cube.ServerError.Validation) as ei:
        client.write(b, b"short")
    assert "5 bytes" in ei.value.message
    assert not ei.value.is_refusal


def test_empty_reads_zeros_and_slices(client):
    b = client.empty(64)
    assert b.read() == bytes(64)
    client.write(b[8:16], b"ABCDEFGH")
    assert b.read()[8:16] == b"ABCDEFGH"
    s = b.slice(4, 50)
    assert len(s) == 10
    assert s.read() == bytes(4) + b"ABCDEF"


def test_zero_bytes(client):
    b = client.create(b"")
    assert b.read() == b""


def test_large_roundtrip(client):
    a = np.random.default_rng(1).integers(0, 255, 48 << 20, dtype=np.uint8)
    b = client.create(a)
    assert np.array_equal(b.to_numpy(), a)


def test_freed_buffer_is_not_found(client):
    b = client.create(b"x" * 16)
    b.free()
    b.free()                # idempotent
    fresh = cube.Buffer(client, b._h, owner=b)      # the same handle, kept
    with pytest.raises(cube.ServerError.Io) as ei:
        fresh.read()
    assert isinstance(ei.value.source, cube.IoError.NotFound)
    assert "never created" in ei.value.source.reason or "freed" in ei.value.source.reason


def test_buffer_too_big(client):
    b = client.empty(client.properties.memory_bytes * 2)
    with pytest.raises(cube.ServerError.Several) as ei:
        client.sync([b])
    root = ei.value.errors[0].root
    assert isinstance(root, cube.ServerError.Io)
    assert isinstance(root.source, cube.IoError.BufferTooBig)
    assert root.source.size == client.properties.memory_bytes * 2
    assert not root.source.may_succeed_after_reclaim


def test_tensor_strided_copies(client):
    a = np.arange(3 * 5, dtype=np.float32).reshape(3, 5)
    t = client.empty_tensor(a.shape, a.dtype)
    assert t.shape == (3, 5) and t.strides[-1] == 1
    t.write(a)
    assert np.array_equal(t.read(), a)


def test_tensors_share_one_allocation_by_the_layout_policy(client):
    a = np.arange(3 * 5, dtype=np.float32).reshape(3, 5)
    b = np.arange(4 * 3, dtype=np.int16).reshape(4, 3)
    ts = client.create_tensors([a, b], [cube.LayoutStrategy.OPTIMIZED,
                                        cube.LayoutStrategy.CONTIGUOUS])
    align = client.properties.alignment
    assert ts[0].strides == (8, 1)              # 20-byte rows on a 32-byte pitch
    assert ts[1].strides == (3, 1)              # packed
    h0, h1 = ts[0].buffer.handle, ts[1].buffer.handle
    assert h0["memory"] == h1["memory"]
    assert h1["offset_start"] == -(-96 // align) * align
    assert h0["size"] == h1["size"] == h1["offset_start"] + -(-24 // align) * align
    size, layouts = client.layout_apply([(a.shape, a.dtype), (b.shape, b.dtype,
                                                              cube.LayoutStrategy.CONTIGUOUS)])
    assert size == h0["size"] and layouts[1] == (h1["offset_start"], (3, 1))
    assert np.array_equal(ts[0].read(), a) and np.array_equal(ts[1].read(), b)
    with pytest.raises(cube.ServerError.Validation):
        client.empty_tensors([((1 << 32,), np.float32)])
    with pytest.raises(cube.ServerError.Validation):
        client.empty_tensors([])


def test_region_zero_copy_visible_to_a_kernel(client):
    n = 1 << 16
    k = client.kernel("KERNEL void dbl(float *x, INFO) { uint64_t i = ABSOLUTE_POS;"
                      " if (i < BUFFER_LEN(0)) x[i] *= 2; }", "dbl")
    with client.region(n * 4) as r:
        view = r.numpy(np.float32, (n,))
        view[:] = np.arange(n, dtype=np.float32)     # straight into the shared memory
        r.view[0:4] = np.float32(-3).tobytes()        # and through the memoryview
        buf = client.empty(n * 4)
        r.write_to(buf)
        client.sync()
        k.launch((n + 255) // 256, 256, [buf], lengths=[n])
        r.read_from(buf)                              # lands in the same memory
        expect = np.arange(n, dtype=np.float32) * 2
        expect[0] = -6
        assert np.array_equal(view, expect)
        assert r.view.readonly is False and len(r.view) == n * 4
    # the array outlives the region object: the mapping stays until it goes
    assert view[1] == 2.0
    del view


def test_region_gone_with_its_views(client):
    r = client.region(4096)
    a = r.numpy(np.uint8)
    del r
    a[:] = 7
    assert int(a.sum()) == 7 * 4096
    del a


def test_export_import_read_only(daemon, client):
    src = client.create(np.arange(16, dtype=np.float32))
    token = src.export()
    assert isinstance(token, str) and len(token) == 32
    with cube.Client(daemon.socket, name="importer") as other:
        imp = other.import_buffer(token, read_only=True)
        assert imp.read_only
        assert np.array_equal(imp.to_numpy(np.float32), np.arange(16, dtype=np.float32))
        # refused at the call, and the import reads as ever
        with pytest.raises(cube.CubeError):
            other.write(imp, np.zeros(16, np.float32))
        other.sync([imp])
        assert np.array_equal(imp.to_numpy(np.float32), np.arange(16, dtype=np.float32))
    # the owner never sees the importer's refused write
    assert np.array_equal(src.to_numpy(), np.arange(16, dtype=np.float32))


def test_reports_and_admin_views(client):
    s = client.stream()
    b = s.create(np.zeros(1000, np.uint8))
    s.sync()
    rep = s.memory_report()
    assert isinstance(rep, cube.MemoryReport) and rep.stream == s.id
    assert sum(p.bytes_in_use for p in rep.pools) >= 1000
    assert all(isinstance(p, cube.PoolReport) for p in rep.pools)
    assert s.id in client.stream_ids()
    assert client.memory_report(12345) is None
    st = client.status()
    assert isinstance(st, cube.Status) and st.backend == "cpu" and not st.poisoned
    assert isinstance(st.properties, cube.DeviceProperties)
    me = [x for x in client.sessions() if x.id == client.session]
    assert me and me[0].name == "pytest" and isinstance(me[0], cube.SessionInfo)
    assert any(x.stream == s.id for x in client.streams())
    assert any(r.session == client.session for r in client.daemon_memory())
    assert "cube" in client.metrics()
    assert isinstance(client.limits, cube.ProtocolLimits)
    client.set_allocation_mode(cube.AllocationMode.PERSISTENT, stream=s)
    client.set_allocation_mode(cube.AllocationMode.AUTO, stream=s)
    client.memory_cleanup(stream=s)
    client.flush()
    b.free()


def test_shares_view_and_lowering(daemon):
    with cube.Client(daemon.socket, name="sharer") as c:
        me = [x for x in c.shares() if x.session == c.session]
        assert me and isinstance(me[0], cube.ShareInfo)
        assert me[0].class_name == "normal" and me[0].weight == 1
        assert any(x.session == 0 and x.tenant == me[0].tenant for x in c.shares())
        with pytest.raises(cube.ServerError.Validation):
            c.lower_share("latency")
        c.lower_share("batch")
        me = [x for x in c.shares() if x.session == c.session]
        assert me[0].class_name == "batch"

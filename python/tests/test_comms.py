"""Collectives between two daemons through the binding, each result against
numpy: all_reduce (Sum and Mean, both ComputeWaits), broadcast, send/recv on a
pair's group and within a group, a minted group id; a daemon started without a
transport raising NoDeviceTransport with its operation."""
import threading

import numpy as np
import pytest

import cubeclient as cube

DEVICES = ["cpu0", "cpu1"]


@pytest.fixture
def pair(daemon_group):
    ds = daemon_group(2)
    cs = [cube.Client(d.socket, name=f"pytest-comms{i}") for i, d in enumerate(ds)]
    yield cs
    for c in cs:
        c.close()


def member_data(r, n=1000, dtype=np.float32):
    return (np.arange(n) % 7 + 2 * r + 1).astype(dtype)


@pytest.mark.parametrize("wait", [cube.ComputeWait.NOW, cube.ComputeWait.AT_SYNC])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_all_reduce_sum_and_mean(pair, wait, dtype):
    groups = cube.comm_init_all(pair, DEVICES)
    data = [member_data(r, dtype=dtype) for r in range(2)]
    for op, want in ((cube.Reduction.SUM, data[0] + data[1]),
                     (cube.Reduction.MEAN, (data[0] + data[1]) // 2
                      if np.issubdtype(dtype, np.integer) else (data[0] + data[1]) / 2)):
        src = [c.create(d) for c, d in zip(pair, data)]
        dst = [c.empty(d.nbytes) for c, d in zip(pair, data)]
        for g, s, t in zip(groups, src, dst):
            g.all_reduce(s, t, op, wait=wait)
        for c, t in zip(pair, dst):
            if wait == cube.ComputeWait.AT_SYNC:
                c.sync_collective()
            np.testing.assert_allclose(t.to_numpy(dtype), want.astype(dtype), rtol=1e-6)


def test_all_reduce_dtype_explicit_and_inferred(pair):
    groups = cube.comm_init_all(pair, DEVICES)
    src = [c.create(member_data(r, dtype=np.uint32).tobytes()) for r, c in enumerate(pair)]
    dst = [c.empty(4000) for c in pair]
    with pytest.raises(TypeError, match="element type"):
        groups[0].all_reduce(src[0], dst[0])       # bytes: no dtype to infer
    for g, s, t in zip(groups, src, dst):
        g.all_reduce(s, t, cube.Reduction.SUM, dtype=cube.ElemType.U32)
    want = member_data(0, dtype=np.uint32) + member_data(1, dtype=np.uint32)
    for t in dst:
        np.testing.assert_array_equal(t.to_numpy(np.uint32), want)


def test_group_by_thread_per_client_and_context_manager(pair):
    """comm_init blocks until both have joined: one thread per client, as a
    process holding a client per device does; leaving the group's block
    waits for its AT_SYNC collectives."""
    groups = [None, None]

    def join(r):
        groups[r] = pair[r].comm_init(list(reversed(DEVICES)))    # any order: one group
    ts = [threading.Thread(target=join, args=(r,)) for r in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert all(isinstance(g, cube.Group) for g in groups)
    data = [member_data(r, 4096) for r in range(2)]
    dst = [c.empty(d.nbytes) for c, d in zip(pair, data)]
    with groups[0], groups[1]:                  # both queued before either waits
        for g, c, d, t in zip(groups, pair, data, dst):
            # The source is kept by the binding alone until the sync.
            g.all_reduce(c.create(d), t, cube.Reduction.SUM, wait=cube.ComputeWait.AT_SYNC)
        assert len(pair[0]._collective_keep) == 2
    for c in pair:
        assert c._collective_keep == []        # given back after the sync
    for t in dst:
        np.testing.assert_array_equal(t.to_numpy(np.float32), data[0] + data[1])
    infos = pair[0].comms()
    assert any(i.state == "ready" and set(i.members) >= set(DEVICES) for i in infos), infos


def test_broadcast(pair):
    groups = cube.comm_init_all(pair, DEVICES)
    want = (7 * np.arange(64) + 3).astype(np.uint32)
    src = pair[1].create(want)
    dst = [c.empty(want.nbytes) for c in pair]
    groups[0].broadcast(None, dst[0], "cpu1")
    groups[1].broadcast(src, dst[1], 1)          # the root by rank
    for t in dst:
        np.testing.assert_array_equal(t.to_numpy(np.uint32), want)


def test_send_recv_pair_and_group(pair):
    want = (np.arange(64, dtype=np.uint32) ** 2)
    src = pair[0].create(want)
    dst = pair[1].empty(want.nbytes)
    pair[0].send(src, "cpu1")                   # the pair's own group, joined on first use
    pair[1].recv(dst, "cpu0")
    np.testing.assert_array_equal(dst.to_numpy(np.uint32), want)

    groups = cube.comm_init_all(pair, DEVICES)
    back = pair[0].empty(want.nbytes)
    groups[1].send(dst, 0, wait=cube.ComputeWait.AT_SYNC)
    groups[0].recv(back, "cpu1", wait=cube.ComputeWait.AT_SYNC)
    for c in pair:
        c.sync_collective()
    np.testing.assert_array_equal(back.to_numpy(np.uint32), want)


def test_minted_group_all_gather(pair):
    gid = pair[0].comm_mint()
    assert isinstance(gid, str) and gid
    groups = [None, None]
    ts = [threading.Thread(target=lambda r=r: groups.__setitem__(
        r, pair[r].comm_init_id(gid, r, 2))) for r in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert [g.rank for g in groups] == [0, 1]
    chunks = [(np.arange(64) + 1000 * r).astype(np.uint32) for r in range(2)]
    dst = [c.empty(2 * 64 * 4) for c in pair]
    for g, c, ch, t in zip(groups, pair, chunks, dst):
        g.all_gather(c.create(ch), t)
    for t in dst:
        np.testing.assert_array_equal(t.to_numpy(np.uint32), np.concatenate(chunks))


def test_no_transport_raises_its_class(daemon_group):
    (d,) = daemon_group(1, "--transport", "none")
    with cube.Client(d.socket, name="pytest-notransport") as c:
        with pytest.raises(cube.ServerError.NoDeviceTransport) as ei:
            c.comm_init(DEVICES)
        assert ei.value.operation is cube.Collective.COMM_INIT
        assert ei.value.variant == "NoDeviceTransport"
        h = c.empty(64)
        g = cube.Group(c, devices=DEVICES)
        with pytest.raises(cube.ServerError.NoDeviceTransport) as ei:
            g.all_reduce(h, h, cube.Reduction.SUM, dtype=cube.ElemType.F32)
        assert ei.value.operation is cube.Collective.ALL_REDUCE
        with pytest.raises(cube.NoDeviceTransport) as ei:
            c.sync_collective()
        assert ei.value.operation is cube.Collective.SYNC_COLLECTIVE
        assert c.can_access_peer("cpu1") is False
        with pytest.raises(cube.NoDeviceTransport) as ei:
            c.peer_address(h)
        assert ei.value.operation is cube.Collective.PEER_ACCESS

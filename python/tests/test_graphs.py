"""Profiling windows and graph capture through the binding: a profiled
launch's report, the errors a window can end with, a captured graph replayed
N times against numpy, and the daemon's list of windows and graphs."""
import numpy as np
import pytest

import cubeclient as cube

# acc[i] += step[i]: N replays of one recorded launch add N steps.
ACCUMULATE = """
KERNEL void accumulate(const float *step, float *acc, INFO)
{
        uint64_t i = ABSOLUTE_POS;

        if (i < BUFFER_LEN(1))
                acc[i] = acc[i] + step[i];
}
"""

N = 4096


def accumulate(c):
    k = c.kernel(ACCUMULATE, "accumulate")
    step = np.random.default_rng(5).integers(-8, 8, N).astype(np.float32)
    acc0 = np.arange(N, dtype=np.float32)
    bufs = [c.create(step), c.create(acc0)]
    return k.prepare((N + 63) // 64, 64, bufs), step, acc0, bufs


def test_profiled_launch_report(client):
    go, step, acc0, bufs = accumulate(client)
    go()
    client.sync()                               # compiled outside the window
    with client.profile() as w:
        for _ in range(3):
            go()
    r = w.report
    assert isinstance(r, cube.ProfileReport)
    assert r.timed >= 3 and r.device_ns > 0, r
    assert r.seconds == r.device_ns / 1e9
    np.testing.assert_array_equal(bufs[1].to_numpy(), acc0 + 4 * step)
    # at_launch: the write queued before the launch is not in the window.
    s = client.stream()
    with s.profile(at_launch=True) as w2:
        s.write(bufs[1], acc0)
        s.launch(go)
    assert w2.report.timed >= 1 and w2.report.device_ns > 0
    np.testing.assert_array_equal(s.to_numpy(bufs[1]), acc0 + step)


def test_profile_errors_and_abandon(client):
    w = client.profile()
    with pytest.raises(cube.ProfileError.NotMeasured):
        w.end()                                 # nothing timed ran in it
    with pytest.raises(ValueError):
        w.end()
    w = client.profile()
    token = w.token
    listed = [i for i in client.captures() if i.kind == "window" and i.id == token]
    assert listed and listed[0].session == client.session, client.captures()
    w.abandon()
    assert not [i for i in client.captures() if i.kind == "window" and i.id == token]
    with pytest.raises(RuntimeError):
        with client.profile():
            raise RuntimeError("the block's own error")


def test_captured_graph_replayed_n_times(client):
    go, step, acc0, bufs = accumulate(client)
    s = client.stream()
    s.graph_prepare()
    s.launch(go)                                # the warm-up runs
    with s.capture() as cap:
        s.launch(go)                            # recorded, not run
        with pytest.raises(cube.ServerError.Generic, match="recording a graph capture"):
            s.sync()
    g = cap.graph
    assert isinstance(g, cube.Graph)
    np.testing.assert_array_equal(s.to_numpy(bufs[1]), acc0 + step)
    g.replay()
    g.replay(9)
    np.testing.assert_array_equal(s.to_numpy(bufs[1]), acc0 + 11 * step)
    info = [i for i in client.captures() if i.kind == "graph" and i.id == g.id]
    assert info and info[0].launches == 1 and info[0].replays == 10, client.captures()
    assert info[0].state == "kept", info          # the CPU device keeps it
    with g:
        g.replay(5)
    np.testing.assert_array_equal(s.to_numpy(bufs[1]), acc0 + 16 * step)
    s.sync()
    assert not [i for i in client.captures() if i.kind == "graph" and i.id == g.id]
    with pytest.raises(ValueError):
        g.replay(0)


def test_doomed_capture_raises_on_leaving(client):
    go, step, acc0, bufs = accumulate(client)
    s = client.stream()
    s.graph_prepare()
    s.launch(go)
    with pytest.raises(cube.CubeError):
        with s.capture() as cap:
            s.write(bufs[1], acc0)              # a write cannot be recorded
    assert cap.graph is None
    s.sync()                                    # the stream is out of the capture

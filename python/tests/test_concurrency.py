"""Streams from threads and coroutines, the GIL, fork, and cleanup."""
import asyncio
import gc
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import cubeclient as cube

INC = ("KERNEL void inc(float *x, INFO) { uint64_t i = ABSOLUTE_POS;"
       " if (i < BUFFER_LEN(0)) x[i] += 1; }")
SPIN = """
KERNEL void spin(uint64_t *x, INFO)
{
        volatile uint64_t acc = 0;
        for (uint64_t i = 0; i < SCALAR(uint64_t, 0, 0); i++)
                acc += i;
        x[0] = acc;
}
"""


def wait_for(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def test_threads_each_on_their_own_stream(client):
    k = client.kernel(INC, "inc")
    n, rounds, threads = 1024, 50, 6
    streams = [client.stream() for _ in range(threads)]
    results, errors = {}, []

    def work(i):
        try:
            s = streams[i]
            x = s.create(np.full(n, i, np.float32))
            go = k.prepare((n + 255) // 256, 256, [x])
            for _ in range(rounds):
                go(stream=s)
            results[i] = (s.to_numpy(x), s.memory_report())
        except Exception as e:      # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors
    for i, (got, rep) in enumerate(results.values()):
        pass
    for i in range(threads):
        got, rep = results[i]
        assert np.array_equal(got, np.full(n, i + rounds, np.float32))
        assert rep is not None and rep.stream == streams[i].id
    ids = set(client.stream_ids())
    assert {s.id for s in streams} <= ids


def test_stream_used_from_another_thread_keeps_order(client):
    k = client.kernel(INC, "inc")
    s = client.stream()
    x = s.create(np.zeros(16, np.float32))
    t = threading.Thread(target=lambda: [s.launch(k, 1, 16, [x]) for _ in range(10)])
    t.start()
    t.join()
    # this thread, same stream: sees all ten, in order
    assert np.array_equal(s.to_numpy(x), np.full(16, 10, np.float32))
    # and the calling thread's own stream stays its own
    assert client.memory_report() is None or client.memory_report().stream != s.id


def test_asyncio_coroutines_each_on_their_own_stream(client):
    k = client.kernel(INC, "inc")

    async def task(i):
        s = client.stream()
        with s:                     # this task's calls name s, even across awaits
            x = client.create(np.full(64, i, np.float32))
            for _ in range(5):
                k.launch(1, 64, [x])
                await asyncio.sleep(0)
            got = await s.to_numpy_async(x)
            rep = await client.run(client.memory_report)    # in a worker thread, same context
        return s, got, rep

    async def main():
        return await asyncio.gather(*(task(i) for i in range(8)))

    out = asyncio.run(main())
    assert len({s.id for s, _, _ in out}) == 8
    for i, (s, got, rep) in enumerate(out):
        assert np.array_equal(got, np.full(64, i + 5, np.float32))
        assert rep.stream == s.id


def test_gil_released_while_waiting(client):
    k = client.kernel(SPIN, "spin")
    x = client.create(np.zeros(1, np.uint64))
    iters = 200_000_000
    ticks = [0]
    done = threading.Event()

    def waiter():
        s = client.stream()
        k.launch(1, 1, [x], scalars=[cube.u64(iters)], stream=s)
        s.sync([x])
        done.set()

    t = threading.Thread(target=waiter)
    start = time.monotonic()
    t.start()
    while not done.is_set():
        ticks[0] += 1
    t.join()
    elapsed = time.monotonic() - start
    assert elapsed > 0.05, "the kernel should take a while"
    # the main thread kept running Python while the other waited on the daemon
    assert ticks[0] > 10_000, ticks


def test_fork_child_does_not_touch_the_parents_connection(daemon, client):
    b = client.create(np.arange(8, dtype=np.int64))
    k = client.kernel(INC, "inc")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:    # the child
        code = 1
        try:
            os.close(r)
            try:
                b.read()
            except cube.ForkedClient:
                pass
            else:
                raise AssertionError("the parent's client worked in the child")
            with cube.Client(daemon.socket, name="child") as mine:
                got = mine.create(b"from the child").read()
                assert got == b"from the child"
            del b       # its finalizer must send nothing on the parent's socket
            gc.collect()
            code = 0
        except BaseException as e:
            os.write(w, repr(e).encode())
        finally:
            os._exit(code)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    msg = os.read(r, 4096)
    os.close(r)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, msg
    # the parent's connection is intact
    assert np.array_equal(b.to_numpy(), np.arange(8, dtype=np.int64))
    x = client.create(np.zeros(4, np.float32))
    k.launch(1, 4, [x])
    assert x.to_numpy().tolist() == [1, 1, 1, 1]
    assert any(s.id == client.session and s.connected for s in client.sessions())


def test_fork_with_a_normal_exit(daemon, client):
    import ctypes
    k = client.kernel(INC, "inc")
    x = client.create(np.zeros(4, np.float32))
    k.launch(1, 4, [x])         # a batch may be pending when the child is made
    pid = os.fork()
    if pid == 0:
        # exit(3) runs the library's exit-time flush of pending launches: in a
        # child it must not send the parent's batch (sys.exit here would also
        # tear down this pytest session, daemon fixture included)
        gc.collect()
        ctypes.CDLL(None).exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert x.to_numpy().tolist() == [1, 1, 1, 1]        # one launch, not two


def session_gone(observer, sid):
    return not any(s.id == sid for s in observer.sessions())


def test_garbage_collected_client_leaves_nothing(daemon):
    with cube.Client(daemon.socket, name="observer") as obs:
        base = obs.status().memory_in_use
        c = cube.Client(daemon.socket, name="gc")
        sid = c.session
        bufs = [c.create(np.zeros(1 << 20, np.uint8)) for _ in range(4)]
        r = c.region(1 << 20)
        c.sync()
        assert obs.status().memory_in_use >= base + (4 << 20)
        del c, bufs, r
        gc.collect()
        assert wait_for(lambda: session_gone(obs, sid))
        assert wait_for(lambda: obs.status().memory_in_use == base)


def test_buffers_freed_on_gc(client):
    base = client.status().memory_in_use
    b = client.create(np.zeros(1 << 20, np.uint8))
    client.sync()
    assert client.status().memory_in_use >= base + (1 << 20)
    del b
    gc.collect()
    client.sync()
    assert wait_for(lambda: client.status().memory_in_use == base)


def test_killed_process_leaves_nothing(daemon):
    code = f"""
import sys, time, numpy as np, cubeclient as cube
c = cube.Client({daemon.socket!r}, name="victim")
bufs = [c.create(np.zeros(1 << 20, np.uint8)) for _ in range(8)]
c.sync()
print(c.session, flush=True)
time.sleep(60)
"""
    with cube.Client(daemon.socket, name="observer") as obs:
        base = obs.status().memory_in_use
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
        sid = int(p.stdout.readline())
        assert obs.status().memory_in_use >= base + (8 << 20)
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stdout.close()
        assert wait_for(lambda: session_gone(obs, sid))
        assert wait_for(lambda: obs.status().memory_in_use == base)


def test_closed_client(daemon):
    c = cube.Client(daemon.socket)
    b = c.create(b"x")
    c.close()
    c.close()
    with pytest.raises(cube.ClientClosed):
        b.read()
    del b       # freeing after close sends nothing and does not crash
    gc.collect()

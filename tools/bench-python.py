#!/usr/bin/env python3
"""bench-python.py - the Python binding beside the C library, in cube-bench's table.

    build/python-venv/bin/python tools/bench-python.py --socket PATH [--runs N] [--smoke]

Each figure runs the same work twice in one process on one connection: once
from Python through cubeclient, once from C through the same libcubeclient
(a loop compiled into the binding's extension, pycube_c_*), in rounds: each
round runs both sides back to back, alternating which goes first, after one
warm-up round. A row gives the median rate of each side and the median of
the per-round ratios (Python / C of the same round, so that load which moves
both sides cancels), and a second line the spread of those ratios (min,
quartiles, max). N rounds (--runs, 7 by default) of the launches, 4N+3 of
the round trip, whose ratio is the noisier:

  empty launches: 10,000 launches of an empty one-unit kernel then one sync;
    Python calls a prepared Launch (kernel.prepare(...)) in a for loop, C
    calls cube_launch_kernel in a for loop. A second row (no target) times
    kernel.launch(...) with its arguments, building the launch each time.
  64 MiB round trip: cube_write + cube_sync + cube_read of one 64 MiB buffer
    from and into numpy arrays (Python: client.write, client.sync,
    buf.read_into), in bytes moved (2 x 64 MiB) per second. A last row (no
    target) gives what the binding adds to each round trip: the same calls
    on 4 KiB, alternating call by call, the median Python round trip minus
    the median C one.
"""
import argparse
import statistics
import sys
import time

import numpy as np

import cubeclient as cube
from cubeclient import _ffi as ffi, _lib as lib

NOP = "KERNEL void nop(float *x, INFO) { }"


def row(figure, a, b, ratio, target, met):
    print(f"| {figure} | {a} | {b} | {ratio:.2f}x | {target} | {'met' if met else 'NOT met'} |",
          flush=True)


def quartiles(v):
    v = sorted(v)
    q = statistics.quantiles(v, n=4) if len(v) > 1 else v * 3
    return v[0], q[0], q[1], q[2], v[-1]


def spread(figure, ratios):
    lo, q1, med, q3, hi = quartiles(ratios)
    print(f"|  spread of {figure}: {len(ratios)} paired rounds, ratio min {lo:.2f}x, "
          f"quartiles {q1:.2f}x / {med:.2f}x / {q3:.2f}x, max {hi:.2f}x | | | | | |", flush=True)
    return med


def check(e):
    if e != ffi.NULL:
        raise cube.errors.take(e)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    launches = 100 if args.smoke else 10_000
    size = (1 << 20) if args.smoke else (64 << 20)
    runs = 1 if args.smoke else args.runs
    ok = True

    with cube.Client(args.socket, name="bench.py") as c:
        k = c.kernel(NOP, "nop")
        x = c.empty(64)
        go = k.prepare(1, 1, [x], lengths=[])
        go()
        c.sync()                        # compiled before anything is timed

        def python_prepared():
            t = time.perf_counter()
            for _ in range(launches):
                go()
            c.sync()
            py.append(time.perf_counter() - t)

        def c_loop():
            t = time.perf_counter()
            check(lib.pycube_c_launches(c._cp(), 0, go._l, launches))
            cc.append(time.perf_counter() - t)

        def python_full():
            t = time.perf_counter()
            for _ in range(launches):
                k.launch(1, 1, [x], lengths=[])
            c.sync()
            full.append(time.perf_counter() - t)

        py, cc, full = [], [], []
        for i in range(runs + 1):       # the first round warms up; the order alternates
            order = (python_prepared, c_loop) if i % 2 else (c_loop, python_prepared)
            for side in order + (python_full,):
                side()
        p = launches / statistics.median(py[1:])
        q = launches / statistics.median(cc[1:])
        f = launches / statistics.median(full[1:])
        ratio = statistics.median(t_c / t_p for t_p, t_c in zip(py[1:], cc[1:]))
        met = ratio >= 0.8
        ok &= met
        figure = f"Python: {launches} empty launches + sync, prepared Launch"
        row(figure, f"{p:.0f} launches/s", f"C, same connection: {q:.0f} launches/s", ratio,
            ">= 0.8x", met)
        spread("the prepared launches", [t_c / t_p for t_p, t_c in zip(py[1:], cc[1:])])
        print(f"| Python: {launches} empty launches + sync, kernel.launch(...) each time | "
              f"{f:.0f} launches/s | C, same connection: {q:.0f} launches/s | "
              f"{statistics.median(t_c / t_f for t_f, t_c in zip(full[1:], cc[1:])):.2f}x | "
              f"(none) | - |", flush=True)

        src = np.random.default_rng(1).integers(0, 255, size, dtype=np.uint8)
        dst = np.empty_like(src)
        b = c.empty(size)
        c.write(b, src)
        c.sync([b])
        def python_side():
            t = time.perf_counter()
            c.write(b, src)
            c.sync([b])
            b.read_into(dst)
            py.append(time.perf_counter() - t)

        def c_side():
            t = time.perf_counter()
            check(lib.pycube_c_roundtrip(c._cp(), 0, b._h, ffi.from_buffer(src),
                                         ffi.from_buffer(dst, require_writable=True), size))
            cc.append(time.perf_counter() - t)

        py, cc = [], []
        rounds = 1 if args.smoke else 4 * args.runs + 3
        for i in range(rounds + 1):     # alternating which goes first
            for side in ((python_side, c_side) if i % 2 else (c_side, python_side)):
                side()
        assert np.array_equal(src, dst)
        gp = 2 * size / statistics.median(py[1:]) / 1e9
        gc = 2 * size / statistics.median(cc[1:]) / 1e9
        ratios = [t_c / t_p for t_p, t_c in zip(py[1:], cc[1:])]
        ratio = statistics.median(ratios)
        met = ratio >= 0.95
        ok &= met
        mib = size >> 20
        row(f"Python: {mib} MiB round trip (write + sync + read), numpy arrays",
            f"{gp:.2f} GB/s", f"C, same connection: {gc:.2f} GB/s", ratio, ">= 0.95x", met)
        spread("the round trip", ratios)

        # What the binding itself adds to one round trip: the same calls on
        # 4 KiB, where the copy is nothing, the two sides alternating call by
        # call; the median Python round trip minus the median C one.
        small, reps = 4096, (20 if args.smoke else 5000)
        s_src, s_dst = src[:small].copy(), np.empty(small, np.uint8)
        sb = c.empty(small)
        ps, pc = ffi.from_buffer(s_src), ffi.from_buffer(s_dst, require_writable=True)
        tp, tc = [], []
        clock = time.perf_counter
        for i in range(reps):
            t0 = clock()
            c.write(sb, s_src)
            c.sync([sb])
            sb.read_into(s_dst)
            t1 = clock()
            check(lib.pycube_c_roundtrip(c._cp(), 0, sb._h, ps, pc, small))
            t2 = clock()
            tp.append(t1 - t0)
            tc.append(t2 - t1)
        mp, mc = statistics.median(tp) * 1e6, statistics.median(tc) * 1e6
        print(f"| Python's own cost per round trip (4 KiB, Python minus C, medians of {reps} "
              f"alternating calls) | {mp - mc:.1f} us | C: {mc:.1f} us per round trip | | "
              "(none) | - |", flush=True)
    return 0 if ok or args.smoke else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""share_weights.py - one process owns a weight buffer, another uses it.

    python share_weights.py /tmp/cube.sock

The owner uploads a matrix of weights and exports it; a second process (a
child started with the token) imports it read-only, runs y = W x on it with
a kernel, checks y against numpy, and shows that a launch which would write
the weights is refused (and only the importer sees that). The weights are
never copied: both sessions use the same device memory.
"""
import subprocess
import sys

import numpy as np

import cubeclient as cube

ROWS, COLS = 512, 256

MATVEC = """
KERNEL void matvec(const float *w, const float *x, float *y, INFO)
{
        uint32_t rows = SCALAR(uint32_t, 0, 0), cols = SCALAR(uint32_t, 0, 1);
        uint64_t r = ABSOLUTE_POS;
        float acc = 0;

        if (r >= rows)
                return;
        for (uint32_t k = 0; k < cols; k++)
                acc += w[r * cols + k] * x[k];
        y[r] = acc;
}
"""

SCRIBBLE = "KERNEL void scribble(float *w, INFO) { w[0] = 0; }"


def weights():
    return np.random.default_rng(42).standard_normal((ROWS, COLS)).astype(np.float32)


def consumer(socket, token):
    x = np.random.default_rng(7).standard_normal(COLS).astype(np.float32)
    with cube.Client(socket, name="share_weights consumer") as c:
        w = c.import_buffer(token, read_only=True)
        xb, yb = c.create(x), c.empty(ROWS * 4)
        c.kernel(MATVEC, "matvec").launch((ROWS + 127) // 128, 128, [w, xb, yb],
                                          scalars=[cube.u32(ROWS), cube.u32(COLS)], lengths=[])
        y = yb.to_numpy(np.float32)
        ok = np.allclose(y, weights() @ x, rtol=1e-4, atol=1e-4)
        print(f"consumer: y = W x over the imported weights: {'matches numpy' if ok else 'MISMATCH'}")
        # A launch that would write read-only weights is refused.
        c.kernel(SCRIBBLE, "scribble").launch(1, 1, [w])
        try:
            c.sync([w])
            print("consumer: a write of the read-only import went through: WRONG")
            ok = False
        except cube.CubeError as e:
            print(f"consumer: writing the import is refused: {type(e).__qualname__}")
    return 0 if ok else 1


def owner(socket):
    with cube.Client(socket, name="share_weights owner") as c:
        w = c.create(weights())
        token = w.export()
        print(f"owner: {ROWS}x{COLS} weights exported")
        rc = subprocess.run([sys.executable, __file__, socket or "", "--consume", token]).returncode
        same = np.array_equal(w.to_numpy(), weights())
        print(f"owner: the weights are {'untouched' if same else 'CHANGED'}")
        return rc or (0 if same else 1)


if __name__ == "__main__":
    sock = (sys.argv[1] or None) if len(sys.argv) > 1 else None
    if len(sys.argv) > 3 and sys.argv[2] == "--consume":
        sys.exit(consumer(sock, sys.argv[3]))
    sys.exit(owner(sock))

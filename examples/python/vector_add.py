#!/usr/bin/env python3
"""vector_add.py - out = a + b over n floats on the device, checked against numpy.

    cubed --socket /tmp/cube.sock &
    python vector_add.py /tmp/cube.sock [N]
"""
import sys

import numpy as np

import cubeclient as cube

SOURCE = """
KERNEL void vector_add(const float *a, const float *b, float *out, INFO)
{
        uint64_t i = ABSOLUTE_POS;

        if (i < BUFFER_LEN(2))
                out[i] = a[i] + b[i];
}
"""


def main():
    socket = sys.argv[1] if len(sys.argv) > 1 else None
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_003
    rng = np.random.default_rng()
    a = rng.uniform(-1, 1, n).astype(np.float32)
    b = rng.uniform(-1, 1, n).astype(np.float32)

    with cube.Client(socket, name="vector_add.py") as c:
        kernel = c.kernel(SOURCE, "vector_add")
        bufs = [c.create(a), c.create(b), c.create(np.full(n, np.nan, np.float32))]
        cubes = (n + 255) // 256
        # BUFFER_LEN(i) comes from each buffer's length in elements; the cubes
        # spill into y past 65535.
        kernel.launch((min(cubes, 65535), (cubes + 65534) // 65535), 256, bufs)
        out = bufs[2].to_numpy()        # a failed launch raises here

    wrong = np.count_nonzero(out != a + b)
    print(f"vector_add.py: {n} elements: {'MISMATCH' if wrong else 'all match'}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())

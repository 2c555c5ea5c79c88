"""examples/python: each runs against the daemon and checks itself against numpy."""
import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python")


@pytest.mark.parametrize("script,expect", [
    ("vector_add.py", "all match"),
    ("share_weights.py", "matches numpy"),
])
def test_example(daemon, script, expect):
    p = subprocess.run([sys.executable, os.path.join(EXAMPLES, script), daemon.socket],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert expect in p.stdout

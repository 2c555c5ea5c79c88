"""The real cubed, started the way tests/harness.c starts it: from the build
directory ($CUBED_BIN, else $CUBE_BUILD_DIR/daemon/cubed, else build/), on a
socket in a temporary directory, with a kernel cache of its own, and ready once
it sends READY=1 to the NOTIFY_SOCKET this fixture binds. SIGTERM must end it
with status 0."""
import os
import signal
import socket
import subprocess
import tempfile
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cubed_bin():
    if os.environ.get("CUBED_BIN"):
        return os.environ["CUBED_BIN"]
    build = os.environ.get("CUBE_BUILD_DIR", os.path.join(ROOT, "build"))
    return os.path.join(build, "daemon", "cubed")


def timeout_mult():
    try:
        return max(1, int(os.environ.get("CUBE_TEST_TIMEOUT_MULT", "1")))
    except ValueError:
        return 1


class Daemon:
    def __init__(self, *args, socket_path=None):
        self.dir = tempfile.mkdtemp(prefix="cube-pytest-")
        self.socket = socket_path or os.path.join(self.dir, "s")
        self.log = os.path.join(self.dir, "log")
        notify = os.path.join(self.dir, "notify")
        ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        ns.bind(notify)
        env = dict(os.environ, NOTIFY_SOCKET=notify)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [cubed_bin(), "--socket", self.socket, "--log-level", "info",
                 "--cache-dir", os.path.join(self.dir, "cache"), *args],
                stdout=log, stderr=log, env=env)
        deadline = time.monotonic() + 10 * timeout_mult()
        try:
            while True:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.proc.kill()
                    raise RuntimeError("cubed did not become ready:\n" + self.log_text())
                ns.settimeout(0.1)
                try:
                    msg, fds, _, _ = socket.recv_fds(ns, 4096, 8)
                except socket.timeout:
                    continue
                for fd in fds:
                    os.close(fd)
                if b"READY=1" in msg:
                    break
        finally:
            ns.close()

    def log_text(self):
        try:
            return open(self.log, errors="replace").read()
        except OSError:
            return ""

    def stop(self):
        """SIGTERM; the exit status (0 expected)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15 * timeout_mult())
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def cleanup(self):
        if not os.environ.get("CUBE_TEST_LEAVE"):
            subprocess.run(["rm", "-rf", self.dir])


@pytest.fixture(scope="session")
def daemon():
    """One daemon for the suite, fault injection enabled."""
    d = Daemon("--enable-fault-injection")
    yield d
    rc = d.stop()
    log = d.log_text()
    d.cleanup()
    assert rc == 0, "cubed did not stop cleanly:\n" + log


@pytest.fixture
def fresh_daemon():
    """A daemon of this test's own (for faults that change the whole device)."""
    made = []

    def start(*args):
        d = Daemon("--enable-fault-injection", *args)
        made.append(d)
        return d
    yield start
    for d in made:
        d.stop()
        d.cleanup()


@pytest.fixture
def daemon_group():
    """n daemons as the instances cpu0..cpu<n-1>, their sockets cpuI.sock in
    one temporary directory so that they find each other for collectives (as
    tests/harness.c's test_group_start); extra arguments go to each."""
    made, dirs = [], []

    def start(n, *args):
        d = tempfile.mkdtemp(prefix="cube-pytest-group-")
        dirs.append(d)
        group = []
        for i in range(n):
            group.append(Daemon(*args, socket_path=os.path.join(d, f"cpu{i}.sock")))
            made.append(group[-1])
        return group
    yield start
    for d in made:
        d.stop()
        d.cleanup()
    for d in dirs:
        if not os.environ.get("CUBE_TEST_LEAVE"):
            subprocess.run(["rm", "-rf", d])


@pytest.fixture
def client(daemon):
    import cubeclient
    with cubeclient.Client(daemon.socket, name="pytest") as c:
        yield c

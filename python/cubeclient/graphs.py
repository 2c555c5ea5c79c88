"""Graph capture and replay on one stream.

    c.graph_prepare()               # then a warm-up run of the workload
    run_workload()
    with c.capture() as cap:        # the stream's launches are recorded, not run
        run_workload()
    g = cap.graph                   # a Graph
    g.replay(100)                   # one request; returns once they are queued

Inside the capture a read, sync, profile or memory_cleanup on the stream is
refused (ServerError.Generic), an allocation needing a new page raises
IoError.PageUpdateForbidden, and a write or a dynamic count dooms the capture:
leaving the block raises what doomed it. A graph keeps the buffers it touches
until it is destroyed (destroy(), the end of a `with` block, or garbage
collection).
"""
from ._cube import ffi, lib
from .errors import check

MAX_TIMES = 65536       # replays one request carries (cube_replay_times)


class Graph:
    """A recorded graph. replay(times) runs its launches again, on the stream
    it was recorded on unless stream= names another."""

    def __init__(self, client, gid, sid):
        self.client = client
        self.id = gid
        self._sid = sid
        self._destroyed = False

    def __repr__(self):
        return f"<cubeclient.Graph {self.id}{' destroyed' if self._destroyed else ''}>"

    def _c(self, stream):
        c = self.client._cp()
        lib.cube_stream_set(self._sid if stream is None else self.client._sid(stream))
        return c

    def replay(self, times=1, *, stream=None):
        """Queues times replays (any number: one request per 65536)."""
        times = int(times)
        if times < 1:
            raise ValueError("a graph replays at least once")
        c = self._c(stream)
        while times:
            n = min(times, MAX_TIMES)
            check(lib.cube_replay(c, self.id) if n == 1 else lib.cube_replay_times(c, self.id, n))
            times -= n

    def destroy(self):
        """Releases the graph (a replay still running finishes first). Idempotent."""
        if self._destroyed:
            return
        self._destroyed = True
        c = self.client._open()
        if c is not None:
            lib.cube_stream_set(self._sid)
            check(lib.cube_graph_destroy(c, self.id))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def __del__(self):
        if not getattr(self, "_destroyed", True):
            self._destroyed = True
            try:
                c = self.client._open()
                if c is not None:
                    lib.cube_stream_set(self._sid)
                    lib.cube_error_free(lib.cube_graph_destroy(c, self.id))
            except Exception:
                pass


class Capture:
    """A capture window (Client.capture): entering begins it on the stream,
    leaving ends it, and .graph is then the Graph. If the block raised, the
    capture is ended and its graph destroyed, and the block's exception is
    the one raised."""

    def __init__(self, client, stream):
        self.client = client
        self._sid = client._sid(stream)
        self.graph = None

    def __enter__(self):
        c = self.client._cp()
        lib.cube_stream_set(self._sid)
        check(lib.cube_begin_capture(c))
        return self

    def __exit__(self, exc_type, *exc):
        c = self.client._cp()
        lib.cube_stream_set(self._sid)
        gid = ffi.new("uint64_t *")
        e = lib.cube_end_capture(c, gid)
        if exc_type is not None:
            if e == ffi.NULL:
                lib.cube_error_free(lib.cube_graph_destroy(c, gid[0]))
            else:
                lib.cube_error_free(e)
            return
        check(e)
        self.graph = Graph(self.client, gid[0], self._sid)

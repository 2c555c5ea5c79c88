"""Profiling windows: the device time of exactly the work queued on one
stream between a window's start and its end, timed by the device.

    with c.profile() as w:          # or c.profile(at_launch=True)
        k.launch(...)
    w.report.device_ns              # a ProfileReport, once the block is left

Windows nest and overlap, each under its own token; each ends on the stream
it started on, whatever stream the caller names later.
"""
from ._cube import ffi, lib
from .errors import check
from .views import ProfileReport


class ProfileWindow:
    """An open window (Client.profile). end() closes it once the stream has
    run its work and answers a ProfileReport; abandon() drops it without a
    wait. As a context manager it ends on leaving the block (the report is
    then .report), or is abandoned if the block raised."""

    def __init__(self, client, stream, at_launch):
        self.client = client
        self.at_launch = bool(at_launch)
        self._sid = client._sid(stream)
        token = ffi.new("uint64_t *")
        c = client._cp()
        lib.cube_stream_set(self._sid)
        check((lib.cube_start_profile_at_launch if at_launch else lib.cube_start_profile)(
            c, token))
        self.token = token[0]
        self.report = None
        self._open = True

    def __repr__(self):
        state = "open" if self._open else f"{self.report.device_ns} ns" if self.report else \
            "abandoned"
        return f"<cubeclient.ProfileWindow {self.token} {state}>"

    def _c(self):
        c = self.client._cp()
        lib.cube_stream_set(self._sid)
        return c

    def end(self):
        """Waits for the window's work and answers its ProfileReport. Raises
        ProfileError.NotMeasured when nothing timed ran in it, Launch or
        Server when work inside it failed."""
        if not self._open:
            raise ValueError("the profiling window was ended or abandoned already")
        d = ffi.new("cube_profile_duration *")
        c = self._c()
        self._open = False
        check(lib.cube_end_profile(c, self.token, d))
        self.report = ProfileReport(device_ns=d.device_ns, timed=d.timed)
        return self.report

    def abandon(self):
        """Drops the window without measuring it. Idempotent."""
        if self._open:
            self._open = False
            c = self.client._open()
            if c is not None:
                lib.cube_stream_set(self._sid)
                check(lib.cube_abandon_profile(c, self.token))

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is None:
            self.end()
        else:
            try:
                self.abandon()
            except Exception:
                pass            # the block's own exception is the one to see

    def __del__(self):
        if getattr(self, "_open", False):
            self._open = False
            try:
                c = self.client._open()
                if c is not None:
                    lib.cube_stream_set(self._sid)
                    lib.cube_error_free(lib.cube_abandon_profile(c, self.token))
            except Exception:
                pass

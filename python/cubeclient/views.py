"""The admin and report views as plain dataclasses."""
from dataclasses import dataclass, fields
from typing import Optional, Tuple

from ._cube import ffi


def _value(v):
    t = ffi.typeof(v) if isinstance(v, ffi.CData) else None
    if t is None:
        return v
    if t.kind == "array" and t.item.cname == "char":
        return ffi.string(v).decode("utf-8", "replace")
    if t.kind == "array":
        return tuple(_value(x) for x in v)
    return v


def from_struct(cls, s, **override):
    """cls filled from the cffi struct s, field by field of the same name."""
    kw = {}
    for f in fields(cls):
        if f.name in override:
            kw[f.name] = override[f.name]
        else:
            v = getattr(s, f.name)
            sub = _NESTED.get((cls, f.name))
            kw[f.name] = from_struct(sub, v) if sub else _value(v)
    return cls(**kw)


@dataclass(frozen=True)
class DeviceProperties:
    name: str
    memory_bytes: int
    max_page_size: int
    alignment: int
    plane_size_min: int
    plane_size_max: int
    max_bindings: int
    max_shared_memory_size: int
    max_cube_count: Tuple[int, int, int]
    max_units_per_cube: int
    max_cube_dim: Tuple[int, int, int]
    num_streaming_multiprocessors: int
    num_cpu_cores: int


@dataclass(frozen=True)
class ProtocolLimits:
    max_message_bytes: int
    max_depth: int
    max_container: int
    max_str_bytes: int
    max_objects: int


@dataclass(frozen=True)
class PoolReport:
    kind: str
    page_size: int
    max_slice: int
    allocations: int
    bytes_in_use: int
    bytes_padding: int
    bytes_reserved: int
    pages: int
    pages_peak: int
    largest_alloc: int


@dataclass(frozen=True)
class MemoryReport:
    session: int
    stream: int
    pools: Tuple[PoolReport, ...]


@dataclass(frozen=True)
class SessionInfo:
    id: int
    pid: int
    uid: int
    name: str
    streams: int
    memory_in_use: int
    memory_peak: int
    allocations: int
    launches: int
    bytes_in: int
    bytes_out: int
    errors: int
    connected: bool


@dataclass(frozen=True)
class ShareInfo:
    """A line of the shares view: a session's (session != 0) or a tenant's."""
    session: int
    uid: int
    name: str
    tenant: str
    weight: int
    class_name: str
    cap: int
    device_ns: int
    window_ns: int
    share: int
    owed: int


@dataclass(frozen=True)
class StreamInfo:
    session: int
    stream: int
    pending: int


@dataclass(frozen=True)
class KernelInfo:
    hash: str
    entry: str
    backend: str
    state: str
    from_disk: bool
    compile_ms: float
    hits: int


@dataclass(frozen=True)
class CountSelection:
    count: Tuple[int, int, int]
    exact: bool                     # False: Approx, some cubes idle
    num_cubes: int                  # what count dispatches


@dataclass(frozen=True)
class CacheArtifact:
    hash: str                       # the cache key, as KernelInfo.hash
    source_hash: str                # SHA-256 of the kernel's source
    entry: str
    backend: str
    bytes: int
    used_at: float                  # last written or loaded, seconds since the epoch


@dataclass(frozen=True)
class EvictedArtifact:
    artifact: str
    bytes: int
    at_s: float                     # seconds after the daemon started


@dataclass(frozen=True)
class KernelCache:
    dir: str
    bytes: int
    max_bytes: int                  # 0: no limit
    artifacts: int
    evictions: int
    evicted_bytes: int
    evicted: Tuple[EvictedArtifact, ...]   # the most recent, newest last


def kernel_cache(s):
    evicted = tuple(from_struct(EvictedArtifact, s.evicted[i]) for i in range(s.n_evicted))
    return from_struct(KernelCache, s, evicted=evicted)


@dataclass(frozen=True)
class FailureInfo:
    id: int
    session: int
    report: Optional[Exception]     # a ServerError.Unwritten


@dataclass(frozen=True)
class Status:
    service: str
    backend: str
    properties: DeviceProperties
    uptime_seconds: float
    sessions: int
    memory_in_use: int
    memory_peak: int
    memory_reserved: int
    allocations: int
    compiles: int
    kernels: int
    poisoned: bool
    poison: str


@dataclass(frozen=True)
class ProfileReport:
    """What a profiling window measured: the device time of its work and how
    many pieces of work the device timed."""
    device_ns: int
    timed: int

    @property
    def seconds(self):
        return self.device_ns / 1e9


@dataclass(frozen=True)
class CaptureInfo:
    """An open profiling window, a graph or a capture under way (cubectl graphs)."""
    session: int
    kind: str               # "window", "graph" or "capture"
    stream: int
    id: int                 # the window's token, the graph's id; 0 for a capture
    state: str
    launches: int
    pages: int
    page_bytes: int
    replays: int
    device_ns: int


@dataclass(frozen=True)
class CommInfo:
    """A communicator a session of the daemon has joined (cubectl comms)."""
    id: str
    session: int
    kind: str               # "devices", "transfers" or "id"
    rank: int
    size: int
    members: Tuple[str, ...]    # the first 8
    state: str              # joining, ready, failed, closed
    why: str
    ops: int
    bytes: int
    refusals: int


_NESTED = {(Status, "properties"): DeviceProperties}


def memory_report(s):
    pools = tuple(from_struct(PoolReport, s.pools[i]) for i in range(s.n_pools))
    return MemoryReport(session=s.session, stream=s.stream, pools=pools)

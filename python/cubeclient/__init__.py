"""cubeclient - the Python binding of libcubeclient, the client library of
cubed, the per-device compute daemon.

    import numpy as np, cubeclient as cube

    with cube.Client(name="example") as c:        # $CUBE_SOCKET, else /run/cube/cpu0.sock
        a = c.create(np.arange(4, dtype=np.float32))
        print(a.to_numpy())                        # [0. 1. 2. 3.]

See python/README.md.
"""
from ._cube import ffi as _ffi, lib as _lib
from .errors import *                  # noqa: F401,F403 (the taxonomy)
from .errors import __all__ as _errors_all
from .client import (Client, Stream, Buffer, Tensor, Region, Kernel, Launch, LaunchMode,
                     LayoutStrategy,
                     BufferIO, AllocationMode, FaultSite, f32, f64, i32, i64, u32, u64,
                     count_is_empty, num_elems, can_contain, TensorMap, TensorMapFormat,
                     TensorMapInterleave, TensorMapSwizzle, TensorMapPrefetch, OobFill)
from .views import (DeviceProperties, ProtocolLimits, PoolReport, MemoryReport, SessionInfo,
                    StreamInfo, KernelInfo, KernelCache, EvictedArtifact, CacheArtifact,
                    CountSelection, ShareInfo, FailureInfo, Status, ProfileReport, CaptureInfo,
                    CommInfo)
from .comms import Group, Reduction, ComputeWait, ElemType, comm_init_all
from .profiling import ProfileWindow
from .graphs import Graph, Capture

PROTOCOL_VERSION = _lib.CUBE_PROTOCOL_VERSION
DEFAULT_SOCKET = _ffi.string(_lib.pycube_default_socket).decode()

__version__ = "0.1.0"
__all__ = list(_errors_all) + [
    "Client", "Stream", "Buffer", "Tensor", "Region", "Kernel", "Launch", "LaunchMode",
    "LayoutStrategy",
    "BufferIO", "AllocationMode", "FaultSite", "f32", "f64", "i32", "i64", "u32", "u64",
    "count_is_empty", "num_elems", "can_contain", "CacheArtifact", "CountSelection",
    "TensorMap", "TensorMapFormat", "TensorMapInterleave", "TensorMapSwizzle",
    "TensorMapPrefetch", "OobFill",
    "DeviceProperties", "ProtocolLimits", "PoolReport", "MemoryReport", "SessionInfo",
    "ShareInfo", "StreamInfo", "KernelInfo", "KernelCache", "EvictedArtifact", "FailureInfo", "Status", "ProfileReport", "CaptureInfo",
    "CommInfo", "Group", "Reduction", "ComputeWait", "ElemType", "comm_init_all",
    "ProfileWindow", "Graph", "Capture", "PROTOCOL_VERSION", "DEFAULT_SOCKET"]

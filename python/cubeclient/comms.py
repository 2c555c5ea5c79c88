"""Collectives between devices (cube.h's ServerCommunication): groups,
their operations, point to point and peer access.

A device is a daemon instance ("cpu0", "cpu1", ...). A Group is made by
Client.comm_init(devices) on every member (each through its own client; the
call blocks until all have joined, so one process holding several clients
uses comm_init_all or a thread per client), or by Client.comm_mint() on rank 0
and Client.comm_init_id(id, rank, size) on every rank. Members queue a
group's operations in one order.
"""
import enum

from ._cube import ffi, lib
from .errors import check

try:
    import numpy as np
except ImportError:
    np = None

NULL = ffi.NULL


class Reduction(enum.IntEnum):
    """How a collective reduces its members' elements."""
    SUM = lib.CUBE_REDUCE_SUM
    MEAN = lib.CUBE_REDUCE_MEAN


class ComputeWait(enum.IntEnum):
    """AT_SYNC: the collective runs beside compute, and its buffers are kept
    (by the binding) until Client.sync_collective(). NOW: it runs before
    anything queued after it on the stream."""
    AT_SYNC = lib.CUBE_WAIT_AT_SYNC
    NOW = lib.CUBE_WAIT_NOW


class ElemType(enum.IntEnum):
    """The element type a reduction works in (cube_elem_type)."""
    F16 = lib.CUBE_ELEM_F16
    BF16 = lib.CUBE_ELEM_BF16
    F32 = lib.CUBE_ELEM_F32
    F64 = lib.CUBE_ELEM_F64
    I32 = lib.CUBE_ELEM_I32
    I64 = lib.CUBE_ELEM_I64
    U32 = lib.CUBE_ELEM_U32
    U64 = lib.CUBE_ELEM_U64


_NUMPY_ELEM = {"float16": ElemType.F16, "float32": ElemType.F32, "float64": ElemType.F64,
               "int32": ElemType.I32, "int64": ElemType.I64, "uint32": ElemType.U32,
               "uint64": ElemType.U64}
_NAMES = {e.name.lower(): e for e in ElemType}


def _elem(dtype, buf):
    """The ElemType of an explicit dtype (an ElemType, a numpy dtype, or a
    name: "f32", "bf16", "float32", ...), else of the buffer's numpy dtype."""
    if dtype is None:
        dtype = buf.dtype
        if dtype is None:
            raise TypeError("a reduction needs its element type: pass dtype= (an ElemType or "
                            "a numpy dtype), or use a buffer created from a numpy array")
    if isinstance(dtype, ElemType):
        return dtype
    if isinstance(dtype, str) and dtype.lower() in _NAMES:
        return _NAMES[dtype.lower()]
    name = np.dtype(dtype).name if np is not None else str(dtype)
    if name not in _NUMPY_ELEM:
        raise TypeError(f"no collective reduces {name}: {', '.join(_NUMPY_ELEM)} or "
                        "ElemType.BF16")
    return _NUMPY_ELEM[name]


def _strings(items):
    """A const char *[] of items, and what keeps it alive."""
    keep = [ffi.new("char[]", s.encode() if isinstance(s, str) else s) for s in items]
    return ffi.new("const char *[]", keep), keep


def _peer(peer):
    """A member by device name or rank (an int becomes its decimal text)."""
    return str(peer).encode() if isinstance(peer, int) else peer.encode()


class Group:
    """A communicator this client has joined. Its operations queue on the
    calling thread's stream (or stream=); each is answered once queued, and
    what goes wrong later lands on the destination, so the read of it raises.

    A context manager: leaving the block waits for the AT_SYNC collectives
    the client queued (Client.sync_collective).
    """

    def __init__(self, client, devices=None, id=None, rank=None, size=None):
        self.client = client
        self.devices = tuple(devices) if devices is not None else None
        self.id = id
        self.rank = rank
        self.size = size if size is not None else (len(devices) if devices else None)
        g = ffi.new("cube_group *")
        self._keep = []
        if devices is not None:
            arr, keep = _strings(devices)
            g.devices, g.n = arr, len(devices)
            self._keep += [arr, keep]
        else:
            s = ffi.new("char[]", id.encode())
            g.id = s
            self._keep.append(s)
        self._g = g

    def __repr__(self):
        what = ",".join(self.devices) if self.devices is not None else f"id {self.id}"
        return f"<cubeclient.Group {what}>"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.client.sync_collective()

    def _call(self, fn, wait, stream, keep, *args):
        c = self.client._enter(stream)
        check(fn(c, self._g, *args, int(wait)))
        if wait == ComputeWait.AT_SYNC:
            self.client._collective_keep.extend(keep)

    def all_reduce(self, src, dst, op=Reduction.SUM, *, dtype=None, wait=ComputeWait.NOW,
                   stream=None):
        """dst = the reduction of every member's src (dtype: the element type,
        by default src's numpy dtype)."""
        red = ffi.new("cube_reduction *", {"dtype": int(_elem(dtype, src)), "op": int(op)})
        self._call(lib.cube_all_reduce, wait, stream, (src, dst), src._h, dst._h, red[0])

    def all_gather(self, src, dst, *, wait=ComputeWait.NOW, stream=None):
        """dst holds one src per member, in rank order."""
        self._call(lib.cube_all_gather, wait, stream, (src, dst), src._h, dst._h)

    def reduce_scatter(self, src, dst, op=Reduction.SUM, *, dtype=None,
                       wait=ComputeWait.NOW, stream=None):
        """src holds one dst per member; dst receives this member's chunk of
        the reduction."""
        red = ffi.new("cube_reduction *", {"dtype": int(_elem(dtype, src)), "op": int(op)})
        self._call(lib.cube_reduce_scatter, wait, stream, (src, dst), src._h, dst._h, red[0])

    def broadcast(self, src, dst, root, *, wait=ComputeWait.NOW, stream=None):
        """root's src into every member's dst; src is None on every other
        member. root: a device name or a rank."""
        self._call(lib.cube_broadcast, wait, stream, (src, dst),
                   src._h if src is not None else NULL, dst._h, _peer(root))

    def all_to_all(self, src, dst, *, wait=ComputeWait.NOW, stream=None):
        """Chunk r of src to member r; chunk r of dst from member r."""
        self._call(lib.cube_all_to_all, wait, stream, (src, dst), src._h, dst._h)

    def send(self, src, peer, *, wait=ComputeWait.NOW, stream=None):
        """src to the member peer (a device name or a rank)."""
        self._call(lib.cube_send, wait, stream, (src,), src._h, _peer(peer))

    def recv(self, dst, peer, *, wait=ComputeWait.NOW, stream=None):
        """dst from the member peer (a device name or a rank)."""
        self._call(lib.cube_recv, wait, stream, (dst,), dst._h, _peer(peer))


def comm_init(client, devices):
    devices = list(devices)
    arr, keep = _strings(devices)
    check(lib.cube_comm_init(client._cp(), arr, len(devices)))
    return Group(client, devices=devices)


def comm_init_all(clients, devices):
    """Joins the group of devices through n clients at once, client i being
    devices[i]'s; the Group of each, in the same order."""
    clients, devices = list(clients), list(devices)
    if len(clients) != len(devices):
        raise ValueError("comm_init_all takes one client per device")
    cs = ffi.new("cube_client *[]", [c._cp() for c in clients])
    arr, keep = _strings(devices)
    check(lib.cube_comm_init_all(cs, arr, len(devices)))
    return [Group(c, devices=devices) for c in clients]


def comm_mint(client):
    out = ffi.new("char[128]")
    check(lib.cube_comm_mint(client._cp(), out))
    return ffi.string(out).decode()


def comm_init_id(client, id, rank, size):
    check(lib.cube_comm_init_id(client._cp(), id.encode(), rank, size))
    return Group(client, id=id, rank=rank, size=size)


def _pair(client, fn, buf, peer, wait, stream):
    c = client._enter(stream)
    check(fn(c, NULL, buf._h, _peer(peer), int(wait)))
    if wait == ComputeWait.AT_SYNC:
        client._collective_keep.append(buf)


def send(client, src, peer, wait, stream):
    _pair(client, lib.cube_send, src, peer, wait, stream)


def recv(client, dst, peer, wait, stream):
    _pair(client, lib.cube_recv, dst, peer, wait, stream)


def sync_collective(client):
    try:
        check(lib.cube_sync_collective(client._cp()))
    finally:
        client._collective_keep.clear()


def can_access_peer(client, peer):
    can = ffi.new("bool *")
    check(lib.cube_can_access_peer(client._cp(), _peer(peer), can))
    return bool(can[0])


def peer_address(client, buf):
    addr = ffi.new("uint64_t *")
    check(lib.cube_peer_address(client._cp(), buf._h, addr))
    return addr[0]


"""Client, Stream, Buffer, Tensor, Region, Kernel and Launch."""
import asyncio
import contextvars
import enum
import itertools
import os
import threading
import weakref

from ._cube import ffi, lib
from . import errors, views, comms, profiling, graphs
from .errors import check, ClientClosed, ForkedClient, ClientError

try:
    import numpy as np
except ImportError:     # numpy is optional: bytes and memoryviews still work
    np = None

NULL = ffi.NULL
_pycube_launch = lib.pycube_launch
_WAIT_NOW = comms.ComputeWait.NOW


class LaunchMode(enum.IntEnum):
    EXECUTE = lib.CUBE_LAUNCH_EXECUTE
    COMPILE = lib.CUBE_LAUNCH_COMPILE
    QUEUE = lib.CUBE_LAUNCH_QUEUE
    UNCHECKED = lib.CUBE_LAUNCH_UNCHECKED


class LayoutStrategy(enum.IntEnum):
    """How a tensor of a batch lays out its rows (cube_layout_strategy)."""
    CONTIGUOUS = lib.CUBE_LAYOUT_CONTIGUOUS
    OPTIMIZED = lib.CUBE_LAYOUT_OPTIMIZED


class BufferIO(enum.IntEnum):
    READ_ONLY = lib.CUBE_BUFFER_READ_ONLY
    WRITE_ONLY = lib.CUBE_BUFFER_WRITE_ONLY
    READ_WRITE = lib.CUBE_BUFFER_READ_WRITE
    DEAD = lib.CUBE_BUFFER_DEAD
    UNDECLARED = lib.CUBE_BUFFER_UNDECLARED


class TensorMapFormat(enum.IntEnum):
    TILED = lib.CUBE_TENSOR_MAP_TILED
    IM2COL = lib.CUBE_TENSOR_MAP_IM2COL


class TensorMapInterleave(enum.IntEnum):
    NONE = lib.CUBE_TENSOR_MAP_INTERLEAVE_NONE
    B16 = lib.CUBE_TENSOR_MAP_INTERLEAVE_16B
    B32 = lib.CUBE_TENSOR_MAP_INTERLEAVE_32B


class TensorMapSwizzle(enum.IntEnum):
    NONE = lib.CUBE_TENSOR_MAP_SWIZZLE_NONE
    B32 = lib.CUBE_TENSOR_MAP_SWIZZLE_32B
    B64 = lib.CUBE_TENSOR_MAP_SWIZZLE_64B
    B128 = lib.CUBE_TENSOR_MAP_SWIZZLE_128B


class TensorMapPrefetch(enum.IntEnum):
    NONE = lib.CUBE_TENSOR_MAP_PREFETCH_NONE
    B64 = lib.CUBE_TENSOR_MAP_PREFETCH_64B
    B128 = lib.CUBE_TENSOR_MAP_PREFETCH_128B
    B256 = lib.CUBE_TENSOR_MAP_PREFETCH_256B


class OobFill(enum.IntEnum):
    ZERO = lib.CUBE_TENSOR_MAP_OOB_ZERO
    NAN = lib.CUBE_TENSOR_MAP_OOB_NAN


class TensorMap:
    """A tensor map (the reference's TensorMapBinding): a buffer, and how a
    kernel's tensor_map_load reads boxes of it (docs/KERNELS.md, "Tensor
    maps"). Dimensions are innermost first, as cuTensorMapEncodeTiled counts
    them; shape and strides are in elements (strides default to the
    contiguous ones). elem is an ElemType, by default the buffer's numpy
    dtype's. For im2col, box is (channels per pixel, pixels per column) and
    lower_corner / upper_corner bound the spatial dimensions."""

    __slots__ = ("buffer", "shape", "strides", "box", "elem_strides", "elem", "format",
                 "lower_corner", "upper_corner", "interleave", "swizzle", "prefetch", "oob_fill")

    def __init__(self, buffer, shape, box, *, strides=None, elem=None, elem_strides=None,
                 format=TensorMapFormat.TILED, lower_corner=(), upper_corner=(),
                 interleave=TensorMapInterleave.NONE, swizzle=TensorMapSwizzle.NONE,
                 prefetch=TensorMapPrefetch.NONE, oob_fill=OobFill.ZERO):
        rank = len(shape)
        if not 1 <= rank <= lib.CUBE_TENSOR_MAP_MAX_RANK:
            raise ValueError(f"a tensor map's rank is 1 to {lib.CUBE_TENSOR_MAP_MAX_RANK}")
        if strides is None:
            strides, step = [], 1
            for n in shape:
                strides.append(step)
                step *= int(n)
        if elem is None:
            if buffer.dtype is None or buffer.dtype.name not in comms._NUMPY_ELEM:
                raise ValueError("a tensor map needs elem= for a buffer without a numpy dtype")
            elem = comms._NUMPY_ELEM[buffer.dtype.name]
        self.buffer = buffer
        self.shape = tuple(int(x) for x in shape)
        self.strides = tuple(int(x) for x in strides)
        self.box = tuple(int(x) for x in box)
        self.elem_strides = tuple(int(x) for x in (elem_strides or (1,) * rank))
        if not (len(self.strides) == len(self.elem_strides) == rank):
            raise ValueError("shape, strides and elem_strides have one entry per dimension")
        if len(self.box) != (2 if format == TensorMapFormat.IM2COL else rank):
            raise ValueError("box has one entry per dimension (im2col: channels per pixel and "
                             "pixels per column)")
        self.elem = comms.ElemType(elem)
        self.format = TensorMapFormat(format)
        self.lower_corner = tuple(int(x) for x in lower_corner)
        self.upper_corner = tuple(int(x) for x in upper_corner)
        self.interleave = TensorMapInterleave(interleave)
        self.swizzle = TensorMapSwizzle(swizzle)
        self.prefetch = TensorMapPrefetch(prefetch)
        self.oob_fill = OobFill(oob_fill)

    def _fill(self, m):
        m.buffer = self.buffer._h[0]
        m.format = int(self.format)
        m.elem = int(self.elem)
        m.rank = len(self.shape)
        for d in range(len(self.shape)):
            m.shape[d] = self.shape[d]
            m.strides[d] = self.strides[d]
            m.elem_strides[d] = self.elem_strides[d]
        for d, n in enumerate(self.box):
            m.box[d] = n
        for d, (lo, hi) in enumerate(zip(self.lower_corner, self.upper_corner)):
            m.lower_corner[d] = lo
            m.upper_corner[d] = hi
        m.interleave = int(self.interleave)
        m.swizzle = int(self.swizzle)
        m.prefetch = int(self.prefetch)
        m.oob_fill = int(self.oob_fill)


class AllocationMode(enum.IntEnum):
    AUTO = lib.CUBE_ALLOCATION_AUTO
    PERSISTENT = lib.CUBE_ALLOCATION_PERSISTENT
    DEDICATED = lib.CUBE_ALLOCATION_DEDICATED


class FaultSite(enum.IntEnum):
    ALLOC = lib.CUBE_FAULT_ALLOC
    COPY = lib.CUBE_FAULT_COPY
    LAUNCH = lib.CUBE_FAULT_LAUNCH
    COMPILE = lib.CUBE_FAULT_COMPILE
    POISON = lib.CUBE_FAULT_POISON
    TEARDOWN = lib.CUBE_FAULT_TEARDOWN
    DEVICE_LAUNCH = lib.CUBE_FAULT_DEVICE_LAUNCH


# ---------------------------------------------------------------------------
# Typed scalars for the info words. A plain Python int or float has no C
# type, so a launch takes these (or numpy scalars, typed by their dtype).
class _Scalar:
    __slots__ = ()


class f32(float, _Scalar):
    group = 0


class f64(float, _Scalar):
    group = 1


class i32(int, _Scalar):
    group = 2


class i64(int, _Scalar):
    group = 3


class u32(int, _Scalar):
    group = 4


class u64(int, _Scalar):
    group = 5


_INFO_ADD = (lib.cube_info_f32, lib.cube_info_f64, lib.cube_info_i32, lib.cube_info_i64,
             lib.cube_info_u32, lib.cube_info_u64)
_NUMPY_GROUP = {"float32": 0, "float64": 1, "int32": 2, "int64": 3, "uint32": 4, "uint64": 5}


def _scalar_group(v):
    g = getattr(v, "group", None)
    if g is not None and isinstance(v, _Scalar):
        return g, v
    if np is not None and isinstance(v, np.generic):
        g = _NUMPY_GROUP.get(v.dtype.name)
        if g is not None:
            return g, v.item()
    raise TypeError(f"a launch scalar needs a C type: wrap {v!r} as cubeclient.f32/f64/i32/"
                    "i64/u32/u64, or pass a numpy scalar of one of those dtypes")


# ---------------------------------------------------------------------------
# Fork: a connection belongs to the process that made it. A child closes its
# copies at once (cube.h: disconnecting a copy sends nothing), so the parent's
# session ends with the parent, and any later use in the child raises.
_generation = 0
_live = weakref.WeakSet()


def _after_fork_in_child():
    global _generation
    _generation += 1
    for c in list(_live):
        c._forget_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)

# The stream a `with stream:` block names, per thread and per asyncio task.
_current_stream = contextvars.ContextVar("cubeclient_stream", default=None)
# Stream ids this binding mints: far above the per-thread ids the C library
# draws (1, 2, 3, ...), so the two never meet.
_stream_ids = itertools.count((1 << 62) + 1)


def _enc(s):
    return s.encode() if isinstance(s, str) else s


def _readable(data):
    """(pointer, nbytes, keepalive) of anything with the buffer protocol.
    C-contiguous data is used in place; anything else (a strided or
    Fortran-ordered numpy array, a strided memoryview) is first copied into C
    order."""
    if isinstance(data, Buffer):
        raise TypeError("host data expected, not a Buffer")
    try:
        p = ffi.from_buffer(data)
    except (TypeError, BufferError, ValueError):
        if np is not None and isinstance(data, np.ndarray):
            data = np.ascontiguousarray(data)
        else:
            data = memoryview(data).tobytes(order="C")
        p = ffi.from_buffer(data)
    return p, len(p), data


def _writable(out):
    try:
        return ffi.from_buffer(out, require_writable=True)
    except (TypeError, BufferError, ValueError) as e:
        raise TypeError("the destination must be a writable C-contiguous buffer") from e


def _dims(v, what):
    if isinstance(v, int):
        return (v, 1, 1)
    t = tuple(int(x) for x in v)
    if not 1 <= len(t) <= 3:
        raise ValueError(f"{what} has one to three dimensions")
    return t + (1,) * (3 - len(t))


def _dim3(v, what):
    x, y, z = _dims(v, what)
    return ffi.new("cube_dim3 *", (x, y, z))[0]


def count_is_empty(count):
    """Whether a static cube count dispatches nothing (a zero anywhere)."""
    return bool(lib.cube_count_is_empty(_dim3(count, "count")))


def num_elems(dim):
    """The units of a cube: x * y * z."""
    return int(lib.cube_dim_num_elems(_dim3(dim, "dim")))


def can_contain(dim, other):
    """Whether dim is at least other in every dimension."""
    return bool(lib.cube_dim_can_contain(_dim3(dim, "dim"), _dim3(other, "other")))


class Client:
    """A connection to a cubed: ``Client(socket=None, name=None)``.

    socket: the daemon's socket path, else $CUBE_SOCKET, else
    /run/cube/cpu0.sock. name labels the session in cubectl. A context manager:
    leaving the block disconnects, and so does garbage collection; the daemon
    reclaims everything the session held either way.

    Like the C client it is safe to share between threads; close() must not
    race another thread's call on it.
    """

    def __init__(self, socket=None, name=None):
        p = ffi.new("cube_client **")
        check(lib.cube_connect(_enc(os.fspath(socket)) if socket is not None else NULL,
                               _enc(name) if name is not None else NULL, p))
        self._c = p[0]
        self._gen = _generation
        self._lock = threading.Lock()
        self._collective_keep = []     # buffers of AT_SYNC collectives until sync_collective
        self._finalizer = weakref.finalize(self, lib.cube_disconnect, self._c)
        _live.add(self)

    # -- lifetime ---------------------------------------------------------
    def _cp(self):
        """The cube_client *, after checking this process may use it."""
        if self._gen != _generation:
            raise ForkedClient("this client was connected by the parent process; a forked "
                               "child connects afresh")
        c = self._c
        if c is None:
            raise ClientClosed("the client is closed")
        return c

    def _open(self):
        """The cube_client * while usable from this process, else None."""
        return self._c if self._gen == _generation else None

    def _forget_in_child(self):
        c, self._c = self._c, None
        if c is not None:
            self._finalizer.detach()
            lib.cube_disconnect(c)      # the child's copy: sends nothing
        self._gen = -1

    def close(self):
        """Sends the batched launches and disconnects. Idempotent."""
        with self._lock:
            c, self._c = self._c, None
        if c is not None and self._finalizer.detach():
            lib.cube_disconnect(c)

    @property
    def closed(self):
        return self._c is None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        state = "closed" if self._c is None else self.service
        return f"<cubeclient.Client {state}>"

    # -- what hello reported ----------------------------------------------
    @property
    def service(self):
        return ffi.string(lib.cube_client_service(self._cp())).decode()

    @property
    def backend(self):
        return ffi.string(lib.cube_client_backend(self._cp())).decode()

    @property
    def check_mode(self):
        """Which launches the daemon checks: "auto", "enforce" or "validate"."""
        return ffi.string(lib.cube_client_check_mode(self._cp())).decode()

    @property
    def session(self):
        return lib.cube_client_session(self._cp())

    @property
    def properties(self):
        return views.from_struct(views.DeviceProperties, lib.cube_client_properties(self._cp()))

    @property
    def properties_hash(self):
        """A stable checksum of the device properties, to key tuning results by."""
        return int(lib.cube_client_properties_hash(self._cp()))

    @property
    def target(self):
        """What compiled code depends on: compiler, version, machine, options."""
        return ffi.string(lib.cube_client_target(self._cp())).decode()

    @property
    def device_transport(self):
        """(name, frozenset of the ElemTypes it reduces), or None when the
        daemon has no transport between devices."""
        c = self._cp()
        name = lib.cube_client_device_transport(c)
        if name == NULL:
            return None
        return (ffi.string(name).decode(),
                frozenset(t for t in comms.ElemType if lib.cube_client_transport_reduces(c, t)))

    def cube_dim(self, working_units):
        """The reference's CubeDim::new for this device: (x, y, z)."""
        d = lib.cube_dim_new(lib.cube_client_properties(self._cp()), int(working_units))
        return (d.x, d.y, d.z)

    def count_select(self, num_cubes):
        """The reference's CubeCountSelection: num_cubes spread over the
        device's max_cube_count. exact is False when more cubes run than
        asked (the kernel checks its bounds)."""
        s = lib.cube_count_select(lib.cube_client_properties(self._cp()), int(num_cubes))
        return views.CountSelection(count=(s.count.x, s.count.y, s.count.z),
                                    exact=bool(s.exact), num_cubes=s.num_cubes)

    @property
    def limits(self):
        return views.from_struct(views.ProtocolLimits, lib.cube_client_limits(self._cp()))

    def require_backend(self, backend):
        """ServiceMismatch unless the daemon is of that backend."""
        check(lib.cube_client_require_backend(self._cp(), _enc(backend)))

    # -- streams ------------------------------------------------------------
    def stream(self):
        """A new stream of this client, usable from any thread or coroutine."""
        return Stream(self, next(_stream_ids))

    def _sid(self, stream):
        if stream is None:
            stream = _current_stream.get()
            if stream is None:
                return 0
        if stream.client is not self:
            raise ClientError("the stream belongs to another client")
        return stream.id

    def _enter(self, stream):
        """The cube_client *, with the calling thread's stream set for the call."""
        c = self._cp()
        lib.cube_stream_set(self._sid(stream))
        return c

    # -- memory -------------------------------------------------------------
    def empty(self, nbytes, *, stream=None):
        """Allocates nbytes, uninitialised (fresh memory reads as zeros)."""
        h = ffi.new("cube_handle *")
        check(lib.cube_empty(self._enter(stream), nbytes, h))
        return Buffer(self, h)

    def create(self, data, *, stream=None):
        """Allocates and writes data: anything with the buffer protocol. A
        numpy array's dtype and shape are remembered for to_numpy()."""
        p, n, keep = _readable(data)
        h = ffi.new("cube_handle *")
        check(lib.cube_create(self._enter(stream), p, n, h))
        b = Buffer(self, h)
        if np is not None and isinstance(data, np.ndarray):
            b.dtype, b.shape = data.dtype, data.shape
        return b

    def write(self, buf, data, *, stream=None):
        """Writes exactly len(buf) bytes of data into buf, without a copy of
        C-contiguous data."""
        p, n, keep = _readable(data)
        check(lib.cube_write(self._enter(stream), buf._h, p, n))

    def read(self, buf, *, stream=None):
        """The bytes of buf, once the work writing them has run."""
        out = bytearray(buf.nbytes)
        self.read_into(buf, out, stream=stream)
        return bytes(out)

    def read_into(self, buf, out, *, stream=None):
        """Reads buf into out (a writable buffer of exactly len(buf) bytes)."""
        p = _writable(out)
        check(lib.cube_read(self._enter(stream), buf._h, p, len(p)))
        return out

    def to_numpy(self, buf, dtype=None, shape=None, *, stream=None):
        """buf read into a new numpy array (dtype and shape default to those
        of the array it was created from, else uint8 and one dimension)."""
        if np is None:
            raise ImportError("to_numpy needs numpy")
        dtype = np.dtype(dtype if dtype is not None else (buf.dtype or np.uint8))
        if shape is None:
            shape = buf.shape if buf.shape is not None and dtype == buf.dtype else \
                (buf.nbytes // dtype.itemsize,)
        out = np.empty(shape, dtype)
        if out.nbytes != buf.nbytes:
            raise ValueError(f"{buf.nbytes} bytes do not make {shape} of {dtype}")
        self.read_into(buf, out, stream=stream)
        return out

    def sync(self, buffers=(), *, stream=None):
        """Waits for all work the session queued, on every one of its streams,
        then answers for the buffers as a read would (none: the barrier and
        device faults only)."""
        hs, n = _handles(buffers)
        check(lib.cube_sync(self._enter(stream), hs, n))

    def check(self, buffers=(), *, stream=None):
        """The claim check a read makes, at once and without a barrier."""
        hs, n = _handles(buffers)
        check(lib.cube_check(self._enter(stream), hs, n))

    def flush(self, *, stream=None):
        check(lib.cube_flush(self._enter(stream)))

    def free(self, buf, *, stream=None):
        buf.free(stream=stream)

    def memory_cleanup(self, *, stream=None):
        check(lib.cube_memory_cleanup(self._enter(stream)))

    def set_allocation_mode(self, mode, *, stream=None):
        check(lib.cube_set_allocation_mode(self._enter(stream), int(mode)))

    def memory_report(self, stream=None):
        """The report of a stream of this session (a Stream, an id, or None
        for the calling thread's / context's stream); None if it was never
        created."""
        c = self._cp()
        if isinstance(stream, int):
            sid = stream
        else:
            lib.cube_stream_set(self._sid(stream))
            sid = lib.cube_stream_current()
        exists = ffi.new("bool *")
        r = ffi.new("cube_memory_report *")
        check(lib.cube_stream_memory_report(c, sid, exists, r))
        return views.memory_report(r) if exists[0] else None

    def stream_ids(self):
        ids, n = ffi.new("uint64_t **"), ffi.new("size_t *")
        check(lib.cube_stream_ids(self._cp(), ids, n))
        try:
            return [ids[0][i] for i in range(n[0])]
        finally:
            lib.free(ids[0])

    def daemon_memory(self):
        v, n = ffi.new("cube_memory_report **"), ffi.new("size_t *")
        check(lib.cube_daemon_memory(self._cp(), v, n))
        try:
            return [views.memory_report(v[0][i]) for i in range(n[0])]
        finally:
            lib.free(v[0])

    def empty_tensor(self, shape, dtype, *, stream=None):
        """A tensor whose rows start on an aligned pitch (cube_empty_tensor)."""
        shape = tuple(int(x) for x in shape)
        itemsize = np.dtype(dtype).itemsize if np is not None else int(dtype)
        t = ffi.new("cube_copy *")
        check(lib.cube_empty_tensor(self._enter(stream), shape, len(shape), itemsize, t))
        return Tensor(self, t, dtype)

    @staticmethod
    def _layout_descriptors(descriptors):
        """(shape, dtype[, strategy]) tuples as cube_layout_descriptor[]; the
        strategy defaults to OPTIMIZED."""
        descriptors = list(descriptors)
        d = ffi.new("cube_layout_descriptor[]", max(len(descriptors), 1))
        dtypes = []
        for i, desc in enumerate(descriptors):
            shape, dtype = tuple(int(x) for x in desc[0]), desc[1]
            strategy = desc[2] if len(desc) > 2 else LayoutStrategy.OPTIMIZED
            if len(shape) > lib.CUBE_MAX_RANK:
                raise ValueError(f"tensor {i}: a rank of {len(shape)} is above "
                                 f"{lib.CUBE_MAX_RANK}")
            d[i].strategy = int(strategy)
            d[i].rank = len(shape)
            for j, n in enumerate(shape):
                d[i].shape[j] = n
            d[i].elem_size = np.dtype(dtype).itemsize if np is not None else int(dtype)
            dtypes.append(dtype)
        return d, len(descriptors), dtypes

    def layout_apply(self, descriptors):
        """The layout policy alone (cube_layout_apply): the size of the
        allocation the tensors would share, and each one's
        (offset_start, strides)."""
        d, n, _ = self._layout_descriptors(descriptors)
        t, size = ffi.new("cube_copy[]", max(n, 1)), ffi.new("uint64_t *")
        check(lib.cube_layout_apply(self._cp(), d, n, t, size))
        return size[0], [(t[i].handle.offset_start,
                          tuple(t[i].strides[j] for j in range(t[i].rank))) for i in range(n)]

    def empty_tensors(self, descriptors, *, stream=None):
        """Tensors sharing one allocation, each contiguous or pitched as its
        (shape, dtype[, LayoutStrategy]) asks (cube_empty_tensors)."""
        d, n, dtypes = self._layout_descriptors(descriptors)
        t = ffi.new("cube_copy[]", max(n, 1))
        check(lib.cube_empty_tensors(self._enter(stream), d, n, t))
        return self._batch(t, n, dtypes)

    def create_tensors(self, arrays, strategies=None, *, stream=None):
        """Tensors holding arrays, sharing one allocation (cube_create_tensors);
        strategies, one per array, default to OPTIMIZED."""
        arrays = [np.ascontiguousarray(a) for a in arrays]
        strategies = strategies or [LayoutStrategy.OPTIMIZED] * len(arrays)
        d, n, dtypes = self._layout_descriptors(
            (a.shape, a.dtype, s) for a, s in zip(arrays, strategies))
        data = ffi.new("void *[]", max(n, 1))
        keep = []
        for i, a in enumerate(arrays):
            p, _, k = _readable(a)
            data[i] = p
            keep.append(k)
        t = ffi.new("cube_copy[]", max(n, 1))
        check(lib.cube_create_tensors(self._enter(stream), d, data, n, t))
        return self._batch(t, n, dtypes)

    def _batch(self, t, n, dtypes):
        # One Buffer owns the allocation the batch shares; freeing it frees
        # every tensor, so the others only view it.
        tensors = []
        for i in range(n):
            one = ffi.new("cube_copy *", t[i])
            tensors.append(Tensor(self, one, dtypes[i], owner=tensors[0].buffer if i else None))
        return tensors

    # -- staging regions ------------------------------------------------------
    def region(self, nbytes):
        """A staging region of nbytes that this process and the daemon both
        map: region.view is a writable memoryview of it, region.numpy() an
        array over it."""
        p = ffi.new("cube_region **")
        check(lib.cube_region_create(self._cp(), nbytes, p))
        return Region(self, p[0])

    def _release_region(self, r):
        c = self._c if self._gen == _generation else None
        lib.pycube_region_release(c if c is not None else NULL, r)

    def write_region(self, buf, region, offset=0, *, stream=None):
        """Queues a write of buf from the region's bytes at offset; they are
        read when the write runs, so change them only after a sync."""
        check(lib.cube_write_region(self._enter(stream), buf._h, region._r, offset))

    def read_region(self, buf, region, offset=0, *, stream=None):
        """Reads buf into the region at offset, and waits for it."""
        check(lib.cube_read_region(self._enter(stream), buf._h, region._r, offset))

    # -- sharing ----------------------------------------------------------------
    def export(self, buf):
        """An unguessable token (str) for buf's allocation."""
        tok = ffi.new("char[33]")
        check(lib.cube_export(self._enter(None), buf._h, tok))
        return ffi.string(tok).decode()

    def import_buffer(self, token, read_only=False, *, stream=None):
        """A buffer of this session for exported memory."""
        h = ffi.new("cube_handle *")
        check(lib.cube_import(self._enter(stream), _enc(token), bool(read_only), h))
        b = Buffer(self, h)
        b.read_only = bool(read_only)
        return b

    # -- kernels --------------------------------------------------------------
    def kernel(self, source, entry):
        """Registers a kernel (docs/KERNELS.md) under a new kernel id."""
        k = ffi.new("uint64_t *")
        check(lib.cube_kernel_register(self._cp(), _enc(source), _enc(entry), k))
        return Kernel(self, k[0], entry)

    def compile_queued(self, *, stream=None):
        check(lib.cube_compile_queued(self._enter(stream)))

    # -- collectives (comms.py) ---------------------------------------------------
    def comm_init(self, devices):
        """Joins the group of devices (instance names, any order) and answers
        its Group; blocks until every member has joined."""
        return comms.comm_init(self, devices)

    def comm_mint(self):
        """A group id (str) whose rank 0 is this client's daemon, for
        comm_init_id on every rank."""
        return comms.comm_mint(self)

    def comm_init_id(self, id, rank, size):
        """Joins the minted group id as rank of size; its Group."""
        return comms.comm_init_id(self, id, rank, size)

    def send(self, src, peer, *, wait=_WAIT_NOW, stream=None):
        """src to the device peer, on the pair's own group (joined on first use)."""
        comms.send(self, src, peer, wait, stream)

    def recv(self, dst, peer, *, wait=_WAIT_NOW, stream=None):
        """dst from the device peer, on the pair's own group."""
        comms.recv(self, dst, peer, wait, stream)

    def sync_collective(self):
        """Waits for every AT_SYNC collective this client queued, then lets go
        of the buffers the binding kept for them."""
        comms.sync_collective(self)

    def can_access_peer(self, peer):
        return comms.can_access_peer(self, peer)

    def peer_address(self, buf):
        return comms.peer_address(self, buf)

    def comms(self):
        """Every communicator of the daemon's sessions, as CommInfo."""
        v, n = ffi.new("cube_comm_info **"), ffi.new("size_t *")
        check(lib.cube_daemon_comms(self._cp(), v, n))
        try:
            return [views.from_struct(views.CommInfo, v[0][i], members=tuple(
                m for m in (ffi.string(v[0][i].members[j]).decode("utf-8", "replace")
                            for j in range(8)) if m)) for i in range(n[0])]
        finally:
            lib.free(v[0])

    # -- profiling (profiling.py) -------------------------------------------------
    def profile(self, at_launch=False, *, stream=None):
        """Opens a profiling window on the stream (at its next launch with
        at_launch=True): a ProfileWindow, a context manager."""
        return profiling.ProfileWindow(self, stream, at_launch)

    # -- graphs (graphs.py) ---------------------------------------------------------
    def graph_prepare(self, *, stream=None):
        """Readies the stream for a capture; run the workload once after it."""
        check(lib.cube_graph_prepare(self._enter(stream)))

    def capture(self, *, stream=None):
        """A capture window on the stream: `with c.capture() as cap:`, then
        cap.graph."""
        return graphs.Capture(self, stream)

    def captures(self):
        """Every session's profiling windows, graphs and captures, as CaptureInfo."""
        return self._array(lib.cube_daemon_captures, "cube_capture_info", views.CaptureInfo)

    # -- inspecting and operating the daemon -------------------------------------
    def status(self):
        st = ffi.new("cube_status *")
        check(lib.cube_daemon_status(self._cp(), st))
        return views.from_struct(views.Status, st)

    def _array(self, fn, ctype, cls):
        v, n = ffi.new(ctype + " **"), ffi.new("size_t *")
        check(fn(self._cp(), v, n))
        try:
            return [views.from_struct(cls, v[0][i]) for i in range(n[0])]
        finally:
            lib.free(v[0])

    def sessions(self):
        return self._array(lib.cube_daemon_sessions, "cube_session_info", views.SessionInfo)

    def shares(self):
        """Each visible session's, then each tenant's, weight, class, cap, device
        time, and share of the last window beside the share owed (per mille)."""
        return self._array(lib.cube_daemon_shares, "cube_share_info", views.ShareInfo)

    def lower_share(self, class_name=None, weight=0):
        """Lowers this session's class ("latency", "normal", "batch") or weight,
        at or below what the operator gave it; a raise is a ServerError.Validation."""
        check(lib.cube_share_lower(self._cp(), _enc(class_name) if class_name else NULL,
                                   weight))

    def streams(self):
        return self._array(lib.cube_daemon_streams, "cube_stream_info", views.StreamInfo)

    def kernels(self):
        return self._array(lib.cube_daemon_kernels, "cube_kernel_info", views.KernelInfo)

    def cache_artifacts(self):
        """The artifacts the kernel cache directory holds, live or not (to
        root and the daemon's user; anyone else gets none)."""
        return self._array(lib.cube_daemon_cache_artifacts, "cube_cache_artifact",
                           views.CacheArtifact)

    def kernel_cache(self):
        """The disk cache: its size and limit, and what was evicted."""
        st = ffi.new("cube_kernel_cache *")
        check(lib.cube_daemon_kernel_cache(self._cp(), st))
        return views.kernel_cache(st)

    def failures(self):
        v, n = ffi.new("cube_failure_info **"), ffi.new("size_t *")
        check(lib.cube_daemon_failures(self._cp(), v, n))
        try:
            return [views.FailureInfo(id=v[0][i].id, session=v[0][i].session,
                                      report=errors.from_node(v[0][i].report)
                                      if v[0][i].report != NULL else None)
                    for i in range(n[0])]
        finally:
            lib.cube_failures_free(v[0], n[0])

    def metrics(self):
        """The daemon's figures in the Prometheus text format."""
        t = ffi.new("char **")
        check(lib.cube_daemon_metrics(self._cp(), t))
        try:
            return ffi.string(t[0]).decode()
        finally:
            lib.free(t[0])

    def drain(self):
        check(lib.cube_daemon_drain(self._cp()))

    def kill_session(self, session):
        check(lib.cube_daemon_kill_session(self._cp(), session))

    def debug_inject(self, site, kind, reason="", size=0):
        """Fault injection (a daemon started with --enable-fault-injection).
        kind: an error class of the taxonomy (IoError.OutOfMemory, ...) or its
        cube_error_kind value."""
        kind = getattr(kind, "kind", kind)
        check(lib.cube_debug_inject(self._cp(), int(site), int(kind), _enc(reason or ""), size))

    # -- asyncio ------------------------------------------------------------------
    async def run(self, fn, *args, **kwargs):
        """Runs a blocking call of this binding in a worker thread (the GIL is
        released while it waits on the daemon), in this context: a
        `with stream:` block or a stream= argument still names its stream."""
        return await asyncio.to_thread(fn, *args, **kwargs)


def _handles(buffers):
    if isinstance(buffers, Buffer):
        buffers = (buffers,)
    n = len(buffers)
    if n == 0:
        return NULL, 0
    hs = ffi.new("cube_handle[]", n)
    for i, b in enumerate(buffers):
        hs[i] = b._h[0]
    return hs, n


class Stream:
    """One ordered queue of work of a client. Every call made through it (or
    with stream=it, or inside `with it:`) runs on it, from whatever thread or
    coroutine: the binding names the stream for each call it makes."""

    __slots__ = ("client", "id", "_tokens")

    def __init__(self, client, sid):
        self.client = client
        self.id = sid
        self._tokens = []

    def __repr__(self):
        return f"<cubeclient.Stream {self.id:#x}>"

    def __enter__(self):
        self._tokens.append(_current_stream.set(self))
        return self

    def __exit__(self, *exc):
        _current_stream.reset(self._tokens.pop())

    def empty(self, nbytes):
        return self.client.empty(nbytes, stream=self)

    def create(self, data):
        return self.client.create(data, stream=self)

    def write(self, buf, data):
        self.client.write(buf, data, stream=self)

    def read(self, buf):
        return self.client.read(buf, stream=self)

    def read_into(self, buf, out):
        return self.client.read_into(buf, out, stream=self)

    def to_numpy(self, buf, dtype=None, shape=None):
        return self.client.to_numpy(buf, dtype, shape, stream=self)

    def sync(self, buffers=()):
        self.client.sync(buffers, stream=self)

    def check(self, buffers=()):
        self.client.check(buffers, stream=self)

    def flush(self):
        self.client.flush(stream=self)

    def launch(self, kernel, *args, **kwargs):
        """kernel.launch(...) on this stream; kernel may be a prepared Launch."""
        if isinstance(kernel, Launch):
            return kernel(stream=self)
        return kernel.launch(*args, stream=self, **kwargs)

    def write_region(self, buf, region, offset=0):
        self.client.write_region(buf, region, offset, stream=self)

    def read_region(self, buf, region, offset=0):
        self.client.read_region(buf, region, offset, stream=self)

    def memory_report(self):
        return self.client.memory_report(self)

    def profile(self, at_launch=False):
        return self.client.profile(at_launch, stream=self)

    def graph_prepare(self):
        self.client.graph_prepare(stream=self)

    def capture(self):
        return self.client.capture(stream=self)

    # The blocking calls, for a coroutine: each runs in a worker thread.
    async def sync_async(self, buffers=()):
        await asyncio.to_thread(self.sync, buffers)

    async def read_async(self, buf):
        return await asyncio.to_thread(self.read, buf)

    async def to_numpy_async(self, buf, dtype=None, shape=None):
        return await asyncio.to_thread(self.to_numpy, buf, dtype, shape)

    async def read_into_async(self, buf, out):
        return await asyncio.to_thread(self.read_into, buf, out)


class Buffer:
    """A handle: a byte range of one allocation of the daemon. Freed with
    free(), at the end of a `with` block, or when garbage collected; a slice
    (buf[a:b], buf.slice()) shares its allocation and frees nothing."""

    __slots__ = ("client", "_h", "_owner", "_freed", "dtype", "shape", "read_only",
                 "__weakref__")

    def __init__(self, client, h, owner=None):
        self.client = client
        self._h = h
        self._owner = owner
        self._freed = False
        self.dtype = self.shape = None
        self.read_only = owner.read_only if owner is not None else False

    @property
    def handle(self):
        """The cube_handle fields, as a dict."""
        h = self._h
        return dict(service=h.service, memory=h.memory, stream=h.stream,
                    offset_start=h.offset_start, offset_end=h.offset_end, size=h.size)

    @property
    def nbytes(self):
        return lib.cube_handle_len(self._h)

    def __len__(self):
        return lib.cube_handle_len(self._h)

    def __repr__(self):
        return f"<cubeclient.Buffer memory={self._h.memory:#x} {self.nbytes} bytes>"

    def slice(self, offset_start, offset_end=0):
        """A narrower view: offsets add to this handle's own."""
        h = ffi.new("cube_handle *", lib.cube_handle_slice(self._h, offset_start, offset_end))
        return Buffer(self.client, h, owner=self._owner or self)

    def __getitem__(self, s):
        if not isinstance(s, slice) or s.step not in (None, 1):
            raise TypeError("a buffer slices by byte ranges, buf[start:stop]")
        start, stop, _ = s.indices(self.nbytes)
        return self.slice(start, self.nbytes - max(stop, start))

    def write(self, data, *, stream=None):
        self.client.write(self, data, stream=stream)

    def read(self, *, stream=None):
        return self.client.read(self, stream=stream)

    def read_into(self, out, *, stream=None):
        return self.client.read_into(self, out, stream=stream)

    def to_numpy(self, dtype=None, shape=None, *, stream=None):
        return self.client.to_numpy(self, dtype, shape, stream=stream)

    def export(self):
        return self.client.export(self)

    def free(self, *, stream=None):
        """Releases the allocation once no queued work uses it. Idempotent;
        a slice frees nothing."""
        if self._owner is not None or self._freed:
            return
        self._freed = True
        c = self.client._open()
        if c is not None:
            lib.cube_stream_set(self.client._sid(stream))
            check(lib.cube_free(c, self._h))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def __del__(self):
        if self._owner is None and not self._freed:
            self._freed = True
            try:
                c = self.client._open()
                if c is not None:
                    lib.cube_error_free(lib.cube_free(c, self._h))
            except Exception:
                pass


class Tensor:
    """A pitched row-major tensor (cube_empty_tensor) and its strided copies."""

    def __init__(self, client, t, dtype, owner=None):
        self.client = client
        self._t = t
        self.dtype = np.dtype(dtype) if np is not None else dtype
        self.shape = tuple(t.shape[i] for i in range(t.rank))
        self.strides = tuple(t.strides[i] for i in range(t.rank))
        h = ffi.new("cube_handle *", t.handle)
        self.buffer = Buffer(client, h, owner)

    def write(self, data, *, stream=None):
        p, n, keep = _readable(data)
        check(lib.cube_write_strided(self.client._enter(stream), self._t, p, n))

    def read(self, *, stream=None):
        out = np.empty(self.shape, self.dtype)
        p = _writable(out)
        check(lib.cube_read_strided(self.client._enter(stream), self._t, p, len(p)))
        return out


class Region:
    """A staging region both this process and the daemon map.

    view: a writable memoryview of its bytes; numpy(dtype, shape, offset): an
    array over them, zero copy. The mapping lives as long as the region or
    any view or array made from it; close() gives it back once none is left.
    """

    def __init__(self, client, r):
        self.client = client
        self._r = r
        self.id = r.id
        self.size = r.size
        release = client._release_region
        self._p = ffi.gc(ffi.cast("char *", r.data), lambda p, r=r: release(r))
        self.view = memoryview(ffi.buffer(self._p, r.size))

    def __repr__(self):
        return f"<cubeclient.Region {self.id} {self.size} bytes>"

    def __len__(self):
        return self.size

    def numpy(self, dtype="uint8", shape=None, offset=0):
        if np is None:
            raise ImportError("Region.numpy needs numpy")
        dtype = np.dtype(dtype)
        count = -1 if shape is None else int(np.prod(shape))
        a = np.frombuffer(self.view, dtype, count, offset)
        return a.reshape(shape) if shape is not None else a

    def write_to(self, buf, offset=0, *, stream=None):
        self.client.write_region(buf, self, offset, stream=stream)

    def read_from(self, buf, offset=0, *, stream=None):
        self.client.read_region(buf, self, offset, stream=stream)

    def close(self):
        try:
            self.view.release()
        except BufferError:
            pass        # arrays over it remain: they keep the mapping alive
        self.view = None
        self._p = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Kernel:
    """A registered kernel: launch(...) or prepare(...) then call."""

    def __init__(self, client, kid, entry):
        self.client = client
        self.id = kid
        self.entry = entry

    def __repr__(self):
        return f"<cubeclient.Kernel {self.entry} {self.id}>"

    def prepare(self, count, dim=(1, 1, 1), buffers=(), *, scalars=(), lengths=None,
                tensors=(), io=None, mode=LaunchMode.EXECUTE, tensor_maps=()):
        """A Launch built once and launched any number of times by calling it.

        count: cubes (int or up to three ints), or a Buffer whose first 12
        bytes hold them (a dynamic count). dim: units per cube. buffers: bound
        in parameter order. scalars: typed values (cubeclient.f32 ... u64, or
        numpy scalars), laid out in the info words by type as KERNELS.md says.
        lengths: each buffer's length in elements, BUFFER_LEN(b); by default
        the buffers' element counts when every buffer knows its dtype (it was
        created from a numpy array), else none; [] for none. tensors: (shape,
        strides) pairs. io: a BufferIO per buffer, or None. tensor_maps:
        TensorMaps, bound after the buffers to the kernel's TENSOR_MAP
        parameters.
        """
        return Launch(self, count, dim, buffers, scalars, lengths, tensors, io, mode,
                      tensor_maps)

    def launch(self, count, dim=(1, 1, 1), buffers=(), *, scalars=(), lengths=None,
               tensors=(), io=None, mode=LaunchMode.EXECUTE, stream=None, tensor_maps=()):
        """Launches on the stream (see prepare() for the arguments). A launch
        has no answer: what stops it lands on the buffers it was to write, and
        the next read, sync or check of them raises it."""
        Launch(self, count, dim, buffers, scalars, lengths, tensors, io, mode,
               tensor_maps)(stream=stream)


class Launch:
    """A launch whose cube_launch is built once; calling it launches it."""

    __slots__ = ("client", "kernel", "buffers", "_l", "_keep", "_info")

    def __init__(self, kernel, count, dim, buffers, scalars, lengths, tensors, io, mode,
                 tensor_maps=()):
        client = kernel.client
        self.client = client
        self.kernel = kernel
        if isinstance(buffers, Buffer):
            buffers = (buffers,)
        self.buffers = tuple(buffers)
        l = ffi.new("cube_launch *")
        keep = []
        l.kernel = kernel.id
        if isinstance(count, Buffer):
            l.dynamic_count = count._h
            keep.append(count)
            l.cube_count = (0, 0, 0)
        else:
            l.cube_count = _dims(count, "count")
        l.cube_dim = _dims(dim, "dim")
        n = len(self.buffers)
        if n:
            hs, _ = _handles(self.buffers)
            l.buffers = hs
            keep.append(hs)
        l.n_buffers = n
        if io is not None:
            if len(io) != n:
                raise ValueError("io declares one BufferIO per buffer")
            a = ffi.new("cube_buffer_io[]", [int(x) for x in io])
            l.io = a
            keep.append(a)
        if tensor_maps:
            maps = ffi.new("cube_tensor_map[]", len(tensor_maps))
            for i, t in enumerate(tensor_maps):
                t._fill(maps[i])
                keep.append(t.buffer)
            l.tensor_maps = maps
            l.n_tensor_maps = len(tensor_maps)
            keep.append(maps)
        lengths = self._lengths(lengths)
        l.mode = int(mode)
        self._l = l
        self._keep = keep
        self._info = None
        self._fill(scalars, lengths, tensors)

    def _lengths(self, lengths):
        if lengths is not None:
            return lengths
        if self.buffers and all(b.dtype is not None for b in self.buffers):
            return [b.nbytes // b.dtype.itemsize for b in self.buffers]
        return ()

    def _fill(self, scalars, lengths, tensors):
        """Lays the info words into the launch's one cube_info, emptied
        first with cube_info_reset, so a rebinding allocates nothing new."""
        info = self._info
        if info is not None:
            lib.cube_info_reset(info)
        if not (scalars or lengths or tensors):
            self._l.info = NULL
            return
        if info is None:
            info = ffi.gc(lib.cube_info_new(), lib.cube_info_free)
            if info == NULL:
                raise MemoryError
            self._info = info
        for v in scalars:
            g, v = _scalar_group(v)
            if _INFO_ADD[g](info, v):
                raise MemoryError
        for v in lengths:
            if lib.cube_info_buffer_len(info, int(v)):
                raise MemoryError
        for shape, strides in tensors:
            if len(shape) != len(strides):
                raise ValueError("a tensor's shape and strides have the same rank")
            if lib.cube_info_tensor(info, len(shape), [int(x) for x in shape],
                                    [int(x) for x in strides]):
                raise MemoryError
        self._l.info = info

    def rebind(self, *, scalars=(), lengths=None, tensors=()):
        """Replaces the launch's scalars, lengths and tensors (as prepare()
        takes them) for its next call, reusing its info: a loop of launches
        that differ only in their scalars builds one Launch."""
        self._fill(scalars, self._lengths(lengths), tensors)

    def __call__(self, *, stream=None):
        client = self.client
        c = client._c
        if c is None or client._gen != _generation:
            client._cp()
        if stream is None:
            stream = _current_stream.get()
        e = _pycube_launch(c, 0 if stream is None else client._sid(stream), self._l)
        if e:
            raise errors.take(e)

    launch = __call__

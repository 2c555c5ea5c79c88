"""The error taxonomy as exceptions.

Every node of a cube_error tree becomes one exception object. The classes
follow the reference's enums: a family class per enum (ServerError,
LaunchError, CompilationError, ResourceLimitError, IoError, ProfileError,
DevicePoison), all under CubeError, and one class per variant, a subclass of
its family, reached as an attribute of it:

    except cubeclient.IoError.OutOfMemory as e: e.size
    except cubeclient.ServerError.Several as e: e.errors
    except cubeclient.LaunchError.CompilationError as e: e.source

Variant names that are unique in the taxonomy are also module attributes
(Unwritten, Several, Skipped, TornDown, ForeignHandle, ...). A variant that
wraps another (ServerError.Launch, LaunchError.TooManyResources, ...) has it
as ``source`` (also set as ``__cause__``, so a traceback shows the chain);
Unwritten has it as ``root`` (and ``source``), with ``failure``, ``claimed``
and ``chain`` (a tuple of str); Several has ``errors``, a list. ``str(e)`` (and ``e.text``) is
cube_error_message of the node: the taxonomy's own text, causes included.

The predicates are properties, exactly as the C library (and the reference)
answer them for that node: ``is_refusal``, ``is_device_poisoned`` and
``may_succeed_after_reclaim``.
"""
import enum

from ._cube import ffi, lib

__all__ = ["CubeError", "ServerError", "LaunchError", "CompilationError",
           "ResourceLimitError", "IoError", "ProfileError", "DevicePoison", "Collective",
           "ClientError", "ForkedClient", "ClientClosed"]


class Collective(enum.IntEnum):
    """The collective a NoDeviceTransport error names (cube_collective)."""
    COMM_INIT = lib.CUBE_COLLECTIVE_COMM_INIT
    ALL_REDUCE = lib.CUBE_COLLECTIVE_ALL_REDUCE
    ALL_GATHER = lib.CUBE_COLLECTIVE_ALL_GATHER
    REDUCE_SCATTER = lib.CUBE_COLLECTIVE_REDUCE_SCATTER
    BROADCAST = lib.CUBE_COLLECTIVE_BROADCAST
    ALL_TO_ALL = lib.CUBE_COLLECTIVE_ALL_TO_ALL
    SEND = lib.CUBE_COLLECTIVE_SEND
    RECV = lib.CUBE_COLLECTIVE_RECV
    SYNC_COLLECTIVE = lib.CUBE_COLLECTIVE_SYNC_COLLECTIVE
    PEER_ACCESS = lib.CUBE_COLLECTIVE_PEER_ACCESS


class CubeError(Exception):
    """A node of the error taxonomy. ``kind`` is its cube_error_kind value,
    ``family`` and ``variant`` the names the reference spells."""
    family = None
    variant = None
    kind = None
    fields = ()

    def __init__(self, text, *, is_refusal=False, is_device_poisoned=False,
                 may_succeed_after_reclaim=False, **fields):
        super().__init__(text)
        self.text = text
        self._refusal = is_refusal
        self._poisoned = is_device_poisoned
        self._reclaim = may_succeed_after_reclaim
        self.source = None
        for k, v in fields.items():
            setattr(self, k, v)
        if self.source is not None:
            self.__cause__ = self.source

    @property
    def is_refusal(self):
        return self._refusal

    @property
    def is_device_poisoned(self):
        return self._poisoned

    @property
    def may_succeed_after_reclaim(self):
        return self._reclaim

    def __str__(self):
        return self.text

    def __repr__(self):
        parts = ", ".join(f"{f}={getattr(self, f, None)!r}" for f in self.fields)
        return f"{self.family}.{self.variant}({parts})"

    def walk(self):
        """This node and every node under it, depth first."""
        yield self
        if self.source is not None:
            yield from self.source.walk()
        for m in getattr(self, "errors", ()) or ():
            yield from m.walk()


class ServerError(CubeError):
    family = "ServerError"


class LaunchError(CubeError):
    family = "LaunchError"


class CompilationError(CubeError):
    family = "CompilationError"


class ResourceLimitError(CubeError):
    family = "ResourceLimitError"


class IoError(CubeError):
    family = "IoError"


class ProfileError(CubeError):
    family = "ProfileError"


class DevicePoison(CubeError):
    family = "DevicePoison"
    variant = "DevicePoison"
    kind = lib.CUBE_DEVICE_POISON
    fields = ("reason",)


class ClientError(Exception):
    """A misuse the binding catches itself, before any call into the library."""


class ForkedClient(ClientError):
    """A client used in a process forked after it connected: a connection
    belongs to the process that made it (cube.h), so the child connects
    afresh."""


class ClientClosed(ClientError):
    """A client used after close()."""


# kind constant name, family class, variant name, fields (in the order the
# reference declares them). "source" is the wrapped node; "root" for Unwritten.
_SPEC = [
    ("CUBE_SERVER_VALIDATION", ServerError, "Validation", ("message",)),
    ("CUBE_SERVER_GENERIC", ServerError, "Generic", ("reason",)),
    ("CUBE_SERVER_NO_DEVICE_TRANSPORT", ServerError, "NoDeviceTransport", ("operation",)),
    ("CUBE_SERVER_FOREIGN_HANDLE", ServerError, "ForeignHandle", ("handle", "client")),
    ("CUBE_SERVER_SERVICE_MISMATCH", ServerError, "ServiceMismatch", ("client", "requested")),
    ("CUBE_SERVER_DEVICE_POISONED", ServerError, "DevicePoisoned", ("source",)),
    ("CUBE_SERVER_LAUNCH", ServerError, "Launch", ("source",)),
    ("CUBE_SERVER_IO", ServerError, "Io", ("source",)),
    ("CUBE_SERVER_TORN_DOWN", ServerError, "TornDown", ()),
    ("CUBE_SERVER_UNWRITTEN", ServerError, "Unwritten", ("failure", "claimed", "chain", "root")),
    ("CUBE_SERVER_SKIPPED", ServerError, "Skipped", ()),
    ("CUBE_SERVER_SEVERAL", ServerError, "Several", ("errors",)),
    ("CUBE_LAUNCH_COMPILATION_ERROR", LaunchError, "CompilationError", ("source",)),
    ("CUBE_LAUNCH_OUT_OF_MEMORY", LaunchError, "OutOfMemory", ("reason",)),
    ("CUBE_LAUNCH_TOO_MANY_RESOURCES", LaunchError, "TooManyResources", ("source",)),
    ("CUBE_LAUNCH_DEVICE_POISONED", LaunchError, "DevicePoisoned", ("source",)),
    ("CUBE_LAUNCH_UNKNOWN", LaunchError, "Unknown", ("reason",)),
    ("CUBE_COMPILATION_UNSUPPORTED_INSTRUCTION", CompilationError, "UnsupportedInstruction",
     ("reason",)),
    ("CUBE_COMPILATION_GENERIC", CompilationError, "Generic", ("reason",)),
    ("CUBE_COMPILATION_VALIDATION", CompilationError, "Validation", ("reason",)),
    ("CUBE_COMPILATION_EXPANSION_PANICKED", CompilationError, "ExpansionPanicked",
     ("kernel", "message")),
    ("CUBE_COMPILATION_DEVICE_POISONED", CompilationError, "DevicePoisoned", ("source",)),
    ("CUBE_RESOURCE_SHARED_MEMORY", ResourceLimitError, "SharedMemory", ("requested", "max")),
    ("CUBE_RESOURCE_UNITS", ResourceLimitError, "Units", ("requested", "max")),
    ("CUBE_RESOURCE_CUBE_DIM", ResourceLimitError, "CubeDim", ("requested", "max")),
    ("CUBE_IO_BUFFER_TOO_BIG", IoError, "BufferTooBig", ("size",)),
    ("CUBE_IO_OUT_OF_MEMORY", IoError, "OutOfMemory", ("size",)),
    ("CUBE_IO_PAGE_UPDATE_FORBIDDEN", IoError, "PageUpdateForbidden", ("size",)),
    ("CUBE_IO_PAGE_SIZES_EXHAUSTED", IoError, "PageSizesExhausted", ("size",)),
    ("CUBE_IO_UNSUPPORTED_STRIDES", IoError, "UnsupportedStrides", ()),
    ("CUBE_IO_NOT_FOUND", IoError, "NotFound", ("reason",)),
    ("CUBE_IO_STORAGE_HANDLE_NOT_FOUND", IoError, "StorageHandleNotFound", ("reason",)),
    ("CUBE_IO_STORAGE_MAPPING_FAILED", IoError, "StorageMappingFailed", ("size", "source")),
    ("CUBE_IO_DEVICE_POISONED", IoError, "DevicePoisoned", ("source",)),
    ("CUBE_IO_UNKNOWN", IoError, "Unknown", ("description",)),
    ("CUBE_IO_UNSUPPORTED_IO_OPERATION", IoError, "UnsupportedIoOperation", ()),
    ("CUBE_PROFILE_UNKNOWN", ProfileError, "Unknown", ("reason",)),
    ("CUBE_PROFILE_NOT_REGISTERED", ProfileError, "NotRegistered", ()),
    ("CUBE_PROFILE_NOT_MEASURED", ProfileError, "NotMeasured", ()),
    ("CUBE_PROFILE_LAUNCH", ProfileError, "Launch", ("source",)),
    ("CUBE_PROFILE_SERVER", ProfileError, "Server", ("source",)),
]

#: cube_error_kind value -> class
KINDS = {lib.CUBE_DEVICE_POISON: DevicePoison}
_FIELDS = {lib.CUBE_DEVICE_POISON: DevicePoison.fields}
_names = {}
for _const, _family, _variant, _fields in _SPEC:
    _kind = getattr(lib, _const)
    _cls = type(_variant, (_family,), {
        "variant": _variant, "kind": _kind, "fields": _fields,
        "__qualname__": f"{_family.__name__}.{_variant}",
        "__module__": __name__,
        "__doc__": f"{_family.__name__}::{_variant}"
                   + (f" {{{', '.join(_fields)}}}" if _fields else ""),
    })
    setattr(_family, _variant, _cls)
    KINDS[_kind] = _cls
    _FIELDS[_kind] = _fields
    _names.setdefault(_variant, []).append(_cls)
# Unambiguous variant names at module level too.
for _variant, _classes in _names.items():
    if len(_classes) == 1 and _variant not in globals():
        globals()[_variant] = _classes[0]
        __all__.append(_variant)
del _const, _family, _variant, _fields, _kind, _cls, _names, _classes


def _str(p):
    return ffi.string(p).decode("utf-8", "replace") if p != ffi.NULL else None


def _dim(fn, e):
    d = ffi.new("uint32_t[3]")
    return tuple(d) if fn(e, d) else None


def from_node(e):
    """The exception for one node of a cube_error tree (not taking ownership)."""
    kind = lib.cube_error_kind_of(e)
    cls = KINDS.get(kind)
    fields = {}
    for f in _FIELDS.get(kind, ()):
        if f in ("message", "reason", "description"):
            v = _str(lib.cube_error_reason(e)) if f != "message" or kind != \
                lib.CUBE_COMPILATION_EXPANSION_PANICKED else _str(lib.cube_error_panic_message(e))
        elif f == "kernel":
            v = _str(lib.cube_error_kernel(e))
        elif f == "handle":
            v = _str(lib.cube_error_handle_service(e))
        elif f == "client":
            v = _str(lib.cube_error_client_service(e))
        elif f == "requested":
            v = (_dim(lib.cube_error_requested_dim, e) if kind == lib.CUBE_RESOURCE_CUBE_DIM
                 else _str(lib.cube_error_requested_service(e))
                 if kind == lib.CUBE_SERVER_SERVICE_MISMATCH else lib.cube_error_requested(e))
        elif f == "max":
            v = (_dim(lib.cube_error_max_dim, e) if kind == lib.CUBE_RESOURCE_CUBE_DIM
                 else lib.cube_error_max(e))
        elif f == "size":
            v = lib.cube_error_size(e)
        elif f == "operation":
            op = lib.cube_error_operation(e)
            v = Collective(op) if op >= 0 else None
        elif f == "failure":
            v = lib.cube_error_failure(e)
        elif f == "claimed":
            v = lib.cube_error_claimed(e)
        elif f == "chain":
            v = tuple(_str(lib.cube_error_chain_at(e, i))
                      for i in range(lib.cube_error_chain_len(e)))
        elif f in ("source", "root"):
            continue
        elif f == "errors":
            v = [from_node(lib.cube_error_at(e, i)) for i in range(lib.cube_error_count(e))]
        fields[f] = v
    src = lib.cube_error_source(e)
    if src != ffi.NULL:
        fields["source"] = from_node(src)
        if kind == lib.CUBE_SERVER_UNWRITTEN:
            fields["root"] = fields["source"]
    if cls is None:     # a kind this binding does not know: keep what it can
        cls = CubeError
    return cls(_str(lib.cube_error_message(e)),
               is_refusal=bool(lib.cube_error_is_refusal(e)),
               is_device_poisoned=bool(lib.cube_error_is_device_poisoned(e)),
               may_succeed_after_reclaim=bool(lib.cube_error_may_succeed_after_reclaim(e)),
               **fields)


def take(e):
    """Converts and frees an owned cube_error *; None for NULL."""
    if e == ffi.NULL:
        return None
    try:
        return from_node(e)
    finally:
        lib.cube_error_free(e)


def check(e):
    """Raises the exception for an owned cube_error *, freeing it; returns on NULL."""
    if e != ffi.NULL:
        raise take(e)

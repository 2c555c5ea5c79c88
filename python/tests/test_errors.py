"""Every error the daemon produces surfaces as its class, with its fields."""
import numpy as np
import pytest

import cubeclient as cube
from cubeclient import (ServerError, LaunchError, CompilationError, ResourceLimitError,
                        IoError, DevicePoison, FaultSite)

INC = ("KERNEL void inc(float *x, INFO) { uint64_t i = ABSOLUTE_POS;"
       " if (i < BUFFER_LEN(0)) x[i] += 1; }")


def unwritten(excinfo):
    """The one Unwritten of a Several, checked on the way."""
    e = excinfo.value
    assert type(e) is ServerError.Several
    assert len(e.errors) == 1
    u = e.errors[0]
    assert type(u) is ServerError.Unwritten
    assert u.failure > 0 and u.claimed >= 1 and isinstance(u.chain, tuple)
    assert u.root is u.source and e.__cause__ is None
    assert str(u) in str(e) and str(u.root) in str(u)
    return u


def path(e):
    out = []
    while e is not None:
        out.append(type(e))
        e = e.source
    return out


def test_hierarchy():
    assert issubclass(ServerError.Several, ServerError) and issubclass(ServerError, cube.CubeError)
    assert issubclass(IoError.OutOfMemory, IoError) and issubclass(IoError, Exception)
    assert LaunchError.OutOfMemory is not IoError.OutOfMemory
    assert cube.Unwritten is ServerError.Unwritten and cube.Several is ServerError.Several
    assert cube.CubeDim is ResourceLimitError.CubeDim
    assert not hasattr(cube, "OutOfMemory")     # ambiguous: reach it through its family
    assert ServerError.Validation.fields == ("message",)
    assert IoError.StorageMappingFailed.fields == ("size", "source")


# site, injected kind, reason, size, the path from the Unwritten's root, its fields
INJECTED = [
    (FaultSite.ALLOC, IoError.OutOfMemory, [ServerError.Io, IoError.OutOfMemory], {"size": 7}),
    (FaultSite.ALLOC, IoError.BufferTooBig, [ServerError.Io, IoError.BufferTooBig], {"size": 7}),
    (FaultSite.ALLOC, IoError.PageSizesExhausted, [ServerError.Io, IoError.PageSizesExhausted],
     {"size": 7}),
    (FaultSite.ALLOC, IoError.PageUpdateForbidden, [ServerError.Io, IoError.PageUpdateForbidden],
     {"size": 7}),
    (FaultSite.ALLOC, IoError.Unknown, [ServerError.Io, IoError.Unknown], {"description": "why"}),
    (FaultSite.ALLOC, ServerError.Generic, [ServerError.Generic], {"reason": "why"}),
    (FaultSite.COPY, IoError.Unknown, [ServerError.Io, IoError.Unknown], {"description": "why"}),
    (FaultSite.COPY, IoError.OutOfMemory, [ServerError.Io, IoError.OutOfMemory], {"size": 7}),
    (FaultSite.LAUNCH, LaunchError.Unknown, [ServerError.Launch, LaunchError.Unknown],
     {"reason": "why"}),
    (FaultSite.LAUNCH, LaunchError.OutOfMemory, [ServerError.Launch, LaunchError.OutOfMemory],
     {"reason": "why"}),
    (FaultSite.LAUNCH, ServerError.Validation, [ServerError.Validation], {"message": "why"}),
    (FaultSite.COMPILE, CompilationError.Generic,
     [ServerError.Launch, LaunchError.CompilationError, CompilationError.Generic],
     {"reason": "why"}),
    (FaultSite.COMPILE, CompilationError.UnsupportedInstruction,
     [ServerError.Launch, LaunchError.CompilationError, CompilationError.UnsupportedInstruction],
     {"reason": "why"}),
    (FaultSite.COMPILE, CompilationError.Validation,
     [ServerError.Launch, LaunchError.CompilationError, CompilationError.Validation],
     {"reason": "why"}),
    (FaultSite.COMPILE, CompilationError.ExpansionPanicked,
     [ServerError.Launch, LaunchError.CompilationError, CompilationError.ExpansionPanicked],
     {"kernel": "why", "message": "why"}),
    (FaultSite.COMPILE, LaunchError.Unknown, [ServerError.Launch, LaunchError.Unknown],
     {"reason": "why"}),
    (FaultSite.COMPILE, IoError.Unknown, [ServerError.Io, IoError.Unknown],
     {"description": "why"}),
    (FaultSite.TEARDOWN, None, [ServerError.TornDown], {}),
]


@pytest.mark.parametrize("site,kind,expect,fields", INJECTED,
                         ids=[f"{s.name}-{k.__qualname__ if k else 'none'}"
                              for s, k, _, _ in INJECTED])
def test_injected(client, site, kind, expect, fields):
    x = client.create(np.zeros(4, np.float32))
    client.sync()
    k = client.kernel(INC + f"/* {site.name} {kind} */", "inc")     # a fresh compile each
    client.debug_inject(site, kind or 0, "why", 7)
    with pytest.raises(ServerError.Several) as ei:
        if site == FaultSite.ALLOC:
            y = client.empty(64)
            client.sync([y])
        elif site == FaultSite.COPY:
            client.write(x, np.ones(4, np.float32))
            client.sync([x])
        else:
            k.launch(1, 4, [x])
            client.sync([x])
    u = unwritten(ei)
    assert path(u.root) == expect
    leaf = path(u.root)[-1]
    node = u.root
    while node.source is not None:
        node = node.source
    assert type(node) is leaf
    for f, v in fields.items():
        assert getattr(node, f) == v
    refusal = leaf in (CompilationError.Generic, CompilationError.UnsupportedInstruction,
                       CompilationError.Validation)
    assert ei.value.is_refusal == refusal == u.is_refusal == u.root.is_refusal
    assert not ei.value.is_device_poisoned
    # IoError::may_succeed_after_reclaim: all but BufferTooBig and PageUpdateForbidden
    assert node.may_succeed_after_reclaim == (
        issubclass(leaf, IoError) and leaf not in (IoError.BufferTooBig,
                                                   IoError.PageUpdateForbidden))
    # the failure is in the daemon's store, with the same report
    live = {f.id: f for f in client.failures()}
    assert u.failure in live and type(live[u.failure].report) is ServerError.Unwritten
    # a later write repairs the bytes
    client.write(x, np.zeros(4, np.float32))
    client.sync([x])


@pytest.mark.parametrize("dim,cls,fields", [
    ((2000, 1, 1), ResourceLimitError.CubeDim, {"requested": (2000, 1, 1),
                                                "max": (1024, 1024, 64)}),
    ((32, 32, 2), ResourceLimitError.Units, {"requested": 2048, "max": 1024}),
])
def test_resource_refusals(client, dim, cls, fields):
    x = client.create(np.zeros(4, np.float32))
    client.kernel(INC, "inc").launch(1, dim, [x])
    with pytest.raises(ServerError.Several) as ei:
        x.read()
    u = unwritten(ei)
    assert path(u.root) == [ServerError.Launch, LaunchError.TooManyResources, cls]
    leaf = u.root.source.source
    for f, v in fields.items():
        assert getattr(leaf, f) == v
    assert ei.value.is_refusal and not ei.value.is_device_poisoned


def test_shared_memory_refusal(client):
    src = ("KERNEL void big(float *x, INFO) { SHARED float s[1 << 20]; s[UNIT_POS] = 1;"
           " x[0] = s[0]; }")
    x = client.create(np.zeros(4, np.float32))
    client.kernel(src, "big").launch(1, 1, [x])
    with pytest.raises(ServerError.Several) as ei:
        x.read()
    leaf = unwritten(ei).root.source.source
    assert type(leaf) is ResourceLimitError.SharedMemory
    assert leaf.requested >= 4 << 20 and leaf.max == client.properties.max_shared_memory_size
    assert ei.value.is_refusal


def test_compiler_rejects(client):
    x = client.create(np.zeros(4, np.float32))
    client.kernel("KERNEL void bad(float *x, INFO) { x[0] = nope; }", "bad").launch(1, 1, [x])
    with pytest.raises(ServerError.Several) as ei:
        x.read()
    leaf = unwritten(ei).root.source.source
    assert type(leaf) is CompilationError.Generic and "nope" in leaf.reason
    assert ei.value.is_refusal


def test_dialect_validation(client):
    x = client.create(np.zeros(4, np.float32))
    client.kernel("void nothing(void) {}", "absent").launch(1, 1, [x])
    with pytest.raises(ServerError.Several) as ei:
        x.read()
    assert type(unwritten(ei).root.source.source) is CompilationError.Validation


def test_wrong_buffer_count_is_validation(client):
    x = client.create(np.zeros(4, np.float32))
    y = client.create(np.zeros(4, np.float32))
    client.kernel(INC, "inc").launch(1, 1, [x, y])
    with pytest.raises(ServerError.Several) as ei:
        x.read()
    root = unwritten(ei).root
    assert type(root) is ServerError.Validation and root.message
    assert not ei.value.is_refusal


def test_skipped_chain_and_several(client):
    k = client.kernel(INC, "inc")
    a = client.create(np.zeros(4, np.float32))
    b = client.create(np.zeros(4, np.float32))
    client.sync()
    client.debug_inject(FaultSite.LAUNCH, LaunchError.Unknown, "first", 0)
    k.launch(1, 4, [a])                                    # fails: a carries it
    copy = client.kernel("KERNEL void cp(const float *s, float *d, INFO) { d[0] = s[0]; }", "cp")
    copy.launch(1, 1, [a, b])                              # skipped: b claims it too
    with pytest.raises(ServerError.Several) as ei:
        b.read()
    u = unwritten(ei)
    assert u.chain, "the skip is a hop of the chain"
    assert all(isinstance(h, str) for h in u.chain)
    assert type(u.root.source) is LaunchError.Unknown and u.root.source.reason == "first"
    # a second, distinct failure on another buffer: Several of two
    c = client.create(np.zeros(4, np.float32))
    client.sync()
    client.debug_inject(FaultSite.LAUNCH, LaunchError.OutOfMemory, "second", 0)
    k.launch(1, 4, [c])
    with pytest.raises(ServerError.Several) as ei:
        client.sync([a, c])
    assert len(ei.value.errors) == 2
    assert {type(m.root.source) for m in ei.value.errors} == {LaunchError.Unknown,
                                                              LaunchError.OutOfMemory}
    assert [type(n) for n in ei.value.walk()][:2] == [ServerError.Several, ServerError.Unwritten]
    with pytest.raises(ServerError.Several):
        client.check([a])


def test_service_mismatch(client):
    client.require_backend("cpu")
    with pytest.raises(ServerError.ServiceMismatch) as ei:
        client.require_backend("cuda")
    assert ei.value.requested == "cuda" and ei.value.client == client.service


def test_foreign_handle(client, fresh_daemon):
    d = fresh_daemon()
    with cube.Client(d.socket) as other:
        b = client.create(b"12345678")
        alien = cube.Buffer(other, b._h, owner=b)
        with pytest.raises(ServerError.ForeignHandle) as ei:
            alien.read()
        assert ei.value.client == other.service and ei.value.handle


def test_injection_refused_when_off(fresh_daemon):
    import conftest
    d = conftest.Daemon()
    try:
        with cube.Client(d.socket) as c:
            with pytest.raises(ServerError.Validation) as ei:
                c.debug_inject(FaultSite.POISON, DevicePoison, "x")
            assert "fault injection is off" in ei.value.message
    finally:
        d.stop()
        d.cleanup()


def test_poisoned_device(fresh_daemon):
    d = fresh_daemon()
    with cube.Client(d.socket) as c:
        x = c.create(np.zeros(4, np.float32))
        c.sync()
        c.debug_inject(FaultSite.DEVICE_LAUNCH, DevicePoison, "the kernel faulted")
        c.kernel(INC, "inc").launch(1, 4, [x])
        with pytest.raises(cube.CubeError) as ei:
            x.read()
        e = ei.value
        assert e.is_device_poisoned and not e.is_refusal
        kinds = [type(n) for n in e.walk()]
        assert DevicePoison in kinds
        assert LaunchError.DevicePoisoned in kinds or ServerError.DevicePoisoned in kinds
        poison = [n for n in e.walk() if type(n) is DevicePoison][0]
        assert "the kernel faulted" in poison.reason


def test_poison_now(fresh_daemon):
    d = fresh_daemon()
    with cube.Client(d.socket) as c:
        c.debug_inject(FaultSite.POISON, DevicePoison, "injected poison")
        with pytest.raises(ServerError.DevicePoisoned) as ei:
            c.sync()
        assert type(ei.value.source) is DevicePoison
        assert "injected poison" in ei.value.source.reason
        assert ei.value.is_device_poisoned
        # a create records it on what it writes
        b = c.create(b"abcd")
        with pytest.raises(cube.CubeError) as ei:
            b.read()
        assert ei.value.is_device_poisoned
        assert IoError.DevicePoisoned in [type(n) for n in ei.value.walk()] or \
            ServerError.DevicePoisoned in [type(n) for n in ei.value.walk()]

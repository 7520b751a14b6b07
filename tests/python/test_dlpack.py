"""Issue 5: DLPack both ways, the C exchange API, and cai.Array (on the simulator)."""

import gc
import os
import sys
import weakref

os.environ.setdefault("CAI_BACKEND", "sim")

import numpy as np
import pytest

import cai
from helpers import CaiOnly
import extensions

probes = extensions.load("_cai_probes")  # the test-only DLPack doubles of tests/ext

kDLCPU, kDLCUDA = 1, 2
READ_ONLY, IS_COPIED = 1, 2


def dev(values, dtype=None):
    return cai.to_device(np.asarray(values, dtype=dtype))


def readonly_view(arr):
    d = dict(arr.__cuda_array_interface__)
    d["data"] = (d["data"][0], True)
    return cai.from_cuda_array_interface(d, owner=arr)


# ---- producer ---------------------------------------------------------------------------------

def test_versioned_and_legacy_capsule_names():
    a = dev(np.arange(6.0))
    assert "dltensor_versioned" in repr(a.__dlpack__(max_version=(1, 3)))
    assert '"dltensor"' in repr(a.__dlpack__())
    assert '"dltensor"' in repr(a.__dlpack__(max_version=(0, 8)))


def test_max_version_is_read_again_and_not_kept_when_it_is_not_plain_ints():
    """cai keeps the last max_version tuple it was given, to skip reading it again: only one of
    plain ints. Elements with __index__ may answer differently on the next call, and a kept
    tuple would keep the caller's objects alive for the process."""
    from helpers import Index

    a = dev(np.arange(6.0))
    major = Index(1)
    version = (major, Index(3))
    assert "dltensor_versioned" in repr(a.__dlpack__(max_version=version))
    major.value = 0  # the same tuple now asks for a legacy tensor
    assert '"dltensor"' in repr(a.__dlpack__(max_version=version))
    major.value = 1
    assert "dltensor_versioned" in repr(a.__dlpack__(max_version=version))
    gone = weakref.ref(major)
    del version, major
    gc.collect()
    assert gone() is None, "the max_version tuple is still held by cai"


def test_dlpack_device_is_cuda():
    assert dev([1.0]).__dlpack_device__() == (kDLCUDA, 0)


def test_numpy_from_dlpack_host_copy_round_trip():
    host = np.arange(24, dtype=np.int16).reshape(4, 6)
    a = cai.to_device(host)
    for view, ref in [(a, host), (a[::2, ::-3], host[::2, ::-3]), (a.T, host.T)]:
        got = np.from_dlpack(view, device="cpu", copy=True)
        np.testing.assert_array_equal(got, ref)


def test_host_copy_refused_without_copy():
    a = dev(np.arange(3.0))
    with pytest.raises(BufferError, match="copy=False"):
        a.__dlpack__(max_version=(1, 3), dl_device=(kDLCPU, 0), copy=False)
    with pytest.raises(BufferError, match="dl_device"):
        a.__dlpack__(max_version=(1, 3), dl_device=(kDLCUDA, 5))


def test_flags_readonly_and_copied():
    a = dev(np.arange(4.0))
    assert probes.exchange_export(a)["flags"] == 0
    ro = readonly_view(a)
    assert probes.exchange_export(ro)["flags"] & READ_ONLY
    with pytest.raises(BufferError, match="read-only"):
        ro.__dlpack__()  # legacy capsules cannot say read-only
    flags, version = probes.capsule_flags(a.__dlpack__(max_version=(1, 3), copy=True))
    assert flags & IS_COPIED and version == (1, 3)
    flags, _ = probes.capsule_flags(a.__dlpack__(max_version=(1, 3), dl_device=(kDLCPU, 0), copy=True))
    assert flags & IS_COPIED
    assert probes.capsule_flags(a.__dlpack__(max_version=(1, 3)))[0] == 0
    c = cai.from_dlpack(a, copy=True)
    assert c.ptr != a.ptr
    np.testing.assert_array_equal(c.copy_to_host(), a.copy_to_host())


def test_stream_zero_and_bad_stream_are_buffer_errors():
    a = dev([1.0])
    with pytest.raises(BufferError, match="stream=0"):
        a.__dlpack__(stream=0)
    with pytest.raises(BufferError):
        a.__dlpack__(stream=-7)
    with pytest.raises(TypeError):
        a.__dlpack__(stream="x")


def test_unconsumed_capsule_releases_the_array():
    a = dev(np.arange(5.0))
    view = a[1:]
    cap = view.__dlpack__(max_version=(1, 3))
    del cap
    gc.collect()
    # The memory is still ours and intact after the capsule's deleter ran.
    np.testing.assert_array_equal(a.copy_to_host(), np.arange(5.0))


# ---- consumer ---------------------------------------------------------------------------------

class CapsuleProducer:
    """A foreign producer: hands out capsules made by cai, counts calls and their arguments."""

    def __init__(self, arr, versioned=True, device=(kDLCUDA, 0)):
        self.arr = arr
        self.versioned = versioned
        self.device = device
        self.calls = []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None, **kw):
        self.calls.append(dict(stream=stream, max_version=max_version))
        if not self.versioned and max_version is not None:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        return self.arr.__dlpack__(stream=stream, max_version=max_version if self.versioned else None)


def test_from_dlpack_versioned_and_legacy_fallback():
    a = dev(np.arange(10.0))
    p = CapsuleProducer(a[2:8])
    b = cai.from_dlpack(p)
    assert p.calls[0]["max_version"] == (1, 3)
    assert p.calls[0]["stream"] == 1  # cai's default stream is passed to a CUDA producer
    np.testing.assert_array_equal(b.copy_to_host(), np.arange(2.0, 8.0))
    legacy = CapsuleProducer(a[::3], versioned=False)
    c = cai.from_dlpack(legacy)
    assert len(legacy.calls) == 2 and legacy.calls[1]["max_version"] is None
    np.testing.assert_array_equal(c.copy_to_host(), np.arange(10.0)[::3])


def test_capsule_renamed_after_consumption():
    a = dev(np.arange(3.0))
    caps = []

    class Keep:
        def __dlpack_device__(self):
            return (kDLCUDA, 0)

        def __dlpack__(self, stream=None, max_version=None):
            caps.append(a.__dlpack__(stream=stream, max_version=max_version))
            return caps[-1]

    cai.from_dlpack(Keep())
    assert "used_dltensor_versioned" in repr(caps[0])


def test_from_dlpack_cpu_requires_copy():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with pytest.raises(BufferError, match="copy=True"):
        cai.from_dlpack(x)
    d = cai.from_dlpack(x[:, ::-1], copy=True)
    np.testing.assert_array_equal(d.copy_to_host(), x[:, ::-1])
    assert d.__dlpack_device__() == (kDLCUDA, 0)


def test_readonly_flag_is_honoured_on_import():
    a = dev(np.arange(4.0))
    b = cai.from_dlpack(CapsuleProducer(readonly_view(a)))
    assert b.readonly
    with pytest.raises(ValueError, match="read-only"):
        b[0] = 1.0


def test_deleter_runs_exactly_once_and_keeps_memory_alive():
    a = dev(np.arange(8.0))
    b = cai.from_dlpack(probes.ForeignProducer(a))
    before = probes.ForeignProducer.deleted()
    c = b[::2]
    del b
    gc.collect()
    assert probes.ForeignProducer.deleted() == before  # the view c still uses the tensor
    np.testing.assert_array_equal(c.copy_to_host(), np.arange(0.0, 8.0, 2))
    del c
    gc.collect()
    assert probes.ForeignProducer.deleted() == before + 1


def test_ops_accept_dlpack_only_objects():
    a = dev(np.arange(5, dtype=np.int32))
    out = cai.device_array(5, dtype=np.int32)
    cai.ops.add(CapsuleProducer(a), CapsuleProducer(a), out)
    np.testing.assert_array_equal(out.copy_to_host(), 2 * np.arange(5))
    assert cai.as_cuda_array(CapsuleProducer(a)).shape == (5,)


# ---- C exchange API -----------------------------------------------------------------------------

def test_exchange_api_capsule_on_type():
    api = type(dev([1.0])).__dlpack_c_exchange_api__
    assert "dlpack_exchange_api" in repr(api)


def test_exchange_api_export_and_borrow():
    a = dev(np.arange(12, dtype=np.float32).reshape(3, 4))
    v = a[:, ::2]
    d = probes.exchange_export(v)
    assert d["version"] == (1, 3)
    assert d["shape"] == (3, 2) and d["strides"] == (4, 2)
    assert d["dtype"] == (2, 32, 1) and d["device"] == (kDLCUDA, 0)
    assert d["data"] == v.ptr
    b = probes.exchange_borrow(v)
    assert b["shape"] == (3, 2) and b["strides"] == (4, 2) and b["data"] == v.ptr


def test_exchange_api_current_stream_and_allocator():
    a = dev([1.0])
    assert probes.exchange_current_stream(a, kDLCUDA) == 1
    assert probes.exchange_current_stream(a, kDLCPU) == 0
    fresh = probes.exchange_allocate_and_wrap(a, (2, 3))
    assert isinstance(fresh, cai.DeviceNDArray)
    assert fresh.shape == (2, 3) and fresh.dtype == np.float32
    fresh[...] = 7
    np.testing.assert_array_equal(fresh.copy_to_host(), np.full((2, 3), 7, np.float32))


def test_consumer_uses_foreign_exchange_api_and_its_work_stream():
    s = cai.stream()
    a = cai.device_array(1000, dtype=np.float64, stream=s)
    out = cai.device_array(1000, dtype=np.float64, stream=cai.stream())
    with cai.sim.hold(s):
        a[...] = 3.0  # queued on s behind the gate
        probes.ForeignProducer.set_work_stream(s.handle)
        p = probes.ForeignProducer(a)
        b = cai.from_dlpack(p)  # __dlpack__ of the producer raises: the table must be used
        # A foreign stream is not kept: an event recorded on it at import orders what follows.
        assert b.stream is None
        cai.ops.add(b, b, out)  # ordered after s with an event: no race, right result
        assert not s.query()  # and the host did not wait for the producer
    np.testing.assert_array_equal(out.copy_to_host(), np.full(1000, 6.0))


# ---- stream semantics of __dlpack__ (race detector) ----------------------------------------------

def _slow_array(n=4096):
    s = cai.stream()
    a = cai.device_array(n, dtype=np.float32, stream=s)
    cai.sim.delay(s, 0.3)
    a[...] = 1.0
    return a, s


def _consume_raw(capsule_source, consumer_stream, sync):
    # Import without letting cai add its own ordering, then read on consumer_stream.
    b = cai.from_dlpack(capsule_source) if sync else None
    return b


@pytest.mark.parametrize("stream_arg", ["handle", "none", "stream_object", "numpy_int"])
def test_dlpack_stream_orders_consumer(stream_arg):
    """stream= is any integer (docs/python.md): a handle, a cai.Stream (its __index__), a NumPy
    integer; None is the legacy default stream."""
    a, s = _slow_array()
    consumer = cai.stream()
    stream_value = {"handle": consumer.handle, "none": None, "stream_object": consumer,
                    "numpy_int": np.uint64(consumer.handle)}[stream_arg]
    cap_stream = consumer.handle if stream_value is not None else 1
    cap = a.__dlpack__(stream=stream_value, max_version=(1, 3))

    class Once:
        def __dlpack_device__(self):
            return (kDLCUDA, 0)

        def __dlpack__(self, stream=None, max_version=None):
            return cap

    # sync=False-like import: the array has no stream; work on `cap_stream` is safe only
    # because __dlpack__ made that stream wait for the producer.
    with_config = cai.config.CUDA_ARRAY_INTERFACE_SYNC
    cai.config.CUDA_ARRAY_INTERFACE_SYNC = False
    try:
        b = cai.from_dlpack(Once())
    finally:
        cai.config.CUDA_ARRAY_INTERFACE_SYNC = with_config
    out = cai.device_array(b.shape, dtype=np.float32, stream=cai.external_stream(cap_stream))
    cai.ops.add(b, b, out, stream=cai.external_stream(cap_stream))
    np.testing.assert_array_equal(out.copy_to_host(), np.full(b.shape, 2.0, np.float32))


def test_dlpack_stream_minus_one_does_not_order():
    a, s = _slow_array()
    consumer = cai.stream()
    cap = a.__dlpack__(stream=-1, max_version=(1, 3))

    class Once:
        def __dlpack_device__(self):
            return (kDLCUDA, 0)

        def __dlpack__(self, stream=None, max_version=None):
            return cap

    cai.config.CUDA_ARRAY_INTERFACE_SYNC = False
    try:
        b = cai.from_dlpack(Once())
    finally:
        cai.config.CUDA_ARRAY_INTERFACE_SYNC = True
    out = cai.device_array(b.shape, dtype=np.float32, stream=consumer)
    with pytest.raises(cai.RaceError):
        cai.ops.add(b, b, out, stream=consumer)
    s.synchronize()


# ---- cai.Array -----------------------------------------------------------------------------------

def test_array_properties_and_element_strides():
    host = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    t = cai.Array(cai.to_device(host)[:, ::2, ::-1])
    assert t.shape == (3, 2, 5) and t.ndim == 3 and t.dtype == np.float32
    assert t.strides == (20, 10, -1)


def test_array_slice_rules():
    t = cai.Array(dev(np.arange(20.0).reshape(4, 5)))
    s = t.slice(axis=-1, start=1, stop=4)
    assert s.shape == (4, 3)
    assert t.slice(0, 2, 2).shape == (0, 5)  # start <= stop: empty is allowed
    np.testing.assert_array_equal(np.from_dlpack(s, device="cpu", copy=True),
                                  np.arange(20.0).reshape(4, 5)[:, 1:4])
    for axis, start, stop in [(0, 4, 4), (0, -1, 2), (0, 2, 1), (0, 0, 5), (2, 0, 1), (-3, 0, 1)]:
        with pytest.raises(IndexError):
            t.slice(axis, start, stop)


def test_array_from_cai_only_and_dlpack_first():
    a = dev(np.arange(6.0))

    assert cai.Array(CaiOnly(a)).shape == (6,)
    p = CapsuleProducer(a)
    p.__cuda_array_interface__ = None  # present but DLPack must be tried first
    assert cai.Array(p).shape == (6,) and p.calls


def test_array_is_a_producer_of_both_protocols():
    t = cai.Array(dev(np.arange(10, dtype=np.int64))).slice(0, 2, 7)
    assert t.__cuda_array_interface__["shape"] == (5,)
    b = cai.as_cuda_array(t)
    np.testing.assert_array_equal(b.copy_to_host(), np.arange(2, 7))
    c = cai.from_dlpack(t)
    np.testing.assert_array_equal(c.copy_to_host(), np.arange(2, 7))


def test_array_rejects_strides_not_multiple_of_itemsize():
    a = dev(np.zeros(8, dtype=np.uint8))
    d = {"shape": (2,), "typestr": "<i2", "data": (a.ptr, False), "strides": (3,), "version": 3}
    odd = cai.from_cuda_array_interface(d, owner=a)
    with pytest.raises((ValueError, BufferError), match="multiple"):
        cai.Array(odd)

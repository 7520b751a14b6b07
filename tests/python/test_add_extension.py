"""Issue 6: the external extension in examples/add_extension, built only through the installed
cai package (scripts/test.sh builds it into build/add_extension), run on the simulator."""

import os
import pathlib
import sys

os.environ.setdefault("CAI_BACKEND", "sim")

import numpy as np
import pytest

import cai

BUILD = pathlib.Path(__file__).resolve().parents[2] / "build" / "add_extension"
if not any(BUILD.glob("_add_ext*.so")):
    pytest.skip(f"examples/add_extension is not built in {BUILD} (scripts/test.sh builds it)",
                allow_module_level=True)
sys.path.insert(0, str(BUILD))
import _add_ext  # noqa: E402


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_add_any_strides(dtype):
    host_a = np.arange(20, dtype=dtype)
    host_b = np.linspace(0, 1, 20).astype(dtype)
    a, b = cai.to_device(host_a), cai.to_device(host_b)
    out = cai.device_array(10, dtype=dtype)
    _add_ext.add(a[::2], b[::-2], out)
    np.testing.assert_array_equal(out.copy_to_host(), host_a[::2] + host_b[::-2])


def test_accepts_foreign_cai_and_dlpack_objects():
    a = cai.to_device(np.arange(8, dtype=np.float32))

    class CaiOnly:
        @property
        def __cuda_array_interface__(self):
            return a.__cuda_array_interface__

    class DlpackOnly:
        def __dlpack__(self, stream=None, max_version=None):
            return a.__dlpack__(stream=stream, max_version=max_version)

        def __dlpack_device__(self):
            return a.__dlpack_device__()

    out = cai.device_array(8, dtype=np.float32)
    _add_ext.add(CaiOnly(), DlpackOnly(), out)
    np.testing.assert_array_equal(out.copy_to_host(), 2 * np.arange(8, dtype=np.float32))


def test_numpy_arrays_are_refused_clearly():
    out = cai.device_array(3, dtype=np.float32)
    with pytest.raises(TypeError, match="incompatible function arguments"):
        _add_ext.add(np.ones(3, np.float32), np.ones(3, np.float32), out)


def test_constraint_failures_say_which():
    a = cai.to_device(np.arange(4, dtype=np.float32))
    ro = cai.from_cuda_array_interface(
        {**a.__cuda_array_interface__, "data": (a.ptr, True)}, owner=a)
    with pytest.raises(TypeError, match="read-only.*writable"):
        _add_ext.add(a, a, ro)
    with pytest.raises(TypeError, match="ndim is 2"):
        _add_ext.add(a, a, cai.device_array((2, 2), dtype=np.float32))
    with pytest.raises(TypeError, match="dtype is '<i4'"):
        _add_ext.add(a, a, cai.device_array(4, dtype=np.int32))


def test_stream_ordering_with_a_slow_producer():
    s = cai.stream()
    x = cai.device_array(1000, dtype=np.float64, stream=s)
    cai.sim.delay(s, 0.5)
    x[...] = 2.0  # queued on s behind the delay
    y = cai.device_array(1000, dtype=np.float64, stream=cai.stream())
    consumer = cai.stream()
    _add_ext.add(x, x, y, stream=consumer)  # ordered after s by events, no host wait
    assert not s.query()
    np.testing.assert_array_equal(y.copy_to_host(), np.full(1000, 4.0))
    # and the producer's later work cannot overtake the extension's read
    x[...] = 0.0
    s.synchronize()


def test_producer_helper_exports_both_protocols():
    r = _add_ext.arange(6)
    assert isinstance(r, cai.DeviceNDArray)
    assert r.__cuda_array_interface__["typestr"] == "<f4"
    np.testing.assert_array_equal(np.from_dlpack(r, device="cpu", copy=True), np.arange(6))


def test_without_sync_the_race_is_caught():
    s = cai.stream()
    x = cai.device_array(1000, dtype=np.float64, stream=s)
    cai.sim.delay(s, 0.3)
    x[...] = 2.0

    class Foreign:  # exports x with its stream, like any v3 producer
        @property
        def __cuda_array_interface__(self):
            return x.__cuda_array_interface__

    y = cai.device_array(1000, dtype=np.float64, stream=cai.stream())
    cai.config.CUDA_ARRAY_INTERFACE_SYNC = False
    try:
        with pytest.raises(cai.RaceError):
            _add_ext.add(Foreign(), Foreign(), y, stream=cai.stream())
    finally:
        cai.config.CUDA_ARRAY_INTERFACE_SYNC = True
    s.synchronize()

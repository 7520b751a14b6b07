"""Issue 6: cai::nb::array acceptance and rejection for each constraint (tests/caster_ext,
built by scripts/test.sh through the installed package), on the simulator."""

import os
import pathlib
import sys

os.environ.setdefault("CAI_BACKEND", "sim")

import numpy as np
import pytest

import cai

BUILD = pathlib.Path(__file__).resolve().parents[2] / "build" / "caster_ext"
if not any(BUILD.glob("_caster_probe*.so")):
    pytest.skip(f"tests/caster_ext is not built in {BUILD} (scripts/test.sh builds it)",
                allow_module_level=True)
sys.path.insert(0, str(BUILD))
import _caster_probe as probe  # noqa: E402


def dev(x):
    return cai.to_device(np.asarray(x))


def readonly(a):
    return cai.from_cuda_array_interface({**a.__cuda_array_interface__, "data": (a.ptr, True)},
                                         owner=a)


def test_any_layout_gives_element_strides():
    a = dev(np.zeros((4, 6), np.float32))
    d = probe.any_f32_2d(a[::2, ::-3])
    assert d["shape"] == (2, 2) and d["strides"] == (12, -3)
    assert d["data"] == a[::2, ::-3].ptr


def test_c_contig():
    a = dev(np.zeros((3, 4), np.float32))
    assert probe.c_f32_2d(a)["strides"] == (4, 1)
    with pytest.raises(TypeError, match="not C-contiguous.*c_contig"):
        probe.c_f32_2d(a.T)


def test_f_contig():
    a = dev(np.zeros((3, 4), np.float32))
    assert probe.f_f32_2d(a.T)["strides"] == (1, 4)
    with pytest.raises(TypeError, match="not F-contiguous.*f_contig"):
        probe.f_f32_2d(a)


def test_writable():
    a = dev(np.zeros(5, np.int32))
    assert probe.writable_i32_1d(a)["readonly"] is False
    with pytest.raises(TypeError, match="read-only.*writable"):
        probe.writable_i32_1d(readonly(a))
    # read-only arrays are fine where the element type is const
    assert probe.any_f32_2d(readonly(dev(np.zeros((1, 1), np.float32))))["readonly"]


def test_dtype_and_ndim():
    with pytest.raises(TypeError, match="dtype is '<f8', expected '<f4'"):
        probe.any_f32_2d(dev(np.zeros((2, 2))))
    with pytest.raises(TypeError, match="ndim is 1 .*expected 2"):
        probe.any_f32_2d(dev(np.zeros(3, np.float32)))


def test_masks_refused_unless_allowed():
    data = dev(np.arange(4.0))
    mask = dev(np.array([1, 0, 1, 1], bool))

    class Masked:
        @property
        def __cuda_array_interface__(self):
            return {**data.__cuda_array_interface__, "mask": mask}

    assert probe.masked_f64_1d(Masked())["masked"] is True
    with pytest.raises(TypeError, match="mask.*allow_mask"):
        probe.unmasked_f64_1d(Masked())


def test_non_arrays_get_nanobinds_error():
    with pytest.raises(TypeError, match="incompatible function arguments"):
        probe.any_f32_2d([[1.0]])
    with pytest.raises(TypeError, match="incompatible function arguments"):
        probe.any_f32_2d(np.zeros((2, 2), np.float32))  # host memory, no device copy


def test_overloads_pick_the_fitting_one():
    assert probe.overloaded(dev(np.zeros(2, np.float32))) == "f32"
    assert probe.overloaded(dev(np.zeros(2, np.float64))) == "f64"


def test_signature_text():
    assert probe.signature() == "cai.array[<f4, ndim=2, c_contig, writable]"


def test_stream_argument():
    s = cai.stream()
    assert probe.stream_of() == 1
    assert probe.stream_of(s) == s.handle
    assert probe.stream_of(0) == 1
    assert probe.stream_of(5) == 5

    class CudaStream:
        def __cuda_stream__(self):
            return (0, s.handle)

    assert probe.stream_of(CudaStream()) == s.handle


def test_returning_an_array_wraps_the_same_memory():
    a = dev(np.arange(3, dtype=np.float32))
    b = probe.wrap(a[1:])
    assert isinstance(b, cai.DeviceNDArray) and b.ptr == a[1:].ptr
    np.testing.assert_array_equal(b.copy_to_host(), [1, 2])

"""NumPy functions on cai arrays (docs/python.md, "NumPy functions"): np.concatenate and
np.stack run on the device, np.transpose, np.swapaxes and np.moveaxis give views; every other
NumPy function takes a host copy (NumPy's __array__ road, as before DeviceNDArray had
__array_function__) and returns NumPy's result, except that a cai array as out= is refused."""

import numpy as np
import pytest

import cai

HOST = np.arange(24, dtype=np.int32).reshape(2, 3, 4)


def device(a):
    return cai.to_device(np.ascontiguousarray(a))


@pytest.mark.parametrize("axis", [0, 1, 2, -1, None])
def test_concatenate_on_the_device(axis):
    parts = [HOST, HOST[:, ::-1] + 100, HOST * 2]
    got = np.concatenate([device(p) for p in parts], axis=axis)
    assert isinstance(got, cai.DeviceNDArray) and got.is_c_contiguous()
    np.testing.assert_array_equal(got.copy_to_host(), np.concatenate(parts, axis=axis))


def test_concatenate_takes_views_and_empty_pieces():
    a = cai.to_device(HOST)
    got = np.concatenate([a[:, ::2], a[:, :0], a[:, 1:2]], axis=1)
    np.testing.assert_array_equal(got.copy_to_host(),
                                  np.concatenate([HOST[:, ::2], HOST[:, 1:2]], axis=1))


@pytest.mark.parametrize("axis", [0, 1, 3, -1])
def test_stack_on_the_device(axis):
    got = np.stack([device(HOST), device(-HOST)], axis=axis)
    assert isinstance(got, cai.DeviceNDArray)
    np.testing.assert_array_equal(got.copy_to_host(), np.stack([HOST, -HOST], axis=axis))


@pytest.mark.parametrize("call", [
    lambda m, a: m.transpose(a), lambda m, a: m.transpose(a, (2, 0, 1)),
    lambda m, a: m.swapaxes(a, 0, -1), lambda m, a: m.moveaxis(a, 0, -1),
    lambda m, a: m.moveaxis(a, [0, 1], [2, 0])])
def test_axis_permutations_are_views(call):
    a = cai.to_device(HOST)
    got = call(np, a)
    assert isinstance(got, cai.DeviceNDArray) and got.ptr == a.ptr
    np.testing.assert_array_equal(got.copy_to_host(), call(np, HOST))


@pytest.mark.filterwarnings("ignore::cai.HostFallbackWarning")  # test_numba_port.py checks it
def test_other_functions_take_a_host_copy():
    a = cai.to_device(HOST)
    assert np.sum(a) == HOST.sum() and isinstance(np.sum(a, axis=0), np.ndarray)
    np.testing.assert_array_equal(np.where(np.asarray(a) > 3, a, 0), np.where(HOST > 3, HOST, 0))
    with pytest.raises(TypeError, match=r"numpy.add\(\): out= is a cai array"):
        np.add(HOST, HOST, out=cai.device_array_like(a))  # a ufunc (__array_ufunc__)
    with pytest.raises(TypeError, match="out= is a cai array, but NumPy computes on the host"):
        np.sum(a, axis=0, out=cai.device_array((3, 4), dtype=np.int64))


@pytest.mark.parametrize("call, error, text", [
    (lambda a: np.concatenate([a, HOST]), TypeError,
     "array 1 is a numpy.ndarray, not a cai.DeviceNDArray; copy host data to the device"),
    (lambda a: np.concatenate([a, a.view(np.float32)]), TypeError,
     "array 1 has dtype float32 but array 0 has int32"),
    (lambda a: np.concatenate([a, a], dtype=np.float64), TypeError, "dtype=float64 differs"),
    (lambda a: np.concatenate([a, a[:1, :2]], axis=2), ValueError,
     "array 1 has shape (1, 2, 4) but array 0 has shape (2, 3, 4); all but axis 2 must match"),
    (lambda a: np.concatenate([a[0, 0, 0], a[0, 0, 1]]), ValueError, "zero-dimensional"),
    (lambda a: np.concatenate([a, a], axis=3), ValueError, "axis 3 is out of bounds"),
    (lambda a: np.concatenate([], axis=0), ValueError, "need at least one array"),
    (lambda a: np.concatenate([a, a], out=cai.device_array((4, 3, 4), np.int32)),
     NotImplementedError, "out= is not supported"),
    (lambda a: np.stack([a, a[:1]]), ValueError, "all input arrays must have the same shape"),
])
def test_bad_arguments_are_named(call, error, text):
    a = cai.to_device(HOST)
    with pytest.raises(error) as e:
        call(a)
    assert text in str(e.value)

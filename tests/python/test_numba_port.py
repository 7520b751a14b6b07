"""Porting from Numba without surprises (docs/python.md, "Numba's host API"): no silent
conversion, Numba's names and arguments."""

import numpy as np
import pytest

import cai


# ----- no silent conversion: copy_to_device is Numba's check_array_compatibility ---------

def test_copy_to_device_refuses_another_dtype_and_keeps_the_data():
    dev = cai.to_device(np.array([7, 7, 7, 7], np.int8))
    with pytest.raises(TypeError, match=r"^incompatible dtype: int8 vs\. float64"):
        dev.copy_to_device(np.array([1.5, 300, -1, 2]))
    with pytest.raises(TypeError, match=r"^incompatible dtype: int8 vs\. int64"):
        dev.copy_to_device([1, 2, 3, 4])  # a list is read as NumPy reads it
    np.testing.assert_array_equal(dev.copy_to_host(), [7, 7, 7, 7])


def test_copy_to_device_refuses_another_shape_and_does_not_broadcast():
    dev = cai.to_device(np.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"^incompatible shape: \(3, 4\) vs\. \(1,\)"):
        dev.copy_to_device(np.array([1.0]))
    with pytest.raises(ValueError, match=r"^incompatible shape: \(3, 4\) vs\. \(4, 3\)"):
        dev.copy_to_device(np.ones((4, 3)))
    assert not dev.copy_to_host().any()


def test_copy_to_device_ignores_axes_of_length_one_as_numba():
    dev = cai.device_array((1, 3))
    dev.copy_to_device(np.arange(3.0))
    np.testing.assert_array_equal(dev.copy_to_host(), [[0, 1, 2]])
    dev.copy_to_device(cai.to_device(np.array([[4.0], [5.0], [6.0]])))
    np.testing.assert_array_equal(dev.copy_to_host(), [[4, 5, 6]])


def test_copy_to_device_from_a_device_array_checks_dtype_and_shape():
    dev = cai.to_device(np.zeros(4, np.float32))
    with pytest.raises(TypeError, match=r"^incompatible dtype: float32 vs\. float64"):
        dev.copy_to_device(cai.to_device(np.ones(4)))
    with pytest.raises(ValueError, match=r"^incompatible shape: \(4,\) vs\. \(5,\)"):
        dev.copy_to_device(cai.to_device(np.ones(5, np.float32)))
    assert not dev.copy_to_host().any()


def test_copy_to_device_takes_numbas_parameter_name():
    dev = cai.device_array(2, dtype=np.int32)
    dev.copy_to_device(ary=np.array([3, 4], np.int32), stream=0)
    np.testing.assert_array_equal(dev.copy_to_host(), [3, 4])


def test_to_device_into_an_array_follows_copy_to_device():
    to = cai.device_array(3)
    assert cai.to_device(np.arange(3.0), to=to) is to
    np.testing.assert_array_equal(to.copy_to_host(), [0, 1, 2])
    with pytest.raises(TypeError, match="incompatible dtype: float64 vs. float32"):
        cai.to_device(np.ones(3, np.float32), to=to)
    with pytest.raises(TypeError, match="to_device\\(\\): to must be a cai.DeviceNDArray"):
        cai.to_device(np.ones(3), to=np.ones(3))
    assert cai.to_device(np.ones(3), to=to, copy=False) is to  # Numba: nothing copied
    np.testing.assert_array_equal(to.copy_to_host(), [0, 1, 2])


def test_to_device_copy_false_allocates_or_imports():
    host = np.ones((2, 3), np.int16, order="F")
    new = cai.to_device(host, copy=False)
    assert (new.shape, new.dtype, new.strides) == (host.shape, host.dtype, host.strides)
    dev = cai.to_device(np.arange(3.0))
    same = cai.to_device(dev, copy=False)
    assert same.ptr == dev.ptr


def test_same_dtype_keeps_working_for_ml_dtypes_and_records():
    ml = pytest.importorskip("ml_dtypes")
    for dt in (ml.bfloat16, ml.float8_e4m3fn, ml.int4):
        host = np.array([1, 2, 3], dt)
        dev = cai.device_array(3, dtype=dt)
        dev.copy_to_device(host)
        np.testing.assert_array_equal(dev.copy_to_host().astype(np.float32), [1, 2, 3])
        dev[...] = host[::-1]
        np.testing.assert_array_equal(dev.copy_to_host().astype(np.float32), [3, 2, 1])
    rec = np.array([(1, 2.5), (3, 4.5)], dtype=[("a", "i4"), ("b", "f8")])
    dev = cai.device_array(2, dtype=rec.dtype)
    dev.copy_to_device(rec)
    dev[...] = rec
    assert dev.copy_to_host().tolist() == rec.tolist()


# ----- a[...] = value: NumPy's broadcasting, no conversion that loses values ----------------

def test_setitem_broadcasts_and_converts_what_fits():
    dev = cai.device_array((2, 3), dtype=np.int16)
    dev[...] = np.array([1.0, 2.0, 3.0])  # float64 values that int16 holds exactly
    np.testing.assert_array_equal(dev.copy_to_host(), [[1, 2, 3], [1, 2, 3]])
    f = cai.device_array(2, dtype=np.float32)
    f[...] = 0.1  # rounding to the nearest float32 is how floats take values
    assert f.copy_to_host()[0] == np.float32(0.1)


@pytest.mark.parametrize("dtype, value, shown", [
    (np.int8, np.array([1.5, 300, -1, 2]), "1.5 becomes 1"),
    (np.int8, np.array([1.0, 300, -1, 2]), "300.0 becomes 44"),
    (np.int8, 1.5, "1.5 becomes 1"),
    (np.uint8, np.array([-1]), "-1 becomes 255"),
    (np.float32, np.array([1e300]), "1e+300 becomes inf"),
    (np.float64, np.array([1 + 1j]), "(1+1j) becomes 1.0"),
    (np.int32, np.array([np.nan]), "nan becomes"),
])
@pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::numpy.exceptions.ComplexWarning")
def test_setitem_refuses_conversions_that_lose_values(dtype, value, shown):
    dev = cai.to_device(np.full(4, 9, dtype))
    with pytest.raises(ValueError, match=r"__setitem__\(\): assigning .* would change them") as e:
        dev[...] = value
    assert shown in str(e.value) and f"astype(np.{np.dtype(dtype).name})" in str(e.value)
    np.testing.assert_array_equal(dev.copy_to_host(), np.full(4, 9, dtype))
    dev[...] = np.asarray(value).astype(dtype)  # cast first: accepted, NumPy's values
    np.testing.assert_array_equal(dev.copy_to_host(),
                                  np.broadcast_to(np.asarray(value).astype(dtype), 4))


def test_setitem_names_ml_dtypes_types():
    ml = pytest.importorskip("ml_dtypes")
    dev = cai.device_array(2, dtype=ml.int4)
    with pytest.raises(ValueError, match=r"int64 values to an array of int4 .*9 becomes -7.*"
                                         r"astype\(ml_dtypes\.int4\)"):
        dev[...] = np.array([9, 1])

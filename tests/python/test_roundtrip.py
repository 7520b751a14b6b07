"""Issue 4: round trips with NumPy (to_device / copy_to_host / copy_to_device) for random dtypes
and layouts, non-contiguous and F-ordered host arrays included."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import cai
from helpers import host_bytes

# Every kind whose bytes a device array can hold: numbers of every size in both byte orders,
# bool, datetimes, bytes, unicode, raw, structured (nested, sub-arrays, padding).
scalar_dtypes = st.one_of(
    hnp.boolean_dtypes(),
    hnp.integer_dtypes(endianness="="), hnp.integer_dtypes(endianness=">"),
    hnp.unsigned_integer_dtypes(endianness="="), hnp.unsigned_integer_dtypes(endianness=">"),
    hnp.floating_dtypes(endianness="="), hnp.floating_dtypes(endianness=">"),
    hnp.complex_number_dtypes(endianness="?"),
    hnp.datetime64_dtypes(endianness="?"), hnp.timedelta64_dtypes(endianness="?"),
    hnp.byte_string_dtypes(min_len=1, max_len=6), hnp.unicode_string_dtypes(min_len=1, max_len=3),
    st.integers(1, 7).map(lambda n: np.dtype(f"V{n}")),
)
structured = hnp.array_dtypes(scalar_dtypes, min_size=1, max_size=3, allow_subarrays=True)
padded = st.just(np.dtype({"names": ["a", "b"], "formats": ["u1", "<i4"], "offsets": [1, 8],
                           "itemsize": 16}))
nested = st.just(np.dtype([("p", [("x", "<f4"), ("y", ">i2", (2,))]), ("q", "?")]))
dtypes = st.one_of(scalar_dtypes, structured, padded, nested)


def random_bytes_array(dtype, shape, data):
    """An array of `dtype` whose bytes are random (structured and string types included)."""
    n = int(np.prod(shape)) * dtype.itemsize
    raw = data.draw(st.binary(min_size=n, max_size=n))
    return np.frombuffer(raw, dtype=np.uint8).view(dtype).reshape(shape) if n else \
        np.zeros(shape, dtype)


@st.composite
def host_arrays(draw):
    """Random dtype, shape (0-d, zero-size, ...), contents, and layout: C, F, or a strided,
    reversed, transposed view of a bigger array."""
    dtype = draw(dtypes)
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5))
    layout = draw(st.sampled_from(["C", "F", "view", "transpose"]))
    if layout == "view" and len(shape) > 0:
        big = tuple(2 * n + 1 for n in shape)
        base = random_bytes_array(dtype, big, draw(st.data()))
        key = tuple(slice(None, None, draw(st.sampled_from([2, -2]))) for _ in shape)
        arr = base[key]
        arr = arr[tuple(slice(0, n) for n in shape)]
    else:
        arr = random_bytes_array(dtype, shape, draw(st.data()))
        if layout == "F":
            arr = np.asfortranarray(arr)
        elif layout == "transpose":
            arr = arr.T
    return arr


@given(host_arrays())
@settings(max_examples=80)
def test_to_device_copy_to_host_round_trip(host):
    dev = cai.to_device(host)
    assert dev.shape == host.shape
    assert dev.dtype == host.dtype
    back = dev.copy_to_host()
    assert isinstance(back, np.ndarray)
    assert back.dtype == host.dtype and back.shape == host.shape
    assert host_bytes(back) == host_bytes(host)
    # The device copy is C or F contiguous like the source (F when only F).
    if host.flags.f_contiguous and not host.flags.c_contiguous:
        assert dev.is_f_contiguous()
    else:
        assert dev.is_c_contiguous()


@given(host_arrays(), st.data())
@settings(max_examples=40)
def test_copy_to_host_into_a_given_array(host, data):
    dev = cai.to_device(host)
    order = data.draw(st.sampled_from(["C", "F", "strided"]))
    if order == "strided" and host.ndim:
        target = np.empty(tuple(2 * n for n in host.shape), host.dtype)[
            tuple(slice(None, None, 2) for _ in host.shape)]
    else:
        target = np.empty(host.shape, host.dtype, order="F" if order == "F" else "C")
    result = dev.copy_to_host(target)
    assert result is target
    assert host_bytes(target) == host_bytes(host)


@given(host_arrays())
@settings(max_examples=40)
def test_copy_to_device_round_trip(host):
    dev = cai.device_array(host.shape, dtype=host.dtype)
    dev.copy_to_device(host)
    assert host_bytes(dev.copy_to_host()) == host_bytes(host)
    # From another device array.
    other = cai.device_array_like(dev)
    other.copy_to_device(dev)
    assert host_bytes(other.copy_to_host()) == host_bytes(host)


@given(host_arrays())
@settings(max_examples=40)
def test_device_views_copy_to_host_like_numpy_views(host):
    if host.ndim == 0:
        return
    dev = cai.to_device(np.ascontiguousarray(host))
    c = np.ascontiguousarray(host)
    key = tuple(slice(None, None, -1) if i % 2 else slice(1, None, 2) for i in range(host.ndim))
    assert host_bytes(dev[key].copy_to_host()) == host_bytes(c[key])
    assert host_bytes(dev.T.copy_to_host()) == host_bytes(c.T)


@pytest.mark.parametrize("obj,dtype", [
    ([1, 2, 3], np.int64), ([1.5, 2.5], np.float64), (7, np.int64), ([[True, False]], np.bool_),
    ((1 + 2j, 3j), np.complex128), ([b"ab", b"c"], np.dtype("S2")),
])
def test_to_device_of_python_objects(obj, dtype):
    dev = cai.to_device(obj)
    np.testing.assert_array_equal(dev.copy_to_host(), np.asarray(obj))
    assert dev.dtype == dtype


def test_to_device_refuses_object_arrays():
    with pytest.raises(TypeError, match="Python objects"):
        cai.to_device(np.array([1, "a", None], dtype=object))


def test_copy_to_host_checks_the_target():
    dev = cai.to_device(np.arange(6.0).reshape(2, 3))
    with pytest.raises(ValueError, match="shape"):
        dev.copy_to_host(np.empty((3, 2)))
    with pytest.raises(TypeError, match="dtype"):
        dev.copy_to_host(np.empty((2, 3), np.float32))
    ro = np.empty((2, 3))
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        dev.copy_to_host(ro)


def test_copy_to_device_neither_converts_nor_broadcasts():
    # Numba's rule (docs/python.md, "No silent conversion"); a[...] = broadcasts instead.
    dev = cai.device_array((2, 3), dtype=np.int16)
    with pytest.raises(ValueError, match=r"incompatible shape: \(2, 3\) vs. \(3,\)"):
        dev.copy_to_device(np.array([1, 2, 3], np.int16))
    with pytest.raises(TypeError, match="incompatible dtype: int16 vs. int64"):
        dev.copy_to_device(np.arange(6).reshape(2, 3))
    dev[...] = np.array([1, 2, 3])
    np.testing.assert_array_equal(dev.copy_to_host(), [[1, 2, 3], [1, 2, 3]])


@pytest.mark.parametrize("order", ["C", "F"])
def test_device_array_and_like(order):
    a = cai.device_array((3, 4), dtype=np.float32, order=order)
    assert a.is_c_contiguous() == (order == "C")
    assert a.is_f_contiguous() == (order == "F")
    assert a.strides == np.empty((3, 4), np.float32, order=order).strides
    like = cai.device_array_like(a)
    assert like.shape == a.shape and like.dtype == a.dtype and like.strides == a.strides
    like_np = cai.device_array_like(np.empty((3, 4), np.int8, order=order))
    assert like_np.strides == np.empty((3, 4), np.int8, order=order).strides
    assert len(a) == 3 and a.ndim == 2 and a.size == 12 and a.nbytes == 48 and a.itemsize == 4


def test_device_array_with_explicit_strides():
    a = cai.device_array((3, 4), dtype=np.int32, strides=(4, 12))
    assert a.strides == (4, 12) and a.is_f_contiguous()
    a.copy_to_device(np.arange(12, dtype=np.int32).reshape(3, 4))
    np.testing.assert_array_equal(a.copy_to_host(), np.arange(12).reshape(3, 4))
    b = cai.device_array((3,), dtype=np.int32, strides=(-4,))
    b.copy_to_device(np.array([1, 2, 3], np.int32))
    np.testing.assert_array_equal(b.copy_to_host(), [1, 2, 3])
    with pytest.raises(ValueError, match="overlap"):
        cai.device_array((3, 4), dtype=np.int32, strides=(4, 4))


@pytest.mark.parametrize("bad", [dict(order="K"), dict(shape=(-1,)), dict(shape="x")])
def test_device_array_argument_errors(bad):
    kw = {"shape": (2,), **bad}
    with pytest.raises((ValueError, TypeError)):
        cai.device_array(**kw)


def test_device_array_refuses_object_dtype():
    with pytest.raises(TypeError, match="Python objects"):
        cai.device_array(3, dtype=object)

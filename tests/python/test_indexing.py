"""Issue 4: __getitem__ views (integers, steps, negative steps, newaxis, ellipsis) and
__setitem__ (scalars, host arrays with broadcasting, device arrays) against NumPy."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import cai
from helpers import Producer

SHAPE = (4, 5, 6)
HOST = np.arange(np.prod(SHAPE), dtype=np.int32).reshape(SHAPE)


@pytest.fixture(scope="module")
def dev():
    return cai.to_device(HOST)


@st.composite
def basic_keys(draw, shape=SHAPE):
    """A NumPy basic index for `shape`: ints (negative too), slices with any start, stop and
    step (negative, out of range), None, at most one Ellipsis."""
    items = []
    dims = list(shape)
    use_ellipsis = draw(st.booleans())
    n_index = draw(st.integers(0, len(dims)))
    ellipsis_at = draw(st.integers(0, n_index)) if use_ellipsis else -1
    axis = 0
    for i in range(n_index + 1):
        if i == ellipsis_at:
            items.append(Ellipsis)
        if i == n_index:
            break
        while draw(st.integers(0, 4)) == 0:
            items.append(None)
        n = dims[axis]
        kind = draw(st.sampled_from(["int", "slice", "slice", "slice"]))
        if kind == "int":
            items.append(draw(st.integers(-n, n - 1)))
        else:
            items.append(slice(draw(st.none() | st.integers(-n - 2, n + 2)),
                               draw(st.none() | st.integers(-n - 2, n + 2)),
                               draw(st.sampled_from([None, 1, 2, 3, 7, -1, -2, -4]))))
        axis += 1
    if len(items) == 1 and draw(st.booleans()):
        return items[0]
    return tuple(items)


def numpy_view(key):
    """HOST[key] as a view even when every axis gets an integer (NumPy would give a scalar
    copy; a trailing Ellipsis makes it a 0-d view)."""
    k = key if isinstance(key, tuple) else (key,)
    if not any(item is Ellipsis for item in k):
        k = k + (Ellipsis,)
    return HOST[k]


def byte_offset(view, base):
    return view.__array_interface__["data"][0] - base.__array_interface__["data"][0]


@given(basic_keys())
@settings(max_examples=150)
def test_getitem_views_agree_with_numpy(dev, key):
    expected = numpy_view(key)
    got = dev[key]
    if isinstance(key, tuple) and len(key) == len(SHAPE) and all(type(k) is int for k in key):
        assert type(got) is type(HOST[key]) and got == HOST[key]  # the element (test_shape_ops)
        return
    assert isinstance(got, cai.DeviceNDArray)
    assert got.shape == expected.shape
    assert got.dtype == expected.dtype
    if expected.size:
        assert got.strides == expected.strides
        assert got.ptr == dev.ptr + byte_offset(expected, HOST)  # a view, no copy
    else:
        assert got.ptr == 0
    assert got.is_c_contiguous() == expected.flags.c_contiguous
    assert got.is_f_contiguous() == expected.flags.f_contiguous
    np.testing.assert_array_equal(got.copy_to_host(), expected)


@given(basic_keys(), basic_keys(shape=(3,)))
@settings(max_examples=40)
def test_views_of_views(dev, key, _unused):
    view = dev[::-1, 1::2]
    expected = HOST[::-1, 1::2]
    sub = (slice(None, None, -2), Ellipsis, None, 0)
    np.testing.assert_array_equal(view[sub].copy_to_host(), expected[sub])
    np.testing.assert_array_equal(view.T[1:].copy_to_host(), expected.T[1:])


def test_getitem_examples(dev):
    for key in [(), Ellipsis, 0, -1, (1, 2, 3), (-1, -1, -1), (None,), (None, None, Ellipsis),
                (Ellipsis, None), (slice(None, None, -1),), (0, Ellipsis, slice(None, None, -3)),
                (slice(10, None),), (slice(-100, 100, 3),), (1, None, 2), np.int64(2),
                (np.int32(1), slice(np.int8(1), None))]:
        got = dev[key]
        if isinstance(got, cai.DeviceNDArray):
            np.testing.assert_array_equal(got.copy_to_host(), HOST[key])
            assert got.shape == HOST[key].shape
        else:  # one integer per axis: a host scalar (test_shape_ops.py)
            assert type(got) is type(HOST[key]) and got == HOST[key]


def test_scalar_index_with_ellipsis_gives_a_0d_view(dev):
    v = dev[1, 2, 3, ...]
    assert isinstance(v, cai.DeviceNDArray) and v.shape == () and v.ndim == 0
    assert v.copy_to_host() == HOST[1, 2, 3]


@pytest.mark.parametrize("key,exc", [
    (4, IndexError), (-5, IndexError), ((0, 0, 0, 0), IndexError), ((0, 6), IndexError),
    ((Ellipsis, Ellipsis), IndexError), (slice(None, None, 0), ValueError),
    (1.5, TypeError), ("a", TypeError), ([0, 1], TypeError), (True, TypeError),
    (slice(0.5, None), TypeError),
])
def test_getitem_errors(dev, key, exc):
    with pytest.raises(exc):
        dev[key]
    with pytest.raises(exc):
        HOST[key] if exc is not TypeError else (_ for _ in ()).throw(TypeError)


def test_slice_method_tile_rules(dev):
    np.testing.assert_array_equal(dev.slice(1, 1, 4).copy_to_host(), HOST[:, 1:4])
    np.testing.assert_array_equal(dev.slice(-1, 0, 6).copy_to_host(), HOST[..., 0:6])
    np.testing.assert_array_equal(dev.slice(0, 3, 3).copy_to_host(), HOST[3:3])
    for args in [(0, 4, 4), (0, -1, 2), (0, 2, 1), (0, 0, 5), (3, 0, 1), (-4, 0, 1)]:
        with pytest.raises(IndexError):
            dev.slice(*args)


# --------------------------------------------------------------------------- setitem

@pytest.fixture
def pair():
    host = np.arange(60, dtype=np.float64).reshape(3, 4, 5)
    return host.copy(), cai.to_device(host)


def check(pair):
    host, dev = pair
    np.testing.assert_array_equal(dev.copy_to_host(), host)


@pytest.mark.parametrize("key", [
    (), 0, -1, (1, 2, 3), (slice(None), 1), (Ellipsis, slice(None, None, -2)),
    (slice(None, None, 2), None, slice(1, 3)), (slice(1, 1),),
])
@pytest.mark.parametrize("value", [7, -2.5, True, np.float32(1.25), np.int64(3)])
def test_setitem_scalar(pair, key, value):
    host, dev = pair
    host[key] = value
    dev[key] = value
    check(pair)


@pytest.mark.parametrize("key,value", [
    (Ellipsis, np.arange(5.0)),                        # broadcast along the leading axes
    (Ellipsis, np.arange(4.0).reshape(4, 1)),
    ((slice(None), slice(None, None, -1)), np.ones((3, 1, 5))),
    ((0,), [[1, 2, 3, 4, 5]]),                         # a list
    ((1, slice(None, None, 2)), np.arange(10, dtype=np.int8).reshape(2, 5)),  # cast
    ((2, 3), np.array(9.0)),
    ((slice(None), 0, slice(None)), np.asfortranarray(np.arange(15.0).reshape(3, 5))),
    (Ellipsis, np.arange(60.0).reshape(5, 4, 3).T),    # non-contiguous host source
])
def test_setitem_host_array(pair, key, value):
    host, dev = pair
    host[key] = value
    dev[key] = value
    check(pair)


@pytest.mark.parametrize("key,src_key", [
    (Ellipsis, Ellipsis),
    ((0,), (1,)),
    ((slice(None), slice(None, None, -1)), (Ellipsis,)),
    ((slice(None), 0), (slice(None), 1)),
])
def test_setitem_device_array(pair, key, src_key):
    host, dev = pair
    other_host = np.arange(60, 120, dtype=np.float64).reshape(3, 4, 5)
    other = cai.to_device(other_host)
    host[key] = other_host[src_key]
    dev[key] = other[src_key]
    check(pair)


def test_setitem_device_array_broadcast(pair):
    host, dev = pair
    row = cai.to_device(np.arange(5.0) * 10)
    host[...] = np.arange(5.0) * 10
    dev[...] = row
    check(pair)
    host[:, 1] = (np.arange(5.0) * 10)[None]
    dev[:, 1] = row[None]
    check(pair)


def test_setitem_foreign_device_array(pair):
    host, dev = pair
    other = cai.to_device(np.full((4, 5), 3.0))
    host[1] = 3.0
    dev[1] = Producer(other)
    check(pair)


@pytest.mark.parametrize("dst,src", [
    ((slice(1, None),), (slice(None, -1),)),           # overlapping shift
    ((slice(None, -1),), (slice(1, None),)),
    ((Ellipsis,), (slice(None, None, -1),)),           # reversal in place
    ((slice(None), slice(None), slice(None, None, -1)), (Ellipsis,)),
])
def test_setitem_overlapping_self_assignment(pair, dst, src):
    host, dev = pair
    host[dst] = host[src]
    dev[dst] = dev[src]
    check(pair)


def test_setitem_errors(pair):
    host, dev = pair
    with pytest.raises(ValueError):
        dev[...] = np.ones(4)
    with pytest.raises(ValueError):
        dev[0] = cai.to_device(np.ones(3))
    with pytest.raises(TypeError):
        dev[...] = cai.to_device(np.ones((4, 5), np.float32))  # dtypes must be equal on device
    with pytest.raises((ValueError, TypeError, OverflowError)):
        cai.device_array(3, dtype=np.uint8)[0] = 300
    check(pair)


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.float16, np.complex64, np.bool_,
                                   ">i4", "<M8[s]", "S3", "U2"])
def test_setitem_scalar_dtypes(dtype):
    dt = np.dtype(dtype)
    host = np.zeros(6, dt)
    dev = cai.to_device(host)
    value = {"M": np.datetime64("2020-01-02T03:04:05"), "S": b"xyz", "U": "hi"}.get(dt.kind, 1)
    host[1::2] = value
    dev[1::2] = value
    assert dev.copy_to_host().tobytes() == host.tobytes()


@pytest.mark.parametrize("key", [
    slice(2**70, None), slice(-2**70, 2**70), slice(None, None, 2**65), slice(None, None, -2**65),
    slice(-2**70, 2**70, 2**65), (slice(1, 2**64), 0),
])
def test_huge_slice_bounds_are_clamped_like_python(dev, key):
    assert dev[key].shape == HOST[key].shape
    np.testing.assert_array_equal(dev[key].copy_to_host(), HOST[key])


@pytest.mark.parametrize("key", [2**70, -2**70, 2**63, (0, 2**64)])
def test_huge_integer_index_is_an_index_error(dev, key):
    # NumPy raises IndexError or OverflowError depending on the size; we always IndexError.
    with pytest.raises((IndexError, OverflowError)):
        HOST[key]
    with pytest.raises(IndexError):
        dev[key]
    with pytest.raises(IndexError):
        dev[key] = 1

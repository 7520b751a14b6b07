"""Numba's DeviceNDArray surface (docs/array-methods.md): reshape and ravel as views only,
view(dtype), squeeze, transpose(*axes) and .T, split, copy, and element access returning host
scalars after the array's stream. Layouts are compared with NumPy's on generated views."""

import gc
import threading
import weakref

import numpy as np
import pytest
from hypothesis import event, given, strategies as st

import cai
from helpers import DictProducer, Producer, kept

BASE = np.arange(4 * 6 * 5, dtype=np.float32).reshape(4, 6, 5)


@st.composite
def strided_views(draw):
    """A NumPy view of BASE (steps, negative steps, an axis permutation, new axes) and the
    same key applied to a device copy of BASE."""
    key = tuple(slice(draw(st.sampled_from([None, 0, 1])), None,
                      draw(st.sampled_from([None, 1, 2, -1, -2]))) for _ in range(3))
    axes = draw(st.permutations(range(3)))
    newaxis = draw(st.booleans())
    return key, tuple(axes), newaxis


def apply(arr, key, axes, newaxis):
    v = arr[key].transpose(*axes)
    return v[None] if newaxis else v


@st.composite
def factorizations(draw, size):
    """A shape whose sizes multiply to `size`, with axes of size 1 inserted anywhere."""
    shape, n = [], size
    while n > 1:
        d = draw(st.sampled_from([d for d in range(2, n + 1) if n % d == 0]))
        shape.append(d)
        n //= d
    for _ in range(draw(st.integers(0, 2))):
        shape.insert(draw(st.integers(0, len(shape))), 1)
    return shape or [size]


@pytest.fixture(scope="module")
def dev_base():
    return cai.to_device(BASE)


def non_unit_strides(shape, strides):
    return [s for n, s in zip(shape, strides) if n != 1]


@given(view=strided_views(), data=st.data(), order=st.sampled_from(["C", "F"]))
def test_reshape_is_a_view_exactly_when_numpy_needs_no_copy(dev_base, view, data, order):
    host = apply(BASE, *view)
    dev = apply(dev_base, *view)
    shape = data.draw(factorizations(host.size))
    if data.draw(st.booleans()):
        shape[data.draw(st.integers(0, len(shape) - 1))] = -1
    try:
        expected = host.reshape(shape, order=order, copy=False)
    except ValueError:
        event("a copy would be needed")
        with pytest.raises(NotImplementedError, match="without a copy"):
            dev.reshape(shape, order=order)
        return
    event("a view")
    got = dev.reshape(*shape, order=order)
    assert got.shape == expected.shape
    # The same memory: the first element and the strides on every axis that steps agree.
    offset = expected.__array_interface__["data"][0] - BASE.__array_interface__["data"][0]
    assert got.ptr == dev_base.ptr + offset
    assert non_unit_strides(got.shape, got.strides) == \
        non_unit_strides(expected.shape, expected.strides)
    np.testing.assert_array_equal(got.copy_to_host(), expected)


@given(view=strided_views(), order=st.sampled_from(["C", "F", "A"]))
def test_ravel_is_reshape_to_one_axis(dev_base, view, order):
    host = apply(BASE, *view)
    dev = apply(dev_base, *view)
    numpy_order = order if order != "A" else (
        "F" if host.flags.f_contiguous and not host.flags.c_contiguous else "C")
    try:
        expected = host.reshape(-1, order=numpy_order, copy=False)
    except ValueError:
        with pytest.raises(NotImplementedError, match="never copies"):
            dev.ravel(order)
        return
    got = dev.ravel(order=order)
    np.testing.assert_array_equal(got.copy_to_host(), expected)
    np.testing.assert_array_equal(got.copy_to_host(), np.ravel(host, order=order))


def test_reshape_spellings_and_errors():
    a = cai.to_device(np.arange(12, dtype=np.int16))
    assert a.reshape(3, 4).shape == a.reshape((3, 4)).shape == a.reshape([3, -1]).shape == (3, 4)
    assert a.reshape(np.int64(12)).shape == (12,)
    with pytest.raises(ValueError, match=r"cannot reshape an array of size 12 into shape \(5, 2\)"):
        a.reshape(5, 2)
    with pytest.raises(ValueError, match="more than one -1"):
        a.reshape(-1, -1)
    with pytest.raises(ValueError, match="order must be 'C', 'F' or 'A', got 'K'"):
        a.reshape(12, order="K")
    assert a.reshape(np.array([3, 4])).shape == (3, 4)      # any integer sequence, as NumPy
    assert a.reshape(range(2, 8, 4)).shape == (2, 6)
    with pytest.raises(TypeError, match=r"reshape\(\): shape: expected a tuple of int, got float"):
        a.reshape(3, 4.0)
    with pytest.raises(TypeError, match="got bool"):
        a.reshape(True, 12)
    with pytest.raises(OverflowError, match="does not fit in a signed 64-bit integer"):
        a.reshape(2**64)
    t = a.reshape(3, 4).T
    with pytest.raises(NotImplementedError) as info:
        t.reshape(12)
    message = str(info.value)
    for fragment in ("shape (4, 3) and strides (2, 8)", "to (12,) in C order without a copy",
                     "axis 0 (stride 2) does not step over axis 1 (3 x stride 8)",
                     "order='F' would be a view", "copy first (a.copy().reshape(...))"):
        assert fragment in message
    np.testing.assert_array_equal(t.copy().reshape(12).copy_to_host(),
                                  np.arange(12).reshape(3, 4).T.ravel())


def test_views_share_memory_stream_and_readonly():
    s = cai.stream()
    a = cai.to_device(np.arange(12, dtype=np.int32), stream=s)
    for v in (a.reshape(3, 4), a.ravel(), a.view(np.uint32), a.reshape(1, 12).squeeze(),
              a.reshape(3, 4).transpose(1, 0), a.reshape(3, 4).T, next(a.split(5))):
        assert v.stream == s
        assert v.ptr == a.ptr
    v = a.reshape(3, 4)
    v[1, 2] = 100  # through the view
    assert a[6] == 100
    ro = cai.as_cuda_array(Producer(a, data=(a.ptr, True)))
    for v in (ro.reshape(3, 4), ro.ravel(), ro.view(np.float32), ro.T, ro.squeeze()):
        assert v.readonly
    assert not ro.copy().readonly


def test_reshape_and_permute_carry_the_mask():
    a = cai.to_device(np.arange(6, dtype=np.int32))
    m = cai.to_device(np.array([1, 0, 1, 1, 0, 1], dtype=bool))
    masked = cai.as_cuda_array(Producer(a, mask=m))
    r = masked.reshape(2, 3).transpose(1, 0)
    mask = r.__cuda_array_interface__["mask"]
    np.testing.assert_array_equal(cai.as_cuda_array(mask).copy_to_host(),
                                  np.array([1, 0, 1, 1, 0, 1], bool).reshape(2, 3).T)
    # Element access keeps the mask: a 0-d view rather than a host scalar.
    assert isinstance(masked[1], cai.DeviceNDArray)
    with pytest.raises(NotImplementedError, match="masked"):
        masked.view(np.int16)
    assert masked.view(np.uint32).__cuda_array_interface__["mask"] is not None
    c = masked.copy()
    np.testing.assert_array_equal(cai.as_cuda_array(c.mask).copy_to_host(),
                                  m.copy_to_host())
    assert c.mask.ptr != m.ptr


def test_view_dtype_like_numpy():
    host = np.arange(24, dtype=np.float32).reshape(4, 6)
    dev = cai.to_device(host)
    for dt in (np.int32, np.float64, np.uint8, np.complex64, np.dtype("<i2"), "V8"):
        got = dev.view(dt)
        expected = host.view(dt)
        assert got.shape == expected.shape and got.strides == expected.strides
        assert got.dtype == expected.dtype
        assert got.copy_to_host().tobytes() == expected.tobytes()
    # Rows of a wider array: only the last axis needs to be contiguous.
    np.testing.assert_array_equal(dev[:, :4].view(np.int16).copy_to_host(),
                                  host[:, :4].view(np.int16))
    with pytest.raises(ValueError, match="last axis to be contiguous"):
        dev.T.view(np.float64)
    with pytest.raises(ValueError, match="not a multiple of 16"):
        dev.view(np.complex128)
    with pytest.raises(ValueError, match="0-d array"):
        dev[0, 0, ...].view(np.int16)
    with pytest.raises(TypeError, match="Python objects"):
        dev.view(object)


def test_squeeze():
    host = np.arange(6, dtype=np.int8).reshape(1, 2, 1, 3, 1)
    dev = cai.to_device(host)
    for axis in (None, 0, -1, (0, 2), [4, 0]):
        np.testing.assert_array_equal(dev.squeeze(axis).copy_to_host(), host.squeeze(
            tuple(axis) if isinstance(axis, list) else axis))
    assert dev.squeeze(axis=2).shape == (1, 2, 3, 1)
    with pytest.raises(ValueError, match="axis 1 has size 2; only axes of size 1"):
        dev.squeeze(1)
    with pytest.raises(IndexError, match="axis 5 is out of bounds for an array of dimension 5"):
        dev.squeeze(5)
    with pytest.raises(ValueError, match="repeated"):
        dev.squeeze((0, -5))
    with pytest.raises(TypeError, match="squeeze\\(\\): axis: expected an int, got str"):
        dev.squeeze("0")
    with pytest.raises(TypeError, match="expected an int, got bool"):
        dev.squeeze(True)


def test_transpose():
    host = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    dev = cai.to_device(host)
    for args in ((), (None,), (2, 0, 1), ((1, 0, 2),), ([0, 2, 1],), (-1, 0, 1)):
        expected = host.transpose(*args)
        got = dev.transpose(*args)
        assert got.shape == expected.shape and got.strides == expected.strides
        np.testing.assert_array_equal(got.copy_to_host(), expected)
    assert dev.T.strides == host.T.strides
    with pytest.raises(ValueError, match="repeated"):
        dev.transpose(0, 0, 1)
    with pytest.raises(ValueError, match="2 axes given for an array of 3"):
        dev.transpose(0, 1)
    with pytest.raises(IndexError, match="axis 3 is out of bounds for an array of dimension 3"):
        dev.transpose(0, 1, 3)
    with pytest.raises(OverflowError, match="does not fit in a signed 64-bit integer"):
        dev.transpose(0, 1, 2**65)
    with pytest.raises(TypeError, match="transpose\\(\\): axes: expected a tuple of int, got float"):
        dev.transpose(0, 1.0, 2)
    with pytest.raises(TypeError, match="got bool"):
        dev.transpose(True, 0, 1)


def test_split_like_numba():
    host = np.arange(10, dtype=np.int32)
    dev = cai.to_device(host)
    parts = dev.split(4)
    assert iter(parts) is parts  # an iterator, as Numba's generator
    assert [p.copy_to_host().tolist() for p in parts] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert [p.copy_to_host().tolist() for p in dev[::-3].split(2)] == [[9, 6], [3, 0]]
    assert list(dev[:0].split(3)) == []
    with pytest.raises(ValueError, match="only 1-d arrays"):
        dev.reshape(2, 5).split(2)
    with pytest.raises(ValueError, match="positive"):
        dev.split(0)


def _live_arrays():
    return sum(isinstance(o, cai.DeviceNDArray) for o in gc.get_objects())


def test_split_makes_each_piece_when_asked_for():
    dev = cai.device_array(100_000, np.uint8)
    before = _live_arrays()
    parts = dev.split(1)                     # validated now, no piece made yet
    assert _live_arrays() == before
    first = next(parts)
    assert first.shape == (1,) and first.ptr == dev.ptr
    assert _live_arrays() == before + 1      # one piece, not 100,000
    second = next(parts)
    assert second.ptr == dev.ptr + 1 and _live_arrays() == before + 2


def test_split_iterator_keeps_then_releases_the_array():
    dev = cai.to_device(np.arange(5))
    ref = weakref.ref(dev)
    parts = dev.split(2)
    del dev
    assert kept(ref)                         # the iterator holds the array
    assert [p.copy_to_host().tolist() for p in parts] == [[0, 1], [2, 3], [4]]
    assert not kept(ref)                     # released once the pieces ran out
    with pytest.raises(StopIteration):
        next(parts)


def test_split_iterator_in_a_cycle_is_collected():
    src = cai.to_device(np.arange(6))
    producer = DictProducer(src.__cuda_array_interface__, keep=src)
    producer.parts = cai.as_cuda_array(producer).split(2)   # producer -> parts -> array -> producer
    ref = weakref.ref(producer)
    del producer
    assert not kept(ref)


def test_copy():
    host = np.arange(12, dtype=np.float64).reshape(3, 4)
    dev = cai.to_device(host)
    c = dev.T.copy()
    assert c.is_c_contiguous() and c.ptr != dev.ptr
    np.testing.assert_array_equal(c.copy_to_host(), host.T)
    assert dev.copy(order="F").is_f_contiguous()
    assert dev.T.copy(order="A").is_f_contiguous()
    s = cai.stream()
    assert dev.copy(stream=s).stream == s


def test_element_access_returns_numpy_scalars():
    host = np.arange(12, dtype=np.int16).reshape(3, 4)
    dev = cai.to_device(host)
    for key in ((1, 2), (-1, -1), (np.int64(2), 0)):
        got = dev[key]
        assert type(got) is np.int16 and got == host[key]
    assert dev[1, 2, ...].shape == ()  # with an ellipsis: a 0-d view, as NumPy's
    assert isinstance(dev[1], cai.DeviceNDArray)  # fewer indices than axes: a view
    assert dev.ravel()[5] == 5
    assert cai.to_device(np.float32(2.5))[()] == np.float32(2.5)
    rec = np.array([(1, 2.0)], dtype=[("a", "<i4"), ("b", "<f8")])
    got = cai.to_device(rec)[0]
    assert isinstance(got, np.void) and got["b"] == 2.0
    with pytest.raises(IndexError):
        dev[3, 0]
    with pytest.raises(IndexError):
        dev[0, 0, 0]


def test_element_access_waits_for_the_arrays_stream():
    # A slow producer stream: the read must see the fill, and the race detector must not fire.
    s = cai.stream(non_blocking=True)
    a = cai.device_array(8, dtype=np.int32, stream=s)
    cai.ops.fill(a, 0, stream=s)
    cai.synchronize()
    gate = cai.sim.hold(s)
    cai.ops.fill(a, 7, stream=s)
    assert not s.query()
    threading.Thread(target=gate.release).start()  # while (or before) the read waits
    assert a[3] == 7

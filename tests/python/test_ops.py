"""Issue 4: the built-in consumers cai.ops.copy / fill / add against NumPy, for several dtypes
and strided views, with cai arrays and foreign CAI objects as operands."""

import numpy as np
import pytest

import cai
from helpers import Producer

ADD_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
              np.uint64, np.float16, np.float32, np.float64, np.complex64, np.complex128]
LAYOUTS = {
    "contiguous": lambda a: a,
    "reversed": lambda a: a[::-1],
    "step": lambda a: a[::2, 1::3],
    "transposed": lambda a: a.T[::-1, ::2] if a.ndim == 2 else a,
    "column": lambda a: a[:, 3],
    "newaxis": lambda a: a[None, 2:5, ..., None],
}


def values(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(dt)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)
    if dt.kind == "f":
        return (rng.standard_normal(shape) * 100).astype(dt)
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)


def numpy_add(a, b):
    if a.dtype == np.bool_:
        return a | b  # bool + bool is logical or, as NumPy's add
    with np.errstate(over="ignore"):
        return (a + b).astype(a.dtype)  # integers wrap around


@pytest.mark.parametrize("dtype", ADD_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_add(dtype, layout):
    view = LAYOUTS[layout]
    ha, hb = values(dtype, (6, 8), 1), values(dtype, (6, 8), 2)
    hout = np.zeros((6, 8), dtype)
    a, b, out = cai.to_device(ha), cai.to_device(hb), cai.to_device(hout)
    cai.ops.add(view(a), view(b), view(out))
    view(hout)[...] = numpy_add(view(ha), view(hb))
    np.testing.assert_array_equal(out.copy_to_host(), hout)


@pytest.mark.parametrize("dtype", [np.int32, np.float64, np.complex64])
def test_add_mixed_layouts_and_aliasing(dtype):
    ha = values(dtype, (6, 6), 3)
    a = cai.to_device(ha)
    b = cai.to_device(np.asfortranarray(ha))
    out = cai.device_array((6, 6), dtype=dtype, order="F")
    cai.ops.add(a, b.T[::-1].T[:, ::-1], out)  # b, through two reversals
    np.testing.assert_array_equal(out.copy_to_host(), numpy_add(ha, ha))
    # out may be an input (elementwise in place).
    cai.ops.add(a, a, a)
    np.testing.assert_array_equal(a.copy_to_host(), numpy_add(ha, ha))


def test_add_0d_and_zero_size():
    a = cai.to_device(np.float32(1.5))
    out = cai.device_array((), np.float32)
    cai.ops.add(a, a, out)
    assert out.copy_to_host() == np.float32(3.0)
    z = cai.device_array((0, 3), np.float32)
    cai.ops.add(z, z, z)


def test_add_foreign_operands():
    ha, hb = np.arange(12.0).reshape(3, 4), np.ones((3, 4))
    a, b = cai.to_device(ha), cai.to_device(hb)
    out = cai.device_array((3, 4))
    for version in (0, 1, 2, 3):
        producers = [Producer(a, version=version), Producer(b[::-1], version=version),
                     Producer(out, version=version)]
        cai.ops.add(*producers)
        np.testing.assert_array_equal(out.copy_to_host(), ha + hb[::-1])
        assert [p.reads for p in producers] == [1, 1, 1]  # each attribute read once


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int64, np.uint8])
def test_add_on_each_kind_of_stream(dtype):
    ha = values(dtype, 32, 4)
    a = cai.to_device(ha)
    out = cai.device_array(32, dtype)
    kept = cai.stream()  # an int handle does not keep its stream alive
    for stream in (0, None, cai.stream(), cai.stream(non_blocking=True),
                   cai.per_thread_default_stream(), cai.legacy_default_stream(),
                   kept.handle, 1, 2):
        cai.ops.fill(out, 0)
        cai.ops.add(a, a, out, stream=stream)
        np.testing.assert_array_equal(out.copy_to_host(), numpy_add(ha, ha))


@pytest.mark.parametrize("a_shape,b_shape,out_shape", [((3,), (4,), (3,)), ((2, 3), (2, 3), (3, 2)),
                                                       ((3,), (3,), (1, 3))])
def test_add_shapes_must_be_equal(a_shape, b_shape, out_shape):
    with pytest.raises(ValueError, match="shape"):
        cai.ops.add(cai.device_array(a_shape), cai.device_array(b_shape),
                    cai.device_array(out_shape))


def test_add_dtypes_must_be_equal():
    with pytest.raises(TypeError, match="dtype"):
        cai.ops.add(cai.device_array(3, np.float32), cai.device_array(3, np.float64),
                    cai.device_array(3, np.float64))


@pytest.mark.parametrize("dtype", [">f8", "<M8[s]", "S4", "V4", [("a", "<i4")], "<f16", "<c32"])
def test_add_refuses_other_dtypes(dtype):
    a = cai.device_array(3, dtype)
    with pytest.raises(NotImplementedError, match="add"):
        cai.ops.add(a, a, a)


def test_ops_refuse_non_arrays():
    a = cai.device_array(3)
    with pytest.raises(TypeError):
        cai.ops.add(a, [1, 2, 3], a)
    with pytest.raises(TypeError):
        cai.ops.copy(object(), a)
    with pytest.raises(TypeError):
        cai.ops.fill(object(), 1)


# --------------------------------------------------------------------------- copy

COPY_DTYPES = ADD_DTYPES + [">i4", "<M8[us]", "S5", "U3", "V3",
                            np.dtype([("x", "<f4"), ("y", "u1", (3,))])]


def copy_values(dtype, shape, seed):
    dt = np.dtype(dtype)
    if dt.kind in "biufc" and dt.isnative:
        return values(dt, shape, seed)
    n = int(np.prod(shape)) * dt.itemsize
    raw = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()
    return np.frombuffer(raw, np.uint8).view(dt).reshape(shape).copy()


@pytest.mark.parametrize("dtype", COPY_DTYPES, ids=lambda d: str(np.dtype(d)))
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_copy(dtype, layout):
    view = LAYOUTS[layout]
    hs = copy_values(dtype, (6, 8), 5)
    hd = copy_values(dtype, (6, 8), 6)
    src, dst = cai.to_device(hs), cai.to_device(hd)
    cai.ops.copy(view(dst), view(src))
    view(hd)[...] = view(hs)
    assert dst.copy_to_host().tobytes() == hd.tobytes()


def test_copy_between_layouts():
    hs = np.arange(48, dtype=np.int16).reshape(6, 8)
    src = cai.to_device(hs)
    dst = cai.device_array((8, 6), np.int16, order="F")
    cai.ops.copy(dst, src.T)
    np.testing.assert_array_equal(dst.copy_to_host(), hs.T)
    cai.ops.copy(dst[::-1, ::2], src.T[:, ::2])
    expected = hs.T.copy()
    expected[::-1, ::2] = hs.T[:, ::2]
    np.testing.assert_array_equal(dst.copy_to_host(), expected)


@pytest.mark.parametrize("dst_key,src_key", [
    (slice(1, None), slice(None, -1)), (slice(None, -1), slice(1, None)),
    (slice(None), slice(None, None, -1)), (slice(None, None, 2), slice(None, 5)),
])
def test_copy_overlapping(dst_key, src_key):
    h = np.arange(10.0)
    d = cai.to_device(h)
    cai.ops.copy(d[dst_key], d[src_key])
    h[dst_key] = h[src_key].copy()
    np.testing.assert_array_equal(d.copy_to_host(), h)


def test_copy_checks():
    with pytest.raises(ValueError, match="shape"):
        cai.ops.copy(cai.device_array(3), cai.device_array(4))
    with pytest.raises(TypeError, match="dtype"):
        cai.ops.copy(cai.device_array(3, np.int32), cai.device_array(3, np.uint32))


# --------------------------------------------------------------------------- fill

@pytest.mark.parametrize("dtype,value", [
    (np.bool_, True), (np.int8, -5), (np.uint16, 65535), (np.int64, 2**62), (np.float16, 0.5),
    (np.float32, np.nan), (np.float64, -np.inf), (np.complex128, 1 - 2j), (">i4", 258),
    ("<M8[s]", np.datetime64("2001-02-03T04:05:06")), ("S3", b"ab"), ("U2", "zz"),
    (np.dtype([("a", "<i2"), ("b", "<f4")]), (3, 1.5)),
])
@pytest.mark.parametrize("layout", ["contiguous", "reversed", "step", "column"])
def test_fill(dtype, value, layout):
    view = LAYOUTS[layout]
    h = np.zeros((6, 8), dtype)
    d = cai.to_device(h)
    cai.ops.fill(view(d), value)
    view(h)[...] = value
    assert d.copy_to_host().tobytes() == h.tobytes()


def test_fill_converts_like_numpy_unless_that_loses_the_value():
    d = cai.device_array(4, np.int32)
    cai.ops.fill(d, 3.0)
    np.testing.assert_array_equal(d.copy_to_host(), np.full(4, 3, np.int32))
    with pytest.raises(ValueError, match=r"fill\(\): value: assigning float64 values to an "
                                         r"array of int32 would change them \(3.9 becomes 3"):
        cai.ops.fill(d, 3.9)
    with pytest.raises(ValueError, match=r"fill\(\): value: assigning float64 .* int32 .*"
                                         r"1e\+20 becomes"):
        cai.ops.fill(d, 1e20)  # was NumPy's OverflowError, naming neither fill nor int32
    with pytest.raises(ValueError, match=r"fill\(\): value: 10{30} does not fit in int32"):
        cai.ops.fill(d, 10**30)
    with pytest.raises(ValueError, match="256 becomes 0"):
        cai.ops.fill(cai.device_array(2, np.uint8), 256)
    np.testing.assert_array_equal(d.copy_to_host(), np.full(4, 3, np.int32))
    with pytest.raises(TypeError, match="scalar"):
        cai.ops.fill(d, [1, 2, 3, 4])


def test_fill_foreign_array():
    a = cai.device_array(5, np.float64)
    cai.ops.fill(Producer(a), 2.5)
    np.testing.assert_array_equal(a.copy_to_host(), np.full(5, 2.5))

"""Issue 2, core/layout: contiguity flags and byte extents against NumPy, on real NumPy views.

Probe: cai._cai.core.layout_facts(shape, strides, itemsize) -> dict(c_contiguous,
f_contiguous, extent=(lo, hi) relative to the first element, size, may_overlap).
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from numpy.lib.stride_tricks import as_strided

from cai._cai import core

try:  # NumPy 2
    from numpy.lib.array_utils import byte_bounds
except ImportError:  # pragma: no cover - NumPy 1
    byte_bounds = np.byte_bounds

ITEMSIZES = [1, 2, 4, 8, 16]
BIG = np.zeros(1 << 16, dtype=np.uint8)  # the memory every as_strided view lives in


def facts_of(a):
    return core.layout_facts(a.shape, a.strides, a.itemsize)


def numpy_extent(a):
    """byte_bounds relative to the first element's address."""
    lo, hi = byte_bounds(a)
    base = a.__array_interface__["data"][0]
    return lo - base, hi - base


def check_against_numpy(a):
    f = facts_of(a)
    assert f["c_contiguous"] == a.flags.c_contiguous, (a.shape, a.strides)
    assert f["f_contiguous"] == a.flags.f_contiguous, (a.shape, a.strides)
    assert f["size"] == a.size
    if a.size == 0:
        assert f["extent"] == (0, 0)
        assert not f["may_overlap"]
    else:
        assert f["extent"] == numpy_extent(a)
        if not f["may_overlap"]:
            # The overlap check is conservative: "no" must be true.
            offsets = np.zeros(a.shape, dtype=np.int64)
            for axis, stride in enumerate(a.strides):
                shape = [1] * a.ndim
                shape[axis] = a.shape[axis]
                offsets = offsets + (np.arange(a.shape[axis]) * stride).reshape(shape)
            starts = np.sort(offsets.ravel())
            assert np.all(np.diff(starts) >= a.itemsize)
    return f


@st.composite
def strided_views(draw):
    """A view made with as_strided on a big buffer: any shape (0-d and zero-size included),
    byte strides negative, zero, C/F-like, or not multiples of the item size."""
    itemsize = draw(st.sampled_from(ITEMSIZES))
    ndim = draw(st.integers(0, 5))
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=ndim, max_size=ndim)))
    style = draw(st.sampled_from(["c", "f", "random", "random", "scaled"]))
    if style in ("c", "f"):
        strides, acc = [0] * ndim, itemsize
        axes = range(ndim - 1, -1, -1) if style == "c" else range(ndim)
        for ax in axes:
            strides[ax] = acc
            acc *= max(shape[ax], 1)
        # Perturb the strides of size-1 axes, which NumPy ignores.
        for ax in range(ndim):
            if shape[ax] == 1 and draw(st.booleans()):
                strides[ax] = draw(st.integers(-64, 64))
    elif style == "scaled":
        strides = [itemsize * draw(st.integers(-12, 12)) for _ in range(ndim)]
    else:
        strides = [draw(st.integers(-200, 200)) for _ in range(ndim)]
    dtype = np.dtype(f"V{itemsize}")
    # Place the first element so that every touched byte is inside BIG.
    lo = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0 and n > 0)
    hi = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0 and n > 0) + itemsize
    start = -lo
    assert start + hi <= BIG.size
    n = (BIG.size - start) // itemsize
    base = BIG[start:start + n * itemsize].view(dtype)
    return as_strided(base, shape=shape, strides=tuple(strides))


@st.composite
def sliced_arrays(draw):
    """A real array, then slicing with steps (negative too), integer indexing and a
    transpose: the views NumPy users actually make."""
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 6), min_size=ndim, max_size=ndim)))
    dtype = draw(st.sampled_from([np.int8, np.int16, np.float32, np.float64, np.complex128]))
    order = draw(st.sampled_from("CF"))
    a = np.zeros(shape, dtype=dtype, order=order)
    key = []
    for n in shape:
        kind = draw(st.sampled_from(["all", "slice", "int", "newaxis"]))
        if kind == "all":
            key.append(slice(None))
        elif kind == "int":
            key.append(draw(st.integers(-n, n - 1)))
        elif kind == "newaxis":
            key.extend([None, slice(None)])
        else:
            start = draw(st.none() | st.integers(-n - 1, n + 1))
            stop = draw(st.none() | st.integers(-n - 1, n + 1))
            step = draw(st.sampled_from([None, 1, 2, 3, -1, -2]))
            key.append(slice(start, stop, step))
    v = a[tuple(key)]
    if draw(st.booleans()):
        v = v.T
    return v


@settings(max_examples=300)
@given(strided_views())
def test_flags_and_extent_of_as_strided_views(a):
    check_against_numpy(a)


@settings(max_examples=300)
@given(sliced_arrays())
def test_flags_and_extent_of_sliced_views(a):
    check_against_numpy(a)


@pytest.mark.parametrize("shape,strides,itemsize,c,f", [
    ((), (), 8, True, True),
    ((0,), (8,), 8, True, True),
    ((0, 3), (-5, 7), 4, True, True),      # zero-size: contiguous both ways, any strides
    ((3, 1), (8, 1234), 8, True, True),    # size-1 dims ignored
    ((1, 4), (-7, 4), 4, True, True),
    ((2, 3), (24, 8), 8, True, False),
    ((2, 3), (8, 16), 8, False, True),
    ((2, 3), (48, 16), 8, False, False),
    ((4,), (0,), 8, False, False),         # broadcast
    ((4,), (-8,), 8, False, False),
])
def test_contiguity_table(shape, strides, itemsize, c, f):
    facts = core.layout_facts(shape, strides, itemsize)
    assert (facts["c_contiguous"], facts["f_contiguous"]) == (c, f)


@pytest.mark.parametrize("shape,strides,itemsize,extent", [
    ((), (), 8, (0, 8)),
    ((5,), (-4,), 4, (-16, 4)),
    ((2, 3), (-24, 8), 8, (-24, 24)),
    ((3,), (0,), 2, (0, 2)),
    ((0, 4), (32, 8), 8, (0, 0)),
])
def test_extent_table(shape, strides, itemsize, extent):
    assert core.layout_facts(shape, strides, itemsize)["extent"] == extent


def test_may_overlap():
    assert core.layout_facts((4,), (0,), 8)["may_overlap"]
    assert core.layout_facts((3, 2), (8, 8), 8)["may_overlap"]
    assert not core.layout_facts((3, 2), (16, 8), 8)["may_overlap"]
    assert not core.layout_facts((3, 2), (-16, 8), 8)["may_overlap"]
    assert not core.layout_facts((1, 5), (0, 8), 8)["may_overlap"]  # size-1 dims never overlap


@pytest.mark.parametrize("shape,strides,itemsize,exc", [
    ((2, 3), (8,), 8, ValueError),              # one stride per dim
    ((-1,), (8,), 8, ValueError),                # negative size
    ((2**40, 2**40), (8, 8), 8, OverflowError),  # element count x item size overflows
    ((0, 2**62, 4), (8, 8, 8), 8, OverflowError),  # zero dims still multiplied in, as NumPy
    ((3,), (2**62,), 8, OverflowError),          # the extent overflows
])
def test_layout_rejections(shape, strides, itemsize, exc):
    with pytest.raises(exc):
        core.layout_facts(shape, strides, itemsize)

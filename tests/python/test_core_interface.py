"""Issue 2, core/interface: validate(dict) -> the normalized v3 dict, for random descriptors of
every version, with NumPy as the reference for typestr normalization and contiguity.
validate() does not touch memory, so any non-zero pointer will do."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from numpy.lib.stride_tricks import as_strided

from cai._cai import core

TYPESTRS = ["|b1", "|i1", "<i2", ">i2", "=i4", "<u8", "<f2", ">f4", "<f8", "<c8", ">c16",
            "<M8[ns]", ">m8[10s]", "|S3", "<U2", "|V5", "<f16"]
PTR = 0x7F0000001000


@st.composite
def descriptors(draw):
    typestr = draw(st.sampled_from(TYPESTRS))
    itemsize = np.dtype(typestr).itemsize
    ndim = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=ndim, max_size=ndim)))
    version = draw(st.integers(0, 3))
    d = {"shape": shape, "typestr": typestr, "version": version}
    kind = draw(st.sampled_from(["absent", "none", "c", "random"]))
    strides = None
    if kind == "c":
        strides = tuple(np.empty(shape, dtype=np.dtype(typestr)).strides) if all(shape) else None
        if strides is not None:
            d["strides"] = strides
    elif kind == "random" and ndim:
        strides = tuple(itemsize * draw(st.integers(-3, 3)) for _ in shape)
        d["strides"] = strides
    elif kind == "none":
        d["strides"] = None
    size = int(np.prod(shape))
    d["data"] = (PTR if size else 0, draw(st.booleans()))
    if version >= 3 or draw(st.booleans()):
        d["stream"] = draw(st.sampled_from([None, 1, 2, 0x5000]))
    return d


def numpy_view(d):
    """A NumPy array with the descriptor's layout (never read)."""
    dt = np.dtype(d["typestr"])
    base = np.zeros(4096, np.uint8)
    strides = d.get("strides")
    if strides is None:
        return np.zeros(d["shape"], dt)
    lo = sum((n - 1) * s for n, s in zip(d["shape"], strides) if s < 0 and n > 0)
    start = -lo
    n = (base.size - start) // dt.itemsize
    return as_strided(base[start:start + n * dt.itemsize].view(dt), d["shape"], strides)


@settings(max_examples=200)
@given(descriptors())
def test_validate_normalizes_like_numpy(d):
    out = core.validate(dict(d))
    ref = numpy_view(d)
    assert out["version"] == 3
    assert out["shape"] == ref.shape
    assert out["typestr"] == ref.dtype.str
    if ref.flags.c_contiguous:
        assert out["strides"] is None
    else:
        assert out["strides"] == ref.strides
    assert out["data"] == ((PTR if ref.size else 0), d["data"][1])
    assert out["stream"] == d.get("stream")
    assert out.get("descr") is None and out.get("mask") is None
    # Idempotent: the normalized dict validates to itself.
    assert core.validate(dict(out)) == out


@settings(max_examples=200)
@given(descriptors())
def test_stream_zero_is_always_rejected(d):
    d["stream"] = 0
    with pytest.raises(ValueError, match="^stream: 0"):
        core.validate(d)


@settings(max_examples=200)
@given(descriptors(), st.sampled_from(["shape", "typestr", "data", "version"]))
def test_required_keys(d, key):
    del d[key]
    with pytest.raises(ValueError, match=f"missing required key '{key}'"):
        core.validate(d)


@pytest.mark.parametrize("version,ok", [(0, True), (1, True), (2, False), (3, False)])
def test_zero_size_pointer_rule_by_version(version, ok):
    d = {"shape": (0, 3), "typestr": "<f4", "data": (PTR, False), "version": version}
    if ok:
        assert core.validate(d)["data"] == (0, False)
    else:
        with pytest.raises(ValueError, match="^data"):
            core.validate(d)


def test_structured_descr_round_trip():
    dt = np.dtype({"names": ["a", "b"], "formats": ["<i2", (">f8", (2,))], "offsets": [0, 8],
                   "itemsize": 32})
    d = {"shape": (2,), "typestr": dt.str, "descr": dt.descr, "data": (PTR, False), "version": 3}
    out = core.validate(d)
    assert out["typestr"] == "|V32"
    assert out["descr"] == dt.descr

"""Issue 8: random and mutated inputs for the importers (hypothesis).

cai.as_cuda_array, cai.from_cuda_array_interface and cai.from_dlpack are fed random dicts (wrong
types, huge and negative numbers, deep nesting, cyclic and chained masks), attributes that are
not dicts or that raise, and DLPack producers with random tensors. The only allowed outcomes:

- a valid array, whose metadata agrees with what was given and which re-exports itself, or
- TypeError / ValueError / NotImplementedError / BufferError / OverflowError / IndexError with a
  non-empty message, or the producer's own exception unchanged.

Never a crash, a hang (every test is bounded) or another exception type. Wild data pointers are
only generated where nothing reads the memory (an import reads none): the simulator, like a GPU,
reads whatever address it is given, so a copy from a wild pointer is the caller's crash.
"""

import os

os.environ.setdefault("CAI_BACKEND", "sim")


import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import cai  # noqa: E402
from helpers import AttrProducer, Index  # noqa: E402
from test_bad_inputs import (  # noqa: E402
    Ctx, DLProducer, TensorFactory, capsule_name, check_deleters)

ALLOWED = (TypeError, ValueError, NotImplementedError, BufferError, OverflowError, IndexError)

FUZZ = settings(max_examples=200, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


class ProducerError(Exception):
    """Raised by the random producers themselves: it must reach the caller unchanged."""


# One allocation for every valid pointer of this file (2 MiB: large enough for small shapes).
MEM = None


def mem():
    global MEM
    if MEM is None:
        MEM = cai.device_array((1 << 18,), dtype=np.float64)
    return MEM


# ----- values -------------------------------------------------------------------------------

def RaisingIndex():
    return Index(raises=ProducerError("index"))


class Opaque:
    pass


BIG = st.sampled_from([2**31, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**100,
                       -(2**31), -(2**63), -(2**63) - 1, -(2**64)])
INTS = st.one_of(st.integers(-3, 8), BIG, st.integers())
SCALARS = st.one_of(
    st.none(), st.booleans(), INTS, st.floats(allow_nan=True), st.text(max_size=6),
    st.binary(max_size=6), st.builds(Opaque), st.builds(RaisingIndex),
    INTS.map(Index), st.sampled_from([np.int64(3), np.float32(1.5), np.bool_(True), ...]),
)
# Deep nesting: containers of containers, up to a few dozen levels.
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.lists(inner, max_size=4).map(tuple),
                            st.dictionaries(st.text(max_size=4), inner, max_size=3),
                            st.frozensets(st.integers(), max_size=3)),
    max_leaves=30,
)
TYPESTRS = st.sampled_from(["<f4", "<f8", ">f4", "|b1", "<i2", "|u1", "<c8", "<c16", "|S3",
                            "<U2", "|V4", "<V2", "<M8[ns]", "<m8[s]", "<f2", "<f16", "", "<",
                            "<x4", "<f5", "f4", "|i1", "=f4", "<i8", "<u8", "|V0"])
SMALL_DIMS = st.lists(st.one_of(st.integers(0, 4), INTS), max_size=5)
MASK_TYPESTRS = st.sampled_from(["|b1", "|u1", "<i4", "<f4"])


def near_valid(key, draw, safe=False):
    """A value of the right shape for `key`, often valid, sometimes at the edges. With `safe`,
    pointers stay inside cai's allocation (the simulator bounds-checks those; a wild pointer
    would be read as host memory, as a GPU reads any address it is given)."""
    m = mem()
    if key == "shape":
        return tuple(draw(SMALL_DIMS))
    if key == "typestr":
        return draw(TYPESTRS)
    if key == "data":
        ptrs = [st.just(m.ptr), st.just(m.ptr + 8), st.just(0)]
        ptr = draw(st.one_of(*ptrs) if safe else st.one_of(*ptrs, INTS))
        ro = draw(st.one_of(st.booleans(), st.sampled_from([0, 1, np.bool_(False)])))
        return (ptr, ro)
    if key == "version":
        return draw(st.one_of(st.integers(-1, 5), INTS))
    if key == "strides":
        return draw(st.one_of(st.none(), st.lists(st.one_of(
            st.integers(-16, 64), INTS), max_size=5).map(tuple)))
    if key == "descr":
        entry = st.tuples(st.sampled_from(["", "a", "b"]), TYPESTRS)
        return draw(st.one_of(st.none(), st.lists(entry, max_size=3),
                              st.lists(st.tuples(st.sampled_from(["a", "b"]), TYPESTRS,
                                                 SMALL_DIMS.map(tuple)), max_size=2)))
    if key == "stream":
        return draw(st.one_of(st.none(), st.integers(-2, 3), INTS))
    raise AssertionError(key)


KEYS = ["shape", "typestr", "data", "version", "strides", "descr", "mask", "stream"]


def Producer(desc=None, raises=False):
    """An object with __cuda_array_interface__ (a value, a dict, or a property that raises)."""
    return AttrProducer(desc, ProducerError("attribute") if raises else None)


@st.composite
def interfaces(draw, depth=0, safe=False):
    """A CAI dict: a valid one, with each key kept, dropped, replaced by a near-valid value or
    replaced by any value; the mask is None, absent, a (possibly bad) producer, or a cycle."""
    m = mem()
    shape = draw(st.sampled_from([(2, 3), (6,), (), (0, 3), (4, 1, 2)]))
    d = {"shape": shape, "typestr": "<f4", "data": (0 if 0 in shape else m.ptr, False),
         "version": 3, "strides": None, "stream": 1}
    for key in KEYS:
        actions = ["keep"] * 4 + ["drop", "near", "near"]
        if not (safe and key == "data"):
            actions.append("any")
        action = draw(st.sampled_from(actions))
        if action == "drop":
            d.pop(key, None)
        elif action == "any":
            d[key] = draw(VALUES)
        elif action == "near":
            if key == "mask":
                d[key] = draw(masks(depth, shape, safe))
            else:
                d[key] = near_valid(key, draw, safe)
    return d


@st.composite
def masks(draw, depth, shape, safe=False):
    kind = draw(st.sampled_from(["none", "good", "random", "cycle", "not-dict", "raises"]))
    if kind == "none" or depth >= 3:
        return None
    if kind == "good":
        ts = draw(MASK_TYPESTRS)
        return Producer({"shape": shape, "typestr": ts, "data": (
            0 if 0 in shape else mem().ptr + 4096, False), "version": 3})
    if kind == "random":
        return Producer(draw(interfaces(depth + 1, safe)))
    if kind == "cycle":
        p = Producer()
        p.value = {"shape": shape, "typestr": "|b1", "data": (mem().ptr, False), "version": 3,
                  "mask": p}
        return p
    if kind == "not-dict":
        return Producer(draw(VALUES))
    return Producer(raises=True)


def producers(safe=False):
    return st.one_of(
        interfaces(safe=safe).map(Producer),
        VALUES.map(Producer),                # the attribute is not a dict
        st.just(Producer(raises=True)),      # the attribute raises
        VALUES,                              # not a producer at all
    )


# ----- checks -----------------------------------------------------------------------------------

def expect_clean(fn, *args, **kwargs):
    """Runs fn; returns its result, or None after an allowed exception."""
    try:
        return fn(*args, **kwargs)
    except ProducerError:
        return None
    except ALLOWED as e:
        assert str(e), f"{type(e).__name__} without a message"
        return None
    except cai.DeviceError as e:
        # A `stream` the driver does not know: the import records an event on it at once.
        assert "not a stream" in str(e), str(e)
        return None
    # Anything else (RuntimeError, AttributeError, SystemError, ...) fails the test.


def check_array(a, desc=None):
    assert isinstance(a, cai.DeviceNDArray)
    assert all(isinstance(n, int) and n >= 0 for n in a.shape)
    assert a.size == int(np.prod(a.shape, dtype=object))
    out = a.__cuda_array_interface__
    assert out["shape"] == a.shape
    assert out["version"] == 3
    assert out["stream"] != 0
    if a.size == 0:
        assert out["data"][0] == 0
    else:
        assert out["data"][0] != 0
    if isinstance(desc, dict):
        assert a.shape == tuple(int(n) for n in desc["shape"])
        if "mask" in desc and desc["mask"] is not None:
            assert a.mask is not None and a.mask.shape == a.shape
    # The export reads back as the same array.
    b = cai.from_cuda_array_interface(out, owner=a)
    assert (b.shape, b.strides, b.ptr) == (a.shape, a.strides, a.ptr)
    # The CAI names ml_dtypes' types (bfloat16, float8) only as raw bytes (docs/python.md).
    assert b.dtype == a.dtype or (a.dtype.type.__module__ == "ml_dtypes"
                                  and b.dtype == np.dtype(f"V{a.itemsize}"))


# ----- tests ------------------------------------------------------------------------------------

@FUZZ
@given(producers())
def test_as_cuda_array_random(obj):
    a = expect_clean(cai.as_cuda_array, obj)
    if a is not None:
        check_array(a, getattr(obj, "desc", None))


@FUZZ
@given(interfaces())
def test_from_cuda_array_interface_random(desc):
    a = expect_clean(cai.from_cuda_array_interface, desc, owner=mem())
    if a is not None:
        check_array(a, desc)


@FUZZ
@given(st.data())
def test_mutated_valid_dicts(data):
    """Start from the export of a real array and change one key at a time."""
    src = cai.to_device(np.arange(12, dtype=np.float32).reshape(3, 4))
    d = dict(src.__cuda_array_interface__)
    key = data.draw(st.sampled_from(KEYS))
    how = data.draw(st.sampled_from(["near", "any", "drop"]))
    if how == "drop":
        d.pop(key, None)
    elif how == "any":
        d[key] = data.draw(VALUES)
    elif key == "mask":
        d[key] = data.draw(masks(0, (3, 4)))
    else:
        d[key] = near_valid(key, data.draw)
    a = expect_clean(cai.as_cuda_array, Producer(d))
    if a is not None:
        check_array(a, d)


# DLPack: random tensors behind real capsules, and producers that misbehave.

DTYPES = st.one_of(st.sampled_from([[2, 32, 1], [2, 64, 1], [0, 8, 1], [1, 16, 1], [6, 8, 1],
                                    [5, 64, 1], [4, 16, 1]]),
                   st.tuples(st.integers(0, 255), st.integers(0, 255),
                             st.integers(0, 65535)).map(list))
DEVICES = st.one_of(st.sampled_from([[2, 0], [13, 0], [3, 0], [4, 0], [10, 0], [2, 1]]),
                    st.tuples(st.integers(-5, 40), st.integers(-2, 4)).map(list))


@st.composite
def tensor_specs(draw):
    shape = draw(st.lists(st.one_of(st.integers(0, 4), st.integers(-3, -1),
                                    st.sampled_from([2**40, 2**62, 2**63 - 1])), max_size=4))
    spec = {"shape": shape, "dtype": draw(DTYPES), "device": draw(DEVICES)}
    if draw(st.booleans()):
        spec["strides"] = draw(st.lists(st.one_of(st.integers(-4, 8), st.sampled_from(
            [2**40, 2**62, -(2**62)])), min_size=len(shape), max_size=len(shape)))
    if draw(st.integers(0, 4)) == 0:
        spec["ndim"] = draw(st.integers(-3, 70))
        # An ndim larger than the shape array would make cai read past it: a producer bug
        # that no consumer can detect, so the shape array is made long enough.
        if spec["ndim"] > len(shape):
            spec["shape"] = shape + [1] * (spec["ndim"] - len(shape))
            if "strides" in spec:
                spec["strides"] = spec["strides"] + [1] * (spec["ndim"] - len(shape))
    if draw(st.integers(0, 4)) == 0:
        spec["data"] = draw(st.sampled_from([0, 8]))
    spec["byte_offset"] = draw(st.sampled_from([0, 0, 0, 4, 2**40]))
    spec["major"] = draw(st.sampled_from([1, 1, 1, 0, 2]))
    spec["flags"] = draw(st.sampled_from([0, 0, 1, 2, 3, 2**63]))
    spec["versioned"] = draw(st.sampled_from([True, True, False]))
    if draw(st.integers(0, 5)) == 0:
        spec["name"] = draw(st.sampled_from(["foo", "DLTENSOR", "", "dltensor_versioned2"]))
    return spec


@st.composite
def dlpack_producers(draw):
    spec = {"tensor": draw(tensor_specs())}
    behaviour = draw(st.sampled_from(["tensor"] * 5 + ["returns", "raises", "device-raises",
                                                        "legacy-only", "device-value"]))
    if behaviour == "returns":
        spec["returns"] = draw(st.one_of(st.none(), st.integers(), st.text(max_size=4)))
    elif behaviour == "raises":
        spec["dlpack_raises"] = {"type": draw(st.sampled_from(
            ["RuntimeError", "BufferError", "TypeError", "ProducerFailed"])), "msg": "producer"}
    elif behaviour == "device-raises":
        spec["device_raises"] = {"type": "ProducerFailed", "msg": "producer"}
    elif behaviour == "legacy-only":
        spec["legacy_only"] = True
    elif behaviour == "device-value":
        spec["dlpack_device"] = draw(st.one_of(
            st.none(), st.integers(), st.text(max_size=3),
            st.lists(st.one_of(st.integers(-5, 20), st.text(max_size=2), st.none()),
                     max_size=3)))
    return spec


def producer_exception(e):
    # What test_bad_inputs' producers raise with msg "producer".
    return str(e) == "producer"


@FUZZ
@given(dlpack_producers(), st.sampled_from([None, False, True]))
def test_from_dlpack_random(spec, copy):
    if copy:
        # A copy reads the memory: keep the pointer inside the allocation (see near_valid).
        spec["tensor"].pop("data", None)
        spec["tensor"]["byte_offset"] = 0
    ctx = Ctx()
    factory = TensorFactory(spec["tensor"], ctx)
    obj = DLProducer(spec, ctx, factory)
    try:
        a = cai.from_dlpack(obj, copy=copy)
    except ALLOWED as e:
        assert str(e)
        a = None
    except cai.DeviceError as e:
        # A copy of a tensor reaching outside its allocation: the simulator refuses it.
        assert copy and ("allocation" in str(e) or "out of memory" in str(e)), e
        a = None
    except Exception as e:  # noqa: BLE001
        if not producer_exception(e):
            raise
        a = None
    if a is not None:
        assert isinstance(a, cai.DeviceNDArray)
        check_array(a)
    del a
    check_deleters(factory, collect=False)  # reference counting alone must release them
    # Every capsule cai consumed has been released by now (no array keeps it).
    used = [m for cap, m in factory.made if capsule_name(cap).startswith("used_")]
    assert len(factory.deleted) == len(used)


@FUZZ
@given(st.one_of(VALUES, interfaces().map(Producer)))
def test_from_dlpack_of_anything(obj):
    """Objects without __dlpack__ (or with a CAI only) are refused with a TypeError."""
    try:
        a = cai.from_dlpack(obj)
    except ALLOWED as e:
        assert str(e)
        return
    check_array(a)


@FUZZ
@given(producers(safe=True), st.sampled_from(["copy", "fill", "add"]))
def test_ops_random(obj, op):
    """The operations import the same way; on valid imports they may also refuse the data
    (masks, dtypes, shapes) or the simulator may refuse memory the import points outside of."""
    dst = cai.device_array((2, 3), dtype=np.float32)
    try:
        if op == "copy":
            cai.ops.copy(dst, obj)
        elif op == "fill":
            cai.ops.fill(obj, 0)
        else:
            cai.ops.add(obj, obj, dst)
    except ALLOWED + (ProducerError,) as e:
        assert str(e) or isinstance(e, ProducerError)
    except cai.DeviceError as e:
        # Only the simulator's memory and stream checks: never a crash.
        assert "allocation" in str(e) or "not a stream" in str(e) or "memory" in str(e), e
    cai.synchronize()


def test_cyclic_masks_terminate():
    """A mask cycle of any length ends in a ValueError naming the depth limit."""
    for n in (1, 2, 3, 9):
        ps = [Producer() for _ in range(n)]
        for i, p in enumerate(ps):
            p.value = {"shape": (2,), "typestr": "|b1", "data": (mem().ptr, False),
                      "version": 3, "mask": ps[(i + 1) % n]}
        with pytest.raises(ValueError, match="masks nested more than 8 levels deep"):
            cai.as_cuda_array(ps[0])


@pytest.mark.parametrize("key", ["shape", "strides", "data", "typestr", "version", "stream",
                                 "mask", "descr"])
def test_deeply_nested_values_do_not_overflow_the_stack(key):
    deep = 0
    for _ in range(100_000):
        deep = [deep]
    d = dict(cai.device_array((2,)).__cuda_array_interface__)
    d[key] = [deep] if key == "descr" else deep
    with pytest.raises((TypeError, ValueError)):
        cai.from_cuda_array_interface(d)

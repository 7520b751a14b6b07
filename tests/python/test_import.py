"""Issue 4, import rules: foreign producers of every CAI version 0-3 (tiny classes carrying a
dict that points at a cai array's memory), their leniencies, and every rejection."""

import numpy as np
import pytest

import cai
from cai._cai import core
from helpers import Producer, host_bytes

DROP = Producer.DROP


@pytest.fixture
def src():
    """A device array with known contents: the memory the foreign producers point at."""
    return cai.to_device(np.arange(12, dtype=np.int32).reshape(3, 4))


HOST = np.arange(12, dtype=np.int32).reshape(3, 4)


# --------------------------------------------------------------------------- every version

@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_each_version_is_imported_without_copy(src, version):
    p = Producer(src, version=version)
    a = cai.as_cuda_array(p)
    assert isinstance(a, cai.DeviceNDArray)
    assert a.shape == (3, 4) and a.dtype == np.int32 and a.ptr == src.ptr
    assert a.__cuda_array_interface__["version"] == 3  # re-exported as v3
    np.testing.assert_array_equal(a.copy_to_host(), HOST)
    assert p.reads == 1  # the attribute is read once


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_each_version_strided_view(src, version):
    view = src[::-1, 1::2]
    a = cai.as_cuda_array(Producer(view, version=version))
    assert a.strides == HOST[::-1, 1::2].strides
    np.testing.assert_array_equal(a.copy_to_host(), HOST[::-1, 1::2])


@pytest.mark.parametrize("version", [4, 7])
def test_versions_above_3_are_read_as_v3(src, version):
    a = cai.as_cuda_array(Producer(src, version=version, stream=1))
    assert a.__cuda_array_interface__["version"] == 3
    np.testing.assert_array_equal(a.copy_to_host(), HOST)


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_explicit_c_strides_accepted_in_every_version(src, version):
    a = cai.as_cuda_array(Producer(src, version=version, strides=(16, 4)))
    assert a.is_c_contiguous()
    assert a.__cuda_array_interface__["strides"] is None
    np.testing.assert_array_equal(a.copy_to_host(), HOST)


@pytest.mark.parametrize("version", [0, 1])
def test_v0_v1_zero_size_with_a_pointer_is_accepted(src, version):
    z = src[:0]
    a = cai.as_cuda_array(Producer(z, version=version, data=(src.ptr, False)))
    assert a.size == 0 and a.ptr == 0
    assert a.__cuda_array_interface__["data"] == (0, False)


@pytest.mark.parametrize("version", [2, 3])
def test_v2_v3_zero_size_with_a_pointer_is_rejected(src, version):
    with pytest.raises(ValueError, match="^data: .*v2"):
        cai.as_cuda_array(Producer(src[:0], version=version, data=(src.ptr, False)))


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_zero_size_with_pointer_zero(src, version):
    a = cai.as_cuda_array(Producer(src[:0], version=version))
    assert a.shape == (0, 4)
    assert a.copy_to_host().shape == (0, 4)


def test_v2_stream_key_is_honoured_when_present(src):
    # v0-v2 had no stream key, but a producer that sets one means it: an event is recorded on
    # it at import while work is queued there (a foreign stream cai does not keep alive), none
    # without the key.
    s = cai.stream()
    with cai.sim.hold(s):
        cai.ops.fill(src, 0.0, stream=s)
        cai.reset_device_call_counts()
        a = cai.as_cuda_array(Producer(src, version=2, stream=s.handle))
        assert cai.device_call_counts()["event_record"] == 1 and a.stream is None
    a = cai.as_cuda_array(Producer(src, version=2, stream=1))
    assert a.stream == cai.legacy_default_stream()
    cai.reset_device_call_counts()
    a = cai.as_cuda_array(Producer(src, version=2))
    assert a.stream is None and cai.device_call_counts()["event_record"] == 0


@pytest.mark.parametrize("stream", [None, DROP])
def test_stream_none_or_absent_means_no_stream(src, stream):
    a = cai.as_cuda_array(Producer(src, stream=stream))
    assert a.stream is None
    assert a.__cuda_array_interface__["stream"] is None


@pytest.mark.parametrize("stream", [1, 2])
def test_default_stream_values(src, stream):
    a = cai.as_cuda_array(Producer(src, stream=stream))
    assert a.stream.handle == stream
    assert a.__cuda_array_interface__["stream"] == stream


# --------------------------------------------------------------------------- rejections

def test_stream_zero_is_a_value_error(src):
    with pytest.raises(ValueError, match="^stream: 0 "):
        cai.as_cuda_array(Producer(src, stream=0))
    with pytest.raises(ValueError, match="stream"):
        cai.from_cuda_array_interface({**src.__cuda_array_interface__, "stream": 0})


def test_negative_stream_is_a_value_error(src):
    with pytest.raises(ValueError, match="^stream: -5"):
        cai.as_cuda_array(Producer(src, stream=-5))


@pytest.mark.parametrize("key", ["shape", "typestr", "data", "version"])
@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_missing_required_key(src, key, version):
    kw = {"version": DROP} if key == "version" else {"version": version, key: DROP}
    with pytest.raises(ValueError, match=f"missing required key '{key}'"):
        cai.as_cuda_array(Producer(src, **kw))


WRONG_TYPES = [
    ("shape", "34"), ("shape", 12), ("shape", (3.0, 4)), ("shape", (True, 4)), ("shape", None),
    ("typestr", 4), ("typestr", b"<i4"), ("typestr", None),
    ("data", 5), ("data", None), ("data", "ptr"), ("data", (1,)), ("data", (1, False, 0)),
    ("data[0]", (1.5, False)), ("data[0]", ("0x10", False)), ("data[0]", (None, False)),
    ("data[1]", ("SRC", "no")), ("data[1]", ("SRC", None)),
    ("version", "3"), ("version", None), ("version", 3.0), ("version", True),
    ("strides", "x"), ("strides", 16), ("strides", (16.0, 4)),
    ("descr", 5), ("descr", "<i4"),
    ("stream", "1"), ("stream", 1.0), ("stream", True),
    ("mask", 5), ("mask", "mask"), ("mask", np.ones((3, 4), bool)),
]


@pytest.mark.parametrize("key,value", WRONG_TYPES, ids=[f"{k}={v!r}" for k, v in WRONG_TYPES])
def test_wrong_types_are_type_errors_naming_the_key(src, key, value):
    if isinstance(value, tuple) and "SRC" in value:
        value = (src.ptr, value[1])
    name = key.split("[")[0]
    with pytest.raises(TypeError) as info:
        cai.as_cuda_array(Producer(src, **{name: value}))
    assert str(info.value).startswith(key), str(info.value)


def test_not_a_dict():
    class Bad:
        __cuda_array_interface__ = [("shape", (1,))]
    with pytest.raises(TypeError, match="must be a dict"):
        cai.as_cuda_array(Bad())
    with pytest.raises(TypeError, match="must be a dict"):
        cai.from_cuda_array_interface([("shape", (1,))])
    with pytest.raises(TypeError):
        cai.from_cuda_array_interface(None)


def test_no_interface_at_all():
    with pytest.raises(TypeError, match="no __cuda_array_interface__"):
        cai.as_cuda_array(object())
    with pytest.raises(TypeError, match="no __cuda_array_interface__"):
        cai.as_cuda_array([1.0, 2.0])
    # A host array is not a GPU array (it may be refused as DLPack CPU memory).
    with pytest.raises((TypeError, BufferError)):
        cai.as_cuda_array(np.ones(3))
    assert not cai.is_cuda_array(np.ones(3))
    assert not cai.is_cuda_array(object())


def test_an_interface_property_that_raises_propagates(src):
    class Broken:
        @property
        def __cuda_array_interface__(self):
            raise RuntimeError("producer failed")
    with pytest.raises(RuntimeError, match="producer failed"):
        cai.as_cuda_array(Broken())


@pytest.mark.parametrize("changes,match", [
    (dict(shape=(3, -4)), "^shape"),
    (dict(version=-1), "^version"),
    (dict(typestr="<q4"), "^typestr"),
    (dict(typestr=""), "^typestr"),
    (dict(data=(0, False)), "^data: pointer 0"),
    (dict(data=(-1, False)), "^data"),
    (dict(data=(2**64, False)), "^data"),
    (dict(strides=(4,)), "^strides"),
    (dict(strides=(4, 4, 4)), "^strides"),
    (dict(descr=[("", "<f4")]), "^descr"),             # contradicts the typestr
    (dict(descr=[("a", "<i8")]), "^descr"),            # item size differs
    (dict(shape=tuple([1] * 65)), "^shape"),
])
def test_value_errors_name_the_key(src, changes, match):
    with pytest.raises(ValueError, match=match):
        cai.as_cuda_array(Producer(src, **changes))


def test_huge_shape_overflows(src):
    with pytest.raises(OverflowError, match="^shape"):
        cai.as_cuda_array(Producer(src, shape=(2**40, 2**40)))
    with pytest.raises(OverflowError):
        cai.as_cuda_array(Producer(src, shape=(2**64, 1)))


def test_huge_strides_overflow(src):
    with pytest.raises(OverflowError, match="^strides"):
        cai.as_cuda_array(Producer(src, strides=(2**62, 4)))


def test_is_cuda_array(src):
    assert cai.is_cuda_array(src)
    assert cai.is_cuda_array(Producer(src))


def test_own_arrays_are_taken_as_they_are(src):
    assert cai.as_cuda_array(src) is src


# --------------------------------------------------------------------------- descr, dtypes

def test_descr_restating_the_typestr_keeps_the_plain_type(src):
    a = cai.as_cuda_array(Producer(src, descr=[("", "<i4")]))
    assert a.dtype == np.int32
    assert a.__cuda_array_interface__.get("descr") is None
    a = cai.as_cuda_array(Producer(src, descr=None))
    assert a.dtype == np.int32


def test_structured_import(src):
    dt = np.dtype([("lo", "<i2"), ("hi", "<i2")])
    a = cai.as_cuda_array(Producer(src, typestr="|V4", descr=dt.descr))
    assert a.dtype == dt
    assert a.__cuda_array_interface__["descr"] == dt.descr
    np.testing.assert_array_equal(a.copy_to_host(), HOST.view(dt))


@pytest.mark.parametrize("dt", [
    np.dtype({"names": ["a", "b"], "formats": ["u1", "<i2"], "offsets": [1, 6], "itemsize": 12}),
    np.dtype([("p", [("x", "<i2"), ("y", "u1", (2,))]), ("q", "u1", (2, 3))]),
    np.dtype({"names": ["s"], "formats": [np.dtype({"names": ["t"], "formats": ["<i4"],
                                                   "offsets": [4], "itemsize": 12})],
              "offsets": [0], "itemsize": 12}),
])
def test_structured_import_with_padding_and_nesting_keeps_the_dtype(dt):
    host = np.frombuffer(bytes(range(4 * dt.itemsize)), np.uint8).view(dt)
    dev = cai.to_device(host)
    a = cai.as_cuda_array(Producer(dev))
    assert a.dtype == dt
    assert a.__cuda_array_interface__["descr"] == dt.descr
    assert a.copy_to_host().tobytes() == host.tobytes()
    # Writing through NumPy's casting rules keeps the fields where they are.
    a[0] = host[1]
    assert host_bytes(a.copy_to_host()[:1]) == host_bytes(host[1:2])
    a[2:] = host[:2]
    assert host_bytes(a.copy_to_host()[2:]) == host_bytes(host[:2])


def test_big_endian_import_keeps_the_bytes(src):
    a = cai.as_cuda_array(Producer(src, typestr=">i4"))
    assert a.dtype == np.dtype(">i4")
    assert a.__cuda_array_interface__["typestr"] == ">i4"
    np.testing.assert_array_equal(a.copy_to_host(), HOST.view(">i4"))
    # Arithmetic refuses non-native data clearly rather than misreading it.
    out = cai.device_array((3, 4), dtype=">i4")
    with pytest.raises(NotImplementedError, match="big-endian"):
        cai.ops.add(a, a, out)


def test_v2_as_bfloat16_is_opaque_on_import(src):
    a = cai.as_cuda_array(Producer(src, typestr="<V2", shape=(3, 8), strides=DROP))
    assert a.dtype == np.dtype("V2")


def test_numpy_integers_are_accepted(src):
    d = dict(src.__cuda_array_interface__)
    d["shape"] = (np.int64(3), np.int32(4))
    d["data"] = (np.uint64(src.ptr), np.bool_(False))
    d["version"] = np.int8(3)
    a = cai.from_cuda_array_interface(d)
    assert a.shape == (3, 4)
    np.testing.assert_array_equal(a.copy_to_host(), HOST)


def test_lists_are_accepted_for_tuples(src):
    d = dict(src.__cuda_array_interface__)
    d["shape"] = [3, 4]
    d["strides"] = [16, 4]
    d["data"] = [src.ptr, False]
    a = cai.from_cuda_array_interface(d)
    np.testing.assert_array_equal(a.copy_to_host(), HOST)


def test_validate_normalizes_to_v3():
    d = core.validate({"shape": [2, 3], "typestr": "=f8", "data": (4096, False), "version": 1,
                       "strides": (24, 8)})
    assert d == {"shape": (2, 3), "typestr": "<f8", "data": (4096, False), "version": 3,
                 "strides": None, "stream": None}


def test_unknown_keys_are_ignored(src):
    a = cai.as_cuda_array(Producer(src, extra="whatever", flags=123))
    assert a.shape == (3, 4)
    assert "extra" not in a.__cuda_array_interface__


# --------------------------------------------------------------------------- masks

def _mask(values=(1, 0, 1, 1), shape=(3, 4), dtype=bool):
    return np.resize(np.array(values, dtype=dtype), shape)


@pytest.mark.parametrize("version", [1, 2, 3])
@pytest.mark.parametrize("mdtype", [bool, np.uint8, np.int32])
def test_mask_is_kept_and_re_exported(src, version, mdtype):
    host_mask = _mask(dtype=mdtype)
    m = cai.to_device(host_mask)
    mask_producer = Producer(m, version=version)
    a = cai.as_cuda_array(Producer(src, version=version, mask=mask_producer))
    assert isinstance(a.mask, cai.DeviceNDArray)
    assert a.mask.ptr == m.ptr and a.mask.shape == (3, 4) and a.mask.dtype == mdtype
    np.testing.assert_array_equal(a.mask.copy_to_host(), host_mask)
    exported = a.__cuda_array_interface__["mask"]
    assert exported.__cuda_array_interface__["data"][0] == m.ptr
    # A consumer of our export gets the mask again.
    again = cai.as_cuda_array(Producer(a))
    assert again.mask is not None and again.mask.ptr == m.ptr


def test_mask_none_is_no_mask(src):
    for version in (0, 1, 2, 3):
        a = cai.as_cuda_array(Producer(src, version=version, mask=None))
        assert a.mask is None
        assert a.__cuda_array_interface__.get("mask") is None


def test_mask_in_v0_is_rejected(src):
    m = cai.to_device(_mask())
    with pytest.raises(ValueError, match="^mask: .*v0"):
        cai.as_cuda_array(Producer(src, version=0, mask=m))


@pytest.mark.parametrize("shape", [(4, 3), (3,), (3, 4, 1), (12,)])
def test_mask_shape_must_match(src, shape):
    m = cai.to_device(np.ones(shape, bool))
    with pytest.raises(ValueError, match="^mask: shape"):
        cai.as_cuda_array(Producer(src, mask=m))


@pytest.mark.parametrize("mdtype", [np.float32, np.complex64, "S1"])
def test_mask_must_be_bool_or_integer(src, mdtype):
    m = cai.to_device(np.ones((3, 4), mdtype))
    with pytest.raises(ValueError, match="^mask: typestr"):
        cai.as_cuda_array(Producer(src, mask=m))


def test_invalid_mask_descriptor_is_rejected(src):
    m = cai.to_device(_mask())
    with pytest.raises(ValueError, match="stream"):
        cai.as_cuda_array(Producer(src, mask=Producer(m, stream=0)))


def test_cyclic_masks_are_rejected(src):
    class Cyclic:
        @property
        def __cuda_array_interface__(self):
            d = dict(src.__cuda_array_interface__)
            d["typestr"] = "|u1"
            d["shape"] = (3, 4)
            d["strides"] = (4, 1)
            d["mask"] = self
            return d
    with pytest.raises(ValueError, match="mask"):
        cai.as_cuda_array(Cyclic())


def test_masked_inputs_are_not_implemented_by_ops(src):
    a = cai.as_cuda_array(Producer(src, mask=cai.to_device(_mask())))
    out = cai.device_array((3, 4), np.int32)
    with pytest.raises(NotImplementedError, match="mask"):
        cai.ops.add(a, src, out)
    with pytest.raises(NotImplementedError, match="mask"):
        cai.ops.copy(out, a)
    with pytest.raises(NotImplementedError, match="mask"):
        cai.ops.fill(a, 1)
    with pytest.raises(NotImplementedError, match="mask"):
        a[0] = 1
    # Reading the data of a masked array is fine.
    np.testing.assert_array_equal(a.copy_to_host(), HOST)


# --------------------------------------------------------------------------- read-only

@pytest.fixture
def ro(src):
    return cai.as_cuda_array(Producer(src, data=(src.ptr, True)))


def test_read_only_import_is_read_only(ro):
    assert ro.readonly
    assert ro[1:].readonly and ro.T.readonly and ro[None, ..., ::2].readonly
    np.testing.assert_array_equal(ro.copy_to_host(), HOST)


WRITES = {
    "setitem scalar": lambda ro, src: ro.__setitem__(0, 7),
    "setitem slice": lambda ro, src: ro.__setitem__((slice(None), 1), 7),
    "setitem host array": lambda ro, src: ro.__setitem__(Ellipsis, HOST),
    "setitem device array": lambda ro, src: ro.__setitem__(Ellipsis, src),
    "setitem on a view": lambda ro, src: ro[1:].__setitem__(0, 7),
    "ops.add out=": lambda ro, src: cai.ops.add(src, src, ro),
    "ops.add out= positional view": lambda ro, src: cai.ops.add(src[0], src[1], ro[2]),
    "ops.copy dst": lambda ro, src: cai.ops.copy(ro, src),
    "ops.fill": lambda ro, src: cai.ops.fill(ro, 1),
    "copy_to_device host": lambda ro, src: ro.copy_to_device(HOST),
    "copy_to_device device": lambda ro, src: ro.copy_to_device(src),
}


@pytest.mark.parametrize("write", list(WRITES), ids=list(WRITES))
def test_read_only_import_refuses_writes(ro, src, write):
    with pytest.raises(ValueError, match="read-only"):
        WRITES[write](ro, src)
    np.testing.assert_array_equal(src.copy_to_host(), HOST)  # nothing was written


def test_read_only_array_can_be_read_by_ops(ro):
    out = cai.device_array((3, 4), np.int32)
    cai.ops.add(ro, ro, out)
    np.testing.assert_array_equal(out.copy_to_host(), 2 * HOST)
    cai.ops.copy(out, ro)
    np.testing.assert_array_equal(out.copy_to_host(), HOST)


@pytest.mark.parametrize("flag", [1, np.bool_(True)])
def test_read_only_flag_may_be_any_true_int(src, flag):
    a = cai.as_cuda_array(Producer(src, data=(src.ptr, flag)))
    assert a.readonly


# ------------------------------------------------------------------ from_cuda_array_interface

def test_from_cuda_array_interface(src):
    d = src[1:, ::2].__cuda_array_interface__
    a = cai.from_cuda_array_interface(d)
    np.testing.assert_array_equal(a.copy_to_host(), HOST[1:, ::2])
    a = cai.from_cuda_array_interface(d, owner=src, sync=False)
    assert a.stream is None
    np.testing.assert_array_equal(a.copy_to_host(), HOST[1:, ::2])


def test_from_cuda_array_interface_does_not_keep_the_dict(src):
    d = dict(src.__cuda_array_interface__)
    a = cai.from_cuda_array_interface(d)
    d["shape"] = (1,)
    d.clear()
    assert a.shape == (3, 4)

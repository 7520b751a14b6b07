"""Issue 4, export rules: the __cuda_array_interface__ of cai's arrays, for every dtype kind and
layout (docs/core-interface.md; NumPy's flags and dtype.str are the reference)."""

import numpy as np
import pytest

import cai
from helpers import Producer

DTYPES = [
    np.dtype("?"), np.dtype("i1"), np.dtype("<i2"), np.dtype("<i4"), np.dtype("<i8"),
    np.dtype("u1"), np.dtype("<u2"), np.dtype("<u4"), np.dtype("<u8"),
    np.dtype("<f2"), np.dtype("<f4"), np.dtype("<f8"), np.dtype("<f16"),
    np.dtype("<c8"), np.dtype("<c16"), np.dtype("<c32"),
    np.dtype(">i4"), np.dtype(">f8"), np.dtype(">c8"),
    np.dtype("<M8[ns]"), np.dtype("<M8[D]"), np.dtype("<m8[10us]"), np.dtype("<M8"),
    np.dtype(">m8[s]"),
    np.dtype("S7"), np.dtype("<U3"), np.dtype("V5"),
    np.dtype([("a", "<i4"), ("b", "<f8", (2, 3))]),
    np.dtype([("outer", [("x", "u1"), ("y", ">i2")]), ("z", "<c8")]),
    np.dtype({"names": ["p", "q"], "formats": ["<i2", "<f4"], "offsets": [2, 8], "itemsize": 16}),
]
IDS = [str(d) if d.names is None else f"struct{i}" for i, d in enumerate(DTYPES)]


@pytest.mark.parametrize("dt", DTYPES, ids=IDS)
def test_typestr_and_descr_for_every_kind(dt):
    a = cai.device_array((3, 2), dtype=dt)
    d = a.__cuda_array_interface__
    assert d["version"] == 3
    assert d["typestr"] == dt.str
    assert d["shape"] == (3, 2)
    assert d["strides"] is None
    assert isinstance(d["data"][0], int) and d["data"][0] == a.ptr != 0
    assert d["data"][1] is False
    if dt.names is None:
        assert d.get("descr") is None
    else:
        assert d["descr"] == dt.descr
        assert np.lib.format.descr_to_dtype(d["descr"]) == dt
    assert a.dtype == dt
    assert a.itemsize == dt.itemsize
    assert a.nbytes == 6 * dt.itemsize


def test_only_the_cai_keys_are_exported():
    d = cai.device_array(4).__cuda_array_interface__
    assert set(d) <= {"shape", "typestr", "data", "version", "strides", "descr", "mask", "stream"}
    assert {"shape", "typestr", "data", "version"} <= set(d)


def _numpy_and_device(shape, order, key):
    host = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape, order=order)
    dev = cai.to_device(host)
    return host[key], dev[key]


@pytest.mark.parametrize("shape,order,key", [
    ((3, 4), "C", ()),
    ((3, 4), "F", ()),
    ((), "C", Ellipsis),                             # a[()] is a host scalar
    ((5,), "C", slice(None, None, 2)),
    ((5,), "C", slice(None, None, -1)),
    ((4, 5), "C", (slice(None), slice(1, 3))),
    ((4, 5), "C", (slice(1, 2), slice(None))),       # a size-1 row: still C-contiguous
    ((4, 5), "C", (slice(None), slice(2, 3))),       # a column: not C-contiguous
    ((4, 5), "F", (slice(None), slice(2, 3))),       # F column: contiguous both ways
    ((4, 5, 6), "C", (Ellipsis, None, slice(None, None, 3))),
    ((4, 5), "C", (0,)),
    ((4, 5), "C", (slice(2, 2),)),                   # zero-size
    ((2, 3, 4), "C", (None, 1, Ellipsis, None)),
])
def test_strides_none_exactly_when_c_contiguous(shape, order, key):
    host, dev = _numpy_and_device(shape, order, key)
    d = dev.__cuda_array_interface__
    assert d["shape"] == host.shape
    assert dev.is_c_contiguous() == host.flags.c_contiguous
    assert dev.is_f_contiguous() == host.flags.f_contiguous
    if host.flags.c_contiguous:
        assert d["strides"] is None
    else:
        assert d["strides"] == host.strides
        assert dev.strides == host.strides


def test_transpose_exports_f_strides():
    host = np.zeros((3, 4), np.int16)
    dev = cai.to_device(host)
    t = dev.T
    assert t.shape == (4, 3)
    assert t.__cuda_array_interface__["strides"] == host.T.strides
    assert t.ptr == dev.ptr


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 0, 2)])
@pytest.mark.parametrize("order", ["C", "F"])
def test_zero_size_exports_pointer_zero(shape, order):
    a = cai.device_array(shape, dtype=np.float32, order=order)
    d = a.__cuda_array_interface__
    assert d["data"] == (0, False)
    assert d["strides"] is None  # zero-size arrays are C-contiguous
    assert a.ptr == 0 and a.size == 0 and a.nbytes == 0


def test_zero_size_view_of_a_real_array_exports_pointer_zero():
    a = cai.to_device(np.arange(10.0))
    v = a[5:5]
    assert v.__cuda_array_interface__["data"] == (0, False)
    ro = cai.as_cuda_array(Producer(a, data=(a.ptr, True)))[3:1]
    assert ro.__cuda_array_interface__["data"] == (0, True)


def test_zero_d_array():
    a = cai.to_device(np.float32(2.5))
    d = a.__cuda_array_interface__
    assert d["shape"] == () and d["strides"] is None and d["data"][0] != 0
    assert a.ndim == 0 and a.size == 1
    assert a.copy_to_host() == np.float32(2.5)
    with pytest.raises(TypeError):
        len(a)


def test_read_only_export():
    a = cai.to_device(np.arange(4, dtype=np.int64))
    ro = cai.as_cuda_array(Producer(a, data=(a.ptr, True)))
    assert ro.readonly
    assert ro.__cuda_array_interface__["data"] == (a.ptr, True)
    assert ro[1:].__cuda_array_interface__["data"] == (a.ptr + 8, True)
    assert not a.readonly and a.__cuda_array_interface__["data"][1] is False


def test_stream_is_none_while_no_work_is_pending_else_the_arrays_stream_never_zero():
    """CAI v3 allows stream None when no work is pending: new arrays, blocking copies, arrays
    the host synchronized. Once work is queued, the export names the array's stream."""
    for fresh in (cai.device_array(3), cai.device_array(3, stream=0), cai.to_device(np.ones(3))):
        assert fresh.__cuda_array_interface__["stream"] is None
        assert fresh.stream == cai.legacy_default_stream()
    s = cai.stream()
    a = cai.device_array(3, stream=s)
    assert a.__cuda_array_interface__["stream"] is None
    assert a.stream == s
    cai.ops.fill(a, 1.0)  # queued on the array's stream
    assert a.__cuda_array_interface__["stream"] == s.handle == int(s)
    for default, handle in ((cai.legacy_default_stream(), 1), (cai.per_thread_default_stream(), 2)):
        b = cai.device_array(3, stream=default)
        cai.ops.fill(b, 1.0)
        assert b.__cuda_array_interface__["stream"] == handle
    like = cai.device_array_like(a, stream=s)
    assert like.__cuda_array_interface__["stream"] is None
    cai.ops.fill(like, 1.0)
    assert like.__cuda_array_interface__["stream"] == s.handle
    # A copy queued on a stream (not waited for) is pending work.
    assert cai.to_device(np.ones(2), stream=s).__cuda_array_interface__["stream"] == s.handle
    # Views share the array's stream.
    assert a[1:].__cuda_array_interface__["stream"] == s.handle
    for arr in (a, a[::2], cai.device_array((0,))):
        assert arr.__cuda_array_interface__["stream"] != 0
    # The host waited: nothing is pending (no driver call on the export path decides this).
    a.synchronize()
    assert a.__cuda_array_interface__["stream"] is None
    assert a[1:].__cuda_array_interface__["stream"] is None
    cai.ops.fill(a, 2.0)
    assert a.__cuda_array_interface__["stream"] == s.handle
    cai.synchronize()
    assert a.__cuda_array_interface__["stream"] is None
    a.copy_to_host()  # a blocking copy on the array's stream
    assert a.__cuda_array_interface__["stream"] is None


def test_imported_array_without_stream_exports_none_until_used():
    a = cai.to_device(np.arange(4.0))
    imported = cai.as_cuda_array(Producer(a, version=2))
    assert imported.stream is None
    assert imported.__cuda_array_interface__["stream"] is None
    s = cai.stream()
    cai.ops.fill(imported, 1.0, stream=s)
    # Work is now queued on it: the export names the stream to wait on.
    assert imported.__cuda_array_interface__["stream"] == s.handle


def test_export_stream_switch():
    s = cai.stream()
    a = cai.device_array(3, stream=s)
    cai.ops.fill(a, 1.0, stream=s)
    cai.config.EXPORT_STREAM = False
    assert a.__cuda_array_interface__["stream"] is None
    cai.config.EXPORT_STREAM = True
    assert a.__cuda_array_interface__["stream"] == s.handle


@pytest.mark.parametrize("value,expected", [("0", "None"), ("1", "True"), (None, "True")])
def test_export_stream_default_comes_from_the_environment(value, expected):
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "CAI_EXPORT_STREAM"}
    if value is not None:
        env["CAI_EXPORT_STREAM"] = value
    code = ("import cai; s = cai.stream(); a = cai.device_array(2, stream=s); "
            "cai.ops.fill(a, 1.0); x = a.__cuda_array_interface__['stream']; "
            "print('None' if x is None else x == s.handle)")
    r = subprocess.run([sys.executable, "-c", code], env={**env, "CAI_BACKEND": "sim"},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == expected


def test_a_fresh_dict_per_read():
    a = cai.to_device(np.arange(6.0).reshape(2, 3))
    d1 = a.__cuda_array_interface__
    d2 = a.__cuda_array_interface__
    assert d1 is not d2 and d1 == d2
    d1["shape"] = (6,)
    d1["data"] = (0, True)
    del d1["typestr"]
    d1["extra"] = 1
    d3 = a.__cuda_array_interface__
    assert d3 == d2
    assert d3["shape"] == (2, 3)


def test_structured_descr_is_a_fresh_list():
    dt = np.dtype([("a", "<i4"), ("b", "<f8")])
    a = cai.device_array(2, dtype=dt)
    d1 = a.__cuda_array_interface__
    d1["descr"].append(("c", "<i8"))
    assert a.__cuda_array_interface__["descr"] == dt.descr


def test_masked_array_exports_its_mask():
    a = cai.to_device(np.arange(6, dtype=np.int32))
    m = cai.to_device(np.array([1, 0, 1, 1, 0, 1], dtype=bool))
    imported = cai.as_cuda_array(Producer(a, mask=m))
    d = imported.__cuda_array_interface__
    mask_obj = d["mask"]
    md = mask_obj.__cuda_array_interface__
    assert md["data"][0] == m.ptr
    assert md["shape"] == (6,) and md["typestr"] == "|b1"
    assert a.__cuda_array_interface__.get("mask") is None
    # Views of a masked array carry the mask indexed the same way.
    host_mask = np.array([1, 0, 1, 1, 0, 1], dtype=bool)
    for key in (slice(1, None, 2), slice(None, None, -1), (None, slice(2, 5))):
        view = imported[key]
        vmask = view.__cuda_array_interface__["mask"]
        assert vmask.__cuda_array_interface__["shape"] == view.shape
        np.testing.assert_array_equal(cai.as_cuda_array(vmask).copy_to_host(), host_mask[key])
        np.testing.assert_array_equal(view.mask.copy_to_host(), host_mask[key])


def test_export_import_round_trip_through_a_foreign_object():
    host = np.arange(24, dtype=np.int16).reshape(4, 6)[::-1, 1::2]
    dev = cai.to_device(np.arange(24, dtype=np.int16).reshape(4, 6))[::-1, 1::2]
    again = cai.as_cuda_array(Producer(dev))
    assert again.shape == host.shape and again.strides == host.strides
    assert again.ptr == dev.ptr
    np.testing.assert_array_equal(again.copy_to_host(), host)


def test_export_is_valid_for_the_core():
    from cai._cai import core
    for arr in (cai.device_array((2, 3)), cai.to_device(np.ones((3, 4)))[:, ::2],
                cai.device_array((0, 2)), cai.device_array(2, dtype=[("a", "<i4")])):
        d = arr.__cuda_array_interface__
        assert core.validate(d) == d


def test_item_size_zero_arrays_export_import_and_copy():
    a = cai.device_array((3, 2), dtype="S0")
    assert a.nbytes == 0
    again = cai.as_cuda_array(Producer(a))
    assert again.shape == (3, 2)
    np.testing.assert_array_equal(a.copy_to_host(), np.zeros((3, 2), "S0"))

"""Pickling and copying DeviceNDArray (docs/scale-out.md): every protocol from 2 to 5 (5 with
out-of-band buffers), copy.copy and copy.deepcopy, any array including non-contiguous views:
the receiver gets a new device array with the same shape, dtype and values (a host copy, as
Numba and CuPy do), on its current device."""

import copy
import pickle
import textwrap

import numpy as np
import pytest

import cai
from helpers import Producer, host_bytes
from scale_helpers import run_python

STRUCT = np.dtype([("x", "<f4"), ("n", "<i2"), ("tag", "S3")])

ARRAYS = {
    "float32-2d": lambda: np.arange(12, dtype=np.float32).reshape(3, 4),
    "int64-0d": lambda: np.array(7, dtype=np.int64),
    "complex128": lambda: (np.arange(5) + 1j * np.arange(5)).astype(np.complex128),
    "bool": lambda: np.array([True, False, True]),
    "float16-3d": lambda: np.arange(24, dtype=np.float16).reshape(2, 3, 4),
    "structured": lambda: np.array([(1.5, 2, b"ab"), (3.5, -4, b"xyz")], dtype=STRUCT),
    "big-endian": lambda: np.arange(6, dtype=">i4"),
    "zero-size": lambda: np.zeros((0, 4), np.float64),
}

VIEWS = {
    "whole": lambda a: a,
    "strided": lambda a: a[::2] if a.ndim else a,
    "reversed": lambda a: a[::-1] if a.ndim else a,
    "transposed": lambda a: a.T,
}


def same(got, expected):
    assert isinstance(got, cai.DeviceNDArray)
    host = got.copy_to_host()
    assert host.shape == expected.shape and host.dtype == expected.dtype
    assert host_bytes(host) == host_bytes(expected)


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
@pytest.mark.parametrize("view", list(VIEWS))
@pytest.mark.parametrize("kind", list(ARRAYS))
def test_pickle_round_trip(kind, view, protocol):
    host = ARRAYS[kind]()
    arr = VIEWS[view](cai.to_device(host))
    expected = VIEWS[view](host)
    got = pickle.loads(pickle.dumps(arr, protocol=protocol))
    same(got, expected)
    if arr.size:
        assert got.ptr != arr.ptr             # new memory


def _every_dtype():
    """One dtype per NumPy kind and byte order that a device array can hold, plus units and
    structured dtypes holding the kinds NumPy's buffer protocol refuses."""
    dtypes = {}
    for code in np.typecodes["All"].replace("O", "").replace("M", "").replace("m", ""):
        for order in "<>":
            dt = np.dtype(code).newbyteorder(order)
            if dt.itemsize:  # 'S', 'U', 'V' without a size: sized ones below
                dtypes[dt.str] = dt
    # NumPy keeps no byte order for generic datetime units ('>M8' arrays are made '<M8').
    dtypes["M8"], dtypes["m8"] = np.dtype("M8"), np.dtype("m8")
    for unit in ("Y", "M", "D", "h", "s", "ms", "us", "ns", "ps", "as"):
        dtypes[f"M8[{unit}]"] = np.dtype(f"M8[{unit}]")
        dtypes[f">m8[{unit}]"] = np.dtype(f">m8[{unit}]")
    dtypes["S5"], dtypes[">U3"], dtypes["V7"] = np.dtype("S5"), np.dtype(">U3"), np.dtype("V7")
    dtypes["structured"] = np.dtype([("when", "<M8[ms]"), ("took", ">m8[us]"), ("n", ">i2"),
                                     ("xy", "<f4", (2,)), ("tag", "S3")])
    dtypes["nested"] = np.dtype([("inner", [("t", "M8[D]"), ("v", ">c16")]), ("b", "?")])
    return dtypes


DTYPES = _every_dtype()


@pytest.mark.parametrize("name", list(DTYPES))
def test_every_dtype_pickles_at_every_protocol(name):
    dtype = DTYPES[name]
    host = np.frombuffer(np.random.default_rng(5).bytes(6 * dtype.itemsize),
                         dtype=dtype).reshape(2, 3)
    arr = cai.to_device(host)
    for protocol in (2, 5):
        same(pickle.loads(pickle.dumps(arr, protocol=protocol)), host)
        same(pickle.loads(pickle.dumps(arr.T, protocol=protocol)), host.T)
    buffers = []
    data = pickle.dumps(arr, protocol=5, buffer_callback=buffers.append)
    same(pickle.loads(data, buffers=buffers), host)


def test_protocol_5_sends_the_data_out_of_band():
    arr = cai.to_device(np.arange(1000, dtype=np.float64))[::3]
    buffers = []
    data = pickle.dumps(arr, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == 1 and buffers[0].raw().nbytes == 334 * 8
    assert len(data) < 1000                   # the values are not in the stream
    same(pickle.loads(data, buffers=buffers), np.arange(1000, dtype=np.float64)[::3])


def test_fortran_order_is_kept():
    host = np.asfortranarray(np.arange(12.0).reshape(3, 4))
    got = pickle.loads(pickle.dumps(cai.to_device(host)))
    assert got.is_f_contiguous() and not got.is_c_contiguous()
    same(got, host)


@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy])
def test_copy_and_deepcopy_copy_on_the_device(copier):
    host = np.arange(20, dtype=np.int32).reshape(4, 5)
    arr = cai.to_device(host)
    view = arr[1:, ::-2]
    got = copier(view)
    same(got, host[1:, ::-2])
    cai.ops.fill(arr, 0)                      # the copy has its own memory
    same(got, host[1:, ::-2])
    assert copy.deepcopy({"a": view})["a"].shape == view.shape


def test_deepcopy_is_stream_ordered(streams):
    a, _ = streams
    arr = cai.device_array(64, dtype=np.float32, stream=a)
    cai.ops.fill(arr, 0, stream=a)
    cai.sim.delay(a, 0.05)                    # the next write is still queued below
    cai.ops.fill(arr, 3, stream=a)
    got = copy.deepcopy(arr)                  # ordered after the fill (race detector on)
    same(got, np.full(64, 3, np.float32))


def test_pickling_waits_for_queued_work(streams):
    a, _ = streams
    arr = cai.device_array(16, dtype=np.int64, stream=a)
    cai.sim.delay(a, 0.05)
    cai.ops.fill(arr, 9, stream=a)
    same(pickle.loads(pickle.dumps(arr)), np.full(16, 9))


def test_masks_readonly_and_foreign_arrays():
    data = cai.to_device(np.arange(4.0))
    mask = cai.to_device(np.array([True, False, True, True]))
    masked = cai.as_cuda_array(Producer(data, mask=mask))
    got = pickle.loads(pickle.dumps(masked))
    same(got, np.arange(4.0))
    same(got.mask, np.array([True, False, True, True]))
    mask_of_mask = cai.as_cuda_array(Producer(cai.to_device(np.array([1, 1, 0, 1], np.uint8)),
                                              mask=mask))
    nested = cai.as_cuda_array(Producer(data, mask=mask_of_mask))
    got = pickle.loads(pickle.dumps(nested, protocol=5))   # a mask's own mask travels too
    same(got.mask, np.array([1, 1, 0, 1], np.uint8))
    same(got.mask.mask, np.array([True, False, True, True]))
    copied = copy.deepcopy(masked)                  # the mask copied on the device too
    assert copied.mask is not None and copied.mask.ptr != mask.ptr
    same(copied.mask, np.array([True, False, True, True]))

    readonly = cai.as_cuda_array(Producer(data, data=(data.ptr, True)))
    got = pickle.loads(pickle.dumps(readonly))
    assert readonly.readonly and not got.readonly   # a new array, writable as any copy
    same(got, np.arange(4.0))


def test_unpickled_in_another_process_on_its_current_device():
    arr = cai.to_device(np.arange(6, dtype=np.int16).reshape(2, 3))[:, ::-1]
    payload = pickle.dumps(arr, protocol=5)
    code = textwrap.dedent(f"""
        import pickle
        import cai
        with cai.Device(1):
            got = pickle.loads({payload!r})
        assert got.device == cai.Device(1), got.device
        print(got.copy_to_host().tolist(), got.dtype)
    """)
    r = run_python(code, env={"CAI_SIM_DEVICES": "2"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[[2, 1, 0], [5, 4, 3]] int16"

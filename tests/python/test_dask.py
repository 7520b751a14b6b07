"""Dask distributed (docs/scale-out.md): cai registers serializers for DeviceNDArray, the
"dask" family (one host frame) and the "cuda" family (the frame stays on the device), without
importing distributed itself; a real two-worker LocalCluster moves arrays between processes."""

import json
import sys
import textwrap

import numpy as np
import pytest

import cai
from helpers import host_bytes, run_isolated
from scale_helpers import run_python

import dask.array as da  # requirements-dev.txt: distributed brings dask
from distributed.protocol import deserialize, serialize  # requirements-dev.txt: never skipped

STRUCT = np.dtype([("x", "<f8"), ("n", ">i2")])

CASES = {
    "c-2d": lambda: cai.to_device(np.arange(12, dtype=np.float32).reshape(3, 4)),
    "f-order": lambda: cai.to_device(np.asfortranarray(np.arange(6.0).reshape(2, 3))),
    "strided-view": lambda: cai.to_device(np.arange(20, dtype=np.int64))[::-3],
    "structured": lambda: cai.to_device(np.array([(1.0, 2), (3.0, -4)], dtype=STRUCT)),
    "zero-size": lambda: cai.device_array((0, 5), dtype=np.int8),
    "0-d": lambda: cai.to_device(np.array(2.5)),
}


def same(got, arr):
    assert isinstance(got, cai.DeviceNDArray)
    host, expected = got.copy_to_host(), arr.copy_to_host()
    assert host.shape == expected.shape and host.dtype == expected.dtype
    assert host_bytes(host) == host_bytes(expected)


def test_import_cai_does_not_import_distributed():
    r = run_python("import sys, cai; print('distributed' in sys.modules)")
    assert r.returncode == 0 and r.stdout.strip() == "False", r.stderr


def test_serializers_registered_when_distributed_comes_later():
    r = run_python(textwrap.dedent("""
        import cai, numpy as np
        from distributed.protocol import serialize, deserialize
        header, frames = serialize(cai.to_device(np.arange(3)))
        assert header["serializer"] == "dask", header["serializer"]
        print(type(deserialize(header, frames)).__name__)
    """))
    assert r.returncode == 0 and r.stdout.strip() == "DeviceNDArray", r.stderr


@pytest.mark.parametrize("case", list(CASES))
def test_dask_family_one_host_frame(case):
    arr = CASES[case]()
    header, frames = serialize(arr, serializers=("dask",))
    assert header["serializer"] == "dask"
    order = "F" if header["sub-header"]["fortran"] else "C"  # the array's memory order
    assert len(frames) == 1 and bytes(frames[0]) == arr.copy_to_host().tobytes(order=order)
    same(deserialize(header, frames), arr)


@pytest.mark.parametrize("case", list(CASES))
def test_cuda_family_keeps_the_frame_on_the_device(case):
    arr = CASES[case]()
    header, frames = serialize(arr, serializers=("cuda",))
    assert header["serializer"] == "cuda"
    if arr.nbytes:
        (frame,) = frames
        assert isinstance(frame, cai.DeviceNDArray) and frame.nbytes == arr.nbytes
        got = deserialize(header, frames)
        assert got.ptr == arr.ptr or not (arr.is_c_contiguous() or arr.is_f_contiguous())
    else:
        got = deserialize(header, frames)
    same(got, arr)


def _make(n):
    import numpy as np

    import cai

    return cai.to_device(np.arange(n, dtype=np.float64))


def _consume(arr):
    import os

    import cai

    assert isinstance(arr, cai.DeviceNDArray)
    out = cai.device_array_like(arr)
    cai.ops.add(arr, arr, out)
    return os.getpid(), out


def test_two_worker_cluster_moves_arrays_between_processes():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, worker_dashboard_address=None) as cluster, \
            Client(cluster) as client:
        first, second = sorted(client.scheduler_info()["workers"])
        made = client.submit(_make, 1000, workers=[first], pure=False)
        used = client.submit(_consume, made, workers=[second], pure=False)
        pid, result = used.result(timeout=60)
        worker_pids = client.run(lambda: __import__("os").getpid())
        # Made in one process, used in the other: it moved (whether the second worker keeps
        # its replica afterwards is Dask's choice, so who_has is not asked).
        assert pid == worker_pids[second] != worker_pids[first]
        assert isinstance(result, cai.DeviceNDArray)               # the client gets a cai array
        np.testing.assert_array_equal(result.copy_to_host(), 2 * np.arange(1000.0))
        gathered = client.gather(made)
        np.testing.assert_array_equal(gathered.copy_to_host(), np.arange(1000.0))


# ----- masks, read-only memory, and headers from another process ------------------------------

def _masked(arr):
    """`arr` with a mask of its shape (uint8: 2 is as true as 1), and the mask's values."""
    valid = np.resize(np.array([1, 0, 2], np.uint8), arr.shape)
    desc = arr.__cuda_array_interface__ | {"mask": cai.to_device(valid)}
    return cai.from_cuda_array_interface(desc, owner=arr), valid


@pytest.mark.parametrize("family", ["dask", "cuda"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_mask_travels_with_its_array(family, case):
    arr = CASES[case]()
    masked, valid = _masked(arr)
    header, frames = serialize(masked, serializers=(family,))
    got = deserialize(header, frames)
    same(got, arr)
    assert got.mask is not None
    same(got.mask, cai.to_device(valid))
    if arr.size:
        assert isinstance(got.copy_to_host(), np.ma.MaskedArray)


@pytest.mark.parametrize("family", ["dask", "cuda"])
def test_a_mask_of_a_mask_travels_too(family):
    inner, _ = _masked(cai.to_device(np.ones(6, np.uint8)))
    data = cai.to_device(np.arange(6.0))
    arr = cai.from_cuda_array_interface(data.__cuda_array_interface__ | {"mask": inner},
                                        owner=data)
    got = deserialize(*serialize(arr, serializers=(family,)))
    assert got.mask.mask is not None
    np.testing.assert_array_equal(got.mask.mask.copy_to_host(), [1, 0, 2, 1, 0, 2])


def test_cuda_family_keeps_read_only_memory_read_only():
    src = cai.to_device(np.arange(4.0))
    readonly = cai.from_cuda_array_interface(
        src.__cuda_array_interface__ | {"data": (src.ptr, True)}, owner=src)
    header, frames = serialize(readonly, serializers=("cuda",))
    assert frames[0].readonly
    got = deserialize(header, frames)
    assert got.readonly and got.ptr == src.ptr
    with pytest.raises(ValueError, match="read-only"):
        cai.ops.fill(got, 7.0)
    with pytest.raises(ValueError, match="read-only"):
        got[0] = 7.0
    np.testing.assert_array_equal(src.copy_to_host(), np.arange(4.0))
    writable = deserialize(*serialize(src, serializers=("cuda",)))
    assert not writable.readonly


# Each case: the family, what is changed in the header cai wrote for a float32 array of shape
# (3, 4) (None: the frames instead), and the exception expected. A header that reaches past its
# frame would read (or, written through, overwrite) memory the frame does not hold: out of
# bounds on a GPU. All run in one fresh interpreter, which also reads any array accepted.
BAD_HEADERS = {
    "shape-past-frame": ("cuda", {"shape": [100, 4]}, "ValueError",
                         "shape [100, 4] and strides [16, 4] of dtype <f4 reach over 1600 "
                         "bytes, but frame 0 holds 48"),
    "stride-past-frame": ("cuda", {"strides": [16, 400]}, "ValueError",
                          "reach over 1236 bytes, but frame 0 holds 48"),
    "stride-before-frame": ("cuda", {"strides": [-400, 4]}, "ValueError",
                            "reach over 816 bytes, but frame 0 holds 48"),
    "wider-dtype": ("cuda", {"dtype": "<f8"}, "ValueError",
                    "of dtype <f8 reach over 52 bytes, but frame 0 holds 48"),
    "strides-per-axis": ("cuda", {"strides": [16]}, "ValueError",
                         "strides: expected 2 byte strides, one per axis of shape [3, 4], "
                         "got [16]"),
    "negative-size": ("cuda", {"shape": [-3, 4]}, "ValueError",
                      "shape: expected sizes >= 0, got [-3, 4]"),
    "shape-str": ("cuda", {"shape": "34"}, "TypeError",
                  "shape: expected a list of int (sizes >= 0), got '34'"),
    "shape-bool": ("cuda", {"shape": [True, 4]}, "TypeError", "shape: expected a list of int"),
    "stride-float": ("cuda", {"strides": [16.0, 4]}, "TypeError",
                     "strides: expected a list of int (byte strides), got [16.0, 4]"),
    "object-dtype": ("cuda", {"dtype": "|O"}, "ValueError",
                     "dtype: expected a dtype without Python objects"),
    "bad-dtype": ("cuda", {"dtype": "<q9"}, "ValueError",
                  "dtype: expected a NumPy dtype description"),
    "no-dtype": ("cuda", {"dtype": "DROP"}, "ValueError", "dtype: missing"),
    "mask-not-dict": ("cuda", {"mask": 5}, "TypeError",
                      "mask: expected None or the mask's header (a dict), got 5"),
    "mask-without-frame": ("cuda", {"mask": {"shape": [3, 4], "dtype": "|b1",
                                             "strides": [4, 1]}}, "ValueError",
                           "mask. needs frame 1, but only 1 frame(s) came"),
    "extra-frame": ("cuda", "two frames", "ValueError",
                    "it describes 1 frame(s), but 2 came"),
    "host-frame": ("cuda", "host frame", "TypeError",
                   "frame 0: expected a device buffer (an object with "
                   "__cuda_array_interface__), got ndarray"),
    "host-shape": ("dask", {"shape": [100, 4]}, "ValueError",
                   "frame 0 holds 48 bytes, but the header's shape [100, 4] of dtype <f4 "
                   "needs 1600"),
    "host-dtype": ("dask", {"dtype": "<f8"}, "ValueError", "needs 96"),
    "host-order": ("dask", {"fortran": 1}, "TypeError", "fortran: expected True or False"),
    "host-mask-without-frame": ("dask", {"mask": {"shape": [4, 3], "dtype": "|b1", "fortran": False}},
                        "ValueError", "mask. needs frame 1"),
}

CHECK_HEADERS = """
    import copy, json, sys
    import numpy as np
    import cai
    from distributed.protocol import deserialize, serialize
    arr = cai.to_device(np.arange(12, dtype=np.float32).reshape(3, 4))
    for name, (family, change) in json.loads(sys.argv[1]).items():
        header, frames = serialize(arr, serializers=(family,))
        header = copy.deepcopy(header)
        if change == "two frames":
            frames = frames + frames
        elif change == "host frame":
            frames = [np.zeros(48, np.uint8)]
        else:
            for key, value in change.items():
                if value == "DROP":
                    del header["sub-header"][key]
                else:
                    header["sub-header"][key] = value
        try:
            got = deserialize(header, frames)
            outcome = ["accepted", str(got.copy_to_host())]   # reads what the header says
        except Exception as e:
            outcome = [type(e).__name__, str(e)]
        print(json.dumps([name] + outcome), flush=True)
"""


@pytest.fixture(scope="module")
def bad_header_outcomes():
    cases = {name: (family, change) for name, (family, change, _, _) in BAD_HEADERS.items()}
    r = run_isolated("", args=["-c", textwrap.dedent(CHECK_HEADERS), json.dumps(cases)])
    assert r.returncode == 0, r.stdout + r.stderr
    return {line[0]: line[1:] for line in map(json.loads, r.stdout.splitlines())}


@pytest.mark.parametrize("name", list(BAD_HEADERS))
def test_a_header_is_checked_against_its_frames(name, bad_header_outcomes):
    _, _, error, message = BAD_HEADERS[name]
    got_error, got_message = bad_header_outcomes[name]
    assert got_error == error and message in got_message, got_message


@pytest.mark.parametrize("family", ["dask", "cuda"])
def test_a_mask_header_of_another_shape_is_refused(family):
    masked, _ = _masked(CASES["c-2d"]())
    header, frames = serialize(masked, serializers=(family,))
    header["sub-header"]["mask"]["shape"] = [2, 6]          # the same number of bytes
    if family == "cuda":
        header["sub-header"]["mask"]["strides"] = [6, 1]
    with pytest.raises(ValueError, match=r"mask: shape \(2, 6\) differs from the data shape"):
        deserialize(header, frames)

ML_TYPES = ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1fn"]


@pytest.mark.parametrize("family", ["dask", "cuda"])
@pytest.mark.parametrize("name", ML_TYPES)
def test_ml_dtypes_keep_their_type(family, name):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    t = np.dtype(getattr(ml_dtypes, name))
    arr = cai.to_device(np.arange(6, dtype=t).reshape(2, 3))[:, ::-1]
    got = deserialize(*serialize(arr, serializers=(family,)))
    assert got.dtype == t                    # not '|V2', nor e4m3 read as e5m2
    np.testing.assert_array_equal(got.copy_to_host().astype(np.float32),
                                  arr.copy_to_host().astype(np.float32))


@pytest.mark.parametrize("family", ["dask", "cuda"])
def test_an_ml_dtype_header_is_checked(family):
    arr = cai.to_device(np.arange(4, dtype=np.dtype("bfloat16")))
    header, frames = serialize(arr, serializers=(family,))
    for bad in ("float128", 7, "__import__"):
        header["sub-header"]["ml_dtype"] = bad
        with pytest.raises(ValueError, match=r"ml_dtype: expected one of the ml_dtypes types"):
            deserialize(header, frames)


def test_an_ml_dtype_is_refused_where_ml_dtypes_is_missing():
    r = run_python(textwrap.dedent("""
        import sys, numpy as np, ml_dtypes, cai
        from distributed.protocol import serialize, deserialize
        header, frames = serialize(cai.to_device(np.arange(4, dtype=ml_dtypes.bfloat16)),
                                   serializers=("dask",))
        sys.modules["ml_dtypes"] = None          # as on a worker without it
        try:
            deserialize(header, frames)
        except TypeError as e:
            print("refused:", "ml_dtypes, which is not installed here" in str(e))
    """))
    assert r.returncode == 0 and r.stdout.strip() == "refused: True", r.stderr


# ----- sizeof, tokens, functions, dask.array (docs/scale-out.md, "dask.array") -----------------

def test_import_cai_imports_no_dask_and_registers_when_dask_comes():
    r = run_python(textwrap.dedent("""
        import sys, cai, numpy as np
        assert not [m for m in sys.modules if m.split(".")[0] in ("dask", "distributed")]
        from dask.sizeof import sizeof
        from dask.tokenize import tokenize
        import dask.array as da
        a = cai.device_array((1024, 4096), dtype=np.float32)
        print(sizeof(a), tokenize(a) == tokenize(a), type(da.from_array(a)._meta).__name__)
    """))
    assert r.returncode == 0 and r.stdout.split() == [str(16 * 2**20), "True",
                                                      "DeviceNDArray"], r.stderr


def test_registered_when_dask_came_first():
    r = run_python(textwrap.dedent("""
        import dask.array, dask.sizeof, numpy as np
        import cai
        print(dask.sizeof.sizeof(cai.device_array(1000, dtype=np.int16)))
    """))
    assert r.returncode == 0 and r.stdout.strip() == "2000", r.stderr


def test_sizeof_counts_the_device_bytes():
    from dask.sizeof import sizeof

    a = cai.device_array((1024, 4096), dtype=np.float32)
    assert sizeof(a) == 16 * 2**20
    assert sizeof(a[::2]) == 8 * 2**20


def test_tokens_are_cheap_and_change_when_the_array_may_have():
    from dask.tokenize import tokenize

    a = cai.to_device(np.arange(1000.0))
    first = tokenize(a)
    assert tokenize(a) == first                       # deterministic while nothing writes
    assert tokenize(cai.to_device(np.arange(1000.0))) != first  # another array: another token
    assert tokenize(a[:]) != tokenize(a[:])           # two views alive at once
    writes = [lambda: a.__setitem__(0, 5.0), lambda: cai.ops.fill(a, 1.0),
              lambda: cai.ops.copy(a, cai.device_array_like(a)),
              lambda: a.copy_to_device(np.zeros(1000)), lambda: a.__cuda_array_interface__,
              lambda: a.__dlpack__()]
    for write in writes:                              # cai writes, or lets a reader write
        before = tokenize(a)
        write()
        assert tokenize(a) != before
    ro = cai.from_cuda_array_interface({**a.__cuda_array_interface__, "data": (a.ptr, True)},
                                       owner=a)
    before = tokenize(ro)
    ro.__cuda_array_interface__                        # a read-only export lets nobody write
    assert tokenize(ro) == before


def test_tokens_never_pickle_the_array(monkeypatch):
    from dask.tokenize import tokenize

    # Recorded, not raised: Dask catches a pickling error and falls back to a random token.
    pickled = []

    def record(self, protocol):
        pickled.append(protocol)
        raise TypeError("tokenize pickled the array (a host copy)")

    monkeypatch.setattr(cai.DeviceNDArray, "__reduce_ex__", record)
    a = cai.device_array(1 << 20)
    assert tokenize(a) == tokenize(a)  # a random fallback token would differ
    assert pickled == []


def test_a_freed_arrays_token_is_not_reused():
    from dask.tokenize import tokenize

    a = cai.device_array(4096)
    old = tokenize(a), a.ptr
    del a
    b = cai.device_array(4096)                         # often at the same address
    assert tokenize(b) != old[0]


def _refuse_host_copies(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a chunk was copied to the host")

    monkeypatch.setattr(cai.DeviceNDArray, "__array__", refuse)
    monkeypatch.setattr(cai.DeviceNDArray, "copy_to_host", refuse)


DEVICE_OPS = {
    "from_array": lambda d: d,
    "rechunk": lambda d: d.rechunk((1, 6)),
    "concatenate": lambda d: da.concatenate([d, d[:, ::-1]], axis=1),
    "stack": lambda d: da.stack([d, d], axis=1),
    "block": lambda d: da.block([[d], [d]]),
    "slicing": lambda d: d[1:, None, ::2][..., 1],
    "transpose": lambda d: d.T.swapaxes(0, 1).transpose(),
    "moveaxis": lambda d: da.moveaxis(d[None], 0, 2),
    "reshape": lambda d: d.reshape(4, 2, 3).reshape(24),
    "ravel": lambda d: d.ravel(),
    "flip": lambda d: da.flip(d, 1),
    "expand_squeeze": lambda d: da.expand_dims(d, 0).squeeze(),
    "copy": lambda d: d.copy(),
}


@pytest.mark.parametrize("op", list(DEVICE_OPS))
def test_dask_array_keeps_cai_chunks_on_the_device(op, monkeypatch):
    import dask

    host = np.arange(24.0).reshape(4, 6)
    d = da.from_array(cai.to_device(host), chunks=(2, 3))
    expected = DEVICE_OPS[op](da.from_array(host, chunks=(2, 3))).compute()
    result = DEVICE_OPS[op](d)
    assert "chunktype=cai.DeviceNDArray" in repr(result)
    _refuse_host_copies(monkeypatch)
    with dask.config.set(scheduler="synchronous"):
        chunks = dask.compute(*result.to_delayed().ravel())
        out = result.compute()
    monkeypatch.undo()
    assert all(isinstance(c, cai.DeviceNDArray) for c in chunks)
    assert isinstance(out, cai.DeviceNDArray)
    np.testing.assert_array_equal(out.copy_to_host(), expected)


def test_dask_array_operations_on_the_host_say_so():
    host = np.arange(24.0).reshape(4, 6)
    d = da.from_array(cai.to_device(host), chunks=(2, 3))
    total = d.sum(axis=0)                              # NumPy's sum: chunks copied to the host
    assert "chunktype=numpy.ndarray" in repr(total)
    with pytest.warns(cai.HostFallbackWarning, match="numpy.sum"):  # said, as for NumPy's calls
        np.testing.assert_array_equal(total.compute(scheduler="synchronous"), host.sum(axis=0))
    np.testing.assert_array_equal(d.to_backend("numpy").compute(), host)
    with pytest.raises(TypeError, match="unsupported operand"):
        (d + 1).compute()                              # cai arrays have no operators


@pytest.fixture(scope="module")
def client():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, worker_dashboard_address=None) as cluster, \
            Client(cluster) as c:
        yield c


def test_cai_functions_travel_to_workers(client):
    made = client.submit(cai.to_device, np.arange(5.0), pure=False).result(timeout=60)
    assert isinstance(made, cai.DeviceNDArray)
    np.testing.assert_array_equal(made.copy_to_host(), np.arange(5.0))
    on_device = da.from_array(np.arange(12.0), chunks=4).map_blocks(cai.to_device)
    assert "chunktype=cai.DeviceNDArray" in repr(on_device)
    result = client.compute(on_device).result(timeout=60)
    assert isinstance(result, cai.DeviceNDArray)
    np.testing.assert_array_equal(result.copy_to_host(), np.arange(12.0))


def _chunk_types(block):
    import cai

    return np.full((1,) * block.ndim, isinstance(block, cai.DeviceNDArray))


def test_dask_array_on_a_cluster(client):
    host = np.arange(48.0).reshape(6, 8)
    d = da.from_array(cai.to_device(host), chunks=(3, 4))
    moved = da.stack([d.rechunk((2, 8)), d.T.T], axis=0)   # regrouped across workers
    on_device = moved.map_blocks(_chunk_types, dtype=bool, meta=np.array((), bool))
    assert client.compute(on_device).result(timeout=60).all()
    result = client.compute(moved).result(timeout=60)
    assert isinstance(result, cai.DeviceNDArray)
    np.testing.assert_array_equal(result.copy_to_host(), np.stack([host, host]))

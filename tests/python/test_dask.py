"""Dask distributed (docs/scale-out.md): cai registers serializers for DeviceNDArray, the
"dask" family (one host frame) and the "cuda" family (the frame stays on the device), without
importing distributed itself; a real two-worker LocalCluster moves arrays between processes."""

import sys
import textwrap

import numpy as np
import pytest

import cai
from helpers import host_bytes
from scale_helpers import run_python

from distributed.protocol import deserialize, serialize  # requirements.txt: never skipped

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
        assert pid == worker_pids[second] != worker_pids[first]
        assert set(client.who_has(made)[made.key]) == {first, second}  # it moved
        assert isinstance(result, cai.DeviceNDArray)               # the client gets a cai array
        np.testing.assert_array_equal(result.copy_to_host(), 2 * np.arange(1000.0))
        gathered = client.gather(made)
        np.testing.assert_array_equal(gathered.copy_to_host(), np.arange(1000.0))

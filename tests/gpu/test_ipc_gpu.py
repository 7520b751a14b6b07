"""CUDA IPC and several devices on a real GPU (docs/scale-out.md). Skipped cleanly without a
CUDA driver and device. Run on a GPU machine with:

    .venv/bin/python -m pytest -q tests/gpu/test_ipc_gpu.py

The same scenarios run on the simulator in tests/python/test_{ipc,multiprocessing,devices}.py;
here the CUDA driver path is exercised: cuIpcGetMemHandle / cuIpcOpenMemHandle /
cuIpcCloseMemHandle, interprocess events (cuIpcGetEventHandle / cuIpcOpenEventHandle), and
cuMemcpyPeerAsync with two GPUs. Children are spawned (CUDA cannot be used in a forked child).
"""

import gc
import os
import pickle
import sys

import numpy as np
import pytest

import cai

# cai picks the CUDA backend by itself where a driver and a GPU are present (CAI_BACKEND
# unset); the environment is left alone, since spawned children inherit it.
ON_CUDA = cai.cuda_available() and cai.backend() == "cuda"
pytestmark = pytest.mark.skipif(
    not ON_CUDA,
    reason="needs a CUDA driver and a GPU, and CAI_BACKEND unset or cuda (run this file on its "
           "own: tests/python forces the simulator)")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from scale_helpers import (  # noqa: E402
    TIMEOUT, Child, exporter, importer, importer_child, values_of)

BIG = 64 << 20  # elements: enough queued work that it is still running when we look


def busy(stream, arr, rounds=20):
    """Queues `rounds` full copies through a scratch array on `stream` (no host wait)."""
    scratch = cai.device_array_like(arr, stream=stream)
    for _ in range(rounds):
        cai.ops.copy(scratch, arr, stream=stream)
        cai.ops.copy(arr, scratch, stream=stream)
    return scratch


@pytest.fixture
def child():
    with importer_child() as c:
        yield c


def test_backend_is_cuda():
    assert cai.backend() == "cuda"
    assert cai.device_count() >= 1
    assert len(cai.Device(0).uuid) == 36


def test_round_trip_between_processes(child):
    a = cai.to_device(np.arange(1 << 20, dtype=np.float32))
    child.send("open", a.get_ipc_handle(), "a")
    assert child.recv()[1:] == ((1 << 20,), "<f4", 0)
    np.testing.assert_array_equal(values_of(child, "a"), np.arange(1 << 20, dtype=np.float32))
    child.send("fill", "a", 2)
    child.recv()
    np.testing.assert_array_equal(a.copy_to_host(), np.full(1 << 20, 2, np.float32))


@pytest.mark.parametrize("index", [np.s_[12345:], np.s_[::7], np.s_[::-1]],
                         ids=["offset", "stride", "reversed"])
def test_views_carry_the_offset(child, index):
    host = np.arange(100000, dtype=np.int64)
    a = cai.to_device(host)
    child.send("open", a[index].get_ipc_handle(), "v")
    child.recv()
    np.testing.assert_array_equal(values_of(child, "v"), host[index])


def test_queued_work_is_seen_without_host_waits(child):
    s = cai.stream(non_blocking=True)
    a = cai.to_device(np.zeros(BIG, np.float32), stream=s)
    s.synchronize()
    scratch = busy(s, a)
    cai.ops.fill(a, 7, stream=s)
    h = a.get_ipc_handle()
    still_running = not s.query()             # get_ipc_handle did not wait for the work
    child.send("open", h, "a")
    child.recv()
    child.send("queue_copy", "a")
    child.recv()
    child.send("finish_copy", "a")
    got = child.recv()[1]
    assert (got == 7).all()                   # the importer's first use came after the fill
    assert still_running, "the queued work finished before get_ipc_handle returned; " \
        "raise BIG or rounds to make this check meaningful"
    del scratch


def test_memory_outlives_the_exporters_last_reference(child):
    a = cai.to_device(np.arange(4096, dtype=np.int32))
    payload = pickle.dumps(a[100:200].get_ipc_handle())
    del a
    gc.collect()
    assert cai.ipc_collect() == 0
    child.send("open", payload, "a")
    child.recv()
    np.testing.assert_array_equal(values_of(child, "a"), np.arange(100, 200))
    child.send("drop", "a")
    child.recv()
    assert cai.ipc_collect() == 1


def test_bad_handles(child):
    a = cai.to_device(np.arange(4))
    payload = pickle.dumps(a.get_ipc_handle())
    child.send("open", payload, "first")
    child.recv()
    child.send("open_error", payload)
    tag, kind, msg = child.recv()
    assert kind == "ValueError" and "opened in this process already" in msg


def test_exporter_exit_never_crashes_the_importer():
    """Unverified CUDA behaviour, recorded here: after the exporter exits, an importer that
    opened in time either keeps working or gets cai.DeviceError; a handle opened later fails
    with a clear error."""
    with Child(exporter, [1.0, 2.0, 3.0], False) as exp, Child(importer) as imp:
        _, h1, h2 = exp.recv()
        imp.send("open", h1, "a")
        imp.recv()
        exp.send("exit", True)
        exp.join()
        imp.send("sync_error", "a")
        outcome = imp.recv()
        assert outcome[0] in ("no error", "raised")
        if outcome[0] == "raised":
            assert outcome[1] == "DeviceError", outcome
        imp.send("open_error", h2)
        tag, kind, msg = imp.recv()
        assert tag == "raised" and kind == "DeviceError", (tag, kind, msg)
        imp.send("exit")
        imp.recv()
        assert imp.join() == 0


def test_multiprocessing_queue_is_zero_copy():
    import cai.multiprocessing as mp

    import scale_helpers

    ctx = mp.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=scale_helpers.queue_worker, args=(q_in, q_out), daemon=True)
    p.start()
    a = cai.to_device(np.arange(10, dtype=np.float32))
    q_in.put(a)
    assert q_out.get(timeout=TIMEOUT)[0] == "done"
    np.testing.assert_array_equal(a.copy_to_host(), 2 * np.arange(10))
    q_in.put(None)
    p.join(TIMEOUT)
    assert p.exitcode == 0


@pytest.mark.skipif(ON_CUDA and cai.device_count() < 2, reason="needs 2 GPUs")
def test_two_gpus():
    a0 = cai.to_device(np.arange(1 << 20, dtype=np.float64))
    with cai.Device(1):
        b1 = cai.device_array(1 << 20)
        s1 = cai.stream()
    assert a0.device == cai.Device(0) and b1.device == cai.Device(1)
    assert s1.device == cai.Device(1)
    assert b1.__dlpack_device__() == (2, 1)
    cai.ops.copy(b1, a0)                      # cuMemcpyPeerAsync
    np.testing.assert_array_equal(b1.copy_to_host(), np.arange(1 << 20))
    cai.ops.copy(b1[::2], a0[::-2])           # staged through the destination's device
    np.testing.assert_array_equal(b1.copy_to_host()[::2], np.arange(1 << 20)[::-2])
    with pytest.raises(ValueError, match="device 0 but b is on device 1"):
        cai.ops.add(a0, b1, a0)
    with cai.Device(1):
        h = b1.get_ipc_handle()
    with Child(importer) as c:
        c.send("open", h, "x")
        assert c.recv()[3] == 1               # found by uuid, opened on that device
        c.send("exit")
        c.recv()

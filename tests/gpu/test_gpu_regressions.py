"""The fixes of the CUDA path's bugs (the eight bugs, the import events of foreign streams, host
memory) checked on the hardware, in the GPU check's first phase (scripts/gpu-check.sh, steps
`regressions` and, once the example extension is built, `regressions-ext`: `-k
extension_kernels`).

Their simulator cases (tests/python/test_backend_regressions.py, test_add_extension.py,
test_sync.py, test_ipc.py, test_host_memory.py; tests/cpp/device/test_backend.cpp's
`backend_pools`) cannot run here: tests/python/conftest.py forces the simulator, and they delay
streams with `cai.sim.delay` / `cai.sim.hold` and count calls with `cai.sim.driver_calls`. Here
the same scenarios run on the real driver: a spin kernel on the producer's stream
(gpu_helpers.Spinner) stands for the delay, `cai.device_call_counts()` for the driver's call
counts, and real libraries' memory (CuPy's stream-ordered pool, PyTorch's expandable segments)
for the simulator's pools and chunked mappings.

What is checked here, fix by fix (and what only the simulator can check):

- DLPack of memory the driver does not know is a BufferError, not kDLCPU. (Simulator only:
  a host read of device memory at its address faults, its model of a GPU.)
- C API: extension kernels get the memory check and run on their arrays' device (the example
  extension, step `example`; the device part needs 2 GPUs).
- The per-thread default stream (2) is one stream per host thread.
- Foreign streams: one event recorded at import (streams 1, 2 and None cost nothing); a
  producer's stream may be destroyed after the import.
- IPC: a reference goes back after the importer's queued work; an export keeps every foreign
  owner of its allocation.
- Pool memory: a stream-ordered pool's ranges are never remembered and are refused for IPC
  with the reason (CuPy's MemoryAsyncPool); a tensor across chunks of PyTorch's expandable
  segments is one array. (Simulator only: a stale remembered range of another device.)
- Host memory: managed, mapped and pinned arrays, `cai.pinned()`, copies with a stream.
- Driver errors reach Python with their names (a real out-of-memory). (Simulator only:
  injected errors, `cai.sim.inject_error`.)

Cases that could fault the GPU if their fix regressed (a kernel on a wild pointer makes the
context unusable for the rest of the process) run in a subprocess.
"""

import gc
import glob
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import time
import weakref

import numpy as np
import pytest

import cai
from gpu_helpers import SPIN_SECONDS, peer

N = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))
COUNTS = ("event_record", "stream_wait_event", "event_create", "pointer_query",
          "stream_synchronize")
NOTHING = dict.fromkeys(COUNTS, 0)


class Foreign:
    """A foreign producer: one CAI v3 dict (`stream` None by default: nothing to order)."""

    def __init__(self, ptr, n=8, typestr="<f8", stream=None, owner=None):
        self.owner = owner
        self._d = {"shape": (n,), "typestr": typestr, "data": (ptr, False), "version": 3,
                   "stream": stream}

    @classmethod
    def of(cls, arr, stream):
        """A foreign view of a cai array's memory, naming `stream`."""
        d = arr.__cuda_array_interface__
        return cls(d["data"][0], d["shape"][0], d["typestr"], stream, owner=arr)

    @property
    def __cuda_array_interface__(self):
        return dict(self._d)


def counts():
    c = cai.device_call_counts()
    cai.reset_device_call_counts()
    return {k: c[k] for k in COUNTS}


def run_python(code, env=None, timeout=120):
    """Runs `code` in a fresh interpreter on the CUDA backend; returns the completed process."""
    env = dict(os.environ, CAI_BACKEND="cuda", **(env or {}))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, os.environ.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=timeout)


# ----- DLPack of memory the driver does not know --------------------------------------------------


def test_dlpack_of_memory_the_driver_does_not_know_is_refused():
    # Named kDLCPU, a consumer would read it on the host: a segfault at 0x1000, freed memory
    # read silently. BufferError names the pointer instead, before any read.
    def refused(fn):
        with pytest.raises(BufferError, match="is not memory the CUDA driver knows"):
            fn()

    wild = cai.as_cuda_array(Foreign(0x1000))
    refused(lambda: np.from_dlpack(wild))
    refused(wild.__dlpack_device__)
    refused(lambda: wild.__dlpack__())
    gone = cai.to_device(np.arange(8.0))
    ptr = gone.ptr
    del gone  # cuMemFree: the driver no longer knows the address (nothing allocates meanwhile)
    gc.collect()
    cai.synchronize()
    stale = cai.as_cuda_array(Foreign(ptr))
    refused(lambda: np.from_dlpack(stale))


# ----- extension kernels: the C API's memory check and device -------------------------------------


@pytest.fixture(scope="module")
def ext_dir():
    folder = os.environ.get("CAI_ADD_EXT_DIR", "")
    if not folder or not glob.glob(os.path.join(folder, "_add_ext*")):
        pytest.skip("set CAI_ADD_EXT_DIR to the build folder of examples/add_extension "
                    "(scripts/gpu-check.sh builds it there, step `example`)")
    return folder


# Without the check, each kernel would fault and leave the context unusable.
MEMORY_CASES = {
    "a wild pointer": ("a = foreign(0x1000)", "array 0 [0x1000+32) is not CUDA memory"),
    "a view past its allocation": ("a = foreign(base.ptr + 16)",
                                   "runs past the end of its allocation"),
    "freed memory": ("gone = cai.to_device(np.ones(8, np.float32)); p = gone.ptr; del gone; "
                     "cai.synchronize(); a = foreign(p)", "is not CUDA memory"),
}


@pytest.mark.parametrize("case", list(MEMORY_CASES))
def test_extension_kernels_get_the_memory_check(ext_dir, case):
    setup, message = MEMORY_CASES[case]
    r = run_python(f"""
        import sys, numpy as np, cai
        sys.path.insert(0, {ext_dir!r})
        import _add_ext

        class Foreign:
            def __init__(self, ptr):
                self.__cuda_array_interface__ = {{
                    "shape": (8,), "typestr": "<f4", "data": (ptr, False), "version": 3,
                    "stream": None}}

        def foreign(ptr):
            return Foreign(ptr)

        base = cai.to_device(np.ones(8, np.float32))
        out = cai.device_array(8, dtype=np.float32)
        {setup}
        try:
            _add_ext.add(a, base, out)
        except cai.DeviceError as e:
            assert {message!r} in str(e), str(e)
            _add_ext.add(base, base, out)  # the context is fine: nothing ran on the bad array
            assert (out.copy_to_host() == 2).all()
            print("refused")
    """)
    assert r.returncode == 0 and r.stdout.strip() == "refused", r.stdout + r.stderr


def test_extension_kernels_run_on_their_arrays_device(ext_dir):
    if cai.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    r = run_python(f"""
        import sys, numpy as np, cai
        sys.path.insert(0, {ext_dir!r})
        import _add_ext
        with cai.Device(1):
            a = cai.to_device(np.arange(8, dtype=np.float32))
            out = cai.device_array(8, dtype=np.float32)
            s1 = cai.stream()
        _add_ext.add(a, a, out, stream=s1)  # device 0 is current; the arrays are on 1
        assert cai.current_device() == cai.Device(0)  # restored after the call
        np.testing.assert_array_equal(out.copy_to_host(), 2 * np.arange(8, dtype=np.float32))
        b = cai.to_device(np.ones(8, np.float32))  # on device 0
        try:
            _add_ext.add(a, b, out)
        except ValueError as e:
            assert "is on device 1 but array 1 is on device 0" in str(e), str(e)
            print("refused")
    """)
    assert r.returncode == 0 and r.stdout.strip() == "refused", r.stdout + r.stderr


# ----- the per-thread default stream --------------------------------------------------------------


@pytest.mark.usefixtures("no_gc")
def test_per_thread_default_streams_of_two_threads_are_two_streams(spinner):
    # Handle 2 names the calling thread's own stream: thread A's work on its stream 2 is ordered
    # before this thread's use on its stream 2 (through the legacy stream), not skipped as "the
    # same stream". A stays alive until the end, and with it its per-thread stream.
    made, ready, release = {}, threading.Event(), threading.Event()

    def producer():
        try:
            x = cai.device_array(N, dtype=np.float32, stream=2)  # thread A's stream 2
            cai.ops.fill(x, 1.0)
            x.synchronize()
            spinner.spin(2, SPIN_SECONDS)  # A's stream 2 is busy...
            cai.ops.fill(x, 5.0)  # ...then writes 5
            made["x"] = x
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            made["error"] = e
        finally:
            ready.set()
        release.wait(60)

    t = threading.Thread(target=producer)
    t.start()
    try:
        assert ready.wait(60), "the producer thread hangs"
        assert "error" not in made, made.get("error")
        x = made["x"]
        out = cai.device_array(N, dtype=np.float32, stream=2)  # this thread's stream 2
        cai.ops.fill(out, -1.0)
        out.synchronize()
        cai.ops.copy(out, x, stream=2)
        result = out.copy_to_host()
    finally:
        release.set()
        t.join(60)
    np.testing.assert_array_equal(result, np.full(N, 5.0, np.float32),
                                  err_msg="the copy did not wait for the other thread's stream 2")
    # Exported from another thread, this thread's stream 2 is named as the legacy stream.
    y = cai.device_array(8, stream=2)
    seen = {}
    t = threading.Thread(target=lambda: seen.update(s=y.__cuda_array_interface__["stream"]))
    t.start()
    t.join(60)
    assert seen["s"] == 1


# ----- imports: an event at import for a foreign stream, nothing for 1, 2 and None ---------------


@pytest.mark.parametrize("stream", [None, 1, 2])
def test_an_import_on_a_default_stream_makes_no_driver_call(warm, stream):
    x = cai.to_device(np.arange(8.0))
    x.synchronize()
    p = Foreign.of(x, stream)
    counts()
    y = cai.as_cuda_array(p)
    assert counts() == NOTHING
    assert y.ptr == x.ptr


def test_an_import_on_a_foreign_stream_records_one_event(warm, spinner):
    # `s` stands for another library's stream: only its handle travels in the dict.
    s = cai.stream(non_blocking=True)
    x = cai.to_device(np.arange(8.0))
    x.synchronize()
    counts()
    cai.as_cuda_array(Foreign.of(x, s.handle))  # idle: one query, no record
    assert counts() == NOTHING
    spinner.spin(s, 0.05)
    cai.as_cuda_array(Foreign.of(x, s.handle))  # the event pool has one now
    gc.collect()
    spinner.spin(s, 0.3)
    counts()
    y = cai.as_cuda_array(Foreign.of(x, s.handle))  # busy: one record
    assert counts() == dict(NOTHING, event_record=1)
    # Work on another stream: one wait for the import's event before; after, the legacy stream
    # waits for that work (one record, one wait), never the producer's stream.
    c = cai.stream(non_blocking=True)
    out = cai.device_array(8, stream=c)
    counts()
    cai.ops.copy(out, y, stream=c)
    got = counts()
    assert (got["event_record"], got["stream_wait_event"], got["pointer_query"]) == (1, 2, 0), got
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(8.0))
    # Work on the producer's own stream waits for nothing.
    z = cai.as_cuda_array(Foreign.of(x, s.handle))
    counts()
    cai.ops.fill(z, 2.0, stream=s)
    got = counts()
    assert (got["event_record"], got["stream_wait_event"]) == (0, 0), got
    np.testing.assert_array_equal(x.copy_to_host(stream=s), np.full(8, 2.0))


@pytest.mark.usefixtures("no_gc")
def test_a_dropped_producer_stream_is_never_used_again(spinner):
    """CuPy exports its current stream, which its array does not keep alive. The event
    recorded at import stands for it: the stream may be destroyed before the first use."""
    cp = peer("cupy").cp
    x = cp.zeros(N, dtype=cp.float32)
    cp.cuda.Device().synchronize()
    ps = cp.cuda.Stream(non_blocking=True)
    spinner.spin(ps, SPIN_SECONDS)
    with ps:
        x.fill(4.0)  # the producer's work, behind the spin
        t0 = time.perf_counter()
        y = cai.as_cuda_array(x)  # CAI v3 names ps
        import_seconds = time.perf_counter() - t0
    busy = not ps.done
    del ps  # cudaStreamDestroy while its work is queued: allowed, the work still runs
    gc.collect()
    c = cai.stream(non_blocking=True)
    out = cai.device_array(N, dtype=np.float32, stream=c)
    cai.ops.fill(out, -1.0)
    c.synchronize()
    cai.ops.copy(out, y, stream=c)  # waits for the import's event, not for the gone stream
    result = out.copy_to_host()
    assert busy and import_seconds < SPIN_SECONDS / 6, "the import waited for the producer"
    np.testing.assert_array_equal(result, np.full(N, 4.0, np.float32))


# ----- IPC: references and owners -----------------------------------------------------------------


def in_use():
    return cai._cai._ipc_exports_in_use()


@pytest.mark.usefixtures("no_gc")
def test_an_ipc_reference_goes_back_after_the_importers_work(spinner):
    # The exporter may free or reuse the memory once every reference is back: the reference of
    # an opened handle goes back once the work queued on its views has run (a host function).
    a = cai.to_device(np.arange(64.0))
    a.synchronize()
    cai.ipc_collect()
    before = in_use()
    s = cai.stream(non_blocking=True)
    opened = pickle.loads(pickle.dumps(a.get_ipc_handle())).open(stream=s)
    assert in_use() == before + 1
    spinner.spin(s, SPIN_SECONDS)
    cai.ops.fill(opened, 7.0)  # queued on s, behind the spin
    del opened  # the last view goes while its work is queued
    gc.collect()
    still_queued = not s.query()
    held = in_use()
    s.synchronize()
    deadline = time.monotonic() + 5
    while in_use() != before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert still_queued, "the spin ended early: the check below proves nothing"
    assert held == before + 1, "the reference went back while the importer's work was queued"
    assert in_use() == before, "the reference never went back"
    np.testing.assert_array_equal(a.copy_to_host(), np.full(64, 7.0))


def test_two_views_of_one_allocation_keep_both_owners():
    # Two producers' views of one allocation (two parts of a pool's block): the export keeps
    # the owner of each, not only the first one's.
    class Owner:
        pass

    base = cai.to_device(np.arange(64.0))
    owners = [Owner(), Owner()]
    alive = [weakref.ref(o) for o in owners]
    halves = [cai.from_cuda_array_interface(base[i * 32:(i + 1) * 32].__cuda_array_interface__,
                                            owner=owners[i]) for i in range(2)]
    handles = [pickle.dumps(h.get_ipc_handle()) for h in halves]
    del halves, owners
    gc.collect()
    assert all(r() is not None for r in alive)  # both held while references are out
    for blob in handles:
        pickle.loads(blob)  # received and dropped: the reference comes back
    del handles
    gc.collect()
    cai.ipc_collect()
    gc.collect()
    assert all(r() is None for r in alive)


# ----- memory of pools and of virtual-memory mappings ---------------------------------------------


def test_memory_of_a_stream_ordered_pool(warm):
    """CuPy's MemoryAsyncPool (cudaMallocAsync): its ranges are never remembered (the pool
    hands addresses out again at will, on any device), and sharing it through CUDA IPC is
    refused with the reason, not with the driver's bare error."""
    cp = peer("cupy").cp
    try:
        pool = cp.cuda.MemoryAsyncPool()
    except Exception as e:  # noqa: BLE001 - a CuPy or device without stream-ordered pools
        pytest.skip(f"no CuPy MemoryAsyncPool here: {type(e).__name__}: {e}")
    with cp.cuda.using_allocator(pool.malloc):
        x = cp.arange(4096, dtype=cp.float32)
    cp.cuda.Device().synchronize()
    y = cai.as_cuda_array(x)
    out = cai.device_array(4096, dtype=np.float32)
    cai.synchronize()
    counts()
    cai.ops.copy(out, y)
    first = counts()["pointer_query"]
    cai.ops.copy(out, y)
    again = counts()["pointer_query"]
    assert first >= 1 and again == first, (first, again, "a stream-ordered pool's range was "
                                                        "remembered")
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(4096, dtype=np.float32))
    with pytest.raises(cai.DeviceError, match="not legacy-IPC capable"):
        y.get_ipc_handle()
    del y
    del x


def test_a_tensor_across_chunks_of_expandable_segments():
    """PyTorch's expandable segments map one segment as chunks the driver reports one by one:
    a tensor across several of them is one array to cai (checked chunk by chunk), not refused
    as running past its allocation. In a subprocess: the setting must come before PyTorch
    starts."""
    peer("torch")  # skips when PyTorch or its GPU is missing
    r = run_python("""
        import numpy as np, torch, cai
        n = 24 << 20  # float32: 96 MiB, more than one chunk of a large segment
        t = torch.zeros(n, device="cuda")
        torch.cuda.synchronize()
        segments = torch.cuda.memory_snapshot()
        expandable = any(s.get("is_expandable") for s in segments)
        a = cai.as_cuda_array(t)
        cai.ops.fill(a, 3.0)
        half = cai.device_array(n // 2, dtype=np.float32)
        cai.ops.copy(half, a[::2])  # a strided kernel over every chunk
        cai.synchronize()
        assert bool((t == 3.0).all()), "fill"
        assert (half.copy_to_host() == 3.0).all(), "strided copy"
        print("ok" if expandable else "not expandable")
    """, env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    assert r.returncode == 0, r.stdout + r.stderr
    if r.stdout.strip() == "not expandable":
        pytest.skip("this PyTorch made no expandable segment (PYTORCH_CUDA_ALLOC_CONF ignored)")
    assert r.stdout.strip() == "ok", r.stdout + r.stderr


# ----- host memory --------------------------------------------------------------------------------

kDLCUDAHost, kDLCUDAManaged = 3, 13


@pytest.mark.parametrize("make,device_type", [(cai.managed_array, kDLCUDAManaged),
                                              (cai.mapped_array, kDLCUDAHost)])
def test_numpy_arrays_the_device_reaches_in_place(make, device_type):
    a = make((2, 3), dtype=np.float32)
    assert isinstance(a, np.ndarray) and not isinstance(a, cai.DeviceNDArray)
    assert a.__dlpack_device__()[0] == device_type
    cai.ops.fill(a[1:], 2.5)  # the kernel gets the view's device pointer
    a.synchronize()
    np.testing.assert_array_equal(a[1], np.full(3, 2.5, np.float32))
    a[1, 2] = 7
    assert a.copy_to_host()[1, 2] == 7  # one memory
    assert cai.as_cuda_array(a[1:]).ptr == a[1:].__cuda_array_interface__["data"][0]
    assert a[1:].__cuda_array_interface__["data"][0] == a.ptr + 12


@pytest.mark.usefixtures("no_gc")
def test_the_host_reads_the_device_work_after_synchronize(spinner):
    s = cai.stream(non_blocking=True)
    a = cai.managed_array(1000, stream=s)
    cai.ops.fill(a, 0.0)
    s.synchronize()
    spinner.spin(s, SPIN_SECONDS)
    cai.ops.fill(a, 3.0)  # queued behind the spin
    assert not s.query()
    a.synchronize()  # the host view does not wait by itself (as Numba's)
    np.testing.assert_array_equal(a, np.full(1000, 3.0))


def test_device_memory_is_still_only_copied():
    a = cai.to_device(np.arange(4.0))
    with pytest.raises(ValueError, match="copy=False"):
        np.asarray(a, copy=False)
    assert np.asarray(a).ctypes.data != a.ptr


# Each spin starts after the test's allocations and page-locking (which the driver may
# synchronize), so that query() says whether the call under test waited.


@pytest.mark.usefixtures("no_gc")
def test_pinned_array_is_a_numpy_array_whose_copies_do_not_wait(spinner):
    p = cai.pinned_array((4, 5), dtype=np.int32, order="F")
    assert type(p) is np.ndarray and p.flags.f_contiguous
    p[...] = np.arange(20).reshape(4, 5)
    out = cai.pinned_array((4, 5), dtype=np.int32)
    slow = cai.stream(non_blocking=True)
    d = cai.device_array((4, 5), dtype=np.int32, stream=slow)
    spinner.spin(slow, SPIN_SECONDS)
    d.copy_to_device(p, stream=slow)  # queued
    assert not slow.query()
    d.copy_to_host(out, stream=slow)  # queued too
    assert not slow.query()
    slow.synchronize()
    np.testing.assert_array_equal(out, np.arange(20).reshape(4, 5))


@pytest.mark.usefixtures("no_gc")
def test_pageable_copies_finish_before_returning_even_with_a_stream(spinner):
    # What the driver promises for pageable memory: the host buffer of a copy to the device may
    # be reused at once, and a copy to pageable host memory returns once written. (The
    # simulator's case also asserts that the copy to the device waited for the stream; the
    # driver only says it may.)
    host = np.arange(64.0)
    slow = cai.stream(non_blocking=True)
    d = cai.device_array(64, stream=slow)
    spinner.spin(slow, SPIN_SECONDS)
    d.copy_to_device(host, stream=slow)
    host[:] = -1  # reused at once
    back = d.copy_to_host(stream=slow)
    assert slow.query()  # written before returning, so the stream got there
    np.testing.assert_array_equal(back, np.arange(64.0))


@pytest.mark.usefixtures("no_gc")
def test_stream_zero_always_waits(spinner):
    s = cai.stream(non_blocking=True)
    d = cai.device_array(8, stream=s)
    cai.ops.fill(d, 1.0)
    p = cai.pinned_array(8)
    s.synchronize()
    spinner.spin(s, SPIN_SECONDS)
    cai.ops.fill(d, 2.0)
    d.copy_to_host(p)  # stream=0: Numba's synchronous copy, pinned memory or not
    assert s.query()
    np.testing.assert_array_equal(p, np.full(8, 2.0))


@pytest.mark.usefixtures("no_gc")
def test_pinned_page_locks_numpy_arrays_for_a_block(spinner):
    x = np.ones((3, 3))
    slow = cai.stream(non_blocking=True)
    d = cai.device_array((3, 3), stream=slow)
    with cai.pinned(x):
        spinner.spin(slow, SPIN_SECONDS)
        d.copy_to_device(x, stream=slow)
        assert not slow.query()  # page-locked: queued
        slow.synchronize()
        with pytest.raises(cai.DeviceError, match="CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"):
            with cai.pinned(x[1:]):
                pass
    with cai.pinned(x):  # unlocked after the block: it locks again
        pass
    np.testing.assert_array_equal(d.copy_to_host(), x)
    with cai.pinned(np.zeros(0)):  # nothing to lock
        pass


def test_a_failed_pinned_block_unlocks_what_it_locked():
    x, y = np.ones(16), np.ones(16)
    with pytest.raises(TypeError):
        with cai.pinned(x, "not an array"):
            pass
    with cai.pinned(x, y):  # x was unlocked: it locks again
        pass


# ----- errors -------------------------------------------------------------------------------------


def test_out_of_memory_reaches_python_with_the_drivers_names():
    # A real out-of-memory (32 TiB): the message names the entry point and the code, and the
    # backend goes on as before (CUDA_ERROR_OUT_OF_MEMORY is not sticky).
    with pytest.raises(cai.DeviceError, match=r"out of memory allocating \d+ bytes \(cuMemAlloc: "
                                              r"CUDA_ERROR_OUT_OF_MEMORY"):
        cai.device_array(1 << 42)
    assert cai.device_array(4).shape == (4,)

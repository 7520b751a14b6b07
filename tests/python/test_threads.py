"""Issue 8, threads: imports, exports, copies, operations and stream work from 8 threads at once
on the simulator. Each thread orders its own work (its own streams, events, or cai's automatic
ordering), so the race detector must stay silent and every result must be right; a thread that
does not order its work still gets cai.RaceError. (tests/cpp/device/test_sim_threads.cpp does the
same at the C++ level for ThreadSanitizer.)"""

import os

os.environ.setdefault("CAI_BACKEND", "sim")

import subprocess  # noqa: E402
import threading  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import cai  # noqa: E402
from helpers import DLWrapper, DictProducer as Producer, run_isolated  # noqa: E402

THREADS = 8


def in_threads(fn, n=THREADS):
    """Runs fn(i) on n threads released together; returns the results, re-raising failures."""
    barrier = threading.Barrier(n)

    def run(i):
        barrier.wait()
        return fn(i)

    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(run, range(n)))


@pytest.fixture(autouse=True)
def _race_detection_on():
    cai.sim.set_race_detection(True)
    yield


def test_pipeline_per_thread():
    """Each thread: upload, export/import (CAI and DLPack), add, fill, views, copy back."""
    def work(i):
        s = cai.stream(non_blocking=True)
        for it in range(15):
            host = np.arange(64, dtype=np.float32) + 1000 * i + it
            a = cai.to_device(host, stream=s)
            b = cai.as_cuda_array(Producer(a.__cuda_array_interface__, keep=a))   # CAI import
            # A foreign stream is stood for by an event recorded at import: no default stream.
            assert b.ptr == a.ptr and b.stream is None
            c = cai.device_array_like(a, stream=s)
            cai.ops.add(a, b, c)                          # c = 2 host, on c's stream
            d = cai.from_dlpack(DLWrapper(c))             # DLPack import (default stream)
            e = cai.device_array_like(d)
            cai.ops.copy(e, d)
            cai.ops.fill(e[::2], -1)                      # a strided view
            out = e.copy_to_host()
            expect = 2 * host
            expect[::2] = -1
            np.testing.assert_array_equal(out, expect)
            assert cai.Array(e).slice(0, 1, 3).shape == (2,)
        s.synchronize()
        return i

    assert in_threads(work) == list(range(THREADS))


def test_shared_source_read_by_every_thread_then_overwritten():
    """All threads read one array on their own streams; the owner overwrites it afterwards on
    its stream: cai's ordering (the source's stream waits for each reader) makes that safe."""
    owner_stream = cai.stream(non_blocking=True)
    shared = cai.to_device(np.arange(4096, dtype=np.float64), stream=owner_stream)
    cai.sim.delay(owner_stream, 0.05)        # the readers really have to wait for the owner
    cai.ops.fill(shared[::7], 3.0)

    def read(i):
        s = cai.stream(non_blocking=True)
        dst = cai.device_array_like(shared, stream=s)
        for _ in range(10):
            cai.ops.copy(dst, shared)                 # on dst's stream
        return dst.copy_to_host()

    outs = in_threads(read)
    expect = np.arange(4096, dtype=np.float64)
    expect[::7] = 3.0
    for out in outs:
        np.testing.assert_array_equal(out, expect)
    cai.ops.fill(shared, 0.0)                        # ordered after every read: no RaceError
    np.testing.assert_array_equal(shared.copy_to_host(), np.zeros(4096))


def test_disjoint_slices_of_one_array_written_concurrently():
    big = cai.device_array((THREADS, 512), dtype=np.int64)
    cai.ops.fill(big, 0)
    cai.synchronize()

    def write(i):
        s = cai.stream(non_blocking=True)
        row = big[i]
        for k in range(20):
            cai.ops.fill(row, i * 100 + k, stream=s)
        s.synchronize()

    in_threads(write)
    out = big.copy_to_host()
    for i in range(THREADS):
        assert (out[i] == i * 100 + 19).all()


def test_events_and_streams_from_threads():
    """Stream creation, delays, events recorded on one thread's stream and waited on by
    another, synchronize and query, all at once."""
    events = [None] * THREADS
    ready = [threading.Event() for _ in range(THREADS)]
    bufs = [cai.device_array((256,), dtype=np.int32) for _ in range(THREADS)]
    cai.synchronize()

    def work(i):
        s = cai.stream(non_blocking=True)
        if i == 0:
            cai.sim.delay(s, 0.02)
            cai.ops.fill(bufs[0], 1, stream=s)
        else:
            ready[i - 1].wait()
            events[i - 1].wait(s)                    # ordered after thread i-1's work
            cai.ops.add(bufs[i - 1], bufs[i - 1], bufs[i], stream=s)
        e = cai.event(timing=False)
        e.record(s)
        events[i] = e
        ready[i].set()
        e.synchronize()
        assert e.query() and s.query()
        for _ in range(20):                          # and some churn
            t = cai.stream(non_blocking=bool(i % 2))
            ev = cai.event()
            ev.record(t)
            ev.synchronize()
        return i

    in_threads(work)
    assert (bufs[-1].copy_to_host() == 2 ** (THREADS - 1)).all()


def test_same_producer_imported_from_every_thread():
    src = cai.to_device(np.arange(100, dtype=np.int16))
    p = Producer(src.__cuda_array_interface__, keep=src)
    views = in_threads(lambda i: [cai.as_cuda_array(p) for _ in range(200)])
    for vs in views:
        for v in vs:
            assert v.ptr == src.ptr and v.shape == (100,)
    np.testing.assert_array_equal(views[3][7].copy_to_host(), np.arange(100, dtype=np.int16))


def test_exports_of_one_array_from_every_thread():
    src = cai.to_device(np.arange(50, dtype=np.float32))

    def export(i):
        got = []
        for _ in range(200):
            d = src.__cuda_array_interface__
            cap = src.__dlpack__(max_version=(1, 3), stream=-1)
            got.append((d["data"][0], d["stream"], type(cap).__name__))
        return got

    for got in in_threads(export):  # no work pending on src: no stream to name
        assert all(g == (src.ptr, None, "PyCapsule") for g in got)


def test_each_threads_own_mistake_is_still_caught():
    """Two stream-less imports of the same memory written on two streams without any ordering:
    a race in every thread, reported to that thread. (No thread may synchronize the device
    meanwhile: the host is one actor for the detector, so a synchronize in any thread orders
    every thread's earlier work before the host's later actions.)"""
    def mistake(i):
        mem = cai.device_array((32,), dtype=np.float32)   # nothing queued on it yet
        d = dict(mem.__cuda_array_interface__)
        d["stream"] = None                 # nothing to order against
        x = cai.from_cuda_array_interface(d, owner=mem)
        y = cai.from_cuda_array_interface(d, owner=mem)
        s1, s2 = cai.stream(non_blocking=True), cai.stream(non_blocking=True)
        cai.ops.fill(x, 1.0, stream=s1)
        with pytest.raises(cai.RaceError, match="race"):
            cai.ops.fill(y, 2.0, stream=s2)
        s1.synchronize()
        return True

    assert all(in_threads(mistake))


def test_first_calls_from_many_threads_at_once_do_not_hang():
    # A fresh interpreter, where numpy.ma is not imported yet: the first host-to-device copies,
    # from 8 threads released together, import it (cai checks host data for masks). An import
    # lets other threads run. cai kept the type in a function-local static, and a thread that
    # took the GIL meanwhile waited on the static's guard holding the GIL that the importing
    # thread needed back: every thread hung, 5 runs in 5 (convert.h, kept_for_process).
    code = """
        import sys, threading
        import numpy as np
        import cai
        assert "numpy.ma" not in sys.modules
        sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
        barrier = threading.Barrier(8)
        firsts = []
        def first_copy(i):
            barrier.wait()
            firsts.append(int(cai.to_device(np.full(4, i, np.float32)).copy_to_host()[0]))
        threads = [threading.Thread(target=first_copy, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print(*sorted(firsts))
    """
    try:
        r = run_isolated(code, timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("8 threads making their first host-to-device copies at once hung")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(i) for i in range(8)]

"""Regressions of the CUDA backend found by reading its code, each run through the backend's own
code on the simulated driver (docs/simulator.md): what a driver knows and refuses, not a
simulator-only path. Crash-prone cases run in a subprocess."""

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import cai
from helpers import Producer

HERE = os.path.dirname(os.path.abspath(__file__))


def run(code):
    env = dict(os.environ, CAI_BACKEND="sim",
               PYTHONPATH=os.pathsep.join([HERE] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"exit code {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_dlpack_of_memory_the_driver_does_not_know_is_refused():
    # Named kDLCPU, a consumer would read it on the host: a segfault at 0x1000, freed memory
    # read silently. BufferError names the pointer instead, before any read.
    out = run("""
        import numpy as np, cai
        from helpers import DictProducer

        def foreign(ptr):
            return cai.as_cuda_array(DictProducer(
                {"shape": (8,), "typestr": "<f8", "data": (ptr, False), "version": 3,
                 "stream": None}))

        def refused(fn):
            try:
                fn()
            except BufferError as e:
                assert "is not memory the CUDA driver knows" in str(e), str(e)
                return
            raise AssertionError("no BufferError")

        wild = foreign(0x1000)
        refused(lambda: np.from_dlpack(wild))
        refused(wild.__dlpack_device__)
        refused(lambda: wild.__dlpack__())
        gone = cai.to_device(np.arange(8.0))
        ptr = gone.ptr
        del gone                              # freed: its address is not handed out again
        stale = foreign(ptr)
        refused(lambda: np.from_dlpack(stale))
        print("ok")
    """)
    assert out.strip() == "ok"


def test_device_memory_is_not_readable_on_the_host_at_its_address():
    # As on a GPU: a host read of a device pointer faults (the simulator's device addresses
    # have no access; its kernels and copies reach the memory at a private alias).
    code = """
        import ctypes, numpy as np, cai
        a = cai.to_device(np.arange(4.0))
        print(ctypes.c_double.from_address(a.ptr).value)
    """
    env = dict(os.environ, CAI_BACKEND="sim")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                       capture_output=True, text=True, timeout=120)
    if os.environ.get("CAI_SANITIZED") == "asan":
        # AddressSanitizer catches the SIGSEGV, reports it and exits with 1.
        assert r.returncode == 1 and "AddressSanitizer: SEGV" in r.stderr, r.stderr[-2000:]
    else:
        assert r.returncode == -11, (r.returncode, r.stdout, r.stderr)  # SIGSEGV
    assert r.stdout == ""  # nothing was read


def test_per_thread_default_streams_of_two_threads_are_two_streams():
    # Handle 2 names the calling thread's own stream: work thread A queued on its stream 2 is
    # ordered before thread B's use on B's stream 2 (through the legacy stream), not skipped
    # as "the same stream".
    made = {}

    def producer():
        x = cai.device_array(4096, dtype=np.float32, stream=2)  # thread A's stream 2
        cai.ops.fill(x, 1.0)
        cai.sim.delay(2, 0.2)
        cai.ops.fill(x, 5.0)
        made["x"] = x

    t = threading.Thread(target=producer)
    t.start()
    t.join()
    x = made["x"]
    out = cai.device_array(4096, dtype=np.float32, stream=2)  # this thread's stream 2
    cai.ops.copy(out, x, stream=2)  # no RaceError: ordered after A's fill
    np.testing.assert_array_equal(out.copy_to_host(), np.full(4096, 5.0, np.float32))
    # Exported from here, A's stream is named as the legacy stream, ordered after it.
    y = cai.device_array(8, stream=2)
    cai.ops.fill(y, 0.0)  # work pending on this thread's stream 2
    t = threading.Thread(target=lambda: made.update(e=y.__cuda_array_interface__["stream"]))
    t.start()
    t.join()
    assert made["e"] == 1


def test_an_import_on_a_default_stream_makes_no_driver_call():
    x = cai.to_device(np.arange(8.0))
    x.synchronize()
    for stream in (None, 1, 2):
        p = Producer(x, stream=stream)
        cai.sim.reset_driver_calls()
        cai.as_cuda_array(p)
        assert cai.sim.driver_calls() == {}, stream
    s = cai.stream(non_blocking=True)
    cai.sim.reset_driver_calls()
    cai.as_cuda_array(Producer(x, stream=s.handle))
    assert cai.sim.driver_calls() == {"cuStreamQuery": 1}  # an idle foreign stream: one query
    with cai.sim.hold(s):
        cai.ops.fill(x, 1.0, stream=s)
        cai.as_cuda_array(Producer(x, stream=s.handle))  # the event pool has one now
        cai.sim.reset_driver_calls()
        cai.as_cuda_array(Producer(x, stream=s.handle))
        # A busy foreign stream: the query, and one record.
        assert cai.sim.driver_calls() == {"cuStreamQuery": 1, "cuEventRecord": 1}


def test_driver_errors_reach_python_with_their_names():
    # What a real driver may answer, injected: the message names the entry point and the code.
    cai.sim.inject_error("cuMemAlloc", 2)  # CUDA_ERROR_OUT_OF_MEMORY
    with pytest.raises(cai.DeviceError, match=r"out of memory allocating 800 bytes \(cuMemAlloc: "
                                              r"CUDA_ERROR_OUT_OF_MEMORY"):
        cai.device_array(100)
    cai.sim.inject_error("cuStreamSynchronize", 719)  # CUDA_ERROR_LAUNCH_FAILED
    with pytest.raises(cai.DeviceError, match="cuStreamSynchronize failed: CUDA_ERROR_LAUNCH_FAILED"):
        cai.default_stream().synchronize()
    with pytest.raises(ValueError, match="no entry point named cuNothing"):
        cai.sim.inject_error("cuNothing", 1)
    assert cai.device_array(4).shape == (4,)  # one failure each, then as before

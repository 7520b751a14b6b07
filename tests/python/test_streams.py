"""Issue 4: streams and events (record, wait, query, synchronize, elapsed_time, external_stream,
int(stream), __cuda_stream__ objects as stream= arguments), cai.backend(), python -m cai demo."""

import gc
import os
import subprocess
import sys

import numpy as np
import pytest

import cai
from helpers import pending_fill


def test_backend_is_the_simulator():
    assert cai.backend() == "simulator"
    assert cai.sim.active()
    assert cai.cuda_available() in (True, False)


def test_stream_handles():
    s = cai.stream()
    assert isinstance(s, cai.Stream)
    assert isinstance(s.handle, int) and s.handle not in (0, 1, 2)
    assert int(s) == s.handle
    assert s.owned
    assert cai.stream().handle != s.handle
    assert cai.default_stream().handle == 1
    assert cai.legacy_default_stream().handle == 1
    assert cai.per_thread_default_stream().handle == 2
    assert not cai.legacy_default_stream().owned
    assert "legacy" in repr(cai.legacy_default_stream())
    assert "per-thread" in repr(cai.per_thread_default_stream())
    assert s.__cuda_stream__() == (0, s.handle)
    assert s == cai.external_stream(s.handle) and hash(s) == hash(cai.external_stream(s.handle))
    assert s != cai.stream() and s != s.handle


def test_stream_index_protocol():
    s = cai.stream()
    assert [10, 20, 30][cai.per_thread_default_stream()] == 30  # __index__
    assert hex(s) == hex(s.handle)


def test_query_and_synchronize_do_not_block_until_asked(streams):
    A, B = streams
    assert A.query()
    with cai.sim.hold(A):
        assert not A.query()  # the host returned while A is busy
        assert B.query()      # other streams are not affected
    A.synchronize()
    assert A.query()


def test_event_record_wait_query_synchronize(streams):
    A, B = streams
    ev = cai.event()
    assert ev.query()  # never recorded: complete
    with cai.sim.hold(A):
        ev.record(A)
        assert not ev.query()
        ev.wait(B)  # B waits for A's work; the host does not block
        assert not B.query()
    ev.synchronize()
    assert ev.query()
    B.synchronize()
    assert B.query()


def test_event_orders_work_for_the_race_detector(streams):
    A, B = streams
    a, unordered = pending_fill(A, 1024, np.int32, 1, delay=0.2)
    ev = cai.event(timing=False)
    ev.record(A)
    ev.wait(B)
    cai.ops.fill(unordered, 2, stream=B)  # ordered by the event: no RaceError
    np.testing.assert_array_equal(a.copy_to_host(stream=B), np.full(1024, 2, np.int32))


def test_event_default_stream_arguments():
    ev = cai.event()
    ev.record()        # 0: the default stream
    ev.record(None)
    ev.record(0)
    ev.wait()
    ev.wait(cai.per_thread_default_stream())
    ev.synchronize()
    assert ev.query()
    assert isinstance(ev.handle, int)


def test_elapsed_time(streams):
    A, _ = streams
    start, end = cai.event(), cai.event()
    start.record(A)
    cai.sim.delay(A, 0.01)
    end.record(A)
    end.synchronize()
    ms = start.elapsed_time(end)
    assert isinstance(ms, float) and ms >= 0.0
    with pytest.raises(cai.DeviceError, match="timing"):
        start.elapsed_time(cai.event(timing=False))


def test_synchronize_waits_for_every_stream(streams):
    A, B = streams
    cai.sim.delay(A, 0.3)
    cai.sim.delay(B, 0.3)
    cai.synchronize()
    assert A.query() and B.query()


def test_external_stream():
    s = cai.stream(non_blocking=True)
    ext = cai.external_stream(s.handle)
    assert ext.handle == s.handle and not ext.owned
    a = cai.device_array(4, stream=ext)
    cai.ops.fill(a, 1.0)
    assert a.__cuda_array_interface__["stream"] == s.handle
    np.testing.assert_array_equal(a.copy_to_host(), np.ones(4))
    assert cai.external_stream(1).handle == 1 and cai.external_stream(2).handle == 2
    assert cai.external_stream(np.uint64(s.handle)) == s


@pytest.mark.parametrize("bad,exc", [(0, ValueError), (-1, ValueError), (True, TypeError),
                                     ("1", TypeError), (1.0, TypeError)])
def test_external_stream_rejects(bad, exc):
    with pytest.raises(exc):
        cai.external_stream(bad)


class ForeignStream:
    """cuda.core's protocol: __cuda_stream__() -> (version, handle)."""

    def __init__(self, handle):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


@pytest.mark.parametrize("kind", ["Stream", "int", "cuda_stream", "external"])
def test_every_stream_argument_takes_every_form(kind):
    s = cai.stream(non_blocking=True)
    arg = {"Stream": s, "int": s.handle, "cuda_stream": ForeignStream(s.handle),
           "external": cai.external_stream(s.handle)}[kind]
    a = cai.device_array(6, dtype=np.float32, stream=arg)
    assert a.stream == s
    b = cai.device_array_like(a, stream=arg)
    assert b.stream == s
    c = cai.to_device(np.arange(6, dtype=np.float32), stream=arg)
    assert c.stream == s
    cai.ops.fill(a, 1.0, stream=arg)
    cai.ops.copy(b, a, stream=arg)
    cai.ops.add(b, c, a, stream=arg)
    a.copy_to_device(np.ones(6, np.float32), stream=arg)
    np.testing.assert_array_equal(c.copy_to_host(stream=arg), np.arange(6, dtype=np.float32))
    ev = cai.event()
    ev.record(arg)
    ev.wait(arg)
    cai.sim.delay(arg, 0.0)
    s.synchronize()


@pytest.mark.parametrize("bad,exc", [("s", TypeError), (1.5, TypeError), (True, TypeError),
                                     (-3, ValueError), (ForeignStream(0), ValueError),
                                     (object(), TypeError)])
def test_stream_argument_errors(bad, exc):
    with pytest.raises(exc, match="stream"):
        cai.device_array(3, stream=bad)
    with pytest.raises(exc, match="stream"):
        cai.ops.fill(cai.device_array(3), 0, stream=bad)


def test_cuda_stream_must_return_a_pair():
    class Bad:
        def __cuda_stream__(self):
            return 5
    with pytest.raises(TypeError, match="__cuda_stream__"):
        cai.device_array(3, stream=Bad())


def test_non_blocking_and_blocking_streams():
    # A blocking stream is ordered with the legacy default stream; a non-blocking one is not.
    blocking = cai.stream()
    nb = cai.stream(non_blocking=True)
    a = cai.device_array(256, dtype=np.int32, stream=1)
    cai.synchronize()
    cai.sim.delay(blocking, 0.2)
    unordered = cai.from_cuda_array_interface(a.__cuda_array_interface__, sync=False)
    cai.ops.fill(unordered, 1, stream=blocking)
    cai.ops.fill(a, 2, stream=cai.legacy_default_stream())  # waits for blocking streams
    np.testing.assert_array_equal(a.copy_to_host(), np.full(256, 2, np.int32))
    cai.synchronize()
    cai.sim.delay(nb, 0.2)
    unordered = cai.from_cuda_array_interface(a.__cuda_array_interface__, sync=False)
    cai.ops.fill(unordered, 3, stream=nb)
    with pytest.raises(cai.RaceError):
        cai.ops.fill(a, 4, stream=cai.legacy_default_stream())


def test_streams_are_destroyed_with_their_last_user():
    s = cai.stream()
    h = s.handle
    del s
    gc.collect()
    with pytest.raises(cai.DeviceError):
        cai.external_stream(h).synchronize()


def test_sim_controls():
    assert cai.sim.race_detection()
    cai.sim.set_race_detection(False)
    assert not cai.sim.race_detection()
    cai.sim.set_race_detection(True)
    with pytest.raises(ValueError):
        cai.sim.delay(cai.stream(), -1.0)


def _run_module(*args):
    env = dict(os.environ, CAI_BACKEND="sim")
    return subprocess.run([sys.executable, "-m", "cai", *args], env=env, capture_output=True,
                          text=True, timeout=120)


def test_python_m_cai_demo():
    r = _run_module("demo")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "simulator" in r.stdout.lower()
    assert "wait" in r.stdout.lower()  # it prints which stream waits were enqueued
    assert "Traceback" not in r.stderr


def test_python_m_cai_usage():
    r = _run_module("no-such-command")
    assert r.returncode != 0
    assert "demo" in r.stderr + r.stdout

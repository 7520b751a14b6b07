"""Reliability round 4 (docs/reliability.md, "Round 4"): host memory, the allocator hook, other
threads' and devices' streams, the exchange API. Each test failed before its fix; ordering is
proved with the simulator's race detector, holds and delays, never with sleeps."""

import threading

import numpy as np
import pytest

import cai

N = 1 << 12


def in_thread(fn):
    """Runs fn() in a new thread that stays alive (its per-thread default stream with it) until
    the returned `done()` is called; returns (fn's result, done)."""
    result, ready, finish = [], threading.Event(), threading.Event()

    def body():
        try:
            result.append(fn())
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller
            result.append(e)
        ready.set()
        finish.wait()

    t = threading.Thread(target=body)
    t.start()
    ready.wait()

    def done():
        finish.set()
        t.join()

    value = result.pop()             # the thread keeps no reference to it
    if isinstance(value, BaseException):
        done()
        raise value
    return value, done


# ----- 3. NumPy integers as streams mean what ints mean -------------------------------------

@pytest.mark.parametrize("zero", [0, np.int64(0), np.array(0), np.uint8(0)],
                         ids=["int", "int64", "0-d", "uint8"])
def test_numpy_zero_as_stream_waits_for_the_copy(zero):
    s = cai.stream()
    a = cai.device_array(N, dtype=np.float32, stream=s)
    cai.sim.delay(s, 0.05)
    cai.ops.fill(a, 5.0)
    out = cai.pinned_array(N, dtype=np.float32)
    a.copy_to_host(out, stream=zero)
    assert s.query()                 # returned after the copy ran
    np.testing.assert_array_equal(out, np.full(N, 5.0, np.float32))
    d = cai.device_array(N, dtype=np.float32, stream=s)
    cai.sim.delay(s, 0.05)
    d.copy_to_device(out, stream=zero)
    assert s.query()
    np.testing.assert_array_equal(d.copy_to_host(), out)



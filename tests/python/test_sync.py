"""Issue 4, CAI v3 synchronization proven with the simulator's race detector.

The simulator's streams are real worker threads; `cai.sim.delay(s, t)` makes stream s slow and
its race detector raises cai.RaceError at the enqueue that completes a race between two
unordered conflicting accesses from different streams. It is exact (it follows the ordering
that streams, events and synchronizes create, not the clock), so these tests prove ordering
without sleeping and without timing assertions: the delays only make a wrong ordering produce
wrong data as well.

Streams A (producer) and B (consumer) are non-blocking, so only events order them.

The producer's stream reaches cai as a bare handle in a foreign dict, so cai does not trust it
to outlive the import: an event is recorded on it at import and stands for it (an import on
stream None, 1 or 2 costs nothing); after work on another stream, the legacy default stream
waits for that work, which orders the producer's later work when its stream is blocking.
"""

import subprocess
import sys
import threading

import numpy as np
import pytest

import cai
from helpers import Producer, pending_fill

N = 4096
SLOW = 1.0  # seconds of simulated work, where the host's checks do not depend on it
_GATES = {}


def still_busy(stream):
    """Asserts that `stream`, held by slow_producer(..., None), is still busy (the host did
    not wait for it), then lets it go from another thread, while the host may wait."""
    assert not stream.query()
    threading.Thread(target=_GATES.pop(stream.handle).release).start()


def slow_producer(A, B, delay):
    """x on stream A, being written (3.0) on A after `delay`, exported with stream A; y (1.0)
    and out on stream B. Everything before the delay is complete. delay None: A is held
    (cai.sim.hold) until still_busy(A)."""
    x = cai.device_array(N, dtype=np.float32, stream=A)
    cai.ops.fill(x, -1.0)
    y = cai.device_array(N, dtype=np.float32, stream=B)
    cai.ops.fill(y, 1.0)
    out = cai.device_array(N, dtype=np.float32, stream=B)
    cai.ops.fill(out, 0.0)
    cai.synchronize()
    if delay is None:
        _GATES[A.handle] = cai.sim.hold(A)
    else:
        cai.sim.delay(A, delay)
    cai.ops.fill(x, 3.0)  # on x's stream, A
    assert x.__cuda_array_interface__["stream"] == A.handle
    return A, B, x, y, out


@pytest.fixture
def setup(streams):
    """A slow producer."""
    return slow_producer(*streams, SLOW / 2)


@pytest.fixture
def held(streams):
    """A producer held until still_busy(A): for the tests that check the host did not wait."""
    yield slow_producer(*streams, None)
    gate = _GATES.pop(streams[0].handle, None)
    if gate is not None:
        gate.release()


@pytest.fixture
def racy(streams):
    """The same pattern for tests that expect a RaceError: the race detector does not
    depend on the clock, so the delay only has to exist."""
    return slow_producer(*streams, 0.05)


def test_race_detector_is_on(streams):
    # Two unordered writes from different streams: the second enqueue raises.
    A, B = streams
    a, unordered = pending_fill(A, N, np.float32, 1.0, delay=0.2)
    with pytest.raises(cai.RaceError, match="race"):
        cai.ops.fill(unordered, 2.0, stream=B)
    assert cai.sim.race_detection()


def test_slow_producer_consumer_on_another_stream(held):
    A, B, x, y, out = held
    p = Producer(x)
    imported = cai.as_cuda_array(p)
    # No default stream: A stays the producer's, stood for by the event recorded at import.
    assert imported.stream is None
    cai.ops.add(imported, y, out, stream=B)  # no RaceError: B waits for the import's event
    # The host did not block: the producer is still delayed after the import and enqueue.
    still_busy(A)
    np.testing.assert_array_equal(out.copy_to_host(), np.full(N, 4.0, np.float32))


def test_slow_producer_from_cuda_array_interface(held):
    A, B, x, y, out = held
    imported = cai.from_cuda_array_interface(x.__cuda_array_interface__, owner=x)
    cai.ops.add(imported, y, out, stream=B)
    still_busy(A)
    np.testing.assert_array_equal(out.copy_to_host(), np.full(N, 4.0, np.float32))


def test_slow_producer_consumer_default_stream_is_outs(held):
    # stream=0: the op runs on the stream of the array it writes (B here).
    A, B, x, y, out = held
    cai.ops.add(cai.as_cuda_array(Producer(x)), y, out)
    still_busy(A)
    np.testing.assert_array_equal(out.copy_to_host(), np.full(N, 4.0, np.float32))


def test_slow_producer_consumer_on_the_producers_stream(held):
    # Work on the producer's own stream needs no event: stream order is enough.
    A, B, x, y, out = held
    imported = cai.as_cuda_array(Producer(x))
    cai.ops.copy(imported[: N // 2], imported[N // 2:], stream=A)
    still_busy(A)
    np.testing.assert_array_equal(imported.copy_to_host(), np.full(N, 3.0, np.float32))


@pytest.mark.parametrize("how", ["copy", "copy_to_host", "setitem from", "copy_to_device from"])
def test_other_consumers_honour_the_stream(setup, how):
    A, B, x, y, out = setup
    imported = cai.as_cuda_array(Producer(x))
    if how == "copy":
        cai.ops.copy(out, imported, stream=B)
        result = out.copy_to_host()
    elif how == "copy_to_host":
        result = imported.copy_to_host()
    elif how == "setitem from":
        out[...] = imported  # on out's stream B
        result = out.copy_to_host()
    else:
        out.copy_to_device(imported)
        result = out.copy_to_host()
    np.testing.assert_array_equal(result, np.full(N, 3.0, np.float32))


def test_sync_false_races(racy):
    A, B, x, y, out = racy
    imported = cai.as_cuda_array(Producer(x), sync=False)
    assert imported.stream is None
    with pytest.raises(cai.RaceError):
        cai.ops.add(imported, y, out, stream=B)


def test_sync_false_from_cuda_array_interface_races(racy):
    A, B, x, y, out = racy
    imported = cai.from_cuda_array_interface(x.__cuda_array_interface__, owner=x, sync=False)
    with pytest.raises(cai.RaceError):
        cai.ops.add(imported, y, out, stream=B)


def test_config_off_races(racy):
    A, B, x, y, out = racy
    cai.config.CUDA_ARRAY_INTERFACE_SYNC = False
    assert cai.config.CUDA_ARRAY_INTERFACE_SYNC is False
    imported = cai.as_cuda_array(Producer(x))  # sync=True, but the switch is off
    assert imported.stream is None
    with pytest.raises(cai.RaceError):
        cai.ops.add(imported, y, out, stream=B)


def test_config_switch_is_read_at_import_time(setup):
    A, B, x, y, out = setup
    imported = cai.as_cuda_array(Producer(x))
    cai.config.CUDA_ARRAY_INTERFACE_SYNC = False
    cai.ops.add(imported, y, out, stream=B)  # imported while on: still ordered
    np.testing.assert_array_equal(out.copy_to_host(), np.full(N, 4.0, np.float32))


def test_config_override_switches_for_a_block_and_restores(racy):
    A, B, x, y, out = racy
    cai.config.EXPORT_STREAM = False
    with cai.config.override(CUDA_ARRAY_INTERFACE_SYNC=False, EXPORT_STREAM=True):
        assert cai.config.EXPORT_STREAM is True
        imported = cai.as_cuda_array(Producer(x))
        assert imported.stream is None  # the switch was off for this import
        with pytest.raises(cai.RaceError):
            cai.ops.add(imported, y, out, stream=B)
    assert cai.config.CUDA_ARRAY_INTERFACE_SYNC is True
    assert cai.config.EXPORT_STREAM is False  # the value before the block, not the default
    cai.config.reset()
    assert cai.config.EXPORT_STREAM is True


def test_config_override_refuses_unknown_switches_and_non_bools():
    with pytest.raises(TypeError, match="no switch 'EXPORT_STREAMS'"):
        with cai.config.override(EXPORT_STREAMS=False):
            pass
    with pytest.raises(TypeError, match="expected True or False"):
        with cai.config.override(EXPORT_STREAM="0"):
            pass
    assert cai.config.EXPORT_STREAM is True  # nothing was set


@pytest.mark.parametrize("value,expected", [("0", False), ("1", True), ("", True), (None, True)])
def test_config_default_comes_from_the_environment(value, expected):
    import os
    env = {k: v for k, v in os.environ.items() if k != "CAI_CUDA_ARRAY_INTERFACE_SYNC"}
    if value is not None:
        env["CAI_CUDA_ARRAY_INTERFACE_SYNC"] = value
    env["CAI_BACKEND"] = "sim"
    r = subprocess.run([sys.executable, "-c",
                        "import cai; print(cai.config.CUDA_ARRAY_INTERFACE_SYNC)"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(expected)


# ------------------------------------------------------------------- what an import costs

COST_KEYS = ("event_record", "stream_wait_event", "pointer_query", "stream_synchronize")


def costs():
    c = cai.device_call_counts()
    cai.reset_device_call_counts()
    return {k: c[k] for k in COST_KEYS}


NOTHING = dict.fromkeys(COST_KEYS, 0)


IMPORTS = ["as_cuda_array", "from_cuda_array_interface", "Array", "ops argument"]


def imported(p, how):
    if how == "as_cuda_array":
        return cai.as_cuda_array(p)
    if how == "from_cuda_array_interface":
        return cai.from_cuda_array_interface(p.__cuda_array_interface__, owner=p)
    if how == "Array":
        return cai.Array(p)
    return p  # imported inside the operation


@pytest.mark.parametrize("how", IMPORTS)
@pytest.mark.parametrize("stream", [None, 1, 2])
def test_an_import_of_a_default_stream_costs_nothing(how, stream):
    """The default streams and None are named as they are: no driver call at import, and
    none for work on that very stream."""
    x = cai.device_array(N, dtype=np.float32)
    cai.ops.fill(x, 1.0)
    x.synchronize()
    p = Producer(x, stream=stream)
    costs()
    y = imported(p, how)
    if how != "ops argument":
        assert costs() == NOTHING
    cai.ops.fill(y, 2.0, stream=stream or 1)
    assert costs() == NOTHING
    np.testing.assert_array_equal(x.copy_to_host(), np.full(N, 2.0, np.float32))


@pytest.mark.parametrize("how", IMPORTS)
def test_an_import_of_a_foreign_stream_records_one_event_and_work_on_it_waits_for_nothing(
        streams, how):
    """CAI v3 with a producer's own stream: the import records one event on it (the producer
    may drop the stream afterwards) and waits for nothing; work on the producer's own stream
    needs no wait at all (the elision the CAI text names)."""
    A, B = streams
    x = cai.device_array(N, dtype=np.float32, stream=A)
    with cai.sim.hold(A):  # the fill stays queued
        cai.ops.fill(x, 1.0)
        p = Producer(x)
        costs()
        y = imported(p, how)
        if how != "ops argument":
            assert costs() == dict(NOTHING, event_record=1)
        cai.ops.fill(y, 2.0, stream=A)
        assert costs() == dict(NOTHING, event_record=0 if how != "ops argument" else 1)
    np.testing.assert_array_equal(x.copy_to_host(stream=A), np.full(N, 2.0, np.float32))


@pytest.mark.parametrize("how", IMPORTS)
def test_an_import_of_an_idle_foreign_stream_costs_one_query(streams, how):
    """Nothing queued on the producer's stream: one query says its work is complete, so there
    is nothing to order (no event) and the import exports no stream. Later work on another
    stream still orders the producer's later work after it (the reverse wait)."""
    A, B = streams
    x = cai.device_array(N, dtype=np.float32, stream=A)
    cai.ops.fill(x, 1.0)
    A.synchronize()
    p = Producer(x, stream=A.handle)
    cai.sim.reset_driver_calls()
    y = imported(p, how)
    if how != "ops argument":
        assert cai.sim.driver_calls() == {"cuStreamQuery": 1}
        if how != "Array":
            assert y.__cuda_array_interface__["stream"] is None
    costs()
    cai.ops.fill(y, 2.0, stream=A)  # on the producer's own stream: no wait either way
    assert costs() == NOTHING
    np.testing.assert_array_equal(x.copy_to_host(stream=A), np.full(N, 2.0, np.float32))


def test_an_idle_foreign_stream_still_gets_the_reverse_wait(streams):
    """The producer's stream was idle at import (no event), and the consumer's work is slow:
    the producer's later work on its blocking stream may not overtake it."""
    A, B = cai.stream(), streams[1]
    x, y, out = slow_consumer(A, B)
    cai.reset_device_call_counts()
    imported = cai.as_cuda_array(Producer(x, stream=A.handle))
    assert cai.device_call_counts()["event_record"] == 0  # A was idle
    cai.ops.add(imported, y, out, stream=B)  # reads x on B, behind the delay
    cai.ops.fill(x, 100.0, stream=A)  # the producer writes x on A: no RaceError, ordered
    np.testing.assert_array_equal(out.copy_to_host(), np.full(N, 3.0, np.float32))
    np.testing.assert_array_equal(x.copy_to_host(), np.full(N, 100.0, np.float32))


def test_work_on_another_stream_costs_one_wait_per_import_and_one_after(streams):
    A, B = streams
    x = cai.device_array(N, dtype=np.float32, stream=A)
    cai.ops.fill(x, 1.0)
    out = cai.device_array(N, dtype=np.float32, stream=B)
    with cai.sim.hold(A):  # the fill stays queued: each import records an event
        a, b = cai.as_cuda_array(Producer(x)), cai.as_cuda_array(Producer(x))
        costs()
        # Before: B waits for each import's event; after: the legacy stream waits for B (one
        # event record, one wait), never the producer's stream.
        cai.ops.add(a, b, out, stream=B)
        assert costs() == dict(NOTHING, event_record=1, stream_wait_event=3)
    np.testing.assert_array_equal(out.copy_to_host(), np.full(N, 2.0, np.float32))


def test_work_on_cai_arrays_costs_one_wait_before_and_one_after(streams):
    # cai's own arrays name streams cai keeps alive: one record and one wait each way.
    A, B = streams
    x = cai.device_array(N, dtype=np.float32, stream=A)
    cai.ops.fill(x, 1.0)
    out = cai.device_array(N, dtype=np.float32, stream=B)
    costs()
    cai.ops.add(x, x, out, stream=B)
    assert costs() == dict(NOTHING, event_record=2, stream_wait_event=2)
    np.testing.assert_array_equal(out.copy_to_host(), np.full(N, 2.0, np.float32))


def test_a_dropped_producer_stream_is_never_used_again(streams):
    """A producer (CuPy does this) exports its current stream, which its array does not keep
    alive. cai recorded an event at import; the stream may go before the first use."""
    import gc
    A, B = streams
    gone = cai.stream(non_blocking=True)
    mem = cai.device_array(N, dtype=np.float32, stream=A)
    mem.synchronize()
    cai.sim.delay(gone, 0.2)
    cai.ops.fill(mem, 4.0, stream=gone)  # the producer's work, on the stream it then drops
    y = cai.as_cuda_array(Producer(mem, stream=gone.handle))
    handle = gone.handle
    del gone
    gc.collect()
    with pytest.raises(cai.DeviceError, match="not a stream"):
        cai.external_stream(handle).synchronize()  # it is really gone
    C = cai.stream(non_blocking=True)
    out = cai.device_array(N, dtype=np.float32, stream=C)
    cai.ops.copy(out, y, stream=C)  # waits for the import's event: ordered, no RaceError
    assert y.stream == C  # adopted the work stream
    np.testing.assert_array_equal(out.copy_to_host(), np.full(N, 4.0, np.float32))


def slow_consumer(A, B):
    """x (2.0) on the producer's stream A; y (1.0) and out on B, which is then slow."""
    x = cai.device_array(N, dtype=np.float32, stream=A)
    cai.ops.fill(x, 2.0)
    y = cai.device_array(N, dtype=np.float32, stream=B)
    cai.ops.fill(y, 1.0)
    out = cai.device_array(N, dtype=np.float32, stream=B)
    cai.synchronize()
    cai.sim.delay(B, 0.3)
    return x, y, out


def test_later_producer_work_cannot_overtake_the_consumer(streams):
    # A blocking producer stream (CuPy's and Numba's default): its later work waits for the
    # legacy stream, which waited for the consumer's work.
    A, B = cai.stream(), streams[1]
    x, y, out = slow_consumer(A, B)
    imported = cai.as_cuda_array(Producer(x))
    cai.ops.add(imported, y, out, stream=B)  # reads x on B
    cai.ops.fill(x, 100.0, stream=A)  # the producer writes x on A: no RaceError, ordered
    np.testing.assert_array_equal(out.copy_to_host(), np.full(N, 3.0, np.float32))
    np.testing.assert_array_equal(x.copy_to_host(), np.full(N, 100.0, np.float32))


def test_a_non_blocking_foreign_producer_stream_is_not_made_to_wait(streams):
    # The documented limit: cai never touches a foreign stream after the import, and a
    # non-blocking one does not wait for the legacy stream. The producer's later write on it
    # races with the consumer's read; synchronizing the consumer's work orders it.
    A, B = streams
    x, y, out = slow_consumer(A, B)
    imported = cai.as_cuda_array(Producer(x))
    cai.ops.add(imported, y, out, stream=B)
    with pytest.raises(cai.RaceError):
        cai.ops.fill(x, 100.0, stream=A)
    out.synchronize()
    cai.ops.fill(x, 100.0, stream=A)
    np.testing.assert_array_equal(out.copy_to_host(), np.full(N, 3.0, np.float32))


def test_later_producer_work_overtakes_without_sync(streams):
    A, B = streams
    x, y, out = slow_consumer(A, B)
    imported = cai.as_cuda_array(Producer(x), sync=False)
    cai.ops.add(imported, y, out, stream=B)  # nothing orders A and B
    with pytest.raises(cai.RaceError):
        cai.ops.fill(x, 100.0, stream=A)


def test_producer_with_work_on_several_streams_exports_one_stream(streams):
    """Producer rule: x's default stream is A, but a write is pending on C; the export names
    A only, and A was made to wait for C, so a consumer that waits for A alone is safe."""
    A, B = streams
    C = cai.stream(non_blocking=True)
    x = cai.device_array(N, dtype=np.float32, stream=A)
    y = cai.device_array(N, dtype=np.float32, stream=B)
    cai.ops.fill(y, 1.0)
    out = cai.device_array(N, dtype=np.float32, stream=B)
    cai.synchronize()
    with cai.sim.hold(C):
        cai.ops.fill(x, 5.0, stream=C)
        assert x.__cuda_array_interface__["stream"] == A.handle
        imported = cai.as_cuda_array(Producer(x))
        cai.ops.add(imported, y, out, stream=B)
        assert not C.query()
    np.testing.assert_array_equal(out.copy_to_host(), np.full(N, 6.0, np.float32))


def test_producer_with_work_on_several_streams_races_without_sync(streams):
    A, B = streams
    C = cai.stream(non_blocking=True)
    x = cai.device_array(N, dtype=np.float32, stream=A)
    y = cai.device_array(N, dtype=np.float32, stream=B)
    out = cai.device_array(N, dtype=np.float32, stream=B)
    cai.synchronize()
    cai.sim.delay(C, 0.2)
    cai.ops.fill(x, 5.0, stream=C)
    imported = cai.as_cuda_array(Producer(x), sync=False)
    with pytest.raises(cai.RaceError):
        cai.ops.add(imported, y, out, stream=B)


def test_consumer_writes_are_ordered_before_producer_reads(streams):
    # The consumer writes the producer's memory on B; the producer later reads it on A (a
    # blocking stream, ordered through the legacy stream).
    A, B = cai.stream(), streams[1]
    x = cai.device_array(N, dtype=np.float32, stream=A)
    cai.ops.fill(x, 0.0)
    z = cai.device_array(N, dtype=np.float32, stream=A)
    cai.synchronize()
    imported = cai.as_cuda_array(Producer(x))
    cai.sim.delay(B, 0.3)
    cai.ops.fill(imported, 7.0, stream=B)
    cai.ops.copy(z, x, stream=A)  # reads x on A after B's write: ordered
    np.testing.assert_array_equal(z.copy_to_host(), np.full(N, 7.0, np.float32))


def test_two_imports_of_one_producer_stream(setup):
    A, B, x, y, out = setup
    first = cai.as_cuda_array(Producer(x[: N // 2]))
    second = cai.as_cuda_array(Producer(x[N // 2:]))
    cai.ops.add(first, second, out[: N // 2], stream=B)
    np.testing.assert_array_equal(out[: N // 2].copy_to_host(), np.full(N // 2, 6.0, np.float32))


def test_event_api_orders_streams_like_the_v3_example(streams):
    # The CAI v3 document's second example: a kernel on a stream that is not the array's
    # default stream, made safe with an event, by hand.
    A, B = streams
    out = cai.device_array(N, dtype=np.float32, stream=B)
    x = cai.device_array(N, dtype=np.float32, stream=A)
    cai.synchronize()
    with cai.sim.hold(A):
        cai.ops.fill(x, 9.0, stream=A)
        imported = cai.from_cuda_array_interface(x.__cuda_array_interface__, sync=False)
        ev = cai.event()
        ev.record(A)
        ev.wait(B)
        assert not A.query()
        cai.ops.copy(out, imported, stream=B)
    np.testing.assert_array_equal(out.copy_to_host(), np.full(N, 9.0, np.float32))


# --------------------------------------------------------------------------- the waits enqueued

@pytest.fixture
def trace():
    """The stream waits cai enqueues, as lines 'X waits for an event recorded on Y'."""
    from cai import _cai
    _cai._take_trace()
    _cai._set_trace(True)
    try:
        yield _cai._take_trace
    finally:
        _cai._set_trace(False)
        _cai._take_trace()


def name(stream):
    return f"stream {stream.handle:#x}"


def test_waits_before_and_after_the_consumer(setup, trace):
    A, B, x, y, out = setup
    trace()
    imported = cai.as_cuda_array(Producer(x))
    assert trace() == []  # importing enqueues no wait (it records the import's event)
    cai.ops.add(imported, y, out, stream=B)
    lines = trace()
    assert f"{name(B)} waits for an event recorded by its producer" in lines  # before
    assert (f"legacy default stream (1) waits for an event recorded on {name(B)}"
            in lines)  # after
    assert len(lines) == 2  # y and out are already on B


def test_no_wait_on_the_same_stream(setup, trace):
    A, B, x, y, out = setup
    imported = cai.as_cuda_array(Producer(x))
    trace()
    cai.ops.copy(imported[: N // 2], imported[N // 2:], stream=A)  # the producer's own stream
    cai.ops.fill(imported, 1.0, stream=A)
    assert trace() == []


def test_no_wait_without_sync(racy, trace):
    A, B, x, y, out = racy
    imported = cai.as_cuda_array(Producer(x), sync=False)
    trace()
    with pytest.raises(cai.RaceError):
        cai.ops.add(imported, y, out, stream=B)
    assert not any(name(A) in line for line in trace())


def test_one_wait_per_import_and_one_reverse_wait(setup, trace):
    A, B, x, y, out = setup
    first = cai.as_cuda_array(Producer(x[: N // 2]))
    second = cai.as_cuda_array(Producer(x[N // 2:]))
    trace()
    cai.ops.add(first, second, out[: N // 2], stream=B)
    lines = trace()
    assert lines.count(f"{name(B)} waits for an event recorded by its producer") == 2
    assert lines.count(f"legacy default stream (1) waits for an event recorded on {name(B)}") == 1


def test_one_wait_per_stream_of_cai_arrays(setup, trace):
    # cai's own arrays on one stream: one wait before and one after, however many.
    A, B, x, y, out = setup
    trace()
    cai.ops.add(x[: N // 2], x[N // 2:], out[: N // 2], stream=B)
    lines = trace()
    assert lines.count(f"{name(B)} waits for an event recorded on {name(A)}") == 1
    assert lines.count(f"{name(A)} waits for an event recorded on {name(B)}") == 1

"""Stream ordering on real hardware: the proof that cai orders its work after a busy producer
without blocking the host, and that later producer work cannot overtake it.

The producer's stream is kept busy by a spin kernel (gpu_helpers.Spinner, SPIN_SECONDS) before
it writes VALUE over zeros. Every scenario asserts, without timing anything on the device:
- the consumer saw VALUE (so it waited for the producer's write);
- the producer's stream was still busy when cai returned (so the host did not wait for it), and
  the host was back well within the spin (HOST_RETURN_LIMIT, a wide margin);
and each has a NEGATIVE CONTROL: the same consumer with the wait switched off reads the stale
zeros, which shows that the scenario detects a missing wait.

A foreign producer's stream is stood for by an event recorded at import (src/sync/ordering.cpp);
after the consumer's work on another stream, the legacy default stream waits for that work,
which orders the producer's later work only when its stream is blocking (the CuPy default).
"""

import time

import numpy as np
import pytest

import cai
from gpu_helpers import HOST_RETURN_LIMIT, SPIN_SECONDS, OnlyCAI, OnlyDLPack, peer, \
    strided_memory_view, strided_memory_view_class

pytestmark = pytest.mark.usefixtures("warm", "no_gc")

N = 1 << 20
VALUE = 7.0
LATER = 9.0


class HostClock:
    """Host time of a block (the no_gc fixture keeps collections out of it)."""

    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start
        return False


@pytest.fixture
def cp():
    return peer("cupy").cp


@pytest.fixture
def consumer_out():
    """A cai array on a non-blocking consumer stream, filled with -1 and ready."""
    cs = cai.stream(non_blocking=True)
    out = cai.device_array(N, dtype=np.float32, stream=cs)
    cai.ops.fill(out, -1.0)
    cs.synchronize()
    return cs, out


def busy_cupy_producer(cp, spinner):
    """x: zeros, ready; then on a non-blocking CuPy stream ps: spin, x[...] = VALUE."""
    x = cp.zeros(N, dtype=cp.float32)
    cp.cuda.Device().synchronize()
    ps = cp.cuda.Stream(non_blocking=True)
    spinner.spin(ps, SPIN_SECONDS)
    with ps:
        x.fill(VALUE)
    return x, ps


def busy_cai_producer(spinner):
    """a: zeros, ready; then on a non-blocking cai stream ps: spin, fill(a, VALUE)."""
    ps = cai.stream(non_blocking=True)
    a = cai.device_array(N, dtype=np.float32, stream=ps)
    cai.ops.fill(a, 0.0)
    ps.synchronize()
    spinner.spin(ps, SPIN_SECONDS)
    cai.ops.fill(a, VALUE)
    return a, ps


def assert_waited_without_blocking(result, producer_busy, clock):
    assert producer_busy, "the producer had finished when cai returned: the host waited for it"
    assert clock.seconds < HOST_RETURN_LIMIT, (
        f"the host spent {clock.seconds * 1e3:.1f} ms in the import, the producer spins "
        f"{SPIN_SECONDS * 1e3:.0f} ms")
    np.testing.assert_array_equal(result, np.full(N, VALUE, np.float32))


def assert_stale(result):
    np.testing.assert_array_equal(result, np.zeros(N, np.float32),
                                  err_msg="the negative control did not read stale data: the "
                                          "scenario cannot tell a missing wait")


# ----- cai consumes a busy CuPy producer ----------------------------------------------------------

IMPORTS = {
    # CAI v3: CuPy exports its current stream, so the import happens while ps is current.
    "as_cuda_array": lambda x, out, cs: cai.ops.copy(out, cai.as_cuda_array(x), stream=cs),
    "ops_on_foreign_object": lambda x, out, cs: cai.ops.copy(out, x, stream=cs),
    "cai_Array": lambda x, out, cs: cai.ops.copy(out, cai.Array(OnlyCAI(x)), stream=cs),
    # DLPack: cai hands its stream to CuPy's __dlpack__, which orders it after ps.
    "from_dlpack": lambda x, out, cs: cai.ops.copy(out, cai.from_dlpack(x), stream=cs),
}


@pytest.mark.parametrize("how", IMPORTS)
def test_import_waits_for_a_busy_producer_without_blocking(cp, spinner, consumer_out, how):
    cs, out = consumer_out
    x, ps = busy_cupy_producer(cp, spinner)
    with ps, HostClock() as clock:
        IMPORTS[how](x, out, cs)
    producer_busy = not ps.done
    result = out.copy_to_host()
    assert_waited_without_blocking(result, producer_busy, clock)


def _config_off(x, ps, out, cs):
    cai.config.CUDA_ARRAY_INTERFACE_SYNC = False
    cai.ops.copy(out, x, stream=cs)


NO_WAIT = {
    "as_cuda_array(sync=False)":
        lambda x, ps, out, cs: cai.ops.copy(out, cai.as_cuda_array(x, sync=False), stream=cs),
    "CUDA_ARRAY_INTERFACE_SYNC=False": _config_off,
    # A producer that ignores the stream cai hands it (it "orders" its own stream after itself).
    "DLPack producer ignoring the consumer's stream":
        lambda x, ps, out, cs: cai.ops.copy(
            out, cai.from_dlpack(OnlyDLPack(x, stream=ps.ptr)), stream=cs),
}


@pytest.mark.parametrize("how", NO_WAIT)
def test_negative_control_import_without_the_wait_reads_stale_data(cp, spinner, consumer_out,
                                                                   how):
    cs, out = consumer_out
    x, ps = busy_cupy_producer(cp, spinner)
    with ps:
        NO_WAIT[how](x, ps, out, cs)
    result = out.copy_to_host()
    ps.synchronize()
    assert_stale(result)


LATER_CASES = {
    # A blocking producer stream (CuPy's and Numba's default kind): cai's reverse wait is on
    # the legacy stream, which the producer's later work waits for by itself.
    "waits": (False, True),
    # The negative control: no ordering at all, so the later write overtakes the read.
    "negative_control": (False, False),
    # The documented limit (docs/architecture.md, "Foreign streams"): cai never touches a
    # foreign stream after the import, and a non-blocking one does not wait for the legacy
    # stream, so the later write overtakes the read unless the consumer's work is synchronized.
    "non_blocking_producer_limit": (True, True),
}


@pytest.mark.parametrize("case", LATER_CASES)
@pytest.mark.parametrize("how", ["as_cuda_array", "ops_on_foreign_object"])
def test_later_producer_work_cannot_overtake_the_consumer(cp, spinner, consumer_out, how, case):
    """The consumer's stream is busy, so its read runs late; the producer then writes LATER on
    its own stream. After the read cai made the legacy stream wait for it, so the later write
    on a blocking producer stream comes after the read, which sees VALUE; without the wait (the
    negative control), and on a non-blocking producer stream (the documented limit), the later
    write overtakes it."""
    non_blocking, sync = LATER_CASES[case]
    cs, out = consumer_out
    x = cp.full(N, VALUE, dtype=cp.float32)
    cp.cuda.Device().synchronize()
    ps = cp.cuda.Stream(non_blocking=non_blocking)
    spinner.spin(cs, SPIN_SECONDS)
    cai.config.CUDA_ARRAY_INTERFACE_SYNC = sync
    with ps:
        if how == "as_cuda_array":
            cai.ops.copy(out, cai.as_cuda_array(x), stream=cs)
        else:
            cai.ops.copy(out, x, stream=cs)
        x.fill(LATER)
    consumer_busy = not cs.query()
    result = out.copy_to_host()
    ps.synchronize()
    assert consumer_busy, "the consumer's stream finished early: the scenario proves nothing"
    if case == "waits":
        np.testing.assert_array_equal(result, np.full(N, VALUE, np.float32))
    else:
        np.testing.assert_array_equal(result, np.full(N, LATER, np.float32),
                                      err_msg="the later write did not overtake the read")
    np.testing.assert_array_equal(cp.asnumpy(x), np.full(N, LATER, np.float32))


# ----- foreign consumers of a busy cai producer ---------------------------------------------------


def read_with_cupy(cp, make):
    """Imports on a non-blocking CuPy stream, copies there, returns the copy's host values."""
    cs = cp.cuda.Stream(non_blocking=True)
    with cs:
        y = make()
        z = y.copy()
        cs.synchronize()
    return cp.asnumpy(z)


def read_with_torch(torch, make):
    ts = torch.cuda.Stream()
    with torch.cuda.stream(ts):
        t = make()
        u = t.clone()
    ts.synchronize()
    return u.cpu().numpy()


@pytest.mark.parametrize("wait", [True, False], ids=["waits", "negative_control"])
@pytest.mark.parametrize("consumer", ["cupy", "torch"])
def test_cai_export_to_a_cai_consumer(spinner, consumer, wait):
    """CAI v3 export: `stream` names the busy stream; these consumers wait for it (by blocking
    the host, their choice). With cai.config.EXPORT_STREAM off (`stream: None`) they cannot."""
    p = peer(consumer)
    a, ps = busy_cai_producer(spinner)
    cai.config.EXPORT_STREAM = wait
    if consumer == "cupy":
        result = read_with_cupy(p.cp, lambda: p.cp.asarray(a))
    else:
        result = read_with_torch(p.torch, lambda: p.torch.as_tensor(a, device="cuda"))
    ps.synchronize()
    if wait:
        np.testing.assert_array_equal(result, np.full(N, VALUE, np.float32))
    else:
        assert_stale(result)


@pytest.mark.parametrize("wait", [True, False], ids=["waits", "negative_control"])
@pytest.mark.parametrize("consumer", ["cupy", "torch"])
def test_dlpack_export_orders_the_consumer_stream_without_blocking(spinner, consumer, wait):
    """DLPack export: cai makes the consumer's stream wait for the busy stream and returns at
    once. The negative control hands cai stream=-1 (no ordering) instead."""
    p = peer(consumer)
    a, ps = busy_cai_producer(spinner)
    producer = a if wait else OnlyDLPack(a, stream=-1)
    state = {}

    def make(import_):
        def timed():
            with HostClock() as clock:
                y = import_(producer)
            state["busy"], state["clock"] = not ps.query(), clock
            return y
        return timed

    if consumer == "cupy":
        result = read_with_cupy(p.cp, make(p.cp.from_dlpack))
    else:
        result = read_with_torch(p.torch, make(p.torch.from_dlpack))
    ps.synchronize()
    if wait:
        assert_waited_without_blocking(result, state["busy"], state["clock"])
    else:
        assert_stale(result)


@pytest.mark.parametrize("wait", [True, False], ids=["waits", "negative_control"])
@pytest.mark.parametrize("protocol", ["cai", "dlpack"])
def test_cuda_core_view_of_a_busy_cai_array(spinner, consumer_out, protocol, wait):
    """cuda.core's StridedMemoryView orders its consumer stream after the producer (an event
    for CAI, cai's own wait for DLPack); stream_ptr=-1 opts out (the negative control). The
    data are then read on the consumer stream through a view that carries no stream."""
    smv = strided_memory_view_class()
    cs, out = consumer_out
    a, ps = busy_cai_producer(spinner)
    stream_ptr = cs.handle if wait else -1
    with HostClock() as clock:
        v = strided_memory_view(smv, a, protocol, stream_ptr)
    producer_busy = not ps.query()
    plain = cai.from_cuda_array_interface(
        {"shape": (N,), "typestr": "<f4", "data": (v.ptr, False), "version": 3}, owner=v)
    cai.ops.copy(out, plain, stream=cs)
    result = out.copy_to_host()
    ps.synchronize()
    if wait:
        assert_waited_without_blocking(result, producer_busy, clock)
    else:
        assert_stale(result)

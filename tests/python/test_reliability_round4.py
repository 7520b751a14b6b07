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


# ----- 1. temporaries cai makes outlive the copies that read them ----------------------------

class LockedTemporary:
    """Host data whose NumPy array is a temporary made for the call (as NumPy's conversion of a
    list, or of another dtype, makes one inside cai) on pages a cai.pinned block locked: the
    only reference to it is the caller's (cai's) once __array__ returns. The pages are locked
    ahead, in __init__: locking may wait for all queued work (docs/python.md)."""

    def __init__(self, values):
        self.values = values
        self.tmp = values.copy()
        lock = cai.pinned(self.tmp)
        lock.__enter__()
        lock._arrays = ()            # the lock must not keep the temporary alive
        self.locks = [lock]

    def __array__(self, dtype=None, copy=None):
        assert dtype is None or dtype == self.values.dtype, dtype
        tmp, self.tmp = self.tmp, None
        return tmp

    def unlock(self):
        while self.locks:
            self.locks.pop().__exit__(None, None, None)


@pytest.mark.parametrize("route", ["to_device", "copy_to_device"])
def test_a_temporary_on_locked_pages_is_copied_before_it_is_freed(route):
    # copy_to_device takes only the array's own dtype (Numba's rule), so the values are float32;
    # __array__ still hands cai a temporary.
    values = np.arange(N, dtype=np.float32 if route == "copy_to_device" else np.float64)
    source = LockedTemporary(values)
    s = cai.stream()
    dst = cai.device_array(N, dtype=np.float32, stream=s)
    try:
        cai.sim.delay(s, 0.3)   # the stream is busy: a queued copy would read the buffer late
        if route == "to_device":
            dst = cai.to_device(source, stream=s)
        else:
            dst.copy_to_device(source, stream=s)
        # The temporary is freed now: the copy must be done (a queued one would read whatever
        # reuses its memory).
        assert s.query()
        junk = np.full(N, -1.0)      # likely where the temporary was
        # Unlocked first: a new host array partly on locked pages cannot be copied yet
        # (docs/reliability.md, round 4, item 4).
        source.unlock()
        s.synchronize()
        np.testing.assert_array_equal(dst.copy_to_host(), values.astype(dst.dtype))
        del junk
    finally:
        source.unlock()


@pytest.mark.parametrize("source", [list(range(N)), np.arange(N, dtype=np.int16)],
                         ids=["list", "other dtype"])
def test_converted_host_data_arrives_whole(source):
    s = cai.stream()
    a = cai.device_array(N, dtype=np.float64, stream=s)
    a[...] = source   # converted (copy_to_device refuses another dtype, as Numba does)
    b = cai.to_device(source, stream=s)
    s.synchronize()
    np.testing.assert_array_equal(a.copy_to_host(), np.arange(N))
    np.testing.assert_array_equal(b.copy_to_host(), np.arange(N))


def test_the_callers_own_locked_array_is_still_copied_without_waiting():
    """The fix copies only cai's temporaries synchronously: a queued copy of the caller's own
    page-locked array still returns at once (the stream held, no deadlock)."""
    host = cai.pinned_array(N, dtype=np.float32)
    host[:] = 3
    s = cai.stream()
    dst = cai.device_array(N, dtype=np.float32, stream=s)
    with cai.sim.hold(s):
        dst.copy_to_device(host, stream=s)
        assert not s.query()
    s.synchronize()
    np.testing.assert_array_equal(dst.copy_to_host(), host)


# ----- 2. the allocator hook is told the stream the memory was used on ----------------------

class Pool:
    """A stream-ordered pool over one array: a block given back on a stream is reused only on
    that stream (as CuPy's and RMM's pools are)."""

    def __init__(self):
        self.arena = cai.device_array(1 << 20, dtype=np.uint8)
        self.top = 0
        self.free = {}
        self.calls = []

    def allocate(self, nbytes, device, stream):
        self.calls.append(("allocate", nbytes, stream))
        blocks = self.free.get(stream, [])
        if blocks:
            return blocks.pop()
        ptr = self.arena.ptr + self.top
        self.top += (nbytes + 255) // 256 * 256
        return ptr

    def deallocate(self, ptr, nbytes, device, stream):
        self.calls.append(("deallocate", nbytes, stream))
        self.free.setdefault(stream, []).append(ptr)


@pytest.fixture
def pool():
    p = Pool()
    cai.set_allocator(p.allocate, p.deallocate)
    yield p
    cai.set_allocator()


def test_explicit_strides_tell_the_pool_the_stream(pool):
    s, other = cai.stream(), cai.stream()
    a = cai.device_array(256, dtype=np.float32, strides=(8,), stream=s)
    assert pool.calls == [("allocate", 255 * 8 + 4, s.handle)]
    assert a.__cuda_array_interface__["stream"] == s.handle   # ready in order on s only
    with cai.sim.hold(other):
        cai.ops.fill(a, 1.0, stream=other)
        del a                        # given back on s, after the fill on `other`
        assert pool.calls[-1] == ("deallocate", 255 * 8 + 4, s.handle)
        b = cai.device_array(256 * 2, dtype=np.float32, stream=s)   # the same block, on s
        cai.ops.fill(b, 2.0, stream=s)   # RaceError if s were not ordered after the fill
    np.testing.assert_array_equal(b.copy_to_host(), np.full(512, 2.0, np.float32))


def test_another_threads_default_stream_is_given_back_ordered(pool):
    def make():
        a = cai.device_array(N, dtype=np.float32, stream=2)   # its thread's stream 2
        cai.sim.delay(2, 0.05)
        cai.ops.fill(a, 1.0)
        return a

    a, done = in_thread(make)
    try:
        del a                                 # dropped here: 2 is this thread's stream
        assert pool.calls[-1] == ("deallocate", N * 4, 1)   # the legacy stream, ordered after
        b = cai.device_array(N, dtype=np.float32, stream=1)  # the same block
        cai.ops.fill(b, 2.0)                  # RaceError if not ordered after the thread's fill
        np.testing.assert_array_equal(b.copy_to_host(), np.full(N, 2.0, np.float32))
    finally:
        done()


# ----- 3. NumPy integers as streams mean what ints mean -------------------------------------

@pytest.mark.parametrize("zero", [0, np.int64(0), np.array(0), np.uint8(0)],
                         ids=["int", "int64", "0-d", "uint8"])
def test_numpy_zero_as_stream_waits_for_the_copy(zero):
    s = cai.stream()
    a = cai.device_array(N, dtype=np.float32, stream=s)
    out = cai.pinned_array(N, dtype=np.float32)  # first: it may wait for the device
    cai.sim.delay(s, 0.05)
    cai.ops.fill(a, 5.0)
    a.copy_to_host(out, stream=zero)
    assert s.query()                 # returned after the copy ran
    np.testing.assert_array_equal(out, np.full(N, 5.0, np.float32))
    d = cai.device_array(N, dtype=np.float32, stream=s)
    cai.sim.delay(s, 0.05)
    d.copy_to_device(out, stream=zero)
    assert s.query()
    np.testing.assert_array_equal(d.copy_to_host(), out)


# ----- 6. the ordering after enqueued work survives a failing driver call --------------------

@pytest.mark.parametrize("entry", ["cuEventRecord", "cuStreamWaitEvent"])
def test_a_failed_ordering_still_orders_the_array_after_the_work(entry):
    s1, s2 = cai.stream(), cai.stream()
    a = cai.device_array(N, dtype=np.float32, stream=s1)
    cai.sim.delay(s2, 0.05)
    # The fill's first record and wait order it after a's work on s1 (add); the second ones,
    # after the kernel, order s1 after it (finish): those fail.
    cai.sim.inject_error(entry, 999, skip=1)
    with pytest.raises(cai.DeviceError, match=entry):
        cai.ops.fill(a, 1.0, stream=s2)   # the fill is enqueued; ordering s1 after it fails
    cai.ops.fill(a, 2.0, stream=s1)       # RaceError if a did not know of the fill on s2
    np.testing.assert_array_equal(a.copy_to_host(), np.full(N, 2.0, np.float32))


# ----- 8. another thread's per-thread default stream -----------------------------------------

def _filled_on_a_threads_stream(value):
    def make():
        a = cai.device_array(N, dtype=np.float32, stream=2)
        cai.sim.delay(2, 0.05)
        cai.ops.fill(a, value)            # on that thread's stream 2
        return a
    return in_thread(make)


@pytest.mark.parametrize("how", ["default", "x.stream"])
def test_another_threads_stream_is_ordered_not_taken_for_ours(how):
    a, done = _filled_on_a_threads_stream(1.0)
    try:
        assert a.stream.handle == 2
        kw = {} if how == "default" else {"stream": a.stream}
        np.testing.assert_array_equal(a.copy_to_host(**kw), np.full(N, 1.0, np.float32))
        b, done_b = _filled_on_a_threads_stream(3.0)
        try:
            cai.ops.add(b, b, b, **({} if how == "default" else {"stream": b.stream}))
            np.testing.assert_array_equal(b.copy_to_host(), np.full(N, 6.0, np.float32))
        finally:
            done_b()
    finally:
        done()


# ----- 9. the exchange API's no-sync exports ------------------------------------------------

def test_from_dlpack_copy_waits_for_a_non_blocking_stream():
    s = cai.stream(non_blocking=True)
    a = cai.device_array(N, dtype=np.float32, stream=s)
    cai.ops.fill(a, 0.0, stream=s)
    s.synchronize()
    cai.sim.delay(s, 0.05)
    cai.ops.fill(a, 7.0, stream=s)
    b = cai.from_dlpack(a, copy=True)     # RaceError (or a stale copy) without the ordering
    np.testing.assert_array_equal(b.copy_to_host(), np.full(N, 7.0, np.float32))


# ----- 7. managed memory used on two devices ----------------------------------------------

def test_managed_memory_used_on_two_devices():
    """Handle 1 is each device's own legacy stream: work on managed memory under device 1 is
    ordered before later use under device 0, and new arrays like it go to its device. Two
    simulated devices need a fresh interpreter (CAI_SIM_DEVICES is read once)."""
    from helpers import run_isolated
    r = run_isolated("""
        import ctypes
        import numpy as np
        import cai
        assert cai.device_count() == 2
        N = 1 << 12
        m = cai.managed_array(N, dtype=np.float32)      # allocated on device 0
        cai.ops.fill(m, 0.0)
        cai.synchronize()

        def fill_on_device_1(value):
            with cai.Device(1):
                cai.sim.delay(1, 0.1)                   # device 1's legacy stream
                cai.ops.fill(m, value)                  # runs on device 1's stream 1

        fill_on_device_1(1.0)
        d = cai.device_array(N, dtype=np.float32)
        cai.ops.copy(d, m)                              # RaceError without the ordering
        assert (d.copy_to_host() == 1.0).all()

        fill_on_device_1(2.0)
        try:                                            # the host view does not wait
            cai.sim.host_access(m.ctypes.data, m.nbytes)
            raise SystemExit("no race reported for an early host read")
        except cai.RaceError:
            pass
        m.synchronize()                                 # waits for device 1's work too
        cai.sim.host_access(m.ctypes.data, m.nbytes)
        assert (m == 2.0).all()                         # stale 1.0 without the ordering

        fill_on_device_1(3.0)
        m.synchronize()
        raw = np.frombuffer(ctypes.string_at(m.ptr, m.nbytes), np.float32)
        assert (raw == 3.0).all(), raw[:4]

        fill_on_device_1(4.0)
        c = cai.as_cuda_array(m)                         # exported under device 0
        assert (c.copy_to_host() == 4.0).all()

        with cai.Device(1):
            assert cai.device_array_like(m).device == m.device == cai.Device(0)
            assert cai.as_cuda_array(m).copy().device == cai.Device(0)
        print("ok")
    """, env={"CAI_SIM_DEVICES": "2"})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


# ----- 10. managed and mapped arrays on a cai.multiprocessing queue ---------------------------

def test_managed_and_mapped_arrays_travel_on_a_queue_by_copy():
    import cai.multiprocessing as mp
    import scale_helpers
    from scale_helpers import TIMEOUT
    ctx = mp.get_context("spawn")
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=scale_helpers.queue_values, args=(q_in, q_out), daemon=True)
    p.start()
    try:
        for make in (cai.managed_array, cai.mapped_array):
            a = make(6, dtype=np.float32)
            cai.ops.fill(a, 2.5)
            a.synchronize()
            q_in.put(a)
            got = q_out.get(timeout=TIMEOUT)     # queue.Empty: the array was dropped
            np.testing.assert_array_equal(got, np.full(6, 2.5, np.float32))
    finally:
        q_in.put(None)
        p.join(TIMEOUT)
    assert p.exitcode == 0


# ----- 5. allocator errors ------------------------------------------------------------------

@pytest.mark.parametrize("bad, error, text", [
    (-1, ValueError, r"allocate\(\) \(cai.set_allocator\) returned: -1 is out of range"),
    (2**64, ValueError, r"returned: 18446744073709551616 is out of range"),
    (True, TypeError, r"allocate\(\) returned bool, not an int"),
])
def test_an_allocator_returning_no_pointer_is_a_clear_error(bad, error, text):
    cai.set_allocator(lambda n, d, s: bad, lambda p, n, d, s: None)
    try:
        with pytest.raises(error, match=text):
            cai.device_array(16)
    finally:
        cai.set_allocator()


ALLOCATOR_AT_EXIT = """
    import threading, time
    import numpy as np
    import cai
    arena = cai.device_array(1 << 16, dtype=np.uint8)

    def python_work():
        total = 0
        for i in range(5000):              # where the interpreter ends the thread at exit
            total += i
        return total

    def allocate(nbytes, device, stream):
        python_work()
        return arena.ptr

    def deallocate(ptr, nbytes, device, stream):
        python_work()

    cai.set_allocator(allocate, deallocate)

    def work():
        while True:
            a = cai.device_array(64, dtype=np.uint8)
            del a

    for _ in range(4):
        threading.Thread(target=work, daemon=True).start()
    time.sleep(0.2)                        # let them run; then exit with them inside the hook
"""


def test_exit_with_daemon_threads_inside_the_allocator():
    from helpers import run_isolated_many
    runs = 10
    results = run_isolated_many(ALLOCATOR_AT_EXIT, runs)
    failed = [r for r in results if r.returncode != 0 or "Fatal Python error" in r.stderr
              or "terminate called" in r.stderr or "FATAL" in r.stderr]
    assert not failed, (f"{len(failed)} of {runs} runs failed; exit code "
                        f"{failed[0].returncode}\n{failed[0].stderr[-3000:]}")


# ----- 4. cai.pinned blocks ---------------------------------------------------------------

def test_one_failing_unlock_leaves_no_other_range_locked():
    import mmap
    whole = np.zeros(1 << 18)                       # 2 MiB: two ends far apart, two ranges
    lower, upper = whole[:1024], whole[-1024:]
    lock = cai.pinned(lower, upper)
    lock.__enter__()
    cai.sim.inject_error("cuMemHostUnregister", 1)  # the first unlock (the upper range) fails
    with pytest.raises(cai.DeviceError, match="cuMemHostUnregister"):
        lock.__exit__(None, None, None)
    # The lower range was unlocked all the same: it can be locked again.
    with cai.pinned(lower):
        pass
    cai._cai._host_unregister(upper.ctypes.data // mmap.PAGESIZE * mmap.PAGESIZE)  # clean up


WAITS_WITHOUT_THE_GIL = """
    import sys, threading
    import numpy as np
    import cai
    s = cai.stream()
    a = cai.device_array(1 << 12, dtype=np.float32, stream=s)
    lock = cai.pinned(np.zeros(1 << 12))
    lock.__enter__()
    gate = cai.sim.hold(s)
    cai.ops.fill(a, 1.0, stream=s)                 # device work the driver call waits for
    calling = threading.Event()
    calls = {"exit": lambda: lock.__exit__(None, None, None),
             "pinned_array": lambda: cai.pinned_array(8),
             "mapped_array": lambda: cai.mapped_array(8)}

    def worker():
        calling.set()         # the main thread wakes for the GIL only after the 5 ms switch
        calls[sys.argv[1]]()  # interval: by then this thread waits in the driver

    t = threading.Thread(target=worker)
    t.start()
    calling.wait()            # needs the GIL back: a hang if the waiting call holds it
    gate.release()
    t.join()
    if sys.argv[1] == "exit":
        with cai.pinned(lock._arrays[0]):          # unlocked: it can be locked again
            pass
    print("ok")
"""


@pytest.mark.parametrize("call", ["exit", "pinned_array", "mapped_array"])
def test_calls_that_wait_for_the_device_release_the_gil(call):
    """Ending a cai.pinned block (cuMemHostUnregister) and making page-locked memory
    (cuMemAllocHost) wait for all device work; holding the GIL there, the main thread could
    never run the Python code that releases the held stream (a hang, caught by the timeout)."""
    from helpers import run_isolated
    import textwrap
    r = run_isolated(None, timeout=60, args=["-c", textwrap.dedent(WAITS_WITHOUT_THE_GIL), call])
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


@pytest.mark.parametrize("make", [cai.pinned_array,
                                  lambda n: np.asarray(cai.mapped_array(n)),
                                  lambda n: np.asarray(cai.managed_array(n))],
                         ids=["pinned_array", "mapped_array", "managed_array"])
def test_page_locked_memory_shares_no_page_with_a_heap_neighbour(make):
    """The driver gives page-locked and managed memory whole pages of its own; the simulated
    driver's, placed by the heap among NumPy's small arrays, locked their neighbours' pages."""
    kept = []
    for _ in range(32):
        kept.append(make(3))
        neighbour = np.zeros(3)                     # likely on the same heap page before
        kept.append(neighbour)
        with cai.pinned(neighbour):
            pass


def test_pinning_memory_the_driver_locked_already_is_a_no_op():
    import mmap
    p = cai.pinned_array(1024)
    m = np.asarray(cai.mapped_array(16))
    m2 = np.asarray(cai.managed_array(16))
    a = np.zeros(1024)
    with cai.pinned(p, m, m2, a):
        with cai.pinned(p[3:9], a[3:9]):            # nested: the outer block's range
            pass
        assert cai._cai._host_locked(a.ctypes.data, a.nbytes)
    assert cai._cai._host_locked(p.ctypes.data, p.nbytes)   # still the driver's, not unlocked
    assert not cai._cai._host_locked(a.ctypes.data, a.nbytes)
    assert p.ctypes.data % mmap.PAGESIZE == 0


@pytest.fixture
def straddling():
    """A page-aligned page `locked` inside a larger array, and views that start before it and
    run into it, start in it and run past its end, or cover it with pageable memory at both
    ends."""
    import mmap
    page = mmap.PAGESIZE
    n = page // 8
    buf = np.zeros(4 * n + n)
    start = (-buf.ctypes.data % page) // 8 + n
    locked = buf[start:start + n]
    views = {"into": buf[start - 4:start + 4], "past": buf[start + n - 4:start + n + 4],
             "over": buf[start - 4:start + n + 4]}
    return locked, views


@pytest.mark.parametrize("stream", [False, True], ids=["default", "stream"])
@pytest.mark.parametrize("route", ["to_device", "copy_to_device", "setitem", "copy_to_host"])
@pytest.mark.parametrize("where", ["into", "past", "over"])
def test_a_host_array_partly_in_a_pinned_range_copies_correctly(straddling, route, stream,
                                                                 where):
    locked, views = straddling
    host = views[where]
    s = cai.stream() if stream else 0
    values = np.arange(host.size, dtype=np.float64) + 1
    with cai.pinned(locked):
        if route == "copy_to_host":
            d = cai.to_device(values)
            d.copy_to_host(host, stream=s)
            if stream:
                s.synchronize()
            np.testing.assert_array_equal(host, values)
            return
        host[:] = values
        if route == "to_device":
            d = cai.to_device(host, stream=s)
        elif route == "copy_to_device":
            d = cai.device_array(host.size)
            d.copy_to_device(host, stream=s)
        else:
            d = cai.device_array(host.size)
            d[...] = host
        np.testing.assert_array_equal(d.copy_to_host(stream=s), values)


# ----- 11. silent no-ops and lost identities -------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda a: np.copyto(a, np.ones(6)),
    lambda a: np.copyto(dst=a, src=np.ones(6)),
    lambda a: np.put(a, [0, 1], [9.0, 9.0]),
    lambda a: np.putmask(a, np.ones(6, bool), 9.0),
    lambda a: np.place(a, np.ones(6, bool), [9.0]),
    lambda a: np.fill_diagonal(a.reshape(2, 3), 9.0),
    lambda a: np.put_along_axis(a, np.array([0]), 9.0, axis=0),
], ids=["copyto", "copyto-keywords", "put", "putmask", "place", "fill_diagonal",
        "put_along_axis"])
def test_numpy_functions_that_write_in_place_are_refused(call):
    a = cai.to_device(np.zeros(6))
    with pytest.raises(TypeError, match="writes into a cai array in place"):
        call(a)
    np.testing.assert_array_equal(a.copy_to_host(), np.zeros(6))


@pytest.mark.parametrize("make", [cai.managed_array, cai.mapped_array])
def test_host_writes_to_managed_memory_change_the_dask_token(make):
    pytest.importorskip("dask")
    from dask.tokenize import tokenize
    a = make(6, dtype=np.float64)
    cai.ops.fill(a, 1.0)
    a.synchronize()                       # the host reads it next (the fill is asynchronous)
    host = np.asarray(a)                  # a view of the same memory
    first = tokenize(a)
    assert tokenize(a) == first           # deterministic while nothing writes
    host[0] = 5.0                         # a write cai cannot see
    assert tokenize(a) != first


MASKED = np.ma.MaskedArray([1.0, 2.0, 3.0], mask=[False, True, False])


@pytest.mark.parametrize("call", [
    lambda: cai.to_device(MASKED),
    lambda: cai.to_device(MASKED, stream=cai.stream()),
    lambda: cai.device_array(3).copy_to_device(MASKED),
    lambda: cai.device_array(3, dtype=np.float32).copy_to_device(MASKED),
    lambda: cai.device_array(3).__setitem__(Ellipsis, MASKED),
    lambda: cai.device_array(3).__setitem__(1, np.ma.masked),
    # Inside lists and tuples, which NumPy reads item by item (and so drops the masks)
    lambda: cai.to_device([MASKED, MASKED]),
    lambda: cai.to_device(([1.0, 2.0, 3.0], MASKED), stream=cai.stream()),
    lambda: cai.to_device([[1.0, np.ma.masked]]),
    lambda: cai.device_array((2, 3)).copy_to_device([MASKED, MASKED]),
    lambda: cai.device_array((2, 3)).__setitem__(Ellipsis, [MASKED, [1.0, 2.0, 3.0]]),
    lambda: cai.device_array(3).__setitem__(Ellipsis, [1.0, np.ma.masked, 3.0]),
], ids=["to_device", "to_device-stream", "copy_to_device", "copy_to_device-dtype", "setitem",
        "setitem-masked-constant", "to_device-list", "to_device-tuple-stream",
        "to_device-nested-constant", "copy_to_device-list", "setitem-list",
        "setitem-list-constant"])
def test_a_numpy_mask_is_refused_not_dropped(call):
    with pytest.raises(TypeError, match="numpy.ma.MaskedArray, and its mask would be dropped"):
        call()


@pytest.mark.parametrize("dtype", ["int4", "bfloat16-field"])
def test_an_ml_dtypes_array_takes_host_data_of_its_own_dtype_back(dtype):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    if dtype == "int4":
        host = np.arange(-3, 3).astype(ml_dtypes.int4)
    else:
        host = np.zeros(4, np.dtype([("x", ml_dtypes.bfloat16), ("y", np.float32)]))
        host["x"], host["y"] = [1, 2, 3, 4], 5
    a = cai.to_device(host)
    again = host.copy()
    a.copy_to_device(again)
    a[...] = again
    a[1:3] = again[1:3]
    out = a.copy_to_host()
    assert out.dtype == host.dtype
    assert out.tobytes() == host.tobytes()


@pytest.mark.parametrize("family", ["dask", "cuda"])
def test_a_bfloat16_field_keeps_its_type_through_dask(family):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from distributed.protocol import deserialize, serialize
    inner = np.dtype([("h", ml_dtypes.float8_e4m3fn, (2,)), ("i", np.int16)])
    dt = np.dtype([("x", ml_dtypes.bfloat16), ("y", np.float32), ("z", inner)])
    host = np.zeros(3, dt)
    host["x"], host["y"], host["z"]["i"] = [1.5, 2.5, 3.5], 7, 9
    host["z"]["h"] = [[0.5, 1.0]] * 3
    got = deserialize(*serialize(cai.to_device(host), serializers=(family,)))
    assert got.dtype == dt                          # not a raw '|V2' field
    out = got.copy_to_host()
    assert out.tobytes() == host.tobytes()
    np.testing.assert_array_equal(out["x"].astype(np.float32), [1.5, 2.5, 3.5])


@pytest.mark.parametrize("bad", [
    [[["nope"], "bfloat16"]], [[["y"], "bfloat16"]], [[["x"], "float64"]], [["x", "bfloat16"]],
    "x", [],
], ids=["no-field", "not-void", "unknown-type", "path-not-list", "not-list", "empty"])
def test_a_forged_ml_fields_header_is_refused(bad):
    pytest.importorskip("ml_dtypes")
    from distributed.protocol import deserialize, serialize
    dt = np.dtype([("x", "V2"), ("y", np.float32)])
    header, frames = serialize(cai.to_device(np.zeros(3, dt)), serializers=("dask",))
    header["sub-header"]["ml_fields"] = bad
    with pytest.raises(ValueError, match="ml_fields"):
        deserialize(header, frames)

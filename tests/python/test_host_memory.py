"""Memory the host reaches, and asynchronous host copies (docs/python.md, "Host memory"):
managed_array, mapped_array, pinned_array and pinned(*arrays) as Numba has them; copies with a
stream and page-locked host memory are queued without the host waiting, copies with pageable
memory finish before the call returns (the driver's documented behaviour), and stream=0 always
waits. Asynchrony is shown with cai.sim.hold, cai.sim.delay and stream.query(), never with the
clock."""

import contextlib
import mmap
import threading

import numpy as np
import pytest

import cai

kDLCUDAHost, kDLCUDAManaged = 3, 13


_GATES = {}


@contextlib.contextmanager
def held():
    """A non-blocking stream held by a gate (cai.sim.hold): what is queued on it stays queued
    until let_go(slow), so query() says whether a call waited. Page-locked memory is allocated
    or locked before: the driver may wait for all queued work there (docs/python.md)."""
    s = cai.stream(non_blocking=True)
    with cai.sim.hold(s) as gate:
        _GATES[s.handle] = gate
        try:
            yield s
        finally:
            del _GATES[s.handle]


@pytest.fixture
def slow():
    with held() as s:
        yield s


def let_go(stream, later=False):
    """Releases the gate of `slow`; `later`: from another thread, while the host may wait."""
    gate = _GATES[stream.handle]
    if later:
        threading.Thread(target=gate.release).start()
    else:
        gate.release()


@pytest.mark.parametrize("make,device_type", [(cai.managed_array, kDLCUDAManaged),
                                              (cai.mapped_array, kDLCUDAHost)])
def test_device_arrays_the_host_reads_in_place(make, device_type):
    a = make((2, 3), dtype=np.float32)
    assert isinstance(a, cai.DeviceNDArray)
    assert a.__dlpack_device__()[0] == device_type
    cai.ops.fill(a, 2.5)
    host = np.asarray(a)  # waits for the fill, then views the same memory
    np.testing.assert_array_equal(host, np.full((2, 3), 2.5, np.float32))
    host[1, 2] = 7
    assert a.copy_to_host()[1, 2] == 7  # one memory
    assert np.asarray(a, copy=False).ctypes.data == a.ptr
    assert np.array(a, copy=True).ctypes.data != a.ptr
    assert np.asarray(a, dtype=np.float64).dtype == np.float64


def test_a_host_view_waits_for_the_work_queued_on_the_array(slow):
    a = cai.managed_array(1000, stream=slow)
    cai.ops.fill(a, 3.0)  # queued behind the gate
    assert not slow.query()
    let_go(slow, later=True)
    np.testing.assert_array_equal(np.asarray(a), np.full(1000, 3.0))


def test_device_memory_is_still_only_copied():
    a = cai.to_device(np.arange(4.0))
    with pytest.raises(ValueError, match="copy=False"):
        np.asarray(a, copy=False)
    assert np.asarray(a).ctypes.data != a.ptr


def test_options_numba_has_that_cai_does_not():
    with pytest.raises(NotImplementedError, match="attach_global=False"):
        cai.managed_array(4, attach_global=False)
    with pytest.raises(NotImplementedError, match="wc=True"):
        cai.mapped_array(4, wc=True)
    assert cai.mapped_array(4, portable=True).shape == (4,)


def test_pinned_array_is_a_numpy_array_whose_copies_do_not_wait():
    p = cai.pinned_array((4, 5), dtype=np.int32, order="F")
    assert type(p) is np.ndarray and p.flags.f_contiguous
    p[...] = np.arange(20).reshape(4, 5)
    out = cai.pinned_array((4, 5), dtype=np.int32)
    with held() as slow:
        d = cai.to_device(p, stream=slow)  # queued
        assert not slow.query()
        d.copy_to_host(out, stream=slow)  # queued too: out is filled once the stream gets there
        assert not slow.query()
        let_go(slow)
        slow.synchronize()
    np.testing.assert_array_equal(out, np.arange(20).reshape(4, 5))


def test_pageable_copies_give_the_buffer_back_when_they_return():
    # As the driver documents: to the device the bytes are staged at the call (the copy stays
    # queued) and the caller may reuse its buffer at once; from the device the call returns
    # once the copy is done.
    host = np.arange(64.0)
    with held() as slow:
        d = cai.to_device(host, stream=slow)
        assert not slow.query()
        host[:] = -1
        let_go(slow, later=True)  # the copy back waits for the stream
        back = d.copy_to_host(stream=slow)
        assert slow.query()
    np.testing.assert_array_equal(back, np.arange(64.0))


def test_stream_zero_always_waits():
    s = cai.stream(non_blocking=True)
    d = cai.device_array(8, stream=s)
    p = cai.pinned_array(8)  # first: allocating page-locked memory may wait for the device
    cai.ops.fill(d, 1.0)
    cai.sim.delay(s, 0.2)
    cai.ops.fill(d, 2.0)
    d.copy_to_host(p)  # stream=0: Numba's synchronous copy, pinned memory or not
    assert s.query()
    np.testing.assert_array_equal(p, np.full(8, 2.0))


def test_pinned_page_locks_numpy_arrays_for_a_block():
    x = np.ones((3, 3))
    with cai.pinned(x), held() as slow:
        d = cai.to_device(x, stream=slow)
        assert not slow.query()  # page-locked: queued
        # Inside the outer block's range: nothing to lock, so nothing to unlock (a driver call
        # would wait for the held stream here) and x stays locked after the inner block.
        with cai.pinned(x[1:]):
            pass
        cai.to_device(x, stream=slow)
        assert not slow.query()
        let_go(slow)
        slow.synchronize()
    x[...] = 0
    cai.sim.delay(slow, 0.2)
    d.copy_to_host(x, stream=slow)
    # Pageable again after the block: a copy into it is done on return (queued behind the
    # delay, it would not have run yet). The stream itself may still be busy with cai's
    # ordering after the copy, so its query proves nothing.
    np.testing.assert_array_equal(x, 1.0)
    with pytest.raises(TypeError, match="expected NumPy arrays"):
        with cai.pinned([1, 2]):
            pass
    with cai.pinned(np.zeros(0)):  # nothing to lock
        pass


def test_pinned_locks_pages_of_read_only_arrays_read_only():
    # Whole pages of their own, so that no other array shares them.
    page = mmap.PAGESIZE
    buf = np.zeros(4 * page, np.uint8)
    start = -buf.ctypes.data % page
    mine = buf[start + page:start + 2 * page]
    mine[:] = 7
    ro = mine.view()
    ro.flags.writeable = False
    d = cai.to_device(np.arange(page, dtype=np.uint32).astype(np.uint8))
    with cai.pinned(ro):
        np.testing.assert_array_equal(cai.to_device(ro).copy_to_host(), 7)  # the device reads
        # The driver was told READ_ONLY: a device write through a writable alias is refused.
        with pytest.raises(Exception, match="READ_ONLY"):
            d.copy_to_host(mine)
    np.testing.assert_array_equal(mine, 7)
    with cai.pinned(ro, mine):  # a writable array on the same page: locked for writing
        d.copy_to_host(mine)
    np.testing.assert_array_equal(mine, d.copy_to_host())


def test_a_failed_pinned_block_unlocks_what_it_locked():
    x, y = np.ones(16), np.ones(16)
    with pytest.raises(TypeError):
        with cai.pinned(x, "not an array"):
            pass
    with cai.pinned(x, y):  # x was unlocked: it locks again
        pass


def test_pinned_locks_shared_pages_once():
    # Views of one array, and small arrays that the allocator put side by side: the driver
    # locks whole pages and refuses a page twice, so pinned() locks each page once.
    x = np.arange(4096.0)
    small = [np.ones(3) for _ in range(8)]
    with cai.pinned(x, x[1:], x[::7], *small), held() as slow:
        cai.to_device(x[1:], stream=slow)
        assert not slow.query()  # page-locked: queued
        let_go(slow)
        slow.synchronize()
    d = cai.to_device(x)
    x[...] = -1
    cai.sim.delay(slow, 0.2)
    d.copy_to_host(x, stream=slow)
    # All unlocked after the block: a copy into x is done on return (queued behind the delay,
    # it would not have run yet).
    np.testing.assert_array_equal(x, np.arange(4096.0))

"""Memory the host reaches, and asynchronous host copies (docs/python.md, "Host memory"):
managed_array, mapped_array (NumPy arrays that export __cuda_array_interface__), pinned_array
and pinned(*arrays) as Numba has them; copies with a
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


MAKERS = [pytest.param(cai.managed_array, kDLCUDAManaged, id="managed"),
          pytest.param(cai.mapped_array, kDLCUDAHost, id="mapped")]


@pytest.mark.parametrize("make,device_type", MAKERS)
def test_managed_and_mapped_arrays_are_numpy_arrays(make, device_type):
    a = make((2, 3), dtype=np.float32)
    assert isinstance(a, np.ndarray) and not isinstance(a, cai.DeviceNDArray)
    assert type(a) is (cai.ManagedNDArray if make is cai.managed_array else cai.MappedNDArray)
    a[...] = np.arange(6).reshape(2, 3)
    assert a.sum() == 15 and type(a.sum()) is np.float32
    assert "[[0. 1. 2.]" in str(a) and repr(a).startswith(type(a).__name__)
    assert a.__dlpack_device__()[0] == device_type
    cai.ops.fill(a, 2.5)  # the device writes the memory the host views
    a.synchronize()
    np.testing.assert_array_equal(a, np.full((2, 3), 2.5, np.float32))
    assert a.copy_to_host().tolist() == a.tolist()
    assert np.asarray(a).ctypes.data == a.ctypes.data == a.ptr  # one memory, no copy


@pytest.mark.parametrize("make,device_type", MAKERS)
def test_new_results_are_plain_numpy_arrays_views_stay_in_the_memory(make, device_type):
    a = make((4, 6), dtype=np.int32)
    a[...] = np.arange(24).reshape(4, 6)
    from numpy.lib.stride_tricks import as_strided, sliding_window_view
    views = [a[1:], a[::2, 1::3], a.T, a.reshape(6, 4), a.view(np.uint32), a[2], a[..., None],
             as_strided(a, shape=(3,), strides=(28,), subok=True),
             sliding_window_view(a, (2, 2), subok=True)]  # read-only: its elements overlap
    for v in views:
        assert type(v) is type(a), v
        cai_desc = v.__cuda_array_interface__
        # the device pointer, offset as on the host
        assert cai_desc["data"] == (v.ctypes.data, not v.flags.writeable)
        assert cai_desc["shape"] == v.shape
        assert cai_desc["strides"] in (None, v.strides)
        assert cai_desc["strides"] is not None or v.flags.c_contiguous
    # New memory: ufunc results, reductions along an axis, copies, advanced indexing.
    for r in [a + 1, np.sqrt(a), a.sum(axis=0), a.copy(), a.astype(np.float64), a[[0, 2]],
              a[a > 3], np.array(a, copy=True, subok=False)]:
        assert type(r) is np.ndarray, type(r)
        assert not cai.is_cuda_array(r)
    a += 1  # out= the memory itself: the same array
    assert type(a) is type(a) and a[0, 0] == 1
    # A subclass instance NumPy made in new memory (empty_like keeps the type) has no CAI.
    stray = np.empty_like(a)
    assert type(stray) is type(a) and not cai.is_cuda_array(stray)
    with pytest.raises(AttributeError, match=r"not in (managed|mapped) memory \(a copy"):
        stray.__cuda_array_interface__
    d = cai.to_device(stray)  # copied as host data
    assert d.ptr != stray.ctypes.data


def test_a_mapped_arrays_device_pointer_is_the_drivers():
    import ctypes
    driver = ctypes.CDLL(cai.sim.driver_path())  # the driver cai runs on, one state
    a = cai.mapped_array((8, 8))
    for v in (a, a[3:, 2:], a.T[1]):
        dptr = ctypes.c_uint64()
        assert driver.cuMemHostGetDevicePointer_v2(ctypes.byref(dptr),
                                                   ctypes.c_void_p(v.ctypes.data), 0) == 0
        assert v.__cuda_array_interface__["data"][0] == dptr.value


@pytest.mark.parametrize("make,device_type", MAKERS)
def test_cai_operations_take_them_zero_copy(make, device_type):
    a = make(16, dtype=np.float64)
    a[...] = 0
    part = a[4:12:2]
    for imported in (cai.as_cuda_array(part), cai.from_dlpack(part)):
        assert isinstance(imported, cai.DeviceNDArray)
        assert imported.ptr == part.ctypes.data and imported.strides == part.strides
        assert imported.__dlpack_device__()[0] == device_type
    cai.ops.fill(part, 7.0)  # through its device pointer, in place
    cai.ops.add(part, part, part)
    a.synchronize()
    expected = np.zeros(16)
    expected[4:12:2] = 14.0
    np.testing.assert_array_equal(a, expected)
    h = np.from_dlpack(a)  # NumPy reads the device type managed and mapped memory has
    assert h.ctypes.data == a.ctypes.data


@pytest.mark.parametrize("make,device_type", MAKERS)
def test_the_host_reads_what_the_device_wrote_after_synchronize(make, device_type):
    """The host view does not wait (as Numba's): reading before the device work is ordered
    before the host is a race, which the simulated driver reports."""
    slow = cai.stream(non_blocking=True)
    a = make(1000, stream=slow)  # allocated first: the driver may wait for queued work there
    with cai.sim.hold(slow) as gate:
        cai.ops.fill(a[100:], 3.0)  # queued on the array's stream, behind the gate
        assert not slow.query()
        assert a.__cuda_array_interface__["stream"] == slow.handle  # CAI v3: the producer's
        with pytest.raises(cai.RaceError, match="host_access on the host reads"):
            cai.sim.host_access(a.ctypes.data, a.nbytes)
        threading.Thread(target=gate.release).start()
        a[:100].synchronize()  # any view waits for the work on the memory
    cai.sim.host_access(a.ctypes.data, a.nbytes)
    np.testing.assert_array_equal(a[100:], np.full(900, 3.0))
    assert a.__cuda_array_interface__["stream"] is None  # nothing pending


def test_work_on_a_view_is_ordered_with_work_on_the_whole():
    slow, other = cai.stream(non_blocking=True), cai.stream(non_blocking=True)
    a = cai.mapped_array(64, stream=slow)
    with cai.sim.hold(slow):
        cai.ops.fill(a, 1.0)  # on slow, held
        cai.ops.fill(a[::2], 2.0, stream=other)  # RaceError unless ordered after the first fill
        assert not other.query()
    a.synchronize()
    np.testing.assert_array_equal(a, np.tile([2.0, 1.0], 32))


@pytest.mark.parametrize("make,device_type", MAKERS)
def test_views_keep_the_memory_alive_and_it_is_freed_once(make, device_type):
    import gc
    free = "cuMemFreeHost" if make is cai.mapped_array else "cuMemFree"
    a = make(1024, dtype=np.uint8)
    a[...] = 9
    view = a[512:]
    host = np.asarray(view[::2])  # a plain ndarray whose base chain reaches the memory
    cai.synchronize()
    cai.sim.reset_driver_calls()
    del a, view
    gc.collect()
    cai.synchronize()  # dropped memory is given back by then
    assert cai.sim.driver_calls().get(free, 0) == 0
    assert (host == 9).all()
    del host
    gc.collect()
    cai.synchronize()
    assert cai.sim.driver_calls().get(free, 0) == 1
    b = make(8)
    device_view = cai.as_cuda_array(b[2:])  # a cai array of the bytes keeps the memory too
    del b
    gc.collect()
    cai.synchronize()
    assert cai.sim.driver_calls().get(free, 0) == 1
    cai.ops.fill(device_view, 1.0)
    assert (device_view.copy_to_host() == 1.0).all()
    del device_view
    gc.collect()
    cai.synchronize()
    assert cai.sim.driver_calls().get(free, 0) == 2


@pytest.mark.parametrize("make,device_type", MAKERS)
def test_pickling_gives_new_memory_of_the_same_kind(make, device_type):
    import pickle
    a = make((3, 4), dtype=np.int16, order="F")
    a[...] = np.arange(12).reshape(3, 4)
    b = pickle.loads(pickle.dumps(a))
    assert type(b) is type(a) and b.flags.f_contiguous and b.ctypes.data != a.ctypes.data
    np.testing.assert_array_equal(b, a)
    assert b.__dlpack_device__()[0] == device_type


def test_zero_size_arrays_export_a_null_pointer():
    for make in (cai.managed_array, cai.mapped_array):
        z = make((0, 3))
        assert z.__cuda_array_interface__["data"] == (0, False) and z.sum() == 0


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

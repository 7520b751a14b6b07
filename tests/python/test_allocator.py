"""cai.set_allocator: every device allocation of cai arrays through a Python allocator
(docs/python.md, "Allocators"): the calls and their arguments, stream order proved with the
race detector, errors surfacing clearly, nothing leaked."""

import gc
import sys
import weakref

import numpy as np
import pytest

import cai
from helpers import run_isolated


class ArenaPool:
    """A pool over one cai array: blocks of 256 bytes, reused only on the stream they were
    given back on (stream order, as CuPy's and RMM's pools do), unless `reuse_anywhere`."""

    def __init__(self, nbytes=1 << 20, reuse_anywhere=False):
        self.arena = cai.device_array(nbytes, dtype=np.uint8)   # before the pool is set
        self.top = 0
        self.free = {}  # stream -> [(ptr, nbytes)]
        self.calls = []
        self.live = {}
        self.reuse_anywhere = reuse_anywhere

    def allocate(self, nbytes, device, stream):
        self.calls.append(("allocate", nbytes, device, stream))
        pools = self.free.values() if self.reuse_anywhere else [self.free.get(stream, [])]
        for blocks in pools:
            for i, (ptr, size) in enumerate(blocks):
                if size >= nbytes:
                    del blocks[i]
                    self.live[ptr] = size
                    return ptr
        size = (nbytes + 255) // 256 * 256
        if self.top + size > self.arena.nbytes:
            raise MemoryError(f"arena of {self.arena.nbytes} bytes is full")
        ptr = self.arena.ptr + self.top
        self.top += size
        self.live[ptr] = size
        return ptr

    def deallocate(self, ptr, nbytes, device, stream):
        self.calls.append(("deallocate", nbytes, device, stream))
        self.free.setdefault(stream, []).append((ptr, self.live.pop(ptr)))


@pytest.fixture
def pool():
    p = ArenaPool()
    assert cai.set_allocator(p.allocate, p.deallocate) is None
    yield p
    cai.set_allocator()
    assert cai.get_allocator() is None


def test_every_array_allocation_goes_through_the_allocator(pool):
    s = cai.stream()
    a = cai.to_device(np.arange(10.0))
    b = cai.device_array((3, 4), dtype=np.int32, stream=s)
    assert pool.calls == [("allocate", 80, 0, 1), ("allocate", 48, 0, s.handle)]
    assert pool.arena.ptr <= a.ptr < pool.arena.ptr + pool.arena.nbytes
    np.testing.assert_array_equal(a.copy_to_host(), np.arange(10.0))
    view = a[2:5]
    del a
    assert len(pool.calls) == 2           # a view still uses the memory
    del view, b
    assert pool.calls[2:] == [("deallocate", 80, 0, 1), ("deallocate", 48, 0, s.handle)]
    assert pool.live == {}
    assert cai.get_allocator() == (pool.allocate, pool.deallocate)


def test_temporaries_of_operations_go_through_it_too(pool):
    a = cai.to_device(np.arange(8.0))
    pool.calls.clear()
    cai.ops.add(a[:-1], a[:-1], a[1:])    # out partly overlaps the inputs: a temporary
    np.testing.assert_array_equal(a.copy_to_host(), [0, 0, 2, 4, 6, 8, 10, 12])
    kinds = [c[0] for c in pool.calls]
    assert kinds == ["allocate", "deallocate"], pool.calls


def test_memory_is_given_back_after_the_work_queued_on_it(pool):
    """The array is allocated on s1 and written on s2 behind a delay; when it goes, cai makes
    s1 wait for s2 before the pool gets it back, so the pool's reuse on s1 is race free (the
    race detector would raise RaceError otherwise; the last test shows it does)."""
    s1, s2 = cai.stream(), cai.stream()
    a = cai.device_array(1024, dtype=np.float32, stream=s1)
    cai.sim.delay(s2, 0.2)
    cai.ops.fill(a, 1.0, stream=s2)
    ptr = a.ptr
    del a
    b = cai.device_array(1024, dtype=np.float32, stream=s1)
    assert b.ptr == ptr                   # the pool reused the block on s1
    cai.ops.fill(b, 2.0, stream=s1)
    np.testing.assert_array_equal(b.copy_to_host(), np.full(1024, 2.0, np.float32))


def test_pool_memory_exports_its_stream_not_none(pool):
    """A pool block is ready only in order on its stream (its earlier work there may still be
    pending), so a fresh array from an allocator names that stream in its CAI export; memory
    from the backend has nothing pending and exports None. A consumer on another stream that
    honours the export is race free (the race detector proves it)."""
    s1, s2 = cai.stream(), cai.stream()
    a = cai.device_array(1024, dtype=np.float32, stream=s1)
    cai.sim.delay(s1, 0.2)
    cai.ops.fill(a, 1.0, stream=s1)
    del a                                 # back to the pool on s1, the fill still queued
    b = cai.device_array(1024, dtype=np.float32, stream=s1)
    assert b.__cuda_array_interface__["stream"] == s1.handle
    c = cai.as_cuda_array(b)              # a consumer honouring the export
    cai.ops.fill(c, 2.0, stream=s2)
    np.testing.assert_array_equal(c.copy_to_host(), np.full(1024, 2.0, np.float32))
    cai.set_allocator()
    assert cai.device_array(16).__cuda_array_interface__["stream"] is None


def test_a_pool_that_ignores_stream_order_is_caught_by_the_race_detector():
    p = ArenaPool(reuse_anywhere=True)
    cai.set_allocator(p.allocate, p.deallocate)
    try:
        s1, s2, s3 = cai.stream(), cai.stream(), cai.stream()
        a = cai.device_array(1024, dtype=np.float32, stream=s1)
        cai.sim.delay(s2, 0.2)
        cai.ops.fill(a, 1.0, stream=s2)
        del a                               # given back on s1, after s2's fill
        b = cai.device_array(1024, dtype=np.float32, stream=s3)  # reused on s3: no wait
        with pytest.raises(cai.RaceError):
            cai.ops.fill(b, 2.0, stream=s3)
        cai.synchronize()
    finally:
        cai.set_allocator()


def test_allocator_errors_surface_clearly():
    gone = []

    def full(nbytes, device, stream):
        raise MemoryError("pool is full")

    def never(ptr, nbytes, device, stream):
        gone.append(ptr)

    cai.set_allocator(full, never)
    try:
        with pytest.raises(MemoryError, match="pool is full") as e:
            cai.device_array(16)
        assert "raised by the allocate() given to cai.set_allocator, for 128 bytes" in \
            e.value.__notes__[0]
        cai.set_allocator(lambda n, d, s: "0x1000", never)
        with pytest.raises(TypeError, match=r"allocate\(\) returned str, not an int"):
            cai.device_array(16)
        cai.set_allocator(lambda n, d, s: 0x1000, never)
        with pytest.raises(ValueError, match=r"returned 0x1000, not memory a kernel on device 0 "
                                             r"can use for 128 bytes"):
            cai.device_array(16)
        assert gone == [0x1000]             # what it returned was given back to it
        cai.set_allocator()
        small = cai.device_array(2, dtype=np.uint8)
        cai.set_allocator(lambda n, d, s: small.ptr, never)
        with pytest.raises(ValueError, match="not memory a kernel"):
            cai.device_array(1 << 20)       # inside an allocation, but too short
    finally:
        cai.set_allocator()
    with pytest.raises(TypeError, match="give both allocate and deallocate"):
        cai.set_allocator(full)
    with pytest.raises(TypeError, match="deallocate must be callable"):
        cai.set_allocator(full, 3)


def test_a_deallocate_that_raises_is_reported_not_raised(pool):
    seen = []
    old_hook = sys.unraisablehook
    # Only what is needed: the hook's arguments hold the traceback, and it this frame.
    sys.unraisablehook = lambda args: seen.append((type(args.exc_value), str(args.exc_value)))
    try:
        def bad(ptr, nbytes, device, stream):
            raise RuntimeError("cannot take it back")

        cai.set_allocator(pool.allocate, bad)
        a = cai.device_array(8)
        del a                                # no exception here
        gc.collect()
    finally:
        sys.unraisablehook = old_hook
    assert seen == [(RuntimeError, "cannot take it back")]


def test_the_allocator_is_released_once_no_array_uses_it():
    p = ArenaPool()
    cai.set_allocator(p.allocate, p.deallocate)
    a = cai.device_array(8)
    cai.set_allocator()
    ref = weakref.ref(p)
    del p
    gc.collect()
    assert ref() is not None                # a still needs its deallocate
    del a
    gc.collect()
    assert ref() is None


def test_arrays_of_a_python_allocator_alive_at_exit():
    r = run_isolated("""
        import numpy as np, cai
        arena = cai.device_array(1 << 16, dtype=np.uint8)
        top = [0]
        def allocate(n, d, s):
            top[0] += 256 * ((n + 255) // 256)
            return arena.ptr + top[0] - 256 * ((n + 255) // 256)
        cai.set_allocator(allocate, lambda p, n, d, s: None)
        kept = [cai.to_device(np.arange(4.0)) for _ in range(3)]
        print(kept[2].copy_to_host().sum())
    """)
    assert r.returncode == 0 and r.stdout.strip() == "6.0", r.stderr
    assert r.stderr == "", r.stderr

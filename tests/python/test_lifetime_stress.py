"""Issue 8, lifetime: owners, masks, streams and capsules are released exactly when their last
user goes (weakrefs and sys.getrefcount), failed imports keep nothing, and 100,000
import/export/release cycles do not grow the process (RSS from /proc/self/statm, and the number
of live Python objects)."""

import os

os.environ.setdefault("CAI_BACKEND", "sim")

import gc  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import weakref  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import cai  # noqa: E402
from helpers import DLWrapper, DictProducer as Producer, collect, kept  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class CapsuleOnce:
    """Hands out one given capsule."""

    def __init__(self, cap, device):
        self.cap = cap
        self.device = device

    def __dlpack__(self, **kwargs):
        cap, self.cap = self.cap, None
        return cap

    def __dlpack_device__(self):
        return self.device


@pytest.fixture
def src():
    return cai.to_device(np.arange(12, dtype=np.float32).reshape(3, 4))


def mask_of(arr):
    return cai.to_device(np.ones(arr.shape, dtype=np.bool_))


# ----- exactly when --------------------------------------------------------------------------

def test_producer_refcount_returns_to_baseline(src):
    p = Producer(src.__cuda_array_interface__)
    base = sys.getrefcount(p)
    a = cai.as_cuda_array(p)
    assert sys.getrefcount(p) == base + 1          # one reference, held by the array
    views = [a[1:], a.T, a[None, ..., ::2], a.slice(0, 1, 3)]
    # Each array holds its own reference, so that the garbage collector sees through each.
    assert sys.getrefcount(p) == base + 1 + len(views)
    del a
    assert sys.getrefcount(p) == base + len(views)
    views.clear()
    assert sys.getrefcount(p) == base              # no GC needed: plain reference counting


def test_owner_of_from_cuda_array_interface(src):
    owner = Producer(None)
    base = sys.getrefcount(owner)
    a = cai.from_cuda_array_interface(src.__cuda_array_interface__, owner=owner)
    assert sys.getrefcount(owner) == base + 1
    b = cai.as_cuda_array(a)                       # our own array: returned as it is
    assert b is a
    del a, b
    assert sys.getrefcount(owner) == base


def test_mask_producer_lives_as_long_as_the_data(src):
    m = mask_of(src)
    mp = Producer(m.__cuda_array_interface__)
    d = src.__cuda_array_interface__ | {"mask": mp}
    p = Producer(d)
    wp, wmp = weakref.ref(p), weakref.ref(mp)
    mbase = sys.getrefcount(mp)
    a = cai.as_cuda_array(p)
    assert a.mask is not None
    assert sys.getrefcount(mp) == mbase + 1     # the array holds the mask producer
    del p, d                                    # (p is still held by the array, and d by p)
    del mp
    collect()
    assert wp() is not None and wmp() is not None
    v = a[1:]                       # a view keeps both
    mask_view = a.mask
    del a
    collect()
    assert wp() is not None and wmp() is not None
    del v
    collect()
    assert wp() is None             # the data producer goes with the last data view
    assert wmp() is not None        # the exported mask array still keeps its producer
    del mask_view
    assert not kept(wmp)


def test_failed_imports_keep_nothing(src):
    m = mask_of(src)
    mp = Producer(m.__cuda_array_interface__)
    p = Producer(src.__cuda_array_interface__ | {"mask": mp, "stream": 0})
    base_p, base_mp = sys.getrefcount(p), sys.getrefcount(mp)
    for _ in range(100):
        with pytest.raises(ValueError, match="stream: 0"):
            cai.as_cuda_array(p)     # the mask is imported first, then the data is refused
        with pytest.raises(ValueError, match="stream: 0"):
            cai.ops.copy(src, p)
    assert (sys.getrefcount(p), sys.getrefcount(mp)) == (base_p, base_mp)


def test_stream_lives_while_an_array_uses_it():
    s = cai.stream(non_blocking=True)
    h = int(s)
    a = cai.device_array((4,), stream=s)
    del s                                       # the Python object goes; the array holds it
    cai.ops.fill(a, 7)                          # runs on the array's stream
    assert int(a.stream) == h
    assert a.copy_to_host().tolist() == [7, 7, 7, 7]
    cai.external_stream(h).synchronize()        # still a stream
    b = a[1:]
    del a
    cai.external_stream(h).synchronize()        # a view keeps it too
    del b
    with pytest.raises(cai.DeviceError, match="not a stream of the simulator"):
        cai.external_stream(h).synchronize()    # destroyed with its last user


def test_external_streams_are_never_destroyed():
    s = cai.stream(non_blocking=True)
    h = int(s)
    for _ in range(50):
        e = cai.external_stream(h)
        a = cai.device_array((2,), stream=e)
        del e, a
    cai.external_stream(h).synchronize()        # still there: cai did not own it
    del s


def test_unconsumed_capsule_keeps_the_producer_then_frees_it(src):
    p = Producer(src.__cuda_array_interface__)
    wp = weakref.ref(p)
    a = cai.as_cuda_array(p)
    cap = a.__dlpack__(max_version=(1, 3))
    legacy = a.__dlpack__()
    del a, p
    collect()
    assert wp() is not None          # the capsules hold the import
    del cap
    assert kept(wp)
    del legacy
    collect()
    assert wp() is None              # freed by the capsule destructor, once


def test_consumed_capsule_is_freed_by_the_consumer(src):
    p = Producer(src.__cuda_array_interface__)
    wp = weakref.ref(p)
    a = cai.as_cuda_array(p)
    w = CapsuleOnce(a.__dlpack__(max_version=(1, 3)), a.__dlpack_device__())
    del a, p
    b = cai.from_dlpack(w)
    assert kept(wp)
    del w                             # the used capsule: its destructor must do nothing
    assert kept(wp)
    np.testing.assert_array_equal(b.copy_to_host(), np.arange(12, dtype=np.float32).reshape(3, 4))
    del b
    assert not kept(wp)


def test_dlpack_chain_releases_every_link(src):
    """cai -> foreign DLPack -> cai -> CAI producer -> cai ...: one release frees all."""
    p = Producer(src.__cuda_array_interface__)
    wp = weakref.ref(p)
    x = cai.as_cuda_array(p)
    for _ in range(20):
        x = cai.from_dlpack(DLWrapper(x))
        x = cai.as_cuda_array(Producer(x.__cuda_array_interface__, keep=x))
        x = cai.from_cuda_array_interface(x.__cuda_array_interface__, owner=x)
    del p
    assert kept(wp)
    del x
    assert not kept(wp)


def test_arrays_are_freed_without_gc(src):
    """cai arrays hold no reference cycles of their own: reference counting frees them."""
    gc.disable()
    try:
        a = cai.as_cuda_array(Producer(src.__cuda_array_interface__))
        wa = weakref.ref(a)
        v = a[1:][::2].T
        wv = weakref.ref(v)
        del a, v
        assert wa() is None and wv() is None
    finally:
        gc.enable()


class SelfViewing:
    """A producer that caches cai views of itself: the pattern that leaked its whole buffer
    every time before DeviceNDArray supported the garbage collector."""

    def __init__(self, src):
        self.desc = src.__cuda_array_interface__
        self.keep = src
        self.view = cai.as_cuda_array(self)
        self.views = [self.view[1:], self.view.T, cai.as_cuda_array(self), self.view[::2][0]]

    @property
    def __cuda_array_interface__(self):
        return dict(self.desc)


def test_cycle_through_an_imported_array_is_collected(src):
    p = Producer(src.__cuda_array_interface__)
    p.view = cai.as_cuda_array(p)
    wp = weakref.ref(p)
    del p
    assert not kept(wp)


def test_cycles_through_views_are_collected_200_times(src):
    """Views of views, transposes and several imports of one producer: every one of 200
    producers is collected, and with it the device buffer it kept."""
    refs = []
    for _ in range(200):
        buf = cai.to_device(np.arange(12, dtype=np.float32).reshape(3, 4))
        refs.append((weakref.ref(SelfViewing(buf)), weakref.ref(buf)))
        del buf
    collect()
    assert sum(p() is not None for p, _ in refs) == 0
    assert sum(b() is not None for _, b in refs) == 0


def test_masked_cycle_is_collected(src):
    class MaskedSelf:
        def __init__(self):
            self.mask = mask_of(src)
            self.view = cai.as_cuda_array(self)[1:]

        @property
        def __cuda_array_interface__(self):
            return src.__cuda_array_interface__ | {"mask": self.mask}

    wp = weakref.ref(MaskedSelf())
    assert not kept(wp)


def test_a_cycle_held_from_cpp_is_kept_until_released(src):
    """A capsule (an exported DLPack tensor) holds the View from C++: the cycle is then
    referenced from outside and must survive a collection with its memory readable; once the
    capsule goes, the cycle is collected."""
    buf = cai.to_device(np.arange(12, dtype=np.float32).reshape(3, 4))
    p = SelfViewing(buf)
    wp, wb = weakref.ref(p), weakref.ref(buf)
    cap = p.view.__dlpack__(max_version=(1, 3))
    del p, buf
    collect()
    assert wp() is not None and wb() is not None
    back = cai.from_dlpack(CapsuleOnce(cap, (2, 0)))
    del cap
    np.testing.assert_array_equal(back.copy_to_host(), np.arange(12).reshape(3, 4))
    del back
    collect()
    assert wp() is None and wb() is None


def test_finalizers_in_a_collected_cycle_see_the_data(src):
    """Objects of a collected cycle may reach each other from their finalizers, which run
    before anything is cleared (PEP 442): the array and its memory are still intact then."""
    seen = []

    class Holder:
        def __init__(self):
            self.view = cai.as_cuda_array(self)

        @property
        def __cuda_array_interface__(self):
            return src.__cuda_array_interface__

    class Finalizer:
        def __init__(self, holder):
            self.holder = holder
            holder.finalizer = self

        def __del__(self):
            seen.append(self.holder.view.copy_to_host().sum())

    Finalizer(Holder())
    collect()
    assert seen == [66.0]


def test_uninitialized_instance_cannot_be_made():
    """DeviceNDArray.__new__ would make an instance that holds no array (which the entry points
    read as an unconstructed View and crashed): it is refused."""
    with pytest.raises(TypeError, match="cannot be created directly"):
        cai.DeviceNDArray.__new__(cai.DeviceNDArray)
    with pytest.raises(TypeError):
        cai.DeviceNDArray()


# ----- no growth over many cycles ------------------------------------------------------------

def no_growth(step, n, warmup, slack_bytes=3 << 20, slack_objects=200):
    """Runs `step` warmup times, then n times; RSS and live objects must not grow."""
    for _ in range(warmup):
        step()
    cai.synchronize()
    collect()
    r0, o0 = rss(), len(gc.get_objects())
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    cai.synchronize()
    collect()
    r1, o1 = rss(), len(gc.get_objects())
    took = time.perf_counter() - t0
    # Under ASan (scripts/sanitize.sh) freed memory sits in a quarantine: RSS says nothing.
    if not os.environ.get("CAI_SANITIZED"):
        assert r1 - r0 < slack_bytes, f"RSS grew by {(r1 - r0) / 1024:.0f} KiB over {n} cycles"
    assert o1 - o0 < slack_objects, f"{o1 - o0} more live Python objects after {n} cycles"
    return took


def test_no_growth_import_release_100k(src):
    d = src.__cuda_array_interface__
    p = Producer(d)

    def step():
        a = cai.as_cuda_array(p)
        del a

    no_growth(step, 100_000, 10_000)


def test_no_growth_export_100k(src):
    v = src[1:]

    def step():
        d = v.__cuda_array_interface__
        b = cai.from_cuda_array_interface(d, owner=v)
        del d, b

    no_growth(step, 100_000, 10_000)


def test_no_growth_dlpack_roundtrip_100k(src):
    w = DLWrapper(src)

    def step():
        b = cai.from_dlpack(w)        # a capsule exported, consumed and released
        del b

    no_growth(step, 100_000, 10_000)


def test_no_growth_unconsumed_capsules_100k(src):
    def step():
        c = src.__dlpack__(max_version=(1, 3), stream=-1)
        del c

    no_growth(step, 100_000, 10_000)


def test_no_growth_masked_import_20k(src):
    m = mask_of(src)
    p = Producer(src.__cuda_array_interface__ | {"mask": Producer(m.__cuda_array_interface__)})

    def step():
        a = cai.as_cuda_array(p)
        e = a.__cuda_array_interface__   # re-exports the mask as an object
        del a, e

    no_growth(step, 20_000, 2_000)


def test_no_growth_failed_imports_20k(src):
    bad = [Producer(src.__cuda_array_interface__ | {"stream": 0}),
           Producer(src.__cuda_array_interface__ | {"shape": "x"}),
           Producer(src.__cuda_array_interface__ | {"descr": [("a", "<f8")]})]

    def step():
        for p in bad:
            try:
                cai.as_cuda_array(p)
            except (TypeError, ValueError):
                pass

    no_growth(step, 20_000, 2_000)


def test_no_growth_device_allocations_20k():
    host = np.arange(64, dtype=np.float64)

    def step():
        a = cai.to_device(host)
        b = cai.from_dlpack(a, copy=True)
        cai.ops.add(a, b, b)
        del a, b

    no_growth(step, 20_000, 2_000)


def test_no_growth_streams_and_events_2k():
    def step():
        s = cai.stream(non_blocking=True)
        e = cai.event(timing=False)
        a = cai.device_array((8,), stream=s)
        cai.ops.fill(a, 1)
        e.record(s)
        e.wait(cai.default_stream())
        del s, e, a

    no_growth(step, 2_000, 200)

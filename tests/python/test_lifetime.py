"""Issue 4, lifetime: an imported array keeps its producer (or `owner`) alive until the last
view of it is gone, and no longer; cai's own memory and streams live as long as their users.
Checked with weakrefs (docs/core-interface.md, "Lifetime")."""

import weakref

import numpy as np
import pytest

import cai
from helpers import Producer, collect, kept


class Owner:
    """Something that owns memory; only its identity matters here."""


@pytest.fixture
def src():
    return cai.to_device(np.arange(24, dtype=np.float64).reshape(4, 6))


HOST = np.arange(24, dtype=np.float64).reshape(4, 6)


def test_as_cuda_array_keeps_the_producer_until_the_last_view(src):
    p = Producer(src)
    alive = weakref.ref(p)
    a = cai.as_cuda_array(p)
    del p
    assert kept(alive)
    v = a[1:, ::2]          # a view
    vv = v.T[::-1]          # a view of a view
    vvv = vv[None, ..., 0]  # and another
    del a, v
    assert kept(alive)
    np.testing.assert_array_equal(vvv.copy_to_host(), HOST[1:, ::2].T[::-1][None, ..., 0])
    del vv
    assert kept(alive)
    del vvv
    assert not kept(alive)


def test_views_made_by_slice_and_transpose_keep_the_producer(src):
    p = Producer(src)
    alive = weakref.ref(p)
    s = cai.as_cuda_array(p).slice(1, 2, 5).transpose()
    del p
    assert kept(alive)
    np.testing.assert_array_equal(s.copy_to_host(), HOST[:, 2:5].T)
    del s
    assert not kept(alive)


def test_failed_import_keeps_nothing(src):
    p = Producer(src, stream=0)
    alive = weakref.ref(p)
    with pytest.raises(ValueError):
        cai.as_cuda_array(p)
    del p
    assert not kept(alive)


def test_from_cuda_array_interface_keeps_the_owner(src):
    owner = Owner()
    alive = weakref.ref(owner)
    a = cai.from_cuda_array_interface(src.__cuda_array_interface__, owner=owner)
    del owner
    assert kept(alive)
    view = a[::-1]
    del a
    assert kept(alive)
    del view
    assert not kept(alive)


def test_from_cuda_array_interface_without_owner_keeps_nothing(src):
    # The dict has no slot for an owner: nothing but `owner` is kept.
    p = Producer(src)
    alive = weakref.ref(p)
    a = cai.from_cuda_array_interface(p.__cuda_array_interface__)
    del p
    assert not kept(alive)
    np.testing.assert_array_equal(a.copy_to_host(), HOST)  # src still owns the memory


def test_the_mask_object_is_kept_alive(src):
    m = Producer(cai.to_device(np.ones((4, 6), bool)))
    mask_alive = weakref.ref(m)
    a = cai.as_cuda_array(Producer(src, mask=m))
    del m
    assert kept(mask_alive)
    mask = a.mask[1:]
    del a
    assert kept(mask_alive)
    del mask
    assert not kept(mask_alive)


def test_exported_mask_keeps_the_mask_object(src):
    m = Producer(cai.to_device(np.ones((4, 6), bool)))
    mask_alive = weakref.ref(m)
    a = cai.as_cuda_array(Producer(src, mask=m))
    exported = a.__cuda_array_interface__["mask"]
    del m, a
    assert kept(mask_alive)
    del exported
    assert not kept(mask_alive)


def test_own_memory_lives_while_a_view_does():
    a = cai.to_device(np.arange(10.0))
    v = a[2:7][::2]
    alive = weakref.ref(a)
    del a
    collect()
    assert alive() is None  # the Python object may go ...
    np.testing.assert_array_equal(v.copy_to_host(), np.arange(10.0)[2:7][::2])  # ... not the memory
    cai.ops.fill(v, 5.0)
    np.testing.assert_array_equal(v.copy_to_host(), [5.0, 5.0, 5.0])


def test_producer_of_a_view_chain_through_foreign_objects(src):
    # cai -> foreign -> cai -> foreign -> cai: each level keeps the one below.
    p1 = Producer(src)
    a1 = cai.as_cuda_array(p1)
    p2 = Producer(a1[1:])
    a2 = cai.as_cuda_array(p2)
    w1, w2 = weakref.ref(p1), weakref.ref(p2)
    del p1, a1, p2
    collect()
    assert w1() is not None and w2() is not None
    np.testing.assert_array_equal(a2.copy_to_host(), HOST[1:])
    del a2
    collect()
    assert w1() is None and w2() is None


def test_stream_lives_as_long_as_its_arrays():
    s = cai.stream(non_blocking=True)
    handle = s.handle
    a = cai.device_array(8, dtype=np.int32, stream=s)
    del s
    collect()
    # The array still names the stream, and the stream still works.
    assert a.stream.handle == handle
    cai.ops.fill(a, 3)
    assert a.__cuda_array_interface__["stream"] == handle  # work is pending on it
    assert a.stream.handle == handle
    a.stream.synchronize()
    np.testing.assert_array_equal(a.copy_to_host(), np.full(8, 3, np.int32))


def test_foreign_stream_object_is_kept_while_used():
    s = cai.stream(non_blocking=True)

    class ForeignStream:
        def __cuda_stream__(self):
            return (0, s.handle)

    fs = ForeignStream()
    alive = weakref.ref(fs)
    a = cai.device_array(4, stream=fs)
    del fs
    collect()
    assert alive() is not None  # the array's default stream is the foreign one
    cai.ops.fill(a, 1.0)
    np.testing.assert_array_equal(a.copy_to_host(), np.ones(4))
    del a
    assert not kept(alive)


def test_reading_the_attribute_does_not_keep_anything():
    a = cai.device_array(4)
    alive = weakref.ref(a)
    d = a.__cuda_array_interface__
    del a
    assert not kept(alive)
    assert d["shape"] == (4,)

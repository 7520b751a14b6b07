"""Arrays and streams between numba-cuda and cai, both ways, on one driver: zero copy (the same
device pointer), values, views, and the producer's stream honoured by the consumer."""

import numpy as np
import pytest
from numba import cuda

import cai


def ptr_of(obj):
    return obj.__cuda_array_interface__["data"][0]


def test_numba_array_into_cai_is_the_same_memory():
    src = np.arange(24, dtype=np.float32).reshape(4, 6)
    n = cuda.to_device(src)
    c = cai.as_cuda_array(n)
    assert ptr_of(c) == ptr_of(n)
    assert c.shape == (4, 6) and c.dtype == np.float32
    np.testing.assert_array_equal(c.copy_to_host(), src)
    # cai writes, numba reads what cai wrote (ordered through the exported stream).
    cai.ops.fill(c, 7.0)
    np.testing.assert_array_equal(n.copy_to_host(), np.full((4, 6), 7, np.float32))


def test_numba_view_into_cai_keeps_offset_and_strides():
    src = np.arange(48, dtype=np.int32).reshape(6, 8)
    n = cuda.to_device(src)
    view = n[1:5, ::2]
    c = cai.as_cuda_array(view)
    assert ptr_of(c) == ptr_of(view)
    assert c.strides == view.strides
    np.testing.assert_array_equal(c.copy_to_host(), src[1:5, ::2])


def test_cai_array_into_numba_and_back():
    src = np.linspace(0, 1, 30, dtype=np.float64).reshape(5, 6)
    c = cai.to_device(src)
    n = cuda.as_cuda_array(c)
    assert ptr_of(n) == ptr_of(c)
    np.testing.assert_array_equal(n.copy_to_host(), src)
    # numba writes (a copy from the host), cai reads it.
    n.copy_to_device(np.zeros_like(src))
    np.testing.assert_array_equal(c.copy_to_host(), np.zeros_like(src))
    again = cai.as_cuda_array(n)
    assert ptr_of(again) == ptr_of(c)


def test_cai_transposed_view_into_numba():
    src = np.arange(12, dtype=np.float32).reshape(3, 4)
    c = cai.to_device(src).T
    n = cuda.as_cuda_array(c)
    assert n.strides == c.strides
    np.testing.assert_array_equal(n.copy_to_host(), src.T)


def test_numba_array_through_dlpack_when_numba_has_it():
    n = cuda.to_device(np.arange(10, dtype=np.int64))
    if not hasattr(n, "__dlpack__"):
        pytest.skip("this numba-cuda's arrays have no __dlpack__")
    c = cai.from_dlpack(n)
    assert ptr_of(c) == ptr_of(n)
    np.testing.assert_array_equal(c.copy_to_host(), np.arange(10))


def test_cai_array_into_numba_through_dlpack_capsule_pointer():
    # numba-cuda consumes the CAI; DLPack from cai is checked against cuda.core instead.
    c = cai.to_device(np.arange(6, dtype=np.uint8))
    assert hasattr(c, "__dlpack__")
    n = cuda.as_cuda_array(c)
    np.testing.assert_array_equal(n.copy_to_host(), np.arange(6, dtype=np.uint8))


def test_numba_stream_into_cai_and_cai_stream_into_numba():
    ns = cuda.stream()
    assert hasattr(ns, "__cuda_stream__")
    # cai takes numba's stream as an object with __cuda_stream__ and as its integer handle.
    x = cai.device_array(16, dtype=np.float32, stream=ns)
    cai.ops.fill(x, 3.0, stream=ns)
    ours = cai.external_stream(ns.__cuda_stream__()[1])
    cai.ops.fill(x[8:], 4.0, stream=ours)
    ns.synchronize()  # numba's wait on its own stream covers cai's work on it
    np.testing.assert_array_equal(x.copy_to_host(), [3.0] * 8 + [4.0] * 8)
    # The other way: numba takes cai's stream, by handle and by __cuda_stream__.
    cs = cai.stream(non_blocking=True)
    ext = cuda.external_stream(int(cs))
    n = cuda.to_device(np.arange(16, dtype=np.float32), stream=ext)
    ext.synchronize()
    np.testing.assert_array_equal(cai.as_cuda_array(n).copy_to_host(), np.arange(16))

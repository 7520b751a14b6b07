"""cai arrays viewed by cuda.core (StridedMemoryView, through the CAI and through DLPack), and
cuda.core's streams and buffers used by cai, on one driver."""

import numpy as np

import cai


def test_strided_memory_view_of_a_cai_array(core_device):
    from cuda.core.utils import StridedMemoryView

    src = np.arange(20, dtype=np.float32).reshape(4, 5)
    c = cai.to_device(src)
    stream = core_device.create_stream()
    for view in (StridedMemoryView.from_cuda_array_interface(c, stream_ptr=int(stream.handle)),
                 StridedMemoryView.from_dlpack(c, stream_ptr=int(stream.handle))):
        assert view.ptr == c.__cuda_array_interface__["data"][0]
        assert tuple(view.shape) == (4, 5)
        assert view.device_id == 0
        assert view.is_device_accessible


def test_strided_memory_view_of_a_cai_view(core_device):
    from cuda.core.utils import StridedMemoryView

    c = cai.to_device(np.arange(24, dtype=np.int16).reshape(4, 6))[:, 1::2]
    view = StridedMemoryView.from_cuda_array_interface(c, stream_ptr=-1)
    assert view.ptr == c.__cuda_array_interface__["data"][0]
    assert tuple(view.shape) == (4, 3)
    # StridedMemoryView's strides are in elements.
    assert tuple(view.strides) == tuple(s // 2 for s in c.strides)


def test_cuda_core_stream_orders_cai_work(core_device):
    stream = core_device.create_stream()
    x = cai.device_array(32, dtype=np.float32, stream=stream)  # __cuda_stream__
    cai.ops.fill(x, 2.0, stream=stream)
    stream.sync()
    np.testing.assert_array_equal(x.copy_to_host(), np.full(32, 2, np.float32))
    assert cai.external_stream(int(stream.handle)).query()


def test_cai_stream_into_cuda_core(core_device):
    cs = cai.stream(non_blocking=True)
    theirs = core_device.create_stream(cs)  # cuda.core wraps an object with __cuda_stream__
    assert int(theirs.handle) == int(cs)
    x = cai.device_array(8, dtype=np.int32, stream=cs)
    cai.ops.fill(x, 5, stream=cs)
    theirs.sync()
    np.testing.assert_array_equal(x.copy_to_host(), np.full(8, 5, np.int32))


def test_cuda_core_buffer_into_cai(core_device):
    stream = core_device.create_stream()
    buf = core_device.allocate(64, stream=stream)
    # A buffer of the stream-ordered pool, exported to cai as a CAI object.

    class View:
        __cuda_array_interface__ = {
            "shape": (16,), "typestr": "<f4", "data": (int(buf.handle), False), "version": 3,
            "stream": int(stream.handle),
        }

    c = cai.as_cuda_array(View())
    cai.ops.fill(c, 1.5)
    np.testing.assert_array_equal(c.copy_to_host(), np.full(16, 1.5, np.float32))
    del c
    cai.synchronize()
    buf.close(stream)
    stream.sync()

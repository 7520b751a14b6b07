"""Zero-copy exchange with CuPy, PyTorch, JAX, numba-cuda and cuda.core, both ways, for every
layout (C, F, stepped, negative strides, 0-d, empty), the common dtypes, and bfloat16 through
DLPack.

"Zero-copy" is checked twice: the two sides report the same address, and a write through one
side is read back through the other (the importing side writes through the imported view, the
exporting side reads its whole base allocation, so a wrong stride or a stray byte shows too).
A foreign consumer that cannot take a case from CuPy either is skipped with its own error
(gpu_helpers.peer_limitation); cai's share of every case must pass.
"""

import numpy as np
import pytest

import cai
from gpu_helpers import (
    CUDA_CORE,
    DTYPES,
    LAYOUTS,
    PEERS,
    OnlyCAI,
    exported,
    is_numba_error,
    optional_import,
    peer,
    peer_limitation,
    ptr_of_view,
    reference,
    significant_strides,
    strided_memory_view,
    strided_memory_view_class,
    values,
)

pytestmark = pytest.mark.usefixtures("warm")


def every_case(test):
    """Parametrizes `test` over every peer, protocol, layout and dtype."""
    for name, cases in (("dtype", DTYPES), ("layout", LAYOUTS), ("protocol", ["cai", "dlpack"]),
                        ("peer_name", PEERS)):
        test = pytest.mark.parametrize(name, cases)(test)
    return test


def check_metadata(shape, strides, ptr, host_view, host_base, base_ptr):
    assert tuple(shape) == host_view.shape
    assert significant_strides(shape, strides) == significant_strides(host_view.shape,
                                                                      host_view.strides)
    expected_ptr = ptr_of_view(host_view, host_base, base_ptr)
    if expected_ptr is not None:
        assert ptr == expected_ptr, "not the same memory: the exchange copied"


@every_case
def test_peer_array_into_cai(peer_name, protocol, layout, dtype):
    p = peer(peer_name, exports=protocol)
    host_base, view, expect = reference(layout, dtype)
    base = p.make(host_base)
    x = p.view(base, layout)
    try:  # the producer's own export: a failure here is the producer's limitation
        x.__cuda_array_interface__ if protocol == "cai" else x.__dlpack__(stream=None)
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"{peer_name} cannot export this case: {type(e).__name__}: {e}")

    a = cai.as_cuda_array(OnlyCAI(x)) if protocol == "cai" else cai.from_dlpack(x)

    host_view = view(host_base)
    check_metadata(a.shape, a.strides, a.ptr, host_view, host_base, p.ptr(base))
    assert a.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(a.copy_to_host(), expect)  # what the peer wrote

    if a.readonly:  # JAX exports read-only: cai must refuse writes
        assert not p.writable_imports
        with pytest.raises(ValueError):
            a[...] = expect
        return
    new = values(dtype, a.shape, seed=2)
    a[...] = new  # through cai's view of the peer's memory
    cai.synchronize()
    expected_base = host_base.copy()
    view(expected_base)[...] = new
    np.testing.assert_array_equal(p.to_host(base), expected_base)


@every_case
def test_cai_array_into_peer(peer_name, protocol, layout, dtype):
    p = peer(peer_name, imports=protocol)
    host_base, view, expect = reference(layout, dtype)
    base = cai.to_device(host_base)
    a = view(base)

    def consume_and_read(obj):
        y = p.consume(obj, protocol)
        return y, p.to_host(y)

    with peer_limitation(p, protocol, layout, dtype, consume_and_read):
        y, seen = consume_and_read(exported(a, protocol))
    host_view = view(host_base)
    assert tuple(y.shape) == host_view.shape
    np.testing.assert_array_equal(np.asarray(seen), expect)  # what cai wrote
    if host_view.size and p.ptr(y) != a.ptr:
        def consume_without_copy(obj):  # obj: a CuPy array behind one protocol
            assert p.ptr(p.consume(obj, protocol)) == obj.obj.data.ptr

        with peer_limitation(p, protocol, layout, dtype, consume_without_copy):
            raise AssertionError(f"{peer_name} copied cai's array ({protocol}, {layout})")
    assert significant_strides(y.shape, p.strides(y)) == significant_strides(
        host_view.shape, host_view.strides)

    if not p.writable_imports:
        return
    new = values(dtype, host_view.shape, seed=2)
    try:
        p.write(y, new)  # through the peer's view of cai's memory
    except Exception as e:  # noqa: BLE001
        if peer_name == "numba" and is_numba_error(e):
            pytest.skip(f"numba-cuda failed in its own code: {type(e).__name__}: {e}")
        raise
    _synchronize_peer(peer_name)
    expected_base = host_base.copy()
    view(expected_base)[...] = new
    np.testing.assert_array_equal(base.copy_to_host(), expected_base)


def _synchronize_peer(name):
    if name == "torch":
        peer("torch").torch.cuda.synchronize()
    elif name == "cupy":
        peer("cupy").cp.cuda.Device().synchronize()
    cai.synchronize()


# ----- cuda.core ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("protocol", ["cai", "dlpack"])
def test_cai_array_into_cuda_core(protocol, layout, dtype):
    """StridedMemoryView has no data access: zero-copy is its address, shape, element strides
    and dtype being cai's; the data are then read back through the view's address."""
    smv = strided_memory_view_class()
    host_base, view, expect = reference(layout, dtype)
    base = cai.to_device(host_base)
    a = view(base)
    stream = cai.stream(non_blocking=True)

    def view_of(obj):
        return strided_memory_view(smv, obj, protocol, stream.handle)

    with peer_limitation(CUDA_CORE, protocol, layout, dtype, lambda obj: view_of(obj.obj)):
        v = view_of(a)
    host_view = view(host_base)
    assert tuple(v.shape) == host_view.shape
    assert np.dtype(v.dtype) == np.dtype(dtype)
    assert not v.readonly
    if host_view.size:
        assert v.ptr == a.ptr
        strides = v.strides
        if strides is None:  # C-contiguous
            c_strides = np.empty(host_view.shape, dtype).strides
            strides = tuple(s // host_view.itemsize for s in c_strides)
        assert significant_strides(v.shape, [s * host_view.itemsize for s in strides]) == \
            significant_strides(host_view.shape, host_view.strides)
        stream.synchronize()
        seen = cai.from_cuda_array_interface(
            {"shape": tuple(v.shape), "typestr": np.dtype(dtype).str, "version": 3,
             "data": (v.ptr, False),
             "strides": tuple(s * host_view.itemsize for s in strides)}, owner=v)
        np.testing.assert_array_equal(seen.copy_to_host(), expect)


def test_cuda_core_buffer_into_cai():
    """A cuda.core Buffer (DLPack producer) imported by cai, written by cai, read by CuPy."""
    core = optional_import("cuda.core")
    device = core.Device(0)
    device.set_current()
    stream = device.default_stream
    try:
        buffer = device.allocate(4096, stream=stream)
    except TypeError:  # releases whose allocate() takes no stream
        buffer = device.allocate(4096)
    stream.sync()  # the Buffer's __dlpack__ ignores the consumer's stream: the caller orders
    a = cai.from_dlpack(buffer)
    assert a.ptr == int(buffer.handle)
    assert a.nbytes == 4096
    cai.ops.fill(a, 0x5A)
    cai.synchronize()
    cp = peer("cupy").cp
    np.testing.assert_array_equal(cp.asnumpy(cp.from_dlpack(buffer)).view(np.uint8),
                                  np.full(4096, 0x5A, np.uint8))


# ----- bfloat16 through DLPack --------------------------------------------------------------------


def test_bfloat16_torch_cai_torch():
    torch = peer("torch").torch
    t = torch.arange(24, dtype=torch.bfloat16, device="cuda").reshape(4, 6)[:, ::2]
    a = cai.from_dlpack(t)
    assert a.ptr == t.data_ptr() and a.shape == (4, 3) and a.itemsize == 2
    assert a.strides == (12, 4)
    assert a.__cuda_array_interface__["typestr"] == "<V2"  # what PyTorch and ml_dtypes write
    u = torch.from_dlpack(a)
    assert u.dtype == torch.bfloat16 and u.data_ptr() == t.data_ptr()
    t.fill_(2.5)  # written through the producer, read through cai's re-export
    torch.cuda.synchronize()
    assert torch.equal(u.cpu(), torch.full((4, 3), 2.5, dtype=torch.bfloat16))
    raw = a.copy_to_host()  # the bytes, whatever host type cai gives them
    assert raw.itemsize == 2
    np.testing.assert_array_equal(raw.view(np.uint16), np.full((4, 3), 0x4020, np.uint16))


def test_bfloat16_jax_cai_jax():
    jp = peer("jax")
    x = jp.jnp.arange(6, dtype=jp.jnp.bfloat16) * 0.5
    a = cai.from_dlpack(x)
    assert a.ptr == x.unsafe_buffer_pointer() and a.itemsize == 2
    y = jp.from_dlpack(a)
    assert y.dtype == jp.jnp.bfloat16
    assert y.unsafe_buffer_pointer() == a.ptr
    np.testing.assert_array_equal(np.asarray(y, dtype=np.float32), np.arange(6) * 0.5)


def test_bfloat16_torch_to_jax_through_cai():
    torch = peer("torch").torch
    jp = peer("jax")
    t = torch.linspace(-1, 1, 8, dtype=torch.bfloat16, device="cuda")
    a = cai.from_dlpack(t)
    y = jp.from_dlpack(a)
    assert y.dtype == jp.jnp.bfloat16 and y.unsafe_buffer_pointer() == t.data_ptr()
    np.testing.assert_array_equal(np.asarray(y, dtype=np.float32), t.float().cpu().numpy())

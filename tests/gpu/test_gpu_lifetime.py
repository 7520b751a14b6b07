"""Lifetime on real allocators: a view keeps its producer's memory, and lets it go when it dies.

CuPy's memory pool and PyTorch's caching allocator hand a freed block out again at once, so a
view that did not keep its producer would read someone else's data; their counters
(`used_bytes`, `memory_allocated`) say exactly when the block is released. cai frees with
cuMemFree, which the driver's free-memory count shows.
"""

import gc

import numpy as np
import pytest

import cai
from gpu_helpers import peer

N = 1 << 20  # float32 elements: 4 MiB
BIG = 16 << 20  # float32 elements: 64 MiB, well above the driver's allocation granularity

pytestmark = pytest.mark.usefixtures("warm")

IMPORTS = {"cai": cai.as_cuda_array, "dlpack": cai.from_dlpack}


def assert_released_when(drop, nbytes):
    """`drop()` gives `nbytes` of device memory back to the driver (its free-memory count rises
    by that much, to within the allocation granularity)."""
    get_info = peer("cupy").cp.cuda.runtime.memGetInfo
    gc.collect()
    cai.synchronize()
    free = get_info()[0]
    drop()
    gc.collect()
    cai.synchronize()
    released = get_info()[0] - free
    assert released >= nbytes - (2 << 20), f"only {released} of {nbytes} bytes came back"


@pytest.mark.parametrize("protocol", IMPORTS)
def test_cupy_producer_dropped_while_a_cai_view_lives(protocol):
    cp = peer("cupy").cp
    pool = cp.get_default_memory_pool()
    x = cp.arange(N, dtype=cp.float32)
    cp.cuda.Device().synchronize()
    used = pool.used_bytes()
    a = IMPORTS[protocol](x[::2])
    del x
    gc.collect()
    assert pool.used_bytes() == used, "CuPy took its block back while cai's view lives"
    tempt = [cp.full(N, -1, dtype=cp.float32) for _ in range(3)]  # would reuse a freed block
    cp.cuda.Device().synchronize()
    np.testing.assert_array_equal(a.copy_to_host(), np.arange(N, dtype=np.float32)[::2])
    del a
    gc.collect()
    assert pool.used_bytes() == used - 4 * N + 3 * 4 * N, "the producer was not released"
    del tempt


@pytest.mark.parametrize("protocol", IMPORTS)
def test_torch_producer_dropped_while_a_cai_view_lives(protocol):
    torch = peer("torch").torch
    t = torch.arange(N, dtype=torch.float32, device="cuda")
    torch.cuda.synchronize()
    allocated = torch.cuda.memory_allocated()
    a = IMPORTS[protocol](t[::2])
    del t
    gc.collect()
    assert torch.cuda.memory_allocated() == allocated
    tempt = torch.full((N,), -1.0, device="cuda")
    torch.cuda.synchronize()
    np.testing.assert_array_equal(a.copy_to_host(), np.arange(N, dtype=np.float32)[::2])
    del a
    gc.collect()
    assert torch.cuda.memory_allocated() == allocated, "the tensor was not released"
    del tempt


CONSUMERS = {
    "cupy.asarray": lambda x: peer("cupy").cp.asarray(x),
    "cupy.from_dlpack": lambda x: peer("cupy").cp.from_dlpack(x),
    "torch.as_tensor": lambda x: peer("torch").torch.as_tensor(x, device="cuda"),
    "torch.from_dlpack": lambda x: peer("torch").torch.from_dlpack(x),
}


def to_numpy(y):
    if hasattr(y, "get"):
        return y.get()
    return y.cpu().numpy()


@pytest.mark.parametrize("consumer", CONSUMERS)
def test_cai_producer_dropped_while_a_foreign_view_lives(consumer):
    consume = CONSUMERS[consumer]
    consume(cai.to_device(np.zeros(1, np.float32)))  # skips now if the library is missing
    a = cai.to_device(np.arange(BIG, dtype=np.float32))
    y = consume(a[::2])
    del a
    gc.collect()
    tempt = [cai.device_array(BIG, dtype=np.float32) for _ in range(2)]
    for t in tempt:
        cai.ops.fill(t, -1.0)
    cai.synchronize()
    np.testing.assert_array_equal(to_numpy(y), np.arange(BIG, dtype=np.float32)[::2])
    del tempt
    views = [y]
    del y
    assert_released_when(views.clear, 4 * BIG)


def test_unconsumed_capsule_frees_the_array():
    a = cai.to_device(np.arange(BIG, dtype=np.float32))
    capsules = [a.__dlpack__(stream=None)]
    del a
    assert_released_when(capsules.clear, 4 * BIG)


def test_foreign_capsule_is_released_once_by_cai():
    """cai consumes a PyTorch capsule (renamed used_dltensor*); the deleter runs exactly once,
    when the last cai view goes: memory_allocated falls back by the tensor's size, once."""
    torch = peer("torch").torch
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    t = torch.ones(N, device="cuda")
    a = cai.from_dlpack(t)
    views = [a[1:], a[::3], a.T]
    del t, a
    gc.collect()
    assert torch.cuda.memory_allocated() == before + 4 * N
    del views
    gc.collect()
    assert torch.cuda.memory_allocated() == before

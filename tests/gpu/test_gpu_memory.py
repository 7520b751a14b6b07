"""No device memory is kept by thousands of exchanges (imports, exports, capsules, operations on
foreign arrays): each library's own counter and the driver's free memory are compared after a
warm-up and after the loop."""

import gc

import numpy as np
import pytest

import cai
from gpu_helpers import peer

pytestmark = pytest.mark.usefixtures("warm")

ROUNDS = 2000
WARMUP = 50
SLACK = 8 << 20  # driver-level noise (events, module data); one leak per round is far more


def cupy_round(cp, stream):
    x = cp.empty(1024, dtype=cp.float32)
    b = cai.device_array(1024, dtype=np.float32)
    cai.as_cuda_array(x)
    cai.from_dlpack(x)
    cp.asarray(b)
    cp.from_dlpack(b)
    b.__dlpack__(stream=None)  # a capsule nobody consumes
    cai.ops.add(x, x, b, stream=stream)


def torch_round(torch, stream):
    t = torch.empty(1024, device="cuda")
    b = cai.device_array(1024, dtype=np.float32)
    cai.as_cuda_array(t)
    cai.from_dlpack(t)
    torch.as_tensor(b, device="cuda")
    torch.from_dlpack(b)
    cai.ops.add(t, t, b, stream=stream)


def counters(name):
    """(the library's own count of bytes in use, the driver's free bytes), with nothing pending."""
    gc.collect()
    cai.synchronize()
    if name == "cupy":
        cp = peer("cupy").cp
        return cp.get_default_memory_pool().used_bytes(), cp.cuda.runtime.memGetInfo()[0]
    torch = peer("torch").torch
    return torch.cuda.memory_allocated(), torch.cuda.mem_get_info()[0]


@pytest.mark.parametrize("name", ["cupy", "torch"])
def test_no_device_memory_growth(name):
    p = peer(name)
    lib, one_round = (p.cp, cupy_round) if name == "cupy" else (p.torch, torch_round)
    stream = cai.stream(non_blocking=True)
    for _ in range(WARMUP):
        one_round(lib, stream)
    own_before, free_before = counters(name)
    for _ in range(ROUNDS):
        one_round(lib, stream)
    own_after, free_after = counters(name)
    assert own_after == own_before, f"{name} still holds {own_after - own_before} bytes"
    assert free_before - free_after < SLACK, (
        f"the driver lost {free_before - free_after} bytes over {ROUNDS} rounds")

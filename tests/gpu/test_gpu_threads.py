"""Several threads import, operate and export at once, each on its own streams; every result is
checked, and no thread may hang (joined with a timeout)."""

import threading

import numpy as np
import pytest

import cai
from gpu_helpers import peer

pytestmark = pytest.mark.usefixtures("warm")

THREADS = 8
ITERATIONS = 100
N = 4096


def cupy_worker(tid, errors):
    cp = peer("cupy").cp
    ps = cp.cuda.Stream(non_blocking=True)
    cs = cai.stream(non_blocking=True)
    for i in range(ITERATIONS):
        value = tid * 1000 + i
        with ps:
            x = cp.full(N, value, dtype=cp.float32)
            out = cai.device_array(N, dtype=np.float32, stream=cs)
            cai.ops.add(cai.as_cuda_array(x), x, out, stream=cs)  # CAI import, ordered after ps
            got = cp.from_dlpack(out).get()  # DLPack export, ordered before ps
        if not (got == 2 * value).all():
            errors.append(f"thread {tid} iteration {i}: {np.unique(got)[:4]} != {2 * value}")
            return


def torch_worker(tid, errors):
    torch = peer("torch").torch
    ts = torch.cuda.Stream()
    cs = cai.stream(non_blocking=True)
    for i in range(ITERATIONS):
        value = tid * 1000 + i
        with torch.cuda.stream(ts):
            t = torch.full((N,), float(value), device="cuda")
            out = cai.device_array(N, dtype=np.float32, stream=cs)
            a = cai.from_dlpack(t)  # ordered after ts by PyTorch's __dlpack__
            cai.ops.add(a, a, out, stream=cs)
            got = torch.from_dlpack(out).cpu().numpy()
        if not (got == 2 * value).all():
            errors.append(f"thread {tid} iteration {i}: {np.unique(got)[:4]} != {2 * value}")
            return


@pytest.mark.parametrize("name", ["cupy", "torch"])
def test_threads_exchange_concurrently(name):
    peer(name)  # skips here, not in the threads, when the library is missing
    worker = cupy_worker if name == "cupy" else torch_worker
    errors = []

    def run(tid):
        try:
            worker(tid, errors)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(f"thread {tid}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=run, args=(tid,)) for tid in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hangs"
    assert not errors, errors[:5]

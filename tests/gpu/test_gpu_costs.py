"""What importing and operating on CuPy and PyTorch arrays costs on the GPU, counted with
`cai.device_call_counts()` (docs/architecture.md, "What an import costs"; docs/cuda-backend.md,
"Memory checks"): an import makes no driver call; operations on the memory of a library's pool
ask the driver about it once, not at every use."""

import numpy as np
import pytest

import cai

pytestmark = pytest.mark.usefixtures("warm")

N = 1000


def take_counts():
    c = cai.device_call_counts()
    cai.reset_device_call_counts()
    return c


def arrays(lib):
    """Three float32 arrays of the library: 0..N-1, 1, and zeros (the output)."""
    if lib == "cupy":
        cp = pytest.importorskip("cupy")
        return (cp.arange(N, dtype=cp.float32), cp.ones(N, dtype=cp.float32),
                cp.zeros(N, dtype=cp.float32))
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no GPU")
    return (torch.arange(N, dtype=torch.float32, device="cuda"),
            torch.ones(N, dtype=torch.float32, device="cuda"),
            torch.zeros(N, dtype=torch.float32, device="cuda"))


@pytest.mark.parametrize("lib", ["cupy", "torch"])
def test_an_import_makes_no_driver_call(lib):
    xs = arrays(lib)
    take_counts()
    views = [cai.as_cuda_array(x) for x in xs]
    c = take_counts()
    assert (c["event_record"], c["stream_wait_event"], c["pointer_query"]) == (0, 0, 0), c
    assert [v.shape for v in views] == [(N,)] * 3


@pytest.mark.parametrize("lib", ["cupy", "torch"])
def test_operations_on_a_pool_ask_the_driver_once(lib):
    a, b, out = arrays(lib)
    cai.synchronize()
    take_counts()
    cai.ops.add(a, b, out)  # first use: each pool block is asked about once at most
    assert take_counts()["pointer_query"] <= 3
    for _ in range(10):
        cai.ops.add(a, b, out)
    c = take_counts()
    assert c["pointer_query"] == 0, c
    np.testing.assert_array_equal(cai.as_cuda_array(out).copy_to_host(),
                                  np.arange(N, dtype=np.float32) + 1)

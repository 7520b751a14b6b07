"""The GPU suite: cai against the real libraries on a real GPU (docs/gpu.md).

Forces cai's CUDA backend before cai is imported; every test here is skipped, with the reason,
where that backend cannot start (no driver, no GPU), so the suite passes with skips elsewhere.
Each foreign library is imported by the test that needs it (gpu_helpers.peer), and skips that
test where it is missing.
"""

import os

os.environ["CAI_BACKEND"] = "cuda"
os.environ.pop("CAI_CUDA_ARRAY_INTERFACE_SYNC", None)
os.environ.pop("CAI_EXPORT_STREAM", None)
# JAX takes 75% of the GPU memory at start by default; the other libraries need some too.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import gc  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import cai  # noqa: E402


def _why_no_cuda():
    try:
        name = cai.backend()
    except Exception as e:  # noqa: BLE001 - the backend says why it cannot start
        return f"cai's CUDA backend is not available: {e}"
    return None if name == "cuda" else f"cai runs on the {name!r} backend, not 'cuda'"


NO_CUDA = _why_no_cuda()


@pytest.fixture(autouse=True)
def _cuda_backend_and_clean_switches():
    """Skips without the CUDA backend; leaves the device idle and the switches at their
    defaults after every test."""
    if NO_CUDA:
        pytest.skip(NO_CUDA)
    yield
    try:
        cai.synchronize()
    finally:
        cai.config.reset()


@pytest.fixture(scope="session")
def warm():
    """Runs every cai operation once, so that one-time costs (loading the kernels) are not
    inside a measured window. Returns nothing."""
    if NO_CUDA:
        pytest.skip(NO_CUDA)
    a = cai.to_device(np.arange(64, dtype=np.float32).reshape(8, 8))
    b = cai.device_array_like(a)
    cai.ops.copy(b, a)
    cai.ops.copy(b, a.T)
    cai.ops.fill(b, 1.0)
    cai.ops.add(a, a.T, b)
    e = cai.event()
    e.record()
    e.wait(cai.stream(non_blocking=True))
    cai.synchronize()
    gc.collect()


@pytest.fixture(scope="session")
def spinner(warm):
    import gpu_helpers

    return gpu_helpers.Spinner()


@pytest.fixture
def no_gc():
    """Collects now, then keeps the collector off for the test: a collection inside a scenario
    could free cai memory, and cuMemFree waits for the device (a spinning producer included),
    which would look like a blocking import."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


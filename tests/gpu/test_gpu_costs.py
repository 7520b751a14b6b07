"""What importing and operating on CuPy and PyTorch arrays costs on the GPU, counted with
`cai.device_call_counts()` (docs/architecture.md, "What an import costs"; docs/cuda-backend.md,
"Memory checks"; src/sync/ordering.cpp):

- an import on a default stream makes no driver call: CuPy names its current stream, the
  legacy stream (1) by default, and PyTorch's CAI (version 2) names none;
- an import from a foreign non-default stream (CuPy's current non-default stream) that is busy
  records one event on it (cuEventRecord) and waits for nothing; an idle one records none; a later use on another stream costs one
  cuStreamWaitEvent for that event, and after the work the legacy stream waits for it (one
  record, one wait: the reverse wait, never on the producer's stream); a use on the producer's
  own stream costs nothing;
- operations on the memory of a library's caching pool ask the driver about it once, not at
  every use."""

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
def test_an_import_on_the_default_stream_makes_no_driver_call(lib):
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


def test_an_import_from_a_non_default_cupy_stream_records_one_event(spinner):
    cp = pytest.importorskip("cupy")
    x = cp.arange(N, dtype=cp.float32)
    ps = cp.cuda.Stream(non_blocking=True)
    cp.cuda.Device().synchronize()
    take_counts()
    with ps:  # idle: its work is complete, nothing to record
        cai.as_cuda_array(x)
    c = take_counts()
    assert (c["event_record"], c["stream_wait_event"]) == (0, 0), c
    spinner.spin(ps, 0.05)
    with ps:
        cai.as_cuda_array(x)  # the pool of import events has one now
    take_counts()
    spinner.spin(ps, 0.3)
    with ps:  # CAI v3: CuPy names its current stream, ps, busy
        y = cai.as_cuda_array(x)
    c = take_counts()
    assert (c["event_record"], c["event_create"], c["stream_wait_event"],
            c["pointer_query"]) == (1, 0, 0, 0), c
    # A use on another stream: it waits for the import's event; then the legacy stream waits
    # for that work (the pool block is asked about the first time only).
    cs = cai.stream(non_blocking=True)
    out = cai.device_array(N, dtype=np.float32, stream=cs)
    take_counts()
    cai.ops.copy(out, y, stream=cs)
    c = take_counts()
    assert (c["event_record"], c["stream_wait_event"]) == (1, 2), c
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(N, dtype=np.float32))
    # A use on the producer's own stream waits for nothing.
    with ps:
        z = cai.as_cuda_array(x)
    take_counts()
    cai.ops.fill(z, 1.0, stream=ps.ptr)
    c = take_counts()
    assert (c["event_record"], c["stream_wait_event"]) == (0, 0), c
    ps.synchronize()
    np.testing.assert_array_equal(cp.asnumpy(x), np.ones(N, np.float32))

"""A race between numba-cuda and cai caught by the simulated driver's race detector, both ways,
each with its negative control ordered by an event (simulator only: a GPU has no detector)."""

import numpy as np
import pytest
from numba import cuda
from numba.cuda.cudadrv.driver import CudaAPIError

import cai

ILLEGAL_STATE = 401  # CUDA_ERROR_ILLEGAL_STATE: how the simulator refuses a racing call


@pytest.fixture
def numba_write(on_simulator):
    """A numba copy queued on a numba stream, writing `dst`, not yet ordered with anything."""
    ns = cuda.stream()
    src = cuda.to_device(np.arange(64, dtype=np.float32), stream=ns)
    dst = cuda.device_array(64, dtype=np.float32, stream=ns)
    ns.synchronize()
    dst.copy_to_device(src, stream=ns)  # device to device: the host does not wait
    return ns, dst


def test_cai_write_racing_a_numba_copy_is_refused(numba_write):
    ns, dst = numba_write
    cs = cai.stream(non_blocking=True)
    with cai.config.override(CUDA_ARRAY_INTERFACE_SYNC=False):  # ignore numba's stream
        c = cai.as_cuda_array(dst)
    with pytest.raises(cai.RaceError, match="race: .*cuMemcpyDtoDAsync"):
        cai.ops.fill(c, 1.0, stream=cs)
    ns.synchronize()


def test_cai_write_ordered_by_an_event_is_accepted(numba_write):
    ns, dst = numba_write
    cs = cai.stream(non_blocking=True)
    with cai.config.override(CUDA_ARRAY_INTERFACE_SYNC=False):
        c = cai.as_cuda_array(dst)
    done = cuda.event(timing=False)
    done.record(ns)
    done.wait(cuda.external_stream(int(cs)))  # numba's event orders cai's stream
    cai.ops.fill(c, 1.0, stream=cs)
    cs.synchronize()
    np.testing.assert_array_equal(dst.copy_to_host(), np.ones(64, np.float32))


def test_cai_exported_stream_orders_numba_without_an_event(numba_write):
    # The CAI's own rule as the negative control of the first test: honouring numba's stream.
    ns, dst = numba_write
    c = cai.as_cuda_array(dst)
    cai.ops.fill(c, 2.0, stream=cai.stream(non_blocking=True))
    cai.synchronize()
    np.testing.assert_array_equal(dst.copy_to_host(), np.full(64, 2, np.float32))


def test_numba_copy_racing_a_cai_write_gets_a_documented_error(on_simulator):
    cs = cai.stream(non_blocking=True)
    c = cai.device_array(64, dtype=np.float32, stream=cs)
    cai.synchronize()
    cai.ops.fill(c, 3.0, stream=cs)  # queued on cai's stream
    ns = cuda.stream()
    with cai.config.override(EXPORT_STREAM=False):  # numba cannot see cai's stream
        n = cuda.as_cuda_array(c)
    other = cuda.device_array(64, dtype=np.float32, stream=ns)
    with pytest.raises(CudaAPIError) as e:
        n.copy_to_device(other, stream=ns)
    assert e.value.code == ILLEGAL_STATE  # a code of the driver's enum, never another value
    # Negative control: the same copy after an event of cai's stream.
    done = cai.event(timing=False)
    done.record(cs)
    done.wait(ns)  # cai's event orders numba's stream (by __cuda_stream__)
    n.copy_to_device(other, stream=ns)
    ns.synchronize()

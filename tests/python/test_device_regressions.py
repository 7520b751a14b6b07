"""Regressions of the device layer's rules seen from Python (issue 13 items 8, 10, 12):
docs/simulator.md ("The race detector", "Streams") and docs/cuda-backend.md ("Operations").
The state-size checks of stream churn are in the C++ suite (SimRaceTest)."""

import numpy as np
import pytest

import cai
from helpers import pending_fill


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.bool_])
def test_add_into_an_overlapping_out_matches_numpy(dtype):
    host = np.arange(1, 9).astype(dtype)
    x = cai.to_device(host)
    zeros = cai.to_device(np.zeros(8, dtype))
    cai.ops.add(x[::-1], zeros, x)
    np.testing.assert_array_equal(x.copy_to_host(), host[::-1] + np.zeros(8, dtype))
    # A shift by one element: NumPy's np.add(h[:-1], h[:-1], out=h[1:]).
    y = cai.to_device(host)
    cai.ops.add(y[:-1], y[:-1], y[1:])
    want = host.copy()
    np.add(want[:-1], want[:-1], out=want[1:])
    np.testing.assert_array_equal(y.copy_to_host(), want)


def test_switching_race_detection_on_again_keeps_the_history(streams):
    A, B = streams
    a, unordered = pending_fill(A, 64, np.float32, 1.0, delay=0.05)
    cai.sim.set_race_detection(True)  # already on: the fill on A is still remembered
    with pytest.raises(cai.RaceError, match=r"cai_fill_\w+ on stream"):
        cai.ops.fill(unordered, 2.0, stream=B)


def test_operations_on_short_lived_streams_stay_correct():
    a = cai.to_device(np.arange(100, dtype=np.float32))
    out = cai.device_array(100, np.float32)
    for _ in range(2000):
        s = cai.stream()
        cai.ops.add(a, a, out, stream=s)
        del s
    np.testing.assert_array_equal(out.copy_to_host(), 2 * np.arange(100, dtype=np.float32))

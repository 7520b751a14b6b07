"""Shared setup of the Python suite.

The simulator backend is forced before cai is imported (the machine has no GPU, and a GPU
machine must still run these tests on the simulator: they prove ordering with its race
detector). Fixtures: two non-blocking streams, and one that leaves the device idle and the
switches at their defaults after every test. Shared helpers (the foreign producer class) are in
helpers.py, which pytest's rootdir-relative sys.path entry makes importable as `helpers`.
"""

import os

os.environ["CAI_BACKEND"] = "sim"
os.environ.pop("CAI_CUDA_ARRAY_INTERFACE_SYNC", None)
os.environ.pop("CAI_EXPORT_STREAM", None)

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

import cai  # noqa: E402

settings.register_profile(
    "cai",
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    derandomize=False,
)
settings.load_profile("cai")


def pytest_unconfigure(config):
    """The arrays the foreign producers keep for the process go before exit (helpers.py)."""
    import helpers

    helpers.TypedDLPack.release_arrays()


@pytest.fixture
def streams():
    """Two non-blocking streams A and B: nothing orders them but events (blocking streams
    would also be ordered through the legacy default stream)."""
    return cai.stream(non_blocking=True), cai.stream(non_blocking=True)


@pytest.fixture(autouse=True)
def _clean_device():
    """Every test starts and ends with an idle device, the race detector on, default switches."""
    yield
    try:
        cai.synchronize()
    finally:
        cai.config.reset()
        cai.sim.set_race_detection(True)

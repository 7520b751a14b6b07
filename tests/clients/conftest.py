"""cai's interop tests with NVIDIA's driver-API clients (numba-cuda, cuda.core) over one driver.

Run by scripts/client-tests.sh over the simulated driver (LD_LIBRARY_PATH names its folder, so
numba-cuda, cuda.core and cai all load the same libcuda.so.1: one memory map, one set of
streams, one race detector), and by scripts/gpu-check.sh against NVIDIA's driver (no
LD_LIBRARY_PATH: the same tests, less the race detector's). They need numba-cuda and cuda.core
installed beside cai (requirements-clients.txt); without them they are skipped.
"""

import os

import pytest

numba_cuda = pytest.importorskip("numba.cuda", reason="numba-cuda is not installed")
cuda_core = pytest.importorskip("cuda.core", reason="cuda.core is not installed")

import cai  # noqa: E402


def pytest_report_header(config):  # noqa: ANN001, ARG001
    return (f"cai backend: {cai.backend()}; LD_LIBRARY_PATH="
            f"{os.environ.get('LD_LIBRARY_PATH', '')!r}")


@pytest.fixture(scope="session", autouse=True)
def _one_driver():
    """Every library here must be on the one driver of the process."""
    if not numba_cuda.is_available():
        pytest.skip("numba-cuda finds no CUDA driver")
    yield


@pytest.fixture
def on_simulator():
    """The race detector is the simulator's: tests of it skip on a GPU."""
    if not cai.sim.active():
        pytest.skip("the race detector is the simulated driver's")
    return True


@pytest.fixture
def core_device():
    from cuda.core import Device

    dev = Device(0)
    dev.set_current()
    return dev

"""Numba's names for devices and streams (docs/python.md, "Devices and streams as numba.cuda
names them"): cai.detect(), cai.gpus, cai.select_device() and Stream.auto_synchronize(); the
two-device cases are in test_devices.py. Also: cai's functions pickle by reference."""

import io
import os
import pickle
import subprocess
import sys
import threading

import cloudpickle
import numpy as np
import pytest

import cai
from cai import _cai


def test_detect_prints_the_backend_and_each_device():
    out = io.StringIO()
    assert cai.detect(file=out) is True
    lines = out.getvalue().splitlines()
    assert lines[0] == "Found 1 device(s) on the simulator backend (forced by CAI_BACKEND=sim)"
    assert lines[1].startswith("  device 0: cai simulator, simulated, ")
    assert lines[-1] == "Summary: 1/1 device(s) usable"


@pytest.mark.skipif(cai._cai.cuda_available(), reason="a CUDA driver is present")
def test_detect_says_false_when_no_backend_can_run():
    r = subprocess.run([sys.executable, "-c", "import cai; print(cai.detect())"],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, CAI_BACKEND="cuda"))
    assert r.returncode == 0, r.stderr
    first, *_, last = r.stdout.splitlines()
    assert first.startswith("No usable backend: ") and last == "False"


def test_gpus_on_one_device():
    assert len(cai.gpus) == 1 and cai.gpus[0] == cai.Device(0) == cai.gpus.current
    assert repr(cai.gpus) == "<cai.gpus: <cai.Device 0 (simulator)>>"
    with cai.gpus[0] as d:
        assert d == cai.current_device()
    with pytest.raises(ValueError, match="device 1 out of range"):
        cai.select_device(1)
    assert cai.select_device(0) == cai.Device(0)


def test_auto_synchronize_waits_for_the_stream_at_the_end_of_the_block():
    s = cai.stream(non_blocking=True)
    a = cai.device_array(1000, stream=s)
    gate = cai.sim.hold(s)
    with s.auto_synchronize() as same:
        assert same is s
        a[...] = 1.0
        assert not s.query()                  # queued, not done
        # The end of the block waits: released from another thread meanwhile.
        threading.Thread(target=gate.release).start()
    assert s.query()                          # the end of the block waited


def test_auto_synchronize_does_not_wait_after_an_exception():
    s = cai.stream(non_blocking=True)
    with pytest.raises(KeyError):
        with s.auto_synchronize():
            gate = cai.sim.hold(s)
            raise KeyError
    assert not s.query()                      # as Numba: the error propagates at once
    gate.release()
    s.synchronize()


@pytest.mark.parametrize("function", [cai.to_device, cai.device_array, cai.from_dlpack,
                                      cai.ops.add, cai.sim.delay, _cai.core.parse_typestr,
                                      cai.DeviceNDArray.copy_to_host, cai.select_device])
@pytest.mark.parametrize("dumps", [lambda f: pickle.dumps(f, protocol=2),
                                   lambda f: pickle.dumps(f, protocol=5), cloudpickle.dumps],
                         ids=["pickle-2", "pickle-5", "cloudpickle"])
def test_functions_pickle_by_reference(function, dumps):
    data = dumps(function)
    assert pickle.loads(data) is function
    assert len(data) < 200                    # a name, not the function's code


def test_a_bound_method_pickles_with_its_array():
    a = cai.to_device(np.arange(3))
    method = pickle.loads(pickle.dumps(a.copy_to_host))
    np.testing.assert_array_equal(method(), [0, 1, 2])

"""Wild pointers from foreign CAI dicts (docs/simulator.md "Memory", docs/cuda-backend.md
"Memory checks"): array data must be memory of the backend inside one live allocation; a
pointer that is not (0x1000, pageable host memory, memory its producer freed) or a view that
reaches past its allocation is refused with DeviceError naming the operand, the range and the
allocation, before anything is read, written or launched. Each case runs in a subprocess, so
that a crash fails one test instead of the run; the backend is the simulator (conftest), and
also CUDA where a GPU is present.
"""

import os
import subprocess
import sys
import textwrap

import pytest

import cai

PRELUDE = """
import numpy as np
import cai
from helpers import DictProducer

def foreign(ptr, shape=(8,), typestr="<f8", strides=None, keep=None):
    return DictProducer({"shape": shape, "typestr": typestr, "data": (ptr, False), "strides": strides,
                 "version": 3, "stream": None}, keep)

def refused(fn, *parts):
    try:
        fn()
    except cai.DeviceError as e:
        for part in parts:
            assert part in str(e), (part, str(e))
        return str(e)
    raise AssertionError("no DeviceError")
"""

BACKENDS = ["sim"] + (["cuda"] if cai._cai.cuda_available() else [])
# One backend: the same refusal on the simulated driver as on a GPU.
NOT_BACKEND_MEMORY = {"sim": "is not CUDA memory", "cuda": "is not CUDA memory"}


def run(code, backend):
    here = os.path.dirname(os.path.abspath(__file__))  # for helpers.py
    env = dict(os.environ, CAI_BACKEND=backend,
               PYTHONPATH=os.pathsep.join([here] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    r = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(code)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"exit code {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


CASES = {
    # A pointer that is not device memory at all.
    "copy_to_host of 0x1000": """
        refused(lambda: cai.as_cuda_array(foreign(0x1000)).copy_to_host(),
                "copy_strided_async(): src [0x1000+64)", NOT_MEMORY)
    """,
    "ops.copy from 0x1000": """
        dst = cai.device_array(8)
        refused(lambda: cai.ops.copy(dst, foreign(0x1000)), "src [0x1000+64)", NOT_MEMORY)
    """,
    "ops.copy to 0x1000": """
        src = cai.to_device(np.arange(8.0))
        refused(lambda: cai.ops.copy(foreign(0x1000), src), "dst [0x1000+64)", NOT_MEMORY)
    """,
    "ops.fill of 0x1000": """
        refused(lambda: cai.ops.fill(foreign(0x1000), 1.0), "fill_async(): dst [0x1000+64)",
                NOT_MEMORY)
    """,
    "ops.add with 0x1000": """
        out = cai.device_array(8)
        refused(lambda: cai.ops.add(foreign(0x1000), out, out), "add_async(): a [0x1000+64)",
                NOT_MEMORY)
    """,
    "a high address": """
        refused(lambda: cai.as_cuda_array(foreign(0x7fff00000000)).copy_to_host(), NOT_MEMORY)
    """,
    # Pageable host memory (a NumPy array) presented as device memory.
    "a NumPy array's pointer": """
        h = np.arange(8.0)
        refused(lambda: cai.ops.fill(foreign(h.ctypes.data, keep=h), 5.0), NOT_MEMORY)
        assert (h == np.arange(8.0)).all()
    """,
    # A view that reaches past its allocation, forwards and backwards.
    "a view past its allocation": """
        x = cai.to_device(np.arange(8.0))
        p = x.__cuda_array_interface__["data"][0]
        too_long = foreign(p, shape=(9,), keep=x)
        msg = refused(lambda: cai.as_cuda_array(too_long).copy_to_host(),
                      "src [" + hex(p) + "+72) runs past the end of its allocation [" + hex(p))
        refused(lambda: cai.ops.fill(too_long, 0.0), "fill_async(): dst", "runs past the end")
        refused(lambda: cai.ops.copy(too_long, cai.device_array(9)), "dst", "runs past the end")
        shifted = foreign(p + 8, keep=x)
        refused(lambda: cai.ops.add(shifted, shifted, shifted), "runs past the end")
        backwards = foreign(p + 8, shape=(3,), strides=(-8,), keep=x)
        refused(lambda: cai.as_cuda_array(backwards).copy_to_host(), hex(p - 8))
        # Nothing was written: x is intact, and the device still works.
        assert (x.copy_to_host() == np.arange(8.0)).all()
        cai.ops.fill(x, 2.0)
        assert (x.copy_to_host() == 2.0).all()
    """,
    # Memory freed by its producer.
    "memory freed by its producer": """
        import gc
        x = cai.to_device(np.arange(8.0))
        stale = foreign(x.__cuda_array_interface__["data"][0])
        del x
        gc.collect()
        cai.synchronize()
        refused(lambda: cai.as_cuda_array(stale).copy_to_host(), NOT_MEMORY)
        refused(lambda: cai.ops.fill(stale, 1.0), NOT_MEMORY)
    """,
    # The explicit host buffer of a host copy may be pageable: still fine.
    "host copies of valid arrays still work": """
        x = cai.to_device(np.arange(12.0).reshape(3, 4))
        assert (x[:, ::-2].copy_to_host() == np.arange(12.0).reshape(3, 4)[:, ::-2]).all()
        y = cai.device_array((3, 4))
        y.copy_to_device(np.ones((3, 4)))
        assert (y.copy_to_host() == 1).all()
    """,
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_wild_pointer_is_refused(name, backend):
    code = f"NOT_MEMORY = {NOT_BACKEND_MEMORY[backend]!r}\n" + textwrap.dedent(CASES[name])
    run(code, backend)

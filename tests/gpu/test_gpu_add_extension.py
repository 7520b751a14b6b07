"""The example extension's real CUDA kernel (examples/add_extension, module `_add_ext`) on CuPy
and PyTorch inputs, strided ones included, and against a busy producer.

The module is found in the folder named by CAI_ADD_EXT_DIR (scripts/gpu-check.sh builds it
and sets the variable); without it these tests are skipped.
"""

import glob
import importlib
import os
import sys

import numpy as np
import pytest

import cai
from gpu_helpers import SPIN_SECONDS, peer

pytestmark = pytest.mark.usefixtures("warm")


@pytest.fixture(scope="module")
def ext():
    folder = os.environ.get("CAI_ADD_EXT_DIR", "")
    if not folder or not glob.glob(os.path.join(folder, "_add_ext*")):
        pytest.skip("set CAI_ADD_EXT_DIR to the build folder of examples/add_extension "
                    "(scripts/gpu-check.sh builds it there)")
    sys.path.insert(0, folder)
    try:
        return importlib.import_module("_add_ext")
    finally:
        sys.path.remove(folder)


CASES = {  # name -> (view of a, view of b), on 1-D bases of 3 * 64 elements
    "contiguous": (lambda a: a[:64], lambda b: b[:64]),
    "stepped": (lambda a: a[::3], lambda b: b[1::3]),
    "reversed": (lambda a: a[::-3], lambda b: b[::3]),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("library", ["cupy", "torch"])
def test_kernel_on_foreign_arrays(ext, library, case, dtype):
    view_a, view_b = CASES[case]
    host_a = np.arange(192, dtype=dtype)
    host_b = np.linspace(-1, 1, 192).astype(dtype)
    expect = view_a(host_a) + view_b(host_b)
    p = peer(library)
    a, b = p.from_host(host_a), p.from_host(host_b)
    try:
        va, vb = view_a(a), view_b(b)
    except ValueError as e:  # PyTorch has no negative steps
        pytest.skip(f"{library} cannot make this view: {e}")
    out = p.from_host(np.zeros(64, dtype))
    ext.add(va, vb, out, stream=cai.stream(non_blocking=True))
    cai.synchronize()
    np.testing.assert_array_equal(p.to_host(out), expect)


def test_kernel_on_mixed_inputs(ext):
    cp, torch = peer("cupy").cp, peer("torch").torch
    a = cp.arange(100, dtype=cp.float32)[::2]
    b = torch.arange(50, dtype=torch.float32, device="cuda")
    out = cai.device_array(50, dtype=np.float32)
    ext.add(a, b, out)
    np.testing.assert_array_equal(out.copy_to_host(), 3 * np.arange(50, dtype=np.float32))


@pytest.mark.usefixtures("no_gc")
@pytest.mark.parametrize("sync", [True, False], ids=["waits", "negative_control"])
def test_kernel_waits_for_a_busy_producer(ext, spinner, sync):
    cp = peer("cupy").cp
    n = 1 << 20
    x = cp.zeros(n, dtype=cp.float32)
    out = cai.device_array(n, dtype=np.float32)
    cai.ops.fill(out, -1.0)
    cai.synchronize()
    ps = cp.cuda.Stream(non_blocking=True)
    spinner.spin(ps, SPIN_SECONDS)
    cai.config.CUDA_ARRAY_INTERFACE_SYNC = sync
    with ps:
        x.fill(3.0)
        ext.add(x, x, out, stream=cai.stream(non_blocking=True))
        producer_busy = not ps.done
    result = out.copy_to_host()
    ps.synchronize()
    if sync:
        assert producer_busy, "the host waited for the producer"
        np.testing.assert_array_equal(result, np.full(n, 6.0, np.float32))
    else:
        np.testing.assert_array_equal(result, np.zeros(n, np.float32),
                                      err_msg="the negative control did not read stale data")

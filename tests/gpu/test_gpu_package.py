"""Issue 16 on a real GPU: Numba's view methods and element access on CUDA memory from CuPy,
`python -m cai info` with a driver, the demo on the CUDA backend, and the documentation blocks
marked `python gpu` run as written (docs/array-methods.md, docs/packaging.md)."""

import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import cai
from gpu_helpers import Spinner, peer

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_view_methods_on_a_cupy_array_match_numpy():
    cp = peer("cupy").cp
    host = np.arange(24, dtype=np.float32).reshape(4, 6)
    dev = cai.as_cuda_array(cp.asarray(host))
    np.testing.assert_array_equal(dev.reshape(2, 12).copy_to_host(), host.reshape(2, 12))
    np.testing.assert_array_equal(dev.T.reshape(24, order="F").copy_to_host(),
                                  host.T.reshape(24, order="F"))
    np.testing.assert_array_equal(dev.view(np.int32).copy_to_host(), host.view(np.int32))
    np.testing.assert_array_equal(dev[:, None, :].squeeze(1).copy_to_host(), host)
    np.testing.assert_array_equal(dev.T.copy().copy_to_host(), host.T)
    assert [p.shape for p in dev.ravel().split(10)] == [(10,), (10,), (4,)]
    with pytest.raises(NotImplementedError, match="without a copy"):
        dev[:, :3].ravel()
    assert dev[3, 5] == np.float32(23) and type(dev[3, 5]) is np.float32


def test_element_access_waits_for_the_producers_stream():
    cp = peer("cupy").cp
    spinner = Spinner()
    s = cp.cuda.Stream(non_blocking=True)
    x = cp.zeros(8, dtype=cp.int32)
    s.synchronize()
    spinner.spin(s, 0.3)  # the producer is busy ...
    with s:
        x.fill(7)          # ... and writes after that
    with s:  # CuPy exports its current stream in the interface
        dev = cai.as_cuda_array(x)
    assert dev[5] == 7


def test_info_reports_the_driver_and_the_devices():
    r = subprocess.run([sys.executable, "-m", "cai", "info"], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, CAI_BACKEND="cuda"))
    assert r.returncode == 0, r.stderr
    assert "Backend: cuda (forced by CAI_BACKEND=cuda)" in r.stdout
    assert re.search(r"CUDA driver: \d+\.\d+, \d+ device\(s\)", r.stdout), r.stdout
    assert re.search(r"device 0: .*compute capability \d+\.\d+", r.stdout), r.stdout
    print(r.stdout)


def test_demo_on_the_cuda_backend():
    r = subprocess.run([sys.executable, "-m", "cai", "demo"], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, CAI_BACKEND="cuda"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[0].endswith("on backend: cuda")
    assert "simulator" not in r.stdout
    # The same waits as on the simulated driver (tests/python/test_info_demo.py): one per
    # imported array before each kernel (its import's event), one reverse wait of the legacy
    # stream after each kernel on another stream.
    waits = [line.strip() for line in r.stdout.splitlines() if line.strip().startswith("[wait] ")]
    before = [w for w in waits if w.endswith("waits for an event recorded by its producer")]
    after = [w for w in waits
             if w.startswith("[wait] legacy default stream (1) waits for an event recorded on")]
    assert len(before) == 7 and len(after) == 2 and len(waits) == 9, waits
    print(r.stdout)


def gpu_blocks():
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text()
        for m in re.finditer(r"^```python gpu\n(.*?)^```", text, re.M | re.S):
            yield pytest.param(m.group(1), id=f"{page.name}:{text.count(chr(10), 0, m.start()) + 1}")


@pytest.mark.parametrize("code", list(gpu_blocks()))
def test_gpu_doc_blocks_run(code, tmp_path):
    for name in re.findall(r"^import (.*)$", code, re.M)[0].split(","):
        if name.strip() in ("cupy", "torch"):
            peer(name.strip())  # skips with the reason when the library is missing
    (tmp_path / "block.py").write_text(code)
    r = subprocess.run([sys.executable, "block.py"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, CAI_BACKEND="cuda"))
    assert r.returncode == 0, f"{code}\n{r.stdout}{r.stderr}"

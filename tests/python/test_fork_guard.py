"""A child forked after cai initialised a driver is told to use spawn (issue 27, item 1j):
cai.cuda_available() and cai.info (cai._cai._cuda_info) run libcuda.so.1's cuInit, after which
a forked child cannot use the driver, as after cai's own backend. Without a GPU here, a stand-in
libcuda.so.1 whose cuInit succeeds (and which then has no entry points) plays the driver."""

import shutil
import subprocess

import pytest

from helpers import run_isolated

# The five symbols cai's loader looks up by name; cuGetProcAddress finds nothing.
FAKE_DRIVER = r"""
int cuInit(unsigned flags) { return 0; }
int cuDriverGetVersion(int* v) { *v = 13000; return 0; }
int cuGetErrorName(int e, const char** s) { *s = "CUDA_ERROR_NOT_FOUND"; return 0; }
int cuGetErrorString(int e, const char** s) { *s = "named symbol not found"; return 0; }
int cuGetProcAddress_v2(const char* name, void** fn, int v, unsigned long long f, int* found) {
  *fn = 0;
  if (found) *found = 1;
  return 500;
}
"""

CHILD = """
    import os, numpy as np, cai
    {probe}
    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            cai.to_device(np.arange(4.0))
            code = 4
        except RuntimeError as e:
            code = 0 if ("forked from process" in str(e) and "CUDA driver" in str(e)
                         and "spawn" in str(e)) else 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(os.waitstatus_to_exitcode(status))
"""


@pytest.fixture(scope="module")
def fake_driver_dir(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler for the stand-in libcuda.so.1")
    d = tmp_path_factory.mktemp("fake_libcuda")
    (d / "fake.c").write_text(FAKE_DRIVER)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(d / "libcuda.so.1"), str(d / "fake.c")],
                   check=True)
    return d


@pytest.mark.parametrize("probe", ["assert cai.cuda_available() is False",
                                   "assert cai._cai._cuda_info()['driver_loaded'] is False"])
def test_a_fork_after_the_driver_probe_gets_the_fork_message(fake_driver_dir, probe):
    r = run_isolated(CHILD.format(probe=probe), timeout=120,
                     env={"LD_LIBRARY_PATH": str(fake_driver_dir)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["0"], (r.stdout, r.stderr[-2000:])


def test_a_probe_that_ran_no_cuinit_arms_nothing():
    """The negative control: where no libcuda.so.1 loads (this machine), the probe initialised
    nothing, and the child uses the simulator it makes for itself."""
    r = run_isolated("""
        import ctypes, os, numpy as np, cai
        try:
            ctypes.CDLL("libcuda.so.1")
            print("has libcuda")
            raise SystemExit(0)
        except OSError:
            pass
        assert cai.cuda_available() is False
        pid = os.fork()
        if pid == 0:
            os._exit(0 if cai.to_device(np.arange(4.0)).copy_to_host().tolist() == [0, 1, 2, 3]
                     else 2)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """, timeout=120)
    if r.stdout.strip() == "has libcuda":
        pytest.skip("a CUDA driver is installed here")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["0"], (r.stdout, r.stderr[-2000:])

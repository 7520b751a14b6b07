"""The example extension of examples/add_extension (its kernel and its binding, nothing else),
built only through the installed cai package (scripts/test.sh builds it into
build/add_extension), run on the simulator: results, stream ordering, and the race detector
checking its kernel. Also: an extension built from nothing but the pip-installed package."""

import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cai
import extensions
from helpers import CaiOnly, DLWrapper, Producer, pending_fill

_add_ext = extensions.load("_add_ext")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_add_any_strides(dtype):
    host_a = np.arange(20, dtype=dtype)
    host_b = np.linspace(0, 1, 20).astype(dtype)
    a, b = cai.to_device(host_a), cai.to_device(host_b)
    out = cai.device_array(10, dtype=dtype)
    _add_ext.add(a[::2], b[::-2], out)
    np.testing.assert_array_equal(out.copy_to_host(), host_a[::2] + host_b[::-2])


def test_accepts_foreign_cai_and_dlpack_objects():
    a = cai.to_device(np.arange(8, dtype=np.float32))

    out = cai.device_array(8, dtype=np.float32)
    _add_ext.add(CaiOnly(a), DLWrapper(a), out)
    np.testing.assert_array_equal(out.copy_to_host(), 2 * np.arange(8, dtype=np.float32))


def test_numpy_arrays_are_refused_clearly():
    out = cai.device_array(3, dtype=np.float32)
    # host memory is named, with the dtype and the way out; nothing is copied implicitly
    with pytest.raises(TypeError, match=r"numpy.ndarray of float32 in host memory.*to_device"):
        _add_ext.add(np.ones(3, np.float32), np.ones(3, np.float32), out)


def test_constraint_failures_say_which():
    a = cai.to_device(np.arange(4, dtype=np.float32))
    ro = cai.from_cuda_array_interface(
        {**a.__cuda_array_interface__, "data": (a.ptr, True)}, owner=a)
    with pytest.raises(TypeError, match="read-only.*writable"):
        _add_ext.add(a, a, ro)
    with pytest.raises(TypeError, match="ndim is 2"):
        _add_ext.add(a, a, cai.device_array((2, 2), dtype=np.float32))
    with pytest.raises(TypeError, match="dtype is '<i4'"):
        _add_ext.add(a, a, cai.device_array(4, dtype=np.int32))


def test_stream_ordering_with_a_slow_producer():
    s = cai.stream()
    x = cai.device_array(1000, dtype=np.float64, stream=s)
    with cai.sim.hold(s):
        x[...] = 2.0  # queued on s behind the gate
        y = cai.device_array(1000, dtype=np.float64, stream=cai.stream())
        consumer = cai.stream()
        _add_ext.add(x, x, y, stream=consumer)  # ordered after s by events, no host wait
        assert not s.query()
    np.testing.assert_array_equal(y.copy_to_host(), np.full(1000, 4.0))
    # and the producer's later work cannot overtake the extension's read
    x[...] = 0.0
    s.synchronize()


def test_without_sync_the_race_is_caught():
    s = cai.stream()
    x, _ = pending_fill(s, 1000, np.float64, 2.0, delay=0.3)
    y = cai.device_array(1000, dtype=np.float64, stream=cai.stream())
    with cai.config.override(CUDA_ARRAY_INTERFACE_SYNC=False):
        with pytest.raises(cai.RaceError):  # Producer: exports x with its stream, like any v3
            _add_ext.add(Producer(x), Producer(x), y, stream=cai.stream())
    s.synchronize()


def test_correct_ordering_is_not_a_race():
    # The same producer as above, with the CAI v3 import rules on: the kernel waits for s.
    s = cai.stream()
    x, _ = pending_fill(s, 1000, np.float64, 2.0, delay=0.3)
    y = cai.device_array(1000, dtype=np.float64, stream=cai.stream())
    _add_ext.add(Producer(x), Producer(x), y, stream=cai.stream())
    np.testing.assert_array_equal(y.copy_to_host(), np.full(1000, 4.0))


def test_foreign_arrays_on_the_work_stream_cost_one_event_each_and_no_wait():
    # The caster imports a foreign CAI v3 object with one event record on the producer's
    # stream (which the producer may drop); the launch on the producer's own stream needs no
    # wait at all (the CAI's intended elision), before or after.
    s = cai.stream()
    x = cai.device_array(1000, dtype=np.float64, stream=s)
    y = cai.device_array(1000, dtype=np.float64, stream=s)
    with cai.sim.hold(s):  # the fill stays queued: each import records an event
        cai.ops.fill(x, 2.0, stream=s)
        cai.reset_device_call_counts()
        _add_ext.add(Producer(x), Producer(x), y, stream=s)
        counts = cai.device_call_counts()
        assert (counts["event_record"], counts["stream_wait_event"]) == (2, 0), counts
    np.testing.assert_array_equal(y.copy_to_host(), np.full(1000, 4.0))


def test_writing_while_the_kernel_reads_is_a_race():
    # The kernel declares its reads; a host write to an input before it ran is caught.
    s = cai.stream()
    a = cai.device_array(1000, dtype=np.float32, stream=s)
    a[...] = 1.0
    s.synchronize()  # so that the kernel's read is the only access not ordered before the host
    cai.sim.delay(s, 0.3)
    out = cai.device_array(1000, dtype=np.float32, stream=s)
    _add_ext.add(a, a, out, stream=s)  # queued behind the delay
    with cai.config.override(CUDA_ARRAY_INTERFACE_SYNC=False):
        with pytest.raises(cai.RaceError):  # a consumer told to ignore the exported stream
            cai.ops.fill(CaiOnly(a), 5.0, stream=cai.stream())
    s.synchronize()


# ---- the C++ package inside the Python package ----------------------------------------------------

EXTERNAL_CMAKE = """
cmake_minimum_required(VERSION 3.24)
project(external LANGUAGES CXX)
set(CMAKE_BUILD_TYPE Release)
find_package(cai CONFIG REQUIRED)
cai_add_extension(_external SOURCES external.cpp)
"""

EXTERNAL_CPP = """
#include <cai/nanobind/for_each.h>

struct Twice {
  CAI_HOST_DEVICE void operator()(const double& x, double& y) const { y = 2 * x; }
};

NB_MODULE(_external, m) {
  m.def("twice", [](cai::nb::array<const double, 1> x, cai::nb::array<double, 1, cai::writable> y,
                    cai::nb::stream s) { cai::nb::for_each(s, Twice{}, x, y); },
        nanobind::arg("x"), nanobind::arg("y"), nanobind::arg("stream") = nanobind::none());
}
"""


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("ninja") is None,
                    reason="needs cmake and ninja")
def test_an_extension_built_from_only_the_installed_package(tmp_path):
    cmake_dir = subprocess.run([sys.executable, "-m", "cai", "--cmake-dir"], check=True,
                               capture_output=True, text=True).stdout.strip()
    assert pathlib.Path(cmake_dir, "cai-config.cmake").is_file()
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(EXTERNAL_CMAKE)
    (src / "external.cpp").write_text(EXTERNAL_CPP)
    build = tmp_path / "build"
    # The interpreter as a relative path, from the directory cmake runs in.
    interpreter = pathlib.Path(sys.executable)
    configure = subprocess.run(
        ["cmake", "-S", str(src), "-B", str(build), "-G", "Ninja", f"-Dcai_DIR={cmake_dir}",
         f"-DPython_EXECUTABLE={interpreter.name}"],
        cwd=interpreter.parent, capture_output=True, text=True)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    built = subprocess.run(["cmake", "--build", str(build), "-j", "2"], capture_output=True,
                           text=True)
    assert built.returncode == 0, built.stdout + built.stderr
    # Nothing of the source tree was used: cai's headers come from the installed package.
    commands = (build / "build.ninja").read_text()
    for tree_dir in ("include", "cmake", "python", "src"):
        assert str(extensions.ROOT / tree_dir) not in commands
    assert str(pathlib.Path(cmake_dir).parent / "include") in commands
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent("""
            import numpy as np, cai, _external
            x = cai.to_device(np.arange(4.0)); y = cai.device_array(4)
            _external.twice(x, y)
            print(y.copy_to_host().tolist())
        """)],
        env={**os.environ, "CAI_BACKEND": "sim", "PYTHONPATH": str(build)},
        capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[0.0, 2.0, 4.0, 6.0]"


# An extension's kernel dereferences its arrays itself, so the C API checks them as cai's own
# operations do before anything runs, and makes their device current (on a GPU the kernel
# then runs there). Each case in a subprocess: without the check, the kernel would fault.
MEMORY_CASES = {
    "a wild pointer": ("a = foreign(0x1000)", "array 0 [0x1000+32) is not CUDA memory"),
    "a view past its allocation": ("a = foreign(base.ptr + 16)", "runs past the end of its allocation"),
    "freed memory": ("gone = cai.to_device(np.ones(8, np.float32)); p = gone.ptr; del gone; "
                     "a = foreign(p)", "is not CUDA memory"),
}


@pytest.mark.parametrize("case", list(MEMORY_CASES))
def test_extension_kernels_get_the_memory_check(case):
    setup, message = MEMORY_CASES[case]
    code = textwrap.dedent(f"""
        import sys, numpy as np, cai
        sys.path.insert(0, {str(extensions.directory("_add_ext"))!r})
        import _add_ext
        from helpers import DictProducer

        def foreign(ptr):
            return DictProducer({{"shape": (8,), "typestr": "<f4", "data": (ptr, False),
                                 "version": 3, "stream": None}})

        base = cai.to_device(np.ones(8, np.float32))
        out = cai.device_array(8, dtype=np.float32)
        {setup}
        try:
            _add_ext.add(a, base, out)
        except cai.DeviceError as e:
            assert {message!r} in str(e), str(e)
            print("refused")
    """)
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, CAI_BACKEND="sim", PYTHONPATH=here)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "refused", r.stdout + r.stderr


def test_extension_kernels_run_on_their_arrays_device():
    code = textwrap.dedent(f"""
        import sys, numpy as np, cai
        sys.path.insert(0, {str(extensions.directory("_add_ext"))!r})
        import _add_ext
        with cai.Device(1):
            a = cai.to_device(np.arange(8, dtype=np.float32))
            out = cai.device_array(8, dtype=np.float32)
            s1 = cai.stream()
        _add_ext.add(a, a, out, stream=s1)  # device 0 is current; the arrays are on 1
        assert cai.current_device() == cai.Device(0)  # restored after the call
        np.testing.assert_array_equal(out.copy_to_host(), 2 * np.arange(8, dtype=np.float32))
        b = cai.to_device(np.ones(8, np.float32))  # on device 0
        try:
            _add_ext.add(a, b, out)
        except ValueError as e:
            assert "is on device 1 but array 1 is on device 0" in str(e), str(e)
            print("refused")
    """)
    env = dict(os.environ, CAI_BACKEND="sim", CAI_SIM_DEVICES="2")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "refused", r.stdout + r.stderr


def test_extension_kernels_refuse_registered_memory_they_would_reach_at_another_address():
    # On a device whose CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM is 0, page-locked memory has
    # another device address (cuMemHostGetDevicePointer); an extension's kernel is given the
    # host address, so the C API refuses such an operand instead of letting the kernel miss it.
    code = textwrap.dedent(f"""
        import ctypes, sys, numpy as np, cai
        sys.path.insert(0, {str(extensions.directory("_add_ext"))!r})
        import _add_ext
        cai.synchronize()  # the backend has loaded the simulated driver: the library below
        sim = ctypes.CDLL(cai.sim.driver_path())
        assert sim.caiSimSetDeviceAttribute(0, 91, 0) == 0  # CAN_USE_HOST_POINTER_..._MEM
        h = np.ones(1024, np.float32)
        out = cai.device_array(1024, dtype=np.float32)
        ones = cai.to_device(h)
        cai.ops.add(ones, ones, out)  # cai's own kernels translate: no refusal
        with cai.mapped(h) as d:
            cai.ops.add(d, d, out)
            np.testing.assert_array_equal(out.copy_to_host(), 2 * h)
            try:
                _add_ext.add(d, ones, out)
            except cai.DeviceError as e:
                assert "REGISTERED_MEM is 0" in str(e) and "array 0" in str(e), str(e)
                print("refused")
    """)
    env = dict(os.environ, CAI_BACKEND="sim")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "refused", r.stdout + r.stderr

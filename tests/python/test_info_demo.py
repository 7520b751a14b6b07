"""`python -m cai info` / cai.show_config(), `python -m cai demo`, and cai.trace_waits()
(docs/python.md, "What runs here" and "Seeing the waits")."""

import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import cai
from cai import _demo


def run_module(*args, backend="sim"):
    env = dict(os.environ)
    if backend is None:
        env.pop("CAI_BACKEND", None)
    else:
        env["CAI_BACKEND"] = backend
    return subprocess.run([sys.executable, "-m", "cai", *args], env=env, capture_output=True,
                          text=True, timeout=120)


# ------------------------------------------------------------------------------------ info

def test_info_reports_backend_devices_driver_and_libraries():
    r = run_module("info")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert out.startswith(f"cai {cai.__version__} (distribution cai-interop ")
    assert "Backend: simulator (forced by CAI_BACKEND=sim)" in out
    assert "race detection: on" in out
    assert "device 0: cai simulator" in out
    assert "Driver API requested: CUDA " in out
    assert "CUDA driver: " in out
    assert f"numpy {np.__version__}" in out
    assert "Switches: CUDA_ARRAY_INTERFACE_SYNC=True, EXPORT_STREAM=True, CAI_BACKEND=sim" in out


def test_info_json_matches_show_config():
    r = run_module("info", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["backend"] == "simulator" and info["simulator"]["active"]
    assert info["libraries"]["numpy"] == np.__version__
    assert set(info["libraries"]) >= {"numpy", "cupy", "torch", "jax", "numba"}
    assert info["cmake_dir"] and os.path.isfile(os.path.join(info["cmake_dir"],
                                                             "cai-config.cmake"))
    buf = io.StringIO()
    facts = cai.show_config(file=buf, as_json=True)  # a dict, printed by nobody
    assert buf.getvalue() == ""
    assert isinstance(facts, dict) and facts["cai"] == info["cai"]
    json.dumps(facts)  # JSON types only


@pytest.mark.skipif(bool(os.environ.get("CAI_SANITIZED")),
                    reason="a sanitizer's build of _cai is not the wheel's")
def test_info_reports_how_the_wheel_was_optimized():
    # The wheel's build (scripts/setup.sh) is profile-guided wherever GCC builds it
    # (cmake/cai_pgo.cmake): a training run that failed would only warn at build time.
    build = cai.show_config(file=io.StringIO(), as_json=True)["build"]
    assert build["compiler"].split()[0] in {"GCC", "clang"}
    assert build["profile_guided"] == build["compiler"].startswith("GCC")
    r = run_module("info")
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("Build: "))
    assert line.startswith(f"Build: {build['compiler']}")
    assert ("profile-guided" in line) == build["profile_guided"]
    assert ("link-time optimized" in line) == build["lto"]


def test_info_imports_no_array_library():
    # Versions come from package metadata: importing CuPy or PyTorch would cost seconds.
    code = ("import sys, io, cai; cai.show_config(file=io.StringIO()); "
            "print(sorted(m for m in ('cupy', 'torch', 'jax', 'numba') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, CAI_BACKEND="sim"), timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


@pytest.mark.skipif(cai._cai.cuda_available(), reason="a CUDA driver is present")
def test_info_states_the_simulator_fallback_and_survives_a_forced_cuda():
    r = run_module("info", backend=None)
    assert r.returncode == 0, r.stderr
    assert "Backend: simulator (no usable CUDA driver here: " in r.stdout
    assert "The CUDA backend runs on cai's simulated driver" in r.stdout
    r = run_module("info", backend="cuda")
    assert r.returncode == 0, r.stderr
    assert "Backend: none (CUDA backend: " in r.stdout


def test_cuda_version_text():
    from cai._info import cuda_version_text
    assert cuda_version_text(12040) == "12.4" and cuda_version_text(13000) == "13.0"


# ------------------------------------------------------------------------------------ demo

def test_demo_first_line_states_the_fallback_and_names_the_document():
    r = run_module("demo", backend=None)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    if not cai._cai.cuda_available():
        assert lines[0].startswith(f"cai {cai.__version__} on backend: simulator (no usable "
                                   "CUDA driver here: ")
        assert "simulated driver" in lines[0]
        assert sum("simulator" in line for line in lines) == 1  # said once, first
    assert "CUDA Array Interface (Version 3)" in lines[1] and "Numba documentation" in lines[1]
    assert "cai.trace_waits()" in r.stdout


def test_demo_explains_the_reverse_wait():
    r = run_module("demo")
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    waits = [line.strip() for line in out.splitlines() if line.strip().startswith("[wait] ")]
    before = [w for w in waits if w.endswith("waits for an event recorded by its producer")]
    after = [w for w in waits
             if w.startswith("[wait] legacy default stream (1) waits for an event recorded on")]
    # One wait per imported array before each kernel whose producer's stream is busy (a, b,
    # out; x twice and y; x's idle stream needs none before the first copy), and one reverse
    # wait after each kernel on another stream than the legacy one.
    assert len(before) == 6 and len(after) == 2 and len(waits) == 8, waits
    assert "found the stream idle, so no event and no wait" in out
    assert "reverse wait" in out and "under the kernel" in out
    assert "correct: out == a + 2a" in out and ": correct" in out


def test_demo_producer_owns_its_memory_and_exports_its_own_interface():
    s = cai.stream()
    p = _demo.ProducerArray((4, 3), np.float32, s)
    assert not isinstance(p, cai.DeviceNDArray) and not hasattr(p, "copy_to_host")
    d = p.__cuda_array_interface__
    assert d == {"version": 3, "shape": (4, 3), "typestr": "<f4",
                 "data": (p._memory.ptr, False), "strides": None, "stream": s.handle}
    p.fill(2.5)
    np.testing.assert_array_equal(cai.as_cuda_array(p).copy_to_host(), np.full((4, 3), 2.5))


# ------------------------------------------------------------------------------ trace_waits

def cross_stream_add():
    a_stream, b_stream = cai.stream(non_blocking=True), cai.stream(non_blocking=True)
    p = _demo.ProducerArray((8,), np.int32, a_stream)
    out = cai.device_array(8, dtype=np.int32, stream=b_stream)
    with cai.sim.hold(a_stream):  # the fill is queued at each import
        p.fill(1)
        cai.ops.add(p, p, out, stream=b_stream)
    return a_stream, b_stream


def test_trace_waits_records_the_waits_of_a_cross_stream_kernel():
    with cai.trace_waits() as waits:
        a, b = cross_stream_add()
    # p is imported twice (an event recorded on its stream each time, at import); the kernel's
    # stream waits for both; after the kernel, the legacy stream waits for it.
    assert waits.lines == [
        f"stream {b.handle:#x} waits for an event recorded by its producer",
        f"stream {b.handle:#x} waits for an event recorded by its producer",
        f"legacy default stream (1) waits for an event recorded on stream {b.handle:#x}"]


def test_trace_waits_is_off_outside_the_block_and_after_an_exception():
    with pytest.raises(RuntimeError):
        with cai.trace_waits():
            raise RuntimeError("inside")
    with cai.trace_waits() as later:
        pass
    cross_stream_add()  # after every block closed: nothing is recorded
    assert later.lines == []
    assert cai._cai._take_trace() == []


def test_trace_waits_take_and_nesting(capsys):
    with cai.trace_waits() as outer:
        cross_stream_add()
        assert len(outer.take()) == 3
        assert outer.take() == []
        with cai.trace_waits(echo=True) as inner:
            cross_stream_add()
        cross_stream_add()
    assert len(inner.lines) == 3
    assert len(outer.lines) == 9
    printed = capsys.readouterr().out.splitlines()
    assert printed == [f"[cai wait] {line}" for line in inner.lines]

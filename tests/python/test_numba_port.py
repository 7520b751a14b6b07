"""Porting from Numba without surprises (docs/python.md, "Numba's host API"): no silent
conversion, Numba's names and arguments."""

import numpy as np
import pytest

import cai


# ----- no silent conversion: copy_to_device is Numba's check_array_compatibility ---------

def test_copy_to_device_refuses_another_dtype_and_keeps_the_data():
    dev = cai.to_device(np.array([7, 7, 7, 7], np.int8))
    with pytest.raises(TypeError, match=r"^incompatible dtype: int8 vs\. float64"):
        dev.copy_to_device(np.array([1.5, 300, -1, 2]))
    with pytest.raises(TypeError, match=r"^incompatible dtype: int8 vs\. int64"):
        dev.copy_to_device([1, 2, 3, 4])  # a list is read as NumPy reads it
    np.testing.assert_array_equal(dev.copy_to_host(), [7, 7, 7, 7])


def test_copy_to_device_refuses_another_shape_and_does_not_broadcast():
    dev = cai.to_device(np.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"^incompatible shape: \(3, 4\) vs\. \(1,\)"):
        dev.copy_to_device(np.array([1.0]))
    with pytest.raises(ValueError, match=r"^incompatible shape: \(3, 4\) vs\. \(4, 3\)"):
        dev.copy_to_device(np.ones((4, 3)))
    assert not dev.copy_to_host().any()


def test_copy_to_device_ignores_axes_of_length_one_as_numba():
    dev = cai.device_array((1, 3))
    dev.copy_to_device(np.arange(3.0))
    np.testing.assert_array_equal(dev.copy_to_host(), [[0, 1, 2]])
    dev.copy_to_device(cai.to_device(np.array([[4.0], [5.0], [6.0]])))
    np.testing.assert_array_equal(dev.copy_to_host(), [[4, 5, 6]])


def test_copy_to_device_from_a_device_array_checks_dtype_and_shape():
    dev = cai.to_device(np.zeros(4, np.float32))
    with pytest.raises(TypeError, match=r"^incompatible dtype: float32 vs\. float64"):
        dev.copy_to_device(cai.to_device(np.ones(4)))
    with pytest.raises(ValueError, match=r"^incompatible shape: \(4,\) vs\. \(5,\)"):
        dev.copy_to_device(cai.to_device(np.ones(5, np.float32)))
    assert not dev.copy_to_host().any()


def test_copy_to_device_takes_numbas_parameter_name():
    dev = cai.device_array(2, dtype=np.int32)
    dev.copy_to_device(ary=np.array([3, 4], np.int32), stream=0)
    np.testing.assert_array_equal(dev.copy_to_host(), [3, 4])


def test_to_device_into_an_array_follows_copy_to_device():
    to = cai.device_array(3)
    assert cai.to_device(np.arange(3.0), to=to) is to
    np.testing.assert_array_equal(to.copy_to_host(), [0, 1, 2])
    with pytest.raises(TypeError, match="incompatible dtype: float64 vs. float32"):
        cai.to_device(np.ones(3, np.float32), to=to)
    with pytest.raises(TypeError, match="to_device\\(\\): to must be a cai.DeviceNDArray"):
        cai.to_device(np.ones(3), to=np.ones(3))
    assert cai.to_device(np.ones(3), to=to, copy=False) is to  # Numba: nothing copied
    np.testing.assert_array_equal(to.copy_to_host(), [0, 1, 2])


def test_to_device_copy_false_allocates_or_imports():
    host = np.ones((2, 3), np.int16, order="F")
    new = cai.to_device(host, copy=False)
    assert (new.shape, new.dtype, new.strides) == (host.shape, host.dtype, host.strides)
    dev = cai.to_device(np.arange(3.0))
    same = cai.to_device(dev, copy=False)
    assert same.ptr == dev.ptr


def test_same_dtype_keeps_working_for_ml_dtypes_and_records():
    ml = pytest.importorskip("ml_dtypes")
    for dt in (ml.bfloat16, ml.float8_e4m3fn, ml.int4):
        host = np.array([1, 2, 3], dt)
        dev = cai.device_array(3, dtype=dt)
        dev.copy_to_device(host)
        np.testing.assert_array_equal(dev.copy_to_host().astype(np.float32), [1, 2, 3])
        dev[...] = host[::-1]
        np.testing.assert_array_equal(dev.copy_to_host().astype(np.float32), [3, 2, 1])
    rec = np.array([(1, 2.5), (3, 4.5)], dtype=[("a", "i4"), ("b", "f8")])
    dev = cai.device_array(2, dtype=rec.dtype)
    dev.copy_to_device(rec)
    dev[...] = rec
    assert dev.copy_to_host().tolist() == rec.tolist()


# ----- a[...] = value: NumPy's broadcasting, no conversion that loses values ----------------

def test_setitem_broadcasts_and_converts_what_fits():
    dev = cai.device_array((2, 3), dtype=np.int16)
    dev[...] = np.array([1.0, 2.0, 3.0])  # float64 values that int16 holds exactly
    np.testing.assert_array_equal(dev.copy_to_host(), [[1, 2, 3], [1, 2, 3]])
    f = cai.device_array(2, dtype=np.float32)
    f[...] = 0.1  # rounding to the nearest float32 is how floats take values
    assert f.copy_to_host()[0] == np.float32(0.1)


@pytest.mark.parametrize("dtype, value, shown", [
    (np.int8, np.array([1.5, 300, -1, 2]), "1.5 becomes 1"),
    (np.int8, np.array([1.0, 300, -1, 2]), "300.0 becomes 44"),
    (np.int8, 1.5, "1.5 becomes 1"),
    (np.uint8, np.array([-1]), "-1 becomes 255"),
    (np.float32, np.array([1e300]), "1e+300 becomes inf"),
    (np.float64, np.array([1 + 1j]), "(1+1j) becomes 1.0"),
    (np.int32, np.array([np.nan]), "nan becomes"),
])
@pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::numpy.exceptions.ComplexWarning")
def test_setitem_refuses_conversions_that_lose_values(dtype, value, shown):
    dev = cai.to_device(np.full(4, 9, dtype))
    with pytest.raises(ValueError, match=r"__setitem__\(\): assigning .* would change them") as e:
        dev[...] = value
    assert shown in str(e.value) and f"astype(np.{np.dtype(dtype).name})" in str(e.value)
    np.testing.assert_array_equal(dev.copy_to_host(), np.full(4, 9, dtype))
    dev[...] = np.asarray(value).astype(dtype)  # cast first: accepted, NumPy's values
    np.testing.assert_array_equal(dev.copy_to_host(),
                                  np.broadcast_to(np.asarray(value).astype(dtype), 4))


def test_setitem_names_ml_dtypes_types():
    ml = pytest.importorskip("ml_dtypes")
    dev = cai.device_array(2, dtype=ml.int4)
    with pytest.raises(ValueError, match=r"int64 values to an array of int4 .*9 becomes -7.*"
                                         r"astype\(ml_dtypes\.int4\)"):
        dev[...] = np.array([9, 1])


# ----- Numba's host API --------------------------------------------------------------------

def test_is_available_agrees_with_detect():
    import io

    assert cai.is_available() is cai.detect(file=io.StringIO()) is True
    assert cai.cuda_available is cai.is_available


def test_memory_info_comes_from_cuMemGetInfo_and_sees_allocations():
    ctx = cai.current_context()
    assert ctx.device == cai.get_current_device() == cai.current_device()
    cai.synchronize()  # frees queued earlier reach the driver
    cai.sim.reset_driver_calls()
    free, total = ctx.get_memory_info()
    assert cai.sim.driver_calls()["cuMemGetInfo"] == 1
    assert total == 16 << 30  # the simulated device's address space (cuDeviceTotalMem)
    assert 0 < free <= total
    a = cai.device_array(64 << 20, dtype=np.uint8)
    info = ctx.get_memory_info()
    assert info.free <= free - (64 << 20) and info.total == total
    del a
    cai.synchronize()
    assert ctx.get_memory_info().free == free


def test_list_devices_close_and_defer_cleanup():
    assert list(cai.list_devices()) == [cai.Device(0)]
    a = cai.to_device(np.arange(4.0))
    with cai.defer_cleanup():
        with cai.defer_cleanup():  # nests, as Numba's
            b = cai.to_device(np.ones(4))
        del b
    cai.close()
    np.testing.assert_array_equal(a.copy_to_host(), [0, 1, 2, 3])  # arrays stay valid


def test_event_elapsed_time_and_profiling():
    s = cai.stream()
    start, end = cai.event(), cai.event()
    start.record(s)
    end.record(s)
    end.synchronize()
    assert cai.event_elapsed_time(start, end) == start.elapsed_time(end) >= 0
    cai.profile_start()
    cai.profile_stop()
    with cai.profiling():
        pass


def test_mapped_and_like_arrays():
    host = np.arange(6.0).reshape(2, 3)
    with cai.mapped(host) as dev:
        assert isinstance(dev, cai.DeviceNDArray) and dev.ptr == host.ctypes.data
        cai.ops.fill(dev, 4.0)
    np.testing.assert_array_equal(host, np.full((2, 3), 4.0))
    a, b = np.zeros(2), np.zeros(3, np.int32)
    with cai.mapped(a, b, stream=0) as devs:
        assert [d.shape for d in devs] == [(2,), (3,)]
    f = np.empty((2, 3), np.float32, order="F")
    m = cai.mapped_array_like(f)
    assert type(m) is cai.MappedNDArray and m.__cuda_array_interface__["strides"] == f.strides
    assert (m.shape, m.dtype, m.strides) == (f.shape, f.dtype, f.strides)
    p = cai.pinned_array_like(f)
    assert isinstance(p, np.ndarray) and p.strides == f.strides
    with pytest.raises(TypeError, match=r"mapped_array_like\(\): ary must be an array"):
        cai.mapped_array_like([1, 2])


def test_array_methods_numba_has():
    import ctypes

    a = cai.to_device(np.arange(12, dtype=np.int32).reshape(3, 4))
    assert isinstance(a.device_ctypes_pointer, ctypes.c_void_p)
    assert a.device_ctypes_pointer.value == a.ptr
    assert cai.device_array(0).device_ctypes_pointer.value is None
    assert a.alloc_size == 48 and a[:, ::2].alloc_size == 4 * 10 + 4
    assert cai.device_array((0, 3)).alloc_size == 0
    assert a.flags["C_CONTIGUOUS"] and not a.flags["F_CONTIGUOUS"] and a.flags["WRITEABLE"]
    assert a.getitem((1, 2), stream=cai.stream()) == 6
    a.setitem(0, np.array([9, 9, 9, 9], np.int32), stream=0)
    assert a.getitem(0).copy_to_host().tolist() == [9, 9, 9, 9]
    s = cai.stream()
    assert a.ravel(stream=s).shape == (12,)
    assert a[0:1].squeeze(stream=s).shape == (4,)
    assert [p.shape for p in a.ravel().split(5, stream=s)] == [(5,), (5,), (2,)]


def test_add_callback_runs_after_the_streams_work():
    import threading

    s = cai.stream(non_blocking=True)
    x = cai.device_array(4, stream=s)
    seen: list[object] = []
    called = threading.Event()
    with cai.sim.hold(s):
        cai.ops.fill(x, 1.0, stream=s)

        def callback(stream, status, arg):
            seen.append((stream, status, arg))
            called.set()

        s.add_callback(callback, "arg")
        assert not called.is_set()  # the stream's work is held: no callback yet
    assert called.wait(30)
    assert seen == [(s, 0, "arg")]


def test_async_done_resolves_to_the_stream():
    import asyncio

    s = cai.stream(non_blocking=True)
    x = cai.device_array(4, stream=s)
    cai.ops.fill(x, 1.0, stream=s)

    async def main():
        return await asyncio.wait_for(s.async_done(), 30)

    assert asyncio.run(main()) is s


# ----- a light import ------------------------------------------------------------------------

def test_import_loads_no_package_metadata_and_the_version_comes_from_the_build():
    import pathlib
    import re
    import subprocess
    import sys

    code = ("import sys, cai; print('importlib.metadata' in sys.modules); "
            "print(cai.__version__)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    loaded, version = r.stdout.split()
    assert loaded == "False"
    header = (pathlib.Path(__file__).parents[2] / "include/cai/version.h").read_text()
    parts = [re.search(rf"CAI_VERSION_{k} (\d+)", header).group(1)
             for k in ("MAJOR", "MINOR", "PATCH")]
    assert version == ".".join(parts)


# ----- extras and a lean environment ---------------------------------------------------------

ROOT = __import__("pathlib").Path(__file__).parents[2]


def _pins(name):
    lines = (ROOT / name).read_text().splitlines()
    return [ln.split("==")[0].split("[")[0] for ln in lines if ln and not ln.startswith("#")]


def test_extras_and_requirements_split():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert set(extras) == {"dask", "ml-dtypes", "mpi", "numba"}
    assert extras["numba"] == ["numba-cuda"] and extras["ml-dtypes"] == ["ml-dtypes"]
    assert project["dependencies"] == ["numpy>=2.1"]
    # The user-facing pins build cai and nothing more; the tools live in requirements-dev.txt.
    assert _pins("requirements.txt") == ["nanobind", "scikit-build-core", "numpy"]
    dev = _pins("requirements-dev.txt")
    assert dev[0] == "-r requirements.txt"
    assert {"pytest", "hypothesis", "mypy", "ml-dtypes", "distributed", "mpi4py"} <= set(dev)
    assert "-r requirements-dev.txt" in (ROOT / "scripts/setup.sh").read_text()


# ----- no silent host fallback ---------------------------------------------------------------

def _fallback_warnings(fn):
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("default")  # Python's default: once per call site
        fn()
    return [w for w in seen if issubclass(w.category, cai.HostFallbackWarning)]


def test_numpy_functions_and_ufuncs_on_the_host_warn_once_per_call_site():
    a = cai.to_device(np.arange(4.0))

    def calls():
        for _ in range(3):
            assert np.sum(a) == 6.0          # one call site: one warning
            np.testing.assert_array_equal(np.sin(a), np.sin(np.arange(4.0)))
        np.add.reduce(a)

    seen = _fallback_warnings(calls)
    assert [str(w.message).split("(")[0] for w in seen] == [
        "numpy.sum", "numpy.sin", "numpy.add.reduce"]
    assert all(w.filename == __file__ for w in seen)  # the user's line, not cai's
    assert "host copy of the device data" in str(seen[0].message)


def test_explicit_copies_and_device_functions_stay_silent():
    a = cai.to_device(np.arange(4.0))
    seen = _fallback_warnings(lambda: (np.asarray(a), np.array(a), a.copy_to_host(),
                                       np.concatenate([a, a]), np.transpose(a)))
    assert seen == []


def test_the_switch_makes_the_fallback_an_error():
    a = cai.to_device(np.arange(4.0))
    with cai.config.override(HOST_FALLBACK=False):
        with pytest.raises(TypeError, match=r"numpy.sum\(\) on a cai array would compute on "
                                            r"the host, which cai.config.HOST_FALLBACK"):
            np.sum(a)
        with pytest.raises(TypeError, match=r"numpy.sin\(\)"):
            np.sin(a)
        np.testing.assert_array_equal(np.asarray(a), np.arange(4.0))  # explicit: allowed
    assert cai.config.HOST_FALLBACK is True
    with pytest.raises(TypeError, match="HOST_FALLBACK: expected True or False"):
        cai.config.HOST_FALLBACK = "0"


def test_host_fallback_switch_from_the_environment():
    import os
    import subprocess
    import sys

    code = ("import numpy as np, cai\n"
            "print(cai.config.HOST_FALLBACK)\n"
            "try:\n    np.sum(cai.to_device(np.ones(2)))\nexcept TypeError:\n    print('refused')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=os.environ | {"CAI_HOST_FALLBACK": "0"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["False", "refused"]


# ----- errors that name the function, the argument and the dtype ------------------------------

def test_from_dlpack_takes_a_dlpack_device_tuple():
    a = cai.to_device(np.arange(3.0))
    b = cai.from_dlpack(a, device=a.__dlpack_device__())
    assert b.ptr == a.ptr
    c = cai.from_dlpack(a, device=(2, 0), copy=True)
    assert c.ptr != a.ptr and c.copy_to_host().tolist() == [0, 1, 2]
    with pytest.raises(ValueError, match=r"from_dlpack\(\): device=\(1, 0\): DLPack device type 1 "
                                         r"is not a CUDA device"):
        cai.from_dlpack(a, device=(1, 0))
    with pytest.raises(TypeError, match=r"from_dlpack\(\): device=\(2,\): a DLPack device"):
        cai.from_dlpack(a, device=(2,))


def test_device_array_like_of_a_list_names_the_function():
    with pytest.raises(TypeError, match=r"device_array_like\(\): ary must be an array .* got "
                                        r"list; for a list, use np.asarray\(ary\) first"):
        cai.device_array_like([1, 2])


def test_an_external_stream_its_owner_destroyed_is_named_as_undefined():
    owner = cai.stream()
    ext = cai.external_stream(owner.handle)  # does not keep `owner` alive, as Numba's
    del owner
    import gc

    gc.collect()
    with pytest.raises(cai.DeviceError, match=r"never created, or destroyed\); undefined on a "
                                              r"real driver: a stream handle must be live"):
        cai.ops.fill(cai.device_array(4), 1.0, stream=ext)
        ext.synchronize()

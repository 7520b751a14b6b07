"""The extension-author API (include/cai/nanobind/) through tests/ext's probe module, on the
simulator: cai::nb::array's constraints, the typed-view rule, streams, the producer helpers,
for_each, errors, and the module's use of the one cai runtime (no init call, exit).

Every probe test runs against two builds of the same module: one by the project's compiler and
one by clang++ (`_caster_probe_clang`), whose module shares nothing but the C API with cai."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cai
import extensions


@pytest.fixture(params=["_caster_probe", "_caster_probe_clang"], scope="module")
def probe(request):
    return extensions.load(request.param)


def dev(x):
    return cai.to_device(np.asarray(x))


def readonly(a):
    return cai.from_cuda_array_interface({**a.__cuda_array_interface__, "data": (a.ptr, True)},
                                         owner=a)


def strided(base, shape, strides, typestr="<f4"):
    """A view of `base`'s memory with any shape and byte strides."""
    ptr = base.ptr if all(shape) else 0  # CAI v2+: a zero-size array has pointer 0
    return cai.from_cuda_array_interface(
        {"shape": shape, "strides": strides, "typestr": typestr, "data": (ptr, False),
         "version": 3}, owner=base)


# ---- constraints ------------------------------------------------------------------------------

def test_any_layout_gives_element_strides(probe):
    a = dev(np.zeros((4, 6), np.float32))
    d = probe.any_f32_2d(a[::2, ::-3])
    assert d["shape"] == (2, 2) and d["strides"] == (12, -3)
    assert d["data"] == a[::2, ::-3].ptr and d["typestr"] == "<f4"


def test_c_contig(probe):
    a = dev(np.zeros((3, 4), np.float32))
    assert probe.c_f32_2d(a)["strides"] == (4, 1)
    with pytest.raises(TypeError, match=r"not C-contiguous.*c_contig"):
        probe.c_f32_2d(a.T)


def test_f_contig(probe):
    a = dev(np.zeros((3, 4), np.float32))
    assert probe.f_f32_2d(a.T)["strides"] == (1, 4)
    with pytest.raises(TypeError, match=r"not F-contiguous.*f_contig"):
        probe.f_f32_2d(a)


def test_writable(probe):
    a = dev(np.zeros(5, np.int32))
    assert probe.writable_i32_1d(a)["readonly"] is False
    with pytest.raises(TypeError, match="read-only.*writable"):
        probe.writable_i32_1d(readonly(a))
    # read-only arrays are fine where the element type is const
    assert probe.any_f32_2d(readonly(dev(np.zeros((1, 1), np.float32))))["readonly"]


def test_dtype_and_ndim(probe):
    with pytest.raises(TypeError, match=r"^cai.array\[float32, ndim=2\]: dtype is '<f8', "
                                        r"expected '<f4'$"):
        probe.any_f32_2d(dev(np.zeros((2, 2))))
    with pytest.raises(TypeError, match=r"ndim is 1 \(shape \(3,\)\), expected 2"):
        probe.any_f32_2d(dev(np.zeros(3, np.float32)))
    assert probe.scalar_f64(dev(np.float64(2.5))).copy_to_host() == 2.5


def test_masks_refused_unless_allowed(probe):
    data = dev(np.arange(4.0))
    mask = dev(np.array([1, 0, 1, 1], bool))

    class Masked:
        @property
        def __cuda_array_interface__(self):
            return {**data.__cuda_array_interface__, "mask": mask}

    assert probe.masked_f64_1d(Masked())["masked"] is True
    with pytest.raises(TypeError, match="mask.*allow_mask"):
        probe.unmasked_f64_1d(Masked())


def test_non_arrays_get_nanobinds_error(probe):
    with pytest.raises(TypeError, match="incompatible function arguments"):
        probe.any_f32_2d([[1.0]])


def test_host_arrays_are_refused_naming_host_memory_and_the_dtype(probe):
    # host memory, no implicit device copy: the message says so, with the type and dtype
    with pytest.raises(TypeError, match=r"cai.array\[float32, ndim=2\]: got a numpy.ndarray of "
                       r"float32 in host memory.*cai.to_device"):
        probe.any_f32_2d(np.zeros((2, 2), np.float32))
    with pytest.raises(TypeError, match="numpy.ndarray of int64 in host memory"):
        probe.any_f32_2d(np.zeros((2, 2), np.int64))


def test_overloads_pick_the_fitting_one(probe):
    assert probe.overloaded(dev(np.zeros(2, np.float32))) == "f32"
    assert probe.overloaded(dev(np.zeros(2, np.float64))) == "f64"


def test_signature_text_is_the_python_name(probe):
    assert probe.signature() == "cai.array[float32, ndim=2, c_contig, writable]"
    # In signatures (and stubs), valid Python: cai.array of cai/typing.py with the spec.
    assert 'x: cai.array[typing.Literal["float32, ndim=2"]]' in probe.axpy.__doc__
    assert 'y: cai.array[typing.Literal["float32, ndim=2, writable"]]' in probe.axpy.__doc__


def test_cast_in_cpp(probe):
    assert probe.cast_f32_2d(dev(np.zeros((2, 3), np.float32)))["shape"] == (2, 3)
    with pytest.raises(TypeError, match=r"cai.array\[float32, ndim=2\]: dtype is '<i8'"):
        probe.cast_f32_2d(dev(np.zeros((2, 3), np.int64)))
    with pytest.raises(TypeError, match="no __cuda_array_interface__"):
        probe.cast_f32_2d(object())


# ---- the typed-view rule (docs/cpp-typed-view.md), the same in every front end ---------------

def test_typed_view_rule_empty_array_any_stride(probe):
    base = dev(np.zeros(16, np.float32))
    a = strided(base, (0, 3), (12, 2))  # axis 1 not divisible, but no address depends on it
    assert probe.any_f32_2d(a)["strides"] == (3, 1)
    assert cai.Array(a).strides == (3, 1)
    assert cai._cai._element_strides(a) == (3, 1)


def test_typed_view_rule_extent_one_keeps_divisible_stride(probe):
    base = dev(np.zeros(16, np.float32))
    a = strided(base, (1, 3), (12, 4))
    assert probe.any_f32_2d(a)["strides"] == (3, 1)
    assert cai.Array(a).strides == (3, 1)
    probes = extensions.load("_cai_probes")
    assert probes.exchange_export(a)["strides"] == (3, 1)  # DLPack export: the same rule
    b = strided(base, (1, 3), (7, 4))  # not divisible: the row-major stride
    assert probe.any_f32_2d(b)["strides"] == (3, 1)
    assert cai.Array(b).strides == (3, 1)


def test_typed_view_rule_refuses_a_stride_that_addresses_elements(probe):
    base = dev(np.zeros(16, np.float32))
    a = strided(base, (2, 3), (12, 6))
    message = "axis 1 has a byte stride of 6, which is not a multiple of the item size 4"
    with pytest.raises(TypeError, match=message):
        probe.any_f32_2d(a)
    with pytest.raises(ValueError, match=message):
        cai.Array(a)


def test_typed_view_rule_refuses_item_size_zero():
    base = dev(np.zeros(4, np.uint8))
    empty_type = strided(base, (3,), (0,), typestr="|V0")
    with pytest.raises(ValueError, match="item size of 0"):
        cai.Array(empty_type)


# ---- streams ----------------------------------------------------------------------------------

def test_stream_argument(probe):
    s = cai.stream()
    assert probe.stream_of() == 1
    assert probe.stream_of(s) == s.handle
    assert probe.stream_of(0) == 1
    assert probe.stream_of(5) == 5

    class CudaStream:
        def __cuda_stream__(self):
            return (0, s.handle)

    assert probe.stream_of(CudaStream()) == s.handle
    with pytest.raises(TypeError, match="incompatible function arguments"):
        probe.stream_of("fast")


# ---- producers --------------------------------------------------------------------------------

def test_returning_an_array_wraps_the_same_memory(probe):
    a = dev(np.arange(3, dtype=np.float32))
    b = probe.wrap(a[1:])
    assert isinstance(b, cai.DeviceNDArray) and b.ptr == a[1:].ptr
    np.testing.assert_array_equal(b.copy_to_host(), [1, 2])


def test_empty_makes_a_runtime_array_on_the_stream(probe):
    s = cai.stream()
    e = probe.empty_f32(4, stream=s)
    assert isinstance(e, cai.DeviceNDArray) and e.shape == (4,) and e.stream.handle == s.handle
    assert probe.empty_f32(0).size == 0


@pytest.mark.parametrize("cpp_owner", [False, True])
def test_make_array_exports_both_protocols_and_keeps_its_owner(probe, cpp_owner):
    a = dev(np.arange(6, dtype=np.float32))
    released = probe.owners_released()
    v = probe.view_of(a, cpp_owner)
    assert isinstance(v, cai.DeviceNDArray) and v.ptr == a.ptr
    assert v.__cuda_array_interface__["typestr"] == "<f4"
    np.testing.assert_array_equal(np.from_dlpack(v, device="cpu", copy=True), np.arange(6))
    w = v[::2]
    del v
    assert probe.owners_released() == released  # the slice still needs the owner
    del w
    assert probe.owners_released() == released + (1 if cpp_owner else 0)


# ---- for_each ---------------------------------------------------------------------------------

def test_for_each_on_any_layout(probe):
    host_x = np.arange(20, dtype=np.float32).reshape(4, 5)
    x = cai.to_device(host_x)
    y = cai.to_device(np.ones((5, 4), np.float32))
    probe.axpy(2.0, x.T, y[:, ::-1])  # transposed input, reversed output
    np.testing.assert_array_equal(y.copy_to_host()[:, ::-1], 2 * host_x.T + 1)


def test_for_each_checks_shapes(probe):
    with pytest.raises(ValueError, match="array 1 has extent 3 on axis 0, array 0 has 2"):
        probe.axpy(1.0, dev(np.zeros((2, 2), np.float32)), dev(np.zeros((3, 2), np.float32)))


def test_for_each_is_stream_ordered_without_blocking(probe):
    s, consumer = cai.stream(non_blocking=True), cai.stream(non_blocking=True)
    x = cai.device_array((8, 8), dtype=np.float32, stream=s)
    y = cai.to_device(np.zeros((8, 8), np.float32))
    with cai.sim.hold(s):
        x[...] = 1.0  # queued on s behind the gate
        probe.axpy(3.0, x, y, stream=consumer)  # waits for s with an event
        assert not s.query()  # the host did not wait
    np.testing.assert_array_equal(y.copy_to_host(), np.full((8, 8), 3.0))


def test_for_each_functor_failure_is_reported_by_synchronize(probe):
    s = cai.stream()
    out = probe.empty_f32(3, stream=s)
    probe.throwing(out, stream=s)
    with pytest.raises(cai.DeviceError, match="the functor failed"):
        s.synchronize()


def test_cai_errors_of_the_module_become_their_python_exceptions(probe):
    with pytest.raises(IndexError, match=r"ArrayRef::slice\(\): .*start <= stop <= N"):
        probe.slice_error(dev(np.zeros(3, np.float32)))


# ---- one runtime per process --------------------------------------------------------------------

def run_python(code, probe_name, timeout):
    env = {**os.environ, "CAI_BACKEND": "sim"}
    env["PYTHONPATH"] = os.pathsep.join([str(extensions.directory(probe_name)),
                                         env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, timeout=timeout,
                          capture_output=True, text=True)


def test_no_init_call_the_module_imports_cai_itself(probe):
    # A fresh interpreter that imports the module before cai: its first call fetches the C API.
    r = run_python(f"""
        import sys
        import {probe.__name__} as p
        assert "cai" not in sys.modules
        e = p.empty_f32(3)
        import cai
        assert isinstance(e, cai.DeviceNDArray)
        p.fill(e, 2.0)
        print(e.copy_to_host().tolist())
    """, probe.__name__, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[2.0, 2.0, 2.0]"


def test_exit_does_not_wait_for_an_extension_arrays_slow_stream(probe):
    # The module's arrays are the runtime's: at exit they are left to the runtime's exit
    # handling, which does not wait for streams. A hang check: the stream is delayed 60 s.
    r = run_python(f"""
        import cai
        import {probe.__name__} as p
        s = cai.stream()
        cai.sim.delay(s, 60)
        kept_by_python = p.empty_f32(1000, stream=s)
        p.fill(kept_by_python, 1.0, stream=s)  # queued behind the delay
        kept_by_cpp = p.empty_f32(1000, stream=s)
        p.fill(kept_by_cpp, 2.0, stream=s)
        p.keep(kept_by_cpp)  # a C++ static holds it past finalization
        del kept_by_cpp
        print("exiting")
    """, probe.__name__, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "exiting"


def test_a_module_of_another_compiler_was_built():
    # The clang++ build is what shows that no compiler ABI crosses the C API; CI builds it.
    if not extensions.is_built("_caster_probe_clang"):
        pytest.skip("tests/ext was not built with clang++ (scripts/test.sh does where it exists)")
    p = extensions.load("_caster_probe_clang")
    with open(p.__file__, "rb") as f:
        assert b"clang version" in f.read()

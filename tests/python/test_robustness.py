"""Issue 13: ordinary calls that crashed, hung, leaked or silently misread, one regression test
per item (the numbers are the issue's). Cases that could crash or hang the interpreter run in a
fresh one (helpers.run_isolated). Cycles, uninitialized instances and exit with daemon threads
are in test_lifetime_stress.py and test_shutdown.py."""

import gc
import os
import threading
import types
import weakref

os.environ.setdefault("CAI_BACKEND", "sim")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import cai  # noqa: E402
from helpers import (  # noqa: E402
    DictProducer, DLWrapper, Index, run_isolated, run_isolated_many)


# ----- 1. first use from several threads ------------------------------------------------------

FIRST_USE = """
    import sys, threading
    import cai
    n = 8
    barrier = threading.Barrier(n)
    out = []
    def first_call():
        barrier.wait()
        out.append(cai.device_array(4).shape)
    threads = [threading.Thread(target=first_call) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(len(out))
"""


def test_first_use_from_several_threads_does_not_deadlock():
    """A function-local static imported NumPy while holding its guard; a thread waiting on the
    guard held the GIL: 6 deadlocks out of 6. A hang is a TimeoutExpired here."""
    for r in run_isolated_many(FIRST_USE, runs=6, timeout=60):
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.strip() == "8"


# ----- 2. shapes: integer arrays, failing __index__ -------------------------------------------

def BadIndex():
    return Index(raises=RuntimeError("no index"))


@pytest.mark.parametrize("shape, expected", [
    (np.array([2, 3]), (2, 3)),
    (np.array(5), (5,)),                      # a 0-d integer array is one size, as in NumPy
    (np.array([4], dtype=np.uint8), (4,)),
    ([np.int64(2), np.int32(3)], (2, 3)),
    (range(2, 4), (2, 3)),
    (np.int16(7), (7,)),
])
def test_integer_arrays_and_numpy_integers_as_shape(shape, expected):
    assert cai.device_array(shape).shape == expected
    assert np.empty(shape).shape == expected   # the same as NumPy


@pytest.mark.parametrize("shape, error, match", [
    (np.array([2.0, 3.0]), TypeError, "shape: expected a tuple of int, got numpy.float64"),
    (np.array([True]), TypeError, "got numpy.bool"),
    (True, TypeError, "shape: expected an int or a sequence of int, got bool"),
    (2.5, TypeError, "shape: expected an int or a sequence of int, got float"),
    ("ab", TypeError, "got str"),
    (None, TypeError, "got NoneType"),
    ((BadIndex(),), RuntimeError, "no index"),
    (BadIndex(), RuntimeError, "no index"),
    (2 ** 63, OverflowError, "shape: 9223372036854775808 does not fit in a signed 64-bit integer"),
    ((1, -(2 ** 64)), OverflowError, "does not fit in a signed 64-bit integer"),
    (np.zeros((2, 2), dtype=np.int64), TypeError, "got numpy.ndarray"),
])
def test_shapes_that_are_refused(shape, error, match):
    """Before: a segfault for any shape whose __index__ failed (an unchecked PyNumber_Index),
    RuntimeError: std::bad_cast for 2**63."""
    with pytest.raises(error, match=match.replace("(", r"\(").replace(")", r"\)")):
        cai.device_array(shape)


def test_strides_and_like_shapes_take_integer_arrays():
    assert cai.device_array(3, strides=np.array([16])).strides == (16,)

    class Like:
        shape = np.array([2, 3])
        dtype = np.float32

    assert cai.device_array_like(Like()).shape == (2, 3)
    with pytest.raises(RuntimeError, match="no index"):
        cai.device_array(1, strides=(BadIndex(),))


def test_shape_crash_cases_in_a_fresh_interpreter():
    """The original reproducers, each of which killed the interpreter."""
    r = run_isolated("""
        import numpy as np, cai
        for call in (lambda: cai.device_array(np.array([2, 3])),
                     lambda: cai.device_array(3, strides=np.array([8])),
                     lambda: cai.device_array(np.array([[1]]))):
            try:
                call()
            except TypeError:
                pass
        print("alive")
    """)
    assert r.returncode == 0 and r.stdout.strip() == "alive", r.stderr[-2000:]


# ----- 7. the DLPack exchange-API type cache ----------------------------------------------------

API = cai.DeviceNDArray.__dlpack_c_exchange_api__


def test_exchange_api_cache_keeps_no_type_alive():
    refs = []
    for i in range(2000):
        T = type(f"Producer{i}", (), {"__dlpack_c_exchange_api__": API})
        with pytest.raises(TypeError, match="not a cai.DeviceNDArray"):
            cai.from_dlpack(T())
        refs.append(weakref.ref(T))
        del T
    gc.collect()
    assert sum(r() is not None for r in refs) == 0


def test_exchange_api_cache_sees_a_deleted_or_added_attribute():
    arr = cai.to_device(np.arange(4.0))

    class Producer(DLWrapper):
        __dlpack_c_exchange_api__ = API

    with pytest.raises(TypeError, match="not a cai.DeviceNDArray"):
        cai.from_dlpack(Producer(arr))       # the table is used (and cached)
    del Producer.__dlpack_c_exchange_api__
    out = cai.from_dlpack(Producer(arr))     # now the __dlpack__ road
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(4.0))
    Producer.__dlpack_c_exchange_api__ = API
    with pytest.raises(TypeError, match="not a cai.DeviceNDArray"):
        cai.from_dlpack(Producer(arr))


# ----- 9. freeing without the GIL ---------------------------------------------------------------

def test_freeing_does_not_block_other_threads():
    """del of an array whose stream still has queued work returns while that work is queued
    (a backend thread frees the memory), and other Python threads run meanwhile."""
    s = cai.stream(non_blocking=True)
    cai.sim.delay(s, 2.0)
    x = cai.device_array(1 << 12, stream=s)
    cai.ops.fill(x, 1.0)                  # queued behind the delay
    entering = threading.Event()
    ref = weakref.ref(x, lambda _: entering.set())   # runs just before the free
    holder = [x]
    del x

    def drop():
        holder.clear()

    t = threading.Thread(target=drop)
    t.start()
    assert entering.wait(timeout=30)
    busy_while_freeing = not s.query()
    t.join()
    assert ref() is None
    assert busy_while_freeing, "the free held the GIL until the stream drained"


def test_freeing_waits_for_no_unrelated_stream():
    """The driver's free waits for every stream of the device; dropping arrays that never used
    a busy stream must not (issue: del waited 1.45 s for a delayed stream, holding the GIL).
    In a fresh interpreter: a free that waited for the held stream would hang it."""
    r = run_isolated("""
        import numpy as np, cai
        s = cai.stream()
        other = [cai.to_device(np.ones(100)), cai.pinned_array(10), cai.managed_array(10)]
        with cai.sim.hold(s):
            cai.ops.fill(cai.device_array(8, stream=s), 1.0)   # queued behind the hold
            other.clear()                                       # must return
            assert not s.query()
        cai.synchronize()                                       # the frees are done too
        print("returned")
    """, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "returned", r.stderr[-2000:]


# ----- 11. masks are refused where they cannot be carried, never dropped ------------------------

@pytest.fixture
def masked():
    src = cai.to_device(np.arange(6.0))
    m = cai.to_device(np.array([1, 0, 1, 1, 0, 1], dtype=np.bool_))
    return cai.as_cuda_array(DictProducer(src.__cuda_array_interface__ | {"mask": m}, keep=src))


def test_masked_value_is_not_assigned_without_its_mask(masked):
    y = cai.device_array(6)
    with pytest.raises(NotImplementedError, match="masked"):
        y[...] = masked
    with pytest.raises(NotImplementedError, match="masked"):
        y[:] = masked[::-1]
    with pytest.raises(NotImplementedError, match="masked"):
        y.copy_to_device(masked)
    with pytest.raises(NotImplementedError, match="masked"):
        cai.to_device(masked)


def test_masked_array_is_not_exported_through_dlpack(masked):
    with pytest.raises(BufferError, match="cannot carry a mask"):
        masked.__dlpack__(max_version=(1, 3))
    with pytest.raises(BufferError, match="cannot carry a mask"):
        np.from_dlpack(masked, device="cpu", copy=True)
    with pytest.raises(BufferError, match="cannot carry a mask"):
        cai.from_dlpack(DLWrapper(masked))
    with pytest.raises(BufferError, match="cannot carry a mask"):
        cai.Array(masked).__dlpack__()


def test_masked_array_keeps_its_mask_through_cai_array(masked):
    a = cai.Array(masked).slice(0, 1, 4)
    d = a.__cuda_array_interface__
    np.testing.assert_array_equal(cai.as_cuda_array(d["mask"]).copy_to_host(), [0, 1, 1])


def test_masked_array_to_numpy_is_refused(masked):
    with pytest.raises(NotImplementedError, match="copy_to_host.. gives a numpy.ma.MaskedArray"):
        np.asarray(masked)
    with pytest.raises(NotImplementedError, match="mask"):
        bool(masked[2:3])                        # a truth value cannot carry the mask either


# A masked array reaches the host with its mask (docs/python.md): copy_to_host() gives a
# numpy.ma.MaskedArray, masked (NumPy: invalid) where the CAI mask is false.

def test_masked_copy_to_host_is_a_masked_array():
    values = np.arange(12.0).reshape(3, 4)
    valid = np.array([[1, 0, 2, 1], [0, 0, 1, 1], [1, 1, 1, 0]], np.uint8)
    for order in "CF":
        data, mask = (cai.to_device(np.asarray(x, order=order)) for x in (values, valid))
        arr = cai.from_cuda_array_interface(data.__cuda_array_interface__ | {"mask": mask},
                                            owner=data)
        for take in (lambda x: x, lambda x: x[::-1, 1::2], lambda x: x.T):
            host = take(arr).copy_to_host()
            assert type(host) is np.ma.MaskedArray and host.dtype == np.float64
            np.testing.assert_array_equal(host.data, take(values))
            np.testing.assert_array_equal(host.mask, take(valid) == 0)


def test_masked_copy_to_host_into_an_array(masked):
    out = np.ma.zeros(6)
    assert masked.copy_to_host(out) is out
    np.testing.assert_array_equal(out.data, np.arange(6.0))
    np.testing.assert_array_equal(out.mask, [0, 1, 0, 0, 1, 0])
    plain = np.zeros(6)
    with pytest.raises(TypeError, match="must be a numpy.ma.MaskedArray"):
        masked.copy_to_host(plain)
    hard = np.ma.array(np.full(6, -1.0), mask=False, hard_mask=True)
    with pytest.raises(ValueError, match="hard mask"):
        masked.copy_to_host(hard)
    assert (plain == 0).all() and (hard.data == -1).all() and not hard.mask.any()  # untouched


# ----- 13. a read-only flag whose __bool__ raises ------------------------------------------------

class RaisingFlag(int):
    def __bool__(self):
        raise RuntimeError("flag failed")


def test_readonly_flag_that_raises_is_an_error_not_writable():
    src = cai.to_device(np.arange(4.0))
    d = dict(src.__cuda_array_interface__)
    d["data"] = (d["data"][0], RaisingFlag(1))
    for call in (lambda: cai.from_cuda_array_interface(d, owner=src),
                 lambda: cai.as_cuda_array(DictProducer(d, keep=src)),
                 lambda: cai.ops.copy(DictProducer(d, keep=src), cai.to_device(np.zeros(4)))):
        with pytest.raises(RuntimeError, match="flag failed"):
            call()
    np.testing.assert_array_equal(src.copy_to_host(), np.arange(4.0))   # nothing written


# ----- 14, 15. NumPy's protocols: __array__ and bool() -------------------------------------------

def test_asarray_is_a_host_copy():
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    a = cai.to_device(host)
    out = np.asarray(a)
    assert type(out) is np.ndarray and out.dtype == np.float32
    np.testing.assert_array_equal(out, host)
    np.testing.assert_array_equal(np.asarray(a[:, ::2].T), host[:, ::2].T)
    assert np.asarray(a, dtype=np.float64).dtype == np.float64
    np.testing.assert_array_equal(np.array(a) + 1, host + 1)
    with pytest.raises(ValueError, match="copy=False"):
        np.asarray(a, copy=False)


@pytest.mark.parametrize("values, expected", [([0.0], False), ([2.5], True), ([[7]], True),
                                              (np.float64(0), False)])
def test_bool_of_one_element(values, expected):
    assert bool(cai.to_device(np.asarray(values))) is expected


@pytest.mark.parametrize("shape", [(2,), (2, 3), (0,)])
def test_bool_of_other_sizes_is_ambiguous(shape):
    a = cai.device_array(shape)
    with pytest.raises(ValueError, match="ambiguous"):
        bool(a)
    with pytest.raises(ValueError, match="ambiguous"):
        bool(np.empty(shape))                    # as NumPy


# ----- 16, 17. clear errors ------------------------------------------------------------------------

def test_item_size_zero_in_cai_array():
    with pytest.raises(ValueError, match="item size (of )?0"):
        cai.Array(cai.device_array(3, dtype="V0"))


@pytest.mark.parametrize("seconds", [1e20, float("inf"), float("nan"), -1.0, 3600.5])
def test_absurd_simulator_delays_are_refused(seconds):
    with pytest.raises(ValueError, match=r"delay\(\): seconds must be in \[0, 3600\]"):
        cai.sim.delay(cai.stream(), seconds)


@pytest.mark.parametrize("value", ["0", "1", 0, 1, None, np.True_])
def test_config_flags_take_only_bools(value):
    with pytest.raises(TypeError, match="expected True or False"):
        cai.config.CUDA_ARRAY_INTERFACE_SYNC = value
    with pytest.raises(TypeError, match="expected True or False"):
        cai.config.EXPORT_STREAM = value
    assert cai.config.CUDA_ARRAY_INTERFACE_SYNC is True and cai.config.EXPORT_STREAM is True


def test_stream_objects_and_numpy_integers_are_integers_everywhere():
    s = cai.stream()
    a = cai.device_array(4, stream=np.uint64(s.handle))
    assert a.stream == s
    a.__dlpack__(stream=s, max_version=(1, 3))
    cai.ops.fill(a, 1.0, stream=np.int64(s.handle))
    assert cai.external_stream(np.uint64(s.handle)) == s
    with pytest.raises(TypeError, match="expected None or an int, got bool"):
        a.__dlpack__(stream=True)


def test_as_cuda_array_of_host_data_is_a_type_error():
    """Numba raises TypeError for anything that is not a GPU array, and code written for it
    catches TypeError; from_dlpack keeps DLPack's BufferError."""
    with pytest.raises(TypeError, match="the tensor is in CPU memory"):
        cai.as_cuda_array(np.arange(3))
    with pytest.raises(TypeError, match="the tensor is in CPU memory"):
        cai.ops.copy(cai.device_array(3), np.arange(3.0))
    with pytest.raises(BufferError, match="pass copy=True"):
        cai.from_dlpack(np.arange(3))


@pytest.mark.parametrize("call, match", [
    (lambda: cai.as_cuda_array(None),
     r"as_cuda_array\(\): NoneType object has no __cuda_array_interface__ \(expected a GPU array"),
    (lambda: cai.from_dlpack(None), r"from_dlpack\(\): NoneType object has no __dlpack__"),
    (lambda: cai.from_cuda_array_interface(None),
     r"__cuda_array_interface__ must be a dict, got NoneType"),
    (lambda: cai.as_cuda_array(types.SimpleNamespace()),
     r"SimpleNamespace object has no __cuda_array_interface__"),
])
def test_none_and_other_objects_say_what_is_expected(call, match):
    with pytest.raises(TypeError, match=match):
        call()


def test_the_package_has_no_module_getattr():
    # A module-level __getattr__ stops CPython from specializing `cai.<name>` lookups, a cost on
    # every call (docs/python.md, "Importing cai"); the NumPy subclasses are defined at import.
    assert "__getattr__" not in vars(cai)
    assert issubclass(cai.ManagedNDArray, np.ndarray) and issubclass(cai.MappedNDArray, np.ndarray)

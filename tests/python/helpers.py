"""Helpers shared by the test files (imported as `helpers`; pytest puts this folder on sys.path)."""

import gc

import numpy as np


class Producer:
    """A foreign object exporting a CAI dict that points at a cai array's memory.

    Keeps `arr` alive (like any real producer keeps its memory alive). `version` selects the
    dict a producer of that version would write: v0 has no mask and no stream, v0-v2 no stream.
    `stream` and `changes` override keys (`Producer.DROP` removes the key). Every read builds a
    new dict and is counted in `reads`.
    """

    DROP = object()
    KEEP = object()

    def __init__(self, arr, version=3, stream=KEEP, **changes):
        self.arr = arr
        d = dict(arr.__cuda_array_interface__)
        if version is Producer.DROP:
            del d["version"]
        else:
            d["version"] = version
        if isinstance(version, int) and version < 3:
            d.pop("stream", None)
        if isinstance(version, int) and version < 1:
            d.pop("mask", None)
        if stream is Producer.DROP:
            d.pop("stream", None)
        elif stream is not Producer.KEEP:
            d["stream"] = stream
        for key, value in changes.items():
            if value is Producer.DROP:
                d.pop(key, None)
            else:
                d[key] = value
        self._desc = d
        self.reads = 0

    @property
    def __cuda_array_interface__(self):
        self.reads += 1
        return dict(self._desc)


class CudaStream:
    """A foreign stream object (cuda.core's __cuda_stream__ protocol) written in Python."""

    def __init__(self, handle=1):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


class Answer:
    """Python code that cai runs while reading: its protocol method returns `value`, or raises
    `raises` when given."""

    def __init__(self, value=None, raises=None):
        self.value = value
        self.raises = raises

    def answer(self):
        if self.raises is not None:
            # A new exception each time: a raised one keeps the frames of its traceback (and
            # the arrays in them) alive for as long as it lives.
            raise type(self.raises)(*self.raises.args)
        return self.value


class Index(Answer):
    """An integer through __index__ only."""

    __index__ = Answer.answer


class CudaStreamObj(Answer):
    """An object whose __cuda_stream__ returns `value`, or raises."""

    __cuda_stream__ = Answer.answer


class AttrProducer(Answer):
    """An object whose __cuda_array_interface__ is any value, or a property that raises."""

    __cuda_array_interface__ = property(Answer.answer)


class Owner:
    """Owns device memory and uses cai in its finalizer."""

    def __init__(self):
        import cai
        self.cai = cai
        self.arr = cai.to_device(np.arange(8))

    def __del__(self):
        self.cai.ops.fill(self.arr, 0)
        self.arr.copy_to_host()


def host_bytes(arr):
    """The raw bytes of a NumPy array in C order (compares NaNs exactly). Structured types
    give the bytes of each field: NumPy itself does not preserve padding bytes when it copies."""
    if arr.dtype.names:
        return b"".join(host_bytes(arr[name]) for name in arr.dtype.names)
    return np.ascontiguousarray(arr).tobytes()


class DictProducer:
    """A foreign CAI producer over a fixed dict (a new copy per read, like CuPy and Numba);
    `keep` is what keeps the memory alive, as a real producer owns it."""

    def __init__(self, desc, keep=None):
        self.desc = desc
        self.keep = keep

    @property
    def __cuda_array_interface__(self):
        return dict(self.desc)


class CaiOnly:
    """A foreign CAI producer over a cai array: its current dict (with its stream), nothing
    else (no DLPack)."""

    def __init__(self, arr):
        self.arr = arr

    @property
    def __cuda_array_interface__(self):
        return self.arr.__cuda_array_interface__


class DLWrapper:
    """A foreign DLPack producer over a cai array (no C exchange API: the capsule road)."""

    def __init__(self, arr):
        self.arr = arr

    def __dlpack__(self, **kwargs):
        return self.arr.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()


# ----- DLPack structs through ctypes: any type code, as a foreign producer writes it -------------

import ctypes  # noqa: E402


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


ctypes.pythonapi.PyCapsule_New.restype = ctypes.py_object
ctypes.pythonapi.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
ctypes.pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
ctypes.pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def dlpack_type(capsule):
    """(code, bits, lanes) of the tensor in a 'dltensor_versioned' capsule."""
    ptr = ctypes.pythonapi.PyCapsule_GetPointer(capsule, b"dltensor_versioned")
    t = _DLManagedTensorVersioned.from_address(ptr).dl_tensor.dtype
    return t.code, t.bits, t.lanes


DLPACK_FLAG_IS_SUBBYTE_TYPE_PADDED = 1 << 2


def dlpack_flags(capsule):
    """The flags of the tensor in a 'dltensor_versioned' capsule."""
    ptr = ctypes.pythonapi.PyCapsule_GetPointer(capsule, b"dltensor_versioned")
    return _DLManagedTensorVersioned.from_address(ptr).flags


class TypedDLPack:
    """A foreign DLPack 1.3 producer written with ctypes, as a C library would: it describes the
    bytes of a 1-d cai array as elements of any DLPack type (code, bits), e.g. the float8
    codes, which no NumPy type names (sub-byte types take one byte each, and say so with
    IS_SUBBYTE_TYPE_PADDED unless `padded=False`: then they claim to be packed). No deleter: the
    struct and the memory live as long as the process (as a C library's static tensor), so an
    import may outlive the producer object (a consumer reads the struct again when it
    releases the import; the tests once freed it first)."""

    _kept = []  # every producer made: the structs are never freed

    @classmethod
    def release_arrays(cls):
        """At the end of the session (conftest.py): the producers' arrays go, their structs stay.
        pytest and hypothesis keep the session's objects past the interpreter's cleanup, and
        through them this module's classes (they stay with cai's calls replaced by no-ops), so
        arrays kept here were reported by nanobind as leaked at exit."""
        for producer in cls._kept:
            producer.base = None

    def __init__(self, base, code, bits, padded=True):
        assert base.ndim == 1 and base.is_c_contiguous()
        TypedDLPack._kept.append(self)
        self.base = base
        self.shape = (ctypes.c_int64 * 1)(base.nbytes // max(1, bits // 8))
        self.strides = (ctypes.c_int64 * 1)(1)
        self.tensor = _DLManagedTensorVersioned(
            major=1, minor=3,
            flags=DLPACK_FLAG_IS_SUBBYTE_TYPE_PADDED if padded and bits < 8 else 0,
            dl_tensor=_DLTensor(
                data=base.ptr, device=_DLDevice(2, 0), ndim=1, dtype=_DLDataType(code, bits, 1),
                shape=self.shape, strides=self.strides, byte_offset=0))

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.base.synchronize()  # a simple producer: its data are ready when it hands them out
        return ctypes.pythonapi.PyCapsule_New(ctypes.addressof(self.tensor),
                                              b"dltensor_versioned", None)

    def __dlpack_device__(self):
        return (2, 0)


# ----- subprocesses and build folders ----------------------------------------------------------

import os  # noqa: E402
import pathlib  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


def isolated_env(extra=None, pythonpath=()):
    """The environment of an isolated run: this one (so a sanitizer's LD_PRELOAD and the
    package path carry over) on the simulator, with `pythonpath` entries in front."""
    env = os.environ | {"CAI_BACKEND": "sim"} | (extra or {})
    paths = [str(p) for p in pythonpath] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                           if p]
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def run_isolated(code, timeout=60, env=None, pythonpath=(), args=None):
    """Runs `code` (dedented) in a fresh interpreter, so that a crash, an abort or a hang fails
    one test instead of the whole run. Returns the CompletedProcess (returncode, stdout,
    stderr); a hang past `timeout` raises subprocess.TimeoutExpired."""
    cmd = [sys.executable] + (args if args is not None else ["-c", textwrap.dedent(code)])
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=isolated_env(env, pythonpath))


def run_isolated_many(code, runs, timeout=60, env=None, pythonpath=()):
    """`runs` fresh interpreters running `code` at once (for failures that show up only in
    some runs: races at exit). Returns their CompletedProcess objects."""
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=isolated_env(env, pythonpath)) for _ in range(runs)]
    out = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=timeout)
            out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return out


def build_dir(name):
    """build/<name> at the repository root: where scripts/test.sh builds the extra projects
    (examples/add_extension, tests/caster_ext, bench/caster_ext, the C++ benchmark)."""
    return ROOT / "build" / name


def built_or_skip(name, pattern):
    """The build folder `name` if it holds a file matching `pattern`, else skips the module
    that asks (scripts/test.sh builds it)."""
    import pytest
    d = build_dir(name)
    if not any(d.glob(pattern)):
        pytest.skip(f"{name} is not built in {d} (scripts/test.sh builds it)",
                    allow_module_level=True)
    return d


def pending_fill(stream, n, dtype, value, delay):
    """An array filled with `value` on `stream` behind `delay` seconds of simulated work, and a
    view of it imported with sync=False, whose use is not ordered after the fill."""
    import cai
    a = cai.device_array(n, dtype=dtype, stream=stream)
    cai.synchronize()
    cai.sim.delay(stream, delay)
    cai.ops.fill(a, value, stream=stream)
    return a, cai.from_cuda_array_interface(a.__cuda_array_interface__, sync=False)


def collect():
    """A full collection, twice: finalizers run by the first can free more."""
    gc.collect()
    gc.collect()


def kept(ref):
    """Whether the object behind the weak reference `ref` survives a full collection."""
    collect()
    return ref() is not None

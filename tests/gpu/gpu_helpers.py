"""Shared pieces of the GPU suite (imported as `gpu_helpers`; pytest puts this folder on sys.path).

- `peer(name)`: one adapter per foreign library (CuPy, PyTorch, JAX, numba-cuda, cuda.core),
  imported on first use; a library that is missing, or fails to import (numba on a NumPy it does
  not support), skips the calling test with the reason.
- `LAYOUTS`, `DTYPES`, `values()`: the layouts and dtypes of the zero-copy matrix.
- `Spinner`: a one-thread CuPy kernel that keeps a stream busy for a given time, so that the
  ordering tests have a producer whose data is not ready yet.
- `peer_limitation()`: tells a limitation of a foreign consumer from a cai bug by repeating the
  failing step with the same layout exported by a neutral producer (CuPy).

Only cai's public Python API is used.
"""

from __future__ import annotations

import contextlib
import importlib
import os

import numpy as np
import pytest

import cai

# ----- layouts and dtypes -------------------------------------------------------------------------

# name -> (shape of the contiguous base allocation, the view taken of it). Every library's
# basic indexing understands these, so one spelling builds the NumPy reference and the device
# views alike.
LAYOUTS = {
    "C": ((3, 4), lambda a: a),
    "F": ((4, 3), lambda a: a.T),
    "stepped": ((6, 8), lambda a: a[::2, 1::3]),
    "negative": ((3, 4), lambda a: a[::-1, ::-2]),
    "0d": ((), lambda a: a),
    "empty": ((0, 4), lambda a: a),
}

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]


def values(dtype, shape, seed):
    """Distinct, exactly representable values of `dtype` (different for each seed)."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    i = np.arange(n, dtype=np.int64) + 11 * seed
    if dtype.kind == "b":
        v = (i % 3) == (seed % 3)
    elif dtype.kind in "iu":
        v = (i * 7 + seed) % 100
    elif dtype.kind == "f":
        v = i * 0.5 - 3
    else:
        v = i * 0.5 + 1j * (seed - i)
    return np.asarray(v).astype(dtype).reshape(shape)


def reference(layout, dtype, seed=1):
    """(host base, view of it, the view's values): the base is zero outside the view."""
    base_shape, view = LAYOUTS[layout]
    base = np.zeros(base_shape, dtype)
    expect = values(dtype, view(base).shape, seed)
    view(base)[...] = expect
    return base, view, expect


def ptr_of_view(host_view, host_base, device_base_ptr):
    """Device address of the view's first element, given where the base starts."""
    if host_view.size == 0:
        return None
    offset = host_view.__array_interface__["data"][0] - host_base.__array_interface__["data"][0]
    return device_base_ptr + offset


def significant_strides(shape, strides):
    """Strides of the dims with more than one element (the others, and all strides of an empty
    array, carry no information)."""
    if 0 in tuple(shape):
        return ()
    return tuple(s for n, s in zip(shape, strides) if n > 1)


def c_order(host):
    """A C-contiguous copy that keeps 0-d arrays 0-d (np.ascontiguousarray makes them 1-d)."""
    return np.array(host, order="C", copy=True)


# ----- optional libraries -------------------------------------------------------------------------

_imported: dict[str, object] = {}


def optional_import(name):
    """The module, or a skip naming why it is unusable (any import error counts: numba refuses
    NumPy versions it was not built for)."""
    if name not in _imported:
        try:
            _imported[name] = importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - any failure to import means "not usable here"
            _imported[name] = f"{name} is not usable here: {type(e).__name__}: {e}"
    module = _imported[name]
    if isinstance(module, str):
        pytest.skip(module)
    return module


def is_numba_error(exc):
    """numba-cuda's own errors (its JIT fails on some NumPy versions): a skip, not a failure."""
    return type(exc).__module__.split(".")[0] in ("numba", "numba_cuda")


# ----- the foreign libraries, one adapter each ----------------------------------------------------


class Peer:
    """How one foreign library makes, reads, writes and exchanges device arrays."""

    name = ""
    exports = ("cai", "dlpack")  # protocols its arrays export
    imports = ("cai", "dlpack")  # protocols it consumes
    views = tuple(LAYOUTS)  # layouts it can make as views of a base allocation
    writable_imports = True

    def from_host(self, host):  # a contiguous device copy of a host array
        raise NotImplementedError

    def make(self, host):
        """from_host(), where a failure is the producer's limitation (a skip), not cai's."""
        try:
            return self.from_host(host)
        except Exception as e:  # noqa: BLE001
            pytest.skip(f"{self.name} cannot make a {host.dtype} array: {type(e).__name__}: {e}")

    def to_host(self, x):  # a host copy of a device array
        raise NotImplementedError

    def ptr(self, x):  # address of the first element
        raise NotImplementedError

    def strides(self, x):  # in bytes
        raise NotImplementedError

    def write(self, x, host):  # x[...] = host, in place
        raise NotImplementedError

    def consume(self, obj, protocol):
        raise NotImplementedError

    def view(self, base, layout):
        if layout not in self.views:
            pytest.skip(f"{self.name} cannot make a {layout!r} view")
        try:
            return LAYOUTS[layout][1](base)
        except Exception as e:  # noqa: BLE001 - the producer's limitation, not cai's
            pytest.skip(f"{self.name} cannot make a {layout!r} view: {type(e).__name__}: {e}")


class CuPyPeer(Peer):
    name = "cupy"

    def __init__(self):
        self.cp = optional_import("cupy")
        try:
            self.cp.cuda.runtime.getDeviceCount()
        except Exception as e:  # noqa: BLE001
            pytest.skip(f"cupy sees no GPU: {e}")
        # One-time work (kernel compilation and loading, pools) before any measured scenario.
        x = self.cp.zeros(4, dtype=self.cp.float32)
        x.fill(1.0)
        with self.cp.cuda.Stream(non_blocking=True):
            x.copy().get()
        self.cp.cuda.Device().synchronize()

    def from_host(self, host):
        return self.cp.asarray(host)

    def to_host(self, x):
        return self.cp.asnumpy(x)

    def ptr(self, x):
        return x.data.ptr

    def strides(self, x):
        return x.strides

    def write(self, x, host):
        x[...] = self.cp.asarray(host)

    def consume(self, obj, protocol):
        return self.cp.asarray(obj) if protocol == "cai" else self.cp.from_dlpack(obj)


class TorchPeer(Peer):
    name = "torch"
    views = ("C", "F", "stepped", "0d", "empty")  # no negative steps in PyTorch

    def __init__(self):
        self.torch = optional_import("torch")
        if not self.torch.cuda.is_available():
            pytest.skip("torch sees no GPU")
        t = self.torch.ones(4, device="cuda")  # one-time initialization, as for CuPy
        with self.torch.cuda.stream(self.torch.cuda.Stream()):
            t.clone().cpu()
        self.torch.cuda.synchronize()

    def from_host(self, host):
        return self.torch.from_numpy(c_order(host)).to("cuda")

    def to_host(self, x):
        return x.cpu().numpy()

    def ptr(self, x):
        return x.data_ptr()

    def strides(self, x):
        return tuple(s * x.element_size() for s in x.stride())

    def write(self, x, host):
        x.copy_(self.torch.from_numpy(c_order(host)).to(x.device))

    def consume(self, obj, protocol):
        if protocol == "cai":
            return self.torch.as_tensor(obj, device="cuda")
        return self.torch.from_dlpack(obj)


class NumbaPeer(Peer):
    name = "numba"
    exports = ("cai",)

    def __init__(self):
        self.cuda = optional_import("numba.cuda")
        try:
            if not self.cuda.is_available():
                pytest.skip("numba.cuda sees no GPU")
        except Exception as e:  # noqa: BLE001
            pytest.skip(f"numba.cuda is not usable here: {type(e).__name__}: {e}")
        self.imports = ("cai", "dlpack") if hasattr(self.cuda, "from_dlpack") else ("cai",)

    def from_host(self, host):
        return self.cuda.to_device(c_order(host))

    def to_host(self, x):
        return x.copy_to_host()

    def ptr(self, x):
        return x.__cuda_array_interface__["data"][0]

    def strides(self, x):
        return x.strides

    def write(self, x, host):
        if not (x.is_c_contiguous() or x.size == 0):
            pytest.skip("numba writes strided arrays with a JIT kernel; not part of this check")
        x.copy_to_device(c_order(host))

    def consume(self, obj, protocol):
        if protocol == "cai":
            return self.cuda.as_cuda_array(obj)
        return self.cuda.from_dlpack(obj)


class JaxPeer(Peer):
    name = "jax"
    views = ("C", "0d", "empty")  # JAX slicing makes copies, never views
    writable_imports = False  # JAX arrays are immutable

    def __init__(self):
        self.jax = optional_import("jax")
        self.jax.config.update("jax_enable_x64", True)  # keep int64/float64/complex128 as they are
        try:
            self.device = self.jax.devices("gpu")[0]
        except Exception as e:  # noqa: BLE001
            pytest.skip(f"jax sees no GPU: {e}")
        self.jnp = importlib.import_module("jax.numpy")

    def from_host(self, host):
        # Ready before it is exported: JAX's CAI export (v2) names no stream to wait on.
        return self.jax.device_put(host, self.device).block_until_ready()

    def to_host(self, x):
        # A fresh device copy first: a jax.Array caches its host value after the first read.
        return np.asarray(self.jnp.array(x, copy=True))

    def ptr(self, x):
        return x.unsafe_buffer_pointer()

    def strides(self, x):
        return np.empty(x.shape, x.dtype).strides  # always row-major

    def write(self, x, host):
        pytest.skip("jax arrays are immutable")

    def consume(self, obj, protocol):
        if protocol == "cai":
            return self.jnp.asarray(obj)
        return self.from_dlpack(obj)

    def from_dlpack(self, obj):
        """jax.numpy.from_dlpack (the array API name), else the older jax.dlpack.from_dlpack."""
        f = getattr(self.jnp, "from_dlpack", None)
        return f(obj) if f else importlib.import_module("jax.dlpack").from_dlpack(obj)


def strided_memory_view_class():
    """cuda.core's StridedMemoryView (its module moved between releases), or a skip."""
    for module in ("cuda.core.utils", "cuda.core", "cuda.core.experimental.utils"):
        try:
            return getattr(importlib.import_module(module), "StridedMemoryView")
        except Exception:  # noqa: BLE001
            continue
    return optional_import("cuda.core.utils").StridedMemoryView


class _CudaCore:
    name = "cuda.core"


CUDA_CORE = _CudaCore()  # cuda.core as a consumer, for peer_limitation()


def strided_memory_view(smv, obj, protocol, stream_ptr):
    """cuda.core's view of `obj` through one protocol (classmethods in newer releases, the
    constructor, which tries DLPack first, in older ones)."""
    if protocol == "cai":
        make = getattr(smv, "from_cuda_array_interface", None)
        return make(obj, stream_ptr) if make else smv(OnlyCAI(obj), stream_ptr)
    make = getattr(smv, "from_dlpack", None)
    return make(obj, stream_ptr) if make else smv(OnlyDLPack(obj), stream_ptr)


_PEERS = {"cupy": CuPyPeer, "torch": TorchPeer, "numba": NumbaPeer, "jax": JaxPeer}
PEERS = tuple(_PEERS)
_peer_cache: dict[str, Peer] = {}


def peer(name, exports=None, imports=None) -> Peer:
    """The peer library `name`; with `exports` or `imports` (a protocol), skips the test when
    the peer cannot do that."""
    if name not in _peer_cache:
        _peer_cache[name] = _PEERS[name]()
    p = _peer_cache[name]
    if exports and exports not in p.exports:
        pytest.skip(f"{name} does not export {exports}")
    if imports and imports not in p.imports:
        pytest.skip(f"{name} does not import {imports}")
    return p


class OnlyCAI:
    """Exposes only an object's __cuda_array_interface__ (to force the CAI road)."""

    def __init__(self, obj, **changes):
        self.obj = obj
        self.changes = changes

    @property
    def __cuda_array_interface__(self):
        d = dict(self.obj.__cuda_array_interface__)
        d.update(self.changes)
        return d


class OnlyDLPack:
    """Exposes only an object's DLPack methods; `stream=` forces the stream handed to the
    producer (to make a producer that ignores its consumer's stream)."""

    _KEEP = object()

    def __init__(self, obj, stream=_KEEP):
        self.obj = obj
        self.stream = stream

    def __dlpack__(self, stream=None, **kwargs):
        if self.stream is not OnlyDLPack._KEEP:
            stream = self.stream
        return self.obj.__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self):
        return self.obj.__dlpack_device__()


def exported(obj, protocol):
    """`obj` seen through one protocol only."""
    return OnlyCAI(obj) if protocol == "cai" else OnlyDLPack(obj)


@contextlib.contextmanager
def peer_limitation(consumer: Peer, protocol, layout, dtype, step):
    """Guards a block that hands cai's export to `consumer`. When the block raises, `step` is
    repeated on the same layout and dtype exported by CuPy through the same protocol
    (`step(exported(cupy_array, protocol))`): if that fails too, the consumer cannot take this
    case from anyone (a skip naming the consumer's error); if it passes, cai is at fault and the
    error stands."""
    try:
        yield
    except Exception as e:  # noqa: BLE001
        if consumer.name == "cupy":
            raise
        if consumer.name == "numba" and is_numba_error(e):
            pytest.skip(f"numba-cuda failed in its own code: {type(e).__name__}: {e}")
        cp = peer("cupy")
        base, view, _ = reference(layout, dtype)
        neutral = exported(view(cp.from_host(base)), protocol)
        try:
            step(neutral)
        except Exception as control:  # noqa: BLE001
            pytest.skip(f"{consumer.name} cannot take this case from CuPy either "
                        f"({protocol}, {layout}, {dtype}): {type(control).__name__}: {control}")
        raise


# ----- the busy producer --------------------------------------------------------------------------

SPIN_SOURCE = r"""
extern "C" __global__ void cai_gpu_test_spin(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
"""

SPIN_SECONDS = float(os.environ.get("CAI_GPU_TEST_SPIN_SECONDS", "0.3"))
# The host must be back from an import (and the consumer's enqueue) within this; far below the
# spin, so that a host wait for the producer cannot pass unnoticed.
HOST_RETURN_LIMIT = SPIN_SECONDS / 6


class Spinner:
    """Keeps a stream busy: one GPU thread reads the global timer until `seconds` have passed."""

    def __init__(self):
        self.cp = CuPyPeer().cp
        self.kernel = self.cp.RawKernel(SPIN_SOURCE, "cai_gpu_test_spin")
        self.spin(self.cp.cuda.Stream(non_blocking=True), 0.0, wait=True)  # compile and load now

    def spin(self, stream, seconds, wait=False):
        """Enqueues the spin on a CuPy stream, a cai.Stream or a raw handle."""
        if isinstance(stream, (int, cai.Stream)):
            stream = self.cp.cuda.ExternalStream(int(stream))
        with stream:
            self.kernel((1,), (1,), (np.uint64(int(seconds * 1e9)),))
        if wait:
            stream.synchronize()

"""Arrays leaving the process (docs/scale-out.md): pickling and copy.deepcopy of
DeviceNDArray and of cai's functions, the lazy registrations with Dask (serializers, sizeof,
tokens, dask.array's dispatch), and the exit-time warning about
memory still shared with other processes.

Pickling copies to the host (as Numba and CuPy do): the receiver gets a new device array with
the same shape, dtype and values on its current device. The host copy is a NumPy array, so
protocol 5 sends it out of band (pickle.PickleBuffer) without another copy. Importing
cai.multiprocessing makes multiprocessing send arrays as IPC handles instead (no copy).
"""

import atexit
import copyreg
import importlib.abc
import importlib.machinery
import pickle
import sys
import types
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable

from . import _cai
from ._cai import DeviceNDArray
from ._host import _host_bytes, _with_mask

if TYPE_CHECKING:  # NumPy is imported on first use, never at `import cai`
    import numpy

    # The bytes: a PickleBuffer or bytes when pickled; unpickled, any object with the buffer
    # protocol (bytes, bytearray, or what the out-of-band buffers held).
    _HostState = tuple[Any, tuple[int, ...], numpy.dtype[Any], bool]


def _host_state(arr: DeviceNDArray, protocol: int) -> "_HostState":
    """What a pickle carries: the bytes (out of band with protocol 5), shape, dtype, order.
    The dtype travels on its own: NumPy's own array pickling drops a big-endian byte order."""
    raw, fortran = _host_bytes(arr)
    data = pickle.PickleBuffer(raw) if protocol >= 5 else raw.tobytes()
    return data, arr.shape, arr.dtype, fortran


def _host_array(data: Any, shape: Sequence[int],
                dtype: "numpy.dtype[Any]", fortran: bool) -> "numpy.ndarray[Any, Any]":
    import numpy as np  # not at `import cai`: threads making their first call import it

    if dtype.itemsize == 0 or 0 in shape:
        return np.zeros(shape, dtype)
    flat = np.frombuffer(data, dtype=dtype)
    return flat.reshape(shape[::-1]).T if fortran else flat.reshape(shape)


def _rebuild(data: Any, shape: Sequence[int],
             dtype: "numpy.dtype[Any]", fortran: bool,
             mask: tuple[Any, ...] | None = None) -> DeviceNDArray:
    """Unpickles a DeviceNDArray: a new array on the current device."""
    arr = _cai.to_device(_host_array(data, shape, dtype, fortran))
    return _with_mask(arr, None if mask is None else _rebuild(*mask))


def _state(arr: DeviceNDArray, protocol: int) -> tuple[Any, ...]:
    """_host_state, followed by the mask's own state (and so on) when `arr` has a mask."""
    state = _host_state(arr, protocol)
    mask = arr.mask
    return state if mask is None else state + (_state(mask, protocol),)


def _reduce_ex(self: DeviceNDArray,
               protocol: int) -> tuple[Callable[..., DeviceNDArray], tuple[Any, ...]]:
    return (_rebuild, _state(self, protocol))


def _deepcopy(self: DeviceNDArray, memo: object = None) -> DeviceNDArray:
    """A device-to-device copy on the array's own device (no host round trip), its layout
    order kept: DeviceNDArray.copy (docs/array-methods.md), which copies the mask too."""
    return self.copy(order="A")


# Assigned with setattr: the stubs of the extension type do not declare these slots.
setattr(DeviceNDArray, "__reduce_ex__", _reduce_ex)
setattr(DeviceNDArray, "__deepcopy__", _deepcopy)
setattr(DeviceNDArray, "__copy__", _deepcopy)


# cai's functions pickle by reference, as Python's own functions do (`client.submit(cai.to_device,
# x)`, `map_blocks(cai.to_device)`): nanobind's function types have no pickle support.

def _reduce_function(f: Any) -> str:
    """A module-level function or an unbound method: its qualified name, which pickle looks up
    in `f.__module__` on load (and checks that it finds `f` itself when dumping)."""
    return str(f.__qualname__)


def _reduce_bound_method(m: Any) -> tuple[Callable[[object, str], Any], tuple[object, str]]:
    """`arr.copy_to_host`: the object (pickled by its own rules) and the method's name."""
    return getattr, (m.__self__, m.__name__)


copyreg.pickle(type(_cai.to_device), _reduce_function)
copyreg.pickle(type(DeviceNDArray.copy_to_host), _reduce_function)
# The bound-method type, from a method bound to any object (binding checks nothing).
copyreg.pickle(type(DeviceNDArray.copy_to_host.__get__(object())), _reduce_bound_method)


# Dask: cai registers with each Dask module right after it is imported (or at once if it
# already is), never importing Dask here. Workers get the registrations when they unpickle the
# array's type, which imports cai.

def _register_serializers() -> None:
    from . import _dask

    _dask.register()


def _register_sizeof() -> None:
    from . import _dask_array

    _dask_array.register_sizeof()


def _register_tokenize() -> None:
    from . import _dask_array

    _dask_array.register_tokenize()


def _register_array() -> None:
    from . import _dask_array

    _dask_array.register_array()


# Module -> what cai registers with it once it is imported.
_DASK_MODULES: dict[str, Callable[[], None]] = {
    "distributed.protocol": _register_serializers,
    "dask.sizeof": _register_sizeof,
    "dask.tokenize": _register_tokenize,
    "dask.array.dispatch": _register_array,
}
_pending = dict(_DASK_MODULES)  # the modules not imported yet


class _DaskHook(importlib.abc.MetaPathFinder):
    """Runs cai's registration for a Dask module right after the module is imported."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _pending:
            return None
        # Find the real spec with the other finders, then run our registration after it loads.
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_register(module: types.ModuleType) -> None:
            exec_module(module)
            _registered(fullname)

        setattr(loader, "exec_module", exec_then_register)
        return spec


_hook = _DaskHook()


def _registered(name: str) -> None:
    """Registers with module `name`, once; the hook goes when nothing is pending."""
    register = _pending.pop(name, None)
    if not _pending:
        try:
            sys.meta_path.remove(_hook)
        except ValueError:
            pass
    if register is not None:
        register()


for _name in [name for name in _DASK_MODULES if name in sys.modules]:
    _registered(_name)
if _pending:
    sys.meta_path.insert(0, _hook)


def _return_references() -> None:
    """Gives back the references to other processes' memory that this process holds, so that
    their exporters can free it. Runs at exit, also in multiprocessing's children, which end
    with os._exit (no atexit, no destructors) after running multiprocessing's finalizers."""
    _cai._ipc_return_all()


atexit.register(_return_references)
if "multiprocessing" in sys.modules:  # a child of multiprocessing imports it first
    from multiprocessing import util as _mp_util

    _mp_util.Finalize(None, _return_references, exitpriority=0)


@atexit.register
def _warn_shared_at_exit() -> None:
    in_use = _cai._ipc_exports_in_use()
    if in_use:
        warnings.warn(
            f"cai: this process exits while {in_use} device allocation(s) it shared are still "
            "open in other processes. On the simulator they stay valid there; with CUDA, "
            "importers may lose access (keep the exporting process alive until they close).",
            RuntimeWarning,
            stacklevel=1,
        )


def _ipc_handle(*fields: object) -> _cai.IpcHandle:
    """Unpickles a cai.IpcHandle (a Python function: pickle refers to it by name)."""
    return _cai._ipc_handle(*fields)

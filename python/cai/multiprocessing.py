"""multiprocessing with device arrays sent as IPC handles (no copy), as torch.multiprocessing,
started with "spawn" by default.

``import cai.multiprocessing as mp`` gives everything ``multiprocessing`` has, and registers
a reducer with its pickler (ForkingPickler): a DeviceNDArray put on a queue or passed to a
process travels as a cai.IpcHandle and is opened on arrival. The receiver's array shares the
sender's memory; the sender's queued work is ordered before the receiver's first use, and the
memory stays valid while any receiver holds it (docs/scale-out.md). Without this import, arrays
pickle by copying.

The module's own default context starts processes with "spawn" (CUDA cannot be used in a
forked child), whatever multiprocessing's default is: ``mp.Process``, ``mp.Queue``,
``mp.Pool``, ``mp.Manager``... use it. ``mp.set_start_method(method)`` changes it for this
module alone (multiprocessing's own default is left as it is), ``mp.get_context(method)`` gives
another method's context.
"""

import multiprocessing as _mp
from multiprocessing import *  # noqa: F401,F403  (the same API, as torch.multiprocessing)
from multiprocessing import context as _context
from multiprocessing.reduction import ForkingPickler as _ForkingPickler

from typing import Any, Callable

from ._cai import DeviceNDArray as _DeviceNDArray
from ._cai import IpcHandle as _IpcHandle

__all__ = list(getattr(_mp, "__all__", []))


class _SpawnByDefault(_context.DefaultContext):
    """multiprocessing's default context with "spawn" as the default start method."""


_default = _SpawnByDefault(_mp.get_context("spawn"))


class _Process(_mp.Process):
    """multiprocessing.Process, started with this module's start method ("spawn" unless
    set_start_method() chose another)."""

    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        # As multiprocessing.Process does with multiprocessing's default context.
        return _default.get_context().Process._Popen(process_obj)


_Process.__name__ = _Process.__qualname__ = "Process"  # cai.multiprocessing.Process
_SpawnByDefault.Process = _Process
# Every name multiprocessing takes from its default context, taken from ours instead.
globals().update((name, getattr(_default, name)) for name in __all__ if hasattr(_default, name))


def _open_shared(handle: _IpcHandle) -> _DeviceNDArray:
    arr = handle.open()
    handle.close()  # the array alone keeps the mapping now
    return arr


_kDLCUDA = 2  # DLPack's device memory: what an IPC handle can share


def _shareable(arr: _DeviceNDArray) -> bool:
    """Device memory, its mask too: managed and mapped memory have no IPC handle."""
    mask = arr.mask
    return arr.__dlpack_device__()[0] == _kDLCUDA and (mask is None or _shareable(mask))


def _reduce_shared(arr: _DeviceNDArray) -> tuple[Callable[..., _DeviceNDArray], tuple[Any, ...]]:
    if not _shareable(arr):
        # Managed or mapped memory travels by copy, as pickling sends arrays: refused in the
        # queue's feeder thread, it would be dropped there and the receiver would wait forever.
        return arr.__reduce_ex__(4)
    return (_open_shared, (arr.get_ipc_handle(),))


_ForkingPickler.register(_DeviceNDArray, _reduce_shared)

"""multiprocessing with device arrays sent as IPC handles (no copy), as torch.multiprocessing.

``import cai.multiprocessing as mp`` gives everything ``multiprocessing`` has, and registers
a reducer with its pickler (ForkingPickler): a DeviceNDArray put on a queue or passed to a
process travels as a cai.IpcHandle and is opened on arrival. The receiver's array shares the
sender's memory; the sender's queued work is ordered before the receiver's first use, and the
memory stays valid while any receiver holds it (docs/scale-out.md). Use the "spawn" start
method (CUDA cannot be used in a forked child). Without this import, arrays pickle by copying.
"""

import multiprocessing as _mp
from multiprocessing import *  # noqa: F401,F403  (the same API, as torch.multiprocessing)
from multiprocessing.reduction import ForkingPickler as _ForkingPickler

from typing import Callable

from ._cai import DeviceNDArray as _DeviceNDArray
from ._cai import IpcHandle as _IpcHandle

__all__ = list(getattr(_mp, "__all__", []))


def _open_shared(handle: _IpcHandle) -> _DeviceNDArray:
    arr = handle.open()
    handle.close()  # the array alone keeps the mapping now
    return arr


def _reduce_shared(
        arr: _DeviceNDArray) -> tuple[Callable[[_IpcHandle], _DeviceNDArray], tuple[_IpcHandle]]:
    return (_open_shared, (arr.get_ipc_handle(),))


_ForkingPickler.register(_DeviceNDArray, _reduce_shared)

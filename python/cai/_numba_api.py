"""Numba's host API under its names and arguments (numba-cuda 0.30), over cai's own
(docs/python.md, "Numba's host API": the table says what each does here)."""

from __future__ import annotations

import contextlib
import ctypes
import operator
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from . import _cai
from ._cai import Device, DeviceError, DeviceNDArray, Event, Stream

if TYPE_CHECKING:
    import asyncio

    import numpy

    from ._mapped import MappedNDArray


def is_available() -> bool:
    """Whether a device can run cai's work, as cai.detect() returns (a simulated device
    counts: cai runs everything there); `cai.backend() == "cuda"` says whether it is a GPU."""
    try:
        return _cai.device_count() > 0
    except DeviceError:
        return False


cuda_available = is_available


def get_current_device() -> Device:
    """The calling thread's current device (Numba's get_current_device)."""
    return _cai.current_device()


def list_devices() -> Sequence[Device]:
    """The devices (cai.gpus), as Numba's list_devices."""
    from ._devices import gpus

    return gpus


class MemoryInfo(NamedTuple):
    free: int
    total: int


class Context:
    """Numba's context of a device, for what it means to cai: the device, its memory
    (cuMemGetInfo) and waiting for its work. cai has no other per-context state."""

    __slots__ = ("device",)

    def __init__(self, device: Device) -> None:
        self.device = device

    def get_memory_info(self) -> MemoryInfo:
        """(free, total) memory of the device in bytes, from cuMemGetInfo."""
        with self.device:
            free, total = _cai._memory_info()
        return MemoryInfo(free, total)

    def synchronize(self) -> None:
        """Waits for the work queued on the device (cai.synchronize())."""
        with self.device:
            _cai.synchronize()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Context) and other.device == self.device

    def __hash__(self) -> int:
        return hash(("cai.Context", self.device.id))

    def __repr__(self) -> str:
        return f"<cai.Context of {self.device!r}>"


def current_context(devnum: int | None = None) -> Context:
    """The context of the current device (or of device `devnum`)."""
    return Context(_cai.current_device() if devnum is None else Device(devnum))


def close() -> None:
    """Waits for the work of every device and frees what was queued for freeing. Unlike
    Numba's close(), arrays stay valid: cai has no context to tear down (docs/python.md)."""
    for i in range(_cai.device_count()):
        with Device(i):
            _cai.synchronize()


@contextlib.contextmanager
def defer_cleanup() -> Iterator[None]:
    """Numba's block that holds frees back so that they cannot stall asynchronous work. cai's
    frees never stall the caller or order anything (docs/python.md, "Freeing never waits"),
    so the block has nothing to hold back."""
    yield


def event_elapsed_time(evtstart: Event, evtend: Event) -> float:
    """Milliseconds between two recorded timing events (Event.elapsed_time)."""
    return evtstart.elapsed_time(evtend)


def profile_start() -> None:
    """Numba's cuProfilerStart: cai's driver table has no profiler entry points, so this does
    nothing; a profiler (Nsight Systems) then records the whole run."""


def profile_stop() -> None:
    """See profile_start."""


@contextlib.contextmanager
def profiling() -> Iterator[None]:
    """Numba's profiling block: profile_start() and profile_stop() around it."""
    profile_start()
    try:
        yield
    finally:
        profile_stop()


def _like(ary: Any, entry: str) -> tuple[tuple[int, ...], Any, Literal["C", "F"]]:
    if not hasattr(ary, "shape") or not hasattr(ary, "dtype"):
        raise TypeError(f"{entry}: ary must be an array with a shape and a dtype (a NumPy or a "
                        f"GPU array), got {type(ary).__name__}")
    flags = getattr(ary, "flags", None)
    fortran = flags is not None and flags["F_CONTIGUOUS"] and not flags["C_CONTIGUOUS"]
    return tuple(ary.shape), ary.dtype, "F" if fortran else "C"


def mapped_array_like(ary: Any, stream: Any = 0, portable: bool = False,
                      wc: bool = False) -> "MappedNDArray":
    """cai.mapped_array() (a cai.MappedNDArray) with the shape, dtype and order (C or F) of `ary`."""
    shape, dtype, order = _like(ary, "mapped_array_like()")
    from ._host import mapped_array

    return mapped_array(shape, dtype, order=order, stream=stream, portable=portable, wc=wc)


def pinned_array_like(ary: Any) -> "numpy.ndarray[Any, Any]":
    """cai.pinned_array() with the shape, dtype and order (C or F) of `ary`."""
    from ._host import pinned_array

    shape, dtype, order = _like(ary, "pinned_array_like()")
    return pinned_array(shape, dtype, order=order)


@contextlib.contextmanager
def mapped(*arylist: Any, stream: Any = 0) -> Iterator[Any]:
    """Numba's mapped(*arrays, stream=0): page-locks the NumPy arrays for the block (as
    cai.pinned) and gives device arrays of the same memory (one, or a list for several). The
    arrays take the stream of their first use, as any cai array; `stream` is accepted."""
    from ._host import pinned

    with pinned(*arylist):
        views = [_mapped_view(a, stream) for a in arylist]
        try:
            yield views[0] if len(views) == 1 else views
        finally:
            for v in views:
                v.synchronize()  # the memory goes back to pageable after the block


@contextlib.contextmanager
def open_ipc_array(handle: Any, shape: Any, dtype: Any, strides: Any = None,
                   offset: int = 0) -> Iterator[DeviceNDArray]:
    """Numba's open_ipc_array: maps memory another process shared with the driver's own IPC
    handle (a CUipcMemHandle: its 64 bytes, a sequence of 64 ints, or an object with
    `.reserved`, as cuda-bindings gives) as a device array of `shape` and `dtype` (C order
    unless `strides`), `offset` bytes into the shared memory. The array must lie inside what
    the driver maps (else ValueError). As with the driver's IPC, the exporter keeps the memory
    alive and its work complete meanwhile. The mapping is closed when the array and its views
    are gone (Numba closes it at the end of the block, leaving such arrays dangling)."""
    if hasattr(handle, "reserved"):
        handle = handle.reserved
    try:
        raw = bytes(handle)
    except (TypeError, ValueError) as e:
        raise TypeError("open_ipc_array(): handle must be the 64 bytes of a CUipcMemHandle "
                        f"(bytes, a sequence of ints, or an object with .reserved), got "
                        f"{type(handle).__name__}") from e
    arr = _cai._open_ipc_memory(raw, shape, dtype, strides, operator.index(offset))
    try:
        yield arr
    finally:
        del arr


def _mapped_view(ary: Any, stream: Any) -> DeviceNDArray:
    iface = ary.__array_interface__
    desc = {"shape": iface["shape"], "typestr": iface["typestr"], "data": iface["data"],
            "strides": iface["strides"], "version": 3, "stream": None}
    if iface.get("descr") and ary.dtype.names is not None:
        desc["descr"] = iface["descr"]
    return _cai.from_cuda_array_interface(desc, owner=ary)


# ----- DeviceNDArray and Stream: Numba's methods -------------------------------------------

def _getitem(self: DeviceNDArray, item: Any, stream: Any = 0) -> Any:
    """self[item] (Numba's getitem). An element read waits for the array's work, so the value
    is complete on return whatever `stream` says."""
    return self[item]


def _setitem(self: DeviceNDArray, key: Any, value: Any, stream: Any = 0) -> None:
    """self[key] = value (Numba's setitem). The assignment is ordered after the array's work
    and done when the call returns, so work later queued on `stream` sees it."""
    self[key] = value


def _device_ctypes_pointer(self: DeviceNDArray) -> ctypes.c_void_p:
    """The first element's address as a ctypes.c_void_p (c_void_p(0) when empty), as Numba."""
    return ctypes.c_void_p(self.ptr if self.size else 0)


def _alloc_size(self: DeviceNDArray) -> int:
    """Bytes the array's elements span (Numba's alloc_size): 0 when empty."""
    if self.size == 0:
        return 0
    return sum((n - 1) * abs(s) for n, s in zip(self.shape, self.strides)) + self.itemsize


def _flags(self: DeviceNDArray) -> dict[str, bool]:
    """NumPy's flags as a dict, as Numba's DeviceNDArray.flags gives them."""
    return {"C_CONTIGUOUS": self.is_c_contiguous(), "F_CONTIGUOUS": self.is_f_contiguous(),
            "OWNDATA": False, "WRITEABLE": not self.readonly, "ALIGNED": True,
            "WRITEBACKIFCOPY": False}


def _add_callback(self: Stream, callback: Callable[[Stream, int, Any], Any],
                  arg: Any = None) -> None:
    """Calls callback(stream, status, arg) from another thread once the work queued on the
    stream so far is done (status 0), as Numba's add_callback. Unlike the driver's callbacks,
    it does not hold back the stream's later work."""
    done = _cai.event(timing=False)
    done.record(self)

    def wait() -> None:
        status = 0
        try:
            done.synchronize()
        except DeviceError:
            status = 1  # the driver's error; CUresult codes are not kept
        try:
            callback(self, status, arg)
        except Exception as e:  # as Numba: a warning, not a crash of the thread
            import warnings

            warnings.warn(f"Exception in stream callback: {e}", RuntimeWarning, stacklevel=1)

    threading.Thread(target=wait, name="cai stream callback", daemon=True).start()


def _async_done(self: Stream) -> "asyncio.Future[Stream]":
    """An awaitable that resolves to the stream once the work queued on it so far is done."""
    import asyncio

    loop = asyncio.get_running_loop()
    future: asyncio.Future[Stream] = loop.create_future()

    def resolve(fut: asyncio.Future[Stream], status: int) -> None:
        if fut.done():
            return
        if status == 0:
            fut.set_result(self)
        else:
            fut.set_exception(DeviceError(f"the stream's work failed (status {status})"))

    self.add_callback(lambda s, status, _: loop.call_soon_threadsafe(resolve, future, status))
    return future


# Assigned with setattr: methods of the extension types written in Python (stubs.pat declares
# them for type checkers).
setattr(DeviceNDArray, "getitem", _getitem)
setattr(DeviceNDArray, "setitem", _setitem)
setattr(DeviceNDArray, "device_ctypes_pointer", property(_device_ctypes_pointer))
setattr(DeviceNDArray, "alloc_size", property(_alloc_size))
setattr(DeviceNDArray, "flags", property(_flags))
setattr(Stream, "add_callback", _add_callback)
setattr(Stream, "async_done", _async_done)

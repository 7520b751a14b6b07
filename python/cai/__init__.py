"""cai: the CUDA Array Interface and DLPack, zero-copy, stream-correct and cheap per call.

Arrays: device_array, device_array_like, to_device, DeviceNDArray; in memory the host reaches
too: managed_array, mapped_array (NumPy arrays: ManagedNDArray, MappedNDArray), pinned_array,
and pinned(*arrays) for NumPy arrays.
Import: as_cuda_array, from_cuda_array_interface, is_cuda_array, from_dlpack.
Tile-style global array: Array (DLPack or CAI in, both out, element strides, slice).
Streams and events: stream, default_stream, legacy_default_stream, per_thread_default_stream,
external_stream, event, synchronize.
Operations: cai.ops.copy, cai.ops.fill, cai.ops.add. Switches: cai.config. Simulator: cai.sim.
What runs here: show_config(). The stream waits cai enqueues: trace_waits(); the calls a GPU
charges for: device_call_counts().
Devices and processes: Device, device_count, current_device, IpcHandle, ipc_collect,
cai.multiprocessing (docs/scale-out.md); Numba's names select_device, gpus, detect and
Stream.auto_synchronize; the rest of Numba's host API (is_available, current_context, mapped, ...:
docs/python.md). Device memory through your allocator: set_allocator, get_allocator.
Types of parameters: cai.typing, cai.array.
"""

from ._cai import (
    Device,
    DeviceError,
    DeviceNDArray,
    Event,
    IpcHandle,
    RaceError,
    Stream,
    as_cuda_array,
    backend,
    current_device,
    default_stream,
    device_call_counts,
    device_count,
    device_array,
    device_array_like,
    event,
    external_stream,
    from_cuda_array_interface,
    from_dlpack,
    ipc_collect,
    is_cuda_array,
    legacy_default_stream,
    per_thread_default_stream,
    reset_device_call_counts,
    stream,
    synchronize,
    to_device,
)
from ._cai import ops, sim, _set_exiting
import atexit as _atexit

# Freeing device memory waits for the streams that use it; at exit, nothing should wait.
_atexit.register(_set_exiting)
del _atexit
from . import config
from ._info import show_config
from ._tile import Array
from ._trace import WaitTrace, trace_waits
from ._devices import detect, gpus, select_device
from ._host import managed_array, mapped_array, pinned, pinned_array
from ._allocator import get_allocator, set_allocator
from ._numba_api import (  # Numba's host API (docs/python.md, "Numba's host API")
    close,
    cuda_available,
    current_context,
    defer_cleanup,
    event_elapsed_time,
    get_current_device,
    is_available,
    list_devices,
    mapped,
    mapped_array_like,
    open_ipc_array,
    pinned_array_like,
    profile_start,
    profile_stop,
    profiling,
)
from . import _scaleout  # pickling, Dask registrations (lazily), IPC exit warning
from . import _numpy_api  # __array_function__ (np.concatenate on the device), __iter__
from . import _assign  # what host data may go into arrays; loaded now, used by finalizers at exit
from ._numpy_api import HostFallbackWarning
from . import typing  # the protocols of cai's parameters (cai.typing.DeviceArrayLike, ...)
from .typing import array as array  # extension modules' parameters, in stubs

from ._cai import __version__ as __version__

__all__ = [
    "DeviceError", "DeviceNDArray", "Event", "RaceError", "Stream", "as_cuda_array", "backend",
    "config", "cuda_available", "default_stream", "device_array", "device_array_like", "event",
    "external_stream", "from_cuda_array_interface", "from_dlpack", "Array", "is_cuda_array", "legacy_default_stream",
    "ops", "per_thread_default_stream", "show_config", "sim", "stream", "synchronize",
    "to_device", "trace_waits", "WaitTrace",
    "Device", "current_device", "device_count", "IpcHandle", "ipc_collect",
    "device_call_counts", "reset_device_call_counts", "select_device", "gpus", "detect",
    "typing", "array", "managed_array", "mapped_array", "ManagedNDArray", "MappedNDArray",
    "pinned_array", "pinned",
    "set_allocator", "get_allocator",
    "close", "current_context", "defer_cleanup", "event_elapsed_time", "get_current_device",
    "is_available", "list_devices", "mapped", "mapped_array_like", "open_ipc_array",
    "pinned_array_like",
    "profile_start", "profile_stop", "profiling", "HostFallbackWarning",
]

# NumPy's subclasses, defined at import: a module-level __getattr__ (PEP 562) would keep them
# lazy, but it also stops CPython from specializing every `cai.<name>` lookup, a cost paid on
# each call (docs/python.md, "Importing cai").
from ._mapped import ManagedNDArray, MappedNDArray

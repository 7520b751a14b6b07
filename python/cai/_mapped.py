"""Managed and mapped arrays as NumPy arrays (as Numba's MappedNDArray and ManagedNDArray):
an ndarray subclass over the memory of a cai array (managed, or page-locked and mapped), which
also exports __cuda_array_interface__ for its own bytes. Decisions: docs/python.md, "Managed
and mapped arrays" and "Importing cai"."""

from typing import Any, Literal, TypeVar, cast

import numpy as np

from . import _cai
from ._cai import DeviceNDArray


class _Memory:
    """The cai array whose memory the NumPy arrays view: the end of every view's base chain,
    so that the memory is freed once, when the last view is gone."""

    __slots__ = ("array", "__array_interface__")

    def __init__(self, array: DeviceNDArray) -> None:
        self.array = array
        self.__array_interface__ = {
            "version": 3, "shape": (array.alloc_size,), "typestr": "|u1",
            "data": (array.ptr, False),
        }


def _memory_of(arr: np.ndarray) -> DeviceNDArray | None:
    """The cai array whose memory `arr` views, or None for memory of its own (a copy, a new
    result)."""
    base: Any = arr
    while base is not None and not isinstance(base, _Memory):
        # ndarray.base, as_strided's interface object's .base, a memoryview's .obj
        base = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
    return None if base is None else base.array


class _HostDeviceArray(np.ndarray):
    """Base of MappedNDArray and ManagedNDArray: a NumPy array in memory the device reaches.
    NumPy's names keep NumPy's meaning (copy, view, T, reshape: host operations; views stay in
    the same memory); the device side is __cuda_array_interface__, __dlpack__ and Numba's names
    that NumPy does not have."""

    _memory_name = ""

    # ----- NumPy: new results are in ordinary host memory, so they are plain ndarrays

    def __array_wrap__(self, arr: np.ndarray, context: Any = None,
                       return_scalar: bool = False) -> Any:
        if _memory_of(arr) is not None:  # out= this memory: still the same memory
            return super().__array_wrap__(arr, context, return_scalar)
        plain = arr.view(np.ndarray)
        return plain[()] if return_scalar else plain

    def __getitem__(self, key: Any) -> Any:
        out = super().__getitem__(key)
        if isinstance(out, _HostDeviceArray) and _memory_of(out) is None:
            return out.view(np.ndarray)  # advanced indexing copies
        return out

    def copy(self, order: Any = "C") -> np.ndarray:  # type: ignore[override]
        return np.array(self, order=order, subok=False, copy=True)

    def astype(  # type: ignore[override]
            self, dtype: Any, order: Any = "K", casting: Any = "unsafe", subok: bool = True,
            copy: bool = True) -> np.ndarray:
        out = np.ndarray.astype(self, dtype, order, casting, subok, copy)
        return out if _memory_of(out) is not None else out.view(np.ndarray)

    def __reduce__(self) -> Any:
        # Pickled by value, into new memory of the same kind on the receiver's current device.
        return (_rebuild, (type(self).__name__, np.array(self, subok=False)))

    # ----- the device side

    def _device_array(self) -> DeviceNDArray:
        """This array's bytes as a cai array sharing the memory's streams (what cai's
        operations, as_cuda_array and from_dlpack take)."""
        memory = _memory_of(self)
        if memory is None:
            raise AttributeError(
                f"{type(self).__name__}: this array is not in {self._memory_name} memory (a copy "
                "or a new result, made by NumPy in ordinary host memory), so it has no "
                "__cuda_array_interface__; cai.to_device() copies it to the device")
        iface = self.__array_interface__
        data = iface["data"] if self.size else (0, iface["data"][1])  # CAI v3: 0 when empty
        desc = {"version": 3, "shape": iface["shape"], "typestr": iface["typestr"],
                "data": data, "strides": iface["strides"]}
        if self.dtype.fields is not None:
            desc["descr"] = iface["descr"]
        return cast(DeviceNDArray, _cai._host_array_view(memory, desc, self.dtype))

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return self._device_array().__cuda_array_interface__

    # DLPack: the device's view (kDLCUDAManaged, kDLCUDAHost: NumPy reads both); NumPy's own
    # for an instance in ordinary host memory.
    def __dlpack__(self, **kwargs: Any) -> Any:
        if _memory_of(self) is None:
            return np.ndarray.__dlpack__(self, **kwargs)
        return self._device_array().__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:  # type: ignore[override]
        if _memory_of(self) is None:
            return np.ndarray.__dlpack_device__(self)
        return self._device_array().__dlpack_device__()

    @property
    def ptr(self) -> int:
        """The device pointer of the first element (the host address, unified addressing)."""
        return self._device_array().ptr

    @property
    def device_ctypes_pointer(self) -> Any:
        return self._device_array().device_ctypes_pointer

    @property
    def alloc_size(self) -> int:
        return self._device_array().alloc_size

    @property
    def device(self) -> Any:
        return self._device_array().device

    @property
    def stream(self) -> Any:
        return self._device_array().stream

    @property
    def readonly(self) -> bool:
        return not self.flags.writeable

    @property
    def mask(self) -> None:
        return None

    def is_c_contiguous(self) -> bool:
        return bool(self.flags.c_contiguous)

    def is_f_contiguous(self) -> bool:
        return bool(self.flags.f_contiguous)

    def synchronize(self) -> None:
        """Waits for the work queued on this memory: the host may read it then."""
        self._device_array().synchronize()

    def copy_to_host(self, ary: Any = None, stream: Any = 0) -> np.ndarray:
        return self._device_array().copy_to_host(ary, stream)

    def copy_to_device(self, ary: Any, stream: Any = 0) -> None:
        self._device_array().copy_to_device(ary, stream)


class MappedNDArray(_HostDeviceArray):
    """A NumPy array in page-locked host memory mapped into the device (cai.mapped_array)."""

    _memory_name = "mapped"


class ManagedNDArray(_HostDeviceArray):
    """A NumPy array in managed (unified) memory (cai.managed_array)."""

    _memory_name = "managed"


_cai._register_host_array_type(_HostDeviceArray)
_T = TypeVar("_T", bound=_HostDeviceArray)


def _wrap(array: DeviceNDArray, cls: type[_T]) -> _T:
    flat = np.asarray(_Memory(array))
    return np.ndarray.__new__(cls, array.shape, array.dtype, flat, 0, array.strides)


def managed_array(shape: Any, dtype: Any = float, strides: Any = None,
                  order: Literal["C", "F"] = "C", stream: Any = 0,
                  attach_global: bool = True) -> ManagedNDArray:
    return _wrap(_cai.managed_array(shape, dtype, strides, order, stream, attach_global),
                 ManagedNDArray)


def mapped_array(shape: Any, dtype: Any = float, strides: Any = None,
                 order: Literal["C", "F"] = "C", stream: Any = 0, portable: bool = False,
                 wc: bool = False) -> MappedNDArray:
    return _wrap(_cai.mapped_array(shape, dtype, strides, order, stream, portable, wc),
                 MappedNDArray)


def _rebuild(kind: str, values: np.ndarray) -> Any:
    make = mapped_array if kind == "MappedNDArray" else managed_array
    order: Literal["C", "F"] = "F" if values.ndim > 1 and values.flags.f_contiguous \
        and not values.flags.c_contiguous else "C"
    out = make(values.shape, values.dtype, order=order)
    out[...] = values
    return out

"""What pickling (_scaleout) and Dask (_dask) share: host copies in the array's own order, as
raw bytes, and the data of a masked array apart from its mask (which travels on its own)."""

from typing import TYPE_CHECKING, Any, Literal

from . import _cai
from ._cai import DeviceNDArray

if TYPE_CHECKING:
    import numpy

    from ._mapped import ManagedNDArray, MappedNDArray


def _data_only(arr: DeviceNDArray) -> DeviceNDArray:
    """`arr` without its mask (a view of the same memory): for the senders that carry the
    mask on its own, never for a result that reaches the user."""
    if arr.mask is None:
        return arr
    desc = dict(arr.__cuda_array_interface__)
    desc["mask"] = None
    return _cai.from_cuda_array_interface(desc, owner=arr)


def _with_mask(arr: DeviceNDArray, mask: DeviceNDArray | None) -> DeviceNDArray:
    """`arr` with `mask` attached, under the CAI's rules for masks (the same shape, bool or
    integer elements: a ValueError names what differs)."""
    if mask is None:
        return arr
    desc = dict(arr.__cuda_array_interface__)
    desc["mask"] = mask
    return _cai.from_cuda_array_interface(desc, owner=(arr, mask))


def _host_copy(arr: DeviceNDArray) -> "numpy.ndarray[Any, Any]":
    """The values of `arr` (not its mask) in a NumPy array, Fortran-ordered when `arr` is (a
    transposed copy costs nothing more), else C-ordered."""
    arr = _data_only(arr)
    if arr.ndim > 1 and arr.is_f_contiguous() and not arr.is_c_contiguous():
        return arr.T.copy_to_host().T
    return arr.copy_to_host()


def _host_bytes(arr: DeviceNDArray) -> tuple[memoryview, bool]:
    """The values of `arr` (not its mask) as raw bytes in its memory order, and whether that
    order is Fortran's. A flat uint8 view: NumPy's buffer protocol refuses some dtypes
    (datetime64, timedelta64, and structured dtypes holding them)."""
    import numpy as np

    host = _host_copy(arr)
    fortran = host.ndim > 1 and not host.flags.c_contiguous
    dense = host.T if fortran else host  # C-contiguous either way
    return dense.reshape(-1).view(np.uint8).data, fortran


# ----- memory the host reaches in place: managed and mapped arrays, page-locked NumPy arrays

class _HostView:
    """A cai array whose memory the host reaches at its own address, as NumPy sees it: the
    NumPy array keeps this (and so the cai array) alive."""

    __slots__ = ("array", "__array_interface__")

    def __init__(self, array: DeviceNDArray, interface: dict[str, Any]) -> None:
        self.array = array
        self.__array_interface__ = interface


def host_view(array: DeviceNDArray, interface: dict[str, Any],
              dtype: "numpy.dtype[Any]") -> "numpy.ndarray[Any, Any]":
    """The NumPy array of `array`'s memory (called by DeviceNDArray.__array__)."""
    import numpy as np

    out = np.asarray(_HostView(array, interface))
    return out if out.dtype == dtype else out.view(dtype)


def managed_array(shape: Any, dtype: Any = float, strides: Any = None,
                  order: Literal["C", "F"] = "C", stream: Any = 0,
                  attach_global: bool = True) -> "ManagedNDArray":
    """A new cai.ManagedNDArray (as numba.cuda.managed_array): a NumPy array in managed
    (unified) memory that device code reaches through __cuda_array_interface__ (kDLCUDAManaged
    through DLPack). The host does not wait: synchronize before reading what the device wrote."""
    from . import _mapped

    return _mapped.managed_array(shape, dtype, strides, order, stream, attach_global)


def mapped_array(shape: Any, dtype: Any = float, strides: Any = None,
                 order: Literal["C", "F"] = "C", stream: Any = 0, portable: bool = False,
                 wc: bool = False) -> "MappedNDArray":
    """A new cai.MappedNDArray (as numba.cuda.mapped_array): a NumPy array in page-locked host
    memory mapped into the device, which device code reaches through __cuda_array_interface__
    (kDLCUDAHost through DLPack). The host does not wait: synchronize before reading what the
    device wrote."""
    from . import _mapped

    return _mapped.mapped_array(shape, dtype, strides, order, stream, portable, wc)


def pinned_array(shape: Any, dtype: Any = float, strides: Any = None,
                 order: Literal["C", "F"] = "C") -> "numpy.ndarray[Any, Any]":
    """A NumPy array in page-locked host memory (as numba.cuda.pinned_array): copies between
    it and the device with a stream are queued without the host waiting."""
    import numpy as np

    return np.asarray(_cai.mapped_array(shape, dtype, strides, order))


class pinned:
    """`with cai.pinned(a, b):` page-locks the memory of existing NumPy arrays for the block
    (as numba.cuda.pinned), so that copies with a stream are queued without the host waiting.
    The driver locks whole pages, once each: arrays that share pages (views of one array, or
    small arrays side by side) are locked together, as one range. An array already in
    page-locked or managed memory (pinned_array, mapped_array, managed_array, or an array an
    enclosing block locked) is left as it is: nothing to lock, nothing to unlock. Pages that
    hold only read-only arrays (`a.flags.writeable` False, e.g. `np.load(..., mmap_mode="r")`)
    are locked read-only: the device may read them, never write them."""

    def __init__(self, *arrays: Any) -> None:
        self._arrays = arrays
        self._registered: list[int] = []

    def __enter__(self) -> "pinned":
        import mmap

        import numpy as np
        from numpy.lib.array_utils import byte_bounds

        page = mmap.PAGESIZE
        ranges = []
        for a in self._arrays:
            if not isinstance(a, np.ndarray):
                raise TypeError(f"cai.pinned(): expected NumPy arrays, got {type(a).__name__}")
            if a.nbytes:
                lo, hi = byte_bounds(a)
                if _cai._host_locked(lo, hi - lo):
                    continue  # page-locked already (pinned_array, mapped_array, an outer block)
                ranges.append((lo // page * page, -(-hi // page) * page, not a.flags.writeable))
        # [lo, hi, read_only]: a range is locked read-only (the device may only read it, and
        # memory mapped read-only can be locked at all) when every array in it is read-only.
        merged: list[list[Any]] = []
        for lo, hi, read_only in sorted(ranges):
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
                merged[-1][2] = merged[-1][2] and read_only
            else:
                merged.append([lo, hi, read_only])
        try:
            for lo, hi, read_only in merged:
                _cai._host_register(lo, hi - lo, read_only)
                self._registered.append(lo)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        # Every range is unlocked, even after one fails; the first failure is raised.
        errors = []
        while self._registered:
            try:
                _cai._host_unregister(self._registered.pop())
            except Exception as e:  # noqa: BLE001 - raised below, after the others
                errors.append(e)
        if errors:
            raise errors[0]

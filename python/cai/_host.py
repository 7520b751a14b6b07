"""What pickling (_scaleout) and Dask (_dask) share: host copies in the array's own order, as
raw bytes, and the data of a masked array apart from its mask (which travels on its own)."""

from typing import TYPE_CHECKING, Any

from . import _cai
from ._cai import DeviceNDArray

if TYPE_CHECKING:
    import numpy


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
    import numpy as np  # not at `import cai`: threads making their first call import it

    host = _host_copy(arr)
    fortran = host.ndim > 1 and not host.flags.c_contiguous
    dense = host.T if fortran else host  # C-contiguous either way
    return dense.reshape(-1).view(np.uint8).data, fortran

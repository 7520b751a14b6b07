"""Host copies in the array's own order, for pickling (_scaleout) and Dask (_dask)."""

from typing import TYPE_CHECKING, Any

from ._cai import DeviceNDArray

if TYPE_CHECKING:
    import numpy


def _host_copy(arr: DeviceNDArray) -> "numpy.ndarray[Any, Any]":
    """The values of `arr` in a NumPy array, Fortran-ordered when `arr` is (a transposed
    copy costs nothing more), else C-ordered."""
    if arr.ndim > 1 and arr.is_f_contiguous() and not arr.is_c_contiguous():
        return arr.T.copy_to_host().T
    return arr.copy_to_host()

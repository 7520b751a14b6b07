"""What Dask needs to know about cai arrays beyond serializing them (docs/scale-out.md):
their size (dask.sizeof), a cheap token (dask.tokenize), and how dask.array concatenates chunks
and converts them to NumPy. Each function registers with one Dask module; cai calls it when that
module is imported, never importing Dask itself (python/cai/_scaleout.py)."""

from __future__ import annotations

import itertools
import os
import uuid
import weakref
from typing import Any

from . import _cai
from ._cai import DeviceNDArray


def register_sizeof() -> None:
    """dask.sizeof: the array's bytes (its view's), as for CuPy's arrays; without it Dask
    counted the Python object, a few hundred bytes whatever the array's size."""
    from dask.sizeof import sizeof

    dispatch: Any = sizeof  # dask's Dispatch objects are not annotated
    dispatch.register(DeviceNDArray, lambda x: int(x.nbytes))


# The token of an array: this process, the array object, and how many writes cai had made or
# allowed when it was taken. Two arrays alive at once never share one (each object has its own
# serial, never reused); an array written through cai after it was tokenized gets a new one.
_PROCESS = f"{os.getpid()}-{uuid.uuid4().hex}"
_serials: weakref.WeakKeyDictionary[DeviceNDArray, int] = weakref.WeakKeyDictionary()
_next_serial = itertools.count()


_kDLCUDAHost, _kDLCUDAManaged = 3, 13  # memory the host reaches at the array's address


def token(x: DeviceNDArray) -> tuple[Any, ...]:
    if not x.readonly and x.__dlpack_device__()[0] in (_kDLCUDAHost, _kDLCUDAManaged):
        # The host writes such memory in place (np.asarray views it) unseen by cai's write
        # epoch: the token is the contents, as Dask's own for NumPy arrays.
        import numpy as np
        from dask.tokenize import normalize_token

        from ._host import _data_only

        mask = x.mask
        return ("cai.DeviceNDArray", "contents", normalize_token(np.asarray(_data_only(x))),
                None if mask is None else token(mask))
    serial = _serials.get(x)
    if serial is None:
        serial = _serials[x] = next(_next_serial)
    return "cai.DeviceNDArray", _PROCESS, serial, _cai._write_epoch()


def register_tokenize() -> None:
    """dask.tokenize: token() instead of pickling the whole array (a host copy)."""
    from dask.tokenize import normalize_token

    dispatch: Any = normalize_token
    dispatch.register(DeviceNDArray, token)


def _to_numpy(x: DeviceNDArray, **kwargs: Any) -> Any:
    return x.copy_to_host()


def register_array() -> None:
    """dask.array: chunks are concatenated on the device (compute, rechunk, concatenate,
    stack), and `to_backend("numpy")` copies them to the host."""
    from dask.array.dispatch import concatenate_lookup, to_numpy_dispatch

    from ._numpy_api import concatenate

    dispatches: list[tuple[Any, Any]] = [(concatenate_lookup, concatenate),
                                         (to_numpy_dispatch, _to_numpy)]
    for dispatch, func in dispatches:
        dispatch.register(DeviceNDArray, func)

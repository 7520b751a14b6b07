"""Dask distributed serializers for cai.DeviceNDArray (docs/scale-out.md).

Imported by cai only once `distributed.protocol` is imported. Two families:
- "dask": the values travel as one host frame (a NumPy buffer, no pickling of the data);
- "cuda": the frame stays on the device (a contiguous byte view of the array), for
  transports that move device memory (UCX); the receiver views the frame without a copy.
Without these, distributed would pickle arrays (which also works: a host copy).
"""

from typing import Any, Callable, Literal

import numpy as np
from distributed.protocol.cuda import cuda_deserialize, cuda_serialize
from distributed.protocol.serialize import dask_deserialize, dask_serialize

from . import _cai
from ._cai import DeviceNDArray
from ._host import _host_copy

_registered = False

Header = dict[str, Any]


def _dtype_header(dtype: "np.dtype[Any]") -> Any:
    return np.lib.format.dtype_to_descr(dtype)


def _dtype_from_header(descr: Any) -> "np.dtype[Any]":
    dtype: np.dtype[Any] = np.lib.format.descr_to_dtype(descr)
    return dtype


def _serialize_host(x: DeviceNDArray) -> tuple[Header, list[memoryview]]:
    host = _host_copy(x)
    fortran = host.ndim > 1 and not host.flags.c_contiguous
    header = {
        "shape": list(x.shape),
        "dtype": _dtype_header(x.dtype),
        "fortran": fortran,
    }
    frame = (host.T if fortran else host).reshape(-1).view(np.uint8).data
    return header, [frame]


def _deserialize_host(header: Header, frames: list[Any]) -> DeviceNDArray:
    dtype = _dtype_from_header(header["dtype"])
    shape = tuple(header["shape"])
    order: Literal["C", "F"] = "F" if header["fortran"] else "C"
    if dtype.itemsize == 0 or 0 in shape:
        return _cai.device_array(shape, dtype, order=order)
    flat = np.frombuffer(frames[0], dtype=dtype)
    host = flat.reshape(shape[::-1]).T if order == "F" else flat.reshape(shape)
    return _cai.to_device(host)


def _serialize_device(x: DeviceNDArray) -> tuple[Header, list[DeviceNDArray]]:
    if not (x.is_c_contiguous() or x.is_f_contiguous()):
        x = _cai.to_device(x)  # a dense device copy
    header = {
        "shape": list(x.shape),
        "dtype": _dtype_header(x.dtype),
        "strides": list(x.strides),
    }
    if x.nbytes == 0:
        return header, []
    # The frame: the array's bytes as a 1-d uint8 device array (no copy), on its stream.
    desc = dict(x.__cuda_array_interface__)
    frame = _cai.from_cuda_array_interface(
        {
            "shape": (x.nbytes,),
            "typestr": "|u1",
            "data": (x.ptr + _lowest_offset(x), False),
            "version": 3,
            "stream": desc.get("stream"),
        },
        owner=x,
    )
    return header, [frame]


def _lowest_offset(x: DeviceNDArray) -> int:
    return sum(s * (n - 1) for s, n in zip(x.strides, x.shape) if s < 0 and n > 0)


def _deserialize_device(header: Header, frames: list[Any]) -> DeviceNDArray:
    dtype = _dtype_from_header(header["dtype"])
    shape = tuple(header["shape"])
    strides = tuple(header["strides"])
    if not frames:
        return _cai.device_array(shape, dtype)
    frame = _cai.as_cuda_array(frames[0])  # any device buffer (UCX gives its own kind)
    lowest = sum(s * (n - 1) for s, n in zip(strides, shape) if s < 0 and n > 0)
    desc = {
        "shape": shape,
        "typestr": dtype.str,
        "data": (frame.ptr - lowest, False),
        "strides": strides,
        "version": 3,
        "stream": frame.__cuda_array_interface__.get("stream"),
    }
    if dtype.fields is not None:
        desc["descr"] = dtype.descr
    return _cai.from_cuda_array_interface(desc, owner=frame)


def register() -> None:
    """Registers the serializers (once)."""
    global _registered
    if _registered:
        return
    # dask's Dispatch objects are not annotated: typed as Any here.
    serializers: list[tuple[Any, Callable[..., Any]]] = [
        (dask_serialize, _serialize_host),
        (dask_deserialize, _deserialize_host),
        (cuda_serialize, _serialize_device),
        (cuda_deserialize, _deserialize_device),
    ]
    for dispatch, func in serializers:
        dispatch.register(DeviceNDArray, func)
    _registered = True

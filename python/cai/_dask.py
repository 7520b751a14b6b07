"""Dask distributed serializers for cai.DeviceNDArray (docs/scale-out.md).

Imported by cai only once `distributed.protocol` is imported. Two families:
- "dask": the values travel as one host frame (a NumPy buffer, no pickling of the data);
- "cuda": the frame stays on the device (a contiguous byte view of the array, read-only when
  the array is), for transports that move device memory (UCX); the receiver views the frame
  without a copy.
A mask travels with its array: the header's "mask" entry is the mask's own header, and its
frames follow the array's. A header and its frames come from another process: every field is
checked against the others and against the frames before anything is read (ValueError or
TypeError naming the key, the value and what was expected).
Without these, distributed would pickle arrays (which also works: a host copy).
"""

import math
import reprlib
from typing import Any, Callable, Literal, cast

import numpy as np
from distributed.protocol.cuda import cuda_deserialize, cuda_serialize
from distributed.protocol.serialize import dask_deserialize, dask_serialize

from . import _cai
from ._cai import DeviceNDArray
from ._host import _data_only, _host_bytes, _with_mask

_registered = False

Header = dict[str, Any]

# How deeply a received header may nest masks (a mask's mask, ...): the core's limit.
_MAX_MASK_DEPTH: int = _cai._MAX_MASK_DEPTH


# The ml_dtypes types cai arrays carry (docs/python.md, "bfloat16 and float8"): NumPy describes
# them as opaque void ('|V2'), so a header names them beside the description.
_ML_DTYPES = frozenset({
    "bfloat16", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn",
    "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float6_e2m3fn",
    "float6_e3m2fn", "float4_e2m1fn", "int4", "uint4", "int2", "uint2",
})


def _is_ml(dtype: "np.dtype[Any]") -> bool:
    return getattr(dtype.type, "__module__", None) == "ml_dtypes"


def _ml_fields(dtype: "np.dtype[Any]", prefix: tuple[str, ...] = ()) -> list[Any]:
    """[field path, type name] of each field (nested ones too) of an ml_dtypes type."""
    found: list[Any] = []
    fields: Any = dtype.fields or {}
    for name in dtype.names or ():
        base = fields[name][0].base
        if _is_ml(base):
            found.append([list(prefix + (name,)), base.name])
        elif base.names is not None:
            found.extend(_ml_fields(base, prefix + (name,)))
    return found


def _dtype_header(header: Header, dtype: "np.dtype[Any]") -> None:
    header["dtype"] = np.lib.format.dtype_to_descr(dtype)
    if _is_ml(dtype):
        header["ml_dtype"] = dtype.name
    elif fields := _ml_fields(dtype):
        header["ml_fields"] = fields  # the description says only '|V2' for them


# ----- reading a header from another process ------------------------------------------------

def _fail(error: type[Exception], family: str, path: str, key: str, value: Any,
          expected: str) -> Exception:
    return error(f"cai: Dask {family!r} header: {path}{key}: expected {expected}, got "
                 f"{reprlib.repr(value)}")


def _value(header: Any, family: str, path: str, key: str) -> Any:
    if not isinstance(header, dict):
        where = f"{path[:-1]}: " if path else ""
        raise TypeError(f"cai: Dask {family!r} header: {where}expected a dict, got "
                        f"{type(header).__name__}")
    if key not in header:
        raise ValueError(f"cai: Dask {family!r} header: {path}{key}: missing (the header has "
                         f"{reprlib.repr(sorted(map(str, header)))})")
    return header[key]


def _ints(header: Header, family: str, path: str, key: str, expected: str) -> tuple[int, ...]:
    value = _value(header, family, path, key)
    if not isinstance(value, (list, tuple)) or not all(
            isinstance(n, int) and not isinstance(n, bool) for n in value):
        raise _fail(TypeError, family, path, key, value, f"a list of int ({expected})")
    return tuple(value)


def _shape(header: Header, family: str, path: str) -> tuple[int, ...]:
    shape = _ints(header, family, path, "shape", "sizes >= 0")
    if any(n < 0 for n in shape):
        raise _fail(ValueError, family, path, "shape", list(shape), "sizes >= 0")
    return shape


def _dtype(header: Header, family: str, path: str) -> "np.dtype[Any]":
    descr = _value(header, family, path, "dtype")
    if isinstance(header, dict) and "ml_dtype" in header:
        return _ml_dtype(header["ml_dtype"], family, path)
    expected = "a NumPy dtype description (numpy.lib.format.dtype_to_descr)"
    try:
        dtype: np.dtype[Any] = np.lib.format.descr_to_dtype(descr)
    except Exception:  # NumPy raises TypeError, ValueError, KeyError ... for a bad descr
        raise _fail(ValueError, family, path, "dtype", descr, expected) from None
    if dtype.hasobject:
        raise _fail(ValueError, family, path, "dtype", descr,
                    "a dtype without Python objects (they cannot live in device memory)")
    if isinstance(header, dict) and "ml_fields" in header:
        dtype = _typed_fields(dtype, header["ml_fields"], family, path)
    return dtype


def _typed_fields(dtype: "np.dtype[Any]", fields: Any, family: str,
                  path: str) -> "np.dtype[Any]":
    """`dtype` with the void fields the header's ml_fields names retyped (checked: each path
    names a void field of the type's size)."""
    expected = ("a list of [field path, ml_dtypes type name], each naming a void field of the "
                "dtype of that type's size")

    def fail() -> Exception:
        return _fail(ValueError, family, path, "ml_fields", fields, expected)

    if not isinstance(fields, list) or not fields:
        raise fail()
    for entry in fields:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], list)
                and entry[0] and all(isinstance(p, str) for p in entry[0])
                and isinstance(entry[1], str) and entry[1] in _ML_DTYPES):
            raise fail()
        dtype = _retyped(dtype, tuple(entry[0]), _ml_dtype(entry[1], family, path), fail)
    return dtype


def _retyped(dtype: "np.dtype[Any]", where: tuple[str, ...], typed: "np.dtype[Any]",
             fail: Any) -> "np.dtype[Any]":
    fields = dtype.fields
    if fields is None or dtype.names is None or where[0] not in dtype.names:
        raise fail()
    field = fields[where[0]][0]
    base = field.base
    if len(where) == 1:
        if base.kind != "V" or base.names is not None or base.itemsize != typed.itemsize:
            raise fail()
        new = typed
    else:
        new = _retyped(base, where[1:], typed, fail)
    names = list(dtype.names)
    formats = [(np.dtype((new, field.shape)) if field.shape else new) if n == where[0]
               else fields[n][0] for n in names]
    spec: Any = {"names": names, "formats": formats,
                 "offsets": [fields[n][1] for n in names], "itemsize": dtype.itemsize}
    return cast("np.dtype[Any]", np.dtype(spec))


def _ml_dtype(name: Any, family: str, path: str) -> "np.dtype[Any]":
    # NumPy's description of these types is opaque ('|V2') or unreadable ('<f1'): the name is
    # what says the type, checked against the known ones (the header is untrusted).
    if not isinstance(name, str) or name not in _ML_DTYPES:
        raise _fail(ValueError, family, path, "ml_dtype", name,
                    f"one of the ml_dtypes types ({', '.join(sorted(_ML_DTYPES))})")
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError(f"cai: Dask {family!r} header: {path}ml_dtype: the array holds "
                        f"{name}, a type of ml_dtypes, which is not installed here "
                        "(pip install ml-dtypes); read as raw bytes it would be misread"
                        ) from None
    typed: np.dtype[Any] = np.dtype(getattr(ml_dtypes, name))
    return typed


def _mask_header(header: Header, family: str, path: str, depth: int) -> Header | None:
    mask = header.get("mask")
    if mask is None:
        return None
    if not isinstance(mask, dict):
        raise _fail(TypeError, family, path, "mask", mask, "None or the mask's header (a dict)")
    if depth >= _MAX_MASK_DEPTH:
        raise ValueError(f"cai: Dask {family!r} header: {path}mask: masks nested more than "
                         f"{_MAX_MASK_DEPTH} levels deep")
    return mask


def _frame(frames: list[Any], index: int, family: str, path: str) -> Any:
    if index >= len(frames):
        raise ValueError(f"cai: Dask {family!r} header: {path or 'the array'} needs frame "
                         f"{index}, but only {len(frames)} frame(s) came")
    return frames[index]


def _check_all_used(frames: list[Any], used: int, family: str) -> None:
    if used != len(frames):
        raise ValueError(f"cai: Dask {family!r} header: it describes {used} frame(s), but "
                         f"{len(frames)} came")


_Reader = Callable[[Header, list[Any], int, str, int], "tuple[DeviceNDArray, int]"]


def _then_mask(arr: DeviceNDArray, reader: _Reader, mask_header: Header | None,
               frames: list[Any], index: int, path: str,
               depth: int) -> tuple[DeviceNDArray, int]:
    """`arr` with its mask, which `reader` reads from frame `index` on (its header nested)."""
    mask = None
    if mask_header is not None:
        mask, index = reader(mask_header, frames, index, path + "mask.", depth + 1)
    return _with_mask(arr, mask), index


def _read_all(reader: _Reader, header: Header, frames: list[Any], family: str) -> DeviceNDArray:
    """The array of a whole message: every frame must be used."""
    arr, used = reader(header, frames, 0, "", 0)
    _check_all_used(frames, used, family)
    return arr


# ----- the "dask" family: host frames -------------------------------------------------------

def _serialize_host(x: DeviceNDArray) -> tuple[Header, list[memoryview]]:
    frame, fortran = _host_bytes(x)
    header: Header = {"shape": list(x.shape), "fortran": fortran}
    _dtype_header(header, x.dtype)
    frames = [frame]
    if x.mask is not None:
        header["mask"], mask_frames = _serialize_host(x.mask)
        frames += mask_frames
    return header, frames


def _read_host(header: Header, frames: list[Any], index: int, path: str,
               depth: int) -> tuple[DeviceNDArray, int]:
    family = "dask"
    shape = _shape(header, family, path)
    dtype = _dtype(header, family, path)
    fortran = _value(header, family, path, "fortran")
    if not isinstance(fortran, bool):
        raise _fail(TypeError, family, path, "fortran", fortran, "True or False")
    mask_header = _mask_header(header, family, path, depth)
    frame = _frame(frames, index, family, path)
    try:
        size = memoryview(frame).nbytes
    except TypeError:
        raise TypeError(f"cai: Dask {family!r} frame {index}: expected a bytes-like object, "
                        f"got {type(frame).__name__}") from None
    needed = math.prod(shape) * dtype.itemsize
    if size != needed:
        raise ValueError(f"cai: Dask {family!r} frame {index} holds {size} bytes, but the "
                         f"header's {path}shape {list(shape)} of dtype {dtype.str} needs "
                         f"{needed}")
    order: Literal["C", "F"] = "F" if fortran else "C"
    if needed == 0:
        arr = _cai.device_array(shape, dtype, order=order)
    else:
        flat = np.frombuffer(frame, dtype=dtype)
        arr = _cai.to_device(flat.reshape(shape[::-1]).T if fortran else flat.reshape(shape))
    return _then_mask(arr, _read_host, mask_header, frames, index + 1, path, depth)


def _deserialize_host(header: Header, frames: list[Any]) -> DeviceNDArray:
    return _read_all(_read_host, header, frames, "dask")


# ----- the "cuda" family: device frames -----------------------------------------------------

def _serialize_device(x: DeviceNDArray) -> tuple[Header, list[DeviceNDArray]]:
    data = _data_only(x)  # the mask goes on its own, below
    if not (data.is_c_contiguous() or data.is_f_contiguous()):
        data = _cai.to_device(data)  # a dense device copy
    header: Header = {"shape": list(data.shape), "strides": list(data.strides)}
    _dtype_header(header, data.dtype)
    frames = []
    if data.nbytes:
        # The frame: the array's bytes as a 1-d uint8 device array (no copy), on its stream,
        # as writable as the array (a writable frame of read-only memory would let the
        # receiver write to it).
        desc = dict(data.__cuda_array_interface__)
        frames.append(_cai.from_cuda_array_interface(
            {
                "shape": (data.nbytes,),
                "typestr": "|u1",
                "data": (data.ptr + _lowest_offset(data.shape, data.strides), data.readonly),
                "version": 3,
                "stream": desc.get("stream"),
            },
            owner=data,
        ))
    if x.mask is not None:
        header["mask"], mask_frames = _serialize_device(x.mask)
        frames += mask_frames
    return header, frames


def _lowest_offset(shape: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """From the first element to the lowest byte an array of these strides touches (<= 0)."""
    return sum(s * (n - 1) for s, n in zip(strides, shape) if s < 0 and n > 0)


def _read_device(header: Header, frames: list[Any], index: int, path: str,
                 depth: int) -> tuple[DeviceNDArray, int]:
    family = "cuda"
    shape = _shape(header, family, path)
    dtype = _dtype(header, family, path)
    strides = _ints(header, family, path, "strides", "byte strides")
    if len(strides) != len(shape):
        raise _fail(ValueError, family, path, "strides", list(strides),
                    f"{len(shape)} byte strides, one per axis of shape {list(shape)}")
    mask_header = _mask_header(header, family, path, depth)
    if math.prod(shape) * dtype.itemsize == 0:
        arr = _cai.device_array(shape, dtype)  # no bytes, no frame
    else:
        frame = _frame(frames, index, family, path)
        if not _cai.is_cuda_array(frame):
            raise TypeError(f"cai: Dask {family!r} frame {index}: expected a device buffer (an "
                            f"object with __cuda_array_interface__), got "
                            f"{type(frame).__name__}")
        frame = _cai.as_cuda_array(frame)  # any device buffer (UCX gives its own kind)
        if not frame.is_c_contiguous():
            raise ValueError(f"cai: Dask {family!r} frame {index}: expected contiguous bytes, "
                             f"got strides {frame.strides} for shape {frame.shape}")
        lowest = _lowest_offset(shape, strides)
        highest = sum(s * (n - 1) for s, n in zip(strides, shape) if s > 0) + dtype.itemsize
        if highest - lowest > frame.nbytes:
            raise ValueError(f"cai: Dask {family!r} header: {path}shape {list(shape)} and "
                             f"{path}strides {list(strides)} of dtype {dtype.str} reach over "
                             f"{highest - lowest} bytes, but frame {index} holds "
                             f"{frame.nbytes}")
        ml = getattr(dtype.type, "__module__", None) == "ml_dtypes"
        desc = {
            "shape": shape,
            "typestr": f"|V{dtype.itemsize}" if ml else dtype.str,
            "data": (frame.ptr - lowest, frame.readonly),
            "strides": strides,
            "version": 3,
            "stream": frame.__cuda_array_interface__.get("stream"),
        }
        if dtype.fields is not None:
            desc["descr"] = dtype.descr
        arr = _cai.from_cuda_array_interface(desc, owner=frame)
        if ml or (dtype.names is not None and _ml_fields(dtype)):
            arr = arr.view(dtype)  # the CAI has no typestr for ml_dtypes' types
        index += 1
    return _then_mask(arr, _read_device, mask_header, frames, index, path, depth)


def _deserialize_device(header: Header, frames: list[Any]) -> DeviceNDArray:
    return _read_all(_read_device, header, frames, "cuda")


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

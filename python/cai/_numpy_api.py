"""NumPy's protocols for DeviceNDArray: __array_function__ (np.concatenate and np.stack of cai
arrays on the device, np.transpose, np.swapaxes and np.moveaxis as views; docs/python.md,
"NumPy functions") and __iter__.

NumPy functions took cai arrays through __array__ (a host copy, as Numba's device arrays) before
this protocol existed, and every function but these still does. Defining the protocol also
tells Dask that a cai array is a duck array, whose chunks it keeps as they are
(docs/scale-out.md, "dask.array")."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from . import _cai
from ._cai import DeviceNDArray

if TYPE_CHECKING:  # for annotations only; the functions import NumPy where they use it
    from numpy.typing import DTypeLike


def _same_dtype(arrays: Sequence[DeviceNDArray], entry: str, dtype: DTypeLike | None) -> None:
    import numpy as np

    first = arrays[0].dtype
    for i, a in enumerate(arrays):
        if a.dtype != first:
            raise TypeError(f"{entry}: array {i} has dtype {a.dtype} but array 0 has {first}; "
                            "cai does not convert dtypes on the device")
    if dtype is not None and np.dtype(dtype) != first:
        raise TypeError(f"{entry}: dtype={np.dtype(dtype)} differs from the arrays' {first}; "
                        "cai does not convert dtypes on the device")


def _device_arrays(arrays: Iterable[object], entry: str) -> list[DeviceNDArray]:
    items: list[DeviceNDArray] = []
    for i, a in enumerate(arrays):
        if not isinstance(a, DeviceNDArray):
            raise TypeError(f"{entry}: array {i} is a {type(a).__module__}.{type(a).__name__}, "
                            "not a cai.DeviceNDArray; copy host data to the device first "
                            "(cai.to_device)")
        items.append(a)
    if not items:
        raise ValueError(f"{entry}: need at least one array")
    return items


def _no_out(out: object, entry: str) -> None:
    if out is not None:
        raise NotImplementedError(f"{entry}: out= is not supported for cai arrays")


def _axis(axis: int, ndim: int, entry: str) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"{entry}: axis {axis} is out of bounds for {ndim} dimension(s)")
    return axis % ndim


def concatenate(arrays: Sequence[DeviceNDArray], axis: int | None = 0, out: None = None, *,
                dtype: DTypeLike | None = None, casting: str | None = None) -> DeviceNDArray:
    """np.concatenate on the device: a new C-contiguous array on the device of the first
    array, filled by stream-ordered copies (peer copies for arrays of other devices)."""
    entry = "concatenate()"
    items = _device_arrays(arrays, entry)
    _no_out(out, entry)
    _same_dtype(items, entry, dtype)
    if axis is None:
        items = [(a if a.is_c_contiguous() else a.copy()).ravel() for a in items]
        axis = 0
    first = items[0]
    if first.ndim == 0:
        raise ValueError(f"{entry}: zero-dimensional arrays cannot be concatenated")
    axis = _axis(axis, first.ndim, entry)
    for i, a in enumerate(items):
        if a.ndim != first.ndim or any(n != m for k, (n, m) in enumerate(zip(a.shape, first.shape))
                                       if k != axis):
            raise ValueError(f"{entry}: array {i} has shape {a.shape} but array 0 has shape "
                             f"{first.shape}; all but axis {axis} must match")
    shape = list(first.shape)
    shape[axis] = sum(a.shape[axis] for a in items)
    home = next((a.device for a in items if a.size), first.device)
    with home:
        result = _cai.device_array(tuple(shape), first.dtype)
    start = 0
    lead = (slice(None),) * axis
    for a in items:
        stop = start + a.shape[axis]
        if a.size:
            _cai.ops.copy(result[lead + (slice(start, stop),)], a)
        start = stop
    return result


def stack(arrays: Sequence[DeviceNDArray], axis: int = 0, out: None = None, *,
          dtype: DTypeLike | None = None, casting: str | None = None) -> DeviceNDArray:
    """np.stack on the device: the arrays (of one shape) along a new axis."""
    entry = "stack()"
    items = _device_arrays(arrays, entry)
    _no_out(out, entry)
    shape = items[0].shape
    for i, a in enumerate(items):
        if a.shape != shape:
            raise ValueError(f"{entry}: array {i} has shape {a.shape} but array 0 has shape "
                             f"{shape}; all input arrays must have the same shape")
    axis = _axis(axis, len(shape) + 1, entry)
    where = (slice(None),) * axis + (None,)
    return concatenate([a[where] for a in items], axis=axis, dtype=dtype)


def transpose(a: DeviceNDArray, axes: Sequence[int] | None = None) -> DeviceNDArray:
    """np.transpose: a view (DeviceNDArray.transpose)."""
    return a.transpose() if axes is None else a.transpose(tuple(axes))


def swapaxes(a: DeviceNDArray, axis1: int, axis2: int) -> DeviceNDArray:
    """np.swapaxes: a view."""
    order = list(range(a.ndim))
    i, j = _axis(axis1, a.ndim, "swapaxes()"), _axis(axis2, a.ndim, "swapaxes()")
    order[i], order[j] = order[j], order[i]
    return a.transpose(tuple(order))


def moveaxis(a: DeviceNDArray, source: int | Sequence[int],
             destination: int | Sequence[int]) -> DeviceNDArray:
    """np.moveaxis: a view."""
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    if len(src) != len(dst):
        raise ValueError("moveaxis(): source and destination must have the same number of "
                         "elements")
    src = [_axis(s, a.ndim, "moveaxis()") for s in src]
    dst = [_axis(d, a.ndim, "moveaxis()") for d in dst]
    order = [n for n in range(a.ndim) if n not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return a.transpose(tuple(order))


def _host(value: Any) -> Any:
    """value with each cai array replaced by its host copy (NumPy's __array__ road)."""
    import numpy as np

    if isinstance(value, DeviceNDArray):
        return np.asarray(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_host(v) for v in value)
    return value


def _holds_device_array(value: Any) -> bool:
    if isinstance(value, DeviceNDArray):
        return True
    return isinstance(value, (list, tuple)) and any(_holds_device_array(v) for v in value)


_on_device: dict[Callable[..., Any], Callable[..., DeviceNDArray]] = {}

# NumPy functions that write into an argument in place (its name by function): on the host
# copy a cai array would get, the write would change nothing, silently. Refused, as out= is.
_WRITES_INTO = {"copyto": "dst", "put": "a", "putmask": "a", "place": "arr",
                "fill_diagonal": "a", "put_along_axis": "arr"}


def _written_argument(func: Callable[..., Any], args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> Any:
    name = _WRITES_INTO.get(getattr(func, "__name__", ""))
    if name is None or not getattr(func, "__module__", "").startswith("numpy"):
        return None
    return args[0] if args else kwargs.get(name)


class HostFallbackWarning(UserWarning):
    """A NumPy function or ufunc took cai arrays as host copies and computed on the host."""


def _host_fallback(name: str) -> None:
    """The one rule of the host fallback (docs/python.md, "No silent host fallback"): a
    warning, once per call site by Python's default filter, or with
    cai.config.HOST_FALLBACK = False a TypeError. stacklevel 3: the caller of the NumPy call
    (NumPy's dispatch is C, so its frames do not count)."""
    from . import config

    message = (f"numpy.{name}() on a cai array computes on the host, with a host copy of the "
               "device data; copy explicitly (np.asarray(a), a.copy_to_host()) to say so")
    if not config.HOST_FALLBACK:
        raise TypeError(message.replace("computes on the host",
                                        "would compute on the host, which "
                                        "cai.config.HOST_FALLBACK = False refuses"))
    import warnings

    warnings.warn(message, HostFallbackWarning, stacklevel=3)


def _array_function(self: DeviceNDArray, func: Callable[..., Any], types: Sequence[type],
                    args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    import numpy as np

    if not _on_device:
        _on_device.update({np.concatenate: concatenate, np.stack: stack,
                           np.transpose: transpose, np.swapaxes: swapaxes,
                           np.moveaxis: moveaxis})
    device = _on_device.get(func)
    if device is not None:
        return device(*args, **kwargs)
    if not all(issubclass(t, (DeviceNDArray, np.ndarray)) for t in types):
        return NotImplemented  # another library's arrays: theirs to handle
    if isinstance(_written_argument(func, args, kwargs), DeviceNDArray):
        raise TypeError(f"numpy.{func.__name__}(): writes into a cai array in place, but NumPy "
                        "computes on a host copy, which would leave the array unchanged; write "
                        "on the device (a[...] = value, cai.ops.copy) or on a host copy "
                        "(copy_to_host) and copy it back (copy_to_device)")
    if _holds_device_array(kwargs.get("out")):
        raise TypeError(f"numpy.{func.__name__}(): out= is a cai array, but NumPy computes on the "
                        "host; copy the result with copy_to_device()")
    # What NumPy did before the protocol: the cai arrays as host copies.
    _host_fallback(func.__name__)
    return func(*_host(args), **{k: _host(v) for k, v in kwargs.items()})


def _array_ufunc(self: DeviceNDArray, ufunc: Any, method: str, *inputs: Any,
                 **kwargs: Any) -> Any:
    """Ufuncs on cai arrays: host copies, as through __array__, said by the fallback rule."""
    import numpy as np

    if _holds_device_array(kwargs.get("out")):
        raise TypeError(f"numpy.{ufunc.__name__}(): out= is a cai array, but NumPy computes on "
                        "the host; copy the result with copy_to_device()")
    if not all(isinstance(x, (DeviceNDArray, np.ndarray, np.generic, int, float, complex, bool))
               or not hasattr(x, "__array_ufunc__") for x in inputs):
        return NotImplemented  # another library's arrays: theirs to handle
    name = ufunc.__name__ if method == "__call__" else f"{ufunc.__name__}.{method}"
    _host_fallback(name)
    return getattr(ufunc, method)(*_host(inputs), **kwargs)


def _iter(self: DeviceNDArray) -> Iterator[Any]:
    """The elements along the first axis, as NumPy iterates: views, or for a 1-d array NumPy
    scalars (each a host copy)."""
    if self.ndim == 0:
        raise TypeError("iteration over a 0-d array")
    return (self[i] for i in range(self.shape[0]))


# Assigned with setattr: methods of the extension type written in Python (stubs.pat declares
# __iter__; NumPy finds __array_function__ by name).
setattr(DeviceNDArray, "__array_function__", _array_function)
setattr(DeviceNDArray, "__array_ufunc__", _array_ufunc)
setattr(DeviceNDArray, "__iter__", _iter)

"""Host values going into device arrays: what `copy_to_device` and `a[...] = value` accept
(docs/python.md, "No silent conversion"). The C++ side calls these and copies the result."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for annotations only; the functions import NumPy where they use it
    import numpy as np

def _is_ml_dtypes(dt: "np.dtype[Any]") -> bool:
    return dt.type.__module__.startswith("ml_dtypes")


def _name(dt: "np.dtype[Any]") -> str:
    return dt.name if _is_ml_dtypes(dt) or dt.names is None else str(dt)


def _numeric(dt: "np.dtype[Any]") -> bool:
    return dt.kind in "biufc" or (_is_ml_dtypes(dt) and dt.names is None)


def _float_like(dt: "np.dtype[Any]") -> bool:
    """Whether values going in are rounded to the nearest representable one (floats)."""
    return dt.kind in "fc" or (_is_ml_dtypes(dt) and "float" in dt.name)


def exact(ary: Any, dtype: "np.dtype[Any]", shape: tuple[int, ...],
          where: str) -> "np.ndarray[Any, Any]":
    """`ary` as a C-contiguous NumPy array of `dtype` and `shape`, by Numba's rule for
    copy_to_device: the same dtype, and the same shape once axes of length one are dropped;
    nothing converted, nothing broadcast."""
    import numpy as np

    host = np.asarray(ary)
    if host.dtype != dtype:
        raise TypeError(f"incompatible dtype: {_name(dtype)} vs. {_name(host.dtype)} "
                        f"({where}: the array's dtype, then the host data's; "
                        f"convert the data first, e.g. data.astype({_spelled(dtype)}))")
    if host.shape != shape and host.squeeze().shape != tuple(n for n in shape if n != 1):
        raise ValueError(f"incompatible shape: {shape} vs. {host.shape} "
                         f"({where}: the array's shape, then the host data's)")
    return np.ascontiguousarray(host.reshape(shape))


def _first_change(src: Any, back: Any, changed: Any) -> str:
    import numpy as np

    i = np.flatnonzero(np.broadcast_to(changed, np.shape(src)))[0]
    return f"{np.asarray(src).reshape(-1)[i]} becomes {np.asarray(back).reshape(-1)[i]}"


def _spelled(dt: "np.dtype[Any]") -> str:
    """How the user names the type: np.int8, ml_dtypes.bfloat16."""
    return ("ml_dtypes." if _is_ml_dtypes(dt) else "np.") + _name(dt)


def assignable(value: Any, dtype: "np.dtype[Any]", shape: tuple[int, ...],
               where: str) -> "np.ndarray[Any, Any]":
    """`value` converted to `dtype` and broadcast to `shape` by NumPy's assignment rules, as a
    C-contiguous array; a conversion that loses values (a fraction or an out-of-range value into
    an integer, a complex number into a real, a finite value that overflows a float) is a
    ValueError: the user casts first to accept it."""
    import numpy as np

    try:
        if not _numeric(dtype):  # records, strings, dates, raw bytes: NumPy's own rules
            out = np.asarray(value, dtype=dtype)
        else:
            src = np.asarray(value)
            out = src if src.dtype == dtype else _convert(src, dtype, where)
    except OverflowError as e:  # a Python int beyond int64 (NumPy keeps it as an object)
        raise ValueError(f"{where}: {value!r} does not fit in {_name(dtype)} ({e})") from None
    if shape == () and out.ndim != 0:
        raise TypeError(f"{where} must be a scalar, got an array of shape {out.shape}")
    return np.ascontiguousarray(np.broadcast_to(out, shape))


def _convert(src: Any, dtype: "np.dtype[Any]", where: str) -> Any:
    import numpy as np

    if not _numeric(src.dtype):
        return np.asarray(src, dtype=dtype)  # strings, objects into numbers: NumPy's rules
    import warnings

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # NumPy's RuntimeWarning/ComplexWarning for the casts
        out = src.astype(dtype)
        if src.dtype.kind == "c" and dtype.kind != "c":
            changed = np.imag(src) != 0
            back = out
        elif _float_like(dtype) and src.dtype.kind != "c":
            # Rounding to the nearest float is how floats take values; overflow is a loss.
            wide = src.astype(np.float64) if src.dtype.kind != "b" else src
            changed = np.isfinite(wide) & ~np.isfinite(out.astype(np.float64))
            back = out
        else:
            back = out.astype(src.dtype)
            same = back == src
            if src.dtype.kind in "fc" or _float_like(src.dtype):
                same |= np.isnan(src) & np.isnan(back)
            changed = ~same
    if np.any(changed):
        raise ValueError(
            f"{where}: assigning {_name(src.dtype)} values to an array of {_name(dtype)} would "
            f"change them ({_first_change(src, back, changed)}); cast them first "
            f"(value.astype({_spelled(dtype)})) to accept the conversion")
    return out

"""Run-time switches of cai.

``CUDA_ARRAY_INTERFACE_SYNC``: when true (the default), importing an object whose
``__cuda_array_interface__`` names a stream orders cai's work after that stream with events
(CAI v3 consumer rule, never blocking the host). Set it to False, or the environment variable
``CAI_CUDA_ARRAY_INTERFACE_SYNC=0`` before import, to ignore producers' streams.

``EXPORT_STREAM``: when true (the default) our arrays export their stream; False exports
``stream: None`` always (the producer option of CAI v3, never the default).

``HOST_FALLBACK``: when true (the default) a NumPy function or ufunc that cai answers through a
host copy of device arrays warns with ``cai.HostFallbackWarning`` (once per call site); False
makes it a TypeError (env ``CAI_HOST_FALLBACK=0``). Explicit copies stay silent.

``reset()`` sets them back to their defaults; ``override(NAME=value, ...)`` is a context manager
that sets some for a ``with`` block and restores them after it.

All take True or False only (a TypeError otherwise): a string such as "0" would otherwise be
true in Python and false in the environment variable. The environment variables take
0/1, false/true, no/yes, off/on (any case); anything else is a ValueError at import.
"""

import contextlib
import os
import sys
import types
from collections.abc import Callable, Iterator

from . import _cai

# What type checkers see; at run time the properties of _Config below serve these names.
CUDA_ARRAY_INTERFACE_SYNC: bool
EXPORT_STREAM: bool
HOST_FALLBACK: bool


def _env_flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.strip().lower() in ("0", "false", "no", "off"):
        return False
    if value.strip().lower() in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"{name}={value!r}: expected 0 or 1")


def _bool_setting(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"cai.config.{name}: expected True or False, got {type(value).__name__} "
                        f"{value!r} (the environment variable CAI_{name} is the place for "
                        f"strings such as '0')")
    return value


def _switch(name: str, get: Callable[[], bool], set_: Callable[[bool], None]) -> property:
    """The property of one switch: the flag lives in the extension, so that the hot paths read
    a C++ bool, not a module dict."""

    def getter(self: object) -> bool:
        return get()

    def setter(self: object, value: bool) -> None:
        set_(_bool_setting(name, value))

    return property(getter, setter)


# Read only on the host-fallback path (cai._numpy_api), so a Python flag.
_host_fallback = [True]

_SWITCHES = {
    "CUDA_ARRAY_INTERFACE_SYNC": (_cai._get_import_sync, _cai._set_import_sync),
    "EXPORT_STREAM": (_cai._get_export_stream, _cai._set_export_stream),
    "HOST_FALLBACK": (lambda: _host_fallback[0],
                      lambda value: _host_fallback.__setitem__(0, value)),
}


class _Config(types.ModuleType):
    CUDA_ARRAY_INTERFACE_SYNC = _switch("CUDA_ARRAY_INTERFACE_SYNC",
                                        *_SWITCHES["CUDA_ARRAY_INTERFACE_SYNC"])
    EXPORT_STREAM = _switch("EXPORT_STREAM", *_SWITCHES["EXPORT_STREAM"])
    HOST_FALLBACK = _switch("HOST_FALLBACK", *_SWITCHES["HOST_FALLBACK"])


def reset() -> None:
    """Sets every switch back to its built-in default (True), whatever the environment said."""
    for _, set_ in _SWITCHES.values():
        set_(True)


@contextlib.contextmanager
def override(**switches: bool) -> Iterator[None]:
    """Sets the given switches for the ``with`` block and restores their values after it:
    ``with cai.config.override(EXPORT_STREAM=False): ...``."""
    for name, value in switches.items():
        if name not in _SWITCHES:
            raise TypeError(f"cai.config.override(): no switch {name!r} (the switches: "
                            f"{', '.join(_SWITCHES)})")
        _bool_setting(name, value)
    saved = {name: _SWITCHES[name][0]() for name in switches}
    try:
        for name, value in switches.items():
            _SWITCHES[name][1](value)
        yield
    finally:
        for name, value in saved.items():
            _SWITCHES[name][1](value)


sys.modules[__name__].__class__ = _Config
_cai._set_import_sync(_env_flag("CAI_CUDA_ARRAY_INTERFACE_SYNC", True))
_cai._set_export_stream(_env_flag("CAI_EXPORT_STREAM", True))
_host_fallback[0] = _env_flag("CAI_HOST_FALLBACK", True)

"""Run-time switches of cai.

``CUDA_ARRAY_INTERFACE_SYNC``: when true (the default), importing an object whose
``__cuda_array_interface__`` names a stream orders cai's work after that stream with events
(CAI v3 consumer rule, never blocking the host). Set it to False, or the environment variable
``CAI_CUDA_ARRAY_INTERFACE_SYNC=0`` before import, to ignore producers' streams.

``EXPORT_STREAM``: when true (the default) our arrays export their stream; False exports
``stream: None`` always (the producer option of CAI v3, never the default).

Both take True or False only (a TypeError otherwise): a string such as "0" would otherwise be
true in Python and false in the environment variable. The environment variables take
0/1, false/true, no/yes, off/on (any case); anything else is a ValueError at import.
"""

import os
import sys
import types

from . import _cai

# What type checkers see; at run time the properties of _Config below serve these names.
CUDA_ARRAY_INTERFACE_SYNC: bool
EXPORT_STREAM: bool


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


class _Config(types.ModuleType):
    # The flags live in the extension so that the hot paths read a C++ bool, not a module dict.
    @property
    def CUDA_ARRAY_INTERFACE_SYNC(self) -> bool:
        return _cai._get_import_sync()

    @CUDA_ARRAY_INTERFACE_SYNC.setter
    def CUDA_ARRAY_INTERFACE_SYNC(self, value: bool) -> None:
        _cai._set_import_sync(_bool_setting("CUDA_ARRAY_INTERFACE_SYNC", value))

    @property
    def EXPORT_STREAM(self) -> bool:
        return _cai._get_export_stream()

    @EXPORT_STREAM.setter
    def EXPORT_STREAM(self, value: bool) -> None:
        _cai._set_export_stream(_bool_setting("EXPORT_STREAM", value))


sys.modules[__name__].__class__ = _Config
_cai._set_import_sync(_env_flag("CAI_CUDA_ARRAY_INTERFACE_SYNC", True))
_cai._set_export_stream(_env_flag("CAI_EXPORT_STREAM", True))

"""Helpers shared by the test files (imported as `helpers`; pytest puts this folder on sys.path)."""

import numpy as np


class Producer:
    """A foreign object exporting a CAI dict that points at a cai array's memory.

    Keeps `arr` alive (like any real producer keeps its memory alive). `version` selects the
    dict a producer of that version would write: v0 has no mask and no stream, v0-v2 no stream.
    `stream` and `changes` override keys (`Producer.DROP` removes the key). Every read builds a
    new dict and is counted in `reads`.
    """

    DROP = object()
    KEEP = object()

    def __init__(self, arr, version=3, stream=KEEP, **changes):
        self.arr = arr
        d = dict(arr.__cuda_array_interface__)
        if version is Producer.DROP:
            del d["version"]
        else:
            d["version"] = version
        if isinstance(version, int) and version < 3:
            d.pop("stream", None)
        if isinstance(version, int) and version < 1:
            d.pop("mask", None)
        if stream is Producer.DROP:
            d.pop("stream", None)
        elif stream is not Producer.KEEP:
            d["stream"] = stream
        for key, value in changes.items():
            if value is Producer.DROP:
                d.pop(key, None)
            else:
                d[key] = value
        self._desc = d
        self.reads = 0

    @property
    def __cuda_array_interface__(self):
        self.reads += 1
        return dict(self._desc)


def host_bytes(arr):
    """The raw bytes of a NumPy array in C order (compares NaNs exactly). Structured types
    give the bytes of each field: NumPy itself does not preserve padding bytes when it copies."""
    if arr.dtype.names:
        return b"".join(host_bytes(arr[name]) for name in arr.dtype.names)
    return np.ascontiguousarray(arr).tobytes()


class DictProducer:
    """A foreign CAI producer over a fixed dict (a new copy per read, like CuPy and Numba);
    `keep` is what keeps the memory alive, as a real producer owns it."""

    def __init__(self, desc, keep=None):
        self.desc = desc
        self.keep = keep

    @property
    def __cuda_array_interface__(self):
        return dict(self.desc)


class DLWrapper:
    """A foreign DLPack producer over a cai array (no C exchange API: the capsule road)."""

    def __init__(self, arr):
        self.arr = arr

    def __dlpack__(self, **kwargs):
        return self.arr.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.arr.__dlpack_device__()

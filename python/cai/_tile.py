"""cai.Array: the tile-style global array (docs/dlpack.md) over any DLPack or CAI object."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from . import _cai

if TYPE_CHECKING:
    import numpy
    from typing_extensions import CapsuleType

    from .typing import DeviceArrayLike, DLPackArray, StreamLike


class Array:
    """A global array built without a copy from ANY object with DLPack or the CUDA Array
    Interface (DLPack is tried first). Strides count ELEMENTS. It is itself a producer of both
    protocols, so slices can be handed on to any consumer."""

    __slots__ = ("_data", "_strides")
    _data: _cai.DeviceNDArray
    _strides: tuple[int, ...]

    def __init__(self, obj: DeviceArrayLike | Array) -> None:
        if isinstance(obj, Array):
            self._data = obj._data
        elif isinstance(obj, _cai.DeviceNDArray):
            self._data = obj
        elif hasattr(obj, "__dlpack__"):
            self._data = _cai.from_dlpack(cast("DLPackArray", obj))
        else:
            self._data = _cai.as_cuda_array(obj)
        self._strides = Array._element_strides(self._data)

    @classmethod
    def _wrap(cls, data: _cai.DeviceNDArray) -> Array:
        a = cls.__new__(cls)
        a._data = data
        a._strides = Array._element_strides(data)
        return a

    @staticmethod
    def _element_strides(data: _cai.DeviceNDArray) -> tuple[int, ...]:
        # The typed-view rule, shared with C++ (docs/cpp-typed-view.md).
        try:
            return _cai._element_strides(data)
        except ValueError as e:
            raise ValueError(f"Array: {e}; a global array's strides count elements") from None

    @property
    def __cai_array__(self) -> _cai.DeviceNDArray:
        """The cai array this wraps: cai's imports take its view as it is (its stream state
        included) rather than exporting and importing it again."""
        return self._data

    @property
    def dtype(self) -> numpy.dtype[Any]:
        return self._data.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return self._data.shape

    @property
    def strides(self) -> tuple[int, ...]:
        """Strides in elements, not bytes."""
        return self._strides

    @property
    def ndim(self) -> int:
        return self._data.ndim

    def slice(self, axis: int, start: int, stop: int) -> Array:
        """A view of [start, stop) along `axis` (negative counts from the last); requires
        0 <= start < N and start <= stop <= N. Shares memory."""
        return Array._wrap(self._data.slice(axis, start, stop))

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return self._data.__cuda_array_interface__

    def __dlpack__(self, *, stream: StreamLike | None = None,
                   max_version: tuple[int, int] | None = None,
                   dl_device: tuple[int, int] | None = None,
                   copy: bool | None = None) -> CapsuleType:
        return self._data.__dlpack__(stream=stream, max_version=max_version,
                                     dl_device=dl_device, copy=copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._data.__dlpack_device__()

    def __repr__(self) -> str:
        return f"cai.Array(shape={self.shape}, dtype={self.dtype}, strides={self.strides})"

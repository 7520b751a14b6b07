"""Types for annotating code that uses cai (docs/packaging.md, "Type information"), as
numpy.typing does for NumPy: what cai's functions accept, as protocols that any library's
objects satisfy without inheriting from anything.

- `CudaArrayInterface`: an object with `__cuda_array_interface__` (CuPy, Numba, PyTorch, cai).
- `DLPackArray`: an object with `__dlpack__` (PyTorch, JAX, CuPy, cai; NumPy's arrays too,
  which cai copies to the device only when asked to).
- `DeviceArrayLike`: either; what `cai.as_cuda_array`, `cai.ops` and the arguments of
  extension modules built on `cai::nb::array` take.
- `array[Literal["float32, ndim=2, writable"]]` (also `cai.array`): the annotation of a
  parameter of an extension module built on `cai::nb::array`, as nanobind's stubgen writes it
  (docs/cpp.md): any GPU array; the literal is what the module requires of it, which a type
  checker cannot verify, but which keeps the overloads of different dtypes apart.
- `CudaStream`: an object with `__cuda_stream__` (cuda.core, recent PyTorch and CuPy streams).
- `StreamLike`: a `cai.Stream`, an integer handle, or a `CudaStream`; `stream=` arguments
  also take None (the default stream).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, TypeAlias, TypeVar, Union

from ._cai import Stream


class CudaArrayInterface(Protocol):
    """An object that describes device memory with `__cuda_array_interface__` (any version)."""

    @property
    def __cuda_array_interface__(self) -> Mapping[str, Any]: ...


class DLPackArray(Protocol):
    """An object that exports itself as a DLPack capsule."""

    def __dlpack__(self, *, stream: Any = None) -> Any: ...


class CudaStream(Protocol):
    """A stream of another library, by cuda.core's protocol: (version, handle)."""

    def __cuda_stream__(self) -> tuple[int, int]: ...


DeviceArrayLike: TypeAlias = Union[CudaArrayInterface, DLPackArray]
StreamLike: TypeAlias = Union[Stream, int, CudaStream]

_Spec = TypeVar("_Spec", covariant=True)


class CudaArrayInterfaceFor(CudaArrayInterface, Protocol[_Spec]):
    """A CudaArrayInterface for a parameter that requires `_Spec` (see `array`)."""


class DLPackArrayFor(DLPackArray, Protocol[_Spec]):
    """A DLPackArray for a parameter that requires `_Spec` (see `array`)."""


array: TypeAlias = Union[CudaArrayInterfaceFor[_Spec], DLPackArrayFor[_Spec]]

__all__ = ["CudaArrayInterface", "CudaArrayInterfaceFor", "CudaStream", "DLPackArray",
           "DLPackArrayFor", "DeviceArrayLike", "StreamLike", "array"]

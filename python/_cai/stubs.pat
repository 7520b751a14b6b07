# Refinements of the stub nanobind's stubgen writes for cai._cai (docs/packaging.md, "Type
# information"). Each entry replaces the declaration of one object (a regular expression on its
# qualified name) where the C++ signature cannot say what Python receives: functions that
# return nb::object say which type it is, the exceptions made with PyErr_NewException get a
# class statement. New bindings should say their types with nb::sig instead (shape_ops.cpp);
# tests/python/test_typing.py checks that every entry here names the parameters the function
# really has, so an entry cannot silently go stale. Parameters that take any GPU array or any
# stream use the protocols of cai.typing. Methods that cai's Python code adds to an extension
# type (python/cai/_devices.py, _numpy_api.py) follow the entry of a method that is bound in C++,
# which the staleness check reads first.

^cai\._cai\.__prefix__$:
    import numpy
    import numpy.typing
    import asyncio
    import ctypes
    \from collections.abc import Callable, Iterator, Sequence
    \from contextlib import AbstractContextManager
    \from types import EllipsisType
    \from typing import Any, Literal, SupportsIndex, overload
    \from typing_extensions import CapsuleType
    \from cai.typing import DeviceArrayLike, DLPackArray, StreamLike

    __version__: str

^cai\._cai\.DeviceError$:
    class DeviceError(RuntimeError):
        """The CUDA driver or the simulator reported a failure."""

^cai\._cai\.RaceError$:
    class RaceError(RuntimeError):
        """
        The simulator saw two accesses to the same bytes from different streams (or a stream
        and the host), at least one writing, with nothing ordering them.
        """

^cai\._cai\.stream$:
    def stream(*, non_blocking: bool = False) -> Stream:
        \doc

^cai\._cai\.default_stream$:
    def default_stream() -> Stream:
        \doc

^cai\._cai\.legacy_default_stream$:
    def legacy_default_stream() -> Stream: ...

^cai\._cai\.per_thread_default_stream$:
    def per_thread_default_stream() -> Stream: ...

^cai\._cai\.external_stream$:
    def external_stream(handle: SupportsIndex) -> Stream:
        \doc

^cai\._cai\.Stream\.synchronize$:
    def synchronize(self) -> None: ...

    def auto_synchronize(self) -> AbstractContextManager[Stream]:
        """
        `with s.auto_synchronize():` gives the block `s` and waits for it when the block
        ends normally, as Numba's Stream.auto_synchronize.
        """

    def add_callback(self, callback: Callable[[Stream, int, Any], object], arg: Any = None) -> None:
        """
        Calls callback(stream, status, arg) from another thread once the work queued so far
        is done, as Numba's Stream.add_callback.
        """

    def async_done(self) -> asyncio.Future[Stream]:
        """An awaitable that resolves to the stream once its work so far is done."""

^cai\._cai\.Event\.record$:
    def record(self, stream: StreamLike | None = 0) -> None:
        \doc

^cai\._cai\.Event\.wait$:
    def wait(self, stream: StreamLike | None = 0) -> None:
        \doc

^cai\._cai\.Stream\.__cuda_stream__$:
    def __cuda_stream__(self) -> tuple[int, int]: ...

^cai\._cai\.DeviceNDArray\.shape$:
    @property
    def shape(self) -> tuple[int, ...]: ...

^cai\._cai\.DeviceNDArray\.strides$:
    @property
    def strides(self) -> tuple[int, ...]:
        \doc

^cai\._cai\.DeviceNDArray\.dtype$:
    @property
    def dtype(self) -> numpy.dtype[Any]: ...

^cai\._cai\.DeviceNDArray\.stream$:
    @property
    def stream(self) -> Stream | None:
        \doc

^cai\._cai\.DeviceNDArray\.mask$:
    @property
    def mask(self) -> DeviceNDArray | None: ...

^cai\._cai\.DeviceNDArray\.__cuda_array_interface__$:
    @property
    def __cuda_array_interface__(self) -> dict[str, Any]: ...

^cai\._cai\.DeviceNDArray\.copy_to_host$:
    def copy_to_host(self, ary: numpy.ndarray[Any, Any] | None = None, stream: StreamLike | None = 0) -> numpy.ndarray[Any, Any]:
        \doc

^cai\._cai\.DeviceNDArray\.copy_to_device$:
    def copy_to_device(self, ary: DeviceArrayLike | numpy.typing.ArrayLike, stream: StreamLike | None = 0) -> None:
        \doc

    def getitem(self, item: Any, stream: StreamLike | None = 0) -> Any:
        """self[item], as Numba's getitem."""

    def setitem(self, key: Any, value: DeviceArrayLike | numpy.typing.ArrayLike, stream: StreamLike | None = 0) -> None:
        """self[key] = value, as Numba's setitem."""

    @property
    def device_ctypes_pointer(self) -> ctypes.c_void_p:
        """The first element's address (c_void_p(0) when empty), as Numba."""

    @property
    def alloc_size(self) -> int:
        """Bytes the array's elements span (0 when empty), as Numba."""

    @property
    def flags(self) -> dict[str, bool]:
        """NumPy's flags as a dict, as Numba's DeviceNDArray.flags."""

^cai\._cai\.DeviceNDArray\.copy$:
    def copy(self, order: Literal['C', 'F', 'A'] = 'C', stream: StreamLike | None = 0) -> DeviceNDArray:
        \doc

^cai\._cai\.DeviceNDArray\.__len__$:
    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[Any]:
        """
        The elements along the first axis: views, or NumPy scalars for a 1-d array (TypeError
        for a 0-d array).
        """

^cai\._cai\.DeviceNDArray\.__getitem__$:
    @overload
    def __getitem__(self, key: slice | EllipsisType | None) -> DeviceNDArray:
        """
        A view (basic indexing), or with one integer per axis the element as a NumPy scalar.
        """
    @overload
    def __getitem__(self, key: tuple[slice | EllipsisType | None, ...]) -> DeviceNDArray: ...
    @overload
    def __getitem__(self, key: SupportsIndex | tuple[SupportsIndex | slice | EllipsisType | None, ...]) -> Any: ...

^cai\._cai\.DeviceNDArray\.__setitem__$:
    def __setitem__(self, key: SupportsIndex | slice | EllipsisType | tuple[SupportsIndex | slice | EllipsisType | None, ...] | None, value: DeviceArrayLike | numpy.typing.ArrayLike) -> None: ...

^cai\._cai\.DeviceNDArray\.slice$:
    def slice(self, axis: int, start: int, stop: int) -> DeviceNDArray:
        \doc

^cai\._cai\.DeviceNDArray\.__dlpack__$:
    def __dlpack__(self, *, stream: StreamLike | None = None, max_version: tuple[int, int] | None = None, dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> CapsuleType:
        \doc

^cai\._cai\.DeviceNDArray\.__dlpack_device__$:
    def __dlpack_device__(self) -> tuple[int, int]: ...

^cai\._cai\.DeviceNDArray\.__dlpack_c_exchange_api__$:
    __dlpack_c_exchange_api__: CapsuleType

^cai\._cai\.device_array$:
    def device_array(shape: SupportsIndex | Sequence[SupportsIndex] | numpy.typing.NDArray[numpy.integer[Any]], dtype: numpy.typing.DTypeLike = float, strides: Sequence[SupportsIndex] | numpy.typing.NDArray[numpy.integer[Any]] | None = None, order: Literal['C', 'F'] = 'C', stream: StreamLike | None = 0) -> DeviceNDArray:
        \doc

^cai\._cai\.managed_array$:
    def managed_array(shape: SupportsIndex | Sequence[SupportsIndex] | numpy.typing.NDArray[numpy.integer[Any]], dtype: numpy.typing.DTypeLike = float, strides: Sequence[SupportsIndex] | numpy.typing.NDArray[numpy.integer[Any]] | None = None, order: Literal['C', 'F'] = 'C', stream: StreamLike | None = 0, attach_global: bool = True) -> DeviceNDArray:
        \doc

^cai\._cai\.mapped_array$:
    def mapped_array(shape: SupportsIndex | Sequence[SupportsIndex] | numpy.typing.NDArray[numpy.integer[Any]], dtype: numpy.typing.DTypeLike = float, strides: Sequence[SupportsIndex] | numpy.typing.NDArray[numpy.integer[Any]] | None = None, order: Literal['C', 'F'] = 'C', stream: StreamLike | None = 0, portable: bool = False, wc: bool = False) -> DeviceNDArray:
        \doc

^cai\._cai\._host_register$:
    def _host_register(ptr: int, nbytes: int, read_only: bool = False) -> None: ...

^cai\._cai\._host_unregister$:
    def _host_unregister(ptr: int) -> None: ...

^cai\._cai\.device_array_like$:
    def device_array_like(ary: DeviceArrayLike | numpy.typing.NDArray[Any], stream: StreamLike | None = 0) -> DeviceNDArray: ...

^cai\._cai\.to_device$:
    def to_device(obj: DeviceArrayLike | numpy.typing.ArrayLike, stream: StreamLike | None = 0, copy: bool = True, to: DeviceNDArray | None = None) -> DeviceNDArray:
        \doc

^cai\._cai\.as_cuda_array$:
    def as_cuda_array(obj: DeviceArrayLike, sync: bool = True) -> DeviceNDArray:
        \doc

^cai\._cai\.from_cuda_array_interface$:
    def from_cuda_array_interface(desc: dict[str, Any], owner: object | None = None, sync: bool = True) -> DeviceNDArray:
        \doc

^cai\._cai\.from_dlpack$:
    def from_dlpack(obj: DLPackArray, *, device: Device | int | None = None, copy: bool | None = None) -> DeviceNDArray:
        \doc

^cai\._cai\.Device\.__init__$:
    def __init__(self, device: int | Device | None = None) -> None:
        \doc

^cai\._cai\.IpcHandle\.open$:
    def open(self, stream: StreamLike | None = 0) -> DeviceNDArray:
        \doc

^cai\._cai\.ops\.__prefix__$:
    import numpy.typing
    \from cai.typing import DeviceArrayLike, StreamLike

^cai\._cai\.ops\.copy$:
    def copy(dst: DeviceArrayLike, src: DeviceArrayLike, stream: StreamLike | None = 0) -> None:
        \doc

^cai\._cai\.ops\.fill$:
    def fill(arr: DeviceArrayLike, value: numpy.typing.ArrayLike, stream: StreamLike | None = 0) -> None:
        \doc

^cai\._cai\.ops\.add$:
    def add(a: DeviceArrayLike, b: DeviceArrayLike, out: DeviceArrayLike, stream: StreamLike | None = 0) -> None:
        \doc

^cai\._cai\.sim\.__prefix__$:
    \from cai.typing import StreamLike

^cai\._cai\.sim\.delay$:
    def delay(stream: StreamLike, seconds: float) -> None:
        \doc

^cai\._cai\.sim\.hold$:
    def hold(stream: StreamLike) -> Gate:
        \doc

^cai\._cai\._C_API$:
    _C_API: CapsuleType

^cai\._cai\._element_strides$:
    def _element_strides(arg: object, /) -> tuple[int, ...]:
        \doc

^cai\._cai\.core\.__prefix__$:
    \from typing import Any

^cai\._cai\.core\.parse_typestr$:
    def parse_typestr(typestr: str, v2_as_bfloat16: bool = False) -> dict[str, Any]: ...

^cai\._cai\.core\.parse_descr$:
    def parse_descr(descr: object) -> dict[str, Any]: ...

^cai\._cai\.core\.layout_facts$:
    def layout_facts(shape: object, strides: object, itemsize: int) -> dict[str, Any]: ...

^cai\._cai\.core\.validate$:
    def validate(desc: object) -> dict[str, Any]:
        \doc

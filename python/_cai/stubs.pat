# Refinements of the stub nanobind's stubgen writes for cai._cai (docs/packaging.md, "Type
# information"). Each entry replaces the declaration of one object (a regular expression on its
# qualified name) where the C++ signature cannot say what Python receives: functions that
# return nb::object say which type it is, the exceptions made with PyErr_NewException get a
# class statement. New bindings should say their types with nb::sig instead (shape_ops.cpp);
# tests/python/test_typing.py checks that every entry here names the parameters the function
# really has, so an entry cannot silently go stale.

^cai\._cai\.__prefix__$:
    import numpy
    import numpy.typing
    \from collections.abc import Sequence
    \from typing import Any, Literal, SupportsIndex

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
    def external_stream(handle: object) -> Stream:
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
    def copy_to_host(self, ary: numpy.ndarray[Any, Any] | None = None, stream: object | None = 0) -> numpy.ndarray[Any, Any]:
        \doc

^cai\._cai\.DeviceNDArray\.__getitem__$:
    def __getitem__(self, key: object | None) -> Any:
        """
        A view (basic indexing), or with one integer per axis the element as a NumPy scalar.
        """

^cai\._cai\.DeviceNDArray\.slice$:
    def slice(self, axis: int, start: int, stop: int) -> DeviceNDArray:
        \doc

^cai\._cai\.DeviceNDArray\.__dlpack__$:
    def __dlpack__(self, *, stream: object | None = None, max_version: tuple[int, int] | None = None, dl_device: tuple[int, int] | None = None, copy: bool | None = None) -> object:
        \doc

^cai\._cai\.DeviceNDArray\.__dlpack_device__$:
    def __dlpack_device__(self) -> tuple[int, int]: ...

^cai\._cai\.DeviceNDArray\.__dlpack_c_exchange_api__$:
    __dlpack_c_exchange_api__: object

^cai\._cai\.device_array$:
    def device_array(shape: SupportsIndex | Sequence[SupportsIndex] | numpy.typing.NDArray[numpy.integer[Any]], dtype: numpy.typing.DTypeLike = float, strides: Sequence[SupportsIndex] | numpy.typing.NDArray[numpy.integer[Any]] | None = None, order: Literal['C', 'F'] = 'C', stream: object | None = 0) -> DeviceNDArray:
        \doc

^cai\._cai\.device_array_like$:
    def device_array_like(ary: object, stream: object | None = 0) -> DeviceNDArray: ...

^cai\._cai\.to_device$:
    def to_device(obj: object, stream: object | None = 0) -> DeviceNDArray:
        \doc

^cai\._cai\.as_cuda_array$:
    def as_cuda_array(obj: object, sync: bool = True) -> DeviceNDArray:
        \doc

^cai\._cai\.from_cuda_array_interface$:
    def from_cuda_array_interface(desc: dict[str, Any], owner: object | None = None, sync: bool = True) -> DeviceNDArray:
        \doc

^cai\._cai\.from_dlpack$:
    def from_dlpack(obj: object, *, copy: bool | None = None) -> DeviceNDArray:
        \doc

^cai\._cai\._C_API$:
    _C_API: object

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

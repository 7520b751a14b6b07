"""cai.Array: the tile-style global array (docs/dlpack.md, "cai.Array") over any DLPack or CAI object."""

from . import _cai


class Array:
    """A global array built without a copy from ANY object with DLPack or the CUDA Array
    Interface (DLPack is tried first). Strides count ELEMENTS. It is itself a producer of both
    protocols, so slices can be handed on to any consumer."""

    __slots__ = ("_data",)

    def __init__(self, obj):
        if isinstance(obj, Array):
            self._data = obj._data
        elif isinstance(obj, _cai.DeviceNDArray):
            self._data = obj
        elif hasattr(obj, "__dlpack__"):
            self._data = _cai.from_dlpack(obj)
        else:
            self._data = _cai.as_cuda_array(obj)
        # Element strides exist only when every byte stride is a multiple of the item size.
        self._element_strides()

    @classmethod
    def _wrap(cls, data):
        a = cls.__new__(cls)
        a._data = data
        return a

    def _element_strides(self):
        d = self._data
        if d.itemsize == 0:
            raise ValueError("Array: item size 0 (dtype %s): element strides are undefined" % d.dtype)
        out = []
        for axis, s in enumerate(d.strides):
            if s % d.itemsize:
                raise ValueError(
                    f"Array: axis {axis} has a byte stride of {s}, which is not a multiple of "
                    f"the item size {d.itemsize}; a global array's strides count elements")
            out.append(s // d.itemsize)
        return tuple(out)

    @property
    def dtype(self):
        return self._data.dtype

    @property
    def shape(self):
        return self._data.shape

    @property
    def strides(self):
        """Strides in elements, not bytes."""
        return self._element_strides()

    @property
    def ndim(self):
        return self._data.ndim

    def slice(self, axis, start, stop):
        """A view of [start, stop) along `axis` (negative counts from the last); requires
        0 <= start < N and start <= stop <= N. Shares memory."""
        return Array._wrap(self._data.slice(axis, start, stop))

    @property
    def __cuda_array_interface__(self):
        return self._data.__cuda_array_interface__

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        return self._data.__dlpack__(stream=stream, max_version=max_version,
                                     dl_device=dl_device, copy=copy)

    def __dlpack_device__(self):
        return self._data.__dlpack_device__()

    def __repr__(self):
        return f"cai.Array(shape={self.shape}, dtype={self.dtype}, strides={self.strides})"

"""cai.Array is recognised by a protocol, `__cai_array__` on the type (docs/dlpack.md), not by
its class: any wrapper of a cai array that offers it is imported as that array."""

import numpy as np
import pytest

import cai


class Wrapper:
    """Wraps a cai array and offers neither protocol: only __cai_array__, as cai.Array does."""

    def __init__(self, a):
        self._a = a

    @property
    def __cai_array__(self):
        return self._a


def test_an_object_with_cai_array_is_imported_as_the_array_it_wraps():
    a = cai.to_device(np.arange(4.0))
    b = cai.as_cuda_array(Wrapper(a))
    assert b.__cuda_array_interface__["data"] == a.__cuda_array_interface__["data"]
    cai.ops.fill(Wrapper(a), 7.0)  # an operation's argument too
    np.testing.assert_array_equal(a.copy_to_host(), np.full(4, 7.0))
    assert cai.Array(a).__cai_array__ is a


def test_a_cai_array_attribute_that_is_no_cai_array_is_not_taken():
    class Other:
        __cai_array__ = "not an array"

    with pytest.raises(TypeError):
        cai.as_cuda_array(Other())

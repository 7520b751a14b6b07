"""The types people train in (docs/python.md, "bfloat16 and float8"): with ml_dtypes installed
(requirements-dev.txt), arrays of its bfloat16, float8, float6 and float4 types keep their type
from the host to the device and back, through DLPack (with DLPack 1.3's type codes) in both
directions, through pickling and in DeviceNDArray.dtype. Without ml_dtypes they are NumPy's
opaque V2 / V1, but a DLPack round trip still keeps each type code, and a host round trip
gives raw bytes that DLPack refuses to export rather than guess a format."""

import pathlib
import pickle

import ml_dtypes  # requirements-dev.txt: never skipped
import numpy as np
import pytest

import cai
from helpers import (DLPACK_FLAG_IS_SUBBYTE_TYPE_PADDED, DLWrapper, TypedDLPack, dlpack_flags,
                     dlpack_type, run_isolated)

# ml_dtypes' name -> (DLPack code, bits): include/cai/core/dlpack.h
CODES = {
    "bfloat16": (4, 16),
    "float8_e3m4": (7, 8),
    "float8_e4m3": (8, 8),
    "float8_e4m3b11fnuz": (9, 8),
    "float8_e4m3fn": (10, 8),
    "float8_e4m3fnuz": (11, 8),
    "float8_e5m2": (12, 8),
    "float8_e5m2fnuz": (13, 8),
    "float8_e8m0fnu": (14, 8),
    "float6_e2m3fn": (15, 6),
    "float6_e3m2fn": (16, 6),
    "float4_e2m1fn": (17, 4),
    "int4": (0, 4),
    "uint4": (1, 4),
}
HERE = pathlib.Path(__file__).resolve().parent


def values(name):
    return np.array([0.5, 1.0, 2.0, 4.0], dtype=getattr(ml_dtypes, name))


def same_bits(got, expected):
    assert got.dtype == expected.dtype
    assert got.view(np.uint8).tobytes() == expected.view(np.uint8).tobytes()


@pytest.mark.parametrize("name", list(CODES))
def test_the_type_survives_the_device_and_dlpack(name):
    host = values(name)
    a = cai.to_device(host)
    assert a.dtype == np.dtype(getattr(ml_dtypes, name)) and a.itemsize == host.itemsize
    same_bits(a.copy_to_host(), host)
    assert dlpack_type(a.__dlpack__(max_version=(1, 3))) == (*CODES[name], 1)
    padded = dlpack_flags(a.__dlpack__(max_version=(1, 3))) & DLPACK_FLAG_IS_SUBBYTE_TYPE_PADDED
    assert bool(padded) == (CODES[name][1] < 8)  # DLPack reads sub-byte types as packed unless
    back = cai.from_dlpack(DLWrapper(a))      # through a capsule, as another library reads it
    assert back.dtype == a.dtype and back.ptr == a.ptr
    same_bits(pickle.loads(pickle.dumps(a, protocol=5)).copy_to_host(), host)
    like = cai.device_array_like(a[::2])
    assert like.dtype == a.dtype and like.shape == (2,)
    made = cai.device_array(3, dtype=getattr(ml_dtypes, name))
    cai.ops.fill(made, 2.0)                   # the value converted by ml_dtypes' NumPy type
    same_bits(made.copy_to_host(), np.full(3, 2.0, dtype=host.dtype))
    same_bits(a.view(np.uint8).view(host.dtype).copy_to_host(), host)


@pytest.mark.parametrize("name", list(CODES))
def test_a_foreign_dlpack_tensor_gets_ml_dtypes_type(name):
    code, bits = CODES[name]
    raw = cai.to_device(values(name).view(np.uint8))
    producer = TypedDLPack(raw, code, bits)
    a = cai.from_dlpack(producer)
    assert a.dtype == np.dtype(getattr(ml_dtypes, name))
    same_bits(a.copy_to_host(), values(name))
    assert dlpack_type(a.__dlpack__(max_version=(1, 3))) == (code, bits, 1)


@pytest.mark.parametrize("name", ["float4_e2m1fn", "float6_e2m3fn", "int4", "uint4"])
def test_sub_byte_types_travel_only_where_dlpack_can_say_they_are_padded(name):
    a = cai.to_device(values(name))
    # A legacy capsule has no flags: its sub-byte data would be read as packed, two per byte.
    with pytest.raises(BufferError, match=r"legacy \(unversioned\) tensor cannot say so"):
        a.__dlpack__()
    with pytest.raises(BufferError, match="legacy"):
        a.__dlpack__(max_version=(0, 8))
    # A producer whose sub-byte data are packed: refused, not read as one per byte.
    code, bits = CODES[name]
    packed = TypedDLPack(cai.to_device(values(name).view(np.uint8)), code, bits, padded=False)
    with pytest.raises(BufferError, match=r"elements are packed .*IS_SUBBYTE_TYPE_PADDED"):
        cai.from_dlpack(packed)


def test_the_exported_cuda_array_interface_is_opaque_bytes():
    # The CAI has no typestr for these types; PyTorch and ml_dtypes export bfloat16 as '<V2'.
    assert cai.to_device(values("bfloat16")).__cuda_array_interface__["typestr"] == "<V2"
    assert cai.to_device(values("float8_e5m2")).__cuda_array_interface__["typestr"] == "|V1"


WITHOUT_ML_DTYPES = """
import sys
sys.modules["ml_dtypes"] = None  # as if it were not installed
import numpy as np, cai
from helpers import DLWrapper, TypedDLPack, dlpack_type

raw = cai.to_device(np.array([0x38, 0x40, 0x3c], dtype=np.uint8))
e4m3, e5m2 = TypedDLPack(raw, 10, 8), TypedDLPack(raw, 12, 8)
a, b = cai.from_dlpack(e4m3), cai.from_dlpack(e5m2)
assert a.dtype == b.dtype == np.dtype("V1"), (a.dtype, b.dtype)
print(repr(a))
# The DLPack type code survives a DLPack round trip, a view, a device copy:
for x, code in ((a, 10), (b, 12)):
    for y in (x, cai.from_dlpack(DLWrapper(x)), x[1:], x.copy(), cai.to_device(x),
              cai.device_array_like(x)):
        assert dlpack_type(y.__dlpack__(max_version=(1, 3))) == (code, 8, 1)
try:
    cai.ops.copy(a, b)
except Exception as e:
    print("copy:", type(e).__name__, e)
host = cai.to_device(a.copy_to_host())        # raw bytes now: no type to export
try:
    host.__dlpack__(max_version=(1, 3))
except Exception as e:
    print("export:", type(e).__name__, e)
print(cai.to_device(np.zeros(2, "V2")).dtype)
"""


def test_without_ml_dtypes_the_types_are_opaque_but_never_confused():
    r = run_isolated(WITHOUT_ML_DTYPES, pythonpath=[HERE])
    assert r.returncode == 0, r.stderr
    repr_line, copy_line, export_line, v2 = r.stdout.splitlines()
    assert repr_line == "<cai.DeviceNDArray shape=(3,) dtype=|V1 (float8_e4m3fn)>", repr_line
    assert copy_line == ("copy: TypeError copy(): dst has dtype |V1 (float8_e4m3fn) but src has "
                         "dtype |V1 (float8_e5m2); the dtypes must be equal"), copy_line
    assert export_line.startswith("export: ") and "'|V1' is raw bytes" in export_line, export_line
    assert v2 == "|V2"


# Issue 31 item 5: add on the device for bfloat16 and the float8 formats, computed in float32
# and rounded once, as ml_dtypes rounds a float32 (checked bit for bit, NaN for NaN).
ADD_NAMES = ["bfloat16", "float8_e3m4", "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn",
             "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu"]


def same_or_both_nan(got, expected):
    bits = np.uint8 if got.itemsize == 1 else np.uint16
    same = got.view(bits) == expected.view(bits)
    nan = np.isnan(got.astype(np.float32)) & np.isnan(expected.astype(np.float32))
    bad = ~(same | nan)
    assert not bad.any(), (got.view(bits)[bad][:8], expected.view(bits)[bad][:8])


@pytest.mark.parametrize("name", ADD_NAMES)
def test_add_computes_in_float32_and_rounds_once_like_ml_dtypes(name):
    dt = np.dtype(getattr(ml_dtypes, name))
    if dt.itemsize == 1:                      # every pair of bit patterns
        a = np.repeat(np.arange(256, dtype=np.uint8), 256).view(dt)
        b = np.tile(np.arange(256, dtype=np.uint8), 256).view(dt)
    else:                                     # random bit patterns, NaNs and infs among them
        rng = np.random.default_rng(31)
        a = rng.integers(0, 1 << 16, 1 << 17, dtype=np.uint16).view(dt)
        b = rng.integers(0, 1 << 16, 1 << 17, dtype=np.uint16).view(dt)
        # Sums at the rounding boundaries: a halfway case each way and a carry into the exponent.
        a[:3] = np.array([0x3f80, 0x3f81, 0x3fff], np.uint16).view(dt)
        b[:3] = np.array([0x3b80, 0x3b80, 0x3b80], np.uint16).view(dt)
    with np.errstate(over="ignore", invalid="ignore"):
        expected = (a.astype(np.float32) + b.astype(np.float32)).astype(dt)
    out = cai.device_array(a.shape, dt)
    cai.ops.add(cai.to_device(a), cai.to_device(b), out)
    same_or_both_nan(out.copy_to_host(), expected)
    # Strided operands and an output that is an input.
    x = cai.to_device(a.reshape(-1, 8))
    cai.ops.add(x[:, ::2], cai.to_device(b.reshape(-1, 8))[:, 1::2], x[:, ::2])
    with np.errstate(over="ignore", invalid="ignore"):
        part = (a.reshape(-1, 8)[:, ::2].astype(np.float32) +
                b.reshape(-1, 8)[:, 1::2].astype(np.float32)).astype(dt)
    same_or_both_nan(x.copy_to_host()[:, ::2], part)


@pytest.mark.parametrize("name", ["float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"])
def test_add_refuses_the_sub_byte_floats_by_their_ml_dtypes_name(name):
    a = cai.device_array(3, getattr(ml_dtypes, name))
    with pytest.raises(NotImplementedError, match=rf"add\(\): dtype \|V1 \({name}\) is not "):
        cai.ops.add(a, a, a)

"""Issue 2, core/dtype: our typestr and descr parsers against NumPy as the reference.

Probe: cai._cai.core.parse_typestr(s) / parse_descr(list) -> dict(kind, byteorder, itemsize,
str, native, unit, fields=[(name, str, shape, offset)], descr).
"""

import sys

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from cai._cai import core



def descr_to_dtype(descr):
    """The reference reading of a descr list: numpy.lib.format.descr_to_dtype's (an unnamed
    plain V entry is padding, not a field), with other unnamed entries named f<position> as
    np.dtype(list) names them (descr_to_dtype would keep the name '', which NumPy allows
    only once)."""
    named = []
    for i, entry in enumerate(descr):
        name, rest = entry[0], tuple(entry[1:])
        if name == "":
            t = rest[0]
            is_pad = isinstance(t, str) and np.dtype(t).type is np.void and len(rest) == 1
            if not is_pad:
                name = f"f{i}"
        named.append((name,) + rest)
    return np.lib.format.descr_to_dtype(named)

NATIVE = "<" if sys.byteorder == "little" else ">"
SWAPPED = ">" if NATIVE == "<" else "<"

# --------------------------------------------------------------------------- strategies

byte_orders = st.sampled_from(["<", ">", "=", "|"])
DATETIME_UNITS = ["Y", "M", "W", "D", "h", "m", "s", "ms", "us", "ns", "ps", "fs", "as"]


@st.composite
def scalar_dtypes(draw):
    """Every non-structured kind NumPy has a typestr for, at every size, in both byte orders."""
    kind = draw(st.sampled_from("biufcmMSUV"))
    order = draw(st.sampled_from([NATIVE, SWAPPED]))
    if kind == "b":
        return np.dtype("?")
    if kind in "iu":
        return np.dtype(f"{order}{kind}{draw(st.sampled_from([1, 2, 4, 8]))}")
    if kind == "f":
        return np.dtype(f"{order}f{draw(st.sampled_from([2, 4, 8, 16]))}")
    if kind == "c":
        return np.dtype(f"{order}c{draw(st.sampled_from([8, 16, 32]))}")
    if kind in "mM":
        unit = draw(st.sampled_from(DATETIME_UNITS + [""]))
        if not unit:
            return np.dtype(f"{order}{kind}8")
        count = draw(st.sampled_from([1, 1, 2, 10, 250]))
        return np.dtype(f"{order}{kind}8[{count if count > 1 else ''}{unit}]")
    if kind == "S":
        return np.dtype(f"S{draw(st.integers(0, 40))}")
    if kind == "U":
        return np.dtype(f"{order}U{draw(st.integers(0, 12))}")
    return np.dtype(f"V{draw(st.integers(0, 40))}")


@st.composite
def structured_dtypes(draw, depth=0):
    """Structured types: explicit offsets with gaps, trailing padding, sub-array fields,
    nesting. Offsets increase and fields do not overlap (NumPy has no descr otherwise)."""
    n = draw(st.integers(1 if depth else 1, 4))
    names = draw(st.lists(st.text("abcxyz_", min_size=1, max_size=4), min_size=n, max_size=n,
                          unique=True))
    formats, offsets = [], []
    offset = 0
    for _ in range(n):
        if depth < 2 and draw(st.integers(0, 4)) == 0:
            base = draw(structured_dtypes(depth=depth + 1))
        else:
            base = draw(scalar_dtypes())
        if base.itemsize and draw(st.integers(0, 3)) == 0:
            shape = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=2)))
            fmt = (base, shape)
            size = base.itemsize * int(np.prod(shape))
        else:
            fmt = base
            size = base.itemsize
        offset += draw(st.sampled_from([0, 0, 1, 3, 8]))  # padding before the field
        formats.append(fmt)
        offsets.append(offset)
        offset += size
    itemsize = offset + draw(st.sampled_from([0, 0, 1, 5]))  # trailing padding
    if draw(st.booleans()):
        return np.dtype({"names": names, "formats": formats, "offsets": offsets,
                         "itemsize": itemsize})
    # Packed, the way np.dtype(list) lays fields out.
    return np.dtype(list(zip(names, formats)))


any_dtypes = st.one_of(scalar_dtypes(), structured_dtypes())


# --------------------------------------------------------------------------- helpers

def expected_byteorder(dt):
    return dt.str[0]


def check_scalar_facts(facts, dt):
    assert facts["itemsize"] == dt.itemsize
    assert facts["kind"] == dt.kind
    assert facts["str"] == dt.str
    assert facts["byteorder"] == expected_byteorder(dt)
    assert facts["native"] == dt.isnative
    if dt.kind in "mM":
        # The unit as NumPy prints it between brackets, multiplier included ("10us").
        unit, count = np.datetime_data(dt)
        expected = "" if unit == "generic" else (f"{count}{unit}" if count > 1 else unit)
        assert facts["unit"] == expected
    assert facts["fields"] == []
    assert facts["descr"] == dt.descr


def numpy_fields(dt):
    """(name, base typestr, sub-array shape, offset) for each field, in offset order."""
    out = []
    for name in dt.names:
        ftype, offset = dt.fields[name][:2]
        base, shape = (ftype.base, ftype.shape) if ftype.subdtype else (ftype, ())
        out.append((name, base.str, tuple(shape), offset))
    return out


# --------------------------------------------------------------------------- typestr

@settings(max_examples=200)
@given(scalar_dtypes())
def test_parse_typestr_agrees_with_numpy(dt):
    check_scalar_facts(core.parse_typestr(dt.str), dt)


@settings(max_examples=200)
@given(scalar_dtypes())
def test_parse_descr_of_one_unnamed_entry_is_what_numpy_reads(dt):
    # dtype.descr of a plain type is [('', str)]; as a descr list NumPy reads it as a struct
    # with field 'f0' (or as padding when it is a plain V type). The CAI import keeps the
    # typestr's plain type instead (tested in test_import.py).
    facts = core.parse_descr(dt.descr)
    ref = descr_to_dtype(dt.descr)
    assert facts["itemsize"] == ref.itemsize == dt.itemsize
    assert facts["str"] == ref.str
    assert facts["fields"] == (numpy_fields(ref) if ref.names else [])


@pytest.mark.parametrize("typestr", ["=f8", "f8", "|f8", "=i4", "=U3", "=M8[ns]", "=c16"])
def test_native_order_spellings_normalize_like_numpy(typestr):
    dt = np.dtype(typestr)
    facts = core.parse_typestr(typestr)
    assert facts["str"] == dt.str
    assert facts["native"]


@pytest.mark.parametrize("typestr", [">f8", ">i2", ">c8", ">U2", ">M8[s]", ">m8"])
def test_big_endian_parses_and_is_not_native(typestr):
    facts = core.parse_typestr(typestr)
    dt = np.dtype(typestr)
    assert facts["str"] == dt.str
    assert facts["native"] is (NATIVE == ">")
    assert facts["byteorder"] == ">"


@pytest.mark.parametrize("typestr,expected", [
    ("<b1", "|b1"), (">b1", "|b1"), ("<i1", "|i1"), (">u1", "|u1"), ("<S5", "|S5"),
    ("<V3", "|V3"), ("<M8[1ns]", "<M8[ns]"), ("<M8[010us]", "<M8[10us]"), ("<O8", "|O"),
    ("|O", "|O"),
])
def test_normalization(typestr, expected):
    assert core.parse_typestr(typestr)["str"] == expected


@pytest.mark.parametrize("typestr", [
    "", "<", "f", "<f", "<f3", "<f12", "<i3", "<b2", "<c4", "<x4", "<f8 ", " <f8", "+f8",
    "<M8[xs]", "<M8[0ns]", "<M8[ns/2]", "<O4", "<t8", "<f8\x00", "<V-1", "<i99999999999999999999",
])
def test_bad_typestrs_are_rejected_with_the_key_and_value(typestr):
    with pytest.raises((ValueError, NotImplementedError)) as info:
        core.parse_typestr(typestr)
    assert str(info.value).startswith("typestr: ")


def test_bit_field_kind_is_not_implemented():
    with pytest.raises(NotImplementedError, match="typestr"):
        core.parse_typestr("|t8")


def test_v2_is_opaque_unless_asked_for_bfloat16():
    raw = core.parse_typestr("<V2")
    assert raw["kind"] == "V" and raw["str"] == "|V2"
    bf = core.parse_typestr("<V2", v2_as_bfloat16=True)
    assert bf["itemsize"] == 2
    assert bf["str"] == "<V2"  # bfloat16 is exported as '<V2', as PyTorch and ml_dtypes do
    # '|V2' and the swapped order stay opaque bytes.
    assert core.parse_typestr("|V2", v2_as_bfloat16=True)["str"] == "|V2"
    assert core.parse_typestr(f"{SWAPPED}V2", v2_as_bfloat16=True)["str"] == "|V2"


# --------------------------------------------------------------------------- descr

@settings(max_examples=200)
@given(structured_dtypes())
def test_parse_descr_agrees_with_numpy(dt):
    facts = core.parse_descr(dt.descr)
    assert facts["itemsize"] == dt.itemsize
    assert facts["kind"] == "V"
    assert facts["str"] == dt.str
    assert facts["fields"] == numpy_fields(dt)
    # Our descr is NumPy's, so NumPy rebuilds exactly the same type from it.
    assert facts["descr"] == dt.descr
    assert descr_to_dtype(facts["descr"]) == dt


@settings(max_examples=200)
@given(structured_dtypes())
def test_nested_field_types_agree_with_numpy(dt):
    facts = core.parse_descr(dt.descr)
    for (name, typestr, shape, offset), np_name in zip(facts["fields"], dt.names):
        ftype = dt.fields[np_name][0]
        base = ftype.base if ftype.subdtype else ftype
        if base.names is None:
            continue
        assert typestr == base.str
        inner = core.parse_descr(base.descr)
        assert inner["fields"] == numpy_fields(base)


@settings(max_examples=200)
@given(any_dtypes)
def test_typestr_of_any_dtype(dt):
    facts = core.parse_typestr(dt.str)
    assert facts["itemsize"] == dt.itemsize
    assert facts["str"] == dt.str


def test_descr_with_titles_uses_the_names():
    dt = np.dtype({"names": ["a", "b"], "formats": ["<i4", "<f8"], "titles": ["A title", None]})
    facts = core.parse_descr(dt.descr)
    assert [f[0] for f in facts["fields"]] == ["a", "b"]
    assert facts["itemsize"] == dt.itemsize


def test_unnamed_non_padding_entries_are_named_like_numpy():
    descr = [("", "<i4"), ("x", "<f8"), ("", "<u2")]
    dt = np.dtype(descr)
    facts = core.parse_descr(descr)
    assert [f[0] for f in facts["fields"]] == list(dt.names)
    assert facts["itemsize"] == dt.itemsize


def test_padding_entries_are_not_fields():
    # np.dtype(list) would make fields 'f1' and 'f3' of the padding; the descr rule is
    # numpy.lib.format.descr_to_dtype's, which skips them.
    descr = [("a", "|u1"), ("", "|V3"), ("b", "<i4"), ("", "|V8")]
    dt = descr_to_dtype(descr)
    assert dt.names == ("a", "b")
    facts = core.parse_descr(descr)
    assert facts["fields"] == numpy_fields(dt)
    assert facts["itemsize"] == 16 == dt.itemsize


@pytest.mark.parametrize("descr,needle", [
    ([("a", "<i4"), ("a", "<f8")], "a"),          # duplicate name
    ([("a", "<q8")], "a"),                         # bad typestr inside
    ([("a", "<i4", (-1,))], "a"),                  # negative sub-array dimension
])
def test_bad_descr_is_rejected_naming_the_field(descr, needle):
    with pytest.raises(ValueError) as info:
        core.parse_descr(descr)
    msg = str(info.value)
    assert msg.startswith("descr") or msg.startswith("typestr")
    assert needle in msg


@pytest.mark.parametrize("descr", [
    "not a list", [("a",)], [("a", "<i4", (1,), "extra")], [(1, "<i4")], [("a", 5)],
])
def test_descr_wrong_types_are_type_errors(descr):
    with pytest.raises(TypeError, match="descr"):
        core.parse_descr(descr)

"""Issue 8: the corpus of malformed inputs (tests/data/bad_inputs.json).

Every case says what it feeds to cai, the exception type it must raise and a phrase its message
must contain (the key, value or rule at fault). JSON cannot hold Python objects, so a case
describes its inputs declaratively and this file builds them; the value language is described in
the corpus's "format" entry and implemented by `build` below.

Kinds of case:
  cai     a __cuda_array_interface__ dict (a named base with keys set/dropped), fed through each
          of `routes` (as_cuda_array, from_cuda_array_interface, ops.copy, ops.fill, ops.add,
          Array, ...).
  attr    the attribute __cuda_array_interface__ itself is not a dict, or raises.
  dlpack  a DLPack producer: the capsule its __dlpack__ returns (real DLManagedTensor[Versioned]
          structs built with ctypes, with a counting deleter), or what its methods do instead.
  export  DeviceNDArray.__dlpack__ called with bad arguments.
  call    any other entry point of cai called with bad arguments.

A case with "bug" is a known library bug: it is expected to fail (xfail strict) until fixed.
A case with "isolate" runs in a subprocess (it may crash the interpreter).
"""

import os

os.environ.setdefault("CAI_BACKEND", "sim")

import ctypes  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import cai  # noqa: E402
from helpers import AttrProducer, CudaStreamObj, Index  # noqa: E402

CORPUS_PATH = Path(__file__).resolve().parents[1] / "data" / "bad_inputs.json"
CORPUS = json.loads(CORPUS_PATH.read_text())
CASES = CORPUS["cases"]

EXCEPTIONS = {
    "TypeError": TypeError,
    "ValueError": ValueError,
    "OverflowError": OverflowError,
    "IndexError": IndexError,
    "NotImplementedError": NotImplementedError,
    "BufferError": BufferError,
    "RuntimeError": RuntimeError,
    "MemoryError": MemoryError,
    "KeyError": KeyError,
    "ZeroDivisionError": ZeroDivisionError,
    "DeviceError": cai.DeviceError,
    "RaceError": cai.RaceError,
}


class ProducerFailed(Exception):
    """What the corpus's raising producers raise (it must reach the caller unchanged)."""


EXCEPTIONS["ProducerFailed"] = ProducerFailed


# ----- the memory every case points into -----------------------------------------------------

class Ctx:
    """Device memory for the pointers of a case (`{"$ptr": ...}`), kept alive by the producers."""

    def __init__(self):
        self.mem = cai.device_array((512,), dtype=np.float64)  # 4096 bytes
        self.mem.copy_to_device(np.zeros(512))
        self.ptr = self.mem.ptr
        self.keep = []


# ----- producers ---------------------------------------------------------------------------------

class CAIProducer:
    """An object whose __cuda_array_interface__ is a given dict (a copy per read)."""

    def __init__(self, desc, keep=None):
        self._desc = desc
        self._keep = keep

    @property
    def __cuda_array_interface__(self):
        return dict(self._desc) if isinstance(self._desc, dict) else self._desc


class StrSub(str):
    pass


class IntSub(int):
    pass


# ----- DLPack structs (the ABI, include/cai/core/dlpack.h) -------------------------------------

class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DELETER),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [
        ("dl_tensor", DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", DELETER),
    ]


_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_PyCapsule_GetName = ctypes.pythonapi.PyCapsule_GetName
_PyCapsule_GetName.restype = ctypes.c_char_p
_PyCapsule_GetName.argtypes = [ctypes.py_object]

# Names and structs must outlive the capsules (and a consumer may keep a tensor): kept forever.
_FOREVER = []


def capsule_name(cap):
    return _PyCapsule_GetName(cap).decode()


# Addresses of the tensors whose deleter ran. One module-level callback: it must outlive every
# tensor (a consumer may run a deleter late), and must not keep any case's objects alive.
_DELETED = []


@DELETER
def _deleter(address):
    _DELETED.append(address)


class TensorFactory:
    """Builds one DLManagedTensor[Versioned] per call from a spec; deleter calls are counted."""

    def __init__(self, spec, ctx):
        self.spec = spec
        self.ctx = ctx
        self.made = []      # (capsule, struct) of every tensor handed out

    @property
    def deleted(self):
        mine = {ctypes.addressof(m) for _, m in self.made}
        return [a for a in _DELETED if a in mine]

    def capsule(self):
        s = self.spec
        versioned = s.get("versioned", True)
        m = DLManagedTensorVersioned() if versioned else DLManagedTensor()
        if versioned:
            m.version.major = s.get("major", 1)
            m.version.minor = s.get("minor", 3)
            m.flags = s.get("flags", 0)
        t = m.dl_tensor
        shape = s.get("shape", [2, 3])
        ndim = s.get("ndim", len(shape))
        shape_arr = (ctypes.c_int64 * max(len(shape), 1))(*shape)
        t.ndim = ndim
        t.shape = ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64)) if s.get(
            "shape_ptr", True) else None
        strides = s.get("strides")
        strides_arr = None
        if strides is not None:
            strides_arr = (ctypes.c_int64 * max(len(strides), 1))(*strides)
            t.strides = ctypes.cast(strides_arr, ctypes.POINTER(ctypes.c_int64))
        code, bits, lanes = s.get("dtype", [2, 32, 1])
        t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, lanes
        dev = s.get("device", [2, 0])
        t.device.device_type, t.device.device_id = dev
        data = s.get("data", "valid")
        t.data = self.ctx.ptr if data == "valid" else data
        t.byte_offset = s.get("byte_offset", 0)
        m.deleter = _deleter
        keep = (m, shape_arr, strides_arr)
        _FOREVER.append(keep)
        name = s.get("name", "dltensor_versioned" if versioned else "dltensor").encode()
        _FOREVER.append(name)
        cap = _PyCapsule_New(ctypes.addressof(m), name, None)
        self.made.append((cap, m))
        return cap


class DLProducer:
    """A DLPack producer whose behaviour comes from a spec (see the corpus's format)."""

    def __init__(self, spec, ctx, factory):
        self.spec = spec
        self.ctx = ctx
        self.factory = factory
        self.calls = []

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        s = self.spec
        self.calls.append({"stream": stream, "max_version": max_version})
        if "dlpack_raises" in s:
            raise make_exception(s["dlpack_raises"])
        if s.get("legacy_only") and max_version is not None:
            raise TypeError("__dlpack__() got an unexpected keyword argument 'max_version'")
        if "returns" in s:
            return build(s["returns"], self.ctx)
        if s.get("reuse"):
            # The same capsule every time: the second consumer finds it used.
            if not self.factory.made:
                return self.factory.capsule()
            return self.factory.made[0][0]
        return self.factory.capsule()

    def __dlpack_device__(self):
        s = self.spec
        if "device_raises" in s:
            raise make_exception(s["device_raises"])
        if "dlpack_device" in s:
            return build(s["dlpack_device"], self.ctx)
        return tuple(s.get("tensor", {}).get("device", [2, 0]))


class DLProducerNotCallable:
    __dlpack__ = 5

    def __dlpack_device__(self):
        return (2, 0)


def make_exception(spec):
    return EXCEPTIONS[spec["type"]](spec.get("msg", "producer failed"))


# ----- the value language ---------------------------------------------------------------------

def build(spec, ctx):
    """A Python value from its JSON description (the corpus's "format")."""
    if isinstance(spec, list):
        return tuple(build(x, ctx) for x in spec)
    if not isinstance(spec, dict):
        return spec
    if len(spec) == 0:
        return {}
    tag = next(iter(spec))
    if not tag.startswith("$"):
        return {k: build(v, ctx) for k, v in spec.items()}
    arg = spec[tag]
    if tag == "$list":
        return [build(x, ctx) for x in arg]
    if tag == "$dict":
        return {k: build(v, ctx) for k, v in arg.items()}
    if tag == "$ptr":
        return 0 if arg == "null" else ctx.ptr + spec.get("offset", 0)
    if tag == "$bytes":
        return arg.encode("latin-1")
    if tag == "$float":
        return float(arg)
    if tag == "$np":
        return np.dtype(arg).type(spec["value"])
    if tag == "$obj":
        return {"object": object, "set": set, "frozenset": frozenset, "bytearray": bytearray,
                "ellipsis": lambda: ...}[arg]()
    if tag == "$mappingproxy":
        return types.MappingProxyType(build(arg, ctx))
    if tag == "$index":
        return Index(arg)
    if tag == "$index_raises":
        return Index(0, raises=make_exception(arg))
    if tag == "$str_sub":
        return StrSub(arg)
    if tag == "$int_sub":
        return IntSub(arg)
    if tag == "$deep_list":
        deep = 0
        for _ in range(arg):
            deep = [deep]
        return deep
    if tag == "$slice":
        return slice(*arg)
    if tag == "$repeat":
        value, n = arg
        return tuple(build(value, ctx) for _ in range(n))
    if tag == "$producer":
        return CAIProducer(interface(arg, ctx))
    if tag == "$attr":
        return attr_producer(arg, ctx)
    if tag == "$cycle":
        # A producer whose mask is itself (arg = the base dict).
        d = interface(arg, ctx)
        p = CAIProducer(d)
        d["mask"] = p
        return p
    if tag == "$chain":
        # arg masks nested: each level's mask is the next producer.
        n = arg
        inner = None
        for _ in range(n):
            d = interface({"base": "mask"}, ctx)
            if inner is not None:
                d["mask"] = inner
            inner = CAIProducer(d)
        return inner
    if tag == "$nested_descr":
        depth = arg
        d = [("a", "<f4")]
        for _ in range(depth):
            d = [("a", d)]
        return d
    if tag == "$cuda_stream":
        return CudaStreamObj(value=build(arg, ctx))
    if tag == "$cuda_stream_raises":
        return CudaStreamObj(raises=make_exception(arg))
    if tag == "$array":
        return make_array(arg, ctx)
    if tag == "$stream":
        return {"new": lambda: cai.stream(non_blocking=True),
                "default": cai.default_stream}[arg]()
    if tag == "$event":
        return cai.event(timing=arg)
    if tag == "$host":
        return np.asarray(build(arg, ctx), dtype=spec.get("dtype"))
    if tag == "$capsule":
        name = arg.encode()
        _FOREVER.append(name)
        return _PyCapsule_New(ctx.ptr, name, None)
    raise ValueError(f"bad_inputs.json: unknown tag {tag}")


BASE_SHAPE = (2, 3)


def bases(ctx):
    v3 = {"shape": BASE_SHAPE, "typestr": "<f4", "data": (ctx.ptr, False), "version": 3,
          "strides": None, "stream": 1}
    v2 = {k: v for k, v in v3.items() if k != "stream"} | {"version": 2}
    return {
        "v3": v3,
        "v4": v3 | {"version": 4},
        "v2": v2,
        "v1": v2 | {"version": 1},
        "v0": v2 | {"version": 0},
        "min": {"shape": BASE_SHAPE, "typestr": "<f4", "data": (ctx.ptr, False), "version": 3},
        "mask": {"shape": BASE_SHAPE, "typestr": "|b1", "data": (ctx.ptr + 2048, False),
                 "version": 3},
        "none": {},
    }


def interface(spec, ctx):
    """A CAI dict: spec["base"] with spec["set"] applied and spec["drop"] removed."""
    d = dict(bases(ctx)[spec.get("base", "v3")])
    for k, v in spec.get("set", {}).items():
        d[k] = build(v, ctx)
    for k in spec.get("drop", []):
        d.pop(k, None)
    return d


def attr_producer(spec, ctx):
    if "attr_raises" in spec:
        return AttrProducer(raises=make_exception(spec["attr_raises"]))
    return AttrProducer(value=build(spec["value"], ctx))


def make_array(spec, ctx):
    """A cai array: {"shape", "dtype", "readonly", "mask", "typestr", "strides"}."""
    shape = tuple(spec.get("shape", BASE_SHAPE))
    if "typestr" in spec or spec.get("readonly") or spec.get("mask") or "strides" in spec:
        d = interface({"base": "v3"}, ctx)
        d["shape"] = shape
        d["typestr"] = spec.get("typestr", "<f4")
        d["data"] = (ctx.ptr + spec.get("offset", 0), bool(spec.get("readonly")))
        if "strides" in spec:
            d["strides"] = tuple(spec["strides"])
        if spec.get("mask"):
            md = interface({"base": "mask"}, ctx)
            md["shape"] = shape
            d["mask"] = CAIProducer(md)
        if "descr" in spec:
            d["descr"] = build(spec["descr"], ctx)
        return cai.as_cuda_array(CAIProducer(d, keep=ctx.mem))
    a = cai.device_array(shape, dtype=spec.get("dtype", "float32"))
    cai.ops.fill(a, 0)
    return a


# ----- routes ------------------------------------------------------------------------------------

def like_dst(ctx):
    return cai.device_array(BASE_SHAPE, dtype=np.float32)


def run_cai(case, route, ctx):
    d = interface(case, ctx)
    if route == "from_cuda_array_interface":
        return cai.from_cuda_array_interface(d, owner=ctx.mem)
    p = CAIProducer(d)
    return ROUTES[route](p, ctx)


ROUTES = {
    "as_cuda_array": lambda obj, ctx: cai.as_cuda_array(obj),
    "from_dlpack": lambda obj, ctx: cai.from_dlpack(obj),
    "ops.copy": lambda obj, ctx: cai.ops.copy(like_dst(ctx), obj),
    "ops.copy_dst": lambda obj, ctx: cai.ops.copy(obj, like_dst(ctx)),
    "ops.fill": lambda obj, ctx: cai.ops.fill(obj, 1),
    "ops.add": lambda obj, ctx: cai.ops.add(obj, obj, like_dst(ctx)),
    "ops.add_out": lambda obj, ctx: cai.ops.add(like_dst(ctx), like_dst(ctx), obj),
    "Array": lambda obj, ctx: cai.Array(obj),
    "copy_to_host": lambda obj, ctx: cai.as_cuda_array(obj).copy_to_host(),
}

DEFAULT_ROUTES = {
    "cai": ["as_cuda_array", "from_cuda_array_interface", "ops.copy"],
    "attr": ["as_cuda_array", "ops.copy"],
    "dlpack": ["from_dlpack", "as_cuda_array", "ops.copy"],
}


def run_call(case, ctx):
    target = cai
    for part in case["func"].split("."):
        if part == "ARRAY":
            target = make_array(case.get("array", {}), ctx)
        else:
            target = getattr(target, part)
    args = [build(a, ctx) for a in case.get("args", [])]
    kwargs = {k: build(v, ctx) for k, v in case.get("kwargs", {}).items()}
    return target(*args, **kwargs)


def run_export(case, ctx):
    arr = make_array(case.get("array", {}), ctx)
    kwargs = {k: build(v, ctx) for k, v in case.get("kwargs", {}).items()}
    return arr.__dlpack__(**kwargs)


def run_dlpack(case, route, ctx):
    spec = case["producer"]
    factory = TensorFactory(spec.get("tensor", {}), ctx)
    if spec.get("not_callable"):
        obj = DLProducerNotCallable()
    elif spec.get("numpy"):
        obj = np.arange(6, dtype=np.float32).reshape(BASE_SHAPE)
    elif "exchange_api" in spec:
        # A type with a __dlpack_c_exchange_api__ attribute that is not a usable table.
        cls = type("DLProducerWithAPI", (DLProducer,),
                   {"__dlpack_c_exchange_api__": build(spec["exchange_api"], ctx)})
        obj = cls(spec, ctx, factory)
    else:
        obj = DLProducer(spec, ctx, factory)
    if spec.get("reuse"):
        # The first consumer takes the capsule; the case is what the second one sees.
        first = cai.from_dlpack(obj)
        ctx.keep.append(first)
    try:
        return ROUTES[route](obj, ctx)
    finally:
        check_deleters(factory)


def check_deleters(factory, collect=True):
    """Every capsule cai consumed (renamed used_...) has its deleter run exactly once, once the
    import has failed (or later, when the array goes); capsules it did not take are untouched."""
    if collect:
        gc.collect()
    consumed = [m for cap, m in factory.made if capsule_name(cap).startswith("used_")]
    deleted = list(factory.deleted)
    for m in consumed:
        assert deleted.count(ctypes.addressof(m)) <= 1, "deleter ran more than once"
    for cap, m in factory.made:
        if not capsule_name(cap).startswith("used_"):
            assert ctypes.addressof(m) not in deleted, "deleter of an unconsumed capsule ran"


def run_case(case, route):
    ctx = Ctx()
    kind = case["kind"]
    if kind == "cai":
        return run_cai(case, route, ctx)
    if kind == "attr":
        p = attr_producer(case, ctx)
        if route == "from_cuda_array_interface":
            return cai.from_cuda_array_interface(p.value)
        return ROUTES[route](p, ctx)
    if kind == "dlpack":
        return run_dlpack(case, route, ctx)
    if kind == "export":
        return run_export(case, ctx)
    if kind == "call":
        return run_call(case, ctx)
    raise ValueError(f"unknown kind {kind}")


def routes_of(case):
    return case.get("routes") or DEFAULT_ROUTES.get(case["kind"], [case["kind"]])


def params():
    out = []
    for case in CASES:
        for route in routes_of(case):
            marks = []
            if "bug" in case:
                marks.append(pytest.mark.xfail(strict=True, reason="BUG: " + case["bug"]))
            out.append(pytest.param(case, route, id=f"{case['id']}[{route}]", marks=marks))
    return out


def check_outcome(case, route):
    expected = EXCEPTIONS[case.get("raises_by_route", {}).get(route, case["raises"])]
    with pytest.raises(BaseException) as info:
        run_case(case, route)
    err = info.value
    assert type(err) is expected or (expected is not RuntimeError and isinstance(err, expected)), (
        f"{case['id']} via {route}: expected {expected.__name__}, got "
        f"{type(err).__name__}: {err}")
    msg = str(err)
    assert msg, f"{case['id']} via {route}: empty message"
    assert case["match"] in msg, f"{case['id']} via {route}: {case['match']!r} not in {msg!r}"


@pytest.mark.parametrize(("case", "route"), params())
def test_bad_input(case, route):
    if case.get("isolate"):
        code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
                f"import test_bad_inputs as t; t.check_isolated({case['id']!r}, {route!r})")
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60, env=os.environ | {"CAI_BACKEND": "sim"})
        assert r.returncode == 0, (f"{case['id']} via {route}: exit code {r.returncode}\n"
                                   f"{r.stdout[-2000:]}{r.stderr[-2000:]}")
        return
    check_outcome(case, route)


def check_isolated(case_id, route):
    case = next(c for c in CASES if c["id"] == case_id)
    check_outcome(case, route)


def test_corpus_size_and_shape():
    """At least 200 cases, unique ids, every one naming a known exception and a phrase."""
    assert len(CASES) >= 200
    ids = [c["id"] for c in CASES]
    assert len(ids) == len(set(ids)), "duplicate ids"
    for c in CASES:
        assert c["kind"] in ("cai", "attr", "dlpack", "export", "call"), c["id"]
        assert c["raises"] in EXCEPTIONS, c["id"]
        assert all(r in EXCEPTIONS for r in c.get("raises_by_route", {}).values()), c["id"]
        assert isinstance(c["match"], str) and len(c["match"]) >= 4, c["id"]
    kinds = {k: sum(c["kind"] == k for c in CASES) for k in ("cai", "attr", "dlpack", "export",
                                                           "call")}
    assert all(kinds.values()), kinds


# ----- producers that change their dict while cai reads it ------------------------------------
#
# A dict's values are borrowed while the binding reads it, and reading can run Python code
# (__index__ of a size, the mask's __cuda_array_interface__). Code that replaces a value frees it.
# Whatever cai then reports must come from what it read, never from freed memory. Each scenario
# runs in a subprocess: under ASan (scripts/sanitize.sh) a use-after-free aborts it. (All four
# were heap-use-after-free bugs in python/_cai/interface.cpp - the typestr string_view, read_dims'
# item array, read_data's borrowed flag - fixed by holding strong references.)

MUTATION_PRELUDE = """
import os, sys
os.environ.setdefault("CAI_BACKEND", "sim")
import numpy as np, cai
src = cai.to_device(np.zeros(6, dtype=np.float32))
mask_src = cai.to_device(np.ones(6, dtype=np.bool_))
def fresh(*parts):
    return "".join(parts)          # a new str object, owned by whoever stores it
class Hook:
    # __index__ runs `fn` then returns `value`
    def __init__(self, value, fn):
        self.value, self.fn = value, fn
    def __index__(self):
        self.fn()
        return self.value
def report(make):
    outcomes = []
    for _ in range(5):
        try:
            a = make()
            outcomes.append(("ok", a.dtype.str, a.shape, a.readonly))
        except Exception as e:
            outcomes.append((type(e).__name__, str(e)))
    print(repr(outcomes))
"""

MUTATIONS = {
    # The mask's property replaces the data's typestr (read before the mask) with an int.
    "typestr-freed-by-mask": """
def make():
    outer = dict(src.__cuda_array_interface__)
    outer["typestr"] = fresh("<", "f", "4")
    class Evil:
        @property
        def __cuda_array_interface__(self):
            outer["typestr"] = 12345
            Evil.junk = [fresh("|", "S", str(k % 10)) for k in range(50)]
            return mask_src.__cuda_array_interface__
    outer["mask"] = Evil()
    return cai.from_cuda_array_interface(outer, owner=src)
report(make)
""",
    # The version's __index__ replaces the typestr (read before the version).
    "typestr-freed-by-version-index": """
def make():
    outer = dict(src.__cuda_array_interface__)
    outer["typestr"] = fresh("<", "f", "4")
    def evil():
        outer["typestr"] = 12345
        evil.junk = [fresh("|", "b", "1") for k in range(50)]
    outer["version"] = Hook(3, evil)
    return cai.from_cuda_array_interface(outer, owner=src)
report(make)
""",
    # A shape list whose first size clears the list: the later sizes are read from freed items.
    "shape-list-cleared-by-index": """
def make():
    outer = dict(src.__cuda_array_interface__)
    shape = []
    def evil():
        shape.clear()
        evil.junk = [[fresh("a", "b"), fresh("c", "d")] for k in range(50)]
    shape.extend([Hook(2, evil), 3])
    outer["shape"] = shape
    return cai.from_cuda_array_interface(outer, owner=src)
report(make)
""",
    # A data list whose pointer replaces the read-only flag (borrowed before the pointer is read).
    "data-flag-freed-by-pointer-index": """
class Flag(int):
    pass
def make():
    outer = dict(src.__cuda_array_interface__)
    data = [None, Flag(1)]
    def evil():
        data[1] = True
        evil.junk = [fresh("x", str(k)) for k in range(50)]
    data[0] = Hook(src.ptr, evil)
    outer["data"] = data
    return cai.from_cuda_array_interface(outer, owner=src)
report(make)
""",
}

# What each scenario may legitimately give: the values cai read before the change, or a clean error.
MUTATION_OK = {
    "typestr-freed-by-mask": lambda o: o[0] == "ok" and o[1] == "<f4" or o[0] in (
        "TypeError", "ValueError") and "typestr" in o[1] and "12345" in o[1],
    "typestr-freed-by-version-index": lambda o: o[0] == "ok" and o[1] == "<f4" or o[0] in (
        "TypeError", "ValueError") and "typestr" in o[1] and "12345" in o[1],
    "shape-list-cleared-by-index": lambda o: o[0] == "ok" and o[2] in ((2, 3), (2,)) or o[0] in (
        "ValueError", "RuntimeError") and "shape" in o[1],
    "data-flag-freed-by-pointer-index": lambda o: o[0] == "ok" and o[3] is True,
}

@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_dict_changed_while_read(name):
    r = subprocess.run([sys.executable, "-c", MUTATION_PRELUDE + MUTATIONS[name]],
                       capture_output=True, text=True, timeout=60,
                       env=os.environ | {"CAI_BACKEND": "sim"})
    assert r.returncode == 0, f"exit code {r.returncode}: {r.stderr[-3000:]}"
    outcomes = eval(r.stdout.strip().splitlines()[-1])  # noqa: S307 (our own repr)
    for o in outcomes:
        assert MUTATION_OK[name](o), (name, o)

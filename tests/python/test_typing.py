"""Type information (docs/packaging.md, "Type information"): the stubs generated from cai._cai
and the annotated Python package, as installed, checked by mypy --strict; a typed program
passes and a program with mistakes is caught; every refinement in python/_cai/stubs.pat still
names the parameters the function really has."""

import ast
import inspect
import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

import cai
import extensions

PATTERNS = extensions.ROOT / "python" / "_cai" / "stubs.pat"
INSTALLED = pathlib.Path(cai.__file__).resolve().parent

GOOD = '''
"""Uses cai the way its stubs describe it."""
import numpy as np
import numpy.typing as npt

import cai


def double(x: cai.DeviceNDArray, stream: cai.Stream) -> cai.DeviceNDArray:
    out = cai.device_array_like(x, stream=stream)
    cai.ops.add(x, x, out, stream=stream)
    return out


s: cai.Stream = cai.stream(non_blocking=True)
a = cai.to_device(np.arange(12, dtype=np.float32), stream=s)
m: cai.DeviceNDArray = a.reshape(3, 4).T
shape: tuple[int, ...] = m.shape
host: npt.NDArray[np.float32] = double(m, s).copy_to_host()
pieces: list[cai.DeviceNDArray] = list(a.split(5))
sizes = [cai.device_array(np.int64(3)), cai.device_array(range(2, 4), strides=[24, 8]),
         cai.device_array(np.array([2, 2]), np.int16, order="F")]
first: float = float(a[0])
imported = cai.as_cuda_array(a, sync=True)
desc: dict[str, object] = imported.__cuda_array_interface__
with cai.trace_waits() as waits:
    cai.ops.fill(a.view(np.int32), 1)
lines: list[str] = waits.lines
cai.config.CUDA_ARRAY_INTERFACE_SYNC = True
tile: cai.Array = cai.Array(a).slice(0, 0, 4)
strides: tuple[int, ...] = tile.strides
stream_or_none: cai.Stream | None = a.stream
try:
    a.reshape(5, -1, order="F")
except ValueError as e:
    message: str = str(e)
except cai.DeviceError:
    pass
print(shape, host.shape, len(pieces), first, desc["shape"], lines, strides, stream_or_none, len(sizes))

# The protocols of cai.typing, the DLPack capsule type, indexing and iteration, Numba's names.
def total(x: cai.typing.DeviceArrayLike, s: cai.typing.StreamLike | None = None) -> float:
    out = cai.device_array(1, dtype=np.float32)
    cai.ops.copy(out, cai.as_cuda_array(x)[:1], stream=s)
    return float(np.from_dlpack(out, device="cpu", copy=True)[0])


view: cai.DeviceNDArray = m[1:, ::2]
rows: cai.DeviceNDArray = m[..., None]
element = m[0, 1]
items = [row for row in m]
with s.auto_synchronize() as same_stream:
    moved: cai.DeviceNDArray = cai.from_dlpack(a, device=cai.gpus[0], copy=False)
picked: cai.Device = cai.select_device(0)
found: bool = cai.detect()
info: dict[str, object] = cai.show_config(as_json=True)
mm: cai.ManagedNDArray = cai.managed_array((2, 3), dtype=np.float32)
mm_view: cai.ManagedNDArray = mm[1:]
mm_host: npt.NDArray[np.float32] = mm + 1
mm_dev: cai.DeviceNDArray = cai.as_cuda_array(mm_view)
mapped: cai.MappedNDArray = cai.mapped_array_like(mm)
print(total(a, s), total(a, 2), view.shape, rows.shape, element, len(items), moved.device,
      picked, found, same_stream, len(info), a.get_ipc_handle().device.id)
'''

BAD = '''
import cai

a = cai.to_device([1, 2, 3])
n: int = cai.as_cuda_array(a)
a.reshape(3, order="K")
s: cai.Stream = cai.default_stream().synchronize()
cai.config.EXPORT_STREAM = "no"
a.no_such_method()
b: cai.DeviceNDArray = next(a.split("2"))
cai.ops.add(1, 2, 3)
cai.Device("0")
a.copy_to_host(stream="s")
v: int = a[1:]
'''


def mypy(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
                           "--cache-dir", str(tmp_path / ".mypy_cache"), *args],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("typing")


def test_stubs_and_py_typed_are_installed_next_to_the_module():
    assert (INSTALLED / "py.typed").is_file()
    stub = (INSTALLED / "_cai" / "__init__.pyi").read_text()
    assert "def as_cuda_array(obj: DeviceArrayLike, sync: bool = True) -> DeviceNDArray:" in stub
    assert "-> CapsuleType:" in stub and "stream: object" not in stub
    assert "def reshape(self, *shape: int | Sequence[int], order: Literal['C', 'F', 'A'] = 'C')" \
        " -> DeviceNDArray:" in stub
    assert "class DeviceError(RuntimeError):" in stub
    for sub in ("ops", "sim", "core"):
        assert (INSTALLED / "_cai" / f"{sub}.pyi").is_file()


def test_the_installed_package_type_checks_strictly(workdir):
    r = mypy(workdir, "-p", "cai")
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_typed_program_passes_and_runs(workdir):
    (workdir / "good.py").write_text(GOOD)
    r = mypy(workdir, "good.py")
    assert r.returncode == 0, r.stdout + r.stderr
    run = subprocess.run([sys.executable, "good.py"], cwd=workdir, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr


def test_mistakes_are_caught(workdir):
    (workdir / "bad.py").write_text(BAD)
    r = mypy(workdir, "bad.py")
    assert r.returncode == 1, r.stdout + r.stderr
    errors = {int(m.group(1)): m.group(2) for m in re.finditer(r"bad\.py:(\d+): error: (.*)",
                                                                r.stdout)}
    expected = {
        5: '"DeviceNDArray", variable has type "int"',
        6: "reshape",                     # order='K' is not one of the literals
        7: '"None", variable has type "Stream"',  # synchronize() returns None
        8: 'has type "str", variable has type "bool"',
        9: '"DeviceNDArray" has no attribute "no_such_method"',
        10: '"split" of "DeviceNDArray" has incompatible type "str"',
        11: '"add" has incompatible type "int"; expected "CudaArrayInterface | DLPackArray"',
        12: '"Device" has incompatible type "str"',
        13: '"copy_to_host" of "DeviceNDArray" has incompatible type "str"',
        14: '"DeviceNDArray", variable has type "int"',
    }
    for line, fragment in expected.items():
        assert line in errors and fragment in errors[line], (line, fragment, r.stdout)


def _params(sig: str, name: str):
    """(name, kind, default) of each parameter of a `def ...` line; nanobind's default
    placeholders \\0, \\1, ... are kept as such."""
    sig = re.sub(r"^def\s*\(", f"def {name}(", sig.strip())
    sig = re.sub(r"\\(\d+)", r"__default_\1", sig)
    fn = ast.parse(textwrap.dedent(sig).rstrip(": .") + ": ...").body[0]
    a = fn.args
    out = []
    positional = a.posonlyargs + a.args
    defaults = [None] * (len(positional) - len(a.defaults)) + list(a.defaults)
    for p, d in zip(positional, defaults):
        out.append((p.arg, "positional", d))
    if a.vararg:
        out.append((a.vararg.arg, "*", None))
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append((p.arg, "keyword", d))
    return out


def _default_value(node, runtime_defaults):
    if node is None:
        return None
    if isinstance(node, ast.Name) and node.id.startswith("__default_"):
        value = runtime_defaults[int(node.id.rsplit("_", 1)[1])]
        return value.__name__ if isinstance(value, type) else value
    if isinstance(node, ast.Name):
        return node.id
    return ast.literal_eval(node)


def pattern_entries():
    text = PATTERNS.read_text()
    for m in re.finditer(r"^\^(\S+)\$:\n((?:[ \t]+.*\n|\n)+)", text, re.M):
        query, body = m.group(1), m.group(2)
        d = re.search(r"^\s*def (\w+)\((.*)$", body, re.M)
        if d:
            yield pytest.param(query.replace("\\.", "."), d.group(0).strip(), id=query)


def stale_entry(qualified, stub_def):
    """What differs between a stubs.pat entry and the runtime signature, or None."""
    parts = qualified.split(".")
    obj = sys.modules["cai._cai"]
    for part in parts[2:]:
        obj = getattr(obj, part) if not isinstance(obj, type) else obj.__dict__[part]
    if isinstance(obj, property):
        obj = obj.fget
    if hasattr(obj, "__nb_signature__"):
        runtime_sig, _, runtime_defaults = obj.__nb_signature__[0]
    else:  # a C method written by hand (DeviceNDArray.__dlpack__): its __text_signature__
        runtime_sig, runtime_defaults = f"def {parts[-1]}{inspect.signature(obj)}:", None
    name = parts[-1]
    runtime = [(n, k, _default_value(d, runtime_defaults))
               for n, k, d in _params(runtime_sig, name)]
    stub = [(n, k, _default_value(d, None)) for n, k, d in _params(stub_def, name)]
    return None if stub == runtime else f"stub: {stub}\nruntime: {runtime}"


@pytest.mark.parametrize("qualified, stub_def", list(pattern_entries()))
def test_pattern_entries_match_the_runtime_signatures(qualified, stub_def):
    stale = stale_entry(qualified, stub_def)
    assert stale is None, f"python/_cai/stubs.pat entry for {qualified} is stale:\n{stale}"


def test_a_stale_pattern_entry_is_detected():
    assert len(list(pattern_entries())) >= 20
    good = "def as_cuda_array(obj: object, sync: bool = True) -> DeviceNDArray:"
    assert stale_entry("cai._cai.as_cuda_array", good) is None
    for stale in ("def as_cuda_array(obj: object, synchronize: bool = True) -> DeviceNDArray:",
                  "def as_cuda_array(obj: object, sync: bool = False) -> DeviceNDArray:",
                  "def as_cuda_array(obj: object, *, sync: bool = True) -> DeviceNDArray:",
                  "def as_cuda_array(obj: object) -> DeviceNDArray:"):
        assert stale_entry("cai._cai.as_cuda_array", stale) is not None, stale


# ----- the stubs of an extension module built on cai::nb::array (docs/cpp.md) ------------------

USES_EXTENSION = '''
import numpy as np
import numpy.typing as npt

import cai
import _add_ext


class Foreign:
    """Any library's GPU array: the CUDA Array Interface is all it needs."""

    def __init__(self, arr: cai.DeviceNDArray) -> None:
        self.arr = arr

    @property
    def __cuda_array_interface__(self) -> dict[str, object]:
        return self.arr.__cuda_array_interface__


def doubled(x: cai.DeviceNDArray, s: cai.Stream) -> npt.NDArray[np.generic]:
    out = cai.device_array_like(x)
    _add_ext.add(x, Foreign(x), out, stream=s)
    _add_ext.add(x, x, out, s.handle)
    _add_ext.add(x, x, out)
    return np.from_dlpack(out, device="cpu", copy=True)


print(doubled(cai.to_device(np.arange(4, dtype=np.float32)), cai.stream()))
'''

EXTENSION_MISTAKES = '''
import cai
import _add_ext

_add_ext.add(1.0, 2.0, 3.0)
_add_ext.add(cai.device_array(2), cai.device_array(2), cai.device_array(2), stream="s")
'''


@pytest.fixture(scope="module")
def add_extension_stub(tmp_path_factory):
    """examples/add_extension built from the installed package, and its stub as nanobind's
    stubgen writes it."""
    if shutil.which("cmake") is None or shutil.which("ninja") is None:
        pytest.skip("needs cmake and ninja")
    build = tmp_path_factory.mktemp("add_extension")
    cmake_dir = subprocess.run([sys.executable, "-m", "cai", "--cmake-dir"], check=True,
                               capture_output=True, text=True).stdout.strip()
    for command in (["cmake", "-S", str(extensions.ROOT / "examples" / "add_extension"), "-B",
                     str(build), "-G", "Ninja", f"-Dcai_DIR={cmake_dir}",
                     f"-DPython_EXECUTABLE={sys.executable}"],
                    ["cmake", "--build", str(build), "-j", "2"],
                    [sys.executable, "-m", "nanobind.stubgen", "-m", "_add_ext", "-o",
                     str(build / "_add_ext.pyi")]):
        r = subprocess.run(command, capture_output=True, text=True, cwd=build, timeout=600,
                           env={**os.environ, "PYTHONPATH": str(build)})
        assert r.returncode == 0, r.stdout + r.stderr
    return build / "_add_ext.pyi"


def test_extension_stubs_are_valid_python(add_extension_stub):
    text = add_extension_stub.read_text()
    ast.parse(text)  # nanobind's own cai.array[float32, ndim=1] was a syntax error
    assert 'a: cai.array[Literal["float32, ndim=1"]]' in text
    assert 'out: cai.array[Literal["float64, ndim=1, writable"]]' in text
    assert "stream: cai.typing.StreamLike | None = None" in text  # once "| None | None"


def test_extension_stubs_type_check(add_extension_stub, tmp_path):
    shutil.copy(add_extension_stub, tmp_path / "_add_ext.pyi")
    (tmp_path / "uses.py").write_text(USES_EXTENSION)
    r = mypy(tmp_path, "uses.py", "_add_ext.pyi")
    assert r.returncode == 0, r.stdout + r.stderr
    run = subprocess.run([sys.executable, "uses.py"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env={
                             **os.environ, "CAI_BACKEND": "sim",
                             "PYTHONPATH": str(add_extension_stub.parent)})
    assert run.returncode == 0 and run.stdout.strip() == "[0. 2. 4. 6.]", run.stderr
    (tmp_path / "mistakes.py").write_text(EXTENSION_MISTAKES)
    r = mypy(tmp_path, "mistakes.py")
    errors = re.findall(r"mistakes\.py:(\d+): error: (.*)", r.stdout)
    assert [line for line, _ in errors] == ["5", "6"], r.stdout
    assert 'No overload variant of "add" matches argument types "float", "float", "float"' \
        in errors[0][1]
    assert '"str"' in errors[1][1], r.stdout

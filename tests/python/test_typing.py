"""Type information (docs/packaging.md, "Type information"): the stubs generated from cai._cai
and the annotated Python package, as installed, checked by mypy --strict; a typed program
passes and a program with mistakes is caught; every refinement in python/_cai/stubs.pat still
names the parameters the function really has."""

import ast
import pathlib
import re
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
    assert "def as_cuda_array(obj: object, sync: bool = True) -> DeviceNDArray:" in stub
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
    runtime_sig, _, runtime_defaults = obj.__nb_signature__[0]
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

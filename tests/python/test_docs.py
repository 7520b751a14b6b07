"""Documentation that runs (docs/packaging.md, "Documentation that runs"): every fenced code block
of README.md and docs/*.md, files added later included, is classified by its info string and
checked accordingly:

  python        run as written, in a fresh interpreter, on the simulator (CAI_BACKEND=sim, and
                no CAI_SIM_DEVICES: a block that needs two devices sets it itself, as a
                reader's run would need); it must exit with status 0 and
                print no traceback (a child process's included). A block whose first line
                is `# run: mpiexec -n 2` runs under .venv's mpiexec with two ranks
  python gpu    needs a GPU (and the libraries it imports): never run here, but compiled, its
                cai names looked up, and the literal dtypes of the arrays given to one
                cai.ops call compared
  sh run        run with bash -e from the repository root, on the simulator
  sh gpu, sh network, sh long, sh example
                not run, because they need a GPU, the network, minutes (builds, benchmarks,
                the whole suite) or a program of the reader's: parsed by `bash -n`. A plain
                `sh` block is refused: every shell block is run or says why not. Every shell
                block names the interpreter it runs Python with (.venv/bin/python)
  c, cpp, cuda  compiled by test_cpp_package.py (every C/C++/CUDA block of these files)
  cmake, text, and blocks without an info string: output and listings, not run

A block with any other info string fails, so that a new kind of block gets a rule here.
Every python block also passes mypy --strict.
"""

import ast
import os
import pathlib
import re
import subprocess
import sys

import pytest

import extensions

ROOT = extensions.ROOT
# Shell blocks are run (`sh run`) or say why not: they need a GPU, the network, minutes (builds,
# benchmarks, the whole suite) or a program of the reader's; those are checked statically.
SH_MARKED = {"sh gpu", "sh network", "sh long", "sh example"}
KINDS = {"python", "python gpu", "sh run", *SH_MARKED, "c", "cpp", "cuda", "cmake", "text", ""}
FENCE = re.compile(r"^(`{3,}|~{3,})(.*)$")
MPI_LINE = "# run: mpiexec -n 2\n"


def doc_files():
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def blocks(path):
    """(line number, info string, code) of each fenced block of a Markdown file."""
    lines = path.read_text().splitlines(keepends=True)
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            fence, info, start = m.group(1), m.group(2).strip(), i + 1
            i += 1
            while i < len(lines) and not lines[i].startswith(fence):
                i += 1
            yield start, info, "".join(lines[start:i])
        i += 1


def all_blocks(kinds):
    for path in doc_files():
        for line, info, code in blocks(path):
            if info in kinds:
                rel = path.relative_to(ROOT)
                yield pytest.param(code, id=f"{rel}:{line}")


def run_env():
    env = dict(os.environ, CAI_BACKEND="sim")
    env.pop("CAI_SIM_DEVICES", None)  # blocks that need two devices say so themselves
    env["PATH"] = f"{pathlib.Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return env


def test_every_block_has_a_known_kind():
    unknown = [f"{p.relative_to(ROOT)}:{line}: ```{info}"
               for p in doc_files() for line, info, _ in blocks(p) if info not in KINDS]
    assert unknown == [], "blocks whose kind has no rule in tests/python/test_docs.py"


@pytest.mark.parametrize("code", list(all_blocks({"python"})))
def test_python_blocks_run_on_the_simulator(code, tmp_path):
    script = tmp_path / "block.py"
    script.write_text(code)
    command = [sys.executable, str(script)]
    if code.startswith(MPI_LINE):
        command = [str(pathlib.Path(sys.executable).parent / "mpiexec"), "-n", "2", *command]
    r = subprocess.run(command, cwd=tmp_path, env=run_env(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{code}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"
    assert "Traceback" not in r.stderr, f"{code}\n--- stderr\n{r.stderr}"


# ----- every python block type-checks ---------------------------------------------------------

def mypy_blocks(codes, workdir):
    """mypy --strict over blocks, each a module of its own. Dask and distributed ship their
    functions unannotated: calling them is not an error of the block."""
    for i, code in enumerate(codes):
        (workdir / f"block_{i}.py").write_text(code)
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary",
         "--untyped-calls-exclude=dask", "--untyped-calls-exclude=distributed",
         "--cache-dir", str(workdir / ".mypy_cache"),
         *[f"block_{i}.py" for i in range(len(codes))]],
        capture_output=True, text=True, cwd=workdir, timeout=600)


def test_python_blocks_type_check_strictly(tmp_path):
    params = list(all_blocks({"python"}))
    r = mypy_blocks([p.values[0] for p in params], tmp_path)
    where = {f"block_{i}.py": p.id for i, p in enumerate(params)}
    report = re.sub(r"block_\d+\.py", lambda m: where[m.group(0)], r.stdout)
    assert r.returncode == 0, report + r.stderr


def test_a_block_with_a_type_error_is_caught(tmp_path):
    r = mypy_blocks(["import cai\n\ncai.ops.add(1, 2, 3)\n"], tmp_path)
    assert r.returncode == 1 and 'incompatible type "int"' in r.stdout, r.stdout


# ----- python gpu blocks: checked without running -------------------------------------------

# Element types of array constructors when no dtype= is given: NumPy's and CuPy's defaults,
# and PyTorch's (torch.get_default_dtype() is float32).
DEFAULTS = {"numpy": ("int64", "float64"), "np": ("int64", "float64"),
            "cupy": ("int64", "float64"), "cp": ("int64", "float64"),
            "torch": ("int64", "float32"), "jnp": ("int32", "float32")}
CONSTRUCTORS = {"arange", "zeros", "ones", "empty", "full", "asarray", "array", "tensor"}
SAME_DTYPE = {"add", "copy"}  # cai.ops functions whose arrays must share one dtype


def literal_dtype(node, names):
    """The element type of an expression when the block says it literally, else None."""
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return None
    func, owner = node.func.attr, node.func.value
    if isinstance(owner, ast.Name) and owner.id == "cai" and func in (
            "as_cuda_array", "from_dlpack", "to_device", "device_array_like") and node.args:
        return literal_dtype(node.args[0], names)
    if not (isinstance(owner, ast.Name) and owner.id in DEFAULTS and func in CONSTRUCTORS):
        return None
    for kw in node.keywords:
        if kw.arg == "dtype":
            if isinstance(kw.value, ast.Attribute):
                return kw.value.attr
            if isinstance(kw.value, ast.Constant):
                return str(kw.value.value)
            return None
    values = [a for a in node.args if isinstance(a, ast.Constant)]
    if func == "arange" and values and all(isinstance(v.value, int) for v in values):
        return DEFAULTS[owner.id][0]
    if func in ("arange", "zeros", "ones", "empty"):
        return DEFAULTS[owner.id][1]
    return None


def gpu_block_problems(code):
    """What is wrong in a block that cannot run here: names that cai does not have, and
    arrays of different literal dtypes given to one cai.ops call."""
    import cai

    tree = ast.parse(code)
    problems, names = [], {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = [node.attr]
            value = node.value
            while isinstance(value, ast.Attribute):
                chain.insert(0, value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id == "cai":
                obj = cai
                for part in chain:
                    if not hasattr(obj, part):
                        problems.append(f"line {node.lineno}: cai.{'.'.join(chain)} does not exist")
                        break
                    obj = getattr(obj, part)
    for stmt in tree.body:  # in order: names get the dtype of what they were assigned
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and \
                isinstance(stmt.targets[0], ast.Name):
            names[stmt.targets[0].id] = literal_dtype(stmt.value, names)
        for call in ast.walk(stmt):
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and \
                    call.func.attr in SAME_DTYPE and ast.unparse(call.func.value) == "cai.ops":
                dtypes = {ast.unparse(a): literal_dtype(a, names) for a in call.args}
                if len({d for d in dtypes.values() if d}) > 1:
                    problems.append(f"line {call.lineno}: cai.ops.{call.func.attr} takes one "
                                    f"dtype, got {dtypes}")
    return problems


@pytest.mark.parametrize("code", list(all_blocks({"python gpu"})))
def test_gpu_python_blocks_are_right_without_a_gpu(code):
    compile(code, "<doc block>", "exec")
    assert gpu_block_problems(code) == []


def test_gpu_block_mistakes_are_caught():
    mixed = ("import cupy, torch, cai\nx = cai.as_cuda_array(cupy.arange(6.0))\n"
             "y = cai.from_dlpack(torch.arange(6.0, device='cuda'))\ncai.ops.add(x, y, x)\n")
    (problem,) = gpu_block_problems(mixed)
    assert "cai.ops.add takes one dtype" in problem and "float64" in problem \
        and "float32" in problem
    assert gpu_block_problems(mixed.replace("6.0", "6")) == []  # int64 both
    assert gpu_block_problems("import cai\ncai.no_such(1)\ncai.ops.scale(1)\n") == [
        "line 2: cai.no_such does not exist", "line 3: cai.ops.scale does not exist"]
    explicit = ("import cupy, torch, cai\ncai.ops.copy(cai.as_cuda_array(cupy.zeros(3, "
                "dtype=cupy.float32)), torch.ones(3, dtype=torch.float64))\n")
    assert len(gpu_block_problems(explicit)) == 1


@pytest.mark.parametrize("code", list(all_blocks({"sh run"})))
def test_marked_shell_blocks_run(code):
    r = subprocess.run(["bash", "-e", "-c", code], cwd=ROOT, env=run_env(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{code}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"


# A command word `python`/`python3` that is not a path: which interpreter runs depends on the
# reader's PATH, so a block would run another Python than the one cai is installed in.
BARE_PYTHON = re.compile(r"(?:^|[\s;|&(`]|\$\()(python3?)\b(?![-.\w/])")


def test_shell_blocks_name_their_interpreter():
    bare = []
    for path in doc_files():
        for line, info, code in blocks(path):
            if info not in SH_MARKED | {"sh run"}:
                continue
            for i, text in enumerate(code.splitlines()):
                command = text.split("#", 1)[0]
                if BARE_PYTHON.search(command):
                    bare.append(f"{path.relative_to(ROOT)}:{line + i + 1}: {text.strip()}")
    assert bare == [], "shell lines that run `python` without saying which (.venv/bin/python)"
    assert BARE_PYTHON.search("x=$(python -m cai --cmake-dir)")
    assert not BARE_PYTHON.search(".venv/bin/python -m cai; python-config --help")


@pytest.mark.parametrize("code", list(all_blocks(SH_MARKED)))
def test_shell_blocks_that_do_not_run_here_parse(code):
    r = subprocess.run(["bash", "-n", "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"{code}\n--- bash -n\n{r.stderr}"


def test_collector_classifies_blocks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n```python\nprint(1)\n```\n\n````sh run\necho '```'\n````\n"
                    "```python gpu\nimport cupy\n```\n")
    assert list(blocks(page)) == [(3, "python", "print(1)\n"), (7, "sh run", "echo '```'\n"),
                                  (10, "python gpu", "import cupy\n")]


def test_readme_first_screen():
    """What cai is for, how to install it, a Python and a C++ snippet, and the two commands,
    before the first screenful of the README ends."""
    text = (ROOT / "README.md").read_text()
    first = "\n".join(text.splitlines()[:80])
    assert "scripts/setup.sh && .venv/bin/python -m cai demo" in first
    assert "scripts/test.sh" in first
    assert "pip install cai-interop" in first
    infos = [info for _, info, _ in blocks(ROOT / "README.md")]
    assert "python" in infos[:4] and "cpp" in infos[:5]

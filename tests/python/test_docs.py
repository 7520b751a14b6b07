"""Documentation that runs (docs/packaging.md, "Documentation that runs"): every fenced code block
of README.md and docs/*.md, files added later included, is classified by its info string and
checked accordingly:

  python        run as written, in a fresh interpreter, on the simulator with two simulated
                devices (CAI_BACKEND=sim CAI_SIM_DEVICES=2); it must exit with status 0 and
                print no traceback (a child process's included). A block whose first line
                is `# run: mpiexec -n 2` runs under .venv's mpiexec with two ranks
  python gpu    needs a GPU (and the libraries it imports): compiled only, never run here
  sh run        run with bash -e from the repository root, on the simulator
  sh            shown, not run (builds, long benchmarks, GPU machines)
  c, cpp, cuda  compiled by test_cpp_package.py (every C/C++/CUDA block of these files)
  cmake, text, and blocks without an info string: output and listings, not run

A block with any other info string fails, so that a new kind of block gets a rule here.
"""

import os
import pathlib
import re
import subprocess
import sys

import pytest

import extensions

ROOT = extensions.ROOT
KINDS = {"python", "python gpu", "sh run", "sh", "c", "cpp", "cuda", "cmake", "text", ""}
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
    env = dict(os.environ, CAI_BACKEND="sim", CAI_SIM_DEVICES="2")
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


@pytest.mark.parametrize("code", list(all_blocks({"python gpu"})))
def test_gpu_python_blocks_compile(code):
    compile(code, "<doc block>", "exec")


@pytest.mark.parametrize("code", list(all_blocks({"sh run"})))
def test_marked_shell_blocks_run(code):
    r = subprocess.run(["bash", "-e", "-c", code], cwd=ROOT, env=run_env(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"{code}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"


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

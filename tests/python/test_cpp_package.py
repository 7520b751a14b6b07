"""The C++ package inside the installed `cai` package: the C API header is plain C, the
extension headers stand alone and pull in nothing that needs a cai library, and every C, C++
and CUDA block of README.md and docs/*.md compiles as written (CUDA ones where nvcc is)."""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import sysconfig

import pytest

import extensions

# Every page, pages added later included (tests/python/test_docs.py runs the Python blocks).
DOCS = [extensions.ROOT / "README.md", *sorted((extensions.ROOT / "docs").glob("*.md"))]
NVCC = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc"
                                if pathlib.Path("/usr/local/cuda/bin/nvcc").exists() else None)


def installed_include():
    out = subprocess.run([sys.executable, "-m", "cai", "--include-dir"], check=True,
                         capture_output=True, text=True).stdout.strip()
    return pathlib.Path(out)


def include_flags():
    nanobind = subprocess.run([sys.executable, "-m", "nanobind", "--include_dir"], check=True,
                              capture_output=True, text=True).stdout.strip()
    return [f"-I{installed_include()}", f"-I{nanobind}", f"-I{sysconfig.get_paths()['include']}"]


def compile_source(tmp_path, name, text, language):
    src = tmp_path / name
    src.write_text(text)
    if language == "c":
        cmd = ["gcc", "-x", "c", "-std=c11", "-Wall", "-Werror", "-fsyntax-only"]
    elif language == "cpp":
        cmd = ["g++", "-x", "c++", "-std=c++20", "-Wall", "-Werror", "-fsyntax-only"]
    else:
        if NVCC is None:
            pytest.skip("no nvcc")
        cmd = [NVCC, "-x", "cu", "-std=c++20", "-c", "-o", str(tmp_path / "out.o")]
    # Compilers run without a preloaded sanitizer runtime (scripts/sanitize.sh preloads ASan
    # into this process and its children; nvcc crashes under it).
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    r = subprocess.run(cmd + include_flags() + [str(src)], capture_output=True, text=True,
                       env=env)
    assert r.returncode == 0, f"{name} ({language}):\n{text}\n{r.stdout}{r.stderr}"


def doc_blocks():
    for doc in DOCS:
        for i, m in enumerate(re.finditer(r"^```(c|cpp|cuda)\n(.*?)^```", doc.read_text(),
                                          re.M | re.S)):
            yield pytest.param(m.group(1), m.group(2), id=f"{doc.name}-{i}-{m.group(1)}")


@pytest.mark.parametrize("language, code", list(doc_blocks()))
def test_doc_blocks_compile(tmp_path, language, code):
    compile_source(tmp_path, "block." + {"c": "c", "cpp": "cpp", "cuda": "cu"}[language], code,
                   language)


def test_capi_header_is_plain_c(tmp_path):
    compile_source(tmp_path, "capi.c", "#include <cai/capi.h>\n"
                   "const CaiCApi* get(void) { return cai_capi_import(); }\n", "c")


@pytest.mark.parametrize("header", ["cai/capi.h", "cai/nanobind/api.h", "cai/nanobind/array.h",
                                    "cai/nanobind/for_each.h", "cai/arrays/array_ref.h"])
def test_extension_headers_stand_alone_and_need_no_library(tmp_path, header):
    compile_source(tmp_path, "alone.cpp", f"#include <{header}>\n", "cpp")
    deps = subprocess.run(["g++", "-std=c++20", "-M", *include_flags(), "-x", "c++", "-"],
                          input=f"#include <{header}>\n", capture_output=True, text=True,
                          check=True).stdout
    # Views, streams, backends and DType are compiled code of the cai libraries, which an
    # extension module does not link.
    for compiled in ("cai/arrays/view.h", "cai/sync/ordering.h", "cai/device/backend.h",
                     "cai/core/dtype.h"):
        assert compiled not in deps, f"{header} includes {compiled}"

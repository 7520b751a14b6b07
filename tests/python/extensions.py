"""The extension modules the tests build separately (scripts/test.sh builds them through the
installed package, as a user would): where each one is, and how a test module imports one or
skips. Importable as `extensions` (pytest's rootdir-relative sys.path entry)."""

import importlib
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# module name -> (build directory, what builds it)
BUILDS = {
    "_caster_probe": (ROOT / "build" / "ext", "tests/ext"),
    "_cai_probes": (ROOT / "build" / "ext", "tests/ext"),
    "_caster_probe_clang": (ROOT / "build" / "ext-clang", "tests/ext with clang++"),
    "_add_ext": (ROOT / "build" / "add_extension", "examples/add_extension"),
}


def directory(name):
    return BUILDS[name][0]


def is_built(name):
    return any(directory(name).glob(f"{name}.*.so"))


def load(name):
    """Imports the module, or skips the calling test (or test module) when it is not built."""
    where, what = BUILDS[name]
    if not is_built(name):
        pytest.skip(f"{what} is not built in {where} (scripts/test.sh builds it)",
                    allow_module_level=True)
    if str(where) not in sys.path:
        sys.path.insert(0, str(where))
    return importlib.import_module(name)

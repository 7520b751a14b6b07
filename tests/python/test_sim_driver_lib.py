"""How users turn on the simulated driver as the process's libcuda.so.1 (docs/simulator.md,
"As libcuda.so.1"): `python -m cai --sim-driver-dir` prints the folder of
`cai.sim.driver_path()`, the library there is named libcuda.so.1 (file and SONAME), a fresh
process finds it through LD_LIBRARY_PATH as it would find NVIDIA's driver, and a missing library
is an error that says where cai looked and how to point it at one."""

import os
import pathlib
import struct
import subprocess
import sys

import pytest

import cai
from helpers import isolated_env, run_isolated

DT_NULL, DT_STRTAB, DT_SONAME = 0, 5, 14
SHT_DYNAMIC = 6


def run_main(*args, env=None):
    return subprocess.run([sys.executable, "-m", "cai", *args], capture_output=True, text=True,
                          timeout=60, env=isolated_env(env))


def elf_soname(path):
    """DT_SONAME of a 64-bit little-endian ELF file (None when it has none): the .dynamic
    section's entries, the name read from the string table its sh_link names."""
    data = pathlib.Path(path).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        pytest.skip(f"{path} is not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
                for i in range(shnum)]
    for _, sh_type, _, _, offset, size, link, _, _, entsize in sections:
        if sh_type != SHT_DYNAMIC:
            continue
        strtab_offset = sections[link][4]
        for pos in range(offset, offset + size, entsize or 16):
            tag, value = struct.unpack_from("<qQ", data, pos)
            if tag == DT_NULL:
                break
            if tag == DT_SONAME:
                end = data.index(b"\0", strtab_offset + value)
                return data[strtab_offset + value:end].decode()
    return None


@pytest.fixture(scope="module")
def driver():
    path = pathlib.Path(cai.sim.driver_path())
    assert path.is_absolute() and path.name == "libcuda.so.1", path
    assert path.is_file(), path
    return path


def test_sim_driver_dir_prints_the_folder_of_driver_path(driver):
    r = run_main("--sim-driver-dir")
    assert r.returncode == 0, r.stderr
    folder = pathlib.Path(r.stdout.strip())
    assert r.stdout == f"{folder}\n"  # one line, ready for LD_LIBRARY_PATH=$(...)
    assert folder == driver.parent
    assert (folder / "libcuda.so.1").is_file()


def test_the_library_is_named_libcuda_so_1_by_its_soname(driver):
    assert elf_soname(driver) == "libcuda.so.1"


def test_the_soname_reader_reads_a_known_library():
    # The reader is this test's own code: it must find the SONAME of a library whose name is
    # known (the extension has none; the C library has libc.so.6), so a wrong reader fails here.
    libc = next((pathlib.Path(p) for p in ("/lib/x86_64-linux-gnu/libc.so.6",
                                             "/usr/lib/x86_64-linux-gnu/libc.so.6",
                                             "/lib64/libc.so.6") if os.path.isfile(p)), None)
    if libc is None:
        pytest.skip("no libc.so.6 at a known place")
    assert elf_soname(libc) == "libc.so.6"


def test_a_fresh_process_loads_it_through_ld_library_path(driver):
    # What numba-cuda and cuda-bindings do: dlopen("libcuda.so.1") by name. cai is not imported.
    code = """
        import ctypes, os
        lib = ctypes.CDLL("libcuda.so.1")
        for name in ("cuGetProcAddress_v2", "cuInit", "caiSimGetErrorDetail"):
            assert hasattr(lib, name), name
        lib.cuInit.argtypes = [ctypes.c_uint]
        print(lib.cuInit(0))
        with open("/proc/self/maps") as f:
            print(sorted({line.split()[-1] for line in f if "libcuda.so" in line}))
    """
    r = run_isolated(code, env={"LD_LIBRARY_PATH": str(driver.parent)})
    assert r.returncode == 0, r.stderr
    status, mapped = r.stdout.splitlines()
    assert status == "0"  # CUDA_SUCCESS
    assert mapped == repr([str(driver.resolve())])


def test_without_the_folder_on_the_path_it_is_not_found(driver, tmp_path):
    # The control of the test above: an empty folder on LD_LIBRARY_PATH does not provide it
    # (skipped where the machine has a driver of its own that the loader finds anyway).
    code = """
        import ctypes
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError:
            print("missing")
        else:
            print("sim" if hasattr(lib, "caiSimGetErrorDetail") else "other")
    """
    r = run_isolated(code, env={"LD_LIBRARY_PATH": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    if r.stdout.strip() == "other":
        pytest.skip("this machine has a libcuda.so.1 of its own")
    assert r.stdout.strip() == "missing"


def test_a_missing_library_is_an_error_naming_where_cai_looked(tmp_path):
    missing = tmp_path / "libcuda.so.1"  # an empty folder
    env = {"CAI_SIM_DRIVER": str(missing)}
    r = run_main("--sim-driver-dir", env=env)
    assert r.returncode == 1
    assert r.stdout == ""
    assert "simulated driver (libcuda.so.1) not found" in r.stderr, r.stderr
    assert f"tried {missing} (CAI_SIM_DRIVER)" in r.stderr, r.stderr
    assert "set CAI_SIM_DRIVER to its path" in r.stderr, r.stderr

    code = """
        import cai
        try:
            cai.sim.driver_path()
        except RuntimeError as e:
            print(type(e).__name__, e)
        else:
            print("no error")
    """
    r = run_isolated(code, env=env)
    assert r.returncode == 0, r.stderr
    assert f"not found (tried {missing} (CAI_SIM_DRIVER))" in r.stdout, r.stdout


def test_cai_sim_driver_names_the_library_used(driver, tmp_path):
    # CAI_SIM_DRIVER is obeyed, not just read for the error: a copy elsewhere is the one named.
    copy = tmp_path / "libcuda.so.1"
    copy.write_bytes(driver.read_bytes())
    r = run_main("--sim-driver-dir", env={"CAI_SIM_DRIVER": str(copy)})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(tmp_path)

"""The simulated driver as a library (docs/simulator.md, "As libcuda.so.1"): where
`python -m cai --sim-driver-dir` and `cai.sim.driver_path()` say it is, it is a libcuda.so.1
that a process finds through LD_LIBRARY_PATH, as it finds NVIDIA's."""

import os
import pathlib
import struct
import subprocess
import sys
import textwrap

import pytest

import cai

if not sys.platform.startswith("linux"):
    pytest.skip("the simulated driver library is built on Linux only", allow_module_level=True)


def sim_driver_dir(**env):
    return subprocess.run([sys.executable, "-m", "cai", "--sim-driver-dir"], capture_output=True,
                          text=True, env={**os.environ, **env})


def elf_soname(path):
    """DT_SONAME of a 64-bit little-endian ELF shared library, read from its section table."""
    data = pathlib.Path(path).read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, "not a 64-bit LE ELF file"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
                for i in range(shnum)]
    for _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if kind != 6:  # SHT_DYNAMIC
            continue
        strtab_offset = sections[link][4]
        for at in range(offset, offset + size, entsize):
            tag, value = struct.unpack_from("<qQ", data, at)
            if tag == 14:  # DT_SONAME
                end = data.index(b"\0", strtab_offset + value)
                return data[strtab_offset + value:end].decode()
    return None


def test_sim_driver_dir_is_the_folder_of_driver_path():
    r = sim_driver_dir()
    assert r.returncode == 0, r.stderr
    folder = pathlib.Path(r.stdout.strip())
    path = pathlib.Path(cai.sim.driver_path())
    assert path.name == "libcuda.so.1" and path.parent == folder
    # Alone in its folder: LD_LIBRARY_PATH=<folder> brings nothing else.
    assert sorted(p.name for p in folder.iterdir()) == ["libcuda.so.1"]


def test_the_library_is_named_as_the_driver():
    assert elf_soname(cai.sim.driver_path()) == "libcuda.so.1"


def test_a_process_finds_it_through_ld_library_path():
    """No cai in the process: ctypes opens "libcuda.so.1" as numba-cuda and cuda-bindings do."""
    folder = str(pathlib.Path(cai.sim.driver_path()).parent)
    code = textwrap.dedent("""
        import ctypes, os
        lib = ctypes.CDLL("libcuda.so.1")
        maps = open("/proc/self/maps").read()
        print([l.split()[-1] for l in maps.splitlines() if l.endswith("/libcuda.so.1")][0])
        assert lib.cuInit(0) == 0
        version = ctypes.c_int()
        assert lib.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value >= 12000
        fn, status = ctypes.c_void_p(), ctypes.c_int()
        assert lib.cuGetProcAddress_v2(b"cuMemAlloc", ctypes.byref(fn), 12000, 0,
                                       ctypes.byref(status)) == 0 and fn.value
        assert hasattr(lib, "caiSimGetErrorDetail")
        """)
    env = {k: v for k, v in os.environ.items() if k != "CAI_SIM_DRIVER"}
    env["LD_LIBRARY_PATH"] = folder
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    loaded = pathlib.Path(r.stdout.strip())
    assert loaded.resolve() == pathlib.Path(cai.sim.driver_path()).resolve()


def test_a_missing_driver_is_named_with_the_places_tried(tmp_path, monkeypatch):
    missing = tmp_path / "libcuda.so.1"
    r = sim_driver_dir(CAI_SIM_DRIVER=str(missing))
    assert r.returncode == 1 and r.stdout == ""
    assert "simulated driver (libcuda.so.1) not found" in r.stderr
    assert f"{missing} (CAI_SIM_DRIVER)" in r.stderr and "set CAI_SIM_DRIVER" in r.stderr
    monkeypatch.setenv("CAI_SIM_DRIVER", str(missing))
    with pytest.raises(cai.DeviceError, match=r"not found \(tried .*libcuda.so.1 \(CAI_SIM_DRIVER\)"):
        cai.sim.driver_path()


def test_the_soname_reader_reads_a_known_library():
    # elf_soname is this file's own code: it must read the SONAME of a library whose name is
    # known, so a reader that returns the wrong string fails here, not only by chance above.
    places = ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6",
              "/lib64/libc.so.6")
    libc = next((p for p in places if os.path.isfile(p)), None)
    if libc is None:
        pytest.skip("no libc.so.6 at a known place")
    assert elf_soname(libc) == "libc.so.6"


def test_without_its_folder_on_the_path_no_process_finds_it(tmp_path):
    """The control of test_a_process_finds_it_through_ld_library_path: an empty folder there
    gives no libcuda.so.1 (skipped on a machine whose loader finds a driver of its own)."""
    code = textwrap.dedent("""
        import ctypes
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError:
            print("missing")
        else:
            print("sim" if hasattr(lib, "caiSimGetErrorDetail") else "other")
        """)
    env = {k: v for k, v in os.environ.items() if k != "CAI_SIM_DRIVER"}
    env["LD_LIBRARY_PATH"] = str(tmp_path)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    if r.stdout.strip() == "other":
        pytest.skip("this machine has a libcuda.so.1 of its own")
    assert r.stdout.strip() == "missing"


def test_cai_sim_driver_names_the_library_used(tmp_path):
    # CAI_SIM_DRIVER is obeyed, not only named in the error: a copy elsewhere is the one printed.
    copy = tmp_path / "libcuda.so.1"
    copy.write_bytes(pathlib.Path(cai.sim.driver_path()).read_bytes())
    r = sim_driver_dir(CAI_SIM_DRIVER=str(copy))
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{tmp_path}\n"

"""cai.show_config() and `python -m cai info`: what cai runs on here, for bug reports.

Like `numba -s` and `cupy.show_config()`: the backend and why it was chosen, the devices, the
CUDA driver, the driver API version cai requests and whether its kernels were compiled, the simulator's state, cai's switches, and
the versions of the array libraries installed. Library versions come from the installed
packages' metadata: nothing heavy is imported.
"""

from __future__ import annotations

import os
import pathlib
import platform
import sys
from typing import IO, Any, Literal, overload

from . import _cai

DISTRIBUTION = "cai-interop"
USE_SIM = "; set CAI_BACKEND=sim to use the simulator"

# Distribution names per library, first found wins (CuPy ships one wheel per CUDA major).
LIBRARIES: dict[str, tuple[str, ...]] = {
    "numpy": ("numpy",),
    "cupy": ("cupy", "cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x"),
    "torch": ("torch",),
    "jax": ("jax",),
    "jaxlib": ("jaxlib",),
    "numba": ("numba",),
    "numba-cuda": ("numba-cuda",),
    "cuda-core": ("cuda-core",),
    "cuda-python": ("cuda-python", "cuda-bindings"),
    "nanobind": ("nanobind",),
}


def cuda_version_text(version: int) -> str:
    """12040 -> '12.4' (the encoding of CUDA_VERSION and cuDriverGetVersion)."""
    return f"{version // 1000}.{version % 1000 // 10}"


def _installed(names: tuple[str, ...]) -> str | None:
    # Here, not at `import cai`: importlib.metadata is most of a bare import's time.
    import importlib.metadata

    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def collect() -> dict[str, Any]:
    """Everything show_config() prints, as a dict (what `python -m cai info --json` writes)."""
    from . import config

    cuda = _cai._cuda_info()
    # The driver's message ends by suggesting the simulator, which info reports separately.
    cuda["error"] = str(cuda["error"]).removesuffix(USE_SIM).removeprefix("CUDA backend: ")
    forced = os.environ.get("CAI_BACKEND") or None
    backend: str | None = None
    try:
        backend = _cai.backend()  # chooses the backend if nothing has yet
    except _cai.DeviceError as e:  # CAI_BACKEND=cuda without a usable driver
        why = str(e)
    if backend == "simulator":
        why = ("forced by CAI_BACKEND=sim" if forced == "sim" else
               f"no usable CUDA driver here: {str(cuda['error']).split(' (')[0]}")
    elif backend is not None:
        why = "forced by CAI_BACKEND=cuda" if forced == "cuda" else "a CUDA driver and a device"
    package = pathlib.Path(__file__).resolve().parent
    return {
        "cai": _cai.__version__,
        "distribution": _installed((DISTRIBUTION,)),
        "python": f"{platform.python_version()} ({platform.python_implementation()})",
        "platform": platform.platform(),
        "backend": backend,
        "backend_reason": why,
        "devices": _cai._devices() if backend else [],
        "simulator": {"active": _cai.sim.active(),
                      "race_detection": _cai.sim.race_detection() if _cai.sim.active() else None},
        "cuda": cuda,
        "build": _cai._build_info(),
        "switches": {"CUDA_ARRAY_INTERFACE_SYNC": config.CUDA_ARRAY_INTERFACE_SYNC,
                     "EXPORT_STREAM": config.EXPORT_STREAM,
                     "CAI_BACKEND": forced},
        "libraries": {name: _installed(dists) for name, dists in LIBRARIES.items()},
        "cmake_dir": str(package / "cmake") if (package / "cmake").is_dir() else None,
        "include_dir": str(package / "include") if (package / "include").is_dir() else None,
    }


def device_line(d: dict[str, Any], backend: str) -> str:
    """One device of collect()["devices"], as show_config() and cai.detect() print it."""
    cc = ".".join(map(str, d["compute_capability"]))
    what = "simulated" if backend == "simulator" else f"compute capability {cc}"
    return (f"device {d['ordinal']}: {d['name']}, {what}, {d['total_memory'] / 2**30:.1f} GiB, "
            f"{d['multiprocessors']} multiprocessors")


def _lines(info: dict[str, Any]) -> list[str]:
    cuda = info["cuda"]
    distribution = info["distribution"] or "not installed"
    out = [f"cai {info['cai']} (distribution {DISTRIBUTION} {distribution})",
           f"Python {info['python']} on {info['platform']}",
           f"Backend: {info['backend'] or 'none'} ({info['backend_reason']})"]
    if info["backend"] == "simulator":
        out.append("  The CUDA backend runs on cai's simulated driver: the driver's entry points "
                   "on the CPU, real asynchronous streams on host threads, no GPU needed "
                   "(docs/simulator.md)")
        detection = "on" if info["simulator"]["race_detection"] else "off"
        out.append(f"  race detection: {detection} (cai.sim.set_race_detection)")
    out += [f"  {device_line(d, info['backend'])}" for d in info["devices"]]
    kernels = ("compiled to PTX" if cuda["kernels"]
               else "no PTX (no nvcc at build time): they run on the simulated driver only")
    out.append(f"Driver API requested: CUDA {cuda_version_text(cuda['api_version'])}; "
               f"kernels: {kernels}")
    build = info["build"]
    optimized = [name for name, on in (("link-time optimized", build["lto"]),
                                       ("profile-guided", build["profile_guided"])) if on]
    out.append(f"Build: {build['compiler']}" + "".join(f", {o}" for o in optimized))
    if cuda["driver_loaded"]:
        out.append(f"CUDA driver: {cuda_version_text(cuda['driver_version'])}, "
                   f"{cuda['devices']} device(s)")
    else:
        version = (f" (supports CUDA {cuda_version_text(cuda['driver_version'])})"
                   if cuda["driver_version"] else "")
        out.append(f"CUDA driver: not usable{version}: {cuda['error'] or 'not found'}")
    switches = ", ".join(f"{k}={'unset' if v is None else v}"
                         for k, v in info["switches"].items())
    out.append(f"Switches: {switches}")
    libs = ", ".join(f"{k} {v or '-'}" for k, v in info["libraries"].items())
    out.append(f"Libraries: {libs}")
    out.append(f"C++ package: cmake dir {info['cmake_dir'] or '-'}, "
               f"include dir {info['include_dir'] or '-'}")
    return out


@overload
def show_config(file: IO[str] | None = None, *, as_json: Literal[False] = False) -> None: ...


@overload
def show_config(file: IO[str] | None = None, *, as_json: Literal[True]) -> dict[str, Any]: ...


def show_config(file: IO[str] | None = None, *, as_json: bool = False) -> dict[str, Any] | None:
    """Prints the backend, devices, CUDA driver and toolkit, simulator state, switches and the
    installed array libraries (what a bug report should include) to `file` (stdout by default).
    With as_json=True it prints nothing and returns the same facts as a dict of JSON types
    (what `python -m cai info --json` writes)."""
    info = collect()
    if as_json:
        return info
    print("\n".join(_lines(info)), file=sys.stdout if file is None else file)
    return None

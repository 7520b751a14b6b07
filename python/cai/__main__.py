"""python -m cai: the package's command line.

  python -m cai demo           the producer/consumer examples of the CAI v3 document
  python -m cai info           backend, devices, CUDA driver and toolkit, libraries found
  python -m cai --version      the version
  python -m cai --cmake-dir    the directory for find_package(cai) (-Dcai_DIR=...)
  python -m cai --include-dir  the directory of the C++ headers
  python -m cai --sim-driver-dir
                               the folder of the simulated libcuda.so.1 (for LD_LIBRARY_PATH)
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys


def _package_dir() -> pathlib.Path:
    return pathlib.Path(__file__).resolve().parent


def _installed_dir(name: str) -> pathlib.Path:
    path = _package_dir() / name
    if not path.is_dir():
        print(f"python -m cai: {path} is missing; this cai was not installed with its C++ "
              "package (pip install it)", file=sys.stderr)
        sys.exit(1)
    return path


def _demo(args: argparse.Namespace) -> int:
    from ._demo import run

    return run()


def _info(args: argparse.Namespace) -> int:
    from ._info import show_config

    if args.json:
        print(json.dumps(show_config(as_json=True), indent=2))
    else:
        show_config()
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m cai",
        description="cai: the CUDA Array Interface and DLPack, zero-copy and stream-correct.")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument("--cmake-dir", action="store_true",
                   help="print the directory of cai-config.cmake, for find_package(cai) "
                        "(cmake -Dcai_DIR=...), and exit")
    p.add_argument("--include-dir", action="store_true",
                   help="print the directory of the C++ headers and exit")
    p.add_argument("--sim-driver-dir", action="store_true",
                   help="print the folder holding cai's simulated driver libcuda.so.1 (put it on "
                        "LD_LIBRARY_PATH to run driver-API clients over it) and exit")
    commands = p.add_subparsers(dest="command", metavar="command")
    demo = commands.add_parser(
        "demo", help="run the producer/consumer examples of the CAI v3 document",
        description="Runs the two examples of the CUDA Array Interface v3 document on the best "
                    "available backend (CUDA, else the CPU simulator).")
    demo.set_defaults(run=_demo)
    info = commands.add_parser(
        "info", help="show the backend, devices, CUDA driver and toolkit, and libraries found",
        description="Prints what cai runs on here (as cai.show_config() does): the backend and "
                    "why it was chosen, the devices, the CUDA driver, the driver API version "
                    "cai requests and whether its kernels were compiled, the simulator's state, cai's switches, and the versions of "
                    "NumPy, CuPy, PyTorch, JAX and Numba installed.")
    info.add_argument("--json", action="store_true", help="write it as JSON")
    info.set_defaults(run=_info)
    return p


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    if args.version:
        from ._cai import __version__

        print(__version__)
        return 0
    if args.cmake_dir:
        print(_installed_dir("cmake"))
        return 0
    if args.include_dir:
        print(_installed_dir("include"))
        return 0
    if args.sim_driver_dir:
        from ._cai import sim

        try:
            print(pathlib.Path(sim.driver_path()).parent)
        except RuntimeError as e:
            print(f"python -m cai: {e}", file=sys.stderr)
            return 1
        return 0
    if getattr(args, "run", None) is None:
        p.print_help(sys.stderr)
        return 2
    result: int = args.run(args)
    return result


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `python -m cai info | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)

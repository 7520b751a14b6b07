#!/usr/bin/env python3
"""The training run of the profile-guided build: every cai statement of bench/interop.py, often.

cmake/cai_pgo.cmake runs this with an instrumented _cai over the simulated driver. The counts it
leaves tell GCC which code the per-call paths run, so that the optimized build keeps that code
together and moves the rest out of the way. The statements are the benchmark's own rows, so the
profile follows what docs/benchmarks.md measures; the peers' statements (NumPy, PyTorch,
cuda.core) are not run.

    PYTHONPATH=<staged package> CAI_BACKEND=sim CAI_SIM_DRIVER=<libcuda.so.1> \
        python bench/pgo_train.py
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import interop  # noqa: E402

CALLS = 2000  # per statement: enough for the counts to rank code, a second or two in all


def main() -> int:
    nowhere = os.path.join(os.path.dirname(os.path.abspath(__file__)), "no-such-module")
    rows = interop.build_rows(caster_dir=nowhere, floor_dir=nowhere)
    ran = 0
    for row in rows:
        case = row.cai
        peer_only = row.key.startswith(("torch", "cuda_core"))
        if case is None or isinstance(case, interop.Fixed) or peer_only:
            continue
        case.check()
        case.number = CALLS
        case.run_round()
        ran += 1
    print(f"pgo_train.py: {ran} statements, {CALLS} calls each")
    return 0 if ran else 1


if __name__ == "__main__":
    sys.exit(main())

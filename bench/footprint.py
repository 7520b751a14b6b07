#!/usr/bin/env python3
"""How much machine code one call runs: the 64-byte lines of code it executes, per shared object.

A first-level instruction cache holds 512 such lines (32 KiB). A call whose lines, with the
interpreter's own, do not fit there misses on every call, and its time grows much faster than
its instruction count. This counts the lines with callgrind (valgrind must be installed): the
statement runs N and 2N times after a warm-up, and a line counts when its instructions ran at
least N more times in the longer run, that is, at least once per call.

    .venv/bin/python bench/footprint.py "cai.from_dlpack(p_cai)" "np.from_dlpack(p_np)"
    .venv/bin/python bench/footprint.py --calls 5000 --functions _cai "cai.from_dlpack(p_cai)"

The statements see `cai`, `np`, `a` (a 64x64 float32 device array), `n` (its NumPy twin),
`p_cai` and `p_np` (the Python DLPack producer of bench/interop.py around each) and `fl` (the
floor module of bench/floor_ext, when built).
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RUNNER = """
import sys
sys.path[:0] = [{bench!r}, {floor!r}]
import numpy as np, cai
from interop import DLPackProducer
a = cai.device_array((64, 64), dtype=np.float32)
n = np.zeros((64, 64), dtype=np.float32)
p_cai, p_np = DLPackProducer(a), DLPackProducer(n)
try:
    import _cai_bench_floor as fl
except ImportError:
    fl = None
code = compile("for _ in range(N):\\n    " + sys.argv[1], "<statement>", "exec")
exec(code, dict(globals(), N=100))
exec(code, dict(globals(), N=int(sys.argv[2])))
"""


def executed(statement: str, calls: int, workdir: str) -> collections.Counter:
    """Instructions run per (object, function, address) for `calls` calls (and the warm-up)."""
    out = os.path.join(workdir, f"callgrind.{calls}")
    runner = os.path.join(workdir, "runner.py")
    with open(runner, "w") as f:
        f.write(RUNNER.format(bench=os.path.join(ROOT, "bench"),
                              floor=os.path.join(ROOT, "build", "bench_floor")))
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONHASHSEED="0")
    run = subprocess.run(["valgrind", "--tool=callgrind", "--dump-instr=yes", "--compress-pos=no",
                          "--compress-strings=no", f"--callgrind-out-file={out}", sys.executable,
                          runner, statement, str(calls)],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if run.returncode != 0:
        lines = run.stderr.splitlines()
        own = [line for line in lines if not line.startswith("==")]  # the program's, not valgrind's
        sys.exit(f"footprint.py: callgrind of {statement!r} failed (exit {run.returncode}):\n"
                 + "\n".join((own or lines)[-15:]))
    counts: collections.Counter = collections.Counter()
    obj = fn = None
    after_call = False  # the cost line after calls= is the callee's, not this function's
    with open(out, errors="replace") as f:
        for line in f:
            if line.startswith("ob="):
                obj = line[3:].strip().rsplit("/", 1)[-1]
            elif line.startswith("fn="):
                fn = line[3:].strip()
            elif line.startswith("calls="):
                after_call = True
            elif line.startswith("0x"):
                if after_call:
                    after_call = False
                    continue
                fields = line.split()
                counts[(obj, fn, int(fields[0], 16))] += int(fields[-1])
    return counts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("statements", nargs="+")
    ap.add_argument("--calls", type=int, default=5000, help="N (default 5000)")
    ap.add_argument("--functions", metavar="OBJECT",
                    help="also list the lines of each function in objects whose name starts so")
    args = ap.parse_args(argv)
    for statement in args.statements:
        with tempfile.TemporaryDirectory() as workdir:
            short = executed(statement, args.calls, workdir)
            long = executed(statement, 2 * args.calls, workdir)
        per_object = collections.defaultdict(set)
        per_function = collections.defaultdict(set)
        for key, n in long.items():
            if n - short.get(key, 0) >= args.calls:
                obj, fn, address = key
                per_object[obj].add(address >> 6)
                if args.functions and obj.startswith(args.functions):
                    per_function[fn].add(address >> 6)
        total = sum(len(lines) for lines in per_object.values())
        print(f"{statement}: {total} lines ({total * 64 / 1024:.1f} KiB) per call")
        for obj, lines in sorted(per_object.items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(lines):5d}  {obj}")
        for fn, lines in sorted(per_function.items(), key=lambda kv: -len(kv[1])):
            print(f"        {len(lines):4d}  {fn[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Did a change move the per-call costs? bench/interop.py under two installs of cai, alternated.

The nanoseconds of bench/interop.py depend on the machine and on the hour (a shared 2-core
machine ran the same wheel 2-3x slower on some days), so a target in nanoseconds measured on one
day says little about a change measured on another. This script answers the question the targets
stand for, "did the change make a call slower?", on one machine in one sitting: it runs
bench/interop.py alternately under this interpreter (the tree as it is) and under --base (an
interpreter with the cai to compare against installed, e.g. a virtual environment built from an
earlier commit), --runs times each, and prints per row the median nanoseconds of each and
this / base, the median over the runs of the ratio within a pair of runs (the two runs of a pair
are back to back, so a change of the machine's speed between pairs cancels).

    git worktree add /tmp/base <commit> && python3 -m venv /tmp/base/.venv
    /tmp/base/.venv/bin/python -m pip install -r requirements.txt
    /tmp/base/.venv/bin/python -m pip install --no-build-isolation /tmp/base
    .venv/bin/python bench/compare.py --base /tmp/base/.venv/bin/python --runs 3

The caster rows need bench/caster_ext built against each install (--caster-dir for this one,
--base-caster-dir for the base; bench/interop.py --build-caster builds one); the floors
(bench/floor_ext, plain C) are shared. Options after `--` go to bench/interop.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
INTEROP = os.path.join(HERE, "interop.py")


def run_interop(python: str, caster_dir: str | None, extra: list[str], out: str) -> dict:
    args = [python, INTEROP, "--json", out, *extra]
    if caster_dir:
        args += ["--caster-dir", caster_dir]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        return json.load(f)


def compare(this_runs: list[dict], base_runs: list[dict]) -> list[tuple[str, float, float, float]]:
    """Per row measured in every run of both: (key, this ns, base ns, this / base), where the
    nanoseconds are medians over the runs and the ratio is the median of the per-pair ratios."""
    keys = [k for k, v in this_runs[0]["rows"].items()
            if all(r["rows"].get(k, {}).get("cai") for r in this_runs + base_runs)]
    out = []
    for k in keys:
        t = [r["rows"][k]["cai"] for r in this_runs]
        b = [r["rows"][k]["cai"] for r in base_runs]
        out.append((k, statistics.median(t), statistics.median(b),
                    statistics.median(x / y for x, y in zip(t, b))))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", required=True, help="the interpreter with the cai to compare against")
    p.add_argument("--runs", type=int, default=3, help="runs of bench/interop.py per install")
    p.add_argument("--caster-dir", help="bench/caster_ext built against this install")
    p.add_argument("--base-caster-dir", help="bench/caster_ext built against the base install")
    p.add_argument("--slower", type=float, default=1.05,
                   help="this / base above which a row is called slower (default 1.05)")
    p.add_argument("--json", metavar="PATH", help="write every run's medians as JSON")
    args, extra = p.parse_known_args(argv)
    extra = [a for a in extra if a != "--"] or ["--rounds", "15", "--min-time", "0.05"]

    this_runs, base_runs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            # Base first in odd pairs, this first in even ones: a trend within a pair cancels too.
            order = [("base", args.base, args.base_caster_dir),
                     ("this", sys.executable, args.caster_dir)]
            for label, python, caster in order if i % 2 == 0 else order[::-1]:
                data = run_interop(python, caster, extra, os.path.join(tmp, f"{label}{i}.json"))
                (this_runs if label == "this" else base_runs).append(data)
                print(f"run {i + 1}/{args.runs}: {label} done", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"this": this_runs, "base": base_runs}, f, indent=1)

    rows = compare(this_runs, base_runs)
    print(f"bench/interop.py {' '.join(extra)}, {args.runs} runs per install, alternated; "
          f"this: {sys.executable}; base: {args.base}\n")
    print("| row | this (ns) | base (ns) | this / base |")
    print("|---|--:|--:|--:|")
    slower = []
    for k, t, b, k_ratio in rows:
        flag = " (slower)" if k_ratio > args.slower else ""
        print(f"| {k} | {t:,.0f} | {b:,.0f} | {k_ratio:.2f}{flag} |")
        if flag:
            slower.append(k)
    print(f"\n{len(rows)} rows; slower than base by more than {args.slower:g}x: "
          f"{', '.join(slower) if slower else 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

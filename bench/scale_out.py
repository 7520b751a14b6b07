#!/usr/bin/env python3
"""Round trips of one array between processes, a cai array against a NumPy array of the same
size (docs/scale-out.md; results in docs/benchmarks.md, "Scale-out round trips").

    .venv/bin/python bench/scale_out.py            # MPI ping-pong and Dask round trips
    .venv/bin/python bench/scale_out.py --quick    # smoke run (tiny sizes and counts)
    .venv/bin/python bench/scale_out.py mpi        # or dask: one engine only

MPI: `mpiexec -n 2` (the MPICH wheel of requirements-dev.txt) runs a ping-pong, Send then Recv
back, of a buffer; the cai side calls arr.synchronize() before each Send, as a program must.
That MPI is not CUDA-aware, so the cai buffer is a managed array (cai.managed_array), which
the host reaches too; a CUDA-aware MPI would take a device array.
Reported: the median time of one round trip over --rounds rounds of --repeat trips each.

Dask: a LocalCluster of two worker processes; one round trip is a task on worker A that
returns the array it gets from worker B (the array moves B -> A -> client): submit + result.
The cai array travels with cai's "dask" serializer (a host frame, then a new device array);
the NumPy array with distributed's own. Reported: the median over --rounds round trips.

Nothing is changed in the environment: cai runs on the driver it picks (the simulated one on a
machine without a GPU).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

SIZES = [1 << 10, 1 << 20, 64 << 20]  # bytes
QUICK_SIZES = [1 << 10, 1 << 16]

MPI_PROGRAM = textwrap.dedent("""
    import statistics, sys, time
    import numpy as np
    from mpi4py import MPI
    import cai

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    sizes, rounds, repeat = eval(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])

    def pingpong(buf, ready):
        comm.Barrier()
        t0 = time.perf_counter()
        for _ in range(repeat):
            if rank == 0:
                ready(buf)
                comm.Send(buf, dest=1)
                comm.Recv(buf, source=1)
            else:
                comm.Recv(buf, source=0)
                ready(buf)
                comm.Send(buf, dest=0)
        return (time.perf_counter() - t0) / repeat

    for nbytes in sizes:
        n = nbytes // 8
        host = np.zeros(n)
        dev = cai.managed_array(n)
        dev.copy_to_device(host)
        kinds = [("numpy", host, lambda b: None), ("cai", dev, lambda b: b.synchronize())]
        times = {k: [] for k, _, _ in kinds}
        for _ in range(rounds):                 # interleaved, so that load hits both alike
            for name, buf, ready in kinds:
                times[name].append(pingpong(buf, ready))
        if rank == 0:
            print(nbytes, statistics.median(times["numpy"]), statistics.median(times["cai"]),
                  flush=True)
""")


def run_mpi(sizes, rounds, repeat):
    mpiexec = Path(sys.executable).parent / "mpiexec"
    with tempfile.TemporaryDirectory() as d:
        script = Path(d) / "pingpong.py"
        script.write_text(MPI_PROGRAM)
        r = subprocess.run([str(mpiexec), "-n", "2", sys.executable, str(script), repr(sizes),
                            str(rounds), str(repeat)], capture_output=True, text=True,
                           timeout=600, env=os.environ.copy())
    if r.returncode != 0:
        raise SystemExit(f"mpiexec failed:\n{r.stdout}\n{r.stderr}")
    rows = []
    for line in r.stdout.strip().splitlines():
        nbytes, t_np, t_cai = line.split()
        rows.append((int(nbytes), float(t_np), float(t_cai)))
    return rows


def _identity(x):
    return x


def run_dask(sizes, rounds):
    import numpy as np
    from distributed import Client, LocalCluster

    import cai

    rows = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None, worker_dashboard_address=None) as cluster, \
            Client(cluster) as client:
        a, b = sorted(client.scheduler_info()["workers"])
        for nbytes in sizes:
            host = np.zeros(nbytes // 8)
            arrays = {"numpy": host, "cai": cai.to_device(host)}
            times = {k: [] for k in arrays}
            for _ in range(rounds):
                for name, value in arrays.items():
                    on_b = client.scatter(value, workers=[b], direct=True)
                    t0 = time.perf_counter()
                    client.submit(_identity, on_b, workers=[a], pure=False).result()
                    times[name].append(time.perf_counter() - t0)
                    del on_b
            rows.append((nbytes, statistics.median(times["numpy"]),
                         statistics.median(times["cai"])))
    return rows


def size_text(n):
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n // k} {unit}"
    return f"{n} B"


def table(title, rows):
    out = [f"{title}", "", "| size | NumPy (ms) | cai (ms) | cai / NumPy |", "|---|---|---|---|"]
    for nbytes, t_np, t_cai in rows:
        out.append(f"| {size_text(nbytes)} | {t_np * 1e3:.3f} | {t_cai * 1e3:.3f} | "
                   f"{t_cai / t_np:.2f} |")
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("engine", nargs="?", choices=["mpi", "dask", "all"], default="all")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--repeat", type=int, default=20, help="MPI round trips per round")
    p.add_argument("--quick", action="store_true", help="smoke run: tiny sizes and counts")
    args = p.parse_args(argv)
    sizes = QUICK_SIZES if args.quick else SIZES
    rounds = 2 if args.quick else args.rounds
    repeat = 2 if args.quick else args.repeat
    import cai

    print(f"backend: {cai.backend()}, Python {sys.version.split()[0]}, {os.cpu_count()} cores\n")
    if args.engine in ("mpi", "all"):
        print(table("MPI ping-pong (Send + Recv back), median per round trip",
                    run_mpi(sizes, rounds, repeat)))
        print()
    if args.engine in ("dask", "all"):
        print(table("Dask: worker B -> worker A -> client, median per round trip",
                    run_dask(sizes, rounds)))


if __name__ == "__main__":
    main()

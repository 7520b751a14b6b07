"""MPI through mpi4py (docs/scale-out.md): cai arrays are MPI buffers as they are (mpi4py
reads their DLPack or CUDA Array Interface). mpi4py never waits for streams, so a program
makes an array ready with arr.synchronize() before MPI touches it. Runs `mpiexec -n 2` with
the MPICH wheel from requirements-dev.txt, which is not CUDA-aware: the buffers are managed arrays,
which the host reaches too (device memory needs a CUDA-aware MPI, on the simulated driver as
on a GPU)."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

MPIEXEC = Path(sys.executable).parent / "mpiexec"

PROGRAM = textwrap.dedent("""
    import numpy as np
    from mpi4py import MPI

    import cai

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    assert size == 2, size
    s = cai.stream(non_blocking=True)

    # Send/Recv: the sender's last write is still queued when it reaches MPI; synchronize()
    # makes it ready (without it, MPI would read the older values).
    if rank == 0:
        buf = cai.managed_array(1000, dtype=np.float64, stream=s)
        cai.ops.fill(buf, 0, stream=s)
        cai.sim.delay(s, 0.05)
        cai.ops.fill(buf, 3.5, stream=s)
        buf.synchronize()
        comm.Send(buf, dest=1, tag=7)
    else:
        buf = cai.managed_array(1000, dtype=np.float64, stream=s)
        comm.Recv(buf, source=0, tag=7)
        assert (buf.copy_to_host() == 3.5).all()

    # Allreduce between managed arrays.
    mine = cai.managed_array(16, dtype=np.int32)
    mine.copy_to_device(np.full(16, rank + 1, dtype=np.int32))
    total = cai.managed_array(16, dtype=np.int32)
    mine.synchronize()
    total.synchronize()
    comm.Allreduce(mine, total, op=MPI.SUM)
    assert (total.copy_to_host() == 3).all()

    # Bcast into a view with an offset, and a NumPy buffer on one side, a cai array on the other.
    whole = cai.mapped_array(8)
    whole.copy_to_device(np.arange(8.0) * (rank == 0))
    row = whole[2:6]
    row.synchronize()
    comm.Bcast(row, root=0)
    assert list(row.copy_to_host()) == [2.0, 3.0, 4.0, 5.0]
    if rank == 0:
        comm.Send(np.arange(4, dtype=np.int64), dest=1)
    else:
        got = cai.managed_array(4, dtype=np.int64)
        got.synchronize()
        comm.Recv(got, source=0)
        assert list(got.copy_to_host()) == [0, 1, 2, 3]
    print(f"rank {rank} ok", flush=True)
""")


def test_mpiexec_two_ranks_exchange_cai_arrays(tmp_path):
    assert MPIEXEC.exists(), "mpiexec comes with the mpich wheel (requirements-dev.txt)"
    script = tmp_path / "mpi_program.py"
    script.write_text(PROGRAM)
    env = os.environ | {"CAI_BACKEND": "sim"}
    r = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, str(script)],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    # mpiexec forwards each rank's output as it comes: the lines may interleave.
    assert "rank 0 ok" in r.stdout and "rank 1 ok" in r.stdout, r.stdout


def test_mpi4py_reads_cai_arrays_as_buffers():
    import numpy as np
    from mpi4py import MPI

    import cai

    arr = cai.to_device(np.arange(6, dtype=np.float32))[1:5]
    buf = MPI.buffer(arr)                     # what comm.Send(arr, ...) hands to MPI
    assert buf.address == arr.ptr and buf.nbytes == arr.nbytes


def test_scale_out_benchmark_smoke():
    """bench/scale_out.py --quick (tiny sizes): the benchmark cannot rot."""
    script = Path(__file__).resolve().parents[2] / "bench" / "scale_out.py"
    r = subprocess.run([sys.executable, str(script), "--quick"], capture_output=True, text=True,
                       timeout=300, env=os.environ | {"CAI_BACKEND": "sim"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("| 1 KiB |") == 2, r.stdout

"""IPC between a numba-cuda process and a cai process on one driver (spawned children)."""

import multiprocessing
import sys
from pathlib import Path

import numpy as np
from numba import cuda

import cai

sys.path.insert(0, str(Path(__file__).parent))
import ipc_children  # noqa: E402


def spawn(target, *args):
    ctx = multiprocessing.get_context("spawn")
    p = ctx.Process(target=target, args=args)
    p.start()
    return p, ctx


def test_cai_process_writes_memory_numba_exported():
    n = cuda.to_device(np.zeros(32, dtype=np.float32))
    handle = n.get_ipc_handle()
    p, _ = spawn(ipc_children.cai_fills_a_numba_export, handle, 6.0)
    p.join(timeout=120)
    assert p.exitcode == 0
    np.testing.assert_array_equal(n.copy_to_host(), np.full(32, 6, np.float32))


def test_numba_process_reads_memory_cai_allocated():
    c = cai.to_device(np.arange(20, dtype=np.int32))
    cai.synchronize()
    handle = cuda.as_cuda_array(c).get_ipc_handle()
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    p = ctx.Process(target=ipc_children.numba_reads_a_cai_export, args=(handle, queue))
    p.start()
    values = queue.get(timeout=120)
    p.join(timeout=120)
    assert p.exitcode == 0
    assert values == list(range(20))


def test_cai_open_ipc_array_takes_the_driver_handle_numba_exported():
    n = cuda.to_device(np.zeros(32, dtype=np.float32))
    ipc = n.get_ipc_handle()._ipc_handle  # numba's driver-level handle: .handle, .offset
    raw = getattr(ipc.handle, "reserved", ipc.handle)
    p, _ = spawn(ipc_children.cai_fills_a_raw_numba_handle, bytes(raw), ipc.offset, 4.0)
    p.join(timeout=120)
    assert p.exitcode == 0
    np.testing.assert_array_equal(n.copy_to_host(), np.full(32, 4, np.float32))


def test_numba_open_ipc_array_takes_cais_driver_handle():
    base = cai.to_device(np.arange(24, dtype=np.int32))
    c = base[4:]
    h = c.get_ipc_handle()
    cai.synchronize()
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    p = ctx.Process(target=ipc_children.numba_reads_a_raw_cai_handle,
                    args=(h.handle, h.offset, queue))
    p.start()
    values = queue.get(timeout=120)
    p.join(timeout=120)
    assert p.exitcode == 0
    assert values == list(range(4, 24))

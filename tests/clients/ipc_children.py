"""What the other process of tests/clients/test_client_ipc.py runs (spawned: importable)."""

import numpy as np


def cai_fills_a_numba_export(handle, value):
    """A cai process: opens numba's IPC handle (with numba) and writes through cai."""
    import cai

    opened = handle.open()
    c = cai.as_cuda_array(opened)
    cai.ops.fill(c, value)
    cai.synchronize()
    handle.close()


def numba_reads_a_cai_export(handle, queue):
    """A numba process: opens the handle of cai's memory and reads it."""
    opened = handle.open()
    queue.put(np.asarray(opened.copy_to_host()).tolist())
    handle.close()


def cai_fills_a_raw_numba_handle(raw, offset, value):
    """A cai process: opens the driver handle inside numba's IPC handle with
    cai.open_ipc_array (Numba's signature) and writes through it."""
    import cai

    with cai.open_ipc_array(raw, (32,), np.float32, offset=offset) as c:
        cai.ops.fill(c, value)
        c.synchronize()


def numba_reads_a_raw_cai_handle(raw, offset, queue):
    """A numba process: opens cai's IpcHandle.handle with numba's own open_ipc_array."""
    from numba import cuda

    with cuda.open_ipc_array(raw, (20,), np.int32, offset=offset) as d:
        queue.put(d.copy_to_host().tolist())

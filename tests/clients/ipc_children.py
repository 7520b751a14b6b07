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

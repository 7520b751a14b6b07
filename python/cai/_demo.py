"""The two examples of the CUDA Array Interface v3 document, in cai's world.

1. `add[1, 32](a, b, out)`: three arrays from a producer are consumed by a kernel.
2. A kernel launched on a stream that is not the array's default stream, made safe with an
   event, before another library consumes the array.
Every stream wait that cai enqueues is printed.
"""

import numpy as np

import cai
from . import _cai


class ForeignArray:
    """A stand-in for another library's array (CuPy, PyTorch, ...): it exports CAI v3 with the
    stream its own work is queued on, and nothing else."""

    def __init__(self, data, stream):
        self._data = data  # keeps the memory alive
        self._stream = stream

    @property
    def __cuda_array_interface__(self):
        d = dict(self._data.__cuda_array_interface__)
        d["stream"] = int(self._stream)
        return d


def _show_waits(indent="    "):
    lines = _cai._take_trace()
    for line in lines:
        print(f"{indent}[wait] {line}")
    if not lines:
        print(f"{indent}[wait] none needed")


def _slow(stream, seconds):
    # On the simulator, make the producer visibly slow; on a GPU the work itself takes time.
    if cai.sim.active():
        cai.sim.delay(stream, seconds)


def example_add():
    print("Example 1: add[1, 32](a, b, out) with arrays from another library")
    producer_stream = cai.stream()
    print(f"  producer works on {producer_stream!r}")
    a_mem = cai.to_device(np.arange(10), stream=producer_stream)
    _slow(producer_stream, 0.5)
    b_mem = cai.device_array_like(a_mem, stream=producer_stream)
    cai.ops.add(a_mem, a_mem, b_mem, stream=producer_stream)  # b = a * 2
    out_mem = cai.device_array_like(a_mem, stream=producer_stream)
    cai.ops.fill(out_mem, 0, stream=producer_stream)
    _cai._take_trace()
    a, b, out = (ForeignArray(x, producer_stream) for x in (a_mem, b_mem, out_mem))
    print(f"  a exports stream={a.__cuda_array_interface__['stream']:#x}")

    consumer_stream = cai.stream()
    print(f"  consumer kernel runs on {consumer_stream!r}: cai.ops.add(a, b, out)")
    cai.ops.add(a, b, out, stream=consumer_stream)
    print(f"  returned at once; producer stream still busy: {not producer_stream.query()}")
    _show_waits()
    result = cai.as_cuda_array(out).copy_to_host()
    print(f"  out = {result.tolist()}")
    expected = np.arange(10) * 3
    assert (result == expected).all(), result
    print("  correct: out == a + 2a")


def example_other_stream():
    print("Example 2: a kernel on a stream that is not the array's default stream")
    array_stream = cai.stream()
    kernel_stream = cai.stream()
    n = 16384
    x = cai.device_array(n, dtype=np.int32, stream=array_stream)
    print(f"  x = device_array({n}, stream={array_stream!r})")
    iota = cai.to_device(np.arange(n, dtype=np.int32), stream=kernel_stream)
    _slow(kernel_stream, 0.2)
    print(f"  'initialize_array' kernel on {kernel_stream!r}: cai.ops.copy(x, iota, stream=kernel_stream)")
    _cai._take_trace()
    cai.ops.copy(x, iota, stream=kernel_stream)
    print("  cai orders the kernel after x's stream, and x's stream after the kernel:")
    _show_waits()
    print("  the document's manual fix, still valid: evt.record(kernel_stream); evt.wait(array_stream)")
    evt = cai.event()
    evt.record(kernel_stream)
    evt.wait(array_stream)
    y = cai.device_array(n, dtype=np.int32, stream=array_stream)
    print("  other_cai_library.consume(x): cai.ops.add(x, x, y) on x's default stream")
    cai.ops.add(ForeignArray(x, array_stream), ForeignArray(x, array_stream), y)
    _show_waits()
    host = y.copy_to_host()
    assert (host == 2 * np.arange(n, dtype=np.int32)).all()
    print(f"  y[:5] = {host[:5].tolist()} ... y[-1] = {int(host[-1])}: correct")


def run():
    print(f"cai {cai.__version__} on backend: {cai.backend()}")
    if cai.backend() == "simulator":
        print("  (no CUDA driver or GPU here: the CPU simulator runs the streams, with race "
              "detection on)")
    _cai._set_trace(True)
    try:
        example_add()
        print()
        example_other_stream()
    finally:
        _cai._set_trace(False)
    return 0

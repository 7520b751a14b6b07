"""`python -m cai demo`: the two examples of the CUDA Array Interface (Version 3) document, the
specification as published in the Numba documentation ("CUDA Array Interface (Version 3)",
section "Synchronization"), run through cai. The rules cai implements are written in
docs/core-interface.md and docs/architecture.md.

1. `add[1, 32](a, b, out)`: a consumer kernel on its own stream reads arrays that a producer
   library filled on another stream.
2. A kernel launched on a stream that is not the array's own, made safe with an event before
   another library consumes the array.

The producer is `ProducerArray`, written as a third-party GPU library writes its array type: it
owns its memory, queues its own work on its own stream, and describes itself with its own
`__cuda_array_interface__` (version 3, with that stream). Every stream wait cai enqueues is
printed, through the public switch `cai.trace_waits()`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

import cai

DOCUMENT = ("the CUDA Array Interface (Version 3) specification in the Numba documentation, "
            "section \"Synchronization\"")


class ProducerArray:
    """An array of a made-up third-party GPU library, as cai sees any producer (CuPy, PyTorch,
    Numba, RAPIDS): memory the library allocated and keeps alive, work the library queued on
    its own stream, and a CAI v3 dict it writes itself. The raw bytes come from cai here only
    because the demo needs device memory; nothing of cai's array type is exported."""

    def __init__(self, shape: tuple[int, ...], dtype: npt.DTypeLike, stream: cai.Stream) -> None:
        self.shape = shape
        self.dtype = np.dtype(dtype)
        self.stream = stream  # the library's own stream: all its work goes there
        nbytes = math.prod(shape) * self.dtype.itemsize
        self._memory = cai.device_array(nbytes, dtype=np.uint8, stream=stream)  # owned bytes

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {
            "version": 3,
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self._memory.ptr, False),
            "strides": None,  # C-contiguous
            "stream": int(self.stream),  # consumers must order their work after this stream
        }

    # The library's own "kernels", queued on its stream.
    def fill(self, value: npt.ArrayLike) -> None:
        cai.ops.fill(self, value, stream=self.stream)

    def iota(self) -> None:
        cai.ops.copy(self, cai.to_device(np.arange(math.prod(self.shape), dtype=self.dtype)
                                         .reshape(self.shape), stream=self.stream),
                     stream=self.stream)


def _slow(stream: cai.Stream, seconds: float) -> None:
    # On the simulator, make a stream's work visibly slow; on a GPU the work itself takes time.
    if cai.sim.active():
        cai.sim.delay(stream, seconds)


def _show(waits: cai.WaitTrace | list[str], indent: str = "    ") -> list[str]:
    lines = waits if isinstance(waits, list) else waits.take()
    for line in lines:
        print(f"{indent}[wait] {line}")
    if not lines:
        print(f"{indent}[wait] none needed")
    return lines


def example_add(waits: cai.WaitTrace) -> None:
    print("Example 1: add[1, 32](a, b, out), arrays from a producer library on its own stream")
    producer = cai.stream()  # blocking, as CuPy's and Numba's streams are by default
    print(f"  the producer library works on {producer!r}")
    a = ProducerArray((10,), np.int64, producer)
    b = ProducerArray((10,), np.int64, producer)
    out = ProducerArray((10,), np.int64, producer)
    a.iota()
    _slow(producer, 0.5)
    cai.ops.add(a, a, b, stream=producer)  # b = 2a, the producer's own work
    out.fill(0)
    waits.take()
    print(f"  a exports stream={a.__cuda_array_interface__['stream']:#x} in its CAI v3 dict")

    consumer = cai.stream(non_blocking=True)
    print(f"  the consumer kernel runs on {consumer!r}: cai.ops.add(a, b, out)")
    cai.ops.add(a, b, out, stream=consumer)
    print(f"  returned at once; the producer's stream is still busy: {not producer.query()}")
    lines = _show(waits)
    if len(lines) >= 2:
        print("  The first waits are the consumer rule everyone expects: the kernel may not "
              "start before the\n  producer's work on a, b and out is done. cai recorded an "
              "event on the producer's stream\n  when it imported each array (a producer may "
              "drop its stream after exporting it), and the\n  kernel's stream waits for "
              "those events. The last is the reverse wait: CAI v3 also makes the\n  consumer "
              "order the producer's later work after its own, so that the producer cannot\n  "
              "overwrite out, or free a or b, under the kernel. cai makes the legacy default "
              "stream wait,\n  which every blocking stream's later work does, without "
              "touching the producer's stream again.\n  All are event waits on the device; "
              "the host never blocks.")
    result = cai.as_cuda_array(out).copy_to_host()
    print(f"  out = {result.tolist()}")
    assert (result == np.arange(10) * 3).all(), result
    print("  correct: out == a + 2a")


def example_other_stream(waits: cai.WaitTrace) -> None:
    print("Example 2: a kernel on a stream that is not the array's default stream")
    array_stream = cai.stream()
    kernel_stream = cai.stream(non_blocking=True)
    n = 16384
    x = ProducerArray((n,), np.int32, array_stream)
    print(f"  x = a producer array of {n} int32 whose stream is {array_stream!r}")
    iota = cai.to_device(np.arange(n, dtype=np.int32), stream=kernel_stream)
    _slow(kernel_stream, 0.2)
    waits.take()
    print(f"  'initialize_array' kernel on {kernel_stream!r}: cai.ops.copy(x, iota, "
          "stream=kernel_stream)")
    cai.ops.copy(x, iota, stream=kernel_stream)
    lines = waits.take()
    if any(line.endswith("recorded by its producer") for line in lines):
        before = "the event recorded at import"
    else:
        before = "none here: a query at import\n  found the stream idle, so no event and no wait"
    print(f"  cai orders the kernel after the work queued on x's stream ({before}), and x's "
          "stream\n  after the kernel (through the legacy default stream):")
    _show(lines)
    print("  the document's manual fix, still valid: evt.record(kernel_stream); "
          "evt.wait(array_stream)")
    evt = cai.event()
    evt.record(kernel_stream)
    evt.wait(array_stream)
    y = ProducerArray((n,), np.int32, array_stream)
    print("  other_cai_library.consume(x): cai.ops.add(x, x, y) on x's stream")
    cai.ops.add(x, x, y)
    _show(waits)
    host = cai.as_cuda_array(y).copy_to_host()
    assert (host == 2 * np.arange(n, dtype=np.int32)).all()
    print(f"  y[:5] = {host[:5].tolist()} ... y[-1] = {int(host[-1])}: correct")


def first_line() -> str:
    """The demo's first line: version, backend, and, on the simulator, why."""
    from ._info import collect

    info = collect()
    line = f"cai {cai.__version__} on backend: {info['backend']}"
    if info["backend"] == "simulator":
        detection = "on" if info["simulator"]["race_detection"] else "off"
        line += (f" ({info['backend_reason']}): the CUDA backend on cai's simulated driver, "
                 f"real asynchronous streams, race detection {detection}")
    return line


def run() -> int:
    print(first_line())
    print(f"The examples of {DOCUMENT}.")
    print("Each stream wait cai enqueues is printed as [wait]; in your own code, "
          "`with cai.trace_waits() as waits:` records them.")
    print()
    with cai.trace_waits() as waits:
        example_add(waits)
        print()
        example_other_stream(waits)
    return 0

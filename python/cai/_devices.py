"""Numba's names for devices and streams (docs/python.md, "Devices, as numba.cuda names them"):
cai.select_device, cai.gpus, cai.detect and Stream.auto_synchronize, over cai.Device and
cai.Stream."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import IO, overload

from . import _cai
from ._cai import Device, Stream


def select_device(device_id: int | Device) -> Device:
    """Makes device `device_id` current for the calling thread until it is changed again (by
    another select_device, or by the end of an enclosing `with cai.Device(...)` block, which
    restores what was current before it). Returns the cai.Device, as numba.cuda.select_device
    does."""
    device = Device(device_id)  # checks the number: its range, no bool, no str
    _cai._set_current_device(device.id)
    return device


class DeviceList(Sequence[Device]):
    """cai.gpus: the devices of the backend, as numba.cuda.gpus. `len(cai.gpus)`,
    `cai.gpus[i]` (a cai.Device, so `with cai.gpus[1]:` makes device 1 current for the block),
    iteration, and `cai.gpus.current`. Counted when used, never at `import cai`."""

    @overload
    def __getitem__(self, index: int) -> Device: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Device]: ...

    def __getitem__(self, index: int | slice) -> Device | Sequence[Device]:
        devices = [Device(i) for i in range(_cai.device_count())]
        return devices[index]

    def __len__(self) -> int:
        return _cai.device_count()

    def __iter__(self) -> Iterator[Device]:
        return iter([Device(i) for i in range(_cai.device_count())])

    @property
    def current(self) -> Device:
        """The calling thread's current device (cai.current_device())."""
        return _cai.current_device()

    def __repr__(self) -> str:
        return f"<cai.gpus: {', '.join(repr(d) for d in self)}>"


gpus = DeviceList()


def detect(file: IO[str] | None = None) -> bool:
    """Prints the backend, why it was chosen, and each device, as numba.cuda.detect() does;
    returns True when at least one device can run cai's work (a simulated device counts: cai
    runs everything there). `cai.backend() == "cuda"` says whether it is a GPU."""
    from ._info import collect, device_line

    out = sys.stdout if file is None else file
    info = collect()
    devices = info["devices"]
    if info["backend"] is None:
        print(f"No usable backend: {info['backend_reason']}", file=out)
        return False
    print(f"Found {len(devices)} device(s) on the {info['backend']} backend "
          f"({info['backend_reason']})", file=out)
    for d in devices:
        print(f"  {device_line(d, info['backend'])}", file=out)
    print(f"Summary: {len(devices)}/{len(devices)} device(s) usable", file=out)
    return len(devices) > 0


@contextlib.contextmanager
def _auto_synchronize(self: Stream) -> Iterator[Stream]:
    """`with stream.auto_synchronize():` waits for the stream when the block ends normally
    (not after an exception), as Numba's Stream.auto_synchronize; the block gets the stream."""
    yield self
    self.synchronize()


# Assigned with setattr: a method of the extension type written in Python (stubs.pat declares
# it for type checkers).
setattr(Stream, "auto_synchronize", _auto_synchronize)

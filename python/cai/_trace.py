"""cai.trace_waits(): the stream waits cai enqueues, as text (docs/python.md, "Seeing the
waits").

cai orders work across streams with events (CAI v3): before a consumer's work, its stream waits
for the producer's; after it, the producer's stream waits for the consumer's. While a
`with cai.trace_waits() as waits:` block runs, each such wait becomes a line in `waits.lines`:
'stream 0x... waits for an event recorded on stream 0x...'. The hook is process-wide: waits
enqueued by other threads during the block are recorded too.
"""

from __future__ import annotations

import threading
from types import TracebackType

from . import _cai

_lock = threading.Lock()
_active: list[WaitTrace] = []


def _drain() -> None:
    # Called with _lock held: hands the lines collected so far to every open trace.
    lines = _cai._take_trace()
    for trace in _active:
        trace._pending.extend(lines)


class WaitTrace:
    """A `with` block that records the stream waits cai enqueues in it (see trace_waits)."""

    def __init__(self, echo: bool = False) -> None:
        self.echo = echo
        self.lines: list[str] = []
        self._pending: list[str] = []
        self._taken = 0

    def __enter__(self) -> WaitTrace:
        with _lock:
            if _active:
                _drain()  # earlier lines belong to the traces already open
            else:
                _cai._take_trace()  # stale lines from before any trace
                _cai._set_trace(True)
            _active.append(self)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with _lock:
            _drain()
            _active.remove(self)
            if not _active:
                _cai._set_trace(False)
        self._collect()

    def take(self) -> list[str]:
        """The lines recorded since the previous take() (or the start of the block)."""
        with _lock:
            if self in _active:
                _drain()
        self._collect()
        new = self.lines[self._taken:]
        self._taken = len(self.lines)
        return new

    def _collect(self) -> None:
        pending, self._pending = self._pending, []
        if self.echo:
            for line in pending:
                print(f"[cai wait] {line}")
        self.lines.extend(pending)


def trace_waits(echo: bool = False) -> WaitTrace:
    """Records the stream waits cai enqueues while the `with` block runs::

        with cai.trace_waits() as waits:
            cai.ops.add(a, b, out, stream=s)
        print(waits.lines)

    `echo=True` also prints each line as it is collected (at take() and at the end of the
    block). Blocks may nest; each sees the waits enqueued while it is open.
    """
    return WaitTrace(echo)

"""A received IPC handle is untrusted input (docs/reliability.md, "Arrays that leave the
process"): every field is checked before any use, cleanup included; a reference is given back
only by a ticket that holds it; a handle reaches only what its exporter shared. Also: a forked
child is told to use spawn, and the documented limits hold.

Forged handles are made from real ones' pickled fields (IpcHandle.__reduce__), as a hostile or
corrupting peer would send them. Whatever could crash runs in a fresh interpreter."""

import pickle

import numpy as np
import pytest

import cai
from helpers import run_isolated
from scale_helpers import importer_child

# Positions of the pickled fields (python/_cai/ipc.cpp, format 2).
MEMORY, ALLOC_SIZE, OFFSET, SHAPE, STRIDES = 6, 7, 8, 10, 11
CONTROL_FD, SLOT, GENERATION, TICKET = 17, 18, 19, 20


def forge(h, **changes):
    """New handle fields from h's (a new reference: __reduce__ issues a ticket)."""
    rebuild, fields = h.__reduce__()
    fields = list(fields)
    for name, value in changes.items():
        fields[globals()[name.upper()]] = value
    return rebuild, fields


@pytest.fixture
def child():
    with importer_child() as c:
        yield c


class Raw:
    """Pickles as the given fields exactly (a handle object would be pickled anew: a new,
    genuine ticket)."""

    def __init__(self, rebuild, fields):
        self.rebuild, self.fields = rebuild, tuple(fields)

    def __reduce__(self):
        return self.rebuild, self.fields


def _open_error(child, rebuild, fields):
    child.send("open_error", pickle.dumps(Raw(rebuild, fields)))
    return child.recv()


# Out-of-range and forged values of the fields a process reads from a handle of another one.
CORRUPT = {SLOT: [65536, 2**31, 2**32 - 1], TICKET: [2**62, 2**64 - 1, 0],
           GENERATION: [2**64 - 1], CONTROL_FD: [-1, 2**31 - 1, 9999]}


def test_corrupt_fields_are_cleaned_up_without_a_crash():
    """Item 6: an out-of-range slot, ticket, generation or descriptor segfaulted the receiver
    when the handle was dropped or closed (also at exit). Each is made, dropped, closed and
    left for exit in a fresh interpreter. There the exporter itself receives them: it opens
    its own memory from its own records, so it reads no descriptor, and a ticket of 0 is its
    own handle's (no reference). Exactly two open: the ticket of 0, and the first copy of the
    genuine ticket (with a descriptor of -1); the later copies find that ticket used."""
    r = run_isolated(f"""
        import gc, numpy as np, cai
        a = cai.to_device(np.arange(8.0))
        h = a.get_ipc_handle()
        rebuild, fields = h.__reduce__()
        kept, opened = [], []
        for pos, values in {CORRUPT!r}.items():
            for v in values:
                f = list(fields)
                f[pos] = v
                x = rebuild(*f)        # a received handle: holds what its ticket stands for
                try:
                    x.open()
                    opened.append((pos, v))
                except (ValueError, cai.DeviceError):
                    pass
                y = rebuild(*f)
                y.close()              # closed unopened
                kept.append(rebuild(*f))  # left for exit
                del x, y
        gc.collect()
        rebuild(*fields)               # the real one: its reference goes back when dropped
        gc.collect()
        assert cai._cai._ipc_exports_in_use() == 0, cai._cai._ipc_exports_in_use()
        print(sorted(opened))
    """, timeout=120)
    assert r.returncode == 0, (r.stdout, r.stderr[-3000:])
    assert r.stdout.strip() == str([(CONTROL_FD, -1), (TICKET, 0)]), (r.stdout, r.stderr[-3000:])
    assert "Segmentation" not in r.stderr and "Traceback" not in r.stderr, r.stderr[-3000:]


@pytest.mark.parametrize("pos, value", [(p, v) for p, vs in CORRUPT.items() for v in vs])
def test_another_process_refuses_every_corrupt_field(child, pos, value):
    a = cai.to_device(np.arange(8.0))
    rebuild, genuine = forge(a.get_ipc_handle())
    fields = list(genuine)
    fields[pos] = value
    tag, *error = _open_error(child, rebuild, fields)
    assert tag == "raised" and error[0] in ("ValueError", "DeviceError"), (tag, error)
    assert "corrupt" in error[1] or "stale" in error[1] or "no reference" in error[1] or \
        "descriptor" in error[1], error[1]
    # The refusal used nothing: the genuine fields still open, and their reference goes back.
    child.send("open", pickle.dumps(Raw(rebuild, genuine)), "a")
    assert child.recv()[0] == "opened"
    child.send("drop", "a")
    child.recv()


@pytest.mark.parametrize("changes", [{"shape": (8192,), "alloc_size": 2**21},
                                     {"offset": 4096, "alloc_size": 2**21}],
                         ids=["larger-shape", "other-offset"])
def test_a_genuine_ticket_opens_only_the_array_it_was_issued_for(child, changes):
    """The driver maps the whole 2 MiB block of a small allocation: a handle that keeps its
    genuine ticket but names more of the block (a larger shape or another offset, the
    allocation size raised to match) must not reach the rest of the exporter's block."""
    a = cai.to_device(np.arange(8.0))
    rebuild, genuine = forge(a.get_ipc_handle())
    fields = list(genuine)
    for name, value in changes.items():
        fields[globals()[name.upper()]] = value
    tag, *error = _open_error(child, rebuild, fields)
    assert tag == "raised" and error[0] == "ValueError", (tag, error)
    assert "was not issued by process" in error[1] and "this array" in error[1], error[1]
    # A genuine handle still opens, and reaches the array only.
    rebuild, fresh = forge(a.get_ipc_handle())
    child.send("open", pickle.dumps(Raw(rebuild, fresh)), "a")
    assert child.recv()[0] == "opened"
    child.send("values", "a")
    assert child.recv()[1].tolist() == list(range(8))
    child.send("drop", "a")
    child.recv()


def test_a_ticket_never_issued_gives_back_nothing(child):
    """Item 7: a handle whose ticket was never issued gave back a reference it never held, so
    the exporter freed memory an importer still mapped."""
    before = cai._cai._ipc_exports_in_use()  # earlier tests' forged handles keep theirs
    a = cai.to_device(np.arange(8.0))
    b = cai.to_device(np.arange(4.0))
    h = a.get_ipc_handle()
    rebuild, fields = forge(h)
    real_ticket = fields[TICKET]
    # One the exporter never issued, and one issued for another allocation (b's).
    never = list(fields)
    never[TICKET] = real_ticket + 1000
    _, b_fields = forge(b.get_ipc_handle())
    other = list(fields)
    other[TICKET] = b_fields[TICKET]
    for f in (never, other):
        tag, kind, msg = _open_error(child, rebuild, f)
        assert kind == "ValueError" and "was not issued by process" in msg, msg
    # Nothing was given back: both real handles still hold their references and open.
    assert cai._cai._ipc_exports_in_use() == before + 2
    child.send("open", pickle.dumps(Raw(rebuild, fields)), "a")
    assert child.recv()[0] == "opened"
    child.send("open", pickle.dumps(Raw(rebuild, b_fields)), "b")
    assert child.recv()[0] == "opened"
    del a, b
    child.send("values", "a")
    assert child.recv()[1].tolist() == list(range(8))  # still the exporter's memory


def test_a_handle_reaches_only_what_was_shared(child):
    """Item 8: raising the offset and the allocation size read another allocation of the
    exporter, and a widened descriptor mapped its whole segment."""
    a = cai.to_device(np.arange(64, dtype=np.uint8))
    secret = cai.to_device(np.full(64, 0x5A, np.uint8))
    h = a[8:16].get_ipc_handle()
    cases = [
        ({OFFSET: 64}, "reaches outside its allocation"),
        ({OFFSET: 4096, ALLOC_SIZE: 8192}, "not issued by process"),  # not its ticket's array
        ({ALLOC_SIZE: 1 << 34}, "the memory shared has 64"),
        ({SHAPE: (1 << 20,), STRIDES: (1,)}, "reaches outside its allocation"),
    ]
    for change, message in cases:
        rebuild, fields = forge(h)   # a genuine ticket each: only the fields below are forged
        f = list(fields)
        for pos, v in change.items():
            f[pos] = v
        tag, kind, msg = _open_error(child, rebuild, f)
        assert kind == "ValueError" and message in msg, (change, msg)
    # The descriptor: bytes flipped in turn within the driver's handle, while the genuine one
    # is open in the receiver (a handle that differs in any field is not taken for it).
    rebuild, fields = forge(h)
    child.send("open", pickle.dumps(Raw(rebuild, fields)), "v")
    assert child.recv()[0] == "opened"
    for i in range(0, 40, 4):
        rebuild, fields = forge(h)
        mem = bytearray(fields[MEMORY])
        f = list(fields)
        m = bytearray(mem)
        m[i] ^= 0xFF
        f[MEMORY] = bytes(m)
        tag, kind, msg = _open_error(child, rebuild, f)
        assert tag == "raised" and kind in ("ValueError", "DeviceError"), (i, kind, msg)
    child.send("values", "v")
    assert child.recv()[1].tolist() == list(range(8, 16))  # the real one still works
    del secret


def test_a_forked_child_is_told_to_use_spawn():
    """Item 9: after cai ran work, an os.fork() child blocked for ever in to_device; CUDA and
    PyTorch refuse with a clear error. The child gets a RuntimeError that says to spawn."""
    r = run_isolated("""
        import os, numpy as np, cai
        a = cai.to_device(np.arange(4.0))
        a.copy_to_host()
        pid = os.fork()
        if pid == 0:
            code = 3
            try:
                cai.to_device(np.arange(4.0))
            except RuntimeError as e:
                code = 0 if ("forked from process" in str(e) and "spawn" in str(e)) else 2
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
        print(a.copy_to_host().tolist())    # the parent goes on
    """, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split("\n")[:2] == ["0", "[0.0, 1.0, 2.0, 3.0]"], r.stdout


def test_more_than_4096_allocations_can_be_shared_at_once():
    """Item 13: the simulator's interprocess-event table held 4,096 while the docs promised
    65,536 shared allocations. 5,000 are shared at once here."""
    before = cai._cai._ipc_exports_in_use()
    arrays = [cai.device_array(4, dtype=np.uint8) for _ in range(5000)]
    handles = [a.get_ipc_handle() for a in arrays]
    received = [pickle.loads(pickle.dumps(h)) for h in handles]  # a reference each
    assert cai._cai._ipc_exports_in_use() == before + 5000
    del received, handles, arrays
    cai.ipc_collect()
    assert cai._cai._ipc_exports_in_use() == before

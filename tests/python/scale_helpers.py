"""Helpers of the scale-out tests (IPC, multiprocessing, pickling across processes).

Children are started with the "spawn" method (CUDA cannot be used in a forked child, and the
simulator's worker threads do not survive a fork either); they inherit CAI_BACKEND=sim from
the test process. Each child talks to the test through a Pipe: the test sends commands and
objects, the child answers. An exception in a child is sent back as ("error", text) and
raised again by `Child.recv`, so that a failure shows the child's traceback.
"""

import contextlib
import multiprocessing
import os
import pickle
import subprocess
import sys
import traceback

import numpy as np

TIMEOUT = 60


class ChildError(AssertionError):
    pass


class Child:
    """A spawned process running `target(conn, *args)` from this module."""

    def __init__(self, target, *args, ctx=None):
        ctx = ctx or multiprocessing.get_context("spawn")
        self.conn, child_conn = ctx.Pipe()
        self.process = ctx.Process(target=_entry, args=(target, child_conn) + args, daemon=True)
        self.process.start()
        child_conn.close()

    def send(self, *msg):
        self.conn.send(msg)

    def recv(self):
        if not self.conn.poll(TIMEOUT):
            raise ChildError(f"no answer from child {self.process.pid} in {TIMEOUT} s")
        msg = self.conn.recv()
        if isinstance(msg, tuple) and msg and msg[0] == "error":
            raise ChildError(f"child {self.process.pid} failed:\n{msg[1]}")
        return msg

    def join(self):
        self.process.join(TIMEOUT)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
            raise ChildError(f"child {self.process.pid} did not exit")
        return self.process.exitcode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        # Closing the pipe ends a child waiting for a command (EOFError); one that hangs is
        # killed.
        self.conn.close()
        self.process.join(TIMEOUT)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


@contextlib.contextmanager
def importer_child():
    """An `importer` child that must end cleanly when the block ends without an error."""
    with Child(importer) as c:
        yield c
        c.send("exit")
        assert c.recv() == ("bye",)
        assert c.join() == 0


def values_of(child, key):
    """The values of the array an importer child keeps under `key`."""
    child.send("values", key)
    return child.recv()[1]


def _entry(target, conn, *args):
    try:
        target(conn, *args)
    except EOFError:
        pass  # the test closed the pipe: done
    except BaseException:  # noqa: BLE001 - reported to the test
        conn.send(("error", traceback.format_exc()))


def run_python(code, env=None, timeout=TIMEOUT):
    """Runs code in a fresh interpreter (the simulator backend); returns CompletedProcess."""
    full_env = os.environ | {"CAI_BACKEND": "sim"} | (env or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=full_env)


# ---- children ------------------------------------------------------------------------------

def importer(conn):
    """Opens what it is sent and does what it is told, one command at a time:
    ("open", handle, key)           opens the handle (or pickled bytes of one), keeps the array under key, answers its
                                    shape, dtype and device (reads nothing);
    ("open_error", handle)          opens and answers ("raised", type name, message);
    ("queue_copy", key)             copies the array on a new stream (no host wait) and answers
                                    whether that stream is already done;
    ("finish_copy", key)            answers the copied values (waits for them);
    ("fill", key, value)            fills the array and waits for it;
    ("values", key)                 answers the array's values now (waits for its stream);
    ("readonly", key)               answers whether the array is read-only;
    ("sync_error", key)             waits for the array's stream; answers the error if any;
    ("drop", key)                   deletes the array (and the handle's hold on it);
    ("ignore", handle)              drops a handle without opening it;
    ("exit",)                       ends.
    """
    state = ({}, {}, {})
    while _importer_step(conn, state, conn.recv()):
        pass


def _importer_step(conn, state, msg):
    # One command per call, so that no local variable keeps an array alive after it.
    import cai

    arrays, handles, copies = state
    cmd = msg[0]
    if True:
        if cmd == "open":
            _, handle, key = msg
            if isinstance(handle, bytes):
                handle = pickle.loads(handle)
            arr = handle.open()
            arrays[key], handles[key] = arr, handle
            conn.send(("opened", arr.shape, arr.dtype.str, arr.device.id))
        elif cmd == "open_error":
            try:
                handle = pickle.loads(msg[1]) if isinstance(msg[1], bytes) else msg[1]
                handle.open()
            except Exception as e:  # noqa: BLE001
                conn.send(("raised", type(e).__name__, str(e)))
            else:
                conn.send(("opened",))
        elif cmd == "queue_copy":
            arr = arrays[msg[1]]
            s = cai.stream(non_blocking=True)
            out = cai.device_array_like(arr, stream=s)
            cai.ops.copy(out, arr, stream=s)
            copies[msg[1]] = out
            conn.send(("queued", s.query()))
        elif cmd == "finish_copy":
            conn.send(("copied", copies.pop(msg[1]).copy_to_host()))
        elif cmd == "fill":
            cai.ops.fill(arrays[msg[1]], msg[2])
            arrays[msg[1]].synchronize()
            conn.send(("filled",))
        elif cmd == "values":
            conn.send(("values", arrays[msg[1]].copy_to_host()))
        elif cmd == "readonly":
            conn.send(("readonly", arrays[msg[1]].readonly))
        elif cmd == "sync_error":
            try:
                arrays[msg[1]].copy_to_host()
            except Exception as e:  # noqa: BLE001
                conn.send(("raised", type(e).__name__, str(e)))
            else:
                conn.send(("no error",))
        elif cmd == "drop":
            arrays.pop(msg[1], None)
            h = handles.pop(msg[1], None)
            if h is not None:
                h.close()
            conn.send(("dropped",))
        elif cmd == "ignore":
            del msg
            conn.send(("ignored",))
        elif cmd == "records":
            conn.send(("records", cai._cai._ipc_records()))
        elif cmd == "exit":
            conn.send(("bye",))
            return False
    return True


def exporter(conn, values, pending):
    """Makes two device arrays holding `values` and sends pickled handles of both, then waits for
    ("exit", hard): hard exits with os._exit (no cleanup, as a crash). With `pending`, the
    second array's last write is held back by a simulator gate that is never released, so the
    process exits with that work still queued."""
    import cai

    s = cai.stream(non_blocking=True)
    first = cai.to_device(np.asarray(values), stream=s)
    second = cai.to_device(np.asarray(values), stream=s)
    gate = None
    if pending:
        gate = cai.sim.hold(s)
        cai.ops.fill(second, -1, stream=s)
    # Pickled here, as bytes: the test passes them on as they are (a handle object would be
    # pickled anew on the way, a new reference from this process).
    conn.send(("handles", pickle.dumps(first.get_ipc_handle()),
               pickle.dumps(second.get_ipc_handle())))
    _, hard = conn.recv()
    if hard:
        os._exit(0)
    del gate  # releases the stream


def big_exporter(conn, unshared_bytes, shared_bytes):
    """Writes `unshared_bytes` of device memory it never shares, shares a small array and one of
    `shared_bytes`, then waits for ("exit",) and ends with os._exit (as a crash)."""
    import cai

    kept = cai.device_array(unshared_bytes, dtype=np.uint8)
    cai.ops.fill(kept, 1)  # every page written: resident
    small = cai.to_device(np.arange(4.0))
    big = cai.device_array(shared_bytes, dtype=np.uint8)
    cai.ops.fill(big, 7)
    handles = pickle.dumps(small.get_ipc_handle()), pickle.dumps(big.get_ipc_handle())
    cai.synchronize()  # their events recorded and complete: the importer never waits on us
    conn.send(("handles",) + handles)
    conn.recv()
    os._exit(0)


def echo_arrays(conn):
    """Receives arrays through the pipe (the sender's pickler decides how they travel), answers
    with their values, writes value+1 into them and waits for it, then answers again."""
    import cai

    while True:
        msg = conn.recv()
        if msg[0] == "exit":
            conn.send(("bye",))
            return
        arr = msg[1]
        conn.send(("got", type(arr).__name__, arr.copy_to_host()))
        cai.ops.add(arr, cai.to_device(np.ones(arr.shape, arr.dtype)), arr)
        arr.synchronize()
        conn.send(("incremented",))


def queue_worker(q_in, q_out):
    """multiprocessing queue worker: doubles every array it gets in place (no copy back),
    answers "done"; None ends it."""
    import cai

    while True:
        arr = q_in.get()
        if arr is None:
            return
        cai.ops.add(arr, arr, arr)
        arr.synchronize()
        q_out.put(("done", arr.copy_to_host()))


def make_and_send(q_out, q_in, n):
    """Makes an array of arange(n) in this child, sends it through q_out, waits until the
    other side says it is done with it, then exits."""
    import cai

    arr = cai.to_device(np.arange(n, dtype=np.int64))
    q_out.put(arr)
    q_in.get()


def forward(q_in, q_out):
    """Receives an array and sends it on (the same memory, forwarded)."""
    arr = q_in.get()
    q_out.put(arr)
    q_in.get()  # keep it until told


def add_one(arr, q_out):
    """A process target taking an array argument: adds 1 in place, then says "done"."""
    import cai

    cai.ops.add(arr, cai.to_device(np.ones(arr.shape, arr.dtype)), arr)
    arr.synchronize()
    q_out.put("done")


def queue_values(q_in, q_out):
    """multiprocessing queue worker: answers the host copy of every array it gets (a
    numpy.ma.MaskedArray for a masked one); None ends it."""
    while True:
        arr = q_in.get()
        if arr is None:
            return
        q_out.put(arr.copy_to_host())


def mark():
    """This module's MARK: a forked child inherits what the parent set at run time, a spawned
    (or forkserver) child imports the module afresh and has none."""
    return globals().get("MARK")


def report_mark(q):
    """A process target: answers mark() on q."""
    q.put(mark())

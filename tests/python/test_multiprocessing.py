"""cai.multiprocessing (docs/scale-out.md): with it imported, device arrays put on a queue or
passed to a spawned process travel as IPC handles (the receiver writes into the sender's
memory); without it they pickle by copying. Real processes, "spawn" start method."""

import textwrap

import numpy as np
import pytest

import cai
import cai.multiprocessing as mp
import scale_helpers
from scale_helpers import TIMEOUT, run_python


@pytest.fixture
def ctx():
    return mp.get_context("spawn")


def test_reexports_multiprocessing():
    import multiprocessing

    assert set(multiprocessing.__all__) <= set(dir(mp)) and "Process" in mp.__all__
    assert mp.ProcessError is multiprocessing.ProcessError
    assert mp.current_process().pid == multiprocessing.current_process().pid
    assert mp.get_context("fork") is multiprocessing.get_context("fork")


def test_spawn_is_the_default_start_method():
    # A fresh interpreter, where multiprocessing's own default is still unset (fork on Linux
    # before Python 3.14), and where set_start_method() cannot disturb other tests.
    code = textwrap.dedent("""
        import multiprocessing, sys
        sys.path.insert(0, %r)
        import scale_helpers
        import cai.multiprocessing as mp
        if __name__ == "__main__":
            scale_helpers.MARK = "set in the parent"   # a forked child would see it
            assert mp.get_start_method() == mp.get_context().get_start_method() == "spawn"
            q = mp.Queue()
            print(multiprocessing.get_start_method(allow_none=True))  # its own default untouched
            p = mp.Process(target=scale_helpers.report_mark, args=(q,))
            p.start()
            print(q.get(timeout=60), p._popen.method)
            p.join()
            with mp.Pool(1) as pool:                   # spawned workers too
                print(pool.apply(scale_helpers.mark))
            mp.set_start_method("forkserver", force=True)             # this module's default
            p = mp.Process(target=scale_helpers.report_mark, args=(q,))
            p.start()
            print(q.get(timeout=60), p._popen.method, mp.get_start_method())
            p.join()
    """) % (scale_helpers.__file__.rsplit("/", 1)[0],)
    r = run_python(code)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == ["None", "None spawn", "None",
                                     "None forkserver forkserver"], r.stdout


def test_queue_sends_arrays_without_copying(ctx):
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=scale_helpers.queue_worker, args=(q_in, q_out), daemon=True)
    p.start()
    try:
        a = cai.to_device(np.arange(10, dtype=np.float32))
        q_in.put(a)
        assert q_out.get(timeout=TIMEOUT)[0] == "done"
        # The worker doubled the array in place: the same memory, no copy came back.
        np.testing.assert_array_equal(a.copy_to_host(), 2 * np.arange(10))
        view = a[2:8:2]                       # a view travels with its offset and strides
        q_in.put(view)
        tag, seen = q_out.get(timeout=TIMEOUT)
        np.testing.assert_array_equal(seen, [8, 16, 24])
        np.testing.assert_array_equal(a.copy_to_host(),
                                      [0, 2, 8, 6, 16, 10, 24, 14, 16, 18])
    finally:
        q_in.put(None)
        p.join(TIMEOUT)
    assert p.exitcode == 0


def test_a_mask_travels_on_a_queue(ctx):
    q_in, q_out = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=scale_helpers.queue_values, args=(q_in, q_out), daemon=True)
    p.start()
    try:
        data = cai.to_device(np.arange(6.0))
        valid = np.array([1, 0, 1, 1, 0, 1], np.int8)
        masked = cai.from_cuda_array_interface(
            data.__cuda_array_interface__ | {"mask": cai.to_device(valid)}, owner=data)
        q_in.put(masked[::2])
        got = q_out.get(timeout=TIMEOUT)
        assert isinstance(got, np.ma.MaskedArray)
        np.testing.assert_array_equal(got.data, [0.0, 2.0, 4.0])
        np.testing.assert_array_equal(got.mask, valid[::2] == 0)
    finally:
        q_in.put(None)
        p.join(TIMEOUT)
    assert p.exitcode == 0


def test_process_arguments_and_arrays_coming_back(ctx):
    # An array as an argument of a spawned process.
    a = cai.to_device(np.zeros((2, 3), np.float64))
    done = ctx.Queue()
    p = ctx.Process(target=scale_helpers.add_one, args=(a.T, done), daemon=True)
    p.start()
    assert done.get(timeout=TIMEOUT) == "done"
    p.join(TIMEOUT)
    np.testing.assert_array_equal(a.copy_to_host(), np.ones((2, 3)))
    # The child ended with os._exit (its arguments never released): cai gave its reference
    # back at exit all the same, so the memory is not held for it any more.
    assert cai._cai._ipc_exports_in_use() == 0

    # An array made by the child comes back on a queue; the child keeps it alive until told.
    q_out, q_in = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=scale_helpers.make_and_send, args=(q_out, q_in, 5), daemon=True)
    p.start()
    got = q_out.get(timeout=TIMEOUT)
    assert isinstance(got, cai.DeviceNDArray)
    np.testing.assert_array_equal(got.copy_to_host(), np.arange(5))
    cai.ops.fill(got, 4)                      # writes into the child's memory
    got.synchronize()
    del got
    q_in.put("done")
    p.join(TIMEOUT)
    assert p.exitcode == 0


def test_arrays_are_forwarded_to_a_third_process(ctx):
    a_to_fwd, fwd_to_worker = ctx.Queue(), ctx.Queue()
    results = ctx.Queue()
    fwd = ctx.Process(target=scale_helpers.forward, args=(a_to_fwd, fwd_to_worker), daemon=True)
    worker = ctx.Process(target=scale_helpers.queue_worker, args=(fwd_to_worker, results),
                         daemon=True)
    fwd.start()
    worker.start()
    try:
        a = cai.to_device(np.arange(4, dtype=np.int64))
        a_to_fwd.put(a)
        tag, seen = results.get(timeout=TIMEOUT)
        np.testing.assert_array_equal(seen, 2 * np.arange(4))
        np.testing.assert_array_equal(a.copy_to_host(), 2 * np.arange(4))
    finally:
        a_to_fwd.put("release")
        fwd_to_worker.put(None)
        fwd.join(TIMEOUT)
        worker.join(TIMEOUT)


def test_without_the_import_arrays_pickle_by_copying():
    # A fresh interpreter: the registration is process-wide once cai.multiprocessing is imported.
    code = textwrap.dedent("""
        import multiprocessing, sys
        import numpy as np
        import cai
        sys.path.insert(0, %r)
        import scale_helpers
        if __name__ == "__main__":
            assert "cai.multiprocessing" not in sys.modules
            with scale_helpers.Child(scale_helpers.echo_arrays) as c:
                a = cai.to_device(np.arange(3))
                c.send("array", a)
                tag, kind, values = c.recv()
                assert kind == "DeviceNDArray" and list(values) == [0, 1, 2], (kind, values)
                assert c.recv() == ("incremented",)
                # The child wrote into its own copy: this array is unchanged.
                assert list(a.copy_to_host()) == [0, 1, 2]
                import cai.multiprocessing
                c.send("array", a)
                c.recv()
                c.recv()
                assert list(a.copy_to_host()) == [1, 2, 3]   # now shared
                c.send("exit")
                c.recv()
            print("ok")
    """) % (scale_helpers.__file__.rsplit("/", 1)[0],)
    r = run_python(code)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr

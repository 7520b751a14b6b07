"""IPC between real processes on the simulator (docs/scale-out.md): get_ipc_handle() in one
process, open() in another, on the same memory; ordering through an interprocess event
without host waits; a reference count shared between processes; clear errors for bad handles.

The simulator's device memory is a shared-memory segment that the importer maps at another
address, so everything here runs across two real processes (children started with "spawn").
"""

import gc
import os
import pickle

import numpy as np
import pytest

import cai
from helpers import run_isolated
from scale_helpers import Child, big_exporter, exporter, importer, importer_child, values_of


@pytest.fixture
def child():
    with importer_child() as c:
        yield c


def test_open_in_another_process_shares_memory(child):
    a = cai.to_device(np.arange(12, dtype=np.float32).reshape(3, 4))
    h = a.get_ipc_handle()
    assert isinstance(h, cai.IpcHandle)
    assert (h.shape, h.dtype, h.offset, h.exporter_pid) == ((3, 4), np.float32, 0, os.getpid())
    child.send("open", h, "a")
    assert child.recv() == ("opened", (3, 4), "<f4", 0)
    np.testing.assert_array_equal(values_of(child, "a"), np.arange(12).reshape(3, 4))
    # The importer writes; the exporter sees it (same memory, not a copy).
    child.send("fill", "a", 5)
    assert child.recv() == ("filled",)
    np.testing.assert_array_equal(a.copy_to_host(), np.full((3, 4), 5, np.float32))


@pytest.mark.parametrize("index", [
    (slice(3, 7),),
    (slice(None, None, 2),),
    (slice(None, None, -1),),
    "T",
    (slice(1, 3), slice(None, None, -2)),
], ids=["offset", "stride", "reversed", "transposed", "2d-view"])
def test_views_carry_offset_and_strides(child, index):
    base = np.arange(40, dtype=np.int32).reshape(5, 8) if index == "T" or len(index) == 2 \
        else np.arange(40, dtype=np.int32)
    a = cai.to_device(base)
    view = a.T if index == "T" else a[index]
    expected = base.T if index == "T" else base[index]
    h = view.get_ipc_handle()
    assert h.offset == view.ptr - a.ptr
    assert h.strides == view.strides
    child.send("open", h, "v")
    assert child.recv()[1] == expected.shape
    np.testing.assert_array_equal(values_of(child, "v"), expected)


def test_a_readonly_array_is_opened_readonly(child):
    a = cai.to_device(np.arange(8, dtype=np.float32))
    d = dict(a.__cuda_array_interface__)
    d["data"] = (a.ptr, True)
    ro = cai.from_cuda_array_interface(d, owner=a)
    assert ro.readonly
    h = ro.get_ipc_handle()
    assert h.readonly and not a.get_ipc_handle().readonly
    assert pickle.loads(pickle.dumps(h)).readonly
    for key, sent in (("direct", h), ("pickled", pickle.dumps(h))):
        child.send("open", sent, key)
        assert child.recv()[0] == "opened"
        child.send("readonly", key)
        assert child.recv() == ("readonly", True), key
    child.send("open", a.get_ipc_handle(), "writable")
    child.recv()
    child.send("readonly", "writable")
    assert child.recv() == ("readonly", False)


def test_exporter_work_is_ordered_before_the_importer_without_host_waits(child):
    # Nothing may be freed while the gate holds a stream: a free waits for all queued work
    # (as cudaFree does), so release earlier tests' memory first.
    gc.collect()
    cai.ipc_collect()
    s = cai.stream(non_blocking=True)
    a = cai.to_device(np.zeros(64, np.int64), stream=s)
    s.synchronize()
    with cai.sim.hold(s):                     # the exporter's next write stays pending
        cai.ops.fill(a, 7, stream=s)
        h = a.get_ipc_handle()                # returns at once: the fill is still queued
        assert not s.query()
        child.send("open", h, "a")
        child.recv()
        child.send("queue_copy", "a")          # the importer's first use, on its own stream
        assert child.recv() == ("queued", False)  # waits on the exporter's event
    child.send("finish_copy", "a")
    tag, values = child.recv()
    np.testing.assert_array_equal(values, np.full(64, 7))


def test_memory_outlives_the_exporters_last_reference(child):
    a = cai.to_device(np.arange(1000, dtype=np.float64))
    payload = pickle.dumps(a[10:20].get_ipc_handle())
    del a                                     # the exporter's last reference goes first
    gc.collect()
    assert cai.ipc_collect() == 0             # a reference is out (the pickled handle)
    child.send("open", pickle.loads(payload), "a")
    child.recv()
    np.testing.assert_array_equal(values_of(child, "a"), np.arange(10, 20))
    assert cai._cai._ipc_exports_in_use() == 1
    assert cai.ipc_collect() == 0             # held open by the importer
    child.send("drop", "a")
    child.recv()
    assert cai._cai._ipc_exports_in_use() == 0
    assert cai.ipc_collect() == 1             # every reference came back: freed now


def test_a_handle_dropped_unopened_gives_its_reference_back(child):
    a = cai.to_device(np.arange(8))
    h = a.get_ipc_handle()
    child.send("ignore", h)                   # received, never opened, dropped
    assert child.recv() == ("ignored",)
    assert cai._cai._ipc_exports_in_use() == 0
    received = pickle.loads(pickle.dumps(h))  # the same in this process
    assert cai._cai._ipc_exports_in_use() == 1
    del received
    assert cai._cai._ipc_exports_in_use() == 0
    del h, a
    gc.collect()
    assert cai.ipc_collect() == 1


def test_with_block_opens_and_closes():
    a = cai.to_device(np.arange(6))
    h = a.get_ipc_handle()
    with h as same:                           # in the exporter: a view of the same memory
        cai.ops.fill(same, 3)
        assert h.is_open
    assert not h.is_open
    np.testing.assert_array_equal(same.copy_to_host(), np.full(6, 3))  # safe after close
    np.testing.assert_array_equal(a.copy_to_host(), np.full(6, 3))


def test_zero_size_array(child):
    a = cai.device_array((0, 3), dtype=np.float32)
    child.send("open", a.get_ipc_handle(), "z")
    assert child.recv() == ("opened", (0, 3), "<f4", 0)


def test_bad_handles_fail_clearly(child):
    a = cai.to_device(np.arange(4))
    h = a.get_ipc_handle()
    reduced = h.__reduce__()

    def forged(**changes):
        fields = list(reduced[1])
        names = {"version": 0, "boot_id": 1, "backend": 2, "ticket": 20}
        for k, v in changes.items():
            fields[names[k]] = v
        return reduced[0](*fields)

    child.send("open_error", forged(boot_id="00000000-0000-0000-0000-000000000000"))
    tag, kind, msg = child.recv()
    assert kind == "ValueError" and "another machine" in msg
    child.send("open_error", forged(backend="cuda"))
    tag, kind, msg = child.recv()
    assert kind == "ValueError" and '"cuda" backend' in msg
    with pytest.raises(ValueError, match="another version of cai"):
        forged(version=99)
    forged()  # gives back the reference that __reduce__ took

    # Opened twice in one process: the same pickled bytes loaded twice. (Sending a handle
    # object pickles it anew: a new reference. Bytes are sent as they are.)
    payload = pickle.dumps(h)
    child.send("open", payload, "first")
    child.recv()
    child.send("open_error", payload)
    tag, kind, msg = child.recv()
    assert kind == "ValueError" and "opened in this process already" in msg

    # The same pickled bytes opened by another process.
    with Child(importer) as other:
        other.send("open_error", payload)
        tag, kind, msg = other.recv()
        assert kind == "ValueError" and "by another process" in msg
        other.send("exit")
        other.recv()

    # One handle object: open twice, and open after close.
    mine = pickle.loads(pickle.dumps(h))
    mine.open()
    with pytest.raises(ValueError, match="open already"):
        mine.open()
    mine.close()
    with pytest.raises(ValueError, match="closed"):
        mine.open()


def test_only_device_memory_can_be_shared():
    host = np.arange(4.0)
    desc = dict(host.__array_interface__)
    desc["version"] = 3
    desc["strides"] = None
    foreign = cai.from_cuda_array_interface(desc, owner=host)
    with pytest.raises(ValueError, match="only device memory"):
        foreign.get_ipc_handle()


def test_exporter_death():
    """Memory opened before the exporter died keeps working; a handle not yet opened fails
    clearly; work the exporter left pending is reported as an error, never a hang."""
    with Child(exporter, [1.0, 2.0, 3.0], False) as exp, Child(importer) as imp:
        _, h1, h2 = exp.recv()
        imp.send("open", h1, "a")
        imp.recv()
        exp.send("exit", True)                # os._exit: no cleanup at all
        exp.join()
        np.testing.assert_array_equal(values_of(imp, "a"), [1.0, 2.0, 3.0])
        imp.send("fill", "a", 9)              # still writable
        assert imp.recv() == ("filled",)
        np.testing.assert_array_equal(values_of(imp, "a"), [9, 9, 9])
        imp.send("open_error", h2)
        tag, kind, msg = imp.recv()
        assert kind == "DeviceError" and "has exited" in msg
        imp.send("exit")
        imp.recv()

    with Child(exporter, [1.0, 2.0], True) as exp, Child(importer) as imp:
        _, h1, h2 = exp.recv()
        imp.send("open", h2, "b")             # its last write is held in the exporter
        imp.recv()
        exp.send("exit", True)                # dies with that write never done
        exp.join()
        imp.send("sync_error", "b")
        tag, kind, msg = imp.recv()
        assert kind == "DeviceError" and "exited before the event completed" in msg
        imp.send("exit")
        imp.recv()


def _shmem_kib():
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Shmem:"))


def test_an_exited_exporter_leaves_only_what_was_shared():
    """An importer that holds memory of an exited exporter keeps that memory, not the
    exporter's other device memory (issue: 32 shared bytes kept 256 MiB resident). Blocks of
    2 MiB or more are segments of their own; the 64 MiB block never shared must be gone."""
    with Child(big_exporter, 64 << 20, 4 << 20) as exp:
        _, small_bytes, big_bytes = exp.recv()
        small = pickle.loads(small_bytes).open()
        big = pickle.loads(big_bytes).open()
        before = _shmem_kib()
        exp.send("exit")
        exp.join()
    after = _shmem_kib()
    assert before - after >= 48 * 1024, (before, after)
    np.testing.assert_array_equal(small.copy_to_host(), np.arange(4.0))
    assert (big.copy_to_host() == 7).all() and big.nbytes == 4 << 20


# ----- masks ------------------------------------------------------------------------------------

def _masked(values, valid):
    """A device array of `values` with a device mask of `valid`, and that mask."""
    data, mask = cai.to_device(values), cai.to_device(valid)
    desc = data.__cuda_array_interface__ | {"mask": mask}
    return cai.from_cuda_array_interface(desc, owner=data), mask


def test_a_mask_travels_with_the_handle(child):
    valid = np.array([1, 0, 2, 1, 0, 1], np.uint8)       # 2 is as true as 1
    arr, mask = _masked(np.arange(6.0), valid)
    child.send("open", arr[1:].get_ipc_handle(), "m")    # a view: the mask's offset too
    assert child.recv() == ("opened", (5,), "<f8", 0)
    got = values_of(child, "m")
    assert isinstance(got, np.ma.MaskedArray)
    np.testing.assert_array_equal(got.data, np.arange(1.0, 6.0))
    np.testing.assert_array_equal(got.mask, valid[1:] == 0)
    cai.ops.fill(mask, 1)                                 # the mask is shared memory too
    mask.synchronize()
    assert not values_of(child, "m").mask.any()


def test_a_masked_handle_holds_and_gives_back_both_references():
    arr, mask = _masked(np.arange(4.0), np.array([True, False, True, True]))
    h = arr.get_ipc_handle()
    received = pickle.loads(pickle.dumps(h))
    assert cai._cai._ipc_exports_in_use() == 2            # the array's memory and the mask's
    del received                                          # dropped unopened: both come back
    assert cai._cai._ipc_exports_in_use() == 0
    opened = pickle.loads(pickle.dumps(h)).open()         # here: views of the same memory
    assert opened.ptr == arr.ptr and opened.mask.ptr == mask.ptr
    assert cai._cai._ipc_exports_in_use() == 2
    del opened
    cai.synchronize()  # the references go back after the work queued on the views
    assert cai._cai._ipc_exports_in_use() == 0


def test_a_forged_mask_is_refused():
    arr, _ = _masked(np.arange(6.0), np.ones(6, np.uint8))
    h = arr.get_ipc_handle()

    def forged(mask=None, **mask_changes):
        rebuild, fields = h.__reduce__()                  # new references (tickets) each time
        fields = list(fields)
        if mask is None:
            mask = list(fields[21])
            for k, v in mask_changes.items():
                mask[{"dtype": 9, "shape": 10, "strides": 11}[k]] = v
            mask = tuple(mask)
        try:
            return rebuild(*fields[:21], mask)
        except Exception:
            rebuild(*fields)                              # gives those references back
            raise

    with pytest.raises(ValueError, match=r"IpcHandle.open\(\): mask: shape \(2, 3\) differs "
                                         r"from the data shape \(6,\)"):
        forged(shape=(2, 3), strides=(3, 1)).open()
    with pytest.raises(ValueError, match=r"mask: typestr '\|V1' is not bool or integer"):
        forged(dtype=np.dtype("V1")).open()
    with pytest.raises(TypeError, match="mask: expected None or the mask's pickled fields"):
        forged("not fields")
    rebuild, fields = h.__reduce__()
    nested = fields
    for _ in range(9):
        nested = nested[:21] + (nested,)
    with pytest.raises(ValueError, match="masks nested more than 8 levels deep"):
        forged(nested)
    rebuild(*fields)                                      # the references `nested` copied
    cai.synchronize()  # the references go back after the work queued on the views
    assert cai._cai._ipc_exports_in_use() == 0


# ----- exit ----------------------------------------------------------------------------------

@pytest.mark.parametrize("pickled", [False, True])
def test_a_shared_view_of_a_python_owner_leaks_nothing_at_exit(pickled):
    # The export keeps the view's Python owner (here a DeviceNDArray) alive for the importers;
    # at exit it must let go of it while the interpreter still runs (nanobind reports any
    # instance alive after that as leaked).
    r = run_isolated(f"""
        import pickle
        import numpy as np
        import cai
        owner = cai.to_device(np.arange(4.0))
        view = cai.from_cuda_array_interface(owner.__cuda_array_interface__, owner=owner)
        handle = view.get_ipc_handle()
        payload = pickle.dumps(handle) if {pickled} else None   # a reference still out
        masked = cai.from_cuda_array_interface(
            owner.__cuda_array_interface__ | {{"mask": cai.to_device(np.ones(4, bool))}},
            owner=owner)
        masked_handle = masked.get_ipc_handle()
        print("ok")
    """)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    assert "leaked" not in r.stderr, r.stderr


# ----- references and owners -----------------------------------------------------------------

def test_a_reference_goes_back_after_the_importers_work():
    # The exporter may free or reuse the memory as soon as every reference is back: the
    # reference of an opened handle goes back once the work queued on its views has run.
    a = cai.to_device(np.arange(64.0))
    a.synchronize()
    s = cai.stream(non_blocking=True)
    opened = pickle.loads(pickle.dumps(a.get_ipc_handle())).open(stream=s)
    assert cai._cai._ipc_exports_in_use() == 1
    with cai.sim.hold(s):                       # the importer's work is still queued...
        cai.ops.fill(opened, 7.0)
        del opened                              # ...when its last view goes
        gc.collect()
        assert cai._cai._ipc_exports_in_use() == 1
    s.synchronize()
    assert cai._cai._ipc_exports_in_use() == 0
    np.testing.assert_array_equal(a.copy_to_host(), np.full(64, 7.0))


def test_collecting_and_sharing_wait_for_no_unrelated_stream():
    """ipc_collect(), get_ipc_handle() and pickling free the exports given back; the driver's
    free waits for every stream of the device, so they must not free on the caller's thread
    while an unrelated stream is busy (issue: each waited 1.45 s for a delayed stream). In a
    fresh interpreter: a call that waited for the held stream would hang it."""
    r = run_isolated("""
        import gc, pickle
        import numpy as np, cai
        from scale_helpers import Child, exporter, importer_child
        with importer_child() as child:
            a = cai.to_device(np.arange(8.0))
            child.send("open", a.get_ipc_handle(), "a")
            child.recv()
            child.send("drop", "a")               # the importer gives its reference back
            child.recv()
            del a
            gc.collect()
            other = cai.to_device(np.ones(4))
            s = cai.stream()
            with cai.sim.hold(s):
                cai.ops.fill(cai.device_array(8, stream=s), 1.0)   # queued behind the hold
                cai.ipc_collect()
                h = other.get_ipc_handle()
                pickle.dumps(h)
                assert not s.query()
            cai.synchronize()
            print(cai._cai._ipc_exports_in_use())  # only `other` is still shared
        # The importer's side: unmapping memory of another process waits for the context.
        with Child(exporter, [1.0, 2.0], False) as exp:
            _, h1, h2 = exp.recv()
            b = pickle.loads(h1).open()
            assert b.copy_to_host().tolist() == [1.0, 2.0]
            with cai.sim.hold(s):
                cai.ops.fill(cai.device_array(8, stream=s), 1.0)
                del b
                gc.collect()                        # closes the mapping: not on this thread
                assert not s.query()
            cai.synchronize()
            exp.send("exit", False)
            exp.join()
        print("closed")
    """, timeout=120, pythonpath=[os.path.dirname(__file__)])
    assert r.returncode == 0 and r.stdout.split()[-2:] == ["1", "closed"], (r.stdout,
                                                                          r.stderr[-2000:])


def test_an_importer_keeps_nothing_of_the_handles_it_dropped(child):
    """The importer's records of opened handles are pruned when their arrays go (issue: about
    70 bytes per opened handle, forever), and the exporter's handle numbers and ticket cells
    are reused (issue: 2^26 handles per process life)."""
    a = cai.to_device(np.arange(16.0))
    for i in range(300):
        child.send("open", a.get_ipc_handle(), "x")
        child.recv()
        child.send("drop", "x")
        child.recv()
    child.send("records")
    _, records = child.recv()
    assert records["opened"] == 0
    assert records["imports"] <= 1 and records["leases"] <= 1 and records["controls"] <= 1
    cai.ipc_collect()
    assert cai._cai._ipc_exports_in_use() == 0


def test_two_views_of_one_allocation_keep_both_owners():
    # Two producers' views of one allocation (two parts of a pool's block): the export keeps
    # the owner of each, not only the first one's.
    import weakref
    from helpers import Producer

    class Owner:
        pass

    base = cai.to_device(np.arange(64.0))
    owners = [Owner(), Owner()]
    alive = [weakref.ref(o) for o in owners]
    halves = [cai.from_cuda_array_interface(Producer(base[i * 32:(i + 1) * 32])
                                            .__cuda_array_interface__, owner=owners[i])
              for i in range(2)]
    handles = [pickle.dumps(h.get_ipc_handle()) for h in halves]
    del halves, owners
    gc.collect()
    assert all(r() is not None for r in alive)   # both held while references are out
    for blob in handles:
        pickle.loads(blob)                       # received and dropped: the reference comes back
    del handles
    gc.collect()
    cai.ipc_collect()
    gc.collect()
    assert all(r() is None for r in alive)


def test_each_shared_view_carries_its_own_stream_ordering(child):
    # A fill queued on A, then a view shared from A and another view of the same allocation
    # shared from an idle stream B: the first handle still waits for A's fill.
    A, B = cai.stream(non_blocking=True), cai.stream(non_blocking=True)
    a = cai.device_array(1024, stream=A)
    cai.ops.fill(a, 0.0)
    a.synchronize()
    cai.sim.delay(A, 0.3)
    cai.ops.fill(a, 5.0)
    first = a[:512].get_ipc_handle()
    # Another view of the same memory, whose producer names B (nothing queued on it).
    other = cai.from_cuda_array_interface(
        a[512:].__cuda_array_interface__ | {"stream": B.handle}, owner=a)
    second = other.get_ipc_handle()
    child.send("open", first, "x")
    assert child.recv()[0] == "opened"
    np.testing.assert_array_equal(values_of(child, "x"), np.full(512, 5.0))
    del second


# Numba's open_ipc_array: a driver IPC handle (CuPy's ipcGetMemHandle, Numba's, IpcHandle.handle)
# opened with the shape and dtype the user says; the array must lie inside the mapping.
RAW_OPEN = """
import gc, cai, numpy as np
raw = bytes.fromhex({hex!r})
calls = lambda name: cai.sim.driver_calls().get(name, 0)
with cai.open_ipc_array(raw, (3, 4), np.float32, offset={offset}) as d:
    print(d.copy_to_host().tolist())
    cai.ops.fill(d, 5)
    d.synchronize()
with cai.open_ipc_array(tuple(raw), (4, 3), "f4", strides=(4, 16), offset={offset}) as t:
    print(t.copy_to_host()[:, 0].tolist())
del d, t
gc.collect()
cai.close()  # waits for the deferred unmaps
print("mappings", calls("cuIpcOpenMemHandle"), calls("cuIpcCloseMemHandle"))
for args in [((1 << 20,), np.float32, None, 0), ((4,), np.float32, None, 1 << 21),
             ((4,), np.float32, (-4,), 0)]:
    try:
        with cai.open_ipc_array(raw, *args):
            pass
    except ValueError as e:
        print("refused", "reaches outside" in str(e))
print("mappings", calls("cuIpcOpenMemHandle"), calls("cuIpcCloseMemHandle") + 0)
for bad in [raw[:10], object()]:
    try:
        with cai.open_ipc_array(bad, (1,), np.float32):
            pass
    except (TypeError, ValueError) as e:
        print(type(e).__name__, "CUipcMemHandle" in str(e))
try:
    with cai.open_ipc_array(bytes(64), (1,), np.float32):
        pass
except cai.DeviceError as e:
    print("DeviceError", "cuIpcOpenMemHandle" in str(e))
"""


def test_open_ipc_array_maps_a_driver_handle_with_the_callers_shape():
    from scale_helpers import run_python

    base = np.arange(40, dtype=np.float32)
    a = cai.to_device(base)
    v = a[4:16].reshape(3, 4)
    h = v.get_ipc_handle()
    assert len(h.handle) == 64 and h.offset == 16
    r = run_python(RAW_OPEN.format(hex=h.handle.hex(), offset=h.offset))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == str(base[4:16].reshape(3, 4).tolist())
    assert lines[1] == "[5.0, 5.0, 5.0, 5.0]"  # column 0 of the F-order view, after the fill
    # Each opening closed its mapping once its arrays were gone; refused ones at once.
    assert lines[2] == "mappings 2 2"
    assert lines[3:6] == ["refused True"] * 3
    assert lines[6] == "mappings 5 5"
    assert lines[7:] == ["ValueError True", "TypeError True", "DeviceError True"]
    # The importer wrote into the exporter's memory (no copy).
    expected = base.copy()
    expected[4:16] = 5
    np.testing.assert_array_equal(a.copy_to_host(), expected)
    assert cai.IpcHandle.handle.__doc__
    assert cai.to_device(np.ones(0)).get_ipc_handle().handle is None

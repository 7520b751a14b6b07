"""Several devices in one process (docs/scale-out.md), on two simulated devices with distinct
memory: cai.Device, allocation on the current device, the device of arrays, streams and
events, peer copies, operations that refuse to mix devices, imports of another device's
pointer, IPC between processes on device 1.

The suite's process has one simulated device (the simulator reads CAI_SIM_DEVICES once), so
this file runs itself in a fresh pytest with CAI_SIM_DEVICES=2: the single test that the main
run collects, test_with_two_simulated_devices, fails with that run's report if any case fails.
"""

import os
import pickle
import subprocess
import sys
import threading

import numpy as np
import pytest

import cai
from helpers import CaiOnly, DictProducer, DLWrapper
from scale_helpers import TIMEOUT, Child, importer

TWO = cai.device_count() >= 2


def two_devices(fn):
    """A case of the two-device run (defined only there)."""
    return fn if TWO else None


if not TWO:
    def test_with_two_simulated_devices():
        r = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__],
            capture_output=True, text=True, timeout=10 * TIMEOUT,
            env=os.environ | {"CAI_BACKEND": "sim", "CAI_SIM_DEVICES": "2"},
            cwd=os.path.dirname(__file__))
        assert r.returncode == 0, r.stdout[-8000:] + r.stderr[-2000:]
        assert " passed" in r.stdout and "skipped" not in r.stdout, r.stdout[-2000:]


@two_devices
def test_devices_and_the_current_device():
    assert cai.device_count() == 2
    assert cai.current_device() == cai.Device(0) == cai.Device()
    d1 = cai.Device(1)
    assert d1.id == 1 and int(d1) == 1 and d1 != cai.Device(0)
    assert len({cai.Device(0), cai.Device(0), d1}) == 2
    assert repr(d1) == "<cai.Device 1 (simulator)>"
    assert d1.uuid != cai.Device(0).uuid and d1.name
    assert pickle.loads(pickle.dumps(d1)) == d1
    assert cai.Device(cai.Device(1)) == d1


@two_devices
@pytest.mark.parametrize("bad, error, text", [
    (2, ValueError, "device 2 out of range; the simulator has 2 devices (CAI_SIM_DEVICES=2)"),
    (-1, ValueError, "device -1 out of range"),
    (2**70, ValueError, "does not fit in a signed 64-bit integer"),
    (True, TypeError, "got bool"),
    ("0", TypeError, "got str"),
])
def test_bad_device_numbers(bad, error, text):
    with pytest.raises(error) as e:
        cai.Device(bad)
    assert text in str(e.value)


@two_devices
def test_with_device_restores_the_previous_one_even_on_errors():
    with cai.Device(1) as d:
        assert cai.current_device() == d == cai.Device(1)
        with cai.Device(0):
            assert cai.current_device() == cai.Device(0)
            with cai.Device(0):               # the same device again nests too
                pass
            assert cai.current_device() == cai.Device(0)
        assert cai.current_device() == cai.Device(1)
        with pytest.raises(KeyError):
            with cai.Device(0):
                raise KeyError
        assert cai.current_device() == cai.Device(1)
    assert cai.current_device() == cai.Device(0)


@two_devices
def test_the_current_device_is_per_thread():
    inside, leave = threading.Event(), threading.Event()
    seen = []

    def other():
        with cai.Device(1):
            seen.append(cai.current_device().id)
            inside.set()
            leave.wait(TIMEOUT)
        seen.append(cai.current_device().id)

    t = threading.Thread(target=other)
    t.start()
    assert inside.wait(TIMEOUT)
    assert cai.current_device() == cai.Device(0)   # this thread is not affected
    leave.set()
    t.join(TIMEOUT)
    assert seen == [1, 0]


@two_devices
def test_arrays_and_streams_are_made_on_the_current_device():
    a0 = cai.device_array(8)
    with cai.Device(1):
        a1 = cai.device_array(8)
        s1 = cai.stream()
        z1 = cai.device_array(0)
        assert cai.default_stream().device == cai.Device(1)
    assert a0.device == cai.Device(0) and a1.device == cai.Device(1)
    assert a0.__dlpack_device__() == (2, 0) and a1.__dlpack_device__() == (2, 1)
    assert s1.device == cai.Device(1) and cai.stream().device == cai.Device(0)
    assert z1.size == 0
    # Distinct memory: the two devices' allocations do not come from one pool.
    assert abs(a1.ptr - a0.ptr) >= 2**30


@two_devices
@pytest.mark.parametrize("make", [
    lambda s: cai.device_array(8, stream=s),
    lambda s: cai.device_array((2, 4), strides=(32, 8), stream=s),
    lambda s: cai.device_array_like(np.zeros(8), stream=s),
    lambda s: cai.device_array_like(cai.device_array(8), stream=s),
    lambda s: cai.to_device(np.arange(8.0), stream=s),
])
def test_a_new_array_refuses_a_stream_of_another_device(make):
    s0 = cai.stream()
    with cai.Device(1):
        # The new array's device: the current one, or the like-array's (its message names it).
        with pytest.raises(ValueError, match=r"\(\): stream 0x[0-9a-f]+ belongs to device 0 but "
                                             r"(the new array is allocated on device 1 \(the "
                                             r"current device\)|ary is on device 1); pass a stream "
                                             r"of device 1"):
            make(s0)
        s1 = cai.stream()
        a1 = make(s1)                                     # its own device's stream: fine
        cai.ops.fill(a1, 2.0)
        assert a1.device == cai.Device(1) and a1.stream.handle == s1.handle
        np.testing.assert_array_equal(a1.copy_to_host().ravel(), np.full(8, 2.0))
    assert make(s0).device == cai.Device(0)
    assert make(0).device == cai.Device(0)


@two_devices
def test_events_belong_to_a_device():
    e0 = cai.event()
    with cai.Device(1):
        s1 = cai.stream()
        e1 = cai.event()
        e1.record(s1)
    with pytest.raises(cai.DeviceError, match="belongs to device 0 but stream .* to device 1"):
        e0.record(s1)
    e1.wait(cai.stream())                     # a stream may wait on another device's event
    e1.synchronize()


@two_devices
@pytest.mark.parametrize("src_index, dst_index", [
    (np.s_[:], np.s_[:]),                     # dense: one peer copy
    (np.s_[::2], np.s_[:8]),                  # strided source
    (np.s_[:7:-1], np.s_[::2]),               # reversed into strided
], ids=["dense", "strided", "reversed"])
def test_copy_between_devices(src_index, dst_index):
    host = np.arange(16, dtype=np.float64)
    a0 = cai.to_device(host)
    with cai.Device(1):
        b1 = cai.to_device(np.zeros(16))
    cai.ops.copy(b1[dst_index], a0[src_index])
    expected = np.zeros(16)
    expected[dst_index] = host[src_index]
    np.testing.assert_array_equal(b1.copy_to_host(), expected)
    assert b1.device == cai.Device(1)
    # And back, from a 2-d transposed view.
    with cai.Device(1):
        t1 = cai.to_device(np.arange(6.0).reshape(2, 3))
    out = cai.device_array((3, 2))
    cai.ops.copy(out, t1.T)
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(6.0).reshape(2, 3).T)


@two_devices
def test_copy_between_devices_is_ordered_both_ways(streams):
    a, _ = streams                            # a stream of device 0
    src = cai.device_array(256, dtype=np.int32, stream=a)
    cai.ops.fill(src, 0, stream=a)
    with cai.Device(1):
        dst = cai.device_array(256, dtype=np.int32)
    cai.sim.delay(a, 0.05)                    # the write below is still queued at the copy
    cai.ops.fill(src, 7, stream=a)
    cai.ops.copy(dst, src)                    # on device 1's default stream
    cai.ops.fill(src, 1, stream=a)            # must not overtake the copy's read (race detector)
    np.testing.assert_array_equal(dst.copy_to_host(), np.full(256, 7))
    np.testing.assert_array_equal(src.copy_to_host(), np.full(256, 1))


@two_devices
def test_operations_refuse_to_mix_devices():
    a0 = cai.to_device(np.ones(4))
    out0 = cai.device_array(4)
    with cai.Device(1):
        b1 = cai.to_device(np.ones(4))
        s1 = cai.stream()
    with pytest.raises(ValueError, match="a is on device 0 but b is on device 1"):
        cai.ops.add(a0, b1, out0)
    with pytest.raises(ValueError, match="a is on device 1 but out is on device 0"):
        cai.ops.add(b1, b1, out0)
    with pytest.raises(ValueError, match="belongs to device 1 but dst is on device 0"):
        cai.ops.fill(a0, 2, stream=s1)
    with pytest.raises(ValueError, match="runs on the destination's device 0"):
        cai.ops.copy(out0, b1, stream=s1)
    np.testing.assert_array_equal(out0.copy_to_host().size, 4)


@two_devices
def test_operations_run_on_their_arrays_device():
    with cai.Device(1):
        b1 = cai.to_device(np.arange(4.0))    # its stream: the default stream of device 1
    cai.ops.fill(b1, 2)                       # device 0 current: the op switches to 1
    cai.ops.add(b1, b1, b1)
    b1[1:3] = 5.0
    np.testing.assert_array_equal(b1.copy_to_host(), [4, 5, 5, 4])
    b1.synchronize()
    assert cai.current_device() == cai.Device(0)


@two_devices
def test_importing_a_pointer_of_another_device():
    with cai.Device(1):
        b1 = cai.to_device(np.arange(5, dtype=np.int16))
    desc = dict(b1.__cuda_array_interface__)
    desc["stream"] = None
    imported = cai.as_cuda_array(DictProducer(desc, keep=b1))   # device 0 is current
    assert imported.device == cai.Device(1)
    assert imported.__dlpack_device__() == (2, 1)
    cai.ops.fill(imported, 3)
    np.testing.assert_array_equal(b1.copy_to_host(), np.full(5, 3))
    via_dlpack = cai.from_dlpack(b1)
    assert via_dlpack.device == cai.Device(1)


@two_devices
def test_an_import_ordered_by_an_event_of_the_producers_device():
    # A producer busy on a stream of device 1 while device 0 is current: the import's event,
    # and the ordering events after it, are made on device 1 (an event of device 0 cannot be
    # recorded on a stream of device 1).
    with cai.Device(1):
        s = cai.stream(non_blocking=True)
        x = cai.to_device(np.zeros(64, np.float32), stream=s)
        s.synchronize()
    with cai.sim.hold(s):
        cai.ops.fill(x, 4.0)                            # queued on device 1's stream
        imported = cai.as_cuda_array(DictProducer(x.__cuda_array_interface__, keep=x))
        out = cai.device_array_like(imported)          # on device 1, as its argument
        cai.ops.copy(out, imported)                     # waits for the import's event
        assert not s.query()
    np.testing.assert_array_equal(out.copy_to_host(), np.full(64, 4.0, np.float32))


@two_devices
def test_deepcopy_stays_on_the_device_and_pickling_lands_on_the_current_one():
    import copy

    with cai.Device(1):
        b1 = cai.to_device(np.arange(3.0))
    assert copy.deepcopy(b1).device == cai.Device(1)
    assert pickle.loads(pickle.dumps(b1)).device == cai.Device(0)
    np.testing.assert_array_equal(copy.deepcopy(b1[::-1]).copy_to_host(), [2, 1, 0])


@two_devices
def test_copy_method_stays_on_the_arrays_device():
    with cai.Device(1):
        b1 = cai.to_device(np.arange(6.0).reshape(2, 3))   # its stream: device 1's default
        s1 = cai.stream()
    c = b1.T.copy()                                        # device 0 is current
    assert c.device == cai.Device(1) and c.is_c_contiguous()
    np.testing.assert_array_equal(c.copy_to_host(), np.arange(6.0).reshape(2, 3).T)
    assert b1.copy(stream=s1).stream == s1
    with pytest.raises(ValueError, match="belongs to device 0 but the array is on device 1"):
        b1.copy(stream=cai.stream())
    assert cai.current_device() == cai.Device(0)


@two_devices
def test_device_synchronize():
    with cai.Device(1):
        s1 = cai.stream()
        arr = cai.device_array(4, stream=s1)
        cai.sim.delay(s1, 0.02)
        cai.ops.fill(arr, 1, stream=s1)
    cai.Device(1).synchronize()
    assert s1.query()


@two_devices
def test_ipc_on_device_1():
    with cai.Device(1):
        b1 = cai.to_device(np.arange(4.0))
    h = b1.get_ipc_handle()
    assert h.device == cai.Device(1) and isinstance(h.device, cai.Device)
    with Child(importer) as c:
        c.send("open", h, "x")
        assert c.recv() == ("opened", (4,), "<f8", 1)
        c.send("values", "x")
        np.testing.assert_array_equal(c.recv()[1], np.arange(4.0))
        c.send("fill", "x", 8)
        c.recv()
        c.send("exit")
        c.recv()
    np.testing.assert_array_equal(b1.copy_to_host(), np.full(4, 8.0))


@two_devices
def test_select_device_makes_a_device_current_until_changed():
    assert cai.select_device(1) == cai.Device(1) == cai.current_device()
    assert cai.device_array(4).device == cai.Device(1)
    with cai.Device(0):
        cai.select_device(1)                  # inside a block: the block's end restores
        assert cai.current_device() == cai.Device(1)
    assert cai.current_device() == cai.Device(1)  # what was current before the block
    assert cai.select_device(cai.Device(0)) == cai.current_device() == cai.Device(0)
    with pytest.raises(ValueError, match="device 2 out of range"):
        cai.select_device(2)
    with pytest.raises(TypeError, match="got bool"):
        cai.select_device(True)
    assert cai.current_device() == cai.Device(0)


@two_devices
def test_gpus_lists_the_devices_as_context_managers():
    assert len(cai.gpus) == 2 and list(cai.gpus) == [cai.Device(0), cai.Device(1)]
    assert cai.gpus[-1] == cai.gpus[1] == cai.Device(1) and list(cai.gpus[:1]) == [cai.Device(0)]
    with cai.gpus[1]:
        assert cai.gpus.current == cai.Device(1)
        a = cai.device_array(3)
    assert a.device == cai.Device(1) and cai.gpus.current == cai.Device(0)
    with pytest.raises(IndexError):
        cai.gpus[2]


@two_devices
def test_device_array_like_follows_its_argument_not_the_current_device():
    with cai.Device(1):
        b = cai.to_device(np.asfortranarray(np.arange(6.0).reshape(2, 3)))
        foreign = CaiOnly(cai.to_device(np.arange(4, dtype=np.int16)))
    like = cai.device_array_like(b)           # device 0 is current
    assert like.device == cai.Device(1) and like.is_f_contiguous()
    assert like.shape == b.shape and like.dtype == b.dtype
    assert cai.device_array_like(foreign).device == cai.Device(1)
    assert cai.device_array_like(np.zeros(3)).device == cai.Device(0)  # host: the current one
    with cai.Device(1):
        s1 = cai.stream()
    assert cai.device_array_like(b, stream=s1).stream == s1
    with pytest.raises(ValueError, match="device"):
        cai.device_array_like(b, stream=cai.stream())  # a device-0 stream for a device-1 array


@two_devices
def test_from_dlpack_with_a_device():
    host = np.arange(6.0)
    a0 = cai.to_device(host)
    assert cai.from_dlpack(a0, device=0) is a0                     # there already: no copy
    assert cai.from_dlpack(a0, device=cai.Device(0), copy=True) is not a0
    a1 = cai.from_dlpack(a0, device=1)                             # elsewhere: copied there
    assert a1.device == cai.Device(1) and a1.ptr != a0.ptr
    np.testing.assert_array_equal(a1.copy_to_host(), host)
    via_dlpack = cai.from_dlpack(DLWrapper(a0), device=cai.Device(1))
    assert via_dlpack.device == cai.Device(1)
    np.testing.assert_array_equal(via_dlpack.copy_to_host(), host)
    from_host = cai.from_dlpack(host, device=1)                    # copy=None: copies if needed
    assert from_host.device == cai.Device(1)
    np.testing.assert_array_equal(from_host.copy_to_host(), host)
    with pytest.raises(BufferError, match="on device 0, not on device 1, and copy=False"):
        cai.from_dlpack(a0, device=1, copy=False)
    with pytest.raises(BufferError, match="CPU memory.*copy=False"):
        cai.from_dlpack(host, device=1, copy=False)
    with pytest.raises(ValueError, match="device 2 out of range"):
        cai.from_dlpack(a0, device=2)
    with pytest.raises(TypeError, match="device='cpu': cai arrays live in device memory"):
        cai.from_dlpack(a0, device="cpu")

"""The C API table (include/cai/capi.h) as an ABI: modules built by any compiler call through
its slots by position, so the slot list is append-only and every offset is fixed. The layout is
read from the probe module of tests/ext, built by the project's compiler and by clang++."""

import pytest

import extensions

# The slots in table order, as published so far. A new slot is appended here and in capi.h's
# CAI_CAPI_SLOTS, with the next CAI_CAPI_VERSION; an entry never moves.
SLOTS = [
    "import_array", "retain_array", "release_array", "array_to_python", "array_device",
    "new_array", "wrap_memory", "read_stream", "order_begin", "order_end", "backend_kind",
    "current_device", "enqueue_host_task", "set_error",
]
HEADER = 16  # version (uint32), size (uint32), cai_version (const char*)


@pytest.fixture(params=["_caster_probe", "_caster_probe_clang"], scope="module")
def layout(request):
    return extensions.load(request.param).capi_layout()


def test_slots_are_pointers_in_list_order_after_the_header(layout):
    assert list(layout["slots"]) == SLOTS
    assert layout["slots"] == {name: HEADER + 8 * i for i, name in enumerate(SLOTS)}
    assert layout["CaiCApi"] == HEADER + 8 * len(SLOTS)
    assert layout["version"] == 2


def test_the_structs_keep_their_layout(layout):
    # Fields are appended only; these offsets are what modules of version 1 and 2 were built with.
    assert layout["CaiArrayInfo"] == (96, 48, 60, 88)
    assert layout["CaiArrayRequest"] == 32
    assert layout["CaiMemory"] == (96, 88)
    assert layout["CaiHostTask"] == (48, 40)


def test_the_runtime_table_is_as_big_as_the_header_says():
    import ctypes

    import cai._cai as ext

    # The capsule's table starts with its version and size (uint32 each).
    pythonapi = ctypes.pythonapi
    pythonapi.PyCapsule_GetPointer.restype = ctypes.c_void_p
    pythonapi.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    table = pythonapi.PyCapsule_GetPointer(ext._C_API, b"cai._cai._C_API")
    version, size = (ctypes.c_uint32 * 2).from_address(table)
    assert (version, size) == (2, HEADER + 8 * len(SLOTS))

// Arrays shared between processes (docs/scale-out.md): DeviceNDArray.get_ipc_handle(),
// cai.IpcHandle (open/close/with, pickled as one reference per copy), cai.ipc_collect().

#include <nanobind/stl/string.h>

#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "array.h"
#include "bindings.h"
#include "cai/arrays/devices.h"
#include "cai/arrays/ipc.h"
#include "cai/core/error.h"
#include "cai/core/interface.h"
#include "convert.h"
#include "gil.h"
#include "streams.h"

namespace cai::python {

namespace {

// 2: a 22nd field, the mask's fields (or None).
constexpr int kPickleVersion = 2;
constexpr int kPickleFields = 22;

struct PyIpcHandle;
// Received handles not opened yet (each holds a reference): given back at exit.
std::set<PyIpcHandle*>& unopened() {
  static auto* s = new std::set<PyIpcHandle*>;  // leaked: used at exit
  return *s;
}

/// cai.IpcHandle.
struct PyIpcHandle {
  IpcArrayHandle handle;
  nb::object np_dtype;
  /// Received from another pickle: holds a reference (a ticket) until opened or dropped.
  bool received = false;
  enum class State { fresh, open, closed } state = State::fresh;
  std::optional<View> opened;  ///< the opened array (its memory, its mask's), until close()

  PyIpcHandle(IpcArrayHandle h, nb::object dtype, bool from_pickle)
      : handle(std::move(h)), np_dtype(std::move(dtype)), received(from_pickle) {
    if (received) unopened().insert(this);
  }
  PyIpcHandle(PyIpcHandle&& o) noexcept
      : handle(std::move(o.handle)),
        np_dtype(std::move(o.np_dtype)),
        received(std::exchange(o.received, false)),
        state(o.state),
        opened(std::move(o.opened)) {
    if (unopened().erase(&o) != 0) unopened().insert(this);
  }
  PyIpcHandle& operator=(PyIpcHandle&&) = delete;
  ~PyIpcHandle() {
    // Never opened: give the reference back so that the exporter can free the memory.
    if (received && state == State::fresh) ipc_discard(handle);
    unopened().erase(this);
  }
};

nb::bytes to_bytes(const std::uint8_t* data, std::size_t n) {
  return nb::bytes(reinterpret_cast<const char*>(data), n);
}

template <std::size_t N>
void from_bytes(nb::handle obj, std::array<std::uint8_t, N>& out, const char* what) {
  if (!PyBytes_Check(obj.ptr()) || static_cast<std::size_t>(PyBytes_GET_SIZE(obj.ptr())) != N) {
    throw_error(Errc::type_error, std::string("IpcHandle: ") + what + " must be " +
                                      std::to_string(N) + " bytes, got " + nb::repr(obj).c_str());
  }
  std::memcpy(out.data(), PyBytes_AS_STRING(obj.ptr()), N);
}

nb::object open_handle(PyIpcHandle& self, nb::handle stream) {
  using State = PyIpcHandle::State;
  if (self.state == State::open) {
    throw_error(Errc::value_error,
                "IpcHandle.open(): the handle is open already (use the array it gave; a handle "
                "opens once)");
  }
  if (self.state == State::closed) {
    throw_error(Errc::value_error,
                "IpcHandle.open(): the handle is closed; a handle opens once (send another one "
                "for another array)");
  }
  const auto s = stream_arg(stream, "IpcHandle.open()", library_default_stream());
  View v = ipc_open(self.handle, s);
  self.opened = v;
  self.state = State::open;
  unopened().erase(&self);
  return wrap(std::move(v), self.np_dtype);
}

void close_handle(PyIpcHandle& self) {
  if (self.state == PyIpcHandle::State::fresh && self.received) ipc_discard(self.handle);
  unopened().erase(&self);
  self.opened.reset();  // the arrays opened from it keep the memory while they live
  self.state = PyIpcHandle::State::closed;
}

// The pickled fields of h (with its mask's, nested), whose tickets were issued.
nb::tuple fields_of(const IpcArrayHandle& h, nb::handle np_dtype) {
  nb::object mask =
      h.mask ? nb::object(fields_of(*h.mask, numpy_dtype(h.mask->dtype))) : nb::none();
  return nb::make_tuple(kPickleVersion, nb::str(h.boot_id.c_str()), nb::str(h.backend.c_str()),
                        to_bytes(h.device_uuid.data(), h.device_uuid.size()), h.device,
                        h.has_memory, to_bytes(h.memory.bytes.data(), h.memory.bytes.size()),
                        h.alloc_size, h.offset, np_dtype, to_tuple(h.shape), to_tuple(h.strides),
                        h.readonly, h.has_event,
                        to_bytes(h.event.bytes.data(), h.event.bytes.size()), h.owner_pid,
                        h.owner_start, h.control_fd, h.slot, h.generation, h.ticket, mask);
}

nb::tuple pickle_fields(const PyIpcHandle& self) {
  // Each pickled copy is a reference of its own (its mask's too).
  return fields_of(ipc_issue_ticket(self.handle), self.np_dtype);
}

// Reads pickled fields (from another process: untrusted) into h and its numpy dtype.
nb::object read_fields(nb::handle fields, IpcArrayHandle& h, int depth) {
  if (!PyTuple_Check(fields.ptr()))
    throw_error(Errc::type_error,
                "IpcHandle: mask: expected None or the mask's pickled fields "
                "(a tuple), got " +
                    type_name_of(fields));
  const nb::tuple f = nb::borrow<nb::tuple>(fields);
  if (f.size() < 1 || !PyLong_Check(f[0].ptr()) || nb::cast<int>(f[0]) != kPickleVersion) {
    throw_error(Errc::value_error, "IpcHandle: pickled by another version of cai (format " +
                                       std::string(f.size() ? nb::repr(f[0]).c_str() : "?") +
                                       ", this cai reads " + std::to_string(kPickleVersion) + ")");
  }
  if (f.size() != kPickleFields) {
    throw_error(Errc::type_error, "IpcHandle: expected " + std::to_string(kPickleFields) +
                                      " pickled fields, got " + std::to_string(f.size()));
  }
  h.boot_id = nb::cast<std::string>(f[1]);
  h.backend = nb::cast<std::string>(f[2]);
  from_bytes(f[3], h.device_uuid, "device uuid");
  h.device = nb::cast<int>(f[4]);
  h.has_memory = nb::cast<bool>(f[5]);
  from_bytes(f[6], h.memory.bytes, "memory handle");
  h.alloc_size = nb::cast<std::uint64_t>(f[7]);
  h.offset = nb::cast<std::uint64_t>(f[8]);
  nb::object dtype = numpy_module().attr("dtype")(f[9]);
  h.dtype = dtype_from_numpy(dtype, "IpcHandle");
  h.shape = read_dims(f[10], "IpcHandle: shape", DimsForm::cai_key);
  h.strides = read_dims(f[11], "IpcHandle: strides", DimsForm::cai_key);
  h.readonly = nb::cast<bool>(f[12]);
  h.has_event = nb::cast<bool>(f[13]);
  from_bytes(f[14], h.event.bytes, "event handle");
  h.owner_pid = nb::cast<std::int32_t>(f[15]);
  h.owner_start = nb::cast<std::uint64_t>(f[16]);
  h.control_fd = nb::cast<std::int32_t>(f[17]);
  h.slot = nb::cast<std::uint32_t>(f[18]);
  h.generation = nb::cast<std::uint64_t>(f[19]);
  h.ticket = nb::cast<std::uint64_t>(f[20]);
  if (!f[21].is_none()) {
    if (depth >= max_mask_depth)
      throw_error(Errc::value_error, "IpcHandle: mask: masks nested more than " +
                                         std::to_string(max_mask_depth) + " levels deep");
    IpcArrayHandle mask;
    read_fields(f[21], mask, depth + 1);
    h.mask = std::make_shared<const IpcArrayHandle>(std::move(mask));
  }
  return dtype;
}

nb::object handle_from_fields(nb::args f) {
  IpcArrayHandle h;
  nb::object dtype = read_fields(f, h, 0);
  return nb::cast(PyIpcHandle(std::move(h), std::move(dtype), true), nb::rv_policy::move);
}

}  // namespace

void bind_ipc(nb::module_& m) {
  using namespace nb::literals;
  auto cls = nb::class_<PyIpcHandle>(
      m, "IpcHandle",
      "A device array shared with other processes of this machine (CUDA IPC). Pickle it (or "
      "send it through multiprocessing) to another process, which calls open() or uses `with "
      "handle as arr:`. Each pickled copy opens once; the memory stays valid while any "
      "process holds it open, and the exporter's queued work comes first.");
  cls.def("open", exit_safe(&open_handle), nb::arg("stream").none() = 0,
          nb::sig("def open(self, stream: object | None = 0) -> DeviceNDArray"),
          "A DeviceNDArray on the shared memory (no copy), on `stream` (0: the default stream), "
          "which waits for the work the exporter queued before get_ipc_handle(); the host "
          "does not wait.")
      .def("close", &close_handle,
           "Done with the handle: the memory is unmapped when the arrays opened from it are gone "
           "too (using such an array after close() is safe).")
      .def(
          "__enter__", [](PyIpcHandle& self) { return open_handle(self, nb::int_(0)); },
          nb::sig("def __enter__(self) -> DeviceNDArray"))
      .def(
          "__exit__", [](PyIpcHandle& self, nb::args) { close_handle(self); },
          nb::sig("def __exit__(self, *args: object) -> None"))
      .def_prop_ro(
          "shape", [](const PyIpcHandle& h) { return to_tuple(h.handle.shape); },
          nb::sig("def shape(self) -> tuple[int, ...]"))
      .def_prop_ro(
          "strides", [](const PyIpcHandle& h) { return to_tuple(h.handle.strides); },
          nb::sig("def strides(self) -> tuple[int, ...]"))
      .def_prop_ro(
          "dtype", [](const PyIpcHandle& h) { return h.np_dtype; },
          nb::sig("def dtype(self) -> numpy.dtype[Any]"))
      .def_prop_ro("readonly", [](const PyIpcHandle& h) { return h.handle.readonly; })
      .def_prop_ro(
          "device",
          [](const PyIpcHandle& h) {
            // The device by its uuid: the exporter's number may name another device here.
            auto& b = device::backend();
            for (int i = 0; i < b.device_count(); ++i)
              if (b.properties(i).uuid == h.handle.device_uuid)
                return nb::module_::import_("cai._cai").attr("Device")(i);
            throw_error(Errc::device_error, "IpcHandle.device: the exporter's device " +
                                                std::to_string(h.handle.device) + " (uuid " +
                                                uuid_text(h.handle.device_uuid) +
                                                ") is not visible in this process");
          },
          nb::sig("def device(self) -> Device"),
          "The cai.Device holding the memory, found in this process by its uuid (open() maps "
          "the memory there).")
      .def_prop_ro(
          "offset", [](const PyIpcHandle& h) { return h.handle.offset; },
          "Bytes from the start of the shared allocation to the array's first element.")
      .def_prop_ro(
          "exporter_pid", [](const PyIpcHandle& h) { return h.handle.owner_pid; },
          "The process that owns the memory.")
      .def_prop_ro("is_open",
                   [](const PyIpcHandle& h) { return h.state == PyIpcHandle::State::open; })
      .def(
          "__reduce__",
          [](nb::handle self) {
            return nb::make_tuple(nb::module_::import_("cai._scaleout").attr("_ipc_handle"),
                                  pickle_fields(nb::cast<PyIpcHandle&>(self)));
          },
          nb::sig("def __reduce__(self) -> tuple[object, tuple[object, ...]]"))
      .def("__repr__", [](const PyIpcHandle& h) {
        std::string state = h.state == PyIpcHandle::State::open     ? "open"
                            : h.state == PyIpcHandle::State::closed ? "closed"
                                                                    : "not opened";
        return "<cai.IpcHandle shape=" + std::string(nb::repr(to_tuple(h.handle.shape)).c_str()) +
               " dtype=" + std::string(nb::str(h.np_dtype).c_str()) + " from process " +
               std::to_string(h.handle.owner_pid) + ", " + state + ">";
      });
  cls.def_prop_ro(
      "handle",
      [](const PyIpcHandle& h) -> nb::object {
        if (!h.handle.has_memory) return nb::none();
        return to_bytes(h.handle.memory.bytes.data(), h.handle.memory.bytes.size());
      },
      nb::sig("def handle(self) -> bytes | None"),
      "The driver's handle of the shared allocation (a CUipcMemHandle's 64 bytes; None for "
      "an empty array), for a consumer that opens it itself (cai.open_ipc_array, Numba's "
      "open_ipc_array, CuPy's ipcOpenMemHandle). Such a consumer holds no reference: the "
      "exporter must keep the array alive while it is used.");
  m.def(
      "_open_ipc_memory",
      exit_safe([](nb::bytes handle, nb::handle shape, nb::handle dtype, nb::handle strides,
                   std::int64_t offset) {
        constexpr const char* entry = "open_ipc_array()";
        device::IpcMemoryHandle raw;
        if (handle.size() != raw.bytes.size()) {
          throw_error(Errc::value_error, std::string(entry) + ": handle must be the " +
                                             std::to_string(raw.bytes.size()) +
                                             " bytes of a CUipcMemHandle, got " +
                                             std::to_string(handle.size()) + " bytes");
        }
        std::memcpy(raw.bytes.data(), handle.c_str(), raw.bytes.size());
        if (offset < 0) {
          throw_error(Errc::value_error,
                      std::string(entry) + ": offset must be >= 0, got " + std::to_string(offset));
        }
        const Dims dims = read_dims(shape, "shape", DimsForm::argument);
        nb::object dt = numpy_module().attr("dtype")(dtype);
        DType t = dtype_from_numpy(dt, entry);
        Layout layout =
            strides.is_none()
                ? Layout::c_contiguous(dims, t.itemsize())
                : Layout(dims, read_dims(strides, "strides", DimsForm::argument), t.itemsize());
        View v = ipc_open_driver_handle(raw, std::move(t), std::move(layout),
                                        static_cast<std::uint64_t>(offset), false);
        return wrap(std::move(v), dt);
      }),
      nb::arg("handle"), nb::arg("shape").none(), nb::arg("dtype"), nb::arg("strides").none(),
      nb::arg("offset"),
      nb::sig("def _open_ipc_memory(handle: bytes, shape: object, dtype: object, strides: object, "
              "offset: int) -> DeviceNDArray"),
      "cai.open_ipc_array's mapping of a driver IPC handle (ipc_open_driver_handle).");
  m.def("_ipc_handle", &handle_from_fields, nb::sig("def _ipc_handle(*args: object) -> IpcHandle"),
        "Rebuilds a pickled cai.IpcHandle.");

  nb::handle array = nb::type<PyArray>();
  array.attr("get_ipc_handle") = nb::cpp_function(
      [](PyArray& self) {
        nb::object dtype = array_dtype(self);
        return PyIpcHandle(ipc_export(self.view()), std::move(dtype), false);
      },
      nb::is_method(), nb::scope(array), nb::name("get_ipc_handle"),
      "A cai.IpcHandle that another process of this machine opens to use this array's memory "
      "(no copy). The memory stays alive while any process holds it; work queued on the "
      "array before this call is seen by the importer's first use. The host does not wait.");

  m.def("ipc_collect", &ipc_collect,
        "Frees the memory this process shared once every process gave its references back; "
        "returns how many allocations were released. Runs at every get_ipc_handle() too.");
  m.def(
      "_ipc_return_all",
      [] {
        for (PyIpcHandle* h : unopened()) {
          ipc_discard(h->handle);
          h->state = PyIpcHandle::State::closed;
        }
        unopened().clear();
        ipc_return_all();
      },
      "At exit: gives back every reference to other processes' memory this process holds.");
  m.def("_ipc_exports_in_use", &ipc_exports_in_use,
        "How many shared allocations other processes still hold.");
  m.def(
      "_ipc_records",
      [] {
        const IpcRecords r = ipc_records();
        return dict_of({"opened"_a = r.opened, "imports"_a = r.imports, "leases"_a = r.leases,
                        "controls"_a = r.controls});
      },
      nb::sig("def _ipc_records() -> dict[str, int]"),
      "What this process keeps about IPC (tests prove it stays bounded).");
}

}  // namespace cai::python

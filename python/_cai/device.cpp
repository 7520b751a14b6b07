// cai.Stream, cai.Event, stream constructors, cai.synchronize(), cai.backend().

#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <string>

#include "bindings.h"
#include "cai/arrays/devices.h"
#include "cai/core/error.h"
#include "cai/core/interface.h"
#include "cai/device/simulator.h"
#include "convert.h"
#include "gil.h"
#include "streams.h"

namespace cai::python {

using device::backend;
using device::StreamHandle;

namespace {

nb::object named_stream(StreamHandle h) {
  return nb::cast(PyStream{{h, nullptr}, false});
}

std::string handle_repr(StreamHandle h) {
  std::string text = device::stream_text(h);
  if (text.starts_with("stream ")) text.erase(0, 7);  // <cai.Stream 0x...>
  return "<cai.Stream " + text + ">";
}

// An integer stream handle, under the integer policy (docs/python.md).
StreamHandle int_handle(nb::handle obj, const std::string& what) {
  return read_uint64(obj, what, "an int");
}

}  // namespace

sync::StreamRef library_default_stream() {
  return {device::kLegacyDefaultStream, nullptr};
}

namespace {

// A stream work can be enqueued on from this thread: another thread's per-thread default
// stream (handle 2 names this thread's own) becomes the legacy default stream, which
// StreamOrder orders after it.
sync::StreamRef nameable_here(sync::StreamRef s) {
  if (s.other_thread()) return library_default_stream();
  return s;
}

}  // namespace

sync::StreamRef stream_or_default(const View& v) {
  if (auto s = v.sync()->stream()) return nameable_here(std::move(*s));
  return library_default_stream();
}

int new_array_device(const View& like, const sync::StreamRef& stream) {
  return device::is_default_stream(stream.handle) ? device_of(like) : -1;
}

sync::StreamRef stream_arg(nb::handle obj, const char* entry, const sync::StreamRef& fallback) {
  if (obj.is_none()) return nameable_here(fallback);
  if (PyStream * s; nb::try_cast<PyStream*>(obj, s) && s) return nameable_here(s->ref());
  static PyObject* protocol = PyUnicode_InternFromString("__cuda_stream__");
  if (!is_integer(obj)) {
    PyObject* method = call_python([&] { return PyObject_GetAttr(obj.ptr(), protocol); });
    if (!method) {
      if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw nb::python_error();
      PyErr_Clear();
      throw_error(Errc::type_error,
                  std::string(entry) +
                      ": stream=: expected a cai.Stream, an int handle, 0/None for the default, "
                      "or an object with __cuda_stream__; got " +
                      type_name_of(obj));
    }
    // cuda.core's protocol: __cuda_stream__() -> (version, handle).
    nb::object m = nb::steal(method);
    PyObject* r = call_python([&] { return PyObject_CallNoArgs(m.ptr()); });
    if (!r) throw nb::python_error();
    nb::object t = nb::steal(r);
    if (!PyTuple_Check(t.ptr()) || PyTuple_GET_SIZE(t.ptr()) != 2)
      throw_error(Errc::type_error, std::string(entry) +
                                        ": stream=: __cuda_stream__() must return a tuple "
                                        "(version, handle), got " +
                                        short_repr(t));
    const StreamHandle h = int_handle(PyTuple_GET_ITEM(t.ptr(), 1),
                                      std::string(entry) + ": stream=: __cuda_stream__() handle");
    if (h == 0)
      throw_error(
          Errc::value_error,
          stream_zero_message(std::string(entry) + ": stream=: __cuda_stream__() returned handle",
                              "1 or 2 for the default streams"));
    // Keep the foreign stream object alive as long as we use its handle.
    return {h, keep_alive(obj)};
  }
  const StreamHandle h = int_handle(obj, std::string(entry) + ": stream");
  if (h == 0) return nameable_here(fallback);
  return {h, nullptr};
}

void bind_device(nb::module_& m) {
  nb::class_<PyStream>(m, "Stream",
                       "A CUDA stream (or a simulator stream). Handles follow the CUDA Array "
                       "Interface: 1 is the legacy default stream, 2 the per-thread default "
                       "stream.")
      .def_prop_ro("handle", [](const PyStream& s) { return s.handle(); })
      .def("__int__", [](const PyStream& s) { return s.handle(); })
      .def("__index__", [](const PyStream& s) { return s.handle(); })
      .def_prop_ro(
          "owned", [](const PyStream& s) { return s.owned; },
          "True when cai created the stream and destroys it with this object.")
      .def("synchronize",
           [](const PyStream& s) {
             NoGil nogil;
             backend().stream_synchronize(s.handle());
           })
      .def(
          "query", [](const PyStream& s) { return backend().stream_query(s.handle()); },
          "True when all work queued on the stream has completed.")
      .def("__cuda_stream__", [](const PyStream& s) { return nb::make_tuple(0, s.handle()); })
      .def("__eq__",
           [](const PyStream& a, nb::handle b) {
             PyStream* o;
             return nb::try_cast<PyStream*>(b, o) && o && o->handle() == a.handle();
           })
      .def("__hash__", [](const PyStream& s) { return std::hash<StreamHandle>{}(s.handle()); })
      .def("__repr__", [](const PyStream& s) { return handle_repr(s.handle()); });

  m.def(
      "stream",
      [](bool non_blocking) {
        auto owned = device::OwnedStream::create(non_blocking);
        const StreamHandle h = owned->handle();
        return nb::cast(PyStream{{h, std::move(owned)}, true});
      },
      nb::kw_only(), nb::arg("non_blocking") = false,
      "A new stream, destroyed when the last object using it goes away. Blocking streams "
      "synchronize with the legacy default stream; non-blocking ones do not.");
  m.def(
      "default_stream", [] { return named_stream(library_default_stream().handle); },
      "The stream cai uses when stream=0: the legacy default stream.");
  m.def("legacy_default_stream", [] { return named_stream(device::kLegacyDefaultStream); });
  m.def("per_thread_default_stream", [] { return named_stream(device::kPerThreadDefaultStream); });
  m.def("external_stream", exit_safe([](nb::handle handle) {
          const StreamHandle h = int_handle(handle, "external_stream(): handle");
          if (h == 0)
            throw_error(Errc::value_error,
                        stream_zero_message("external_stream(): handle",
                                            "1 (legacy default) or 2 (per-thread default)"));
          return named_stream(h);
        }),
        nb::arg("handle"), "Wraps a stream someone else owns; cai never destroys it.");

  nb::class_<PyEvent>(m, "Event", "A CUDA event (or a simulator event).")
      .def_prop_ro("handle", [](const PyEvent& e) { return e.event->handle(); })
      .def("record", exit_safe([](const PyEvent& e, nb::handle stream) {
             auto s = stream_arg(stream, "Event.record()", library_default_stream());
             backend().event_record(e.event->handle(), s.handle);
           }),
           nb::arg("stream").none() = 0, "Records the event on `stream` (0: the default stream).")
      .def("wait", exit_safe([](const PyEvent& e, nb::handle stream) {
             auto s = stream_arg(stream, "Event.wait()", library_default_stream());
             backend().stream_wait_event(s.handle, e.event->handle());
           }),
           nb::arg("stream").none() = 0,
           "Makes later work on `stream` wait for this event; the host does not block.")
      .def("synchronize",
           [](const PyEvent& e) {
             NoGil nogil;
             backend().event_synchronize(e.event->handle());
           })
      .def("query", [](const PyEvent& e) { return backend().event_query(e.event->handle()); })
      .def(
          "elapsed_time",
          [](const PyEvent& start, const PyEvent& end) {
            return backend().event_elapsed_ms(start.event->handle(), end.event->handle());
          },
          nb::arg("end"), "Milliseconds between this event and `end` (both timing events).");

  m.def(
      "event", [](bool timing) { return PyEvent{std::make_shared<device::OwnedEvent>(timing)}; },
      nb::arg("timing") = true);
  m.def(
      "synchronize",
      [] {
        NoGil nogil;
        sync::synchronize_device(backend());
      },
      "Waits for all work on the current device, and for the memory of dropped arrays to be "
      "given back to the driver (frees run on a backend thread; docs/python.md).");
  m.def(
      "backend", [] { return std::string(backend().name()); },
      "'cuda' or 'simulator': the backend chosen (CAI_BACKEND=sim|cuda forces one).");
  m.def("cuda_available", [] { return device::cuda_available(); });

  nb::module_ sim = m.def_submodule("sim", "Controls of cai's simulated driver (CAI_BACKEND=sim).");
  sim.def(
      "active", [] { return device::sim::active(); }, "True when the backend is the simulator.");
  sim.def(
      "driver_path", [] { return device::sim::driver_path(); },
      "The path of cai's simulated driver, the shared library libcuda.so.1: put its folder on "
      "LD_LIBRARY_PATH and driver-API clients (numba-cuda, cuda.core) run over the same "
      "simulated driver as cai (`python -m cai --sim-driver-dir` prints the folder).");
  sim.def("delay", exit_safe([](nb::handle stream, double seconds) {
            auto s = stream_arg(stream, "sim.delay()", library_default_stream());
            device::sim::delay(s.handle, seconds);  // refuses what no real GPU work could take
          }),
          nb::arg("stream"), nb::arg("seconds"),
          "Enqueues a pause on `stream`: later work on it starts that much later; the host does "
          "not wait.");
  sim.def("host_access", exit_safe([](std::uint64_t ptr, std::size_t nbytes, bool write) {
            device::sim::host_access(ptr, nbytes, write);
          }),
          nb::arg("ptr"), nb::arg("nbytes"), nb::arg("write") = false,
          "Declares that the host reads (or writes) these bytes now: a RaceError when device "
          "work on them is not yet ordered before the host (a synchronize), as when NumPy "
          "reads a managed or mapped array too early.");
  sim.def(
      "set_race_detection", [](bool on) { device::sim::set_race_detection(on); }, nb::arg("on"));
  sim.def("race_detection", [] { return device::sim::race_detection(); });
  sim.def(
      "driver_calls",
      [] {
        nb::dict out;
        for (const auto& [name, n] : device::sim::driver_calls(backend()))
          if (n != 0) out[nb::str(name.c_str())] = n;
        return out;
      },
      nb::sig("def driver_calls() -> dict[str, int]"),
      "The driver entry points called since the last reset_driver_calls(), with their counts "
      "(only those called): what a path costs on a GPU, call by call.");
  sim.def(
      "reset_driver_calls", [] { device::sim::reset_driver_calls(backend()); },
      "Starts the counts of driver_calls() (and the times of driver_call_ns()) again.");
  sim.def(
      "time_driver_calls", [](bool on) { device::sim::time_driver_calls(backend(), on); },
      nb::arg("on"),
      "Times every driver call from now on (two clock reads per call), for driver_call_ns().");
  sim.def(
      "driver_call_ns",
      [] {
        nb::dict out;
        for (const auto& [name, ns] : device::sim::driver_call_ns(backend()))
          if (ns != 0) out[nb::str(name.c_str())] = ns;
        return out;
      },
      nb::sig("def driver_call_ns() -> dict[str, int]"),
      "The nanoseconds spent inside each driver entry point while time_driver_calls(True) was "
      "on, since the last reset_driver_calls(): what the driver itself costs a path.");
  sim.def(
      "inject_error",
      [](const std::string& entry, int code, unsigned skip, unsigned times) {
        device::sim::inject_error(backend(), entry, code, skip, times);
      },
      nb::arg("entry"), nb::arg("code"), nb::arg("skip") = 0, nb::arg("times") = 1,
      "The next `times` calls of driver entry point `entry` (after `skip` more succeed) fail "
      "with CUresult `code`, as a real driver may: for tests of error handling.");
  m.def(
      "device_call_counts",
      [] {
        using C = device::CallCounts;
        static constexpr std::pair<const char*, std::uint64_t C::*> fields[] = {
            {"event_record", &C::event_record},
            {"stream_wait_event", &C::stream_wait_event},
            {"event_create", &C::event_create},
            {"pointer_query", &C::pointer_query},
            {"stream_synchronize", &C::stream_synchronize}};
        const C c = backend().call_counts();
        nb::dict d;
        for (const auto& [name, field] : fields) d[name] = c.*field;
        return d;
      },
      nb::sig("def device_call_counts() -> dict[str, int]"),
      "How often the backend made the calls a GPU charges for since "
      "reset_device_call_counts(): event_record, stream_wait_event, event_create, "
      "pointer_query (a pointer it had to ask the driver about), stream_synchronize.");
  m.def(
      "reset_device_call_counts", [] { backend().reset_call_counts(); },
      "Sets every count of device_call_counts() back to 0.");
}

}  // namespace cai::python

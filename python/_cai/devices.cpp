// Several devices (docs/scale-out.md): cai.Device, cai.device_count(), cai.current_device(),
// DeviceNDArray.device and .synchronize(), Stream.device; and cai.sim.hold(), a gate that
// holds a simulator stream until released (to order work across processes in tests).

#include <nanobind/stl/string.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "array.h"
#include "bindings.h"
#include "cai/arrays/devices.h"
#include "cai/core/error.h"
#include "cai/device/simulator.h"
#include "gil.h"
#include "streams.h"

namespace cai::python {

namespace {

using device::backend;

struct PyDevice {
  int id = 0;
};

// The devices made current by `with cai.Device(i):` on this thread, innermost last: what each
// exit restores.
thread_local std::vector<int> t_previous_devices;

std::string count_text() {
  auto& b = backend();
  const int n = b.device_count();
  std::string s = std::to_string(n) + (n == 1 ? " device" : " devices");
  if (b.simulated())
    return "the simulator has " + s + " (CAI_SIM_DEVICES=" + std::to_string(n) + ")";
  return "the CUDA driver sees " + s;
}

int device_arg(nb::handle obj, const char* entry) {
  if (obj.is_none()) return backend().current_device();
  if (PyDevice * d; nb::try_cast<PyDevice*>(obj, d) && d) return d->id;
  // The integer policy of every argument (convert.h): no bools, __index__ honoured.
  const std::int64_t id =
      read_int64(obj, std::string(entry) + ": device",
                 "a device number (int), a cai.Device or None", Errc::value_error);
  if (id < 0 || id >= backend().device_count()) {
    throw_error(Errc::value_error, std::string(entry) + ": device " + std::to_string(id) +
                                       " out of range; " + count_text());
  }
  return static_cast<int>(id);
}

// A host-side gate on a simulator stream: work queued after it waits until release().
struct SimGate {
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool released = false;
  };
  std::shared_ptr<State> state = std::make_shared<State>();

  SimGate() = default;
  SimGate(SimGate&& other) noexcept : state(std::move(other.state)) {}
  SimGate& operator=(SimGate&&) = delete;

  void release() const {
    if (!state) return;
    {
      std::lock_guard lock(state->mu);
      state->released = true;
    }
    state->cv.notify_all();
  }
  ~SimGate() { release(); }  // a dropped gate never holds a stream forever
};

PyDevice array_device(PyArray& a) {
  const int d = device_of(a.view());
  return PyDevice{d >= 0 ? d : backend().current_device()};
}

}  // namespace

void bind_devices(nb::module_& m) {
  nb::class_<PyDevice>(m, "Device",
                       "A device (a GPU, or a simulated one). `with cai.Device(i):` makes device "
                       "i current for this thread and restores the previous one at the end; "
                       "arrays and streams are then made on it.")
      .def("__init__", exit_safe([](PyDevice* self, nb::handle device) {
             new (self) PyDevice{device_arg(device, "cai.Device()")};
           }),
           nb::arg("device").none() = nb::none(), "A device by number (None: the current one).")
      .def_prop_ro("id", [](const PyDevice& d) { return d.id; })
      .def_prop_ro("name", [](const PyDevice& d) { return backend().properties(d.id).name; })
      .def_prop_ro(
          "uuid", [](const PyDevice& d) { return uuid_text(backend().properties(d.id).uuid); },
          "Names the physical device in every process, whatever its number there.")
      .def_prop_ro("total_memory",
                   [](const PyDevice& d) { return backend().properties(d.id).total_memory; })
      .def_prop_ro(
          "compute_capability",
          [](const PyDevice& d) {
            const auto p = backend().properties(d.id);
            return nb::make_tuple(p.compute_major, p.compute_minor);
          },
          nb::sig("def compute_capability(self) -> tuple[int, int]"))
      .def(
          "__enter__",
          [](nb::handle self) {
            const int id = nb::cast<PyDevice&>(self).id;
            const int previous = backend().current_device();
            backend().set_current_device(id);
            t_previous_devices.push_back(previous);
            return nb::borrow(self);
          },
          nb::sig("def __enter__(self) -> Device"))
      .def(
          "__exit__",
          [](const PyDevice&, nb::args) {
            if (t_previous_devices.empty()) {
              throw_error(Errc::value_error,
                          "cai.Device.__exit__(): no `with cai.Device(...)` block is open on "
                          "this thread");
            }
            const int previous = t_previous_devices.back();
            t_previous_devices.pop_back();
            backend().set_current_device(previous);
          },
          nb::sig("def __exit__(self, *args: object) -> None"))
      .def(
          "synchronize",
          [](const PyDevice& d) {
            const DeviceGuard on(d.id);
            NoGil nogil;
            sync::synchronize_device(backend());
          },
          "Waits for all work on this device.")
      .def("__eq__",
           [](const PyDevice& a, nb::handle b) {
             PyDevice* o;
             return nb::try_cast<PyDevice*>(b, o) && o && o->id == a.id;
           })
      .def("__hash__", [](const PyDevice& d) { return std::hash<int>{}(d.id); })
      .def("__int__", [](const PyDevice& d) { return d.id; })
      .def("__index__", [](const PyDevice& d) { return d.id; })
      .def(
          "__reduce__",
          [](nb::handle self) {
            return nb::make_tuple(self.type(), nb::make_tuple(nb::cast<PyDevice&>(self).id));
          },
          nb::sig("def __reduce__(self) -> tuple[type[Device], tuple[int]]"))
      .def("__repr__", [](const PyDevice& d) {
        return "<cai.Device " + std::to_string(d.id) + " (" + std::string(backend().name()) + ")>";
      });

  m.def(
      "device_count", [] { return backend().device_count(); },
      "Number of devices (CUDA devices, or CAI_SIM_DEVICES on the simulator).");
  m.def(
      "current_device", [] { return PyDevice{backend().current_device()}; },
      "The calling thread's current device.");
  m.def(
      "_memory_info",
      [] {
        const auto [free, total] = backend().memory_info();
        return nb::make_tuple(free, total);
      },
      nb::sig("def _memory_info() -> tuple[int, int]"),
      "The current device's free and total memory in bytes (cuMemGetInfo).");

  nb::handle array = nb::type<PyArray>();
  nb::object property = nb::module_::import_("builtins").attr("property");
  array.attr("device") = property(
      nb::cpp_function([](PyArray& a) { return array_device(a); }, nb::is_method()), nb::none(),
      nb::none(),
      "The cai.Device whose memory holds the array (the current one for a zero-size array).");
  array.attr("synchronize") = nb::cpp_function(
      [](PyArray& a) {
        const View& v = a.view();
        if (!v.sync()->pending()) return;
        const DeviceGuard on(device_of(v));
        NoGil nogil;
        v.sync()->synchronize(backend());
      },
      nb::is_method(), nb::scope(array), nb::name("synchronize"),
      "Waits until the work queued on the array is done, so that code that does not follow "
      "streams (MPI, host code through the pointer) may use its memory.");
  nb::handle stream = nb::type<PyStream>();
  stream.attr("device") =
      property(nb::cpp_function(
                   [](const PyStream& s) { return PyDevice{backend().stream_device(s.handle())}; },
                   nb::is_method()),
               nb::none(), nb::none(),
               "The cai.Device the stream belongs to (the current one for the default streams).");

  nb::module_ sim = nb::borrow<nb::module_>(m.attr("sim"));
  nb::class_<SimGate>(sim, "Gate", "Holds a simulator stream until released (see sim.hold).")
      .def("release", &SimGate::release, "Lets the stream go on.")
      .def(
          "__enter__", [](nb::handle self) { return nb::borrow(self); },
          nb::sig("def __enter__(self) -> Gate"))
      .def(
          "__exit__", [](const SimGate& g, nb::args) { g.release(); },
          nb::sig("def __exit__(self, *args: object) -> None"));
  sim.def("hold", exit_safe([](nb::handle stream) {
            auto s = stream_arg(stream, "sim.hold()", library_default_stream());
            if (!device::sim::active())
              throw_error(Errc::device_error,
                          "sim.hold(): the driver is not the simulator; set CAI_BACKEND=sim");
            SimGate gate;
            // A host function that blocks: later work on the stream waits for it.
            backend().launch_host_func(s.handle, [state = gate.state] {
              std::unique_lock lock(state->mu);
              state->cv.wait(lock, [&] { return state->released; });
            });
            return gate;
          }),
          nb::arg("stream"),
          "Work queued on `stream` after this call waits until the returned gate is released "
          "(gate.release(), the end of a `with` block, or the gate's deletion). The host does not "
          "wait. Tests use it to keep work pending for as long as they need, without sleeping.");
}

}  // namespace cai::python

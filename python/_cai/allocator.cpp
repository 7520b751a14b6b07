// cai.set_allocator(allocate, deallocate): a Python allocator (a CuPy or RMM pool, or the
// caller's own) behind cai's allocator hook (cai/arrays/allocator.h). python/cai/_allocator.py
// wraps it with the argument checks and the notes on errors.

#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "bindings.h"
#include "cai/arrays/allocator.h"
#include "convert.h"
#include "gil.h"

namespace cai::python {

namespace {

class PyAllocator;
std::mutex g_live_mu;
std::set<PyAllocator*> g_live;  // every PyAllocator, for release_at_exit

// The two callables, called with the GIL. At exit they are given back before the interpreter
// finalizes (release_at_exit): an array kept in a module holds its allocator from C++, the
// allocator its callables, they their module's globals, which hold the array: a cycle the
// garbage collector cannot see, which would keep those arrays past the interpreter's end.
class PyAllocator final : public Allocator {
 public:
  PyAllocator(nb::object allocate, nb::object deallocate)
      : allocate_(allocate.release().ptr()), deallocate_(deallocate.release().ptr()) {
    std::lock_guard lock(g_live_mu);
    g_live.insert(this);
  }
  ~PyAllocator() override {
    {
      std::lock_guard lock(g_live_mu);
      g_live.erase(this);
    }
    if (!nb::is_alive()) return;
    WithGil gil;
    release();
  }

  /// Gives the callables back (with the GIL); later calls allocate nothing, free nothing.
  void release() noexcept {
    Py_CLEAR(allocate_);
    Py_CLEAR(deallocate_);
  }

  static void release_at_exit() noexcept {
    // Taken under the lock, given back after it: a callable's last reference may free arrays,
    // and with them allocators (whose destructors take the lock).
    std::vector<PyObject*> taken;
    {
      std::lock_guard lock(g_live_mu);
      for (PyAllocator* a : g_live) {
        taken.push_back(std::exchange(a->allocate_, nullptr));
        taken.push_back(std::exchange(a->deallocate_, nullptr));
      }
    }
    for (PyObject* o : taken) Py_XDECREF(o);
  }

  std::uint64_t allocate(std::size_t bytes, int device, device::StreamHandle stream) override {
    WithGil gil;
    if (allocate_ == nullptr)
      throw_error(Errc::device_error, "the allocator set with cai.set_allocator is gone (exit)");
    // A Python exception propagates as it is (nb::python_error), to the caller's Python code.
    // A daemon thread ended inside the callable at exit parks (call_python).
    PyObject* result = call_python([&] {
      return PyObject_CallFunction(allocate_, "KiK", static_cast<unsigned long long>(bytes), device,
                                   static_cast<unsigned long long>(stream));
    });
    if (!result) throw nb::python_error();
    const nb::object r = nb::steal(result);
    if (!PyLong_Check(r.ptr()) || PyBool_Check(r.ptr())) {
      throw_error(Errc::type_error, "the allocator's allocate() returned " + type_name_of(r) +
                                        ", not an int (the device pointer)");
    }
    return read_uint64(r, "the allocator's allocate() (cai.set_allocator) returned", "an int");
  }

  void deallocate(std::uint64_t ptr, std::size_t bytes, int device,
                  device::StreamHandle stream) noexcept override {
    if (!nb::is_alive()) return;  // at exit: leaked with the process
    WithGil gil;
    if (deallocate_ == nullptr) return;  // released at exit: leaked with the process
    // A daemon thread ended inside the callable at exit parks (call_python): no catch here
    // may swallow that forced unwind.
    PyObject* r = call_python([&] {
      return PyObject_CallFunction(deallocate_, "KKiK", static_cast<unsigned long long>(ptr),
                                   static_cast<unsigned long long>(bytes), device,
                                   static_cast<unsigned long long>(stream));
    });
    if (r) {
      Py_DECREF(r);
      return;
    }
    // Raised by an array's destructor: reported as Python reports errors in __del__.
    nb::python_error e;  // fetches it
    e.discard_as_unraisable("cai: the allocator's deallocate()");
  }

  nb::object callables() const {
    if (allocate_ == nullptr) return nb::none();
    return nb::make_tuple(nb::handle(allocate_), nb::handle(deallocate_));
  }

 private:
  PyObject* allocate_;
  PyObject* deallocate_;
};

}  // namespace

void bind_allocator(nb::module_& m) {
  m.def(
      "_set_allocator",
      [](nb::object allocate, nb::object deallocate) {
        if (allocate.is_none()) {
          set_allocator(nullptr);
        } else {
          set_allocator(std::make_shared<PyAllocator>(allocate, deallocate));
        }
      },
      nb::arg("allocate").none(), nb::arg("deallocate").none(),
      "Sets the allocator of arrays' device memory (None: the backend's).");
  m.def(
      "_get_allocator",
      []() -> nb::object {
        auto a = std::dynamic_pointer_cast<PyAllocator>(get_allocator());
        return a ? a->callables() : nb::none();
      },
      nb::sig("def _get_allocator() -> tuple[object, object] | None"),
      "The (allocate, deallocate) pair set, or None.");
  m.def(
      "_release_allocators_at_exit",
      [] {
        set_allocator(nullptr);
        PyAllocator::release_at_exit();
      },
      "At exit: gives every Python allocator's callables back (arrays then leak their memory).");
}

}  // namespace cai::python

// DeviceNDArray.__getitem__ and __setitem__: NumPy's basic indexing as views (the layout rules
// are the core's, Layout::index), element reads as host scalars, and assignment of scalars,
// host arrays and device arrays with NumPy's broadcasting.

#include <nanobind/stl/string.h>

#include <optional>
#include <string>
#include <vector>

#include "array.h"
#include "bindings.h"
#include "cai/arrays/ops.h"
#include "cai/core/error.h"
#include "import.h"
#include "streams.h"

namespace cai::python {

namespace {

// An index or slice bound as int64; Python ints beyond int64 are clamped, as Python's own
// slicing does, so a huge index is out of range (IndexError) and a huge bound is clamped.
std::int64_t clamped_index(nb::handle o) {
  const Py_ssize_t v = call_python([&] { return PyNumber_AsSsize_t(o.ptr(), nullptr); });
  if (v == -1 && PyErr_Occurred()) throw nb::python_error();
  return v;
}

IndexItem index_item(nb::handle o) {
  if (o.is_none()) return IndexItem::newaxis();
  if (o.ptr() == Py_Ellipsis) return IndexItem::ellipsis();
  if (PySlice_Check(o.ptr())) {
    auto part = [&](const char* name) -> std::optional<std::int64_t> {
      nb::object v = o.attr(name);
      if (v.is_none()) return std::nullopt;
      if (!is_integer(v))
        throw_error(Errc::type_error, std::string("__getitem__: slice ") + name +
                                          " must be an int or None, got " + type_name_of(v));
      return clamped_index(v);
    };
    return IndexItem::range(part("start"), part("stop"), part("step"));
  }
  if (is_integer(o)) return IndexItem::at(clamped_index(o));
  throw_error(Errc::type_error, std::string("__getitem__: only integers, slices, None and ... are "
                                            "supported (basic indexing gives views); got ") +
                                    type_name_of(o));
}

std::vector<IndexItem> index_items(nb::handle key) {
  std::vector<IndexItem> items;
  if (PyTuple_Check(key.ptr())) {
    for (nb::handle k : key) items.push_back(index_item(k));
  } else {
    items.push_back(index_item(key));
  }
  return items;
}

// `a[i, j, ...]` with one integer per axis: the element as a NumPy scalar on the host, read
// after the array's pending work (as Numba's DeviceNDArray gives it). nullopt for any other
// key, and for masked arrays, whose elements stay 0-d views that carry the mask.
std::optional<nb::object> host_element(PyArray& self, std::span<const IndexItem> items) {
  if (self.masked() || static_cast<int>(items.size()) != self.ndim()) return std::nullopt;
  for (const IndexItem& item : items)
    if (item.kind != IndexItem::Kind::integer) return std::nullopt;
  const View& v = self.view();
  const View element = v.index(items);
  nb::object host = numpy_module().attr("zeros")(nb::tuple(), array_dtype(self));
  void* ptr = reinterpret_cast<void*>(nb::cast<std::uintptr_t>(host.attr("ctypes").attr("data")));
  {
    NoGil nogil;
    copy_to_host(ptr, element, stream_or_default(v));  // waits for the copy
  }
  return host[nb::tuple()];
}

nb::object getitem(PyArray& self, nb::handle key) {
  const std::vector<IndexItem> items = index_items(key);
  if (auto element = host_element(self, items)) return *element;
  return wrap(self.view().index(items), self.np_dtype);
}

void setitem(PyArray& self, nb::handle key, nb::handle value) {
  constexpr const char* entry = "__setitem__()";
  const View dst = self.view().index(index_items(key));
  dst.require_writable(entry, "the array");
  note_write();
  const auto stream = stream_or_default(dst);
  if (is_gpu_array(value)) {
    const ViewArg src(value, true, entry);
    copy(dst, src->broadcast_to(dst.shape(), entry), stream);
    return;
  }
  if (PyFloat_Check(value.ptr()) || PyLong_Check(value.ptr()) || PyComplex_Check(value.ptr()) ||
      PyBool_Check(value.ptr()) || nb::cast<bool>(numpy_module().attr("isscalar")(value))) {
    // One element's bytes, converted by NumPy unless that loses the value.
    nb::object scalar = host_value("assignable", value, array_dtype(self), {}, entry);
    nb::bytes raw = nb::borrow<nb::bytes>(scalar.attr("tobytes")());
    fill(dst, raw.c_str(), stream);
    return;
  }
  set_from_host(dst, host_value("assignable", value, array_dtype(self), dst.shape(), entry), value,
                stream, true);
}

}  // namespace

void bind_indexing(nb::module_& m) {
  auto cls = nb::borrow<nb::class_<PyArray>>(m.attr("DeviceNDArray"));
  cls.def("__getitem__", exit_safe(&getitem), nb::arg("key").none());
  cls.def("__setitem__", exit_safe(&setitem), nb::arg("key").none(), nb::arg("value").none());
  // After __getitem__: in the stubs, its parameter's type `slice` must not name this method.
  cls.def(
      "slice",
      [](PyArray& self, int axis, std::int64_t start, std::int64_t stop) {
        return wrap(self.view().slice(axis, start, stop), self.np_dtype);
      },
      nb::arg("axis"), nb::arg("start"), nb::arg("stop"),
      "View of [start, stop) along one axis with the tile-array rules "
      "(0 <= start < N, start <= stop <= N).");
}

}  // namespace cai::python

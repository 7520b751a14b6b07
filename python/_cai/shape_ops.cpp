// Numba's DeviceNDArray surface beyond indexing: reshape, ravel, view(dtype), squeeze,
// transpose(*axes) and .T, split, copy, and element access returning host scalars. Every
// method but copy() gives a view sharing memory and stream; the layout arithmetic is the
// core's (Layout::reshape, with_itemsize, permute, index). docs/array-methods.md.

#include <nanobind/stl/string.h>

#include <array>
#include <string>
#include <vector>

#include "array.h"
#include "bindings.h"
#include "cai/arrays/devices.h"
#include "cai/arrays/ops.h"
#include "cai/core/error.h"
#include "convert.h"
#include "streams.h"

namespace cai::python {

namespace {

// 'C', 'F' or 'A' (F when the array is F-contiguous and not C-contiguous, as NumPy's 'A').
bool fortran_order(nb::handle order, const View& v, const char* entry) {
  if (!order.is_none()) {
    const std::string o = nb::isinstance<nb::str>(order) ? nb::cast<std::string>(order) : "";
    if (o == "C") return false;
    if (o == "F") return true;
    if (o != "A")
      throw_error(Errc::value_error, std::string(entry) + ": order must be 'C', 'F' or 'A', got " +
                                         nb::repr(order).c_str());
  } else {
    return false;
  }
  return v.layout().is_f_only();
}

// An axis in [-ndim, ndim), normalized; IndexError naming the entry otherwise (NumPy's words).
int axis_value(std::int64_t a, int ndim, const char* entry) {
  if (a < -ndim || a >= ndim)
    throw_error(Errc::index_error, std::string(entry) + ": axis " + std::to_string(a) +
                                       " is out of bounds for an array of dimension " +
                                       std::to_string(ndim));
  return static_cast<int>(a < 0 ? a + ndim : a);
}

// An axis argument under the integer policy (convert.h).
int axis_arg(nb::handle o, int ndim, const char* entry) {
  return axis_value(read_int64(o, std::string(entry) + ": axis", "an int", Errc::index_error), ndim,
                    entry);
}

// `shape` given as reshape(2, 3), reshape((2, 3)) or reshape([2, 3]).
Dims shape_args(const nb::args& args, const char* entry) {
  const std::string what = std::string(entry) + ": shape";
  if (args.size() == 1) return read_dims(args[0], what, DimsForm::argument);
  return read_dims(args, what, DimsForm::argument);
}

nb::object reshape(PyArray& self, nb::args shape, nb::handle order) {
  const View& v = self.view();
  return wrap(v.reshape(shape_args(shape, "reshape()"), fortran_order(order, v, "reshape()")),
              self.np_dtype);
}

// Numba's ravel, split and squeeze take stream=: views queue no work, so it is only checked.
void check_stream(nb::handle stream, const char* entry, const View& v) {
  if (!stream.is_none()) (void)stream_arg(stream, entry, stream_or_default(v));
}

nb::object ravel(PyArray& self, nb::handle order, nb::handle stream) {
  const View& v = self.view();
  check_stream(stream, "ravel()", v);
  const std::array<std::int64_t, 1> flat{-1};
  return wrap(v.reshape(flat, fortran_order(order, v, "ravel()")), self.np_dtype);
}

nb::object view_as(PyArray& self, nb::handle dtype) {
  nb::object dt = numpy_module().attr("dtype")(dtype);
  return wrap(self.view().as_dtype(dtype_from_numpy(dt, "view()")), dt);
}

nb::object squeeze(PyArray& self, nb::handle axis, nb::handle stream) {
  const View& v = self.view();
  check_stream(stream, "squeeze()", v);
  const int ndim = v.ndim();
  std::vector<bool> drop(ndim, false);
  if (axis.is_none()) {
    for (int i = 0; i < ndim; ++i) drop[i] = v.shape()[i] == 1;
  } else {
    std::vector<nb::handle> axes;
    if (PyTuple_Check(axis.ptr()) || PyList_Check(axis.ptr())) {
      for (nb::handle a : axis) axes.push_back(a);
    } else {
      axes.push_back(axis);
    }
    for (nb::handle a : axes) {
      const int i = axis_arg(a, ndim, "squeeze()");
      if (drop[i])
        throw_error(Errc::value_error, "squeeze(): axis " + std::to_string(i) + " is repeated");
      if (v.shape()[i] != 1)
        throw_error(Errc::value_error, "squeeze(): axis " + std::to_string(i) + " has size " +
                                           std::to_string(v.shape()[i]) +
                                           "; only axes of size 1 can be squeezed out");
      drop[i] = true;
    }
  }
  // Index 0 on each dropped axis: a view without it (its stride no longer matters).
  std::vector<IndexItem> items;
  for (int i = 0; i < ndim; ++i) items.push_back(drop[i] ? IndexItem::at(0) : IndexItem::all());
  return wrap(v.index(items), self.np_dtype);
}

nb::object transpose(PyArray& self, nb::args axes) {
  const View& v = self.view();
  if (axes.size() == 0 || (axes.size() == 1 && axes[0].is_none()))
    return wrap(v.transpose(), self.np_dtype);
  nb::handle list = axes;
  if (axes.size() == 1 && !is_integer(axes[0])) list = axes[0];  // transpose((1, 0))
  std::vector<int> order;
  for (const std::int64_t a : read_dims(list, "transpose(): axes", DimsForm::argument))
    order.push_back(axis_value(a, v.ndim(), "transpose()"));
  return wrap(v.permute(order), self.np_dtype);
}

// What split() returns: one view per next(), made only when asked for, as Numba's generator.
struct SplitPieces {
  nb::object array;  ///< the DeviceNDArray being split; released when the pieces run out
  std::int64_t section = 0;
  std::int64_t next = 0;  ///< the first element of the next piece
};

nb::object next_piece(SplitPieces& self) {
  PyArray* a = self.array.is_valid() ? as_py_array(self.array, "split()") : nullptr;
  if (a == nullptr || self.next >= a->shape()[0]) {
    self.array.reset();
    throw nb::stop_iteration();
  }
  const std::int64_t begin = self.next;
  const std::int64_t end = begin + std::min(self.section, a->shape()[0] - begin);
  self.next = end;
  const std::array<IndexItem, 1> item{IndexItem::range(begin, end)};
  return wrap(a->view().index(item), a->np_dtype);
}

// The collector sees the array an iterator holds (its memory may have a Python owner).
int split_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (nb::inst_ready(self)) Py_VISIT(nb::inst_ptr<SplitPieces>(self)->array.ptr());
  return 0;
}

int split_clear(PyObject* self) {
  if (nb::inst_ready(self)) nb::inst_ptr<SplitPieces>(self)->array.reset();
  return 0;
}

PyType_Slot g_split_slots[] = {
    {Py_tp_traverse, (void*)split_traverse}, {Py_tp_clear, (void*)split_clear}, {0, nullptr}};

nb::object split(PyArray& self, std::int64_t section, nb::handle stream) {
  const View& v = self.view();
  check_stream(stream, "split()", v);
  if (v.ndim() != 1)
    throw_error(Errc::value_error, "split(): only 1-d arrays can be split, this one has " +
                                       std::to_string(v.ndim()) + " dimensions");
  if (section <= 0)
    throw_error(Errc::value_error, "split(): section must be a positive number of elements, got " +
                                       std::to_string(section));
  return nb::cast(SplitPieces{nb::find(&self), section, 0});
}

View copy_of(const View& src, bool fortran, const sync::StreamRef& stream) {
  View dst = View::allocate(src.dtype(), src.shape(), fortran, stream);
  copy(dst, src, stream);
  return dst;
}

nb::object copy_array(PyArray& self, nb::handle order, nb::handle stream) {
  const View& v = self.view();
  const bool fortran = fortran_order(order, v, "copy()");
  const auto s = stream_arg(stream, "copy()", stream_or_default(v));
  // The new array lives on the source's device, as copy.copy(a) (docs/scale-out.md); a
  // stream of another device is a ValueError naming both.
  const OperationDevice on("copy()", {{"the array", &v}}, s);
  const DeviceGuard there(new_array_device(v, s));
  View data =
      v.mask() ? View(v.ptr(), v.dtype(), v.layout(), v.readonly(), v.sync(), v.owner()) : v;
  View out;
  {
    NoGil nogil;  // an overlapping copy waits for its staging buffer
    out = copy_of(data, fortran, s);
    if (v.mask()) out.set_mask(std::make_shared<View>(copy_of(*v.mask(), fortran, s)));
  }
  return wrap(std::move(out), self.np_dtype);
}

}  // namespace

void bind_shape_ops(nb::module_& m) {
  auto cls = nb::borrow<nb::class_<PyArray>>(m.attr("DeviceNDArray"));
  cls.def("reshape", exit_safe(&reshape), nb::arg("shape"), nb::arg("order").none() = "C",
          nb::sig("def reshape(self, *shape: int | typing.Sequence[int], order: "
                  "typing.Literal['C', 'F', 'A'] = 'C') -> DeviceNDArray"),
          "A view with another shape (one size may be -1), elements read in C or F order, as "
          "NumPy's reshape. Never a copy: a layout that cannot be a view raises "
          "NotImplementedError naming the axes.");
  cls.def("ravel", exit_safe(&ravel), nb::arg("order").none() = "C", nb::arg("stream").none() = 0,
          nb::sig("def ravel(self, order: typing.Literal['C', 'F', 'A'] = 'C', stream: "
                  "StreamLike | None = 0) -> DeviceNDArray"),
          "A 1-d view of the elements in C (or F) order; NotImplementedError when the layout "
          "cannot be one strided run (NumPy would copy; cai never copies silently).");
  cls.def("view", exit_safe(&view_as), nb::arg("dtype"),
          nb::sig("def view(self, dtype: numpy.typing.DTypeLike) -> DeviceNDArray"),
          "The same bytes as another dtype. Another item size resizes the last axis, which "
          "must be contiguous.");
  cls.def("squeeze", exit_safe(&squeeze), nb::arg("axis").none() = nb::none(),
          nb::arg("stream").none() = 0,
          nb::sig("def squeeze(self, axis: int | tuple[int, ...] | None = None, stream: "
                  "StreamLike | None = 0) -> DeviceNDArray"),
          "A view without the axes of size 1 (all of them, or those named).");
  cls.def("transpose", exit_safe(&transpose), nb::arg("axes"),
          nb::sig("def transpose(self, *axes: int | typing.Sequence[int] | None) -> "
                  "DeviceNDArray"),
          "A view with the axes reversed, or in the order given (transpose(1, 0, 2) or "
          "transpose((1, 0, 2))).");
  cls.def_prop_ro(
      "T", exit_safe([](PyArray& self) { return wrap(self.view().transpose(), self.np_dtype); }),
      nb::sig("def T(self) -> DeviceNDArray"), "A view with the axes reversed.");
  nb::class_<SplitPieces>(m, "_SplitPieces", nb::type_slots(g_split_slots),
                          "The pieces of DeviceNDArray.split(), made one per next().")
      .def("__iter__", [](nb::handle self) { return nb::borrow(self); })
      .def("__next__", exit_safe(&next_piece));
  cls.def("split", exit_safe(&split), nb::arg("section"), nb::arg("stream").none() = 0,
          nb::sig("def split(self, section: int, stream: StreamLike | None = 0) "
                  "-> typing.Iterator[DeviceNDArray]"),
          "Views of consecutive pieces of `section` elements of a 1-d array (the last may be "
          "shorter), as an iterator.");
  cls.def("copy", exit_safe(&copy_array), nb::arg("order").none() = "C",
          nb::arg("stream").none() = 0,
          nb::sig("def copy(self, order: typing.Literal['C', 'F', 'A'] = 'C', stream: "
                  "object | None = 0) -> DeviceNDArray"),
          "A new device array with the same elements (and mask), contiguous in `order`, "
          "copied on `stream` (0: this array's stream), which becomes its stream.");
}

}  // namespace cai::python

// cai.ops: the built-in consumers. Each accepts any object with __cuda_array_interface__,
// imports it with the v3 rules and runs stream-ordered on `stream` (0: the stream of the
// array written, else the library default).

#include "cai/arrays/ops.h"
#include "array.h"
#include "cai/core/error.h"

namespace cai::python {

namespace {

sync::StreamRef op_stream(nb::handle stream, const View& written, const char* entry) {
  auto fallback = written.sync()->stream();
  return stream_arg(stream, entry, fallback ? *fallback : library_default_stream());
}

}  // namespace

void bind_ops(nb::module_& m) {
  nb::module_ ops = m.def_submodule("ops", "Stream-ordered operations on any GPU arrays.");
  ops.def(
      "copy",
      [](nb::handle dst, nb::handle src, nb::handle stream) {
        View d = import_view(dst, true, "copy()");
        View s = import_view(src, true, "copy()");
        const auto st = op_stream(stream, d, "copy()");
        NoGil nogil;  // an overlapping copy waits for its staging buffer
        copy(d, s, st);
      },
      nb::arg("dst"), nb::arg("src"), nb::arg("stream").none() = 0,
      "dst[...] = src; equal shapes and dtypes, any strides.");
  ops.def(
      "fill",
      [](nb::handle arr, nb::handle value, nb::handle stream) {
        View d = import_view(arr, true, "fill()");
        nb::object scalar = numpy_module().attr("asarray")(value, numpy_dtype(d.dtype()));
        if (nb::cast<int>(scalar.attr("ndim")) != 0)
          throw_error(Errc::type_error, "fill(): value must be a scalar");
        nb::bytes raw = nb::borrow<nb::bytes>(scalar.attr("tobytes")());
        const auto st = op_stream(stream, d, "fill()");
        fill(d, raw.c_str(), st);
      },
      nb::arg("arr"), nb::arg("value"), nb::arg("stream").none() = 0,
      "Sets every element of arr to value (converted by NumPy's rules).");
  ops.def(
      "add",
      [](nb::handle a, nb::handle b, nb::handle out, nb::handle stream) {
        View va = import_view(a, true, "add()");
        View vb = import_view(b, true, "add()");
        View vo = import_view(out, true, "add()");
        const auto st = op_stream(stream, vo, "add()");
        add(vo, va, vb, st);
      },
      nb::arg("a"), nb::arg("b"), nb::arg("out"), nb::arg("stream").none() = 0,
      "out = a + b elementwise; equal shapes and dtypes, any strides.");
}

}  // namespace cai::python

// cai.ops: the built-in consumers. Each accepts any object with __cuda_array_interface__,
// imports it with the v3 rules and runs stream-ordered on `stream` (0: the stream of the
// array written, else the library default). copy and fill move bytes; the elementwise
// operations (add, ...) are bound from the table in cai/device/operations.h.

#include <string>
#include <utility>

#include "array.h"
#include "bindings.h"
#include "cai/arrays/ops.h"
#include "cai/core/error.h"
#include "interface.h"
#include "streams.h"

namespace cai::python {

namespace {

PyObject* zero() {
  static PyObject* z = PyLong_FromLong(0);
  return z;
}

sync::StreamRef op_stream(nb::handle stream, const View& written, const char* entry) {
  if (stream.is_none() || stream.ptr() == zero()) return stream_or_default(written);
  return stream_arg(stream, entry, stream_or_default(written));
}

template <std::size_t>
using Handle = nb::handle;

// ops.<name>(a, [b,] out, stream=0) for an operation with N inputs.
template <std::size_t N, std::size_t... I>
void bind_elementwise(nb::module_& ops, device::ElementwiseOp op, std::index_sequence<I...>) {
  static_assert(N <= device::max_elementwise_inputs);
  const device::ElementwiseOpInfo& info = device::info(op);
  ops.def(
      info.name.data(),
      [op, entry = std::string(info.name) + "()"](Handle<I>... in, nb::handle out,
                                                  nb::handle stream) {
        const ViewArg inputs[] = {ViewArg(in, true, entry.c_str())...};
        const ViewArg vo(out, true, entry.c_str());
        const View* pointers[] = {inputs[I].get()...};
        const auto st = op_stream(stream, *vo, entry.c_str());
        note_write();
        NoGil nogil;  // the backend may wait (staging without memory pools)
        elementwise(op, *vo, pointers, st);
      },
      nb::arg(device::elementwise_operand_name(I + 1).data())..., nb::arg("out"),
      nb::arg("stream").none() = 0, info.summary.data());
}

}  // namespace

void bind_ops(nb::module_& m) {
  nb::module_ ops = m.def_submodule("ops", "Stream-ordered operations on any GPU arrays.");
  ops.def(
      "copy",
      [](nb::handle dst, nb::handle src, nb::handle stream) {
        const ViewArg d(dst, true, "copy()");
        const ViewArg s(src, true, "copy()");
        const auto st = op_stream(stream, *d, "copy()");
        note_write();
        NoGil nogil;  // the backend may wait (staging without memory pools)
        copy(*d, *s, st);
      },
      nb::arg("dst"), nb::arg("src"), nb::arg("stream").none() = 0,
      "dst[...] = src; equal shapes and dtypes, any strides.");
  ops.def(
      "fill",
      [](nb::handle arr, nb::handle value, nb::handle stream) {
        const ViewArg d(arr, true, "fill()");
        nb::object scalar = numpy_module().attr("asarray")(value, numpy_dtype(d->dtype()));
        if (nb::cast<int>(scalar.attr("ndim")) != 0)
          throw_error(Errc::type_error, "fill(): value must be a scalar");
        nb::bytes raw = nb::borrow<nb::bytes>(scalar.attr("tobytes")());
        const auto st = op_stream(stream, *d, "fill()");
        note_write();
        NoGil nogil;  // the backend may wait (staging without memory pools)
        fill(*d, raw.c_str(), st);
      },
      nb::arg("arr"), nb::arg("value"), nb::arg("stream").none() = 0,
      "Sets every element of arr to value (converted by NumPy's rules).");
  // The elementwise operations, one function each, from the table in cai/device/operations.h:
  // ops.<name>(<inputs>..., out, stream=0).
  for (int i = 0; i < device::elementwise_op_count; ++i) {
    const auto op = static_cast<device::ElementwiseOp>(i);
    const device::ElementwiseOpInfo& info = device::info(op);
    // The table's strings are literals, so data() is NUL-terminated and lives forever.
    switch (info.inputs) {
      case 1:
        bind_elementwise<1>(ops, op, std::make_index_sequence<1>{});
        break;
      case 2:
        bind_elementwise<2>(ops, op, std::make_index_sequence<2>{});
        break;
    }
  }
}

}  // namespace cai::python

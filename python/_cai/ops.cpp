// cai.ops: the built-in consumers. Each accepts any object with __cuda_array_interface__,
// imports it with the v3 rules and runs stream-ordered on `stream` (0: the stream of the
// array written, else the library default). copy and fill move bytes; the elementwise
// operations (add, ...) are bound from the table in cai/device/operations.h.

#include <array>
#include <optional>
#include <string>
#include <utility>

#include "array.h"
#include "bindings.h"
#include "cai/arrays/ops.h"
#include "cai/core/error.h"
#include "fastcall.h"
#include "import.h"
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

// ops.<name>(a, [b,] out, stream=0): one plain C function per operation (fastcall.h), the
// operation's number Op with N inputs.
template <int Op, std::size_t N = static_cast<std::size_t>(
                      device::info(static_cast<device::ElementwiseOp>(Op)).inputs)>
PyObject* elementwise_call(PyObject*, PyObject* const* args, Py_ssize_t nargs,
                           PyObject* kwnames) noexcept {
  return fastcall([&] {
    constexpr auto op = static_cast<device::ElementwiseOp>(Op);
    // The argument names ("a", "b", "out", "stream"): made once.
    static const std::array<PyObject*, N + 2> names = [] {
      std::array<PyObject*, N + 2> n{};
      for (std::size_t k = 0; k < N; ++k)
        n[k] = PyUnicode_InternFromString(device::elementwise_operand_name(k + 1).data());
      n[N] = PyUnicode_InternFromString("out");
      n[N + 1] = PyUnicode_InternFromString("stream");
      return n;
    }();
    const char* entry = elementwise_entry(op);
    std::array<PyObject*, N + 2> in{};
    in[N + 1] = zero();
    read_args(entry, args, static_cast<std::size_t>(nargs), kwnames, names, N + 2, N + 1, in);
    const ViewArg vo(in[N], true, entry);
    std::optional<ViewArg> inputs[N];
    const View* views[N];
    for (std::size_t k = 0; k < N; ++k) views[k] = inputs[k].emplace(in[k], true, entry).get();
    const auto st = op_stream(in[N + 1], *vo, entry);
    note_write();
    {
      NoGil nogil;  // the backend may wait (staging without memory pools)
      elementwise(op, *vo, views, st);
    }
    return nb::none();
  });
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
        // NumPy's conversion, unless it loses the value; a scalar (cai._assign).
        nb::object scalar =
            host_value("assignable", value, numpy_dtype(d->dtype()), {}, "fill(): value");
        nb::bytes raw = nb::borrow<nb::bytes>(scalar.attr("tobytes")());
        const auto st = op_stream(stream, *d, "fill()");
        note_write();
        NoGil nogil;  // the backend may wait (staging without memory pools)
        fill(*d, raw.c_str(), st);
      },
      nb::arg("arr"), nb::arg("value"), nb::arg("stream").none() = 0,
      "Sets every element of arr to value (converted by NumPy's rules; a conversion that "
      "loses the value is a ValueError).");
  // The elementwise operations, one function each, from the table in cai/device/operations.h:
  // ops.<name>(<inputs>..., out, stream=0).
  static std::array<PyMethodDef, device::elementwise_op_count> defs;
  static const auto calls = []<int... Op>(std::integer_sequence<int, Op...>) {
    return std::array<PyCFunction, sizeof...(Op)>{
        reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&elementwise_call<Op>))...};
  }
  (std::make_integer_sequence<int, device::elementwise_op_count>{});
  static std::array<std::string, device::elementwise_op_count> docs;
  for (int i = 0; i < device::elementwise_op_count; ++i) {
    const auto op = static_cast<device::ElementwiseOp>(i);
    const device::ElementwiseOpInfo& info = device::info(op);
    // The table's strings are literals, so data() is NUL-terminated and lives forever.
    std::string signature = std::string(info.name) + "(";
    for (int k = 0; k < info.inputs; ++k)
      signature += std::string(device::elementwise_operand_name(k + 1)) + ", ";
    docs[i] = signature + "out, stream=0)\n--\n\n" + std::string(info.summary);
    defs[i] = {info.name.data(), calls[i], METH_FASTCALL | METH_KEYWORDS, docs[i].c_str()};
    // Bound to the module, as module functions are (they pickle by name).
    ops.attr(info.name.data()) =
        nb::steal(PyCFunction_NewEx(&defs[i], ops.ptr(), ops.attr("__name__").ptr()));
  }
}

}  // namespace cai::python

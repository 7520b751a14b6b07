// cai._cai.core: the C++ core's answers, exposed so that Python tests can compare them with
// NumPy's (typestr and descr parsing, layout flags and extents).

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "array.h"
#include "bindings.h"
#include "cai/core/dtype.h"
#include "cai/core/error.h"
#include "cai/core/layout.h"
#include "import.h"
#include "interface.h"

namespace cai::python {

namespace {

nb::dict dtype_facts(const DType& t) {
  nb::dict d;
  d["kind"] = std::string(1, static_cast<char>(t.kind()));
  d["byteorder"] = std::string(1, static_cast<char>(t.byte_order()));
  d["itemsize"] = t.itemsize();
  d["str"] = t.str();
  d["native"] = t.is_native();
  d["unit"] = std::string(t.datetime_unit());
  nb::list fields;
  for (const Field& f : t.fields())
    fields.append(nb::make_tuple(f.name, f.type.str(), to_tuple(f.shape), f.offset));
  d["fields"] = fields;
  d["descr"] = descr_to_python(t.descr());
  return d;
}

}  // namespace

void bind_core(nb::module_& m) {
  nb::module_ core = m.def_submodule("core", "Probes of the C++ core, for tests.");
  core.def(
      "parse_typestr",
      [](const std::string& s, bool v2_as_bfloat16) {
        return dtype_facts(DType::from_typestr(s, {v2_as_bfloat16}));
      },
      nb::arg("typestr"), nb::arg("v2_as_bfloat16") = false);
  core.def(
      "parse_descr",
      [](nb::handle descr) { return dtype_facts(DType::from_descr(descr_from_python(descr))); },
      nb::arg("descr"));
  core.def(
      "layout_facts",
      [](nb::handle shape, nb::handle strides, std::int64_t itemsize) {
        Layout l(read_dims(shape, "shape", DimsForm::argument),
                 read_dims(strides, "strides", DimsForm::argument), itemsize);
        nb::dict d;
        d["c_contiguous"] = l.is_c_contiguous();
        d["f_contiguous"] = l.is_f_contiguous();
        const auto e = l.extent();
        d["extent"] = nb::make_tuple(e.lo, e.hi);
        d["size"] = l.size();
        d["may_overlap"] = l.may_overlap();
        return d;
      },
      nb::arg("shape"), nb::arg("strides"), nb::arg("itemsize"));
  core.def(
      "validate",
      [](nb::handle desc) {
        // Validation only: no import, so the producer's stream is named as given (validated:
        // not 0), not ordered (an import would stand for a foreign stream by an event).
        View v = view_from_interface(desc, nb::none(), false, "validate()");
        nb::dict d = export_interface(v);
        if (PyDict_Check(desc.ptr())) {
          PyObject* s = PyDict_GetItemString(desc.ptr(), "stream");
          if (s != nullptr && s != Py_None) d["stream"] = nb::int_(nb::handle(s));
        }
        return d;
      },
      nb::arg("desc"), "Validates a CAI dict and gives back the normalized v3 dict.");
}

}  // namespace cai::python

// Each function reports what the caster gave it, so tests can check acceptance and rejection
// for every constraint of cai::nb::array.

#include <nanobind/stl/string.h>

#include <cai/python/nb_array.h>

namespace nb = nanobind;
using namespace nb::literals;

namespace {

template <class A>
nb::dict describe(const A& a) {
  nb::dict d;
  nb::list shape, strides;
  for (int i = 0; i < A::ndim; ++i) {
    shape.append(a.shape(i));
    strides.append(a.stride(i));
  }
  d["shape"] = nb::tuple(shape);
  d["strides"] = nb::tuple(strides);  // elements
  d["data"] = reinterpret_cast<std::uintptr_t>(a.data());
  d["masked"] = static_cast<bool>(a.view().mask());
  d["readonly"] = a.view().readonly();
  return d;
}

}  // namespace

NB_MODULE(_caster_probe, m) {
  cai::python::capi();
  m.def("any_f32_2d", [](cai::nb::array<const float, 2> a) { return describe(a); });
  m.def("c_f32_2d", [](cai::nb::array<const float, 2, cai::c_contig> a) { return describe(a); });
  m.def("f_f32_2d", [](cai::nb::array<const float, 2, cai::f_contig> a) { return describe(a); });
  m.def("writable_i32_1d",
        [](cai::nb::array<std::int32_t, 1, cai::writable> a) { return describe(a); });
  m.def("masked_f64_1d",
        [](cai::nb::array<const double, 1, cai::allow_mask> a) { return describe(a); });
  m.def("unmasked_f64_1d", [](cai::nb::array<const double, 1> a) { return describe(a); });
  // Overloads: the first pass picks the one that fits without conversions.
  m.def("overloaded", [](cai::nb::array<const float, 1>) { return std::string("f32"); });
  m.def("overloaded", [](cai::nb::array<const double, 1>) { return std::string("f64"); });
  m.def("signature",
        [] { return cai::nb::array<float, 2, cai::c_contig, cai::writable>::signature(); });
  m.def(
      "stream_of", [](cai::nb::stream s) { return s.handle(); }, "stream"_a = nb::none());
  m.def("wrap", [](cai::nb::array<const float, 1> a) { return a; });
}

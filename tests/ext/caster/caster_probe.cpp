// A test extension for tests/python/test_caster.py: one bound function per constraint of
// cai::nb::array, the stream argument, the producer helpers and for_each. It links no cai
// library and makes no init call; tests/ext/CMakeLists.txt builds it with the project's
// compiler and again with another one (CAI_PROBE_MODULE names each build).

#include <nanobind/stl/string.h>

#include <cai/nanobind/for_each.h>

#include <atomic>
#include <optional>
#include <vector>

#ifndef CAI_PROBE_MODULE
#define CAI_PROBE_MODULE _caster_probe
#endif

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
  d["masked"] = a.has_mask();
  d["readonly"] = a.readonly();
  d["typestr"] = a.info().typestr;
  return d;
}

struct Fill {
  float value;
  CAI_HOST_DEVICE void operator()(float& out) const { out = value; }
};

struct Axpy {
  float alpha;
  CAI_HOST_DEVICE void operator()(const float& x, float& y) const { y = alpha * x + y; }
};

struct Throws {
  void operator()(float&) const { throw std::runtime_error("the functor failed"); }
};

std::atomic<int> g_owners_released{0};
std::optional<cai::nb::array<float, 1, cai::writable>> g_kept;  // released after finalization

}  // namespace

NB_MODULE(CAI_PROBE_MODULE, m) {
  using F2 = cai::nb::array<const float, 2>;
  m.def("any_f32_2d", [](F2 a) { return describe(a); });
  m.def("c_f32_2d", [](cai::nb::array<const float, 2, cai::c_contig> a) { return describe(a); });
  m.def("f_f32_2d", [](cai::nb::array<const float, 2, cai::f_contig> a) { return describe(a); });
  m.def("writable_i32_1d",
        [](cai::nb::array<std::int32_t, 1, cai::writable> a) { return describe(a); });
  m.def("masked_f64_1d",
        [](cai::nb::array<const double, 1, cai::allow_mask> a) { return describe(a); });
  m.def("unmasked_f64_1d", [](cai::nb::array<const double, 1> a) { return describe(a); });
  // A 0-d array back to Python (its element is device memory: the host does not read it).
  m.def("scalar_f64", [](cai::nb::array<const double, 0> a) { return a; });
  // Overloads: the first pass picks the one that fits without conversions.
  m.def("overloaded", [](cai::nb::array<const float, 1>) { return std::string("f32"); });
  m.def("overloaded", [](cai::nb::array<const double, 1>) { return std::string("f64"); });
  m.def("signature",
        [] { return cai::nb::array<float, 2, cai::c_contig, cai::writable>::signature(); });
  m.def(
      "stream_of", [](cai::nb::stream s) { return s.handle(); }, "stream"_a = nb::none());
  m.def("wrap", [](cai::nb::array<const float, 1> a) { return a; });
  // A C++ cast, outside the argument list.
  m.def("cast_f32_2d", [](nb::handle obj) { return describe(F2(obj)); });

  // Producers.
  m.def(
      "empty_f32",
      [](std::int64_t n, cai::nb::stream s) { return cai::nb::empty<float, 1>({n}, s); }, "n"_a,
      "stream"_a = nb::none());
  m.def(
      "view_of",
      [](cai::nb::array<float, 1, cai::writable> a, bool cpp_owner, cai::nb::stream s) {
        // Memory the module "owns": here another array's, kept alive by the owner.
        const std::int64_t shape[] = {a.shape(0)};
        const std::int64_t strides[] = {a.stride(0) * 4};
        const std::uint64_t ptr = reinterpret_cast<std::uintptr_t>(a.data());
        if (!cpp_owner)
          return cai::nb::make_array(ptr, cai::dlpack_type_of<float>(), shape, strides, s,
                                     nb::cast(a));
        auto owner = std::shared_ptr<const void>(
            new cai::nb::array<float, 1, cai::writable>(a), [](const void* p) {
              delete static_cast<const cai::nb::array<float, 1, cai::writable>*>(p);
              g_owners_released.fetch_add(1);
            });
        return cai::nb::make_array(ptr, cai::dlpack_type_of<float>(), shape, strides, s,
                                   std::move(owner));
      },
      "a"_a, "cpp_owner"_a, "stream"_a = nb::none());
  m.def("owners_released", [] { return g_owners_released.load(); });
  m.def("keep", [](cai::nb::array<float, 1, cai::writable> a) { g_kept = std::move(a); });

  // The launch primitive.
  m.def(
      "fill",
      [](cai::nb::array<float, 1, cai::writable> out, float value, cai::nb::stream s) {
        cai::nb::for_each(s, Fill{value}, out);
      },
      "out"_a, "value"_a, "stream"_a = nb::none());
  m.def(
      "axpy",
      [](float alpha, cai::nb::array<const float, 2> x, cai::nb::array<float, 2, cai::writable> y,
         cai::nb::stream s) { cai::nb::for_each(s, Axpy{alpha}, x, y); },
      "alpha"_a, "x"_a, "y"_a, "stream"_a = nb::none());
  m.def(
      "throwing",
      [](cai::nb::array<float, 1, cai::writable> out, cai::nb::stream s) {
        cai::nb::for_each(s, Throws{}, out);
      },
      "out"_a, "stream"_a = nb::none());
  m.def("slice_error", [](cai::nb::array<const float, 1> a) {
    return a.ref().slice(0, 1, a.shape(0) + 1).shape(0);  // cai::Error(index_error)
  });

  // The C API's layout as this module's compiler sees it (tests/python/test_capi_layout.py).
  m.def("capi_layout", [] {
    nb::dict slots;
#define CAI_PROBE_SLOT(ret, name, params, since) slots[#name] = offsetof(CaiCApi, name);
    CAI_CAPI_SLOTS(CAI_PROBE_SLOT)
#undef CAI_PROBE_SLOT
    nb::dict d;
    d["slots"] = slots;
    d["CaiCApi"] = sizeof(CaiCApi);
    d["CaiArrayInfo"] =
        nb::make_tuple(sizeof(CaiArrayInfo), offsetof(CaiArrayInfo, stream),
                       offsetof(CaiArrayInfo, typestr), offsetof(CaiArrayInfo, array));
    d["CaiArrayRequest"] = sizeof(CaiArrayRequest);
    d["CaiMemory"] = nb::make_tuple(sizeof(CaiMemory), offsetof(CaiMemory, release_context));
    d["CaiHostTask"] = nb::make_tuple(sizeof(CaiHostTask), offsetof(CaiHostTask, run_at));
    d["version"] = CAI_CAPI_VERSION;
    return d;
  });
}

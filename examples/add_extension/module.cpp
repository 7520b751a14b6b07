// add(a, b, out, stream=None): out = a + b for any GPU arrays of float32 or float64 (cai,
// CuPy, PyTorch, JAX, Numba, ...), on `stream`, ordered with the CAI v3 rules. The same code
// is a CUDA kernel on a GPU (when nvcc compiles this file) and a race-checked task on cai's
// simulator.

#include <cai/nanobind/for_each.h>

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// The kernel: one element.
struct Add {
  template <class T>
  CAI_HOST_DEVICE void operator()(const T& a, const T& b, T& out) const {
    out = a + b;
  }
};

template <class T>
void add(cai::nb::array<const T, 1> a, cai::nb::array<const T, 1> b,
         cai::nb::array<T, 1, cai::writable> out, cai::nb::stream s) {
  cai::nb::for_each(s, Add{}, a, b, out);
}

}  // namespace

NB_MODULE(_add_ext, m) {
  m.def("add", &add<float>, "a"_a, "b"_a, "out"_a, "stream"_a = nb::none());
  m.def("add", &add<double>, "a"_a, "b"_a, "out"_a, "stream"_a = nb::none());
}

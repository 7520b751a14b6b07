// Bound no-ops for the caster rows of bench/interop.py: what an extension function pays to
// receive GPU arrays through cai::nb::array (cai's C++ API), and, as the peer, what it pays to
// receive NumPy arrays through nanobind's own nb::ndarray caster. The bodies do nothing, so
// a call measures argument conversion plus nanobind's dispatch (noop0 measures the dispatch).

#include <nanobind/ndarray.h>

#include <cai/nanobind/array.h>

namespace nb = nanobind;

namespace {

using Arr = cai::nb::array<const float, 2>;
using Nd = nb::ndarray<const float, nb::ndim<2>, nb::device::cpu>;

}  // namespace

NB_MODULE(_cai_bench_caster, m) {
  m.def("noop0", [] {});
  m.def("noop1", [](Arr) {});
  m.def("noop8", [](Arr, Arr, Arr, Arr, Arr, Arr, Arr, Arr) {});
  m.def("nd_noop1", [](Nd) {});
  m.def("nd_noop8", [](Nd, Nd, Nd, Nd, Nd, Nd, Nd, Nd) {});
}

// add(a, b, out, stream=None): out = a + b for any GPU arrays of float32 or float64, as a CUDA
// kernel over typed views on a GPU, and as a stream-ordered CPU loop on cai's simulator.

#include <cai/device/simulator.h>
#include <cai/python/nb_array.h>

#include <vector>

#if ADD_EXT_HAVE_CUDA
#include "kernels.h"
#endif

namespace nb = nanobind;
using namespace nb::literals;

namespace {

template <class T>
using In = cai::nb::array<const T, 1>;
template <class T>
using Out = cai::nb::array<T, 1, cai::writable>;

template <class T>
cai::device::sim::Access access(const cai::View& v, bool write) {
  return {v.ptr(), v.shape(), v.strides(), sizeof(T), write};
}

template <class T>
void add(In<T> a, In<T> b, Out<T> out, cai::nb::stream s) {
  if (a.shape(0) != out.shape(0) || b.shape(0) != out.shape(0))
    throw nb::value_error("add(): a, b and out must have the same length");
  cai::nb::stream_order order(s, a, b, out);  // CAI v3: wait for the producers' streams
  if (cai::device::sim::active()) {
    // The simulator's stand-in for the kernel: a task on the stream, with its accesses declared
    // so that the race detector checks it like any kernel. Like a kernel, it does not own the
    // memory: the caller keeps the arrays alive (the simulator's free waits for pending work).
    const cai::device::sim::Access accesses[] = {
        access<T>(a.view(), false), access<T>(b.view(), false), access<T>(out.view(), true)};
    cai::device::sim::enqueue_task(
        s.handle(), accesses,
        [ra = a.ref(), rb = b.ref(), ro = out.ref()] {
          for (std::int64_t i = 0; i < ro.shape(0); ++i) ro(i) = ra(i) + rb(i);
        },
        "add_extension.add");
  } else {
#if ADD_EXT_HAVE_CUDA
    launch_add(a.ref(), b.ref(), out.ref(), s.handle());
#else
    throw nb::type_error("add(): built without nvcc, so only the simulator is supported");
#endif
  }
  order.finish();  // the producers' streams now wait for this work
}

// A producer: a new array owned by C++ (a std::vector-backed buffer would do the same).
nb::object arange(std::int64_t n, cai::nb::stream s) {
  auto buffer = std::make_shared<cai::DeviceBuffer>(cai::device::MemoryKind::device,
                                                    static_cast<std::size_t>(n) * sizeof(float));
  std::vector<float> host(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) host[static_cast<std::size_t>(i)] = static_cast<float>(i);
  auto& backend = cai::device::backend();
  backend.copy_async(buffer->ptr(), reinterpret_cast<std::uint64_t>(host.data()),
                     host.size() * sizeof(float), s.handle());
  backend.stream_synchronize(s.handle());  // `host` dies on return
  const std::int64_t shape[] = {n};
  return cai::nb::make_array(buffer->ptr(), cai::DType::from_typestr("<f4"), shape, {}, s.ref(),
                             std::shared_ptr<const void>(buffer));
}

}  // namespace

NB_MODULE(_add_ext, m) {
  cai::python::capi();  // share the cai package's backend before anything uses it
  m.def("add", &add<float>, "a"_a, "b"_a, "out"_a, "stream"_a = nb::none());
  m.def("add", &add<double>, "a"_a, "b"_a, "out"_a, "stream"_a = nb::none());
  m.def("arange", &arange, "n"_a, "stream"_a = nb::none(),
        "A float32 device array 0..n-1 made by C++ and handed to Python with both protocols.");
}

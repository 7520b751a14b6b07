#pragma once

// cai::nb::for_each(stream, functor, arrays...): the one launch primitive for extension
// authors, whatever the backend. The functor is called once per element with element
// references (const T& for read-only arguments, T& for cai::writable ones), and must be
// CAI_HOST_DEVICE:
//   - on the CUDA backend it runs in a kernel, which exists when this header is compiled by
//     nvcc (cai_add_extension(... CUDA) does that where nvcc is found);
//   - on the simulator it runs as a host task on the stream, declared to read the read-only
//     arrays and write the writable ones, so that the race detector checks it like any kernel;
//     the task reaches the arrays where the simulator lets the host see device memory.
// Either way the work is ordered on `stream` with the CAI v3 rules, without blocking the host.

#include <cstdint>
#include <exception>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cai/arrays/host_device.h"
#include "cai/nanobind/array.h"

#if defined(__GNUC__)
#pragma GCC visibility push(hidden)  // as nanobind's namespace (cai/nanobind/api.h)
#endif

namespace cai {
namespace nb {

namespace detail {

template <int N>
struct Extents {
  std::int64_t v[N > 0 ? N : 1];
};

// The element at multi-index `index` of one typed view.
template <class Ref, int N>
CAI_HOST_DEVICE typename Ref::element_type& element_at(const Ref& r, const std::int64_t* index) {
  std::int64_t offset = 0;
  for (int k = 0; k < N; ++k) offset += index[k] * r.stride(k);
  return r.data()[offset];
}

// Applies f to the elements at row-major position `linear` of every view.
template <int N, class F, class... Refs>
CAI_HOST_DEVICE void apply_at(std::int64_t linear, const Extents<N>& shape, F& f,
                              const Refs&... refs) {
  std::int64_t index[N > 0 ? N : 1] = {};
  for (int k = N - 1; k >= 0; --k) {
    index[k] = linear % shape.v[k];
    linear /= shape.v[k];
  }
  f(element_at<Refs, N>(refs, index)...);
}

// The same view of the same elements at another address of them (N > 0: shape and strides).
template <class Ref>
Ref rebased(const Ref& r, std::uint64_t data) {
  auto* p = reinterpret_cast<typename Ref::element_type*>(static_cast<std::uintptr_t>(data));
  if constexpr (Ref::ndim == 0) {
    return Ref(p);
  } else {
    typename Ref::Extents shape{}, strides{};
    for (int k = 0; k < Ref::ndim; ++k) {
      shape[k] = r.shape(k);
      strides[k] = r.stride(k);
    }
    return Ref(p, shape, strides);
  }
}

template <int N, class F, class... Refs>
struct HostTask {
  F f;
  Extents<N> shape;
  std::int64_t size;
  std::tuple<Refs...> refs;
  std::string error;

  static const char* run_at(void* context, const std::uint64_t* data) {
    auto* task = static_cast<HostTask*>(context);
    try {
      task->run_all(data, std::index_sequence_for<Refs...>{});
      return nullptr;
    } catch (const std::exception& e) {
      task->error = e.what();
    } catch (...) {
      task->error = "the functor threw a non-standard exception";
    }
    return task->error.c_str();
  }
  static void destroy(void* context) { delete static_cast<HostTask*>(context); }

  // Every element, with each view moved to where the host reaches its elements.
  template <std::size_t... I>
  void run_all(const std::uint64_t* data, std::index_sequence<I...>) {
    const std::tuple<Refs...> here{rebased(std::get<I>(refs), data[I])...};
    std::apply(
        [this](const Refs&... at) {
          for (std::int64_t e = 0; e < size; ++e) apply_at<N>(e, shape, f, at...);
        },
        here);
  }
};

#if defined(__CUDACC__)
template <int N, class F, class... Refs>
__global__ void for_each_kernel(F f, Extents<N> shape, std::int64_t size, Refs... refs) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < size;
       i += step)
    apply_at<N>(i, shape, f, refs...);
}
#endif

template <int N, class F, class... Refs>
void launch_on_gpu(const stream& s, const F& f, const Extents<N>& shape, std::int64_t size,
                   const Refs&... refs) {
#if defined(__CUDACC__)
  std::int32_t device = 0;
  check(api().current_device(&device));
  if (cudaError_t err = cudaSetDevice(device); err != cudaSuccess)
    throw_error(Errc::device_error,
                std::string("for_each(): cudaSetDevice failed: ") + cudaGetErrorString(err));
  const int threads = 256;
  const std::int64_t wanted = (size + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(wanted < 65535 * 32 ? wanted : 65535 * 32);
  // CAI handles 1 and 2 are cudaStreamLegacy and cudaStreamPerThread themselves.
  for_each_kernel<N>
      <<<blocks, threads, 0, reinterpret_cast<cudaStream_t>(s.handle())>>>(f, shape, size, refs...);
  if (cudaError_t err = cudaGetLastError(); err != cudaSuccess)
    throw_error(Errc::device_error,
                std::string("for_each(): kernel launch failed: ") + cudaGetErrorString(err));
#else
  (void)s, (void)f, (void)shape, (void)size, ((void)refs, ...);
  throw_error(Errc::not_implemented,
              "for_each(): this module was compiled without CUDA, so its kernels run only on "
              "cai's simulator (CAI_BACKEND=sim); build it with cai_add_extension(... CUDA) "
              "where nvcc is installed");
#endif
}

}  // namespace detail

/// Applies `f` to each element of equally shaped arrays on stream `s`, ordered with the CAI
/// v3 rules (waits for the arrays' streams before, makes them wait for the work after). The
/// arrays are cai::nb::array arguments; f gets element references in the same order.
template <class F, class First, class... Rest>
void for_each(const stream& s, F f, First& first, Rest&... rest) {
  constexpr int N = First::ndim;
  static_assert(((Rest::ndim == N) && ...),
                "cai::nb::for_each: the arrays must have the same number of dimensions.");
  static_assert(std::is_copy_constructible_v<F>,
                "cai::nb::for_each: the functor is copied to the device (or the simulator's "
                "stream); make it copyable.");
  detail::Extents<N> shape{};
  std::int64_t size = 1;
  for (int k = 0; k < N; ++k) {
    shape.v[k] = first.shape(k);
    size *= shape.v[k];
  }
  int position = 1;
  auto same_shape = [&](const auto& a) {
    for (int k = 0; k < N; ++k)
      if (a.shape(k) != first.shape(k))
        throw_error(Errc::value_error, "for_each(): array " + std::to_string(position) +
                                           " has extent " + std::to_string(a.shape(k)) +
                                           " on axis " + std::to_string(k) + ", array 0 has " +
                                           std::to_string(first.shape(k)) +
                                           "; the arrays must have the same shape");
    ++position;
  };
  (same_shape(rest), ...);

  stream_order order(s, first, rest...);
  std::int32_t backend = 0;
  detail::check(detail::api().backend_kind(&backend));
  if (size > 0) {
    if (backend == CAI_BACKEND_SIMULATOR) {
      using Task = detail::HostTask<N, F, decltype(first.ref()), decltype(rest.ref())...>;
      auto* task = new Task{f, shape, size, {first.ref(), rest.ref()...}, {}};
      CaiArray* handles[] = {first.handle(), rest.handle()...};
      const std::uint8_t writes[] = {First::is_writable, Rest::is_writable...};
      const CaiHostTask host{sizeof(CaiHostTask), "cai::nb::for_each", task, nullptr,
                             &Task::destroy,      &Task::run_at};
      const CaiStream work = s.c_stream();
      detail::check(
          detail::api().enqueue_host_task(&work, handles, writes, 1 + sizeof...(Rest), &host));
    } else {
      detail::launch_on_gpu<N>(s, f, shape, size, first.ref(), rest.ref()...);
    }
  }
  order.finish();
}

}  // namespace nb
}  // namespace cai

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

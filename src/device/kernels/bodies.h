#pragma once

// Internal: the bodies of the CUDA kernels, as functions of the thread's coordinates in the
// launch (block, thread x, thread y), so that the CPU can run them over the same grid, a
// block at a time (tests/cpp/device/grid_runner.h), and check them against host references
// where there is no GPU. kernels.cu wraps each in a __global__ entry. A tiled body has two
// phases with a barrier between them (__syncthreads on the device; on the CPU every thread of
// the block runs phase 0, then every thread runs phase 1). plan.h chooses the entry, the grid
// and the parameters of every launch.

#include <cstdint>
#include <utility>

#include "cai/core/host_device.h"
#include "kernels/elementwise.h"
#include "kernels/launch.h"

namespace cai::device::kernels {

/// A thread's place in a launch: blockIdx.x, threadIdx.x, threadIdx.y (grids are 1-D).
struct Coord {
  std::uint32_t block;
  std::uint32_t tx;
  std::uint32_t ty;
};

/// The element of the thread (one per thread: the grid covers the index space).
CAI_HOST_DEVICE inline std::uint64_t thread_item(Coord c) {
  return static_cast<std::uint64_t>(c.block) * kBlockSize + c.tx;
}

/// The addresses of item `e` (C order over the merged dims) in each of the K operands, with
/// the index arithmetic in Index (32 bits when the extent allows: a 64-bit division costs
/// several times a 32-bit one). The outermost dim needs no division.
template <class Index, int K>
CAI_HOST_DEVICE inline void item_pointers(const KernelParams& p, Index e, char* (&ptr)[K]) {
  std::int64_t off[K];
  for (int k = 0; k < K; ++k) off[k] = 0;
  for (int d = p.ndim - 1; d > 0; --d) {
    const auto n = static_cast<Index>(p.shape[d]);
    const Index i = e % n;
    e /= n;
    for (int k = 0; k < K; ++k) off[k] += static_cast<std::int64_t>(i) * p.strides[k][d];
  }
  if (p.ndim > 0) {
    for (int k = 0; k < K; ++k) off[k] += static_cast<std::int64_t>(e) * p.strides[k][0];
  }
  for (int k = 0; k < K; ++k) {
    ptr[k] = reinterpret_cast<char*>(p.ptr[k] + static_cast<std::uint64_t>(off[k]));
  }
}

template <Variant V>
using index_t = std::conditional_t<V == Variant::strided32, std::uint32_t, std::uint64_t>;

/// N values of T loaded or stored as one 16-byte access where T divides 16 bytes.
template <class T>
inline constexpr int vector_lanes = (sizeof(T) <= 16 && 16 % sizeof(T) == 0) ? 16 / sizeof(T) : 1;
template <class T>
struct alignas(16) Vec {
  T v[vector_lanes<T>];
};

// ---------------------------------------------------------------------------------------------
// Data movement: Kernel is kernels::data::copy or fill (elementwise.h), K its operands, W the
// word width in bytes.

template <class Kernel, int K, int W, Variant V>
struct DataBody {
  static constexpr bool tiled = V == Variant::tile;

  /// `shared`: the block's tile (kTile x (kTile + 1) words of W bytes) when tiled.
  template <int Phase>
  CAI_HOST_DEVICE static void run(const KernelParams& p, Coord c, void* shared) {
    if constexpr (V == Variant::strided32 || V == Variant::strided64) {
      const std::uint64_t e = thread_item(c);
      if (e >= static_cast<std::uint64_t>(p.total)) return;
      char* ptr[K];
      item_pointers<index_t<V>, K>(p, static_cast<index_t<V>>(e), ptr);
      Kernel::template item<W>(ptr, reinterpret_cast<const char*>(p.value), p.words);
    } else if constexpr (V == Variant::contiguous) {
      // One W-byte word per thread; a fill value's pattern repeats every p.words words.
      const std::uint64_t i = thread_item(c);
      if (i >= static_cast<std::uint64_t>(p.total)) return;
      char* ptr[K];
      for (int k = 0; k < K; ++k) ptr[k] = reinterpret_cast<char*>(p.ptr[k] + i * W);
      // Fewer than 2^32 words (plan.h): a 32-bit remainder, and none for a 1-word pattern.
      const std::uint32_t word =
          p.words == 1 ? 0u : static_cast<std::uint32_t>(i) % static_cast<std::uint32_t>(p.words);
      Kernel::template item<W>(ptr, reinterpret_cast<const char*>(p.value) + word * W, 1);
    } else if constexpr (std::is_same_v<Kernel, data::copy>) {
      tile_copy<Phase>(p, c, static_cast<word_t<W>(*)[kTile + 1]>(shared));
    }
  }

  // dst[i, j] = src[i, j] over 2 dims, dim 0 the destination's fastest, dim 1 the source's
  // (plan.h orders them so); one W-byte item each. Phase 0 reads a 32x32 tile of the source
  // along its fast dim; phase 1 writes it along the destination's. The extra column keeps
  // the column reads of phase 1 off a single shared-memory bank.
  template <int Phase>
  CAI_HOST_DEVICE static void tile_copy(const KernelParams& p, Coord c,
                                        word_t<W> (*tile)[kTile + 1]) {
    using T = word_t<W>;
    const auto ni = static_cast<std::uint32_t>(p.shape[0]);
    const auto nj = static_cast<std::uint32_t>(p.shape[1]);
    const std::uint32_t tiles_i = (ni + kTile - 1) / kTile;
    const std::uint32_t i0 = c.block % tiles_i * kTile;
    const std::uint32_t j0 = c.block / tiles_i * kTile;
    for (std::uint32_t r = c.ty; r < static_cast<std::uint32_t>(kTile); r += kTileRows) {
      if constexpr (Phase == 0) {
        const std::uint32_t i = i0 + r, j = j0 + c.tx;
        if (i < ni && j < nj) {
          tile[r][c.tx] = load<T>(reinterpret_cast<const char*>(
              p.ptr[1] + static_cast<std::uint64_t>(i * p.strides[1][0] + j * p.strides[1][1])));
        }
      } else {
        const std::uint32_t i = i0 + c.tx, j = j0 + r;
        if (i < ni && j < nj) {
          store<T>(
              reinterpret_cast<char*>(
                  p.ptr[0] + static_cast<std::uint64_t>(i * p.strides[0][0] + j * p.strides[0][1])),
              tile[c.tx][r]);
        }
      }
    }
  }
};

// ---------------------------------------------------------------------------------------------
// Elementwise operations: out = Op(inputs...) on element values of type T.

template <class Op, class T, int N, Variant V>
struct ElementwiseBody {
  static constexpr bool tiled = false;

  template <int Phase>
  CAI_HOST_DEVICE static void run(const KernelParams& p, Coord c, void* /*shared*/) {
    if constexpr (!supports<Op, T, N>) {
      // An (empty) entry for every name; the host refuses the pair before launching.
    } else if constexpr (V == Variant::strided32 || V == Variant::strided64) {
      const std::uint64_t e = thread_item(c);
      if (e >= static_cast<std::uint64_t>(p.total)) return;
      char* ptr[N + 1];
      item_pointers<index_t<V>, N + 1>(p, static_cast<index_t<V>>(e), ptr);
      apply_element<Op, T, N>(ptr[0], ptr + 1);
    } else if constexpr (V == Variant::contiguous) {
      // vector_lanes<T> elements per thread, one 16-byte load per input and one store when
      // the whole vector is inside the array (the pointers are 16-byte aligned: plan.h).
      constexpr int L = vector_lanes<T>;
      const std::uint64_t first = thread_item(c) * L;
      const auto total = static_cast<std::uint64_t>(p.total);
      if (first >= total) return;
      if (L > 1 && first + L <= total) {
        vector(p, first, std::make_index_sequence<static_cast<std::size_t>(N)>{});
        return;
      }
      for (std::uint64_t e = first; e < total && e < first + L; ++e) {
        const char* in[N];
        for (int n = 0; n < N; ++n)
          in[n] = reinterpret_cast<const char*>(p.ptr[n + 1] + e * sizeof(T));
        apply_element<Op, T, N>(reinterpret_cast<char*>(p.ptr[0] + e * sizeof(T)), in);
      }
    }
  }

  template <std::size_t... I>
  CAI_HOST_DEVICE static void vector(const KernelParams& p, std::uint64_t first,
                                     std::index_sequence<I...>) {
    const Vec<T> in[] = {
        load<Vec<T>>(reinterpret_cast<const char*>(p.ptr[I + 1] + first * sizeof(T)))...};
    Vec<T> out;
    for (int l = 0; l < vector_lanes<T>; ++l) out.v[l] = Op::apply(in[I].v[l]...);
    store<Vec<T>>(reinterpret_cast<char*>(p.ptr[0] + first * sizeof(T)), out);
  }
};

/// The value type of each element type, from the table.
template <ElementType>
struct element_value;
#define CAI_DETAIL_VALUE(ctx, name, kind, extended, value) \
  template <>                                              \
  struct element_value<ElementType::name> {                \
    using type = value;                                    \
  };
CAI_ELEMENT_TYPES(CAI_DETAIL_VALUE, _)
#undef CAI_DETAIL_VALUE
template <ElementType T>
using element_value_t = typename element_value<T>::type;

/// The operand count of each data-movement kernel and the input count of each operation.
#define CAI_DETAIL_OPERANDS(ctx, kernel, operands) \
  inline constexpr int operands_##kernel = operands;
CAI_DATA_KERNELS(CAI_DETAIL_OPERANDS, _)
#undef CAI_DETAIL_OPERANDS
#define CAI_DETAIL_INPUTS(ctx, op, inputs, summary) inline constexpr int inputs_##op = inputs;
CAI_ELEMENTWISE_OPS(CAI_DETAIL_INPUTS, _)
#undef CAI_DETAIL_INPUTS

}  // namespace cai::device::kernels

/// The body of entry cai_<kernel>_<bytes>_<variant> and of cai_<op>_<type>_<variant>: the one
/// mapping from an entry's name to its code, for kernels.cu and the CPU grid runner.
#define CAI_DATA_BODY(kernel, bytes, variant)                                        \
  ::cai::device::kernels::DataBody<::cai::device::kernels::data::kernel,             \
                                   ::cai::device::kernels::operands_##kernel, bytes, \
                                   ::cai::device::kernels::Variant::variant>
#define CAI_ELEMENTWISE_BODY(op, type, variant)                                  \
  ::cai::device::kernels::ElementwiseBody<                                       \
      ::cai::device::kernels::ops::op,                                           \
      ::cai::device::kernels::element_value_t<::cai::device::ElementType::type>, \
      ::cai::device::kernels::inputs_##op, ::cai::device::kernels::Variant::variant>

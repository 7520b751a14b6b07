// The backend's stream-ordered operations: memset, plain and strided copies, fill and the
// elementwise operations, each checked (checks.h, then the memory check) before any work, with
// the operands a kernel cannot use staged through temporary device memory.

#include <algorithm>
#include <array>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/launch.h"
#include "backend/stream_memory.h"
#include "cai/core/error.h"
#include "checks.h"

namespace cai::device {

namespace detail {

using namespace cu;

namespace {

static_assert(CAI_CUDA_MAX_RANK <= max_ndim, "the kernels' rank limit is for merged dims");

// The alignment each element type's kernel loads at (complex values load as two parts).
#define CAI_ALIGNMENT(ctx, name, kind, extended, value) alignof(value),
constexpr std::size_t kAlignment[] = {CAI_ELEMENT_TYPES(CAI_ALIGNMENT, _)};
#undef CAI_ALIGNMENT

// `align` is a power of two (an alignof).
bool aligned(const Operand& op, std::size_t align) {
  const std::uint64_t mask = align - 1;
  if ((op.ptr & mask) != 0) return false;
  const auto shape = op.layout.shape();
  const auto strides = op.layout.strides();
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] != 1 && (static_cast<std::uint64_t>(strides[d]) & mask) != 0) return false;
  }
  return true;
}

// The elementwise kernel on operands it can use as they are (out first).
void launch_elementwise(const StreamScope& on, std::string_view where, ElementwiseOp op,
                        ElementType type, std::span<const Operand* const> ops) {
  switch (ops.size()) {
    case 2:
      launch(on, kernels::plan_elementwise<2>(where, op, type, {ops[0]->ptr, ops[1]->ptr},
                                              kernels::merge_operands<2>({ops[0], ops[1]})));
      return;
    case 3:
      launch(on,
             kernels::plan_elementwise<3>(where, op, type, {ops[0]->ptr, ops[1]->ptr, ops[2]->ptr},
                                          kernels::merge_operands<3>({ops[0], ops[1], ops[2]})));
      return;
    default:
      throw_error(Errc::not_implemented, std::string(where) + ": no launch for " +
                                             std::to_string(ops.size()) + " operands");
  }
}

// Pageable host memory, or host memory partly page-locked (BackendState::check_memory).
bool pageable(const PointerInfo& info) {
  return info.kind == MemoryKind::unregistered;
}

void copy_kernel(const StreamScope& on, const Operand& dst, const Operand& src) {
  launch(on, kernels::plan_copy("copy_strided_async()", dst.ptr, src.ptr,
                                kernels::merge_operands<2>({&dst, &src}), dst.layout.itemsize()));
}

// cuMemcpyAsync, cut where either side passes in or out of memory cai knows: a host range
// partly page-locked is neither pinned nor pageable to the driver (which refuses it, or reads
// past the locked range). The pieces of a cut copy are waited for, as a pageable copy is.
void copy_pieces(const StreamScope& on, std::uint64_t dst, std::uint64_t src, std::size_t bytes) {
  std::vector<std::uint64_t> cuts;
  on.st.ranges.cuts(dst, bytes, cuts);
  on.st.ranges.cuts(src, bytes, cuts);
  if (cuts.empty()) {
    CAI_DRIVER(on.st, cuMemcpyAsync, dst, src, bytes, on.stream);
    return;
  }
  cuts.push_back(bytes);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::uint64_t at = 0;
  for (const std::uint64_t end : cuts) {
    CAI_DRIVER(on.st, cuMemcpyAsync, dst + at, src + at, end - at, on.stream);
    at = end;
  }
  CAI_DRIVER(on.st, cuStreamSynchronize, on.stream);
}

// Temporary device buffers for operands a kernel cannot use as they are: memory it cannot
// reach (pageable host memory, another device's memory), operands that overlap, elements that
// are not naturally aligned. Stream-ordered, freed after the operation's last use; the copies
// back to staged outputs run in finish(), innermost first.
class Staging {
 public:
  explicit Staging(const StreamScope& on) : on_(on) {}
  ~Staging() {
    for (const StreamMemory& m : temps_) stream_free(on_.st, m, on_.stream);
  }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  /// A device copy of the bytes of r; returns where `ptr` lands in it.
  std::uint64_t in(std::uint64_t ptr, const ByteRange& r) {
    const CUdeviceptr t = temp(r.size());
    copy_pieces(on_, t, r.lo, r.size());
    return t + (ptr - r.lo);
  }

  /// A device buffer standing for the bytes of r, copied back by finish(). Their old values
  /// are copied in first unless the operation overwrites every byte (`dense`).
  std::uint64_t out(std::uint64_t ptr, const ByteRange& r, bool dense) {
    const CUdeviceptr t = temp(r.size());
    if (!dense) copy_pieces(on_, t, r.lo, r.size());
    backs_.emplace_back(
        [this, dst = r.lo, t, bytes = r.size()] { copy_pieces(on_, dst, t, bytes); });
    return t + (ptr - r.lo);
  }

  /// A C-contiguous device copy of the elements of op (by the copy kernel, at any alignment).
  Operand in_contiguous(const Operand& op) {
    const Operand t = contiguous(op);
    copy_kernel(on_, t, op);
    return t;
  }

  /// A C-contiguous device buffer standing for the elements of op, which the operation writes
  /// completely; finish() copies it into op.
  Operand out_contiguous(const Operand& op) {
    const Operand t = contiguous(op);
    backs_.emplace_back([this, t, op] { copy_kernel(on_, op, t); });
    return t;
  }

  /// Enqueues the copies back to the staged outputs.
  void finish() {
    for (auto it = backs_.rbegin(); it != backs_.rend(); ++it) (*it)();
  }

 private:
  CUdeviceptr temp(std::size_t bytes) {
    temps_.push_back(stream_alloc(bytes, on_));
    return temps_.back().ptr;
  }
  Operand contiguous(const Operand& op) {
    Layout l = Layout::c_contiguous(op.layout.shape(), op.layout.itemsize());
    const auto bytes = static_cast<std::size_t>(l.nbytes());
    return Operand{temp(bytes), std::move(l), false};
  }

  const StreamScope& on_;
  std::vector<StreamMemory> temps_;
  std::vector<std::function<void()>> backs_;
};

}  // namespace

}  // namespace detail

using detail::BackendState;
using detail::check_operand;
using detail::check_range;
using detail::copy_pieces;
using detail::kernel_can_access;
using detail::pageable;
using detail::Staging;
using detail::StreamScope;
using namespace cu;

void Backend::memset_async(std::uint64_t dst, int byte, std::size_t bytes, StreamHandle s) {
  constexpr std::string_view where = "memset_async()";
  CUstream stream = detail::to_stream(s, where);
  const ByteRange r = check_range(where, "dst", dst, bytes);
  if (bytes == 0) return;
  BackendState& st = *state_;
  StreamScope on(st, stream);
  const auto value = static_cast<unsigned char>(byte);
  const PointerInfo info = st.check_memory(where, "dst", r, false, on.device);
  if (kernel_can_access(info, on.device)) {
    CAI_DRIVER(st, cuMemsetD8Async, st.kernel_address(info, dst, r.lo, on.device), value, bytes,
               stream);
    return;
  }
  // Another device's memory: set a local buffer, let cuMemcpyAsync cross over.
  Staging stage(on);
  const std::uint64_t t = stage.out(dst, r, true);
  CAI_DRIVER(st, cuMemsetD8Async, t, value, bytes, stream);
  stage.finish();
}

void Backend::copy_async(std::uint64_t dst, std::uint64_t src, std::size_t bytes, StreamHandle s) {
  constexpr std::string_view where = "copy_async()";
  CUstream stream = detail::to_stream(s, where);
  const ByteRange dr = check_range(where, "dst", dst, bytes);
  const ByteRange sr = check_range(where, "src", src, bytes);
  if (bytes == 0 || dst == src) return;
  BackendState& st = *state_;
  StreamScope on(st, stream);
  const PointerInfo dinfo = st.check_memory(where, "dst", dr, true, on.device);
  const PointerInfo sinfo = st.check_memory(where, "src", sr, true, on.device);
  if (dr.intersects(sr)) {
    // cuMemcpy is undefined on overlap; go through a copy of the source (memmove).
    Staging stage(on);
    const std::uint64_t t = stage.in(src, sr);
    copy_pieces(on, dst, t, bytes);
    return;
  }
  if (pageable(dinfo) || pageable(sinfo)) {
    copy_pieces(on, dst, src, bytes);
    return;
  }
  CAI_DRIVER(st, cuMemcpyAsync, dst, src, bytes, stream);
}

void Backend::copy_strided_async(const Operand& dst, const Operand& src, StreamHandle s) {
  constexpr std::string_view where = "copy_strided_async()";
  CUstream stream = detail::to_stream(s, where);
  detail::check_same_layout_size(where, "dst", dst, "src", src);
  const ByteRange dr = check_operand(where, "dst", dst);
  const ByteRange sr = check_operand(where, "src", src);
  const Layout& layout = dst.layout;
  if (layout.nbytes() == 0) return;
  BackendState& st = *state_;
  StreamScope on(st, stream);
  const PointerInfo dinfo = st.check_memory(where, "dst", dr, dst.host, on.device);
  const PointerInfo sinfo = st.check_memory(where, "src", sr, src.host, on.device);
  if (same_elements(dst.ptr, layout.strides(), src.ptr, src.layout.strides(), layout.shape())) {
    return;
  }
  const bool overlap = dr.intersects(sr);
  if (same_elements(0, layout.strides(), 0, src.layout.strides(), layout.shape()) &&
      layout.is_dense()) {
    // Both sides put the same bytes at the same offsets without gaps (e.g. both
    // C-contiguous): one plain copy, whatever the memory kinds.
    Staging stage(on);
    const std::uint64_t from = overlap ? stage.in(sr.lo, sr) : sr.lo;
    if (pageable(dinfo) || pageable(sinfo)) {
      copy_pieces(on, dr.lo, from, dr.size());
      return;
    }
    CAI_DRIVER(st, cuMemcpyAsync, dr.lo, from, dr.size(), stream);
    return;
  }
  Staging stage(on);
  Operand from = src, to = dst;
  // The source is staged when the kernel cannot read it, or so that the result does not
  // depend on the order the threads run in when it overlaps the destination.
  if (overlap || !kernel_can_access(sinfo, on.device)) {
    from.ptr = stage.in(src.ptr, sr);
  } else {
    from.ptr = st.kernel_address(sinfo, src.ptr, sr.lo, on.device);
  }
  if (!kernel_can_access(dinfo, on.device)) {
    to.ptr = stage.out(dst.ptr, dr, layout.is_dense());
  } else {
    to.ptr = st.kernel_address(dinfo, dst.ptr, dr.lo, on.device);
  }
  detail::copy_kernel(on, to, from);
  stage.finish();
}

void Backend::fill_async(const Operand& dst, const void* value, StreamHandle s) {
  constexpr std::string_view where = "fill_async()";
  CUstream stream = detail::to_stream(s, where);
  const ByteRange dr = check_operand(where, "dst", dst);
  const Layout& layout = dst.layout;
  if (layout.nbytes() == 0) return;
  if (value == nullptr) {
    throw_error(Errc::value_error, std::string(where) + ": value is a null pointer");
  }
  BackendState& st = *state_;
  StreamScope on(st, stream);
  const PointerInfo info = st.check_memory(where, "dst", dr, false, on.device);
  Staging stage(on);
  const std::uint64_t dp = kernel_can_access(info, on.device)
                               ? st.kernel_address(info, dst.ptr, dr.lo, on.device)
                               : stage.out(dst.ptr, dr, layout.is_dense());
  detail::launch(on, kernels::plan_fill(where, dp, kernels::merge_operands<1>({&dst}),
                                        layout.itemsize(), value));
  stage.finish();
}

void Backend::elementwise_async(ElementwiseOp op, ElementType type,
                                std::span<const Operand> operands, StreamHandle s) {
  // "add_async()", ...: the names the messages start with, made once.
  static const auto names = [] {
    std::array<std::string, elementwise_op_count> n;
    for (int i = 0; i < elementwise_op_count; ++i)
      n[i] = std::string(info(static_cast<ElementwiseOp>(i)).name) + "_async()";
    return n;
  }();
  const std::string_view where =
      is_valid(op) ? std::string_view(names[static_cast<int>(op)]) : "elementwise_async()";
  CUstream stream = detail::to_stream(s, where);
  const auto ranges = detail::check_elementwise(where, op, type, operands);
  if (operands[0].layout.size() == 0) return;
  BackendState& st = *state_;
  StreamScope on(st, stream);
  std::array<PointerInfo, CAI_KERNEL_MAX_OPERANDS> infos;
  st.check_operands(where, std::span(ranges.data(), operands.size()), on.device,
                    std::span(infos.data(), operands.size()));
  const std::size_t align = detail::kAlignment[static_cast<int>(type)];
  std::array<const Operand*, CAI_KERNEL_MAX_OPERANDS> ops{};
  // Operands at another address for the kernel (registered memory), or staged copies.
  std::array<std::optional<Operand>, CAI_KERNEL_MAX_OPERANDS> staged;
  bool in_place = true;
  for (std::size_t k = 0; k < operands.size(); ++k) {
    ops[k] = &operands[k];
    const bool reachable = kernel_can_access(infos[k], on.device);
    if (reachable && infos[k].kind == MemoryKind::pinned_host) {
      const std::uint64_t p = st.kernel_address(infos[k], operands[k].ptr, ranges[k].lo, on.device);
      if (p != operands[k].ptr) {
        staged[k].emplace(operands[k]).ptr = p;
        ops[k] = &*staged[k];
      }
    }
    in_place = in_place && reachable && detail::aligned(operands[k], align);
  }
  const std::span<const Operand* const> used(ops.data(), operands.size());
  if (in_place) {
    detail::launch_elementwise(on, where, op, type, used);
    return;
  }
  // The operands as given, or a staged copy where the kernel cannot use them in place.
  Staging stage(on);
  for (std::size_t k = 0; k < operands.size(); ++k) {
    const bool out = k == 0;
    if (!kernel_can_access(infos[k], on.device)) {
      Operand& t = staged[k].emplace(operands[k]);
      t.ptr = out ? stage.out(t.ptr, ranges[k], operands[k].layout.is_dense())
                  : stage.in(t.ptr, ranges[k]);
      ops[k] = &t;
    }
    if (!detail::aligned(*ops[k], align)) {
      // The new operand is made from *ops[k] before staged[k] is assigned.
      staged[k] = out ? stage.out_contiguous(*ops[k]) : stage.in_contiguous(*ops[k]);
      ops[k] = &*staged[k];
    }
  }
  detail::launch_elementwise(on, where, op, type, used);
  stage.finish();
}

}  // namespace cai::device

#pragma once

// Layer 4: device memory as arrays. A View is untyped and non-owning in the sense that it does
// not allocate; it shares ownership of whatever keeps its memory alive (an allocation of cai,
// a Python object, a DLPack capsule) through `owner`.

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>

#include "cai/arrays/allocator.h"
#include "cai/core/dtype.h"
#include "cai/core/layout.h"
#include "cai/device/backend.h"
#include "cai/sync/ordering.h"

namespace cai {

/// Memory cai allocated; freed when the last View using it goes away. Device memory comes
/// from the allocator set (cai/arrays/allocator.h) for `stream`, else from the backend.
class DeviceBuffer {
 public:
  DeviceBuffer(device::MemoryKind kind, std::size_t bytes, sync::StreamRef stream = {});
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  std::uint64_t ptr() const noexcept { return ptr_; }
  std::size_t size() const noexcept { return bytes_; }
  device::MemoryKind kind() const noexcept { return kind_; }
  /// Whether the memory came from an allocator: usable only in stream order on its stream
  /// (a pool may hand out a block whose earlier work there is still pending).
  bool stream_ordered() const noexcept { return allocator_ != nullptr; }
  /// The stream state of the views of this memory: an allocator's deallocate comes after the
  /// work queued there.
  void set_sync(std::shared_ptr<sync::SyncState> s) noexcept { sync_ = std::move(s); }

 private:
  std::uint64_t ptr_ = 0;
  std::size_t bytes_ = 0;
  device::MemoryKind kind_;
  std::shared_ptr<Allocator> allocator_;  // null: the backend's
  int device_ = 0;
  sync::StreamRef stream_;
  std::shared_ptr<sync::SyncState> sync_;
};

/// An array in device-accessible memory: where it is, what it holds, how it is laid out,
/// and which stream its pending work is on.
class View {
 public:
  View() = default;
  View(std::uint64_t ptr, DType dtype, Layout layout, bool readonly,
       std::shared_ptr<sync::SyncState> sync, std::shared_ptr<const void> owner)
      : ptr_(ptr),
        dtype_(std::move(dtype)),
        layout_(std::move(layout)),
        readonly_(readonly),
        sync_(sync ? std::move(sync) : std::make_shared<sync::SyncState>()),
        owner_(std::move(owner)) {}

  /// A new array of `shape` in device memory, C-contiguous (or F with fortran_order), whose
  /// pending work is on `stream`. Zero-size arrays allocate nothing and have pointer 0.
  static View allocate(DType dtype, std::span<const std::int64_t> shape, bool fortran_order,
                       sync::StreamRef stream,
                       device::MemoryKind kind = device::MemoryKind::device);
  /// The same for any layout whose elements do not overlap (explicit strides): the memory is
  /// the extent the strides span.
  static View allocate(DType dtype, Layout layout, sync::StreamRef stream,
                       device::MemoryKind kind = device::MemoryKind::device);

  /// Address of the element at index (0, ..., 0); 0 for a zero-size array.
  std::uint64_t ptr() const noexcept { return ptr_; }
  const DType& dtype() const noexcept { return dtype_; }
  const Layout& layout() const noexcept { return layout_; }
  std::span<const std::int64_t> shape() const noexcept { return layout_.shape(); }
  std::span<const std::int64_t> strides() const noexcept { return layout_.strides(); }
  int ndim() const noexcept { return layout_.ndim(); }
  std::int64_t size() const noexcept { return layout_.size(); }
  bool readonly() const noexcept { return readonly_; }
  /// The stream state shared with every view of the same memory (null only for a
  /// default-constructed View, which has no memory).
  const std::shared_ptr<sync::SyncState>& sync() const noexcept { return sync_; }
  const std::shared_ptr<const View>& mask() const noexcept { return mask_; }
  const std::shared_ptr<const void>& owner() const noexcept { return owner_; }

  void set_mask(std::shared_ptr<const View> mask) { mask_ = std::move(mask); }
  void set_readonly(bool readonly) noexcept { readonly_ = readonly; }

  /// Tile-array slice along one axis (docs/dlpack.md, "cai.Array"); shares memory and stream.
  View slice(int axis, std::int64_t start, std::int64_t stop) const;
  /// NumPy basic indexing; shares memory and stream.
  View index(std::span<const IndexItem> items) const;
  /// NumPy's broadcasting to `shape` (Layout::broadcast_to); shares memory and stream, and a
  /// mask is broadcast alike.
  View broadcast_to(std::span<const std::int64_t> shape, std::string_view subject) const;
  View transpose() const;
  /// Axes reordered (Layout::permute); shares memory and stream.
  View permute(std::span<const int> axes) const;
  /// A view of another shape (Layout::reshape: never a copy); a mask is reshaped alike.
  View reshape(std::span<const std::int64_t> shape, bool fortran_order) const;
  /// The same bytes as another dtype (Layout::with_itemsize). A masked array keeps its mask
  /// only while the shape does not change (Errc::not_implemented otherwise).
  View as_dtype(DType dtype) const;

  /// Throws Error(value_error) "<entry>: <what> is read-only" when the view is read-only.
  void require_writable(const char* entry, const char* what) const;

 private:
  View derive(const Layout::Sliced& s) const;

  std::uint64_t ptr_ = 0;
  DType dtype_;
  Layout layout_;
  bool readonly_ = false;
  std::shared_ptr<sync::SyncState> sync_;  // null only in a default-constructed View
  std::shared_ptr<const View> mask_;
  std::shared_ptr<const void> owner_;
};

}  // namespace cai

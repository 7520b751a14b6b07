#include "cai/arrays/view.h"

#include <algorithm>
#include <string>

#include "cai/core/error.h"

namespace cai {

DeviceBuffer::DeviceBuffer(device::MemoryKind kind, std::size_t bytes)
    : ptr_(device::backend().alloc(kind, bytes)), bytes_(bytes), kind_(kind) {}

DeviceBuffer::~DeviceBuffer() {
  if (device::exiting()) return;  // leaked: freeing would wait for the streams
  try {
    device::backend().free(ptr_);
  } catch (...) {
    // A destructor must not throw; a failed free leaks the allocation.
  }
}

View View::allocate(DType dtype, std::span<const std::int64_t> shape, bool fortran_order,
                    sync::StreamRef stream, device::MemoryKind kind) {
  const std::int64_t itemsize = dtype.itemsize();
  Layout layout =
      fortran_order ? Layout::f_contiguous(shape, itemsize) : Layout::c_contiguous(shape, itemsize);
  auto state = sync::SyncState::idle(std::move(stream));
  if (layout.size() == 0) return View(0, std::move(dtype), std::move(layout), false, state, {});
  auto buffer = std::make_shared<DeviceBuffer>(kind, static_cast<std::size_t>(layout.nbytes()));
  const std::uint64_t ptr = buffer->ptr();
  return View(ptr, std::move(dtype), std::move(layout), false, std::move(state), std::move(buffer));
}

View View::derive(const Layout::Sliced& s) const {
  View v = *this;
  v.layout_ = s.layout;
  // A zero-size result keeps pointer 0 as the CAI requires for zero-size arrays.
  v.ptr_ = s.layout.size() == 0 ? 0 : ptr_ + static_cast<std::uint64_t>(s.offset);
  if (mask_) {
    // Masks have the data's shape, so the same index applies; offsets differ by item size.
    v.mask_ = nullptr;
  }
  return v;
}

View View::slice(int axis, std::int64_t start, std::int64_t stop) const {
  View v = derive(layout_.slice(axis, start, stop));
  if (mask_) v.mask_ = std::make_shared<View>(mask_->slice(axis, start, stop));
  return v;
}

View View::index(std::span<const IndexItem> items) const {
  View v = derive(layout_.index(items));
  if (mask_) v.mask_ = std::make_shared<View>(mask_->index(items));
  return v;
}

View View::broadcast_to(std::span<const std::int64_t> shape, std::string_view subject) const {
  View v = *this;
  v.layout_ = layout_.broadcast_to(shape, subject);
  if (mask_) v.mask_ = std::make_shared<View>(mask_->broadcast_to(shape, subject));
  return v;
}

View View::transpose() const {
  View v = *this;
  v.layout_ = layout_.transpose();
  if (mask_) v.mask_ = std::make_shared<View>(mask_->transpose());
  return v;
}

View View::permute(std::span<const int> axes) const {
  View v = *this;
  v.layout_ = layout_.permute(axes);
  if (mask_) v.mask_ = std::make_shared<View>(mask_->permute(axes));
  return v;
}

View View::reshape(std::span<const std::int64_t> shape, bool fortran_order) const {
  View v = *this;
  v.layout_ = layout_.reshape(shape, fortran_order);
  if (v.layout_.size() == 0) v.ptr_ = 0;
  if (mask_) {
    try {
      v.mask_ = std::make_shared<View>(mask_->reshape(shape, fortran_order));
    } catch (const Error& e) {
      throw_error(e.code(), std::string("the array's mask: ") + e.what());
    }
  }
  return v;
}

View View::as_dtype(DType dtype) const {
  View v = *this;
  v.layout_ = layout_.with_itemsize(dtype.itemsize());
  v.dtype_ = std::move(dtype);
  if (mask_ && !std::ranges::equal(v.layout_.shape(), layout_.shape()))
    throw_error(Errc::not_implemented,
                "view(): the array is masked, and a dtype of another item size changes its "
                "shape " +
                    format_dims(layout_.shape()) + " to " + format_dims(v.layout_.shape()) +
                    ", which its mask does not have");
  return v;
}

void View::require_writable(const char* entry, const char* what) const {
  if (readonly_)
    throw_error(Errc::value_error, std::string(entry) + ": " + what +
                                       " is read-only (its producer exported data=(ptr, True)); "
                                       "write to a copy instead");
}

}  // namespace cai

#include "cai/arrays/view.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>
#include <utility>

#include "cai/core/error.h"
#include "cai/core/format.h"

namespace cai {

namespace {

// The allocator set, read on every allocation: a flag for the usual case (none set).
std::mutex g_allocator_mu;
std::shared_ptr<Allocator> g_allocator;
std::atomic<bool> g_has_allocator{false};

}  // namespace

void set_allocator(std::shared_ptr<Allocator> allocator) {
  std::shared_ptr<Allocator> old;
  std::lock_guard lock(g_allocator_mu);
  old = std::exchange(g_allocator, std::move(allocator));
  g_has_allocator.store(g_allocator != nullptr);
}

std::shared_ptr<Allocator> get_allocator() {
  if (!g_has_allocator.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard lock(g_allocator_mu);
  return g_allocator;
}

DeviceBuffer::DeviceBuffer(device::MemoryKind kind, std::size_t bytes, sync::StreamRef stream)
    : bytes_(bytes), kind_(kind), stream_(std::move(stream)) {
  auto& backend = device::backend();
  if (kind != device::MemoryKind::device || !(allocator_ = get_allocator())) {
    ptr_ = backend.alloc(kind, bytes);
    return;
  }
  if (stream_.handle == 0) stream_ = sync::StreamRef(device::kLegacyDefaultStream);
  device_ = backend.current_device();
  ptr_ = allocator_->allocate(bytes, device_, stream_.handle);
  try {
    // Whatever the allocator returns is checked as any array's memory is, before any use.
    backend.check_kernel_memory("allocator", "allocate()", ptr_, ptr_ + bytes, device_);
  } catch (const Error& e) {
    allocator_->deallocate(ptr_, bytes, device_, stream_.handle);
    throw_error(Errc::value_error, "the allocator's allocate(" + std::to_string(bytes) +
                                       " bytes, device " + std::to_string(device_) + ", " +
                                       device::stream_text(stream_.handle) + ") returned " +
                                       detail::hex(ptr_) + ", not memory a kernel on device " +
                                       std::to_string(device_) + " can use for " +
                                       std::to_string(bytes) + " bytes: " + e.what());
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (device::exiting()) return;  // leaked: freeing would wait for the streams
  if (allocator_) {
    // Another thread's per-thread default stream cannot be named here (2 is this thread's):
    // the memory goes back on the legacy default stream, which is ordered after it.
    const sync::StreamRef back =
        stream_.other_thread() ? sync::StreamRef(device::kLegacyDefaultStream) : stream_;
    try {
      // Work queued on the memory on other streams comes before the stream it is given back on.
      if (sync_) sync_->order_before(device::backend(), back, -1, -1);
    } catch (...) {
      return;  // cannot be ordered: leaked rather than reused under running work
    }
    allocator_->deallocate(ptr_, bytes_, device_, back.handle);
    return;
  }
  try {
    // Not free(): the driver's free would wait for every stream of the device.
    device::backend().free_deferred(ptr_);
  } catch (...) {
    // A destructor must not throw; a failed free leaks the allocation.
  }
}

View View::allocate(DType dtype, std::span<const std::int64_t> shape, bool fortran_order,
                    sync::StreamRef stream, device::MemoryKind kind) {
  const std::int64_t itemsize = dtype.itemsize();
  Layout layout =
      fortran_order ? Layout::f_contiguous(shape, itemsize) : Layout::c_contiguous(shape, itemsize);
  return allocate(std::move(dtype), std::move(layout), std::move(stream), kind);
}

View View::allocate(DType dtype, Layout layout, sync::StreamRef stream, device::MemoryKind kind) {
  if (layout.size() == 0)
    return View(0, std::move(dtype), std::move(layout), false, sync::SyncState::idle(stream), {});
  const auto ext = layout.extent();
  auto buffer =
      std::make_shared<DeviceBuffer>(kind, static_cast<std::size_t>(ext.hi - ext.lo), stream);
  // Memory from the backend is idle; an allocator's is ready only in order on its stream.
  auto state = buffer->stream_ordered() ? std::make_shared<sync::SyncState>(std::move(stream))
                                        : sync::SyncState::idle(std::move(stream));
  buffer->set_sync(state);
  const std::uint64_t ptr = buffer->ptr() - static_cast<std::uint64_t>(ext.lo);
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

#include "cai/arrays/import.h"

#include <utility>

namespace cai {

void ImportStream::resolve_producer() {
  device::Backend& backend = device::backend();
  switch (sync::import_order(backend, producer_)) {
    case sync::ImportOrder::by_name:
      kind_ = Kind::by_name;
      named_ = sync::StreamRef(producer_);
      return;
    case sync::ImportOrder::complete:
      kind_ = Kind::idle;
      return;
    case sync::ImportOrder::by_event:
      // The event must be recorded now: the producer may destroy its stream afterwards.
      kind_ = Kind::by_event;
      event_ = sync::SyncState::imported(backend, producer_, sync::ImportOrder::by_event);
      return;
  }
}

std::shared_ptr<sync::SyncState> ImportStream::state() const {
  switch (kind_) {
    case Kind::none:
      break;
    case Kind::unnamed:
    case Kind::idle:
      return sync::SyncState::imported_without_stream(producer_);
    case Kind::producer: {
      ImportStream resolved = *this;
      resolved.resolve();
      return resolved.state();
    }
    case Kind::by_name:
      return std::make_shared<sync::SyncState>(named_);  // its work may be pending
    case Kind::by_event:
      return event_;
  }
  return std::make_shared<sync::SyncState>();
}

View Import::view(std::shared_ptr<const void> owner) const& {
  return View(ptr, dtype, layout, readonly, stream.state(), std::move(owner));
}

View Import::view(std::shared_ptr<const void> owner) && {
  return View(ptr, std::move(dtype), std::move(layout), readonly, stream.state(), std::move(owner));
}

View Import::unresolved_view() const {
  return View(ptr, dtype, layout, readonly, nullptr, nullptr);
}

}  // namespace cai

#pragma once

// Layer 4: a foreign array imported as one value. Every import (a CAI dict, a DLPack tensor)
// is parsed into an Import: the checked fields and the producer's stream. resolve() is the
// only driver call an import makes (a query of a foreign stream, and an event record when it is
// busy); view() is the one place an imported View is built (docs/architecture.md, "Import").

#include <cstdint>
#include <memory>

#include "cai/arrays/view.h"
#include "cai/core/dtype.h"
#include "cai/core/layout.h"
#include "cai/device/backend.h"
#include "cai/sync/ordering.h"

namespace cai {

/// The producer's stream of an import, kept as the CAI v3 consumer rule says (the `stream`
/// key; DLPack's producer stream alike). Made unresolved by the parser, resolved once.
class ImportStream {
 public:
  /// Nothing to order after: the consumer asked for no sync, or the producer gave no stream.
  static ImportStream none() noexcept { return {}; }
  /// The producer named no stream (CAI `stream` None or absent): its later work is ordered
  /// after through the legacy stream (sync::SyncState::imported_without_stream).
  static ImportStream unnamed() noexcept { return ImportStream(Kind::unnamed, 0); }
  /// The producer's stream, to be resolved.
  static ImportStream producer(device::StreamHandle s) noexcept {
    return ImportStream(Kind::producer, s);
  }

  /// Keeps the producer's stream as sync::import_order says on device::backend(): a default
  /// stream by name (no driver call), a foreign one by one query, and an event recorded on it
  /// when it is busy. Does nothing (not even choose the backend) once resolved or with no
  /// producer's stream.
  void resolve() {
    if (kind_ == Kind::producer) resolve_producer();
  }
  /// Whether resolve() has yet to run for a producer's stream.
  bool unresolved() const noexcept { return kind_ == Kind::producer; }
  /// Whether an event recorded at resolve() stands for the producer's stream.
  bool by_event() const noexcept { return kind_ == Kind::by_event; }
  /// The default stream the producer named (handle 0: none), where its work may be pending.
  const sync::StreamRef& named() const noexcept { return named_; }
  /// The stream state of the View (resolved first on device::backend() when it is not yet).
  std::shared_ptr<sync::SyncState> state() const;

 private:
  enum class Kind : std::uint8_t { none, unnamed, producer, idle, by_name, by_event };
  ImportStream() = default;
  ImportStream(Kind k, device::StreamHandle s) noexcept : kind_(k), producer_(s) {}
  void resolve_producer();

  Kind kind_ = Kind::none;
  device::StreamHandle producer_ = 0;
  sync::StreamRef named_;                   // by_name
  std::shared_ptr<sync::SyncState> event_;  // by_event: the state holding the import event
};

/// A foreign array, imported: its checked fields and its producer's stream; what keeps its
/// memory alive is the caller's (a Python object, a DLPack tensor).
struct Import {
  std::uint64_t ptr = 0;
  bool readonly = false;
  Layout layout;
  DType dtype;
  ImportStream stream = ImportStream::none();

  /// The View of the import, whose memory `owner` keeps alive; the stream is resolved first
  /// when it is not yet. The one place an imported View is built.
  View view(std::shared_ptr<const void> owner) const&;
  /// The same, the fields moved into the View.
  View view(std::shared_ptr<const void> owner) &&;
  /// The fields alone as a View, with no stream state and no owner: what a check that refuses
  /// the import before resolve() describes in its message (no driver call).
  View unresolved_view() const;
};

}  // namespace cai

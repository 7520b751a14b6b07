#pragma once

// Internal to the extension: the run-time switches (cai.config) and the write counter.

#include <atomic>
#include <cstdint>

namespace cai::python {

/// Run-time switches (cai.config).
struct Config {
  bool import_sync = true;
  bool export_stream = true;
};
Config& config();

/// Whether an import orders after its producer's stream: the caller's `sync` argument and
/// cai.config's switch. Each import reads it once, where it is classified.
inline bool import_sync(bool asked) {
  return asked && config().import_sync;
}

/// Counts the writes cai makes or allows to device memory (its operations, assignments, and
/// exports of writable arrays to other libraries), so that Dask's token of an array changes
/// when the array may have changed (python/cai/_dask_array.py). Every caller holds the GIL, so
/// a relaxed load and store suffice (no locked read-modify-write on every export).
inline std::atomic<std::uint64_t> g_write_epoch{0};
inline void note_write() noexcept {
  g_write_epoch.store(g_write_epoch.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

}  // namespace cai::python

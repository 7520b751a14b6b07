#pragma once

// Internal: which process, on which boot of the machine. The simulated driver marks shared
// segments and interprocess handles with them, and so do cai's IPC handles (arrays layer).

#include <cstdint>
#include <string>

namespace cai::platform {

/// A process, told apart from a later one with the same pid by its start time.
struct ProcessId {
  std::int32_t pid = 0;
  std::uint64_t start_time = 0;  ///< clock ticks after boot (field 22 of /proc/<pid>/stat)

  static ProcessId self();
  /// True while this very process runs (false once it exited, even if its pid was reused).
  bool alive() const;
  bool operator==(const ProcessId&) const = default;
};

/// This boot of this machine (/proc/sys/kernel/random/boot_id): a handle carries it, so that
/// one made on another machine or before a reboot is refused by name.
const std::string& boot_id();

}  // namespace cai::platform

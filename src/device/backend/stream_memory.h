#pragma once

// Internal: temporary device memory for one stream's work (staging buffers).

#include <cstddef>

#include "backend/backend.h"

namespace cai::device::detail {

/// Device memory for one stream: stream-ordered (cuMemAllocAsync) where the device has memory
/// pools, else cuMemAlloc, whose free must then wait for the stream.
struct StreamMemory {
  cu::CUdeviceptr ptr = 0;
  bool pooled = false;
};

StreamMemory stream_alloc(std::size_t bytes, const StreamScope& on);
/// Never throws (destructors call it); a failed free leaks the buffer.
void stream_free(const BackendState& st, const StreamMemory& m, cu::CUstream stream) noexcept;

}  // namespace cai::device::detail

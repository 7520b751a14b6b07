#pragma once

// Layer 4: the allocator of arrays' device memory. One hook through which every array cai
// allocates gets its memory (View::allocate, and the operations' temporaries), usable from C++
// and, through cai.set_allocator, from Python (a CuPy or RMM pool). Without one, arrays get
// memory from the backend: cuMemAlloc, given back on the backend's free thread so that a free
// never stalls the caller (docs/cuda-backend.md), and shareable with other processes.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "cai/device/backend.h"

namespace cai {

/// Device memory for arrays, allocated and freed in stream order.
class Allocator {
 public:
  virtual ~Allocator() = default;
  /// `bytes` (> 0) of memory that kernels on `device` can use, for work in stream order on
  /// `stream` (a CUDA stream handle; 1 and 2 are the default streams). Throws on failure.
  virtual std::uint64_t allocate(std::size_t bytes, int device, device::StreamHandle stream) = 0;
  /// Gives back what allocate returned, when the last array using it goes. The work cai queued
  /// on the memory is ordered before `stream` (the stream it was allocated for): it may be
  /// reused at once in stream order on `stream`, on another stream once that stream waits for
  /// `stream`. Must not throw (the destructor of an array calls it).
  virtual void deallocate(std::uint64_t ptr, std::size_t bytes, int device,
                          device::StreamHandle stream) noexcept = 0;
};

/// Sets the allocator of the arrays allocated from now on (null: the backend's). An array keeps
/// the allocator that made it until its memory is given back.
void set_allocator(std::shared_ptr<Allocator> allocator);
/// The allocator set, or null for the backend's.
std::shared_ptr<Allocator> get_allocator();

}  // namespace cai

// The allocator hook (cai/arrays/allocator.h) on the process-wide backend: every View::allocate
// goes through it with its stream, deallocate comes once, after the work queued on the memory
// on other streams (the race detector would report a reuse that came too early), and what an
// allocator returns is checked before any use.

#include "cai/arrays/allocator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "cai/arrays/ops.h"
#include "cai/arrays/view.h"
#include "cai/device/simulator.h"
#include "cai_matchers.h"

namespace cai {
namespace {

using test::HasSubstr;
using test::ThrowsCaiError;

struct Call {
  bool allocate;
  std::uint64_t ptr;
  std::size_t bytes;
  int device;
  device::StreamHandle stream;
};

// Memory from the backend, each block kept for reuse on the stream it came back on.
class CountingAllocator final : public Allocator {
 public:
  std::uint64_t allocate(std::size_t bytes, int device, device::StreamHandle stream) override {
    std::uint64_t p = 0;
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->stream == stream && it->bytes >= bytes) {
        p = it->ptr;
        free_.erase(it);
        break;
      }
    }
    if (p == 0) p = bad ? 0x1000 : device::backend().alloc(device::MemoryKind::device, bytes);
    calls.push_back({true, p, bytes, device, stream});
    return p;
  }
  void deallocate(std::uint64_t ptr, std::size_t bytes, int device,
                  device::StreamHandle stream) noexcept override {
    calls.push_back({false, ptr, bytes, device, stream});
    if (ptr != 0x1000) free_.push_back({false, ptr, bytes, device, stream});
  }
  ~CountingAllocator() override {
    for (const Call& c : free_) device::backend().free(c.ptr);
  }
  std::vector<Call> calls;
  bool bad = false;

 private:
  std::vector<Call> free_;
};

DType f32() {
  return DType::from_typestr("<f4");
}

class allocator_hook : public ::testing::Test {
 protected:
  void SetUp() override { set_allocator(alloc_); }
  void TearDown() override { set_allocator(nullptr); }
  std::shared_ptr<CountingAllocator> alloc_ = std::make_shared<CountingAllocator>();
};

TEST_F(allocator_hook, views_allocate_and_give_back_through_it) {
  EXPECT_EQ(get_allocator(), alloc_);
  const std::int64_t shape[] = {256};
  const sync::StreamRef s1(device::backend().stream_create(true));
  const sync::StreamRef s2(device::backend().stream_create(true));
  std::uint64_t first = 0;
  {
    View v = View::allocate(f32(), shape, false, s1);
    first = v.ptr();
    ASSERT_EQ(alloc_->calls.size(), 1u);
    EXPECT_TRUE(alloc_->calls[0].allocate);
    EXPECT_EQ(alloc_->calls[0].bytes, 1024u);
    EXPECT_EQ(alloc_->calls[0].stream, s1.handle);
    // Written on s2 behind a delay: the memory goes back on s1, after that write.
    device::sim::delay(s2.handle, 0.2);
    const float one = 1.0f;
    fill(v, &one, s2);
  }
  ASSERT_EQ(alloc_->calls.size(), 2u);
  EXPECT_FALSE(alloc_->calls[1].allocate);
  EXPECT_EQ(alloc_->calls[1].stream, s1.handle);
  // Reused on s1 at once: race free because s1 waits for s2's fill (an array's stream waits
  // for work queued on it elsewhere; the buffer orders its give-back after the state too).
  View w = View::allocate(f32(), shape, false, s1);
  EXPECT_EQ(w.ptr(), first);
  const float two = 2.0f;
  fill(w, &two, s1);
  std::vector<float> host(256);
  copy_to_host(host.data(), w, s1);
  EXPECT_EQ(host, std::vector<float>(256, 2.0f));
  device::backend().synchronize();
}

TEST_F(allocator_hook, what_it_returns_is_checked_and_given_back) {
  alloc_->bad = true;
  const std::int64_t shape[] = {8};
  EXPECT_THAT([&] { View::allocate(f32(), shape, false, sync::StreamRef(1)); },
              ThrowsCaiError(Errc::value_error,
                             HasSubstr("returned 0x1000, not memory a kernel on device 0")));
  ASSERT_EQ(alloc_->calls.size(), 2u);
  EXPECT_FALSE(alloc_->calls[1].allocate);  // given back
  EXPECT_EQ(alloc_->calls[1].ptr, 0x1000u);
}

TEST(allocator_default, without_one_the_backend_allocates) {
  EXPECT_EQ(get_allocator(), nullptr);
  const std::int64_t shape[] = {8};
  View v = View::allocate(f32(), shape, false, sync::StreamRef(1));
  EXPECT_EQ(device::backend().pointer_info(v.ptr()).kind, device::MemoryKind::device);
}

}  // namespace
}  // namespace cai

#include "shared_memory.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "cai/core/error.h"

namespace cai::platform {

namespace {

std::size_t page_size() {
  static const auto size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

std::string errno_text(int e) {
  return std::strerror(e);
}

}  // namespace

std::shared_ptr<SharedMapping> SharedMapping::create(std::size_t bytes, const char* name) {
  const int fd = static_cast<int>(::syscall(SYS_memfd_create, name, MFD_CLOEXEC));
  if (fd < 0) {
    throw_error(Errc::device_error,
                std::string("shared memory: memfd_create failed: ") + errno_text(errno));
  }
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int e = errno;
    ::close(fd);
    throw_error(Errc::device_error, "shared memory: cannot size a segment of " +
                                        std::to_string(bytes) + " bytes: " + errno_text(e));
  }
  void* map = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
  if (map == MAP_FAILED) {
    const int e = errno;
    ::close(fd);
    throw_error(Errc::device_error, "shared memory: cannot map a segment of " +
                                        std::to_string(bytes) + " bytes: " + errno_text(e));
  }
  return std::shared_ptr<SharedMapping>(
      new SharedMapping(fd, map, bytes, static_cast<std::byte*>(map), bytes));
}

std::shared_ptr<SharedMapping> SharedMapping::open(const ProcessId& owner, int fd,
                                                   std::uint64_t offset, std::size_t bytes,
                                                   const char* where) {
  const std::string who = "process " + std::to_string(owner.pid);
  const std::string prefix = std::string(where) + ": ";
  if (!owner.alive()) {
    throw_error(Errc::device_error,
                prefix + who +
                    ", which shared the memory, has exited; memory is shared only "
                    "while its exporter runs (an importer that opened it in time keeps it)");
  }
  const std::string path = "/proc/" + std::to_string(owner.pid) + "/fd/" + std::to_string(fd);
  char target[256] = {};
  const ssize_t n = ::readlink(path.c_str(), target, sizeof target - 1);
  if (n < 0 || std::strncmp(target, "/memfd:cai", 10) != 0) {
    const int e = errno;
    if (n < 0 && e == EACCES) {
      throw_error(Errc::device_error,
                  prefix + "cannot read " + path + ": " + errno_text(e) +
                      " (the exporter runs as another user, or is not dumpable)");
    }
    throw_error(Errc::device_error, prefix + who + " holds no cai shared segment as descriptor " +
                                        std::to_string(fd) +
                                        "; the handle is stale (its memory was released)");
  }
  const int local = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (local < 0) {
    throw_error(Errc::device_error, prefix + "cannot open " + path + ": " + errno_text(errno));
  }
  // The pid may have been reused between the check and the open: check again.
  if (!owner.alive()) {
    ::close(local);
    throw_error(Errc::device_error, prefix + who + ", which shared the memory, has exited");
  }
  struct stat st {};
  if (::fstat(local, &st) != 0 || offset > static_cast<std::uint64_t>(st.st_size) ||
      bytes > static_cast<std::uint64_t>(st.st_size) - offset) {
    ::close(local);
    throw_error(Errc::device_error,
                prefix + "the range [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
                    ") is outside the shared segment of " + who + "; the handle is corrupt");
  }
  const std::uint64_t lo = offset / page_size() * page_size();
  const std::size_t map_size = (offset - lo + bytes + page_size() - 1) / page_size() * page_size();
  void* map = ::mmap(nullptr, map_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, local,
                     static_cast<off_t>(lo));
  const int e = errno;
  ::close(local);  // the mapping keeps the segment alive
  if (map == MAP_FAILED) {
    throw_error(Errc::device_error, prefix + "cannot map " + std::to_string(bytes) +
                                        " shared bytes of " + who + ": " + errno_text(e));
  }
  return std::shared_ptr<SharedMapping>(
      new SharedMapping(-1, map, map_size, static_cast<std::byte*>(map) + (offset - lo), bytes));
}

SharedMapping::~SharedMapping() {
  ::munmap(map_, map_size_);
  if (fd_ >= 0) ::close(fd_);
}

void SharedMapping::discard(std::uint64_t offset, std::size_t bytes) noexcept {
  if (fd_ < 0) return;
  const std::uint64_t lo = (offset + page_size() - 1) / page_size() * page_size();
  const std::uint64_t hi = (offset + bytes) / page_size() * page_size();
  if (hi <= lo) return;
  (void)::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(lo),
                    static_cast<off_t>(hi - lo));
}

void shared_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                 std::chrono::milliseconds timeout) noexcept {
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  ts.tv_nsec = static_cast<long>((timeout.count() % 1000) * 1000000);
  (void)::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, expected, &ts,
                  nullptr, 0);
}

void shared_wake_all(std::atomic<std::uint32_t>& word) noexcept {
  (void)::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT32_MAX,
                  nullptr, nullptr, 0);
}

}  // namespace cai::platform

#include "process_id.h"

#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

namespace cai::platform {

namespace {

// Field 22 of /proc/<pid>/stat, or 0 when the process does not exist.
std::uint64_t start_time_of(std::int32_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The command name (field 2) is in parentheses and may hold spaces or parentheses itself.
  const auto close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 22) return std::stoull(field);
  }
  return 0;
}

}  // namespace

ProcessId ProcessId::self() {
  static const ProcessId me{static_cast<std::int32_t>(::getpid()), start_time_of(::getpid())};
  // After fork() the child is another process: only the cached value of the parent is wrong.
  if (me.pid != ::getpid())
    return {static_cast<std::int32_t>(::getpid()), start_time_of(::getpid())};
  return me;
}

bool ProcessId::alive() const {
  return pid > 0 && start_time_of(pid) == start_time;
}

const std::string& boot_id() {
  static const std::string id = [] {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string s;
    std::getline(in, s);
    return s;
  }();
  return id;
}

}  // namespace cai::platform

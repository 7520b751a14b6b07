// Uses cai only through the installed package: parses a descriptor, allocates on the
// simulator, runs a stream-ordered fill and reads the result back.
#include <cai/arrays/ops.h>
#include <cai/arrays/view.h>
#include <cai/core/dtype.h>
#include <cai/core/error.h>
#include <cai/device/simulator.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main() {
  setenv("CAI_BACKEND", "sim", 1);
  const cai::DType f32 = cai::DType::from_typestr("<f4");
  const std::int64_t shape[] = {4, 8};
  cai::sync::StreamRef stream{cai::device::backend().stream_create(false), nullptr};
  cai::View v = cai::View::allocate(f32, shape, false, stream);
  const float value = 2.5f;
  cai::fill(v, &value, stream);
  std::vector<float> host(32);
  cai::copy_to_host(host.data(), v, stream);
  for (float x : host) {
    if (x != value) {
      std::fprintf(stderr, "unexpected value %f\n", x);
      return 1;
    }
  }
  try {
    cai::DType::from_typestr("<f3");
    return 1;
  } catch (const cai::Error& e) {
    std::printf("rejected as expected: %s\n", e.what());
  }
  std::printf("find_package(cai) consumer OK on %s\n",
              std::string(cai::device::backend().name()).c_str());
  return 0;
}

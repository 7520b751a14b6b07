#include "cai/core/error.h"

namespace cai {

void throw_error(Errc code, std::string message) {
  throw Error(code, std::move(message));
}

}  // namespace cai

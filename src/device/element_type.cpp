#include "cai/device/backend.h"

namespace cai::device {

std::size_t element_size(ElementType t) {
  switch (t) {
    case ElementType::b8:
    case ElementType::i8:
    case ElementType::u8:
      return 1;
    case ElementType::i16:
    case ElementType::u16:
    case ElementType::f16:
      return 2;
    case ElementType::i32:
    case ElementType::u32:
    case ElementType::f32:
      return 4;
    case ElementType::i64:
    case ElementType::u64:
    case ElementType::f64:
    case ElementType::c64:
      return 8;
    case ElementType::c128:
      return 16;
  }
  return 0;
}

}  // namespace cai::device

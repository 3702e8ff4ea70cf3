#include "braid/core/dtype.h"

#include "braid/core/error.h"

namespace braid {

size_t dtype_size(DType d) {
  switch (d) {
    case DType::f32:
      return 4;
    case DType::bf16:
      return 2;
    case DType::f16:
      return 2;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
  }
  return 0;
}

std::string_view dtype_name(DType d) {
  switch (d) {
    case DType::f32:
      return "f32";
    case DType::bf16:
      return "bf16";
    case DType::f16:
      return "f16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
  }
  return "?";
}

DType dtype_from_name(std::string_view n) {
  if (n == "f32" || n == "float32" || n == "fp32" || n == "F32") return DType::f32;
  if (n == "bf16" || n == "bfloat16" || n == "BF16") return DType::bf16;
  if (n == "f16" || n == "float16" || n == "fp16" || n == "F16") return DType::f16;
  if (n == "i32" || n == "int32" || n == "I32") return DType::i32;
  if (n == "i64" || n == "int64" || n == "I64") return DType::i64;
  if (n == "u8" || n == "uint8" || n == "U8") return DType::u8;
  BRAID_THROW("unknown dtype '", n, "' (expected one of f32, bf16, f16, i32, i64, u8)");
}

bool is_floating(DType d) {
  return d == DType::f32 || d == DType::bf16 || d == DType::f16;
}

}  // namespace braid

// Argument checks shared by the CPU kernels (cpu/) and their CUDA twins (cuda/): each throws
// braid::Error naming the op, the argument and the numbers. Defined in cpu/common.cpp; a header
// of its own because cpu/common.h carries OpenMP and host-only helpers that device code cannot
// include.
#pragma once

#include <cstdint>

#include "braid/core/tensor.h"

namespace braid::kernels::cpu {

void check_defined(const char* op, const char* name, const Tensor& t);
void check_dtype(const char* op, const char* name, const Tensor& t, DType want);
void check_float(const char* op, const char* name, const Tensor& t);  // f32, bf16 or f16
void check_same_dtype(const char* op, const char* name, const Tensor& t, const char* ref_name,
                      const Tensor& ref);
// A parameter gradient: the dtype of ref (the op's input) or f32 (Note [Parameter gradients]).
void check_param_grad(const char* op, const char* name, const Tensor& t, const char* ref_name,
                      const Tensor& ref);
void check_shape(const char* op, const char* name, const Tensor& t, const Shape& want);
void check_numel(const char* op, const char* name, const Tensor& t, int64_t want);

// Rows and columns of t viewed as [N, C] over its last dimension.
int64_t rows_of(const Tensor& t);
int64_t cols_of(const Tensor& t);

}  // namespace braid::kernels::cpu

namespace braid::kernels::cuda {
using cpu::check_defined;
using cpu::check_dtype;
using cpu::check_float;
using cpu::check_numel;
using cpu::check_param_grad;
using cpu::check_same_dtype;
using cpu::check_shape;
using cpu::cols_of;
using cpu::rows_of;
}  // namespace braid::kernels::cuda

// DeviceKernels: what a device backend registers to run the ops of ops.h on its device
// (Note [Device kernels]). One table per device type beyond the CPU, one function per op, each
// with the op's signature and contract (kernels/ops.h), for tensors that all sit on one device
// of that type. The rope and exact-norm ops have two overloads each: the second is named
// *_at (rope with a positions tensor) or *_list (a list of tensors).
//
// Note [Device kernels]: the CPU libraries are the same whether braid is built with a device
// backend or not: an op whose arguments sit on a device looks its kernel up here at run time
// (BRAID_DEVICE_DISPATCH, kernels/device.h), and the backend (kernels/cuda/, the library
// braid_cuda) fills the table when it is linked in, at static initialisation. So a CUDA build
// compiles only the backend's own sources beside the CPU build, and a program gets the GPU by
// linking braid_cuda, with nothing else recompiled.
#pragma once

#include <cstdint>
#include <vector>

#include "braid/core/device.h"
#include "braid/core/tensor.h"

namespace braid::kernels {

struct AdamWSlice;  // ops.h

struct DeviceKernels {
  const char* name = "";          // the backend, for messages ("cuda")
  bool (*available)() = nullptr;  // whether a device of the type is visible
  // Optional profiling around every dispatched op: begin returns a token end is given.
  void* (*op_begin)(const char* op) = nullptr;
  void (*op_end)(void* token) = nullptr;

  void (*matmul)(Tensor&, const Tensor&, const Tensor&, bool, bool, float, float) = nullptr;
  void (*linear_forward)(Tensor&, const Tensor&, const Tensor&, const Tensor*) = nullptr;
  void (*linear_backward)(Tensor*, Tensor*, Tensor*, const Tensor&, const Tensor&,
                          const Tensor&) = nullptr;
  void (*bias_add_forward)(Tensor&, const Tensor&, const Tensor&) = nullptr;
  void (*bias_add_backward)(Tensor&, const Tensor&) = nullptr;
  void (*embedding_forward)(Tensor&, const Tensor&, const Tensor&, const Tensor*) = nullptr;
  void (*embedding_backward)(Tensor*, Tensor*, const Tensor&, const Tensor&) = nullptr;
  void (*embedding_slice_forward)(Tensor&, const Tensor&, const Tensor&, int64_t) = nullptr;
  void (*embedding_slice_backward)(Tensor&, const Tensor&, const Tensor&, int64_t) = nullptr;
  void (*layernorm_forward)(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                            float) = nullptr;
  void (*layernorm_backward)(Tensor*, Tensor*, Tensor*, const Tensor&, const Tensor&, const Tensor&,
                             const Tensor&, const Tensor&) = nullptr;
  void (*rmsnorm_forward)(Tensor&, Tensor&, const Tensor&, const Tensor&, float) = nullptr;
  void (*rmsnorm_backward)(Tensor*, Tensor*, const Tensor&, const Tensor&, const Tensor&,
                           const Tensor&) = nullptr;
  void (*gelu_forward)(Tensor&, const Tensor&) = nullptr;
  void (*gelu_backward)(Tensor&, const Tensor&, const Tensor&, bool) = nullptr;
  void (*swiglu_forward)(Tensor&, const Tensor&, const Tensor&) = nullptr;
  void (*swiglu_backward)(Tensor*, Tensor*, const Tensor&, const Tensor&, const Tensor&) = nullptr;
  void (*rope_forward)(Tensor&, const Tensor&, float, int64_t) = nullptr;
  void (*rope_backward)(Tensor&, const Tensor&, float, int64_t) = nullptr;
  void (*rope_forward_at)(Tensor&, const Tensor&, float, const Tensor&) = nullptr;
  void (*rope_backward_at)(Tensor&, const Tensor&, float, const Tensor&) = nullptr;
  void (*attention_forward)(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&,
                            bool) = nullptr;
  void (*attention_backward)(Tensor*, Tensor*, Tensor*, const Tensor&, const Tensor&, const Tensor&,
                             const Tensor&, const Tensor&, const Tensor&, bool) = nullptr;
  void (*attention_forward_qkv)(Tensor&, Tensor&, const Tensor&, int64_t, int64_t) = nullptr;
  void (*attention_backward_qkv)(Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                 const Tensor&, int64_t, int64_t, bool) = nullptr;
  double (*lm_head_ce_forward)(Tensor&, int64_t*, const Tensor&, const Tensor&, const Tensor&,
                               int32_t) = nullptr;
  void (*lm_head_ce_backward)(Tensor*, Tensor*, const Tensor&, const Tensor&, const Tensor&,
                              const Tensor&, float, int32_t) = nullptr;
  double (*lm_head_ce_forward_backward)(Tensor&, int64_t*, Tensor*, Tensor*, const Tensor&,
                                        const Tensor&, const Tensor&, float, int32_t) = nullptr;
  void (*lm_head_ce_partial_forward)(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&,
                                     const Tensor&, int64_t, int64_t, int32_t) = nullptr;
  void (*lm_head_ce_partial_backward)(Tensor*, Tensor*, const Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&, float, int64_t, int64_t, int32_t) = nullptr;
  void (*lm_head_logits)(Tensor&, const Tensor&, const Tensor&) = nullptr;
  void (*copy_columns)(Tensor&, const Tensor&, int64_t) = nullptr;
  void (*add_columns)(Tensor&, const Tensor&, int64_t) = nullptr;
  void (*set_columns)(Tensor&, const Tensor&, int64_t) = nullptr;
  void (*attention_merge)(Tensor&, Tensor&, const Tensor&, const Tensor&, int64_t) = nullptr;
  void (*cast)(Tensor&, const Tensor&) = nullptr;
  void (*add_forward)(Tensor&, const Tensor&, const Tensor&) = nullptr;
  void (*axpy)(Tensor&, const Tensor&, float) = nullptr;
  void (*scale)(Tensor&, float) = nullptr;
  void (*scale_list)(std::vector<Tensor>&, float) = nullptr;
  double (*sum_squares)(const Tensor&) = nullptr;
  float (*max_abs)(const Tensor&) = nullptr;
  __int128 (*sum_squares_fixed)(const Tensor&, int) = nullptr;
  float (*max_abs_list)(const std::vector<Tensor>&) = nullptr;
  __int128 (*sum_squares_fixed_list)(const std::vector<Tensor>&, int) = nullptr;
  void (*adamw_step)(Tensor&, const Tensor&, Tensor&, Tensor&, float, float, float, float, float,
                     int64_t) = nullptr;
  void (*adamw_step_list)(const std::vector<AdamWSlice>&, float, float, float, int64_t) = nullptr;
  void (*sgd_step)(Tensor&, const Tensor&, Tensor&, float, float, float, bool, bool) = nullptr;
};

// Installs kernels for devices of `type` (not the CPU); kernels must outlive the program.
void register_device_kernels(DeviceType type, const DeviceKernels* kernels);
// The kernels registered for `type`, or null.
const DeviceKernels* device_kernels(DeviceType type);

}  // namespace braid::kernels

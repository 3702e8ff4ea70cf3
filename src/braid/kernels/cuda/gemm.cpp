// GEMM through cuBLASLt (Note [cuBLASLt GEMM]).
//
// Note [cuBLASLt GEMM]:
// - braid's matrices are row-major and cuBLASLt's column-major; a row-major X[r, c] is the
//   column-major X^T, so c = op(a) @ op(b) is computed as c^T = op(b)^T @ op(a)^T: cuBLASLt's
//   A is our b and its B our a, with m = n, n = m, and each operand transposed as we asked.
// - bf16 and f16 multiply on tensor cores with f32 accumulation (CUBLAS_COMPUTE_32F); f32
//   stays f32 unless BRAID_CUDA_TF32=1. c may be f32 for bf16/f16 a and b: parameter
//   gradients accumulate in f32 (Note [Parameter gradients], ops.h) with beta = 1.
// - One handle and a 32 MiB workspace per device; the chosen algorithm is cached per shape,
//   dtypes, transposes, strides, epilogue and operand alignment (views of a flat buffer may be
//   aligned to less than cuBLASLt assumes, so the alignment is part of the question).
#include "braid/kernels/cuda/gemm.h"

#include <cublasLt.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "braid/core/error.h"
#include "braid/kernels/cuda/allocator.h"
#include "braid/kernels/cuda/runtime.h"

namespace braid::kernels::cuda {

namespace {

constexpr size_t kWorkspace = size_t{32} << 20;

void check_lt(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) {
    BRAID_THROW("cuBLASLt ", what, " failed: ", cublasLtGetStatusName(st), " (",
                cublasLtGetStatusString(st), ")");
  }
}

struct DeviceLt {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
};

std::mutex g_mu;
std::vector<DeviceLt> g_lt;

DeviceLt& lt(int device) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (device >= static_cast<int>(g_lt.size())) g_lt.resize(device + 1);
  DeviceLt& d = g_lt[device];
  if (!d.handle) {
    check_lt(cublasLtCreate(&d.handle), "cublasLtCreate");
    d.workspace = device_allocate(kWorkspace, device);
  }
  return d;
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    default:
      BRAID_THROW("gemm: dtype ", dtype_name(t), " is not f32, bf16 or f16");
  }
}

int alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  int al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

// Everything the algorithm choice depends on.
using Key = std::tuple<int, int, int, int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t,
                       int64_t, int, int, int, int, int, bool>;

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;  // whether cuBLASLt had an algorithm (a plan without one is cached too)
};

std::map<Key, Plan> g_plans;

Plan make_plan(const GemmArgs& g, int64_t lda, int64_t ldb, int64_t ldc, DeviceLt& d) {
  Plan p;
  const bool tf32 = g.ab == DType::f32 && tf32_enabled();
  const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  check_lt(cublasLtMatmulDescCreate(&p.desc, compute, CUDA_R_32F), "matmul descriptor");
  // cuBLASLt's A is our b, its B our a (Note [cuBLASLt GEMM]).
  const cublasOperation_t op_a = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a),
           "transa");
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b),
           "transb");
  if (g.epilogue != Epilogue::none) {
    // BGRADB: the bias gradient of cuBLASLt's B (our a) over k, as long as D has columns (our m).
    const bool grad = g.epilogue == Epilogue::bias_grad;
    const cublasLtEpilogue_t ep = grad ? CUBLASLT_EPILOGUE_BGRADB : CUBLASLT_EPILOGUE_BIAS;
    check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep),
             "epilogue");
    const cudaDataType_t bt = cuda_type(grad ? g.c : g.ab);
    check_lt(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt),
        "bias dtype");
  }
  // Column-major shapes of the stored matrices: ours [rows, cols] row-major = [cols, rows].
  const int64_t b_rows = g.trans_b ? g.n : g.k, b_cols = g.trans_b ? g.k : g.n;
  const int64_t a_rows = g.trans_a ? g.k : g.m, a_cols = g.trans_a ? g.m : g.k;
  check_lt(cublasLtMatrixLayoutCreate(&p.la, cuda_type(g.ab), b_cols, b_rows, ldb), "layout A");
  check_lt(cublasLtMatrixLayoutCreate(&p.lb, cuda_type(g.ab), a_cols, a_rows, lda), "layout B");
  check_lt(cublasLtMatrixLayoutCreate(&p.lc, cuda_type(g.c), g.n, g.m, ldc), "layout C");

  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "preference");
  size_t ws = kWorkspace;
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                sizeof ws),
           "workspace preference");
  const uint32_t al_a = alignment_of(g.b), al_b = alignment_of(g.a), al_c = alignment_of(g.c_ptr);
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                &al_a, sizeof al_a),
           "alignment A");
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                &al_b, sizeof al_b),
           "alignment B");
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                &al_c, sizeof al_c),
           "alignment C");
  check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                &al_c, sizeof al_c),
           "alignment D");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  check_lt(cublasLtMatmulAlgoGetHeuristic(d.handle, p.desc, p.la, p.lb, p.lc, p.lc, pref, 1,
                                          &result, &found),
           "algorithm heuristic");
  cublasLtMatmulPreferenceDestroy(pref);
  p.found = found > 0;
  p.algo = result.algo;
  return p;
}

}  // namespace

bool try_gemm(const GemmArgs& g) {
  BRAID_CHECK(g.m >= 0 && g.n >= 0 && g.k >= 0, "gemm: negative size [", g.m, ",", g.n, ",", g.k,
              "]");
  BRAID_CHECK(g.c == g.ab || g.c == DType::f32, "gemm: c has dtype ", dtype_name(g.c),
              ", expected ", dtype_name(g.ab), " or f32");
  BRAID_CHECK(g.epilogue != Epilogue::bias_grad || g.k > 0, "gemm: a bias gradient over k = 0");
  if (g.m == 0 || g.n == 0) return true;
  const int64_t lda = g.lda ? g.lda : (g.trans_a ? g.m : g.k);
  const int64_t ldb = g.ldb ? g.ldb : (g.trans_b ? g.k : g.n);
  const int64_t ldc = g.ldc ? g.ldc : g.n;
  const int device = current_device_index();
  DeviceLt& d = lt(device);
  if (g.k == 0) {  // c = beta * c: no product to take (cuBLASLt wants k >= 1)
    BRAID_CHECK(g.beta == 1.0f || g.beta == 0.0f, "gemm: k = 0 with beta ", g.beta);
    if (g.beta == 0.0f) {
      const size_t es = dtype_size(g.c);
      BRAID_CUDA_CHECK(cudaMemset2DAsync(g.c_ptr, ldc * es, 0, g.n * es, g.m, stream()),
                       "gemm (k = 0)");
    }
    return true;
  }
  const void* bias = g.epilogue == Epilogue::bias_grad ? g.dbias : g.bias;
  const Key key{device,
                static_cast<int>(g.ab),
                static_cast<int>(g.c),
                g.m,
                g.n,
                g.k,
                g.trans_a,
                g.trans_b,
                lda,
                ldb,
                ldc,
                static_cast<int>(g.epilogue),
                alignment_of(g.a),
                alignment_of(g.b),
                alignment_of(g.c_ptr),
                bias ? alignment_of(bias) : 0,
                tf32_enabled()};
  Plan* plan;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_plans.find(key);
    if (it == g_plans.end()) it = g_plans.emplace(key, make_plan(g, lda, ldb, ldc, d)).first;
    plan = &it->second;
  }
  if (!plan->found) return false;
  if (g.epilogue != Epilogue::none) {
    check_lt(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                            sizeof bias),
             "bias pointer");
  }
  check_lt(
      cublasLtMatmul(d.handle, plan->desc, &g.alpha, g.b, plan->la, g.a, plan->lb, &g.beta, g.c_ptr,
                     plan->lc, g.c_ptr, plan->lc, &plan->algo, d.workspace, kWorkspace, stream()),
      "matmul");
  return true;
}

bool tf32_enabled() {
  static const bool on = [] {
    const char* s = std::getenv("BRAID_CUDA_TF32");
    return s && std::strcmp(s, "1") == 0;
  }();
  return on;
}

void gemm(const GemmArgs& g) {
  BRAID_CHECK(try_gemm(g), "cuBLASLt has no algorithm for a ", dtype_name(g.ab), " GEMM [", g.m,
              ",", g.k, "]", (g.trans_a ? "^T" : ""), " @ [", g.k, ",", g.n, "]",
              (g.trans_b ? "^T" : ""), " -> ", dtype_name(g.c),
              g.epilogue == Epilogue::none ? "" : " with an epilogue");
}

}  // namespace braid::kernels::cuda

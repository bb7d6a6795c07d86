// GEMM through cuBLASLt: f32/bf16/f16 operands, C of their dtype or f32 (mixed-precision weight
// gradients), f32 accumulation and scaling.
//
// cuBLASLt is column-major, and a row-major [R, C] buffer is the column-major [C, R] transpose, so
// row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: B is passed as cuBLASLt's
// first operand and A as its second, each with its own transpose flag (as gemm.cc does for
// OpenBLAS). Plans (descriptors plus the heuristic's first algorithm) are cached per shape and
// pointer alignment in the DeviceContext, so steady-state calls only enqueue the matmul. Shapes or
// alignments cuBLASLt has no kernel for go to cuBLAS's cublasGemmStridedBatchedEx instead (same
// f32 accumulation), so every valid op call runs.
//
// Epilogues: a bias over our N columns is a bias over cuBLASLt's rows (its C is [N, M]), which is
// what CUBLASLT_EPILOGUE_BIAS broadcasts, and our row-major pre-activation [M, N] is its
// column-major aux matrix with leading dimension N. cuBLASLt fuses them when the bias has C's
// dtype (the only bias type it documents outside fp8), the bias and aux pointers are 16-byte
// aligned and, for the aux output, N is a multiple of 8. Everything else, and every key cuBLASLt
// turns down, runs the product into f32, applies the BiasAdd and Gelu kernels, and rounds once to
// C's dtype.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/cuda/op_util.h"
#include "core/cuda/ops_cuda.h"
#include "core/status.h"
#include "glog/logging.h"

namespace mt {
namespace cuda {
namespace {

using internal::GemmPlan;
using internal::GemmPlanKey;

// Plans kept before the cache is cleared (a guard against unbounded shape churn).
constexpr size_t kMaxPlans = 4096;

// cuBLASLt's leading dimension of a GELU aux matrix must be a multiple of this.
constexpr int64_t kAuxLdMultiple = 8;
// The least alignment (bytes) of the bias and aux pointers that we let cuBLASLt fuse.
constexpr int kMinEpilogueAlignment = 16;

cudaDataType_t DataType(DType dtype) {
  return dtype == DType::kBF16 ? CUDA_R_16BF : (dtype == DType::kF16 ? CUDA_R_16F : CUDA_R_32F);
}

// The largest power of two (at most 256) dividing the address, and the batch stride in bytes
// when there are several matrices: what cuBLASLt may assume about every matrix of the batch.
int Alignment(const void* p, int64_t batch, int64_t stride_bytes) {
  uint64_t bits = reinterpret_cast<uintptr_t>(p) | 256u;
  if (batch > 1) bits |= static_cast<uint64_t>(stride_bytes);
  return static_cast<int>(bits & (~bits + 1));  // Lowest set bit.
}

// Frees a matmul preference on every path.
struct PreferenceDeleter {
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { cublasLtMatmulPreferenceDestroy(p); }
};

absl::Status SetLayout(cublasLtMatrixLayout_t* layout, cudaDataType_t type, int64_t rows,
                       int64_t cols, int64_t batch) {
  MT_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(layout, type, static_cast<uint64_t>(rows),
                                                       static_cast<uint64_t>(cols), rows));
  if (batch > 1) {
    const int32_t count = static_cast<int32_t>(batch);
    const int64_t stride = rows * cols;
    MT_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutSetAttribute(
        *layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    MT_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutSetAttribute(
        *layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return absl::OkStatus();
}

bool HasEpilogue(const GemmDims& dims) {
  return dims.bias != nullptr || dims.gelu || dims.pre_activation != nullptr;
}

// cuBLASLt's epilogue for the bias and GeLU of `dims`, pre_activation being GeLU's aux output.
cublasLtEpilogue_t LtEpilogue(const GemmDims& dims) {
  const bool bias = dims.bias != nullptr;
  if (!dims.gelu) return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  if (dims.pre_activation != nullptr) {
    return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  }
  return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
}

// Whether cuBLASLt may fuse the epilogue at all (see the top of the file). Bias and aux pointers
// off 16-byte alignment take the unfused path too: the heuristic is told their alignment only
// through the pointers, and aligned vectors are what its epilogue kernels are built around.
bool Fusable(const TensorView& c, const GemmDims& dims) {
  if (dims.bias != nullptr &&
      (dims.bias->dtype != c.dtype || Alignment(dims.bias->data, 1, 0) < kMinEpilogueAlignment)) {
    return false;
  }
  if (dims.pre_activation != nullptr &&
      (dims.n % kAuxLdMultiple != 0 ||
       Alignment(dims.pre_activation->data, 1, 0) < kMinEpilogueAlignment)) {
    return false;
  }
  return true;
}

// Points a plan's descriptor at this call's bias and aux buffers. Plans are shared by the calls
// with one key, and the key fixes only the pointers' alignment.
absl::Status SetEpiloguePointers(cublasLtMatmulDesc_t desc, const GemmPlanKey& key,
                                 const void* bias, void* aux) {
  if (key.bias_dtype >= 0) {
    MT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  if (key.align_aux > 0) {
    MT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
  }
  return absl::OkStatus();
}

// The epilogue attributes of a key's descriptor. The heuristic reads the bias and aux pointers'
// alignment from the pointers themselves.
absl::Status SetEpilogue(cublasLtMatmulDesc_t desc, const GemmPlanKey& key, const void* bias,
                         void* aux) {
  const auto epilogue = static_cast<cublasLtEpilogue_t>(key.epilogue);
  MT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                           &epilogue, sizeof(epilogue)));
  if (key.bias_dtype >= 0) {
    const int32_t bias_type = key.bias_dtype;
    MT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
  }
  if (key.align_aux > 0) {
    // Our row-major [M, N] pre-activation is cuBLASLt's column-major [N, M]: leading dimension N.
    // Its dtype is C's (the default aux type).
    const int64_t ld = key.n;
    MT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
  }
  return SetEpiloguePointers(desc, key, bias, aux);
}

absl::StatusOr<std::unique_ptr<GemmPlan>> MakePlan(absl::string_view op,
                                                   internal::DeviceContextState& st,
                                                   const GemmPlanKey& key, const void* bias,
                                                   void* aux) {
  auto plan = std::make_unique<GemmPlan>();
  const auto type = static_cast<cudaDataType_t>(key.dtype);
  MT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // cuBLASLt's A is our B and its B is our A (see the top of the file).
  const cublasOperation_t op_first = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_second = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  MT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                           &op_first, sizeof(op_first)));
  MT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                           &op_second, sizeof(op_second)));
  const bool epilogue = key.epilogue != CUBLASLT_EPILOGUE_DEFAULT;
  if (epilogue) RETURN_IF_ERROR(SetEpilogue(plan->desc, key, bias, aux));
  const int64_t M = key.m, N = key.n, K = key.k;
  // Column-major shapes of the stored buffers: B is [N, K] (or [K, N] transposed), A is [K, M]
  // (or [M, K]), C is [N, M].
  RETURN_IF_ERROR(SetLayout(&plan->a, type, key.trans_b ? K : N, key.trans_b ? N : K, key.batch));
  RETURN_IF_ERROR(SetLayout(&plan->b, type, key.trans_a ? M : K, key.trans_a ? K : M, key.batch));
  RETURN_IF_ERROR(SetLayout(&plan->c, static_cast<cudaDataType_t>(key.c_dtype), N, M, key.batch));

  cublasLtMatmulPreference_t raw_pref = nullptr;
  MT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&raw_pref));
  std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PreferenceDeleter> pref(raw_pref);
  const uint64_t workspace = st.workspace_bytes;
  MT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      raw_pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
  const uint32_t align_first = static_cast<uint32_t>(key.align_b);  // cuBLASLt's A = our B.
  const uint32_t align_second = static_cast<uint32_t>(key.align_a);
  const uint32_t align_c = static_cast<uint32_t>(key.align_c);
  MT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_first, sizeof(align_first)));
  MT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_second, sizeof(align_second)));
  MT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)));
  MT_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      raw_pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c)));

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      st.blas, plan->desc, plan->a, plan->b, plan->c, plan->c, raw_pref, 1, &result, &found);
  // cuBLASLt reports "no algorithm for this configuration" as NOT_SUPPORTED, or as success with
  // no result (or a result whose own state is an error); an epilogue this build has no kernel
  // for may also be refused as INVALID_VALUE, which is logged, since it can equally mean that our
  // epilogue attributes are wrong (the unfused path then still gives the right numbers).
  const bool no_algorithm =
      status == CUBLAS_STATUS_NOT_SUPPORTED ||
      (status == CUBLAS_STATUS_SUCCESS && (found == 0 || result.state != CUBLAS_STATUS_SUCCESS));
  const bool refused = epilogue && status == CUBLAS_STATUS_INVALID_VALUE;
  if (status != CUBLAS_STATUS_SUCCESS && !no_algorithm && !refused) {
    return internal::CublasCallError(status, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
  }
  if (refused) {
    LOG(WARNING) << op << ": cuBLASLt refused epilogue " << key.epilogue << " for [" << key.m
                 << ", " << key.k << "] x [" << key.k << ", " << key.n
                 << "] (CUBLAS_STATUS_INVALID_VALUE); using the unfused epilogue";
  }
  if (refused || no_algorithm) {
    plan->legacy = true;  // No cuBLASLt kernel for this shape or alignment: use cuBLAS.
  } else {
    plan->algo = result.algo;
  }
  return plan;
}

// The same product through cublasGemmStridedBatchedEx (32-bit sizes).
absl::Status LegacyGemm(absl::string_view op, internal::DeviceContextState& st,
                        const GemmPlanKey& key, const void* a, const void* b, void* c, float alpha,
                        float beta, cudaStream_t stream) {
  const int64_t M = key.m, N = key.n, K = key.k;
  for (int64_t v : {M, N, K, key.batch}) {
    if (v > INT_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": cuBLASLt has no algorithm for batch ", key.batch, " of [", M, ", ", K,
                       "] x [", K, ", ", N,
                       "] and the cuBLAS fallback takes only 32-bit sizes; align the tensors to "
                       "16 bytes or split the product"));
    }
  }
  const auto type = static_cast<cudaDataType_t>(key.dtype);
  const auto c_type = static_cast<cudaDataType_t>(key.c_dtype);
  MT_CUBLAS_RETURN_IF_ERROR(cublasSetStream(st.blas_legacy, stream));
  MT_CUBLAS_RETURN_IF_ERROR(cublasGemmStridedBatchedEx(
      st.blas_legacy, key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
      key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(M),
      static_cast<int>(K), &alpha, b, type, static_cast<int>(key.trans_b ? K : N), K * N, a, type,
      static_cast<int>(key.trans_a ? M : K), M * K, &beta, c, c_type, static_cast<int>(N), M * N,
      static_cast<int>(key.batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

absl::Status LtGemm(absl::string_view op, const ExecContext& ctx, const TensorView& a,
                    const TensorView& b, const TensorView& c, const GemmDims& dims, bool fuse);

// The epilogue without cuBLASLt's help: the product in f32 (C itself when C is f32), the BiasAdd
// and Gelu kernels on it, pre_activation and C each converted once from it. Handles K = 0 and
// alpha = 0 (a zero product) too.
absl::Status UnfusedEpilogue(absl::string_view op, const ExecContext& ctx, const TensorView& a,
                             const TensorView& b, const TensorView& c, const GemmDims& dims) {
  internal::DeviceContextState& st = ctx.cuda->state();
  const int64_t M = dims.m, N = dims.n;
  const bool c_f32 = c.dtype == DType::kF32;
  const bool bias_f32 = dims.bias == nullptr || dims.bias->dtype == DType::kF32;
  // Scratch: the f32 product unless C is f32, then (256-byte aligned) the f32 bias unless it is.
  const size_t product_bytes =
      c_f32 ? 0 : (static_cast<size_t>(M * N) * sizeof(float) + 255) / 256 * 256;
  const size_t bias_bytes = bias_f32 ? 0 : static_cast<size_t>(N) * sizeof(float);
  char* scratch = nullptr;
  if (product_bytes + bias_bytes > 0) {
    absl::StatusOr<void*> buffer = st.Scratch(product_bytes + bias_bytes);
    if (!buffer.ok()) return WithOp(op, buffer.status());
    scratch = static_cast<char*>(*buffer);
  }
  const TensorView p = c_f32 ? c : TensorView(scratch, {M, N}, DType::kF32, c.device);
  if (dims.k == 0 || dims.alpha == 0.0f) {
    const uint32_t zero = 0;
    RETURN_IF_ERROR(
        LaunchStatus(op, LaunchFill(&zero, sizeof(zero), p.data, M * N, ctx.cuda_stream)));
  } else {
    RETURN_IF_ERROR(LtGemm(op, ctx, a, b, p, dims, /*fuse=*/false));
  }
  if (dims.bias != nullptr) {
    TensorView bias = *dims.bias;
    if (!bias_f32) {
      bias = TensorView(scratch + product_bytes, {N}, DType::kF32, c.device);
      RETURN_IF_ERROR(WithOp(op, Convert(ctx, *dims.bias, bias)));
    }
    RETURN_IF_ERROR(WithOp(op, BiasAdd(ctx, p, bias, p)));
  }
  if (dims.pre_activation != nullptr) {
    RETURN_IF_ERROR(WithOp(op, Convert(ctx, p, *dims.pre_activation)));
  }
  if (dims.gelu) RETURN_IF_ERROR(WithOp(op, Gelu(ctx, p, p)));
  if (!c_f32) RETURN_IF_ERROR(WithOp(op, Convert(ctx, p, c)));
  return absl::OkStatus();
}

// The product (K > 0, alpha != 0) through its cached plan: cuBLASLt, with the epilogue of `dims`
// when `fuse`, or a legacy plan's fallback.
absl::Status LtGemm(absl::string_view op, const ExecContext& ctx, const TensorView& a,
                    const TensorView& b, const TensorView& c, const GemmDims& dims, bool fuse) {
  internal::DeviceContextState& st = ctx.cuda->state();
  const int64_t elem = static_cast<int64_t>(DTypeSize(a.dtype));
  const int64_t c_elem = static_cast<int64_t>(DTypeSize(c.dtype));
  GemmPlanKey key;
  key.dtype = static_cast<int>(DataType(a.dtype));
  key.c_dtype = static_cast<int>(DataType(c.dtype));
  static_cast<GemmShape&>(key) = dims;
  key.align_a = Alignment(a.data, dims.batch, dims.m * dims.k * elem);
  key.align_b = Alignment(b.data, dims.batch, dims.k * dims.n * elem);
  key.align_c = Alignment(c.data, dims.batch, dims.m * dims.n * c_elem);
  const void* bias = nullptr;
  void* aux = nullptr;
  if (fuse) {
    key.epilogue = static_cast<int>(LtEpilogue(dims));
    if (dims.bias != nullptr) {
      bias = dims.bias->data;
      key.bias_dtype = static_cast<int>(DataType(dims.bias->dtype));
      key.align_bias = Alignment(bias, 1, 0);
    }
    if (dims.pre_activation != nullptr) {
      aux = dims.pre_activation->data;
      key.align_aux = Alignment(aux, 1, 0);
    }
  }
  auto it = st.gemm_plans.find(key);
  if (it == st.gemm_plans.end()) {
    absl::StatusOr<std::unique_ptr<GemmPlan>> plan = MakePlan(op, st, key, bias, aux);
    if (!plan.ok()) return WithOp(op, plan.status());
    if (st.gemm_plans.size() >= kMaxPlans) st.gemm_plans.clear();
    it = st.gemm_plans.emplace(key, std::move(*plan)).first;
  }
  GemmPlan& plan = *it->second;
  const float alpha = dims.alpha, beta = dims.beta;
  // The fallbacks may add plans (and so clear the cache): `plan` is not used after them.
  auto fallback = [&]() -> absl::Status {
    if (fuse) return UnfusedEpilogue(op, ctx, a, b, c, dims);
    return WithOp(op, LegacyGemm(op, st, key, a.data, b.data, c.data, alpha, beta, Stream(ctx)));
  };
  if (plan.legacy) return fallback();
  if (fuse) {
    RETURN_IF_ERROR(WithOp(op, SetEpiloguePointers(plan.desc, key, bias, aux)));
  }
  const cublasStatus_t status = cublasLtMatmul(
      st.blas, plan.desc, &alpha, b.data, plan.a, a.data, plan.b, &beta, c.data, plan.c, c.data,
      plan.c, &plan.algo, st.workspace, st.workspace_bytes, Stream(ctx));
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (fuse && status == CUBLAS_STATUS_INVALID_VALUE)) {
    // The heuristic's choice turned the problem (or its epilogue) down: remember it and take the
    // fallback.
    plan.legacy = true;
    return fallback();
  }
  if (status != CUBLAS_STATUS_SUCCESS) {
    return WithOp(op, internal::CublasCallError(status, "cublasLtMatmul", __FILE__, __LINE__));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Gemm(absl::string_view op, const ExecContext& ctx, const TensorView& a,
                  const TensorView& b, const TensorView& c, const GemmDims& dims) {
  RETURN_IF_ERROR(Enter(op, ctx, c.device,
                        {{"A", &a},
                         {"B", &b},
                         {"C", &c},
                         {"bias", dims.bias},
                         {"pre_activation", dims.pre_activation}},
                        Needs::kDeviceContext));
  const bool epilogue = HasEpilogue(dims);
  if (epilogue && (dims.batch != 1 || dims.beta != 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": a bias or GeLU epilogue needs batch 1 and beta = 0"));
  }
  if (dims.batch == 0 || dims.m == 0 || dims.n == 0) return absl::OkStatus();
  const int64_t c_elems = dims.batch * dims.m * dims.n;
  if (dims.k == 0 || dims.alpha == 0.0f) {
    // The product is zero and A and B are not read (as in BLAS).
    if (epilogue) return UnfusedEpilogue(op, ctx, a, b, c, dims);
    // C = beta C.
    if (dims.beta == 0.0f) {
      const uint64_t zero = 0;  // All-zero bits are +0 in every float dtype.
      return LaunchStatus(op, LaunchFill(&zero, static_cast<int>(DTypeSize(c.dtype)), c.data,
                                         c_elems, ctx.cuda_stream));
    }
    if (dims.beta == 1.0f) return absl::OkStatus();
    return LaunchStatus(op, LaunchUnary(Elem(c.dtype), UnaryOp::kScale, c.data, c.data, c_elems,
                                        dims.beta, ctx.cuda_stream));
  }
  if (dims.batch > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": batch ", dims.batch, " exceeds cuBLASLt's 32-bit batch count; split the batch"));
  }
  if (epilogue && !Fusable(c, dims)) return UnfusedEpilogue(op, ctx, a, b, c, dims);
  return LtGemm(op, ctx, a, b, c, dims, /*fuse=*/epilogue);
}

}  // namespace cuda
}  // namespace mt

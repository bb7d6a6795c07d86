// The emulated cuBLASLt's product: the problem checks, cublasLtMatmulAlgoGetHeuristic and
// cublasLtMatmul (blas_internal.h has the semantics).
#include <cublasLt.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "core/cuda/emu/blas_internal.h"
#include "core/cuda/emu/internal.h"

namespace mt {
namespace cuda_emu {
namespace {

// cublasLtMatmul's workspace must be 256-byte aligned.
constexpr uintptr_t kWorkspaceAlignment = 256;
// The GeLU aux matrix's leading dimension and batch stride must be multiples of this.
constexpr int64_t kAuxMultiple = 8;

// What the heuristic's algorithm records in cublasLtMatmulAlgo_t::data: the problem it was chosen
// for and the alignments it may assume.
enum AlgoField {
  kAlgoTagField = 0,
  kAlgoKind,  // PackKind(): types, transposes, epilogue
  kAlgoAlignA,
  kAlgoAlignB,
  kAlgoAlignC,
  kAlgoAlignD,
  kAlgoAlignBias,
  kAlgoAlignAux,
};
static_assert(kAlgoAlignAux < sizeof(cublasLtMatmulAlgo_t::data) / sizeof(uint64_t),
              "cublasLtMatmulAlgo_t too small");

// A matmul's shape and kind, checked against its descriptor and layouts.
struct Problem {
  bool trans_a = false;
  bool trans_b = false;
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int ab_type = 0;
  int cd_type = 0;
  bool bias = false;
  bool gelu = false;
  bool aux = false;
  const Layout* a = nullptr;
  const Layout* b = nullptr;
  const Layout* c = nullptr;
  const Layout* d = nullptr;
};

// What identifies the kind of problem an algorithm was chosen for.
uint64_t PackKind(const Problem& p, uint32_t epilogue) {
  return static_cast<uint64_t>(p.ab_type) | static_cast<uint64_t>(p.cd_type) << 8 |
         static_cast<uint64_t>(p.trans_a) << 16 | static_cast<uint64_t>(p.trans_b) << 17 |
         static_cast<uint64_t>(epilogue) << 32;
}

bool IsTransposed(int32_t op) { return op != CUBLAS_OP_N; }

// Checks the descriptor and layouts as cublasLtMatmul and cublasLtMatmulAlgoGetHeuristic do. A
// null Cdesc stands for Ddesc.
cublasStatus_t CheckProblem(const MatmulDesc* desc, cublasLtMatrixLayout_t a_desc,
                            cublasLtMatrixLayout_t b_desc, cublasLtMatrixLayout_t c_desc,
                            cublasLtMatrixLayout_t d_desc, Problem* out) {
  const Layout* a = AsLayout(a_desc);
  const Layout* b = AsLayout(b_desc);
  const Layout* d = AsLayout(d_desc);
  const Layout* c = c_desc == nullptr ? d : AsLayout(c_desc);
  if (desc == nullptr || a == nullptr || b == nullptr || c == nullptr || d == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (desc->compute_type != CUBLAS_COMPUTE_32F || desc->scale_type != CUDA_R_32F) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  for (const Layout* l : {a, b, c, d}) {
    // cublasLt.h: ld must be at least the number of rows (column order); batch count >= 1.
    if (l->ld < 0 || static_cast<uint64_t>(l->ld) < l->rows || l->batch < 1) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (l->rows > static_cast<uint64_t>(INT32_MAX) || l->cols > static_cast<uint64_t>(INT32_MAX)) {
      return CUBLAS_STATUS_NOT_SUPPORTED;  // "only values expressible as int32_t are supported"
    }
  }
  Problem p;
  p.trans_a = IsTransposed(desc->trans_a);
  p.trans_b = IsTransposed(desc->trans_b);
  p.m = static_cast<int64_t>(d->rows);
  p.n = static_cast<int64_t>(d->cols);
  const int64_t a_rows = static_cast<int64_t>(a->rows), a_cols = static_cast<int64_t>(a->cols);
  const int64_t b_rows = static_cast<int64_t>(b->rows), b_cols = static_cast<int64_t>(b->cols);
  p.k = p.trans_a ? a_rows : a_cols;
  if ((p.trans_a ? a_cols : a_rows) != p.m) return CUBLAS_STATUS_INVALID_VALUE;
  if ((p.trans_b ? b_cols : b_rows) != p.k || (p.trans_b ? b_rows : b_cols) != p.n) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // C: D's type, shape, batch count and order (the guide's out-of-place rule).
  if (c->rows != d->rows || c->cols != d->cols || c->type != d->type) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (a->batch != d->batch || b->batch != d->batch || c->batch != d->batch) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  p.batch = d->batch;
  if (a->type != b->type || !SupportedTypes(static_cast<int>(a->type), static_cast<int>(d->type))) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  p.ab_type = static_cast<int>(a->type);
  p.cd_type = static_cast<int>(d->type);
  const uint32_t e = desc->epilogue;
  p.bias = e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
           e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  p.gelu = (e & CUBLASLT_EPILOGUE_GELU) != 0;
  p.aux = e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  // The bias and the GeLU input have D's type (cublasLt.h: BIAS_DATA_TYPE,
  // EPILOGUE_AUX_DATA_TYPE; other types are for IMMA and fp8 kernels only).
  if (p.bias && desc->bias_type != -1 && desc->bias_type != p.cd_type) {
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (p.aux) {
    if (desc->aux_type != -1 && desc->aux_type != p.cd_type) return CUBLAS_STATUS_NOT_SUPPORTED;
    // cublasLt.h, EPILOGUE_AUX_LD: "Must be divisible by 8 and be no less than the number of rows
    // in the output matrix"; EPILOGUE_AUX_BATCH_STRIDE: "Must be divisible by 8".
    if (desc->aux_ld < p.m || desc->aux_ld % kAuxMultiple != 0) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (p.batch > 1 && desc->aux_batch_stride % kAuxMultiple != 0) {
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  p.a = a;
  p.b = b;
  p.c = c;
  p.d = d;
  *out = p;
  return CUBLAS_STATUS_SUCCESS;
}

// The epilogue of a checked problem; stops the process unless its bias and aux matrices are
// device memory.
Epilogue EpilogueOf(const MatmulDesc& desc, const Problem& p, const char* fn) {
  Epilogue ep;
  ep.type = p.cd_type;
  ep.gelu = p.gelu;
  if (p.bias) {
    ep.bias = true;
    ep.bias_data = desc.bias;
    ep.bias_stride = desc.bias_batch_stride;
    CheckDeviceMatrix(fn, "bias", ep.bias_data, ep.type, p.m, 1, p.m, p.batch, ep.bias_stride);
  }
  if (p.aux) {
    ep.aux = true;
    ep.aux_data = desc.aux;
    ep.aux_ld = desc.aux_ld;
    ep.aux_stride = desc.aux_batch_stride;
    CheckDeviceMatrix(fn, "aux", ep.aux_data, ep.type, p.m, p.n, ep.aux_ld, p.batch, ep.aux_stride);
  }
  return ep;
}

// Stops the process when a matrix the product reads or writes (a null pointer: one it does not)
// is less aligned than `algo` was chosen for: a GPU kernel would fault on a misaligned access.
void CheckAssumedAlignments(const cublasLtMatmulAlgo_t& algo, const Problem& p, const void* a,
                            const void* b, const void* c, const void* d, const Epilogue& ep,
                            const char* fn) {
  const int64_t ab_size = static_cast<int64_t>(TypeSize(p.ab_type));
  const int64_t cd_size = static_cast<int64_t>(TypeSize(p.cd_type));
  const uint64_t* data = algo.data;
  const struct {
    const char* name;
    const void* ptr;
    int64_t stride_bytes;
    uint64_t assumed;
  } checks[] = {
      {"A", a, p.a->stride * ab_size, data[kAlgoAlignA]},
      {"B", b, p.b->stride * ab_size, data[kAlgoAlignB]},
      {"C", c, p.c->stride * cd_size, data[kAlgoAlignC]},
      {"D", d, p.d->stride * cd_size, data[kAlgoAlignD]},
      {"bias", ep.bias_data, ep.bias_stride * cd_size, data[kAlgoAlignBias]},
      {"aux", ep.aux_data, ep.aux_stride * cd_size, data[kAlgoAlignAux]},
  };
  for (const auto& check : checks) {
    if (check.ptr == nullptr) continue;
    const uint64_t have = Alignment(check.ptr, p.batch, check.stride_bytes);
    if (have < check.assumed) {
      Fail(
          "%s: %s (%p, batch stride %lld bytes) is %llu-byte aligned, but the algorithm was "
          "chosen for %llu-byte alignment (the heuristic's preference or pointer); a GPU "
          "kernel would fault on a misaligned access",
          fn, check.name, check.ptr, static_cast<long long>(check.stride_bytes),
          static_cast<unsigned long long>(have), static_cast<unsigned long long>(check.assumed));
    }
  }
}

}  // namespace
}  // namespace cuda_emu
}  // namespace mt

namespace emu = ::mt::cuda_emu;
using emu::AsDesc;
using emu::AsPref;

extern "C" {

// One algorithm (no workspace, no split-K reduction) for every supported problem. It needs each
// matrix, the bias and the aux matrix aligned to their element size, and (like the real kernels)
// may assume the alignments the preference promises for A, B, C and D and the alignment the bias
// and aux pointers had here; cublasLtMatmul holds its caller to them.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount) {
  using emu::Alignment;
  using emu::TypeSize;
  if (lightHandle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const emu::Preference* pref = AsPref(preference);
  if (requestedAlgoCount <= 0 || heuristicResultsArray == nullptr || returnAlgoCount == nullptr ||
      pref == nullptr) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *returnAlgoCount = 0;
  const emu::MatmulDesc* desc = AsDesc(operationDesc);
  emu::Problem p;
  const cublasStatus_t status = emu::CheckProblem(desc, Adesc, Bdesc, Cdesc, Ddesc, &p);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  const uint64_t ab_size = TypeSize(p.ab_type), cd_size = TypeSize(p.cd_type);
  // The bias and aux pointers' alignment, read from the descriptor (cublasLt.h: "Routines that
  // don't dereference this pointer, like cublasLtMatmulAlgoGetHeuristic() depend on its value to
  // determine expected pointer alignment"), with their batch strides.
  const int64_t cd_bytes = static_cast<int64_t>(cd_size);
  const uint64_t align_bias =
      p.bias ? Alignment(desc->bias, p.batch, desc->bias_batch_stride * cd_bytes) : 0;
  const uint64_t align_aux =
      p.aux ? Alignment(desc->aux, p.batch, desc->aux_batch_stride * cd_bytes) : 0;
  if (pref->align_a < ab_size || pref->align_b < ab_size || pref->align_c < cd_size ||
      pref->align_d < cd_size || (p.bias && align_bias < cd_size) ||
      (p.aux && align_aux < cd_size)) {
    return CUBLAS_STATUS_NOT_SUPPORTED;  // No algorithm for such alignment.
  }
  cublasLtMatmulHeuristicResult_t& r = heuristicResultsArray[0];
  std::memset(&r, 0, sizeof(r));
  r.algo.data[emu::kAlgoTagField] = emu::kAlgoTag;
  r.algo.data[emu::kAlgoKind] = emu::PackKind(p, desc->epilogue);
  r.algo.data[emu::kAlgoAlignA] = std::min<uint64_t>(pref->align_a, emu::kMaxAlignment);
  r.algo.data[emu::kAlgoAlignB] = std::min<uint64_t>(pref->align_b, emu::kMaxAlignment);
  r.algo.data[emu::kAlgoAlignC] = std::min<uint64_t>(pref->align_c, emu::kMaxAlignment);
  r.algo.data[emu::kAlgoAlignD] = std::min<uint64_t>(pref->align_d, emu::kMaxAlignment);
  r.algo.data[emu::kAlgoAlignBias] = align_bias;
  r.algo.data[emu::kAlgoAlignAux] = align_aux;
  r.workspaceSize = 0;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                              const void* alpha, const void* A, cublasLtMatrixLayout_t Adesc,
                              const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
                              const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
  using emu::CheckDeviceMatrix;
  using emu::Matrix;
  (void)workspaceSizeInBytes;  // The algorithm needs no workspace.
  (void)stream;                // Synchronous.
  if (lightHandle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  const emu::MatmulDesc* desc = AsDesc(computeDesc);
  emu::Problem p;
  const cublasStatus_t status = emu::CheckProblem(desc, Adesc, Bdesc, Cdesc, Ddesc, &p);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  if (alpha == nullptr || beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  // The guide: the workspace "must be 256B aligned".
  if (workspace != nullptr &&
      reinterpret_cast<uintptr_t>(workspace) % emu::kWorkspaceAlignment != 0) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // In place needs C == D with one layout (Cdesc == Ddesc).
  if (C == D && C != nullptr && (p.c->ld != p.d->ld || p.c->stride != p.d->stride)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if ((p.bias && desc->bias == nullptr) || (p.aux && desc->aux == nullptr)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const float alpha_v = *static_cast<const float*>(alpha);
  const float beta_v = *static_cast<const float*>(beta);
  const char* fn = "cublasLtMatmul";
  if (algo != nullptr && (algo->data[emu::kAlgoTagField] != emu::kAlgoTag ||
                          algo->data[emu::kAlgoKind] != emu::PackKind(p, desc->epilogue))) {
    return CUBLAS_STATUS_INVALID_VALUE;  // Not an algorithm of this problem's kind.
  }
  // Everything the product reads or writes must be device memory.
  const bool product = p.k > 0 && alpha_v != 0.0f;
  if (product) {
    CheckDeviceMatrix(fn, "A", A, p.ab_type, static_cast<int64_t>(p.a->rows),
                      static_cast<int64_t>(p.a->cols), p.a->ld, p.batch, p.a->stride);
    CheckDeviceMatrix(fn, "B", B, p.ab_type, static_cast<int64_t>(p.b->rows),
                      static_cast<int64_t>(p.b->cols), p.b->ld, p.batch, p.b->stride);
  }
  if (beta_v != 0.0f) {
    CheckDeviceMatrix(fn, "C", C, p.cd_type, p.m, p.n, p.c->ld, p.batch, p.c->stride);
  }
  CheckDeviceMatrix(fn, "D", D, p.cd_type, p.m, p.n, p.d->ld, p.batch, p.d->stride);
  const emu::Epilogue ep = emu::EpilogueOf(*desc, p, fn);
  // The algorithm may assume the alignments it was chosen for.
  if (algo != nullptr) {
    emu::CheckAssumedAlignments(*algo, p, product ? A : nullptr, product ? B : nullptr,
                                beta_v != 0.0f ? C : nullptr, D, ep, fn);
  }
  emu::DeviceAccess access;
  const Matrix a{A, p.ab_type, p.a->ld, p.a->stride};
  const Matrix b{B, p.ab_type, p.b->ld, p.b->stride};
  const Matrix c{C, p.cd_type, p.c->ld, p.c->stride};
  const Matrix d{D, p.cd_type, p.d->ld, p.d->stride};
  emu::Compute(p.trans_a, p.trans_b, p.m, p.n, p.k, p.batch, alpha_v, a, b, beta_v, c, D, d, ep);
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"

// The emulated cuBLASLt's handle, matmul descriptors, matrix layouts and preferences: each
// attribute the project sets, checked for the size and values cublasLt.h allows
// (blas_internal.h has the semantics).
#include <cublasLt.h>

#include <cstring>

#include "core/cuda/emu/blas_internal.h"

// The handle the header declares only as an incomplete type.
struct cublasLtContext {
  int device = 0;
};

namespace mt {
namespace cuda_emu {

namespace {

// Reads an attribute value of exactly sizeof(V) bytes (the headers' size check).
template <typename V>
bool ReadAttribute(const void* buf, size_t size, V* out) {
  if (buf == nullptr || size != sizeof(V)) return false;
  std::memcpy(out, buf, sizeof(V));
  return true;
}

// The epilogues implemented here.
bool KnownEpilogue(uint32_t e) {
  return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_BIAS ||
         e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_AUX ||
         e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}

}  // namespace
}  // namespace cuda_emu
}  // namespace mt

namespace emu = ::mt::cuda_emu;
using emu::AsDesc;
using emu::AsMutableLayout;
using emu::AsPref;
using emu::ReadAttribute;

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  if (lightHandle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *lightHandle = new cublasLtContext();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (lightHandle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete lightHandle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc,
                                        cublasComputeType_t computeType, cudaDataType_t scaleType) {
  if (matmulDesc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* desc = new emu::MatmulDesc();
  desc->compute_type = static_cast<int32_t>(computeType);
  desc->scale_type = static_cast<int32_t>(scaleType);
  *matmulDesc = reinterpret_cast<cublasLtMatmulDesc_t>(desc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  if (matmulDesc == nullptr) return CUBLAS_STATUS_SUCCESS;
  emu::MatmulDesc* desc = AsDesc(matmulDesc);
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  desc->tag = 0;
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr, const void* buf,
                                              size_t sizeInBytes) {
  emu::MatmulDesc* desc = AsDesc(matmulDesc);
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t invalid = CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      return ReadAttribute(buf, sizeInBytes, &desc->compute_type) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      return ReadAttribute(buf, sizeInBytes, &desc->scale_type) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: {
      int32_t v;
      if (!ReadAttribute(buf, sizeInBytes, &v) || v != CUBLASLT_POINTER_MODE_HOST) return invalid;
      desc->pointer_mode = v;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
      int32_t v;
      // CUBLAS_OP_C is CUBLAS_OP_T for the real types emulated here.
      if (!ReadAttribute(buf, sizeInBytes, &v) ||
          (v != CUBLAS_OP_N && v != CUBLAS_OP_T && v != CUBLAS_OP_C)) {
        return invalid;
      }
      (attr == CUBLASLT_MATMUL_DESC_TRANSA ? desc->trans_a : desc->trans_b) = v;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_TRANSC: {
      int32_t v;  // cublasLt.h: "Currently only CUBLAS_OP_N is supported."
      if (!ReadAttribute(buf, sizeInBytes, &v) || v != CUBLAS_OP_N) return invalid;
      desc->trans_c = v;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
      uint32_t v;
      if (!ReadAttribute(buf, sizeInBytes, &v) || !emu::KnownEpilogue(v)) return invalid;
      desc->epilogue = v;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return ReadAttribute(buf, sizeInBytes, &desc->bias) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
      return ReadAttribute(buf, sizeInBytes, &desc->bias_batch_stride) ? CUBLAS_STATUS_SUCCESS
                                                                       : invalid;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      return ReadAttribute(buf, sizeInBytes, &desc->aux) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      return ReadAttribute(buf, sizeInBytes, &desc->aux_ld) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE:
      return ReadAttribute(buf, sizeInBytes, &desc->aux_batch_stride) ? CUBLAS_STATUS_SUCCESS
                                                                      : invalid;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
      return ReadAttribute(buf, sizeInBytes, &desc->aux_type) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return ReadAttribute(buf, sizeInBytes, &desc->bias_type) ? CUBLAS_STATUS_SUCCESS : invalid;
    default:
      return invalid;  // Not emulated.
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (matLayout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  auto* layout = new emu::Layout();
  layout->type = static_cast<uint32_t>(type);
  layout->rows = rows;
  layout->cols = cols;
  layout->ld = ld;
  *matLayout = reinterpret_cast<cublasLtMatrixLayout_t>(layout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  if (matLayout == nullptr) return CUBLAS_STATUS_SUCCESS;
  emu::Layout* layout = AsMutableLayout(matLayout);
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  layout->tag = 0;
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t sizeInBytes) {
  emu::Layout* layout = AsMutableLayout(matLayout);
  if (layout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t invalid = CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE:
      return ReadAttribute(buf, sizeInBytes, &layout->type) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATRIX_LAYOUT_ORDER: {
      int32_t v;  // Only column order is emulated.
      if (!ReadAttribute(buf, sizeInBytes, &v) || v != CUBLASLT_ORDER_COL) return invalid;
      layout->order = v;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATRIX_LAYOUT_ROWS:
      return ReadAttribute(buf, sizeInBytes, &layout->rows) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATRIX_LAYOUT_COLS:
      return ReadAttribute(buf, sizeInBytes, &layout->cols) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATRIX_LAYOUT_LD:
      return ReadAttribute(buf, sizeInBytes, &layout->ld) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT:
      return ReadAttribute(buf, sizeInBytes, &layout->batch) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET:
      return ReadAttribute(buf, sizeInBytes, &layout->stride) ? CUBLAS_STATUS_SUCCESS : invalid;
    default:
      return invalid;  // Not emulated (planar complex, pointer-array batches).
  }
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(new emu::Preference());
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  if (pref == nullptr) return CUBLAS_STATUS_SUCCESS;
  emu::Preference* p = AsPref(pref);
  if (p == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  p->tag = 0;
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t sizeInBytes) {
  emu::Preference* p = AsPref(pref);
  if (p == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t invalid = CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: {
      uint32_t v;  // Only the best-fit search is emulated.
      if (!ReadAttribute(buf, sizeInBytes, &v) || v != CUBLASLT_SEARCH_BEST_FIT) return invalid;
      p->search_mode = v;
      return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return ReadAttribute(buf, sizeInBytes, &p->max_workspace) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
      return ReadAttribute(buf, sizeInBytes, &p->reduction_mask) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      return ReadAttribute(buf, sizeInBytes, &p->align_a) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      return ReadAttribute(buf, sizeInBytes, &p->align_b) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      return ReadAttribute(buf, sizeInBytes, &p->align_c) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return ReadAttribute(buf, sizeInBytes, &p->align_d) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT:
      return ReadAttribute(buf, sizeInBytes, &p->max_waves) ? CUBLAS_STATUS_SUCCESS : invalid;
    case CUBLASLT_MATMUL_PREF_IMPL_MASK:
      return ReadAttribute(buf, sizeInBytes, &p->impl_mask) ? CUBLAS_STATUS_SUCCESS : invalid;
    default:
      return invalid;  // Not emulated.
  }
}

}  // extern "C"

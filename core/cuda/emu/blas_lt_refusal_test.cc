// Tests of what the emulated cuBLASLt refuses (blas_lt_desc.cc, blas_lt_matmul.cc): attributes
// and values it does not implement, inconsistent or unsupported problems and bad call arguments,
// each with the status the library documents, and what would fault on a GPU (a host pointer, a
// misaligned one, a matrix past its allocation), which stops the process.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <vector>

#include "core/cuda/emu/blas_testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace cuda_emu {
namespace blas_testing {
namespace {

// Attributes and values the emulation does not implement, and malformed attribute calls.
TEST_F(LtTest, RejectsUnimplementedAttributesAndBadSizes) {
  LtPlan plan;
  ASSERT_EQ(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_32F, 4, 4, 4), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&plan.pref), CUBLAS_STATUS_SUCCESS);
  const cublasStatus_t kInvalid = CUBLAS_STATUS_INVALID_VALUE;
  // Matmul descriptor.
  EXPECT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_FILL_MODE, int32_t{CUBLAS_FILL_MODE_FULL}),
            kInvalid);
  EXPECT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, static_cast<void*>(nullptr)),
            kInvalid);
  EXPECT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                    static_cast<uint32_t>(CUBLASLT_EPILOGUE_RELU)),
            kInvalid);
  EXPECT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                    static_cast<uint32_t>(CUBLASLT_EPILOGUE_DGELU_BGRAD)),
            kInvalid);
  EXPECT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, int64_t{CUBLAS_OP_T}), kInvalid);
  EXPECT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, int32_t{CUBLAS_OP_CONJG}), kInvalid);
  EXPECT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSC, int32_t{CUBLAS_OP_T}), kInvalid);
  EXPECT_EQ(
      SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, int32_t{CUBLASLT_POINTER_MODE_DEVICE}),
      kInvalid);
  EXPECT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int32_t{8}), kInvalid);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 4),
            kInvalid);
  // A layout is not a matmul descriptor.
  EXPECT_EQ(SetDesc(reinterpret_cast<cublasLtMatmulDesc_t>(plan.a), CUBLASLT_MATMUL_DESC_TRANSA,
                    int32_t{CUBLAS_OP_T}),
            kInvalid);
  // Accepted values, for contrast.
  EXPECT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, int32_t{CUBLAS_OP_T}),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{8}),
            CUBLAS_STATUS_SUCCESS);
  // Layout.
  EXPECT_EQ(SetLayout(plan.a, CUBLASLT_MATRIX_LAYOUT_ORDER, int32_t{CUBLASLT_ORDER_ROW}), kInvalid);
  EXPECT_EQ(SetLayout(plan.a, CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET, int64_t{0}), kInvalid);
  EXPECT_EQ(SetLayout(plan.a, CUBLASLT_MATRIX_LAYOUT_ROWS, uint32_t{4}), kInvalid);
  EXPECT_EQ(SetLayout(plan.a, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int64_t{2}), kInvalid);
  EXPECT_EQ(SetLayout(plan.a, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int32_t{2}),
            CUBLAS_STATUS_SUCCESS);
  // Preference.
  EXPECT_EQ(SetPref(plan.pref, CUBLASLT_MATMUL_PREF_SEARCH_MODE,
                    uint32_t{CUBLASLT_SEARCH_LIMITED_BY_ALGO_ID}),
            kInvalid);
  EXPECT_EQ(SetPref(plan.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, uint64_t{16}), kInvalid);
  EXPECT_EQ(SetPref(plan.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint32_t{16}), kInvalid);
  EXPECT_EQ(SetPref(plan.pref, static_cast<cublasLtMatmulPreferenceAttributes_t>(10), uint32_t{0}),
            kInvalid);
}

// A problem the heuristic (and the matmul) must refuse, built from a valid f32 one by `edit`.
struct Refusal {
  const char* what;
  cublasStatus_t status;
  void (*edit)(LtPlan* plan);
};

const Refusal kRefusals[] = {
    {"A's rows are not D's", CUBLAS_STATUS_INVALID_VALUE,
     [](LtPlan* p) { SetLayout(p->a, CUBLASLT_MATRIX_LAYOUT_ROWS, uint64_t{5}); }},
    {"B's rows are not A's cols", CUBLAS_STATUS_INVALID_VALUE,
     [](LtPlan* p) { SetLayout(p->b, CUBLASLT_MATRIX_LAYOUT_ROWS, uint64_t{7}); }},
    {"transposed A no longer fits", CUBLAS_STATUS_INVALID_VALUE,
     [](LtPlan* p) { SetDesc(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, int32_t{CUBLAS_OP_T}); }},
    {"ld below rows", CUBLAS_STATUS_INVALID_VALUE,
     [](LtPlan* p) { SetLayout(p->a, CUBLASLT_MATRIX_LAYOUT_LD, int64_t{3}); }},
    {"C's shape is not D's", CUBLAS_STATUS_INVALID_VALUE,
     [](LtPlan* p) { SetLayout(p->c, CUBLASLT_MATRIX_LAYOUT_COLS, uint64_t{5}); }},
    {"batch counts differ", CUBLAS_STATUS_INVALID_VALUE,
     [](LtPlan* p) { SetLayout(p->b, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int32_t{2}); }},
    {"batch count 0", CUBLAS_STATUS_INVALID_VALUE,
     [](LtPlan* p) {
       for (cublasLtMatrixLayout_t l : {p->a, p->b, p->c, p->d}) {
         SetLayout(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int32_t{0});
       }
     }},
    {"aux ld not a multiple of 8", CUBLAS_STATUS_INVALID_VALUE,
     [](LtPlan* p) {
       SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
               static_cast<uint32_t>(CUBLASLT_EPILOGUE_GELU_AUX));
       SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{12});
     }},
    {"aux ld below D's rows", CUBLAS_STATUS_INVALID_VALUE,
     [](LtPlan* p) {
       for (cublasLtMatrixLayout_t l : {p->a, p->c, p->d}) {
         SetLayout(l, CUBLASLT_MATRIX_LAYOUT_ROWS, uint64_t{16});
         SetLayout(l, CUBLASLT_MATRIX_LAYOUT_LD, int64_t{16});
       }
       SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
               static_cast<uint32_t>(CUBLASLT_EPILOGUE_GELU_AUX_BIAS));
       SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{8});
     }},
    {"aux ld unset", CUBLAS_STATUS_INVALID_VALUE,
     [](LtPlan* p) {
       SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
               static_cast<uint32_t>(CUBLASLT_EPILOGUE_GELU_AUX));
     }},
    {"aux batch stride not a multiple of 8", CUBLAS_STATUS_INVALID_VALUE,
     [](LtPlan* p) {
       for (cublasLtMatrixLayout_t l : {p->a, p->b, p->c, p->d}) {
         SetLayout(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int32_t{2});
       }
       SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
               static_cast<uint32_t>(CUBLASLT_EPILOGUE_GELU_AUX));
       SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{8});
       SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, int64_t{36});
     }},
    {"f16 A with bf16 D", CUBLAS_STATUS_NOT_SUPPORTED,
     [](LtPlan* p) {
       SetLayout(p->a, CUBLASLT_MATRIX_LAYOUT_TYPE, uint32_t{CUDA_R_16F});
       SetLayout(p->b, CUBLASLT_MATRIX_LAYOUT_TYPE, uint32_t{CUDA_R_16F});
       SetLayout(p->c, CUBLASLT_MATRIX_LAYOUT_TYPE, uint32_t{CUDA_R_16BF});
       SetLayout(p->d, CUBLASLT_MATRIX_LAYOUT_TYPE, uint32_t{CUDA_R_16BF});
     }},
    {"f32 A with bf16 D", CUBLAS_STATUS_NOT_SUPPORTED,
     [](LtPlan* p) {
       SetLayout(p->c, CUBLASLT_MATRIX_LAYOUT_TYPE, uint32_t{CUDA_R_16BF});
       SetLayout(p->d, CUBLASLT_MATRIX_LAYOUT_TYPE, uint32_t{CUDA_R_16BF});
     }},
    {"A and B of different types", CUBLAS_STATUS_NOT_SUPPORTED,
     [](LtPlan* p) { SetLayout(p->b, CUBLASLT_MATRIX_LAYOUT_TYPE, uint32_t{CUDA_R_16BF}); }},
    {"C of another type than D", CUBLAS_STATUS_INVALID_VALUE,
     [](LtPlan* p) { SetLayout(p->c, CUBLASLT_MATRIX_LAYOUT_TYPE, uint32_t{CUDA_R_16BF}); }},
    {"f64 compute", CUBLAS_STATUS_NOT_SUPPORTED,
     [](LtPlan* p) {
       SetDesc(p->desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, int32_t{CUBLAS_COMPUTE_64F});
     }},
    {"f16 scale", CUBLAS_STATUS_NOT_SUPPORTED,
     [](LtPlan* p) { SetDesc(p->desc, CUBLASLT_MATMUL_DESC_SCALE_TYPE, int32_t{CUDA_R_16F}); }},
    {"bias type other than D's", CUBLAS_STATUS_NOT_SUPPORTED,
     [](LtPlan* p) {
       SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
               static_cast<uint32_t>(CUBLASLT_EPILOGUE_BIAS));
       SetDesc(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, int32_t{CUDA_R_16BF});
     }},
    {"aux type other than D's", CUBLAS_STATUS_NOT_SUPPORTED,
     [](LtPlan* p) {
       SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
               static_cast<uint32_t>(CUBLASLT_EPILOGUE_GELU_AUX));
       SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t{8});
       SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, int32_t{CUDA_R_16F});
     }},
    {"A promised 2-byte aligned (f32)", CUBLAS_STATUS_NOT_SUPPORTED,
     [](LtPlan* p) { SetPref(p->pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, uint32_t{2}); }},
    {"bias pointer 2-byte aligned (f32)", CUBLAS_STATUS_NOT_SUPPORTED,
     [](LtPlan* p) {
       SetDesc(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
               static_cast<uint32_t>(CUBLASLT_EPILOGUE_BIAS));
       SetDesc(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
               reinterpret_cast<const void*>(uintptr_t{0x1002}));
     }},
};

TEST_F(LtTest, RefusesInconsistentOrUnsupportedProblems) {
  for (const Refusal& r : kRefusals) {
    SCOPED_TRACE(r.what);
    // D = A B with A 4 x 6, B 6 x 4 (f32).
    LtPlan plan;
    ASSERT_EQ(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_32F, 4, 6, 4), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_32F, 6, 4, 6), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&plan.c, CUDA_R_32F, 4, 4, 4), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&plan.d, CUDA_R_32F, 4, 4, 4), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatmulPreferenceCreate(&plan.pref), CUBLAS_STATUS_SUCCESS);
    r.edit(&plan);
    cublasLtMatmulHeuristicResult_t result{};
    int found = -1;
    EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.c, plan.d,
                                             plan.pref, 1, &result, &found),
              r.status);
    EXPECT_EQ(found, 0);
    // cublasLtMatmul checks the problem the same way (no device memory is touched first).
    if (r.status == CUBLAS_STATUS_INVALID_VALUE) {
      const float alpha = 1, beta = 0;
      EXPECT_EQ(cublasLtMatmul(handle_, plan.desc, &alpha, nullptr, plan.a, nullptr, plan.b, &beta,
                               nullptr, plan.c, nullptr, plan.d, nullptr, nullptr, 0, nullptr),
                r.status);
    }
  }
}

TEST_F(LtTest, RefusesBadCallArguments) {
  LtPlan plan;
  ASSERT_NO_FATAL_FAILURE(MakeSquarePlan(&plan, CUDA_R_32F, 8));
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&plan.c, CUDA_R_32F, 8, 8, 16), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                           plan.pref, 0, &result, &found),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                           nullptr, 1, &result, &found),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(nullptr, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                           plan.pref, 1, &result, &found),
            CUBLAS_STATUS_NOT_INITIALIZED);
  ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                           plan.pref, 1, &result, &found),
            CUBLAS_STATUS_SUCCESS);
  HostBuffer h(CUDA_R_32F, 16 * 8 + 256);
  std::mt19937 rng(7);
  h.Fill(&rng);
  const DeviceBuffer da(h), db(h), dd(h), work(h);
  const float alpha = 1, beta = 1;
  const float zero = 0;
  // The workspace must be 256-byte aligned.
  EXPECT_EQ(cublasLtMatmul(handle_, plan.desc, &alpha, da.get(), plan.a, db.get(), plan.b, &beta,
                           dd.get(), plan.d, dd.get(), plan.d, &result.algo,
                           static_cast<char*>(work.get()) + 16, 1024, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  // In place (C == D) needs C's layout to be D's.
  EXPECT_EQ(cublasLtMatmul(handle_, plan.desc, &alpha, da.get(), plan.a, db.get(), plan.b, &beta,
                           dd.get(), plan.c, dd.get(), plan.d, nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  // No alpha.
  EXPECT_EQ(cublasLtMatmul(handle_, plan.desc, nullptr, da.get(), plan.a, db.get(), plan.b, &beta,
                           dd.get(), plan.d, dd.get(), plan.d, &result.algo, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  // An algorithm chosen for another epilogue.
  ASSERT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                    static_cast<uint32_t>(CUBLASLT_EPILOGUE_GELU)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmul(handle_, plan.desc, &alpha, da.get(), plan.a, db.get(), plan.b, &zero,
                           dd.get(), plan.d, dd.get(), plan.d, &result.algo, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  // A bias epilogue without a bias pointer.
  ASSERT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                    static_cast<uint32_t>(CUBLASLT_EPILOGUE_BIAS)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmul(handle_, plan.desc, &alpha, da.get(), plan.a, db.get(), plan.b, &zero,
                           dd.get(), plan.d, dd.get(), plan.d, nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  // Nothing was written by the refused calls.
  HostBuffer got(CUDA_R_32F, h.count());
  dd.CopyTo(&got);
  EXPECT_EQ(got.bytes(), h.bytes());
}

// What would fault on a GPU stops the process.
TEST_F(LtTest, HostPointerOrMisalignedPointerDies) {
  LtPlan plan;
  ASSERT_NO_FATAL_FAILURE(MakeSquarePlan(&plan, CUDA_R_32F, 4));
  ASSERT_EQ(SetPref(plan.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, uint32_t{16}),
            CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                           plan.pref, 1, &result, &found),
            CUBLAS_STATUS_SUCCESS);
  HostBuffer h(CUDA_R_32F, 20);
  std::mt19937 rng(3);
  h.Fill(&rng);
  const DeviceBuffer da(h), db(h), dd(h);
  const float alpha = 1, beta = 0;
  std::vector<float> host(16, 1.0f);
  EXPECT_DEATH(
      cublasLtMatmul(handle_, plan.desc, &alpha, host.data(), plan.a, db.get(), plan.b, &beta,
                     nullptr, plan.d, dd.get(), plan.d, &result.algo, nullptr, 0, nullptr),
      "A .* is not device memory");
  // A 4-byte aligned A under an algorithm chosen for 16-byte alignment.
  EXPECT_DEATH(cublasLtMatmul(handle_, plan.desc, &alpha, static_cast<float*>(da.get()) + 1, plan.a,
                              db.get(), plan.b, &beta, nullptr, plan.d, dd.get(), plan.d,
                              &result.algo, nullptr, 0, nullptr),
               "A .* is 4-byte aligned, but the algorithm was chosen for 16-byte alignment");
  // D runs past its allocation (ld 8 for 4 x 4 needs 28 elements; the buffer has 20).
  ASSERT_EQ(SetLayout(plan.d, CUBLASLT_MATRIX_LAYOUT_LD, int64_t{8}), CUBLAS_STATUS_SUCCESS);
  EXPECT_DEATH(cublasLtMatmul(handle_, plan.desc, &alpha, da.get(), plan.a, db.get(), plan.b, &beta,
                              nullptr, plan.d, dd.get(), plan.d, nullptr, nullptr, 0, nullptr),
               "D .* runs past its cudaMalloc allocation");
}

}  // namespace
}  // namespace blas_testing
}  // namespace cuda_emu
}  // namespace mt

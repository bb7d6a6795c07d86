// Tests of the emulated cuBLAS (legacy API, blas_legacy.cc): cublasGemmStridedBatchedEx against
// the float64 reference of blas_testutil.h, its argument checks, and the status names.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <string>

#include "core/cuda/emu/blas_testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace cuda_emu {
namespace blas_testing {
namespace {

class BlasTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cublasCreate(&handle_), CUBLAS_STATUS_SUCCESS); }
  void TearDown() override { EXPECT_EQ(cublasDestroy(handle_), CUBLAS_STATUS_SUCCESS); }

  cublasHandle_t handle_ = nullptr;
};

// Runs one case (no epilogue, C in place) through cublasGemmStridedBatchedEx and checks it.
void RunLegacy(cublasHandle_t handle, GemmCase g, uint32_t seed) {
  g.in_place = true;
  g.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  SCOPED_TRACE(g.Describe());
  std::mt19937 rng(seed);
  Operands ops(g, &rng);
  if (g.beta == 0.0f) ops.hd.Fill(&rng, /*nan=*/true);  // C is not read
  const DeviceBuffer da(ops.ha), db(ops.hb), dd(ops.hd);
  ASSERT_EQ(cublasSetStream(handle, nullptr), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasGemmStridedBatchedEx(
                handle, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(g.m), static_cast<int>(g.n),
                static_cast<int>(g.k), &g.alpha, da.get(), g.ab, static_cast<int>(ops.a.ld),
                ops.a.stride, db.get(), g.ab, static_cast<int>(ops.b.ld), ops.b.stride, &g.beta,
                dd.get(), g.cd, static_cast<int>(ops.d.ld), ops.d.stride, static_cast<int>(g.batch),
                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  HostBuffer d_out(g.cd, ops.d.Elements());
  dd.CopyTo(&d_out);
  ops.Check(g, d_out, ops.haux);
}

TEST_F(BlasTest, GemmStridedBatchedExMatchesFloat64Reference) {
  ForEachProduct(AllSizes(), AllSizes(), AllSizes(), -1.5f, 0.25f, 5000,
                 [&](const GemmCase& g, uint32_t seed) { RunLegacy(handle_, g, seed); });
}

// As in BLAS, alpha = 0 reads neither A nor B: C = beta C even where A is NaN.
TEST_F(BlasTest, AlphaZeroScalesC) {
  HostBuffer nan(CUDA_R_32F, 4), c(CUDA_R_32F, 4);
  for (int i = 0; i < 4; ++i) {
    nan.Set(i, kNaN);
    c.Set(i, i + 1);
  }
  const DeviceBuffer da(nan), dc(c);
  const float alpha = 0, beta = 2;
  ASSERT_EQ(
      cublasGemmStridedBatchedEx(handle_, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &alpha, da.get(),
                                 CUDA_R_32F, 2, 4, da.get(), CUDA_R_32F, 2, 4, &beta, dc.get(),
                                 CUDA_R_32F, 2, 4, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      CUBLAS_STATUS_SUCCESS);
  HostBuffer got(CUDA_R_32F, 4);
  dc.CopyTo(&got);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(got.Get(i), 2.0 * (i + 1));
}

TEST_F(BlasTest, GemmStridedBatchedExRefusesBadArguments) {
  HostBuffer h(CUDA_R_32F, 64);
  std::mt19937 rng(11);
  h.Fill(&rng);
  const DeviceBuffer d(h);
  const float alpha = 1, beta = 0;
  // m = n = k = 4 with lda = ldb = ldc = 4 unless changed.
  struct Args {
    cublasHandle_t handle;
    cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
    int m = 4, n = 4, k = 4;
    cudaDataType_t at = CUDA_R_32F, bt = CUDA_R_32F, ct = CUDA_R_32F;
    int lda = 4, ldb = 4, ldc = 4, batch = 1;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    cublasGemmAlgo_t algo = CUBLAS_GEMM_DEFAULT;
    const float* alpha_p;
  };
  auto call = [&](const Args& a) {
    return cublasGemmStridedBatchedEx(a.handle, a.ta, a.tb, a.m, a.n, a.k, a.alpha_p, d.get(), a.at,
                                      a.lda, 16, d.get(), a.bt, a.ldb, 16, &beta, d.get(), a.ct,
                                      a.ldc, 16, a.batch, a.compute, a.algo);
  };
  Args base;
  base.handle = handle_;
  base.alpha_p = &alpha;
  const struct {
    const char* what;
    cublasStatus_t status;
    void (*edit)(Args* x);
  } refusals[] = {
      {"no handle", CUBLAS_STATUS_NOT_INITIALIZED, [](Args* x) { x->handle = nullptr; }},
      {"m < 0", CUBLAS_STATUS_INVALID_VALUE, [](Args* x) { x->m = -1; }},
      {"batch < 0", CUBLAS_STATUS_INVALID_VALUE, [](Args* x) { x->batch = -1; }},
      {"lda < m", CUBLAS_STATUS_INVALID_VALUE, [](Args* x) { x->lda = 3; }},
      {"lda < k for a transposed A", CUBLAS_STATUS_INVALID_VALUE,
       [](Args* x) {
         x->ta = CUBLAS_OP_T;
         x->k = 5;
         x->ldb = 5;
         x->lda = 4;
       }},
      {"ldb < n for a transposed B", CUBLAS_STATUS_INVALID_VALUE,
       [](Args* x) {
         x->tb = CUBLAS_OP_T;
         x->n = 5;
         x->ldc = 4;
         x->ldb = 4;
       }},
      {"ldc < m", CUBLAS_STATUS_INVALID_VALUE, [](Args* x) { x->ldc = 2; }},
      {"conjugate transpose", CUBLAS_STATUS_INVALID_VALUE,
       [](Args* x) { x->ta = CUBLAS_OP_CONJG; }},
      {"no alpha", CUBLAS_STATUS_INVALID_VALUE, [](Args* x) { x->alpha_p = nullptr; }},
      {"unknown algorithm", CUBLAS_STATUS_INVALID_VALUE,
       [](Args* x) { x->algo = static_cast<cublasGemmAlgo_t>(50); }},
      {"A and B of different types", CUBLAS_STATUS_NOT_SUPPORTED,
       [](Args* x) { x->bt = CUDA_R_16BF; }},
      {"f32 A with bf16 C", CUBLAS_STATUS_NOT_SUPPORTED, [](Args* x) { x->ct = CUDA_R_16BF; }},
      {"f64 compute", CUBLAS_STATUS_NOT_SUPPORTED,
       [](Args* x) { x->compute = CUBLAS_COMPUTE_64F; }},
      {"f64 matrices", CUBLAS_STATUS_NOT_SUPPORTED,
       [](Args* x) { x->at = x->bt = x->ct = CUDA_R_64F; }},
  };
  for (const auto& r : refusals) {
    SCOPED_TRACE(r.what);
    Args x = base;
    r.edit(&x);
    EXPECT_EQ(call(x), r.status);
  }
  // Nothing was written.
  HostBuffer got(CUDA_R_32F, 64);
  d.CopyTo(&got);
  EXPECT_EQ(got.bytes(), h.bytes());
  EXPECT_EQ(cublasSetStream(nullptr, nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
}

TEST(BlasStatusTest, NamesAndStrings) {
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_STREQ(cublasGetStatusName(static_cast<cublasStatus_t>(12345)), "CUBLAS_STATUS_UNKNOWN");
  for (cublasStatus_t s :
       {CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_NOT_INITIALIZED, CUBLAS_STATUS_ALLOC_FAILED,
        CUBLAS_STATUS_INVALID_VALUE, CUBLAS_STATUS_ARCH_MISMATCH, CUBLAS_STATUS_MAPPING_ERROR,
        CUBLAS_STATUS_EXECUTION_FAILED, CUBLAS_STATUS_INTERNAL_ERROR, CUBLAS_STATUS_NOT_SUPPORTED,
        CUBLAS_STATUS_LICENSE_ERROR}) {
    EXPECT_NE(std::string(cublasGetStatusString(s)), "") << s;
    EXPECT_NE(std::string(cublasGetStatusName(s)), "CUBLAS_STATUS_UNKNOWN") << s;
  }
}

}  // namespace
}  // namespace blas_testing
}  // namespace cuda_emu
}  // namespace mt

// Tests of the emulated cuBLASLt's products (blas_lt_matmul.cc, blas_math.cc) against a float64
// reference written here (blas_testutil.h), through the C API only, with device memory from the
// emulator's cudaMalloc. Matrices are column-major with padded leading dimensions and batch strides
// whose padding must survive, and C is NaN wherever beta = 0 says it is not read.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "core/cuda/emu/blas_testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace cuda_emu {
namespace blas_testing {
namespace {

TEST_F(LtTest, MatchesFloat64Reference) {
  ForEachProduct(AllSizes(), AllSizes(), AllSizes(), 0.75f, -0.5f, 1,
                 [&](GemmCase& g, uint32_t seed) {
                   g.in_place = seed % 3 == 0;
                   RunLt(handle_, g, seed);
                 });
}

TEST_F(LtTest, EpiloguesMatchFloat64Reference) {
  constexpr cublasLtEpilogue_t kEpilogues[] = {
      CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_AUX,
      CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX_BIAS};
  uint32_t seed = 1000;
  for (cublasLtEpilogue_t e : kEpilogues) {
    seed = ForEachProduct(AllSizes(), {1, 17}, {3, 33}, 1.25f, 0.5f, seed,
                          [&](GemmCase& g, uint32_t case_seed) {
                            g.epilogue = e;
                            g.in_place = case_seed % 3 == 0;
                            RunLt(handle_, g, case_seed);
                          });
    if (HasFatalFailure()) return;
  }
}

// Hand-computed: column-major A = [1 2; 3 4] (stored 1 3 2 4), B = [5 6; 7 8] (5 7 6 8).
TEST_F(LtTest, HandComputedProductsAndGelu) {
  const float a[] = {1, 3, 2, 4}, b[] = {5, 7, 6, 8};
  HostBuffer ha(CUDA_R_32F, 4), hb(CUDA_R_32F, 4), hd(CUDA_R_32F, 4);
  for (int i = 0; i < 4; ++i) {
    ha.Set(i, a[i]);
    hb.Set(i, b[i]);
    hd.Set(i, -1);
  }
  const DeviceBuffer da(ha), db(hb), dd(hd);
  struct Expectation {
    cublasOperation_t ta, tb;
    float d[4];  // column-major
  } const cases[] = {
      // A B = [19 22; 43 50]
      {CUBLAS_OP_N, CUBLAS_OP_N, {19, 43, 22, 50}},
      // A^T B = [1 3; 2 4][5 6; 7 8] = [26 30; 38 44]
      {CUBLAS_OP_T, CUBLAS_OP_N, {26, 38, 30, 44}},
      // A B^T = [1 2; 3 4][5 7; 6 8] = [17 23; 39 53]
      {CUBLAS_OP_N, CUBLAS_OP_T, {17, 39, 23, 53}},
  };
  for (const Expectation& e : cases) {
    LtPlan plan;
    ASSERT_NO_FATAL_FAILURE(MakeSquarePlan(&plan, CUDA_R_32F, 2));
    ASSERT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, e.ta), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, e.tb), CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                             plan.pref, 1, &result, &found),
              CUBLAS_STATUS_SUCCESS);
    const float alpha = 1, beta = 0;
    ASSERT_EQ(cublasLtMatmul(handle_, plan.desc, &alpha, da.get(), plan.a, db.get(), plan.b, &beta,
                             dd.get(), plan.d, dd.get(), plan.d, &result.algo, nullptr, 0, nullptr),
              CUBLAS_STATUS_SUCCESS);
    HostBuffer got(CUDA_R_32F, 4);
    dd.CopyTo(&got);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got.Get(i), e.d[i]) << "element " << i;
  }
  // GELU(1) in the tanh form is 0.8411919906 (the erf form gives 0.8413447461); GELU(-1) is
  // -0.1588080094.
  HostBuffer one(CUDA_R_32F, 2), two(CUDA_R_32F, 1);
  one.Set(0, 1);
  one.Set(1, -1);
  two.Set(0, 1);
  const DeviceBuffer d1(one), d2(two), dout(one);
  LtPlan plan;
  ASSERT_EQ(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(SetDesc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                    static_cast<uint32_t>(CUBLASLT_EPILOGUE_GELU)),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_32F, 2, 1, 2), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_32F, 1, 1, 1), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&plan.d, CUDA_R_32F, 2, 1, 2), CUBLAS_STATUS_SUCCESS);
  const float alpha = 1, beta = 0;
  ASSERT_EQ(cublasLtMatmul(handle_, plan.desc, &alpha, d1.get(), plan.a, d2.get(), plan.b, &beta,
                           nullptr, nullptr, dout.get(), plan.d, nullptr, nullptr, 0, nullptr),
            CUBLAS_STATUS_SUCCESS);
  HostBuffer got(CUDA_R_32F, 2);
  dout.CopyTo(&got);
  EXPECT_NEAR(got.Get(0), 0.8411919906, 1e-6);
  EXPECT_NEAR(got.Get(1), -0.1588080094, 1e-6);
}

TEST_F(LtTest, HeuristicReturnsOneAlgorithmWithoutWorkspace) {
  LtPlan plan;
  ASSERT_NO_FATAL_FAILURE(MakeSquarePlan(&plan, CUDA_R_16BF, 8));
  ASSERT_EQ(SetPref(plan.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, uint64_t{1} << 20),
            CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t results[4] = {};
  int found = -1;
  ASSERT_EQ(cublasLtMatmulAlgoGetHeuristic(handle_, plan.desc, plan.a, plan.b, plan.d, plan.d,
                                           plan.pref, 4, results, &found),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(found, 1);
  EXPECT_EQ(results[0].state, CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(results[0].workspaceSize, 0u);
}

}  // namespace
}  // namespace blas_testing
}  // namespace cuda_emu
}  // namespace mt

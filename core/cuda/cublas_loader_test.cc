// cublas_loader.cc: cuBLAS(Lt) is not in the process until the first call, and the forwarders
// reach the real library.
#include <gtest/gtest.h>

#if MT_CUBLAS_LOADER
#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstdint>
#include <fstream>
#include <string>

namespace {

// Whether a file whose name contains `name` is mapped into this process.
bool Mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(name) != std::string::npos) return true;
  }
  return false;
}

TEST(CublasLoader, OpensTheLibrariesOnFirstUseAndForwards) {
  // Nothing has called cuBLAS yet in this process: neither library is mapped.
  ASSERT_FALSE(Mapped("libcublasLt.so"));
  ASSERT_FALSE(Mapped("libcublas.so"));

  // The status name and string come from the library (the string's wording is the library's, so
  // only check that there is one).
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  ASSERT_NE(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE), nullptr);
  EXPECT_GT(std::string(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE)).size(), 0u);
  EXPECT_TRUE(Mapped("libcublasLt.so"));
  EXPECT_TRUE(Mapped("libcublas.so"));

  // cuBLASLt's descriptors are host objects: a layout round-trips its attributes without a GPU.
  cublasLtMatrixLayout_t layout = nullptr;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&layout, CUDA_R_32F, 3, 5, 7), CUBLAS_STATUS_SUCCESS);
  ASSERT_NE(layout, nullptr);
  const int32_t batch = 4;
  EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                             sizeof(batch)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatrixLayoutDestroy(layout), CUBLAS_STATUS_SUCCESS);

  cublasLtMatmulDesc_t desc = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  const cublasOperation_t transpose = CUBLAS_OP_T;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                           sizeof(transpose)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulDescDestroy(desc), CUBLAS_STATUS_SUCCESS);

  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  const size_t workspace = 1 << 20;
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                 &workspace, sizeof(workspace)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulPreferenceDestroy(pref), CUBLAS_STATUS_SUCCESS);
}

}  // namespace

#else

TEST(CublasLoader, OnlyInCudaBuilds) {
  GTEST_SKIP() << "the emulator and CPU-only builds do not load cuBLAS";
}

#endif

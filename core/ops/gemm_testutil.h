// Test helpers for the GEMM tests (gemm_test, gemm_epilogue_test, the CUDA test): one problem
// description, its float64 reference with the magnitudes that bound any summation order's
// rounding error, and the sweeps over sizes, transposes and thread pools. testonly.
#ifndef MT_CORE_OPS_GEMM_TESTUTIL_H_
#define MT_CORE_OPS_GEMM_TESTUTIL_H_

#include <array>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "core/ops/gemm.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"

namespace mt {
namespace testing {

// One product C = alpha op(A) op(B) + beta C. batch = 0 means Gemm on rank-2 tensors, otherwise
// BatchedGemm over `batch` matrices.
struct GemmCase {
  int64_t batch = 0;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  ops::Transpose ta = ops::Transpose::kNo;
  ops::Transpose tb = ops::Transpose::kNo;
  float alpha = 1.0f;
  float beta = 0.0f;
  DType dtype = DType::kF32;    // A and B.
  DType c_dtype = DType::kF32;  // C.
  ops::CpuGemmBackend backend = ops::CpuGemmBackend::kDefault;
  ThreadPool* pool = nullptr;
  uint64_t seed = 0;

  std::string ToString() const;
  // Shapes of A, B and C ([rows, cols], or [batch, rows, cols]).
  Shape AShape() const;
  Shape BShape() const;
  Shape CShape() const;
  // Transposes, alpha, beta and the CPU backend.
  ops::GemmOptions Options() const;
};

// The exact result in float64 and, per element, |alpha| (|op(A)| |op(B)|)_ij + |beta| |C_ij|: the
// scale that bounds the rounding error of any summation order. beta = 0 ignores C (NaNs too).
struct GemmReference {
  std::vector<double> value;
  std::vector<double> magnitude;
};
GemmReference ReferenceGemm(const GemmCase& cs, const std::vector<double>& a,
                            const std::vector<double>& b, const std::vector<double>& c);

// (alpha, beta) pairs the sweeps cycle through: a plain product over a NaN C, accumulation,
// general scaling, a scaled overwrite.
inline constexpr float kAlphaBeta[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {-0.75f, 0.5f}, {2.5f, 0.0f}};

// {batch, m, n, k} for every (m, k, n) in sizes^3 (m outermost, n innermost), batch 0.
std::vector<std::array<int64_t, 4>> SizeCube(const std::vector<int64_t>& sizes);

// `base` at every shape {batch, m, n, k}, on every pool, with all four transpose combinations
// (in that nesting order); case i gets alpha and beta kAlphaBeta[i % 4] and seed first_seed + i.
std::vector<GemmCase> TransposeSweep(const GemmCase& base,
                                     const std::vector<std::array<int64_t, 4>>& shapes,
                                     const std::vector<ThreadPool*>& pools, uint64_t first_seed);

// (dtype of A and B, CPU backend): the parameter of the dtype-and-backend suites, and its name
// for INSTANTIATE_TEST_SUITE_P ("bf16_openblas", "f32_default").
using GemmParam = std::tuple<DType, ops::CpuGemmBackend>;
std::string GemmParamName(const ::testing::TestParamInfo<GemmParam>& info);
inline constexpr ops::CpuGemmBackend kGemmBackends[] = {
    ops::CpuGemmBackend::kEigen, ops::CpuGemmBackend::kOpenBlas, ops::CpuGemmBackend::kOneDnn,
    ops::CpuGemmBackend::kPacked, ops::CpuGemmBackend::kDefault};
// Whether `backend` runs on this CPU: all do but the packed GEMM without AVX2 and FMA, whose
// parameterised cases then skip.
inline bool BackendRunsHere(ops::CpuGemmBackend backend) {
  return backend != ops::CpuGemmBackend::kPacked || ops::PackedGemmAvailable();
}
// Every float dtype, or the 16-bit ones, with every backend.
inline auto AllGemmParams() {
  return ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                            ::testing::ValuesIn(kGemmBackends));
}
inline auto HalfGemmParams() {
  return ::testing::Combine(::testing::Values(DType::kBF16, DType::kF16),
                            ::testing::ValuesIn(kGemmBackends));
}

}  // namespace testing
}  // namespace mt

#endif  // MT_CORE_OPS_GEMM_TESTUTIL_H_

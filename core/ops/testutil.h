// Test helpers for ops: seeded random tensors, float64 copies, tolerance checks and central
// finite differences. testonly.
#ifndef MT_CORE_OPS_TESTUTIL_H_
#define MT_CORE_OPS_TESTUTIL_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "core/tensor.h"

namespace mt {
namespace testing {

// A host tensor of uniform values in [lo, hi) (rounded to dtype), from a fixed seed.
Tensor RandomTensor(Shape shape, DType dtype, uint64_t seed, double lo = -1.0, double hi = 1.0);
// A host i32/i64 tensor of uniform integers in [lo, hi).
Tensor RandomInts(Shape shape, DType dtype, uint64_t seed, int64_t lo, int64_t hi);
// A host tensor holding `values` converted to dtype (round to nearest even).
Tensor FromDoubles(Shape shape, DType dtype, const std::vector<double>& values);

// The elements of a host tensor as doubles (any dtype).
std::vector<double> ToDoubles(const TensorView& t);
// Writes values (converted to t's dtype) into a host tensor.
void WriteDoubles(const std::vector<double>& values, const TensorView& t);

// Unit roundoff of a float dtype: 2^-24 (f32), 2^-8 (bf16), 2^-11 (f16).
double UnitRoundoff(DType dtype);

// The (A and B, C) dtype pairs ops::Gemm accepts (core/ops/gemm.h), for the GEMM tests' sweeps.
struct GemmDTypes {
  DType ab, c;
};
inline constexpr GemmDTypes kGemmDTypes[] = {{DType::kF32, DType::kF32},
                                             {DType::kBF16, DType::kBF16},
                                             {DType::kF16, DType::kF16},
                                             {DType::kBF16, DType::kF32},
                                             {DType::kF16, DType::kF32}};

// Passes iff |actual[i] - expected[i]| <= atol + rtol * |expected[i]| for every i (NaNs fail);
// on failure names the worst element.
::testing::AssertionResult AllClose(const std::vector<double>& actual,
                                    const std::vector<double>& expected, double rtol, double atol);
::testing::AssertionResult AllClose(const TensorView& actual, const std::vector<double>& expected,
                                    double rtol, double atol);

// For views labelled cuda:0 that point to host memory (tests of the dispatch): without a CUDA
// device the op must return Unimplemented; with one, its CUDA branch must reject the host pointer
// (or the missing DeviceContext) with some error. Never OK.
::testing::AssertionResult RejectsFakeCudaViews(const absl::Status& status);

// Central differences of a scalar function of x: g[i] = (f(x + h e_i) - f(x - h e_i)) / 2h.
std::vector<double> NumericalGradient(const std::function<double(const std::vector<double>&)>& f,
                                      std::vector<double> x, double h = 1e-6);

}  // namespace testing
}  // namespace mt

#endif  // MT_CORE_OPS_TESTUTIL_H_

// Test helpers for ops: seeded random tensors, float64 copies, tolerance checks and central
// finite differences. testonly.
#ifndef MT_CORE_OPS_TESTUTIL_H_
#define MT_CORE_OPS_TESTUTIL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/exec_context.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"

namespace mt {
namespace testing {

// A host tensor of uniform values in [lo, hi) (rounded to dtype), from a fixed seed.
Tensor RandomTensor(Shape shape, DType dtype, uint64_t seed, double lo = -1.0, double hi = 1.0);
// A host i32/i64 tensor of uniform integers in [lo, hi).
Tensor RandomInts(Shape shape, DType dtype, uint64_t seed, int64_t lo, int64_t hi);
// A host tensor holding `values` converted to dtype (round to nearest even).
Tensor FromDoubles(Shape shape, DType dtype, const std::vector<double>& values);
// A host i32 tensor of `shape` holding `values` (token ids, labels, masks); values.size() must
// equal the shape's element count.
Tensor I32(const std::vector<int32_t>& values, Shape shape);

// The elements of a host tensor as doubles (any dtype).
std::vector<double> ToDoubles(const TensorView& t);
// Writes values (converted to t's dtype) into a host tensor.
void WriteDoubles(const std::vector<double>& values, const TensorView& t);

// The float dtypes the op tests sweep.
inline constexpr DType kFloatTypes[] = {DType::kF32, DType::kBF16, DType::kF16};
// Odd shapes for element-wise sweeps, from a single element to one large enough (> 2^14
// elements) to be split over a pool's threads.
inline const Shape kOddShapes[] = {{1}, {3, 17}, {2, 5, 129}, {257, 129}};

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

// Passes iff |actual[i] - expected[i]| <= bound[i] for every i (NaNs fail); names the worst
// element (the largest error relative to its bound). The views are host views.
::testing::AssertionResult WithinBounds(const std::vector<double>& actual,
                                        const std::vector<double>& expected,
                                        const std::vector<double>& bound);
::testing::AssertionResult WithinBounds(const TensorView& actual, const TensorView& expected,
                                        const std::vector<double>& bound);

// Bitwise equality of two host views (or tensors) of the same dtype and shape; names the first
// element that differs.
::testing::AssertionResult SameBits(const TensorView& actual, const TensorView& expected);
::testing::AssertionResult SameBits(const Tensor& actual, const Tensor& expected);

// Passes iff `status` has `code` and its message contains `substring`; prints the status if not.
::testing::AssertionResult IsError(const absl::Status& status, absl::StatusCode code,
                                   const std::string& substring = "");

// The largest |v[i]| (0 for an empty vector).
double MaxAbs(const std::vector<double>& v);

// A host tensor with every byte 0xFF: NaN in every float dtype (as fresh device memory is under
// the CUDA emulator), -1 or 65535 in the integer ones. For outputs that an op must overwrite.
Tensor NaNTensor(Shape shape, DType dtype);

// A fixture for op tests: Contexts() runs each op on the calling thread alone (ExecContext{}) and
// on a pool of three threads.
class ThreadedOpTest : public ::testing::Test {
 protected:
  std::vector<ExecContext> Contexts() { return {ExecContext{}, ExecContext{&pool_}}; }

  ThreadPool pool_{3};
};

// ---- Float64 references shared by the op tests and the module tests (nn/)

// GeLU, tanh form: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
double GeluReference(double x);

// Per-row cross-entropy losses of logits [N, V] over their first `valid` columns:
// log sum_{v < valid} exp(x_v) - x_target; 0 for a negative (ignored) target.
std::vector<double> CrossEntropyReference(const std::vector<double>& logits, int64_t V,
                                          int64_t valid, const std::vector<int64_t>& targets);

// LayerNorm over rows of gamma.size() elements with the population variance: y and each row's
// mean and rstd = 1 / sqrt(var + eps).
struct LayerNormRef {
  std::vector<double> y, mean, rstd;
};
LayerNormRef LayerNormReference(const std::vector<double>& x, const std::vector<double>& gamma,
                                const std::vector<double>& beta, double eps);

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

// Float64 gradient checks of nn/ modules at TP = 1 (StepContext::tp == nullptr): float64
// references of the modules' math in plain loops, and the harness that checks a module against
// one. testonly.
//
// CheckModule takes the scalar loss L = sum(w * y) with fixed random weights w, runs the module's
// Forward (compared with the reference) and its Backward with dy = w, and compares the input
// gradient and every parameter gradient the module accumulates with central differences of L
// through the reference (core/ops/testutil.h NumericalGradient). Each module also runs with a null
// pool and a ThreadPool(3) (same results up to float rounding), and calling Backward a second time
// must double every parameter gradient (Backward accumulates) while rewriting the input gradient
// (which is pre-filled with NaN: it must be overwritten, never read). Dropout is off (p = 0).
#ifndef MT_NN_MODULE_TESTUTIL_H_
#define MT_NN_MODULE_TESTUTIL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "nn/context.h"
#include "nn/parameter.h"
#include "nn/transformer.h"

namespace mt {
namespace nn {
namespace testing {

using Vec = std::vector<double>;
// Parameter values by name.
using ParamMap = std::map<std::string, Vec>;

// ---- float64 references (with core/ops/testutil.h's GeluReference and LayerNormReference)

// y [N, out] = x [N, in] W [in, out] + b [out] (b may be null).
Vec RefLinear(const Vec& x, int64_t N, int64_t in, int64_t out, const Vec& w, const Vec* b);
double RefGelu(double x);
// Per-row (x - mean) / sqrt(var + eps) * gamma + beta over rows of H, population variance.
Vec RefLayerNorm(const Vec& x, int64_t N, int64_t H, const Vec& gamma, const Vec& beta, double eps);
// prefix.fc2(GeLU(prefix.fc1(x))), x [N, H], hidden F.
Vec RefMlp(const ParamMap& p, const std::string& prefix, const Vec& x, int64_t N, int64_t H,
           int64_t F);

struct AttnDims {
  int64_t B, T, H, heads;
  bool causal;
  const std::vector<int32_t>* mask;  // [B, T], 0 = padded key; may be null.
  int64_t groups = 0;                // Key/value heads (grouped-query attention); 0: heads.
};
// Self-attention with the fused QKV columns ordered (group, {its heads / groups queries, key,
// value}, d) ((head, {q, k, v}, d) without groups) and the output projection, parameters
// prefix.qkv.* and prefix.proj.*.
Vec RefAttention(const ParamMap& p, const std::string& prefix, const Vec& x, const AttnDims& a);
// A transformer layer (ln1, attention, ln2, mlp) in pre- or post-norm order, FFN width F.
Vec RefTransformerLayer(const ParamMap& p, const std::string& prefix, const Vec& x,
                        const AttnDims& a, int64_t F, NormPosition norm, double eps);
// Rows ids[n] of table [rows, H]: [ids.size(), H].
Vec RefLookup(const Vec& table, const Vec& ids, int64_t H);
// logits [N, V] = h [N, H] table[V, H]^T.
Vec RefTiedLogits(const Vec& table, const Vec& h, int64_t N, int64_t H, int64_t V);

// A [B, T] padding mask with some padded keys in every sample but never all of them, as values
// and as a host i32 tensor.
struct PaddingMask {
  std::vector<int32_t> values;
  Tensor tensor;
};
PaddingMask MakePaddingMask(int64_t B, int64_t T);

// ---- the harness

// The module under test, as closures over the module object.
struct ModuleUnderTest {
  Shape x_shape, y_shape;
  DType x_dtype = DType::kF32;  // i32: token ids, not differentiable (no input gradient).
  Vec x;
  std::function<absl::Status(const StepContext&, const TensorView& x, const TensorView& y)> forward;
  // dx is an empty view when the input is not differentiable.
  std::function<absl::Status(const StepContext&, const TensorView& x, const TensorView& dy,
                             const TensorView& dx)>
      backward;
  std::function<Vec(const ParamMap&, const Vec& x)> reference;
};

// What one Backward (on a ThreadPool(3)) gave.
struct ModuleResult {
  Vec y, dx;
  std::vector<Vec> grads;  // Per parameter handle.
};

// Runs the checks described at the top. A failed Forward or Backward is recorded as a test
// failure naming the status, and gives nullopt.
std::optional<ModuleResult> CheckModule(ParameterStore* store, const ModuleUnderTest& m,
                                        uint64_t seed);

// Allocates `store` (one slot) and gives every parameter non-trivial values: weights and biases
// U(-0.5, 0.5), LayerNorm gains U(0.5, 1.5), from `seed`. A failed Allocate is recorded as a test
// failure; returns whether it succeeded.
bool AllocateRandomized(ParameterStore* store, uint64_t seed);
// The same values for an allocated store.
void RandomizeParameters(ParameterStore* store, uint64_t seed);
// Every parameter's value, by name.
ParamMap Values(const ParameterStore& store);
// Uniform values in [lo, hi) (rounded to f32) for a tensor of `shape`.
Vec RandomValues(const Shape& shape, uint64_t seed, double lo = -1, double hi = 1);

}  // namespace testing
}  // namespace nn
}  // namespace mt

#endif  // MT_NN_MODULE_TESTUTIL_H_

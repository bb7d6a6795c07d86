// Float64 references and a gradient check for the tests of the modern-decoder blocks
// (modern_modules_test, modern_layers_test). testonly.
//
// ExpectMatchesReference runs a module's Forward and Backward once on the CPU in f32 with dy = w
// (fixed random weights) and compares the output with a float64 reference, and the input gradient
// and every parameter gradient with central differences of L = sum(w * reference(params, x)).
// Tolerances: the modules chain a few f32 reductions of length <= ~40 (plus exp, sqrt, sin/cos
// tables), whose error stays below ~16 u (forward) and ~32 u (gradients) of the largest magnitude;
// the bounds are 8x and 16x that (128 u, 512 u), while a wrong formula is off by O(1). The central
// differences (h = 1e-6) add ~1e-10. Outputs start as NaN (they must be written, never read), and
// every compared quantity must be far from zero (a degenerate case fails).
#ifndef MT_NN_MODERN_BLOCKS_TESTUTIL_H_
#define MT_NN_MODERN_BLOCKS_TESTUTIL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/tensor.h"
#include "nn/context.h"
#include "nn/parameter.h"
#include "nn/transformer.h"

namespace mt {
namespace nn {
namespace modern_testing {

using Vec = std::vector<double>;
using Params = std::map<std::string, Vec>;  // Parameter name -> values.

constexpr float kEps = 1e-5f;  // The norms' eps.
constexpr double kRotaryBase = 10000.0;

// The largest magnitude.
double Peak(const Vec& v);

// ---- float64 references

// [rows, inner] x [inner, cols].
Vec MatMul(const Vec& a, int64_t rows, int64_t inner, const Vec& b, int64_t cols);
// Each row of x [N, H] times its rstd = 1 / sqrt(mean(x^2) + kEps), times gamma [H].
Vec RmsRows(const Vec& x, const Vec& gamma);
// down(silu(x gate) * (x up)) with "<prefix>.{gate,up,down}.weight"; x [N, H], F the ffn width.
Vec SwiGluMlpRef(const Params& p, const std::string& prefix, const Vec& x, int64_t N, int64_t H,
                 int64_t F);

struct AttnShape {
  int64_t B, T, H, heads;
  bool causal, rotary, bias;
};
void PrintTo(const AttnShape& a, std::ostream* os);

// Self-attention of x [B, T, H] with "<prefix>.qkv.*" (columns ordered (head, {q, k, v}, d)) and
// "<prefix>.proj.*"; q and k rotated by rotate-half embeddings (base kRotaryBase, positions 0 ..
// T-1) when a.rotary; biases when a.bias.
Vec AttentionRef(const Params& p, const std::string& prefix, const Vec& x, const AttnShape& a);
// a + b.
Vec Sum(Vec a, const Vec& b);
// The TransformerLayer "layer" of ModernSpec: RMSNorm, rotary attention without biases, SwiGLU.
Vec ModernLayerRef(const Params& p, const Vec& x, const AttnShape& a, int64_t F, NormPosition norm);

// ---- the check

// Every parameter of an allocated store set to U(-0.5, 0.5) (weights, biases) or U(0.5, 1.5)
// (gains, Init::kOnes), from `seed`.
void Randomize(ParameterStore* store, uint64_t seed);

// A module under test, as closures over it.
struct Probe {
  ParameterStore* store = nullptr;  // Allocated, holding every parameter of the module.
  Shape shape;                      // Of x and y.
  Vec x;
  std::function<absl::Status(const StepContext&, const TensorView& x, const TensorView& y)> forward;
  std::function<absl::Status(const StepContext&, const TensorView& dy, const TensorView& dx)>
      backward;
  std::function<Vec(const Params&, const Vec& x)> reference;
};
// The check described at the top of the file; w from `seed`.
void ExpectMatchesReference(const Probe& probe, uint64_t seed);

// The store's parameter names in declaration order.
std::vector<std::string> Names(const ParameterStore& store);
// Uniform values in [lo, hi), rounded to f32.
Vec Uniform(const Shape& shape, uint64_t seed, double lo, double hi);

// The modern-decoder layer spec: RMSNorm (kEps), rotary attention (kRotaryBase) without biases,
// SwiGLU MLP of width F.
LayerSpec ModernSpec(int64_t H, int64_t heads, int64_t F, NormPosition norm);

}  // namespace modern_testing
}  // namespace nn
}  // namespace mt

#endif  // MT_NN_MODERN_BLOCKS_TESTUTIL_H_

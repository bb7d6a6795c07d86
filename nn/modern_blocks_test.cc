// The modern-decoder building blocks at TP = 1 against float64: RmsNormModule, SwiGluMLP,
// ParallelSelfAttention with rotary embeddings (and without biases), TransformerLayer built from a
// LayerSpec of those (pre-norm and post-norm), and TransformerStack holding a block class of its
// own through a LayerFactory. The default spec keeps GPT-2's and BERT's parameter names.
//
// Each check runs Forward and Backward on the CPU in f32 with dy = w (fixed random weights) and
// compares the output with a float64 reference written here, and the input gradient and every
// parameter gradient with central differences of L = sum(w * reference(params, x)). Tolerances:
// the modules chain a few f32 reductions of length <= ~40 (plus exp, sqrt, sin/cos tables), whose
// error stays below ~16 u (forward) and ~32 u (gradients) of the largest magnitude; the bounds
// below are 8x and 16x that, while a wrong formula is off by O(1). The central differences
// (h = 1e-6) add ~1e-10.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/ops/elementwise.h"
#include "core/ops/testutil.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"
#include "nn/attention.h"
#include "nn/context.h"
#include "nn/layer.h"
#include "nn/mlp.h"
#include "nn/norm.h"
#include "nn/parameter.h"
#include "nn/transformer.h"

namespace mt {
namespace nn {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::FromDoubles;
using ::mt::testing::NumericalGradient;
using ::mt::testing::RandomTensor;
using ::mt::testing::ToDoubles;

using Vec = std::vector<double>;
using Params = std::map<std::string, Vec>;

const double kU = ::mt::testing::UnitRoundoff(DType::kF32);
const double kForwardTol = 128 * kU;
const double kGradientTol = 512 * kU;
constexpr float kEps = 1e-5f;
constexpr double kRotaryBase = 10000.0;

double Peak(const Vec& v) {
  double m = 0;
  for (double e : v) m = std::max(m, std::fabs(e));
  return m;
}

// ------------------------------------------------------------------ float64 references

// [rows, inner] x [inner, cols], accumulated row by row (axpy order).
Vec MatMul(const Vec& a, int64_t rows, int64_t inner, const Vec& b, int64_t cols) {
  Vec c(rows * cols, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t k = 0; k < inner; ++k) {
      const double s = a[r * inner + k];
      for (int64_t j = 0; j < cols; ++j) c[r * cols + j] += s * b[k * cols + j];
    }
  }
  return c;
}

// Each row of x [N, H] times its rstd = 1 / sqrt(mean(x^2) + eps), times gamma.
Vec RmsRows(const Vec& x, const Vec& gamma) {
  const size_t H = gamma.size();
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / H; ++r) {
    double sq = 0;
    for (size_t h = 0; h < H; ++h) sq += x[r * H + h] * x[r * H + h];
    const double rstd = 1 / std::sqrt(sq / H + double{kEps});
    for (size_t h = 0; h < H; ++h) y[r * H + h] = x[r * H + h] * rstd * gamma[h];
  }
  return y;
}

Vec SwiGluMlpRef(const Params& p, const std::string& prefix, const Vec& x, int64_t N, int64_t H,
                 int64_t F) {
  const Vec g = MatMul(x, N, H, p.at(prefix + ".gate.weight"), F);
  Vec a = MatMul(x, N, H, p.at(prefix + ".up.weight"), F);
  for (size_t i = 0; i < a.size(); ++i) a[i] *= g[i] / (1 + std::exp(-g[i]));
  return MatMul(a, N, F, p.at(prefix + ".down.weight"), H);
}

// Rotate-half rotary embedding of one head's vector v [D] at position `pos`.
void RotateHalf(double* v, int64_t D, int64_t pos) {
  for (int64_t i = 0; i < D / 2; ++i) {
    const double angle = pos * std::pow(kRotaryBase, -2.0 * i / D);
    const double a = v[i], b = v[i + D / 2];
    v[i] = a * std::cos(angle) - b * std::sin(angle);
    v[i + D / 2] = b * std::cos(angle) + a * std::sin(angle);
  }
}

struct AttnShape {
  int64_t B, T, H, heads;
  bool causal, rotary, bias;
};

void PrintTo(const AttnShape& a, std::ostream* os) {
  *os << "{B=" << a.B << " T=" << a.T << " H=" << a.H << " heads=" << a.heads
      << (a.causal ? " causal" : " bidirectional") << (a.rotary ? " rotary" : "")
      << (a.bias ? " biases}" : "}");
}

// Self-attention, QKV columns ordered (head, {q, k, v}, d); q and k rotated when a.rotary.
Vec AttentionRef(const Params& p, const std::string& prefix, const Vec& x, const AttnShape& a) {
  const int64_t N = a.B * a.T, H = a.H, D = H / a.heads;
  Vec qkv = MatMul(x, N, H, p.at(prefix + ".qkv.weight"), 3 * H);
  Vec ctx(N * H, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < 3 * H; ++c) {
      if (a.bias) qkv[n * 3 * H + c] += p.at(prefix + ".qkv.bias")[c];
    }
    for (int64_t h = 0; h < a.heads && a.rotary; ++h) {
      RotateHalf(&qkv[n * 3 * H + h * 3 * D], D, n % a.T);      // q
      RotateHalf(&qkv[n * 3 * H + h * 3 * D + D], D, n % a.T);  // k
    }
  }
  for (int64_t b = 0; b < a.B; ++b) {
    for (int64_t h = 0; h < a.heads; ++h) {
      for (int64_t i = 0; i < a.T; ++i) {
        const double* q = &qkv[(b * a.T + i) * 3 * H + h * 3 * D];
        const int64_t keys = a.causal ? i + 1 : a.T;
        Vec w(keys);
        for (int64_t j = 0; j < keys; ++j) {
          const double* k = &qkv[(b * a.T + j) * 3 * H + h * 3 * D + D];
          for (int64_t d = 0; d < D; ++d) w[j] += q[d] * k[d] / std::sqrt(double(D));
        }
        const double top = *std::max_element(w.begin(), w.end());
        double z = 0;
        for (double& e : w) z += (e = std::exp(e - top));
        for (int64_t j = 0; j < keys; ++j) {
          const double* v = &qkv[(b * a.T + j) * 3 * H + h * 3 * D + 2 * D];
          for (int64_t d = 0; d < D; ++d) ctx[(b * a.T + i) * H + h * D + d] += w[j] / z * v[d];
        }
      }
    }
  }
  Vec y = MatMul(ctx, N, H, p.at(prefix + ".proj.weight"), H);
  for (int64_t n = 0; n < N && a.bias; ++n) {
    for (int64_t c = 0; c < H; ++c) y[n * H + c] += p.at(prefix + ".proj.bias")[c];
  }
  return y;
}

Vec Sum(Vec a, const Vec& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

// The RMSNorm + rotary attention without biases + SwiGLU layer.
Vec ModernLayerRef(const Params& p, const Vec& x, const AttnShape& a, int64_t F,
                   NormPosition norm) {
  const int64_t N = a.B * a.T;
  auto rms = [&](const char* name, const Vec& v) {
    return RmsRows(v, p.at(absl::StrCat("layer.", name, ".weight")));
  };
  auto attn = [&](const Vec& v) { return AttentionRef(p, "layer.attention", v, a); };
  auto mlp = [&](const Vec& v) { return SwiGluMlpRef(p, "layer.mlp", v, N, a.H, F); };
  if (norm == NormPosition::kPreNorm) {
    const Vec x1 = Sum(x, attn(rms("ln1", x)));
    return Sum(x1, mlp(rms("ln2", x1)));
  }
  const Vec x1 = rms("ln1", Sum(x, attn(x)));
  return rms("ln2", Sum(x1, mlp(x1)));
}

// ------------------------------------------------------------------ the check

// Weights and biases U(-0.5, 0.5), gains U(0.5, 1.5).
void Randomize(ParameterStore* store, uint64_t seed) {
  for (int i = 0; i < store->size(); ++i) {
    const bool gain = store->spec(i).init == Init::kOnes;
    const Tensor r = RandomTensor(store->value(i).shape, DType::kF32, seed + 7 * i,
                                  gain ? 0.5 : -0.5, gain ? 1.5 : 0.5);
    ::mt::testing::WriteDoubles(ToDoubles(r.view()), store->value(i));
  }
}

struct Probe {
  ParameterStore* store = nullptr;
  Shape shape;  // Of x and y.
  Vec x;
  std::function<absl::Status(const StepContext&, const TensorView& x, const TensorView& y)> forward;
  std::function<absl::Status(const StepContext&, const TensorView& dy, const TensorView& dx)>
      backward;
  std::function<Vec(const Params&, const Vec& x)> reference;
};

// Runs the probe once with dy = w and checks y, dx and every parameter gradient as described at
// the top of the file. Outputs start as NaN (they must be written, never read).
void ExpectMatchesReference(const Probe& probe, uint64_t seed) {
  ParameterStore& store = *probe.store;
  Params params;
  for (int i = 0; i < store.size(); ++i) params[store.spec(i).name] = ToDoubles(store.value(i));
  const Vec w = ToDoubles(RandomTensor(probe.shape, DType::kF32, seed).view());
  const Tensor x = FromDoubles(probe.shape, DType::kF32, probe.x);
  const Tensor dy = FromDoubles(probe.shape, DType::kF32, w);
  const Vec nans(x.numel(), std::numeric_limits<double>::quiet_NaN());
  const Tensor y = FromDoubles(probe.shape, DType::kF32, nans);
  const Tensor dx = FromDoubles(probe.shape, DType::kF32, nans);
  ThreadPool pool(2);
  ExecContext ec{&pool};
  StepContext sc;
  sc.exec = &ec;
  store.ZeroGrads();
  absl::Status s = probe.forward(sc, x.view(), y.view());
  ASSERT_TRUE(s.ok()) << s;
  s = probe.backward(sc, dy.view(), dx.view());
  ASSERT_TRUE(s.ok()) << s;

  const Vec want = probe.reference(params, probe.x);
  EXPECT_TRUE(AllClose(y.view(), want, 0, kForwardTol * Peak(want))) << "output";
  EXPECT_GT(Peak(want), 1e-2) << "degenerate case";
  auto loss = [&](const Params& p, const Vec& xv) {
    const Vec out = probe.reference(p, xv);
    double l = 0;
    for (size_t i = 0; i < out.size(); ++i) l += w[i] * out[i];
    return l;
  };
  const Vec want_dx = NumericalGradient([&](const Vec& v) { return loss(params, v); }, probe.x);
  EXPECT_TRUE(AllClose(dx.view(), want_dx, 0, kGradientTol * Peak(want_dx))) << "input gradient";
  for (int i = 0; i < store.size(); ++i) {
    const std::string& name = store.spec(i).name;
    const Vec numeric = NumericalGradient(
        [&](const Vec& v) {
          Params q = params;
          q[name] = v;
          return loss(q, probe.x);
        },
        params.at(name));
    EXPECT_TRUE(AllClose(store.grad(i), numeric, 0, kGradientTol * Peak(numeric))) << name;
    EXPECT_GT(Peak(numeric), 1e-3) << "degenerate gradient of " << name;
  }
}

std::vector<std::string> Names(const ParameterStore& store) {
  std::vector<std::string> names;
  for (int i = 0; i < store.size(); ++i) names.push_back(store.spec(i).name);
  return names;
}

Vec Uniform(const Shape& shape, uint64_t seed, double lo, double hi) {
  return ToDoubles(RandomTensor(shape, DType::kF32, seed, lo, hi).view());
}

// ------------------------------------------------------------------ modules

TEST(RmsNormModuleTest, MatchesFloat64Reference) {
  for (const auto& size : std::vector<std::pair<int64_t, int64_t>>{{1, 3}, {4, 7}, {9, 17}}) {
    const int64_t N = size.first, H = size.second;
    SCOPED_TRACE(absl::StrCat("N=", N, " H=", H));
    ParameterStore store(0, 1);
    auto norm = RmsNormModule::Create(&store, "norm", H, kEps);
    ASSERT_TRUE(norm.ok()) << norm.status();
    ASSERT_TRUE(store.Allocate(1).ok());
    ASSERT_EQ(Names(store), std::vector<std::string>{"norm.weight"});
    EXPECT_EQ(store.spec(0).init, Init::kOnes);
    EXPECT_EQ(store.spec(0).split_dim, -1);
    EXPECT_FALSE(store.spec(0).weight_decay);
    Randomize(&store, 2);
    Probe probe;
    probe.store = &store;
    probe.shape = {N, H};
    probe.x = Uniform(probe.shape, 3, -2, 2);
    probe.forward = [&](const StepContext& sc, const TensorView& x, const TensorView& y) {
      return norm->Forward(sc, x, y);
    };
    probe.backward = [&](const StepContext& sc, const TensorView& dy, const TensorView& dx) {
      return norm->Backward(sc, dy, dx);
    };
    probe.reference = [&](const Params& p, const Vec& x) {
      return RmsRows(x, p.at("norm.weight"));
    };
    ExpectMatchesReference(probe, 4);
    EXPECT_EQ(norm->ActivationBytes(), N * 4);  // f32 rstd per row.
    norm->Release();
    EXPECT_EQ(norm->ActivationBytes(), 0);
    EXPECT_EQ(norm->Backward(StepContext{}, TensorView(), TensorView()).code(),
              absl::StatusCode::kFailedPrecondition);
  }
  ParameterStore store(0, 1);
  EXPECT_EQ(RmsNormModule::Create(&store, "bad", 0, kEps).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RmsNormModule::Create(&store, "bad", 4, -1.0f).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SwiGluMlpTest, MatchesFloat64Reference) {
  const int64_t N = 5, H = 6, F = 11;
  ParameterStore store(0, 1);
  auto mlp = SwiGluMLP::Create(&store, "mlp", H, F, 0.3, 0.1);
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  ASSERT_TRUE(store.Allocate(1).ok());
  ASSERT_EQ(Names(store),
            (std::vector<std::string>{"mlp.gate.weight", "mlp.up.weight", "mlp.down.weight"}));
  // gate and up split on F (column-parallel), down on F (row-parallel); down has the output std.
  EXPECT_EQ(store.spec(0).split_dim, 1);
  EXPECT_EQ(store.spec(1).split_dim, 1);
  EXPECT_EQ(store.spec(2).split_dim, 0);
  EXPECT_EQ(store.spec(0).init_std, 0.3);
  EXPECT_EQ(store.spec(2).init_std, 0.1);
  Randomize(&store, 5);
  Probe probe;
  probe.store = &store;
  probe.shape = {N, H};
  probe.x = Uniform(probe.shape, 6, -2, 2);
  probe.forward = [&](const StepContext& sc, const TensorView& x, const TensorView& y) {
    const TensorView* bias = &x;  // Must be reset: the MLP has no bias to defer.
    RETURN_IF_ERROR(mlp->Forward(sc, x, y, &bias));
    return bias == nullptr ? absl::OkStatus() : absl::InternalError("deferred a bias");
  };
  probe.backward = [&](const StepContext& sc, const TensorView& dy, const TensorView& dx) {
    return mlp->Backward(sc, dy, dx);
  };
  probe.reference = [&](const Params& p, const Vec& x) {
    return SwiGluMlpRef(p, "mlp", x, N, H, F);
  };
  ExpectMatchesReference(probe, 7);
  EXPECT_EQ(mlp->ActivationBytes(), 2 * N * F * 4);  // gate(x) and up(x) in f32.
  mlp->Release();
  EXPECT_EQ(mlp->ActivationBytes(), 0);

  ParameterStore tp2(0, 2);
  EXPECT_EQ(SwiGluMLP::Create(&tp2, "mlp", H, F, 0.3, 0.1).status().code(),
            absl::StatusCode::kInvalidArgument);
}

class RotaryAttentionTest : public ::testing::TestWithParam<AttnShape> {};

TEST_P(RotaryAttentionTest, MatchesFloat64Reference) {
  const AttnShape a = GetParam();
  ParameterStore store(0, 1);
  AttentionConfig ac;
  ac.hidden = a.H;
  ac.heads = a.heads;
  ac.causal = a.causal ? ops::CausalMask::kYes : ops::CausalMask::kNo;
  ac.rotary_base = a.rotary ? kRotaryBase : 0.0;
  ac.bias = a.bias ? Bias::kYes : Bias::kNo;
  auto attn = ParallelSelfAttention::Create(&store, "attn", ac);
  ASSERT_TRUE(attn.ok()) << attn.status();
  ASSERT_TRUE(store.Allocate(1).ok());
  EXPECT_EQ(store.size(), a.bias ? 4 : 2);
  Randomize(&store, 8);
  Probe probe;
  probe.store = &store;
  probe.shape = {a.B, a.T, a.H};
  probe.x = Uniform(probe.shape, 9, -1.5, 1.5);
  probe.forward = [&](const StepContext& sc, const TensorView& x, const TensorView& y) {
    return attn->Forward(sc, x, nullptr, y);
  };
  probe.backward = [&](const StepContext& sc, const TensorView& dy, const TensorView& dx) {
    return attn->Backward(sc, dy, dx);
  };
  probe.reference = [&](const Params& p, const Vec& x) { return AttentionRef(p, "attn", x, a); };
  ExpectMatchesReference(probe, 10);
}

INSTANTIATE_TEST_SUITE_P(Shapes, RotaryAttentionTest,
                         ::testing::Values(AttnShape{2, 5, 8, 2, true, true, false},
                                           AttnShape{1, 7, 12, 3, false, true, true},
                                           AttnShape{2, 3, 8, 1, true, true, true},
                                           AttnShape{1, 4, 8, 2, true, false, false}));

TEST(RotaryAttentionConfigTest, RejectsBadSettings) {
  AttentionConfig ac;
  ac.hidden = 9;
  ac.heads = 3;  // Head dim 3: odd.
  ac.rotary_base = kRotaryBase;
  ParameterStore store(0, 1);
  auto odd = ParallelSelfAttention::Create(&store, "odd", ac);
  EXPECT_EQ(odd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(odd.status().message().find("even head dim"), std::string::npos) << odd.status();
  ac.rotary_base = 0.0;  // Without rotary embeddings an odd head dim is fine.
  EXPECT_TRUE(ParallelSelfAttention::Create(&store, "plain", ac).ok());
  ac.hidden = 8;
  ac.heads = 2;
  for (double base : {-1.0, double{NAN}, double{INFINITY}}) {
    ac.rotary_base = base;
    EXPECT_EQ(ParallelSelfAttention::Create(&store, absl::StrCat("b", base), ac).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

// ------------------------------------------------------------------ layers and stacks

LayerSpec ModernSpec(int64_t H, int64_t heads, int64_t F, NormPosition norm) {
  LayerSpec spec;
  spec.config.hidden = H;
  spec.config.heads = heads;
  spec.config.ffn = F;
  spec.config.norm = norm;
  spec.config.layernorm_eps = kEps;
  spec.config.rotary_base = kRotaryBase;
  spec.config.attention_bias = Bias::kNo;
  spec.norm = RmsNormFactory();
  spec.mlp = SwiGluMlpFactory();
  return spec;
}

TEST(ModernTransformerLayerTest, MatchesFloat64Reference) {
  const AttnShape a{2, 4, 8, 2, /*causal=*/true, /*rotary=*/true, /*bias=*/false};
  const int64_t F = 10;
  for (NormPosition norm : {NormPosition::kPreNorm, NormPosition::kPostNorm}) {
    SCOPED_TRACE(norm == NormPosition::kPreNorm ? "pre-norm" : "post-norm");
    ParameterStore store(0, 1);
    auto layer = TransformerLayer::Create(&store, "layer", 0, ModernSpec(a.H, a.heads, F, norm));
    ASSERT_TRUE(layer.ok()) << layer.status();
    ASSERT_TRUE(store.Allocate(1).ok());
    EXPECT_EQ(Names(store),
              (std::vector<std::string>{"layer.ln1.weight", "layer.attention.qkv.weight",
                                        "layer.attention.proj.weight", "layer.ln2.weight",
                                        "layer.mlp.gate.weight", "layer.mlp.up.weight",
                                        "layer.mlp.down.weight"}));
    Randomize(&store, 11);
    Probe probe;
    probe.store = &store;
    probe.shape = {a.B, a.T, a.H};
    probe.x = Uniform(probe.shape, 12, -1.5, 1.5);
    probe.forward = [&](const StepContext& sc, const TensorView& x, const TensorView& y) {
      return (*layer)->Forward(sc, x, nullptr, y);
    };
    probe.backward = [&](const StepContext& sc, const TensorView& dy, const TensorView& dx) {
      return (*layer)->Backward(sc, dy, dx);
    };
    probe.reference = [&](const Params& p, const Vec& x) {
      return ModernLayerRef(p, x, a, F, norm);
    };
    ExpectMatchesReference(probe, 13);
  }
}

// Forward and backward of a stack; returns y, dx and every gradient, in one vector.
Vec RunStack(TransformerStack* stack, ParameterStore* store, const ExecContext& ec, const Tensor& x,
             const Tensor& dy) {
  StepContext sc;
  sc.exec = &ec;
  store->ZeroGrads();
  absl::StatusOr<TensorView> y = stack->Forward(sc, x.view(), nullptr);
  EXPECT_TRUE(y.ok()) << y.status();
  if (!y.ok()) return {};
  Vec out = ToDoubles(*y);
  Tensor dx = Tensor::Host(x.shape(), DType::kF32);
  const absl::Status s = stack->Backward(sc, dy.view(), dx.view());
  EXPECT_TRUE(s.ok()) << s;
  const Vec d = ToDoubles(dx.view()), g = ToDoubles(store->flat_grads());
  out.insert(out.end(), d.begin(), d.end());
  out.insert(out.end(), g.begin(), g.end());
  return out;
}

TEST(ModernTransformerLayerTest, RecomputationGivesTheSameBits) {
  const Shape shape = {2, 5, 8};
  const Tensor x = RandomTensor(shape, DType::kF32, 14, -1.5, 1.5);
  const Tensor dy = RandomTensor(shape, DType::kF32, 15);
  const ExecContext ec;
  std::vector<Vec> runs;
  for (Recompute recompute : {Recompute::kNo, Recompute::kYes}) {
    LayerSpec spec = ModernSpec(8, 2, 12, NormPosition::kPreNorm);
    spec.config.recompute = recompute;
    ParameterStore store(0, 1);
    auto stack = TransformerStack::Create(&store, "layers", 2, spec);
    ASSERT_TRUE(stack.ok()) << stack.status();
    ASSERT_TRUE(store.Allocate(3).ok());
    runs.push_back(RunStack(stack->get(), &store, ec, x, dy));
    if (recompute == Recompute::kYes) {
      // Only the stack's residual stream stays between Forward and Backward.
      EXPECT_EQ((*stack)->HeldActivationBytes(), 3 * static_cast<int64_t>(x.nbytes()));
    }
  }
  ASSERT_EQ(runs[0].size(), runs[1].size());
  EXPECT_TRUE(runs[0] == runs[1]) << "recomputed gradients differ";
}

// A block of a model variant's own: y = x + RMSNorm(x), one gain "<prefix>.norm.weight".
class NormResidualBlock : public Layer {
 public:
  static absl::StatusOr<std::unique_ptr<Layer>> Create(ParameterStore* store,
                                                       const std::string& prefix, int64_t H) {
    std::unique_ptr<NormResidualBlock> b(new NormResidualBlock());
    ASSIGN_OR_RETURN(b->norm_, RmsNormModule::Create(store, prefix + ".norm", H, kEps));
    return std::unique_ptr<Layer>(std::move(b));
  }
  absl::Status Forward(const StepContext& sc, const TensorView& x, const TensorView*,
                       const TensorView& y) override {
    RETURN_IF_ERROR(norm_.Forward(sc, x, y));
    return ops::Add(*sc.exec, x, y, y);
  }
  absl::Status Backward(const StepContext& sc, const TensorView& dy,
                        const TensorView& dx) override {
    RETURN_IF_ERROR(norm_.Backward(sc, dy, dx));
    return ops::Add(*sc.exec, dx, dy, dx);
  }
  int64_t ActivationBytes() const override { return norm_.ActivationBytes(); }
  int64_t backward_peak_bytes() const override { return norm_.ActivationBytes(); }

 private:
  RmsNormModule norm_;
};

// Records the GradsReady calls of a backward pass.
class Recorder : public GradReadyListener {
 public:
  absl::Status GradsReady(int first_handle) override {
    handles.push_back(first_handle);
    return absl::OkStatus();
  }
  std::vector<int> handles;
};

TEST(TransformerStackTest, HoldsBlocksOfAnyClassFromALayerFactory) {
  const int64_t B = 2, T = 3, H = 5;
  ParameterStore store(0, 1);
  std::vector<std::pair<std::string, int>> calls;
  const LayerFactory factory = [&](ParameterStore* s, const std::string& prefix, int index) {
    calls.emplace_back(prefix, index);
    return NormResidualBlock::Create(s, prefix, H);
  };
  auto stack = TransformerStack::Create(&store, "blocks", 3, factory);
  ASSERT_TRUE(stack.ok()) << stack.status();
  ASSERT_TRUE(store.Allocate(1).ok());
  EXPECT_EQ(calls, (std::vector<std::pair<std::string, int>>{
                       {"blocks.0", 0}, {"blocks.1", 1}, {"blocks.2", 2}}));
  EXPECT_EQ(Names(store), (std::vector<std::string>{"blocks.0.norm.weight", "blocks.1.norm.weight",
                                                    "blocks.2.norm.weight"}));
  Randomize(&store, 16);
  Recorder recorder;
  Probe probe;
  probe.store = &store;
  probe.shape = {B, T, H};
  probe.x = Uniform(probe.shape, 17, -2, 2);
  probe.forward = [&](const StepContext& sc, const TensorView& x, const TensorView& y) {
    ASSIGN_OR_RETURN(TensorView out, (*stack)->Forward(sc, x, nullptr));
    return CopyTensor(*sc.exec, out, y);
  };
  probe.backward = [&](const StepContext& sc, const TensorView& dy, const TensorView& dx) {
    StepContext with_listener = sc;
    with_listener.grads_ready = &recorder;
    return (*stack)->Backward(with_listener, dy, dx);
  };
  probe.reference = [&](const Params& p, const Vec& x) {
    Vec h = x;
    for (int i = 0; i < 3; ++i)
      h = Sum(h, RmsRows(h, p.at(absl::StrCat("blocks.", i, ".norm.weight"))));
    return h;
  };
  ExpectMatchesReference(probe, 18);
  EXPECT_EQ(recorder.handles, (std::vector<int>{2, 1, 0}));  // Each block's first handle.
  EXPECT_EQ((*stack)->num_layers(), 3);

  const LayerFactory broken = [](ParameterStore*, const std::string&, int) {
    return absl::StatusOr<std::unique_ptr<Layer>>(absl::InvalidArgumentError("no such block"));
  };
  ParameterStore other(0, 1);
  EXPECT_EQ(TransformerStack::Create(&other, "x", 2, broken).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TransformerStackTest, TheDefaultSpecIsGpt2sLayer) {
  TransformerLayerConfig config;
  config.hidden = 6;
  config.heads = 2;
  ParameterStore by_config(0, 1), by_spec(0, 1);
  ASSERT_TRUE(TransformerStack::Create(&by_config, "layers", 1, config).ok());
  ASSERT_TRUE(TransformerStack::Create(&by_spec, "layers", 1,
                                       LayerSpec{config, LayerNormFactory(), GeluMlpFactory()})
                  .ok());
  const std::vector<std::string> want = {"layers.0.ln1.weight",
                                         "layers.0.ln1.bias",
                                         "layers.0.attention.qkv.weight",
                                         "layers.0.attention.qkv.bias",
                                         "layers.0.attention.proj.weight",
                                         "layers.0.attention.proj.bias",
                                         "layers.0.ln2.weight",
                                         "layers.0.ln2.bias",
                                         "layers.0.mlp.fc1.weight",
                                         "layers.0.mlp.fc1.bias",
                                         "layers.0.mlp.fc2.weight",
                                         "layers.0.mlp.fc2.bias"};
  EXPECT_EQ(Names(by_config), want);
  EXPECT_EQ(Names(by_spec), want);
  ParameterStore empty(0, 1);
  LayerSpec no_mlp{config, LayerNormFactory(), nullptr};
  EXPECT_EQ(TransformerLayer::Create(&empty, "l", 0, no_mlp).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace nn
}  // namespace mt

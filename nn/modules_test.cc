// Float64 gradient checks of every nn/ module at TP = 1 (StepContext::tp == nullptr).
//
// For each module a float64 reference forward is written here in plain loops. The test takes the
// scalar loss L = sum(w * y) with fixed random weights w, runs the module's Forward (compared with
// the reference) and its Backward with dy = w, and compares the input gradient and every parameter
// gradient the module accumulates with central differences of L through the reference
// (testutil.h NumericalGradient). Each module also runs with a null pool and a ThreadPool(3)
// (same results up to float rounding), and calling Backward a second time must double every
// parameter gradient (Backward accumulates) while rewriting the input gradient (which is
// pre-filled with NaN: it must be overwritten, never read). Dropout is off (p = 0).
// Mixed precision (bf16/f16 compute): outputs round once to the compute dtype and parameter
// gradients accumulate in f32 (float64 references on the rounded operands, at f32 accuracy).
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

#include "core/ops/testutil.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"
#include "nn/attention.h"
#include "nn/context.h"
#include "nn/cross_entropy.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/mlp.h"
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
using ParamMap = std::map<std::string, Vec>;

const double kU = ::mt::testing::UnitRoundoff(DType::kF32);
// Bounds relative to the largest magnitude of the compared quantity. The modules chain a few f32
// reductions of length <= ~40 (plus exp/log/tanh); the observed error is below 16 u (forward) and
// 32 u (gradients), so these bounds leave a margin of 8x and 16x, while a wrong formula is off by
// O(1). The central differences (h = 1e-6 on a float64 reference) add O(h^2 + 1e-16 / h) ~ 1e-10.
const double kForwardTol = 128 * kU;   // ~7.6e-6
const double kGradientTol = 512 * kU;  // ~3.1e-5

double MaxAbs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// ------------------------------------------------------------------ float64 references

// y [N, out] = x [N, in] W [in, out] + b [out].
Vec RefLinear(const Vec& x, int64_t N, int64_t in, int64_t out, const Vec& w, const Vec* b) {
  Vec y(N * out, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t o = 0; o < out; ++o) {
      double s = b != nullptr ? (*b)[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) s += x[n * in + i] * w[i * out + o];
      y[n * out + o] = s;
    }
  }
  return y;
}

double RefGelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

// Per-row (x - mean) / sqrt(var + eps) * gamma + beta, population variance.
Vec RefLayerNorm(const Vec& x, int64_t N, int64_t H, const Vec& gamma, const Vec& beta,
                 double eps) {
  Vec y(N * H);
  for (int64_t n = 0; n < N; ++n) {
    double mean = 0, var = 0;
    for (int64_t h = 0; h < H; ++h) mean += x[n * H + h];
    mean /= H;
    for (int64_t h = 0; h < H; ++h) var += (x[n * H + h] - mean) * (x[n * H + h] - mean);
    var /= H;
    const double rstd = 1 / std::sqrt(var + eps);
    for (int64_t h = 0; h < H; ++h) {
      y[n * H + h] = (x[n * H + h] - mean) * rstd * gamma[h] + beta[h];
    }
  }
  return y;
}

Vec Plus(const Vec& a, const Vec& b) {
  Vec c(a.size());
  for (size_t i = 0; i < a.size(); ++i) c[i] = a[i] + b[i];
  return c;
}

Vec RefMlp(const ParamMap& p, const std::string& prefix, const Vec& x, int64_t N, int64_t H,
           int64_t F) {
  Vec a = RefLinear(x, N, H, F, p.at(prefix + ".fc1.weight"), &p.at(prefix + ".fc1.bias"));
  for (double& v : a) v = RefGelu(v);
  return RefLinear(a, N, F, H, p.at(prefix + ".fc2.weight"), &p.at(prefix + ".fc2.bias"));
}

struct AttnDims {
  int64_t B, T, H, heads;
  bool causal;
  const std::vector<int32_t>* mask;  // [B, T], 0 = padded key; may be null.
};

// Self-attention with the fused QKV columns ordered (head, {q, k, v}, d).
Vec RefAttention(const ParamMap& p, const std::string& prefix, const Vec& x, const AttnDims& a) {
  const int64_t B = a.B, T = a.T, H = a.H, NH = a.heads, D = H / NH;
  const Vec qkv = RefLinear(x, B * T, H, 3 * H, p.at(prefix + ".qkv.weight"),
                            &p.at(prefix + ".qkv.bias"));
  auto at = [&](int64_t b, int64_t t, int64_t h, int64_t which, int64_t d) {
    return qkv[(b * T + t) * 3 * H + h * 3 * D + which * D + d];
  };
  Vec ctx(B * T * H, 0.0);
  std::vector<double> s(T);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t i = 0; i < T; ++i) {
        double mx = -std::numeric_limits<double>::infinity();
        std::vector<bool> allowed(T);
        for (int64_t j = 0; j < T; ++j) {
          allowed[j] = (!a.causal || j <= i) && (a.mask == nullptr || (*a.mask)[b * T + j] != 0);
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += at(b, i, h, 0, d) * at(b, j, h, 1, d);
          s[j] = dot / std::sqrt(static_cast<double>(D));
          if (allowed[j]) mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (int64_t j = 0; j < T; ++j) {
          s[j] = allowed[j] ? std::exp(s[j] - mx) : 0.0;
          z += s[j];
        }
        for (int64_t j = 0; j < T; ++j) {
          if (!allowed[j]) continue;
          for (int64_t d = 0; d < D; ++d) {
            ctx[(b * T + i) * H + h * D + d] += s[j] / z * at(b, j, h, 2, d);
          }
        }
      }
    }
  }
  return RefLinear(ctx, B * T, H, H, p.at(prefix + ".proj.weight"), &p.at(prefix + ".proj.bias"));
}

Vec RefTransformerLayer(const ParamMap& p, const std::string& prefix, const Vec& x,
                        const AttnDims& a, int64_t F, NormPosition norm, double eps) {
  const int64_t N = a.B * a.T, H = a.H;
  auto ln = [&](const std::string& name, const Vec& v) {
    return RefLayerNorm(v, N, H, p.at(prefix + "." + name + ".weight"),
                        p.at(prefix + "." + name + ".bias"), eps);
  };
  if (norm == NormPosition::kPreNorm) {
    const Vec x1 = Plus(x, RefAttention(p, prefix + ".attention", ln("ln1", x), a));
    return Plus(x1, RefMlp(p, prefix + ".mlp", ln("ln2", x1), N, H, F));
  }
  const Vec x1 = ln("ln1", Plus(x, RefAttention(p, prefix + ".attention", x, a)));
  return ln("ln2", Plus(x1, RefMlp(p, prefix + ".mlp", x1, N, H, F)));
}

// ------------------------------------------------------------------ the harness

// A module under test, as closures over the module object.
struct ModuleUnderTest {
  Shape x_shape, y_shape;
  DType x_dtype = DType::kF32;  // i32: token ids, not differentiable (no input gradient).
  Vec x;
  std::function<absl::Status(const StepContext&, const TensorView& x, const TensorView& y)>
      forward;
  // dx is an empty view when the input is not differentiable.
  std::function<absl::Status(const StepContext&, const TensorView& x, const TensorView& dy,
                             const TensorView& dx)>
      backward;
  std::function<Vec(const ParamMap&, const Vec& x)> reference;
};

// Non-trivial values for every parameter: weights and biases U(-0.5, 0.5), LayerNorm gains
// U(0.5, 1.5) (so that zero-initialised biases and unit gains are exercised too).
void RandomizeParameters(ParameterStore* store, uint64_t seed) {
  for (int i = 0; i < store->size(); ++i) {
    const bool gain = store->spec(i).init == Init::kOnes;
    Tensor r = RandomTensor(store->value(i).shape, DType::kF32, seed + 101 * i, gain ? 0.5 : -0.5,
                            gain ? 1.5 : 0.5);
    ::mt::testing::WriteDoubles(ToDoubles(r.view()), store->value(i));
  }
}

ParamMap Values(const ParameterStore& store) {
  ParamMap m;
  for (int i = 0; i < store.size(); ++i) m[store.spec(i).name] = ToDoubles(store.value(i));
  return m;
}

Tensor NaNs(const Shape& shape) {
  Tensor t = Tensor::Host(shape, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) {
    t.data_as<float>()[i] = std::numeric_limits<float>::quiet_NaN();
  }
  return t;
}

struct Result {
  Vec y, dx;
  std::vector<Vec> grads;  // Per parameter handle, after one Backward.
};

// Runs the checks described at the top of the file; returns the results of one Backward.
Result CheckModule(ParameterStore* store, const ModuleUnderTest& m, uint64_t seed) {
  const bool differentiable = m.x_dtype == DType::kF32;
  const ParamMap params = Values(*store);
  const Tensor x = FromDoubles(m.x_shape, m.x_dtype, m.x);
  const Vec w = ToDoubles(RandomTensor(m.y_shape, DType::kF32, seed + 1).view());
  const Tensor dy = FromDoubles(m.y_shape, DType::kF32, w);

  ThreadPool pool(3);
  Result runs[2];
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE(run == 0 ? "null pool" : "ThreadPool(3)");
    ExecContext ec;
    ec.pool = run == 0 ? nullptr : &pool;
    StepContext sc;
    sc.exec = &ec;
    store->ZeroGrads();
    Tensor y = NaNs(m.y_shape);
    absl::Status s = m.forward(sc, x.view(), y.view());
    EXPECT_TRUE(s.ok()) << s;
    Tensor dx = differentiable ? NaNs(m.x_shape) : Tensor();
    s = m.backward(sc, x.view(), dy.view(), dx.view());
    EXPECT_TRUE(s.ok()) << s;
    Result& r = runs[run];
    r.y = ToDoubles(y.view());
    if (differentiable) r.dx = ToDoubles(dx.view());
    for (int i = 0; i < store->size(); ++i) r.grads.push_back(ToDoubles(store->grad(i)));

    // A second Backward (same saved forward, same dy) rewrites dx and doubles every gradient.
    Tensor dx2 = differentiable ? NaNs(m.x_shape) : Tensor();
    s = m.backward(sc, x.view(), dy.view(), dx2.view());
    EXPECT_TRUE(s.ok()) << s;
    if (differentiable) {
      EXPECT_TRUE(AllClose(dx2.view(), r.dx, 0, 4 * kU * MaxAbs(r.dx))) << "second dx";
    }
    for (int i = 0; i < store->size(); ++i) {
      Vec twice = r.grads[i];
      for (double& g : twice) g *= 2;
      EXPECT_TRUE(AllClose(store->grad(i), twice, 0, 8 * kU * MaxAbs(twice)))
          << store->spec(i).name << ": Backward must accumulate";
    }
  }
  // The thread count changes nothing beyond float rounding.
  EXPECT_TRUE(AllClose(runs[1].y, runs[0].y, 0, kForwardTol * MaxAbs(runs[0].y)));
  EXPECT_TRUE(AllClose(runs[1].dx, runs[0].dx, 0, kForwardTol * MaxAbs(runs[0].dx)));
  for (int i = 0; i < store->size(); ++i) {
    EXPECT_TRUE(AllClose(runs[1].grads[i], runs[0].grads[i], 0,
                         kForwardTol * MaxAbs(runs[0].grads[i])))
        << store->spec(i).name;
  }

  // Forward against the float64 reference.
  const Vec y_ref = m.reference(params, m.x);
  EXPECT_TRUE(AllClose(runs[1].y, y_ref, 0, kForwardTol * MaxAbs(y_ref))) << "forward";
  EXPECT_GT(MaxAbs(y_ref), 1e-3) << "degenerate test: output near zero";

  // Gradients against central differences of L = sum(w * reference(params, x)).
  auto loss = [&](const ParamMap& p, const Vec& xv) {
    const Vec y = m.reference(p, xv);
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += w[i] * y[i];
    return l;
  };
  if (differentiable) {
    const Vec numeric = NumericalGradient([&](const Vec& xv) { return loss(params, xv); }, m.x);
    EXPECT_TRUE(AllClose(runs[1].dx, numeric, 0, kGradientTol * MaxAbs(numeric))) << "input grad";
    EXPECT_GT(MaxAbs(numeric), 1e-3) << "degenerate test: input gradient near zero";
  }
  for (int i = 0; i < store->size(); ++i) {
    const std::string& name = store->spec(i).name;
    const Vec numeric = NumericalGradient(
        [&](const Vec& v) {
          ParamMap p = params;
          p[name] = v;
          return loss(p, m.x);
        },
        params.at(name));
    EXPECT_TRUE(AllClose(runs[1].grads[i], numeric, 0, kGradientTol * MaxAbs(numeric))) << name;
    EXPECT_GT(MaxAbs(numeric), 1e-3) << "degenerate test: gradient of " << name << " near zero";
  }
  return runs[1];
}

Vec RandomValues(const Shape& shape, uint64_t seed, double lo = -1, double hi = 1) {
  return ToDoubles(RandomTensor(shape, DType::kF32, seed, lo, hi).view());
}

// ------------------------------------------------------------------ linear layers

struct LinearCase {
  int64_t n, in, out;
  Bias bias;
};

void PrintTo(const LinearCase& c, std::ostream* os) {
  *os << "{N=" << c.n << " in=" << c.in << " out=" << c.out
      << (c.bias == Bias::kYes ? " bias}" : " no bias}");
}

class LinearTest : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearTest, ColumnParallelLinearMatchesFloat64Reference) {
  const LinearCase c = GetParam();
  ParameterStore store(0, 1);
  auto lin = ColumnParallelLinear::Create(&store, "lin", c.in, c.out, c.bias, 0.3);
  ASSERT_TRUE(lin.ok()) << lin.status();
  ASSERT_TRUE(store.Allocate(1).ok());
  RandomizeParameters(&store, 2);
  EXPECT_EQ(lin->in(), c.in);
  EXPECT_EQ(lin->local_out(), c.out);
  ModuleUnderTest m;
  m.x_shape = {c.n, c.in};
  m.y_shape = {c.n, c.out};
  m.x = RandomValues(m.x_shape, 3);
  m.forward = [&](const StepContext& sc, const TensorView& x, const TensorView& y) {
    return lin->Forward(sc, x, y);
  };
  m.backward = [&](const StepContext& sc, const TensorView& x, const TensorView& dy,
                   const TensorView& dx) { return lin->Backward(sc, x, dy, dx); };
  m.reference = [&](const ParamMap& p, const Vec& x) {
    return RefLinear(x, c.n, c.in, c.out, p.at("lin.weight"),
                     c.bias == Bias::kYes ? &p.at("lin.bias") : nullptr);
  };
  CheckModule(&store, m, 4);
  EXPECT_EQ(store.size(), c.bias == Bias::kYes ? 2 : 1);
}

TEST_P(LinearTest, RowParallelLinearMatchesFloat64Reference) {
  const LinearCase c = GetParam();
  ParameterStore store(0, 1);
  auto lin = RowParallelLinear::Create(&store, "lin", c.in, c.out, c.bias, 0.3);
  ASSERT_TRUE(lin.ok()) << lin.status();
  ASSERT_TRUE(store.Allocate(1).ok());
  RandomizeParameters(&store, 5);
  EXPECT_EQ(lin->local_in(), c.in);
  EXPECT_EQ(lin->out(), c.out);
  ModuleUnderTest m;
  m.x_shape = {c.n, c.in};
  m.y_shape = {c.n, c.out};
  m.x = RandomValues(m.x_shape, 6);
  m.forward = [&](const StepContext& sc, const TensorView& x, const TensorView& y) {
    return lin->Forward(sc, x, y);
  };
  m.backward = [&](const StepContext& sc, const TensorView& x, const TensorView& dy,
                   const TensorView& dx) { return lin->Backward(sc, x, dy, dx); };
  m.reference = [&](const ParamMap& p, const Vec& x) {
    return RefLinear(x, c.n, c.in, c.out, p.at("lin.weight"),
                     c.bias == Bias::kYes ? &p.at("lin.bias") : nullptr);
  };
  CheckModule(&store, m, 7);
}

INSTANTIATE_TEST_SUITE_P(Sizes, LinearTest,
                         ::testing::Values(LinearCase{1, 1, 1, Bias::kYes},
                                           LinearCase{5, 7, 9, Bias::kYes},
                                           LinearCase{3, 17, 4, Bias::kNo},
                                           LinearCase{13, 3, 5, Bias::kYes}));

// ------------------------------------------------------------------ LayerNorm, MLP

TEST(LayerNormModuleTest, MatchesFloat64Reference) {
  for (const auto& size : std::vector<std::pair<int64_t, int64_t>>{{1, 3}, {4, 7}, {9, 17}}) {
    const int64_t N = size.first, H = size.second;
    SCOPED_TRACE(::testing::Message() << "N=" << N << " H=" << H);
    ParameterStore store(0, 1);
    auto ln = LayerNormModule::Create(&store, "ln", H, 1e-5f);
    ASSERT_TRUE(ln.ok()) << ln.status();
    ASSERT_TRUE(store.Allocate(1).ok());
    ASSERT_EQ(store.size(), 2);
    EXPECT_EQ(store.spec(0).name, "ln.weight");
    EXPECT_FALSE(store.spec(0).weight_decay);
    RandomizeParameters(&store, 8);
    ModuleUnderTest m;
    m.x_shape = {N, H};
    m.y_shape = {N, H};
    m.x = RandomValues(m.x_shape, 9, -2, 2);
    m.forward = [&](const StepContext& sc, const TensorView& x, const TensorView& y) {
      return ln->Forward(sc, x, y);
    };
    m.backward = [&](const StepContext& sc, const TensorView&, const TensorView& dy,
                     const TensorView& dx) { return ln->Backward(sc, dy, dx); };
    m.reference = [&](const ParamMap& p, const Vec& x) {
      return RefLayerNorm(x, N, H, p.at("ln.weight"), p.at("ln.bias"), double{1e-5f});
    };
    CheckModule(&store, m, 10);
  }
}

TEST(ParallelMlpTest, MatchesFloat64Reference) {
  const int64_t N = 5, H = 6, F = 11;
  ParameterStore store(0, 1);
  auto mlp = ParallelMLP::Create(&store, "mlp", H, F, 0.3, 0.1);
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  ASSERT_TRUE(store.Allocate(1).ok());
  RandomizeParameters(&store, 11);
  ModuleUnderTest m;
  m.x_shape = {N, H};
  m.y_shape = {N, H};
  m.x = RandomValues(m.x_shape, 12, -2, 2);  // Reaches GeLU's curved region on both sides.
  m.forward = [&](const StepContext& sc, const TensorView& x, const TensorView& y) {
    return mlp->Forward(sc, x, y);
  };
  m.backward = [&](const StepContext& sc, const TensorView&, const TensorView& dy,
                   const TensorView& dx) { return mlp->Backward(sc, dy, dx); };
  m.reference = [&](const ParamMap& p, const Vec& x) { return RefMlp(p, "mlp", x, N, H, F); };
  CheckModule(&store, m, 13);
  EXPECT_GT(mlp->ActivationBytes(), 0);
  mlp->Release();
  EXPECT_EQ(mlp->ActivationBytes(), 0);
}

// ------------------------------------------------------------------ attention

struct AttentionCase {
  int64_t B, T, H, heads;
  ops::CausalMask causal;
  bool padded;
};

// Padding masks with some padded keys in every sample but never all of them.
std::vector<int32_t> PaddingMask(int64_t B, int64_t T) {
  std::vector<int32_t> mask(B * T, 1);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = T - 1 - (b % std::max<int64_t>(1, T - 1)); t < T; ++t) mask[b * T + t] = 0;
  }
  return mask;
}

void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << "{B=" << c.B << " T=" << c.T << " H=" << c.H << " heads=" << c.heads
      << (c.causal == ops::CausalMask::kYes ? " causal" : " bidirectional")
      << (c.padded ? " padded}" : "}");
}

class AttentionTest : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(AttentionTest, MatchesFloat64Reference) {
  const AttentionCase c = GetParam();
  ParameterStore store(0, 1);
  AttentionConfig ac;
  ac.hidden = c.H;
  ac.heads = c.heads;
  ac.causal = c.causal;
  auto attn = ParallelSelfAttention::Create(&store, "attn", ac);
  ASSERT_TRUE(attn.ok()) << attn.status();
  ASSERT_TRUE(store.Allocate(1).ok());
  RandomizeParameters(&store, 14);
  const std::vector<int32_t> mask = PaddingMask(c.B, c.T);
  Tensor mask_t = Tensor::Host({c.B, c.T}, DType::kI32);
  std::copy(mask.begin(), mask.end(), mask_t.data_as<int32_t>());
  const TensorView mask_view = mask_t.view();
  const AttnDims dims{c.B, c.T, c.H, c.heads, c.causal == ops::CausalMask::kYes,
                      c.padded ? &mask : nullptr};
  ModuleUnderTest m;
  m.x_shape = {c.B, c.T, c.H};
  m.y_shape = {c.B, c.T, c.H};
  m.x = RandomValues(m.x_shape, 15, -1.5, 1.5);  // Attention far from uniform.
  m.forward = [&](const StepContext& sc, const TensorView& x, const TensorView& y) {
    return attn->Forward(sc, x, c.padded ? &mask_view : nullptr, y);
  };
  m.backward = [&](const StepContext& sc, const TensorView&, const TensorView& dy,
                   const TensorView& dx) { return attn->Backward(sc, dy, dx); };
  m.reference = [&](const ParamMap& p, const Vec& x) { return RefAttention(p, "attn", x, dims); };
  CheckModule(&store, m, 16);
  EXPECT_GT(attn->ActivationBytes(), 0);
  attn->Release();
  EXPECT_EQ(attn->ActivationBytes(), 0);
}

INSTANTIATE_TEST_SUITE_P(
    Masks, AttentionTest,
    ::testing::Values(AttentionCase{2, 5, 6, 2, ops::CausalMask::kYes, false},
                      AttentionCase{1, 1, 3, 3, ops::CausalMask::kYes, false},
                      AttentionCase{3, 4, 9, 3, ops::CausalMask::kNo, true},
                      AttentionCase{2, 7, 4, 1, ops::CausalMask::kNo, true},
                      AttentionCase{2, 3, 4, 2, ops::CausalMask::kNo, false}));

TEST(AttentionConfigTest, RejectsBadConfigs) {
  ParameterStore s1(0, 1);
  AttentionConfig ac;
  ac.hidden = 10;
  ac.heads = 4;
  auto a = ParallelSelfAttention::Create(&s1, "attn", ac);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("not divisible"), std::string::npos) << a.status();
  ParameterStore s2(0, 2);
  ac.hidden = 9;
  ac.heads = 3;  // 3 heads over 2 ranks.
  a = ParallelSelfAttention::Create(&s2, "attn", ac);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("tensor-parallel size 2"), std::string::npos) << a.status();
  // Missing Forward.
  ParameterStore s3(0, 1);
  ac.hidden = 4;
  ac.heads = 2;
  a = ParallelSelfAttention::Create(&s3, "attn", ac);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(s3.Allocate(1).ok());
  ExecContext ec;
  StepContext sc;
  sc.exec = &ec;
  Tensor d = Tensor::Zeros({1, 2, 4}, DType::kF32);
  EXPECT_EQ(a->Backward(sc, d.view(), d.view()).code(), absl::StatusCode::kFailedPrecondition);
  // A wrong hidden size is an error, not a crash.
  Tensor x = Tensor::Zeros({1, 2, 5}, DType::kF32), y = Tensor::Zeros({1, 2, 5}, DType::kF32);
  EXPECT_EQ(a->Forward(sc, x.view(), nullptr, y.view()).code(),
            absl::StatusCode::kInvalidArgument);
}

// ------------------------------------------------------------------ transformer layer

struct LayerCase {
  NormPosition norm;
  int64_t B, T, H, heads, ffn;
  ops::CausalMask causal;
  bool padded;
};

void PrintTo(const LayerCase& c, std::ostream* os) {
  *os << (c.norm == NormPosition::kPreNorm ? "{pre-norm" : "{post-norm") << " B=" << c.B
      << " T=" << c.T << " H=" << c.H << " heads=" << c.heads << " ffn=" << c.ffn
      << (c.causal == ops::CausalMask::kYes ? " causal" : " bidirectional")
      << (c.padded ? " padded}" : "}");
}

class TransformerLayerTest : public ::testing::TestWithParam<LayerCase> {};

TEST_P(TransformerLayerTest, MatchesFloat64Reference) {
  const LayerCase c = GetParam();
  ParameterStore store(0, 1);
  TransformerLayerConfig lc;
  lc.hidden = c.H;
  lc.heads = c.heads;
  lc.ffn = c.ffn;
  lc.norm = c.norm;
  lc.causal = c.causal;
  const float eps = 1e-5f;
  lc.layernorm_eps = eps;
  auto layer = TransformerLayer::Create(&store, "layer", /*layer_index=*/0, lc);
  ASSERT_TRUE(layer.ok()) << layer.status();
  ASSERT_TRUE(store.Allocate(1).ok());
  RandomizeParameters(&store, 17);
  const int64_t F = c.ffn == 0 ? 4 * c.H : c.ffn;
  const std::vector<int32_t> mask = PaddingMask(c.B, c.T);
  Tensor mask_t = Tensor::Host({c.B, c.T}, DType::kI32);
  std::copy(mask.begin(), mask.end(), mask_t.data_as<int32_t>());
  const TensorView mask_view = mask_t.view();
  const AttnDims dims{c.B, c.T, c.H, c.heads, c.causal == ops::CausalMask::kYes,
                      c.padded ? &mask : nullptr};
  ModuleUnderTest m;
  m.x_shape = {c.B, c.T, c.H};
  m.y_shape = {c.B, c.T, c.H};
  m.x = RandomValues(m.x_shape, 18, -1.5, 1.5);
  m.forward = [&](const StepContext& sc, const TensorView& x, const TensorView& y) {
    return (*layer)->Forward(sc, x, c.padded ? &mask_view : nullptr, y);
  };
  m.backward = [&](const StepContext& sc, const TensorView&, const TensorView& dy,
                   const TensorView& dx) { return (*layer)->Backward(sc, dy, dx); };
  m.reference = [&](const ParamMap& p, const Vec& x) {
    return RefTransformerLayer(p, "layer", x, dims, F, c.norm, double{eps});
  };
  CheckModule(&store, m, 19);
  // ln1, ln2 (2 each), qkv, proj, fc1, fc2 (weight and bias each).
  EXPECT_EQ(store.size(), 12);
}

INSTANTIATE_TEST_SUITE_P(
    Norms, TransformerLayerTest,
    ::testing::Values(
        LayerCase{NormPosition::kPreNorm, 2, 3, 6, 2, 10, ops::CausalMask::kYes, false},
        LayerCase{NormPosition::kPostNorm, 2, 3, 6, 2, 10, ops::CausalMask::kYes, false},
        LayerCase{NormPosition::kPreNorm, 2, 4, 6, 3, 7, ops::CausalMask::kNo, true},
        LayerCase{NormPosition::kPostNorm, 2, 4, 6, 3, 7, ops::CausalMask::kNo, true},
        LayerCase{NormPosition::kPreNorm, 1, 2, 3, 1, 0, ops::CausalMask::kYes, false}));

// ------------------------------------------------------------------ embeddings

constexpr int64_t kValidVocab = 11, kPaddedVocab = 16;

TEST(VocabParallelEmbeddingTest, LookupMatchesFloat64Reference) {
  const int64_t H = 5;
  ParameterStore store(0, 1);
  auto emb = VocabParallelEmbedding::Create(&store, "emb", kValidVocab, kPaddedVocab, H, 0.3);
  ASSERT_TRUE(emb.ok()) << emb.status();
  ASSERT_TRUE(store.Allocate(1).ok());
  RandomizeParameters(&store, 20);
  EXPECT_EQ(emb->local_vocab(), kPaddedVocab);
  ModuleUnderTest m;
  m.x_shape = {2, 7};
  m.x_dtype = DType::kI32;
  m.x = {0, 3, 10, 3, 5, 5, 1, 9, 10, 3, 0, 2, 7, 3};  // Repeats: the backward scatter-adds.
  m.y_shape = {14, H};
  m.forward = [&](const StepContext& sc, const TensorView& ids, const TensorView& y) {
    return emb->Forward(sc, ids, y);
  };
  m.backward = [&](const StepContext& sc, const TensorView& ids, const TensorView& dy,
                   const TensorView&) { return emb->Backward(sc, ids, dy); };
  m.reference = [&](const ParamMap& p, const Vec& ids) {
    Vec y(ids.size() * H);
    for (size_t n = 0; n < ids.size(); ++n) {
      for (int64_t h = 0; h < H; ++h) y[n * H + h] = p.at("emb.weight")[static_cast<int64_t>(ids[n]) * H + h];
    }
    return y;
  };
  const Result r = CheckModule(&store, m, 21);
  // The lookup is an exact copy, and rows of unused (or padded) ids get exactly zero gradient.
  EXPECT_EQ(r.y, m.reference(Values(store), m.x));
  for (int64_t v : {4, 6, 8, 11, 12, 15}) {
    for (int64_t h = 0; h < H; ++h) EXPECT_EQ(r.grads[0][v * H + h], 0.0) << v;
  }
  // An id of the padding is out of range.
  ExecContext ec;
  StepContext sc;
  sc.exec = &ec;
  Tensor bad = FromDoubles({1}, DType::kI32, {static_cast<double>(kPaddedVocab)});
  Tensor out = Tensor::Host({1, H}, DType::kF32);
  EXPECT_FALSE(emb->Forward(sc, bad.view(), out.view()).ok());
}

TEST(VocabParallelEmbeddingTest, TiedLogitsMatchFloat64Reference) {
  const int64_t N = 5, H = 7;
  ParameterStore store(0, 1);
  auto emb = VocabParallelEmbedding::Create(&store, "emb", kValidVocab, kPaddedVocab, H, 0.3);
  ASSERT_TRUE(emb.ok()) << emb.status();
  ASSERT_TRUE(store.Allocate(1).ok());
  RandomizeParameters(&store, 22);
  ModuleUnderTest m;
  m.x_shape = {N, H};
  m.y_shape = {N, kPaddedVocab};
  m.x = RandomValues(m.x_shape, 23);
  m.forward = [&](const StepContext& sc, const TensorView& h, const TensorView& logits) {
    return emb->LogitsForward(sc, h, logits);
  };
  m.backward = [&](const StepContext& sc, const TensorView& h, const TensorView& dlogits,
                   const TensorView& dh) { return emb->LogitsBackward(sc, h, dlogits, dh); };
  m.reference = [&](const ParamMap& p, const Vec& h) {
    const Vec& e = p.at("emb.weight");
    Vec y(N * kPaddedVocab, 0.0);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t v = 0; v < kPaddedVocab; ++v) {
        for (int64_t k = 0; k < H; ++k) y[n * kPaddedVocab + v] += h[n * H + k] * e[v * H + k];
      }
    }
    return y;
  };
  CheckModule(&store, m, 24);
}

TEST(VocabParallelEmbeddingTest, LookupAndTiedOutputAccumulateIntoOneTable) {
  // ids -> embedding -> logits through the same table: the table gradient is the sum of the
  // lookup's scatter and the output layer's product.
  const int64_t N = 6, H = 4;
  ParameterStore store(0, 1);
  auto emb = VocabParallelEmbedding::Create(&store, "emb", kValidVocab, kPaddedVocab, H, 0.3);
  ASSERT_TRUE(emb.ok()) << emb.status();
  ASSERT_TRUE(store.Allocate(1).ok());
  RandomizeParameters(&store, 25);
  Tensor hidden = Tensor::Host({N, H}, DType::kF32);
  ModuleUnderTest m;
  m.x_shape = {N};
  m.x_dtype = DType::kI32;
  m.x = {4, 0, 10, 4, 7, 2};
  m.y_shape = {N, kPaddedVocab};
  m.forward = [&](const StepContext& sc, const TensorView& ids, const TensorView& logits) {
    RETURN_IF_ERROR(emb->Forward(sc, ids, hidden.view()));
    return emb->LogitsForward(sc, hidden.view(), logits);
  };
  m.backward = [&](const StepContext& sc, const TensorView& ids, const TensorView& dlogits,
                   const TensorView&) {
    Tensor dh = Tensor::Host({N, H}, DType::kF32);
    RETURN_IF_ERROR(emb->LogitsBackward(sc, hidden.view(), dlogits, dh.view()));
    return emb->Backward(sc, ids, dh.view());
  };
  m.reference = [&](const ParamMap& p, const Vec& ids) {
    const Vec& e = p.at("emb.weight");
    Vec y(N * kPaddedVocab, 0.0);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t id = static_cast<int64_t>(ids[n]);
      for (int64_t v = 0; v < kPaddedVocab; ++v) {
        for (int64_t k = 0; k < H; ++k) y[n * kPaddedVocab + v] += e[id * H + k] * e[v * H + k];
      }
    }
    return y;
  };
  CheckModule(&store, m, 26);
}

TEST(ReplicatedEmbeddingTest, MatchesFloat64Reference) {
  const int64_t rows = 7, H = 3;
  ParameterStore store(0, 1);
  auto emb = ReplicatedEmbedding::Create(&store, "pos", rows, H, 0.3);
  ASSERT_TRUE(emb.ok()) << emb.status();
  ASSERT_TRUE(store.Allocate(1).ok());
  EXPECT_EQ(store.spec(0).split_dim, -1);
  EXPECT_EQ(emb->rows(), rows);
  RandomizeParameters(&store, 27);
  ModuleUnderTest m;
  m.x_shape = {3, 3};
  m.x_dtype = DType::kI32;
  m.x = {0, 1, 2, 2, 6, 0, 5, 2, 1};
  m.y_shape = {9, H};
  m.forward = [&](const StepContext& sc, const TensorView& ids, const TensorView& y) {
    return emb->Forward(sc, ids, y);
  };
  m.backward = [&](const StepContext& sc, const TensorView& ids, const TensorView& dy,
                   const TensorView&) { return emb->Backward(sc, ids, dy); };
  m.reference = [&](const ParamMap& p, const Vec& ids) {
    Vec y(ids.size() * H);
    for (size_t n = 0; n < ids.size(); ++n) {
      for (int64_t h = 0; h < H; ++h) y[n * H + h] = p.at("pos.weight")[static_cast<int64_t>(ids[n]) * H + h];
    }
    return y;
  };
  const Result r = CheckModule(&store, m, 28);
  for (int64_t h = 0; h < H; ++h) {
    EXPECT_EQ(r.grads[0][3 * H + h], 0.0);  // Rows 3 and 4 are never looked up.
    EXPECT_EQ(r.grads[0][4 * H + h], 0.0);
  }
  ExecContext ec;
  StepContext sc;
  sc.exec = &ec;
  Tensor bad = FromDoubles({1}, DType::kI32, {static_cast<double>(rows)});
  Tensor out = Tensor::Host({1, H}, DType::kF32);
  EXPECT_EQ(emb->Forward(sc, bad.view(), out.view()).code(), absl::StatusCode::kOutOfRange);
}

TEST(PaddedVocabSizeTest, RoundsUpToMultipleTimesTp) {
  EXPECT_EQ(PaddedVocabSize(50257, 128, 1), 50304);
  EXPECT_EQ(PaddedVocabSize(50257, 128, 2), 50432);
  EXPECT_EQ(PaddedVocabSize(256, 128, 2), 256);
  EXPECT_EQ(PaddedVocabSize(1, 8, 4), 32);
}

// ------------------------------------------------------------------ cross-entropy

class CrossEntropyTest : public ::testing::TestWithParam<DType> {};

TEST_P(CrossEntropyTest, MatchesFloat64ReferenceWithPaddingAndIgnoredTargets) {
  const int64_t N = 7, V = 13, valid = 10;
  const std::vector<int64_t> targets = {3, -100, 0, 9, 9, 5, -100};
  Tensor targets_t = FromDoubles({N}, GetParam(), Vec(targets.begin(), targets.end()));
  VocabParallelCrossEntropy ce;
  const ops::VocabShard shard{/*vocab_start=*/0, /*valid_vocab=*/valid};
  ParameterStore store(0, 1);  // No parameters.
  ModuleUnderTest m;
  m.x_shape = {N, V};
  m.y_shape = {N};
  m.x = RandomValues(m.x_shape, 29, -3, 3);
  // Padded columns hold large logits: unless masked they would dominate the softmax.
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t v = valid; v < V; ++v) m.x[n * V + v] = 20 + v;
  }
  m.forward = [&](const StepContext& sc, const TensorView& logits, const TensorView& losses) {
    return ce.Forward(sc, logits, targets_t.view(), shard, losses);
  };
  m.backward = [&](const StepContext& sc, const TensorView&, const TensorView& dlosses,
                   const TensorView& dlogits) { return ce.Backward(sc, dlosses, dlogits); };
  m.reference = [&](const ParamMap&, const Vec& x) {
    Vec losses(N, 0.0);
    for (int64_t n = 0; n < N; ++n) {
      if (targets[n] < 0) continue;
      double mx = -1e300;
      for (int64_t v = 0; v < valid; ++v) mx = std::max(mx, x[n * V + v]);
      double z = 0;
      for (int64_t v = 0; v < valid; ++v) z += std::exp(x[n * V + v] - mx);
      losses[n] = std::log(z) + mx - x[n * V + targets[n]];
    }
    return losses;
  };
  const Result r = CheckModule(&store, m, 30);
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] < 0) {
      EXPECT_EQ(r.y[n], 0.0) << n;
    }
    for (int64_t v = 0; v < V; ++v) {
      if (targets[n] < 0 || v >= valid) {
        EXPECT_EQ(r.dx[n * V + v], 0.0) << n << " " << v;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TargetTypes, CrossEntropyTest,
                         ::testing::Values(DType::kI32, DType::kI64));

TEST(CrossEntropyTest, BackwardWithoutForwardFails) {
  VocabParallelCrossEntropy ce;
  ExecContext ec;
  StepContext sc;
  sc.exec = &ec;
  Tensor d = Tensor::Zeros({2}, DType::kF32), dl = Tensor::Zeros({2, 3}, DType::kF32);
  EXPECT_EQ(ce.Backward(sc, d.view(), dl.view()).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(GatherLogitsTest, SerialGatherCopies) {
  ExecContext ec;
  StepContext sc;
  sc.exec = &ec;
  Tensor shard = RandomTensor({3, 5}, DType::kF32, 31);
  Tensor full = Tensor::Zeros({3, 5}, DType::kF32);
  ASSERT_TRUE(GatherLogits(sc, shard.view(), full.view()).ok());
  EXPECT_EQ(ToDoubles(full.view()), ToDoubles(shard.view()));
  Tensor wrong = Tensor::Zeros({3, 4}, DType::kF32);
  EXPECT_EQ(GatherLogits(sc, shard.view(), wrong.view()).code(),
            absl::StatusCode::kInvalidArgument);
}


// ---- Mixed precision (bf16/f16 compute, f32 master weights and gradients).

namespace mixed {

struct Mat {
  int64_t rows, cols;
  Vec v;
  double at(int64_t r, int64_t c) const { return v[r * cols + c]; }
};

// Forward outputs are rounded once to the compute dtype from an f32 computation on the
// compute-dtype operands; parameter gradients are accumulated in f32 from the compute-dtype
// activations, so they match a float64 reference on those same (rounded) operands to f32 accuracy,
// far below the compute dtype's unit roundoff. Checks ColumnParallelLinear, RowParallelLinear (TP
// = 1), the tied logits of VocabParallelEmbedding (f32 logits) and ReplicatedEmbedding.
class MixedPrecisionModulesTest : public ::testing::TestWithParam<DType> {};

TEST_P(MixedPrecisionModulesTest, OutputsRoundOnceAndGradientsAccumulateInF32) {
  const DType dt = GetParam();
  const double u = ::mt::testing::UnitRoundoff(dt);
  const int64_t N = 17, in = 13, out = 9, rows = 7;
  ParameterStore store(0, 1, dt);
  auto col = ColumnParallelLinear::Create(&store, "col", in, out, Bias::kYes, 0.5);
  auto row = RowParallelLinear::Create(&store, "row", out, in, Bias::kYes, 0.5);
  auto word = VocabParallelEmbedding::Create(&store, "word", rows, rows, in, 0.5);
  auto pos = ReplicatedEmbedding::Create(&store, "pos", rows, in, 0.5);
  ASSERT_TRUE(col.ok() && row.ok() && word.ok() && pos.ok());
  ASSERT_TRUE(store.Allocate(5).ok());
  RandomizeParameters(&store, 6);  // Non-zero biases.
  ThreadPool pool(3);
  ExecContext ec;
  ec.pool = &pool;
  ASSERT_TRUE(store.RefreshComputeWeights(ec).ok());
  StepContext sc;
  sc.exec = &ec;
  auto W = [&](const std::string& name) {
    const int h = *store.Find(name);
    const TensorView c = store.compute_value(h);
    EXPECT_EQ(c.dtype, dt);
    return Mat{c.rank() == 2 ? c.dim(0) : 1, c.dim(-1), ToDoubles(c)};
  };
  auto G = [&](const std::string& name) { return ToDoubles(store.grad(*store.Find(name))); };
  // Bounds: f32 accumulation over K terms relative to sum |terms| (4 sqrt(K + 2) u_f32), plus one
  // rounding to the output dtype where the output is 16-bit.
  auto bound = [&](int64_t k, double out_u) { return out_u + 4 * std::sqrt(k + 2.0) * kU; };
  auto check = [&](const Vec& got, const Vec& want, const Vec& magnitude, double rel,
                   const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_LE(std::fabs(got[i] - want[i]), rel * magnitude[i] + 1e-30) << what << " " << i;
    }
  };

  // Column then row linear layer, forward and backward twice (accumulating).
  Tensor x = RandomTensor({N, in}, dt, 11);
  Tensor h = Tensor::Host({N, out}, dt), y = Tensor::Host({N, in}, dt);
  ASSERT_TRUE(col->Forward(sc, x.view(), h.view()).ok());
  ASSERT_TRUE(row->Forward(sc, h.view(), y.view()).ok());
  const Mat xm{N, in, ToDoubles(x.view())}, hm{N, out, ToDoubles(h.view())};
  const Mat wc = W("col.weight"), bc = W("col.bias"), wr = W("row.weight"), br = W("row.bias");
  Vec want(N * out), mag(N * out);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = 0; j < out; ++j) {
      double s = bc.v[j], a = std::fabs(bc.v[j]);
      for (int64_t i = 0; i < in; ++i) {
        s += xm.at(n, i) * wc.at(i, j);
        a += std::fabs(xm.at(n, i) * wc.at(i, j));
      }
      want[n * out + j] = s;
      mag[n * out + j] = a;
    }
  }
  check(hm.v, want, mag, bound(in + 1, u), "column forward");
  Tensor dy = RandomTensor({N, in}, dt, 12);
  Tensor dh = Tensor::Host({N, out}, dt), dx = Tensor::Host({N, in}, dt);
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_TRUE(row->Backward(sc, h.view(), dy.view(), dh.view()).ok());
    ASSERT_TRUE(col->Backward(sc, x.view(), dh.view(), dx.view()).ok());
  }
  EXPECT_EQ(dh.dtype(), dt);
  const Mat dym{N, in, ToDoubles(dy.view())}, dhm{N, out, ToDoubles(dh.view())};
  // dh = dy W_row^T (16-bit output).
  want.assign(N * out, 0);
  mag.assign(N * out, 0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = 0; j < out; ++j) {
      for (int64_t i = 0; i < in; ++i) {
        want[n * out + j] += dym.at(n, i) * wr.at(j, i);
        mag[n * out + j] += std::fabs(dym.at(n, i) * wr.at(j, i));
      }
    }
  }
  check(dhm.v, want, mag, bound(in, u), "row input gradient");
  // Weight and bias gradients: 2 x (activation^T gradient) accumulated in f32: no 16-bit rounding.
  auto weight_grad = [&](const Mat& a, const Mat& d, Vec* w, Vec* m) {
    w->assign(a.cols * d.cols, 0);
    m->assign(a.cols * d.cols, 0);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t i = 0; i < a.cols; ++i) {
        for (int64_t j = 0; j < d.cols; ++j) {
          (*w)[i * d.cols + j] += 2 * a.at(n, i) * d.at(n, j);
          (*m)[i * d.cols + j] += 2 * std::fabs(a.at(n, i) * d.at(n, j));
        }
      }
    }
  };
  auto bias_grad = [&](const Mat& d, Vec* w, Vec* m) {
    w->assign(d.cols, 0);
    m->assign(d.cols, 0);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t j = 0; j < d.cols; ++j) {
        (*w)[j] += 2 * d.at(n, j);
        (*m)[j] += 2 * std::fabs(d.at(n, j));
      }
    }
  };
  weight_grad(hm, dym, &want, &mag);
  check(G("row.weight"), want, mag, bound(2 * N, 0), "row weight gradient");
  bias_grad(dym, &want, &mag);
  check(G("row.bias"), want, mag, bound(2 * N, 0), "row bias gradient");
  weight_grad(xm, dhm, &want, &mag);
  check(G("col.weight"), want, mag, bound(2 * N, 0), "column weight gradient");
  bias_grad(dhm, &want, &mag);
  check(G("col.bias"), want, mag, bound(2 * N, 0), "column bias gradient");

  // Tied logits in f32 from the 16-bit hidden state and table; f32 logit gradients are rounded to
  // the compute dtype once (logits.float()'s backward), then accumulate into the f32 table grad.
  Tensor logits = Tensor::Host({N, rows}, DType::kF32);
  ASSERT_TRUE(word->LogitsForward(sc, x.view(), logits.view()).ok());
  const Mat e = W("word.weight");
  want.assign(N * rows, 0);
  mag.assign(N * rows, 0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < in; ++i) {
        want[n * rows + r] += xm.at(n, i) * e.at(r, i);
        mag[n * rows + r] += std::fabs(xm.at(n, i) * e.at(r, i));
      }
    }
  }
  check(ToDoubles(logits.view()), want, mag, bound(in, 0), "f32 logits");
  Tensor dlogits = RandomTensor({N, rows}, DType::kF32, 13);
  ASSERT_TRUE(word->LogitsBackward(sc, x.view(), dlogits.view(), dx.view()).ok());
  const Mat dl{N, rows, ToDoubles(FromDoubles({N, rows}, dt, ToDoubles(dlogits.view())).view())};
  want.assign(rows * in, 0);
  mag.assign(rows * in, 0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < in; ++i) {
        want[r * in + i] += dl.at(n, r) * xm.at(n, i);
        mag[r * in + i] += std::fabs(dl.at(n, r) * xm.at(n, i));
      }
    }
  }
  check(G("word.weight"), want, mag, bound(N, 0), "tied table gradient");

  // Embedding lookups copy 16-bit rows; a 16-bit gradient scatter-adds into the f32 table grad.
  Tensor ids = FromDoubles({N}, DType::kI32, [&] {
    Vec v(N);
    for (int64_t n = 0; n < N; ++n) v[n] = static_cast<double>((n * 5 + 1) % rows);
    return v;
  }());
  Tensor rows_out = Tensor::Host({N, in}, dt);
  ASSERT_TRUE(pos->Forward(sc, ids.view(), rows_out.view()).ok());
  const Mat p = W("pos.weight");
  const Vec got_rows = ToDoubles(rows_out.view());
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = 0; i < in; ++i) {
      ASSERT_EQ(got_rows[n * in + i], p.at((n * 5 + 1) % rows, i)) << n << " " << i;
    }
  }
  ASSERT_TRUE(pos->Backward(sc, ids.view(), dy.view()).ok());
  want.assign(rows * in, 0);
  mag.assign(rows * in, 0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = 0; i < in; ++i) {
      want[((n * 5 + 1) % rows) * in + i] += dym.at(n, i);
      mag[((n * 5 + 1) % rows) * in + i] += std::fabs(dym.at(n, i));
    }
  }
  check(G("pos.weight"), want, mag, bound(N, 0), "embedding gradient");

  // Activations of another dtype than the compute dtype are refused with a clear error.
  Tensor x32 = RandomTensor({2, 3, in}, DType::kF32, 14);
  AttentionConfig ac;
  ac.hidden = in;
  ac.heads = 1;
  ParameterStore other(0, 1, dt);
  auto att = ParallelSelfAttention::Create(&other, "att", ac);
  ASSERT_TRUE(att.ok() && other.Allocate(1).ok());
  Tensor y32 = Tensor::Host({2, 3, in}, DType::kF32);
  const absl::Status s = att->Forward(sc, x32.view(), nullptr, y32.view());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("(the compute dtype)"), std::string::npos) << s;
}

INSTANTIATE_TEST_SUITE_P(HalfTypes, MixedPrecisionModulesTest,
                         ::testing::Values(DType::kBF16, DType::kF16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace mixed

}  // namespace
}  // namespace nn
}  // namespace mt

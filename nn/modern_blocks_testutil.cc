#include "nn/modern_blocks_testutil.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/ops/testutil.h"
#include "core/thread_pool.h"

namespace mt {
namespace nn {
namespace modern_testing {

using ::mt::testing::AllClose;
using ::mt::testing::FromDoubles;
using ::mt::testing::NumericalGradient;
using ::mt::testing::RandomTensor;
using ::mt::testing::ToDoubles;

namespace {

const double kU = ::mt::testing::UnitRoundoff(DType::kF32);
const double kForwardTol = 128 * kU;
const double kGradientTol = 512 * kU;

}  // namespace

double Peak(const Vec& v) {
  double m = 0;
  for (double e : v) m = std::max(m, std::fabs(e));
  return m;
}

// Accumulated row by row (axpy order).
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

namespace {

// Rotate-half rotary embedding of one head's vector v [D] at position `pos`.
void RotateHalf(double* v, int64_t D, int64_t pos) {
  for (int64_t i = 0; i < D / 2; ++i) {
    const double angle = pos * std::pow(kRotaryBase, -2.0 * i / D);
    const double a = v[i], b = v[i + D / 2];
    v[i] = a * std::cos(angle) - b * std::sin(angle);
    v[i + D / 2] = b * std::cos(angle) + a * std::sin(angle);
  }
}

}  // namespace

void PrintTo(const AttnShape& a, std::ostream* os) {
  *os << "{B=" << a.B << " T=" << a.T << " H=" << a.H << " heads=" << a.heads
      << (a.causal ? " causal" : " bidirectional") << (a.rotary ? " rotary" : "")
      << (a.bias ? " biases}" : "}");
}

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

void Randomize(ParameterStore* store, uint64_t seed) {
  for (int i = 0; i < store->size(); ++i) {
    const bool gain = store->spec(i).init == Init::kOnes;
    const Tensor r = RandomTensor(store->value(i).shape, DType::kF32, seed + 7 * i,
                                  gain ? 0.5 : -0.5, gain ? 1.5 : 0.5);
    ::mt::testing::WriteDoubles(ToDoubles(r.view()), store->value(i));
  }
}

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
  const StepContext sc = StepContext::Train(&ec);
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

}  // namespace modern_testing
}  // namespace nn
}  // namespace mt

#include "nn/module_testutil.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/ops/testutil.h"
#include "core/thread_pool.h"

namespace mt {
namespace nn {
namespace testing {

using ::mt::testing::AllClose;
using ::mt::testing::MaxAbs;
using ::mt::testing::NumericalGradient;
using ::mt::testing::ToDoubles;

namespace {
const double kU = ::mt::testing::UnitRoundoff(DType::kF32);
// Bounds relative to the largest magnitude of the compared quantity. The modules chain a few f32
// reductions of length <= ~40 (plus exp/log/tanh); the observed error is below 16 u (forward) and
// 32 u (gradients), so these bounds leave a margin of 8x and 16x, while a wrong formula is off by
// O(1). The central differences (h = 1e-6 on a float64 reference) add O(h^2 + 1e-16 / h) ~ 1e-10.
const double kForwardTol = 128 * kU;   // ~7.6e-6
const double kGradientTol = 512 * kU;  // ~3.1e-5
}  // namespace

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

namespace {
Vec Plus(const Vec& a, const Vec& b) {
  Vec c(a.size());
  for (size_t i = 0; i < a.size(); ++i) c[i] = a[i] + b[i];
  return c;
}
}  // namespace

Vec RefMlp(const ParamMap& p, const std::string& prefix, const Vec& x, int64_t N, int64_t H,
           int64_t F) {
  Vec a = RefLinear(x, N, H, F, p.at(prefix + ".fc1.weight"), &p.at(prefix + ".fc1.bias"));
  for (double& v : a) v = ::mt::testing::GeluReference(v);
  return RefLinear(a, N, F, H, p.at(prefix + ".fc2.weight"), &p.at(prefix + ".fc2.bias"));
}

Vec RefAttention(const ParamMap& p, const std::string& prefix, const Vec& x, const AttnDims& a) {
  const int64_t B = a.B, T = a.T, H = a.H, NH = a.heads, D = H / NH;
  const int64_t G = a.groups > 0 ? a.groups : NH, per_group = NH / G, W = (NH + 2 * G) * D;
  const Vec qkv =
      RefLinear(x, B * T, H, W, p.at(prefix + ".qkv.weight"), &p.at(prefix + ".qkv.bias"));
  // which = 0: head h's query; 1, 2: the key and value of its group h / per_group.
  auto at = [&](int64_t b, int64_t t, int64_t h, int64_t which, int64_t d) {
    const int64_t col = which == 0 ? h % per_group : per_group + which - 1;
    return qkv[(b * T + t) * W + ((h / per_group) * (per_group + 2) + col) * D + d];
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
    return ::mt::testing::LayerNormReference(v, p.at(prefix + "." + name + ".weight"),
                                             p.at(prefix + "." + name + ".bias"), eps)
        .y;
  };
  if (norm == NormPosition::kPreNorm) {
    const Vec x1 = Plus(x, RefAttention(p, prefix + ".attention", ln("ln1", x), a));
    return Plus(x1, RefMlp(p, prefix + ".mlp", ln("ln2", x1), N, H, F));
  }
  const Vec x1 = ln("ln1", Plus(x, RefAttention(p, prefix + ".attention", x, a)));
  return ln("ln2", Plus(x1, RefMlp(p, prefix + ".mlp", x1, N, H, F)));
}

Vec RefLookup(const Vec& table, const Vec& ids, int64_t H) {
  Vec y(ids.size() * H);
  for (size_t n = 0; n < ids.size(); ++n) {
    for (int64_t h = 0; h < H; ++h) y[n * H + h] = table[static_cast<int64_t>(ids[n]) * H + h];
  }
  return y;
}

Vec RefTiedLogits(const Vec& table, const Vec& h, int64_t N, int64_t H, int64_t V) {
  Vec y(N * V, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t v = 0; v < V; ++v) {
      for (int64_t k = 0; k < H; ++k) y[n * V + v] += h[n * H + k] * table[v * H + k];
    }
  }
  return y;
}

PaddingMask MakePaddingMask(int64_t B, int64_t T) {
  PaddingMask mask{std::vector<int32_t>(B * T, 1), Tensor::Host({B, T}, DType::kI32)};
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = T - 1 - (b % std::max<int64_t>(1, T - 1)); t < T; ++t) {
      mask.values[b * T + t] = 0;
    }
  }
  std::copy(mask.values.begin(), mask.values.end(), mask.tensor.data_as<int32_t>());
  return mask;
}

// ---- the harness

namespace {

Tensor NaNs(const Shape& shape) { return ::mt::testing::NaNTensor(shape, DType::kF32); }

// Forward, Backward and a second Backward on `exec`; the second must rewrite dx and double every
// gradient. Records a failed call as a test failure and gives nullopt.
std::optional<ModuleResult> RunOnce(ParameterStore* store, const ModuleUnderTest& m,
                                    const ExecContext* exec, const Tensor& x, const Tensor& dy) {
  const bool differentiable = m.x_dtype == DType::kF32;
  const StepContext sc = StepContext::Train(exec);
  store->ZeroGrads();
  Tensor y = NaNs(m.y_shape);
  absl::Status s = m.forward(sc, x.view(), y.view());
  if (!s.ok()) {
    ADD_FAILURE() << "Forward failed: " << s;
    return std::nullopt;
  }
  Tensor dx = differentiable ? NaNs(m.x_shape) : Tensor();
  s = m.backward(sc, x.view(), dy.view(), dx.view());
  if (!s.ok()) {
    ADD_FAILURE() << "Backward failed: " << s;
    return std::nullopt;
  }
  ModuleResult r;
  r.y = ToDoubles(y.view());
  if (differentiable) r.dx = ToDoubles(dx.view());
  for (int i = 0; i < store->size(); ++i) r.grads.push_back(ToDoubles(store->grad(i)));

  // A second Backward (same saved forward, same dy) rewrites dx and doubles every gradient.
  Tensor dx2 = differentiable ? NaNs(m.x_shape) : Tensor();
  s = m.backward(sc, x.view(), dy.view(), dx2.view());
  if (!s.ok()) {
    ADD_FAILURE() << "second Backward failed: " << s;
    return std::nullopt;
  }
  if (differentiable) {
    EXPECT_TRUE(AllClose(dx2.view(), r.dx, 0, 4 * kU * MaxAbs(r.dx))) << "second dx";
  }
  for (int i = 0; i < store->size(); ++i) {
    Vec twice = r.grads[i];
    for (double& g : twice) g *= 2;
    EXPECT_TRUE(AllClose(store->grad(i), twice, 0, 8 * kU * MaxAbs(twice)))
        << store->spec(i).name << ": Backward must accumulate";
  }
  return r;
}

// |actual - expected| <= tol * max|expected|, and expected not degenerate (max > 1e-3).
void ExpectNear(const Vec& actual, const Vec& expected, double tol, const std::string& what) {
  EXPECT_TRUE(AllClose(actual, expected, 0, tol * MaxAbs(expected))) << what;
  EXPECT_GT(MaxAbs(expected), 1e-3) << "degenerate test: " << what << " near zero";
}

}  // namespace

std::optional<ModuleResult> CheckModule(ParameterStore* store, const ModuleUnderTest& m,
                                        uint64_t seed) {
  const ParamMap params = Values(*store);
  const Tensor x = ::mt::testing::FromDoubles(m.x_shape, m.x_dtype, m.x);
  const Vec w = RandomValues(m.y_shape, seed + 1);
  const Tensor dy = ::mt::testing::FromDoubles(m.y_shape, DType::kF32, w);

  ThreadPool pool(3);
  ExecContext serial, threaded;
  threaded.pool = &pool;
  std::optional<ModuleResult> runs[2];
  for (int run = 0; run < 2; ++run) {
    SCOPED_TRACE(run == 0 ? "null pool" : "ThreadPool(3)");
    runs[run] = RunOnce(store, m, run == 0 ? &serial : &threaded, x, dy);
    if (!runs[run].has_value()) return std::nullopt;
  }
  // The thread count changes nothing beyond float rounding.
  const ModuleResult& r0 = *runs[0];
  const ModuleResult& r = *runs[1];
  EXPECT_TRUE(AllClose(r.y, r0.y, 0, kForwardTol * MaxAbs(r0.y)));
  EXPECT_TRUE(AllClose(r.dx, r0.dx, 0, kForwardTol * MaxAbs(r0.dx)));
  for (int i = 0; i < store->size(); ++i) {
    EXPECT_TRUE(AllClose(r.grads[i], r0.grads[i], 0, kForwardTol * MaxAbs(r0.grads[i])))
        << store->spec(i).name;
  }

  // Forward against the float64 reference; gradients against central differences of
  // L = sum(w * reference(params, x)).
  ExpectNear(r.y, m.reference(params, m.x), kForwardTol, "forward");
  auto loss = [&](const ParamMap& p, const Vec& xv) {
    const Vec y = m.reference(p, xv);
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += w[i] * y[i];
    return l;
  };
  if (m.x_dtype == DType::kF32) {
    ExpectNear(r.dx, NumericalGradient([&](const Vec& xv) { return loss(params, xv); }, m.x),
               kGradientTol, "input gradient");
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
    ExpectNear(r.grads[i], numeric, kGradientTol, "gradient of " + name);
  }
  return r;
}

bool AllocateRandomized(ParameterStore* store, uint64_t seed) {
  const absl::Status s = store->Allocate(1);
  if (!s.ok()) {
    ADD_FAILURE() << "ParameterStore::Allocate failed: " << s;
    return false;
  }
  RandomizeParameters(store, seed);
  return true;
}

void RandomizeParameters(ParameterStore* store, uint64_t seed) {
  for (int i = 0; i < store->size(); ++i) {
    const bool gain = store->spec(i).init == Init::kOnes;
    const Tensor r = ::mt::testing::RandomTensor(store->value(i).shape, DType::kF32, seed + 101 * i,
                                                 gain ? 0.5 : -0.5, gain ? 1.5 : 0.5);
    ::mt::testing::WriteDoubles(ToDoubles(r.view()), store->value(i));
  }
}

ParamMap Values(const ParameterStore& store) {
  ParamMap m;
  for (int i = 0; i < store.size(); ++i) m[store.spec(i).name] = ToDoubles(store.value(i));
  return m;
}

Vec RandomValues(const Shape& shape, uint64_t seed, double lo, double hi) {
  return ToDoubles(::mt::testing::RandomTensor(shape, DType::kF32, seed, lo, hi).view());
}

}  // namespace testing
}  // namespace nn
}  // namespace mt

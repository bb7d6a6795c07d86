// The mixture-of-experts layer at TP = 1: the routing on a case computed by hand (top-k, gates,
// dispatch order, the load-balancing and z losses, capacity dropping), the router's gradient
// against central differences in float64, and the whole layer (router, dispatch, experts,
// combine, auxiliary losses) against an independent float64 implementation: its output, and its
// input and parameter gradients against central differences of that implementation. Special
// cases: an expert that receives no token (zero gradient, no error), every token routed to one
// expert, and capacity dropping.
#include "models/variants/moe/moe_mlp.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/testutil.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"
#include "models/variants/moe/routing.h"
#include "nn/modern_blocks_testutil.h"

namespace mt {
namespace models {
namespace moe {
namespace {

using ::mt::testing::NumericalGradient;
using nn::modern_testing::MatMul;
using nn::modern_testing::Params;
using nn::modern_testing::SwiGluMlpRef;
using nn::modern_testing::Vec;

TEST(MoeRoutingTest, HandComputedCase) {
  // Token 0: p = (1, 2, 5) / 8; token 1: p = (3, 3, 2) / 8 (a tie: the lower expert first).
  const double l[] = {std::log(1.0), std::log(2.0), std::log(5.0),
                      std::log(3.0), std::log(3.0), std::log(2.0)};
  RouterOptions o{3, 2, /*aux_coeff=*/0.1, /*z_coeff=*/0.01, /*capacity_factor=*/0};
  Routing r = Route(l, 2, o);
  EXPECT_EQ(r.chosen, (std::vector<int>{2, 1, 0, 1}));
  EXPECT_NEAR(r.gate[0], 5.0 / 7, 1e-15);
  EXPECT_NEAR(r.gate[1], 2.0 / 7, 1e-15);
  EXPECT_NEAR(r.gate[2], 0.5, 1e-15);
  EXPECT_EQ(r.routed, (std::vector<int64_t>{1, 2, 1}));
  // f = (1, 2, 1) / 4, P = (0.25, 0.3125, 0.4375): aux = 0.1 * 3 * 0.328125.
  EXPECT_NEAR(r.aux_loss, 0.0984375, 1e-15);
  EXPECT_NEAR(r.z_loss, 0.01 * std::log(8.0) * std::log(8.0), 1e-14);
  // Rows by expert, then token: e0 <- (t1), e1 <- (t0, t1), e2 <- (t0).
  EXPECT_EQ(r.offsets, (std::vector<int64_t>{0, 1, 3, 4}));
  EXPECT_EQ(r.token_of_row, (std::vector<int32_t>{1, 0, 1, 0}));
  EXPECT_EQ(r.row, (std::vector<int64_t>{3, 1, 0, 2}));
  EXPECT_EQ(r.dropped(), 0);
  // Capacity ceil(0.5 * 2 * 2 / 3) = 1: expert 1 keeps token 1 (p 3/8 over 2/8).
  o.capacity_factor = 0.5;
  r = Route(l, 2, o);
  EXPECT_EQ(r.dropped(), 1);
  EXPECT_EQ(r.row, (std::vector<int64_t>{2, -1, 0, 1}));
  EXPECT_EQ(r.token_of_row, (std::vector<int32_t>{1, 1, 0}));
  EXPECT_EQ(r.routed, (std::vector<int64_t>{1, 2, 1}));  // Counted before dropping.
  EXPECT_NEAR(r.aux_loss, 0.0984375, 1e-15);
}

TEST(MoeRoutingTest, RouterGradientMatchesCentralDifferences) {
  const int64_t N = 5;
  const RouterOptions o{4, 2, 0.3, 0.05, 0};
  const Vec l0 = nn::modern_testing::Uniform({N, 4}, 11, -2, 2);
  const Vec dgate = nn::modern_testing::Uniform({N, 2}, 12, -1, 1);
  const double scale = 2.5;
  auto objective = [&](const Vec& l) {
    const Routing r = Route(l.data(), N, o);
    double j = scale * (r.aux_loss + r.z_loss);
    for (int64_t s = 0; s < N * 2; ++s) j += dgate[s] * r.gate[s];
    return j;
  };
  const Vec num = NumericalGradient(objective, l0, 1e-6);
  const Routing r = Route(l0.data(), N, o);
  std::vector<float> dl(N * 4);
  RouterBackward(r, o, dgate.data(), scale, dl.data());
  for (size_t i = 0; i < dl.size(); ++i) EXPECT_NEAR(dl[i], num[i], 2e-7) << i;
}

// ---- the layer against float64

constexpr int64_t kN = 6, kH = 8, kF = 6;

struct RefOut {
  Vec y;
  double aux = 0, z = 0;
};

// The layer in float64, written from the definitions (not through routing.cc).
RefOut ReferenceMoe(const Params& p, const Vec& x, const RouterOptions& o) {
  const int E = o.experts, k = o.topk;
  const Vec logits = MatMul(x, kN, kH, p.at("mlp.router.weight"), E);
  Vec probs(kN * E), lse(kN);
  std::vector<std::vector<std::pair<int64_t, double>>> slots(E);  // (token, gate) per expert
  std::vector<double> count(E, 0);
  for (int64_t t = 0; t < kN; ++t) {
    double m = *std::max_element(&logits[t * E], &logits[t * E] + E), s = 0;
    for (int e = 0; e < E; ++e) s += std::exp(logits[t * E + e] - m);
    lse[t] = m + std::log(s);
    for (int e = 0; e < E; ++e) probs[t * E + e] = std::exp(logits[t * E + e] - lse[t]);
    std::vector<int> idx(E);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(),
                     [&](int a, int b) { return probs[t * E + a] > probs[t * E + b]; });
    double sum = 0;
    for (int j = 0; j < k; ++j) sum += probs[t * E + idx[j]];
    for (int j = 0; j < k; ++j) {
      slots[idx[j]].push_back({t, probs[t * E + idx[j]] / sum});
      count[idx[j]] += 1;
    }
  }
  RefOut out;
  out.y.assign(kN * kH, 0.0);
  const double cap = o.capacity_factor > 0 ? std::ceil(o.capacity_factor * kN * k / E) : 1e9;
  for (int e = 0; e < E; ++e) {
    auto& s = slots[e];
    std::stable_sort(s.begin(), s.end(), [&](const auto& a, const auto& b) {
      return probs[a.first * E + e] > probs[b.first * E + e];
    });
    if (s.size() > cap) s.resize(static_cast<size_t>(cap));
    for (const auto& [t, gate] : s) {
      const Vec xt(&x[t * kH], &x[t * kH] + kH);
      const Vec o_t = SwiGluMlpRef(p, absl::StrCat("mlp.experts.", e), xt, 1, kH, kF);
      for (int64_t h = 0; h < kH; ++h) out.y[t * kH + h] += gate * o_t[h];
    }
    double mean_p = 0;
    for (int64_t t = 0; t < kN; ++t) mean_p += probs[t * E + e] / kN;
    out.aux += o.aux_coeff * E * (count[e] / (kN * k)) * mean_p;
  }
  for (int64_t t = 0; t < kN; ++t) out.z += o.z_coeff * lse[t] * lse[t] / kN;
  return out;
}

struct LayerCase {
  std::string name;
  RouterOptions options;
  double x_lo = -1, x_hi = 1;
  int starved = -1;   // An expert whose router column makes every logit very negative (x > 0).
  int favoured = -1;  // An expert whose router column wins every token (x > 0).
};

void PrintTo(const LayerCase& c, std::ostream* os) { *os << c.name; }

// What the case is about: an expert with no tokens (and a zero gradient), every token on one
// expert, dropped slots.
void ExpectSpecialCase(const LayerCase& c, const MoeMlp& m, const nn::ParameterStore& store) {
  if (c.starved >= 0) {
    EXPECT_EQ(m.routing().routed[c.starved], 0);
    for (const char* w : {"gate", "up", "down"}) {
      const int h = *store.Find(absl::StrCat("mlp.experts.", c.starved, ".", w, ".weight"));
      EXPECT_EQ(::mt::testing::MaxAbs(::mt::testing::ToDoubles(store.grad(h))), 0.0) << w;
    }
  }
  if (c.favoured >= 0) {
    EXPECT_EQ(m.routing().routed[c.favoured], kN);
  }
  if (c.options.capacity_factor > 0) {
    EXPECT_GT(m.routing().dropped(), 0);
  }
}

class MoeMlpTest : public ::testing::TestWithParam<LayerCase> {};

TEST_P(MoeMlpTest, MatchesFloat64AndItsGradients) {
  const LayerCase& c = GetParam();
  const RouterOptions& o = c.options;
  nn::ParameterStore store(0, 1);
  nn::TransformerLayerConfig config;
  config.hidden = kH;
  config.ffn = kF;
  auto stats = std::make_shared<MoeStats>();
  auto mlp = MoeMlp::Create(&store, "mlp", config, o, stats);
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  ASSERT_TRUE(store.Allocate(3).ok());
  nn::modern_testing::Randomize(&store, 5);
  const int router = *store.Find("mlp.router.weight");
  float* wr = store.value(router).data_as<float>();
  for (int64_t h = 0; h < kH; ++h) {
    if (c.starved >= 0) wr[h * o.experts + c.starved] = -4;
    if (c.favoured >= 0) wr[h * o.experts + c.favoured] = 4;
  }
  Params p;
  for (int i = 0; i < store.size(); ++i) {
    p[store.spec(i).name] = ::mt::testing::ToDoubles(store.value(i));
  }
  const Vec x = nn::modern_testing::Uniform({kN, kH}, 7, c.x_lo, c.x_hi);
  const Vec dy = nn::modern_testing::Uniform({kN, kH}, 8, -1, 1);
  const double scale = 3.0;  // The model's loss_scale: scales the auxiliary losses' gradient.
  const Tensor xt = ::mt::testing::FromDoubles({kN, kH}, DType::kF32, x);
  const Tensor dyt = ::mt::testing::FromDoubles({kN, kH}, DType::kF32, dy);
  const Tensor yt = ::mt::testing::NaNTensor({kN, kH}, DType::kF32);
  const Tensor dxt = ::mt::testing::NaNTensor({kN, kH}, DType::kF32);
  ThreadPool pool(2);
  ExecContext ec{&pool};
  const nn::StepContext sc = nn::StepContext::Train(&ec);
  store.ZeroGrads();
  stats->loss_scale = scale;
  ASSERT_TRUE((*mlp)->Forward(sc, xt.view(), yt.view()).ok());
  ASSERT_TRUE((*mlp)->Backward(sc, dyt.view(), dxt.view()).ok());

  const RefOut ref = ReferenceMoe(p, x, o);
  const Vec y = ::mt::testing::ToDoubles(yt.view());
  const double ypeak = ::mt::testing::MaxAbs(ref.y);
  ASSERT_GT(ypeak, 0.1);
  for (int64_t i = 0; i < kN * kH; ++i) EXPECT_NEAR(y[i], ref.y[i], 1e-5 * ypeak) << i;
  EXPECT_NEAR(stats->aux_loss(), ref.aux, 1e-6 * (1 + ref.aux));
  EXPECT_NEAR(stats->z_loss(), ref.z, 1e-6 * (1 + ref.z));

  // The objective whose gradient Backward computes: <dy, y> + scale * (aux + z).
  auto objective = [&](const Params& q, const Vec& xx) {
    const RefOut r = ReferenceMoe(q, xx, o);
    double j = scale * (r.aux + r.z);
    for (int64_t i = 0; i < kN * kH; ++i) j += dy[i] * r.y[i];
    return j;
  };
  auto expect_close = [](const Vec& got, const Vec& want, const std::string& what) {
    const double peak = ::mt::testing::MaxAbs(want);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-4 * peak + 1e-7) << what << "[" << i << "]";
    }
  };
  expect_close(::mt::testing::ToDoubles(dxt.view()),
               NumericalGradient([&](const Vec& xx) { return objective(p, xx); }, x, 1e-6), "dx");
  for (int i = 0; i < store.size(); ++i) {
    const std::string& name = store.spec(i).name;
    const Vec grad = ::mt::testing::ToDoubles(store.grad(i));
    const Vec num = NumericalGradient(
        [&](const Vec& w) {
          Params q = p;
          q[name] = w;
          return objective(q, x);
        },
        p[name], 1e-6);
    expect_close(grad, num, name);
  }
  ExpectSpecialCase(c, **mlp, store);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, MoeMlpTest,
    ::testing::Values(LayerCase{"top2", {4, 2, 0.1, 0.01, 0}}, LayerCase{"top1", {4, 1, 0.1, 0, 0}},
                      LayerCase{"top3_of_3", {3, 3, 0.1, 0.02, 0}},
                      LayerCase{"zero_tokens", {4, 2, 0.1, 0.01, 0}, 0.1, 1, /*starved=*/2},
                      LayerCase{"all_to_one", {4, 1, 0.1, 0.01, 0}, 0.1, 1, -1, /*favoured=*/1},
                      LayerCase{"capacity", {4, 1, 0.1, 0.01, 1.0}, 0.1, 1, -1, 1}),
    [](const ::testing::TestParamInfo<LayerCase>& info) { return info.param.name; });

TEST(MoeMlpCreateTest, RefusesTopkAboveExperts) {
  nn::ParameterStore store(0, 1);
  nn::TransformerLayerConfig config;
  config.hidden = kH;
  config.ffn = kF;
  auto m = MoeMlp::Create(&store, "mlp", config, {2, 3, 0, 0, 0}, std::make_shared<MoeStats>());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moe
}  // namespace models
}  // namespace mt

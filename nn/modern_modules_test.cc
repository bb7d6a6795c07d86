// RmsNormModule, SwiGluMLP and ParallelSelfAttention with rotary embeddings (with and without
// biases) at TP = 1 against float64 references, through modern_blocks_testutil's gradient check;
// their parameters (names, splits, init) and configuration errors.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/testutil.h"
#include "core/status.h"
#include "gtest/gtest.h"
#include "nn/attention.h"
#include "nn/context.h"
#include "nn/mlp.h"
#include "nn/modern_blocks_testutil.h"
#include "nn/norm.h"
#include "nn/parameter.h"

namespace mt {
namespace nn {
namespace modern_testing {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::FromDoubles;
using ::mt::testing::RandomTensor;
using ::mt::testing::ToDoubles;

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

}  // namespace
}  // namespace modern_testing
}  // namespace nn
}  // namespace mt

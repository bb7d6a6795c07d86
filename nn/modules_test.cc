// Float64 gradient checks of the linear layers, LayerNorm, the MLP, self-attention and the
// transformer layer at TP = 1 (module_testutil.h describes the checks); the vocabulary modules are
// in vocab_modules_test.cc, mixed precision in mixed_precision_test.cc.
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/ops/testutil.h"
#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"
#include "nn/attention.h"
#include "nn/context.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "nn/module_testutil.h"
#include "nn/parameter.h"
#include "nn/transformer.h"

namespace mt {
namespace nn {
namespace {

using testing::AllocateRandomized;
using testing::AttnDims;
using testing::CheckModule;
using testing::MakePaddingMask;
using testing::ModuleResult;
using testing::ModuleUnderTest;
using testing::PaddingMask;
using testing::ParamMap;
using testing::RandomValues;
using testing::RefAttention;
using testing::RefLinear;
using testing::RefMlp;
using testing::RefTransformerLayer;
using testing::Vec;

// ------------------------------------------------------------------ the harness itself

// A module whose Forward fails: CheckModule records the status as a test failure and returns
// nullopt, instead of crashing or comparing NaNs.
TEST(CheckModuleTest, AFailingForwardFailsTheTest) {
  ParameterStore store(0, 1);
  ASSERT_TRUE(store.Allocate(1).ok());
  ModuleUnderTest m;
  m.x_shape = m.y_shape = {2};
  m.x = {1, 2};
  m.forward = [](const StepContext&, const TensorView&, const TensorView&) {
    return absl::InvalidArgumentError("MyModule: x is bad");
  };
  m.backward = [](const StepContext&, const TensorView&, const TensorView&, const TensorView&) {
    return absl::OkStatus();
  };
  m.reference = [](const ParamMap&, const Vec& x) { return x; };
  std::optional<ModuleResult> r;
  EXPECT_NONFATAL_FAILURE(r = CheckModule(&store, m, 1),
                          "Forward failed: INVALID_ARGUMENT: MyModule: x is bad");
  EXPECT_FALSE(r.has_value());
}

// ------------------------------------------------------------------ linear layers

enum class LinearKind { kColumn, kRow };

struct LinearCase {
  LinearKind kind;
  int64_t n, in, out;
  Bias bias;
};

void PrintTo(const LinearCase& c, std::ostream* os) {
  *os << (c.kind == LinearKind::kColumn ? "{column" : "{row") << " N=" << c.n << " in=" << c.in
      << " out=" << c.out << (c.bias == Bias::kYes ? " bias}" : " no bias}");
}

// A ColumnParallelLinear or RowParallelLinear (TP = 1: both are y = x W + b) against RefLinear;
// parameters from `seed`, the input from seed + 1, the loss weights from seed + 2.
template <typename Linear>
void CheckLinear(const LinearCase& c, uint64_t seed) {
  ParameterStore store(0, 1);
  absl::StatusOr<Linear> lin = Linear::Create(&store, "lin", c.in, c.out, c.bias, 0.3);
  ASSERT_TRUE(lin.ok()) << lin.status();
  ASSERT_TRUE(AllocateRandomized(&store, seed));
  ASSERT_EQ(store.size(), c.bias == Bias::kYes ? 2 : 1);
  if constexpr (std::is_same_v<Linear, ColumnParallelLinear>) {
    EXPECT_EQ(lin->in(), c.in);
    EXPECT_EQ(lin->local_out(), c.out);
  } else {
    EXPECT_EQ(lin->local_in(), c.in);
    EXPECT_EQ(lin->out(), c.out);
  }
  ModuleUnderTest m;
  m.x_shape = {c.n, c.in};
  m.y_shape = {c.n, c.out};
  m.x = RandomValues(m.x_shape, seed + 1);
  m.forward = [&](const StepContext& sc, const TensorView& x, const TensorView& y) {
    return lin->Forward(sc, x, y);
  };
  m.backward = [&](const StepContext& sc, const TensorView& x, const TensorView& dy,
                   const TensorView& dx) { return lin->Backward(sc, x, dy, dx); };
  m.reference = [&](const ParamMap& p, const Vec& x) {
    return RefLinear(x, c.n, c.in, c.out, p.at("lin.weight"),
                     c.bias == Bias::kYes ? &p.at("lin.bias") : nullptr);
  };
  EXPECT_TRUE(CheckModule(&store, m, seed + 2).has_value());
}

class LinearTest : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearTest, MatchesFloat64Reference) {
  const LinearCase& c = GetParam();
  if (c.kind == LinearKind::kColumn) {
    CheckLinear<ColumnParallelLinear>(c, 2);
  } else {
    CheckLinear<RowParallelLinear>(c, 5);
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, LinearTest,
                         ::testing::Values(LinearCase{LinearKind::kColumn, 1, 1, 1, Bias::kYes},
                                           LinearCase{LinearKind::kColumn, 5, 7, 9, Bias::kYes},
                                           LinearCase{LinearKind::kColumn, 3, 17, 4, Bias::kNo},
                                           LinearCase{LinearKind::kColumn, 13, 3, 5, Bias::kYes},
                                           LinearCase{LinearKind::kRow, 1, 1, 1, Bias::kYes},
                                           LinearCase{LinearKind::kRow, 5, 7, 9, Bias::kYes},
                                           LinearCase{LinearKind::kRow, 3, 17, 4, Bias::kNo},
                                           LinearCase{LinearKind::kRow, 13, 3, 5, Bias::kYes}));

// ------------------------------------------------------------------ LayerNorm, MLP

class LayerNormModuleTest : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(LayerNormModuleTest, MatchesFloat64Reference) {
  const auto [N, H] = GetParam();
  ParameterStore store(0, 1);
  auto ln = LayerNormModule::Create(&store, "ln", H, 1e-5f);
  ASSERT_TRUE(ln.ok()) << ln.status();
  ASSERT_TRUE(AllocateRandomized(&store, 8));
  ASSERT_EQ(store.size(), 2);
  EXPECT_EQ(store.spec(0).name, "ln.weight");
  EXPECT_FALSE(store.spec(0).weight_decay);
  ModuleUnderTest m;
  m.x_shape = {N, H};
  m.y_shape = {N, H};
  m.x = RandomValues(m.x_shape, 9, -2, 2);
  m.forward = [&](const StepContext& sc, const TensorView& x, const TensorView& y) {
    return ln->Forward(sc, x, y);
  };
  m.backward = [&](const StepContext& sc, const TensorView&, const TensorView& dy,
                   const TensorView& dx) { return ln->Backward(sc, dy, dx); };
  m.reference = [](const ParamMap& p, const Vec& x) {
    return ::mt::testing::LayerNormReference(x, p.at("ln.weight"), p.at("ln.bias"), double{1e-5f})
        .y;
  };
  EXPECT_TRUE(CheckModule(&store, m, 10).has_value());
}

INSTANTIATE_TEST_SUITE_P(Sizes, LayerNormModuleTest,
                         ::testing::Values(std::make_pair(int64_t{1}, int64_t{3}),
                                           std::make_pair(int64_t{4}, int64_t{7}),
                                           std::make_pair(int64_t{9}, int64_t{17})));

TEST(ParallelMlpTest, MatchesFloat64Reference) {
  const int64_t N = 5, H = 6, F = 11;
  ParameterStore store(0, 1);
  auto mlp = ParallelMLP::Create(&store, "mlp", H, F, 0.3, 0.1);
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  ASSERT_TRUE(AllocateRandomized(&store, 11));
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
  EXPECT_TRUE(CheckModule(&store, m, 13).has_value());
  EXPECT_GT(mlp->ActivationBytes(), 0);
  mlp->Release();
  EXPECT_EQ(mlp->ActivationBytes(), 0);
}

// ------------------------------------------------------------------ attention, transformer layer

// Shapes and masks of an attention or transformer-layer case.
struct AttentionCase {
  int64_t B, T, H, heads;
  ops::CausalMask causal;
  bool padded;
  int64_t groups = 0;  // Key/value heads; 0: heads.
};

void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << "{B=" << c.B << " T=" << c.T << " H=" << c.H << " heads=" << c.heads
      << " groups=" << c.groups
      << (c.causal == ops::CausalMask::kYes ? " causal" : " bidirectional")
      << (c.padded ? " padded}" : "}");
}

// The input [B, T, H] in [-1.5, 1.5) (attention far from uniform) from `x_seed`, the padding mask
// (when padded) and the reference's dimensions. `forward` gets the mask or null.
struct AttentionHarness {
  AttentionHarness(const AttentionCase& c, uint64_t x_seed)
      : mask(MakePaddingMask(c.B, c.T)),
        dims{c.B,
             c.T,
             c.H,
             c.heads,
             c.causal == ops::CausalMask::kYes,
             c.padded ? &mask.values : nullptr,
             c.groups},
        mask_view(c.padded ? &mask.tensor.view() : nullptr) {
    m.x_shape = {c.B, c.T, c.H};
    m.y_shape = {c.B, c.T, c.H};
    m.x = RandomValues(m.x_shape, x_seed, -1.5, 1.5);
  }
  // Forward(sc, x, mask, y) and Backward(sc, dy, dx) of `module`.
  template <typename Module>
  void Bind(Module* module) {
    m.forward = [=](const StepContext& sc, const TensorView& x, const TensorView& y) {
      return module->Forward(sc, x, mask_view, y);
    };
    m.backward = [=](const StepContext& sc, const TensorView&, const TensorView& dy,
                     const TensorView& dx) { return module->Backward(sc, dy, dx); };
  }

  PaddingMask mask;
  AttnDims dims;
  const TensorView* mask_view;
  ModuleUnderTest m;
};

class AttentionTest : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(AttentionTest, MatchesFloat64Reference) {
  const AttentionCase c = GetParam();
  ParameterStore store(0, 1);
  AttentionConfig ac;
  ac.hidden = c.H;
  ac.heads = c.heads;
  ac.num_query_groups = c.groups;
  ac.causal = c.causal;
  auto attn = ParallelSelfAttention::Create(&store, "attn", ac);
  ASSERT_TRUE(attn.ok()) << attn.status();
  ASSERT_TRUE(AllocateRandomized(&store, 14));
  AttentionHarness h(c, 15);
  h.Bind(&*attn);
  h.m.reference = [&](const ParamMap& p, const Vec& x) {
    return RefAttention(p, "attn", x, h.dims);
  };
  EXPECT_TRUE(CheckModule(&store, h.m, 16).has_value());
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
                      AttentionCase{2, 3, 4, 2, ops::CausalMask::kNo, false},
                      // Grouped-query attention: multi-query, 2 groups.
                      AttentionCase{2, 5, 8, 4, ops::CausalMask::kYes, false, 1},
                      AttentionCase{2, 4, 12, 6, ops::CausalMask::kNo, true, 2}));

TEST(AttentionConfigTest, RejectsBadConfigs) {
  ParameterStore s1(0, 1);
  AttentionConfig ac;
  ac.hidden = 10;
  ac.heads = 4;
  auto a = ParallelSelfAttention::Create(&s1, "attn", ac);
  EXPECT_TRUE(
      ::mt::testing::IsError(a.status(), absl::StatusCode::kInvalidArgument, "not divisible"));
  ParameterStore s2(0, 2);
  ac.hidden = 9;
  ac.heads = 3;  // 3 heads over 2 ranks.
  a = ParallelSelfAttention::Create(&s2, "attn", ac);
  EXPECT_TRUE(::mt::testing::IsError(a.status(), absl::StatusCode::kInvalidArgument,
                                     "tensor-parallel size 2"));
  // Query groups that do not divide the heads, or that TP cannot split.
  ParameterStore s4(0, 2);
  ac.hidden = 8;
  ac.heads = 4;
  ac.num_query_groups = 3;
  EXPECT_TRUE(::mt::testing::IsError(
      ParallelSelfAttention::Create(&s4, "attn", ac).status(), absl::StatusCode::kInvalidArgument,
      "attention: 3 query groups must divide the 4 heads and be divisible by the tensor-parallel "
      "size 2"));
  ac.num_query_groups = 1;
  EXPECT_EQ(ParallelSelfAttention::Create(&s4, "attn2", ac).status().code(),
            absl::StatusCode::kInvalidArgument);
  ac.num_query_groups = 0;
  // Missing Forward.
  ParameterStore s3(0, 1);
  ac.hidden = 4;
  ac.heads = 2;
  a = ParallelSelfAttention::Create(&s3, "attn", ac);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(s3.Allocate(1).ok());
  ExecContext ec;
  const StepContext sc = StepContext::Train(&ec);
  Tensor d = Tensor::Zeros({1, 2, 4}, DType::kF32);
  EXPECT_EQ(a->Backward(sc, d.view(), d.view()).code(), absl::StatusCode::kFailedPrecondition);
  // A wrong hidden size is an error, not a crash.
  Tensor x = Tensor::Zeros({1, 2, 5}, DType::kF32), y = Tensor::Zeros({1, 2, 5}, DType::kF32);
  EXPECT_EQ(a->Forward(sc, x.view(), nullptr, y.view()).code(), absl::StatusCode::kInvalidArgument);
}

struct LayerCase {
  NormPosition norm;
  AttentionCase shape;
  int64_t ffn;
};

void PrintTo(const LayerCase& c, std::ostream* os) {
  *os << (c.norm == NormPosition::kPreNorm ? "pre-norm " : "post-norm ") << "ffn=" << c.ffn << " ";
  PrintTo(c.shape, os);
}

class TransformerLayerTest : public ::testing::TestWithParam<LayerCase> {};

TEST_P(TransformerLayerTest, MatchesFloat64Reference) {
  const LayerCase c = GetParam();
  ParameterStore store(0, 1);
  TransformerLayerConfig lc;
  lc.hidden = c.shape.H;
  lc.heads = c.shape.heads;
  lc.ffn = c.ffn;
  lc.norm = c.norm;
  lc.causal = c.shape.causal;
  const float eps = 1e-5f;
  lc.layernorm_eps = eps;
  auto layer = TransformerLayer::Create(&store, "layer", /*layer_index=*/0, lc);
  ASSERT_TRUE(layer.ok()) << layer.status();
  ASSERT_TRUE(AllocateRandomized(&store, 17));
  const int64_t F = c.ffn == 0 ? 4 * c.shape.H : c.ffn;
  AttentionHarness h(c.shape, 18);
  h.Bind(layer->get());
  h.m.reference = [&](const ParamMap& p, const Vec& x) {
    return RefTransformerLayer(p, "layer", x, h.dims, F, c.norm, double{eps});
  };
  EXPECT_TRUE(CheckModule(&store, h.m, 19).has_value());
  // ln1, ln2 (2 each), qkv, proj, fc1, fc2 (weight and bias each).
  EXPECT_EQ(store.size(), 12);
}

INSTANTIATE_TEST_SUITE_P(
    Norms, TransformerLayerTest,
    ::testing::Values(
        LayerCase{NormPosition::kPreNorm, {2, 3, 6, 2, ops::CausalMask::kYes, false}, 10},
        LayerCase{NormPosition::kPostNorm, {2, 3, 6, 2, ops::CausalMask::kYes, false}, 10},
        LayerCase{NormPosition::kPreNorm, {2, 4, 6, 3, ops::CausalMask::kNo, true}, 7},
        LayerCase{NormPosition::kPostNorm, {2, 4, 6, 3, ops::CausalMask::kNo, true}, 7},
        LayerCase{NormPosition::kPreNorm, {1, 2, 3, 1, ops::CausalMask::kYes, false}, 0}));

}  // namespace
}  // namespace nn
}  // namespace mt

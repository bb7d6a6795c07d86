// TransformerLayer built from a LayerSpec (RMSNorm, rotary attention without biases, SwiGLU;
// pre-norm and post-norm) at TP = 1 against float64, with activation recomputation and with
// 16-bit activations; TransformerStack holding a block class of its own through a LayerFactory;
// and the default spec keeping GPT-2's and BERT's parameter names.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/ops/elementwise.h"
#include "core/ops/testutil.h"
#include "core/status.h"
#include "gtest/gtest.h"
#include "nn/context.h"
#include "nn/layer.h"
#include "nn/modern_blocks_testutil.h"
#include "nn/norm.h"
#include "nn/parameter.h"
#include "nn/transformer.h"

namespace mt {
namespace nn {
namespace modern_testing {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::FromDoubles;
using ::mt::testing::RandomTensor;
using ::mt::testing::ToDoubles;

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
  const StepContext sc = StepContext::Train(&ec);
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

TEST(ModernTransformerLayerTest, SixteenBitComputeStaysNearF32) {
  // Two modern layers with 16-bit activations against the same layers in f32 (the same f32 master
  // weights; the 16-bit run reads them rounded). Each layer rounds about a dozen O(1) activations
  // in sequence (norms, projections, rotations, SwiGLU, residual sums), each by at most u of the
  // dtype, through maps of gain below ~2 (gains <= 1.5, weights in (-0.5, 0.5) over widths <= 12),
  // and the errors partly cancel: observed below 8 u of the largest magnitude for the outputs and
  // the f32 gradients; the bound is 32 u, while a wrong dtype or a missed rounding is off by O(1).
  const Shape shape = {2, 5, 8};
  const Tensor x32 = RandomTensor(shape, DType::kF32, 21, -1.5, 1.5);
  const Tensor dy32 = RandomTensor(shape, DType::kF32, 22);
  const ExecContext ec;
  Vec reference;
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dt));
    ParameterStore store(0, 1, dt);
    auto stack =
        TransformerStack::Create(&store, "layers", 2, ModernSpec(8, 2, 12, NormPosition::kPreNorm));
    ASSERT_TRUE(stack.ok()) << stack.status();
    ASSERT_TRUE(store.Allocate(1).ok());
    Randomize(&store, 23);
    ASSERT_TRUE(store.RefreshComputeWeights(ec).ok());
    const Tensor x = FromDoubles(shape, dt, ToDoubles(x32.view()));
    const Tensor dy = FromDoubles(shape, dt, ToDoubles(dy32.view()));
    const StepContext sc = StepContext::Train(&ec);
    store.ZeroGrads();
    absl::StatusOr<TensorView> y = (*stack)->Forward(sc, x.view(), nullptr);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(y->dtype, dt);
    Vec run = ToDoubles(*y);
    Tensor dx = Tensor::Host(shape, dt);
    const absl::Status s = (*stack)->Backward(sc, dy.view(), dx.view());
    ASSERT_TRUE(s.ok()) << s;
    const size_t outputs = run.size();
    const Vec g = ToDoubles(store.flat_grads());  // f32 whatever the compute dtype.
    run.insert(run.end(), g.begin(), g.end());
    if (dt == DType::kF32) {
      reference = run;
      continue;
    }
    const double u = ::mt::testing::UnitRoundoff(dt);
    const Vec y_ref(reference.begin(), reference.begin() + outputs);
    const Vec g_ref(reference.begin() + outputs, reference.end());
    EXPECT_TRUE(AllClose(Vec(run.begin(), run.begin() + outputs), y_ref, 0, 32 * u * Peak(y_ref)));
    EXPECT_TRUE(AllClose(Vec(run.begin() + outputs, run.end()), g_ref, 0, 32 * u * Peak(g_ref)));
  }
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
  LayerSpec null_norm{config, nullptr, GeluMlpFactory()};
  null_norm.norm = [](ParameterStore*, const std::string&, const TransformerLayerConfig&) {
    return absl::StatusOr<std::unique_ptr<Norm>>(nullptr);
  };
  EXPECT_EQ(TransformerLayer::Create(&empty, "m", 0, null_norm).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace modern_testing
}  // namespace nn
}  // namespace mt

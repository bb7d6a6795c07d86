// Incremental decoding through TransformerStack (the key/value caches of ParallelSelfAttention):
// the outputs of positions decoded in chunks (a prompt prefix, single positions, a chunk of
// several) equal the full-sequence forward's outputs of those positions within float rounding,
// for GPT-2's layer and for the modern layer with rotary embeddings, pre-norm and post-norm, in
// f32 and bf16, with grouped-query and multi-query attention too (whose cache is NH / G times
// smaller); decoding leaves training untouched; and every misuse is an error: a block without
// decoding (Unimplemented), bidirectional attention (FailedPrecondition), a step past the length
// or of another batch (InvalidArgument), Backward after a decoding step (FailedPrecondition).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/testutil.h"
#include "core/status.h"
#include "gtest/gtest.h"
#include "nn/attention.h"
#include "nn/context.h"
#include "nn/layer.h"
#include "nn/modern_blocks_testutil.h"
#include "nn/parameter.h"
#include "nn/transformer.h"

namespace mt {
namespace nn {
namespace {

using ::mt::testing::RandomTensor;
using ::mt::testing::ToDoubles;
using ::mt::testing::UnitRoundoff;

constexpr int64_t kHidden = 32, kHeads = 4, kFfn = 48;

// kModernGqa: the modern layer with 2 key/value groups of the 4 heads; kGpt2Mqa: GPT-2's layer
// with one (multi-query).
enum class Kind { kGpt2, kModernRotary, kModernGqa, kGpt2Mqa };

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kGpt2:
      return "gpt2";
    case Kind::kModernRotary:
      return "rotary";
    case Kind::kModernGqa:
      return "rotary-gqa2";
    case Kind::kGpt2Mqa:
      return "gpt2-mqa";
  }
  return "?";
}

LayerSpec Spec(Kind kind, NormPosition norm) {
  if (kind == Kind::kModernRotary || kind == Kind::kModernGqa) {
    LayerSpec spec = modern_testing::ModernSpec(kHidden, kHeads, kFfn, norm);
    if (kind == Kind::kModernGqa) spec.config.num_query_groups = 2;
    return spec;
  }
  TransformerLayerConfig c;
  if (kind == Kind::kGpt2Mqa) c.num_query_groups = 1;
  c.hidden = kHidden;
  c.heads = kHeads;
  c.ffn = kFfn;
  c.norm = norm;
  c.hidden_dropout = 0.3f;  // Decoding runs in eval mode whatever the step says: never applied.
  c.attention_dropout = 0.3f;
  return LayerSpec{c};
}

// Positions [t0, t1) of x [B, T, H] as a contiguous host tensor [B, t1 - t0, H] of x's dtype.
Tensor Positions(const Tensor& x, int64_t t0, int64_t t1) {
  const int64_t B = x.shape()[0], T = x.shape()[1], H = x.shape()[2];
  const size_t es = DTypeSize(x.dtype());
  Tensor out = Tensor::Host({B, t1 - t0, H}, x.dtype());
  for (int64_t b = 0; b < B; ++b) {
    std::copy_n(static_cast<const char*>(x.data()) + (b * T + t0) * H * es, (t1 - t0) * H * es,
                static_cast<char*>(out.data()) + b * (t1 - t0) * H * es);
  }
  return out;
}

using Param = std::tuple<Kind, NormPosition, DType>;
class StackDecodingTest : public ::testing::TestWithParam<Param> {};

TEST_P(StackDecodingTest, ChunkedDecodingMatchesTheFullForward) {
  const auto [kind, norm, dtype] = GetParam();
  const int64_t B = 3, T = 11;
  const ExecContext ec;
  ParameterStore store(0, 1, dtype);
  auto stack = TransformerStack::Create(&store, "layers", 2, Spec(kind, norm));
  ASSERT_TRUE(stack.ok()) << stack.status();
  ASSERT_TRUE(store.Allocate(5).ok());
  modern_testing::Randomize(&store, 6);  // Weights U(-0.5, 0.5), gains U(0.5, 1.5): none trivial.
  ASSERT_TRUE(store.RefreshComputeWeights(ec).ok());
  const Tensor x = RandomTensor({B, T, kHidden}, dtype, 7, -1.5, 1.5);

  // The reference: the full forward in eval mode.
  absl::StatusOr<TensorView> full = (*stack)->Forward(StepContext::Eval(&ec), x.view(), nullptr);
  ASSERT_TRUE(full.ok()) << full.status();
  const std::vector<double> want = ToDoubles(*full);
  const double peak = ::mt::testing::MaxAbs(want);
  ASSERT_GT(peak, 0.5);

  // Chunks: a prefix of 4, single positions, a chunk of 3 against a non-empty cache, the last.
  // The steps say kTrain, with dropout seeds: decoding runs in eval mode all the same (the GPT-2
  // layers have dropout 0.3, which would change every output).
  const StepContext sc = StepContext::Train(&ec, nullptr, 99, 4);
  ASSERT_TRUE((*stack)->StartDecoding(sc, B, T).ok());
  const std::vector<int64_t> chunks = {4, 1, 1, 3, 1, 1};
  // The two paths differ in the shapes of their GEMMs (n rows against B * T), so the sums inside
  // may be ordered differently: errors of a few f32 roundings per op, through two layers (observed
  // up to 1.3e-6 of the peak in f32; the bound is 1e-5). In bf16 every activation is rounded, and
  // a different f32 sum could round to the neighbouring bf16 value: bounded by 16 u of the peak
  // (observed: identical bits). A wrong position, mask or rotation is off by O(1).
  const double bound = (dtype == DType::kF32 ? 1e-5 : 16 * UnitRoundoff(dtype)) * peak;
  int64_t t = 0;
  double worst = 0;
  for (int64_t n : chunks) {
    const Tensor in = Positions(x, t, t + n);
    absl::StatusOr<TensorView> y = (*stack)->DecodeForward(sc, in.view());
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_EQ((*stack)->decode_length(), t + n);
    const std::vector<double> got = ToDoubles(*y);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < n * kHidden; ++i) {
        const double w = want[(b * T + t) * kHidden + i], g = got[b * n * kHidden + i];
        worst = std::max(worst, std::fabs(g - w));
        ASSERT_LE(std::fabs(g - w), bound)
            << "sequence " << b << " position " << t + i / kHidden << " element " << i % kHidden;
      }
    }
    t += n;
  }
  EXPECT_EQ(t, T);
  std::printf("%s %s %s: worst |decoded - full| %.3g (%.3g of the peak)\n", KindName(kind),
              norm == NormPosition::kPreNorm ? "pre" : "post",
              std::string(DTypeName(dtype)).c_str(), worst, worst / peak);
  // The cache is full: one more position is refused (before anything runs: decoding goes on).
  const Tensor more = Positions(x, 0, 1);
  EXPECT_EQ((*stack)->DecodeForward(sc, more.view()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*stack)->decode_length(), T);
}

INSTANTIATE_TEST_SUITE_P(Layers, StackDecodingTest,
                         ::testing::Combine(::testing::Values(Kind::kGpt2, Kind::kModernRotary,
                                                              Kind::kModernGqa, Kind::kGpt2Mqa),
                                            ::testing::Values(NormPosition::kPreNorm,
                                                              NormPosition::kPostNorm),
                                            ::testing::Values(DType::kF32, DType::kBF16)));

// The key/value cache holds G key/value heads, not NH: its bytes (keys and values of every
// position, and their head-major gather scratch) are 4 B L G D x the dtype's size, NH / G times
// fewer than multi-head attention's.
TEST(AttentionCacheTest, CacheShrinksByHeadsOverGroups) {
  const int64_t B = 3, L = 17, H = 64, NH = 8, D = H / NH;
  const ExecContext ec;
  std::vector<int64_t> bytes;
  for (int64_t G : {NH, int64_t{4}, int64_t{2}, int64_t{1}}) {
    ParameterStore store(0, 1, DType::kBF16);
    AttentionConfig ac;
    ac.hidden = H;
    ac.heads = NH;
    ac.num_query_groups = G;
    auto attn = ParallelSelfAttention::Create(&store, "attn", ac);
    ASSERT_TRUE(attn.ok()) << attn.status();
    ASSERT_TRUE(store.Allocate(1).ok());
    ASSERT_TRUE(attn->StartDecoding(ec, B, L).ok());
    EXPECT_EQ(attn->CacheBytes(), 4 * B * L * G * D * 2) << "G=" << G;
    std::printf("KV cache, B=%lld L=%lld NH=%lld D=%lld bf16, G=%lld: %lld bytes\n",
                static_cast<long long>(B), static_cast<long long>(L), static_cast<long long>(NH),
                static_cast<long long>(D), static_cast<long long>(G),
                static_cast<long long>(attn->CacheBytes()));
    bytes.push_back(attn->CacheBytes());
  }
  EXPECT_EQ(bytes[0], 2 * bytes[1]);
  EXPECT_EQ(bytes[0], 4 * bytes[2]);
  EXPECT_EQ(bytes[0], 8 * bytes[3]);
}

TEST(StackDecodingTest, RestartingForgetsTheCacheAndTrainingIsUntouched) {
  const int64_t B = 2, T = 6;
  const ExecContext ec;
  ParameterStore store(0, 1);
  auto stack = TransformerStack::Create(&store, "layers", 2,
                                        Spec(Kind::kModernRotary, NormPosition::kPreNorm));
  ASSERT_TRUE(stack.ok());
  ASSERT_TRUE(store.Allocate(8).ok());
  const Tensor x = RandomTensor({B, T, kHidden}, DType::kF32, 9);
  const Tensor dy = RandomTensor({B, T, kHidden}, DType::kF32, 10);
  StepContext train;
  train.exec = &ec;
  // One training step before decoding, and the same step after: the same bits.
  auto step = [&]() -> std::vector<double> {
    store.ZeroGrads();
    absl::StatusOr<TensorView> y = (*stack)->Forward(train, x.view(), nullptr);
    EXPECT_TRUE(y.ok());
    std::vector<double> out = ToDoubles(*y);
    Tensor dx = Tensor::Host({B, T, kHidden}, DType::kF32);
    EXPECT_TRUE((*stack)->Backward(train, dy.view(), dx.view()).ok());
    const std::vector<double> g = ToDoubles(store.flat_grads());
    out.insert(out.end(), g.begin(), g.end());
    return out;
  };
  const std::vector<double> before = step();
  const StepContext sc = StepContext::Eval(&ec);
  std::vector<double> first, second;
  for (std::vector<double>* run : {&first, &second}) {
    ASSERT_TRUE((*stack)->StartDecoding(sc, B, T).ok());  // The second start forgets the first.
    for (int64_t t = 0; t < T; t += 2) {
      const Tensor in = Positions(x, t, t + 2);
      absl::StatusOr<TensorView> y = (*stack)->DecodeForward(sc, in.view());
      ASSERT_TRUE(y.ok()) << y.status();
      const std::vector<double> v = ToDoubles(*y);
      run->insert(run->end(), v.begin(), v.end());
    }
  }
  EXPECT_EQ(first, second);
  (*stack)->StopDecoding();
  EXPECT_EQ((*stack)->decode_length(), 0);
  EXPECT_EQ(step(), before);
}

TEST(StackDecodingTest, ForwardAfterAnotherShapeOfTheSameSize) {
  // [1, 6, H] after [3, 2, H] (one decoding step's shape after the other's): the layers' buffers
  // must take the new shape, not just the element count, or one sequence of 6 is attended as 3
  // of 2 (a pre-norm layer hands its buffer's shape to the attention).
  const ExecContext ec;
  const StepContext sc = StepContext::Eval(&ec);
  const Tensor x = RandomTensor({1, 6, kHidden}, DType::kF32, 5);
  const Tensor other = RandomTensor({3, 2, kHidden}, DType::kF32, 6);
  std::vector<std::vector<double>> runs;
  for (bool other_first : {false, true}) {  // Two stacks with the same weights.
    ParameterStore store(0, 1);
    auto stack =
        TransformerStack::Create(&store, "layers", 1, Spec(Kind::kGpt2, NormPosition::kPreNorm));
    ASSERT_TRUE(stack.ok());
    ASSERT_TRUE(store.Allocate(4).ok());
    if (other_first) {
      ASSERT_TRUE((*stack)->Forward(sc, other.view(), nullptr).ok());
    }
    absl::StatusOr<TensorView> y = (*stack)->Forward(sc, x.view(), nullptr);
    ASSERT_TRUE(y.ok());
    runs.push_back(ToDoubles(*y));
  }
  EXPECT_EQ(runs[0], runs[1]);
}

TEST(StackDecodingTest, MisuseIsAnError) {
  const ExecContext ec;
  const StepContext sc = StepContext::Eval(&ec);
  ParameterStore store(0, 1);
  auto stack =
      TransformerStack::Create(&store, "layers", 1, Spec(Kind::kGpt2, NormPosition::kPreNorm));
  ASSERT_TRUE(stack.ok());
  ASSERT_TRUE(store.Allocate(1).ok());
  const Tensor x = RandomTensor({2, 3, kHidden}, DType::kF32, 2);
  EXPECT_EQ((*stack)->DecodeForward(sc, x.view()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*stack)->StartDecoding(sc, 0, 4).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*stack)->StartDecoding(sc, 2, 4).ok());
  const Tensor other_batch = RandomTensor({3, 1, kHidden}, DType::kF32, 3);
  EXPECT_EQ((*stack)->DecodeForward(sc, other_batch.view()).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A layer that decoded keeps nothing for Backward.
  ASSERT_TRUE((*stack)->StartDecoding(sc, 2, 4).ok());
  ASSERT_TRUE((*stack)->DecodeForward(sc, x.view()).ok());
  Tensor dx = Tensor::Host({2, 3, kHidden}, DType::kF32);
  const absl::Status backward = (*stack)->Backward(sc, x.view(), dx.view());
  EXPECT_EQ(backward.code(), absl::StatusCode::kFailedPrecondition) << backward;

  // Bidirectional attention (BERT) cannot decode.
  LayerSpec bert = Spec(Kind::kGpt2, NormPosition::kPostNorm);
  bert.config.causal = ops::CausalMask::kNo;
  ParameterStore bert_store(0, 1);
  auto bert_stack = TransformerStack::Create(&bert_store, "layers", 1, bert);
  ASSERT_TRUE(bert_stack.ok());
  ASSERT_TRUE(bert_store.Allocate(1).ok());
  const absl::Status s = (*bert_stack)->StartDecoding(sc, 1, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("layer 0"), absl::string_view::npos) << s;
}

// A block of its own without the decoding entries: training works, decoding is Unimplemented.
class ScaleBlock : public Layer {
 public:
  absl::Status Forward(const StepContext&, const TensorView&, const TensorView*,
                       const TensorView&) override {
    return absl::OkStatus();
  }
  absl::Status Backward(const StepContext&, const TensorView&, const TensorView&) override {
    return absl::OkStatus();
  }
  int64_t ActivationBytes() const override { return 0; }
  int64_t backward_peak_bytes() const override { return 0; }
};

TEST(StackDecodingTest, BlockWithoutDecodingIsUnimplemented) {
  ParameterStore store(0, 1);
  auto stack = TransformerStack::Create(
      &store, "blocks", 2,
      [](ParameterStore*, const std::string&, int) -> absl::StatusOr<std::unique_ptr<Layer>> {
        return std::unique_ptr<Layer>(new ScaleBlock());
      });
  ASSERT_TRUE(stack.ok());
  const ExecContext ec;
  const absl::Status s = (*stack)->StartDecoding(StepContext::Eval(&ec), 1, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_EQ((*stack)->decode_batch(), 0);
}

}  // namespace
}  // namespace nn
}  // namespace mt

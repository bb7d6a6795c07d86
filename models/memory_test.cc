#include "models/memory.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/exec_context.h"
#include "gtest/gtest.h"
#include "models/registry.h"
#include "models/testing/model_testutil.h"
#include "nn/context.h"
#include "nn/parameter.h"

namespace mt {
namespace models {
namespace {

ModelConfig Gpt2_1_2b() {
  auto m = FindModel("gpt2-1.2b");  // L 40, h 1536, a 16, s 1024.
  EXPECT_TRUE(m.ok()) << m.status();
  return m->config;
}

// An i32 host tensor.
Tensor I32(const std::vector<int32_t>& v, Shape shape) {
  Tensor t = Tensor::Host(std::move(shape), DType::kI32);
  std::copy(v.begin(), v.end(), t.data_as<int32_t>());
  return t;
}

// `config` shrunk to 3 layers of 64 over 16 positions, a vocabulary of 96.
ModelConfig Small(ModelConfig c) {
  c.num_layers = 3;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.vocab_size = 96;
  c.max_position_embeddings = 16;
  return c;
}

// Model::activation_bytes().held after a forward of `batch` (B x T), against the formula and the
// estimate's stage figure, in f32 and bf16, without recomputation, selective and full.
void ExpectHeldAsPredicted(const ModelConfig& c, const Batch& batch, int64_t B, int64_t T) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (nn::Recompute r : {nn::Recompute::kNo, nn::Recompute::kSelective, nn::Recompute::kYes}) {
      nn::ParameterStore store(0, 1, dtype);
      ModelOptions mo;
      mo.recompute = r;
      auto model = CreateModel(c, &store, mo);
      ASSERT_TRUE(model.ok()) << model.status();
      ASSERT_TRUE(store.Allocate(1).ok());
      ExecContext ec;
      const nn::StepContext sc = nn::StepContext::Train(&ec);
      ASSERT_TRUE((*model)->ForwardBackward(sc, batch, Backward::kNo).ok());
      MemoryOptions o;
      o.compute_dtype = dtype;
      o.micro_batch = B;
      o.seq_length = T;
      o.recompute = r;
      const double residual = (c.num_layers + 1.0) * DTypeSize(dtype) * B * T * c.hidden_size;
      const double held = c.num_layers * StackLayerActivationBytes(c, o) + residual;
      EXPECT_EQ(static_cast<double>((*model)->activation_bytes().held), held)
          << c.ArchitectureName() << " " << DTypeName(dtype) << " recompute "
          << static_cast<int>(r);
      auto est = EstimateMemory(c, o);
      ASSERT_TRUE(est.ok()) << est.status();
      EXPECT_EQ(est->stages[0].held, held);
    }
  }
}

// What this stack's layers hold: the formula against real forwards (CPU, TP = 1), to the byte:
// GPT (pre-norm) and BERT (post-norm, a padding mask), and the stage's held figure is the layers
// plus the residual stream.
TEST(MemoryTest, HeldActivationsAreWhatAForwardHolds) {
  const int64_t B = 2, T = 16;
  const ModelConfig gpt = Small(Gpt2_1_2b());
  const testing::LmBatch lm = testing::MakeLmBatch(B, T, gpt.vocab_size);
  ExpectHeldAsPredicted(gpt, lm.view(), B, T);
  auto bert = FindModel("bert-tiny");
  ASSERT_TRUE(bert.ok()) << bert.status();
  const ModelConfig c = Small(bert->config);
  std::vector<int32_t> tokens, types, mask, mlm;
  for (int64_t i = 0; i < B * T; ++i) {
    tokens.push_back(static_cast<int32_t>((i * 7 + 3) % c.vocab_size));
    types.push_back(i % T >= T / 2 ? 1 : 0);
    mask.push_back(i % T < T - 2 * (i / T) ? 1 : 0);
    mlm.push_back(i % 3 == 1 ? static_cast<int32_t>((i * 5 + 1) % c.vocab_size) : -100);
  }
  const Tensor t = I32(tokens, {B, T}), ty = I32(types, {B, T}), m = I32(mask, {B, T}),
               l = I32(mlm, {B, T}), sop = I32({1, 0}, {B});
  ExpectHeldAsPredicted(c, BertBatch(t.view(), ty.view(), m.view(), l.view(), sop.view()), B, T);
}

// Context parallelism: a rank of CP = 2 holds what CP = 1 holds for half the sequence (every term
// is per position; the paper's scores are (s / 2) x s), and CP must split the sequence in 4.
TEST(MemoryTest, ContextParallelHoldsItsShareOfTheSequence) {
  const ModelConfig c = Small(Gpt2_1_2b());
  MemoryOptions half, cp2;
  half.seq_length = 8;
  cp2.seq_length = 16;
  cp2.context_parallel = 2;
  auto a = EstimateMemory(c, half), b = EstimateMemory(c, cp2);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_EQ(b->layer_held, a->layer_held);
  EXPECT_EQ(b->stages[0].held, a->stages[0].held);
  EXPECT_EQ(b->stages[0].weights, a->stages[0].weights);
  // The paper's count: everything halves but the scores, which see all 16 keys.
  const double scores_half = (2 * 4 + 1) * c.num_attention_heads * 8.0 * 8.0;
  EXPECT_DOUBLE_EQ(b->layer_activations - a->layer_activations, scores_half);
  cp2.seq_length = 14;
  EXPECT_EQ(EstimateMemory(c, cp2).status().code(), absl::StatusCode::kInvalidArgument);
}

// Grouped-query attention: K and V of G key/value heads (here 2 and 1 of 4), to the byte.
TEST(MemoryTest, HeldActivationsWithQueryGroups) {
  const int64_t B = 2, T = 16;
  for (int groups : {2, 1}) {
    ModelConfig c = Small(Gpt2_1_2b());
    c.group_query_attention = true;
    c.num_query_groups = groups;
    const testing::LmBatch lm = testing::MakeLmBatch(B, T, c.vocab_size);
    ExpectHeldAsPredicted(c, lm.view(), B, T);
  }
}

// 2 L g d e / t bytes per token: GPT-2 1.2B (40 layers, 16 heads of 96) in bf16 at TP 2, with
// every head its own K/V, then 4 groups (4 x fewer).
TEST(MemoryTest, KvCacheBytesPerToken) {
  ModelConfig c = Gpt2_1_2b();
  EXPECT_DOUBLE_EQ(KvCacheBytesPerToken(c, DType::kBF16, 2), 2.0 * 40 * 16 * 96 * 2 / 2);
  c.group_query_attention = true;
  c.num_query_groups = 4;
  EXPECT_DOUBLE_EQ(KvCacheBytesPerToken(c, DType::kBF16, 2), 2.0 * 40 * 4 * 96 * 2 / 2);
  EXPECT_DOUBLE_EQ(KvCacheBytesPerToken(c, DType::kF32, 1), 2.0 * 40 * 4 * 96 * 4);
}

// The paper's per-layer formulas (Korthikanti et al. 2022, section 4: 16-bit activations, byte
// masks, f = 4 h), written out as published.
TEST(MemoryTest, LayerActivationsAreThePapersFormulasInSixteenBits) {
  const ModelConfig c = Gpt2_1_2b();
  const double s = 1024, b = 4, h = 1536, a = 16;
  MemoryOptions o;
  o.compute_dtype = DType::kBF16;
  o.micro_batch = 4;
  EXPECT_DOUBLE_EQ(LayerActivationBytes(c, o), s * b * h * (34 + 5 * a * s / h));
  for (int t : {2, 4, 8}) {
    o.tensor_parallel = t;
    o.sequence_parallel = false;
    o.recompute = nn::Recompute::kNo;
    EXPECT_DOUBLE_EQ(LayerActivationBytes(c, o), s * b * h * (10 + 24.0 / t + 5 * a * s / (h * t)));
    o.sequence_parallel = true;
    EXPECT_DOUBLE_EQ(LayerActivationBytes(c, o), s * b * h / t * (34 + 5 * a * s / h));
    o.recompute = nn::Recompute::kSelective;
    EXPECT_DOUBLE_EQ(LayerActivationBytes(c, o), s * b * h * 34 / t);
    o.sequence_parallel = false;
    EXPECT_DOUBLE_EQ(LayerActivationBytes(c, o), s * b * h * (10 + 24.0 / t));
    o.recompute = nn::Recompute::kYes;
    EXPECT_DOUBLE_EQ(LayerActivationBytes(c, o), 2 * s * b * h);
    o.sequence_parallel = true;
    EXPECT_DOUBLE_EQ(LayerActivationBytes(c, o), 2 * s * b * h / t);
  }
}

// f32 activations by hand: whole 4 x 4 + 2 = 18, split 4 x 4 + 2 x 4 x 4 = 48, scores 2 x 4 + 1.
TEST(MemoryTest, LayerActivationsInF32) {
  const ModelConfig c = Gpt2_1_2b();
  MemoryOptions o;
  o.tensor_parallel = 2;
  o.seq_length = 512;
  const double s = 512, h = 1536, a = 16;
  EXPECT_DOUBLE_EQ(LayerActivationBytes(c, o), s * h * (18 + 48.0 / 2 + 9 * a * s / (h * 2)));
}

// GPT-2 1.2B at TP 2 x PP 2 x DP 2, bf16, micro batch 4, 8 micro-batches per DP rank, by hand.
TEST(MemoryTest, StagesByHand) {
  const ModelConfig c = Gpt2_1_2b();
  MemoryOptions o;
  o.tensor_parallel = 2;
  o.pipeline_parallel = 2;
  o.data_parallel = 2;
  o.micro_batch = 4;
  o.micro_batches = 8;
  o.compute_dtype = DType::kBF16;
  auto est = EstimateMemory(c, o);
  ASSERT_TRUE(est.ok()) << est.status();
  ASSERT_EQ(est->stages.size(), 2u);
  const int64_t h = 1536, s = 1024, v = 50432, t = 2, layers = 20;
  // Per rank, as count_test's closed form, split between the stages: the first holds the word
  // and position embeddings, the last the final LayerNorm and its copy of the tied embedding.
  const int64_t per_layer = (12 * h * h + 7 * h) / t + 6 * h;
  const int64_t p0 = v / t * h + s * h + layers * per_layer;
  const int64_t p1 = layers * per_layer + 2 * h + v / t * h;
  EXPECT_EQ(est->stages[0].parameters, p0);
  EXPECT_EQ(est->stages[1].parameters, p1);
  EXPECT_DOUBLE_EQ(est->stages[0].weights, 6.0 * p0);  // f32 master + bf16 copy
  EXPECT_DOUBLE_EQ(est->stages[0].gradients, 4.0 * p0);
  EXPECT_DOUBLE_EQ(est->stages[0].optimizer, 8.0 * p0);
  EXPECT_EQ(est->stages[0].in_flight, 2);
  EXPECT_EQ(est->stages[1].in_flight, 1);
  EXPECT_EQ(est->stages[0].activation_sets, 2);
  EXPECT_EQ(est->stages[1].activation_sets, 1);
  const double sbh = 1024.0 * 4 * h;
  const double layer = sbh * (10 + 24.0 / t + 5.0 * 16 * 1024 / (h * t));
  EXPECT_DOUBLE_EQ(est->layer_activations, layer);
  // 2 micro-batches x 20 layers plus 2 embedding-dropout masks.
  EXPECT_DOUBLE_EQ(est->stages[0].activations, 40 * layer + 2 * sbh);
  // The last stage: one micro-batch, the final norm's and output layer's inputs, f32 logits.
  const double output = 2 * 2 * sbh + 4.0 * 1024 * 4 * v / t;
  EXPECT_DOUBLE_EQ(est->stages[1].activations, 20 * layer + output);
  // The distributed optimizer shards each stage's moments over its DP group, and (bf16 compute)
  // its f32 masters; sequence parallelism divides the layers' whole-kept part and the dropout
  // masks by TP.
  o.distributed_optimizer = true;
  o.sequence_parallel = true;
  est = EstimateMemory(c, o);
  ASSERT_TRUE(est.ok()) << est.status();
  ASSERT_EQ(est->stages.size(), 2u);
  EXPECT_DOUBLE_EQ(est->stages[0].optimizer, 8.0 * est->stages[0].parameters / 2);
  EXPECT_DOUBLE_EQ(est->stages[1].optimizer, 8.0 * est->stages[1].parameters / 2);
  EXPECT_DOUBLE_EQ(est->stages[0].weights, (4.0 / 2 + 2) * p0);  // f32 shard + bf16 copy
  EXPECT_DOUBLE_EQ(est->stages[1].weights, (4.0 / 2 + 2) * p1);
  const double sp_layer = LayerActivationBytes(c, o);
  EXPECT_LT(sp_layer, layer);
  EXPECT_DOUBLE_EQ(est->stages[0].activations, 40 * sp_layer + 2 * sbh / t);
  // Interleaved, 2 chunks of 10 layers per stage over 8 micro-batches: stage 0's chunks peak at 4
  // and 2 micro-batches (comm/pipeline_order_test), 6 sets of 10 layers, and chunk 0 (the
  // embedding's) keeps 4 dropout masks; the last stage's chunks peak at 3 and 1, and its last
  // chunk keeps one output.
  o.sequence_parallel = false;
  o.layers_per_virtual_stage = 10;
  est = EstimateMemory(c, o);
  ASSERT_TRUE(est.ok()) << est.status();
  EXPECT_EQ(est->stages[0].in_flight, 5);
  EXPECT_EQ(est->stages[0].activation_sets, 6);
  EXPECT_DOUBLE_EQ(est->stages[0].activations, 60 * layer + 4 * sbh);
  EXPECT_EQ(est->stages[1].in_flight, 3);
  EXPECT_EQ(est->stages[1].activation_sets, 4);
  EXPECT_DOUBLE_EQ(est->stages[1].activations, 40 * layer + output);
  o.layers_per_virtual_stage = 0;
  o.pipeline_parallel = 1;
  est = EstimateMemory(c, o);
  ASSERT_TRUE(est.ok()) << est.status();
  ASSERT_EQ(est->stages.size(), 1u);
  const int64_t whole = v / t * h + s * h + 40 * per_layer + 2 * h;
  EXPECT_EQ(est->stages[0].parameters, whole);
  EXPECT_DOUBLE_EQ(est->stages[0].optimizer, 8.0 * whole / 2);
}

TEST(MemoryTest, BadLayoutsAreRefused) {
  const ModelConfig c = Gpt2_1_2b();
  MemoryOptions o;
  o.tensor_parallel = 3;  // 16 heads
  EXPECT_EQ(EstimateMemory(c, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.tensor_parallel = 1;
  o.pipeline_parallel = 3;  // 40 layers
  EXPECT_EQ(EstimateMemory(c, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.pipeline_parallel = 1;
  o.sequence_parallel = true;  // TP 1
  EXPECT_EQ(EstimateMemory(c, o).status().code(), absl::StatusCode::kInvalidArgument);
  o.sequence_parallel = false;
  o.seq_length = 4096;
  EXPECT_EQ(EstimateMemory(c, o).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace models
}  // namespace mt

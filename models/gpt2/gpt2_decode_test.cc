// Incremental decoding of GPT-2 (IncrementalDecoder: StartDecoding / DecodeStep) against
// recomputing the whole prefix with Model::Logits at every step: the same greedy tokens and the
// logits within float rounding, in f32 and bf16, for GPT-2 (learned positions continuing from the
// cache length) and for a small model on a TransformerStack with rotary embeddings
// (models/testing's TinyLm: RMSNorm, SwiGLU, rotary attention), and GPT-2 with grouped-query and
// multi-query attention. Also: the logits of every new
// position, steps of several tokens, a restart, training unchanged after decoding, every argument
// error, and that BERT has no decoding (Unimplemented when asked for it).
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"
#include "models/gpt2/gpt2.h"
#include "models/incremental_decoder.h"
#include "models/multiple_choice.h"
#include "models/registry.h"
#include "models/testing/cuda_model_testutil.h"
#include "models/testing/decode_testutil.h"

namespace mt {
namespace models {
namespace {

using ::mt::models::testing::DecodingBound;
using ::mt::models::testing::ExpectGreedyDecodingMatchesRecompute;
using ::mt::models::testing::ForModel;
using ::mt::models::testing::RandomPrompts;
using ::mt::models::testing::TinyLm;
using ::mt::testing::NaNTensor;
using ::mt::testing::ToDoubles;

ModelConfig SmallConfig() { return testing::SmallDecodingConfig(24); }

class GptDecodeTest : public ::testing::TestWithParam<DType> {};

TEST_P(GptDecodeTest, GreedyDecodingMatchesRecomputingThePrefix) {
  const DType dtype = GetParam();
  const ExecContext ec;
  nn::ParameterStore store(0, 1, dtype);
  auto model = GptModel::Create(SmallConfig(), &store);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(store.Allocate(3).ok());
  // Non-trivial LayerNorm gains and biases (compute copies refreshed).
  ASSERT_TRUE(store.CopyValuesFromHost(ec, testing::NonTrivialMasters(store, 4).view()).ok());
  const nn::StepContext sc = nn::StepContext::Eval(&ec);
  const auto prompts = RandomPrompts(3, 5, 203, 5);
  auto r = ExpectGreedyDecodingMatchesRecompute(ForModel(model->get(), &sc), prompts, 12,
                                                DecodingBound(dtype),
                                                absl::StrCat("gpt2 ", DTypeName(dtype)));
  EXPECT_EQ(r.tokens[0].size(), 17u);
  // Positions run to 17 of max_position_embeddings 24: a second decoding of the same prompts
  // (StartDecoding forgets the first) gives the same tokens.
  auto again = ExpectGreedyDecodingMatchesRecompute(ForModel(model->get(), &sc), prompts, 12,
                                                    DecodingBound(dtype), "again");
  EXPECT_EQ(again.tokens, r.tokens);
}

TEST_P(GptDecodeTest, RotaryStackGreedyDecodingMatchesRecomputing) {
  const DType dtype = GetParam();
  const ExecContext ec;
  nn::ParameterStore store(0, 1, dtype);
  auto lm = TinyLm::Create(&store, testing::RotarySpec(), 2, 203, 208);
  ASSERT_TRUE(lm.ok()) << lm.status();
  ASSERT_TRUE(store.Allocate(6).ok());
  ASSERT_TRUE(store.CopyValuesFromHost(ec, testing::NonTrivialMasters(store, 7).view()).ok());
  const nn::StepContext sc = nn::StepContext::Eval(&ec);
  ExpectGreedyDecodingMatchesRecompute((*lm)->Calls(&sc), RandomPrompts(3, 4, 203, 8), 12,
                                       DecodingBound(dtype),
                                       absl::StrCat("rotary ", DTypeName(dtype)));
}

// Grouped-query (2 key/value heads of 4) and multi-query attention: generation reads each
// group's cached keys and values for all of its query heads.
TEST_P(GptDecodeTest, QueryGroupsGreedyDecodingMatchesRecomputing) {
  const DType dtype = GetParam();
  const ExecContext ec;
  for (int groups : {2, 1}) {
    ModelConfig c = SmallConfig();
    c.group_query_attention = true;
    c.num_query_groups = groups;
    nn::ParameterStore store(0, 1, dtype);
    auto model = GptModel::Create(c, &store);
    ASSERT_TRUE(model.ok()) << model.status();
    ASSERT_TRUE(store.Allocate(3).ok());
    ASSERT_TRUE(store.CopyValuesFromHost(ec, testing::NonTrivialMasters(store, 4).view()).ok());
    const nn::StepContext sc = nn::StepContext::Eval(&ec);
    ExpectGreedyDecodingMatchesRecompute(ForModel(model->get(), &sc), RandomPrompts(3, 5, 203, 9),
                                         10, DecodingBound(dtype),
                                         absl::StrCat("gpt2 G=", groups, " ", DTypeName(dtype)));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GptDecodeTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// Tokens [B, T] from rows of `seqs` between t0 and t1.
Tensor Slice(const std::vector<std::vector<int32_t>>& seqs, int t0, int t1) {
  Tensor t = Tensor::Host({static_cast<int64_t>(seqs.size()), t1 - t0}, DType::kI32);
  for (size_t b = 0; b < seqs.size(); ++b) {
    for (int i = t0; i < t1; ++i) t.data_as<int32_t>()[b * (t1 - t0) + i - t0] = seqs[b][i];
  }
  return t;
}

TEST(GptDecodeTest, EveryNewPositionAndMultiTokenSteps) {
  const ExecContext ec;
  nn::ParameterStore store(0, 1);
  auto model = GptModel::Create(SmallConfig(), &store);
  ASSERT_TRUE(model.ok());
  ASSERT_TRUE(store.Allocate(9).ok());
  const nn::StepContext sc = nn::StepContext::Eval(&ec);
  const auto seqs = RandomPrompts(2, 10, 203, 10);
  const int64_t Vp = (*model)->padded_vocab();
  // Recomputed logits of all 10 positions.
  Tensor full = NaNTensor({20, Vp}, DType::kF32);
  ASSERT_TRUE((*model)->Logits(sc, Slice(seqs, 0, 10).view(), full.view()).ok());
  const std::vector<double> want = ToDoubles(full.view());
  // Decode positions [0, 4), [4, 5), [5, 8), [8, 10), asking for every new position's logits.
  ASSERT_TRUE((*model)->StartDecoding(sc, 2, 10).ok());
  double peak = ::mt::testing::MaxAbs(want), worst = 0;
  for (auto [t0, t1] : {std::pair{0, 4}, {4, 5}, {5, 8}, {8, 10}}) {
    const int n = t1 - t0;
    Tensor got = NaNTensor({2 * n, Vp}, DType::kF32);
    const absl::Status s = (*model)->DecodeStep(sc, Slice(seqs, t0, t1).view(), got.view());
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_EQ((*model)->decode_length(), t1);
    for (int b = 0; b < 2; ++b) {
      for (int i = 0; i < n; ++i) {
        for (int64_t v = 0; v < Vp; ++v) {
          const double g = got.data_as<float>()[(b * n + i) * Vp + v];
          const double w = want[(b * 10 + t0 + i) * Vp + v];
          worst = std::max(worst, std::fabs(g - w));  // NaN: caught below.
          ASSERT_LE(std::fabs(g - w), 1e-5 * peak) << b << " " << t0 + i << " " << v;
        }
      }
    }
  }
  std::printf("every-position logits: worst error %.3g of the peak\n", worst / peak);
}

TEST(GptDecodeTest, TrainingIsUnchangedByDecoding) {
  const ExecContext ec;
  nn::ParameterStore store(0, 1);
  auto model = GptModel::Create(SmallConfig(), &store);
  ASSERT_TRUE(model.ok());
  ASSERT_TRUE(store.Allocate(11).ok());
  const auto seqs = RandomPrompts(2, 8, 203, 12);
  const Tensor tokens = Slice(seqs, 0, 7), labels = Slice(seqs, 1, 8);
  nn::StepContext train;
  train.exec = &ec;
  train.dropout_seed = 5;
  auto step = [&] {
    store.ZeroGrads();
    auto loss = (*model)->ForwardBackward(train, LanguageModelBatch(tokens.view(), labels.view()),
                                          Backward::kYes);
    EXPECT_TRUE(loss.ok());
    std::vector<double> out = ToDoubles(store.flat_grads());
    out.push_back(loss.ok() ? loss->total : 0.0);
    return out;
  };
  const std::vector<double> before = step();
  const nn::StepContext sc = nn::StepContext::Eval(&ec);
  ASSERT_TRUE((*model)->StartDecoding(sc, 2, 8).ok());
  Tensor logits = Tensor::Host({2, (*model)->padded_vocab()}, DType::kF32);
  ASSERT_TRUE((*model)->DecodeStep(sc, tokens.view(), logits.view()).ok());
  EXPECT_EQ(step(), before);
  // Training in between does not disturb the cache either: decoding continues.
  ASSERT_TRUE((*model)->DecodeStep(sc, Slice(seqs, 7, 8).view(), logits.view()).ok());
  EXPECT_EQ((*model)->decode_length(), 8);
}

TEST(GptDecodeTest, BadArgumentsAreErrors) {
  const ExecContext ec;
  nn::ParameterStore store(0, 1);
  auto model = GptModel::Create(SmallConfig(), &store);
  ASSERT_TRUE(model.ok());
  ASSERT_TRUE(store.Allocate(1).ok());
  GptModel& m = **model;
  const nn::StepContext sc = nn::StepContext::Eval(&ec);
  const int64_t Vp = m.padded_vocab();
  const auto seqs = RandomPrompts(2, 4, 203, 2);
  Tensor logits = Tensor::Host({2, Vp}, DType::kF32);
  EXPECT_EQ(m.DecodeStep(sc, Slice(seqs, 0, 2).view(), logits.view()).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(m.StartDecoding(sc, 2, 25).code(), absl::StatusCode::kInvalidArgument);  // > 24
  EXPECT_EQ(m.StartDecoding(sc, 0, 4).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(m.StartDecoding(sc, 2, 4).ok());
  const Tensor one_row = Slice({seqs[0]}, 0, 2);
  EXPECT_EQ(m.DecodeStep(sc, one_row.view(), logits.view()).code(),
            absl::StatusCode::kInvalidArgument);
  Tensor narrow = Tensor::Host({2, Vp - 8}, DType::kF32);
  EXPECT_EQ(m.DecodeStep(sc, Slice(seqs, 0, 2).view(), narrow.view()).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(m.DecodeStep(sc, Slice(seqs, 0, 3).view(), logits.view()).ok());
  // Two more positions do not fit in 4: refused, and decoding goes on.
  EXPECT_EQ(m.DecodeStep(sc, Slice(seqs, 0, 2).view(), logits.view()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.decode_length(), 3);
  // A token outside the vocabulary: OutOfRange, which ends decoding.
  Tensor bad = Slice(seqs, 3, 4);
  bad.data_as<int32_t>()[1] = -1;
  EXPECT_EQ(m.DecodeStep(sc, bad.view(), logits.view()).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(m.decode_length(), 0);
  EXPECT_EQ(m.DecodeStep(sc, Slice(seqs, 3, 4).view(), logits.view()).code(),
            absl::StatusCode::kFailedPrecondition);
}

// GPT-2's capabilities: decoding and stages (built as the whole model, one stage of every layer),
// no multiple choice (Unimplemented naming the architecture when asked for it).
TEST(GptDecodeTest, GptCapabilities) {
  nn::ParameterStore store(0, 1);
  auto gpt = CreateModel(SmallConfig(), &store);
  ASSERT_TRUE(gpt.ok()) << gpt.status();
  EXPECT_NE((*gpt)->incremental_decoder(), nullptr);
  EXPECT_NE((*gpt)->pipeline_stage(), nullptr);
  EXPECT_EQ((*gpt)->multiple_choice(), nullptr);
  const absl::Status s = MultipleChoiceOf(**gpt).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find("'gpt2'"), std::string::npos) << s;
}

TEST(GptDecodeTest, BertCannotDecode) {
  ModelConfig c = ModelConfig::ForFamily(Family::kBert);
  c.num_layers = 1;
  c.hidden_size = 16;
  c.num_attention_heads = 2;
  c.vocab_size = 40;
  c.make_vocab_size_divisible_by = 8;
  nn::ParameterStore store(0, 1);
  auto bert = CreateModel(c, &store);
  ASSERT_TRUE(bert.ok()) << bert.status();
  // No decoding capability: generation recomputes (serve/generate.h), and asking for it names the
  // architecture.
  EXPECT_EQ((*bert)->incremental_decoder(), nullptr);
  const absl::Status s = IncrementalDecoderOf(**bert).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(s.message().find("'bert'"), std::string::npos) << s;
}

}  // namespace
}  // namespace models
}  // namespace mt

// Serial (TP = 1) tests of the BERT model: losses and every parameter gradient against central
// differences of a float64 reference (pre-norm and post-norm, pretraining and multiple-choice
// heads), with padding in the batch; padding invariance; activation checkpointing; bad configs and
// inputs.
#include "models/bert/bert.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "core/ops/testutil.h"
#include "core/thread_pool.h"
#include "gtest/gtest.h"
#include "models/bert/bert_reference.h"
#include "models/testing/cuda_model_testutil.h"
#include "models/testing/model_testutil.h"

namespace mt {
namespace models {
namespace {

using ::mt::testing::AllClose;
using ::mt::testing::I32;
using ::mt::testing::NumericalGradient;
using ::mt::testing::ToDoubles;

ModelConfig TinyConfig(nn::NormPosition norm) { return testing::TinyConfig(Family::kBert, norm); }

// A batch of `rows` sequences of length T; row r has r % 3 padded positions at its end (so
// that some rows are padded and some are not); segment B (token type 1) starts at T / 2.
struct Batch {
  testing::BertInputs in;
  std::vector<int> mlm_labels, sop_labels;
  Tensor tokens, types, mask, mlm, sop;
  models::Batch Pretraining() const {
    return BertBatch(tokens.view(), types.view(), mask.view(), mlm.view(), sop.view());
  }
  // The rows as questions of rows / labels.numel() choices; labels [Q] the right choices.
  models::Batch Choices(const Tensor& labels) const {
    return MultipleChoiceBatch(tokens.view(), types.view(), mask.view(), labels.view());
  }
};

Batch MakeBatch(int rows, int T, int V) {
  Batch b;
  b.in.rows = rows;
  b.in.T = T;
  for (int r = 0; r < rows; ++r) {
    const int real = T - r % 3;
    for (int t = 0; t < T; ++t) {
      const int i = r * T + t;
      b.in.tokens.push_back((i * 7 + 3) % V);
      b.in.token_types.push_back(t >= T / 2 ? 1 : 0);
      b.in.padding_mask.push_back(t < real ? 1 : 0);
      // Score about half the real positions (position 0, the [CLS], never).
      b.mlm_labels.push_back(t > 0 && t < real && (i % 2 == 1 || t == 1) ? (i * 5 + 1) % V : -100);
    }
    b.sop_labels.push_back(r % 2);
  }
  b.tokens = I32(b.in.tokens, {rows, T});
  b.types = I32(b.in.token_types, {rows, T});
  b.mask = I32(b.in.padding_mask, {rows, T});
  b.mlm = I32(b.mlm_labels, {rows, T});
  b.sop = I32(b.sop_labels, {rows});
  return b;
}

// Non-trivial LayerNorm parameters and biases (they start at ones / zeros).
void RandomizeNonNormal(nn::ParameterStore* store) {
  for (int i = 0; i < store->size(); ++i) {
    if (store->spec(i).init != nn::Init::kNormal) {
      Tensor r = ::mt::testing::RandomTensor(store->value(i).shape, DType::kF32, 7 + i, 0.5, 1.5);
      std::memcpy(store->value(i).data, r.data(), r.nbytes());
    }
  }
}

// Compares every gradient in `store` with central differences of `loss` (a function of the
// ParamMap); the padded vocabulary entries must have exactly zero gradient.
void ExpectGradientsMatch(const nn::ParameterStore& store, const ModelConfig& c,
                          const testing::ParamMap& ref,
                          const std::function<double(const testing::ParamMap&)>& loss) {
  for (int i = 0; i < store.size(); ++i) {
    const std::string& name = store.spec(i).name;
    auto f = [&](const std::vector<double>& x) {
      testing::ParamMap q = ref;
      q[name] = x;
      return loss(q);
    };
    const std::vector<double> numeric = NumericalGradient(f, ref.at(name), 1e-5);
    std::vector<double> got = ToDoubles(store.grad(i));
    if (got.size() > numeric.size()) {  // Padded vocabulary rows / bias entries.
      for (size_t j = numeric.size(); j < got.size(); ++j) EXPECT_EQ(got[j], 0.0) << name;
      got.resize(numeric.size());
    }
    EXPECT_TRUE(AllClose(got, numeric, 2e-3, 2e-5)) << name;
  }
}

// predictions: the argmax (first on ties) of each question's C scores.
void ExpectArgmaxPredictions(const std::vector<int>& predictions, const std::vector<double>& scores,
                             int Q, int C) {
  ASSERT_EQ(predictions.size(), static_cast<size_t>(Q));
  for (int q = 0; q < Q; ++q) {
    int best = 0;
    for (int k = 1; k < C; ++k) best = scores[q * C + k] > scores[q * C + best] ? k : best;
    EXPECT_EQ(predictions[q], best) << "question " << q;
  }
}

class BertGradientTest : public ::testing::TestWithParam<nn::NormPosition> {};

TEST_P(BertGradientTest, PretrainingLossAndAllGradientsMatchFloat64Reference) {
  const ModelConfig c = TinyConfig(GetParam());
  nn::ParameterStore store(0, 1);
  auto model = BertModel::Create(c, &store);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(store.Allocate(/*seed=*/42).ok());
  RandomizeNonNormal(&store);
  const bool post = GetParam() == nn::NormPosition::kPostNorm;
  EXPECT_EQ(store.Find("embedding.layernorm.weight").ok(), post);
  EXPECT_EQ(store.Find("final_layernorm.weight").ok(), !post);
  EXPECT_FALSE(store.Find("multiple_choice_head.weight").ok());

  Batch b = MakeBatch(/*rows=*/3, /*T=*/5, static_cast<int>(c.vocab_size));
  ThreadPool pool(2);
  ExecContext ec;
  ec.pool = &pool;
  nn::StepContext sc = nn::StepContext::Train(&ec);
  auto losses = (*model)->ForwardBackward(sc, b.Pretraining(), Backward::kYes);
  ASSERT_TRUE(losses.ok()) << losses.status();
  const testing::ParamMap ref = testing::ToParamMap(store, c.vocab_size);
  const testing::ReferenceBertLosses want =
      testing::ReferenceBertPretrainingLoss(c, ref, b.in, b.mlm_labels, b.sop_labels);
  EXPECT_NEAR(losses->parts[0], want.mlm, 1e-5);
  EXPECT_NEAR(losses->parts[1], want.sop, 1e-5);
  EXPECT_NEAR(losses->total, want.total, 2e-5);
  EXPECT_DOUBLE_EQ(losses->total, losses->parts[0] + losses->parts[1]);
  ExpectGradientsMatch(store, c, ref, [&](const testing::ParamMap& q) {
    return testing::ReferenceBertPretrainingLoss(c, q, b.in, b.mlm_labels, b.sop_labels).total;
  });
}

TEST_P(BertGradientTest, MultipleChoiceLossAndAllGradientsMatchFloat64Reference) {
  const ModelConfig c = TinyConfig(GetParam());
  nn::ParameterStore store(0, 1);
  auto model = BertModel::Create(c, &store, {nn::Recompute::kNo, Heads::kMultipleChoice});
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(store.Allocate(/*seed=*/43).ok());
  RandomizeNonNormal(&store);
  EXPECT_FALSE(store.Find("lm_head.bias").ok());
  EXPECT_FALSE(store.Find("sop_head.weight").ok());

  const int Q = 2, C = 3, T = 4;
  Batch b = MakeBatch(Q * C, T, static_cast<int>(c.vocab_size));
  const std::vector<int> labels = {2, 0};
  Tensor lab = I32(labels, {Q});
  ExecContext ec;
  nn::StepContext sc = nn::StepContext::Train(&ec);
  auto result = (*model)->MultipleChoice(sc, b.Choices(lab), Backward::kYes);
  ASSERT_TRUE(result.ok()) << result.status();
  const testing::ParamMap ref = testing::ToParamMap(store, c.vocab_size);
  std::vector<double> scores;
  EXPECT_NEAR(result->loss, testing::ReferenceBertMultipleChoiceLoss(c, ref, b.in, labels, &scores),
              1e-5);
  ExpectArgmaxPredictions(result->predictions, scores, Q, C);
  ExpectGradientsMatch(store, c, ref, [&](const testing::ParamMap& q) {
    return testing::ReferenceBertMultipleChoiceLoss(c, q, b.in, labels);
  });
}

TEST_P(BertGradientTest, MaskedChoiceLossAndAllGradientsMatchFloat64Reference) {
  const ModelConfig c = TinyConfig(GetParam());
  nn::ParameterStore store(0, 1);
  auto model = BertModel::Create(c, &store);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(store.Allocate(/*seed=*/44).ok());
  RandomizeNonNormal(&store);

  const int Q = 2, C = 3, T = 5;
  Batch b = MakeBatch(Q * C, T, static_cast<int>(c.vocab_size));  // 1-3 labels a row.
  const std::vector<int> choices = {1, 2};
  Tensor ch = I32(choices, {Q});
  ExecContext ec;
  nn::StepContext sc = nn::StepContext::Train(&ec);
  const models::Batch masked =
      MaskedChoiceBatch(b.tokens.view(), b.types.view(), b.mask.view(), b.mlm.view(), ch.view());
  auto result = (*model)->MultipleChoice(sc, masked, Backward::kYes, /*loss_scale=*/2.0);
  ASSERT_TRUE(result.ok()) << result.status();
  const testing::ParamMap ref = testing::ToParamMap(store, c.vocab_size);
  std::vector<double> scores;
  EXPECT_NEAR(result->loss,
              testing::ReferenceBertMaskedChoiceLoss(c, ref, b.in, b.mlm_labels, choices, &scores),
              1e-5);
  ExpectArgmaxPredictions(result->predictions, scores, Q, C);
  ExpectGradientsMatch(store, c, ref, [&](const testing::ParamMap& q) {
    return 2.0 * testing::ReferenceBertMaskedChoiceLoss(c, q, b.in, b.mlm_labels, choices);
  });
}

INSTANTIATE_TEST_SUITE_P(Norms, BertGradientTest,
                         ::testing::Values(nn::NormPosition::kPreNorm,
                                           nn::NormPosition::kPostNorm));

TEST(BertModelTest, PaddedPositionsDoNotInfluenceTheLoss) {
  const ModelConfig c = TinyConfig(nn::NormPosition::kPreNorm);
  nn::ParameterStore store(0, 1);
  auto model = BertModel::Create(c, &store);
  ASSERT_TRUE(model.ok());
  ASSERT_TRUE(store.Allocate(5).ok());
  ExecContext ec;
  nn::StepContext sc = nn::StepContext::Train(&ec);
  Batch b = MakeBatch(3, 5, static_cast<int>(c.vocab_size));
  auto before = (*model)->ForwardBackward(sc, b.Pretraining(), Backward::kNo);
  ASSERT_TRUE(before.ok());
  // Change the tokens and types at the padded positions of row 1 (its last position).
  b.tokens.data_as<int32_t>()[1 * 5 + 4] = 9;
  b.types.data_as<int32_t>()[1 * 5 + 4] = 0;
  auto after = (*model)->ForwardBackward(sc, b.Pretraining(), Backward::kNo);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(before->total, after->total);
  // Unmasking that position changes the loss: the mask is what hides it.
  b.mask.data_as<int32_t>()[1 * 5 + 4] = 1;
  auto unmasked = (*model)->ForwardBackward(sc, b.Pretraining(), Backward::kNo);
  ASSERT_TRUE(unmasked.ok());
  EXPECT_GT(std::fabs(unmasked->total - before->total), 1e-6);
}

TEST(BertModelTest, EvalModeTurnsDropoutOffAndTrainingModeUsesIt) {
  ModelConfig c = TinyConfig(nn::NormPosition::kPostNorm);
  c.hidden_dropout = 0.2f;
  c.attention_dropout = 0.2f;
  nn::ParameterStore store(0, 1);
  auto model = BertModel::Create(c, &store, {nn::Recompute::kNo, Heads::kAll});
  ASSERT_TRUE(model.ok());
  ASSERT_TRUE(store.Allocate(6).ok());
  ExecContext ec;
  nn::StepContext sc = nn::StepContext::Train(&ec);
  sc.dropout_seed = 17;
  Batch b = MakeBatch(3, 5, static_cast<int>(c.vocab_size));
  const testing::ParamMap ref = testing::ToParamMap(store, c.vocab_size);
  const double want =
      testing::ReferenceBertPretrainingLoss(c, ref, b.in, b.mlm_labels, b.sop_labels).total;
  sc.mode = nn::Mode::kEval;
  auto eval = (*model)->ForwardBackward(sc, b.Pretraining(), Backward::kNo);
  ASSERT_TRUE(eval.ok());
  EXPECT_NEAR(eval->total, want, 2e-5);
  sc.mode = nn::Mode::kTrain;
  auto train = (*model)->ForwardBackward(sc, b.Pretraining(), Backward::kNo);
  ASSERT_TRUE(train.ok());
  EXPECT_GT(std::fabs(train->total - want), 1e-4);
  // The same masks again: the same loss, bit for bit.
  auto again = (*model)->ForwardBackward(sc, b.Pretraining(), Backward::kNo);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(train->total, again->total);
}

TEST(BertModelTest, ActivationCheckpointingGivesBitIdenticalGradientsAndLossScaleScales) {
  ModelConfig c = TinyConfig(nn::NormPosition::kPreNorm);
  c.num_layers = 3;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  Batch b = MakeBatch(3, 6, static_cast<int>(c.vocab_size));
  Tensor mc_labels = I32({1}, {1});
  ExecContext ec;
  std::vector<float> grads[3];
  double losses[3];
  for (int r = 0; r < 3; ++r) {
    nn::ParameterStore store(0, 1);
    auto model = BertModel::Create(
        c, &store, {r == 1 ? nn::Recompute::kYes : nn::Recompute::kNo, Heads::kAll});
    ASSERT_TRUE(model.ok());
    ASSERT_TRUE(store.Allocate(3).ok());
    nn::StepContext sc = nn::StepContext::Train(&ec);
    sc.dropout_seed = 99;
    sc.micro_step = 5;
    const double scale = r == 2 ? 8.0 : 1.0;  // A power of two: scaling is exact.
    auto loss = (*model)->ForwardBackward(sc, b.Pretraining(), Backward::kYes, scale);
    ASSERT_TRUE(loss.ok());
    losses[r] = loss->total;
    auto mc = (*model)->MultipleChoice(sc, b.Choices(mc_labels), Backward::kYes, scale);
    ASSERT_TRUE(mc.ok()) << mc.status();
    const float* g = store.flat_grads().data_as<float>();
    grads[r].assign(g, g + store.NumLocalElements());
  }
  EXPECT_EQ(losses[0], losses[1]);
  ASSERT_EQ(grads[0].size(), grads[1].size());
  EXPECT_EQ(std::memcmp(grads[0].data(), grads[1].data(), grads[0].size() * sizeof(float)), 0);
  EXPECT_EQ(losses[0], losses[2]);
  int mismatches = 0;
  for (size_t i = 0; i < grads[0].size(); ++i) mismatches += grads[2][i] != 8.0f * grads[0][i];
  EXPECT_EQ(mismatches, 0);
}

// ---- Mixed precision: bf16/f16 compute with f32 master weights against the f32 model holding the
// same masters, both task heads, dropout on (its masks do not depend on the dtype).

struct Outcome {
  double pretraining = 0, multiple_choice = 0;
  std::vector<int> predictions;
  std::vector<std::vector<double>> grads;  // Per parameter, divided by the loss scale.
  std::vector<std::string> names;
};

Outcome RunPrecision(const ModelConfig& c, DType dtype, double loss_scale) {
  Outcome out;
  nn::ParameterStore store(0, 1, dtype);
  auto model = BertModel::Create(c, &store, {nn::Recompute::kNo, Heads::kAll});
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return out;
  EXPECT_TRUE(store.Allocate(/*seed=*/44).ok());
  RandomizeNonNormal(&store);
  ThreadPool pool(3);
  ExecContext ec;
  ec.pool = &pool;
  EXPECT_TRUE(store.RefreshComputeWeights(ec).ok());
  nn::StepContext sc = nn::StepContext::Train(&ec);
  sc.dropout_seed = 23;
  sc.micro_step = 4;
  Batch b = MakeBatch(/*rows=*/6, /*T=*/6, static_cast<int>(c.vocab_size));
  auto losses = (*model)->ForwardBackward(sc, b.Pretraining(), Backward::kYes, loss_scale);
  EXPECT_TRUE(losses.ok()) << losses.status();
  Tensor labels = I32({2, 0}, {2});  // 2 questions of 3 choices.
  auto mc = (*model)->MultipleChoice(sc, b.Choices(labels), Backward::kYes, loss_scale);
  EXPECT_TRUE(mc.ok()) << mc.status();
  if (!losses.ok() || !mc.ok()) return out;
  out.pretraining = losses->total;
  out.multiple_choice = mc->loss;
  out.predictions = mc->predictions;
  out.grads = testing::HostGrads(store, ec, loss_scale);
  for (int i = 0; i < store.size(); ++i) out.names.push_back(store.spec(i).name);
  return out;
}

using testing::PrecisionParam;
class BertMixedPrecisionTest : public ::testing::TestWithParam<PrecisionParam> {};

TEST_P(BertMixedPrecisionTest, LossesAndGradientsTrackTheF32ModelWithinUnitRoundoff) {
  const auto [dtype, norm] = GetParam();
  ModelConfig c = TinyConfig(norm);
  c.hidden_size = 16;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  const Outcome ref = RunPrecision(c, DType::kF32, 1.0);
  const double scale = dtype == DType::kF16 ? 1024.0 : 1.0;  // f16 runs with a loss scale.
  const Outcome got = RunPrecision(c, dtype, scale);
  ASSERT_EQ(got.grads.size(), ref.grads.size());
  const double u = ::mt::testing::UnitRoundoff(dtype);
  // As for GPT-2 (models/gpt2/gpt2_test.cc): a few dozen roundings of random sign on every path,
  // so 16 u for the losses and 32 u for each gradient tensor (norm-wise), about 3x the worst
  // measured errors (bf16: 1.5 u and 12 u; f16: 1.1 u and 7.5 u).
  const double pre_err = std::fabs(got.pretraining - ref.pretraining) / ref.pretraining;
  const double mc_err = std::fabs(got.multiple_choice - ref.multiple_choice) / ref.multiple_choice;
  double worst = 0;
  for (size_t i = 0; i < ref.grads.size(); ++i) {
    double norm_ref = 0;
    for (double x : ref.grads[i]) norm_ref += x * x;
    // The multiple-choice bias gets the same constant for every choice: its gradient is zero up
    // to rounding (bert.h), so only an absolute bound applies.
    if (ref.names[i] == "multiple_choice_head.bias") {
      EXPECT_LE(std::fabs(got.grads[i][0]), 32 * u);
      continue;
    }
    // A gradient that is a small sum of larger terms of both signs (the SOP bias: the batch sum of
    // (softmax - onehot) / B) loses relative accuracy by cancellation: the bound is relative to
    // max(||g||, 0.05), 0.05 being below the size of such terms.
    const double e = testing::RelativeError(got.grads[i], ref.grads[i]) * std::sqrt(norm_ref) /
                     std::max(std::sqrt(norm_ref), 0.05);
    worst = std::max(worst, e);
    EXPECT_LE(e, 32 * u) << ref.names[i];
  }
  std::printf(
      "%s %s: relative loss errors %.3g (%.2f u) pretraining, %.3g (%.2f u) multiple "
      "choice; worst relative gradient error %.3g (%.2f u)\n",
      std::string(DTypeName(dtype)).c_str(),
      norm == nn::NormPosition::kPreNorm ? "pre-norm" : "post-norm", pre_err, pre_err / u, mc_err,
      mc_err / u, worst, worst / u);
  EXPECT_LE(pre_err, 16 * u);
  EXPECT_LE(mc_err, 16 * u);
  EXPECT_GT(worst, 64 * ::mt::testing::UnitRoundoff(DType::kF32));  // Really lower precision.
}

INSTANTIATE_TEST_SUITE_P(HalfTypes, BertMixedPrecisionTest, testing::HalfPrecisionCases(),
                         testing::PrecisionCaseName);

TEST(BertModelTest, BadConfigsAreRejected) {
  ModelConfig c = TinyConfig(nn::NormPosition::kPreNorm);
  c.hidden_size = 10;  // Not divisible by 4 heads.
  c.num_attention_heads = 4;
  nn::ParameterStore s1(0, 1);
  auto m1 = BertModel::Create(c, &s1);
  EXPECT_EQ(m1.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m1.status().message().find("not divisible by num_attention_heads"), std::string::npos);

  c = TinyConfig(nn::NormPosition::kPreNorm);  // 2 heads on 4 TP ranks.
  nn::ParameterStore s4(0, 4);
  auto m4 = BertModel::Create(c, &s4);
  EXPECT_EQ(m4.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m4.status().message().find("tensor_model_parallel_size 4"), std::string::npos);

  c = TinyConfig(nn::NormPosition::kPreNorm);
  c.num_token_types = 0;
  nn::ParameterStore s2(0, 1);
  auto m2 = BertModel::Create(c, &s2);
  EXPECT_EQ(m2.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m2.status().message().find("num_token_types"), std::string::npos);

  c = TinyConfig(nn::NormPosition::kPreNorm);
  c.family = Family::kGpt2;
  nn::ParameterStore s3(0, 1);
  auto m3 = BertModel::Create(c, &s3);
  EXPECT_EQ(m3.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m3.status().message().find("kBert"), std::string::npos);
}

// A pretraining model (TinyConfig, pre-norm) and a batch it accepts, for the input checks.
class BertInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = BertModel::Create(c_, &store_);
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = std::move(model).value();
    ASSERT_TRUE(store_.Allocate(1).ok());
    ASSERT_TRUE(Run(b_.tokens, b_.types, b_.mask, b_.mlm, b_.sop).ok());
  }

  absl::Status Run(const Tensor& tokens, const Tensor& types, const Tensor& mask, const Tensor& mlm,
                   const Tensor& sop) {
    return model_
        ->ForwardBackward(
            sc_, BertBatch(tokens.view(), types.view(), mask.view(), mlm.view(), sop.view()),
            Backward::kYes)
        .status();
  }

  const ModelConfig c_ = TinyConfig(nn::NormPosition::kPreNorm);
  nn::ParameterStore store_{0, 1};
  std::unique_ptr<BertModel> model_;
  const ExecContext ec_;
  const nn::StepContext sc_ = nn::StepContext::Train(&ec_);
  const Batch b_ = MakeBatch(2, 5, static_cast<int>(c_.vocab_size));
};

TEST_F(BertInputTest, BadPretrainingInputsAreRejected) {
  const Batch& b = b_;
  Tensor short_types = I32({0, 0, 0, 0}, {2, 2});
  absl::Status s = Run(b.tokens, short_types, b.mask, b.mlm, b.sop);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("token_types"), std::string::npos) << s;

  Tensor f32_mask = Tensor::Zeros({2, 5}, DType::kF32);
  s = Run(b.tokens, b.types, f32_mask, b.mlm, b.sop);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("padding_mask"), std::string::npos) << s;

  Tensor bad_sop = I32({0, 2}, {2});
  s = Run(b.tokens, b.types, b.mask, b.mlm, bad_sop);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("sop_labels[1] = 2"), std::string::npos) << s;

  Tensor none = I32(std::vector<int>(10, -100), {2, 5});
  s = Run(b.tokens, b.types, b.mask, none, b.sop);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("every MLM label is ignored"), std::string::npos) << s;

  Tensor long_tokens = I32(std::vector<int>(14, 1), {2, 7});  // T = 7 > 6 positions.
  Tensor long_other = I32(std::vector<int>(14, 1), {2, 7});
  s = Run(long_tokens, long_other, long_other, long_other, b.sop);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("max_position_embeddings = 6"), std::string::npos) << s;

  Tensor bad_types = I32(std::vector<int>(10, 2), {2, 5});  // Only types 0 and 1 exist.
  EXPECT_EQ(Run(b.tokens, bad_types, b.mask, b.mlm, b.sop).code(), absl::StatusCode::kOutOfRange);
  std::vector<int> bad_labels = b.mlm_labels;
  bad_labels[1] = static_cast<int>(c_.vocab_size);  // The padded column is no real token.
  EXPECT_EQ(Run(b.tokens, b.types, b.mask, I32(bad_labels, {2, 5}), b.sop).code(),
            absl::StatusCode::kOutOfRange);
}

// Multiple choice on a pretraining-only model, and the reverse; the choice model's objective and
// its label checks.
TEST_F(BertInputTest, MultipleChoiceNeedsItsHeadAndValidLabels) {
  const Batch& b = b_;
  const nn::StepContext& sc = sc_;
  Tensor mc_labels = I32({0}, {1});
  EXPECT_EQ(model_->MultipleChoice(sc, b.Choices(mc_labels), Backward::kNo).status().code(),
            absl::StatusCode::kFailedPrecondition);
  nn::ParameterStore mc_store(0, 1);
  auto mc = BertModel::Create(c_, &mc_store, {nn::Recompute::kNo, Heads::kMultipleChoice});
  ASSERT_TRUE(mc.ok());
  ASSERT_TRUE(mc_store.Allocate(2).ok());
  // The multiple-choice model's objective is its choice loss: a pretraining batch (MLM labels
  // [B, T]) is no choice batch, and a choice batch gives MultipleChoice's loss.
  EXPECT_EQ((*mc)->ForwardBackward(sc, b.Pretraining(), Backward::kNo).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*mc)->loss_names(), std::vector<std::string>{"choice loss"});
  Tensor one = I32({1}, {1});  // One question with 2 choices, the second right.
  const models::Batch choice = b.Choices(one);
  auto objective = (*mc)->ForwardBackward(sc, choice, Backward::kNo);
  auto direct = (*mc)->MultipleChoice(sc, choice, Backward::kNo);
  ASSERT_TRUE(objective.ok() && direct.ok()) << objective.status() << direct.status();
  EXPECT_EQ(objective->total, direct->loss);
  EXPECT_EQ(objective->parts, std::vector<double>({direct->loss}));
  EXPECT_EQ(objective->scored, 1);
  Tensor three = I32({0, 1, 0}, {3});  // 2 rows are not 3 questions.
  EXPECT_EQ((*mc)->MultipleChoice(sc, b.Choices(three), Backward::kNo).status().code(),
            absl::StatusCode::kInvalidArgument);
  Tensor out_of_range = I32({2}, {1});  // One question with 2 choices: label 2 is no choice.
  EXPECT_EQ((*mc)->MultipleChoice(sc, b.Choices(out_of_range), Backward::kNo).status().code(),
            absl::StatusCode::kOutOfRange);
}

// The masked choice needs the MLM head, a scored position in every row and choices in range.
TEST_F(BertInputTest, MaskedChoiceNeedsTheMlmHeadAndValidLabels) {
  const Batch& b = b_;  // 2 rows of 5, each with a scored position.
  const nn::StepContext& sc = sc_;
  auto masked = [&](const Tensor& mlm, const Tensor& choices) {
    return MaskedChoiceBatch(b.tokens.view(), b.types.view(), b.mask.view(), mlm.view(),
                             choices.view());
  };
  Tensor second = I32({1}, {1});
  EXPECT_TRUE(model_->MultipleChoice(sc, masked(b.mlm, second), Backward::kNo).ok());
  Tensor two = I32({2}, {1});
  EXPECT_EQ(model_->MultipleChoice(sc, masked(b.mlm, two), Backward::kNo).status().code(),
            absl::StatusCode::kOutOfRange);
  Tensor three = I32({0, 1, 0}, {3});
  EXPECT_EQ(model_->MultipleChoice(sc, masked(b.mlm, three), Backward::kNo).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<int> first_row_only = b.mlm_labels;
  for (int t = 5; t < 10; ++t) first_row_only[t] = -100;
  Tensor unscored = I32(first_row_only, {2, 5});
  const absl::Status s =
      model_->MultipleChoice(sc, masked(unscored, second), Backward::kNo).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("row 1 scores no token"), std::string::npos) << s;
  nn::ParameterStore mc_store(0, 1);
  auto mc = BertModel::Create(c_, &mc_store, {nn::Recompute::kNo, Heads::kMultipleChoice});
  ASSERT_TRUE(mc.ok());
  ASSERT_TRUE(mc_store.Allocate(2).ok());
  EXPECT_EQ((*mc)->MultipleChoice(sc, masked(b.mlm, second), Backward::kNo).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace models
}  // namespace mt

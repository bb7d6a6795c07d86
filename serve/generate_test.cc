// Generation through the key/value cache against a naive reference that recomputes each
// sequence's whole prefix with Model::Logits for every token and samples it alone: prompts of
// different lengths batched (forced prompt tokens), greedy and sampled tokens, the stop at the
// end-of-document token and at a StopCondition, log-probabilities, and the argument errors.
#include "serve/generate.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/ops/testutil.h"
#include "gtest/gtest.h"
#include "models/gpt2/gpt2.h"
#include "models/incremental_decoder.h"

namespace mt {
namespace serve {
namespace {

constexpr int64_t kVocab = 203;

models::ModelConfig SmallConfig() {
  models::ModelConfig c = models::ModelConfig::Sized(models::Family::kGpt2, 2, 32, 4, kVocab, 20);
  c.make_vocab_size_divisible_by = 8;  // Padded to 208: the padding columns must never be picked.
  c.init_std = 0.2;
  return c;
}

class GenerateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = models::GptModel::Create(SmallConfig(), &store_);
    ASSERT_TRUE(m.ok());
    model_ = std::move(m).value();
    ASSERT_TRUE(store_.Allocate(41).ok());
    sc_ = nn::StepContext::Eval(&ec_);
  }

  // Every position's logits of one sequence, recomputed.
  std::vector<float> AllLogits(const std::vector<int32_t>& tokens) {
    const int64_t T = static_cast<int64_t>(tokens.size()), Vp = model_->padded_vocab();
    Tensor t = Tensor::Host({1, T}, DType::kI32);
    std::copy(tokens.begin(), tokens.end(), t.data_as<int32_t>());
    Tensor full = ::mt::testing::NaNTensor({T, Vp}, DType::kF32);
    EXPECT_TRUE(model_->Logits(sc_, t.view(), full.view()).ok());
    return std::vector<float>(full.data_as<float>(), full.data_as<float>() + T * Vp);
  }

  // The naive reference for sequence `row`: recompute, sample position p with (seed, row, p).
  std::vector<int32_t> Reference(const std::vector<int32_t>& prompt, int64_t row,
                                 const GenerateConfig& c) {
    std::vector<int32_t> tokens = prompt;
    const int64_t Vp = model_->padded_vocab();
    for (int64_t i = 0; i < c.tokens_to_generate; ++i) {
      const std::vector<float> logits = AllLogits(tokens);
      const int64_t p = static_cast<int64_t>(tokens.size());
      absl::StatusOr<int32_t> t = SampleToken(
          absl::MakeConstSpan(logits.data() + (p - 1) * Vp, kVocab), c.sampling, row, p);
      EXPECT_TRUE(t.ok());
      tokens.push_back(*t);
      if (*t == c.eod) break;
    }
    return tokens;
  }

  std::vector<Generation> Run(const std::vector<std::vector<int32_t>>& prompts,
                              const GenerateConfig& c, const StopCondition& stop = nullptr) {
    absl::StatusOr<std::vector<Generation>> g = Generate(sc_, *model_, prompts, c, stop);
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? *g : std::vector<Generation>();
  }

  const std::vector<std::vector<int32_t>> prompts_ = {
      {5, 17, 42}, {7, 7, 100, 3, 201}, {9, 2, 60, 1}};
  nn::ParameterStore store_{0, 1};
  std::unique_ptr<models::GptModel> model_;
  ExecContext ec_;
  nn::StepContext sc_;
};

TEST_F(GenerateTest, BatchedGreedyAndSampledTokensMatchTheNaiveReference) {
  for (const SamplingConfig& s :
       {SamplingConfig{/*greedy=*/true},
        SamplingConfig{false, /*top_k=*/5, 0.0, /*temperature=*/0.7, 3},
        SamplingConfig{false, 0, /*top_p=*/0.8, 1.3, 4}, SamplingConfig{false, 0, 0.0, 1.0, 5}}) {
    GenerateConfig c;
    c.tokens_to_generate = 7;
    c.sampling = s;
    const std::vector<Generation> got = Run(prompts_, c);
    ASSERT_EQ(got.size(), 3u);
    int distinct = 0;
    for (size_t b = 0; b < prompts_.size(); ++b) {
      EXPECT_EQ(got[b].tokens, Reference(prompts_[b], b, c)) << "sequence " << b;
      EXPECT_EQ(got[b].prompt_length, static_cast<int64_t>(prompts_[b].size()));
      EXPECT_EQ(got[b].generated(), 7);
      EXPECT_EQ(got[b].finish, FinishReason::kLength);
      EXPECT_TRUE(got[b].logprobs.empty());
      for (int64_t i = got[b].prompt_length; i < static_cast<int64_t>(got[b].tokens.size()); ++i) {
        EXPECT_LT(got[b].tokens[i], kVocab);  // Never a padding column.
        distinct += got[b].tokens[i] != got[b].tokens[i - 1];
      }
    }
    EXPECT_GT(distinct, 3);  // Not a degenerate repetition.
  }
}

TEST_F(GenerateTest, SequencesStopAtTheEndOfDocumentToken) {
  GenerateConfig c;
  c.tokens_to_generate = 8;
  c.sampling.greedy = true;
  const std::vector<Generation> free_run = Run(prompts_, c);
  // The end-of-document token: the first of sequence 1's generated tokens after its first that
  // it has not generated before (so the sequence stops there, after k + 1 tokens).
  const std::vector<int32_t>& t1 = free_run[1].tokens;
  const int64_t L1 = free_run[1].prompt_length;
  int64_t k = 1;
  while (k < 8 && std::count(t1.begin() + L1, t1.begin() + L1 + k, t1[L1 + k]) > 0) ++k;
  ASSERT_LT(k, 8) << "sequence 1 repeats one token";
  c.eod = t1[L1 + k];
  const std::vector<Generation> got = Run(prompts_, c);
  for (size_t b = 0; b < prompts_.size(); ++b) {
    // Each sequence is the free run up to its first generated end-of-document token.
    const std::vector<int32_t>& free = free_run[b].tokens;
    size_t end = free_run[b].prompt_length;
    while (end < free.size() && free[end] != c.eod) ++end;
    const bool stopped = end < free.size();
    EXPECT_EQ(got[b].tokens, std::vector<int32_t>(free.begin(), free.begin() + end + stopped)) << b;
    EXPECT_EQ(got[b].finish, stopped ? FinishReason::kEod : FinishReason::kLength) << b;
  }
  EXPECT_EQ(got[1].generated(), k + 1);
  EXPECT_EQ(got[1].finish, FinishReason::kEod);
  EXPECT_EQ(got[1].tokens.back(), c.eod);
}

TEST_F(GenerateTest, StopConditionEndsOneSequence) {
  GenerateConfig c;
  c.tokens_to_generate = 6;
  c.sampling.greedy = true;
  const std::vector<Generation> free_run = Run(prompts_, c);
  std::vector<int64_t> asked(3, 0);
  const std::vector<Generation> got =
      Run(prompts_, c, [&](int64_t row, absl::Span<const int32_t> generated) {
        ++asked[row];
        EXPECT_EQ(generated.size(), static_cast<size_t>(asked[row]));
        return row == 2 && generated.size() == 2;
      });
  EXPECT_EQ(got[2].finish, FinishReason::kStop);
  EXPECT_EQ(got[2].generated(), 2);
  EXPECT_EQ(got[0].tokens, free_run[0].tokens);
  EXPECT_EQ(got[1].tokens, free_run[1].tokens);
  EXPECT_EQ(asked, (std::vector<int64_t>{6, 6, 2}));
}

TEST_F(GenerateTest, LogProbabilitiesOfEveryTokenAfterTheFirst) {
  GenerateConfig c;
  c.tokens_to_generate = 5;
  c.sampling = SamplingConfig{false, 0, 0.0, /*temperature=*/0.5, 9};  // Not applied to logprobs.
  c.logprobs = true;
  for (int64_t n : {5, 0}) {
    c.tokens_to_generate = n;
    const std::vector<Generation> got = Run(prompts_, c);
    for (size_t b = 0; b < prompts_.size(); ++b) {
      const std::vector<int32_t>& t = got[b].tokens;
      ASSERT_EQ(got[b].logprobs.size(), t.size() - 1);
      const std::vector<float> logits = AllLogits(t);
      const int64_t Vp = model_->padded_vocab();
      for (size_t i = 0; i + 1 < t.size(); ++i) {
        // log softmax over the real vocabulary, in double from the recomputed logits.
        const float* row = logits.data() + i * Vp;
        double top = row[0], sum = 0;
        for (int64_t v = 0; v < kVocab; ++v) top = std::max(top, double{row[v]});
        for (int64_t v = 0; v < kVocab; ++v) sum += std::exp(row[v] - top);
        const double want = row[t[i + 1]] - top - std::log(sum);
        EXPECT_NEAR(got[b].logprobs[i], want, 1e-5 * (1 + std::fabs(want))) << b << " " << i;
      }
    }
  }
}

// GPT-2 seen through a model without incremental decoding (no Model::incremental_decoder()).
class NoCache : public models::Model {
 public:
  explicit NoCache(models::Model* m) : m_(m) {}
  const models::ModelConfig& config() const override { return m_->config(); }
  int64_t padded_vocab() const override { return m_->padded_vocab(); }
  std::vector<std::string> loss_names() const override { return m_->loss_names(); }
  absl::StatusOr<models::Losses> ForwardBackward(const nn::StepContext& sc,
                                                 const models::Batch& batch,
                                                 models::Backward backward,
                                                 double loss_scale) override {
    return m_->ForwardBackward(sc, batch, backward, loss_scale);
  }
  double TrainingFlops(int64_t b, int64_t t, int64_t scored) const override {
    return m_->TrainingFlops(b, t, scored);
  }
  ActivationBytes activation_bytes() const override { return m_->activation_bytes(); }
  absl::Status Logits(const nn::StepContext& sc, const TensorView& tokens,
                      const TensorView& full) override {
    return m_->Logits(sc, tokens, full);
  }

 private:
  models::Model* m_;
};

// ... and through one whose decoder keeps no cache (StartDecoding Unimplemented, as for a GPT
// model whose blocks keep none).
class CachelessDecoder : public NoCache, public models::IncrementalDecoder {
 public:
  using NoCache::NoCache;
  models::IncrementalDecoder* incremental_decoder() override { return this; }
  absl::Status StartDecoding(const nn::StepContext&, int64_t, int64_t) override {
    return absl::UnimplementedError("no key/value cache");
  }
  absl::Status DecodeStep(const nn::StepContext&, const TensorView&, const TensorView&) override {
    return absl::InternalError("DecodeStep without StartDecoding");
  }
  int64_t decode_length() const override { return 0; }
  void StopDecoding() override {}
};

TEST_F(GenerateTest, RecomputingEveryPrefixGivesTheSameGenerations) {
  NoCache no_cache(model_.get());
  CachelessDecoder cacheless(model_.get());
  for (bool logprobs : {false, true}) {
    GenerateConfig c;
    c.tokens_to_generate = 6;
    c.sampling = SamplingConfig{false, /*top_k=*/8, 0.0, 0.9, 12};
    c.logprobs = logprobs;
    const std::vector<Generation> cached = Run(prompts_, c);
    GenerateConfig recompute = c;
    recompute.decoding = Decoding::kRecompute;
    absl::StatusOr<std::vector<Generation>> fallback = Generate(sc_, no_cache, prompts_, c);
    ASSERT_TRUE(fallback.ok()) << fallback.status();
    absl::StatusOr<std::vector<Generation>> uncached = Generate(sc_, cacheless, prompts_, c);
    ASSERT_TRUE(uncached.ok()) << uncached.status();
    for (const std::vector<Generation>& other : {Run(prompts_, recompute), *fallback, *uncached}) {
      for (size_t b = 0; b < prompts_.size(); ++b) {
        EXPECT_EQ(other[b].tokens, cached[b].tokens) << b;
        ASSERT_EQ(other[b].logprobs.size(), cached[b].logprobs.size());
        for (size_t i = 0; i < cached[b].logprobs.size(); ++i) {
          EXPECT_NEAR(other[b].logprobs[i], cached[b].logprobs[i], 1e-5) << b << " " << i;
        }
      }
    }
  }
}

TEST_F(GenerateTest, BadArgumentsAreErrors) {
  GenerateConfig c;
  c.tokens_to_generate = 4;
  auto code = [&](const std::vector<std::vector<int32_t>>& prompts, const GenerateConfig& config) {
    return Generate(sc_, *model_, prompts, config).status().code();
  };
  EXPECT_EQ(code({}, c), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{1, 2}, {}}, c), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{1, static_cast<int32_t>(kVocab)}}, c), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{1, -3}}, c), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({std::vector<int32_t>(17, 1)}, c), absl::StatusCode::kInvalidArgument);  // 17 + 4
  EXPECT_TRUE(Generate(sc_, *model_, {std::vector<int32_t>(16, 1)}, c).ok());             // 16 + 4
  GenerateConfig negative = c;
  negative.tokens_to_generate = -1;
  EXPECT_EQ(code({{1}}, negative), absl::StatusCode::kInvalidArgument);
  GenerateConfig both = c;
  both.sampling.top_k = 3;
  both.sampling.top_p = 0.5;
  EXPECT_EQ(code({{1}}, both), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace serve
}  // namespace mt

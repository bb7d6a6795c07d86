// Continuous batching against each request generated alone (Generate with one prompt, the same
// decoding path without any other sequence): the same tokens and bitwise the same
// log-probabilities for requests that join and leave a running batch, on GPT-2 and on the
// modern decoder (grouped-query attention, rotary positions); greedy and sampled. Then the
// engine's own rules: cancelling frees the slot, oldest first, the token budget, argument errors.
#include "serve/batch_engine.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "models/registry.h"

namespace mt {
namespace serve {
namespace {

constexpr int64_t kVocab = 203;

models::ModelConfig Config(const std::string& architecture) {
  models::ModelConfig c = models::ModelConfig::Sized(models::Family::kGpt2, 2, 32, 4, kVocab, 40);
  c.make_vocab_size_divisible_by = 8;
  c.init_std = 0.2;
  if (architecture == "modern-decoder") {
    c.architecture = architecture;
    c.position_embeddings = false;
    c.group_query_attention = true;
    c.num_query_groups = 2;
  }
  return c;
}

struct Case {
  std::vector<int32_t> prompt;
  GenerateConfig config;
  int64_t arrives = 0;  // The step before which the request is added.
};

GenerateConfig Greedy(int64_t n, bool logprobs) {
  GenerateConfig c;
  c.tokens_to_generate = n;
  c.sampling.greedy = true;
  c.logprobs = logprobs;
  c.eod = -1;
  return c;
}

GenerateConfig Sampled(int64_t n, uint64_t seed) {
  GenerateConfig c = Greedy(n, /*logprobs=*/true);
  c.sampling = SamplingConfig{false, /*top_k=*/0, /*top_p=*/0.9, /*temperature=*/0.8, seed};
  return c;
}

class EngineFixture : public ::testing::Test {
 protected:
  void Build(const std::string& architecture) {
    auto m = models::CreateModel(Config(architecture), &store_);
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = std::move(m).value();
    ASSERT_TRUE(store_.Allocate(41).ok());
    ec_.row_invariant_gemm = true;  // Without it, a row's GEMM result depends on the others'.
    sc_ = nn::StepContext::Eval(&ec_);
  }

  std::unique_ptr<BatchEngine> Engine(int64_t batch, int64_t tokens = 2048) {
    auto e = BatchEngine::Create(sc_, *model_, BatchLimits{batch, tokens});
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(e).value() : nullptr;
  }

  Generation Alone(const std::vector<int32_t>& prompt, const GenerateConfig& c) {
    auto g = Generate(sc_, *model_, {prompt}, c);
    EXPECT_TRUE(g.ok()) << g.status();
    return g.ok() ? (*g)[0] : Generation();
  }

  // Runs the cases through one engine (request i added before step cases[i].arrives) and
  // returns each one's generation; *widest: the most sequences one step ran.
  std::vector<Generation> Batched(BatchEngine& engine, const std::vector<Case>& cases,
                                  int64_t* widest) {
    std::map<int64_t, Generation> got;
    *widest = 0;
    for (int64_t step = 0; step < 200 && got.size() < cases.size(); ++step) {
      for (size_t i = 0; i < cases.size(); ++i) {
        if (cases[i].arrives == step) {
          EXPECT_TRUE(engine.Add(static_cast<int64_t>(i), {cases[i].prompt}, cases[i].config).ok());
        }
      }
      absl::StatusOr<StepReport> r = engine.Step(sc_);
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) break;
      *widest = std::max(*widest, r->sequences);
      for (int64_t id : r->finished) got[id] = engine.TakeResult(id)[0];
    }
    std::vector<Generation> out;
    for (size_t i = 0; i < cases.size(); ++i) out.push_back(got[static_cast<int64_t>(i)]);
    return out;
  }

  nn::ParameterStore store_{0, 1};
  std::unique_ptr<models::Model> model_;
  ExecContext ec_;
  nn::StepContext sc_;
};

class BatchEngineTest : public EngineFixture, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override { Build(GetParam()); }
};

TEST_P(BatchEngineTest, RequestsJoiningAndLeavingGetTheirTokensAlone) {
  const std::vector<Case> cases = {
      {{5, 17, 42}, Greedy(12, true), 0},
      {{7, 7, 100, 3, 201, 9, 14}, Greedy(5, false), 0},
      {{9}, Sampled(9, 11), 1},
      {{60, 1, 2, 3}, Greedy(3, true), 3},
      {{44, 45, 46, 47, 48, 49, 50, 51, 52}, Sampled(14, 5), 3},
      {{100, 2}, Greedy(7, false), 4},
      {{31, 32, 33}, Greedy(0, true), 6},  // Scores the prompt only.
      {{18, 19}, Sampled(6, 12), 9},
  };
  for (const int64_t batch : {1, 3, 8}) {
    std::unique_ptr<BatchEngine> engine = Engine(batch);
    ASSERT_NE(engine, nullptr);
    int64_t widest = 0;
    const std::vector<Generation> got = Batched(*engine, cases, &widest);
    EXPECT_EQ(widest, std::min<int64_t>(batch, 6)) << "the batch never filled";
    for (size_t i = 0; i < cases.size(); ++i) {
      const Generation want = Alone(cases[i].prompt, cases[i].config);
      EXPECT_EQ(got[i].tokens, want.tokens) << "request " << i << ", batch " << batch;
      // Bitwise: the rows of a step do not see each other.
      EXPECT_EQ(got[i].logprobs, want.logprobs) << "request " << i << ", batch " << batch;
      EXPECT_EQ(got[i].finish, want.finish);
      EXPECT_EQ(got[i].generated(), cases[i].config.tokens_to_generate);
    }
    EXPECT_TRUE(engine->idle());
  }
}

TEST_P(BatchEngineTest, PromptsOfOneRequestAreSequencesOfTheirOwn) {
  std::unique_ptr<BatchEngine> engine = Engine(4);
  ASSERT_NE(engine, nullptr);
  const std::vector<std::vector<int32_t>> prompts = {{3, 9, 27}, {81, 40, 120, 157, 59}, {6}};
  const GenerateConfig c = Greedy(6, true);
  ASSERT_TRUE(engine->Add(7, prompts, c).ok());
  std::vector<Generation> got;
  for (int step = 0; step < 50 && got.empty(); ++step) {
    absl::StatusOr<StepReport> r = engine->Step(sc_);
    ASSERT_TRUE(r.ok()) << r.status();
    if (!r->finished.empty()) got = engine->TakeResult(7);
  }
  ASSERT_EQ(got.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    const Generation want = Alone(prompts[i], c);
    EXPECT_EQ(got[i].tokens, want.tokens) << "prompt " << i;
    EXPECT_EQ(got[i].logprobs, want.logprobs) << "prompt " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Architectures, BatchEngineTest,
                         ::testing::Values("gpt2", "modern-decoder"));

class BatchEngineRulesTest : public EngineFixture {
 protected:
  void SetUp() override { Build("gpt2"); }
};

TEST_F(BatchEngineRulesTest, CancellingFreesTheSlot) {
  std::unique_ptr<BatchEngine> engine = Engine(1);
  ASSERT_NE(engine, nullptr);
  ASSERT_TRUE(engine->Add(1, {{5, 6, 7}}, Greedy(30, false)).ok());
  ASSERT_TRUE(engine->Add(2, {{8, 9}}, Greedy(4, false)).ok());
  ASSERT_TRUE(engine->Step(sc_).ok());
  EXPECT_EQ(engine->running(), 1);
  EXPECT_EQ(engine->waiting(), 1);
  engine->Cancel(1);
  EXPECT_EQ(engine->running(), 0);
  std::vector<Generation> got;
  for (int step = 0; step < 10 && got.empty(); ++step) {
    absl::StatusOr<StepReport> r = engine->Step(sc_);
    ASSERT_TRUE(r.ok());
    for (const TokenEvent& t : r->tokens) EXPECT_EQ(t.request, 2);
    if (!r->finished.empty()) got = engine->TakeResult(2);
  }
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].tokens, Alone({8, 9}, Greedy(4, false)).tokens);
  EXPECT_TRUE(engine->idle());
  engine->Cancel(99);  // Unknown: nothing.
}

TEST_F(BatchEngineRulesTest, OldestFirstWithinTheTokenBudget) {
  // Budget 8: two running sequences plus one 5-token prompt per step at most.
  std::unique_ptr<BatchEngine> engine = Engine(3, 8);
  ASSERT_NE(engine, nullptr);
  for (int64_t id = 0; id < 5; ++id) {
    ASSERT_TRUE(
        engine->Add(id, {{1, 2, 3, 4, static_cast<int32_t>(10 + id)}}, Greedy(3, false)).ok());
  }
  std::map<int64_t, int> first_token_step;
  for (int step = 0; step < 40 && !engine->idle(); ++step) {
    absl::StatusOr<StepReport> r = engine->Step(sc_);
    ASSERT_TRUE(r.ok());
    EXPECT_LE(r->rows, 8) << "step " << step;
    EXPECT_LE(r->sequences, 3);
    for (const TokenEvent& t : r->tokens) first_token_step.emplace(t.request, step);
    for (int64_t id : r->finished) EXPECT_EQ(engine->TakeResult(id).size(), 1u);
  }
  ASSERT_EQ(first_token_step.size(), 5u);
  // One prompt per step (5 + 5 > 8), in arrival order.
  for (int64_t id = 1; id < 5; ++id) {
    EXPECT_GT(first_token_step[id], first_token_step[id - 1]) << "request " << id;
  }
}

TEST_F(BatchEngineRulesTest, ALongPromptRunsInAStepOfItsOwn) {
  std::unique_ptr<BatchEngine> engine = Engine(2, 4);
  ASSERT_NE(engine, nullptr);
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7};
  ASSERT_TRUE(engine->Add(0, {prompt}, Greedy(2, true)).ok());
  absl::StatusOr<StepReport> r = engine->Step(sc_);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->rows, 7);
  ASSERT_TRUE(engine->Step(sc_).ok());
  EXPECT_EQ(engine->TakeResult(0)[0].tokens, Alone(prompt, Greedy(2, true)).tokens);
}

TEST_F(BatchEngineRulesTest, RefusesBadArguments) {
  EXPECT_FALSE(BatchEngine::Create(sc_, *model_, BatchLimits{0, 10}).ok());
  EXPECT_FALSE(BatchEngine::Create(sc_, *model_, BatchLimits{2, 0}).ok());
  std::unique_ptr<BatchEngine> engine = Engine(2);
  ASSERT_NE(engine, nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(engine->Add(0, {{}}, Greedy(2, false))));
  EXPECT_TRUE(absl::IsInvalidArgument(engine->Add(0, {{kVocab}}, Greedy(2, false))));
  EXPECT_TRUE(absl::IsInvalidArgument(engine->Add(0, {{1, 2}}, Greedy(39, false))));
  ASSERT_TRUE(engine->Add(0, {{1, 2}}, Greedy(2, false)).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(engine->Add(0, {{1, 2}}, Greedy(2, false))));
  EXPECT_TRUE(engine->TakeResult(0).empty());  // Not finished yet.
}

}  // namespace
}  // namespace serve
}  // namespace mt

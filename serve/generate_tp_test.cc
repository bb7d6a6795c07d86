// Generation under tensor parallelism (run under mpirun; every rank is one TP rank): every rank
// gets the same tokens, and they are the serial model's, for greedy and for sampled generation
// (the gathered logits are identical on the ranks and the draws a function of (seed, sequence,
// position)); and continuous batching (serve/batch_engine.h) gives each request its tokens alone.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "comm/mpi_testutil.h"
#include "gtest/gtest.h"
#include "models/gpt2/gpt2.h"
#include "serve/batch_engine.h"
#include "serve/generate.h"

namespace mt {
namespace serve {
namespace {

using ::mt::comm::testing::MpiTest;

models::ModelConfig SmallConfig() {
  models::ModelConfig c = models::ModelConfig::Sized(models::Family::kGpt2, 2, 32, 4, 203, 24);
  c.make_vocab_size_divisible_by = 8;
  c.init_std = 0.2;
  return c;
}

// Sequence tokens, concatenated.
std::vector<int32_t> Flat(const std::vector<Generation>& g) {
  std::vector<int32_t> out;
  for (const Generation& s : g) out.insert(out.end(), s.tokens.begin(), s.tokens.end());
  return out;
}

TEST_F(MpiTest, EveryRankGeneratesTheSerialTokens) {
  const ExecContext ec;
  nn::ParameterStore serial_store(0, 1), store(comm_->rank(), comm_->size());
  auto serial = models::GptModel::Create(SmallConfig(), &serial_store);
  auto model = models::GptModel::Create(SmallConfig(), &store);
  ASSERT_TRUE(serial.ok() && model.ok());
  ASSERT_TRUE(serial_store.Allocate(51).ok() && store.Allocate(51).ok());
  const nn::StepContext ssc = nn::StepContext::Eval(&ec),
                        sc = nn::StepContext::Eval(&ec, comm_.get());
  const std::vector<std::vector<int32_t>> prompts = {{3, 9, 27}, {81, 40, 120, 157, 59}};
  for (const SamplingConfig& s :
       {SamplingConfig{/*greedy=*/true}, SamplingConfig{false, 0, /*top_p=*/0.9, 0.8, /*seed=*/6},
        SamplingConfig{false, /*top_k=*/20, 0.0, 1.2, 7}}) {
    GenerateConfig c;
    c.tokens_to_generate = 10;
    c.sampling = s;
    auto want = Generate(ssc, **serial, prompts, c);
    auto got = Generate(sc, **model, prompts, c);
    ASSERT_TRUE(want.ok() && got.ok());
    const std::vector<int32_t> mine = Flat(*got);
    EXPECT_EQ(mine, Flat(*want)) << "tp=" << comm_->size();
    const int64_t n = static_cast<int64_t>(mine.size());
    Tensor all = Tensor::Host({comm_->size() * n}, DType::kI32);
    ASSERT_TRUE(
        comm_
            ->AllGather(TensorView(const_cast<int32_t*>(mine.data()), {n}, DType::kI32), all.view())
            .ok());
    for (int r = 1; r < comm_->size(); ++r) {
      EXPECT_TRUE(std::equal(mine.begin(), mine.end(), all.data_as<int32_t>() + r * n))
          << "rank " << r << " generated other tokens";
    }
  }
}

// Continuous batching at TP = 2: requests joining a running batch get bitwise the tokens and
// log-probabilities they get alone (Generate, one prompt), on every rank (the engines stay in
// lockstep), and, greedy, the serial model's tokens.
TEST_F(MpiTest, BatchedRequestsGetTheirTokensAloneOnEveryRank) {
  ExecContext ec;
  ec.row_invariant_gemm = true;
  nn::ParameterStore serial_store(0, 1), store(comm_->rank(), comm_->size());
  auto serial = models::GptModel::Create(SmallConfig(), &serial_store);
  auto model = models::GptModel::Create(SmallConfig(), &store);
  ASSERT_TRUE(serial.ok() && model.ok());
  ASSERT_TRUE(serial_store.Allocate(51).ok() && store.Allocate(51).ok());
  const nn::StepContext ssc = nn::StepContext::Eval(&ec),
                        sc = nn::StepContext::Eval(&ec, comm_.get());
  const std::vector<std::vector<int32_t>> prompts = {
      {3, 9, 27}, {81, 40, 120, 157, 59}, {7}, {11, 12, 13, 14}, {90, 91}};
  GenerateConfig greedy;
  greedy.tokens_to_generate = 8;
  greedy.sampling.greedy = true;
  greedy.logprobs = true;
  GenerateConfig sampled = greedy;
  sampled.sampling = SamplingConfig{false, 0, /*top_p=*/0.9, 0.8, /*seed=*/6};
  auto engine = BatchEngine::Create(sc, **model, BatchLimits{3, 64});
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::vector<Generation> got(prompts.size());
  size_t added = 0, finished = 0;
  for (int step = 0; step < 100 && finished < prompts.size(); ++step) {
    if (added < prompts.size() && step % 2 == 0) {  // One joins every other step.
      ASSERT_TRUE((*engine)
                      ->Add(static_cast<int64_t>(added), {prompts[added]},
                            added % 2 == 0 ? greedy : sampled)
                      .ok());
      ++added;
    }
    absl::StatusOr<StepReport> r = (*engine)->Step(sc);
    ASSERT_TRUE(r.ok()) << r.status();
    for (int64_t id : r->finished) {
      got[id] = (*engine)->TakeResult(id)[0];
      ++finished;
    }
  }
  ASSERT_EQ(finished, prompts.size());
  engine->reset();
  std::vector<int32_t> mine;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const GenerateConfig& c = i % 2 == 0 ? greedy : sampled;
    auto alone = Generate(sc, **model, {prompts[i]}, c);
    ASSERT_TRUE(alone.ok());
    EXPECT_EQ(got[i].tokens, (*alone)[0].tokens) << "request " << i;
    EXPECT_EQ(got[i].logprobs, (*alone)[0].logprobs) << "request " << i;
    if (i % 2 == 0) {
      auto want = Generate(ssc, **serial, {prompts[i]}, c);
      ASSERT_TRUE(want.ok());
      EXPECT_EQ(got[i].tokens, (*want)[0].tokens) << "request " << i << " vs the serial model";
    }
    mine.insert(mine.end(), got[i].tokens.begin(), got[i].tokens.end());
  }
  const int64_t n = static_cast<int64_t>(mine.size());
  Tensor all = Tensor::Host({comm_->size() * n}, DType::kI32);
  ASSERT_TRUE(comm_->AllGather(TensorView(mine.data(), {n}, DType::kI32), all.view()).ok());
  for (int r = 1; r < comm_->size(); ++r) {
    EXPECT_TRUE(std::equal(mine.begin(), mine.end(), all.data_as<int32_t>() + r * n))
        << "rank " << r << " generated other tokens";
  }
}

}  // namespace
}  // namespace serve
}  // namespace mt

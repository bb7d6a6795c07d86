// Generation under tensor parallelism (run under mpirun; every rank is one TP rank): every rank
// gets the same tokens, and they are the serial model's, for greedy and for sampled generation
// (the gathered logits are identical on the ranks and the draws a function of (seed, sequence,
// position)).
#include <algorithm>
#include <cstdint>
#include <vector>

#include "comm/mpi_testutil.h"
#include "gtest/gtest.h"
#include "models/gpt2/gpt2.h"
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

}  // namespace
}  // namespace serve
}  // namespace mt

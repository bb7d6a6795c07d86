// Incremental decoding under tensor parallelism (run under mpirun; every rank is one TP rank, each
// caching its own heads): with the same seed as the serial model, greedy decoding of GPT-2 and of
// a rotary TransformerStack model (TinyLm) gives, on every rank, the tokens of the serial model,
// with the cached logits equal to recomputing the prefix on the TP model; every rank holds the
// same tokens; a decoding step costs the embedding's all-reduce, two per layer, and one gather of
// the logits.
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/mpi_testutil.h"
#include "core/ops/testutil.h"
#include "gtest/gtest.h"
#include "models/gpt2/gpt2.h"
#include "models/testing/decode_testutil.h"

namespace mt {
namespace models {
namespace {

using ::mt::comm::testing::MpiTest;
using ::mt::models::testing::DecodingLm;
using ::mt::models::testing::ExpectGreedyDecodingMatchesRecompute;
using ::mt::models::testing::ForModel;
using ::mt::models::testing::GreedyResult;
using ::mt::models::testing::RandomPrompts;
using ::mt::models::testing::TinyLm;

constexpr int kSteps = 10;
const double kBound = testing::DecodingBound(DType::kF32);

// Every rank's tokens equal rank 0's.
void ExpectSameOnEveryRank(comm::Communicator& comm, const GreedyResult& r) {
  std::vector<int32_t> flat;
  for (const auto& seq : r.tokens) flat.insert(flat.end(), seq.begin(), seq.end());
  const int64_t n = static_cast<int64_t>(flat.size());
  Tensor all = Tensor::Host({comm.size() * n}, DType::kI32);
  ASSERT_TRUE(comm.AllGather(TensorView(flat.data(), {n}, DType::kI32), all.view()).ok());
  for (int r = 1; r < comm.size(); ++r) {
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(all.data_as<int32_t>()[r * n + i], all.data_as<int32_t>()[i]) << "rank " << r;
    }
  }
}

// Greedy decoding of the TP model and of the serial one (on every rank): the same tokens.
void ExpectTensorParallelDecodingMatchesSerial(comm::Communicator& comm, const DecodingLm& tp,
                                               const DecodingLm& serial, const char* what) {
  const auto prompts = RandomPrompts(3, 5, 203, 17);
  const int tp_size = comm.size();
  GreedyResult got = ExpectGreedyDecodingMatchesRecompute(tp, prompts, kSteps, kBound,
                                                          absl::StrCat(what, " tp=", tp_size));
  GreedyResult want = ExpectGreedyDecodingMatchesRecompute(serial, prompts, kSteps, kBound,
                                                           absl::StrCat(what, " serial"));
  EXPECT_EQ(got.near_ties + want.near_ties, 0) << what;
  EXPECT_EQ(got.tokens, want.tokens) << what << " tp=" << tp_size;
  ExpectSameOnEveryRank(comm, got);
}

TEST_F(MpiTest, Gpt2DecodingMatchesSerial) {
  const ExecContext ec;
  nn::ParameterStore serial_store(0, 1), store(comm_->rank(), comm_->size());
  auto serial = GptModel::Create(testing::SmallDecodingConfig(24), &serial_store);
  auto model = GptModel::Create(testing::SmallDecodingConfig(24), &store);
  ASSERT_TRUE(serial.ok() && model.ok());
  ASSERT_TRUE(serial_store.Allocate(21).ok() && store.Allocate(21).ok());
  const nn::StepContext ssc = nn::StepContext::Eval(&ec),
                        sc = nn::StepContext::Eval(&ec, comm_.get());
  ExpectTensorParallelDecodingMatchesSerial(*comm_, ForModel(model->get(), &sc),
                                            ForModel(serial->get(), &ssc), "gpt2");

  // One decoding step's collectives: the embedding's all-reduce, two per layer, one gather.
  if (comm_->size() == 1) return;
  ASSERT_TRUE((*model)->StartDecoding(sc, 2, 4).ok());
  Tensor tokens = Tensor::Host({2, 1}, DType::kI32);
  tokens.data_as<int32_t>()[0] = 3;
  tokens.data_as<int32_t>()[1] = 4;
  Tensor logits = Tensor::Host({2, (*model)->padded_vocab()}, DType::kF32);
  comm_->ResetCounters();
  ASSERT_TRUE((*model)->DecodeStep(sc, tokens.view(), logits.view()).ok());
  const comm::CommCounters c = comm_->ResetCounters();
  EXPECT_EQ(c.all_reduce, 1 + 2 * 2);
  EXPECT_EQ(c.all_gather, 1);
  EXPECT_EQ(c.calls(), 1 + 2 * 2 + 1);
}

TEST_F(MpiTest, RotaryStackDecodingMatchesSerial) {
  const ExecContext ec;
  const nn::LayerSpec spec = testing::RotarySpec();
  nn::ParameterStore serial_store(0, 1), store(comm_->rank(), comm_->size());
  auto serial = TinyLm::Create(&serial_store, spec, 2, 203, 208);
  auto lm = TinyLm::Create(&store, spec, 2, 203, 208);
  ASSERT_TRUE(serial.ok() && lm.ok());
  ASSERT_TRUE(serial_store.Allocate(22).ok() && store.Allocate(22).ok());
  const nn::StepContext ssc = nn::StepContext::Eval(&ec),
                        sc = nn::StepContext::Eval(&ec, comm_.get());
  ExpectTensorParallelDecodingMatchesSerial(*comm_, (*lm)->Calls(&sc), (*serial)->Calls(&ssc),
                                            "rotary");
}

}  // namespace
}  // namespace models
}  // namespace mt

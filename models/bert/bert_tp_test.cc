// Tensor-parallel invariance of BERT (run under mpirun with 1, 2 and 4 ranks; every rank is one TP
// rank): with the same seed, the TP model holds the serial model's weight slices and gives the
// serial model's losses and gradients within float32 rounding, with dropout on, for pre-norm and
// post-norm, the pretraining heads and the multiple-choice head; a transformer layer costs exactly
// two all-reduces forward and two backward (models/testing/model_testutil). With every rank a
// context-parallel rank instead, the serial model's losses and gradients too.
#include "comm/mpi_testutil.h"
#include "gtest/gtest.h"
#include "models/bert/bert.h"
#include "models/testing/model_testutil.h"

namespace mt {
namespace models {
namespace {

using ::mt::comm::testing::MpiTest;
using ::mt::models::testing::AllReduces;
using ::mt::models::testing::ExpectContextParallelMatchesSerialOrRefused;
using ::mt::models::testing::ExpectTensorParallelMatchesSerial;
using ::mt::models::testing::Objective;
using ::mt::models::testing::TensorParallelCheck;

ModelConfig SmallConfig(int layers, nn::NormPosition norm) {
  ModelConfig c = ModelConfig::Sized(Family::kBert, layers, 16, 4, 37, 8);
  c.make_vocab_size_divisible_by = 8;  // Padded to 40 (TP 1), 48 (TP 2), 64 (TP 4).
  c.norm = norm;
  c.hidden_dropout = 0.1f;
  c.attention_dropout = 0.1f;
  c.init_std = 0.2;
  return c;
}

// rows sequences of length T; row r has r % 3 padded positions at its end; about a third of the
// real positions after [CLS] are scored by the MLM.
struct BertInputs {
  Tensor tokens, types, mask, mlm, sop;
  Batch Pretraining() const {
    return BertBatch(tokens.view(), types.view(), mask.view(), mlm.view(), sop.view());
  }
  // The rows as Q questions of rows / Q choices, with the right choice of each in `labels` [Q].
  Batch Choices(const Tensor& labels) const {
    return MultipleChoiceBatch(tokens.view(), types.view(), mask.view(), labels.view());
  }
};

BertInputs MakeInputs(int rows, int T, int V) {
  BertInputs b;
  b.tokens = Tensor::Host({rows, T}, DType::kI32);
  b.types = Tensor::Host({rows, T}, DType::kI32);
  b.mask = Tensor::Host({rows, T}, DType::kI32);
  b.mlm = Tensor::Host({rows, T}, DType::kI32);
  b.sop = Tensor::Host({rows}, DType::kI32);
  for (int r = 0; r < rows; ++r) {
    const int real = T - r % 3;
    for (int t = 0; t < T; ++t) {
      const int i = r * T + t;
      b.tokens.data_as<int32_t>()[i] = (i * 11 + 2) % V;
      b.types.data_as<int32_t>()[i] = t >= T / 2 ? 1 : 0;
      b.mask.data_as<int32_t>()[i] = t < real ? 1 : 0;
      b.mlm.data_as<int32_t>()[i] = t > 0 && t < real && i % 3 != 0 ? (i * 13 + 5) % V : -100;
    }
    b.sop.data_as<int32_t>()[r] = (r + 1) % 2;
  }
  return b;
}

// BERT's TP-vs-serial check of one objective, with the model's heads for it, parameters from
// `seed` and the step's dropout masks keyed from sample 6. lm_head.bias is vocabulary-padded
// without its spec saying so; the multiple-choice bias has zero gradient in exact arithmetic (the
// softmax over the choices is shift-invariant), so both sides are rounding noise, compared against
// the scale of the head's weight gradient instead.
TensorParallelCheck BertCheck(Objective objective, uint64_t seed) {
  TensorParallelCheck check;
  check.objective = objective;
  check.options.heads =
      objective == Objective::kPretraining ? Heads::kPretraining : Heads::kMultipleChoice;
  check.seed = seed;
  check.sample_offset = 6;
  check.vocab_padded = {"lm_head.bias"};
  check.zero_gradients = {{"multiple_choice_head.bias", "multiple_choice_head.weight"}};
  return check;
}

// Both losses (MLM and SOP) and their sum, slices of the weights and gradients, dropout on.
TEST_F(MpiTest, TensorParallelBertPretrainingMatchesSerialWithDropout) {
  for (nn::NormPosition norm : {nn::NormPosition::kPreNorm, nn::NormPosition::kPostNorm}) {
    SCOPED_TRACE(norm == nn::NormPosition::kPreNorm ? "pre-norm" : "post-norm");
    const ModelConfig c = SmallConfig(2, norm);
    const BertInputs b = MakeInputs(3, 7, static_cast<int>(c.vocab_size));
    ExpectTensorParallelMatchesSerial(*comm_, c, b.Pretraining(),
                                      BertCheck(Objective::kPretraining, 7));
  }
}

// Two questions of four choices: the loss, the predictions, the slices.
TEST_F(MpiTest, TensorParallelBertMultipleChoiceMatchesSerialWithDropout) {
  const ModelConfig c = SmallConfig(2, nn::NormPosition::kPreNorm);
  const BertInputs b = MakeInputs(2 * 4, 6, static_cast<int>(c.vocab_size));
  Tensor labels = Tensor::Host({2}, DType::kI32);
  labels.data_as<int32_t>()[0] = 3;
  labels.data_as<int32_t>()[1] = 1;
  ExpectTensorParallelMatchesSerial(*comm_, c, b.Choices(labels),
                                    BertCheck(Objective::kMultipleChoice, 9));
}

TEST_F(MpiTest, TwoAllReducesForwardAndTwoBackwardPerLayer) {
  if (comm_->size() == 1) GTEST_SKIP() << "counts need TP > 1";
  for (nn::NormPosition norm : {nn::NormPosition::kPreNorm, nn::NormPosition::kPostNorm}) {
    SCOPED_TRACE(norm == nn::NormPosition::kPreNorm ? "pre-norm" : "post-norm");
    AllReduces pretraining[3], choices[3];
    const Tensor mc_labels = Tensor::Zeros({2}, DType::kI32);
    for (int layers : {1, 2}) {
      const ModelConfig c = SmallConfig(layers, norm);
      const BertInputs b = MakeInputs(4, 5, static_cast<int>(c.vocab_size));
      pretraining[layers] = ExpectTensorParallelMatchesSerial(
          *comm_, c, b.Pretraining(), BertCheck(Objective::kPretraining, 1));
      choices[layers] = ExpectTensorParallelMatchesSerial(*comm_, c, b.Choices(mc_labels),
                                                          BertCheck(Objective::kMultipleChoice, 1));
      EXPECT_EQ(pretraining[layers].others, 0);
      EXPECT_EQ(choices[layers].others, 0);
    }
    // Per layer: exactly two each way.
    EXPECT_EQ(pretraining[2].forward - pretraining[1].forward, 2);
    EXPECT_EQ(pretraining[2].backward - pretraining[1].backward, 2);
    EXPECT_EQ(choices[2].forward - choices[1].forward, 2);
    EXPECT_EQ(choices[2].backward - choices[1].backward, 2);
    // Whole model: embedding (1) + 2 per layer + the MLM cross-entropy (max, then [target,
    // sum-exp]) forward; 2 per layer + the tied decoder's input gradient (1) backward. The pooler,
    // SOP and multiple-choice heads are replicated and communicate nothing.
    EXPECT_EQ(pretraining[2].forward, 1 + 2 * 2 + 2);
    EXPECT_EQ(pretraining[2].backward, 2 * 2 + 1);
    EXPECT_EQ(choices[2].forward, 1 + 2 * 2);
    EXPECT_EQ(choices[2].backward, 2 * 2);
  }
}

// Sequence parallelism, pre-norm and post-norm, with the padding mask and dropout on: the serial
// model's losses and gradient slices; per layer no all-reduce forward and one (the LayerNorms'
// gradients) backward, the TP model's all-reduces replaced by all-gathers and reduce-scatters
// (as GPT's: models/gpt2/gpt2_tp_test.cc).
TEST_F(MpiTest, SequenceParallelBertMatchesSerial) {
  if (comm_->size() == 1) GTEST_SKIP() << "sequence parallelism needs TP > 1";
  for (nn::NormPosition norm : {nn::NormPosition::kPreNorm, nn::NormPosition::kPostNorm}) {
    SCOPED_TRACE(norm == nn::NormPosition::kPreNorm ? "pre-norm" : "post-norm");
    TensorParallelCheck check = BertCheck(Objective::kPretraining, 3);
    check.options.sequence_parallel = true;
    AllReduces counts[3];
    for (int layers : {1, 2}) {
      const ModelConfig c = SmallConfig(layers, norm);
      const BertInputs b = MakeInputs(3, 8, static_cast<int>(c.vocab_size));
      counts[layers] = ExpectTensorParallelMatchesSerial(*comm_, c, b.Pretraining(), check);
    }
    EXPECT_EQ(counts[2].forward - counts[1].forward, 0);
    EXPECT_EQ(counts[2].backward - counts[1].backward, 1);
    EXPECT_EQ(counts[2].others - counts[1].others, 14);
  }
}

// Context parallelism over every rank (CP = 1, 2, 4): one step's losses and summed gradients are
// the serial model's, dropout on, pre- and post-norm; also when the MLM scores only positions of
// the first chunk (the other CP ranks' chunks hold none, and only CP rank 0 holds the [CLS]
// positions the sentence-order head reads).
TEST_F(MpiTest, ContextParallelBertMatchesSerial) {
  const int C = comm_->size();
  for (nn::NormPosition norm : {nn::NormPosition::kPreNorm, nn::NormPosition::kPostNorm}) {
    SCOPED_TRACE(norm == nn::NormPosition::kPreNorm ? "pre-norm" : "post-norm");
    ModelConfig c = SmallConfig(2, norm);
    const int chunk = 2, T = 2 * C * chunk;
    c.max_position_embeddings = T;
    BertInputs b = MakeInputs(3, T, static_cast<int>(c.vocab_size));
    EXPECT_TRUE(ExpectContextParallelMatchesSerialOrRefused(*comm_, c, b.Pretraining()));
    for (int i = 0; i < 3 * T; ++i) {
      if (i % T >= chunk) b.mlm.data_as<int32_t>()[i] = -100;
      if (i % T == 1) b.mlm.data_as<int32_t>()[i] = 7;
    }
    EXPECT_TRUE(ExpectContextParallelMatchesSerialOrRefused(*comm_, c, b.Pretraining()));
  }
}

}  // namespace
}  // namespace models
}  // namespace mt

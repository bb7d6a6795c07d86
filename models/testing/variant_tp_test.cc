// Tensor-parallel invariance of a model variant (run under mpirun with 1, 2 and 4 ranks by the
// tests models/variant.bzl makes for each variant package): a small version of the variant's
// test model holds the serial model's slices at TP = the number of ranks, gives its loss and
// gradients within float32 rounding with dropout on, and each layer costs the all-reduces the
// variant declares (GPT-2's layer: two each way). The model and the count come from the
// generated kVariantModel / kAllReducesPerLayer. Under context parallelism (CP = the number of
// ranks) it matches the serial model too, or refuses it clearly.
#include "comm/mpi_testutil.h"
#include "gtest/gtest.h"
#include "models/registry.h"
#include "models/testing/model_testutil.h"

namespace mt {
namespace models {
namespace testing {

extern const char* const kVariantModel;
extern const int kAllReducesPerLayer;

namespace {

using ::mt::comm::testing::MpiTest;

// Heads and the MLP width divide TP = 1, 2 and 4; head dim 8 suits rotary embeddings.
ModelConfig Small(int layers) {
  auto m = FindModel(kVariantModel);
  EXPECT_TRUE(m.ok()) << m.status();
  ModelConfig c = m.ok() ? m->config : ModelConfig();
  c.num_layers = layers;
  c.hidden_size = 32;
  c.num_attention_heads = 4;
  c.ffn_hidden_size = 64;
  c.vocab_size = 37;
  c.make_vocab_size_divisible_by = 8;  // Padded to 40 (TP 1), 48 (TP 2), 64 (TP 4).
  c.max_position_embeddings = 8;
  c.hidden_dropout = c.attention_dropout = 0.1f;
  c.init_std = 0.2;
  return c;
}

TEST_F(MpiTest, VariantMatchesSerialWithItsAllReducesPerLayer) {
  const LmBatch batch = MakeLmBatch(3, 7, 37);
  const AllReduces two = ExpectTensorParallelMatchesSerial(*comm_, Small(2), batch.view());
  const AllReduces three = ExpectTensorParallelMatchesSerial(*comm_, Small(3), batch.view());
  if (comm_->size() == 1) return;  // No collectives at TP = 1.
  EXPECT_EQ(three.forward - two.forward, kAllReducesPerLayer) << kVariantModel;
  EXPECT_EQ(three.backward - two.backward, kAllReducesPerLayer) << kVariantModel;
}

// Context parallelism at CP = the number of ranks: the variant either refuses it clearly or gives
// the serial loss and (summed over the ranks) gradients with hidden dropout on (attention dropout
// off: the ring has none), with its own attention and, where the variant takes them, 2 key/value
// groups for the 4 heads (grouped-query attention: only the groups travel the ring).
TEST_F(MpiTest, VariantUnderContextParallelMatchesSerialOrRefusesIt) {
  const LmBatch batch = MakeLmBatch(2, 8, 37);  // 8 positions: 2 x 4 chunks at CP = 4.
  ModelConfig c = Small(2);
  c.attention_dropout = 0;
  const bool runs = ExpectContextParallelMatchesSerialOrRefused(*comm_, c, batch.view());
  ModelConfig grouped = c;
  grouped.num_query_groups = 2;
  nn::ParameterStore probe(0, 1);
  if (runs && CreateModel(grouped, &probe).ok()) {
    EXPECT_TRUE(ExpectContextParallelMatchesSerialOrRefused(*comm_, grouped, batch.view()));
  }
}

}  // namespace
}  // namespace testing
}  // namespace models
}  // namespace mt

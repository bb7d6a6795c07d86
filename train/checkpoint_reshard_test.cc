// Tests of ReshardCheckpoint (checkpoint_reshard.cc) against slices of the synthetic model's
// global tensors computed by plain index arithmetic (checkpoint_testutil.h).
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "train/checkpoint.h"
#include "train/checkpoint_testutil.h"
#include "train/safetensors.h"

namespace mt {
namespace train {
namespace {

using testing::Bytes;
using testing::FreshDir;
using testing::HoldsModel;
using testing::kRealVocab;
using testing::PaddedVocab;
using testing::Repadded;
using testing::SaveModel;
using testing::SyntheticModel;
using testing::SyntheticTensor;

namespace fs = std::filesystem;

// Reshards a TP=2 checkpoint and checks every new shard against slices of the global tensors
// computed element by element from the original random model.
TEST(CheckpointTest, ReshardReproducesSlicesOfTheGlobalTensors) {
  const std::string src = FreshDir("reshard_src");
  const auto model = SyntheticModel(PaddedVocab(2), 11);
  ASSERT_TRUE(SaveModel(src, model, 2, 100).ok());
  for (int new_tp : {1, 2, 4}) {
    SCOPED_TRACE(new_tp);
    const std::string dst = FreshDir(absl::StrCat("reshard_to_", new_tp));
    ASSERT_TRUE(ReshardCheckpoint(src, 100, dst, new_tp, kRealVocab, PaddedVocab(new_tp)).ok());
    auto latest = LatestIteration(dst);
    ASSERT_TRUE(latest.ok()) << latest.status();
    EXPECT_EQ(*latest, 100);
    // Padding rows (random in the source) come out zero; real rows and all else are exact.
    EXPECT_TRUE(HoldsModel(dst, 100, new_tp, Repadded(model, PaddedVocab(new_tp))));
  }
}

TEST(CheckpointTest, ReshardTwoToFourToTwoIsBitExact) {
  const std::string a = FreshDir("reshard_a");
  const std::string b = FreshDir("reshard_b");
  const std::string c = FreshDir("reshard_c");
  // Start from a checkpoint whose padding rows are already zero, as a resharded one has.
  const auto model = Repadded(SyntheticModel(PaddedVocab(2), 12), PaddedVocab(2));
  ASSERT_TRUE(SaveModel(a, model, 2, 42).ok());
  ASSERT_TRUE(ReshardCheckpoint(a, 42, b, 4, kRealVocab, PaddedVocab(4)).ok());
  ASSERT_TRUE(ReshardCheckpoint(b, 42, c, 2, kRealVocab, PaddedVocab(2)).ok());
  for (int r = 0; r < 2; ++r) {
    auto ra = SafetensorsReader::Open(ShardDir(a, 42, r) + "/model_optim.safetensors");
    auto rc = SafetensorsReader::Open(ShardDir(c, 42, r) + "/model_optim.safetensors");
    ASSERT_TRUE(ra.ok() && rc.ok());
    ASSERT_EQ(ra->entries().size(), rc->entries().size());
    for (const SafetensorsEntry& e : ra->entries()) {
      auto ta = ra->ReadTensor(e.name);
      auto tc = rc->ReadTensor(e.name);
      ASSERT_TRUE(ta.ok() && tc.ok()) << e.name;
      EXPECT_EQ(tc->shape(), ta->shape()) << e.name;
      EXPECT_EQ(Bytes(tc->view()), Bytes(ta->view())) << e.name;
    }
    auto ma = ReadShardMetadata(a, 42, r);
    auto mc = ReadShardMetadata(c, 42, r);
    ASSERT_TRUE(ma.ok() && mc.ok());
    EXPECT_EQ(mc->model_config_json, ma->model_config_json);
    EXPECT_EQ(mc->trainer_state_json, ma->trainer_state_json);
    EXPECT_EQ(mc->consumed_samples, ma->consumed_samples);
    EXPECT_EQ(mc->tp_size, 2);
  }
  EXPECT_TRUE(HoldsModel(c, 42, 2, model));
}

// LoadResharded fills one rank's slices for any degree straight from a TP=2 checkpoint: the same
// slices ReshardCheckpoint would write (every dtype, split on dims 0, 1, 2, replicated, empty),
// optimizer tensors skipped by prefix.
TEST(CheckpointTest, LoadReshardedGivesTheSlicesOfAnyDegree) {
  const std::string src = FreshDir("load_resharded_src");
  const auto model = SyntheticModel(PaddedVocab(2), 21);
  ASSERT_TRUE(SaveModel(src, model, 2, 5).ok());
  ReshardedLoadOptions options;
  options.skip_prefixes = {"optimizer."};
  for (int tp : {1, 2, 4}) {
    std::vector<SyntheticTensor> want = Repadded(model, PaddedVocab(tp));
    want.erase(
        std::remove_if(want.begin(), want.end(),
                       [](const SyntheticTensor& t) { return t.name.rfind("optimizer.", 0) == 0; }),
        want.end());
    for (int r = 0; r < tp; ++r) {
      SCOPED_TRACE(absl::StrCat("rank ", r, " of ", tp));
      std::vector<Tensor> storage;
      const std::vector<TensorRecord> records = testing::ZeroRecords(want, r, tp, &storage);
      auto loaded = LoadResharded(src, 5, r, tp, kRealVocab, records, options);
      ASSERT_TRUE(loaded.ok()) << loaded.status();
      EXPECT_EQ(loaded->meta.tp_size, 2);
      EXPECT_TRUE(loaded->missing.empty() && loaded->ignored.empty());
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(Bytes(records[i].local),
                  Bytes(testing::SliceOf(want[i].global.view(), want[i].split_dim, r, tp).view()))
            << want[i].name;
      }
    }
  }
  // Names on one side only, and a real vocabulary larger than the padded one.
  std::vector<Tensor> storage;
  std::vector<SyntheticTensor> fewer = Repadded(model, PaddedVocab(1));
  fewer.erase(fewer.begin());
  EXPECT_STATUS(
      LoadResharded(src, 5, 0, 1, kRealVocab, testing::ZeroRecords(fewer, 0, 1, &storage)).status(),
      absl::StatusCode::kFailedPrecondition,
      "holds 1 tensor(s) this model does not have: embedding.word.weight");
  EXPECT_STATUS(LoadResharded(src, 5, 0, 1, 41,
                              testing::ZeroRecords(Repadded(model, PaddedVocab(1)), 0, 1, &storage))
                    .status(),
                absl::StatusCode::kFailedPrecondition,
                "vocab-padded tensor 'embedding.word.weight' has 40 rows in the checkpoint and 40 "
                "in this model; both must hold the real vocabulary of 41");
}

TEST(CheckpointTest, ReshardErrors) {
  const std::string src = FreshDir("reshard_err_src");
  const auto model = SyntheticModel(PaddedVocab(2), 13);
  ASSERT_TRUE(SaveModel(src, model, 2, 9).ok());
  const std::string dst = FreshDir("reshard_err_dst");
  EXPECT_STATUS(ReshardCheckpoint(src, 9, dst, 0, kRealVocab, 40),
                absl::StatusCode::kInvalidArgument, "must be >= 1");
  EXPECT_STATUS(ReshardCheckpoint(src, 9, src + "/.", 1, kRealVocab, 40),
                absl::StatusCode::kInvalidArgument, "must differ from the source");
  EXPECT_STATUS(ReshardCheckpoint(src, 9, dst, 4, kRealVocab, 42),
                absl::StatusCode::kInvalidArgument, "divisible by tensor_model_parallel_size 4");
  EXPECT_STATUS(ReshardCheckpoint(src, 9, dst, 1, 41, 48), absl::StatusCode::kInvalidArgument,
                "real vocabulary 41 exceeds the 40 rows of vocab-padded tensor "
                "'embedding.word.weight'");
  EXPECT_STATUS(ReshardCheckpoint(src, 9, dst, 3, kRealVocab, 48),
                absl::StatusCode::kInvalidArgument,
                "tensor 'layers.0.dense.weight' of global shape [6, 8] cannot be split on dim 1 "
                "over tensor_model_parallel_size 3");
  EXPECT_STATUS(ReshardCheckpoint(src, 8, dst, 1, kRealVocab, 40), absl::StatusCode::kNotFound,
                "no checkpoint shard");
  EXPECT_FALSE(fs::exists(dst + "/iter_0000009"));
  ASSERT_TRUE(ReshardCheckpoint(src, 9, dst, 1, kRealVocab, 40).ok());
  EXPECT_STATUS(ReshardCheckpoint(src, 9, dst, 1, kRealVocab, 40), absl::StatusCode::kAlreadyExists,
                "already exists");
  fs::remove_all(ShardDir(src, 9, 1));
  EXPECT_STATUS(ReshardCheckpoint(src, 9, FreshDir("reshard_err_dst2"), 1, kRealVocab, 40),
                absl::StatusCode::kFailedPrecondition, "shard mp_rank_01 of 2 is missing");
}

}  // namespace
}  // namespace train
}  // namespace mt

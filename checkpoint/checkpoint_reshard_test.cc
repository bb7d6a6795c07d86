// Tests of ReshardCheckpoint (checkpoint_reshard.cc) and LoadResharded across TP degrees and
// pipeline layouts (mp_rank_TT_PPP), against slices of the synthetic model's global tensors
// computed by plain index arithmetic (checkpoint_testutil.h); expert-parallel shards
// (mp_rank_TT_PPP_EEE) too.
#include <algorithm>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_testutil.h"
#include "checkpoint/safetensors.h"
#include "gtest/gtest.h"

namespace mt {
namespace checkpoint {
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

// A checkpoint of TP=2 x PP=2 shards: named as Megatron names them, each stage's shards holding
// its tensors (the tied embedding in both), the layout in the metadata, complete only when every
// one of the four shards is there.
TEST(CheckpointTest, PipelineStagesAreShardsOfTheirOwn) {
  EXPECT_EQ(ShardDir("/ckpt", 100, 1, 2, 4), "/ckpt/iter_0000100/mp_rank_01_002");
  EXPECT_EQ(ShardDir("/ckpt", 100, 1, 0, 1), "/ckpt/iter_0000100/mp_rank_01");
  const std::string dir = FreshDir("pp_layout");
  const auto model = SyntheticModel(PaddedVocab(2), 31);
  ASSERT_TRUE(testing::SaveStages(dir, model, 2, 2, 6, testing::TwoStages).ok());
  EXPECT_EQ(testing::Entries(dir + "/iter_0000006"),
            (std::vector<std::string>{"mp_rank_00_000", "mp_rank_00_001", "mp_rank_01_000",
                                      "mp_rank_01_001"}));
  EXPECT_TRUE(HoldsModel(dir, 6, 2, model, 2, testing::TwoStages));
  auto meta = ReadShardMetadata(dir, 6, 1, 1);
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(meta->pp_size, 2);
  EXPECT_EQ(meta->pp_rank, 1);
  EXPECT_EQ(meta->tp_rank, 1);
  auto latest = LatestIteration(dir);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, 6);

  // Loading one stage's shard into a run laid out otherwise says how to convert it.
  std::vector<Tensor> storage;
  EXPECT_STATUS(LoadShard(dir, 6, 0, 2, testing::ConfigJson(),
                          testing::ZeroRecords(model, 0, 2, &storage), nullptr),
                absl::StatusCode::kFailedPrecondition,
                "pipeline_model_parallel_size 2 but this run uses 2 and 1; convert it first");
  // A stage's shard missing: no commit, and a pointer naming it is refused.
  const std::string partial = FreshDir("pp_partial");
  const auto stage1 = testing::StageTensors(model, 1, testing::TwoStages);
  for (int r = 0; r < 2; ++r) {
    CheckpointMetadata m = testing::SyntheticMeta(6, r, 2);
    m.pp_size = 2;
    m.pp_rank = 1;
    ASSERT_TRUE(SaveShard(partial, m, testing::FilledRecords(stage1, r, 2, &storage)).ok());
  }
  EXPECT_STATUS(CommitCheckpoint(partial, 6, 2, 0, 2), absl::StatusCode::kFailedPrecondition,
                "shard mp_rank_00_000 of 4 is missing");
  fs::remove_all(ShardDir(dir, 6, 1, 1, 2));
  EXPECT_STATUS(LatestIteration(dir).status(), absl::StatusCode::kDataLoss,
                "shard mp_rank_01_001 of 4 is missing");
  // A one-stage save of an iteration killed before its commit leaves mp_rank_00; a two-stage
  // save of the same iteration then commits: the stale shard goes, and loading sees two stages.
  const std::string stale = FreshDir("pp_stale");
  ASSERT_TRUE(SaveShard(stale, testing::SyntheticMeta(6, 0, 1),
                        testing::FilledRecords(model, 0, 1, &storage))
                  .ok());
  ASSERT_TRUE(testing::SaveStages(stale, model, 2, 2, 6, testing::TwoStages).ok());
  EXPECT_FALSE(fs::exists(stale + "/iter_0000006/mp_rank_00"));
  EXPECT_TRUE(HoldsModel(stale, 6, 2, model, 2, testing::TwoStages));
  // A stage number outside the layout.
  CheckpointMetadata bad = testing::SyntheticMeta(6, 0, 2);
  bad.pp_size = 2;
  bad.pp_rank = 2;
  EXPECT_STATUS(SaveShard(partial, bad, testing::FilledRecords(stage1, 0, 2, &storage)),
                absl::StatusCode::kInvalidArgument, "pp_rank 2 of pp_size 2");
}

// Any layout loads into any other: every tensor of a TP=2 x PP=2 checkpoint read by LoadResharded
// into the whole model at TP 1, 2 and 4, and into each stage of a 2-stage run.
TEST(CheckpointTest, LoadReshardedReadsEveryStage) {
  const std::string src = FreshDir("pp_load_src");
  const auto model = SyntheticModel(PaddedVocab(2), 32);
  ASSERT_TRUE(testing::SaveStages(src, model, 2, 2, 8, testing::TwoStages).ok());
  for (int tp : {1, 2, 4}) {
    const std::vector<SyntheticTensor> whole = Repadded(model, PaddedVocab(tp));
    for (int stage : {-1, 0, 1}) {  // -1: the whole model.
      const std::vector<SyntheticTensor> want =
          stage < 0 ? Repadded(whole, PaddedVocab(tp))
                    : testing::StageTensors(whole, stage, testing::TwoStages);
      ReshardedLoadOptions options;
      options.allow_unexpected = stage >= 0;
      options.expected_model_config_json = testing::ConfigJson();
      for (int r = 0; r < tp; ++r) {
        SCOPED_TRACE(absl::StrCat("rank ", r, " of ", tp, ", stage ", stage));
        std::vector<Tensor> storage;
        const std::vector<TensorRecord> records = testing::ZeroRecords(want, r, tp, &storage);
        auto loaded = LoadResharded(src, 8, r, tp, kRealVocab, records, options);
        ASSERT_TRUE(loaded.ok()) << loaded.status();
        EXPECT_EQ(loaded->meta.pp_size, 2);
        EXPECT_TRUE(loaded->missing.empty());
        EXPECT_EQ(loaded->ignored.empty(), stage < 0);
        for (size_t i = 0; i < want.size(); ++i) {
          EXPECT_EQ(Bytes(records[i].local),
                    Bytes(testing::SliceOf(want[i].global.view(), want[i].split_dim, r, tp).view()))
              << want[i].name;
        }
      }
    }
  }
  // At the saved shape and degree, keep_padding_rows reads the padding rows as stored.
  std::vector<Tensor> storage;
  const auto stage0 = testing::StageTensors(model, 0, testing::TwoStages);
  const std::vector<TensorRecord> records = testing::ZeroRecords(stage0, 1, 2, &storage);
  ReshardedLoadOptions keep;
  keep.allow_unexpected = keep.keep_padding_rows = true;
  ASSERT_TRUE(LoadResharded(src, 8, 1, 2, kRealVocab, records, keep).ok());
  for (size_t i = 0; i < stage0.size(); ++i) {
    EXPECT_EQ(Bytes(records[i].local),
              Bytes(testing::SliceOf(stage0[i].global.view(), stage0[i].split_dim, 1, 2).view()))
        << stage0[i].name;
  }
  // Another model config is refused when one is expected.
  keep.expected_model_config_json = R"({"family": "bert"})";
  EXPECT_STATUS(LoadResharded(src, 8, 1, 2, kRealVocab, records, keep).status(),
                absl::StatusCode::kFailedPrecondition, "model config differs from this run's");
}

// ReshardCheckpoint between pipeline layouts: TP=2 x PP=2 -> TP=1 (one stage) -> TP=4 x PP=2 ->
// TP=2 x PP=2 again, bit for bit where the vocabulary padding allows.
TEST(CheckpointTest, ReshardBetweenPipelineLayouts) {
  const std::string a = FreshDir("pp_reshard_a");
  const auto model = Repadded(SyntheticModel(PaddedVocab(2), 33), PaddedVocab(2));
  ASSERT_TRUE(testing::SaveStages(a, model, 2, 2, 3, testing::TwoStages).ok());
  const std::string b = FreshDir("pp_reshard_b");
  ASSERT_TRUE(ReshardCheckpoint(a, 3, b, 1, kRealVocab, PaddedVocab(1)).ok());
  EXPECT_TRUE(HoldsModel(b, 3, 1, Repadded(model, PaddedVocab(1))));
  ReshardLayout four;
  four.tp_size = 4;
  four.padded_vocab = PaddedVocab(4);
  four.pp_size = 2;
  four.stages_of = testing::TwoStages;
  const std::string c = FreshDir("pp_reshard_c");
  ASSERT_TRUE(ReshardCheckpoint(b, 3, c, kRealVocab, four).ok());
  EXPECT_TRUE(HoldsModel(c, 3, 4, Repadded(model, PaddedVocab(4)), 2, testing::TwoStages));
  ReshardLayout two = four;
  two.tp_size = 2;
  two.padded_vocab = PaddedVocab(2);
  const std::string d = FreshDir("pp_reshard_d");
  ASSERT_TRUE(ReshardCheckpoint(c, 3, d, kRealVocab, two).ok());
  EXPECT_TRUE(HoldsModel(d, 3, 2, model, 2, testing::TwoStages));

  // A layout that loses a tensor or leaves a stage empty is refused before anything is written.
  ReshardLayout lossy = two;
  lossy.stages_of = [](const std::string& name) {
    return name == "tokens" ? std::vector<int>() : testing::TwoStages(name);
  };
  const std::string e = FreshDir("pp_reshard_e");
  EXPECT_STATUS(ReshardCheckpoint(a, 3, e, kRealVocab, lossy), absl::StatusCode::kInvalidArgument,
                "places tensor 'tokens' on no stage");
  ReshardLayout three = two;
  three.pp_size = 3;
  EXPECT_STATUS(ReshardCheckpoint(a, 3, e, kRealVocab, three), absl::StatusCode::kInvalidArgument,
                "pipeline stage 2 of 3 would hold no tensor");
  three.stages_of = nullptr;
  EXPECT_STATUS(ReshardCheckpoint(a, 3, e, kRealVocab, three), absl::StatusCode::kInvalidArgument,
                "needs the stages that hold each tensor");
  EXPECT_FALSE(fs::exists(e + "/iter_0000003"));
}

// Expert-parallel shards (mp_rank_TT_PPP_EEE): a TP=2 x PP=2 x EP=2 checkpoint of the synthetic
// model plus 4 experts per stage, each EP rank's shards holding its 2 experts (EP rank 0's the
// dense tensors too). It loads whole at TP 1, as one EP rank of EP=2 and EP=4 at TP 2, reshards
// into one shard of every expert, and is refused by LoadShard and when an EP shard is missing.
std::vector<int> StagesWithExperts(const std::string& name) {
  if (absl::StartsWith(name, "layers.0.experts.")) return {0};
  return testing::TwoStages(name);
}

int ExpertOf(const std::string& name) {
  const size_t at = name.find(".experts.");
  return at == std::string::npos ? -1 : name[at + 9] - '0';
}

TEST(CheckpointTest, ExpertParallelShardsLoadAtAnyExpertParallelSize) {
  EXPECT_EQ(ShardDir("/ckpt", 5, 1, 2, 4, 3, 4), "/ckpt/iter_0000005/mp_rank_01_002_003");
  EXPECT_EQ(ShardDir("/ckpt", 5, 1, 0, 1, 1, 2), "/ckpt/iter_0000005/mp_rank_01_001");
  std::vector<SyntheticTensor> model = SyntheticModel(PaddedVocab(2), 34);
  for (int layer : {0, 1}) {
    for (int e = 0; e < 4; ++e) {
      Tensor w = Tensor::Host({6, 4}, DType::kF32);
      for (int64_t i = 0; i < 24; ++i) w.data_as<float>()[i] = 0.37f * i - 10.0f * e - layer;
      model.push_back(
          {absl::StrCat("layers.", layer, ".experts.", e, ".w"), {6, 4}, 1, false, std::move(w)});
    }
  }
  const std::string dir = FreshDir("ep_layout");
  for (int p = 0; p < 2; ++p) {
    for (int ep = 0; ep < 2; ++ep) {
      std::vector<SyntheticTensor> held;
      for (SyntheticTensor& t : testing::StageTensors(model, p, StagesWithExperts)) {
        const int e = ExpertOf(t.name);
        if (e < 0 ? ep == 0 : e / 2 == ep) held.push_back(std::move(t));
      }
      for (int r = 0; r < 2; ++r) {
        std::vector<Tensor> storage;
        CheckpointMetadata meta = testing::SyntheticMeta(5, r, 2);
        meta.pp_size = 2;
        meta.pp_rank = p;
        meta.ep_size = 2;
        meta.ep_rank = ep;
        meta.experts = {2 * ep, 2 * ep + 1};
        ASSERT_TRUE(SaveShard(dir, meta, testing::FilledRecords(held, r, 2, &storage)).ok());
      }
    }
  }
  EXPECT_STATUS(CommitCheckpoint(dir, 5, 2, 0, 2), absl::StatusCode::kFailedPrecondition,
                "shard mp_rank_00_000 of 4 is missing");
  ASSERT_TRUE(CommitCheckpoint(dir, 5, 2, 0, 2, /*ep_size=*/2).ok());
  EXPECT_EQ(testing::Entries(dir + "/iter_0000005").size(), 8u);
  auto meta = ReadShardMetadata(dir, 5, 1, 1);
  ASSERT_TRUE(meta.ok()) << meta.status();
  EXPECT_EQ(meta->ep_size, 2);
  EXPECT_EQ(meta->ep_rank, 0);
  EXPECT_EQ(meta->experts, (std::vector<int>{0, 1}));

  // Whole at TP 1; as EP rank 1 of 2 (experts 2, 3) and rank 3 of 4 (expert 3) at TP 2.
  for (auto [tp, ep_size, ep_rank] : {std::tuple{1, 1, 0}, {2, 2, 1}, {2, 4, 3}}) {
    SCOPED_TRACE(absl::StrCat("TP ", tp, " EP rank ", ep_rank, " of ", ep_size));
    std::vector<SyntheticTensor> want;
    for (SyntheticTensor& t : Repadded(model, PaddedVocab(tp))) {
      const int e = ExpertOf(t.name);
      if (e < 0 || e / (4 / ep_size) == ep_rank) want.push_back(std::move(t));
    }
    ReshardedLoadOptions options;
    options.allow_unexpected = ep_size > 1;
    for (int r = 0; r < tp; ++r) {
      std::vector<Tensor> storage;
      const std::vector<TensorRecord> records = testing::ZeroRecords(want, r, tp, &storage);
      auto loaded = LoadResharded(dir, 5, r, tp, kRealVocab, records, options);
      ASSERT_TRUE(loaded.ok()) << loaded.status();
      EXPECT_EQ(loaded->ignored.size(), 2u * (4 - 4 / ep_size));  // 2 layers.
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(Bytes(records[i].local),
                  Bytes(testing::SliceOf(want[i].global.view(), want[i].split_dim, r, tp).view()))
            << want[i].name;
      }
    }
  }
  std::vector<Tensor> storage;
  EXPECT_STATUS(LoadShard(dir, 5, 0, 2, testing::ConfigJson(),
                          testing::ZeroRecords(model, 0, 2, &storage), nullptr, 0, 2),
                absl::StatusCode::kFailedPrecondition, "in 2 expert-parallel shards");
  // Resharded: one shard per TP rank holding every expert.
  const std::string one = FreshDir("ep_reshard");
  ASSERT_TRUE(ReshardCheckpoint(dir, 5, one, 2, kRealVocab, PaddedVocab(2)).ok());
  EXPECT_TRUE(HoldsModel(one, 5, 2, Repadded(model, PaddedVocab(2))));
  fs::remove_all(ShardDir(dir, 5, 1, 1, 2, 1, 2));
  EXPECT_STATUS(LatestIteration(dir).status(), absl::StatusCode::kDataLoss,
                "shard mp_rank_01_001_001 of 8 is missing");
}

}  // namespace
}  // namespace checkpoint
}  // namespace mt

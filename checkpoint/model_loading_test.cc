// Tests of model loading (model_loading.h): the global weights a model holds after loading a
// checkpoint are those saved, at every TP degree (checked element by element against a pattern of
// (name, global index), independently of the checkpoint code); fine-tuning subsets; every error.
#include "checkpoint/model_loading.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_testutil.h"
#include "checkpoint/model_loading_testutil.h"
#include "checkpoint/parameter_records.h"
#include "comm/parallel_context.h"
#include "core/status.h"
#include "core/status_testutil.h"
#include "gtest/gtest.h"
#include "models/stages.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace checkpoint {
namespace {

using testing::BuildRanks;
using testing::FillWithPattern;
using testing::FreshDir;
using testing::HoldsPattern;
using testing::RankModel;
using testing::ReadText;
using testing::SaveRanks;
using testing::WriteText;

// vocab 61 pads to 72 at TP 1 (a multiple of 24), 96 at TP 2 (48) and at TP 4 (96).
models::ModelConfig TinyGpt() { return testing::TinyConfig(models::Family::kGpt2, 2, 4, 61, 24); }

models::ModelConfig TinyBert() { return testing::TinyConfig(models::Family::kBert, 1, 2, 45, 8); }

// Saves `config`'s model at TP `tp` filled with the pattern (padding rows included), with
// optimizer tensors, as iteration 7 of a fresh directory.
absl::StatusOr<std::string> SavePattern(const std::string& name, const models::ModelConfig& config,
                                        int tp, const models::ModelOptions& options = {}) {
  const std::string dir = FreshDir(name);
  ASSIGN_OR_RETURN(std::vector<RankModel> ranks, BuildRanks(config, tp, /*seed=*/3, options));
  for (RankModel& r : ranks) RETURN_IF_ERROR(FillWithPattern(r.store.get()));
  RETURN_IF_ERROR(SaveRanks(dir, 7, config.ToJson(), "tiny", ranks, true));
  return dir;
}

TEST(ModelLoadingTest, EveryTpDegreeHoldsTheSavedGlobalWeights) {
  const models::ModelConfig config = TinyGpt();
  for (int saved_tp : {1, 2, 4}) {
    ASSERT_OK_AND_ASSIGN(const std::string dir,
                         SavePattern(absl::StrCat("pattern_tp", saved_tp), config, saved_tp));
    for (int tp : {1, 2, 4}) {
      for (int rank = 0; rank < tp; ++rank) {
        SCOPED_TRACE(absl::StrCat("saved at TP ", saved_tp, ", loaded at rank ", rank, " of ", tp));
        auto m = LoadModel(dir, rank, tp, ExecContext{});
        ASSERT_TRUE(m.ok()) << m.status();
        EXPECT_EQ(m->checkpoint.iteration, 7);
        EXPECT_EQ(m->checkpoint.tp_size, saved_tp);
        EXPECT_EQ(m->checkpoint.model_name, "tiny");
        EXPECT_EQ(m->checkpoint.config.ToJson(), config.ToJson());
        EXPECT_TRUE(m->load.missing.empty());
        EXPECT_TRUE(m->load.ignored.empty());  // The optimizer's tensors are skipped silently.
        EXPECT_EQ(m->model->padded_vocab(), config.PaddedVocab(tp));
        EXPECT_TRUE(HoldsPattern(*m->store, ExecContext{}, config.vocab_size));
      }
    }
  }
}

// Grouped-query attention (4 heads, 2 key/value groups): the fused QKV columns are ordered by
// group, so a checkpoint saved at TP 2 (one group per rank) loads at TP 1 and 2 with every
// element at its global index, i.e. each group's query heads still beside their key and value. A
// model with another group count is refused, naming the tensor whose shape differs.
TEST(ModelLoadingTest, QueryGroupsSurviveResharding) {
  models::ModelConfig config = TinyGpt();
  config.group_query_attention = true;
  config.num_query_groups = 2;
  ASSERT_OK_AND_ASSIGN(const std::string dir, SavePattern("gqa", config, 2));
  for (int tp : {1, 2}) {
    for (int rank = 0; rank < tp; ++rank) {
      SCOPED_TRACE(absl::StrCat("rank ", rank, " of ", tp));
      auto m = LoadModel(dir, rank, tp, ExecContext{});
      ASSERT_TRUE(m.ok()) << m.status();
      EXPECT_EQ(m->checkpoint.config.query_groups(), 2);
      EXPECT_TRUE(HoldsPattern(*m->store, ExecContext{}, config.vocab_size));
    }
  }
  ASSERT_OK_AND_ASSIGN(CheckpointModel ckpt, ReadCheckpointModel(dir));
  models::ModelConfig other = config;
  other.num_query_groups = 4;
  ASSERT_OK_AND_ASSIGN(std::vector<RankModel> ranks, BuildRanks(other, 1, /*seed=*/3));
  const absl::Status s = LoadParameters(ckpt, ExecContext{}, ranks[0].store.get()).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("layers.0.attention.qkv.weight"), std::string::npos) << s;
  // At TP 4 the two groups cannot be split whole.
  EXPECT_EQ(LoadModel(dir, 0, 4, ExecContext{}).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Resuming training (LoadShard with this run's config) with another group count, or without
  // grouped-query attention, names the differing keys before reading any tensor.
  const absl::Status resume = LoadShard(dir, 7, 0, 2, other.ToJson(), {}, nullptr);
  EXPECT_EQ(resume.code(), absl::StatusCode::kFailedPrecondition) << resume;
  EXPECT_TRUE(absl::StrContains(
      resume.message(),
      "model config differs from this run's: num_query_groups (checkpoint: 2, this run: 4)"))
      << resume;
  const absl::Status plain = LoadShard(dir, 7, 0, 2, TinyGpt().ToJson(), {}, nullptr);
  EXPECT_TRUE(absl::StrContains(plain.message(),
                                "group_query_attention (checkpoint: true, this run: absent); "
                                "num_query_groups (checkpoint: 2, this run: absent)"))
      << plain;
}

// Checkpoints of pipeline stages (mp_rank_TT_PPP), here written by ReshardCheckpoint in the
// layout StageParameterNames gives (the tied word embedding on both stages, the position
// embedding on the first, the final norm on the last), load into the whole model at any TP
// degree: what evaluation, generation and fine-tuning read.
TEST(ModelLoadingTest, PipelineStagesLoadIntoTheWholeModel) {
  for (const models::ModelConfig& config :
       {TinyGpt(), testing::TinyConfig(models::Family::kBert, 2, 2, 45, 8)}) {
    SCOPED_TRACE(config.ToJson());
    ASSERT_OK_AND_ASSIGN(const std::string src, SavePattern("pp_src", config, 2));
    auto split = comm::MakePipelineSplit(config.num_layers, 2, 0);
    ASSERT_TRUE(split.ok()) << split.status();
    auto names = models::StageParameterNames(config, 2, *split);
    ASSERT_TRUE(names.ok()) << names.status();
    ASSERT_EQ(names->size(), 2u);
    // Together the stages hold the whole model's parameters; only the word embedding twice.
    auto whole = BuildRanks(config, 2, /*seed=*/3);
    ASSERT_TRUE(whole.ok()) << whole.status();
    std::vector<std::string> all, both;
    for (int i = 0; i < (*whole)[0].store->size(); ++i) {
      all.push_back((*whole)[0].store->spec(i).name);
    }
    std::vector<std::string> first = (*names)[0], last = (*names)[1], united;
    std::sort(first.begin(), first.end());
    std::sort(last.begin(), last.end());
    std::sort(all.begin(), all.end());
    std::set_union(first.begin(), first.end(), last.begin(), last.end(),
                   std::back_inserter(united));
    std::set_intersection(first.begin(), first.end(), last.begin(), last.end(),
                          std::back_inserter(both));
    EXPECT_EQ(united, all);
    EXPECT_EQ(both, std::vector<std::string>{"embedding.word.weight"});
    ReshardLayout layout;
    layout.tp_size = 2;
    layout.padded_vocab = config.PaddedVocab(2);
    layout.pp_size = 2;
    layout.stages_of = [&](const std::string& tensor) {
      std::vector<int> in;
      for (int p = 0; p < 2; ++p) {
        const std::vector<std::string>& stage = (*names)[p];
        if (std::find(stage.begin(), stage.end(), ParameterOfTensor(tensor)) != stage.end()) {
          in.push_back(p);
        }
      }
      return in;
    };
    const std::string dst = FreshDir("pp_dst");
    ASSERT_TRUE(ReshardCheckpoint(src, 7, dst, config.vocab_size, layout).ok());
    for (int tp : {1, 2}) {
      for (int rank = 0; rank < tp; ++rank) {
        SCOPED_TRACE(absl::StrCat("rank ", rank, " of ", tp));
        auto m = LoadModel(dst, rank, tp, ExecContext{});
        ASSERT_TRUE(m.ok()) << m.status();
        EXPECT_EQ(m->checkpoint.pp_size, 2);
        EXPECT_TRUE(m->load.missing.empty());
        EXPECT_TRUE(HoldsPattern(*m->store, ExecContext{}, config.vocab_size));
      }
    }
  }
}

TEST(ModelLoadingTest, ComputeCopiesFollowTheLoadedMasters) {
  ASSERT_OK_AND_ASSIGN(const std::string dir, SavePattern("bf16", TinyGpt(), 2));
  LoadModelOptions options;
  options.compute_dtype = DType::kBF16;
  auto m = LoadModel(dir, 0, 1, ExecContext{}, options);
  ASSERT_TRUE(m.ok()) << m.status();
  // A bf16 copy is the master rounded to nearest: within half a bf16 ulp (2^-8 relative).
  const nn::ParameterStore& s = *m->store;
  for (int i = 0; i < s.size(); ++i) {
    const float* master = s.value(i).data_as<float>();
    const uint16_t* bf = static_cast<const uint16_t*>(s.compute_value(i).data);
    for (int64_t j = 0; j < s.value(i).numel(); ++j) {
      const uint32_t bits = static_cast<uint32_t>(bf[j]) << 16;
      float copy;
      std::memcpy(&copy, &bits, sizeof(copy));
      ASSERT_LE(std::abs(copy - master[j]), std::abs(master[j]) * 0x1p-8f) << s.spec(i).name;
    }
  }
}

TEST(ModelLoadingTest, LatestOrAGivenIteration) {
  const models::ModelConfig config = TinyGpt();
  ASSERT_OK_AND_ASSIGN(const std::string dir, SavePattern("iterations", config, 1));
  auto ranks = BuildRanks(config, 1, /*seed=*/9);  // Normal initial values, not the pattern.
  ASSERT_TRUE(ranks.ok());
  ASSERT_TRUE(SaveRanks(dir, 9, config.ToJson(), "", *ranks, false).ok());
  auto latest = ReadCheckpointModel(dir);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->iteration, 9);
  EXPECT_EQ(latest->model_name, "");
  LoadModelOptions options;
  options.iteration = 7;
  auto m = LoadModel(dir, 0, 1, ExecContext{}, options);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(HoldsPattern(*m->store, ExecContext{}, config.vocab_size));
}

// The names of the parameters of `ranks`'s store that start with `prefix`.
std::vector<std::string> NamesWithPrefix(const nn::ParameterStore& store,
                                         const std::string& prefix) {
  std::vector<std::string> names;
  for (int i = 0; i < store.size(); ++i) {
    if (absl::StartsWith(store.spec(i).name, prefix)) names.push_back(store.spec(i).name);
  }
  return names;
}

// A pretrained BERT (MLM + SOP heads) into a model with the multiple-choice head too (kAll: the
// head is missing) and into one with that head alone (the pretraining heads are ignored).
TEST(ModelLoadingTest, FineTuningSubsets) {
  const models::ModelConfig config = TinyBert();
  ASSERT_OK_AND_ASSIGN(const std::string dir, SavePattern("bert", config, 2));
  auto ckpt = ReadCheckpointModel(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  models::ModelOptions all;
  all.heads = models::Heads::kAll;
  auto ranks = BuildRanks(config, 1, /*seed=*/5, all);
  ASSERT_TRUE(ranks.ok());
  nn::ParameterStore& store = *(*ranks)[0].store;
  const std::vector<std::string> head = NamesWithPrefix(store, "multiple_choice_head");
  ASSERT_FALSE(head.empty());
  auto initial = store.CopyValuesToHost(ExecContext{});
  ASSERT_TRUE(initial.ok());

  EXPECT_STATUS(LoadParameters(*ckpt, ExecContext{}, &store).status(),
                absl::StatusCode::kFailedPrecondition,
                absl::StrCat("lacks ", head.size(), " tensor(s) of this model: ", head[0]));
  ParameterLoadOptions subset;
  subset.allow_missing = true;
  auto loaded = LoadParameters(*ckpt, ExecContext{}, &store, subset);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->missing, head);
  EXPECT_TRUE(loaded->ignored.empty());
  EXPECT_TRUE(HoldsPattern(store, ExecContext{}, config.vocab_size, head));
  for (const std::string& name : head) {  // The head keeps its initial values.
    const int h = *store.Find(name);
    EXPECT_EQ(0, std::memcmp(store.value(h).data, initial->data_as<float>() + store.offset(h),
                             store.value(h).nbytes()))
        << name;
  }

  models::ModelOptions mc;
  mc.heads = models::Heads::kMultipleChoice;
  auto mc_ranks = BuildRanks(config, 2, /*seed=*/5, mc);
  ASSERT_TRUE(mc_ranks.ok());
  for (RankModel& r : *mc_ranks) {
    EXPECT_STATUS(LoadParameters(*ckpt, ExecContext{}, r.store.get(), subset).status(),
                  absl::StatusCode::kFailedPrecondition, "this model does not have: lm_head.");
    subset.allow_unexpected = true;
    auto l = LoadParameters(*ckpt, ExecContext{}, r.store.get(), subset);
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_EQ(l->missing, head);
    ASSERT_FALSE(l->ignored.empty());
    for (const std::string& name : l->ignored) {  // The pretraining heads; no optimizer tensor.
      EXPECT_TRUE(absl::StartsWith(name, "lm_head.") || absl::StartsWith(name, "sop_head."))
          << name;
    }
    EXPECT_TRUE(HoldsPattern(*r.store, ExecContext{}, config.vocab_size, head));
    subset.allow_unexpected = false;
  }
}

// Rewrites shard 0's metadata.json of iteration 7 with `edit` applied to its JSON.
template <typename Edit>
void EditMetadata(const std::string& dir, Edit&& edit) {
  const std::string path = ShardDir(dir, 7, 0) + "/" + kShardMetadataFile;
  nlohmann::json j = nlohmann::json::parse(ReadText(path));
  edit(j);
  WriteText(path, j.dump());
}

TEST(ModelLoadingTest, Errors) {
  const models::ModelConfig config = TinyGpt();
  EXPECT_STATUS(LoadModel(FreshDir("empty") + "/none", 0, 1, ExecContext{}).status(),
                absl::StatusCode::kNotFound, "/none");
  ASSERT_OK_AND_ASSIGN(const std::string dir, SavePattern("errors", config, 1));
  EXPECT_STATUS(LoadModel(dir, 0, 3, ExecContext{}).status(), absl::StatusCode::kInvalidArgument,
                "3");  // TP 3 does not divide 4 heads.
  LoadModelOptions other;
  other.iteration = 8;
  EXPECT_STATUS(LoadModel(dir, 0, 1, ExecContext{}, other).status(), absl::StatusCode::kNotFound,
                "iter_0000008");

  ASSERT_OK_AND_ASSIGN(const std::string bad_config, SavePattern("bad_config", config, 1));
  EditMetadata(bad_config, [](nlohmann::json& j) { j["model_config"]["hidden_size"] = "wide"; });
  EXPECT_STATUS(LoadModel(bad_config, 0, 1, ExecContext{}).status(),
                absl::StatusCode::kInvalidArgument,
                "mp_rank_00/metadata.json: the stored model config is not a valid config");
  ASSERT_OK_AND_ASSIGN(const std::string corrupt, SavePattern("corrupt", config, 1));
  WriteText(ShardDir(corrupt, 7, 0) + "/" + kShardMetadataFile, "{\"format\": ");
  EXPECT_STATUS(ReadCheckpointModel(corrupt).status(), absl::StatusCode::kDataLoss,
                "mp_rank_00/metadata.json: not a JSON object");
  ASSERT_OK_AND_ASSIGN(const std::string unknown, SavePattern("unknown_arch", config, 1));
  EditMetadata(unknown, [](nlohmann::json& j) { j["model_config"]["architecture"] = "moe-xl"; });
  EXPECT_STATUS(LoadModel(unknown, 0, 1, ExecContext{}).status(), absl::StatusCode::kNotFound,
                "gpt2");  // The message lists the registered architectures.

  // Tensors of a wider MLP than the stored config says.
  const std::string wrong_shape = FreshDir("wrong_shape");
  models::ModelConfig wide = config;
  wide.ffn_hidden_size = 96;
  auto ranks = BuildRanks(wide, 1, 3);
  ASSERT_TRUE(ranks.ok());
  ASSERT_TRUE(SaveRanks(wrong_shape, 7, config.ToJson(), "", *ranks, false).ok());
  EXPECT_STATUS(LoadModel(wrong_shape, 0, 2, ExecContext{}).status(),
                absl::StatusCode::kFailedPrecondition,
                "iteration 7: tensor 'layers.0.mlp.fc1.weight' has global shape [16, 96]");

  // A failed load changes nothing in the store.
  auto target = BuildRanks(config, 1, 11);
  ASSERT_TRUE(target.ok());
  auto before = (*target)[0].store->CopyValuesToHost(ExecContext{});
  ASSERT_TRUE(before.ok());
  auto ckpt = ReadCheckpointModel(wrong_shape);
  ASSERT_TRUE(ckpt.ok());
  EXPECT_FALSE(LoadParameters(*ckpt, ExecContext{}, (*target)[0].store.get()).ok());
  EXPECT_EQ(0,
            std::memcmp((*target)[0].store->flat_values().data, before->data(), before->nbytes()));
}

}  // namespace
}  // namespace checkpoint
}  // namespace mt

// Tests of the checkpoint protocol (checkpoint.cc): the layout, round trips, replacing and
// pruning iterations, crashes at any moment (SIGKILL) and the pointer file's errors.
#include "checkpoint/checkpoint.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint_testutil.h"
#include "checkpoint/safetensors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace checkpoint {
namespace {

using testing::Bytes;
using testing::ConfigJson;
using testing::Entries;
using testing::FilledRecords;
using testing::FreshDir;
using testing::HoldsModel;
using testing::kRealVocab;
using testing::PaddedVocab;
using testing::ReadText;
using testing::SaveModel;
using testing::SliceOf;
using testing::SyntheticMeta;
using testing::SyntheticModel;
using testing::SyntheticTensor;
using testing::WriteText;
using testing::ZeroRecords;

namespace fs = std::filesystem;

TEST(CheckpointTest, LayoutNames) {
  EXPECT_EQ(IterationDirName(100), "iter_0000100");
  EXPECT_EQ(IterationDirName(123456789), "iter_123456789");
  EXPECT_EQ(ShardDir("/ckpt", 100, 1), "/ckpt/iter_0000100/mp_rank_01");
  EXPECT_EQ(ShardDir("/ckpt/", 7, 12), "/ckpt/iter_0000007/mp_rank_12");
}

TEST(CheckpointTest, RoundTripOfShardsAndMetadata) {
  const std::string dir = FreshDir("round_trip");
  const auto model = SyntheticModel(PaddedVocab(2), /*seed=*/1);
  ASSERT_TRUE(SaveModel(dir, model, /*tp=*/2, /*iteration=*/100).ok());

  EXPECT_EQ(ReadText(dir + "/latest_checkpointed_iteration.txt"), "100\n");
  EXPECT_EQ(Entries(dir + "/iter_0000100"), (std::vector<std::string>{"mp_rank_00", "mp_rank_01"}));
  EXPECT_EQ(Entries(dir + "/iter_0000100/mp_rank_01"),
            (std::vector<std::string>{"metadata.json", "model_optim.safetensors"}));
  auto latest = LatestIteration(dir);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, 100);
  EXPECT_TRUE(HoldsModel(dir, 100, 2, model));

  // The shard is a plain safetensors file of the local slices, readable without this layer.
  auto reader = SafetensorsReader::Open(dir + "/iter_0000100/mp_rank_01/model_optim.safetensors");
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(reader->entries().size(), model.size());
  EXPECT_EQ(reader->metadata().at("tensor_model_parallel_rank"), "1");
  for (const SyntheticTensor& t : model) {
    auto local = reader->ReadTensor(t.name);
    ASSERT_TRUE(local.ok()) << local.status();
    EXPECT_EQ(Bytes(local->view()), Bytes(SliceOf(t.global.view(), t.split_dim, 1, 2).view()));
  }
  // metadata.json is readable JSON with the documented fields.
  const auto meta = nlohmann::json::parse(ReadText(dir + "/iter_0000100/mp_rank_01/metadata.json"),
                                          nullptr, false);
  ASSERT_TRUE(meta.is_object());
  EXPECT_EQ(meta["iteration"], 100);
  EXPECT_EQ(meta["tensor_model_parallel_size"], 2);
  EXPECT_EQ(meta["tensor_model_parallel_rank"], 1);
  EXPECT_EQ(meta["model_config"]["vocab_size"], kRealVocab);
  EXPECT_EQ(meta["tensors"][0]["name"], "embedding.word.weight");
  EXPECT_EQ(meta["tensors"][0]["vocab_padded"], true);

  auto read_meta = ReadShardMetadata(dir, 100, 1);
  ASSERT_TRUE(read_meta.ok()) << read_meta.status();
  EXPECT_EQ(read_meta->trainer_state_json, SyntheticMeta(100, 1, 2).trainer_state_json);
  EXPECT_EQ(read_meta->consumed_samples, 100 * 32 + 7);
}

// The registered model name is stored and read back; a checkpoint written before the field
// existed (no "model_name" key) reads as an empty name.
TEST(CheckpointTest, ModelNameIsRecordedAndOptional) {
  const std::string dir = FreshDir("model_name");
  const auto model = SyntheticModel(PaddedVocab(1), 4);
  std::vector<Tensor> storage;
  CheckpointMetadata meta = SyntheticMeta(3, 0, 1);
  meta.model_name = "gpt2-345m";
  ASSERT_TRUE(SaveShard(dir, meta, FilledRecords(model, 0, 1, &storage)).ok());
  ASSERT_TRUE(CommitCheckpoint(dir, 3, 1, 0).ok());
  auto read = ReadShardMetadata(dir, 3, 0);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->model_name, "gpt2-345m");
  const std::string path = dir + "/iter_0000003/mp_rank_00/metadata.json";
  nlohmann::json j = nlohmann::json::parse(ReadText(path));
  EXPECT_EQ(j["model_name"], "gpt2-345m");
  j.erase("model_name");
  WriteText(path, j.dump());
  read = ReadShardMetadata(dir, 3, 0);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->model_name, "");
  EXPECT_TRUE(HoldsModel(dir, 3, 1, model));
  j["model_name"] = 7;
  WriteText(path, j.dump());
  EXPECT_EQ(ReadShardMetadata(dir, 3, 0).status().code(), absl::StatusCode::kDataLoss);
}

TEST(CheckpointTest, ResavingAnIterationReplacesItsShards) {
  const std::string dir = FreshDir("resave");
  const auto a = SyntheticModel(PaddedVocab(2), 2);
  const auto b = SyntheticModel(PaddedVocab(2), 3);
  ASSERT_TRUE(SaveModel(dir, a, 2, 5).ok());
  ASSERT_TRUE(SaveModel(dir, b, 2, 5).ok());
  EXPECT_TRUE(HoldsModel(dir, 5, 2, b));
  // No temporaries or replaced shards are left behind.
  EXPECT_EQ(Entries(dir + "/iter_0000005"), (std::vector<std::string>{"mp_rank_00", "mp_rank_01"}));
}

TEST(CheckpointTest, KeepLastDeletesOldIterations) {
  const std::string dir = FreshDir("keep_last");
  const auto model = SyntheticModel(PaddedVocab(1), 4);
  // An uncommitted newer iteration (a crashed run's) must survive retention.
  {
    std::vector<Tensor> storage;
    ASSERT_TRUE(SaveShard(dir, SyntheticMeta(60, 0, 2), FilledRecords(model, 0, 2, &storage)).ok());
  }
  for (int64_t it : {10, 20, 30, 40, 50}) {
    ASSERT_TRUE(SaveModel(dir, model, 1, it, /*keep_last=*/2).ok()) << it;
  }
  EXPECT_EQ(Entries(dir), (std::vector<std::string>{"iter_0000040", "iter_0000050", "iter_0000060",
                                                    "latest_checkpointed_iteration.txt"}));
  EXPECT_TRUE(HoldsModel(dir, 40, 1, model));
  EXPECT_TRUE(HoldsModel(dir, 50, 1, model));
  ASSERT_TRUE(SaveModel(dir, model, 1, 55, /*keep_last=*/1).ok());
  EXPECT_EQ(Entries(dir), (std::vector<std::string>{"iter_0000055", "iter_0000060",
                                                    "latest_checkpointed_iteration.txt"}));
  // keep_last <= 0 keeps everything; a leftover of an interrupted deletion is cleaned up.
  fs::create_directories(dir + "/.deleting.iter_0000001/mp_rank_00");
  ASSERT_TRUE(SaveModel(dir, model, 1, 70, 0).ok());
  ASSERT_TRUE(SaveModel(dir, model, 1, 80, -1).ok());
  EXPECT_EQ(Entries(dir),
            (std::vector<std::string>{"iter_0000055", "iter_0000060", "iter_0000070",
                                      "iter_0000080", "latest_checkpointed_iteration.txt"}));
}

// The state a crash leaves mid-save: the previous checkpoint stays the latest and loads; the
// interrupted iteration cannot be committed until every shard is written again.
TEST(CheckpointTest, InterruptedSaveLeavesPreviousCheckpoint) {
  const std::string dir = FreshDir("interrupted");
  const auto old_model = SyntheticModel(PaddedVocab(2), 5);
  const auto new_model = SyntheticModel(PaddedVocab(2), 6);
  ASSERT_TRUE(SaveModel(dir, old_model, 2, 10).ok());
  // Rank 1 finished its shard of iteration 20; rank 0 died while writing its temporary.
  {
    std::vector<Tensor> storage;
    ASSERT_TRUE(
        SaveShard(dir, SyntheticMeta(20, 1, 2), FilledRecords(new_model, 1, 2, &storage)).ok());
  }
  const std::string tmp = dir + "/iter_0000020/.mp_rank_00.tmp";
  fs::create_directories(tmp);
  WriteText(tmp + "/model_optim.safetensors",
            std::string("\x40\x00\x00\x00\x00\x00\x00\x00{\"a", 11));

  auto latest = LatestIteration(dir);
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(*latest, 10);
  EXPECT_TRUE(HoldsModel(dir, 10, 2, old_model));
  EXPECT_STATUS(CommitCheckpoint(dir, 20, 2, 0), absl::StatusCode::kFailedPrecondition,
                "shard mp_rank_00 of 2 is missing");
  EXPECT_EQ(ReadText(dir + "/latest_checkpointed_iteration.txt"), "10\n");

  // The resumed run saves iteration 20 again: the leftover is replaced and the commit succeeds.
  ASSERT_TRUE(SaveModel(dir, new_model, 2, 20).ok());
  EXPECT_EQ(Entries(dir + "/iter_0000020"), (std::vector<std::string>{"mp_rank_00", "mp_rank_01"}));
  EXPECT_TRUE(HoldsModel(dir, 20, 2, new_model));
  EXPECT_EQ(*LatestIteration(dir), 20);
}

// A crash while replacing a shard on a file system without an atomic exchange leaves the old shard
// under a hidden ".old" name; the next save of that rank puts it back before doing anything else.
TEST(CheckpointTest, ReplacedShardLeftoverIsRestored) {
  const std::string dir = FreshDir("old_leftover");
  const auto a = SyntheticModel(PaddedVocab(2), 14);
  const auto b = SyntheticModel(PaddedVocab(2), 15);
  ASSERT_TRUE(SaveModel(dir, a, 2, 30).ok());
  fs::rename(ShardDir(dir, 30, 0), dir + "/iter_0000030/.mp_rank_00.old");
  EXPECT_STATUS(LatestIteration(dir).status(), absl::StatusCode::kDataLoss,
                "names iteration 30 but that checkpoint is unusable: no checkpoint shard");
  // A save whose arguments are refused changes nothing on disk.
  std::vector<Tensor> storage;
  CheckpointMetadata bad_meta = SyntheticMeta(30, 0, 2);
  bad_meta.model_config_json = "oops";
  EXPECT_FALSE(SaveShard(dir, bad_meta, FilledRecords(b, 0, 2, &storage)).ok());
  // A real save restores, then replaces.
  ASSERT_TRUE(SaveModel(dir, b, 2, 30).ok());
  EXPECT_EQ(Entries(dir + "/iter_0000030"), (std::vector<std::string>{"mp_rank_00", "mp_rank_01"}));
  EXPECT_TRUE(HoldsModel(dir, 30, 2, b));
}

// ---- SIGKILL during saves

constexpr int kKillTp = 2;
constexpr int kKillKeep = 2;

// The models the saving child cycles through: consecutive iterations save different values, so
// a shard mixing two saves would be caught.
struct KillModels {
  std::vector<std::vector<SyntheticTensor>> variants;
  const std::vector<SyntheticTensor>& For(int64_t iteration) const {
    return variants[iteration % variants.size()];
  }
};

// The child's loop (never returns): saves and commits iterations 1, 2, ... of `models` into dir
// (keeping kKillKeep), writing each committed iteration to `fd`. Exit 2: a save failed.
[[noreturn]] void SaveUntilKilled(const std::string& dir, const KillModels& models, int fd) {
  // Slices are prepared up front so that the loop spends its time saving.
  const int variants = static_cast<int>(models.variants.size());
  std::vector<Tensor> storage;
  std::vector<std::vector<TensorRecord>> records;  // [variant * kKillTp + rank]
  for (int v = 0; v < variants; ++v) {
    for (int r = 0; r < kKillTp; ++r) {
      records.push_back(FilledRecords(models.variants[v], r, kKillTp, &storage));
    }
  }
  for (int64_t it = 1; it < 1000000; ++it) {
    for (int r = 0; r < kKillTp; ++r) {
      const auto& shard = records[(it % variants) * kKillTp + r];
      if (!SaveShard(dir, SyntheticMeta(it, r, kKillTp), shard).ok()) ::_exit(2);
    }
    if (!CommitCheckpoint(dir, it, kKillTp, kKillKeep).ok()) ::_exit(2);
    if (::write(fd, &it, sizeof it) != sizeof it) ::_exit(3);
  }
  ::_exit(0);
}

// Forks a child that saves into dir, lets it commit at least once, SIGKILLs it at a random moment
// (from `rng`) and sets *last to the last iteration it reported committed.
void KillDuringSaves(const std::string& dir, const KillModels& models, std::mt19937* rng,
                     int64_t* last) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    SaveUntilKilled(dir, models, fds[1]);
  }
  ::close(fds[1]);
  ASSERT_EQ(::read(fds[0], last, sizeof *last), static_cast<ssize_t>(sizeof *last));
  ::usleep(std::uniform_int_distribution<int>(0, 30000)(*rng));
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child failed to save: exit " << WEXITSTATUS(status);
  int64_t it = 0;
  while (::read(fds[0], &it, sizeof it) == static_cast<ssize_t>(sizeof it)) *last = it;
  ::close(fds[0]);
}

// Every shard of iteration directory `name` under its final name is complete and loads exactly
// the model saved at that iteration; adds the hidden temporaries it holds to *hidden.
void ExpectShardsComplete(const std::string& dir, const std::string& name, int64_t iteration,
                          const KillModels& models, int* hidden) {
  for (const std::string& entry : Entries(dir + "/" + name)) {
    if (entry[0] == '.') {
      ++*hidden;
      continue;
    }
    ASSERT_TRUE(absl::StartsWith(entry, "mp_rank_0")) << entry;
    const int rank = entry.back() - '0';
    std::vector<Tensor> storage;
    const auto& model = models.For(iteration);
    const auto records = ZeroRecords(model, rank, kKillTp, &storage);
    const absl::Status s = LoadShard(dir, iteration, rank, kKillTp, ConfigJson(), records, nullptr);
    ASSERT_TRUE(s.ok()) << name << "/" << entry << ": " << s;
    for (size_t i = 0; i < model.size(); ++i) {
      ASSERT_EQ(Bytes(records[i].local),
                Bytes(SliceOf(model[i].global.view(), model[i].split_dim, rank, kKillTp).view()))
          << name << "/" << entry << " " << model[i].name;
    }
  }
}

// What a kill may leave in dir, given the pointer at `latest`: iteration directories (at most one
// uncommitted, at most one below the retention window whose deletion was interrupted) whose
// shards are complete, and otherwise only hidden temporaries.
void ExpectOnlyWholeCheckpoints(const std::string& dir, int64_t latest, const KillModels& models,
                                int* hidden) {
  int uncommitted = 0;
  for (const std::string& name : Entries(dir)) {
    if (name == "latest_checkpointed_iteration.txt") continue;
    // Besides iteration directories only hidden temporaries (an interrupted pointer update or
    // deletion) may exist.
    ASSERT_TRUE(absl::StartsWith(name, "iter_") || name[0] == '.') << name;
    if (!absl::StartsWith(name, "iter_")) continue;
    const int64_t iteration = std::stoll(name.substr(5));
    EXPECT_LE(iteration, latest + 1) << name;
    if (iteration > latest) ++uncommitted;
    if (iteration <= latest - kKillKeep) {
      // Retention was interrupted by the kill; still never a broken complete-looking shard.
      EXPECT_EQ(iteration, latest - kKillKeep) << name;
    }
    ASSERT_NO_FATAL_FAILURE(ExpectShardsComplete(dir, name, iteration, models, hidden));
  }
  EXPECT_LE(uncommitted, 1);
}

// A child process saves and commits checkpoints in a loop and is killed with SIGKILL at a random
// moment. Whatever the moment: the pointer names the last (or, if the kill hit after the rename,
// the one being) committed iteration, which loads exactly; every shard directory under a final
// name is complete; at most one uncommitted iteration exists; and the next save recovers.
TEST(CheckpointTest, SigkillDuringSavesNeverLeavesAHalfWrittenCheckpoint) {
  KillModels models;
  for (int v = 0; v < 3; ++v) {
    models.variants.push_back(SyntheticModel(PaddedVocab(kKillTp), 1 + v, /*big_rows=*/1024));
  }
  std::mt19937 rng(2024);
  int killed_mid_save = 0;
  for (int trial = 0; trial < 10; ++trial) {
    SCOPED_TRACE(absl::StrCat("trial ", trial));
    const std::string dir = FreshDir(absl::StrCat("sigkill_", trial));
    int64_t last = 0;
    ASSERT_NO_FATAL_FAILURE(KillDuringSaves(dir, models, &rng, &last));

    auto latest = LatestIteration(dir);
    ASSERT_TRUE(latest.ok()) << latest.status();
    EXPECT_TRUE(*latest == last || *latest == last + 1) << *latest << " vs " << last;
    EXPECT_TRUE(HoldsModel(dir, *latest, kKillTp, models.For(*latest)));
    ASSERT_NO_FATAL_FAILURE(ExpectOnlyWholeCheckpoints(dir, *latest, models, &killed_mid_save));

    // The next save recovers from whatever was left.
    const auto& next = models.For(*latest + 1);
    ASSERT_TRUE(SaveModel(dir, next, kKillTp, *latest + 1, kKillKeep).ok());
    EXPECT_EQ(*LatestIteration(dir), *latest + 1);
    EXPECT_TRUE(HoldsModel(dir, *latest + 1, kKillTp, next));
    fs::remove_all(dir);
  }
  // Not an assertion on timing, just visibility into how often a kill hit a temporary.
  std::printf("hidden temporaries found after the 10 kills: %d\n", killed_mid_save);
}

TEST(CheckpointTest, LatestIterationErrors) {
  const std::string dir = FreshDir("latest_errors");
  EXPECT_STATUS(LatestIteration(dir + "/nope").status(), absl::StatusCode::kNotFound,
                "does not exist");
  EXPECT_STATUS(LatestIteration(dir).status(), absl::StatusCode::kNotFound,
                "no checkpoint in " + dir);
  const std::string pointer = dir + "/latest_checkpointed_iteration.txt";
  for (const std::string& bad : {std::string(""), std::string("abc"), std::string("-3"),
                                 std::string("12x"), std::string("\x01\x02")}) {
    WriteText(pointer, bad);
    EXPECT_STATUS(LatestIteration(dir).status(), absl::StatusCode::kDataLoss,
                  pointer + ": expected an iteration number");
  }
  WriteText(pointer, "7\n");
  EXPECT_STATUS(LatestIteration(dir).status(), absl::StatusCode::kDataLoss,
                "names iteration 7 but that checkpoint is unusable: no checkpoint shard");

  const auto model = SyntheticModel(PaddedVocab(2), 7);
  ASSERT_TRUE(SaveModel(dir, model, 2, 7).ok());
  ASSERT_TRUE(LatestIteration(dir).ok());
  fs::remove_all(ShardDir(dir, 7, 1));
  EXPECT_STATUS(LatestIteration(dir).status(), absl::StatusCode::kDataLoss,
                "shard mp_rank_01 of 2 is missing");
}

}  // namespace
}  // namespace checkpoint
}  // namespace mt

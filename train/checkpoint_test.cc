#include "train/checkpoint.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "train/checkpoint_testutil.h"
#include "train/safetensors.h"

namespace mt {
namespace train {
namespace {

using testing::Bytes;
using testing::ConfigJson;
using testing::FilledRecords;
using testing::HoldsModel;
using testing::kRealVocab;
using testing::PaddedVocab;
using testing::Repadded;
using testing::SaveModel;
using testing::SliceOf;
using testing::SyntheticMeta;
using testing::SyntheticModel;
using testing::SyntheticTensor;
using testing::ZeroRecords;

namespace fs = std::filesystem;

// A fresh, empty directory for one test.
std::string FreshDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "checkpoint_test_" + name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

#define EXPECT_STATUS(expr, status_code, substring)                                 \
  do {                                                                              \
    const absl::Status s_ = (expr);                                                 \
    EXPECT_EQ(s_.code(), status_code) << s_;                                        \
    EXPECT_TRUE(absl::StrContains(s_.message(), substring))                         \
        << "message: " << s_.message() << "\nexpected to contain: " << (substring); \
  } while (0)

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

// A child process saves and commits checkpoints in a loop and is killed with SIGKILL at a random
// moment. Whatever the moment: the pointer names the last (or, if the kill hit after the rename,
// the one being) committed iteration, which loads exactly; every shard directory under a final
// name is complete; at most one uncommitted iteration exists; and the next save recovers.
TEST(CheckpointTest, SigkillDuringSavesNeverLeavesAHalfWrittenCheckpoint) {
  constexpr int kTp = 2;
  constexpr int kKeep = 2;
  constexpr int kVariants = 3;
  const int64_t padded = PaddedVocab(kTp);
  // Consecutive iterations save different values, so a shard mixing two saves would be caught.
  std::vector<std::vector<SyntheticTensor>> variants;
  for (int v = 0; v < kVariants; ++v) {
    variants.push_back(SyntheticModel(padded, 1 + v, /*big_rows=*/1024));
  }
  auto ModelFor = [&](int64_t iteration) -> const std::vector<SyntheticTensor>& {
    return variants[iteration % kVariants];
  };
  std::mt19937 rng(2024);
  int killed_mid_save = 0;
  for (int trial = 0; trial < 10; ++trial) {
    SCOPED_TRACE(absl::StrCat("trial ", trial));
    const std::string dir = FreshDir(absl::StrCat("sigkill_", trial));
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      // Slices are prepared up front so that the loop spends its time saving.
      ::close(fds[0]);
      std::vector<Tensor> storage;
      std::vector<std::vector<TensorRecord>> records;  // [variant * kTp + rank]
      for (int v = 0; v < kVariants; ++v) {
        for (int r = 0; r < kTp; ++r) {
          records.push_back(FilledRecords(variants[v], r, kTp, &storage));
        }
      }
      for (int64_t it = 1; it < 1000000; ++it) {
        for (int r = 0; r < kTp; ++r) {
          const auto& shard = records[(it % kVariants) * kTp + r];
          if (!SaveShard(dir, SyntheticMeta(it, r, kTp), shard).ok()) ::_exit(2);
        }
        if (!CommitCheckpoint(dir, it, kTp, kKeep).ok()) ::_exit(2);
        if (::write(fds[1], &it, sizeof it) != sizeof it) ::_exit(3);
      }
      ::_exit(0);
    }
    ::close(fds[1]);
    int64_t last = 0;
    ASSERT_EQ(::read(fds[0], &last, sizeof last), static_cast<ssize_t>(sizeof last));
    ::usleep(std::uniform_int_distribution<int>(0, 30000)(rng));
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child failed to save: exit " << WEXITSTATUS(status);
    int64_t it = 0;
    while (::read(fds[0], &it, sizeof it) == static_cast<ssize_t>(sizeof it)) last = it;
    ::close(fds[0]);

    auto latest = LatestIteration(dir);
    ASSERT_TRUE(latest.ok()) << latest.status();
    EXPECT_TRUE(*latest == last || *latest == last + 1) << *latest << " vs " << last;
    EXPECT_TRUE(HoldsModel(dir, *latest, kTp, ModelFor(*latest)));

    int uncommitted = 0;
    for (const std::string& name : Entries(dir)) {
      if (name == "latest_checkpointed_iteration.txt") continue;
      // Besides iteration directories only hidden temporaries (an interrupted pointer update or
      // deletion) may exist.
      ASSERT_TRUE(absl::StartsWith(name, "iter_") || name[0] == '.') << name;
      if (!absl::StartsWith(name, "iter_")) continue;
      const int64_t iteration = std::stoll(name.substr(5));
      EXPECT_LE(iteration, *latest + 1) << name;
      if (iteration > *latest) ++uncommitted;
      if (iteration <= *latest - kKeep) {
        // Retention was interrupted by the kill; still never a broken complete-looking shard.
        EXPECT_EQ(iteration, *latest - kKeep) << name;
      }
      // Every shard under its final name is complete and exact; anything else is hidden.
      for (const std::string& entry : Entries(dir + "/" + name)) {
        if (entry[0] == '.') {
          ++killed_mid_save;
          continue;
        }
        ASSERT_TRUE(absl::StartsWith(entry, "mp_rank_0")) << entry;
        const int rank = entry.back() - '0';
        std::vector<Tensor> storage;
        const auto& model = ModelFor(iteration);
        const auto records = ZeroRecords(model, rank, kTp, &storage);
        const absl::Status s = LoadShard(dir, iteration, rank, kTp, ConfigJson(), records, nullptr);
        ASSERT_TRUE(s.ok()) << name << "/" << entry << ": " << s;
        for (size_t i = 0; i < model.size(); ++i) {
          ASSERT_EQ(Bytes(records[i].local),
                    Bytes(SliceOf(model[i].global.view(), model[i].split_dim, rank, kTp).view()))
              << name << "/" << entry << " " << model[i].name;
        }
      }
    }
    EXPECT_LE(uncommitted, 1);

    // The next save recovers from whatever was left.
    const auto& next = ModelFor(*latest + 1);
    ASSERT_TRUE(SaveModel(dir, next, kTp, *latest + 1, kKeep).ok());
    EXPECT_EQ(*LatestIteration(dir), *latest + 1);
    EXPECT_TRUE(HoldsModel(dir, *latest + 1, kTp, next));
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

TEST(CheckpointTest, CorruptShardFilesGiveClearErrors) {
  const auto model = SyntheticModel(PaddedVocab(2), 8);
  std::vector<Tensor> storage;
  const auto into = ZeroRecords(model, 0, 2, &storage);
  {
    // Truncated tensors file.
    const std::string dir = FreshDir("corrupt_truncated");
    ASSERT_TRUE(SaveModel(dir, model, 2, 3).ok());
    const std::string file = ShardDir(dir, 3, 0) + "/model_optim.safetensors";
    fs::resize_file(file, fs::file_size(file) - 5);
    EXPECT_STATUS(LatestIteration(dir).status(), absl::StatusCode::kDataLoss,
                  "metadata.json records");
    EXPECT_STATUS(LoadShard(dir, 3, 0, 2, ConfigJson(), into, nullptr), absl::StatusCode::kDataLoss,
                  file);
  }
  {
    // Header length overwritten (wrong magic/length), file size unchanged.
    const std::string dir = FreshDir("corrupt_length");
    ASSERT_TRUE(SaveModel(dir, model, 2, 3).ok());
    const std::string file = ShardDir(dir, 3, 0) + "/model_optim.safetensors";
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.write("\xFF\xFF\xFF\x7F\x00\x00\x00\x00", 8);
    f.close();
    EXPECT_STATUS(LoadShard(dir, 3, 0, 2, ConfigJson(), into, nullptr), absl::StatusCode::kDataLoss,
                  "runs past the end of the file");
  }
  {
    // metadata.json that is not JSON, or not ours.
    const std::string dir = FreshDir("corrupt_meta");
    ASSERT_TRUE(SaveModel(dir, model, 2, 3).ok());
    const std::string meta = ShardDir(dir, 3, 0) + "/metadata.json";
    WriteText(meta, "{\"format\": ");
    EXPECT_STATUS(LoadShard(dir, 3, 0, 2, ConfigJson(), into, nullptr), absl::StatusCode::kDataLoss,
                  meta + ": not a JSON object");
    EXPECT_STATUS(LatestIteration(dir).status(), absl::StatusCode::kDataLoss, meta);
    WriteText(meta, R"({"format": "something else", "version": 1})");
    EXPECT_STATUS(LoadShard(dir, 3, 0, 2, ConfigJson(), into, nullptr), absl::StatusCode::kDataLoss,
                  "not checkpoint metadata");
  }
  // Nothing was loaded by the failed attempts.
  for (const TensorRecord& r : into) {
    EXPECT_EQ(Bytes(r.local), std::string(r.local.nbytes(), '\0')) << r.name;
  }
  EXPECT_STATUS(LoadShard(FreshDir("corrupt_missing"), 3, 0, 2, ConfigJson(), into, nullptr),
                absl::StatusCode::kNotFound, "no checkpoint shard");
}

TEST(CheckpointTest, MismatchedRunsAreRefused) {
  const std::string dir = FreshDir("mismatch");
  const auto model = SyntheticModel(PaddedVocab(2), 9);
  ASSERT_TRUE(SaveModel(dir, model, 2, 100).ok());
  std::vector<Tensor> storage;

  // Another TP degree, from rank 0 and from a rank the checkpoint does not have.
  const auto model4 = SyntheticModel(PaddedVocab(4), 9);
  for (int rank : {0, 3}) {
    const auto into = ZeroRecords(model4, rank, 4, &storage);
    EXPECT_STATUS(LoadShard(dir, 100, rank, 4, ConfigJson(), into, nullptr),
                  absl::StatusCode::kFailedPrecondition,
                  "was saved with tensor_model_parallel_size 2 but this run uses 4; convert it "
                  "first: bazel run //train:reshard_checkpoint -- --load=" +
                      dir);
  }

  auto into = ZeroRecords(model, 1, 2, &storage);
  // Another model config: every differing key is named.
  std::string config = ConfigJson();
  config.replace(config.find("\"hidden_size\": 6"), 16, "\"hidden_size\": 8, \"new_key\": 1");
  EXPECT_STATUS(LoadShard(dir, 100, 1, 2, config, into, nullptr),
                absl::StatusCode::kFailedPrecondition,
                "model config differs from this run's: hidden_size (checkpoint: 6, this run: 8); "
                "new_key (checkpoint: absent, this run: 1)");
  EXPECT_STATUS(LoadShard(dir, 100, 1, 2, "not json", into, nullptr),
                absl::StatusCode::kInvalidArgument, "not a JSON object");

  // A tensor this model has and the checkpoint lacks.
  Tensor extra = Tensor::Zeros({2}, DType::kF32);
  auto more = into;
  more.push_back({"extra.weight", {2}, -1, false, extra.view()});
  EXPECT_STATUS(LoadShard(dir, 100, 1, 2, ConfigJson(), more, nullptr),
                absl::StatusCode::kFailedPrecondition,
                "lacks 1 tensor(s) of this model: extra.weight");
  // A tensor the checkpoint has and this model lacks.
  auto fewer = into;
  fewer.erase(fewer.begin() + 3);
  EXPECT_STATUS(LoadShard(dir, 100, 1, 2, ConfigJson(), fewer, nullptr),
                absl::StatusCode::kFailedPrecondition,
                "holds 1 tensor(s) this model does not have: layers.0.dense.weight");
  // Different global shape / partitioning.
  auto reshaped = into;
  Tensor qkv = Tensor::Zeros({8, 6}, DType::kF32);
  reshaped[1] = {"layers.0.qkv.weight", {16, 6}, 0, false, qkv.view()};
  EXPECT_STATUS(LoadShard(dir, 100, 1, 2, ConfigJson(), reshaped, nullptr),
                absl::StatusCode::kFailedPrecondition,
                "tensor 'layers.0.qkv.weight' has global shape [12, 6] split on dim 0 in the "
                "checkpoint, global shape [16, 6] split on dim 0 in this model");
  auto replicated = into;
  Tensor ln_split = Tensor::Zeros({3}, DType::kF32);
  replicated[6] = {"layers.0.ln.weight", {6}, 0, false, ln_split.view()};
  EXPECT_STATUS(LoadShard(dir, 100, 1, 2, ConfigJson(), replicated, nullptr),
                absl::StatusCode::kFailedPrecondition,
                "'layers.0.ln.weight' has global shape [6] "
                "replicated in the checkpoint");
  // Different dtype.
  auto retyped = into;
  Tensor bias32 = Tensor::Zeros({6}, DType::kF32);
  retyped[2].local = bias32.view();
  EXPECT_STATUS(LoadShard(dir, 100, 1, 2, ConfigJson(), retyped, nullptr),
                absl::StatusCode::kFailedPrecondition,
                "tensor 'layers.0.qkv.bias' is bf16 in the checkpoint, f32 in this model");
  // A bad record from the caller.
  auto bad = into;
  bad[0].split_dim = 1;
  EXPECT_STATUS(LoadShard(dir, 100, 1, 2, ConfigJson(), bad, nullptr),
                absl::StatusCode::kInvalidArgument,
                "vocab_padded tensors must be split on dimension 0");

  // None of the refusals wrote into the model.
  for (const TensorRecord& r : into) {
    EXPECT_EQ(Bytes(r.local), std::string(r.local.nbytes(), '\0')) << r.name;
  }
  // And the right run loads.
  EXPECT_TRUE(HoldsModel(dir, 100, 2, model));
}

TEST(CheckpointTest, SaveShardRejectsBadInput) {
  const std::string dir = FreshDir("bad_save");
  const auto model = SyntheticModel(PaddedVocab(2), 10);
  std::vector<Tensor> storage;
  const auto records = FilledRecords(model, 0, 2, &storage);
  const CheckpointMetadata meta = SyntheticMeta(1, 0, 2);

  CheckpointMetadata m = meta;
  m.tp_rank = 2;
  EXPECT_STATUS(SaveShard(dir, m, records), absl::StatusCode::kInvalidArgument,
                "tp_rank 2 of tp_size 2");
  m = meta;
  m.iteration = -1;
  EXPECT_STATUS(SaveShard(dir, m, records), absl::StatusCode::kInvalidArgument,
                "negative iteration");
  m = meta;
  m.model_config_json = "[1, 2]";
  EXPECT_STATUS(SaveShard(dir, m, records), absl::StatusCode::kInvalidArgument,
                "model_config_json is not a JSON object");
  m = meta;
  m.trainer_state_json = "\xFF";
  EXPECT_STATUS(SaveShard(dir, m, records), absl::StatusCode::kInvalidArgument, "not UTF-8");

  auto r = records;
  r[1].local = storage[0].view();  // Wrong local shape.
  EXPECT_STATUS(SaveShard(dir, meta, r), absl::StatusCode::kInvalidArgument,
                "tensor 'layers.0.qkv.weight': local view f32[20, 6] on cpu is not one of 2 "
                "slices of global shape [12, 6] split on dim 0 (expected [6, 6])");
  r = records;
  r[3].global_shape = {6, 7};
  EXPECT_STATUS(SaveShard(dir, meta, r), absl::StatusCode::kInvalidArgument,
                "'layers.0.dense.weight': global dimension 1 of [6, 7] is not divisible");
  r = records;
  r[3].split_dim = 2;
  EXPECT_STATUS(SaveShard(dir, meta, r), absl::StatusCode::kInvalidArgument,
                "split_dim 2 is out of range");
  r = records;
  r[3].vocab_padded = true;
  EXPECT_STATUS(SaveShard(dir, meta, r), absl::StatusCode::kInvalidArgument,
                "vocab_padded tensors must be split on dimension 0, not 1");
  r = records;
  r[4].local.strides = {20, 1, 4};
  EXPECT_STATUS(SaveShard(dir, meta, r), absl::StatusCode::kInvalidArgument,
                "must be contiguous host memory");
  r = records;
  r[5].name = r[4].name;
  r[5].global_shape = r[4].global_shape;
  r[5].split_dim = r[4].split_dim;
  r[5].local = r[4].local;
  EXPECT_STATUS(SaveShard(dir, meta, r), absl::StatusCode::kInvalidArgument,
                "duplicate tensor name 'layers.0.mixed'");
  // Nothing that looks like a shard was created by the refused saves.
  if (fs::exists(dir + "/iter_0000001")) {
    for (const std::string& e : Entries(dir + "/iter_0000001")) EXPECT_EQ(e[0], '.') << e;
  }
  EXPECT_STATUS(CommitCheckpoint(dir, 1, 2, 0), absl::StatusCode::kFailedPrecondition,
                "is missing");
}

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

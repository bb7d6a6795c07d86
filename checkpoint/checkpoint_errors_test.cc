// What checkpoints refuse, with which status and message: corrupt files (checkpoint_metadata.cc,
// safetensors), checkpoints that do not fit the run (checkpoint_load.cc: TP degree, model
// config, tensors), bad arguments to SaveShard, and save directories refused at start-up.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_testutil.h"
#include "core/faulty_file_system.h"
#include "gtest/gtest.h"

namespace mt {
namespace checkpoint {
namespace {

using testing::Bytes;
using testing::ConfigJson;
using testing::Entries;
using testing::FilledRecords;
using testing::FreshDir;
using testing::HoldsModel;
using testing::PaddedVocab;
using testing::SaveModel;
using testing::SyntheticMeta;
using testing::SyntheticModel;
using testing::WriteText;
using testing::ZeroRecords;

namespace fs = std::filesystem;

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
                  "was saved with tensor_model_parallel_size 2 and pipeline_model_parallel_size 1 "
                  "but this run uses 4 and 1; convert it first: bazel run "
                  "//checkpoint:reshard_checkpoint -- --load=" +
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

TEST(CheckpointTest, PrepareSaveDirectoryCreatesAndProbes) {
  const std::string root = FreshDir("prepare_save");
  const std::string save = root + "/a/b/ckpt";
  ASSERT_TRUE(PrepareSaveDirectory(save).ok());
  ASSERT_TRUE(fs::is_directory(save));
  EXPECT_TRUE(fs::is_empty(save)) << "the probe file was left behind";
  // A directory that passes every check but takes no bytes (a full disk): the probe's write
  // names it, and no probe is left.
  FaultyFileSystem full(DefaultFileSystem(), {FileFault::kNoSpace, /*at_byte=*/0});
  EXPECT_STATUS(PrepareSaveDirectory(root + "/full", full), absl::StatusCode::kResourceExhausted,
                "cannot save checkpoints: cannot write " + root + "/full/.write_probe.");
  EXPECT_TRUE(fs::is_empty(root + "/full"));
  // A regular file on the way: nothing is created.
  WriteText(root + "/file", "x");
  EXPECT_STATUS(PrepareSaveDirectory(root + "/file/ckpt"), absl::StatusCode::kFailedPrecondition,
                root + "/file is not a directory");
}

}  // namespace
}  // namespace checkpoint
}  // namespace mt

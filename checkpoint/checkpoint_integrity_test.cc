// The SHA-256 and CRC32C digests of checkpoint tensors: each tensor's entry in metadata.json
// carries the digests of its bytes in the shard's tensors file (checked here with sha256sum and
// Debian's python3-crc32c on the extracted byte range), a flipped byte inside a tensor is refused
// by every load path naming the tensor and the file, checking either digest, and checkpoints
// written before CRC32Cs, or before digests, still load (checked by the SHA-256, or unchecked).
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_testutil.h"
#include "checkpoint/safetensors.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace checkpoint {
namespace {

using Json = nlohmann::json;
using testing::ConfigJson;
using testing::Crc32cOfFiles;
using testing::FreshDir;
using testing::HoldsModel;
using testing::kRealVocab;
using testing::PaddedVocab;
using testing::ReadText;
using testing::SaveModel;
using testing::Sha256sum;
using testing::SyntheticModel;
using testing::WriteText;
using testing::ZeroRecords;

std::string TensorsFile(const std::string& dir, int64_t iteration, int rank) {
  return ShardDir(dir, iteration, rank) + "/" + kShardTensorsFile;
}

std::string MetadataFile(const std::string& dir, int64_t iteration, int rank) {
  return ShardDir(dir, iteration, rank) + "/" + kShardMetadataFile;
}

// Absolute file offset [begin, end) of every tensor, from the safetensors header.
std::map<std::string, std::pair<uint64_t, uint64_t>> FileRanges(const std::string& path) {
  auto reader = SafetensorsReader::Open(path);
  EXPECT_TRUE(reader.ok()) << reader.status();
  const std::string bytes = ReadText(path);
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = header * 256 + static_cast<unsigned char>(bytes[i]);
  std::map<std::string, std::pair<uint64_t, uint64_t>> ranges;
  for (const SafetensorsEntry& e : reader->entries()) {
    ranges[e.name] = {8 + header + e.begin, 8 + header + e.end};
  }
  return ranges;
}

TEST(CheckpointIntegrityTest, DigestsAreSha256sumAndCrc32cOfTheStoredBytes) {
  const auto model = SyntheticModel(PaddedVocab(2), 21);
  const std::string dir = FreshDir("integrity_digests");
  ASSERT_TRUE(SaveModel(dir, model, 2, 5).ok());
  for (int rank = 0; rank < 2; ++rank) {
    const std::string file = TensorsFile(dir, 5, rank);
    const std::string bytes = ReadText(file);
    const auto ranges = FileRanges(file);
    const Json meta = Json::parse(ReadText(MetadataFile(dir, 5, rank)));
    std::vector<std::string> pieces;
    std::map<std::string, std::string> recorded;  // piece file -> digest in metadata.json
    std::map<std::string, std::string> recorded_crc;
    for (const Json& t : meta["tensors"]) {
      const std::string name = t["name"].get<std::string>();
      ASSERT_TRUE(t.contains("sha256")) << name;
      ASSERT_TRUE(t.contains("crc32c") && t["crc32c"].is_string()) << name;
      const auto [begin, end] = ranges.at(name);
      const std::string piece = absl::StrCat(dir, "/piece_", rank, "_", pieces.size());
      WriteText(piece, bytes.substr(begin, end - begin));
      pieces.push_back(piece);
      recorded[piece] = t["sha256"].get<std::string>();
      recorded_crc[piece] = t["crc32c"].get<std::string>();
    }
    ASSERT_EQ(pieces.size(), model.size());
    const auto computed = Sha256sum(pieces);
    const auto computed_crc = Crc32cOfFiles(pieces);
    for (const std::string& piece : pieces) {
      EXPECT_EQ(recorded[piece], computed.at(piece)) << piece;
      EXPECT_EQ(recorded_crc[piece], computed_crc.at(piece)) << piece;
    }
  }
}

// Flips one byte in the middle of tensor `name` of rank `rank`'s file.
void FlipByte(const std::string& dir, int64_t iteration, int rank, const std::string& name) {
  const std::string file = TensorsFile(dir, iteration, rank);
  const auto [begin, end] = FileRanges(file).at(name);
  std::string bytes = ReadText(file);
  bytes[(begin + end) / 2] ^= 0x10;
  WriteText(file, bytes);
}

// Every load path of checkpoint `dir` iteration 7 (saved at TP=2 from `model`, SyntheticModel
// seed `seed`), checking `verify`, fails with DataLoss containing `what` (empty: succeeds).
void ExpectEveryLoad(const std::string& dir, int rank,
                     const std::vector<testing::SyntheticTensor>& model, uint64_t seed,
                     CheckpointVerify verify, const std::string& what) {
  const auto expect = [&](const absl::Status& s, const char* path) {
    SCOPED_TRACE(absl::StrCat(path, ", verify ", static_cast<int>(verify)));
    if (what.empty()) {
      EXPECT_TRUE(s.ok()) << s;
    } else {
      EXPECT_STATUS(s, absl::StatusCode::kDataLoss, what);
      EXPECT_EQ(std::string(s.message()).find('\n'), std::string::npos) << s;  // One line.
    }
  };
  std::vector<Tensor> storage;
  expect(LoadShard(dir, 7, rank, 2, ConfigJson(), ZeroRecords(model, rank, 2, &storage), nullptr, 0,
                   1, DefaultFileSystem(), verify),
         "LoadShard");
  // Resharded loads: the same degree (read directly), and TP=1 (reassembled from both shards).
  ReshardedLoadOptions options;
  options.verify = verify;
  expect(LoadResharded(dir, 7, rank, 2, kRealVocab, ZeroRecords(model, rank, 2, &storage), options)
             .status(),
         "LoadResharded at TP=2");
  const auto serial = SyntheticModel(PaddedVocab(1), seed);
  expect(LoadResharded(dir, 7, 0, 1, kRealVocab, ZeroRecords(serial, 0, 1, &storage), options)
             .status(),
         "LoadResharded at TP=1");
  ReshardLayout layout;
  layout.tp_size = 4;
  layout.padded_vocab = PaddedVocab(4);
  layout.verify = verify;
  const std::string out = absl::StrCat(dir, "_tp4_", static_cast<int>(verify));
  expect(ReshardCheckpoint(dir, 7, out, kRealVocab, layout), "ReshardCheckpoint");
}

// Split tensors are flipped in shard 1; replicated ones in shard 0, the copy that reassembling
// loads read (the other shards' copies are not read then, so cannot mislead). Refused checking
// the CRC32C (the default) and the SHA-256; loaded without checking.
TEST(CheckpointIntegrityTest, AFlippedByteIsRefusedByEveryLoadPath) {
  const auto model = SyntheticModel(PaddedVocab(2), 22);
  const std::map<std::string, int> flips = {{"embedding.word.weight", 1},
                                            {"layers.0.heads", 1},
                                            {"lm_head.bias", 1},
                                            {"optimizer.step", 0},
                                            {"layers.0.ln.weight", 0}};
  for (const auto& [name, rank] : flips) {
    const std::string dir = FreshDir("integrity_flip_" + name);
    ASSERT_TRUE(SaveModel(dir, model, 2, 7).ok());
    FlipByte(dir, 7, rank, name);
    const std::string file = TensorsFile(dir, 7, rank);
    const std::string what = absl::StrCat(file, ": tensor '", name, "' fails its ");
    // The committed checkpoint still looks complete (sizes agree): only the digest tells.
    ASSERT_TRUE(LatestIteration(dir).ok());
    std::vector<Tensor> storage;
    EXPECT_STATUS(
        LoadShard(dir, 7, rank, 2, ConfigJson(), ZeroRecords(model, rank, 2, &storage), nullptr),
        absl::StatusCode::kDataLoss, what + "CRC32C check");
    ExpectEveryLoad(dir, rank, model, 22, CheckpointVerify::kCrc32c, what + "CRC32C check");
    ExpectEveryLoad(dir, rank, model, 22, CheckpointVerify::kSha256, what + "SHA-256 check");
    ExpectEveryLoad(dir, rank, model, 22, CheckpointVerify::kNone, "");
    // The other shard is intact.
    EXPECT_TRUE(LoadShard(dir, 7, 1 - rank, 2, ConfigJson(),
                          ZeroRecords(model, 1 - rank, 2, &storage), nullptr)
                    .ok());
  }
}

TEST(CheckpointIntegrityTest, ReplicatedTensorsMustAgreeAcrossShards) {
  // Shard 1 of another model (seed 26): every shard is intact on its own, but the replicated
  // tensors (read from shard 0 alone when resharding) no longer agree with shard 0's.
  const auto model = SyntheticModel(PaddedVocab(2), 25);
  const auto other = SyntheticModel(PaddedVocab(2), 26);
  const std::string dir = FreshDir("integrity_replicas");
  const std::string other_dir = FreshDir("integrity_replicas_other");
  ASSERT_TRUE(SaveModel(dir, model, 2, 3).ok());
  ASSERT_TRUE(SaveModel(other_dir, other, 2, 3).ok());
  WriteText(TensorsFile(dir, 3, 1), ReadText(TensorsFile(other_dir, 3, 1)));
  WriteText(MetadataFile(dir, 3, 1), ReadText(MetadataFile(other_dir, 3, 1)));
  std::vector<Tensor> storage;
  EXPECT_TRUE(
      LoadShard(dir, 3, 1, 2, ConfigJson(), ZeroRecords(other, 1, 2, &storage), nullptr).ok());
  const std::string what =
      absl::StrCat(ShardDir(dir, 3, 1), ": replicated tensor 'layers.0.ln.weight' differs from");
  const auto serial = SyntheticModel(PaddedVocab(1), 25);
  EXPECT_STATUS(
      LoadResharded(dir, 3, 0, 1, kRealVocab, ZeroRecords(serial, 0, 1, &storage)).status(),
      absl::StatusCode::kDataLoss, what);
  EXPECT_STATUS(ReshardCheckpoint(dir, 3, dir + "_tp1", 1, kRealVocab, PaddedVocab(1)),
                absl::StatusCode::kDataLoss, what);
}

// Erases `fields` from every tensor entry of both shards' metadata.json (iteration 7).
void EraseDigests(const std::string& dir, const std::vector<std::string>& fields) {
  for (int rank = 0; rank < 2; ++rank) {
    Json meta = Json::parse(ReadText(MetadataFile(dir, 7, rank)));
    for (Json& t : meta["tensors"]) {
      for (const std::string& f : fields) t.erase(f);
    }
    WriteText(MetadataFile(dir, 7, rank), meta.dump(1));
  }
}

TEST(CheckpointIntegrityTest, CheckpointsWithoutDigestsStillLoad) {
  const auto model = SyntheticModel(PaddedVocab(2), 23);
  const std::string dir = FreshDir("integrity_old");
  ASSERT_TRUE(SaveModel(dir, model, 2, 7).ok());
  EraseDigests(dir, {"sha256", "crc32c"});
  EXPECT_TRUE(HoldsModel(dir, 7, 2, model));
  ExpectEveryLoad(dir, 0, model, 23, CheckpointVerify::kCrc32c, "");
  ExpectEveryLoad(dir, 0, model, 23, CheckpointVerify::kSha256, "");
}

// Written before CRC32Cs (only "sha256"): checked by the SHA-256 whatever the mode; and with only
// "crc32c", by the CRC32C.
TEST(CheckpointIntegrityTest, ATensorWithOneDigestIsCheckedByIt) {
  const auto model = SyntheticModel(PaddedVocab(2), 27);
  for (const auto& [erase, check] :
       {std::pair<std::string, std::string>{"crc32c", "SHA-256"}, {"sha256", "CRC32C"}}) {
    const std::string dir = FreshDir("integrity_only_" + check);
    ASSERT_TRUE(SaveModel(dir, model, 2, 7).ok());
    EraseDigests(dir, {erase});
    EXPECT_TRUE(HoldsModel(dir, 7, 2, model));
    FlipByte(dir, 7, 1, "layers.0.heads");
    const std::string what =
        absl::StrCat(TensorsFile(dir, 7, 1), ": tensor 'layers.0.heads' fails its ", check);
    ExpectEveryLoad(dir, 1, model, 27, CheckpointVerify::kCrc32c, what);
    ExpectEveryLoad(dir, 1, model, 27, CheckpointVerify::kSha256, what);
  }
}

TEST(CheckpointIntegrityTest, MalformedDigestsAreRefused) {
  const auto model = SyntheticModel(PaddedVocab(1), 24);
  const std::string dir = FreshDir("integrity_malformed");
  ASSERT_TRUE(SaveModel(dir, model, 1, 2).ok());
  const std::string path = MetadataFile(dir, 2, 0);
  const Json good = Json::parse(ReadText(path));
  std::vector<Tensor> storage;
  struct Malformed {
    const char* field;
    std::vector<Json> values;
    const char* error;
  };
  const Malformed cases[] = {{"sha256",
                              {Json(42), Json("ABC"), Json(std::string(64, 'A'))},
                              "\"sha256\" is not 64 lowercase hex digits"},
                             {"crc32c",
                              {Json(0xE3069283u), Json("E3069283"), Json("e306928"),
                               Json("e3069283 "), Json("0xe30692"), Json(nullptr)},
                              "\"crc32c\" is not 8 lowercase hex digits"}};
  for (const Malformed& c : cases) {
    for (const Json& bad : c.values) {
      Json meta = good;
      meta["tensors"][1][c.field] = bad;
      WriteText(path, meta.dump(1));
      EXPECT_STATUS(
          LoadShard(dir, 2, 0, 1, ConfigJson(), ZeroRecords(model, 0, 1, &storage), nullptr),
          absl::StatusCode::kDataLoss, c.error);
    }
  }
  auto reader = SafetensorsReader::Open(TensorsFile(dir, 2, 0));
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(reader->ExpectSha256("no such tensor", std::string(64, '0')).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(reader->ExpectSha256("tokens", "0123").code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace checkpoint
}  // namespace mt

// Test fixtures for checkpoints: a synthetic "model" of global tensors (every dtype, split on
// dimensions 0, 1, 2 or replicated, vocab-padded ones) with random bit patterns, sliced for a TP
// degree by plain element-index arithmetic (independent of the checkpoint code's block copies),
// and helpers that save such a model as a checkpoint and check what a checkpoint holds; small file
// helpers and a status matcher for the checkpoint tests. testonly.
#ifndef MT_CHECKPOINT_CHECKPOINT_TESTUTIL_H_
#define MT_CHECKPOINT_CHECKPOINT_TESTUTIL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "checkpoint/checkpoint.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace mt {
namespace checkpoint {
namespace testing {

// The synthetic model's vocabulary: 37 real tokens, padded to a multiple of 4 x TP
// (40 for TP 1 and 2, 48 for TP 4).
constexpr int64_t kRealVocab = 37;
constexpr int64_t kVocabMultiple = 4;
int64_t PaddedVocab(int tp);

struct SyntheticTensor {
  std::string name;
  Shape global_shape;
  int split_dim = -1;
  bool vocab_padded = false;
  Tensor global;
};

// Tensors for a model whose vocabulary is padded to padded_vocab rows, random bits from `seed`
// (padding rows included). big_rows > 0 adds "big" [big_rows, 256] f32 split on dim 0, to make a
// save take a while.
std::vector<SyntheticTensor> SyntheticModel(int64_t padded_vocab, uint64_t seed,
                                            int64_t big_rows = 0);
// The same model after resharding to new_padded rows: vocab-padded tensors keep their first
// kRealVocab rows, the rest are zero; other tensors unchanged.
std::vector<SyntheticTensor> Repadded(const std::vector<SyntheticTensor>& model,
                                      int64_t new_padded);

// Slice `rank` of `tp` of a global tensor along split_dim (the whole tensor for -1).
Tensor SliceOf(const TensorView& global, int split_dim, int rank, int tp);

// Records holding rank's slices of `model` (filled), or zero tensors of the slice shapes (empty),
// owned by *storage.
std::vector<TensorRecord> FilledRecords(const std::vector<SyntheticTensor>& model, int rank, int tp,
                                        std::vector<Tensor>* storage);
std::vector<TensorRecord> ZeroRecords(const std::vector<SyntheticTensor>& model, int rank, int tp,
                                      std::vector<Tensor>* storage);

// {"family": "gpt2", "hidden_size": 6, "make_vocab_size_divisible_by": 4, "vocab_size": 37, ...}.
std::string ConfigJson();
// Metadata for the synthetic run at `iteration` (consumed samples and trainer state derived from
// it).
CheckpointMetadata SyntheticMeta(int64_t iteration, int tp_rank, int tp_size);

// Saves every rank's shard of `model` and commits.
absl::Status SaveModel(const std::string& dir, const std::vector<SyntheticTensor>& model, int tp,
                       int64_t iteration, int keep_last = 0);

// The pipeline stages (of 2) of the synthetic model's tensors, as a model's stages hold them:
// the word embedding (and its moment) on both, the embedding side's tensors on stage 0, the rest
// on stage 1.
std::vector<int> TwoStages(const std::string& name);
// The tensors of `model` that stages_of places on `stage`.
std::vector<SyntheticTensor> StageTensors(
    const std::vector<SyntheticTensor>& model, int stage,
    const std::function<std::vector<int>(const std::string&)>& stages_of);
// Saves `model` as a checkpoint of tp x pp shards (stage p's hold StageTensors(model, p)) and
// commits.
absl::Status SaveStages(const std::string& dir, const std::vector<SyntheticTensor>& model, int tp,
                        int pp, int64_t iteration,
                        const std::function<std::vector<int>(const std::string&)>& stages_of);

// Loads every shard of the checkpoint and compares it byte for byte with `expected`'s slices and
// SyntheticMeta(iteration, rank, tp). With pp > 1: every stage's shards, each against the
// tensors stages_of places on it.
::testing::AssertionResult HoldsModel(
    const std::string& dir, int64_t iteration, int tp, const std::vector<SyntheticTensor>& expected,
    int pp = 1, const std::function<std::vector<int>(const std::string&)>& stages_of = nullptr);

// The bytes of a host view.
std::string Bytes(const TensorView& v);

// A fresh, empty directory for one test: <test tmpdir>/checkpoint_test_<name>.
std::string FreshDir(const std::string& name);
// A whole file's bytes ("" if unreadable); replacing a file's contents.
std::string ReadText(const std::string& path);
void WriteText(const std::string& path, const std::string& text);
// The names in a directory, sorted.
std::vector<std::string> Entries(const std::string& dir);
// Each file's digest as the system's sha256sum prints it (an independent SHA-256), by path;
// files it cannot read are absent (and a gtest failure is recorded).
std::map<std::string, std::string> Sha256sum(const std::vector<std::string>& files);
// Each file's CRC32C as 8 lowercase hex digits, computed by Debian's python3-crc32c (an independent
// CRC32C), by path; likewise.
std::map<std::string, std::string> Crc32cOfFiles(const std::vector<std::string>& files);

// Expects `expr` (an absl::Status) to have `status_code` and a message containing `substring`.
#define EXPECT_STATUS(expr, status_code, substring)                                 \
  do {                                                                              \
    const absl::Status s_ = (expr);                                                 \
    EXPECT_EQ(s_.code(), status_code) << s_;                                        \
    EXPECT_TRUE(absl::StrContains(s_.message(), substring))                         \
        << "message: " << s_.message() << "\nexpected to contain: " << (substring); \
  } while (0)

}  // namespace testing
}  // namespace checkpoint
}  // namespace mt

#endif  // MT_CHECKPOINT_CHECKPOINT_TESTUTIL_H_

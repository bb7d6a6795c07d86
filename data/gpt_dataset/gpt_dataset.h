// GPT training samples over an indexed dataset, built the way Megatron-LM's GPTDataset builds them
// (as Megatron-LM's GPTDataset lays them out).
//
// 1. Split: the dataset's documents are divided into train / valid / test by contiguous document
//    ranges from weights such as "969,30,1" (SplitDocuments below).
// 2. document_index: the split's document ids tiled num_epochs times, then shuffled. num_epochs is
//    the smallest number of passes over the split that yields the requested number of samples:
//    the smallest e with (e * tokens_per_epoch - 1) / seq_len >= num_samples.
// 3. sample_index: the documents in document_index order form one token stream; sample k is the
//    seq_len + 1 tokens starting at stream position k * seq_len, so consecutive samples overlap by
//    one token (the last label of one is the first input of the next). Row k of sample_index is
//    (position in document_index, offset in that document) of sample k's first token; row k + 1
//    holds its last token. All (e * tokens_per_epoch - 1) / seq_len complete samples of the e
//    epochs are indexed (num_samples() >= the requested count, as in Megatron).
// 4. shuffle_index: a permutation of the samples; sample i of the dataset is stream sample
//    shuffle_index[i].
// Randomness: one std::mt19937_64 seeded with `seed` shuffles document_index and then
// shuffle_index (Fisher-Yates, shuffle.h). A "document" is a document of the indexed dataset: all
// its sequences (one per document for GPT preprocessing). Megatron's "separate last epoch"
// refinement is not implemented: every epoch is shuffled together.
//
// The three indices are cached in one file next to the data (or in config.cache_dir):
//   <prefix>_<split>_<num_samples>ns_<seq_len>sl_<seed>s_<first>-<end>docs.gptidx
// written atomically, and reused when its header matches; otherwise (inputs changed, file corrupt
// or from another version) rebuilt and rewritten. Cache layout, little-endian, 8-byte fields:
//   0   magic "MTGPTIDX"          8   version (uint32) = 1, then uint32 0
//   16  inputs hash: of the format version, document range, the length of every document in
//       the range, seq_len, seed and requested num_samples, so any change to what the indices
//       depend on invalidates the cache (token contents do not matter)
//   24  payload checksum (of the three arrays)
//   32  num_epochs                40  len(document_index) = L
//   48  number of samples S       56  seq_len
//   64  document_index int64[L], sample_index int64[2 (S + 1)], shuffle_index int64[S]
// A cache that cannot be written (read-only directory) only costs a warning: the indices stay in
// memory. A loaded cache is memory-mapped, its checksum verified and its entries range-checked.
// Hashes are over 64-bit words: h = mix(h XOR w) from h = 0, mix = SplitMix64's finaliser.
#ifndef MT_DATA_GPT_DATASET_GPT_DATASET_H_
#define MT_DATA_GPT_DATASET_GPT_DATASET_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "data/indexed/file_util.h"
#include "data/indexed/indexed_dataset.h"

namespace mt {
namespace data {

enum class Split { kTrain = 0, kValid = 1, kTest = 2 };
// "train", "valid", "test".
absl::string_view SplitName(Split split);

// Document boundaries {0, b1, b2, num_documents}: split k is documents [b[k], b[k+1]).
// `split` holds up to three non-negative weights separated by ',' or '/' ("969,30,1", "1",
// "8/1/1"); missing weights are 0; weights are normalised by their sum. As Megatron's
// get_train_valid_test_split_: b[k+1] = b[k] + round(w_k * num_documents) (round half to even),
// then the excess b[3] - num_documents is subtracted from b[1], b[2], b[3].
// InvalidArgument for an unparsable or negative weight, more than three weights, a zero sum, or
// boundaries that would fall outside [0, num_documents].
absl::StatusOr<std::array<int64_t, 4>> SplitDocuments(absl::string_view split,
                                                      int64_t num_documents);

struct GptDatasetConfig {
  std::string split = "969,30,1";  // Train/valid/test weights (SplitDocuments).
  int64_t seq_len = 1024;          // Tokens a model sees per sample; samples hold seq_len + 1.
  int64_t num_samples = 1;         // Samples this split must provide (>= 1).
  uint64_t seed = 1234;            // Seeds document_index and shuffle_index.
  std::string cache_dir;           // Where index caches go; empty = the data's directory.

  // InvalidArgument naming the field for seq_len < 1, num_samples < 1, or
  // seq_len * num_samples >= 2^62.
  absl::Status Validate() const;
};

enum class IndexSource { kBuilt, kLoadedFromCache };

// Immutable after Create; GetSample may be called from any number of threads.
class GptDataset {
 public:
  // Builds or loads the indices for one split of `data`. InvalidArgument for a bad config or
  // split string, a non-integer token dtype, or a split with no documents or no tokens.
  static absl::StatusOr<std::unique_ptr<GptDataset>> Create(
      std::shared_ptr<const IndexedDataset> data, Split split, const GptDatasetConfig& config);

  GptDataset(const GptDataset&) = delete;
  GptDataset& operator=(const GptDataset&) = delete;

  // Samples available (all complete samples of num_epochs() epochs; >= the requested count).
  int64_t num_samples() const { return num_samples_; }
  int64_t seq_len() const { return seq_len_; }
  // Tokens per sample: seq_len() + 1 (inputs are [0, seq_len), labels [1, seq_len]).
  int64_t sample_length() const { return seq_len_ + 1; }

  // Writes sample i (after shuffling) into out, converting token ids to int32.
  // CHECK-fails unless 0 <= i < num_samples() and out.size() == sample_length().
  void GetSample(int64_t i, absl::Span<int32_t> out) const;
  std::vector<int32_t> Sample(int64_t i) const;

  Split split() const { return split_; }
  // The split's documents: [document_begin(), document_end()).
  int64_t document_begin() const { return doc_begin_; }
  int64_t document_end() const { return doc_end_; }
  int64_t num_epochs() const { return num_epochs_; }
  // [num_epochs * split documents] document ids.
  absl::Span<const int64_t> document_index() const { return document_index_; }
  // [(num_samples + 1) * 2]: row k = (position in document_index, offset in that document).
  absl::Span<const int64_t> sample_index() const { return sample_index_; }
  // [num_samples]: a permutation of [0, num_samples).
  absl::Span<const int64_t> shuffle_index() const { return shuffle_index_; }

  IndexSource index_source() const { return index_source_; }
  const std::string& cache_path() const { return cache_path_; }
  const IndexedDataset& data() const { return *data_; }

 private:
  GptDataset() = default;
  void Build(uint64_t seed);
  // Maps the cache if it exists and matches; returns why not otherwise (for the log).
  absl::Status TryLoadCache(uint64_t inputs_hash);
  absl::Status WriteCache(uint64_t inputs_hash) const;

  std::shared_ptr<const IndexedDataset> data_;
  Split split_ = Split::kTrain;
  int64_t seq_len_ = 0;
  int64_t doc_begin_ = 0;
  int64_t doc_end_ = 0;
  int64_t tokens_per_epoch_ = 0;
  int64_t num_epochs_ = 0;
  int64_t num_samples_ = 0;
  std::string cache_path_;
  IndexSource index_source_ = IndexSource::kBuilt;

  std::vector<int64_t> owned_;  // The three indices back to back, when built here.
  MappedFile cache_;            // ... or the mapped cache file.
  absl::Span<const int64_t> document_index_;
  absl::Span<const int64_t> sample_index_;
  absl::Span<const int64_t> shuffle_index_;
};

}  // namespace data
}  // namespace mt

#endif  // MT_DATA_GPT_DATASET_GPT_DATASET_H_

// BERT training samples over a sentence-level indexed dataset (one sequence per sentence, a
// document a group of sentences, as //data:preprocess --split_sentences writes it), built the way
// Megatron-LM's BertDataset builds them (whole-word n-gram masking, sentence-order prediction).
//
// 1. Split: documents are divided into train / valid / test by contiguous ranges (SplitDocuments,
//    gpt_dataset.h).
// 2. Sample mapping (Megatron's build_mapping): max_len = seq_len - 3 (room for [CLS] and two
//    [SEP]). For each epoch, for each document of the split with at least 2 sentences, in order:
//    sentences are gathered from the document's start until their tokens reach the target length
//    while at least 2 sentences of the document remain and at least 2 were gathered, or until the
//    document ends; each such run [first, end) of >= 2 sentences is one sample with its target
//    length. Target length: with probability short_seq_prob a uniform integer in [2, max_len]
//    (Megatron's short_seq_prob), else max_len. Epochs are added until there are at least
//    num_samples samples (all samples of those epochs are kept); then the samples are shuffled.
//    Randomness: one std::mt19937_64 seeded with `seed` draws the target lengths (u < p with
//    u = (r >> 11) / 2^53; length = 2 + UniformBelow(max_len - 1), shuffle.h) and then shuffles
//    the samples (Fisher-Yates, shuffle.h).
// 3. Sample i (after shuffling) is built from PhiloxStream(seed, i) (philox_stream.h), so it is a
//    pure function of (seed, i). Draws, in order:
//      a_end = 1 + UniformBelow(n - 1) for the n sentences: A = sentences [0, a_end), B = the rest;
//      swapped = NextDouble() < 0.5: if so A and B trade places and sop_label = 1 (sentence-order
//        prediction: 1 = swapped, 0 = in order);
//      truncation to the target length: while len(A) + len(B) > target, the longer segment (B on
//        a tie) loses one token, from the front if NextDouble() < 0.5, else from the back;
//      masking of [CLS] A [SEP] B [SEP] (masking.h, whole-word n-grams).
//    Layout: tokens = [CLS] A [SEP] B [SEP] then [PAD] up to seq_len; token_types 0 for [CLS] A
//    [SEP], 1 for B [SEP], 0 for padding; padding_mask 1 for real tokens, 0 for padding;
//    labels = the original token at masked positions, kIgnoreLabel (-100) elsewhere; loss_mask 1
//    at masked positions.
// Not done: Megatron skips documents holding a sentence over 512 tokens (here truncation handles
// them) and caches the mapping on disk (it is built in memory here: one pass over the split's
// sentence lengths per epoch).
#ifndef MT_DATA_BERT_DATASET_BERT_DATASET_H_
#define MT_DATA_BERT_DATASET_BERT_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/bert_dataset/bert_vocab.h"
#include "data/bert_dataset/masking.h"
#include "data/gpt_dataset/gpt_dataset.h"
#include "data/indexed/indexed_dataset.h"

namespace mt {
namespace data {

inline constexpr int32_t kIgnoreLabel = -100;

struct BertDatasetConfig {
  std::string split = "969,30,1";  // Train/valid/test weights (SplitDocuments).
  int64_t seq_len = 512;           // Tokens per sample, with [CLS], [SEP]s and padding.
  int64_t num_samples = 1;         // Samples this split must provide (>= 1).
  uint64_t seed = 1234;
  double short_seq_prob = 0.1;  // Probability of a shorter random target length.
  MaskingConfig masking;

  // InvalidArgument naming the field: seq_len < 5 (or >= 2^31), num_samples < 1,
  // short_seq_prob outside [0, 1], or a bad masking config.
  absl::Status Validate() const;
};

struct BertSample {
  std::vector<int32_t> tokens;        // [seq_len]
  std::vector<int32_t> token_types;   // [seq_len]
  std::vector<int32_t> labels;        // [seq_len] original id where masked, else kIgnoreLabel
  std::vector<int32_t> loss_mask;     // [seq_len] 1 where masked
  std::vector<int32_t> padding_mask;  // [seq_len] 1 for real tokens, 0 for [PAD]
  int32_t sop_label = 0;              // 1 if A and B were swapped
  bool truncated = false;             // Tokens were dropped to fit the target length.
  int32_t num_tokens = 0;             // Real tokens (before padding).
};

// One row of the sample mapping: sentences [begin, end) (dataset sequence indices, one
// document) and the target length of A + B.
struct BertSampleSpan {
  int64_t begin = 0;
  int64_t end = 0;
  int32_t target_length = 0;
};

// Immutable after Create; GetSample may be called from any number of threads.
class BertDataset {
 public:
  // InvalidArgument for a bad config or split, a vocabulary that fails Validate(), a non-integer
  // token dtype, a token id of the split outside [0, vocab_size) (naming it: was the data made
  // with another tokenizer?), or a split without any document of two or more sentences.
  static absl::StatusOr<std::unique_ptr<BertDataset>> Create(
      std::shared_ptr<const IndexedDataset> data, Split split, const BertDatasetConfig& config,
      BertVocab vocab);

  BertDataset(const BertDataset&) = delete;
  BertDataset& operator=(const BertDataset&) = delete;

  int64_t num_samples() const { return static_cast<int64_t>(spans_.size()); }
  int64_t seq_len() const { return config_.seq_len; }
  int64_t num_epochs() const { return num_epochs_; }
  int64_t document_begin() const { return doc_begin_; }
  int64_t document_end() const { return doc_end_; }
  const BertDatasetConfig& config() const { return config_; }
  const BertVocab& vocab() const { return vocab_; }
  // Row i of the (shuffled) mapping; CHECK on i.
  const BertSampleSpan& span(int64_t i) const;

  // Sample i, 0 <= i < num_samples() (CHECK). GetSample reuses out's buffers; `trace` (may be
  // null) receives the masking decisions.
  void GetSample(int64_t i, BertSample* out, MaskingTrace* trace = nullptr) const;
  BertSample Sample(int64_t i) const;

 private:
  BertDataset() = default;

  std::shared_ptr<const IndexedDataset> data_;
  BertDatasetConfig config_;
  BertVocab vocab_;
  int64_t doc_begin_ = 0;
  int64_t doc_end_ = 0;
  int64_t num_epochs_ = 0;
  std::vector<BertSampleSpan> spans_;
};

}  // namespace data
}  // namespace mt

#endif  // MT_DATA_BERT_DATASET_BERT_DATASET_H_

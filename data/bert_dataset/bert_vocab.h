// What the BERT sample builder needs to know about the WordPiece vocabulary: its size, the special
// ids, and which tokens continue a word ("##" pieces), for whole-word masking.
#ifndef MT_DATA_BERT_DATASET_BERT_VOCAB_H_
#define MT_DATA_BERT_DATASET_BERT_VOCAB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/tokenizers/tokenizer.h"
#include "data/tokenizers/wordpiece.h"

namespace mt {
namespace data {

struct BertVocab {
  int32_t vocab_size = 0;
  int32_t cls = kNoToken;
  int32_t sep = kNoToken;
  int32_t pad = kNoToken;
  int32_t mask = kNoToken;
  std::vector<uint8_t> is_continuation;  // [vocab_size]: 1 if the token starts with "##".

  // From the token strings (token i has id i). InvalidArgument if one of [CLS] [SEP] [PAD]
  // [MASK] is missing or the vocabulary has fewer than 5 tokens (one must be ordinary).
  static absl::StatusOr<BertVocab> FromTokens(const std::vector<std::string>& tokens);
  static absl::StatusOr<BertVocab> FromWordPiece(const WordPiece& wordpiece);

  // InvalidArgument if the sizes disagree, a special id is outside [0, vocab_size) or two of
  // them are equal, or no ordinary token is left.
  absl::Status Validate() const;

  bool IsSpecial(int32_t id) const { return id == cls || id == sep || id == pad || id == mask; }
  // Ordinary tokens (all but [CLS] [SEP] [PAD] [MASK]): vocab_size - 4.
  int32_t num_ordinary() const { return vocab_size - 4; }
  // The r-th ordinary token in id order, r in [0, num_ordinary()) (CHECK).
  int32_t OrdinaryToken(int32_t r) const;
};

}  // namespace data
}  // namespace mt

#endif  // MT_DATA_BERT_DATASET_BERT_VOCAB_H_

// The interface every tokenizer implements: GPT-2 byte-level BPE (gpt2_bpe.h) and BERT WordPiece
// (wordpiece.h). factory.h builds one by name from the installed assets.
//
// Thread-safety: all const methods may be called concurrently from any number of threads.
#ifndef MT_DATA_TOKENIZERS_TOKENIZER_H_
#define MT_DATA_TOKENIZERS_TOKENIZER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace mt::data {

// Marks a special token a tokenizer does not have.
inline constexpr int32_t kNoToken = -1;

// Ids of the special tokens (kNoToken where absent). GPT-2 has only eod ("<|endoftext|>", 50256);
// BERT has cls/sep/pad/mask/unk (101/102/0/103/100 in bert-base-uncased) and no eod, as in
// Megatron's BertWordPieceTokenizer.
struct SpecialTokens {
  int32_t eod = kNoToken;
  int32_t cls = kNoToken;
  int32_t sep = kNoToken;
  int32_t pad = kNoToken;
  int32_t mask = kNoToken;
  int32_t unk = kNoToken;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // The factory name: "gpt2" or "bert".
  virtual absl::string_view name() const = 0;

  // Valid ids are [0, vocab_size()). This is the unpadded size (50257 for GPT-2, 30522 for BERT).
  virtual int32_t vocab_size() const = 0;

  virtual SpecialTokens special_tokens() const = 0;
  int32_t eod_id() const { return special_tokens().eod; }

  // Appends the ids of `text` to *ids. `text` is UTF-8; what happens to bytes that are not valid
  // UTF-8 is documented by each tokenizer. Never fails.
  virtual void EncodeAppend(absl::string_view text, std::vector<int32_t>* ids) const = 0;

  std::vector<int32_t> Encode(absl::string_view text) const {
    std::vector<int32_t> ids;
    EncodeAppend(text, &ids);
    return ids;
  }

  // The text of `ids` (see each tokenizer for how exact the round trip is). InvalidArgument, naming
  // the position and value, if an id is outside [0, vocab_size()).
  virtual absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const = 0;
};

}  // namespace mt::data

#endif  // MT_DATA_TOKENIZERS_TOKENIZER_H_

// BERT WordPiece tokenizer, uncased, as Google's BERT tokenization.py (the one Megatron ships as
// bert_tokenization.py) does it with do_lower_case=True:
//
//   Basic tokenisation
//     1. Drop U+0000, U+FFFD and control characters (categories Cc and Cf, but not \t \n \r);
//        bytes that are not valid UTF-8 are dropped too (Python decodes with errors="ignore").
//     2. Whitespace (\t \n \r, space, category Zs) separates words; so do U+2028 and U+2029
//        (Python's str.split() treats them as whitespace). Each CJK ideograph (BERT's block list)
//        is a word of its own.
//     3. Each word is lower-cased (full Unicode mapping, e.g. 'İ' -> 'i̇'), decomposed (NFD) and
//        stripped of non-spacing marks (Mn), so "Héllo" -> "hello".
//     4. Punctuation splits words, each punctuation character becoming a word: ASCII 33-47, 58-64,
//        91-96, 123-126 and categories P*. "don't" -> don ' t; "[CLS]" in text is just
//        punctuation and letters (Megatron's tokenizer has no never_split list).
//   WordPiece
//     5. Greedy longest-match-first against the vocabulary; pieces after the first are looked up
//        with "##" in front. A word longer than 100 code points, or one that cannot be covered,
//        becomes a single [UNK].
//
// Unicode properties, case mapping and NFD come from ICU (Debian's libicu72, Unicode 15.0); BERT's
// Python code uses unicodedata (Unicode 14.0 in Python 3.11), so characters assigned in between
// may be treated differently. wordpiece_test compares every id with a Python rendering of BERT's
// algorithm (testdata/bert_reference.py) on a ~440 KB varied text.
//
// Immutable after Load; thread-safe.
#ifndef MT_DATA_TOKENIZERS_WORDPIECE_H_
#define MT_DATA_TOKENIZERS_WORDPIECE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "data/tokenizers/tokenizer.h"

namespace mt::data {

class WordPiece final : public Tokenizer {
 public:
  static constexpr int kMaxCharsPerWord = 100;

  // Loads vocab.txt (line i holds the token of id i). NotFound if it cannot be opened; DataLoss
  // if it is empty or lacks one of [PAD] [UNK] [CLS] [SEP] [MASK].
  static absl::StatusOr<std::unique_ptr<WordPiece>> Load(const std::string& vocab_txt);
  // Load() from the installed assets (assets.h).
  static absl::StatusOr<std::unique_ptr<WordPiece>> LoadDefault();

  absl::string_view name() const override { return "bert"; }
  int32_t vocab_size() const override { return static_cast<int32_t>(tokens_.size()); }
  SpecialTokens special_tokens() const override { return special_; }

  void EncodeAppend(absl::string_view text, std::vector<int32_t>* ids) const override;

  // Tokens joined by spaces, "##" continuations glued to the previous token (as HuggingFace's
  // convert_tokens_to_string): "un ##aff ##able" -> "unaffable". Lower-casing, accents and the
  // spacing around punctuation are not restored.
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override;

  // Steps 1-4: the words WordPiece (step 5) is applied to, as UTF-8.
  std::vector<std::string> BasicTokenize(absl::string_view text) const;

  // Step 5 on one basic word, appending ids.
  void WordPieceWord(absl::string_view word, std::vector<int32_t>* ids) const;

  // Token text of `id` (with its "##"). Requires 0 <= id < vocab_size().
  const std::string& token(int32_t id) const;

  // Id of a vocabulary entry, or kNoToken.
  int32_t TokenId(absl::string_view token) const;

 private:
  WordPiece() = default;

  template <typename Emit>
  void Basic(absl::string_view text, Emit&& emit) const;

  std::vector<std::string> tokens_;                         // [vocab]
  absl::flat_hash_map<std::string, int32_t> word_start_;    // "hello" -> id
  absl::flat_hash_map<std::string, int32_t> continuation_;  // "##able" stored as "able"
  size_t max_piece_bytes_ = 0;                              // Longest entry, without ##.
  SpecialTokens special_;
};

}  // namespace mt::data

#endif  // MT_DATA_TOKENIZERS_WORDPIECE_H_

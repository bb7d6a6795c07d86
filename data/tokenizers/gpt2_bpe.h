// GPT-2 byte-level BPE (Radford et al. 2019), producing exactly the ids of the reference encoder
// (npm gpt-3-encoder under node) on any text:
//
//   1. Pre-tokenisation by the regex
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      implemented by hand over UTF-8 code points, with the \p{L} / \p{N} / \s classes of the
//      reference's regex engine (js_char_classes.h).
//   2. Each piece's UTF-8 bytes start as one symbol per byte (GPT-2's byte-to-unicode mapping is
//      only the spelling of bytes in encoder.json and vocab.bpe; symbols here are raw bytes).
//   3. Repeatedly merge the adjacent pair with the lowest merge rank (vocab.bpe line order), all
//      its non-overlapping occurrences left to right, until no pair has a rank. Results are cached.
//
// One documented quirk of the reference is reproduced: it looks merge ranks up by the string
// "A,B", so a pair whose joined string collides with a listed merge (e.g. ('",', '"') with the
// merge ('"', ',"')) takes that merge's rank; in GPT-2's files all such collisions yield the same
// merged token. Among pairs of equal rank the one furthest right is merged first, as there.
//
// Bytes that are not valid UTF-8 are kept as they are (never dropped, never replaced): each
// invalid byte is classed like a symbol ([^\s\p{L}\p{N}]), so the pieces are those node makes of
// the text with U+FFFD in its place, and Decode(Encode(bytes)) == bytes for every byte string.
//
// Thread-safe: Encode/Decode may run concurrently (the merge cache is sharded and locked).
#ifndef MT_DATA_TOKENIZERS_GPT2_BPE_H_
#define MT_DATA_TOKENIZERS_GPT2_BPE_H_

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "data/tokenizers/js_char_classes.h"
#include "data/tokenizers/tokenizer.h"

namespace mt::data {

class Gpt2Bpe final : public Tokenizer {
 public:
  static constexpr int32_t kVocabSize = 50257;
  static constexpr int32_t kEodId = 50256;  // "<|endoftext|>"

  // Loads encoder.json, vocab.bpe and the JS class table. NotFound if a file cannot be opened;
  // DataLoss (naming the file and what is wrong) if one is malformed or they do not fit together.
  static absl::StatusOr<std::unique_ptr<Gpt2Bpe>> Load(const std::string& encoder_json,
                                                       const std::string& vocab_bpe,
                                                       const std::string& js_classes);
  // Load() from the installed assets (assets.h).
  static absl::StatusOr<std::unique_ptr<Gpt2Bpe>> LoadDefault();

  absl::string_view name() const override { return "gpt2"; }
  int32_t vocab_size() const override { return static_cast<int32_t>(token_bytes_.size()); }
  SpecialTokens special_tokens() const override;

  void EncodeAppend(absl::string_view text, std::vector<int32_t>* ids) const override;

  // Concatenated bytes of the tokens; exact inverse of Encode (also for invalid UTF-8).
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override;

  // The pieces step 1 cuts `text` into (views into `text`; they concatenate to `text`).
  std::vector<absl::string_view> PreTokenize(absl::string_view text) const;

  // Raw bytes of token `id`. Requires 0 <= id < vocab_size().
  absl::string_view token_bytes(int32_t id) const;

  const JsCharClasses& char_classes() const { return classes_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t merged;  // Id of the concatenation.
  };
  struct CacheShard {
    std::mutex mu;
    absl::flat_hash_map<std::string, std::vector<int32_t>> words;  // Guarded by mu.
  };
  static constexpr int kCacheShards = 64;
  static constexpr size_t kMaxWordsPerShard = 8192;  // A full shard is cleared: bounded memory.

  explicit Gpt2Bpe(JsCharClasses classes) : classes_(std::move(classes)) {}

  template <typename Emit>
  void Split(absl::string_view text, Emit&& emit) const;
  void BpeWord(absl::string_view word, std::vector<int32_t>* ids) const;

  JsCharClasses classes_;
  std::vector<std::string> token_bytes_;         // [vocab] raw bytes of each id
  std::array<int32_t, 256> byte_id_{};           // id of each single-byte token
  absl::flat_hash_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> merge
  int32_t eod_ = kNoToken;
  mutable std::array<CacheShard, kCacheShards> cache_;
};

}  // namespace mt::data

#endif  // MT_DATA_TOKENIZERS_GPT2_BPE_H_

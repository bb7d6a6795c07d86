// BERT's masked-language-model corruption with whole-word n-gram masking, as Megatron-LM's
// create_masked_lm_predictions (do_whole_word_mask=True, max_ngrams=3, no geometric
// distribution) does it, drawing from a PhiloxStream in a documented order.
//
// Given the tokens of one sample ([CLS] A [SEP] B [SEP], unpadded):
//   1. Words: each token other than [CLS] [SEP] [PAD] [MASK] belongs to a word; a word is a token
//      that is not a "##" continuation, plus the continuations right after it. (A continuation
//      right after a special token, or at the start, begins a word of its own; Megatron would
//      join it to the word before the [SEP].)
//   2. num_to_predict = max(1, round_half_even(num_tokens * masked_lm_prob)), num_tokens counting
//      the special tokens as Megatron does; 0 when masked_lm_prob is 0 (masking off).
//   3. The word indices 0..W-1 are shuffled: Fisher-Yates from the back, for i = W-1 down to 1
//      swap w[i] with w[UniformBelow(i + 1)].
//   4. For each word index s in that order, until num_to_predict tokens are masked:
//        - draw n in 1..N, N = min(max_ngram, W - s), with P(n) proportional to 1/n
//          (u = NextDouble(); n = first n with u < cumulative P);
//        - while the n words from s hold more tokens than are left to mask and n > 1: n -= 1;
//          if even one word is too many, skip s;
//        - if any of those tokens is already masked, skip s;
//        - else mask them all; for each token, in position order: u = NextDouble();
//          u < mask_token_prob -> [MASK]; else u2 = NextDouble(): u2 < keep / (1 - mask_token_prob)
//          -> unchanged, else a random ordinary token (BertVocab::OrdinaryToken(UniformBelow(
//          num_ordinary))), where keep = 1 - mask_token_prob - random_token_prob.
//      (Megatron draws n over all max_ngram lengths and shortens n-grams that run past the end;
//      here only the lengths that fit are drawn.)
//   5. Masked positions are returned in increasing order with the original tokens as labels.
// With the defaults, 15% of tokens (whole words) are masked; of those 80% become [MASK], 10% a
// random token and 10% stay. Random replacements never produce [CLS] [SEP] [PAD] [MASK] (Megatron
// draws from the whole vocabulary).
#ifndef MT_DATA_BERT_DATASET_MASKING_H_
#define MT_DATA_BERT_DATASET_MASKING_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "data/bert_dataset/bert_vocab.h"
#include "data/bert_dataset/philox_stream.h"

namespace mt {
namespace data {

struct MaskingConfig {
  double masked_lm_prob = 0.15;    // Fraction of tokens to mask; 0 turns masking off.
  int max_ngram = 3;               // Longest n-gram of whole words.
  double mask_token_prob = 0.8;    // Of the masked tokens: replaced by [MASK].
  double random_token_prob = 0.1;  // ... by a random ordinary token; the rest stay unchanged.

  // InvalidArgument naming the field: probabilities outside [0, 1], mask + random > 1,
  // max_ngram < 1.
  absl::Status Validate() const;
};

struct MaskedPositions {
  std::vector<int32_t> positions;  // Increasing.
  std::vector<int32_t> labels;     // The original token at each position.
};

// What the masking decided, for tests and statistics.
struct MaskingTrace {
  int64_t num_to_predict = 0;
  std::vector<int> drawn_ngram;   // n as drawn in step 4, for every start considered.
  std::vector<int> drawn_max;     // N (lengths available) for each draw.
  std::vector<int> masked_ngram;  // Words in each n-gram that was masked.
};

// Applies steps 1-5 to `tokens` in place. `config` must be valid (CHECK); every token must be in
// [0, vocab.vocab_size) (CHECK). `trace` may be null.
void MaskTokens(absl::Span<int32_t> tokens, const BertVocab& vocab, const MaskingConfig& config,
                PhiloxStream* rng, MaskedPositions* out, MaskingTrace* trace = nullptr);

}  // namespace data
}  // namespace mt

#endif  // MT_DATA_BERT_DATASET_MASKING_H_

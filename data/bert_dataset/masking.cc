#include "data/bert_dataset/masking.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace mt {
namespace data {

absl::Status MaskingConfig::Validate() const {
  auto prob = [](const char* name, double p) -> absl::Status {
    if (!(p >= 0 && p <= 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("masking: ", name, " must be in [0, 1], got ", p));
    }
    return absl::OkStatus();
  };
  for (const auto& [name, p] : {std::pair<const char*, double>{"masked_lm_prob", masked_lm_prob},
                                {"mask_token_prob", mask_token_prob},
                                {"random_token_prob", random_token_prob}}) {
    const absl::Status s = prob(name, p);
    if (!s.ok()) return s;
  }
  if (mask_token_prob + random_token_prob > 1 + 1e-12) {
    return absl::InvalidArgumentError(
        absl::StrCat("masking: mask_token_prob + random_token_prob must be <= 1, got ",
                     mask_token_prob + random_token_prob));
  }
  if (max_ngram < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("masking: max_ngram must be >= 1, got ", max_ngram));
  }
  return absl::OkStatus();
}

namespace {

// Step 1: the words, as [begin, end) token ranges.
struct Words {
  std::vector<int32_t> begin;
  std::vector<int32_t> end;

  int32_t size() const { return static_cast<int32_t>(begin.size()); }
  // Tokens in the n words from word s.
  int64_t TokensIn(int32_t s, int n) const {
    int64_t count = 0;
    for (int32_t w = s; w < s + n; ++w) count += end[w] - begin[w];
    return count;
  }
};

Words FindWords(absl::Span<const int32_t> tokens, const BertVocab& vocab) {
  Words words;
  for (int32_t i = 0; i < static_cast<int32_t>(tokens.size()); ++i) {
    const int32_t t = tokens[i];
    CHECK(t >= 0 && t < vocab.vocab_size) << "token " << t << " at " << i << " outside the vocab";
    if (vocab.IsSpecial(t)) continue;
    if (vocab.is_continuation[t] && !words.end.empty() && words.end.back() == i) {
      words.end.back() = i + 1;
    } else {
      words.begin.push_back(i);
      words.end.push_back(i + 1);
    }
  }
  return words;
}

// Step 2.
int64_t NumToPredict(int64_t num_tokens, double masked_lm_prob) {
  if (masked_lm_prob <= 0) return 0;
  return std::max<int64_t>(1, static_cast<int64_t>(std::nearbyint(num_tokens * masked_lm_prob)));
}

// Step 3: the word indices, shuffled.
std::vector<int32_t> ShuffledWords(int32_t num_words, PhiloxStream* rng) {
  std::vector<int32_t> order(num_words);
  std::iota(order.begin(), order.end(), 0);
  for (int32_t i = num_words - 1; i >= 1; --i) {
    std::swap(order[i], order[rng->UniformBelow(static_cast<uint64_t>(i) + 1)]);
  }
  return order;
}

// Step 4: masks whole-word n-grams, one start word at a time.
class NgramMasker {
 public:
  NgramMasker(absl::Span<int32_t> tokens, const Words& words, const BertVocab& vocab,
              const MaskingConfig& config, PhiloxStream* rng, MaskingTrace* trace)
      : tokens_(tokens),
        words_(words),
        vocab_(vocab),
        config_(config),
        rng_(rng),
        trace_(trace),
        cumulative_(config.max_ngram + 1),
        covered_(tokens.size(), 0) {
    // cumulative_[N][n - 1]: P(length <= n) when lengths 1..N are available.
    for (int N = 1; N <= config.max_ngram; ++N) {
      double norm = 0;
      for (int n = 1; n <= N; ++n) norm += 1.0 / n;
      double acc = 0;
      for (int n = 1; n <= N; ++n) {
        acc += (1.0 / n) / norm;
        cumulative_[N].push_back(acc);
      }
    }
    keep_given_not_mask_ =
        config.mask_token_prob < 1
            ? (1 - config.mask_token_prob - config.random_token_prob) / (1 - config.mask_token_prob)
            : 0;
  }

  // Considers the n-gram starting at word s, with `left` tokens still to mask.
  void MaybeMaskFrom(int32_t s, int64_t left) {
    int n = DrawLength(s);
    while (n > 1 && words_.TokensIn(s, n) > left) --n;
    if (words_.TokensIn(s, n) > left || AnyCovered(s, n)) return;
    for (int32_t w = s; w < s + n; ++w) {
      for (int32_t p = words_.begin[w]; p < words_.end[w]; ++p) Corrupt(p);
    }
    if (trace_ != nullptr) trace_->masked_ngram.push_back(n);
  }

  // (position, original token) of every masked token, in the order they were masked.
  std::vector<std::pair<int32_t, int32_t>>& masked() { return masked_; }

 private:
  // n in 1..N, N = the lengths that fit from word s, with P(n) proportional to 1/n.
  int DrawLength(int32_t s) {
    const int N = std::min<int>(config_.max_ngram, words_.size() - s);
    const double u = rng_->NextDouble();
    int n = N;
    for (int k = 1; k <= N; ++k) {
      if (u < cumulative_[N][k - 1]) {
        n = k;
        break;
      }
    }
    if (trace_ != nullptr) {
      trace_->drawn_ngram.push_back(n);
      trace_->drawn_max.push_back(N);
    }
    return n;
  }

  bool AnyCovered(int32_t s, int n) const {
    for (int32_t w = s; w < s + n; ++w) {
      for (int32_t p = words_.begin[w]; p < words_.end[w]; ++p) {
        if (covered_[p] != 0) return true;
      }
    }
    return false;
  }

  // Masks token p: [MASK], a random ordinary token, or unchanged.
  void Corrupt(int32_t p) {
    covered_[p] = 1;
    masked_.emplace_back(p, tokens_[p]);
    if (rng_->NextDouble() < config_.mask_token_prob) {
      tokens_[p] = vocab_.mask;
    } else if (rng_->NextDouble() >= keep_given_not_mask_) {
      tokens_[p] = vocab_.OrdinaryToken(
          static_cast<int32_t>(rng_->UniformBelow(static_cast<uint64_t>(vocab_.num_ordinary()))));
    }
  }

  absl::Span<int32_t> tokens_;
  const Words& words_;
  const BertVocab& vocab_;
  const MaskingConfig& config_;
  PhiloxStream* rng_;
  MaskingTrace* trace_;
  std::vector<std::vector<double>> cumulative_;
  double keep_given_not_mask_ = 0;
  std::vector<uint8_t> covered_;  // Per token: already masked.
  std::vector<std::pair<int32_t, int32_t>> masked_;
};

}  // namespace

void MaskTokens(absl::Span<int32_t> tokens, const BertVocab& vocab, const MaskingConfig& config,
                PhiloxStream* rng, MaskedPositions* out, MaskingTrace* trace) {
  const absl::Status valid = config.Validate();
  CHECK(valid.ok()) << valid;
  out->positions.clear();
  out->labels.clear();
  const Words words = FindWords(tokens, vocab);
  const int64_t num_to_predict =
      NumToPredict(static_cast<int64_t>(tokens.size()), config.masked_lm_prob);
  if (trace != nullptr) trace->num_to_predict = num_to_predict;
  if (num_to_predict == 0 || words.size() == 0) return;

  NgramMasker masker(tokens, words, vocab, config, rng, trace);
  std::vector<std::pair<int32_t, int32_t>>& masked = masker.masked();
  for (const int32_t s : ShuffledWords(words.size(), rng)) {
    const int64_t left = num_to_predict - static_cast<int64_t>(masked.size());
    if (left <= 0) break;
    masker.MaybeMaskFrom(s, left);
  }

  // Step 5.
  std::sort(masked.begin(), masked.end());
  out->positions.reserve(masked.size());
  out->labels.reserve(masked.size());
  for (const auto& [p, label] : masked) {
    out->positions.push_back(p);
    out->labels.push_back(label);
  }
}

}  // namespace data
}  // namespace mt

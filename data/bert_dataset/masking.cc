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

void MaskTokens(absl::Span<int32_t> tokens, const BertVocab& vocab, const MaskingConfig& config,
                PhiloxStream* rng, MaskedPositions* out, MaskingTrace* trace) {
  const absl::Status valid = config.Validate();
  CHECK(valid.ok()) << valid;
  out->positions.clear();
  out->labels.clear();
  const int64_t num_tokens = static_cast<int64_t>(tokens.size());

  // Step 1: words as [begin, end) token ranges.
  std::vector<int32_t> word_begin;
  std::vector<int32_t> word_end;
  for (int32_t i = 0; i < num_tokens; ++i) {
    const int32_t t = tokens[i];
    CHECK(t >= 0 && t < vocab.vocab_size) << "token " << t << " at " << i << " outside the vocab";
    if (vocab.IsSpecial(t)) continue;
    if (vocab.is_continuation[t] && !word_end.empty() && word_end.back() == i) {
      word_end.back() = i + 1;
    } else {
      word_begin.push_back(i);
      word_end.push_back(i + 1);
    }
  }
  const int32_t num_words = static_cast<int32_t>(word_begin.size());

  // Step 2.
  const int64_t num_to_predict =
      config.masked_lm_prob > 0
          ? std::max<int64_t>(
                1, static_cast<int64_t>(std::nearbyint(num_tokens * config.masked_lm_prob)))
          : 0;
  if (trace != nullptr) trace->num_to_predict = num_to_predict;
  if (num_to_predict == 0 || num_words == 0) return;

  // Step 3.
  std::vector<int32_t> order(num_words);
  std::iota(order.begin(), order.end(), 0);
  for (int32_t i = num_words - 1; i >= 1; --i) {
    std::swap(order[i], order[rng->UniformBelow(static_cast<uint64_t>(i) + 1)]);
  }

  // Step 4. cumulative[N][n - 1]: P(length <= n) when lengths 1..N are available.
  const int max_ngram = config.max_ngram;
  std::vector<std::vector<double>> cumulative(max_ngram + 1);
  for (int N = 1; N <= max_ngram; ++N) {
    double norm = 0;
    for (int n = 1; n <= N; ++n) norm += 1.0 / n;
    double acc = 0;
    for (int n = 1; n <= N; ++n) {
      acc += (1.0 / n) / norm;
      cumulative[N].push_back(acc);
    }
  }
  const double keep_given_not_mask =
      config.mask_token_prob < 1
          ? (1 - config.mask_token_prob - config.random_token_prob) / (1 - config.mask_token_prob)
          : 0;
  std::vector<uint8_t> covered(num_tokens, 0);
  std::vector<std::pair<int32_t, int32_t>> masked;  // (position, original token)
  auto tokens_in = [&](int32_t s, int n) {
    int64_t count = 0;
    for (int32_t w = s; w < s + n; ++w) count += word_end[w] - word_begin[w];
    return count;
  };
  for (const int32_t s : order) {
    const int64_t left = num_to_predict - static_cast<int64_t>(masked.size());
    if (left <= 0) break;
    const int N = std::min<int>(max_ngram, num_words - s);
    const double u = rng->NextDouble();
    int n = N;
    for (int k = 1; k <= N; ++k) {
      if (u < cumulative[N][k - 1]) {
        n = k;
        break;
      }
    }
    if (trace != nullptr) {
      trace->drawn_ngram.push_back(n);
      trace->drawn_max.push_back(N);
    }
    while (n > 1 && tokens_in(s, n) > left) --n;
    if (tokens_in(s, n) > left) continue;
    bool any_covered = false;
    for (int32_t w = s; w < s + n && !any_covered; ++w) {
      for (int32_t p = word_begin[w]; p < word_end[w]; ++p) any_covered |= covered[p] != 0;
    }
    if (any_covered) continue;
    for (int32_t w = s; w < s + n; ++w) {
      for (int32_t p = word_begin[w]; p < word_end[w]; ++p) {
        covered[p] = 1;
        masked.emplace_back(p, tokens[p]);
        if (rng->NextDouble() < config.mask_token_prob) {
          tokens[p] = vocab.mask;
        } else if (rng->NextDouble() >= keep_given_not_mask) {
          tokens[p] = vocab.OrdinaryToken(
              static_cast<int32_t>(rng->UniformBelow(static_cast<uint64_t>(vocab.num_ordinary()))));
        }
      }
    }
    if (trace != nullptr) trace->masked_ngram.push_back(n);
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

#include "experiments/gpt2_zeroshot/bigram.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"

namespace mt {
namespace experiments {
namespace {

std::vector<absl::string_view> Words(absl::string_view text) {
  return absl::StrSplit(text, absl::ByAnyChar(" \t\n\r\f\v"), absl::SkipEmpty());
}

std::string Target(absl::string_view word) {
  while (!word.empty() && !absl::ascii_isalnum(static_cast<unsigned char>(word.back()))) {
    word.remove_suffix(1);
  }
  return std::string(word);
}

// The most frequent key of `counts`, ties to the bytewise smallest.
std::string Best(const absl::flat_hash_map<std::string, int64_t>& counts) {
  const std::pair<const std::string, int64_t>* best = nullptr;
  for (const auto& kv : counts) {
    if (best == nullptr || kv.second > best->second ||
        (kv.second == best->second && kv.first < best->first)) {
      best = &kv;
    }
  }
  return best == nullptr ? "" : best->first;
}

}  // namespace

BigramBaseline BigramBaseline::Build(const std::vector<std::string>& texts) {
  absl::flat_hash_map<std::string, absl::flat_hash_map<std::string, int64_t>> follows;
  absl::flat_hash_map<std::string, int64_t> all;
  for (const std::string& text : texts) {
    const std::vector<absl::string_view> w = Words(text);
    for (size_t i = 1; i < w.size(); ++i) {
      std::string t = Target(w[i]);
      if (t.empty()) continue;
      ++follows[std::string(w[i - 1])][t];
      ++all[t];
    }
  }
  BigramBaseline b;
  for (const auto& kv : follows) b.best_[kv.first] = Best(kv.second);
  b.fallback_ = Best(all);
  return b;
}

std::string BigramBaseline::Predict(absl::string_view previous_word) const {
  auto it = best_.find(previous_word);
  return it == best_.end() ? fallback_ : it->second;
}

std::vector<bool> BigramBaseline::CorrectPerLine(const std::vector<std::string>& lines) const {
  std::vector<bool> correct;
  correct.reserve(lines.size());
  for (const std::string& line : lines) {
    const std::vector<absl::string_view> w = Words(line);
    correct.push_back(w.size() >= 2 && Predict(w[w.size() - 2]) == w.back());
  }
  return correct;
}

int64_t BigramBaseline::CountCorrect(const std::vector<std::string>& lines) const {
  const std::vector<bool> correct = CorrectPerLine(lines);
  return std::count(correct.begin(), correct.end(), true);
}

}  // namespace experiments
}  // namespace mt

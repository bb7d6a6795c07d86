#include "experiments/gpt2_zeroshot/heldout.h"

#include <cctype>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "data/gpt_dataset/gpt_dataset.h"
#include "data/indexed/indexed_dataset.h"
#include "experiments/common/report.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace experiments {
namespace {

bool IsAlnum(char c) { return absl::ascii_isalnum(static_cast<unsigned char>(c)); }
bool IsDigit(char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); }

// The words of `text`, split at runs of ASCII whitespace.
std::vector<std::string> Words(absl::string_view text) {
  return absl::StrSplit(text, absl::ByAnyChar(" \t\n\r\f\v"), absl::SkipEmpty());
}

// The middle of a word (its edges already peeled): @-@ / @,@ / @.@ markup inside.
std::string MarkUpInside(absl::string_view core) {
  std::string out;
  for (size_t i = 0; i < core.size(); ++i) {
    const char c = core[i];
    const bool inside = i > 0 && i + 1 < core.size();
    if (inside && c == '-' && IsAlnum(core[i - 1]) && IsAlnum(core[i + 1])) {
      absl::StrAppend(&out, " @-@ ");
    } else if (inside && (c == ',' || c == '.') && IsDigit(core[i - 1]) && IsDigit(core[i + 1])) {
      absl::StrAppend(&out, " @", std::string(1, c), "@ ");
    } else {
      out.push_back(c);
    }
  }
  return out;
}

// One word as its WikiText tokens.
std::vector<std::string> WordTokens(absl::string_view word) {
  constexpr absl::string_view kOpen = "([{\"", kClose = ".,;:!?\")]}";
  std::vector<std::string> lead, trail;
  while (word.size() > 1 && kOpen.find(word.front()) != absl::string_view::npos) {
    lead.emplace_back(1, word.front());
    word.remove_prefix(1);
  }
  while (word.size() > 1 && kClose.find(word.back()) != absl::string_view::npos) {
    // A run of dots ("wait...") stays on its word: " . . ." would not detokenise back.
    if (word.back() == '.' && word[word.size() - 2] == '.') break;
    trail.emplace_back(1, word.back());
    word.remove_suffix(1);
  }
  std::string possessive;
  if (word.size() > 2 && word[word.size() - 2] == '\'' &&
      (word.back() == 's' || word.back() == 'S')) {
    possessive = std::string(word.substr(word.size() - 2));
    word.remove_suffix(2);
  }
  std::vector<std::string> out = lead;
  out.push_back(MarkUpInside(word));
  if (!possessive.empty()) out.push_back(possessive);
  out.insert(out.end(), trail.rbegin(), trail.rend());
  return out;
}

}  // namespace

std::string ToWikiTextTokens(absl::string_view text) {
  std::vector<std::string> tokens;
  for (const std::string& w : Words(text)) {
    for (std::string& t : WordTokens(w)) tokens.push_back(std::move(t));
  }
  return absl::StrJoin(tokens, " ");
}

std::optional<std::string> ToLambadaText(absl::string_view text, int min_words) {
  std::vector<std::string> words = Words(text);
  if (words.empty() || static_cast<int>(words.size()) < min_words) return std::nullopt;
  std::string& last = words.back();
  while (!last.empty() && !IsAlnum(last.back())) last.pop_back();
  if (last.size() < 2) return std::nullopt;
  for (char c : last) {
    if (!absl::ascii_isalpha(static_cast<unsigned char>(c))) return std::nullopt;
  }
  return absl::StrJoin(words, " ");
}

std::optional<std::string> LambadaCopyPassage(absl::string_view text, int min_words,
                                              const std::function<bool(absl::string_view)>& fits) {
  const std::vector<std::string> words = Words(text);
  absl::flat_hash_set<std::string> seen;  // The edge-stripped words before position i.
  std::optional<std::string> best;
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    size_t end = w.size();
    while (end > 0 && absl::string_view("\"')]}").find(w[end - 1]) != absl::string_view::npos) {
      --end;
    }
    const bool sentence_end =
        i + 1 == words.size() ||
        (end > 0 && absl::string_view(".!?;:").find(w[end - 1]) != absl::string_view::npos);
    size_t b = 0, e = w.size();
    while (b < e && !IsAlnum(w[b])) ++b;
    while (e > b && !IsAlnum(w[e - 1])) --e;
    const std::string core = w.substr(b, e - b);
    if (sentence_end && static_cast<int>(i) + 1 >= min_words && seen.contains(core)) {
      std::vector<std::string> prefix(words.begin(), words.begin() + i + 1);
      std::optional<std::string> line = ToLambadaText(absl::StrJoin(prefix, " "), min_words);
      // ToLambadaText keeps a leading non-letter: the target must be `core` itself.
      if (line && absl::EndsWith(*line, " " + core) && fits(*line)) best = std::move(line);
    }
    seen.insert(core);
  }
  return best;
}

std::string WikiTextFile(const std::vector<std::string>& documents) {
  std::string out = " \n";
  for (const std::string& d : documents) {
    const std::string tokens = ToWikiTextTokens(d);
    if (!tokens.empty()) absl::StrAppend(&out, " ", tokens, " \n \n");
  }
  return out;
}

namespace {

// Documents [first, end) of `dataset` decoded with `gpt2`, its end-of-document id dropped.
absl::StatusOr<std::vector<std::string>> DecodeDocuments(const data::IndexedDataset& dataset,
                                                         int64_t first, int64_t end,
                                                         const data::Tokenizer& gpt2) {
  std::vector<std::string> texts;
  for (int64_t d = first; d < end; ++d) {
    std::vector<int32_t> ids;
    for (int64_t v : dataset.document(d).ToVector()) {
      if (v != gpt2.eod_id()) ids.push_back(static_cast<int32_t>(v));
    }
    ASSIGN_OR_RETURN(std::string text, gpt2.Decode(ids));
    texts.push_back(std::move(text));
  }
  return texts;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> DecodeSplit(const std::string& prefix,
                                                     const std::string& split, int which,
                                                     const data::Tokenizer& gpt2) {
  if (which < 0 || which > 2) {
    return absl::InvalidArgumentError(absl::StrCat("split index ", which, " is not 0, 1 or 2"));
  }
  ASSIGN_OR_RETURN(auto dataset, data::IndexedDataset::Open(prefix));
  ASSIGN_OR_RETURN(auto bounds, data::SplitDocuments(split, dataset->num_documents()));
  return DecodeDocuments(*dataset, bounds[which], bounds[which + 1], gpt2);
}

absl::StatusOr<HeldOutFiles> WriteHeldOut(const std::string& prefix, const std::string& split,
                                          int64_t max_documents, int64_t max_tokens,
                                          const data::Tokenizer& gpt2, const std::string& dir,
                                          bool copy_targets) {
  ASSIGN_OR_RETURN(auto dataset, data::IndexedDataset::Open(prefix));
  ASSIGN_OR_RETURN(auto bounds, data::SplitDocuments(split, dataset->num_documents()));
  if (bounds[3] <= bounds[2]) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the test split of ", prefix, " under --split=", split, " holds no documents"));
  }
  const int64_t documents = std::min<int64_t>(max_documents, bounds[3] - bounds[2]);
  ASSIGN_OR_RETURN(std::vector<std::string> texts,
                   DecodeDocuments(*dataset, bounds[2], bounds[2] + documents, gpt2));
  ASSIGN_OR_RETURN(HeldOutFiles files,
                   WriteHeldOutTexts(texts, max_tokens, gpt2, dir, copy_targets));
  files.first_document = bounds[2];
  return files;
}

absl::StatusOr<HeldOutFiles> WriteHeldOutTexts(const std::vector<std::string>& texts,
                                               int64_t max_tokens, const data::Tokenizer& gpt2,
                                               const std::string& dir, bool copy_targets) {
  HeldOutFiles files;
  files.documents = static_cast<int64_t>(texts.size());
  std::string jsonl;
  auto fits = [&](absl::string_view t) {
    return static_cast<int64_t>(gpt2.Encode(std::string(t)).size()) + 4 <= max_tokens;
  };
  for (const std::string& text : texts) {
    std::optional<std::string> line =
        copy_targets ? LambadaCopyPassage(text, 10, fits) : ToLambadaText(text, 10);
    if (!line || (!copy_targets && !fits(text))) continue;
    absl::StrAppend(&jsonl, nlohmann::json({{"text", *line}}).dump(), "\n");
    files.lambada_lines.push_back(std::move(*line));
    ++files.lambada_examples;
  }
  files.wikitext = absl::StrCat(dir, "/heldout.wiki.tokens");
  files.lambada = absl::StrCat(dir, "/heldout_lambada.jsonl");
  RETURN_IF_ERROR(WriteFile(files.wikitext, WikiTextFile(texts)));
  RETURN_IF_ERROR(WriteFile(files.lambada, jsonl));
  return files;
}

}  // namespace experiments
}  // namespace mt

#include "eval/lambada.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "eval/python_text.h"
#include "eval/text_file.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace eval {
namespace {

// The "text" of one jsonl line; `where` is the "FILE:LINE: " prefix of its errors.
absl::StatusOr<std::string> ParseLine(absl::string_view line, absl::string_view where) {
  if (PyStrip(line).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, "empty line (expected {\"text\": ...})"));
  }
  const nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), /*cb=*/nullptr,
                                                 /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(where, "not valid JSON"));
  if (!j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, "not a JSON object"));
  }
  const auto it = j.find("text");
  if (it == j.end()) return absl::InvalidArgumentError(absl::StrCat(where, "no key 'text'"));
  if (!it->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(where, "the value of 'text' is not a string"));
  }
  std::string text = it->get<std::string>();
  if (PyStrip(text).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, "the text is empty (no words)"));
  }
  return text;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ReadLambadaTexts(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string contents, ReadTextFile(path));
  absl::string_view rest = contents;
  if (!rest.empty() && rest.back() == '\n') rest.remove_suffix(1);  // no line after the last "\n"
  if (rest.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": no examples (expected one {\"text\": ...} object per line)"));
  }
  std::vector<std::string> texts;
  int64_t line_number = 0;
  for (absl::string_view line : absl::StrSplit(rest, '\n')) {
    ++line_number;
    ASSIGN_OR_RETURN(std::string text, ParseLine(line, absl::StrCat(path, ":", line_number, ": ")));
    texts.push_back(std::move(text));
  }
  return texts;
}

absl::StatusOr<LambadaExample> MakeLambadaExample(const data::Tokenizer& tokenizer,
                                                  absl::string_view text, LambadaMode mode) {
  LambadaExample e;
  if (mode == LambadaMode::kLastToken) {
    e.context = tokenizer.Encode(text);
    if (e.context.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat("LAMBADA: the text tokenizes to ",
                                                     e.context.size(), " ids; need 2 or more"));
    }
    e.target.push_back(e.context.back());
    e.context.pop_back();
    return e;
  }
  const std::vector<absl::string_view> words = PySplit(text);
  if (words.empty()) return absl::InvalidArgumentError("LAMBADA: the text has no words");
  const absl::string_view word = words.back();
  const absl::string_view before = PyStrip(text.substr(0, text.rfind(word)));
  if (before.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("LAMBADA: the text is the single word '", word, "'; there is no context"));
  }
  e.context = tokenizer.Encode(before);
  e.target = tokenizer.Encode(absl::StrCat(" ", word));
  return e;
}

absl::StatusOr<std::vector<LambadaExample>> LoadLambada(const std::string& path,
                                                        const data::Tokenizer& tokenizer,
                                                        LambadaMode mode) {
  ASSIGN_OR_RETURN(const std::vector<std::string> texts, ReadLambadaTexts(path));
  std::vector<LambadaExample> examples;
  examples.reserve(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    absl::StatusOr<LambadaExample> e = MakeLambadaExample(tokenizer, texts[i], mode);
    if (!e.ok()) {
      return absl::Status(e.status().code(),
                          absl::StrCat(path, ":", i + 1, ": ", e.status().message()));
    }
    examples.push_back(*std::move(e));
  }
  return examples;
}

absl::StatusOr<LambadaSequence> LayoutLambada(const LambadaExample& example, int64_t seq_length,
                                              int32_t pad_id) {
  const int64_t C = example.context.size();
  const int64_t K = example.target.size();
  if (seq_length < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("LAMBADA layout: seq_length must be >= 1, got ", seq_length));
  }
  if (C < 1 || K < 1 || C + K > seq_length + 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("LAMBADA layout: context (", C, " ids) + target (", K,
                     " ids) must be 2 to seq_length + 1 = ", seq_length + 1, " ids"));
  }
  std::vector<int32_t> ids = example.context;
  ids.insert(ids.end(), example.target.begin(), example.target.end());
  ids.resize(seq_length + 1, pad_id);
  LambadaSequence seq;
  seq.inputs.assign(ids.begin(), ids.end() - 1);
  seq.targets.assign(ids.begin() + 1, ids.end());
  seq.scored.assign(seq_length, 0);
  for (int64_t j = C - 1; j < C + K - 1; ++j) seq.scored[j] = 1;
  return seq;
}

}  // namespace eval
}  // namespace mt

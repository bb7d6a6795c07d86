#include "data/bert_dataset/bert_vocab.h"

#include <algorithm>
#include <array>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace mt {
namespace data {

absl::StatusOr<BertVocab> BertVocab::FromTokens(const std::vector<std::string>& tokens) {
  BertVocab v;
  v.vocab_size = static_cast<int32_t>(tokens.size());
  v.is_continuation.resize(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    const int32_t id = static_cast<int32_t>(i);
    v.is_continuation[i] = absl::StartsWith(t, "##") ? 1 : 0;
    if (t == "[CLS]") v.cls = id;
    if (t == "[SEP]") v.sep = id;
    if (t == "[PAD]") v.pad = id;
    if (t == "[MASK]") v.mask = id;
  }
  const absl::Status status = v.Validate();
  if (!status.ok()) return status;
  return v;
}

absl::StatusOr<BertVocab> BertVocab::FromWordPiece(const WordPiece& wordpiece) {
  std::vector<std::string> tokens(wordpiece.vocab_size());
  for (int32_t i = 0; i < wordpiece.vocab_size(); ++i) tokens[i] = wordpiece.token(i);
  return FromTokens(tokens);
}

absl::Status BertVocab::Validate() const {
  if (static_cast<int64_t>(is_continuation.size()) != vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("BertVocab: is_continuation has ",
                                                   is_continuation.size(), " entries, vocab_size ",
                                                   vocab_size));
  }
  const std::array<std::pair<const char*, int32_t>, 4> special = {
      {{"[CLS]", cls}, {"[SEP]", sep}, {"[PAD]", pad}, {"[MASK]", mask}}};
  for (const auto& [name, id] : special) {
    if (id < 0 || id >= vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("BertVocab: ", name, " id ", id, " is not in [0, ", vocab_size, ")"));
    }
  }
  for (size_t i = 0; i < special.size(); ++i) {
    for (size_t j = i + 1; j < special.size(); ++j) {
      if (special[i].second == special[j].second) {
        return absl::InvalidArgumentError(absl::StrCat("BertVocab: ", special[i].first, " and ",
                                                       special[j].first, " share id ",
                                                       special[i].second));
      }
    }
  }
  if (vocab_size < 5) {
    return absl::InvalidArgumentError("BertVocab: no ordinary tokens besides the special ones");
  }
  return absl::OkStatus();
}

int32_t BertVocab::OrdinaryToken(int32_t r) const {
  CHECK(r >= 0 && r < num_ordinary()) << r;
  std::array<int32_t, 4> skip = {cls, sep, pad, mask};
  std::sort(skip.begin(), skip.end());
  int32_t id = r;
  for (int32_t s : skip) id += id >= s ? 1 : 0;
  return id;
}

}  // namespace data
}  // namespace mt

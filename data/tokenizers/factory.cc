#include "data/tokenizers/factory.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/tokenizers/gpt2_bpe.h"
#include "data/tokenizers/wordpiece.h"

namespace mt::data {

std::vector<std::string> TokenizerNames() { return {"gpt2", "bert"}; }

absl::StatusOr<std::unique_ptr<Tokenizer>> CreateTokenizer(absl::string_view name) {
  if (name == "gpt2") {
    absl::StatusOr<std::unique_ptr<Gpt2Bpe>> t = Gpt2Bpe::LoadDefault();
    if (!t.ok()) return t.status();
    return std::unique_ptr<Tokenizer>(std::move(t).value());
  }
  if (name == "bert") {
    absl::StatusOr<std::unique_ptr<WordPiece>> t = WordPiece::LoadDefault();
    if (!t.ok()) return t.status();
    return std::unique_ptr<Tokenizer>(std::move(t).value());
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown tokenizer '", name, "'; known: ", absl::StrJoin(TokenizerNames(), ", ")));
}

}  // namespace mt::data

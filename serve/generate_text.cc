#include "serve/generate_text.h"

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

namespace mt {
namespace serve {

absl::StatusOr<std::vector<std::vector<int32_t>>> TokenizePrompts(
    const data::Tokenizer& tokenizer, const std::vector<std::string>& texts) {
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int32_t> ids = tokenizer.Encode(texts[i]);
    if (ids.empty()) {
      if (tokenizer.eod_id() == data::kNoToken) {
        return absl::InvalidArgumentError(
            absl::StrCat("prompt ", i, " is empty and the ", tokenizer.name(),
                         " tokenizer has no end-of-document token to start from"));
      }
      ids.push_back(tokenizer.eod_id());
    }
    prompts.push_back(std::move(ids));
  }
  return prompts;
}

absl::StatusOr<std::string> CompletionText(const data::Tokenizer& tokenizer, const Generation& g) {
  absl::Span<const int32_t> ids = absl::MakeConstSpan(g.tokens).subspan(g.prompt_length);
  if (g.finish == FinishReason::kEod && !ids.empty()) ids.remove_suffix(1);
  return tokenizer.Decode(ids);
}

const char* FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kEod:
      return "eod";
    case FinishReason::kStop:
      return "stop";
  }
  return "?";
}

}  // namespace serve
}  // namespace mt

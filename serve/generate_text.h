// Text in and out of serve/generate.h: prompts tokenized (an empty prompt starts from the
// end-of-document token, as Megatron's add_BOS), generations decoded.
#ifndef MT_SERVE_GENERATE_TEXT_H_
#define MT_SERVE_GENERATE_TEXT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/tokenizers/tokenizer.h"
#include "serve/generate.h"

namespace mt {
namespace serve {

// The ids of each text; {eod} for an empty one (the tokenizer must have an end-of-document token
// then: InvalidArgument otherwise).
absl::StatusOr<std::vector<std::vector<int32_t>>> TokenizePrompts(
    const data::Tokenizer& tokenizer, const std::vector<std::string>& texts);

// The text of g's generated tokens, without the end-of-document token that ended it.
absl::StatusOr<std::string> CompletionText(const data::Tokenizer& tokenizer, const Generation& g);

// "length", "eod" or "stop".
const char* FinishReasonName(FinishReason reason);

}  // namespace serve
}  // namespace mt

#endif  // MT_SERVE_GENERATE_TEXT_H_

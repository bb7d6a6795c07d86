// The generation server's HTTP API (//jobs/serve:serve): request bodies parsed and checked into
// GenerationRequests, and the JSON of responses and errors. Two APIs:
//
//   PUT /api (Megatron-LM's text generation server)
//     {"prompts": [str, ...],            required, 1 .. max_prompts
//      "tokens_to_generate": int,        default 64, >= 0 (0 needs "logprobs": true)
//      "logprobs": bool,                 default false
//      "temperature": number,            default 1.0, in (0, 100]
//      "top_k": int,                     default 0, in [0, 1000]
//      "top_p": number,                  default 0, in [0, 1]; not with top_k > 0
//      "random_seed": int,               default: the server picks one, >= 0
//      "add_BOS": bool}                  default false: start every prompt with <|endoftext|>
//   -> {"text": [prompt + continuation, ...], "segments": [[each token's text, ...], ...],
//       "logprobs": [[log p of every token after the first, ...], ...] or null}
//
//   POST /v1/completions (OpenAI's completions)
//     {"prompt": str or [str, ...],      required
//      "max_tokens": int,                default 16, >= 0
//      "temperature": number,            default 1.0, in [0, 2]; 0 is greedy
//      "top_p": number,                  default 1 (no nucleus), in (0, 1]
//      "seed": int,                      default: the server picks one, >= 0
//      "stop": str or [str, ...],        up to 4 non-empty strings that end a completion
//      "logprobs": int,                  default null; 0 .. 5: each generated token's
//                                        log-probability (the alternatives are not listed:
//                                        top_logprobs is null)
//      "stream": bool,                   default false; true: server-sent events
//                                        (serve/serve_stream.h)
//      "n": 1}                           only this value; other keys (e.g. "model") are ignored
//   -> {"id", "object": "text_completion", "created", "model",
//       "choices": [{"index", "text", "finish_reason": "stop" | "length",
//                    "logprobs": null or {"tokens", "token_logprobs", "top_logprobs": null,
//                                         "text_offset"}}],
//       "usage": {"prompt_tokens", "completion_tokens", "total_tokens"}}
//
//   GET /v1/models -> {"object": "list", "data": [{"id": model, "object": "model", "created",
//                      "owned_by": "megatron-cpp"}]}
//
// Sampling is Megatron's (serve/sampling.h): top_k == 1 or temperature 0 (completions) is greedy.
// A generation ends at <|endoftext|> (not part of a completion's text, but of Megatron's "text"
// and "segments", as Megatron reports it), at a stop string (the text ends before it), or after
// the token budget. An empty prompt starts from <|endoftext|>.
//
// Errors are InvalidArgument statuses naming the field (FieldOf), answered with HTTP 400 and
// {"error": {"message", "type": "invalid_request_error", "param": field or null}}.
// Thread-safe: pure functions (the tokenizer's const methods are thread-safe).
#ifndef MT_SERVE_SERVE_API_H_
#define MT_SERVE_SERVE_API_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/tokenizers/tokenizer.h"
#include "serve/generate.h"

namespace mt {
namespace serve {

enum class Api { kMegatron, kCompletions };

struct ServeLimits {
  int64_t max_prompts = 128;  // Prompts per request (Megatron's server: 128).
  // Positions a request may ask for: the sum over its prompts of (prompt tokens + tokens to
  // generate).
  int64_t max_tokens_per_request = 8192;
  int64_t max_positions = 1024;  // The model's max_position_embeddings.
};

// A checked request: what every rank generates from.
struct GenerationRequest {
  Api api = Api::kMegatron;
  std::vector<std::vector<int32_t>> prompts;  // Token ids, each >= 1 token.
  GenerateConfig config;                      // With eod and the seed set.
  std::vector<std::string> stop;              // Completions' stop strings.
  bool stream = false;                        // Completions: server-sent events.
};

// Parses and checks `body` for `api`, tokenizing the prompts. `seed` (its low 63 bits) is used
// when the request gives none. InvalidArgument naming the field (FieldOf): malformed JSON or not an
// object ("body"), a missing field, a value of the wrong type, out of range, over-long prompts (a
// prompt's tokens plus the tokens to generate beyond max_positions) or a request beyond
// max_tokens_per_request.
absl::StatusOr<GenerationRequest> ParseRequest(Api api, absl::string_view body,
                                               const data::Tokenizer& tokenizer,
                                               const ServeLimits& limits, uint64_t seed);

// The request field an error names ("" for none).
std::string FieldOf(const absl::Status& status);

// Ends a sequence once its generated text contains one of request.stop (null without stops).
StopCondition StopStrings(const GenerationRequest& request, const data::Tokenizer& tokenizer);

// The response body of `request`'s generations. `model` and `id` name the completion (OpenAI's
// "model" and "id": "cmpl-<id>"); `created` is its Unix time.
absl::StatusOr<std::string> ResponseJson(const GenerationRequest& request,
                                         const std::vector<Generation>& generations,
                                         const data::Tokenizer& tokenizer, const std::string& model,
                                         int64_t id, int64_t created);

// GET /v1/models's body for the one model served.
std::string ModelsJson(const std::string& model, int64_t created);

// The HTTP status of an error: 400 for InvalidArgument, 503 for Unavailable, 500 otherwise.
int HttpStatus(const absl::Status& status);
// {"error": {"message": ..., "type": ..., "param": field or null}}.
std::string ErrorJson(const absl::Status& status);

// The request as text for the other ranks, and back (InvalidArgument for text it did not write).
std::string SerializeRequest(const GenerationRequest& request);
absl::StatusOr<GenerationRequest> DeserializeRequest(absl::string_view text);

}  // namespace serve
}  // namespace mt

#endif  // MT_SERVE_SERVE_API_H_

// OpenAI's streamed completions ("stream": true on POST /v1/completions): server-sent events,
//
//   data: {"id": "cmpl-<id>", "object": "text_completion", "created", "model",
//          "choices": [{"index", "text", "logprobs", "finish_reason": null}]}\n\n
//
// one event per generated token (its text, and with "logprobs" its log-probability), then one per
// choice with its finish_reason ("stop" or "length") and whatever text was held back, then
// "data: [DONE]\n\n". An error after the stream started is one event {"error": {...}} before
// [DONE]. The texts of a choice's events add up to the text the same request gets without
// streaming: a token's text is held back while it ends inside a UTF-8 character or might begin a
// stop string, and a stop string found ends the text before it.
//
// Not thread-safe: one handler thread drives a stream.
#ifndef MT_SERVE_SERVE_STREAM_H_
#define MT_SERVE_SERVE_STREAM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/tokenizers/tokenizer.h"
#include "serve/batch_engine.h"
#include "serve/generate.h"
#include "serve/serve_api.h"

namespace mt {
namespace serve {

class CompletionStream {
 public:
  // `request` and `tokenizer` must outlive the stream.
  CompletionStream(const GenerationRequest& request, const data::Tokenizer& tokenizer,
                   std::string model, int64_t id, int64_t created);

  // The event of one generated token (of choice t.index); its text may be empty (held back).
  absl::StatusOr<std::string> Token(const TokenEvent& t);
  // The closing events: each choice's rest and finish_reason, then [DONE].
  absl::StatusOr<std::string> Finish(const std::vector<Generation>& generations);
  // An error event, then [DONE].
  static std::string Error(const absl::Status& status);

 private:
  struct Choice {
    std::vector<int32_t> generated;
    size_t sent = 0;  // Bytes of text sent.
  };
  std::string Event(int64_t index, const std::string& text, const char* finish,
                    const TokenEvent* token) const;
  // The text of `generated` (without <|endoftext|>), cut before a stop string; *stopped: found.
  absl::StatusOr<std::string> Text(const std::vector<int32_t>& generated, bool* stopped) const;

  const GenerationRequest& request_;
  const data::Tokenizer& tokenizer_;
  const std::string model_;
  const int64_t id_, created_;
  size_t hold_ = 0;  // Longest stop string - 1.
  std::vector<Choice> choices_;
};

}  // namespace serve
}  // namespace mt

#endif  // MT_SERVE_SERVE_STREAM_H_

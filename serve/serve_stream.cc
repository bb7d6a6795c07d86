#include "serve/serve_stream.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace serve {

namespace {

using Json = nlohmann::json;

std::string Data(const Json& j) {
  return absl::StrCat("data: ", j.dump(-1, ' ', false, Json::error_handler_t::replace), "\n\n");
}

constexpr char kDone[] = "data: [DONE]\n\n";

// The end of the longest prefix of s[0, end) that does not stop inside a UTF-8 character.
size_t Utf8Boundary(const std::string& s, size_t end) {
  size_t i = end;
  // Back over continuation bytes to the lead byte of the last character.
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  if (i == 0) return end;
  const unsigned char lead = static_cast<unsigned char>(s[i - 1]);
  const size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  return end - (i - 1) >= need ? end : i - 1;
}

}  // namespace

CompletionStream::CompletionStream(const GenerationRequest& request,
                                   const data::Tokenizer& tokenizer, std::string model, int64_t id,
                                   int64_t created)
    : request_(request),
      tokenizer_(tokenizer),
      model_(std::move(model)),
      id_(id),
      created_(created),
      choices_(request.prompts.size()) {
  for (const std::string& s : request.stop) hold_ = std::max(hold_, s.size() - 1);
}

std::string CompletionStream::Event(int64_t index, const std::string& text, const char* finish,
                                    const TokenEvent* token) const {
  Json logprobs = nullptr;
  if (token != nullptr && request_.config.logprobs) {
    const absl::StatusOr<std::string> piece = tokenizer_.Decode({token->token});
    logprobs = Json{{"tokens", {piece.ok() ? *piece : std::string()}},
                    {"token_logprobs", {token->logprob}},
                    {"top_logprobs", nullptr}};
  }
  return Data(Json{{"id", absl::StrCat("cmpl-", id_)},
                   {"object", "text_completion"},
                   {"created", created_},
                   {"model", model_},
                   {"choices",
                    {{{"index", index},
                      {"text", text},
                      {"logprobs", std::move(logprobs)},
                      {"finish_reason", finish == nullptr ? Json(nullptr) : Json(finish)}}}}});
}

absl::StatusOr<std::string> CompletionStream::Text(const std::vector<int32_t>& generated,
                                                   bool* stopped) const {
  absl::Span<const int32_t> ids(generated);
  if (!ids.empty() && ids.back() == request_.config.eod) ids.remove_suffix(1);
  ASSIGN_OR_RETURN(std::string text, tokenizer_.Decode(ids));
  size_t cut = std::string::npos;
  for (const std::string& s : request_.stop) cut = std::min(cut, text.find(s));
  *stopped = cut != std::string::npos;
  if (*stopped) text.resize(cut);
  return text;
}

absl::StatusOr<std::string> CompletionStream::Token(const TokenEvent& t) {
  if (t.index < 0 || t.index >= static_cast<int64_t>(choices_.size())) {
    return absl::InternalError(
        absl::StrCat("a token of choice ", t.index, " of a stream of ", choices_.size()));
  }
  Choice& c = choices_[t.index];
  c.generated.push_back(t.token);
  bool stopped = false;
  ASSIGN_OR_RETURN(const std::string text, Text(c.generated, &stopped));
  // While running, the last hold_ bytes may begin a stop string.
  size_t end = stopped ? text.size() : text.size() - std::min(text.size(), hold_);
  end = std::max(c.sent, Utf8Boundary(text, end));
  std::string piece = text.substr(c.sent, end - c.sent);
  c.sent = end;
  return Event(t.index, piece, nullptr, &t);
}

absl::StatusOr<std::string> CompletionStream::Finish(const std::vector<Generation>& generations) {
  std::string out;
  for (size_t i = 0; i < generations.size() && i < choices_.size(); ++i) {
    const Generation& g = generations[i];
    std::vector<int32_t> generated(g.tokens.begin() + g.prompt_length, g.tokens.end());
    bool stopped = false;
    ASSIGN_OR_RETURN(const std::string text, Text(generated, &stopped));
    const size_t sent = std::min(choices_[i].sent, text.size());
    const bool stop = stopped || g.finish != FinishReason::kLength;
    absl::StrAppend(
        &out, Event(static_cast<int64_t>(i), text.substr(sent), stop ? "stop" : "length", nullptr));
  }
  return absl::StrCat(out, kDone);
}

std::string CompletionStream::Error(const absl::Status& status) {
  return absl::StrCat("data: ", ErrorJson(status), "\n\n", kDone);
}

}  // namespace serve
}  // namespace mt

#include "serve/serve_api.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "nlohmann/json.hpp"
#include "serve/generate_text.h"

namespace mt {
namespace serve {

namespace {

using Json = nlohmann::json;

constexpr char kFieldPayload[] = "mt.serve.field";

absl::Status FieldError(absl::string_view field, absl::string_view message) {
  absl::Status s = absl::InvalidArgumentError(absl::StrCat(field, ": ", message));
  s.SetPayload(kFieldPayload, absl::Cord(field));
  return s;
}

// The value at `key`, or nullopt when absent or null (then the default applies).
std::optional<Json> Get(const Json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return std::nullopt;
  return *it;
}

absl::StatusOr<int64_t> Int(const Json& o, const char* key, int64_t fallback, int64_t lo,
                            int64_t hi) {
  const std::optional<Json> v = Get(o, key);
  if (!v) return fallback;
  if (!v->is_number_integer()) return FieldError(key, "must be an integer");
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return FieldError(key, absl::StrCat("must be in [", lo, ", ", hi, "]"));
  }
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) return FieldError(key, absl::StrCat("must be in [", lo, ", ", hi, "]"));
  return x;
}

// A number in [lo, hi] (or (lo, hi] when open_below).
absl::StatusOr<double> Number(const Json& o, const char* key, double fallback, double lo, double hi,
                              bool open_below) {
  const std::optional<Json> v = Get(o, key);
  if (!v) return fallback;
  if (!v->is_number()) return FieldError(key, "must be a number");
  const double x = v->get<double>();
  if (!(open_below ? x > lo : x >= lo) || !(x <= hi)) {
    return FieldError(key, absl::StrCat("must be in ", open_below ? "(" : "[", lo, ", ", hi, "]"));
  }
  return x;
}

absl::StatusOr<bool> Bool(const Json& o, const char* key, bool fallback) {
  const std::optional<Json> v = Get(o, key);
  if (!v) return fallback;
  if (!v->is_boolean()) return FieldError(key, "must be true or false");
  return v->get<bool>();
}

// A list of strings (or one string, when `single` allows it), of 1 .. max entries.
absl::StatusOr<std::vector<std::string>> Strings(const Json& o, const char* key, bool single,
                                                 int64_t max) {
  const std::optional<Json> v = Get(o, key);
  if (!v) return FieldError(key, "is required");
  if (single && v->is_string()) return std::vector<std::string>{v->get<std::string>()};
  const char* what = single ? "must be a string or a list of strings" : "must be a list of strings";
  if (!v->is_array()) return FieldError(key, what);
  if (v->empty() || static_cast<int64_t>(v->size()) > max) {
    return FieldError(key, absl::StrCat("must hold 1 to ", max, " entries, not ", v->size()));
  }
  std::vector<std::string> out;
  for (const Json& s : *v) {
    if (!s.is_string()) return FieldError(key, what);
    out.push_back(s.get<std::string>());
  }
  return out;
}

// The Megatron fields into r (the prompts' texts into *texts).
absl::Status ParseMegatron(const Json& o, const ServeLimits& limits, uint64_t seed,
                           std::vector<std::string>* texts, bool* add_bos, GenerationRequest* r) {
  GenerateConfig& c = r->config;
  SamplingConfig& s = c.sampling;
  ASSIGN_OR_RETURN(*texts, Strings(o, "prompts", /*single=*/false, limits.max_prompts));
  ASSIGN_OR_RETURN(c.tokens_to_generate, Int(o, "tokens_to_generate", 64, 0, limits.max_positions));
  ASSIGN_OR_RETURN(c.logprobs, Bool(o, "logprobs", false));
  ASSIGN_OR_RETURN(s.temperature, Number(o, "temperature", 1.0, 0.0, 100.0, /*open_below=*/true));
  ASSIGN_OR_RETURN(const int64_t top_k, Int(o, "top_k", 0, 0, 1000));
  s.top_k = static_cast<int>(top_k);
  ASSIGN_OR_RETURN(s.top_p, Number(o, "top_p", 0.0, 0.0, 1.0, /*open_below=*/false));
  if (s.top_k > 0 && s.top_p > 0) {
    return FieldError("top_p", "cannot be set together with top_k (pick top-k or top-p sampling)");
  }
  ASSIGN_OR_RETURN(const int64_t random_seed,
                   Int(o, "random_seed", static_cast<int64_t>(seed & INT64_MAX), 0, INT64_MAX));
  s.seed = static_cast<uint64_t>(random_seed);
  ASSIGN_OR_RETURN(*add_bos, Bool(o, "add_BOS", false));
  if (c.tokens_to_generate == 0 && !c.logprobs) {
    return FieldError("tokens_to_generate", "0 generates nothing: set \"logprobs\": true");
  }
  return absl::OkStatus();
}

// The OpenAI completion fields into r.
absl::Status ParseCompletion(const Json& o, const ServeLimits& limits, uint64_t seed,
                             std::vector<std::string>* texts, GenerationRequest* r) {
  GenerateConfig& c = r->config;
  SamplingConfig& s = c.sampling;
  ASSIGN_OR_RETURN(*texts, Strings(o, "prompt", /*single=*/true, limits.max_prompts));
  ASSIGN_OR_RETURN(c.tokens_to_generate, Int(o, "max_tokens", 16, 0, limits.max_positions));
  ASSIGN_OR_RETURN(const double temperature,
                   Number(o, "temperature", 1.0, 0.0, 2.0, /*open_below=*/false));
  s.greedy = temperature == 0;
  s.temperature = s.greedy ? 1.0 : temperature;
  ASSIGN_OR_RETURN(const double top_p, Number(o, "top_p", 1.0, 0.0, 1.0, /*open_below=*/true));
  s.top_p = top_p < 1 ? top_p : 0.0;  // 1 keeps every token: no nucleus.
  ASSIGN_OR_RETURN(const int64_t seed_value,
                   Int(o, "seed", static_cast<int64_t>(seed & INT64_MAX), 0, INT64_MAX));
  s.seed = static_cast<uint64_t>(seed_value);
  if (Get(o, "stop")) {
    ASSIGN_OR_RETURN(r->stop, Strings(o, "stop", /*single=*/true, 4));
    for (const std::string& stop : r->stop) {
      if (stop.empty()) return FieldError("stop", "stop strings must not be empty");
    }
  }
  ASSIGN_OR_RETURN(const int64_t n, Int(o, "n", 1, 1, 1));
  (void)n;
  ASSIGN_OR_RETURN(r->stream, Bool(o, "stream", false));
  if (Get(o, "logprobs")) {
    ASSIGN_OR_RETURN(const int64_t logprobs, Int(o, "logprobs", 0, 0, 5));
    (void)logprobs;  // The alternatives are not listed (top_logprobs is null).
    c.logprobs = true;
  }
  return absl::OkStatus();
}

// Over-long prompts and the request's token budget.
absl::Status CheckLengths(const GenerationRequest& r, const ServeLimits& limits) {
  const char* prompts = r.api == Api::kMegatron ? "prompts" : "prompt";
  const char* tokens = r.api == Api::kMegatron ? "tokens_to_generate" : "max_tokens";
  const int64_t n = r.config.tokens_to_generate;
  int64_t total = 0;
  for (size_t i = 0; i < r.prompts.size(); ++i) {
    const int64_t L = static_cast<int64_t>(r.prompts[i].size());
    if (L + n > limits.max_positions) {
      return FieldError(
          prompts, absl::StrCat("prompt ", i, " has ", L, " tokens; with ", tokens, " ", n,
                                " that exceeds the model's ", limits.max_positions, " positions"));
    }
    total += L + n;
  }
  if (total > limits.max_tokens_per_request) {
    const bool generation =
        n * static_cast<int64_t>(r.prompts.size()) > limits.max_tokens_per_request;
    return FieldError(generation ? tokens : prompts,
                      absl::StrCat("the request needs ", total, " positions (prompt tokens plus ",
                                   tokens, " per prompt); this server allows ",
                                   limits.max_tokens_per_request, " per request"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<GenerationRequest> ParseRequest(Api api, absl::string_view body,
                                               const data::Tokenizer& tokenizer,
                                               const ServeLimits& limits, uint64_t seed) {
  const Json o = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (o.is_discarded()) return FieldError("body", "malformed JSON");
  if (!o.is_object()) return FieldError("body", "must be a JSON object");
  GenerationRequest r;
  r.api = api;
  std::vector<std::string> texts;
  bool add_bos = false;
  if (api == Api::kMegatron) {
    RETURN_IF_ERROR(ParseMegatron(o, limits, seed, &texts, &add_bos, &r));
  } else {
    RETURN_IF_ERROR(ParseCompletion(o, limits, seed, &texts, &r));
  }
  ASSIGN_OR_RETURN(r.prompts, TokenizePrompts(tokenizer, texts));
  r.config.eod = tokenizer.eod_id();
  if (add_bos) {
    for (auto& p : r.prompts) p.insert(p.begin(), tokenizer.eod_id());
  }
  RETURN_IF_ERROR(CheckLengths(r, limits));
  return r;
}

std::string FieldOf(const absl::Status& status) {
  const auto field = status.GetPayload(kFieldPayload);  // absl::optional<absl::Cord>
  return field ? std::string(*field) : std::string();
}

StopCondition StopStrings(const GenerationRequest& request, const data::Tokenizer& tokenizer) {
  if (request.stop.empty()) return nullptr;
  return [&request, &tokenizer](int64_t, absl::Span<const int32_t> generated) {
    const absl::StatusOr<std::string> text = tokenizer.Decode(generated);
    if (!text.ok()) return false;
    return std::any_of(request.stop.begin(), request.stop.end(),
                       [&](const std::string& s) { return text->find(s) != std::string::npos; });
  };
}

namespace {

absl::StatusOr<Json> MegatronJson(const GenerationRequest& request,
                                  const std::vector<Generation>& generations,
                                  const data::Tokenizer& tokenizer) {
  Json text = Json::array(), segments = Json::array(), logprobs = Json::array();
  for (const Generation& g : generations) {
    ASSIGN_OR_RETURN(std::string all, tokenizer.Decode(g.tokens));
    text.push_back(std::move(all));
    Json pieces = Json::array();
    for (int32_t t : g.tokens) {
      ASSIGN_OR_RETURN(std::string piece, tokenizer.Decode({t}));
      pieces.push_back(std::move(piece));
    }
    segments.push_back(std::move(pieces));
    logprobs.push_back(g.logprobs);
  }
  return Json{{"text", std::move(text)},
              {"segments", std::move(segments)},
              {"logprobs", request.config.logprobs ? std::move(logprobs) : Json(nullptr)}};
}

// OpenAI's logprobs object for g's generated tokens (their log-probabilities are the last
// generated() entries of g.logprobs; the ones before score the prompt).
absl::StatusOr<Json> CompletionLogprobs(const Generation& g, const data::Tokenizer& tokenizer) {
  Json tokens = Json::array(), values = Json::array(), offsets = Json::array();
  const int64_t n = g.generated();
  if (static_cast<int64_t>(g.logprobs.size()) < n) {
    return absl::InternalError("a generation without its log-probabilities");
  }
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(std::string piece, tokenizer.Decode({g.tokens[g.prompt_length + i]}));
    offsets.push_back(offset);
    offset += static_cast<int64_t>(piece.size());
    tokens.push_back(std::move(piece));
    values.push_back(g.logprobs[g.logprobs.size() - n + i]);
  }
  return Json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(values)},
              {"top_logprobs", nullptr},
              {"text_offset", std::move(offsets)}};
}

absl::StatusOr<Json> CompletionJson(const GenerationRequest& request,
                                    const std::vector<Generation>& generations,
                                    const data::Tokenizer& tokenizer) {
  Json choices = Json::array();
  int64_t prompt_tokens = 0, completion_tokens = 0;
  for (size_t i = 0; i < generations.size(); ++i) {
    const Generation& g = generations[i];
    ASSIGN_OR_RETURN(std::string text, CompletionText(tokenizer, g));
    size_t cut = std::string::npos;
    for (const std::string& s : request.stop) cut = std::min(cut, text.find(s));
    if (cut != std::string::npos) text.resize(cut);
    const bool stopped = g.finish != FinishReason::kLength || cut != std::string::npos;
    Json logprobs = nullptr;
    if (request.config.logprobs) {
      ASSIGN_OR_RETURN(logprobs, CompletionLogprobs(g, tokenizer));
    }
    choices.push_back({{"index", i},
                       {"text", std::move(text)},
                       {"finish_reason", stopped ? "stop" : "length"},
                       {"logprobs", std::move(logprobs)}});
    prompt_tokens += g.prompt_length;
    completion_tokens += g.generated();
  }
  return Json{{"object", "text_completion"},
              {"choices", std::move(choices)},
              {"usage",
               {{"prompt_tokens", prompt_tokens},
                {"completion_tokens", completion_tokens},
                {"total_tokens", prompt_tokens + completion_tokens}}}};
}

std::string Dump(const Json& j) {
  // Token texts may split a UTF-8 sequence: such bytes become U+FFFD rather than an exception.
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace

absl::StatusOr<std::string> ResponseJson(const GenerationRequest& request,
                                         const std::vector<Generation>& generations,
                                         const data::Tokenizer& tokenizer, const std::string& model,
                                         int64_t id, int64_t created) {
  if (request.api == Api::kMegatron) {
    ASSIGN_OR_RETURN(Json j, MegatronJson(request, generations, tokenizer));
    return Dump(j);
  }
  ASSIGN_OR_RETURN(Json j, CompletionJson(request, generations, tokenizer));
  j["id"] = absl::StrCat("cmpl-", id);
  j["created"] = created;
  j["model"] = model;
  return Dump(j);
}

std::string ModelsJson(const std::string& model, int64_t created) {
  Json entry = {
      {"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "megatron-cpp"}};
  return Dump(Json{{"object", "list"}, {"data", Json::array({std::move(entry)})}});
}

int HttpStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

std::string ErrorJson(const absl::Status& status) {
  const std::string field = FieldOf(status);
  const char* type = HttpStatus(status) == 400 ? "invalid_request_error" : "server_error";
  return Dump(Json{{"error",
                    {{"message", std::string(status.message())},
                     {"type", type},
                     {"param", field.empty() ? Json(nullptr) : Json(field)}}}});
}

std::string SerializeRequest(const GenerationRequest& r) {
  const SamplingConfig& s = r.config.sampling;
  return Json{{"api", r.api == Api::kMegatron ? "megatron" : "completions"},
              {"prompts", r.prompts},
              {"tokens_to_generate", r.config.tokens_to_generate},
              {"eod", r.config.eod},
              {"logprobs", r.config.logprobs},
              {"greedy", s.greedy},
              {"top_k", s.top_k},
              {"top_p", s.top_p},
              {"temperature", s.temperature},
              {"seed", s.seed},
              {"stop", r.stop}}
      .dump();
}

absl::StatusOr<GenerationRequest> DeserializeRequest(absl::string_view text) {
  const Json o = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  static const char* const kKeys[] = {
      "api",   "prompts", "tokens_to_generate", "eod",  "logprobs", "greedy",
      "top_k", "top_p",   "temperature",        "seed", "stop"};
  bool complete = o.is_object();
  for (const char* key : kKeys) complete = complete && o.contains(key);
  if (!complete) return absl::InvalidArgumentError("not a serialized generation request");
  GenerationRequest r;
  r.api = o["api"] == "megatron" ? Api::kMegatron : Api::kCompletions;
  r.prompts = o["prompts"].get<std::vector<std::vector<int32_t>>>();
  r.config.tokens_to_generate = o["tokens_to_generate"].get<int64_t>();
  r.config.eod = o["eod"].get<int32_t>();
  r.config.logprobs = o["logprobs"].get<bool>();
  SamplingConfig& s = r.config.sampling;
  s.greedy = o["greedy"].get<bool>();
  s.top_k = o["top_k"].get<int>();
  s.top_p = o["top_p"].get<double>();
  s.temperature = o["temperature"].get<double>();
  s.seed = o["seed"].get<uint64_t>();
  r.stop = o["stop"].get<std::vector<std::string>>();
  return r;
}

}  // namespace serve
}  // namespace mt

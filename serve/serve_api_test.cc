// The generation server's API without a server: requests of both APIs parsed into the right
// prompts and settings, every kind of bad request rejected naming its field, the request's round
// trip to the other ranks, the responses' JSON (text, segments, log-probabilities, completions
// with stop strings and usage), the error JSON, and the bounded job queue.
#include "serve/serve_api.h"

#include <chrono>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "data/tokenizers/testutil.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "serve/serve_metrics.h"
#include "serve/serve_queue.h"
#include "serve/serve_stream.h"

namespace mt {
namespace serve {
namespace {

using data::testing::Gpt2;
using Json = nlohmann::json;

ServeLimits Limits() {
  ServeLimits l;
  l.max_prompts = 3;
  l.max_tokens_per_request = 100;
  l.max_positions = 40;
  return l;
}

GenerationRequest Parse(Api api, const std::string& body, const ServeLimits& limits = Limits()) {
  absl::StatusOr<GenerationRequest> r = ParseRequest(api, body, Gpt2(), limits, 77);
  EXPECT_TRUE(r.ok()) << body << ": " << r.status();
  return r.ok() ? *r : GenerationRequest();
}

class ServeApiTest : public data::testing::TokenizerTest {};

TEST_F(ServeApiTest, MegatronRequest) {
  ServeLimits roomy;  // 1024 positions: room for the default 64 tokens.
  GenerationRequest r = Parse(Api::kMegatron, R"({"prompts": ["Hello world", ""]})", roomy);
  EXPECT_EQ(r.prompts, (std::vector<std::vector<int32_t>>{{15496, 995}, {50256}}));
  EXPECT_EQ(r.config.tokens_to_generate, 64);
  EXPECT_EQ(r.config.sampling.temperature, 1.0);
  EXPECT_EQ(r.config.sampling.top_k, 0);
  EXPECT_EQ(r.config.sampling.top_p, 0.0);
  EXPECT_FALSE(r.config.logprobs);
  EXPECT_TRUE(r.stop.empty());
  r = Parse(Api::kMegatron, R"({"prompts": ["Hello world"], "tokens_to_generate": 5,
      "logprobs": true, "temperature": 0.5, "top_k": 4, "random_seed": 9, "add_BOS": true,
      "unknown": [1]})");
  EXPECT_EQ(r.prompts, (std::vector<std::vector<int32_t>>{{50256, 15496, 995}}));
  EXPECT_EQ(r.config.tokens_to_generate, 5);
  EXPECT_TRUE(r.config.logprobs);
  EXPECT_EQ(r.config.sampling.temperature, 0.5);
  EXPECT_EQ(r.config.sampling.top_k, 4);
  EXPECT_EQ(r.config.sampling.seed, 9u);
  EXPECT_EQ(r.config.eod, 50256);
  r = Parse(Api::kMegatron, R"({"prompts": ["x"], "tokens_to_generate": 3, "top_p": 0.5})");
  EXPECT_EQ(r.config.sampling.top_p, 0.5);
  EXPECT_EQ(r.config.sampling.seed, 77u);  // The server's seed when the request gives none.
  EXPECT_FALSE(r.config.logprobs);
}

TEST_F(ServeApiTest, CompletionRequest) {
  GenerationRequest r = Parse(Api::kCompletions, R"({"prompt": "Hello world", "model": "m"})");
  EXPECT_EQ(r.prompts, (std::vector<std::vector<int32_t>>{{15496, 995}}));
  EXPECT_EQ(r.config.tokens_to_generate, 16);
  EXPECT_FALSE(r.config.sampling.IsGreedy());
  EXPECT_EQ(r.config.sampling.top_p, 0.0);  // The default 1 keeps every token.
  r = Parse(Api::kCompletions, R"({"prompt": ["a", "b"], "max_tokens": 4, "temperature": 0,
      "top_p": 0.25, "seed": 5, "stop": "\n", "n": 1, "stream": false, "logprobs": null})");
  EXPECT_EQ(r.prompts.size(), 2u);
  EXPECT_TRUE(r.config.sampling.IsGreedy());
  EXPECT_EQ(r.config.sampling.top_p, 0.25);
  EXPECT_EQ(r.config.sampling.seed, 5u);
  EXPECT_EQ(r.stop, std::vector<std::string>{"\n"});
  r = Parse(Api::kCompletions, R"({"prompt": "a", "max_tokens": 2, "stop": ["x", "yz"]})");
  EXPECT_EQ(r.stop, (std::vector<std::string>{"x", "yz"}));
}

// "a a ... a": n tokens.
std::string Words(int n) {
  std::string s = "a";
  for (int i = 1; i < n; ++i) s += " a";
  return s;
}

TEST_F(ServeApiTest, BadRequestsNameTheirField) {
  ASSERT_EQ(Gpt2().Encode(Words(30)).size(), 30u);
  const std::vector<std::tuple<Api, std::string, std::string>> cases = {
      {Api::kMegatron, R"({"prompts": ["x")", "body"},
      {Api::kMegatron, R"(["x"])", "body"},
      {Api::kMegatron, R"({})", "prompts"},
      {Api::kMegatron, R"({"prompts": []})", "prompts"},
      {Api::kMegatron, R"({"prompts": ["a", "b", "c", "d"]})", "prompts"},  // > max_prompts 3
      {Api::kMegatron, R"({"prompts": "x"})", "prompts"},
      {Api::kMegatron, R"({"prompts": [1]})", "prompts"},
      {Api::kMegatron, R"({"prompts": ["x"], "tokens_to_generate": "5"})", "tokens_to_generate"},
      {Api::kMegatron, R"({"prompts": ["x"], "tokens_to_generate": -1})", "tokens_to_generate"},
      {Api::kMegatron, R"({"prompts": ["x"], "tokens_to_generate": 0})", "tokens_to_generate"},
      {Api::kMegatron, R"({"prompts": ["x"], "temperature": 0})", "temperature"},
      {Api::kMegatron, R"({"prompts": ["x"], "temperature": true})", "temperature"},
      {Api::kMegatron, R"({"prompts": ["x"], "top_k": 1001})", "top_k"},
      {Api::kMegatron, R"({"prompts": ["x"], "top_k": 2.5})", "top_k"},
      {Api::kMegatron, R"({"prompts": ["x"], "top_p": -0.1})", "top_p"},
      {Api::kMegatron, R"({"prompts": ["x"], "top_k": 2, "top_p": 0.5})", "top_p"},
      {Api::kMegatron, R"({"prompts": ["x"], "random_seed": -2})", "random_seed"},
      {Api::kMegatron, R"({"prompts": ["x"], "random_seed": 18446744073709551615})", "random_seed"},
      {Api::kMegatron, R"({"prompts": ["x"], "logprobs": 1})", "logprobs"},
      {Api::kMegatron, R"({"prompts": ["x"], "add_BOS": "no"})", "add_BOS"},
      {Api::kCompletions, R"({"prompt": 3})", "prompt"},
      {Api::kCompletions, R"({"prompt": "x", "max_tokens": 41})", "max_tokens"},
      {Api::kCompletions, R"({"prompt": "x", "temperature": 2.1})", "temperature"},
      {Api::kCompletions, R"({"prompt": "x", "top_p": 0})", "top_p"},
      {Api::kCompletions, R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", "stop"},
      {Api::kCompletions, R"({"prompt": "x", "stop": [""]})", "stop"},
      {Api::kCompletions, R"({"prompt": "x", "stop": 5})", "stop"},
      {Api::kCompletions, R"({"prompt": "x", "n": 2})", "n"},
      {Api::kCompletions, R"({"prompt": "x", "stream": "yes"})", "stream"},
      {Api::kCompletions, R"({"prompt": "x", "logprobs": 6})", "logprobs"},
      {Api::kCompletions, R"({"prompt": "x", "logprobs": true})", "logprobs"},
      // A prompt of 30 tokens with 16 (11) more to generate exceeds the 40 positions.
      {Api::kCompletions, R"({"prompt": ")" + Words(30) + R"("})", "prompt"},
      {Api::kMegatron, R"({"prompts": [")" + Words(30) + R"("], "tokens_to_generate": 11})",
       "prompts"},
      // Three prompts of 1 token with 40 each: 123 positions > 100 per request.
      {Api::kMegatron, R"({"prompts": ["a", "b", "c"], "tokens_to_generate": 39})",
       "tokens_to_generate"},
      // Three prompts of 25 tokens with 15 each: 120 positions, most of them the prompts'.
      {Api::kMegatron,
       R"({"prompts": [")" + Words(25) + R"(", ")" + Words(25) + R"(", ")" + Words(25) +
           R"("], "tokens_to_generate": 15})",
       "prompts"},
  };
  for (const auto& [api, body, field] : cases) {
    absl::StatusOr<GenerationRequest> r = ParseRequest(api, body, Gpt2(), Limits(), 1);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << body;
    EXPECT_EQ(FieldOf(r.status()), field) << body << ": " << r.status();
    const Json error = Json::parse(ErrorJson(r.status()))["error"];
    EXPECT_EQ(error["param"], field);
    EXPECT_EQ(error["type"], "invalid_request_error");
    EXPECT_EQ(error["message"], std::string(r.status().message()));
    EXPECT_EQ(HttpStatus(r.status()), 400);
  }
  EXPECT_EQ(HttpStatus(absl::UnavailableError("busy")), 503);
  EXPECT_EQ(HttpStatus(absl::InternalError("x")), 500);
  EXPECT_TRUE(Json::parse(ErrorJson(absl::InternalError("x")))["error"]["param"].is_null());
}

TEST_F(ServeApiTest, RequestsTravelToTheOtherRanksIntact) {
  GenerationRequest r = Parse(Api::kCompletions, R"({"prompt": ["Hello", "a b"], "max_tokens":
      7, "temperature": 0.3, "top_p": 0.5, "seed": 123, "stop": ["\u00e9", "x"]})");
  absl::StatusOr<GenerationRequest> back = DeserializeRequest(SerializeRequest(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(SerializeRequest(*back), SerializeRequest(r));
  EXPECT_EQ(back->api, Api::kCompletions);
  EXPECT_EQ(back->prompts, r.prompts);
  EXPECT_EQ(back->stop, r.stop);
  EXPECT_EQ(back->config.sampling.seed, 123u);
  EXPECT_EQ(DeserializeRequest("{\"api\": 1}").status().code(), absl::StatusCode::kInvalidArgument);
}

Generation Gen(const std::string& prompt, const std::string& completion, FinishReason finish) {
  Generation g;
  g.tokens = Gpt2().Encode(prompt);
  g.prompt_length = static_cast<int64_t>(g.tokens.size());
  Gpt2().EncodeAppend(completion, &g.tokens);
  if (finish == FinishReason::kEod) g.tokens.push_back(50256);
  g.finish = finish;
  return g;
}

TEST_F(ServeApiTest, MegatronResponse) {
  GenerationRequest r = Parse(Api::kMegatron, R"({"prompts": ["a", "b"], "logprobs": true,
      "tokens_to_generate": 3})");
  std::vector<Generation> out = {Gen("Hello", " world", FinishReason::kLength),
                                 Gen("Hi", " there", FinishReason::kEod)};
  out[0].logprobs = {-0.5f};
  out[1].logprobs = {-1.0f, -2.0f};
  absl::StatusOr<std::string> body = ResponseJson(r, out, Gpt2(), "m", 1, 2);
  ASSERT_TRUE(body.ok());
  const Json j = Json::parse(*body);
  EXPECT_EQ(j["text"], Json({"Hello world", "Hi there<|endoftext|>"}));
  EXPECT_EQ(j["segments"], Json({{"Hello", " world"}, {"Hi", " there", "<|endoftext|>"}}));
  EXPECT_EQ(j["logprobs"], Json({{-0.5}, {-1.0, -2.0}}));
  r.config.logprobs = false;
  EXPECT_TRUE(Json::parse(*ResponseJson(r, out, Gpt2(), "m", 1, 2))["logprobs"].is_null());
}

TEST_F(ServeApiTest, CompletionResponseAndStopStrings) {
  GenerationRequest r = Parse(Api::kCompletions, R"({"prompt": ["a", "b", "c"], "stop":
      [" sat", "!"]})");
  const std::vector<Generation> out = {Gen("The cat", " sat on the mat", FinishReason::kStop),
                                       Gen("A dog", " ran", FinishReason::kEod),
                                       Gen("Hello", " there world", FinishReason::kLength)};
  absl::StatusOr<std::string> body = ResponseJson(r, out, Gpt2(), "ckpt", 42, 1700000000);
  ASSERT_TRUE(body.ok());
  const Json j = Json::parse(*body);
  EXPECT_EQ(j["id"], "cmpl-42");
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "ckpt");
  const Json& c = j["choices"];
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0]["text"], "");  // Cut before " sat".
  EXPECT_EQ(c[0]["finish_reason"], "stop");
  EXPECT_EQ(c[1]["text"], " ran");  // Without <|endoftext|>.
  EXPECT_EQ(c[1]["finish_reason"], "stop");
  EXPECT_EQ(c[2]["text"], " there world");
  EXPECT_EQ(c[2]["finish_reason"], "length");
  EXPECT_EQ(c[2]["index"], 2);
  // Usage: 2 + 2 + 1 prompt tokens; 4 + 2 (" ran" and <|endoftext|>) + 2 generated.
  EXPECT_EQ(j["usage"],
            Json({{"prompt_tokens", 5}, {"completion_tokens", 8}, {"total_tokens", 13}}));
  // The stop condition: the generated text contains a stop string.
  const StopCondition stop = StopStrings(r, Gpt2());
  ASSERT_TRUE(stop);
  EXPECT_FALSE(stop(0, Gpt2().Encode(" on the")));
  EXPECT_TRUE(stop(0, Gpt2().Encode(" on the mat!")));
  EXPECT_TRUE(stop(0, Gpt2().Encode(" he sat")));
  r.stop.clear();
  EXPECT_FALSE(StopStrings(r, Gpt2()));
}

TEST(JobQueueTest, BoundedFifoThatClosesCleanly) {
  JobQueue q(2);
  GenerationRequest a, b, c;
  a.prompts = {{1}};
  b.prompts = {{2}};
  c.prompts = {{3}};
  auto fa = q.TryPush(a);
  auto fb = q.TryPush(b);
  ASSERT_TRUE(fa && fb);
  EXPECT_FALSE(q.TryPush(c));  // Full.
  EXPECT_EQ(q.size(), 2u);
  std::unique_ptr<Job> first = q.Pop(std::chrono::milliseconds(1));
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->request.prompts, a.prompts);
  q.PushFront(std::move(first));
  first = q.Pop(std::chrono::milliseconds(1));
  EXPECT_EQ(first->request.prompts, a.prompts);
  first->result.set_value({absl::OkStatus(), {}});
  EXPECT_TRUE(fa->get().status.ok());
  // Closing answers the queued job and refuses new ones; Pop finds nothing.
  q.Close(absl::UnavailableError("closing"));
  EXPECT_EQ(fb->get().status.code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(q.TryPush(c));
  EXPECT_EQ(q.Pop(std::chrono::milliseconds(1)), nullptr);
  JobQueue empty(1);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(empty.Pop(std::chrono::milliseconds(30)), nullptr);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(30));
}

// The events' texts of a streamed completion add up to the unstreamed text: a stop string split
// over tokens is held back and cut, a multi-byte character split over tokens waits for its end.
TEST_F(ServeApiTest, StreamedTextsAddUpToTheCompletion) {
  GenerationRequest r = Parse(Api::kCompletions, R"({"prompt": ["a", "b"], "stop": [" sat"],
      "stream": true, "logprobs": 0})");
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.config.logprobs);
  std::vector<Generation> out = {Gen("The cat", " did sit, then sat on", FinishReason::kStop),
                                 Gen("Hi", " caf\u00e9 \u4e16\u754c", FinishReason::kLength)};
  for (Generation& g : out) g.logprobs.assign(g.tokens.size() - 1, -0.5f);
  GenerationRequest unstreamed = r;
  unstreamed.stream = false;
  const Json whole = Json::parse(*ResponseJson(unstreamed, out, Gpt2(), "ckpt", 7, 1700000000));
  CompletionStream stream(r, Gpt2(), "ckpt", 7, 1700000000);
  std::vector<std::string> texts(2);
  for (size_t i = 0; i < out.size(); ++i) {
    const Generation& g = out[i];
    for (size_t t = g.prompt_length; t < g.tokens.size(); ++t) {
      absl::StatusOr<std::string> e =
          stream.Token(TokenEvent{0, static_cast<int64_t>(i), g.tokens[t], -0.5f});
      ASSERT_TRUE(e.ok());
      ASSERT_EQ(e->substr(0, 6), "data: ");
      ASSERT_EQ(e->substr(e->size() - 2), "\n\n");
      const Json j = Json::parse(e->substr(6));
      EXPECT_EQ(j["id"], "cmpl-7");
      EXPECT_TRUE(j["choices"][0]["finish_reason"].is_null());
      EXPECT_EQ(j["choices"][0]["logprobs"]["token_logprobs"][0], -0.5);
      const std::string piece = j["choices"][0]["text"];
      texts[i] += piece;
      // Always a prefix of the whole text (nothing sent is taken back), never half a character.
      const std::string& want = whole["choices"][i]["text"].get_ref<const std::string&>();
      EXPECT_EQ(want.compare(0, texts[i].size(), texts[i]), 0) << texts[i];
      EXPECT_TRUE(Json(texts[i]).dump().find("\\ufffd") == std::string::npos) << texts[i];
    }
  }
  absl::StatusOr<std::string> last = stream.Finish(out);
  ASSERT_TRUE(last.ok());
  std::vector<std::string> events;
  for (size_t at = 0, end; (end = last->find("\n\n", at)) != std::string::npos; at = end + 2) {
    events.push_back(last->substr(at, end - at));
  }
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2], "data: [DONE]");
  const Json done0 = Json::parse(events[0].substr(6)), done1 = Json::parse(events[1].substr(6));
  EXPECT_EQ(done0["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(done1["choices"][0]["finish_reason"], "length");
  texts[0] += done0["choices"][0]["text"].get<std::string>();
  texts[1] += done1["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(texts[0], whole["choices"][0]["text"]);
  EXPECT_EQ(texts[0], " did sit, then");
  EXPECT_EQ(texts[1], whole["choices"][1]["text"]);
  EXPECT_EQ(CompletionStream::Error(absl::UnavailableError("busy")).substr(0, 15),
            "data: {\"error\":");
}

TEST_F(ServeApiTest, CompletionLogprobsAndModels) {
  GenerationRequest r = Parse(Api::kCompletions, R"({"prompt": "a", "logprobs": 1})");
  Generation g = Gen("The cat", " sat down", FinishReason::kLength);
  g.logprobs = {-1.0f, -2.0f, -3.0f};  // The prompt's second token, then the two generated.
  const Json j = Json::parse(*ResponseJson(r, {g}, Gpt2(), "ckpt", 1, 2));
  const Json& lp = j["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], Json({" sat", " down"}));
  EXPECT_EQ(lp["token_logprobs"], Json({-2.0, -3.0}));
  EXPECT_EQ(lp["text_offset"], Json({0, 4}));
  EXPECT_TRUE(lp["top_logprobs"].is_null());
  const Json m = Json::parse(ModelsJson("ckpt", 5));
  EXPECT_EQ(m["object"], "list");
  EXPECT_EQ(m["data"][0]["id"], "ckpt");
  EXPECT_EQ(m["data"][0]["created"], 5);
}

TEST(ServeMetricsTest, PrometheusText) {
  ServeMetrics m;
  m.Step(3, 2, 3);
  m.Step(2, 2, 2);
  m.FirstToken(0.004);
  m.FirstToken(0.2);
  m.TokenGap(0.02);
  m.Answered(RequestOutcome::kOk, 0.5);
  m.Answered(RequestOutcome::kCancelled, 60.0);  // Past the last bound: only +Inf counts it.
  const std::string t = m.Render(7);
  for (const char* line :
       {"# TYPE mt_serve_queue_depth gauge\nmt_serve_queue_depth 7\n", "\nmt_serve_batch_size 2\n",
        "\nmt_serve_generated_tokens_total 5\n", "\nmt_serve_steps_total 2\n",
        "mt_serve_requests_total{status=\"ok\"} 1\n",
        "mt_serve_requests_total{status=\"cancelled\"} 1\n",
        "# TYPE mt_serve_time_to_first_token_seconds histogram\n",
        "mt_serve_time_to_first_token_seconds_bucket{le=\"0.0025\"} 0\n",
        "mt_serve_time_to_first_token_seconds_bucket{le=\"0.005\"} 1\n",
        "mt_serve_time_to_first_token_seconds_bucket{le=\"0.25\"} 2\n",
        "mt_serve_time_to_first_token_seconds_count 2\n",
        "mt_serve_request_latency_seconds_bucket{le=\"30\"} 1\n",
        "mt_serve_request_latency_seconds_bucket{le=\"+Inf\"} 2\n",
        "mt_serve_request_latency_seconds_sum 60.5\n"}) {
    EXPECT_NE(t.find(line), std::string::npos) << line << " not in\n" << t;
  }
}

TEST(JobQueueTest, SpareRoomTakesABurst) {
  JobQueue q(1);
  GenerationRequest a;
  a.prompts = {{1}};
  ASSERT_TRUE(q.TryPush(a));
  EXPECT_FALSE(q.TryPush(a));
  q.set_spare(2);  // Two free batch slots: two more may wait for the next step.
  EXPECT_TRUE(q.TryPush(a));
  EXPECT_TRUE(q.TryPush(a));
  EXPECT_FALSE(q.TryPush(a));
  EXPECT_EQ(q.size(), 3u);
  q.Close(absl::UnavailableError("closing"));
}

TEST(JobQueueTest, HeldQueueGrantsNoSpareRoom) {
  JobQueue q(1);
  bool held = true;
  q.set_held([&held] { return held; });
  q.set_spare(2);  // Granted before the hold began: not used while it lasts.
  GenerationRequest a;
  a.prompts = {{1}};
  ASSERT_TRUE(q.TryPush(a));
  EXPECT_FALSE(q.TryPush(a));
  held = false;
  EXPECT_TRUE(q.TryPush(a));
  EXPECT_TRUE(q.TryPush(a));
  EXPECT_FALSE(q.TryPush(a));
  EXPECT_EQ(q.size(), 3u);
  q.Close(absl::UnavailableError("closing"));
}

}  // namespace
}  // namespace serve
}  // namespace mt

#include "serve/serve_metrics.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace mt {
namespace serve {

void LatencyHistogram::Record(double seconds) {
  const auto it = std::lower_bound(kBounds.begin(), kBounds.end(), seconds);
  if (it != kBounds.end()) ++buckets_[it - kBounds.begin()];
  ++count_;
  sum_ += seconds;
}

std::string LatencyHistogram::Render(const std::string& name) const {
  std::string out;
  int64_t cumulative = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += buckets_[i];
    absl::StrAppend(&out, name, "_bucket{le=\"", kBounds[i], "\"} ", cumulative, "\n");
  }
  absl::StrAppend(&out, name, "_bucket{le=\"+Inf\"} ", count_, "\n", name, "_sum ", sum_, "\n",
                  name, "_count ", count_, "\n");
  return out;
}

void ServeMetrics::Step(int64_t sequences, int64_t running, int64_t generated) {
  std::lock_guard<std::mutex> lock(mu_);
  batch_ = sequences;
  running_ = running;
  tokens_ += generated;
  ++steps_;
}

void ServeMetrics::FirstToken(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  first_token_.Record(seconds);
}

void ServeMetrics::TokenGap(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  token_gap_.Record(seconds);
}

void ServeMetrics::Answered(RequestOutcome outcome, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  (outcome == RequestOutcome::kOk      ? ok_
   : outcome == RequestOutcome::kError ? errors_
                                       : cancelled_)++;
  request_.Record(seconds);
}

namespace {
std::string Header(const char* name, const char* type, const char* help) {
  return absl::StrCat("# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}
}  // namespace

std::string ServeMetrics::Render(int64_t queue_depth) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string o;
  absl::StrAppend(&o, Header("mt_serve_queue_depth", "gauge", "Requests waiting to start."),
                  "mt_serve_queue_depth ", queue_depth, "\n");
  absl::StrAppend(&o, Header("mt_serve_batch_size", "gauge", "Sequences in the latest step."),
                  "mt_serve_batch_size ", batch_, "\n");
  absl::StrAppend(&o,
                  Header("mt_serve_running_sequences", "gauge", "Sequences holding a cache slot."),
                  "mt_serve_running_sequences ", running_, "\n");
  absl::StrAppend(&o, Header("mt_serve_requests_total", "counter", "Requests answered."),
                  "mt_serve_requests_total{status=\"ok\"} ", ok_, "\n",
                  "mt_serve_requests_total{status=\"error\"} ", errors_, "\n",
                  "mt_serve_requests_total{status=\"cancelled\"} ", cancelled_, "\n");
  absl::StrAppend(&o, Header("mt_serve_generated_tokens_total", "counter", "Tokens generated."),
                  "mt_serve_generated_tokens_total ", tokens_, "\n");
  absl::StrAppend(&o, Header("mt_serve_steps_total", "counter", "Model steps."),
                  "mt_serve_steps_total ", steps_, "\n");
  absl::StrAppend(&o,
                  Header("mt_serve_time_to_first_token_seconds", "histogram",
                         "From queued to the first generated token."),
                  first_token_.Render("mt_serve_time_to_first_token_seconds"));
  absl::StrAppend(&o,
                  Header("mt_serve_token_latency_seconds", "histogram",
                         "Between consecutive tokens of a sequence."),
                  token_gap_.Render("mt_serve_token_latency_seconds"));
  absl::StrAppend(
      &o, Header("mt_serve_request_latency_seconds", "histogram", "From queued to answered."),
      request_.Render("mt_serve_request_latency_seconds"));
  return o;
}

}  // namespace serve
}  // namespace mt

// The generation server's metrics (GET /metrics), in Prometheus' text exposition format:
//
//   mt_serve_queue_depth                  gauge      requests waiting (queue and engine)
//   mt_serve_batch_size                   gauge      sequences in the latest step
//   mt_serve_running_sequences            gauge      sequences holding a cache slot after it
//   mt_serve_requests_total{status}       counter    requests answered: ok, error, cancelled
//   mt_serve_generated_tokens_total       counter    tokens generated
//   mt_serve_steps_total                  counter    model steps
//   mt_serve_time_to_first_token_seconds  histogram  from queued to the first generated token
//   mt_serve_token_latency_seconds        histogram  between consecutive tokens of a sequence
//   mt_serve_request_latency_seconds      histogram  from queued to answered
//
// Thread-safe: the generation thread records, handler threads render.
#ifndef MT_SERVE_SERVE_METRICS_H_
#define MT_SERVE_SERVE_METRICS_H_

#include <array>
#include <cstdint>
#include <mutex>
#include <string>

namespace mt {
namespace serve {

// Cumulative buckets with fixed upper bounds (seconds), as Prometheus histograms are.
class LatencyHistogram {
 public:
  static constexpr std::array<double, 14> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                     0.25,  0.5,    1.0,   2.5,  5.0,   10.0, 30.0};
  void Record(double seconds);
  // The histogram's lines for metric `name` (its _bucket, _sum and _count samples).
  std::string Render(const std::string& name) const;

 private:
  std::array<int64_t, kBounds.size()> buckets_{};  // Not cumulative; summed when rendered.
  int64_t count_ = 0;
  double sum_ = 0;
};

enum class RequestOutcome { kOk, kError, kCancelled };

class ServeMetrics {
 public:
  void Step(int64_t sequences, int64_t running, int64_t generated);
  void FirstToken(double seconds);
  void TokenGap(double seconds);
  void Answered(RequestOutcome outcome, double seconds);
  // Every metric, with the current queue depth.
  std::string Render(int64_t queue_depth) const;

 private:
  mutable std::mutex mu_;
  int64_t batch_ = 0, running_ = 0, tokens_ = 0, steps_ = 0;
  int64_t ok_ = 0, errors_ = 0, cancelled_ = 0;
  LatencyHistogram first_token_, token_gap_, request_;
};

}  // namespace serve
}  // namespace mt

#endif  // MT_SERVE_SERVE_METRICS_H_

#include "train/timers.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status.h"
#include "core/tensor.h"
#include "glog/logging.h"

namespace mt {
namespace train {

Timers::Timers(int log_level, std::function<void()> sync)
    : log_level_(log_level), sync_(std::move(sync)), state_(kNumTimers) {}

int Timers::Index(const char* name) const {
  for (int i = 0; i < kNumTimers; ++i) {
    if (std::strcmp(kTimers[i].name, name) == 0) return i;
  }
  LOG(FATAL) << "no timer named '" << name << "'";
  return -1;
}

bool Timers::Enabled(const char* name) const { return kTimers[Index(name)].level <= log_level_; }

void Timers::Start(const char* name) {
  const int i = Index(name);
  if (kTimers[i].level > log_level_) return;
  State& s = state_[i];
  CHECK(!s.running) << "timer '" << name << "' started twice";
  if (sync_) sync_();
  s.running = true;
  s.started = Clock::now();
}

void Timers::Stop(const char* name) {
  const int i = Index(name);
  if (kTimers[i].level > log_level_) return;
  State& s = state_[i];
  CHECK(s.running) << "timer '" << name << "' stopped but not running";
  if (sync_) sync_();
  s.ms += std::chrono::duration<double, std::milli>(Clock::now() - s.started).count();
  s.running = false;
  s.ran = true;
}

std::vector<double> Timers::ElapsedMs() const {
  std::vector<double> out(kNumTimers, -1.0);
  for (int i = 0; i < kNumTimers; ++i) {
    if (state_[i].ran) out[i] = state_[i].ms;
  }
  return out;
}

void Timers::Reset() {
  for (State& s : state_) {
    s.ms = 0;
    s.ran = false;
  }
}

absl::StatusOr<RankTimings> GatherTimings(comm::Communicator& world,
                                          const std::vector<double>& timer_ms, double step_ms,
                                          double busy_ms) {
  CHECK_EQ(static_cast<int>(timer_ms.size()), kNumTimers);
  const int n = kNumTimers + 2, size = world.size();
  Tensor mine = Tensor::Host({n}, DType::kF32);
  float* m = mine.data_as<float>();
  for (int i = 0; i < kNumTimers; ++i) m[i] = static_cast<float>(timer_ms[i]);
  m[kNumTimers] = static_cast<float>(step_ms);
  m[kNumTimers + 1] = static_cast<float>(busy_ms);
  Tensor all = Tensor::Host({int64_t{n} * size}, DType::kF32);
  RETURN_IF_ERROR(world.AllGather(mine.view(), all.view()));
  const float* a = all.data_as<float>();
  RankTimings t;
  for (int r = 0; r < size; ++r) {
    const float* row = a + static_cast<int64_t>(r) * n;
    t.timer_ms.emplace_back(row, row + kNumTimers);
    t.step_ms.push_back(row[kNumTimers]);
    t.busy_ms.push_back(row[kNumTimers + 1]);
  }
  return t;
}

std::string FormatTimers(const RankTimings& t, TimingLogOption option) {
  std::string out;
  for (int i = 0; i < kNumTimers; ++i) {
    double lo = 0, hi = 0;
    bool ran = false;
    std::string ranks;
    for (size_t r = 0; r < t.timer_ms.size(); ++r) {
      const double ms = t.timer_ms[r][i];
      if (ms < 0) continue;
      lo = ran ? std::min(lo, ms) : ms;
      hi = ran ? std::max(hi, ms) : ms;
      ran = true;
      absl::StrAppendFormat(&ranks, "\n     rank %2d: %.2f", r, ms);
    }
    if (!ran) continue;
    std::string dotted = absl::StrCat(kTimers[i].name, " ");
    dotted.resize(std::max<size_t>(dotted.size(), 48), '.');
    switch (option) {
      case TimingLogOption::kMinMax:
        absl::StrAppendFormat(&out, "\n    %s: (%.2f, %.2f)", dotted, lo, hi);
        break;
      case TimingLogOption::kMax:
        absl::StrAppendFormat(&out, "\n    %s: %.2f", dotted, hi);
        break;
      case TimingLogOption::kAll:
        absl::StrAppendFormat(&out, "\n  %s:%s", kTimers[i].name, ranks);
        break;
    }
  }
  if (out.empty()) return out;
  const char* header = option == TimingLogOption::kMinMax ? "(min, max) time across ranks (ms):"
                       : option == TimingLogOption::kMax  ? "max time across ranks (ms):"
                                                          : "times across ranks (ms):";
  return absl::StrCat(header, out);
}

std::string FormatStragglers(const RankTimings& t, double threshold, int* straggler) {
  *straggler = -1;
  const int size = static_cast<int>(t.busy_ms.size());
  std::string out = "straggler report (busy ms per iteration, excluding time in communication):";
  for (int r = 0; r < size; ++r) {
    absl::StrAppendFormat(&out, "%s rank %d: %.1f", r == 0 ? "" : " |", r, t.busy_ms[r]);
  }
  std::vector<double> sorted = t.busy_ms;
  std::sort(sorted.begin(), sorted.end());
  // The median; with an even count the mean of the middle two.
  const double median = size == 0       ? 0
                        : size % 2 == 1 ? sorted[size / 2]
                                        : 0.5 * (sorted[size / 2 - 1] + sorted[size / 2]);
  const int slowest =
      static_cast<int>(std::max_element(t.busy_ms.begin(), t.busy_ms.end()) - t.busy_ms.begin());
  if (size > 1 && median > 0 && t.busy_ms[slowest] > median * (1 + threshold)) {
    *straggler = slowest;
    absl::StrAppendFormat(&out,
                          "; rank %d is a straggler: %.0f%% above the median "
                          "(--straggler_threshold=%g)",
                          slowest, 100.0 * (t.busy_ms[slowest] / median - 1), threshold);
  } else {
    absl::StrAppendFormat(&out, "; no straggler (none over the median by more than %.0f%%)",
                          100.0 * threshold);
  }
  return out;
}

}  // namespace train
}  // namespace mt

// Megatron-LM's timers (--timing_log_level, --timing_log_option) and a straggler report
// (--log_straggler).
//
// Each phase of a training iteration has a named timer with Megatron's name and level (kTimers):
// level 1 the forward-backward pass as a whole, the gradient reductions and the optimizer's
// parts; level 2 also the forward and backward compute of every micro-batch, the wait for the
// next batch and the pipeline's sends and receives. A run times the timers up to its
// --timing_log_level (0: none) and, at every log line, prints each timer's milliseconds per
// iteration over the interval, gathered from every rank, as Megatron does:
//
//   (min, max) time across ranks (ms):
//       forward-backward ...............................: (412.31, 415.02)
//       all-grads-sync .................................: (3.10, 5.77)
//
// (--timing_log_option=max prints the maximum only, =all every rank's value). A timer a rank
// never ran (the pipeline's receives on the first stage) does not count towards min and max.
// On a GPU every start and stop synchronises the device first, as Megatron's timers do, so the
// time is the device's too; that serialises the host with the device: time with level 2 only to
// find out where the time goes.
//
// The straggler report (--log_straggler) is about each rank's busy time: its wall time per
// iteration minus the time it spent inside communicator calls (comm::CallMonitor), which is
// mostly waiting for the slowest peer. Ranks wait for the straggler, so the straggler is the
// rank with the most busy time; it is named when that exceeds the median over the ranks by more
// than --straggler_threshold:
//
//   straggler report (busy ms per iteration, excluding time in communication): rank 0: 50.1 |
//   rank 1: 50.3 | rank 2: 97.9 | rank 3: 50.0; rank 2 is a straggler: 95% above the median
//   (--straggler_threshold=0.2)
#ifndef MT_TRAIN_TIMERS_H_
#define MT_TRAIN_TIMERS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "comm/communicator.h"
#include "nn/context.h"

namespace mt {
namespace train {

// How the timers are printed: min and max over the ranks, the max only, or every rank's value.
enum class TimingLogOption { kMinMax, kMax, kAll };
inline constexpr std::pair<absl::string_view, TimingLogOption> kTimingLogOptionNames[] = {
    {"minmax", TimingLogOption::kMinMax},
    {"max", TimingLogOption::kMax},
    {"all", TimingLogOption::kAll}};

// A timer's name and the lowest --timing_log_level that runs it.
struct TimerSpec {
  const char* name;
  int level;
};

// Every timer, in the order the report lists them (Megatron's names).
inline constexpr TimerSpec kTimers[] = {
    {"forward-backward", 1},
    {"forward-compute", 2},
    {"backward-compute", 2},
    {"batch-generator", 2},
    {"forward-recv", 2},
    {"forward-send", 2},
    {"backward-recv", 2},
    {"backward-send", 2},
    {"moe-all-to-all", 2},  // Expert parallelism's token exchange (models/variants/moe).
    {"embedding-grads-all-reduce", 1},
    {"all-grads-sync", 1},
    {"params-all-gather", 1},
    {"optimizer-clip-main-grad", 1},
    {"optimizer-count-zeros", 1},
    {"optimizer-inner-step", 1},
    {"optimizer-copy-main-to-model-params", 1},
    {"optimizer", 1},
    {"save-checkpoint", 0},
};
inline constexpr int kNumTimers = sizeof(kTimers) / sizeof(kTimers[0]);

// The timers of one rank. Not thread-safe: the training thread uses them.
class Timers : public nn::StepTimers {
 public:
  // Runs the timers of level <= log_level. `sync` (may be empty) is called before every reading
  // of the clock of a running timer: the device synchronisation on a GPU.
  Timers(int log_level, std::function<void()> sync);

  // Start and stop a timer of kTimers (a name not there is a programming error: CHECK). A timer
  // above the log level does nothing; starting a running timer or stopping a stopped one is a
  // programming error too.
  void Start(const char* name) override;
  void Stop(const char* name) override;
  // Whether the timer runs at this log level.
  bool Enabled(const char* name) const;

  // Milliseconds each timer of kTimers accumulated since the last Reset (in that order), and -1
  // for a timer that has not run since.
  std::vector<double> ElapsedMs() const;
  void Reset();
  int log_level() const { return log_level_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct State {
    bool running = false;
    bool ran = false;
    Clock::time_point started;
    double ms = 0;
  };
  int Index(const char* name) const;

  int log_level_;
  std::function<void()> sync_;
  std::vector<State> state_;
};

// Every rank's figures of one log interval, gathered to all ranks: the timers' milliseconds per
// iteration (-1 where a rank did not run one), and each rank's wall and busy milliseconds per
// iteration (busy: outside communicator calls).
struct RankTimings {
  std::vector<std::vector<double>> timer_ms;  // [rank][timer of kTimers]
  std::vector<double> step_ms, busy_ms;       // [rank]
};

// Collective over `world` (one all-gather): every rank's `timer_ms` (ElapsedMs() divided by the
// iterations of the interval), `step_ms` and `busy_ms`.
absl::StatusOr<RankTimings> GatherTimings(comm::Communicator& world,
                                          const std::vector<double>& timer_ms, double step_ms,
                                          double busy_ms);

// The report of the timers that ran on some rank, as Megatron prints it (see the file comment);
// empty when none ran.
std::string FormatTimers(const RankTimings& t, TimingLogOption option);

// The straggler report of the file comment. *straggler: the rank named, or -1.
std::string FormatStragglers(const RankTimings& t, double threshold, int* straggler);

}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_TIMERS_H_

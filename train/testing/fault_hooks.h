// Faults for tests of the training loop (testonly), as train::TrainerHooks the tests pass in:
//   GradOverflow         after the backward passes of one iteration, one gradient element becomes
//                        +inf on one rank (or every rank), as an f16 overflow would;
//   NonfiniteInjection   in `count` iterations from one (numbered as in the log, from 1), the loss
//                        of data-parallel rank 0 becomes NaN (on every TP rank of it, as a NaN
//                        from the forward pass would be), or one reduced gradient element becomes
//                        +inf on every rank;
//   SlowRank             one rank sleeps in every iteration, after its backward passes: a
//                        straggler the others wait for.
// ParseNonfiniteTarget reads a test binary's "loss" / "grad".
#ifndef MT_TRAIN_TESTING_FAULT_HOOKS_H_
#define MT_TRAIN_TESTING_FAULT_HOOKS_H_

#include <cstdint>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "train/trainer.h"

namespace mt {
namespace train {
namespace testing {

class GradOverflow : public TrainerHooks {
 public:
  // At 0-based `iteration`, on global rank `rank` (< 0: every rank).
  GradOverflow(int64_t iteration, int rank) : iteration_(iteration), rank_(rank) {}
  absl::Status AfterBackward(int64_t iteration, const TrainingParts& parts,
                             models::Losses* loss) override;

 private:
  int64_t iteration_;
  int rank_;
};

enum class NonfiniteTarget { kGrad, kLoss };
inline constexpr std::pair<absl::string_view, NonfiniteTarget> kNonfiniteTargetNames[] = {
    {"grad", NonfiniteTarget::kGrad}, {"loss", NonfiniteTarget::kLoss}};

class NonfiniteInjection : public TrainerHooks {
 public:
  // From iteration `first` (as logged, from 1) for `count` iterations.
  NonfiniteInjection(int64_t first, int64_t count, NonfiniteTarget target)
      : first_(first), count_(count), target_(target) {}
  absl::Status AfterBackward(int64_t iteration, const TrainingParts& parts,
                             models::Losses* loss) override;

 private:
  int64_t first_, count_;
  NonfiniteTarget target_;
};

class SlowRank : public TrainerHooks {
 public:
  // Global rank `rank` sleeps `ms` milliseconds in every iteration.
  SlowRank(int rank, int64_t ms) : rank_(rank), ms_(ms) {}
  absl::Status AfterBackward(int64_t iteration, const TrainingParts& parts,
                             models::Losses* loss) override;

 private:
  int rank_;
  int64_t ms_;
};

}  // namespace testing
}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_TESTING_FAULT_HOOKS_H_

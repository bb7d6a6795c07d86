// A stop request (SIGTERM) reaching some ranks only, or at different iterations, must stop every
// rank after the same iteration: AgreeToStop all-reduces the local flag (MAX) over the job.
#ifndef MT_TRAIN_STOP_REQUEST_H_
#define MT_TRAIN_STOP_REQUEST_H_

#include <atomic>

#include "absl/status/statusor.h"
#include "comm/communicator.h"

namespace mt {
namespace train {

// True on every rank if any rank's *stop is set. Collective over `world`; false without a
// collective when stop is null (then no rank may pass a non-null one).
absl::StatusOr<bool> AgreeToStop(comm::Communicator& world, const std::atomic<bool>* stop);

}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_STOP_REQUEST_H_

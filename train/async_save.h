// Checkpoints written while training goes on (--async_save): the training state is copied to host
// memory (train/training_state.h's TrainingSnapshot), a background thread writes this rank's shard
// from the copy through the same atomic SaveShard, and once every rank has written its shard the
// checkpoint is committed, on the training thread, by the same CommitCheckpoint as a synchronous
// save. So a process killed at any point of an async save leaves the previous checkpoint the
// latest, and loadable: the new shard directories appear complete or not at all, and the pointer
// moves only at the commit.
//
// The copy: a store in host memory is copied by the background thread itself, first, while the
// next iteration's forward and backward passes run (they read the masters and write only
// gradients and activations); the optimizer waits for it before its update changes the masters
// and the moments (WaitForCopy, from Optimizer::set_before_update). Otherwise (a GPU store, a
// distributed optimizer's gather) the training thread copies between two iterations.
//
//   AsyncSaver saver(save_dir, keep_last, &parallel, &fs);
//   optimizer.set_before_update([&] { saver.WaitForCopy(); });
//   every iteration:   RETURN_IF_ERROR(saver.Poll());          // commits a finished save
//   at a save:         RETURN_IF_ERROR(saver.Start(std::move(snapshot)));
//   at the end:        RETURN_IF_ERROR(saver.Finish());        // waits for it, and commits
//
// The writer (and the hashing threads it starts) runs at nice 10, below the training threads: on
// a machine whose cores training keeps busy the write then takes longer rather than slowing the
// steps. One save at a time: Start waits for the one in flight and commits it first. A failed write
// is reported by the Poll or Finish that sees it, on every rank (the job then ends, the previous
// checkpoint intact). Poll and Finish are collective over the world (Poll: one small all-reduce
// while a save is in flight, none otherwise); the background thread makes no communicator call.
#ifndef MT_TRAIN_ASYNC_SAVE_H_
#define MT_TRAIN_ASYNC_SAVE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "comm/parallel_context.h"
#include "core/file_system.h"
#include "train/training_state.h"

namespace mt {
namespace train {

class AsyncSaver {
 public:
  // `parallel` and `fs` must outlive the saver.
  AsyncSaver(std::string save_dir, int keep_last, comm::ParallelContext* parallel, FileSystem* fs);
  // Waits for a write in flight (so no thread outlives the saver), without committing it: a save
  // not finished through Finish stays uncommitted, and the previous checkpoint the latest.
  ~AsyncSaver();
  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;

  // Finishes the save in flight (as Finish), then starts writing `snapshot` in the background.
  // Collective over the world.
  absl::Status Start(std::unique_ptr<TrainingSnapshot> snapshot);
  // Between iterations: commits the save in flight once every rank has written its shard. An error
  // (DataLoss naming the iteration) if a rank's write failed. Collective over the world.
  absl::Status Poll();
  // Waits for this rank's write and every other's, then commits. OK with none in flight.
  // Collective over the world.
  absl::Status Finish();
  // Blocks until the save in flight has made the copies its snapshot deferred
  // (TrainingSnapshot::copy_deferred): call before anything changes the masters or the moments.
  // At once when there are none. Adds the time waited to copy_wait_seconds().
  void WaitForCopy();
  // Seconds WaitForCopy has blocked, summed over the run.
  double copy_wait_seconds() const { return copy_wait_seconds_; }
  // Tests: run on the writer's thread before it makes a snapshot's deferred copies (to hold them
  // back). Set before Start.
  void set_before_copy_for_testing(std::function<void()> hook) {
    before_copy_for_testing_ = std::move(hook);
  }

  bool in_flight() const { return snapshot_ != nullptr; }
  // The host memory of the last committed save, for the next snapshot to take over
  // (SnapshotTrainingState's `reuse`); null if there is none.
  std::unique_ptr<TrainingSnapshot> TakeSpare() { return std::move(spare_); }
  // Hands the saver host memory for its first snapshot (ReserveTrainingSnapshot).
  void set_spare(std::unique_ptr<TrainingSnapshot> spare) { spare_ = std::move(spare); }
  // The iteration of the last committed save (-1: none yet).
  int64_t committed_iteration() const { return committed_; }
  // Seconds the background thread took to write the last committed save.
  double last_write_seconds() const { return write_seconds_; }

 private:
  // Agrees over the world on whether every rank's write has finished (when `wait`, after waiting
  // for this rank's), and commits when it has.
  absl::Status Settle(bool wait);
  void Join();

  std::string save_dir_;
  int keep_last_;
  comm::ParallelContext* parallel_;
  FileSystem* fs_;
  std::unique_ptr<TrainingSnapshot> snapshot_;  // The save in flight.
  std::unique_ptr<TrainingSnapshot> spare_;     // The last committed one.
  std::thread writer_;
  std::atomic<bool> written_{false};
  std::mutex copy_mu_;
  std::condition_variable copy_cv_;
  bool copied_ = true;  // Guarded by copy_mu_: the snapshot in flight holds its copies.
  double copy_wait_seconds_ = 0;
  std::function<void()> before_copy_for_testing_;
  absl::Status write_status_;  // Set by the writer before `written_`.
  double write_seconds_ = 0;
  int64_t committed_ = -1;
};

}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_ASYNC_SAVE_H_

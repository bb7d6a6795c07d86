#include "train/async_save.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "core/tensor.h"

namespace mt {
namespace train {
namespace {

// The background writer's nice value (Linux: per thread, inherited by the threads it creates).
constexpr int kWriterNice = 10;

}  // namespace

AsyncSaver::AsyncSaver(std::string save_dir, int keep_last, comm::ParallelContext* parallel,
                       FileSystem* fs)
    : save_dir_(std::move(save_dir)), keep_last_(keep_last), parallel_(parallel), fs_(fs) {}

AsyncSaver::~AsyncSaver() { Join(); }

void AsyncSaver::Join() {
  if (writer_.joinable()) writer_.join();
}

absl::Status AsyncSaver::Start(std::unique_ptr<TrainingSnapshot> snapshot) {
  RETURN_IF_ERROR(Finish());
  snapshot_ = std::move(snapshot);
  written_.store(false);
  write_status_ = absl::OkStatus();
  {
    std::lock_guard<std::mutex> lock(copy_mu_);
    copied_ = !snapshot_->copy_deferred();
  }
  TrainingSnapshot* snap = snapshot_.get();
  writer_ = std::thread([this, snap] {
    const auto start = std::chrono::steady_clock::now();
    // The copy first, at the training threads' priority: the next optimizer update waits for it.
    if (snap->copy_deferred()) {
      if (before_copy_for_testing_) before_copy_for_testing_();
      snap->CopyDeferred();
      std::lock_guard<std::mutex> lock(copy_mu_);
      copied_ = true;
      copy_cv_.notify_all();
    }
    // The write below the training threads: where they keep every core busy, it waits for them
    // rather than they for it. The hashing workers this thread starts inherit the priority.
    setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), kWriterNice);
    write_status_ = snap->Write(save_dir_, *fs_);
    write_seconds_ =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    written_.store(true, std::memory_order_release);
  });
  return absl::OkStatus();
}

absl::Status AsyncSaver::Settle(bool wait) {
  const bool done = wait || written_.load(std::memory_order_acquire);
  if (done) Join();
  // [ranks still writing, ranks whose write failed]: one all-reduce, the same answer everywhere.
  Tensor flags = Tensor::Host({2}, DType::kI32);
  int32_t* f = flags.data_as<int32_t>();
  f[0] = done ? 0 : 1;
  f[1] = done && !write_status_.ok() ? 1 : 0;
  RETURN_IF_ERROR(parallel_->world().AllReduce(flags.view(), comm::ReduceOp::kSum));
  const int64_t iteration = snapshot_->iteration();
  if (f[1] > 0) {
    snapshot_.reset();
    const std::string why = write_status_.ok()
                                ? absl::StrCat(f[1], " other rank(s) failed to write")
                                : std::string(write_status_.message());
    return absl::DataLossError(absl::StrCat("the checkpoint of iteration ", iteration,
                                            " written in the background (--async_save) failed: ",
                                            why, "; the previous checkpoint is the latest"));
  }
  if (f[0] > 0) return absl::OkStatus();
  spare_ = std::move(snapshot_);
  RETURN_IF_ERROR(
      CommitTrainingState(save_dir_, keep_last_, *parallel_, iteration, spare_->ep_size(), *fs_));
  committed_ = iteration;
  return absl::OkStatus();
}

void AsyncSaver::WaitForCopy() {
  std::unique_lock<std::mutex> lock(copy_mu_);
  if (copied_) return;
  const auto start = std::chrono::steady_clock::now();
  copy_cv_.wait(lock, [this] { return copied_; });
  copy_wait_seconds_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

absl::Status AsyncSaver::Poll() { return in_flight() ? Settle(/*wait=*/false) : absl::OkStatus(); }

absl::Status AsyncSaver::Finish() { return in_flight() ? Settle(/*wait=*/true) : absl::OkStatus(); }

}  // namespace train
}  // namespace mt

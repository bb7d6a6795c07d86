#include "serve/serve_queue.h"

#include <utility>

namespace mt {
namespace serve {

std::optional<std::future<JobResult>> JobQueue::TryPush(GenerationRequest request) {
  auto job = std::make_unique<Job>();
  job->request = std::move(request);
  return TryPush(std::move(job));
}

std::optional<std::future<JobResult>> JobQueue::TryPush(std::unique_ptr<Job> job) {
  job->queued = std::chrono::steady_clock::now();
  std::future<JobResult> result = job->result.get_future();
  const bool held = held_ && held_();  // Outside the lock: it may look at the file system.
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_ || jobs_.size() >= capacity_ + (held ? 0 : spare_)) return std::nullopt;
    jobs_.push_back(std::move(job));
  }
  ready_.notify_one();
  return result;
}

std::unique_ptr<Job> JobQueue::Pop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!ready_.wait_for(lock, timeout, [&] { return closed_ || !jobs_.empty(); }) || closed_) {
    return nullptr;
  }
  std::unique_ptr<Job> job = std::move(jobs_.front());
  jobs_.pop_front();
  return job;
}

void JobQueue::PushFront(std::unique_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!closed_) jobs_.push_front(std::move(job));  // Leaves job null.
  }
  if (job != nullptr) {
    job->result.set_value({absl::UnavailableError("the server is shutting down"), {}});
  }
  ready_.notify_one();
}

void JobQueue::Close(const absl::Status& status) {
  std::deque<std::unique_ptr<Job>> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    pending.swap(jobs_);
  }
  ready_.notify_all();
  for (auto& job : pending) job->result.set_value({status, {}});
}

void JobQueue::set_spare(size_t spare) {
  std::lock_guard<std::mutex> lock(mu_);
  spare_ = spare;
}

size_t JobQueue::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return jobs_.size();
}

}  // namespace serve
}  // namespace mt

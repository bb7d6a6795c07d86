#include "core/thread_pool.h"

#include <algorithm>

namespace mt {

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t max_chunks = std::max<int64_t>(1, n / grain);
  const int64_t target_chunks = std::min<int64_t>(max_chunks, 4 * num_threads());
  const int64_t chunk = (n + target_chunks - 1) / target_chunks;
  const int64_t num_chunks = (n + chunk - 1) / chunk;  // Every chunk non-empty.
  if (num_chunks == 1) {
    fn(0, n);
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  fn_ = &fn;
  n_ = n;
  num_chunks_ = num_chunks;
  chunk_ = chunk;
  next_chunk_ = 0;
  pending_ = num_chunks;
  ++generation_;
  work_cv_.notify_all();
  // The caller works too.
  while (next_chunk_ < num_chunks_) {
    const int64_t c = next_chunk_++;
    lock.unlock();
    const int64_t begin = c * chunk_;
    fn(begin, std::min(n, begin + chunk_));
    lock.lock();
    --pending_;
  }
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  fn_ = nullptr;
}

void ThreadPool::WorkerLoop(int /*worker*/) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stop_ || (generation_ != seen && fn_ != nullptr); });
    if (stop_) return;
    seen = generation_;
    while (fn_ != nullptr && next_chunk_ < num_chunks_) {
      const int64_t c = next_chunk_++;
      const auto* fn = fn_;
      const int64_t n = n_, chunk = chunk_;
      lock.unlock();
      const int64_t begin = c * chunk;
      (*fn)(begin, std::min(n, begin + chunk));
      lock.lock();
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }
}

}  // namespace mt

// A fixed pool of worker threads for CPU kernels. Passed in explicitly (ExecContext), never global.
//
// ParallelFor splits [0, n) into contiguous chunks of at least `grain` items and runs them on the
// workers and the calling thread; it returns when all chunks are done. One ParallelFor at a time
// per pool: the pool is not re-entrant (a kernel running on a worker must not call ParallelFor on
// the same pool). Thread-safe with respect to destruction only after all calls have returned.
#ifndef MT_CORE_THREAD_POOL_H_
#define MT_CORE_THREAD_POOL_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mt {

class ThreadPool {
 public:
  // `num_threads` counts the calling thread: 1 means no workers. 0 means hardware concurrency.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) over disjoint chunks covering [0, n).
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop(int worker);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int64_t, int64_t)>* fn_ = nullptr;  // Guarded by mu_.
  int64_t n_ = 0;
  int64_t chunk_ = 0;
  int64_t num_chunks_ = 0;
  int64_t next_chunk_ = 0;   // Guarded by mu_.
  int64_t pending_ = 0;      // Chunks not yet finished. Guarded by mu_.
  uint64_t generation_ = 0;  // Bumped per ParallelFor. Guarded by mu_.
  bool stop_ = false;        // Guarded by mu_.
};

// Runs fn over [0, n) on `pool`, or inline when pool is null.
inline void ParallelFor(ThreadPool* pool, int64_t n, int64_t grain,
                        const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (pool == nullptr || pool->num_threads() == 1 || n <= grain) {
    fn(0, n);
  } else {
    pool->ParallelFor(n, grain, fn);
  }
}

}  // namespace mt

#endif  // MT_CORE_THREAD_POOL_H_

// The generation server's queue: HTTP handler threads push checked requests and wait for their
// results (or their tokens, streaming); the generation thread pops them. Bounded: a push into a
// full queue is refused at once (the server answers 503), so a burst never piles up unbounded work.
//
// Thread-safe: any number of pushing threads and one popping thread.
#ifndef MT_SERVE_SERVE_QUEUE_H_
#define MT_SERVE_SERVE_QUEUE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "serve/batch_engine.h"
#include "serve/generate.h"
#include "serve/serve_api.h"

namespace mt {
namespace serve {

// What a request's handler gets back.
struct JobResult {
  absl::Status status;  // OK, or why there are no generations.
  std::vector<Generation> generations;
};

struct Job {
  GenerationRequest request;
  std::promise<JobResult> result;
  // Streaming: called on the generation thread with each token the request generates, before its
  // result is set; must not block. Null: none.
  std::function<void(const TokenEvent&)> on_token;
  // Called on the generation thread right after `result` is set. Null: none.
  std::function<void()> on_answer;
  // Set (by the handler) when its client has gone: the generation loop drops the request between
  // two steps, freeing its cache slots, and answers it Cancelled.
  std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
  std::chrono::steady_clock::time_point queued = std::chrono::steady_clock::now();
};

class JobQueue {
 public:
  explicit JobQueue(size_t capacity) : capacity_(capacity) {}

  // Queues `request` and returns the future of its result; nullopt when the queue holds
  // `capacity` + spare() jobs or is closed.
  std::optional<std::future<JobResult>> TryPush(GenerationRequest request);
  // The same for a job made by the caller (streaming, cancellation).
  std::optional<std::future<JobResult>> TryPush(std::unique_ptr<Job> job);
  // The oldest job, waiting up to `timeout` for one; null if none came (or the queue is closed).
  std::unique_ptr<Job> Pop(std::chrono::milliseconds timeout);
  // Puts a popped job back at the front (it may take the queue one over capacity for a moment).
  void PushFront(std::unique_ptr<Job> job);
  // Refuses new jobs and answers every queued one with `status`.
  void Close(const absl::Status& status);

  size_t size() const;
  size_t capacity() const { return capacity_; }
  // Extra room the consumer grants while it could start that many more jobs at once (the free
  // slots of a continuous batch): a burst is not refused while the generation has room for it.
  void set_spare(size_t spare);
  // While `held` returns true (the server's --hold_file), the queue takes `capacity` jobs and no
  // spare room, whatever the consumer granted last: the consumer may not have run since the hold
  // began, and a job admitted on that stale grant would wait out the hold. Set before any push.
  void set_held(std::function<bool()> held) { held_ = std::move(held); }

 private:
  size_t spare_ = 0;  // Guarded by mu_.
  std::function<bool()> held_;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::unique_ptr<Job>> jobs_;
  bool closed_ = false;
};

}  // namespace serve
}  // namespace mt

#endif  // MT_SERVE_SERVE_QUEUE_H_

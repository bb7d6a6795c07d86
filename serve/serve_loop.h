// The generation loop every rank of the generation server runs (//jobs/serve:serve; the job is one
// tensor-parallel group, rank 0 holding the HTTP server and its JobQueue), with continuous
// batching (serve/batch_engine.h): requests join the running batch between two decode steps and
// leave it when they finish.
//
// Round after round, every rank sums a small header with an all-reduce: rank 0's count of events
// (new jobs taken from its queue while the engine has room for them, jobs whose client has gone)
// and the size of their serialized text, and every rank's stop vote. While the engine is idle the
// all-reduce is non-blocking and polled with 1 ms sleeps (so that idle ranks do not spin in MPI)
// and rank 0 waits up to `poll` for a job; while it is busy the round is a plain all-reduce. The
// events then go from rank 0 to every rank (a broadcast of their text), every rank applies them to
// its engine in the same order (new requests get the same ids everywhere), and every rank runs
// one engine step (collective). Rank 0 streams each generated token to its job and hands each
// finished request's generations to the handler waiting for them. Any rank's stop vote (its
// `stop` flag, set by SIGTERM/SIGINT) ends the loop on every rank; requests in flight are
// answered Unavailable.
#ifndef MT_SERVE_SERVE_LOOP_H_
#define MT_SERVE_SERVE_LOOP_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "data/tokenizers/tokenizer.h"
#include "serve/batch_engine.h"
#include "serve/inference.h"
#include "serve/serve_metrics.h"
#include "serve/serve_queue.h"

namespace mt {
namespace serve {

struct ServeLoopOptions {
  std::chrono::milliseconds poll{20};  // Rank 0's wait for a job in each idle round.
  BatchLimits batch;                   // The engine's limits (every rank the same).
  ServeMetrics* metrics = nullptr;     // Rank 0's, or null.
  // While this file exists, rank 0 starts no job (jobs wait in the queue, a full queue answers
  // 503; a job taken while the file appeared goes back to the front): for tests and maintenance.
  // Empty: none.
  std::string hold_file;
};

// Whether `hold_file` is set and exists. The server also gives it to its queue
// (JobQueue::set_held), so that a full queue is refused at once while held.
bool HoldFileExists(const std::string& hold_file);

// Runs until any rank's `stop` is set. `queue`: rank 0's (null on the other ranks). `served`
// counts the jobs answered. Returns OK after a stop; the engine's InvalidArgument for a request
// is answered to its client (deterministic on every rank); a collective's error or a model error
// ends the loop with that error (the binary then ends the job); so does an engine that cannot be
// created (Unimplemented for a model without slotted decoding).
absl::Status RunServeLoop(comm::Communicator& world, const InferenceSession& session,
                          const data::Tokenizer& tokenizer, JobQueue* queue,
                          const ServeLoopOptions& options, const std::atomic<bool>& stop,
                          std::atomic<int64_t>* served);

}  // namespace serve
}  // namespace mt

#endif  // MT_SERVE_SERVE_LOOP_H_

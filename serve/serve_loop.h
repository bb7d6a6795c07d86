// The generation loop every rank of the generation server runs (//jobs/serve:serve; the job is one
// tensor-parallel group, rank 0 holding the HTTP server and its JobQueue).
//
// Round after round, every rank sums a small header with a non-blocking all-reduce that it polls
// with 1 ms sleeps (so that idle ranks do not spin in MPI): rank 0's announcement of a job (taken
// from its queue, waiting up to `poll` for one) and every rank's stop vote. A job's request then
// goes from rank 0 to every rank (a broadcast of its serialized text), every rank generates it
// (serve/generate.h, collective), and rank 0 hands the result to the handler waiting for it. Any
// rank's stop vote (its `stop` flag, set by SIGTERM/SIGINT) ends the loop on every rank after the
// job in progress; a job taken in the last round is answered Unavailable.
#ifndef MT_SERVE_SERVE_LOOP_H_
#define MT_SERVE_SERVE_LOOP_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "data/tokenizers/tokenizer.h"
#include "serve/inference.h"
#include "serve/serve_queue.h"

namespace mt {
namespace serve {

struct ServeLoopOptions {
  std::chrono::milliseconds poll{20};  // Rank 0's wait for a job in each round.
  // While this file exists, rank 0 starts no job (jobs wait in the queue, a full queue answers
  // 503; a job taken while the file appeared goes back to the front): for tests and maintenance.
  // Empty: none.
  std::string hold_file;
};

// Runs until any rank's `stop` is set. `queue`: rank 0's (null on the other ranks). `served`
// counts the jobs answered. Returns OK after a stop; a collective's error, or a generation error
// other than InvalidArgument (which is answered to the client and deterministic on every rank),
// ends the loop with that error (the binary then ends the job).
absl::Status RunServeLoop(comm::Communicator& world, const InferenceSession& session,
                          const data::Tokenizer& tokenizer, JobQueue* queue,
                          const ServeLoopOptions& options, const std::atomic<bool>& stop,
                          std::atomic<int64_t>* served);

}  // namespace serve
}  // namespace mt

#endif  // MT_SERVE_SERVE_LOOP_H_

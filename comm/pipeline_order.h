// The order of one pipeline stage's forward and backward passes (Narayanan et al. 2021), as pure
// functions: which micro-batch and model chunk each pass works on, and how many micro-batches are
// in flight (forward run, backward not yet) along the way. train/pipeline_schedule.h runs these
// orders; models/memory.h counts the activations they keep.
//
// Stages and chunks (PipelineSplit): P stages, V model chunks per stage; virtual stage v * P + s
// is chunk v of stage s, and a micro-batch flows through virtual stages 0, 1, ..., P * V - 1.
// V = 1 is the plain 1F1B schedule.
//
// 1F1B (V = 1), stage s of P over m micro-batches: w = min(P - s - 1, m) warm-up forwards, then
// m - w steady steps of one forward and one backward, then w cool-down backwards: at most P - s
// micro-batches are in flight on stage s. With forward time tf and backward time tb per stage, the
// pipeline bubble (each stage's idle fraction of the iteration) is (P - 1) / (m + P - 1).
// Interleaved (V > 1, m a multiple of P): micro-batches enter in groups of P, each group running
// through chunk 0 then chunk 1 ... of the stage; warm-up (P - s - 1) * 2 + (V - 1) * P forwards
// (all of them when m = P), then 1F1B steps, then the cool-down: the bubble shrinks to
// (P - 1) / (V * m + P - 1).
#ifndef MT_COMM_PIPELINE_ORDER_H_
#define MT_COMM_PIPELINE_ORDER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mt {
namespace comm {

struct PipelineOp {
  enum class Kind { kForward, kBackward };
  Kind kind = Kind::kForward;
  int micro = 0;  // Micro-batch, in [0, m).
  int chunk = 0;  // Model chunk of this stage, in [0, V).
  friend bool operator==(const PipelineOp& a, const PipelineOp& b) {
    return a.kind == b.kind && a.micro == b.micro && a.chunk == b.chunk;
  }
};
// "F3" / "B0" (chunk 0), "F3.1" (chunk 1): for messages and tests.
std::string OpName(const PipelineOp& op);

// InvalidArgument unless stages >= 1, 0 <= stage < stages, chunks >= 1, micro_batches >= 1, and,
// for chunks > 1, stages >= 2 and micro_batches a multiple of stages (the message names the
// flags).
absl::Status CheckPipelineSchedule(int stages, int stage, int chunks, int micro_batches);

// The ops of stage `stage` of `stages` with `chunks` model chunks per stage over `micro_batches`
// (see the file comment). The errors of CheckPipelineSchedule.
absl::StatusOr<std::vector<PipelineOp>> PipelineScheduleOps(int stages, int stage, int chunks,
                                                            int micro_batches);

// Micro-batches in flight on a stage over its ops, in chunk units (a micro-batch in flight on two
// chunks counts twice).
struct PipelineInFlight {
  int64_t peak = 0;                  // The most at once.
  std::vector<int64_t> chunk_peaks;  // Per chunk: the most at once on that chunk.
  // The sum of the chunk peaks: what a stage holds when each chunk keeps its peak's worth of
  // activation sets. With V = 1 it is the peak; interleaved, the chunks peak at different times
  // and it exceeds the peak (stage 0 of 2, 2 chunks, 4 micro-batches: chunk peaks 4 and 2, peak 5).
  int64_t chunk_peak_sum() const;
};
// micro_batches 0: the most over any number of micro-batches, count by count (m below P keeps
// fewer; every m >= 2P gives what 2P gives; interleaved, m = P runs every forward first and can
// keep more on a chunk than any larger m). The errors of CheckPipelineSchedule.
absl::StatusOr<PipelineInFlight> PipelineInFlightMicroBatches(int stages, int stage, int chunks,
                                                              int micro_batches);

}  // namespace comm
}  // namespace mt

#endif  // MT_COMM_PIPELINE_ORDER_H_

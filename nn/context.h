// What a module's Forward/Backward needs besides tensors: the op context, the tensor-parallel
// group, and the dropout RNG coordinates of this micro-batch.
#ifndef MT_NN_CONTEXT_H_
#define MT_NN_CONTEXT_H_

#include <cstdint>

#include "comm/communicator.h"
#include "core/exec_context.h"

namespace mt {
namespace nn {

enum class Mode { kTrain, kEval };

struct StepContext {
  const ExecContext* exec = nullptr;
  // The tensor-parallel group; null means TP = 1 (no collectives).
  comm::Communicator* tp = nullptr;
  Mode mode = Mode::kTrain;
  // Dropout masks are Philox(dropout_seed, stream, key) with stream derived from micro_step and
  // the dropout site, and key the GLOBAL element index (global sample, global head, ...), so masks
  // do not depend on the TP or DP degree. micro_step must differ between training iterations (the
  // trainer uses the iteration); within one, sample_offset tells micro-batches apart.
  uint64_t dropout_seed = 0;
  uint64_t micro_step = 0;
  // Global index of this micro-batch's first sample within the training run's batch (so that
  // data-parallel ranks, which see different samples, draw different masks).
  int64_t sample_offset = 0;

  int tp_rank() const { return tp == nullptr ? 0 : tp->rank(); }
  int tp_size() const { return tp == nullptr ? 1 : tp->size(); }
  bool training() const { return mode == Mode::kTrain; }
  // The Philox stream of dropout site `site` (< 16) of layer `layer` (< 4096) in this micro-step.
  uint64_t DropoutStream(int layer, int site) const {
    return (micro_step << 16) | (static_cast<uint64_t>(layer) << 4) | static_cast<uint64_t>(site);
  }
};

}  // namespace nn
}  // namespace mt

#endif  // MT_NN_CONTEXT_H_

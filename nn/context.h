// What a module's Forward/Backward needs besides tensors: the op context, the tensor-parallel
// group, and the dropout RNG coordinates of this micro-batch.
//
// Devices: modules allocate their activations and scratch on exec->device (core/alloc.h), which
// must be the device of their ParameterStore; every tensor handed to a module must live there too
// (the ops refuse mixed devices). Only the models (models/) accept host inputs and upload them.
#ifndef MT_NN_CONTEXT_H_
#define MT_NN_CONTEXT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "core/exec_context.h"
#include "core/ops/elementwise.h"

namespace mt {
namespace nn {

enum class Mode { kTrain, kEval };

// One sequence's part of a slotted decoding step (continuous batching: Layer::DecodeSlots): the
// next `count` positions of the sequence held in cache slot `slot`. A step packs the rows of its
// spans one after the other, span by span.
struct DecodeSpan {
  int64_t slot = 0;
  int64_t count = 0;
};

// Megatron's named timers (train/timers.h) as the code below the trainer sees them: Start and
// Stop around a phase ("forward-compute", "forward-recv", ...). A timer whose level is above the
// run's --timing_log_level costs nothing.
class StepTimers {
 public:
  virtual ~StepTimers() = default;
  virtual void Start(const char* name) = 0;
  virtual void Stop(const char* name) = 0;
};

// Times the scope with timer `name` of `timers` (null: nothing).
class TimerScope {
 public:
  TimerScope(StepTimers* timers, const char* name) : timers_(timers), name_(name) {
    if (timers_ != nullptr) timers_->Start(name_);
  }
  ~TimerScope() {
    if (timers_ != nullptr) timers_->Stop(name_);
  }
  TimerScope(const TimerScope&) = delete;
  TimerScope& operator=(const TimerScope&) = delete;

 private:
  StepTimers* timers_;
  const char* name_;
};

// Told during a backward pass which gradients are final, so that their data-parallel all-reduce
// can start while the rest of backward runs (train/grad_reducer.h). Parameters are declared in
// forward order and backward visits them in reverse, so one handle says it all.
class GradReadyListener {
 public:
  virtual ~GradReadyListener() = default;
  // The gradients of parameter `first_handle` and of every parameter declared after it will not
  // change again in this backward pass. Called with decreasing handles; an error ends backward.
  virtual absl::Status GradsReady(int first_handle) = 0;
};

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
  // Notified as gradients become final during backward; null: nobody listens.
  GradReadyListener* grads_ready = nullptr;
  // Times the forward and backward compute of a training micro-batch; null: not timed.
  StepTimers* timers = nullptr;
  // The context-parallel group (nn/context_parallel.h: this rank holds 2 of the 2 * size chunks
  // of every sequence, and attention runs as a ring over the group); null means CP = 1.
  comm::Communicator* cp = nullptr;
  // Ring attention starts each key/value exchange before computing on the block it holds (true)
  // or waits for it first (false: no overlap, to measure what the overlap saves).
  bool cp_overlap = true;

  // A training micro-step on `exec` (tp null: TP = 1) whose dropout masks are keyed by
  // dropout_seed, micro_step and sample_offset.
  static StepContext Train(const ExecContext* exec, comm::Communicator* tp = nullptr,
                           uint64_t dropout_seed = 0, uint64_t micro_step = 0,
                           int64_t sample_offset = 0) {
    return StepContext{exec, tp, Mode::kTrain, dropout_seed, micro_step, sample_offset};
  }
  // An evaluation pass on `exec` (tp null: TP = 1): no dropout.
  static StepContext Eval(const ExecContext* exec, comm::Communicator* tp = nullptr) {
    return StepContext{exec, tp, Mode::kEval};
  }

  int tp_rank() const { return tp == nullptr ? 0 : tp->rank(); }
  int tp_size() const { return tp == nullptr ? 1 : tp->size(); }
  int cp_rank() const { return cp == nullptr ? 0 : cp->rank(); }
  int cp_size() const { return cp == nullptr ? 1 : cp->size(); }
  bool training() const { return mode == Mode::kTrain; }
  // Tells grads_ready (if any) that parameters first_handle.. are final.
  absl::Status NotifyGradsReady(int first_handle) const {
    return grads_ready == nullptr ? absl::OkStatus() : grads_ready->GradsReady(first_handle);
  }
  // The Philox stream of dropout site `site` (< 16) of layer `layer` (< 4096) in this micro-step.
  uint64_t DropoutStream(int layer, int site) const {
    return (micro_step << 16) | (static_cast<uint64_t>(layer) << 4) | static_cast<uint64_t>(site);
  }
  // The dropout of an activation of `sample_elems` elements per sample at dropout site `site` of
  // layer `layer`: probability p while training, none otherwise; each element keyed by its index
  // in the whole batch, so that the mask does not depend on the micro-batch or DP split.
  ops::DropoutArgs Dropout(float p, int layer, int site, int64_t sample_elems) const {
    ops::DropoutArgs d;
    d.p = training() ? p : 0.0f;
    d.seed = dropout_seed;
    d.stream = DropoutStream(layer, site);
    d.key_base = sample_offset * sample_elems;
    return d;
  }
};

}  // namespace nn
}  // namespace mt

#endif  // MT_NN_CONTEXT_H_

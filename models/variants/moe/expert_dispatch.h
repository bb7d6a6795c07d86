// Expert parallelism's token exchange: the experts of a mixture-of-experts layer split over the
// ranks of an expert-parallel group (EP ranks carved out of the data-parallel ones, as Megatron
// does), each rank running E / EP of them (rank p: experts [p E / EP, (p + 1) E / EP)) on the rows
// every rank of the group routed to them.
//
// A layer's rows on one rank are in dispatch order (routing.h: grouped by expert), so the rows
// for rank p's experts are one contiguous block. Plan() all-gathers every rank's rows per expert;
// Dispatch() sends each block to its rank (one Communicator::AllToAllV) and reorders what
// arrived (source-major) into expert-major order, so that each local expert's rows are
// contiguous; Return() is its inverse (the experts' outputs, or their input gradients, back to
// the ranks and rows they came from). The reordering is a row gather (ops::Embedding) on the
// device with index vectors built on the host.
//
// Every rank of the group must call Plan / Dispatch / Return in the same order (collective over
// the group); the tokens of each rank are routed on that rank, so the routing, the auxiliary
// losses and any capacity are those of EP = 1. Errors: the communicator's and the ops'.
#ifndef MT_MODELS_VARIANTS_MOE_EXPERT_DISPATCH_H_
#define MT_MODELS_VARIANTS_MOE_EXPERT_DISPATCH_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "comm/communicator.h"
#include "core/exec_context.h"
#include "core/tensor.h"
#include "nn/context.h"

namespace mt {
namespace models {
namespace moe {

class ExpertDispatcher {
 public:
  // ep: the expert-parallel group, or null (every expert local); its size divides `experts`
  // (CHECK: the model validates it first).
  ExpertDispatcher(comm::Communicator* ep, int experts);
  // Whether rows move between ranks (a group of more than one rank).
  bool active() const { return ep_ != nullptr && ep_->size() > 1; }
  int first_expert() const { return first_; }
  int local_experts() const { return local_; }

  // offsets [E + 1]: this rank's dispatch rows of each expert. Collective over the group.
  absl::Status Plan(const ExecContext& ec, const std::vector<int64_t>& offsets);
  // Rows of local expert i in the expert-major buffer: [local_offsets()[i], [i + 1]).
  const std::vector<int64_t>& local_offsets() const { return local_offsets_; }
  int64_t local_rows() const { return local_offsets_.back(); }
  // in [R, H], this rank's rows in dispatch order -> out [local_rows(), H], expert-major. The
  // all-to-all runs under sc.timers' "moe-all-to-all".
  absl::Status Dispatch(const nn::StepContext& sc, const TensorView& in, const TensorView& out);
  // in [local_rows(), H], expert-major -> out [R, H], this rank's rows in dispatch order.
  absl::Status Return(const nn::StepContext& sc, const TensorView& in, const TensorView& out);

 private:
  comm::Communicator* ep_;
  int experts_, first_ = 0, local_ = 0;
  std::vector<int64_t> send_rows_, recv_rows_, local_offsets_;
  Tensor to_expert_host_, to_expert_;  // i32 [local rows]: received row of each expert-major row
  Tensor to_source_host_, to_source_;  // i32 [local rows]: expert-major row of each received row
};

}  // namespace moe
}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_VARIANTS_MOE_EXPERT_DISPATCH_H_

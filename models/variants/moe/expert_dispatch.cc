#include "models/variants/moe/expert_dispatch.h"

#include <utility>

#include "core/alloc.h"
#include "core/ops/embedding.h"
#include "core/status.h"
#include "glog/logging.h"

namespace mt {
namespace models {
namespace moe {
namespace {

// out <- in's rows `ids` (host i32 in *host; a device copy in *dev when ec is not the host's).
absl::Status GatherRows(const ExecContext& ec, const Tensor& host, Tensor* dev,
                        const TensorView& in, const TensorView& out) {
  if (out.dim(0) == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(TensorView ids, OnDevice(ec, host.view(), dev, "expert dispatch rows"));
  return ops::Embedding(ec, ids, in, out);
}

}  // namespace

ExpertDispatcher::ExpertDispatcher(comm::Communicator* ep, int experts)
    : ep_(ep), experts_(experts) {
  const int P = ep_ == nullptr ? 1 : ep_->size();
  CHECK_EQ(experts % P, 0) << "experts " << experts << " over " << P << " expert-parallel ranks";
  local_ = experts / P;
  first_ = (ep_ == nullptr ? 0 : ep_->rank()) * local_;
}

absl::Status ExpertDispatcher::Plan(const ExecContext& ec, const std::vector<int64_t>& offsets) {
  (void)ec;
  const int P = ep_ == nullptr ? 1 : ep_->size(), E = experts_;
  Tensor mine = Tensor::Host({E}, DType::kI64);
  for (int e = 0; e < E; ++e) mine.data_as<int64_t>()[e] = offsets[e + 1] - offsets[e];
  Tensor all = Tensor::Host({P * E}, DType::kI64);  // [P, E]: rows of rank s for expert e
  if (active()) {
    RETURN_IF_ERROR(ep_->AllGather(mine.view(), all.view()));
  } else {
    all = std::move(mine);
  }
  const int64_t* c = all.data_as<int64_t>();
  send_rows_.assign(P, 0);
  recv_rows_.assign(P, 0);
  for (int p = 0; p < P; ++p) {
    send_rows_[p] = offsets[(p + 1) * local_] - offsets[p * local_];
    for (int i = 0; i < local_; ++i) recv_rows_[p] += c[p * E + first_ + i];
  }
  // Received rows: source-major, then local expert. Expert-major: local expert, then source.
  local_offsets_.assign(local_ + 1, 0);
  for (int i = 0; i < local_; ++i) {
    int64_t n = 0;
    for (int s = 0; s < P; ++s) n += c[s * E + first_ + i];
    local_offsets_[i + 1] = local_offsets_[i] + n;
  }
  const int64_t R = local_offsets_.back();
  to_expert_host_ = Tensor::Host({R}, DType::kI32);
  to_source_host_ = Tensor::Host({R}, DType::kI32);
  int32_t* to_expert = to_expert_host_.data_as<int32_t>();
  int32_t* to_source = to_source_host_.data_as<int32_t>();
  std::vector<int64_t> next(local_offsets_.begin(), local_offsets_.end() - 1);
  int64_t received = 0;
  for (int s = 0; s < P; ++s) {
    for (int i = 0; i < local_; ++i) {
      for (int64_t k = 0; k < c[s * E + first_ + i]; ++k, ++received) {
        const int64_t row = next[i]++;
        to_expert[row] = static_cast<int32_t>(received);
        to_source[received] = static_cast<int32_t>(row);
      }
    }
  }
  to_expert_ = Tensor();
  to_source_ = Tensor();
  return absl::OkStatus();
}

absl::Status ExpertDispatcher::Dispatch(const nn::StepContext& sc, const TensorView& in,
                                        const TensorView& out) {
  const ExecContext& ec = *sc.exec;
  ASSIGN_OR_RETURN(Tensor received, Alloc(ec, out.shape, out.dtype));
  {
    nn::TimerScope timed(sc.timers, "moe-all-to-all");
    RETURN_IF_ERROR(ep_->AllToAllV(in, send_rows_, received.view(), recv_rows_));
  }
  return GatherRows(ec, to_expert_host_, &to_expert_, received.view(), out);
}

absl::Status ExpertDispatcher::Return(const nn::StepContext& sc, const TensorView& in,
                                      const TensorView& out) {
  const ExecContext& ec = *sc.exec;
  ASSIGN_OR_RETURN(Tensor by_source, Alloc(ec, in.shape, in.dtype));
  RETURN_IF_ERROR(GatherRows(ec, to_source_host_, &to_source_, in, by_source.view()));
  nn::TimerScope timed(sc.timers, "moe-all-to-all");
  return ep_->AllToAllV(by_source.view(), recv_rows_, out, send_rows_);
}

}  // namespace moe
}  // namespace models
}  // namespace mt

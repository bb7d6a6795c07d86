#include "train/stop_request.h"

#include "core/status.h"
#include "core/tensor.h"

namespace mt {
namespace train {

absl::StatusOr<bool> AgreeToStop(comm::Communicator& world, const std::atomic<bool>* stop) {
  if (stop == nullptr) return false;
  Tensor flag = Tensor::Host({1}, DType::kI32);
  flag.data_as<int32_t>()[0] = stop->load() ? 1 : 0;
  RETURN_IF_ERROR(world.AllReduce(flag.view(), comm::ReduceOp::kMax));
  return flag.data_as<int32_t>()[0] != 0;
}

}  // namespace train
}  // namespace mt

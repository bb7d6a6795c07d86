// How the parameters of an nn::ParameterStore become checkpoint tensors: one TensorRecord
// (checkpoint.h) per parameter, with its partitioning, over a flat f32 tensor in the store's
// layout (the master values, a host copy of them, an Adam moment); and the names under which a
// training checkpoint keeps the optimizer's tensors beside them:
//   "<param>", "optimizer.exp_avg.<param>", "optimizer.exp_avg_sq.<param>".
// Readers of the weights alone (model_loading.h, the reshard tool) skip the optimizer's tensors by
// that prefix.
#ifndef MT_CHECKPOINT_PARAMETER_RECORDS_H_
#define MT_CHECKPOINT_PARAMETER_RECORDS_H_

#include <string>

#include "checkpoint/checkpoint.h"
#include "core/tensor.h"
#include "nn/parameter.h"

namespace mt {
namespace checkpoint {

// The prefix of every optimizer tensor's name in a training checkpoint, and the Adam moments'
// names after it: "optimizer.exp_avg.<param>", "optimizer.exp_avg_sq.<param>".
inline constexpr char kOptimizerTensorPrefix[] = "optimizer.";
inline constexpr const char* kMomentTensorNames[] = {"exp_avg.", "exp_avg_sq."};

// The parameter a training checkpoint's tensor belongs to: "<param>" for "<param>",
// "optimizer.exp_avg.<param>" and "optimizer.exp_avg_sq.<param>".
std::string ParameterOfTensor(const std::string& tensor_name);

// The record of parameter `handle` of `store`, named `name`, over `flat`: a flat f32
// [store.NumLocalElements()] tensor in the store's layout (its master values, a host copy of
// them, an Adam moment), on any device. The record views `flat`; it owns nothing.
TensorRecord ParameterRecord(const nn::ParameterStore& store, int handle, const TensorView& flat,
                             const std::string& name);

}  // namespace checkpoint
}  // namespace mt

#endif  // MT_CHECKPOINT_PARAMETER_RECORDS_H_

#include "checkpoint/parameter_records.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace mt {
namespace checkpoint {

std::string ParameterOfTensor(const std::string& tensor_name) {
  for (const char* moment : kMomentTensorNames) {
    const std::string prefix = absl::StrCat(kOptimizerTensorPrefix, moment);
    if (absl::StartsWith(tensor_name, prefix)) return tensor_name.substr(prefix.size());
  }
  return tensor_name;
}

TensorRecord ParameterRecord(const nn::ParameterStore& store, int handle, const TensorView& flat,
                             const std::string& name) {
  const nn::ParamSpec& spec = store.spec(handle);
  TensorRecord r;
  r.name = name;
  r.global_shape = spec.global_shape;
  r.split_dim = spec.split_dim;
  r.vocab_padded = spec.vocab_padded;
  r.local = TensorView(flat.data_as<float>() + store.offset(handle), store.local_shape(handle),
                       DType::kF32, flat.device);
  return r;
}

}  // namespace checkpoint
}  // namespace mt

// The weight files of a Hugging Face model directory: `model.safetensors`, or
// `model.safetensors.index.json` (its "weight_map": tensor name -> shard file) and the shards.
#ifndef MT_CHECKPOINT_HF_FILES_H_
#define MT_CHECKPOINT_HF_FILES_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/safetensors.h"
#include "core/file_system.h"
#include "core/tensor.h"

namespace mt {
namespace checkpoint {

constexpr char kHfConfigFile[] = "config.json";
constexpr char kHfWeightsFile[] = "model.safetensors";
constexpr char kHfWeightsIndexFile[] = "model.safetensors.index.json";

// dir + "/" + name (no doubled slash).
std::string HfPath(const std::string& dir, const std::string& name);

// The tensors of a directory's safetensors files, open for reading. Move-only.
class HfWeights {
 public:
  // Opens dir/model.safetensors, else dir/model.safetensors.index.json and every shard it names
  // (each name must be in the shard the index gives). Errors name the file: NotFound when neither
  // exists, FailedPrecondition when only PyTorch pickles (pytorch_model.bin) are there (convert
  // them to safetensors first); DataLoss for a malformed index, a truncated or corrupt file, or
  // a tensor stored in two shards or missing from its shard; Unimplemented for a dtype the
  // project lacks (safetensors.h).
  static absl::StatusOr<HfWeights> Open(const std::string& dir,
                                        FileSystem& fs = DefaultFileSystem());

  // Every stored tensor name, sorted.
  std::vector<std::string> names() const;
  // The entry of a stored name (CHECK: it exists).
  const SafetensorsEntry& entry(const std::string& name) const;
  // The file holding it.
  const std::string& path(const std::string& name) const;
  // The tensor as f32 on the host (bf16 and f16 widened exactly). InvalidArgument naming the
  // tensor for an integer tensor; DataLoss if the file was truncated since it was opened.
  absl::StatusOr<Tensor> ReadF32(const std::string& name) const;

 private:
  std::vector<SafetensorsReader> readers_;
  std::map<std::string, int> where_;  // Stored name -> reader.
};

}  // namespace checkpoint
}  // namespace mt

#endif  // MT_CHECKPOINT_HF_FILES_H_

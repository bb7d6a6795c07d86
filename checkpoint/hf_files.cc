#include "checkpoint/hf_files.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/status.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace checkpoint {
namespace {

using Json = nlohmann::json;

// The shard files of an index and, per file, the names it must hold.
absl::StatusOr<std::map<std::string, std::set<std::string>>> ReadIndex(FileSystem& fs,
                                                                       const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, fs.ReadFile(path));
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
      !j["weight_map"].is_object()) {
    return absl::DataLossError(absl::StrCat(path,
                                            ": not an index (a JSON object with a "
                                            "\"weight_map\" object)"));
  }
  std::map<std::string, std::set<std::string>> files;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it->is_string() || it->get<std::string>().find('/') != std::string::npos) {
      return absl::DataLossError(absl::StrCat(path, ": weight_map[\"", it.key(),
                                              "\"] is not a file name in this directory"));
    }
    files[it->get<std::string>()].insert(it.key());
  }
  if (files.empty()) return absl::DataLossError(absl::StrCat(path, ": empty weight_map"));
  return files;
}

}  // namespace

std::string HfPath(const std::string& dir, const std::string& name) {
  if (!dir.empty() && dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

absl::StatusOr<HfWeights> HfWeights::Open(const std::string& dir, FileSystem& fs) {
  HfWeights w;
  const std::string single = HfPath(dir, kHfWeightsFile);
  const std::string index = HfPath(dir, kHfWeightsIndexFile);
  std::map<std::string, std::set<std::string>> files;
  if (fs.PathExists(single)) {
    files[kHfWeightsFile] = {};
  } else if (fs.PathExists(index)) {
    ASSIGN_OR_RETURN(files, ReadIndex(fs, index));
  } else if (fs.PathExists(HfPath(dir, "pytorch_model.bin")) ||
             fs.PathExists(HfPath(dir, "pytorch_model.bin.index.json"))) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir,
        " holds PyTorch pickles (pytorch_model.bin), which this converter does not read; "
        "convert them to safetensors first (e.g. load the model in transformers and "
        "save_pretrained(dir, safe_serialization=True))"));
  } else {
    return absl::NotFoundError(
        absl::StrCat("no ", kHfWeightsFile, " or ", kHfWeightsIndexFile, " in ", dir));
  }
  for (const auto& [file, expected] : files) {
    ASSIGN_OR_RETURN(SafetensorsReader reader, SafetensorsReader::Open(HfPath(dir, file), fs));
    for (const std::string& name : expected) {
      if (reader.Find(name) == nullptr) {
        return absl::DataLossError(absl::StrCat(reader.path(), ": no tensor '", name, "', which ",
                                                kHfWeightsIndexFile, " puts there"));
      }
    }
    for (const SafetensorsEntry& e : reader.entries()) {
      if (!w.where_.emplace(e.name, static_cast<int>(w.readers_.size())).second) {
        return absl::DataLossError(absl::StrCat("tensor '", e.name, "' is stored in both ",
                                                w.readers_[w.where_[e.name]].path(), " and ",
                                                reader.path()));
      }
    }
    w.readers_.push_back(std::move(reader));
  }
  return w;
}

std::vector<std::string> HfWeights::names() const {
  std::vector<std::string> out;
  for (const auto& [name, reader] : where_) out.push_back(name);
  return out;
}

const SafetensorsEntry& HfWeights::entry(const std::string& name) const {
  auto it = where_.find(name);
  CHECK(it != where_.end()) << name;
  return *readers_[it->second].Find(name);
}

const std::string& HfWeights::path(const std::string& name) const {
  auto it = where_.find(name);
  CHECK(it != where_.end()) << name;
  return readers_[it->second].path();
}

absl::StatusOr<Tensor> HfWeights::ReadF32(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  if (!IsFloating(e.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(path(name), ": tensor '", name, "' is ",
                                                   DTypeName(e.dtype), ", not a float tensor"));
  }
  ASSIGN_OR_RETURN(Tensor stored, readers_[where_.at(name)].ReadTensor(name));
  if (e.dtype == DType::kF32) return stored;
  Tensor out = Tensor::Host(e.shape, DType::kF32);
  float* dst = out.data_as<float>();
  for (int64_t i = 0; i < out.numel(); ++i) {
    dst[i] = e.dtype == DType::kBF16 ? Bf16ToFloat(stored.data_as<bf16>()[i])
                                     : HalfToFloat(stored.data_as<f16>()[i]);
  }
  return out;
}

}  // namespace checkpoint
}  // namespace mt

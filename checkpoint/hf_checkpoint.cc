#include "checkpoint/hf_checkpoint.h"

#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/hf_files.h"
#include "checkpoint/hf_layout.h"
#include "checkpoint/model_loading.h"
#include "checkpoint/parameter_records.h"
#include "checkpoint/safetensors.h"
#include "core/exec_context.h"
#include "core/status.h"
#include "glog/logging.h"
#include "models/registry.h"
#include "nlohmann/json.hpp"
#include "nn/parameter.h"

namespace mt {
namespace checkpoint {
namespace {

using Json = nlohmann::json;

constexpr char kConvertedFrom[] = "huggingface";

// The tokenizer files of a Hugging Face directory, copied on import and written on export.
constexpr const char* kTokenizerFiles[] = {"vocab.json",
                                           "merges.txt",
                                           "vocab.txt",
                                           "tokenizer.json",
                                           "tokenizer_config.json",
                                           "special_tokens_map.json"};

std::string ShapeText(const Shape& s) { return ShapeToString(s); }

// The model's parameters at TP 1 in f32 on the host, initialised from `seed`.
struct SerialModel {
  std::unique_ptr<nn::ParameterStore> store;
  std::unique_ptr<models::Model> model;
};
absl::StatusOr<SerialModel> BuildSerial(const models::ModelConfig& config, uint64_t seed) {
  SerialModel m;
  m.store = std::make_unique<nn::ParameterStore>(0, 1);
  ASSIGN_OR_RETURN(m.model, models::CreateModel(config, m.store.get()));
  RETURN_IF_ERROR(m.store->Allocate(seed));
  return m;
}

// Reads the Hugging Face tensors of `map` in f32, checking their shapes. NotFound naming the
// first absent one; *absent: whether all were absent (then nothing is read).
absl::StatusOr<std::vector<Tensor>> ReadParts(const HfWeights& w,
                                              const std::map<std::string, std::string>& names,
                                              const HfTensorMap& map, const Shape& ours,
                                              const models::ModelConfig& config, bool* absent) {
  int found = 0;
  for (const std::string& hf : map.hf) found += names.count(hf);
  *absent = found == 0;
  std::vector<Tensor> parts;
  if (*absent && map.optional) return parts;
  for (size_t k = 0; k < map.hf.size(); ++k) {
    const std::string& hf = map.hf[k];
    const Shape want = HfShape(map, ours, config, k);
    auto it = names.find(hf);
    if (it == names.end()) {
      return absl::NotFoundError(absl::StrCat("missing tensor '", hf, "' (", DTypeName(DType::kF32),
                                              ShapeText(want), ")"));
    }
    const SafetensorsEntry& e = w.entry(it->second);
    if (absl::Span<const int64_t>(e.shape) != absl::Span<const int64_t>(want)) {
      return absl::InvalidArgumentError(absl::StrCat(w.path(it->second), ": tensor '", it->second,
                                                     "' has shape ", ShapeText(e.shape),
                                                     ", config.json makes it ", ShapeText(want)));
    }
    ASSIGN_OR_RETURN(Tensor t, w.ReadF32(it->second));
    parts.push_back(std::move(t));
  }
  return parts;
}

// Checks the tensors besides the parameters: ignored buffers, tied output layers equal to what
// they are tied to, and nothing else. `used`: the canonical names consumed so far.
absl::Status CheckExtras(const models::ModelConfig& c, const HfWeights& w,
                         const std::map<std::string, std::string>& names,
                         std::set<std::string>* used) {
  const HfExtraTensors extras = HfExtras(c);
  for (const std::string& name : extras.ignored) used->insert(name);
  for (const auto& [extra, target] : extras.tied) {
    auto e = names.find(extra), t = names.find(target);
    if (e == names.end()) continue;
    used->insert(extra);
    if (t == names.end()) continue;  // Reported as missing already, unless optional.
    ASSIGN_OR_RETURN(const Tensor a, w.ReadF32(e->second));
    ASSIGN_OR_RETURN(const Tensor b, w.ReadF32(t->second));
    if (a.shape() != b.shape() || std::memcmp(a.data(), b.data(), a.nbytes()) != 0) {
      return absl::UnimplementedError(
          absl::StrCat("tensor '", e->second, "' differs from '", t->second,
                       "': an untied output layer, which this model cannot hold"));
    }
  }
  for (const auto& [canonical, stored] : names) {
    if (used->count(canonical) == 0) {
      return absl::UnimplementedError(absl::StrCat(
          w.path(stored), ": tensor '", stored,
          "' has no place in the model (another architecture or head?); remove it to convert"));
    }
  }
  return absl::OkStatus();
}

// Every parameter of `store` from the Hugging Face tensors; *dtype: the word embedding's (the
// file's dtype; buffers may be stored in another).
absl::Status FillFromHf(const models::ModelConfig& c, const HfWeights& w, nn::ParameterStore* store,
                        std::vector<std::string>* initialized, DType* dtype) {
  ASSIGN_OR_RETURN(const auto names, CanonicalHfNames(c, w.names()));
  std::set<std::string> used;
  const std::vector<HfTensorMap> maps = HfTensorMaps(c);
  CHECK_EQ(static_cast<int>(maps.size()), store->size()) << "hf_layout.cc is out of date";
  for (const HfTensorMap& map : maps) {
    absl::StatusOr<int> handle = store->Find(map.ours);
    CHECK(handle.ok()) << map.ours << ": " << handle.status();
    bool absent = false;
    ASSIGN_OR_RETURN(std::vector<Tensor> parts,
                     ReadParts(w, names, map, store->spec(*handle).global_shape, c, &absent));
    for (const std::string& hf : map.hf) used.insert(hf);
    if (parts.empty()) {
      initialized->push_back(map.ours);
      continue;
    }
    if (&map == &maps.front()) *dtype = w.entry(names.at(map.hf[0])).dtype;
    HfToOurs(map, parts, c, store->value(*handle));
  }
  return CheckExtras(c, w, names, &used);
}

std::string ConversionStateJson(const HfConfig& config, DType dtype) {
  Json j = {
      {"converted_from", kConvertedFrom},    {"hf_dtype", std::string(SafetensorsDTypeName(dtype))},
      {"model_type", config.model_type},     {"bos_token_id", config.bos_token_id},
      {"eos_token_id", config.eos_token_id}, {"pad_token_id", config.pad_token_id}};
  return j.dump();
}

// Saves the TP-1 store as iteration 0 with tp_size shards.
absl::Status SaveConverted(const HfImportOptions& o, const HfImportResult& result,
                           const nn::ParameterStore& store) {
  FileSystem& fs = *o.fs;
  if (fs.PathExists(IterationDir(o.save_dir, 0))) {
    return absl::AlreadyExistsError(
        absl::StrCat(IterationDir(o.save_dir, 0), " exists; save to an empty directory"));
  }
  CheckpointMetadata meta;
  meta.model_config_json = result.config.model.ToJson();
  meta.trainer_state_json = ConversionStateJson(result.config, result.source_dtype);
  std::vector<TensorRecord> records;
  for (int i = 0; i < store.size(); ++i) {
    records.push_back(ParameterRecord(store, i, store.flat_values(), store.spec(i).name));
  }
  if (o.tp_size == 1) {
    RETURN_IF_ERROR(SaveShard(o.save_dir, meta, records, fs));
    return CommitCheckpoint(o.save_dir, 0, 1, /*keep_last=*/0, /*pp_size=*/1, /*ep_size=*/1, fs);
  }
  // Serial first, then split by the resharding code (vocabulary re-padded for tp_size).
  const std::string serial = HfPath(o.save_dir, ".hf_import_tp1");
  RETURN_IF_ERROR(fs.RemoveAll(serial));
  RETURN_IF_ERROR(SaveShard(serial, meta, records, fs));
  RETURN_IF_ERROR(
      CommitCheckpoint(serial, 0, 1, /*keep_last=*/0, /*pp_size=*/1, /*ep_size=*/1, fs));
  RETURN_IF_ERROR(ReshardCheckpoint(serial, 0, o.save_dir, o.tp_size,
                                    result.config.model.vocab_size, result.padded_vocab, fs));
  return fs.RemoveAll(serial);
}

// Copies the tokenizer files in `names` from `from` (name -> source path) into dir; returns the
// names copied.
absl::StatusOr<std::vector<std::string>> CopyFiles(
    FileSystem& fs, const std::vector<std::pair<std::string, std::string>>& from,
    const std::string& dir) {
  std::vector<std::string> copied;
  for (const auto& [name, source] : from) {
    if (!fs.PathExists(source)) continue;
    ASSIGN_OR_RETURN(const std::string bytes, fs.ReadFile(source));
    RETURN_IF_ERROR(fs.CreateDirectories(dir));
    RETURN_IF_ERROR(WriteFile(fs, HfPath(dir, name), bytes, Sync::kFsync));
    copied.push_back(name);
  }
  return copied;
}

std::vector<std::pair<std::string, std::string>> TokenizerFilesIn(const std::string& dir) {
  std::vector<std::pair<std::string, std::string>> files;
  for (const char* name : kTokenizerFiles) files.push_back({name, HfPath(dir, name)});
  return files;
}

}  // namespace

absl::StatusOr<HfImportResult> ImportHfCheckpoint(const HfImportOptions& o) {
  HfImportResult result;
  const std::string config_path = HfPath(o.input_dir, kHfConfigFile);
  absl::StatusOr<std::string> text = o.fs->ReadFile(config_path);
  if (!text.ok()) {
    return absl::NotFoundError(absl::StrCat(config_path, ": cannot read (", text.status().message(),
                                            "); is ", o.input_dir,
                                            " a Hugging Face model directory?"));
  }
  ASSIGN_OR_RETURN(result.config, ParseHfConfig(config_path, *text));
  const models::ModelConfig& c = result.config.model;
  absl::Status parallel = c.ValidateParallel(o.tp_size);
  if (!parallel.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(config_path, ": ", parallel.message()));
  }
  result.padded_vocab = c.PaddedVocab(o.tp_size);
  ASSIGN_OR_RETURN(const HfWeights weights, HfWeights::Open(o.input_dir, *o.fs));
  ASSIGN_OR_RETURN(SerialModel serial, BuildSerial(c, o.seed));
  RETURN_IF_ERROR(
      FillFromHf(c, weights, serial.store.get(), &result.initialized, &result.source_dtype));
  RETURN_IF_ERROR(SaveConverted(o, result, *serial.store));
  ASSIGN_OR_RETURN(result.tokenizer_files, CopyFiles(*o.fs, TokenizerFilesIn(o.input_dir),
                                                     HfPath(o.save_dir, kHfTokenizerDir)));
  return result;
}

std::optional<HfConversionState> ParseHfConversionState(const std::string& trainer_state_json) {
  const Json j = Json::parse(trainer_state_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || j.value("converted_from", "") != kConvertedFrom) {
    return std::nullopt;
  }
  HfConversionState s;
  absl::StatusOr<DType> dtype = ParseSafetensorsDType(j.value("hf_dtype", "F32"));
  if (dtype.ok() && IsFloating(*dtype)) s.hf_dtype = *dtype;
  s.config.model_type = j.value("model_type", "");
  s.config.bos_token_id = j.value("bos_token_id", int64_t{-1});
  s.config.eos_token_id = j.value("eos_token_id", int64_t{-1});
  s.config.pad_token_id = j.value("pad_token_id", int64_t{-1});
  return s;
}

namespace {

// `t` (f32) in `dtype`, rounded to nearest even.
Tensor Narrow(Tensor t, DType dtype) {
  if (dtype == DType::kF32) return t;
  Tensor out = Tensor::Host(t.shape(), dtype);
  const float* src = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::kBF16) {
      out.data_as<bf16>()[i] = FloatToBf16(src[i]);
    } else {
      out.data_as<f16>()[i] = FloatToHalf(src[i]);
    }
  }
  return out;
}

const char* TorchDtype(DType dtype) {
  return dtype == DType::kBF16 ? "bfloat16" : dtype == DType::kF16 ? "float16" : "float32";
}

// The token ids a checkpoint trained here gets: GPT-2's <|endoftext|> (the last id of its
// 50,257), BERT's [PAD] (0).
HfConfig DefaultTokenIds(const models::ModelConfig& c) {
  HfConfig h;
  h.model = c;
  if (c.family == models::Family::kGpt2 && c.vocab_size == 50257) {
    h.bos_token_id = h.eos_token_id = 50256;
  } else if (c.family == models::Family::kBert) {
    h.pad_token_id = 0;
  }
  return h;
}

}  // namespace

absl::StatusOr<HfExportResult> ExportHfCheckpoint(const HfExportOptions& o) {
  HfExportResult result;
  ASSIGN_OR_RETURN(const CheckpointModel ckpt, ReadCheckpointModel(o.load_dir, o.iteration, *o.fs));
  ASSIGN_OR_RETURN(
      const CheckpointMetadata meta,
      ReadShardMetadata(o.load_dir, ckpt.iteration, /*tp_rank=*/0, /*pp_rank=*/0, *o.fs));
  const std::optional<HfConversionState> converted =
      ParseHfConversionState(meta.trainer_state_json);
  result.config = DefaultTokenIds(ckpt.config);
  if (converted.has_value()) {
    result.config.bos_token_id = converted->config.bos_token_id;
    result.config.eos_token_id = converted->config.eos_token_id;
    result.config.pad_token_id = converted->config.pad_token_id;
    result.config.model_type = converted->config.model_type;
  }
  result.dtype = o.dtype.value_or(converted.has_value() ? converted->hf_dtype : DType::kF32);
  if (!IsFloating(result.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("export dtype ", DTypeName(result.dtype), ": must be f32, bf16 or f16"));
  }
  ASSIGN_OR_RETURN(const std::string config_json,
                   HfConfigJson(result.config, TorchDtype(result.dtype)));
  ASSIGN_OR_RETURN(SerialModel serial, BuildSerial(ckpt.config, /*seed=*/1));
  RETURN_IF_ERROR(LoadParameters(ckpt, ExecContext(), serial.store.get()).status());
  std::vector<Tensor> owned;  // Moving a Tensor keeps its memory where the views point.
  std::vector<NamedTensor> tensors;
  for (const HfTensorMap& map : HfTensorMaps(ckpt.config)) {
    ASSIGN_OR_RETURN(const int handle, serial.store->Find(map.ours));
    std::vector<Tensor> parts = OursToHf(map, serial.store->value(handle), ckpt.config);
    for (size_t k = 0; k < parts.size(); ++k) {
      owned.push_back(Narrow(std::move(parts[k]), result.dtype));
      tensors.push_back({map.hf[k], owned.back().view()});
    }
  }
  result.tensors = static_cast<int64_t>(tensors.size());
  FileSystem& fs = *o.fs;
  RETURN_IF_ERROR(fs.CreateDirectories(o.save_dir));
  RETURN_IF_ERROR(WriteSafetensors(HfPath(o.save_dir, kHfWeightsFile), tensors, {{"format", "pt"}},
                                   Sync::kFsync, fs));
  RETURN_IF_ERROR(WriteFile(fs, HfPath(o.save_dir, kHfConfigFile), config_json, Sync::kFsync));
  const std::string own = HfPath(o.load_dir, kHfTokenizerDir);
  ASSIGN_OR_RETURN(
      result.tokenizer_files,
      CopyFiles(fs, fs.IsDirectory(own) ? TokenizerFilesIn(own) : o.default_tokenizer_files,
                o.save_dir));
  return result;
}

}  // namespace checkpoint
}  // namespace mt

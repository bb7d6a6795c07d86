#include "checkpoint/checkpoint_testutil.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace checkpoint {
namespace testing {

namespace {

Tensor RandomBits(const Shape& shape, DType dtype, uint64_t seed) {
  Tensor t = Tensor::Host(shape, dtype);
  std::mt19937_64 rng(seed);
  auto* p = static_cast<unsigned char*>(t.data());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(rng());
  return t;
}

// Flat index -> multi-index -> flat index in another shape, with an offset on one dimension.
int64_t MapIndex(int64_t flat, const Shape& from, const Shape& to, int dim, int64_t offset) {
  Shape idx(from.size());
  for (int d = static_cast<int>(from.size()) - 1; d >= 0; --d) {
    idx[d] = flat % from[d];
    flat /= from[d];
  }
  if (dim >= 0) idx[dim] += offset;
  int64_t out = 0;
  for (size_t d = 0; d < to.size(); ++d) out = out * to[d] + idx[d];
  return out;
}

}  // namespace

int64_t PaddedVocab(int tp) {
  const int64_t m = kVocabMultiple * tp;
  return (kRealVocab + m - 1) / m * m;
}

std::vector<SyntheticTensor> SyntheticModel(int64_t padded_vocab, uint64_t seed, int64_t big_rows) {
  struct Spec {
    const char* name;
    Shape shape;
    int split_dim;
    bool vocab_padded;
    DType dtype;
  };
  const int64_t P = padded_vocab;
  std::vector<Spec> specs = {
      {"embedding.word.weight", {P, 6}, 0, true, DType::kF32},
      {"layers.0.qkv.weight", {12, 6}, 0, false, DType::kF32},
      {"layers.0.qkv.bias", {12}, 0, false, DType::kBF16},
      {"layers.0.dense.weight", {6, 8}, 1, false, DType::kF16},
      {"layers.0.mixed", {3, 8, 5}, 1, false, DType::kF32},
      {"layers.0.heads", {2, 3, 4}, 2, false, DType::kI32},
      {"layers.0.ln.weight", {6}, -1, false, DType::kF32},
      {"lm_head.bias", {P}, 0, true, DType::kBF16},
      {"optimizer.exp_avg.embedding.word.weight", {P, 6}, 0, true, DType::kF32},
      {"optimizer.step", {}, -1, false, DType::kI64},
      {"tokens", {3}, -1, false, DType::kU16},
      {"empty", {0, 8}, 1, false, DType::kF32},
  };
  if (big_rows > 0) specs.push_back({"big", {big_rows, 256}, 0, false, DType::kF32});
  std::vector<SyntheticTensor> model;
  for (size_t i = 0; i < specs.size(); ++i) {
    const Spec& s = specs[i];
    model.push_back({s.name, s.shape, s.split_dim, s.vocab_padded,
                     RandomBits(s.shape, s.dtype, seed * 1000003 + i)});
  }
  return model;
}

std::vector<SyntheticTensor> Repadded(const std::vector<SyntheticTensor>& model,
                                      int64_t new_padded) {
  std::vector<SyntheticTensor> out;
  for (const SyntheticTensor& t : model) {
    Shape shape = t.global_shape;
    if (t.vocab_padded) shape[0] = new_padded;
    Tensor g = Tensor::Zeros(shape, t.global.dtype());
    const size_t es = DTypeSize(g.dtype());
    const int64_t keep_rows = t.vocab_padded ? kRealVocab : shape.empty() ? 1 : shape[0];
    const int64_t per_row =
        shape.empty() ? 1 : NumElements(absl::Span<const int64_t>(shape).subspan(1));
    for (int64_t i = 0; i < keep_rows * per_row; ++i) {
      std::memcpy(static_cast<char*>(g.data()) + i * es,
                  static_cast<const char*>(t.global.data()) + i * es, es);
    }
    out.push_back({t.name, shape, t.split_dim, t.vocab_padded, std::move(g)});
  }
  return out;
}

Tensor SliceOf(const TensorView& global, int split_dim, int rank, int tp) {
  Shape local_shape = global.shape;
  int64_t offset = 0;
  if (split_dim >= 0) {
    local_shape[split_dim] /= tp;
    offset = rank * local_shape[split_dim];
  }
  Tensor local = Tensor::Host(local_shape, global.dtype);
  const size_t es = DTypeSize(global.dtype);
  for (int64_t i = 0; i < local.numel(); ++i) {
    const int64_t g = MapIndex(i, local_shape, global.shape, split_dim, offset);
    std::memcpy(static_cast<char*>(local.data()) + i * es,
                static_cast<const char*>(global.data) + g * es, es);
  }
  return local;
}

std::vector<TensorRecord> FilledRecords(const std::vector<SyntheticTensor>& model, int rank, int tp,
                                        std::vector<Tensor>* storage) {
  std::vector<TensorRecord> records;
  for (const SyntheticTensor& t : model) {
    storage->push_back(SliceOf(t.global.view(), t.split_dim, rank, tp));
    records.push_back(
        {t.name, t.global_shape, t.split_dim, t.vocab_padded, storage->back().view()});
  }
  return records;
}

std::vector<TensorRecord> ZeroRecords(const std::vector<SyntheticTensor>& model, int rank, int tp,
                                      std::vector<Tensor>* storage) {
  std::vector<TensorRecord> records;
  for (const SyntheticTensor& t : model) {
    Shape shape = t.global_shape;
    if (t.split_dim >= 0) shape[t.split_dim] /= tp;
    storage->push_back(Tensor::Zeros(shape, t.global.dtype()));
    records.push_back(
        {t.name, t.global_shape, t.split_dim, t.vocab_padded, storage->back().view()});
  }
  return records;
}

std::string ConfigJson() {
  return absl::StrCat(R"({"family": "gpt2", "num_layers": 1, "hidden_size": 6, )",
                      R"("num_attention_heads": 2, "vocab_size": )", kRealVocab,
                      R"(, "make_vocab_size_divisible_by": )", kVocabMultiple,
                      R"(, "layernorm_eps": 1e-05, "position_embeddings": true})");
}

CheckpointMetadata SyntheticMeta(int64_t iteration, int tp_rank, int tp_size) {
  CheckpointMetadata meta;
  meta.model_config_json = ConfigJson();
  meta.tp_size = tp_size;
  meta.tp_rank = tp_rank;
  meta.dp_size = 2;
  meta.iteration = iteration;
  meta.consumed_samples = iteration * 32 + 7;
  meta.trainer_state_json = absl::StrCat(
      R"({"step": )", iteration,
      R"(, "loss_scale": 65536.0, "rng": [1, 18446744073709551615], "note": "h\u00e9 )",
      "caf\xC3\xA9\n\ttab\"}");
  return meta;
}

absl::Status SaveModel(const std::string& dir, const std::vector<SyntheticTensor>& model, int tp,
                       int64_t iteration, int keep_last) {
  for (int r = 0; r < tp; ++r) {
    std::vector<Tensor> storage;
    RETURN_IF_ERROR(
        SaveShard(dir, SyntheticMeta(iteration, r, tp), FilledRecords(model, r, tp, &storage)));
  }
  return CommitCheckpoint(dir, iteration, tp, keep_last);
}

std::vector<int> TwoStages(const std::string& name) {
  if (absl::StrContains(name, "embedding.word")) return {0, 1};
  if (absl::StartsWith(name, "layers.0.qkv") || name == "tokens") return {0};
  return {1};
}

std::vector<SyntheticTensor> StageTensors(
    const std::vector<SyntheticTensor>& model, int stage,
    const std::function<std::vector<int>(const std::string&)>& stages_of) {
  std::vector<SyntheticTensor> out;
  for (const SyntheticTensor& t : model) {
    const std::vector<int> stages = stages_of(t.name);
    if (std::find(stages.begin(), stages.end(), stage) == stages.end()) continue;
    Tensor copy = Tensor::Zeros(t.global_shape, t.global.dtype());
    if (copy.nbytes() > 0) std::memcpy(copy.data(), t.global.data(), copy.nbytes());
    out.push_back({t.name, t.global_shape, t.split_dim, t.vocab_padded, std::move(copy)});
  }
  return out;
}

absl::Status SaveStages(const std::string& dir, const std::vector<SyntheticTensor>& model, int tp,
                        int pp, int64_t iteration,
                        const std::function<std::vector<int>(const std::string&)>& stages_of) {
  for (int p = 0; p < pp; ++p) {
    const std::vector<SyntheticTensor> stage = StageTensors(model, p, stages_of);
    for (int r = 0; r < tp; ++r) {
      std::vector<Tensor> storage;
      CheckpointMetadata meta = SyntheticMeta(iteration, r, tp);
      meta.pp_size = pp;
      meta.pp_rank = p;
      RETURN_IF_ERROR(SaveShard(dir, meta, FilledRecords(stage, r, tp, &storage)));
    }
  }
  return CommitCheckpoint(dir, iteration, tp, /*keep_last=*/0, pp);
}

::testing::AssertionResult HoldsModel(
    const std::string& dir, int64_t iteration, int tp, const std::vector<SyntheticTensor>& model,
    int pp, const std::function<std::vector<int>(const std::string&)>& stages_of) {
  for (int p = 0; p < pp; ++p) {
    const std::vector<SyntheticTensor> expected =
        pp == 1 ? StageTensors(model, 0, [](const std::string&) { return std::vector<int>{0}; })
                : StageTensors(model, p, stages_of);
    for (int r = 0; r < tp; ++r) {
      std::vector<Tensor> storage;
      const std::vector<TensorRecord> records = ZeroRecords(expected, r, tp, &storage);
      CheckpointMetadata meta;
      absl::Status s = LoadShard(dir, iteration, r, tp, ConfigJson(), records, &meta, p, pp);
      if (!s.ok()) return ::testing::AssertionFailure() << "rank " << r << "/" << p << ": " << s;
      for (size_t i = 0; i < expected.size(); ++i) {
        const SyntheticTensor& t = expected[i];
        Tensor want = SliceOf(t.global.view(), t.split_dim, r, tp);
        if (Bytes(records[i].local) != Bytes(want.view())) {
          return ::testing::AssertionFailure() << "rank " << r << " of " << tp << ", stage " << p
                                               << ": tensor '" << t.name << "' differs";
        }
      }
      const CheckpointMetadata want = SyntheticMeta(iteration, r, tp);
      if (meta.tp_size != tp || meta.tp_rank != r || meta.pp_size != pp || meta.pp_rank != p ||
          meta.dp_size != want.dp_size || meta.iteration != iteration ||
          meta.consumed_samples != want.consumed_samples ||
          meta.trainer_state_json != want.trainer_state_json ||
          nlohmann::json::parse(meta.model_config_json, nullptr, false) !=
              nlohmann::json::parse(want.model_config_json, nullptr, false)) {
        return ::testing::AssertionFailure() << "rank " << r << "/" << p << ": metadata differs";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

std::string Bytes(const TensorView& v) {
  return std::string(static_cast<const char*>(v.data), v.nbytes());
}

std::string FreshDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "checkpoint_test_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

// Runs `command`, which prints "<digest> <path>" lines, and maps each path to its digest.
std::map<std::string, std::string> DigestsPrinted(const std::string& command) {
  std::map<std::string, std::string> out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    ADD_FAILURE() << "cannot run " << command;
    return out;
  }
  char line[4096];
  while (fgets(line, sizeof line, pipe) != nullptr) {
    std::istringstream fields(line);
    std::string digest, path;
    fields >> digest >> path;
    out[path] = digest;
  }
  EXPECT_EQ(pclose(pipe), 0) << command;
  return out;
}

}  // namespace

std::map<std::string, std::string> Sha256sum(const std::vector<std::string>& files) {
  std::string command = "sha256sum";
  for (const std::string& f : files) absl::StrAppend(&command, " '", f, "'");
  return DigestsPrinted(command);
}

std::map<std::string, std::string> Crc32cOfFiles(const std::vector<std::string>& files) {
  // Debian's python3-crc32c is visible to the system Python only.
  std::string command =
      "/usr/bin/python3 -c 'import crc32c, sys\n"
      "for f in sys.argv[1:]: print(\"%08x %s\" % (crc32c.crc32c(open(f, \"rb\").read()), f))'";
  for (const std::string& f : files) absl::StrAppend(&command, " '", f, "'");
  return DigestsPrinted(command);
}

}  // namespace testing
}  // namespace checkpoint
}  // namespace mt

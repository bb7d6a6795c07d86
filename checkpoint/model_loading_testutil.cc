#include "checkpoint/model_loading_testutil.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/parameter_records.h"
#include "core/status.h"
#include "models/registry.h"
#include "nn/parameter_testutil.h"

namespace mt {
namespace checkpoint {
namespace testing {

namespace {

// Calls fn(local_index, global_index) for every element of parameter `handle`'s slice.
template <typename Fn>
void ForEachElement(const nn::ParameterStore& store, int handle, Fn&& fn) {
  const Shape& local = store.value(handle).shape;
  const int64_t n = NumElements(local);
  for (int64_t i = 0; i < n; ++i) {
    fn(i, nn::testing::GlobalIndexOf(store.spec(handle), local, store.tp_rank(), i));
  }
}

}  // namespace

float PatternValue(const std::string& name, int64_t global_index) {
  // splitmix64 of (name hash, index): 24 well-mixed bits -> (-1, 1).
  uint64_t z = nn::NameHash(name) + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(global_index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (static_cast<float>(z >> 40) + 0.5f) / 8388608.0f - 1.0f;
}

models::ModelConfig TinyConfig(models::Family family, int num_layers, int heads, int64_t vocab_size,
                               int64_t vocab_multiple) {
  models::ModelConfig c =
      models::ModelConfig::Sized(family, num_layers, 16, heads, vocab_size, /*positions=*/8);
  c.make_vocab_size_divisible_by = vocab_multiple;
  return c;
}

absl::StatusOr<std::vector<RankModel>> BuildRanks(const models::ModelConfig& config, int tp,
                                                  uint64_t seed,
                                                  const models::ModelOptions& options) {
  std::vector<RankModel> ranks(tp);
  for (int r = 0; r < tp; ++r) {
    ranks[r].store = std::make_unique<nn::ParameterStore>(r, tp);
    ASSIGN_OR_RETURN(ranks[r].model, models::CreateModel(config, ranks[r].store.get(), options));
    RETURN_IF_ERROR(ranks[r].store->Allocate(seed));
  }
  return ranks;
}

absl::Status FillWithPattern(nn::ParameterStore* store) {
  for (int i = 0; i < store->size(); ++i) {
    float* v = store->value(i).data_as<float>();
    const std::string& name = store->spec(i).name;
    ForEachElement(*store, i, [&](int64_t l, int64_t g) { v[l] = PatternValue(name, g); });
  }
  return store->RefreshComputeWeights(ExecContext{});
}

absl::Status SaveRanks(const std::string& dir, int64_t iteration,
                       const std::string& model_config_json, const std::string& model_name,
                       const std::vector<RankModel>& ranks, bool with_optimizer) {
  const int tp = static_cast<int>(ranks.size());
  for (int r = 0; r < tp; ++r) {
    const nn::ParameterStore& store = *ranks[r].store;
    CheckpointMetadata meta;
    meta.model_config_json = model_config_json;
    meta.tp_size = tp;
    meta.tp_rank = r;
    meta.iteration = iteration;
    meta.trainer_state_json = "{}";
    meta.model_name = model_name;
    ASSIGN_OR_RETURN(Tensor doubled, store.CopyValuesToHost(ExecContext{}));
    float* d = doubled.data_as<float>();
    for (int64_t i = 0; i < doubled.numel(); ++i) d[i] *= 2;
    std::vector<TensorRecord> records;
    for (int i = 0; i < store.size(); ++i) {
      const std::string& name = store.spec(i).name;
      records.push_back(ParameterRecord(store, i, store.flat_values(), name));
      if (with_optimizer) {
        records.push_back(ParameterRecord(store, i, doubled.view(),
                                          absl::StrCat(kOptimizerTensorPrefix, "exp_avg.", name)));
      }
    }
    RETURN_IF_ERROR(SaveShard(dir, meta, records));
  }
  return CommitCheckpoint(dir, iteration, tp, /*keep_last=*/0);
}

::testing::AssertionResult HoldsPattern(const nn::ParameterStore& store, const ExecContext& ctx,
                                        int64_t real_vocab, const std::vector<std::string>& skip) {
  absl::StatusOr<Tensor> host = store.CopyValuesToHost(ctx);
  if (!host.ok()) return ::testing::AssertionFailure() << host.status();
  for (int i = 0; i < store.size(); ++i) {
    const nn::ParamSpec& spec = store.spec(i);
    if (std::find(skip.begin(), skip.end(), spec.name) != skip.end()) continue;
    const float* v = host->data_as<float>() + store.offset(i);
    const int64_t row = NumElements(spec.global_shape) / spec.global_shape[0];
    int64_t bad = -1;
    float want = 0;
    ForEachElement(store, i, [&](int64_t l, int64_t g) {
      const bool padding = spec.vocab_padded && g / row >= real_vocab;
      const float w = padding ? 0.0f : PatternValue(spec.name, g);
      if (bad < 0 && std::memcmp(&v[l], &w, sizeof(float)) != 0) {
        bad = g;
        want = w;
      }
    });
    if (bad >= 0) {
      return ::testing::AssertionFailure()
             << "rank " << store.tp_rank() << " of " << store.tp_size() << ": parameter '"
             << spec.name << "' global element " << bad << " is not " << want;
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace testing
}  // namespace checkpoint
}  // namespace mt

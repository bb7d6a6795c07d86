// Generation speed with and without the key/value cache (docs/perf/generation.md): a GPT-2 of the
// given size (random weights: speed does not depend on them) greedily continues --batch random
// prompts of --prompt_length tokens by --tokens tokens, once through the cache
// (Decoding::kCache) and once recomputing every prefix (Decoding::kRecompute); prints the
// generated tokens per second of each, best of --repeats, and checks both produced the same tokens.
//
//   bazel run -c opt //jobs/serve:generate_bench -- --num_layers=4 --hidden_size=256
//   --prompt_length=128
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/config_flags.h"
#include "core/precision.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "core/tool_main.h"
#include "gflags/gflags.h"
#include "models/gpt2/gpt2.h"
#include "serve/generate.h"

namespace mt {
namespace jobs {

using serve::Decoding;
using serve::Generate;
using serve::GenerateConfig;
using serve::Generation;
namespace {

struct BenchConfig {
  models::ModelConfig model;
  int64_t prompt_length = 128;
  int64_t tokens = 64;
  int batch = 1;
  int threads = 0;           // 0: every core.
  PrecisionFlags precision;  // The CPU's: f32 unless --bf16 (or --fp16).
  int repeats = 3;

  BenchConfig() {
    model.num_layers = 4;
    model.hidden_size = 256;
    model.num_attention_heads = 4;
    model.max_position_embeddings = 1024;
    model.hidden_dropout = model.attention_dropout = 0.0f;
  }

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("num_layers", &self.model.num_layers, "Transformer layers.");
    v("hidden_size", &self.model.hidden_size, "Hidden size.");
    v("num_attention_heads", &self.model.num_attention_heads, "Attention heads.");
    v("prompt_length", &self.prompt_length, "Tokens of each prompt.");
    v("tokens", &self.tokens, "Tokens generated per prompt.");
    v("batch", &self.batch, "Prompts generated together.");
    v("threads", &self.threads, "CPU threads (0: every core).");
    PrecisionFlags::Fields(self.precision, v);
    v("repeats", &self.repeats, "Runs of each mode; the fastest counts.");
  }
};

// Seconds of the fastest of `repeats` generations, and their tokens.
absl::StatusOr<double> Time(const BenchConfig& c, models::Model& model, const nn::StepContext& sc,
                            const std::vector<std::vector<int32_t>>& prompts, Decoding decoding,
                            std::vector<Generation>* out) {
  GenerateConfig g;
  g.tokens_to_generate = c.tokens;
  g.sampling.greedy = true;
  g.decoding = decoding;
  double best = 1e300;
  for (int r = 0; r < std::max(1, c.repeats); ++r) {
    const auto start = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(*out, Generate(sc, model, prompts, g));
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

absl::Status Run(const BenchConfig& c) {
  ThreadPool pool(c.threads > 0 ? c.threads
                                : static_cast<int>(std::thread::hardware_concurrency()));
  ExecContext ec;
  ec.pool = &pool;
  ASSIGN_OR_RETURN(const DType dtype, c.precision.Resolve(DeviceType::kCpu));
  nn::ParameterStore store(0, 1, dtype);
  ASSIGN_OR_RETURN(std::unique_ptr<models::GptModel> model,
                   models::GptModel::Create(c.model, &store));
  RETURN_IF_ERROR(store.Allocate(1));
  const nn::StepContext sc = nn::StepContext::Eval(&ec);
  std::vector<std::vector<int32_t>> prompts(c.batch);
  for (int b = 0; b < c.batch; ++b) {
    for (int64_t i = 0; i < c.prompt_length; ++i) {
      prompts[b].push_back(static_cast<int32_t>((i * 7919 + b * 104729) % c.model.vocab_size));
    }
  }
  std::vector<Generation> cached, recomputed;
  ASSIGN_OR_RETURN(const double t_cache, Time(c, *model, sc, prompts, Decoding::kCache, &cached));
  ASSIGN_OR_RETURN(const double t_full,
                   Time(c, *model, sc, prompts, Decoding::kRecompute, &recomputed));
  bool same = true;
  for (int b = 0; b < c.batch; ++b) same = same && cached[b].tokens == recomputed[b].tokens;
  const double n = static_cast<double>(c.batch * c.tokens);
  std::printf(
      "GPT-2 %d layers, hidden %lld, %d heads (%.1fM parameters), %s, %d threads; batch %d, "
      "prompt %lld, %lld new tokens each\n",
      c.model.num_layers, static_cast<long long>(c.model.hidden_size), c.model.num_attention_heads,
      store.NumGlobalElements() / 1e6, std::string(DTypeName(dtype)).c_str(), pool.num_threads(),
      c.batch, static_cast<long long>(c.prompt_length), static_cast<long long>(c.tokens));
  std::printf("with the cache:   %.3f s, %.1f tokens/s\n", t_cache, n / t_cache);
  std::printf("recomputing:      %.3f s, %.1f tokens/s\n", t_full, n / t_full);
  std::printf("speed-up %.1fx; the same tokens: %s\n", t_full / t_cache, same ? "yes" : "NO");
  return same ? absl::OkStatus() : absl::InternalError("the two modes generated different tokens");
}

}  // namespace
}  // namespace jobs
}  // namespace mt

int main(int argc, char** argv) {
  mt::jobs::BenchConfig config;
  const mt::ConfigFlags<mt::jobs::BenchConfig> flags(config);
  return mt::ToolMain("generate_bench", "Generation tokens/s with and without the key/value cache.",
                      argc, argv, [&]() -> absl::Status {
                        RETURN_IF_ERROR(flags.ApplyGiven(&config));
                        return mt::jobs::Run(config);
                      });
}

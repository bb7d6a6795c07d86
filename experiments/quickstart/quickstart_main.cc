// Quickstart: the end-to-end demo of what the stack has today. Trains a byte-level MLP language
// model (char_lm.h), built only from core ops, on the embedded default corpus (the Debian
// `fortunes` package that ./bazelw installs), reports the falling training loss, the validation
// loss against the unigram baseline, and prints a generated sample.
//
//   ./bazelw run //experiments/quickstart -- [--steps=N] [--hidden=H] [--threads=T] ...
//
// When the transformer (nn/, models/) and the trainer (train/) land, this binary becomes the
// TP=2 GPT-2 quickstart that the README describes.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/thread_pool.h"
#include "experiments/quickstart/char_lm.h"
#include "gflags/gflags.h"

DEFINE_string(corpus_dir, "/usr/share/games/fortunes",
              "Directory of plain-text files (the Debian fortunes package by default).");
DEFINE_int32(steps, 3000, "Training steps.");
DEFINE_int32(batch, 128, "Examples per step.");
DEFINE_int32(context, 16, "Bytes of context per prediction.");
DEFINE_int32(embed, 24, "Embedding width per byte.");
DEFINE_int32(hidden, 384, "Hidden width.");
DEFINE_double(lr, 2e-3, "Adam learning rate.");
DEFINE_int32(threads, 0, "CPU threads (0: all cores).");
DEFINE_int32(log_interval, 250, "Steps between log lines.");
DEFINE_int32(eval_positions, 20000, "Validation positions scored at each evaluation.");
DEFINE_int32(sample_bytes, 400, "Bytes to generate at the end.");
DEFINE_uint64(seed, 1234, "Seed for initialisation, batches and sampling.");

namespace mt {
namespace quickstart {
namespace {

absl::StatusOr<std::string> ReadCorpus(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(
        "corpus directory ", dir, " not found; run ./bazelw once (tools/setup.sh installs the "
        "Debian fortunes package) or pass --corpus_dir"));
  }
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const fs::path& p = entry.path();
    if (!entry.is_regular_file() || p.extension() == ".dat" || p.extension() == ".u8") continue;
    files.push_back(p);
  }
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& p : files) {
    std::ifstream in(p, std::ios::binary);
    text.append(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (text.size() < 100000) {
    return absl::FailedPreconditionError(absl::StrCat("corpus in ", dir, " has only ", text.size(),
                                                      " bytes; need at least 100000"));
  }
  return text;
}

// Cross-entropy (nats/byte) of `valid` under the add-one-smoothed byte unigram of `train`.
double UnigramBaseline(const std::string& train, const std::string& valid) {
  std::vector<double> counts(256, 1.0);
  for (unsigned char c : train) counts[c] += 1;
  const double total = train.size() + 256.0;
  double nll = 0;
  for (unsigned char c : valid) nll -= std::log(counts[c] / total);
  return nll / valid.size();
}

struct Batch {
  Tensor contexts;  // i32 [B, K]
  Tensor targets;   // i32 [B]
};

void FillBatch(const std::string& text, const std::vector<int64_t>& positions, int K,
               Batch* batch) {
  int32_t* ctx = batch->contexts.data_as<int32_t>();
  int32_t* tgt = batch->targets.data_as<int32_t>();
  for (size_t b = 0; b < positions.size(); ++b) {
    const int64_t t = positions[b];
    for (int k = 0; k < K; ++k) ctx[b * K + k] = static_cast<unsigned char>(text[t - K + k]);
    tgt[b] = static_cast<unsigned char>(text[t]);
  }
}

absl::StatusOr<double> Evaluate(CharLm& model, const ExecContext& ctx, const std::string& valid,
                                int positions) {
  const int K = model.config().context, B = model.config().batch;
  const int64_t usable = static_cast<int64_t>(valid.size()) - K;
  positions = static_cast<int>(std::min<int64_t>(positions, usable));
  double total = 0;
  int done = 0;
  Batch batch{Tensor::Host({B, K}, DType::kI32), Tensor::Host({B}, DType::kI32)};
  std::vector<int64_t> pos;
  while (done < positions) {
    const int rows = std::min(B, positions - done);
    pos.clear();
    // Evenly spaced positions over the whole validation text.
    for (int r = 0; r < rows; ++r) pos.push_back(K + (done + r) * usable / positions);
    FillBatch(valid, pos, K, &batch);
    auto loss = model.ForwardBackward(ctx, batch.contexts.view().Slice(0, rows),
                                      batch.targets.view().Slice(0, rows),
                                      /*compute_grad=*/false);
    if (!loss.ok()) return loss.status();
    total += *loss * rows;
    done += rows;
  }
  return total / positions;
}

std::string Printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) out += (c == '\n' || c == '\t' || (c >= 32 && c < 127) || c >= 128) ? c : '?';
  return out;
}

absl::Status Run() {
  CharLmConfig config;
  config.context = FLAGS_context;
  config.embed = FLAGS_embed;
  config.hidden = FLAGS_hidden;
  config.batch = FLAGS_batch;
  config.lr = static_cast<float>(FLAGS_lr);
  config.seed = FLAGS_seed;
  if (FLAGS_steps < 1) return absl::InvalidArgumentError("--steps must be >= 1");
  if (FLAGS_log_interval < 1) return absl::InvalidArgumentError("--log_interval must be >= 1");
  auto model_or = CharLm::Create(config);
  if (!model_or.ok()) return model_or.status();
  CharLm& model = **model_or;

  auto corpus = ReadCorpus(FLAGS_corpus_dir);
  if (!corpus.ok()) return corpus.status();
  const size_t split = corpus->size() * 9 / 10;
  const std::string train = corpus->substr(0, split), valid = corpus->substr(split);

  ThreadPool pool(FLAGS_threads);
  ExecContext ctx;
  ctx.pool = &pool;

  const double baseline = UnigramBaseline(train, valid);
  std::printf("quickstart: byte-level MLP language model on %s\n", FLAGS_corpus_dir.c_str());
  std::printf("config: context=%d embed=%d hidden=%d batch=%d lr=%g steps=%d threads=%d seed=%llu\n",
              config.context, config.embed, config.hidden, config.batch, config.lr, FLAGS_steps,
              pool.num_threads(), static_cast<unsigned long long>(config.seed));
  std::printf("corpus: %zu bytes (train %zu, valid %zu); parameters: %lld\n", corpus->size(),
              train.size(), valid.size(), static_cast<long long>(model.NumParameters()));
  std::printf("unigram baseline on valid: %.4f nats/byte (%.3f bits/byte)\n", baseline,
              baseline / std::log(2.0));

  auto initial = Evaluate(model, ctx, valid, FLAGS_eval_positions);
  if (!initial.ok()) return initial.status();
  std::printf("step %6d | valid loss %.4f\n", 0, *initial);

  std::mt19937_64 rng(config.seed);
  std::uniform_int_distribution<int64_t> pick(config.context, static_cast<int64_t>(train.size()) - 1);
  Batch batch{Tensor::Host({config.batch, config.context}, DType::kI32),
              Tensor::Host({config.batch}, DType::kI32)};
  std::vector<int64_t> pos(config.batch);
  double interval_loss = 0;
  auto interval_start = std::chrono::steady_clock::now();
  double valid_loss = *initial;
  for (int step = 1; step <= FLAGS_steps; ++step) {
    for (auto& p : pos) p = pick(rng);
    FillBatch(train, pos, config.context, &batch);
    auto loss = model.ForwardBackward(ctx, batch.contexts.view(), batch.targets.view(),
                                      /*compute_grad=*/true);
    if (!loss.ok()) return loss.status();
    if (!std::isfinite(*loss)) return absl::InternalError(absl::StrCat("loss is ", *loss, " at step ", step));
    absl::Status st = model.AdamStep(ctx, step);
    if (!st.ok()) return st;
    interval_loss += *loss;
    if (step % FLAGS_log_interval == 0 || step == FLAGS_steps) {
      const int n = step % FLAGS_log_interval == 0 ? FLAGS_log_interval : step % FLAGS_log_interval;
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                        interval_start).count();
      std::printf("step %6d | train loss %.4f | %.2f ms/step | %.0f bytes/s\n", step,
                  interval_loss / n, 1e3 * secs / n, n * config.batch / secs);
      std::fflush(stdout);
      interval_loss = 0;
      interval_start = std::chrono::steady_clock::now();
    }
    if (step % (FLAGS_log_interval * 4) == 0 || step == FLAGS_steps) {
      auto v = Evaluate(model, ctx, valid, FLAGS_eval_positions);
      if (!v.ok()) return v.status();
      valid_loss = *v;
      std::printf("step %6d | valid loss %.4f | perplexity %.2f per byte | %.3f bits/byte\n", step,
                  valid_loss, std::exp(valid_loss), valid_loss / std::log(2.0));
    }
  }
  std::printf("final valid loss %.4f vs unigram baseline %.4f: %.1f%% lower\n", valid_loss,
              baseline, 100.0 * (1.0 - valid_loss / baseline));

  // Sample with temperature 0.8 from a prompt taken from the validation text.
  std::string text = valid.substr(valid.size() / 2, config.context);
  std::uniform_real_distribution<double> unif(0.0, 1.0);
  for (int i = 0; i < FLAGS_sample_bytes; ++i) {
    std::vector<int32_t> ctx_bytes;
    for (int k = 0; k < config.context; ++k) {
      ctx_bytes.push_back(static_cast<unsigned char>(text[text.size() - config.context + k]));
    }
    auto probs = model.NextByteProbs(ctx, ctx_bytes);
    if (!probs.ok()) return probs.status();
    double z = 0;
    for (double& p : *probs) z += (p = std::pow(p, 1.0 / 0.8));
    double r = unif(rng) * z;
    int next = 255;
    for (int v = 0; v < 256; ++v) {
      if ((r -= (*probs)[v]) <= 0) {
        next = v;
        break;
      }
    }
    text.push_back(static_cast<char>(next));
  }
  std::printf("--- sample (prompt: first %d bytes) ---\n%s\n---\n", config.context,
              Printable(text).c_str());
  if (!(valid_loss < baseline)) {
    return absl::InternalError("validation loss did not fall below the unigram baseline");
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace quickstart
}  // namespace mt

int main(int argc, char** argv) {
  gflags::SetUsageMessage("Trains a byte-level language model on the embedded corpus.");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  absl::Status status = mt::quickstart::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "quickstart: error: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}

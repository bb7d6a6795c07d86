// ./bazelw run //experiments/gpt2_scaling_curves: the paper's Figure 6. Validation perplexity
// over iterations of several GPT-2 sizes trained on the same data (the embedded corpus) with the
// same token budget, batch and learning-rate schedule, in this process through the library
// (jobs/pretrain/pretrain_gpt.h). Each size trains in chunks of --eval_interval
// iterations, each chunk resuming from the previous one's checkpoint (bit-exact: the schedule is
// fixed over the whole budget, and the sample order too while the budget stays within one epoch
// of the corpus) and ending with one validation run. Writes results/<name>/:
// val_curves.csv, val_ppl.png and report.md.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status.h"
#include "experiments/common/curves.h"
#include "experiments/common/in_process.h"
#include "experiments/common/plot.h"
#include "experiments/common/report.h"
#include "experiments/gpt2_scaling_curves/scaling.h"
#include "jobs/pretrain/pretrain_gpt.h"
#include "models/count.h"

namespace mt {
namespace experiments {

using jobs::LocalRanks;
using jobs::PretrainGptConfig;
using jobs::PretrainResult;
using jobs::RunPretrainGpt;
namespace {

constexpr char kName[] = "gpt2_scaling_curves";

// The experiment's flags: the shared ones and the sizes, the validation cadence, the schedule.
struct ScalingConfig : InProcessFlags {
  std::string num_layers = "2,3,4", hidden_size = "32,64,128", num_attention_heads = "2,2,4";
  int64_t eval_interval = 20;
  int eval_iters = 8;
  double warmup_fraction = 0.1;
  int64_t seed = 1234;

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    InProcessFlags::Fields(self, v);
    v("num_layers", &self.num_layers, "Layers of each size (comma-separated, one per size).");
    v("hidden_size", &self.hidden_size, "Hidden size of each size.");
    v("num_attention_heads", &self.num_attention_heads, "Attention heads of each size.");
    v("eval_interval", &self.eval_interval, "Iterations between validation runs.");
    v("eval_iters", &self.eval_iters, "Validation micro-batches per validation run.");
    v("warmup_fraction", &self.warmup_fraction,
      "Share of the budget in linear warmup; cosine decay to lr/10.");
    v("seed", &self.seed, "Seed (initialisation, data order, dropout).");
  }
};

PretrainGptConfig MakeConfig(const ScalingConfig& f, const RunShape& shape,
                             const std::string& checkpoints) {
  PretrainGptConfig c;
  ApplyRunShape(f, shape, &c);
  c.trainer.eval_iters = f.eval_iters;
  const int64_t samples = f.train_iters * f.global_batch_size;
  c.lr.max_lr = f.lr;
  c.lr.min_lr = f.lr / 10;
  c.lr.warmup_samples = static_cast<int64_t>(f.warmup_fraction * samples);
  c.lr.decay_samples = samples;
  c.lr.style = train::DecayStyle::kCosine;
  c.save = c.load = checkpoints;
  c.keep_last = 1;
  return c;
}

// Trains one size to --train_iters in chunks, validating after each.
absl::StatusOr<SizeCurve> TrainSize(const ScalingConfig& f, const RunShape& shape,
                                    const std::string& scratch, const LocalRanks& local,
                                    comm::Communicator& world) {
  SizeCurve s{absl::StrFormat("%dL-%dH", shape.layers, shape.hidden), shape.layers, shape.hidden,
              shape.heads};
  const std::string checkpoints = absl::StrCat(scratch, "/", s.model);
  RunShape named = shape;
  named.name = s.model;
  PretrainGptConfig c = MakeConfig(f, named, checkpoints);
  ASSIGN_OR_RETURN(models::ParameterCount count, models::CountParameters(c.model, 1));
  s.params = count.total;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t it : EvalIterations(f.eval_interval, f.train_iters)) {
    c.trainer.train_iters = it;
    ASSIGN_OR_RETURN(PretrainResult r, RunPretrainGpt(c, local, world, nullptr));
    if (!r.has_valid) return absl::InternalError("no validation run: the split has no documents");
    s.points.push_back({it, r.valid.loss.total, r.valid.perplexity});
    std::printf("%s: %s (%s parameters) iteration %lld: validation loss %.4f, perplexity %.2f\n",
                kName, s.model.c_str(), FormatParams(s.params).c_str(), static_cast<long long>(it),
                r.valid.loss.total, r.valid.perplexity);
    std::fflush(stdout);
  }
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::filesystem::remove_all(checkpoints);
  return s;
}

absl::StatusOr<std::vector<SizeCurve>> TrainAll(const ScalingConfig& f, const LocalRanks& local,
                                                comm::Communicator& world) {
  ASSIGN_OR_RETURN(std::vector<int64_t> layers, ParsePositiveList("num_layers", f.num_layers));
  ASSIGN_OR_RETURN(std::vector<int64_t> hidden, ParsePositiveList("hidden_size", f.hidden_size));
  ASSIGN_OR_RETURN(std::vector<int64_t> heads,
                   ParsePositiveList("num_attention_heads", f.num_attention_heads));
  if (hidden.size() != layers.size() || heads.size() != layers.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--num_layers, --hidden_size and --num_attention_heads must list as many values (one per "
        "size); got ",
        layers.size(), ", ", hidden.size(), " and ", heads.size()));
  }
  if (f.train_iters < 1 || f.eval_interval < 1) {
    return absl::InvalidArgumentError("--train_iters and --eval_interval must be >= 1");
  }
  RunShape shape;
  ASSIGN_OR_RETURN(shape.data_path, DefaultDataset(f.data_dir, /*gpt2=*/true));
  shape.seed = static_cast<uint64_t>(f.seed);
  ASSIGN_OR_RETURN(std::string scratch, ScratchDir(kName));
  std::vector<SizeCurve> sizes;
  for (size_t i = 0; i < layers.size(); ++i) {
    shape.layers = layers[i];
    shape.hidden = hidden[i];
    shape.heads = heads[i];
    ASSIGN_OR_RETURN(SizeCurve s, TrainSize(f, shape, scratch, local, world));
    sizes.push_back(std::move(s));
  }
  std::filesystem::remove_all(scratch);
  return sizes;
}

absl::Status Run(const ScalingConfig& f, int argc, char** argv, const LocalRanks& local,
                 comm::Communicator& world) {
  ASSIGN_OR_RETURN(ExperimentRun run, StartExperiment(kName, f.results_dir, argc, argv));
  ASSIGN_OR_RETURN(std::vector<SizeCurve> sizes, TrainAll(f, local, world));
  if (world.rank() != 0) return absl::OkStatus();
  RETURN_IF_ERROR(WriteCsv(run.Path("val_curves.csv"), CurvesCsv(sizes)));
  const int64_t tokens = f.global_batch_size * f.seq_length;
  Plot p;
  p.title = "GPT-2 validation perplexity at equal tokens (paper Figure 6)";
  p.xlabel = absl::StrFormat("iteration (optimizer steps of %d tokens)", tokens);
  p.ylabel = "validation perplexity (log scale)";
  p.logy = true;
  for (const SizeCurve& s : sizes) {
    p.series.push_back({absl::StrFormat("%s, %s parameters", s.model, FormatParams(s.params)),
                        "val_curves.csv", "iteration", "val_ppl", "model", s.model});
  }
  RETURN_IF_ERROR(DrawPlot(p, run.Path("val_ppl.png")));

  Report report("GPT-2 validation perplexity over iterations for several sizes (paper Figure 6)");
  report.Paragraph(absl::StrFormat(
      "The paper (Shoeybi et al. 2019, Figure 6) trains GPT-2 models of 355M, 2.5B and 8.3B "
      "parameters on the same data and shows validation perplexity falling faster and lower for "
      "the larger models. Here: GPT-2 sizes %s layers x %s hidden (%s heads) on the embedded "
      "corpus (the Debian fortunes, GPT-2 BPE; split 949/50/1 by documents), each for %d "
      "iterations of %d samples x %d tokens (%d tokens in all), Adam at peak learning rate %g "
      "with %.0f%% linear warmup and cosine decay to %g, weight decay 0.01, gradient clipping "
      "1.0, dropout 0.1, f32, seed %d. Validation every %d iterations on the same %d samples of "
      "the validation split (%d tokens). Parameters counted from the model as built "
      "(models/count.h; the vocabulary padded to %d embeddings, tied with the output layer).",
      f.num_layers, f.hidden_size, f.num_attention_heads, f.train_iters, f.global_batch_size,
      f.seq_length, f.train_iters * tokens, f.lr, 100 * f.warmup_fraction, f.lr / 10, f.seed,
      f.eval_interval, f.eval_iters * f.micro_batch_size,
      f.eval_iters * f.micro_batch_size * f.seq_length,
      models::ModelConfig::ForFamily(models::Family::kGpt2).PaddedVocab(1)));
  report.AddTable(FinalTable(sizes));
  report.Paragraph(ScalingFinding(sizes, tokens));
  report.Image("val_ppl.png", "validation perplexity against iteration for each model size");
  return report.Write(run);
}

}  // namespace
}  // namespace experiments
}  // namespace mt

int main(int argc, char** argv) {
  return mt::experiments::InProcessExperimentMain(
      argc, argv, mt::experiments::kName,
      "GPT-2 validation perplexity over iterations by size (paper Figure 6).",
      mt::experiments::ScalingConfig(), mt::experiments::Run);
}

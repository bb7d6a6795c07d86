// ./bazelw run //experiments/gpt2_scaling_curves: the paper's Figure 6. Validation perplexity
// over iterations of several GPT-2 sizes trained on the same data (the embedded corpus) with the
// same token budget, batch and learning-rate schedule, in this process through the library
// (jobs/pretrain/pretrain_gpt.h). Each size trains in chunks of --eval_interval
// iterations, each chunk resuming from the previous one's checkpoint (bit-exact: the schedule is
// fixed over the whole budget, and the sample order too while the budget stays within one epoch
// of the corpus) and ending with one validation run. Writes results/<name>/:
// val_curves.csv, compute_curves.csv, final_losses.csv, val_ppl.png, final_loss.png,
// compute_loss.png and report.md. With --compute_matched every size trains a second time on the
// training FLOPs of the middle size, and the report fits L(N) to the final losses of each variant.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
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
  std::string num_layers = "1,2,2,3,4", hidden_size = "32,48,64,96,128",
              num_attention_heads = "2,2,4,4,4";
  int64_t eval_interval = 20;
  bool compute_matched = true;
  int eval_iters = 8;
  double warmup_fraction = 0.1;
  int64_t seed = 1234;

  // 200 iterations of 8 x 64 tokens (102,400 tokens) per equal-token run.
  ScalingConfig() {
    micro_batch_size = global_batch_size = 8;
    train_iters = 200;
  }

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    InProcessFlags::Fields(self, v);
    v("num_layers", &self.num_layers, "Layers of each size (comma-separated, one per size).");
    v("hidden_size", &self.hidden_size, "Hidden size of each size.");
    v("num_attention_heads", &self.num_attention_heads, "Attention heads of each size.");
    v("eval_interval", &self.eval_interval,
      "Iterations between validation runs (compute-matched runs: scaled to their length).");
    v("compute_matched", &self.compute_matched,
      "Also train every size on the training FLOPs of the middle size's equal-token run.");
    v("eval_iters", &self.eval_iters, "Validation micro-batches per validation run.");
    v("warmup_fraction", &self.warmup_fraction,
      "Share of the budget in linear warmup; cosine decay to lr/10.");
    v("seed", &self.seed, "Seed (initialisation, data order, dropout).");
  }
};

PretrainGptConfig MakeConfig(const ScalingConfig& f, const RunShape& shape,
                             const std::string& checkpoints, int64_t iters) {
  PretrainGptConfig c;
  ApplyRunShape(f, shape, &c);
  c.trainer.eval_iters = f.eval_iters;
  const int64_t samples = iters * f.global_batch_size;
  c.lr.max_lr = f.lr;
  c.lr.min_lr = f.lr / 10;
  c.lr.warmup_samples = static_cast<int64_t>(f.warmup_fraction * samples);
  c.lr.decay_samples = samples;
  c.lr.style = train::DecayStyle::kCosine;
  c.save = c.load = checkpoints;
  c.keep_last = 1;
  return c;
}

// A size's name and counts, before training.
absl::StatusOr<SizeCurve> Describe(const ScalingConfig& f, const RunShape& shape) {
  SizeCurve s{absl::StrFormat("%dL-%dH", shape.layers, shape.hidden), shape.layers, shape.hidden,
              shape.heads};
  PretrainGptConfig c = MakeConfig(f, shape, "", f.train_iters);
  ASSIGN_OR_RETURN(models::ParameterCount count, models::CountParameters(c.model, 1));
  s.params = count.total;
  s.non_embedding = NonEmbeddingParams(count.total, count.padded_vocab,
                                       c.model.max_position_embeddings, shape.hidden);
  s.flops_per_token = TrainFlopsPerToken(s.non_embedding, shape.layers, shape.hidden,
                                         count.padded_vocab, f.seq_length);
  s.tokens_per_iteration = f.global_batch_size * f.seq_length;
  return s;
}

// Trains one size for `iters` in chunks of `interval`, validating after each.
absl::StatusOr<SizeCurve> TrainSize(const ScalingConfig& f, RunShape shape, SizeCurve s,
                                    int64_t iters, int64_t interval, const std::string& scratch,
                                    const LocalRanks& local, comm::Communicator& world) {
  shape.name = absl::StrReplaceAll(s.model, {{" ", "_"}});
  const std::string checkpoints = absl::StrCat(scratch, "/", shape.name);
  PretrainGptConfig c = MakeConfig(f, shape, checkpoints, iters);
  const auto start = std::chrono::steady_clock::now();
  for (int64_t it : EvalIterations(interval, iters)) {
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
  std::vector<RunShape> shapes;
  std::vector<SizeCurve> described;
  for (size_t i = 0; i < layers.size(); ++i) {
    shape.layers = layers[i];
    shape.hidden = hidden[i];
    shape.heads = heads[i];
    shapes.push_back(shape);
    ASSIGN_OR_RETURN(SizeCurve s, Describe(f, shape));
    described.push_back(std::move(s));
  }
  ASSIGN_OR_RETURN(std::string scratch, ScratchDir(kName));
  std::vector<SizeCurve> sizes;
  for (size_t i = 0; i < shapes.size(); ++i) {
    ASSIGN_OR_RETURN(SizeCurve s, TrainSize(f, shapes[i], described[i], f.train_iters,
                                            f.eval_interval, scratch, local, world));
    sizes.push_back(std::move(s));
  }
  // Compute-matched: the middle size's equal-token FLOPs for every size.
  const double reference = described[described.size() / 2].flops_per_token;
  for (size_t i = 0; f.compute_matched && i < shapes.size(); ++i) {
    SizeCurve d = described[i];
    d.model += " compute-matched";
    const int64_t iters = ComputeMatchedIters(f.train_iters, reference, d.flops_per_token);
    const int64_t interval = std::max<int64_t>(1, iters * f.eval_interval / f.train_iters);
    ASSIGN_OR_RETURN(SizeCurve s,
                     TrainSize(f, shapes[i], d, iters, interval, scratch, local, world));
    sizes.push_back(std::move(s));
  }
  std::filesystem::remove_all(scratch);
  return sizes;
}

// The three plots: equal-token curves by iteration, compute-matched curves by training FLOPs,
// final loss against N with the fits.
absl::Status DrawPlots(const ExperimentRun& run, const std::vector<SizeCurve>& equal,
                       const std::vector<SizeCurve>& compute, int64_t tokens) {
  Plot p;
  p.title = "GPT-2 validation perplexity at equal tokens (paper Figure 6)";
  p.xlabel = absl::StrFormat("iteration (optimizer steps of %d tokens)", tokens);
  p.ylabel = "validation perplexity (log scale)";
  p.logy = true;
  for (const SizeCurve& s : equal) {
    p.series.push_back({absl::StrFormat("%s, %s parameters", s.model, FormatParams(s.params)),
                        "val_curves.csv", "iteration", "val_ppl", "model", s.model});
  }
  RETURN_IF_ERROR(DrawPlot(p, run.Path("val_ppl.png")));
  Plot f;
  f.title = "Final validation loss against non-embedding parameters, with power-law fits";
  f.xlabel = "non-embedding parameters N (log scale)";
  f.ylabel = "final validation loss (nats/token, log scale)";
  f.logx = f.logy = true;
  for (const char* v : {"equal tokens", "compute-matched"}) {
    if (std::string(v) == "compute-matched" && compute.empty()) continue;
    f.series.push_back({absl::StrCat(v, ", measured"), "final_losses.csv", "non_embedding_params",
                        "final_val_loss", "variant", v, "points"});
    f.series.push_back({absl::StrCat(v, ", fit"), "final_losses.csv", "non_embedding_params",
                        "fit_loss", "variant", v, "lines"});
  }
  RETURN_IF_ERROR(DrawPlot(f, run.Path("final_loss.png")));
  if (compute.empty()) return absl::OkStatus();
  Plot c;
  c.title = "Compute-matched runs: validation loss against training FLOPs";
  c.xlabel = "training FLOPs (6 N T + 6 L T d per token; log scale)";
  c.ylabel = "validation loss (nats/token)";
  c.logx = true;
  for (const SizeCurve& s : compute) {
    c.series.push_back(
        {s.model, "compute_curves.csv", "train_flops", "val_loss", "model", s.model});
  }
  return DrawPlot(c, run.Path("compute_loss.png"));
}

absl::Status Run(const ScalingConfig& f, int argc, char** argv, const LocalRanks& local,
                 comm::Communicator& world) {
  ASSIGN_OR_RETURN(ExperimentRun run, StartExperiment(kName, f.results_dir, argc, argv));
  ASSIGN_OR_RETURN(std::vector<SizeCurve> sizes, TrainAll(f, local, world));
  if (world.rank() != 0) return absl::OkStatus();
  std::vector<SizeCurve> equal, compute;
  for (SizeCurve& s : sizes) {
    const bool matched = s.model.find(" compute-matched") != std::string::npos;
    (matched ? compute : equal).push_back(std::move(s));
  }
  std::vector<SizeCurve> all = equal;
  all.insert(all.end(), compute.begin(), compute.end());
  RETURN_IF_ERROR(WriteCsv(run.Path("val_curves.csv"), CurvesCsv(all)));
  RETURN_IF_ERROR(WriteCsv(run.Path("compute_curves.csv"), ComputeCurvesCsv(all)));
  Table finals = FinalLossesCsv(equal, "equal tokens");
  const Table matched = FinalLossesCsv(compute, "compute-matched");
  for (const auto& row : matched.rows()) finals.AddRow(row);
  RETURN_IF_ERROR(WriteCsv(run.Path("final_losses.csv"), finals));
  const int64_t tokens = f.global_batch_size * f.seq_length;
  RETURN_IF_ERROR(DrawPlots(run, equal, compute, tokens));

  Report report("GPT-2 validation perplexity over iterations for several sizes (paper Figure 6)");
  report.Paragraph(PowerLawFinding(equal, compute));
  report.Paragraph(absl::StrFormat(
      "The paper (Shoeybi et al. 2019, Figure 6) trains GPT-2 models of 355M, 2.5B and 8.3B "
      "parameters on the same data and shows validation perplexity falling faster and lower for "
      "the larger models. Here: GPT-2 sizes %s layers x %s hidden (%s heads) on the embedded "
      "corpus (the Debian fortunes, GPT-2 BPE; split 949/50/1 by documents), each for %d "
      "iterations of %d samples x %d tokens (%d tokens in all), Adam at peak learning rate %g "
      "with %.0f%% linear warmup and cosine decay to %g, weight decay 0.01, gradient clipping "
      "1.0, dropout 0.1, f32, seed %d. Validation every %d iterations on the same %d samples of "
      "the validation split (%d tokens). Parameters counted from the model as built "
      "(models/count.h; the vocabulary padded to %d embeddings, tied with the output layer); N "
      "(non-embedding) leaves out the token and position embeddings, as Kaplan et al. count. "
      "The compute-matched runs give every size the training FLOPs of the middle size's "
      "equal-token run (6 N' + 6 L T d per token, N' counting the output layer, which dominates "
      "at these sizes): smaller sizes train longer, larger ones shorter, on the same schedule "
      "shape.",
      f.num_layers, f.hidden_size, f.num_attention_heads, f.train_iters, f.global_batch_size,
      f.seq_length, f.train_iters * tokens, f.lr, 100 * f.warmup_fraction, f.lr / 10, f.seed,
      f.eval_interval, f.eval_iters * f.micro_batch_size,
      f.eval_iters * f.micro_batch_size * f.seq_length,
      models::ModelConfig::ForFamily(models::Family::kGpt2).PaddedVocab(1)));
  report.AddTable(FinalTable(all));
  report.Paragraph(ScalingFinding(equal, tokens));
  report.Image("val_ppl.png", "validation perplexity against iteration for each model size");
  report.Image("final_loss.png", "final validation loss against N, with the power-law fits");
  if (!compute.empty()) {
    report.Image("compute_loss.png", "compute-matched runs: loss against training FLOPs");
  }
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

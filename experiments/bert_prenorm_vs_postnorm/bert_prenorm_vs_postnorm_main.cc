// ./bazelw run //experiments/bert_prenorm_vs_postnorm: the paper's Figure 7 finding. BERT with
// post-norm (the original BERT layer: layer norm after each residual add) and pre-norm (layer
// norm before attention and the MLP, as GPT-2) at increasing depth, on the embedded corpus, with
// the same data, token budget and learning rate, over several seeds, trained in this process
// through the library (jobs/pretrain/pretrain_bert.h). Writes results/<name>/: the
// training-loss curves (CSV, PNG), the final losses per depth and norm (mean and spread over
// seeds; CSV, PNG), and report.md saying where post-norm degrades or diverges.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status.h"
#include "experiments/bert_prenorm_vs_postnorm/verdict.h"
#include "experiments/common/curves.h"
#include "experiments/common/in_process.h"
#include "experiments/common/plot.h"
#include "experiments/common/report.h"
#include "jobs/pretrain/pretrain_bert.h"

namespace mt {
namespace experiments {

using jobs::LocalRanks;
using jobs::PretrainBertConfig;
using jobs::RunPretrainBert;
namespace {

constexpr char kName[] = "bert_prenorm_vs_postnorm";

// The experiment's flags: the shared ones and the depths, the model's width, the seeds.
struct PrenormConfig : InProcessFlags {
  std::string num_layers = "2,8,24";
  int64_t hidden_size = 64;
  int num_attention_heads = 4;
  int64_t lr_warmup_samples = 0;
  std::string seeds = "1,2,3";
  int window = 10;

  PrenormConfig() {
    train_iters = 80;
    lr = 3e-3;
  }

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    InProcessFlags::Fields(self, v);
    v("num_layers", &self.num_layers, "Depths to train (comma-separated).");
    v("hidden_size", &self.hidden_size, "Hidden size of every model.");
    v("num_attention_heads", &self.num_attention_heads, "Attention heads.");
    v("lr_warmup_samples", &self.lr_warmup_samples,
      "Samples of linear warmup (0: none); constant LR after it.");
    v("seeds", &self.seeds, "Seeds (initialisation, data order, dropout), comma-separated.");
    v("window", &self.window, "Final loss: mean training loss over this many last iterations.");
  }
};

PretrainBertConfig MakeConfig(const PrenormConfig& f, RunShape shape, nn::NormPosition norm,
                              const std::string& log) {
  PretrainBertConfig c;
  ApplyRunShape(f, shape, &c);
  c.model.norm = norm;
  c.trainer.log_interval = 1;
  c.trainer.eval_iters = 0;  // Training loss only.
  c.trainer.log_jsonl = log;
  c.lr.max_lr = c.lr.min_lr = f.lr;
  c.lr.warmup_samples = f.lr_warmup_samples;
  c.lr.decay_samples = f.train_iters * f.global_batch_size;
  c.lr.style = train::DecayStyle::kConstant;
  return c;
}

// Trains every (depth, norm, seed) in turn.
absl::StatusOr<std::vector<NormRun>> TrainAll(const PrenormConfig& f, const LocalRanks& local,
                                              comm::Communicator& world) {
  ASSIGN_OR_RETURN(std::vector<int64_t> depths, ParsePositiveList("num_layers", f.num_layers));
  ASSIGN_OR_RETURN(std::vector<int64_t> seeds, ParsePositiveList("seeds", f.seeds));
  RunShape shape;
  ASSIGN_OR_RETURN(shape.data_path, DefaultDataset(f.data_dir, /*gpt2=*/false));
  shape.hidden = f.hidden_size;
  shape.heads = f.num_attention_heads;
  ASSIGN_OR_RETURN(std::string scratch, ScratchDir(kName));
  std::vector<NormRun> runs;
  for (int64_t depth : depths) {
    for (nn::NormPosition norm : {nn::NormPosition::kPostNorm, nn::NormPosition::kPreNorm}) {
      for (int64_t seed : seeds) {
        const std::string log = absl::StrCat(scratch, "/run.jsonl");
        std::filesystem::remove(log);
        const auto start = std::chrono::steady_clock::now();
        shape.layers = depth;
        shape.seed = static_cast<uint64_t>(seed);
        shape.name =
            absl::StrFormat("%dL-%s-seed%d", depth,
                            norm == nn::NormPosition::kPreNorm ? "prenorm" : "postnorm", seed);
        RETURN_IF_ERROR(
            RunPretrainBert(MakeConfig(f, shape, norm, log), local, world, nullptr).status());
        NormRun r{depth, norm == nn::NormPosition::kPreNorm, seed};
        r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        ASSIGN_OR_RETURN(r.curve, ReadLossCurve(log));
        std::printf("%s: %2lld layers, %s-norm, seed %lld: loss %.3f -> %.3f (%s), %.0f s\n", kName,
                    static_cast<long long>(depth), r.pre ? "pre" : "post",
                    static_cast<long long>(seed), HeadMean(r.curve, f.window),
                    TailMean(r.curve, f.window), OutcomeName(Classify(r.curve, f.window, kMinDrop)),
                    r.seconds);
        std::fflush(stdout);
        runs.push_back(std::move(r));
      }
    }
  }
  std::filesystem::remove_all(scratch);
  return runs;
}

absl::Status DrawPlots(const PrenormConfig& f, const ExperimentRun& run,
                       const std::vector<int64_t>& depths) {
  Plot curves;
  curves.title = absl::StrFormat(
      "BERT training loss, post-norm vs pre-norm (hidden %d, lr %g, mean over seeds)",
      f.hidden_size, f.lr);
  curves.xlabel = "iteration (optimizer steps)";
  curves.ylabel = "training loss, MLM + SOP (nats/token)";
  for (int64_t d : depths) {
    for (const char* norm : {"post", "pre"}) {
      curves.series.push_back({absl::StrFormat("%s-norm, %d layers", norm, d), "mean_curves.csv",
                               "iteration", "smoothed_loss", "series",
                               absl::StrFormat("%s_%d", norm, d), "lines"});
    }
  }
  RETURN_IF_ERROR(DrawPlot(curves, run.Path("loss_curves.png")));
  Plot final;
  final.title = absl::StrFormat(
      "BERT final training loss vs depth (mean of the last %d iterations)", f.window);
  final.xlabel = "transformer layers";
  final.ylabel = "final training loss, MLM + SOP (nats/token)";
  final.series = {
      {"post-norm, mean over seeds", "final_losses.csv", "layers", "mean", "norm", "post"},
      {"pre-norm, mean over seeds", "final_losses.csv", "layers", "mean", "norm", "pre"},
      {"post-norm, each seed", "final_losses_per_seed.csv", "layers", "final_loss", "norm", "post",
       "points"},
      {"pre-norm, each seed", "final_losses_per_seed.csv", "layers", "final_loss", "norm", "pre",
       "points"}};
  return DrawPlot(final, run.Path("final_loss.png"));
}

absl::Status Run(const PrenormConfig& f, int argc, char** argv, const LocalRanks& local,
                 comm::Communicator& world) {
  ASSIGN_OR_RETURN(ExperimentRun run, StartExperiment(kName, f.results_dir, argc, argv));
  ASSIGN_OR_RETURN(std::vector<NormRun> runs, TrainAll(f, local, world));
  if (world.rank() != 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<int64_t> depths, ParsePositiveList("num_layers", f.num_layers));
  const NormTables t = MakeNormTables(runs, f.window, /*smooth=*/5);
  RETURN_IF_ERROR(WriteCsv(run.Path("loss_curves.csv"), t.curves));
  RETURN_IF_ERROR(WriteCsv(run.Path("mean_curves.csv"), t.mean_curves));
  RETURN_IF_ERROR(WriteCsv(run.Path("final_losses.csv"), t.final_csv));
  RETURN_IF_ERROR(WriteCsv(run.Path("final_losses_per_seed.csv"), t.per_seed));
  RETURN_IF_ERROR(DrawPlots(f, run, depths));

  Report report("BERT: post-norm vs pre-norm at increasing depth (paper Figure 7)");
  report.Paragraph(absl::StrFormat(
      "The paper (Shoeybi et al. 2019, Figure 7 and section 3.3) finds that the original BERT "
      "layer (post-norm: layer norm after each residual addition) degrades as the model grows, "
      "while moving the layer norms to the inputs of attention and the MLP (pre-norm, as in "
      "GPT-2) trains stably and keeps improving. Here: BERT (MLM + sentence-order prediction, "
      "whole-word masking) on the embedded corpus (the Debian fortunes, WordPiece), hidden size "
      "%d, %d heads, sequence %d, batch %d, %d iterations (%d tokens per run), Adam at a "
      "constant learning rate %g with %d warmup samples, weight decay 0.01, gradient clipping "
      "1.0, dropout 0.1, f32, seeds %s (each seed sets the initialisation, data order and "
      "dropout; the two norms at one seed see the same batches). Depths %s.",
      f.hidden_size, f.num_attention_heads, f.seq_length, f.global_batch_size, f.train_iters,
      f.train_iters * f.global_batch_size * f.seq_length, f.lr, f.lr_warmup_samples, f.seeds,
      f.num_layers));
  report.Heading("Final training loss");
  report.Paragraph(absl::StrFormat(
      "Final loss: the mean training loss (MLM + SOP, nats/token) of a run's last %d "
      "iterations; mean ± sample standard deviation over seeds, and the range. Outcome per "
      "seed: diverged (a non-finite loss, or the last %d iterations above the first %d), "
      "stalled (fell by less than %.0f%%), learned.",
      f.window, f.window, f.window, 100 * kMinDrop));
  report.AddTable(t.final_table);
  report.Image("final_loss.png", "final training loss against depth, post-norm and pre-norm");
  report.Heading("Finding");
  report.Paragraph(Finding(t.finals, f.lr, f.hidden_size));
  report.Heading("Training-loss curves");
  report.Paragraph(
      "Mean over seeds, smoothed by a trailing 5-iteration moving average (loss_curves.csv has "
      "every run's every iteration; mean_curves.csv the plotted lines).");
  report.Image("loss_curves.png", "training loss against iteration for each depth and norm");
  return report.Write(run);
}

}  // namespace
}  // namespace experiments
}  // namespace mt

int main(int argc, char** argv) {
  return mt::experiments::InProcessExperimentMain(
      argc, argv, mt::experiments::kName,
      "BERT post-norm vs pre-norm at increasing depth (paper Figure 7).",
      mt::experiments::PrenormConfig(), mt::experiments::Run);
}

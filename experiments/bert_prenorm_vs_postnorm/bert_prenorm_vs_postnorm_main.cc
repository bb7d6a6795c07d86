// ./bazelw run //experiments/bert_prenorm_vs_postnorm: the paper's Figure 7 finding. BERT with
// post-norm (the original BERT layer: layer norm after each residual add) and pre-norm (layer
// norm before attention and the MLP, as GPT-2) at increasing depth, on the embedded corpus, with
// the same data, token budget and learning rate, over several seeds, trained in this process
// through the library (jobs/pretrain/pretrain_bert.h). Writes results/<name>/: the
// training-loss curves (CSV, PNG), the final losses per depth and norm (mean and spread over
// seeds; CSV, PNG), and report.md saying where post-norm degrades or diverges.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "experiments/bert_prenorm_vs_postnorm/verdict.h"
#include "experiments/common/corpus_vocab.h"
#include "experiments/common/curves.h"
#include "experiments/common/in_process.h"
#include "experiments/common/plot.h"
#include "experiments/common/prose_corpus.h"
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
  std::string num_layers = "2,4,8";
  std::string hidden_size = "32,64";
  int num_attention_heads = 4;
  int64_t lr_warmup_samples = 0;
  std::string seeds = "1,2,3,4,5";
  int window = 100;
  double init_std = 0.02;
  double clip_grad = 1.0;
  double mask_prob = 0.15;
  std::string corpus = "prose";
  int64_t max_corpus_documents = 0;
  int vocab_words = 2000;
  std::string train_iters_per_width = "32:1000,64:500";

  PrenormConfig() {
    seq_length = 32;
    micro_batch_size = global_batch_size = 32;
    train_iters = 0;  // Per width: train_iters_per_width.
    lr = 3e-3;
  }

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    InProcessFlags::Fields(self, v);
    v("num_layers", &self.num_layers, "Depths to train (comma-separated).");
    v("hidden_size", &self.hidden_size,
      "Model widths (comma-separated): every depth and norm is trained at each.");
    v("num_attention_heads", &self.num_attention_heads, "Attention heads.");
    v("lr_warmup_samples", &self.lr_warmup_samples,
      "Samples of linear warmup (0: none); constant LR after it.");
    v("seeds", &self.seeds, "Seeds (initialisation, data order, dropout), comma-separated.");
    v("window", &self.window, "Final loss: mean training loss over this many last iterations.");
    v("init_std", &self.init_std,
      "Std of the normal initialisation (output projections / sqrt(2 * layers)).");
    v("clip_grad", &self.clip_grad, "Clip the global gradient L2 norm to this (0: off).");
    v("mask_prob", &self.mask_prob, "Fraction of tokens masked for the MLM loss.");
    v("corpus", &self.corpus,
      "prose (the prose corpus, experiments/common/prose_corpus.h) or fortunes (the embedded "
      "corpus).");
    v("max_corpus_documents", &self.max_corpus_documents,
      "--corpus=prose: only the first this many documents (0: all).");
    v("vocab_words", &self.vocab_words,
      "--corpus=prose: a WordPiece vocabulary of the corpus's characters and its this many most "
      "frequent words (experiments/common/corpus_vocab.h); 0: bert-base-uncased's.");
    v("train_iters_per_width", &self.train_iters_per_width,
      "Optimizer steps at each width, WIDTH:STEPS pairs (comma-separated), when --train_iters "
      "is 0 (its default here; a positive --train_iters sets every width's): a narrower model "
      "leaves the unigram plateau later.");
  }
};

// The optimizer steps of each of `widths`: --train_iters at every width when positive, else
// --train_iters_per_width's entry for it. InvalidArgument for a negative --train_iters, a
// malformed list, or a width it does not name.
absl::StatusOr<std::map<int64_t, int64_t>> StepsPerWidth(const PrenormConfig& f,
                                                         const std::vector<int64_t>& widths) {
  if (f.train_iters < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--train_iters=%d: must be positive, or 0 for --train_iters_per_width", f.train_iters));
  }
  std::map<int64_t, int64_t> steps;
  if (f.train_iters > 0) {
    for (int64_t w : widths) steps[w] = f.train_iters;
    return steps;
  }
  using StepsMap = std::map<int64_t, int64_t>;
  ASSIGN_OR_RETURN(StepsMap given,
                   ParsePositiveMap("train_iters_per_width", f.train_iters_per_width));
  for (int64_t w : widths) {
    if (given.count(w) == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--train_iters_per_width=%s: no steps for --hidden_size %d (add %d:STEPS, or give "
          "--train_iters)",
          f.train_iters_per_width, w, w));
    }
    steps[w] = given[w];
  }
  return steps;
}

// "1000 iterations at hidden 32 (1024000 tokens per run), 500 at hidden 64 (512000 tokens per
// run)", or "500 iterations (512000 tokens per run)" when every width trains as long.
std::string DescribeSteps(const PrenormConfig& f, const std::map<int64_t, int64_t>& steps) {
  const int64_t tokens_per_step = f.global_batch_size * f.seq_length;
  const bool same = std::all_of(steps.begin(), steps.end(),
                                [&](const auto& e) { return e.second == steps.begin()->second; });
  if (same && !steps.empty()) {
    const int64_t n = steps.begin()->second;
    return absl::StrFormat("%d iterations (%d tokens per run)", n, n * tokens_per_step);
  }
  std::vector<std::string> parts;
  for (const auto& [w, n] : steps) {
    parts.push_back(absl::StrFormat("%d%s at hidden %d (%d tokens per run)", n,
                                    parts.empty() ? " iterations" : "", w, n * tokens_per_step));
  }
  return absl::StrJoin(parts, ", ");
}

// The dataset the runs train on, with its vocabulary and the report's description.
struct Corpus {
  std::string prefix, name;
  std::string vocab_file;  // Empty: bert-base-uncased's.
  int32_t vocab_size = 0;
};

PretrainBertConfig MakeConfig(const PrenormConfig& f, const Corpus& corpus, RunShape shape,
                              int64_t steps, nn::NormPosition norm, const std::string& log) {
  PretrainBertConfig c;
  ApplyRunShape(f, shape, &c);
  c.trainer.train_iters = steps;
  if (!corpus.vocab_file.empty()) {
    c.vocab_file = corpus.vocab_file;
    c.model.vocab_size = corpus.vocab_size;
  }
  c.model.norm = norm;
  c.model.init_std = f.init_std;
  c.clip_grad = f.clip_grad;
  c.mask_prob = f.mask_prob;
  c.trainer.log_interval = 1;
  c.trainer.eval_iters = 0;  // Training loss only.
  c.trainer.log_jsonl = log;
  c.lr.max_lr = c.lr.min_lr = f.lr;
  c.lr.warmup_samples = f.lr_warmup_samples;
  c.lr.decay_samples = steps * f.global_batch_size;
  c.lr.style = train::DecayStyle::kConstant;
  return c;
}

// Trains one (width, depth, norm, seed) for `steps` iterations and prints its line.
absl::StatusOr<NormRun> TrainOne(const PrenormConfig& f, const Corpus& corpus, RunShape shape,
                                 int64_t steps, nn::NormPosition norm, const std::string& scratch,
                                 const LocalRanks& local, comm::Communicator& world) {
  const std::string log = absl::StrCat(scratch, "/run.jsonl");
  std::filesystem::remove(log);
  const auto start = std::chrono::steady_clock::now();
  const bool pre = norm == nn::NormPosition::kPreNorm;
  shape.name = absl::StrFormat("h%d-%dL-%s-seed%d", shape.hidden, shape.layers,
                               pre ? "prenorm" : "postnorm", shape.seed);
  RETURN_IF_ERROR(
      RunPretrainBert(MakeConfig(f, corpus, shape, steps, norm, log), local, world, nullptr)
          .status());
  NormRun r{shape.layers, pre, static_cast<int64_t>(shape.seed)};
  r.hidden = shape.hidden;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSIGN_OR_RETURN(r.curve, ReadLossCurve(log));
  std::printf("%s: hidden %lld, %2lld layers, %s-norm, seed %lld: loss %.3f -> %.3f (%s), %.0f s\n",
              kName, static_cast<long long>(r.hidden), static_cast<long long>(r.depth),
              pre ? "pre" : "post", static_cast<long long>(r.seed), HeadMean(r.curve, f.window),
              TailMean(r.curve, f.window), OutcomeName(Classify(r.curve, f.window, kMinDrop)),
              r.seconds);
  std::fflush(stdout);
  return r;
}

// The BERT dataset of --corpus, built if missing, and its vocabulary (empty: bert-base-uncased).
absl::StatusOr<Corpus> MakeCorpus(const PrenormConfig& f) {
  Corpus c;
  if (f.corpus == "fortunes") {
    c.name =
        "the embedded corpus (the Debian fortunes; bert-base-uncased's WordPiece, 30522 "
        "tokens)";
    ASSIGN_OR_RETURN(c.prefix, DefaultDataset(f.data_dir, /*gpt2=*/false));
    return c;
  }
  if (f.corpus != "prose") {
    return absl::InvalidArgumentError(
        absl::StrCat("--corpus=", f.corpus, ": must be one of prose, fortunes"));
  }
  if (f.vocab_words < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--vocab_words=", f.vocab_words, ": must be 0 or more"));
  }
  ProseCorpusConfig pc;
  pc.max_documents = f.max_corpus_documents;
  ASSIGN_OR_RETURN(ProseCorpus prose, BuildProseCorpus(pc));
  c.name = absl::StrCat("the prose corpus (", prose.Describe(), ")");
  c.prefix = prose.bert_prefix;
  if (f.vocab_words == 0) {
    absl::StrAppend(&c.name, ", bert-base-uncased's WordPiece (30522 tokens)");
    return c;
  }
  ASSIGN_OR_RETURN(CorpusVocabDataset d, BuildCorpusVocabDataset(prose, f.vocab_words));
  c.prefix = d.bert_prefix;
  c.vocab_file = d.vocab_file;
  c.vocab_size = d.vocab_size;
  absl::StrAppend(&c.name, ", tokenised with a WordPiece vocabulary of its own ", d.vocab_size,
                  " tokens (its characters and ", f.vocab_words,
                  " most frequent words; experiments/common/corpus_vocab.h)");
  return c;
}

// What the flags ask to train: the widths, depths and seeds, and each width's steps.
struct Plan {
  std::vector<int64_t> widths, depths, seeds;
  std::map<int64_t, int64_t> steps;  // By width.
};

// The plan of `f`, checked before anything is written: InvalidArgument for a malformed list, a
// width the heads do not divide, or a width without steps.
absl::StatusOr<Plan> MakePlan(const PrenormConfig& f) {
  Plan p;
  ASSIGN_OR_RETURN(p.widths, ParsePositiveList("hidden_size", f.hidden_size));
  ASSIGN_OR_RETURN(p.depths, ParsePositiveList("num_layers", f.num_layers));
  ASSIGN_OR_RETURN(p.seeds, ParsePositiveList("seeds", f.seeds));
  if (f.num_attention_heads < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--num_attention_heads=%d: must be at least 1", f.num_attention_heads));
  }
  for (int64_t w : p.widths) {
    if (w % f.num_attention_heads != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--hidden_size=%d: not a multiple of --num_attention_heads=%d", w,
                          f.num_attention_heads));
    }
  }
  ASSIGN_OR_RETURN(p.steps, StepsPerWidth(f, p.widths));
  return p;
}

// Trains every (width, depth, norm, seed) of `plan` in turn; `corpus_name` gets the corpus's
// description.
absl::StatusOr<std::vector<NormRun>> TrainAll(const PrenormConfig& f, const Plan& plan,
                                              const LocalRanks& local, comm::Communicator& world,
                                              std::string* corpus_name) {
  RunShape shape;
  ASSIGN_OR_RETURN(Corpus corpus, MakeCorpus(f));
  shape.data_path = corpus.prefix;
  *corpus_name = corpus.name;
  shape.heads = f.num_attention_heads;
  ASSIGN_OR_RETURN(std::string scratch, ScratchDir(kName));
  std::vector<NormRun> runs;
  for (int64_t width : plan.widths) {
    for (int64_t depth : plan.depths) {
      for (nn::NormPosition norm : {nn::NormPosition::kPostNorm, nn::NormPosition::kPreNorm}) {
        for (int64_t seed : plan.seeds) {
          shape.hidden = width;
          shape.layers = depth;
          shape.seed = static_cast<uint64_t>(seed);
          ASSIGN_OR_RETURN(NormRun r, TrainOne(f, corpus, shape, plan.steps.at(width), norm,
                                               scratch, local, world));
          runs.push_back(std::move(r));
        }
      }
    }
  }
  std::filesystem::remove_all(scratch);
  return runs;
}

// loss_curves_h<W>.png: the mean curve of every depth and norm at width `w`, with a ±1 sd band.
absl::Status DrawCurves(const PrenormConfig& f, const ExperimentRun& run,
                        const std::vector<int64_t>& depths, int64_t w) {
  Plot curves;
  curves.title = absl::StrFormat(
      "BERT training loss, post-norm vs pre-norm (hidden %d, lr %g, mean and ±1 sd over seeds)", w,
      f.lr);
  curves.xlabel = "iteration (optimizer steps)";
  curves.ylabel = "training loss, MLM + SOP (nats/token)";
  for (int64_t d : depths) {
    for (const char* norm : {"post", "pre"}) {
      const std::string series = absl::StrFormat("%s_%d_h%d", norm, d, w);
      PlotSeries band{absl::StrFormat("%s-norm, %d layers, ±1 sd", norm, d),
                      "mean_curves.csv",
                      "iteration",
                      "",
                      "series",
                      series};
      band.y_low = "band_low";
      band.y_high = "band_high";
      curves.series.push_back(band);
      curves.series.push_back({absl::StrFormat("%s-norm, %d layers", norm, d), "mean_curves.csv",
                               "iteration", "smoothed_loss", "series", series, "lines"});
    }
  }
  return DrawPlot(curves, run.Path(absl::StrFormat("loss_curves_h%d.png", w)));
}

absl::Status DrawPlots(const PrenormConfig& f, const ExperimentRun& run,
                       const std::vector<int64_t>& depths, const std::vector<int64_t>& widths) {
  for (int64_t w : widths) RETURN_IF_ERROR(DrawCurves(f, run, depths, w));
  Plot final;
  final.title = absl::StrFormat(
      "BERT final training loss vs depth (mean of the last %d iterations; band ±1 sd over seeds)",
      f.window);
  final.xlabel = "transformer layers";
  final.ylabel = "final training loss, MLM + SOP (nats/token)";
  final.width = 1100;
  for (int64_t w : widths) {
    for (const char* norm : {"post", "pre"}) {
      const std::string series = absl::StrFormat("%s_h%d", norm, w);
      PlotSeries band{absl::StrFormat("%s-norm, hidden %d, ±1 sd", norm, w),
                      "final_losses.csv",
                      "layers",
                      "",
                      "series",
                      series};
      band.y_low = "band_low";
      band.y_high = "band_high";
      final.series.push_back(band);
      final.series.push_back({absl::StrFormat("%s-norm, hidden %d, mean", norm, w),
                              "final_losses.csv", "layers", "mean", "series", series});
      final.series.push_back({absl::StrFormat("%s-norm, hidden %d, each seed", norm, w),
                              "final_losses_per_seed.csv", "layers", "final_loss", "series", series,
                              "points"});
    }
  }
  return DrawPlot(final, run.Path("final_loss.png"));
}

// The deepest setting's gap at every width, for the report's opening: "+0.123 ± 0.020 (6.1 SE)
// at 12 layers, hidden 64".
std::string DeepestGaps(const NormTables& t) {
  std::map<int64_t, NormGap> deepest;  // By width: the gap at the largest depth.
  for (const NormGap& g : t.gaps) {
    if (deepest.count(g.hidden) == 0 || g.depth > deepest[g.hidden].depth) deepest[g.hidden] = g;
  }
  std::vector<std::string> parts;
  for (const auto& [w, g] : deepest) {
    parts.push_back(
        absl::StrFormat("%+.3f ± %.3f (%.1f SE; paired by seed %.1f SE) at %d layers, hidden %d",
                        g.gap, g.se, g.z, g.paired_z, g.depth, w));
  }
  return absl::StrJoin(parts, "; ");
}

// The report's paragraph on which setting carries the effect and how it maps to the paper.
std::string Knob(const PrenormConfig& f) {
  return absl::StrFormat(
      "**The knob**: depth, at one learning rate (%g, Adam, constant) with %d warmup samples for "
      "both norms; nothing else differs between the runs of a width. That is the regime the "
      "literature says post-norm cannot take: without warmup, a post-norm layer stack needs a "
      "smaller learning rate, and the admissible rate falls as the stack grows (Xiong et al. "
      "2020: the expected gradient of the last layers' parameters is large at initialisation "
      "and does not shrink with depth, while pre-norm's falls as 1/sqrt(layers); Liu et al. "
      "2020: each Adam update changes a post-norm model's output by an amount that grows with "
      "the number of layers, against a logarithmic growth for pre-norm). So the learning rate "
      "and the absence of warmup set how far post-norm is from its stability edge, and depth "
      "moves it across; this run holds them fixed (`--lr`, `--lr_warmup_samples`). At these "
      "widths and budgets the edge shows as a slow start rather than a blow-up: the curves "
      "below record how soon each model leaves the plateau where it predicts only the masked "
      "tokens' frequencies and starts to use the context. The corpus's own small vocabulary "
      "(`--vocab_words`) is what lets models this small leave that plateau within the budget "
      "(experiments/README.md). **Mapping to the paper**: Shoeybi et al. kept one recipe "
      "(learning rate 1e-4, 10k warmup iterations) while growing BERT from 336M (24 layers, "
      "hidden 1024) to 752M parameters and saw post-norm's loss degrade; growing the model at "
      "a fixed rate is what this run does in miniature, with depth (%s layers) as the growing "
      "dimension and a rate and warmup that put hidden %s models at a few hundred steps near "
      "the edge, as 1e-4 with 10k warmup steps did for 752M.",
      f.lr, f.lr_warmup_samples, f.num_layers, f.hidden_size);
}

absl::Status WriteReport(const PrenormConfig& f, const NormTables& t,
                         const std::vector<int64_t>& widths, const std::string& steps,
                         const std::string& corpus_name, const ExperimentRun& run) {
  Report report("BERT: post-norm vs pre-norm at increasing depth (paper Figure 7)");
  const Verdict v = Judge(t, 3.0);
  report.Paragraph(absl::StrFormat(
      "**The paper's claim** (Shoeybi et al. 2019, Figure 7 and section 3.3): the original BERT "
      "layer (post-norm: layer norm after each residual addition) degrades as the model grows "
      "(336M trains, 752M does worse), while moving the layer norms to the inputs of attention "
      "and the MLP (pre-norm, as in GPT-2) trains stably and improves with size. **This run: %s** "
      "(%d of %d widths show post-norm above pre-norm by more than 3 standard errors at the "
      "deepest setting with a gap growing with depth). Gap post - pre at the deepest setting, "
      "mean ± standard error over %d seeds: %s.",
      v.supported() ? "supported" : "not supported", v.shown, v.measured,
      static_cast<int>(std::count(f.seeds.begin(), f.seeds.end(), ',')) + 1, DeepestGaps(t)));
  report.Paragraph(absl::StrFormat(
      "Setup: BERT (MLM + sentence-order prediction, whole-word masking; WordPiece) on %s, "
      "hidden sizes %s, %d heads, depths %s, sequence %d, "
      "batch %d, %s, %g of the tokens masked, Adam at a constant "
      "learning rate %g with %d "
      "warmup samples, weight decay 0.01, gradient clipping %g, dropout 0.1, initialisation "
      "N(0, %g) (output projections / sqrt(2 * layers)), f32, seeds %s (each seed sets the "
      "initialisation, data order and dropout; the two norms at one seed see the same batches). "
      "Every setting but the norm's position is the same for both norms.",
      corpus_name, f.hidden_size, f.num_attention_heads, f.num_layers, f.seq_length,
      f.global_batch_size, steps, f.mask_prob, f.lr, f.lr_warmup_samples, f.clip_grad, f.init_std,
      f.seeds));
  report.Paragraph(Knob(f));
  report.Heading("Finding");
  report.Paragraph(Finding(t, f.lr, f.lr_warmup_samples));
  report.AddTable(t.gap_table);
  report.Paragraph(
      "Standard error of the gap: sqrt(SE_post^2 + SE_pre^2), the two norms' seeds taken as "
      "independent samples (SE = sample sd / sqrt(seeds)); gaps.csv has the same numbers.");
  report.Heading("Final training loss");
  report.Paragraph(absl::StrFormat(
      "Final loss: the mean training loss (MLM + SOP, nats/token) of a run's last %d "
      "iterations; mean ± sample standard deviation over seeds, the standard error, and the "
      "range. Outcome per seed: diverged (a non-finite loss, or the last %d iterations above the "
      "first %d), stalled (fell by less than %.0f%%), learned.",
      f.window, f.window, f.window, 100 * kMinDrop));
  report.AddTable(t.final_table);
  report.Image("final_loss.png", "final training loss against depth, post-norm and pre-norm");
  report.Heading("Training-loss curves");
  report.Paragraph(absl::StrFormat(
      "Mean over seeds of each run's curve smoothed by a trailing %d-iteration moving average, "
      "with a band of ±1 sample sd over seeds (loss_curves.csv has every run's every iteration; "
      "mean_curves.csv the plotted lines and bands).",
      f.window));
  for (int64_t w : widths) {
    report.Image(absl::StrFormat("loss_curves_h%d.png", w),
                 absl::StrFormat("training loss against iteration, hidden %d", w));
  }
  return report.Write(run);
}

absl::Status Run(const PrenormConfig& f, int argc, char** argv, const LocalRanks& local,
                 comm::Communicator& world) {
  ASSIGN_OR_RETURN(const Plan plan, MakePlan(f));
  ASSIGN_OR_RETURN(ExperimentRun run, StartExperiment(kName, f.results_dir, argc, argv));
  std::string corpus_name;
  ASSIGN_OR_RETURN(std::vector<NormRun> runs, TrainAll(f, plan, local, world, &corpus_name));
  if (world.rank() != 0) return absl::OkStatus();
  const NormTables t = MakeNormTables(runs, f.window, /*smooth=*/f.window);
  RETURN_IF_ERROR(WriteCsv(run.Path("loss_curves.csv"), t.curves));
  RETURN_IF_ERROR(WriteCsv(run.Path("mean_curves.csv"), t.mean_curves));
  RETURN_IF_ERROR(WriteCsv(run.Path("final_losses.csv"), t.final_csv));
  RETURN_IF_ERROR(WriteCsv(run.Path("final_losses_per_seed.csv"), t.per_seed));
  RETURN_IF_ERROR(WriteCsv(run.Path("gaps.csv"), t.gaps_csv));
  RETURN_IF_ERROR(DrawPlots(f, run, plan.depths, plan.widths));
  return WriteReport(f, t, plan.widths, DescribeSteps(f, plan.steps), corpus_name, run);
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

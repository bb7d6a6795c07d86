// ./bazelw run //experiments/gpt2_zeroshot: the paper's Tables 2-3 (GPT-2 zero-shot WikiText-103
// perplexity and LAMBADA accuracy). Trains GPT-2 models of the sizes in --models on the embedded
// prose corpus (experiments/common/prose_corpus.h; or --data_path) with
// //jobs/pretrain:pretrain_gpt, or takes --load checkpoints, and scores each with
// //jobs/eval:wikitext103 and //jobs/eval:lambada on the files given (default: the eval/testdata
// fixtures and a held-out split of the training data written in both formats, heldout.h). Writes
// results/gpt2_zeroshot/ (report.md, zeroshot.csv, two PNGs).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/file_system.h"
#include "core/status.h"
#include "data/preprocessing/default_data.h"
#include "data/tokenizers/factory.h"
#include "experiments/common/eval_runs.h"
#include "experiments/common/plot.h"
#include "experiments/common/prose_corpus.h"
#include "experiments/common/report.h"
#include "experiments/gpt2_zeroshot/bigram.h"
#include "experiments/gpt2_zeroshot/heldout.h"
#include "experiments/gpt2_zeroshot/zeroshot_tables.h"
#include "models/config.h"

namespace mt {
namespace experiments {

namespace {

// The experiment's flags (one per field).
struct ZeroShotConfig {
  std::string results_dir, load, models = "2x64x4,4x128x4", data_path, split = "90,5,5";
  // Every model's training: sequence length 128, global batch 8 in micro-batches of 8, 2200 steps
  // (2,252,800 tokens, about 1.3 passes over the prose corpus's 1.7M training tokens), peak
  // learning rate 2e-3, on the CPU, without dropout (docs/experiments.md: at 1.3 passes it only
  // slowed learning).
  PretrainSchedule train = {128, 8, 8, 2200, 2e-3, DeviceType::kCpu, 0.0};
  std::string wikitext, lambada;
  int64_t heldout_docs = 0, wikitext_docs = 500, overlapping_eval = 64, max_corpus_documents = 0;
  bool lambada_copy_targets = true;
  std::string launcher, work_dir, tensorboard_dir;

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("results_dir", &self.results_dir,
      "Where to write (default: <workspace>/results/gpt2_zeroshot).");
    v("load", &self.load, "Comma-separated GPT checkpoint directories to score (no training).");
    v("models", &self.models,
      "Models to train when no --load: comma-separated LAYERSxHIDDENxHEADS.");
    v("data_path", &self.data_path,
      "GPT-2 indexed dataset prefix (default: the prose corpus, "
      "experiments/common/prose_corpus.h).");
    v("split", &self.split,
      "Train/valid/test document split of --data_path; its test split is held out (the prose "
      "corpus holds its held-out documents apart and trains on 95,5,0).");
    v("max_corpus_documents", &self.max_corpus_documents,
      "Prose corpus: use only this many documents (0: all; for quick runs).");
    v("train_iters", &self.train.iters, "Training steps per model.");
    v("seq_length", &self.train.seq_length, "Training and evaluation sequence length.");
    v("micro_batch_size", &self.train.micro_batch, "Training micro-batch size.");
    v("global_batch_size", &self.train.global_batch, "Training global batch size.");
    v("lr", &self.train.lr, "Peak learning rate (cosine decay to a tenth, 10% warmup).");
    v("dropout", &self.train.dropout,
      "Training's hidden and attention dropout (below 0: pretrain_gpt's default, 0.1).");
    v("wikitext", &self.wikitext,
      "Comma-separated WikiText-format files (e.g. wiki.test.tokens; default: the held-out "
      "documents).");
    v("lambada", &self.lambada,
      "Comma-separated LAMBADA jsonl files (e.g. lambada_test.jsonl; default: the held-out "
      "documents).");
    v("heldout_docs", &self.heldout_docs,
      "Held-out documents written in the LAMBADA format (0: all of the prose corpus's, or 200 "
      "of --data_path's test split).");
    v("lambada_copy_targets", &self.lambada_copy_targets,
      "Held-out LAMBADA lines (the prose corpus's, or --data_path's test split) as LAMBADA "
      "designed its passages (heldout.h "
      "LambadaCopyPassage: per document, its longest beginning ending with a sentence's last word "
      "that occurs earlier in it); false: every document's own last word.");
    v("wikitext_docs", &self.wikitext_docs,
      "Of the prose corpus's held-out documents, the first this many written in the WikiText "
      "format (perplexity needs fewer); with --data_path all --heldout_docs of them are.");
    v("overlapping_eval", &self.overlapping_eval,
      "WikiText window stride (the paper: 32 with 1024-token windows; by default here half the "
      "128-token window).");
    v("device", &self.train.device, "cpu or cuda, for training and scoring.", kDeviceTypeNames);
    v("launcher", &self.launcher,
      "Prefix of every training and scoring command, e.g. 'mpirun -np 8' (TP = ranks).");
    v("work_dir", &self.work_dir,
      "Checkpoints and held-out files (default: $MT_DATA_DIR/gpt2_zeroshot).");
    v("tensorboard_dir", &self.tensorboard_dir,
      "Write the pretraining runs' TensorBoard event files to DIR/<run> (e.g. "
      "results/<name>/tensorboard; empty: none).");
  }
};

struct Setup {
  std::vector<std::string> launcher;
  std::string work_dir, data_prefix, data_name, split;
  std::vector<EvalData> wikitext, lambada;
  HeldOutBaseline baseline;  // Of the held-out LAMBADA file, when the prose corpus is used.
  // The held-out documents were screened against the training text (the prose corpus's are).
  bool screened = false;
};

// Trains one model with pretrain_gpt into work_dir/<label>; returns the checkpoint directory.
absl::StatusOr<std::string> Train(const ZeroShotConfig& c, const std::string& bin, const Setup& s,
                                  const ModelSize& m) {
  const std::string save = absl::StrCat(s.work_dir, "/", m.Label());
  PretrainRun r{s.data_prefix, save, m.layers, m.hidden, m.heads, c.train};
  if (!c.tensorboard_dir.empty()) {
    r.tensorboard_dir =
        absl::StrCat(c.tensorboard_dir, "/", std::filesystem::path(save).filename().string());
  }
  std::vector<std::string> argv = PretrainArgs(r);
  argv.insert(argv.begin(), bin);
  argv.push_back("--split=" + s.split);
  argv.push_back(absl::StrCat("--log_jsonl=", save, ".log.jsonl"));
  RETURN_IF_ERROR(RunLaunched(s.launcher, argv).status());
  return save;
}

// The bigram baseline of `train` on the LAMBADA-format `lines`: per line and counted.
void SetBigramBaseline(const std::vector<std::string>& train, const std::vector<std::string>& lines,
                       HeldOutBaseline* b) {
  b->bigram_example_correct = BigramBaseline::Build(train).CorrectPerLine(lines);
  b->bigram_correct =
      std::count(b->bigram_example_correct.begin(), b->bigram_example_correct.end(), true);
}

// The prose corpus's held-out documents as WikiText and LAMBADA files, and the bigram baseline of
// the LAMBADA file from its training documents.
absl::Status PrepareProse(const ZeroShotConfig& c, Setup* s) {
  ProseCorpusConfig pc;
  pc.max_documents = c.max_corpus_documents;
  ASSIGN_OR_RETURN(ProseCorpus corpus, BuildProseCorpus(pc));
  s->data_prefix = corpus.gpt2_prefix;
  s->data_name = corpus.Describe();
  s->split = "95,5,0";
  s->screened = true;
  std::vector<std::string> texts, train;
  for (const ProseDocument& d : corpus.heldout) {
    if (c.heldout_docs <= 0 || static_cast<int64_t>(texts.size()) < c.heldout_docs) {
      texts.push_back(d.text);
    }
  }
  for (const ProseDocument& d : corpus.train) train.push_back(d.text);
  ASSIGN_OR_RETURN(auto gpt2, data::CreateTokenizer("gpt2"));
  ASSIGN_OR_RETURN(HeldOutFiles h, WriteHeldOutTexts(texts, c.train.seq_length, *gpt2, s->work_dir,
                                                     c.lambada_copy_targets));
  if (static_cast<int64_t>(texts.size()) > c.wikitext_docs) {
    texts.resize(std::max<int64_t>(1, c.wikitext_docs));
    RETURN_IF_ERROR(WriteFile(h.wikitext, WikiTextFile(texts)));
  }
  if (c.wikitext.empty()) {
    s->wikitext.push_back(
        {h.wikitext, absl::StrFormat("%d held-out documents", static_cast<int>(texts.size()))});
  }
  if (c.lambada.empty() && h.lambada_examples > 0) {
    s->lambada.push_back(
        {h.lambada, absl::StrFormat("%lld held-out documents (the %lld %s)",
                                    static_cast<long long>(h.documents),
                                    static_cast<long long>(h.lambada_examples),
                                    c.lambada_copy_targets ? "with a copy passage" : "that fit")});
    s->baseline.lambada_index = static_cast<int>(s->lambada.size()) - 1;
    s->baseline.examples = h.lambada_examples;
    SetBigramBaseline(train, h.lambada_lines, &s->baseline);
  }
  if (c.wikitext.empty()) s->baseline.wikitext_index = static_cast<int>(s->wikitext.size()) - 1;
  return absl::OkStatus();
}

// The data, the held-out files and the evaluation sets.
absl::StatusOr<Setup> Prepare(const ZeroShotConfig& c) {
  Setup s;
  s.launcher = LauncherWords(c.launcher);
  s.work_dir = c.work_dir.empty() ? data::DefaultDataDir() + "/gpt2_zeroshot" : c.work_dir;
  RETURN_IF_ERROR(DefaultFileSystem().CreateDirectories(s.work_dir));
  s.data_prefix = c.data_path;
  s.data_name = c.data_path;
  s.split = c.split;
  for (const std::string& f : CommaList(c.wikitext)) s.wikitext.push_back({f, f});
  for (const std::string& f : CommaList(c.lambada)) s.lambada.push_back({f, f});
  if (s.data_prefix.empty() && c.load.empty()) {
    RETURN_IF_ERROR(PrepareProse(c, &s));
  } else if (!s.data_prefix.empty()) {
    ASSIGN_OR_RETURN(auto gpt2, data::CreateTokenizer("gpt2"));
    ASSIGN_OR_RETURN(HeldOutFiles h,
                     WriteHeldOut(s.data_prefix, c.split, c.heldout_docs > 0 ? c.heldout_docs : 200,
                                  c.train.seq_length, *gpt2, s.work_dir, c.lambada_copy_targets));
    const std::string name =
        absl::StrFormat("held-out %lld test-split documents", static_cast<long long>(h.documents));
    if (c.wikitext.empty()) {
      s.wikitext.push_back({h.wikitext, name});
      s.baseline.wikitext_index = static_cast<int>(s.wikitext.size()) - 1;
    }
    if (c.lambada.empty() && h.lambada_examples > 0) {
      s.lambada.push_back({h.lambada, name});
      // The bigram baseline from the training split's documents.
      ASSIGN_OR_RETURN(std::vector<std::string> train,
                       DecodeSplit(s.data_prefix, c.split, 0, *gpt2));
      s.baseline.lambada_index = static_cast<int>(s.lambada.size()) - 1;
      s.baseline.examples = h.lambada_examples;
      SetBigramBaseline(train, h.lambada_lines, &s.baseline);
    }
  }
  if (s.wikitext.empty() && s.lambada.empty()) {
    return absl::InvalidArgumentError("nothing to score: give --wikitext or --lambada");
  }
  return s;
}

absl::Status Run(const ZeroShotConfig& c, int argc, char** argv) {
  ASSIGN_OR_RETURN(ExperimentRun run, StartExperiment("gpt2_zeroshot", c.results_dir, argc, argv));
  ASSIGN_OR_RETURN(Setup s, Prepare(c));
  std::vector<std::string> checkpoints = CommaList(c.load);
  std::vector<double> train_seconds;
  if (checkpoints.empty()) {
    ASSIGN_OR_RETURN(std::vector<ModelSize> sizes, ParseModelSizes(c.models));
    ASSIGN_OR_RETURN(std::string bin, RunfilePath(argv[0], "jobs/pretrain/pretrain_gpt"));
    for (const ModelSize& m : sizes) {
      std::printf("gpt2_zeroshot: training %s on %s\n", m.Label().c_str(), s.data_name.c_str());
      std::fflush(stdout);
      const double t0 = run.WallSeconds();
      ASSIGN_OR_RETURN(std::string ckpt, Train(c, bin, s, m));
      train_seconds.push_back(run.WallSeconds() - t0);
      checkpoints.push_back(ckpt);
    }
  }
  ASSIGN_OR_RETURN(const std::string wikitext_bin, RunfilePath(argv[0], "jobs/eval/wikitext103"));
  ASSIGN_OR_RETURN(const std::string lambada_bin, RunfilePath(argv[0], "jobs/eval/lambada"));
  ScoringSettings settings{s.launcher,     wikitext_bin,       lambada_bin,
                           c.train.device, c.overlapping_eval, s.baseline.lambada_index,
                           s.work_dir};
  std::vector<ModelScores> scores;
  for (size_t i = 0; i < checkpoints.size(); ++i) {
    std::printf("gpt2_zeroshot: scoring %s\n", checkpoints[i].c_str());
    std::fflush(stdout);
    ASSIGN_OR_RETURN(ModelScores m,
                     ScoreCheckpoint(settings, checkpoints[i], s.wikitext, s.lambada));
    if (i < train_seconds.size()) m.train_seconds = train_seconds[i];
    scores.push_back(std::move(m));
  }
  ZeroShotReportInputs in{s.data_name,        c.load.empty(), c.train.iters, c.train.global_batch,
                          c.train.seq_length, s.wikitext,     s.lambada,     s.baseline};
  in.lr = c.train.lr;
  // Below 0: pretrain_gpt's own, the model configuration's default.
  in.dropout = c.train.dropout >= 0 ? c.train.dropout : models::ModelConfig().hidden_dropout;
  in.lambada_copy_targets = c.lambada_copy_targets && c.lambada.empty() && !s.lambada.empty();
  in.heldout_screened = s.screened;
  return WriteZeroShotResults(run, in, scores);
}

}  // namespace
}  // namespace experiments
}  // namespace mt

int main(int argc, char** argv) {
  return mt::experiments::ExperimentMain("gpt2_zeroshot", argc, argv,
                                         mt::experiments::ZeroShotConfig(), mt::experiments::Run);
}

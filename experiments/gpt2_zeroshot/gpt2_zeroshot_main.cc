// ./bazelw run //experiments/gpt2_zeroshot: the paper's Tables 2-3 (GPT-2 zero-shot WikiText-103
// perplexity and LAMBADA accuracy). Trains GPT-2 models of the sizes in --models on the embedded
// corpus (or --data_path) with //experiments/pretrain:pretrain_gpt, or takes --load checkpoints,
// and scores each with //eval:wikitext103 and //eval:lambada on the files given (default: the
// eval/testdata fixtures and a held-out split of the training data written in both formats,
// heldout.h). Writes results/gpt2_zeroshot/ (report.md, zeroshot.csv, two PNGs).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "data/preprocessing/default_data.h"
#include "data/tokenizers/factory.h"
#include "experiments/gpt2_zeroshot/eval_runs.h"
#include "experiments/gpt2_zeroshot/heldout.h"
#include "experiments/gpt2_zeroshot/zeroshot_tables.h"
#include "experiments/report/plot.h"
#include "experiments/report/report.h"
#include "gflags/gflags.h"

DEFINE_string(results_dir, "", "Where to write (default: <workspace>/results/gpt2_zeroshot).");
DEFINE_string(load, "", "Comma-separated GPT checkpoint directories to score (no training).");
DEFINE_string(models, "2x48x4,4x96x4",
              "Models to train when no --load: comma-separated LAYERSxHIDDENxHEADS.");
DEFINE_string(data_path, "", "GPT-2 indexed dataset prefix (default: the embedded corpus).");
DEFINE_string(split, "90,5,5", "Train/valid/test document split; the test split is held out.");
DEFINE_int64(train_iters, 120, "Training steps per model.");
DEFINE_int64(seq_length, 64, "Training and evaluation sequence length.");
DEFINE_int64(micro_batch_size, 8, "Training micro-batch size.");
DEFINE_int64(global_batch_size, 8, "Training global batch size.");
DEFINE_double(lr, 3e-3, "Peak learning rate (cosine decay to a tenth, 10% warmup).");
DEFINE_string(wikitext, "",
              "Comma-separated WikiText-format files (e.g. wiki.test.tokens; default: the fixture "
              "eval/testdata/wiki_small.tokens and the held-out split).");
DEFINE_string(lambada, "",
              "Comma-separated LAMBADA jsonl files (e.g. lambada_test.jsonl; default: the fixture "
              "eval/testdata/lambada_small.jsonl and the held-out split).");
DEFINE_int64(heldout_docs, 200, "Held-out test-split documents written (0: none).");
DEFINE_int64(overlapping_eval, 32, "WikiText window stride.");
DEFINE_string(device, "cpu", "cpu or cuda, for training and scoring.");
DEFINE_string(launcher, "",
              "Prefix of every training and scoring command, e.g. 'mpirun -np 8' (TP = ranks).");
DEFINE_string(work_dir, "",
              "Checkpoints and held-out files (default: $MT_DATA_DIR/gpt2_zeroshot).");

namespace mt {
namespace experiments {
namespace {

struct Setup {
  std::vector<std::string> launcher;
  std::string work_dir, data_prefix, data_name;
  std::vector<EvalData> wikitext, lambada;
};

// Trains one model with pretrain_gpt into work_dir/<label>; returns the checkpoint directory.
absl::StatusOr<std::string> Train(const std::string& bin, const Setup& s, const ModelSize& m) {
  const std::string save = absl::StrCat(s.work_dir, "/", m.Label());
  PretrainRun r;
  r.data_path = s.data_prefix;
  r.save = save;
  r.device = FLAGS_device;
  r.layers = m.layers;
  r.hidden = m.hidden;
  r.heads = m.heads;
  r.seq_length = FLAGS_seq_length;
  r.micro_batch = FLAGS_micro_batch_size;
  r.global_batch = FLAGS_global_batch_size;
  r.iters = FLAGS_train_iters;
  r.lr = FLAGS_lr;
  std::vector<std::string> argv = PretrainArgs(r);
  argv.insert(argv.begin(), bin);
  argv.push_back("--split=" + FLAGS_split);
  argv.push_back(absl::StrCat("--log_jsonl=", save, ".log.jsonl"));
  std::vector<std::string> cmd = s.launcher;
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  RETURN_IF_ERROR(RunCommand(cmd).status());
  return save;
}

// The data, the held-out files and the evaluation sets.
absl::StatusOr<Setup> Prepare(const std::string& argv0) {
  Setup s;
  s.launcher = absl::StrSplit(FLAGS_launcher, ' ', absl::SkipEmpty());
  s.work_dir = FLAGS_work_dir.empty() ? data::DefaultDataDir() + "/gpt2_zeroshot" : FLAGS_work_dir;
  RETURN_IF_ERROR(RunCommand({"mkdir", "-p", s.work_dir}).status());
  s.data_prefix = FLAGS_data_path;
  s.data_name = FLAGS_data_path;
  if (s.data_prefix.empty() && FLAGS_load.empty()) {
    ASSIGN_OR_RETURN(data::DefaultData d, data::MakeDefaultData(data::DefaultDataConfig()));
    s.data_prefix = d.gpt2_prefix;
    s.data_name = "the embedded corpus (Debian fortunes)";
  }
  for (const std::string& f : CommaList(FLAGS_wikitext)) s.wikitext.push_back({f, f});
  for (const std::string& f : CommaList(FLAGS_lambada)) s.lambada.push_back({f, f});
  if (FLAGS_wikitext.empty()) {
    ASSIGN_OR_RETURN(std::string f, RunfilePath(argv0, "eval/testdata/wiki_small.tokens"));
    s.wikitext.push_back({f, "eval/testdata WikiText-format fixture"});
  }
  if (FLAGS_lambada.empty()) {
    ASSIGN_OR_RETURN(std::string f, RunfilePath(argv0, "eval/testdata/lambada_small.jsonl"));
    s.lambada.push_back({f, "eval/testdata LAMBADA fixture"});
  }
  if (!s.data_prefix.empty() && FLAGS_heldout_docs > 0) {
    ASSIGN_OR_RETURN(auto gpt2, data::CreateTokenizer("gpt2"));
    ASSIGN_OR_RETURN(HeldOutFiles h, WriteHeldOut(s.data_prefix, FLAGS_split, FLAGS_heldout_docs,
                                                  FLAGS_seq_length, *gpt2, s.work_dir));
    const std::string name =
        absl::StrFormat("held-out %lld test-split documents", static_cast<long long>(h.documents));
    if (FLAGS_wikitext.empty()) s.wikitext.push_back({h.wikitext, name});
    if (FLAGS_lambada.empty() && h.lambada_examples > 0) s.lambada.push_back({h.lambada, name});
  }
  return s;
}

absl::Status Run(int argc, char** argv) {
  ASSIGN_OR_RETURN(ExperimentRun run,
                   StartExperiment("gpt2_zeroshot", FLAGS_results_dir, argc, argv));
  ASSIGN_OR_RETURN(Setup s, Prepare(argv[0]));
  std::vector<std::string> checkpoints = CommaList(FLAGS_load);
  std::vector<double> train_seconds;
  if (checkpoints.empty()) {
    ASSIGN_OR_RETURN(std::vector<ModelSize> sizes, ParseModelSizes(FLAGS_models));
    ASSIGN_OR_RETURN(std::string bin, RunfilePath(argv[0], "experiments/pretrain/pretrain_gpt"));
    for (const ModelSize& m : sizes) {
      std::printf("gpt2_zeroshot: training %s on %s\n", m.Label().c_str(), s.data_name.c_str());
      std::fflush(stdout);
      const double t0 = run.WallSeconds();
      ASSIGN_OR_RETURN(std::string ckpt, Train(bin, s, m));
      train_seconds.push_back(run.WallSeconds() - t0);
      checkpoints.push_back(ckpt);
    }
  }
  ASSIGN_OR_RETURN(const std::string wikitext_bin, RunfilePath(argv[0], "eval/wikitext103"));
  ASSIGN_OR_RETURN(const std::string lambada_bin, RunfilePath(argv[0], "eval/lambada"));
  ScoringSettings settings{s.launcher, wikitext_bin, lambada_bin, FLAGS_device,
                           FLAGS_overlapping_eval};
  std::vector<ModelScores> scores;
  for (size_t i = 0; i < checkpoints.size(); ++i) {
    std::printf("gpt2_zeroshot: scoring %s\n", checkpoints[i].c_str());
    std::fflush(stdout);
    ASSIGN_OR_RETURN(ModelScores m,
                     ScoreCheckpoint(settings, checkpoints[i], s.wikitext, s.lambada));
    if (i < train_seconds.size()) m.train_seconds = train_seconds[i];
    scores.push_back(std::move(m));
  }
  ZeroShotReportInputs in{
      s.data_name,      FLAGS_load.empty(), FLAGS_train_iters, FLAGS_global_batch_size,
      FLAGS_seq_length, s.wikitext,         s.lambada};
  return WriteZeroShotResults(run, in, scores);
}

}  // namespace
}  // namespace experiments
}  // namespace mt

int main(int argc, char** argv) {
  return mt::experiments::ExperimentMain("gpt2_zeroshot", argc, argv, mt::experiments::Run);
}

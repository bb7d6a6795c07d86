// ./bazelw run //experiments/race_finetune: the paper's Table 5, RACE column. Pretrains a small
// BERT on the embedded corpus with //jobs/pretrain:pretrain_bert (or takes --load), then
// fine-tunes and scores it with //jobs/eval:race on --data (default: the eval/testdata RACE
// fixture), middle / high / overall beside the paper's. Writes results/race_finetune/ (report.md,
// race.csv).

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
#include "experiments/common/eval_runs.h"
#include "experiments/common/plot.h"
#include "experiments/common/report.h"
#include "experiments/race_finetune/race_tables.h"

namespace mt {
namespace experiments {

namespace {

// The experiment's flags (one per field).
struct RaceFinetuneConfig {
  std::string results_dir, data, load, data_path;
  int num_layers = 2;
  int64_t hidden_size = 64;
  int num_attention_heads = 4;
  // The pretraining: sequence length 128, global batch 8, 100 steps, peak learning rate 3e-3, on
  // the CPU; its sequence length and device are the fine-tuning's too.
  PretrainSchedule pretrain = {128, 8, 0, 100, 3e-3};
  int epochs = 3;
  double lr = 1e-4;
  int64_t global_batch_size = 2;
  std::string launcher, work_dir, tensorboard_dir;

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("results_dir", &self.results_dir,
      "Where to write (default: <workspace>/results/race_finetune).");
    v("data", &self.data,
      "The RACE directory ({train,dev,test}/{middle,high}/*.txt; default: the small "
      "fixture eval/testdata/RACE).");
    v("load", &self.load, "A BERT checkpoint to fine-tune (no pretraining here).");
    v("data_path", &self.data_path,
      "BERT indexed dataset prefix to pretrain on (default: embedded).");
    v("num_layers", &self.num_layers, "Pretrained BERT: layers.");
    v("hidden_size", &self.hidden_size, "Pretrained BERT: hidden size.");
    v("num_attention_heads", &self.num_attention_heads, "Pretrained BERT: attention heads.");
    v("pretrain_iters", &self.pretrain.iters, "Pretraining steps.");
    v("pretrain_batch_size", &self.pretrain.global_batch,
      "Pretraining global batch size (sequences).");
    v("pretrain_lr", &self.pretrain.lr,
      "Pretraining peak learning rate (linear decay to a tenth).");
    v("seq_length", &self.pretrain.seq_length, "Pretraining and fine-tuning sequence length.");
    v("epochs", &self.epochs, "Fine-tuning epochs (the paper: 3).");
    v("lr", &self.lr, "Fine-tuning peak learning rate (the paper: 2e-5 at 336M, 1e-5 at 1.3B).");
    v("global_batch_size", &self.global_batch_size,
      "Fine-tuning questions per step (the paper: 32 / 16).");
    v("device", &self.pretrain.device, "cpu or cuda, for pretraining and fine-tuning.",
      kDeviceTypeNames);
    v("launcher", &self.launcher,
      "Prefix of the pretraining and fine-tuning commands, e.g. 'mpirun -np 8'.");
    v("work_dir", &self.work_dir, "Checkpoints (default: $MT_DATA_DIR/race_finetune).");
    v("tensorboard_dir", &self.tensorboard_dir,
      "Write the pretraining runs' TensorBoard event files to DIR/<run> (e.g. "
      "results/<name>/tensorboard; empty: none).");
  }
};

// Pretrains the BERT (MLM + sentence order) into work_dir/bert; returns the checkpoint.
absl::StatusOr<std::string> Pretrain(const RaceFinetuneConfig& c, const std::string& argv0,
                                     const std::string& work_dir, std::string* data_name) {
  std::string prefix = c.data_path;
  *data_name = prefix;
  if (prefix.empty()) {
    ASSIGN_OR_RETURN(data::DefaultData d, data::MakeDefaultData(data::DefaultDataConfig()));
    prefix = d.bert_prefix;
    *data_name = "the embedded corpus (Debian fortunes, BERT WordPiece)";
  }
  ASSIGN_OR_RETURN(std::string bin, RunfilePath(argv0, "jobs/pretrain/pretrain_bert"));
  const std::string save = absl::StrCat(work_dir, "/bert_", c.num_layers, "x", c.hidden_size, "x",
                                        c.num_attention_heads);
  PretrainRun r{prefix, save, c.num_layers, c.hidden_size, c.num_attention_heads, c.pretrain};
  if (!c.tensorboard_dir.empty()) {
    r.tensorboard_dir =
        absl::StrCat(c.tensorboard_dir, "/", std::filesystem::path(save).filename().string());
  }
  std::vector<std::string> argv = PretrainArgs(r);
  argv.insert(argv.begin(), bin);
  RETURN_IF_ERROR(RunLaunched(LauncherWords(c.launcher), argv).status());
  return save;
}

// Fine-tunes and scores with eval/race; returns its results object.
absl::StatusOr<Json> FineTune(const RaceFinetuneConfig& c, const std::string& argv0,
                              const std::string& checkpoint, const std::string& data,
                              const std::string& save) {
  ASSIGN_OR_RETURN(std::string bin, RunfilePath(argv0, "jobs/eval/race"));
  RETURN_IF_ERROR(DefaultFileSystem().RemoveAll(save));
  return RunForJson(
      LauncherWords(c.launcher),
      {bin, "--load=" + checkpoint, "--data=" + data, absl::StrCat("--epochs=", c.epochs),
       absl::StrCat("--lr=", c.lr), absl::StrCat("--global_batch_size=", c.global_batch_size),
       absl::StrCat("--micro_batch_size=", c.global_batch_size),
       absl::StrCat("--seq_length=", c.pretrain.seq_length),
       absl::StrCat("--device=", DeviceTypeName(c.pretrain.device)), "--save=" + save});
}

absl::Status WriteResults(const RaceFinetuneConfig& c, const ExperimentRun& run,
                          const std::vector<RaceAccuracy>& ours, const std::string& what) {
  Table csv = PaperRaceRows();
  Table md({"model", "split", "middle %", "high %", "overall %", "questions (m/h/all)"});
  for (size_t i = 0; i < csv.rows().size(); i += 3) {
    const auto& r = csv.rows();
    md.AddRow({r[i][0], r[i][1], r[i][3], r[i + 1][3], r[i + 2][3], "-"});
  }
  const std::string label =
      absl::StrCat("ours BERT ", c.num_layers, "x", c.hidden_size, "x", c.num_attention_heads);
  for (const char* split : {"dev", "test"}) {
    std::vector<std::string> row = {c.load.empty() ? label : "ours --load", split, "-", "-", "-"};
    std::string counts;
    for (const RaceAccuracy& a : ours) {
      if (a.split != split) continue;
      csv.AddRow({row[0], a.split, a.subset, Fixed(a.accuracy_pct, 1)});
      const int col = a.subset == "middle" ? 2 : a.subset == "high" ? 3 : 4;
      row[col] = Fixed(a.accuracy_pct, 1);
      absl::StrAppend(&counts, counts.empty() ? "" : "/", a.questions);
    }
    row.push_back(counts);
    if (!counts.empty()) md.AddRow(row);
  }
  RETURN_IF_ERROR(WriteCsv(run.Path("race.csv"), csv));
  Report report("Table 5 (RACE column): BERT fine-tuned on RACE, middle / high / overall");
  report.Paragraph(
      "The paper's RACE test accuracies (Table 5) beside ours: a BERT fine-tuned and scored by "
      "`eval/race` with the paper's protocol (each question as four `[CLS] question+option [SEP] "
      "article [SEP]` sequences, the pooled output through a linear head, softmax cross-entropy "
      "over the four; accuracy per level and overall weighted by questions).");
  report.AddTable(md);
  report.Heading("What our numbers used");
  report.Paragraph(what);
  report.Paragraph(
      "At paper scale: `--load=` a pretrained Megatron-BERT checkpoint, `--data=RACE` (the "
      "official release unpacked), `--seq_length=512 --epochs=3 --global_batch_size=32 "
      "--lr=2e-5` (336M; 16 and 1e-5 for 1.3B), `--device=cuda --launcher='mpirun -np 8'`.");
  return report.Write(run);
}

absl::Status Run(const RaceFinetuneConfig& c, int argc, char** argv) {
  ASSIGN_OR_RETURN(ExperimentRun run, StartExperiment("race_finetune", c.results_dir, argc, argv));
  const std::string work_dir =
      c.work_dir.empty() ? data::DefaultDataDir() + "/race_finetune" : c.work_dir;
  RETURN_IF_ERROR(DefaultFileSystem().CreateDirectories(work_dir));
  std::string data = c.data, data_name = c.data;
  if (data.empty()) {
    // The fixture (//eval:race_fixture) from the runfiles: the directory of one of its files.
    ASSIGN_OR_RETURN(const std::string one,
                     RunfilePath(argv[0], "eval/testdata/RACE/train/middle/1.txt"));
    data = one.substr(0, one.size() - std::string("/train/middle/1.txt").size());
    data_name =
        "the small RACE-format fixture eval/testdata/RACE written for the harness tests "
        "(3 training articles; not RACE)";
  }
  std::string checkpoint = c.load, pretrain_data;
  double pretrain_s = 0;
  if (checkpoint.empty()) {
    std::printf("race_finetune: pretraining BERT\n");
    std::fflush(stdout);
    ASSIGN_OR_RETURN(checkpoint, Pretrain(c, argv[0], work_dir, &pretrain_data));
    pretrain_s = run.WallSeconds();
  }
  std::printf("race_finetune: fine-tuning %s on %s\n", checkpoint.c_str(), data.c_str());
  std::fflush(stdout);
  ASSIGN_OR_RETURN(Json results, FineTune(c, argv[0], checkpoint, data, work_dir + "/race_ckpt"));
  ASSIGN_OR_RETURN(std::vector<RaceAccuracy> ours, ReadRaceAccuracies(results));
  const std::string what = absl::StrFormat(
      "- BERT: %s\n- RACE data: %s (`%s`)\n- fine-tuning: %d epochs, %lld questions per step, lr "
      "%g, sequence length %lld (%.1f s in all)%s",
      c.load.empty()
          ? absl::StrFormat("%d layers, hidden %lld, %d heads, pretrained here for %lld steps of "
                            "%lld sequences on %s (%.1f s)",
                            c.num_layers, static_cast<long long>(c.hidden_size),
                            c.num_attention_heads, static_cast<long long>(c.pretrain.iters),
                            static_cast<long long>(c.pretrain.global_batch), pretrain_data,
                            pretrain_s)
          : absl::StrCat("`", c.load, "` (--load)"),
      data_name, data, c.epochs, static_cast<long long>(c.global_batch_size), c.lr,
      static_cast<long long>(c.pretrain.seq_length), run.WallSeconds() - pretrain_s,
      c.data.empty() ? "\n\nThe fixture's handful of questions makes these accuracies coarse "
                       "(each question is several points): they show the pipeline end to "
                       "end, not a number comparable with the paper's."
                     : "");
  return WriteResults(c, run, ours, what);
}

}  // namespace
}  // namespace experiments
}  // namespace mt

int main(int argc, char** argv) {
  return mt::experiments::ExperimentMain(
      "race_finetune", argc, argv, mt::experiments::RaceFinetuneConfig(), mt::experiments::Run);
}

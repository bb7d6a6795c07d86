// ./bazelw run //experiments/race_finetune: the paper's Table 5, RACE column. Pretrains a small
// BERT on the embedded corpus with //experiments/pretrain:pretrain_bert (or takes --load), then
// fine-tunes and scores it with //eval:race on --data (default: the eval/testdata RACE fixture),
// middle / high / overall beside the paper's. Writes results/race_finetune/ (report.md, race.csv).

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "data/preprocessing/default_data.h"
#include "experiments/gpt2_zeroshot/eval_runs.h"
#include "experiments/race_finetune/race_tables.h"
#include "experiments/report/plot.h"
#include "experiments/report/report.h"
#include "gflags/gflags.h"

DEFINE_string(results_dir, "", "Where to write (default: <workspace>/results/race_finetune).");
DEFINE_string(data, "",
              "The RACE directory ({train,dev,test}/{middle,high}/*.txt; default: the small "
              "fixture eval/testdata/RACE).");
DEFINE_string(load, "", "A BERT checkpoint to fine-tune (no pretraining here).");
DEFINE_string(data_path, "", "BERT indexed dataset prefix to pretrain on (default: embedded).");
DEFINE_int32(num_layers, 2, "Pretrained BERT: layers.");
DEFINE_int64(hidden_size, 64, "Pretrained BERT: hidden size.");
DEFINE_int32(num_attention_heads, 4, "Pretrained BERT: attention heads.");
DEFINE_int64(pretrain_iters, 100, "Pretraining steps.");
DEFINE_int64(pretrain_batch_size, 8, "Pretraining global batch size (sequences).");
DEFINE_double(pretrain_lr, 3e-3, "Pretraining peak learning rate (linear decay to a tenth).");
DEFINE_int64(seq_length, 128, "Pretraining and fine-tuning sequence length.");
DEFINE_int32(epochs, 3, "Fine-tuning epochs (the paper: 3).");
DEFINE_double(lr, 1e-4, "Fine-tuning peak learning rate (the paper: 2e-5 at 336M, 1e-5 at 1.3B).");
DEFINE_int64(global_batch_size, 2, "Fine-tuning questions per step (the paper: 32 / 16).");
DEFINE_string(device, "cpu", "cpu or cuda, for pretraining and fine-tuning.");
DEFINE_string(launcher, "",
              "Prefix of the pretraining and fine-tuning commands, e.g. 'mpirun -np 8'.");
DEFINE_string(work_dir, "", "Checkpoints (default: $MT_DATA_DIR/race_finetune).");

namespace mt {
namespace experiments {
namespace {

std::vector<std::string> WithLauncher(std::vector<std::string> argv) {
  std::vector<std::string> cmd = absl::StrSplit(FLAGS_launcher, ' ', absl::SkipEmpty());
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  return cmd;
}

// Pretrains the BERT (MLM + sentence order) into work_dir/bert; returns the checkpoint.
absl::StatusOr<std::string> Pretrain(const std::string& argv0, const std::string& work_dir,
                                     std::string* data_name) {
  std::string prefix = FLAGS_data_path;
  *data_name = prefix;
  if (prefix.empty()) {
    ASSIGN_OR_RETURN(data::DefaultData d, data::MakeDefaultData(data::DefaultDataConfig()));
    prefix = d.bert_prefix;
    *data_name = "the embedded corpus (Debian fortunes, BERT WordPiece)";
  }
  ASSIGN_OR_RETURN(std::string bin, RunfilePath(argv0, "experiments/pretrain/pretrain_bert"));
  const std::string save = absl::StrCat(work_dir, "/bert_", FLAGS_num_layers, "x",
                                        FLAGS_hidden_size, "x", FLAGS_num_attention_heads);
  PretrainRun r;
  r.data_path = prefix;
  r.save = save;
  r.device = FLAGS_device;
  r.layers = FLAGS_num_layers;
  r.hidden = FLAGS_hidden_size;
  r.heads = FLAGS_num_attention_heads;
  r.seq_length = FLAGS_seq_length;
  r.global_batch = FLAGS_pretrain_batch_size;
  r.iters = FLAGS_pretrain_iters;
  r.lr = FLAGS_pretrain_lr;
  std::vector<std::string> argv = PretrainArgs(r);
  argv.insert(argv.begin(), bin);
  RETURN_IF_ERROR(RunCommand(WithLauncher(argv)).status());
  return save;
}

// Fine-tunes and scores with eval/race; returns its results object.
absl::StatusOr<Json> FineTune(const std::string& argv0, const std::string& checkpoint,
                              const std::string& data, const std::string& save) {
  ASSIGN_OR_RETURN(std::string bin, RunfilePath(argv0, "eval/race"));
  RETURN_IF_ERROR(RunCommand({"rm", "-rf", save}).status());
  return RunForJson(absl::StrSplit(FLAGS_launcher, ' ', absl::SkipEmpty()),
                    {bin, "--load=" + checkpoint, "--data=" + data,
                     absl::StrCat("--epochs=", FLAGS_epochs), absl::StrCat("--lr=", FLAGS_lr),
                     absl::StrCat("--global_batch_size=", FLAGS_global_batch_size),
                     absl::StrCat("--micro_batch_size=", FLAGS_global_batch_size),
                     absl::StrCat("--seq_length=", FLAGS_seq_length), "--device=" + FLAGS_device,
                     "--save=" + save});
}

absl::Status WriteResults(const ExperimentRun& run, const std::vector<RaceAccuracy>& ours,
                          const std::string& what) {
  Table csv = PaperRaceRows();
  Table md({"model", "split", "middle %", "high %", "overall %", "questions (m/h/all)"});
  for (size_t i = 0; i < csv.rows().size(); i += 3) {
    const auto& r = csv.rows();
    md.AddRow({r[i][0], r[i][1], r[i][3], r[i + 1][3], r[i + 2][3], "-"});
  }
  const std::string label = absl::StrCat("ours BERT ", FLAGS_num_layers, "x", FLAGS_hidden_size,
                                         "x", FLAGS_num_attention_heads);
  for (const char* split : {"dev", "test"}) {
    std::vector<std::string> row = {FLAGS_load.empty() ? label : "ours --load", split, "-", "-",
                                    "-"};
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

absl::Status Run(int argc, char** argv) {
  ASSIGN_OR_RETURN(ExperimentRun run,
                   StartExperiment("race_finetune", FLAGS_results_dir, argc, argv));
  const std::string work_dir =
      FLAGS_work_dir.empty() ? data::DefaultDataDir() + "/race_finetune" : FLAGS_work_dir;
  RETURN_IF_ERROR(RunCommand({"mkdir", "-p", work_dir}).status());
  std::string data = FLAGS_data, data_name = FLAGS_data;
  if (data.empty()) {
    // The fixture (//eval:race_fixture) from the runfiles: the directory of one of its files.
    ASSIGN_OR_RETURN(const std::string one,
                     RunfilePath(argv[0], "eval/testdata/RACE/train/middle/1.txt"));
    data = one.substr(0, one.size() - std::string("/train/middle/1.txt").size());
    data_name =
        "the small RACE-format fixture eval/testdata/RACE written for the harness tests "
        "(3 training articles; not RACE)";
  }
  std::string checkpoint = FLAGS_load, pretrain_data;
  double pretrain_s = 0;
  if (checkpoint.empty()) {
    std::printf("race_finetune: pretraining BERT\n");
    std::fflush(stdout);
    ASSIGN_OR_RETURN(checkpoint, Pretrain(argv[0], work_dir, &pretrain_data));
    pretrain_s = run.WallSeconds();
  }
  std::printf("race_finetune: fine-tuning %s on %s\n", checkpoint.c_str(), data.c_str());
  std::fflush(stdout);
  ASSIGN_OR_RETURN(Json results, FineTune(argv[0], checkpoint, data, work_dir + "/race_ckpt"));
  ASSIGN_OR_RETURN(std::vector<RaceAccuracy> ours, ReadRaceAccuracies(results));
  const std::string what = absl::StrFormat(
      "- BERT: %s\n- RACE data: %s (`%s`)\n- fine-tuning: %d epochs, %lld questions per step, lr "
      "%g, sequence length %lld (%.1f s in all)%s",
      FLAGS_load.empty()
          ? absl::StrFormat("%d layers, hidden %lld, %d heads, pretrained here for %lld steps of "
                            "%lld sequences on %s (%.1f s)",
                            FLAGS_num_layers, static_cast<long long>(FLAGS_hidden_size),
                            FLAGS_num_attention_heads, static_cast<long long>(FLAGS_pretrain_iters),
                            static_cast<long long>(FLAGS_pretrain_batch_size), pretrain_data,
                            pretrain_s)
          : absl::StrCat("`", FLAGS_load, "` (--load)"),
      data_name, data, FLAGS_epochs, static_cast<long long>(FLAGS_global_batch_size), FLAGS_lr,
      static_cast<long long>(FLAGS_seq_length), run.WallSeconds() - pretrain_s,
      FLAGS_data.empty() ? "\n\nThe fixture's handful of questions makes these accuracies coarse "
                           "(each question is several points): they show the pipeline end to "
                           "end, not a number comparable with the paper's."
                         : "");
  return WriteResults(run, ours, what);
}

}  // namespace
}  // namespace experiments
}  // namespace mt

int main(int argc, char** argv) {
  return mt::experiments::ExperimentMain("race_finetune", argc, argv, mt::experiments::Run);
}

#include "experiments/common/eval_runs.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/status.h"
#include "core/subprocess.h"
#include "tools/cpp/runfiles/runfiles.h"

namespace mt {
namespace experiments {

absl::StatusOr<std::string> RunfilePath(const std::string& argv0, const std::string& path) {
  using bazel::tools::cpp::runfiles::Runfiles;
  std::string error;
  std::unique_ptr<Runfiles> runfiles(Runfiles::Create(argv0, &error));
  if (runfiles != nullptr) {
    const std::string p = runfiles->Rlocation(absl::StrCat("megatron_cpp/", path));
    if (!p.empty() && access(p.c_str(), F_OK) == 0) return p;
  }
  return absl::NotFoundError(absl::StrCat(
      path, " is not in this binary's runfiles",
      error.empty() ? "" : absl::StrCat(" (", error, ")"),
      ": run it with `./bazelw run //experiments/...` or from bazel-bin after `./bazelw build`"));
}

std::vector<std::string> PretrainArgs(const PretrainRun& r) {
  const PretrainSchedule& s = r.schedule;
  const int64_t samples = s.iters * s.global_batch;
  std::vector<std::string> args = {
      "--data_path=" + r.data_path,
      absl::StrCat("--num_layers=", r.layers),
      absl::StrCat("--hidden_size=", r.hidden),
      absl::StrCat("--num_attention_heads=", r.heads),
      absl::StrCat("--seq_length=", s.seq_length),
      absl::StrCat("--max_position_embeddings=", s.seq_length),
      absl::StrCat("--micro_batch_size=", s.micro_batch > 0 ? s.micro_batch : s.global_batch),
      absl::StrCat("--global_batch_size=", s.global_batch),
      absl::StrCat("--train_iters=", s.iters),
      absl::StrCat("--lr=", s.lr),
      absl::StrCat("--min_lr=", s.lr / 10),
      absl::StrCat("--lr_warmup_samples=", samples / 10),
      absl::StrCat("--lr_decay_samples=", samples),
      absl::StrCat("--log_interval=", std::max<int64_t>(1, s.iters / 10)),
      absl::StrCat("--eval_interval=", s.iters),
      "--eval_iters=2",
      absl::StrCat("--device=", DeviceTypeName(s.device)),
      "--save=" + r.save,
      "--keep_last=1"};
  if (s.dropout >= 0) {
    args.push_back(absl::StrCat("--hidden_dropout=", s.dropout));
    args.push_back(absl::StrCat("--attention_dropout=", s.dropout));
  }
  if (!r.tensorboard_dir.empty()) args.push_back("--tensorboard_dir=" + r.tensorboard_dir);
  return args;
}

absl::StatusOr<Json> LastJsonLine(absl::string_view out, absl::string_view program) {
  out = absl::StripTrailingAsciiWhitespace(out);
  const size_t nl = out.rfind('\n');
  const absl::string_view line = nl == absl::string_view::npos ? out : out.substr(nl + 1);
  Json json = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(program, " printed no results JSON object as its last line: '", line, "'"));
  }
  return json;
}

std::vector<std::string> LocalMpirun(int np) {
  return {
      "mpirun",     "--oversubscribe", "--bind-to",           "none", "--mca", "btl",
      "self,vader", "--mca",           "mpi_yield_when_idle", "1",    "-np",   absl::StrCat(np)};
}

void AllowMpirunAsRoot() {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
}

std::vector<std::string> LauncherWords(absl::string_view launcher) {
  return absl::StrSplit(launcher, ' ', absl::SkipEmpty());
}

absl::StatusOr<std::string> RunLaunched(const std::vector<std::string>& launcher,
                                        const std::vector<std::string>& argv) {
  std::vector<std::string> cmd = launcher;
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  return RunCommand(cmd);
}

absl::StatusOr<Json> RunForJson(const std::vector<std::string>& launcher,
                                const std::vector<std::string>& argv) {
  ASSIGN_OR_RETURN(const std::string out, RunLaunched(launcher, argv));
  return LastJsonLine(out, argv.empty() ? "" : argv[0]);
}

std::vector<std::string> CommaList(absl::string_view list) {
  return absl::StrSplit(list, ',', absl::SkipEmpty());
}

absl::StatusOr<double> NumberAt(const Json& json, const std::vector<std::string>& path,
                                absl::string_view what) {
  const Json* node = &json;
  for (const std::string& key : path) {
    if (!node->is_object() || !node->contains(key)) {
      return absl::NotFoundError(
          absl::StrCat(what, " results have no ", absl::StrJoin(path, "."), " (no key ", key, ")"));
    }
    node = &(*node)[key];
  }
  if (!node->is_number()) {
    return absl::NotFoundError(
        absl::StrCat(what, " results' ", absl::StrJoin(path, "."), " is not a number"));
  }
  return node->get<double>();
}

}  // namespace experiments
}  // namespace mt

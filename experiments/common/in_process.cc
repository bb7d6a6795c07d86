#include "experiments/common/in_process.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "comm/mpi_communicator.h"
#include "core/status.h"
#include "data/preprocessing/default_data.h"
#include "gflags/gflags.h"
#include "glog/logging.h"

namespace mt {
namespace experiments {

using jobs::LocalRanks;
using jobs::PretrainConfig;

int RunInProcess(int* argc, char*** argv, absl::string_view name,
                 const std::function<absl::Status(const LocalRanks&, comm::Communicator&)>& run) {
  auto fail = [&](const absl::Status& s) {
    std::fprintf(stderr, "%s: error: %s\n", std::string(name).c_str(),
                 std::string(s.message()).c_str());
    return 1;
  };
  auto runtime = comm::MpiRuntime::Init(argc, argv);
  if (!runtime.ok()) return fail(runtime.status());
  auto world = (*runtime)->World();
  if (!world.ok()) return fail(world.status());
  const absl::Status s = run({(*runtime)->local_rank(), (*runtime)->local_size()}, **world);
  if (s.ok()) return 0;
  if ((*world)->size() > 1) comm::MpiRuntime::Abort(s);
  return fail(s);
}

int InProcessExperimentMain(
    int argc, char** argv, absl::string_view name, const char* usage,
    const std::function<absl::Status(int, char**, const LocalRanks&, comm::Communicator&)>& run) {
  gflags::SetUsageMessage(usage);
  FLAGS_minloglevel = 1;
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  const int original_argc = argc;
  char** const original_argv = argv;
  gflags::ParseCommandLineFlags(&argc, &argv, /*remove_flags=*/false);
  return RunInProcess(&argc, &argv, name, [&](const LocalRanks& local, comm::Communicator& world) {
    return run(original_argc, original_argv, local, world);
  });
}

void ApplyRunShape(const InProcessFlags& f, const RunShape& s, PretrainConfig* c) {
  c->model.num_layers = static_cast<int>(s.layers);
  c->model.hidden_size = s.hidden;
  c->model.num_attention_heads = static_cast<int>(s.heads);
  c->model.max_position_embeddings = f.seq_length;
  c->trainer.seq_length = f.seq_length;
  c->trainer.micro_batch_size = f.micro_batch_size;
  c->trainer.global_batch_size = f.global_batch_size;
  c->trainer.train_iters = f.train_iters;
  c->trainer.seed = s.seed;
  c->trainer.quiet = true;
  c->device = f.device;
  c->threads = f.threads;
  c->data_path = s.data_path;
  c->split = "949,50,1";
}

absl::StatusOr<std::string> DefaultDataset(const std::string& data_dir, bool gpt2) {
  data::DefaultDataConfig dc;
  if (!data_dir.empty()) dc.output_dir = data_dir;
  ASSIGN_OR_RETURN(data::DefaultData d, data::MakeDefaultData(dc));
  if (d.gpt2_built || d.bert_built) {
    std::printf("tokenised the corpus %s into %s\n", dc.corpus_dir.c_str(), dc.output_dir.c_str());
  }
  return gpt2 ? d.gpt2_prefix : d.bert_prefix;
}

absl::StatusOr<std::string> ScratchDir(absl::string_view experiment) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/mt_",
                                       experiment, "_", getpid());
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (!std::filesystem::create_directories(dir, ec) || ec) {
    return absl::InternalError(
        absl::StrCat("cannot create the scratch directory ", dir, ": ", ec.message()));
  }
  return dir;
}

}  // namespace experiments
}  // namespace mt

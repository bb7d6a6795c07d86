#include "experiments/common/in_process.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/mpi_main.h"
#include "core/status.h"
#include "data/preprocessing/default_data.h"

namespace mt {
namespace experiments {

using jobs::LocalRanks;
using jobs::PretrainConfig;

int InProcessExperimentMain(
    int argc, char** argv, absl::string_view name, const char* usage,
    const std::function<absl::Status(int, char**, const LocalRanks&, comm::Communicator&)>& run) {
  // The report records the command as given: gflags reorders argv, not the strings.
  std::vector<char*> original(argv, argv + argc);
  const std::string name_text(name);
  const comm::MainInfo info{name_text.c_str(), usage};
  return comm::MpiMain(
      argc, argv, info, [](int) { return absl::OkStatus(); },
      [&](const comm::MpiProcess& p) -> absl::StatusOr<int> {
        const absl::Status s = run(static_cast<int>(original.size()), original.data(),
                                   {p.local_rank, p.local_size}, p.world);
        if (s.ok()) return 0;
        if (p.world.size() > 1) return s;  // Ends every rank.
        comm::PrintMainError(info, s);     // A world of one: its own one-line error.
        return 1;
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
  if (!f.tensorboard_dir.empty()) {
    c->trainer.logging.tensorboard_dir =
        s.name.empty() ? f.tensorboard_dir : absl::StrCat(f.tensorboard_dir, "/", s.name);
  }
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

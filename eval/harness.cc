#include "eval/harness.h"

#include <algorithm>
#include <cerrno>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status.h"

namespace mt {
namespace eval {

absl::Status HarnessConfig::Validate() const {
  if (load.empty()) {
    return absl::InvalidArgumentError("--load is required (a checkpoint directory to evaluate)");
  }
  if (micro_batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--micro_batch_size must be >= 1 (got ", micro_batch_size, ")"));
  }
  RETURN_IF_ERROR(precision.Resolve(device).status());
  RETURN_IF_ERROR(comm::ValidateCommBackend(comm_backend, device));
  if (vocab_file.empty() != merge_file.empty()) {
    return absl::InvalidArgumentError(
        "give both --vocab_file (encoder.json) and --merge_file (vocab.bpe), or neither (the "
        "installed GPT-2 tokenizer)");
  }
  if (threads < 0 || !(progress_interval >= 0)) {
    return absl::InvalidArgumentError("--threads and --progress_interval must be >= 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Harness>> Harness::Open(const HarnessConfig& config,
                                                       const Placement& placement) {
  std::unique_ptr<Harness> h(new Harness());
  h->config_ = config;
  h->placement_ = placement;
  ASSIGN_OR_RETURN(h->compute_dtype_, config.precision.Resolve(config.device));
  RankExecutionOptions ro;
  ro.cuda = config.device == DeviceType::kCuda;
  ro.threads = config.threads;
  ro.local_rank = placement.local_rank;
  ro.local_size = placement.local_size;
  ASSIGN_OR_RETURN(h->rank_, CreateRankExecution(ro));
  ASSIGN_OR_RETURN(h->checkpoint_, checkpoint::ReadCheckpointModel(config.load, config.iteration));
  const models::ModelConfig& m = h->checkpoint_.config;
  if (absl::Status s = m.ValidateParallel(placement.world_size); !s.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the model of ", config.load, " cannot run on ", placement.world_size,
        " processes (the tensor-parallel degree is the number of processes): ", s.message()));
  }
  return h;
}

Harness::~Harness() = default;

absl::Status Harness::LoadModel(checkpoint::LoadModelOptions options) {
  options.iteration = checkpoint_.iteration;
  options.compute_dtype = compute_dtype_;
  options.load.verify = config_.checkpoint_verify;
  ASSIGN_OR_RETURN(loaded_, checkpoint::LoadModel(config_.load, placement_.rank,
                                                  placement_.world_size, rank_.exec, options));
  return absl::OkStatus();
}

absl::Status Harness::Connect(comm::Communicator& world) {
  ASSIGN_OR_RETURN(world_,
                   comm::CreateWorldCommunicator(world, rank_.exec.device, config_.comm_backend,
                                                 placement_.local_size));
  comm::ParallelConfig pc;
  pc.tensor_parallel = placement_.world_size;
  ASSIGN_OR_RETURN(parallel_, comm::ParallelContext::Create(
                                  *world_.comm, pc, checkpoint_.config.num_attention_heads));
  return absl::OkStatus();
}

nn::StepContext Harness::step_context() const {
  return nn::StepContext::Eval(&rank_.exec, parallel_->tp_or_null());
}

std::string Harness::Describe() const {
  const models::ModelConfig& m = checkpoint_.config;
  return absl::StrCat(checkpoint_.model_name.empty() ? "a model" : checkpoint_.model_name, " (",
                      m.ArchitectureName(), ": ", m.num_layers, " layers, hidden ", m.hidden_size,
                      ", ", m.num_attention_heads, " heads, vocab ", m.vocab_size, ") from ",
                      checkpoint_.dir, " iteration ", checkpoint_.iteration, " (saved at TP ",
                      checkpoint_.tp_size, "), run at TP ", placement_.world_size, " on ",
                      rank_.exec.device.ToString(), " in ", DTypeName(compute_dtype_),
                      world_.nccl() ? " (NCCL)" : "");
}

absl::Status AgreeOnStatus(comm::Communicator& world, const absl::Status& local, bool* report) {
  // [this rank failed, rank 0 failed], maximised over the ranks.
  Tensor flags = Tensor::Host({2}, DType::kI32);
  int32_t* f = flags.data_as<int32_t>();
  f[0] = local.ok() ? 0 : 1;
  f[1] = world.rank() == 0 ? f[0] : 0;
  *report = true;
  RETURN_IF_ERROR(world.AllReduce(flags.view(), comm::ReduceOp::kMax));
  *report = !local.ok() && (world.rank() == 0 || f[1] == 0);
  if (!local.ok()) return local;
  if (f[0] != 0) return absl::AbortedError("another rank failed");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<JsonlWriter>> JsonlWriter::Open(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path));
  return std::unique_ptr<JsonlWriter>(new JsonlWriter(path, file));
}

JsonlWriter::~JsonlWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status JsonlWriter::Write(const Json& line) {
  const std::string text = line.dump() + "\n";
  if (std::fwrite(text.data(), 1, text.size(), file_) != text.size()) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path_));
  }
  return absl::OkStatus();
}

absl::Status JsonlWriter::Close() {
  const bool failed = std::ferror(file_) != 0;
  const int closed = std::fclose(file_);
  file_ = nullptr;
  if (failed || closed != 0)
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", path_));
  return absl::OkStatus();
}

absl::Status WriteResultsJson(const std::string& path, const Json& results) {
  ASSIGN_OR_RETURN(std::unique_ptr<JsonlWriter> w, JsonlWriter::Open(path));
  RETURN_IF_ERROR(w->Write(results));
  return w->Close();
}

namespace {

// "1:02:03".
std::string Clock(double seconds) {
  const int64_t s = static_cast<int64_t>(std::max(0.0, seconds) + 0.5);
  return absl::StrFormat("%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
}

}  // namespace

ProgressMeter::ProgressMeter(std::string task, std::string unit, int64_t total, double interval_s,
                             bool enabled, std::string rate_unit)
    : task_(std::move(task)),
      unit_(std::move(unit)),
      rate_unit_(std::move(rate_unit)),
      total_(total),
      interval_s_(interval_s),
      enabled_(enabled),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

double ProgressMeter::elapsed_s() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressMeter::Update(int64_t done, int64_t scored) {
  const auto now = std::chrono::steady_clock::now();
  if (!enabled_ || done >= total_ ||
      std::chrono::duration<double>(now - last_).count() < interval_s_) {
    return;
  }
  last_ = now;
  const double elapsed = elapsed_s();
  const double eta = done > 0 ? elapsed * static_cast<double>(total_ - done) / done : 0;
  std::printf("%s: %lld/%lld %s (%.1f%%), %.0f %s/s, elapsed %s, ETA %s\n", task_.c_str(),
              static_cast<long long>(done), static_cast<long long>(total_), unit_.c_str(),
              100.0 * done / std::max<int64_t>(total_, 1), elapsed > 0 ? scored / elapsed : 0.0,
              rate_unit_.c_str(), Clock(elapsed).c_str(), Clock(eta).c_str());
  std::fflush(stdout);
}

}  // namespace eval
}  // namespace mt

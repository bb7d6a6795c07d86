#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "core/alloc.h"
#include "core/ops/elementwise.h"
#include "core/status.h"
#include "glog/logging.h"
#include "nlohmann/json.hpp"
#include "train/stop_request.h"

namespace mt {
namespace train {

namespace {

// Sums of LogRecords between two log lines; the line shows their means.
struct IntervalSums {
  int steps = 0;
  double ms = 0, flops = 0, total = 0;
  std::vector<double> parts;

  void Add(const LogRecord& r, double flops_of_step) {
    ++steps;
    ms += r.ms_per_iteration;
    flops += flops_of_step;
    total += r.loss.total;
    parts.resize(r.loss.parts.size(), 0.0);
    for (size_t k = 0; k < parts.size(); ++k) parts[k] += r.loss.parts[k];
  }
  // `last` with its losses, time, throughput and FLOP rate replaced by the interval's means.
  LogRecord Mean(const LogRecord& last, const TrainerConfig& c, int world_size) const {
    LogRecord avg = last;
    avg.loss.total = total / steps;
    for (size_t k = 0; k < parts.size(); ++k) avg.loss.parts[k] = parts[k] / steps;
    avg.ms_per_iteration = ms / steps;
    avg.tokens_per_second = c.global_batch_size * c.seq_length / (avg.ms_per_iteration / 1e3);
    avg.tflops_per_rank = flops / (ms / 1e3) / world_size / 1e12;
    return avg;
  }
};

// " | num zeros: 12 | params norm: 30.123" for what the step counted (Megatron's fields).
std::string FormatNorms(const LogRecord& r) {
  std::string out;
  if (r.num_zeros >= 0) absl::StrAppend(&out, " | num zeros: ", r.num_zeros);
  if (r.params_norm >= 0) absl::StrAppendFormat(&out, " | params norm: %.3f", r.params_norm);
  return out;
}

}  // namespace

absl::Status LoggingConfig::Validate() const {
  if (timing_log_level < 0 || timing_log_level > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timing_log_level=", timing_log_level, ": must be 0, 1 or 2"));
  }
  if (tensorboard_log_interval < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tensorboard_log_interval=", tensorboard_log_interval, ": must be >= 1"));
  }
  if (!(straggler_threshold >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--straggler_threshold=", straggler_threshold, ": must be >= 0"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainerConfig& config,
                                                         const TrainingParts& parts) {
  RETURN_IF_ERROR(config.logging.Validate());
  std::unique_ptr<Trainer> t(new Trainer(config, parts));
  std::function<void()> sync;
  if (!parts.exec->device.is_cpu() && config.logging.timing_log_level > 0) {
    // Megatron's timers synchronise the device: the time is then the kernels' too.
    const ExecContext* exec = parts.exec;
    sync = [exec] {
      const absl::Status synced = SynchronizeDevice(*exec);
      CHECK(synced.ok()) << synced;
    };
  }
  t->timers_ = std::make_unique<Timers>(config.logging.timing_log_level, std::move(sync));
  parts.optimizer->set_timers(t->timers_.get());
  // Megatron's SummaryWriter is the last rank's: it holds the last pipeline stage's losses.
  const comm::ParallelContext& pc = *parts.parallel;
  if (!config.logging.tensorboard_dir.empty() && pc.rank() == pc.world_size() - 1) {
    absl::StatusOr<std::unique_ptr<EventFileWriter>> writer =
        EventFileWriter::Open(config.logging.tensorboard_dir);
    if (!writer.ok()) {
      return absl::Status(writer.status().code(),
                          absl::StrCat("--tensorboard_dir: ", writer.status().message()));
    }
    t->tensorboard_ = *std::move(writer);
  }
  if (parts.parallel->rank() == 0 && !config.log_jsonl.empty()) {
    ASSIGN_OR_RETURN(t->jsonl_, JsonlWriter::Open(config.log_jsonl));
  }
  if (parts.parallel->pp_size() > 1) RETURN_IF_ERROR(t->SetUpPipeline());
  return t;
}

Trainer::Trainer(const TrainerConfig& config, const TrainingParts& parts)
    : config_(config),
      parts_(parts),
      loss_names_(parts.model->loss_names()),
      output_stage_parts_(parts.model->output_stage_parts()) {}

Trainer::~Trainer() {
  if (timers_ != nullptr) parts_.optimizer->set_timers(nullptr);
}

absl::Status Trainer::DpSum(std::vector<double>* values) {
  comm::Communicator& dp = parts_.parallel->dp();
  if (dp.size() == 1) return absl::OkStatus();
  Tensor t = Tensor::Host({static_cast<int64_t>(values->size())}, DType::kF32);
  float* p = t.data_as<float>();
  for (size_t i = 0; i < values->size(); ++i) p[i] = static_cast<float>((*values)[i]);
  RETURN_IF_ERROR(dp.AllReduce(t.view(), comm::ReduceOp::kSum));
  for (size_t i = 0; i < values->size(); ++i) (*values)[i] = static_cast<double>(p[i]);
  return absl::OkStatus();
}

absl::Status Trainer::DpMean(models::Losses* losses, double* flops) {
  std::vector<double> v = {losses->total};
  v.insert(v.end(), losses->parts.begin(), losses->parts.end());
  v.push_back(*flops);
  RETURN_IF_ERROR(DpSum(&v));
  const double dp = parts_.parallel->dp_size();
  losses->total = v[0] / dp;
  for (size_t k = 0; k < losses->parts.size(); ++k) losses->parts[k] = v[1 + k] / dp;
  *flops = v.back();
  return absl::OkStatus();
}

std::string Trainer::FormatLosses(const models::Losses& losses) const {
  std::string out;
  for (size_t i = 0; i < loss_names_.size() && i < losses.parts.size(); ++i) {
    absl::StrAppendFormat(&out, " | %s: %.6E", loss_names_[i], losses.parts[i]);
  }
  return out;
}

absl::Status Trainer::Log(const LogRecord& r) {
  if (parts_.parallel->rank() != 0) return absl::OkStatus();
  if (!config_.quiet) {
    std::printf(
        " iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per iteration (ms): "
        "%.1f | learning rate: %.3E | global batch size: %5lld%s | loss scale: %.1f | grad norm: "
        "%.3f%s | number of skipped iterations: %3lld | tokens/s: %.0f | TFLOP/s per rank: %.4f\n",
        static_cast<long long>(r.iteration), static_cast<long long>(config_.train_iters),
        static_cast<long long>(r.consumed_samples), r.ms_per_iteration, r.learning_rate,
        static_cast<long long>(config_.global_batch_size), FormatLosses(r.loss).c_str(),
        r.loss_scale, r.grad_norm, FormatNorms(r).c_str(),
        static_cast<long long>(r.skipped_iterations), r.tokens_per_second, r.tflops_per_rank);
    std::fflush(stdout);
  }
  if (jsonl_ == nullptr) return absl::OkStatus();
  nlohmann::json j = {{"iteration", r.iteration},
                      {"consumed_samples", r.consumed_samples},
                      {"ms_per_iteration", r.ms_per_iteration},
                      {"learning_rate", r.learning_rate},
                      {"loss", r.loss.total},
                      {"loss_scale", r.loss_scale},
                      {"grad_norm", std::isfinite(r.grad_norm) ? r.grad_norm : -1.0},
                      {"skipped_iterations", r.skipped_iterations},
                      {"tokens_per_second", r.tokens_per_second},
                      {"tflops_per_rank", r.tflops_per_rank}};
  if (r.num_zeros >= 0) j["num_zeros"] = r.num_zeros;
  if (r.params_norm >= 0) j["params_norm"] = r.params_norm;
  // "lm loss" -> "lm_loss".
  for (size_t i = 0; i < loss_names_.size() && i < r.loss.parts.size(); ++i) {
    j[absl::StrReplaceAll(loss_names_[i], {{" ", "_"}})] = r.loss.parts[i];
  }
  return jsonl_->Write(j);
}

void Trainer::ReportMemory(const std::string& when) const {
  if (config_.quiet || parts_.parallel->dp_rank() != 0) return;
  const absl::StatusOr<MemoryUsage> usage = CurrentMemoryUsage(parts_.exec->device);
  if (!usage.ok()) {
    LOG(WARNING) << "no memory report: " << usage.status();
    return;
  }
  constexpr double kMiB = 1048576.0;
  std::string line = absl::StrFormat(
      "[Rank %d] (%s) memory (MB) | resident: %.1f | max resident: %.1f", parts_.parallel->rank(),
      when, usage->resident_bytes / kMiB, usage->peak_resident_bytes / kMiB);
  if (usage->device_in_use_bytes >= 0) {
    absl::StrAppendFormat(&line, " | device in use: %.1f", usage->device_in_use_bytes / kMiB);
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

nn::StepContext TrainingMicroStep(const ExecContext* exec, const comm::ParallelContext& parallel,
                                  uint64_t seed, int64_t iteration, int64_t consumed_samples,
                                  int64_t micro_batch_size, int64_t micro) {
  nn::StepContext sc = nn::StepContext::Train(
      exec, parallel.tp_or_null(), seed, static_cast<uint64_t>(iteration),
      consumed_samples + micro_batch_size * (micro * parallel.dp_size() + parallel.dp_rank()));
  sc.cp = parallel.cp_or_null();
  return sc;
}

comm::Communicator* GradGroup(const comm::ParallelContext& parallel) {
  return parallel.dp_cp().size() > 1 ? &parallel.dp_cp() : nullptr;
}

nn::StepContext Trainer::MicroStep(int64_t micro) const {
  nn::StepContext sc = TrainingMicroStep(parts_.exec, *parts_.parallel, config_.seed, iteration_,
                                         consumed_samples_, config_.micro_batch_size, micro);
  sc.timers = timers_.get();
  return sc;
}

double Trainer::CommSeconds() const {
  const comm::CallMonitor* monitor = parts_.parallel->world().call_monitor();
  return monitor == nullptr ? 0.0 : monitor->Read().seconds_in_calls;
}

absl::Status Trainer::AddScalarPair(const std::string& tag, double value) {
  RETURN_IF_ERROR(tensorboard_->AddScalar(tag, value, iteration_));
  return tensorboard_->AddScalar(tag + " vs samples", value, consumed_samples_);
}

absl::Status Trainer::WriteTensorBoard(const LogRecord& r) {
  if (tensorboard_ == nullptr) return absl::OkStatus();
  const LoggingConfig& lc = config_.logging;
  RETURN_IF_ERROR(AddScalarPair("learning-rate", r.learning_rate));
  RETURN_IF_ERROR(AddScalarPair("batch-size", static_cast<double>(config_.global_batch_size)));
  for (size_t i = 0; i < loss_names_.size() && i < r.loss.parts.size(); ++i) {
    RETURN_IF_ERROR(AddScalarPair(loss_names_[i], r.loss.parts[i]));
  }
  RETURN_IF_ERROR(AddScalarPair("loss-scale", r.loss_scale));
  RETURN_IF_ERROR(AddScalarPair("grad-norm", r.grad_norm));
  if (r.num_zeros >= 0) {
    RETURN_IF_ERROR(AddScalarPair("num-zeros", static_cast<double>(r.num_zeros)));
  }
  if (r.params_norm >= 0) RETURN_IF_ERROR(AddScalarPair("params-norm", r.params_norm));
  if (lc.log_memory_to_tensorboard) {
    ASSIGN_OR_RETURN(const MemoryUsage usage, CurrentMemoryUsage(parts_.exec->device));
    RETURN_IF_ERROR(tensorboard_->AddScalar("mem-resident-bytes",
                                            static_cast<double>(usage.resident_bytes), iteration_));
    RETURN_IF_ERROR(tensorboard_->AddScalar(
        "mem-max-resident-bytes", static_cast<double>(usage.peak_resident_bytes), iteration_));
    if (usage.device_in_use_bytes >= 0) {
      RETURN_IF_ERROR(tensorboard_->AddScalar(
          "mem-allocated-bytes", static_cast<double>(usage.device_in_use_bytes), iteration_));
    }
  }
  return tensorboard_->Flush();
}

absl::Status Trainer::LogValidation(const EvalResult& e) {
  if (tensorboard_ == nullptr) return absl::OkStatus();
  for (size_t i = 0; i < loss_names_.size() && i < e.loss.parts.size(); ++i) {
    const std::string key = absl::StrCat(loss_names_[i], " validation");
    RETURN_IF_ERROR(AddScalarPair(key, e.loss.parts[i]));
    if (config_.logging.log_validation_ppl_to_tensorboard) {
      // Megatron's: exp of the loss, capped at exp(20).
      RETURN_IF_ERROR(AddScalarPair(key + " ppl", std::exp(std::min(20.0, e.loss.parts[i]))));
    }
  }
  return tensorboard_->Flush();
}

absl::Status Trainer::ReportTimings() {
  const LoggingConfig& lc = config_.logging;
  const bool timers = lc.timing_log_level > 0, stragglers = lc.log_straggler;
  const bool to_tensorboard = lc.log_timers_to_tensorboard && tensorboard_ != nullptr;
  if (to_tensorboard && interval_steps_ > 0) {
    RETURN_IF_ERROR(tensorboard_->AddScalar("iteration-time",
                                            interval_step_ms_ / interval_steps_ / 1e3, iteration_));
  }
  if ((timers || stragglers) && interval_steps_ > 0) {
    std::vector<double> ms = timers_->ElapsedMs();
    for (double& m : ms) {
      if (m >= 0) m /= interval_steps_;
    }
    const double step_ms = interval_step_ms_ / interval_steps_;
    const double busy_ms = (interval_step_ms_ - interval_comm_ms_) / interval_steps_;
    ASSIGN_OR_RETURN(const RankTimings all,
                     GatherTimings(parts_.parallel->world(), ms, step_ms, busy_ms));
    if (parts_.parallel->rank() == 0 && !config_.quiet) {
      if (timers) {
        const std::string report = FormatTimers(all, lc.timing_log_option);
        if (!report.empty()) std::printf("%s\n", report.c_str());
      }
      if (stragglers) {
        int straggler = -1;
        std::printf("%s\n", FormatStragglers(all, lc.straggler_threshold, &straggler).c_str());
      }
      std::fflush(stdout);
    }
    if (to_tensorboard) {
      // Megatron's "<timer>-time": the maximum over the ranks, in seconds per iteration.
      for (int i = 0; i < kNumTimers; ++i) {
        double max_ms = -1;
        for (const std::vector<double>& rank : all.timer_ms) max_ms = std::max(max_ms, rank[i]);
        if (max_ms < 0) continue;
        RETURN_IF_ERROR(tensorboard_->AddScalar(absl::StrCat(kTimers[i].name, "-time"),
                                                max_ms / 1e3, iteration_));
      }
    }
  }
  if (tensorboard_ != nullptr) RETURN_IF_ERROR(tensorboard_->Flush());
  timers_->Reset();
  interval_step_ms_ = interval_comm_ms_ = 0;
  interval_steps_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<EvalResult> Trainer::Evaluate(BatchStream& valid) {
  nn::StepContext sc = nn::StepContext::Eval(parts_.exec, parts_.parallel->tp_or_null());
  sc.cp = parts_.parallel->cp_or_null();
  models::Losses sums;
  sums.parts.assign(loss_names_.size(), 0.0);
  int n = 0;
  if (pipeline_ != nullptr) {
    ASSIGN_OR_RETURN(std::tie(sums, n), PipelinedEvalSums(valid));
  }
  for (int i = 0; i < config_.eval_iters && pipeline_ == nullptr; ++i) {
    std::optional<models::Batch> batch = valid.Next();
    if (!batch) break;
    ASSIGN_OR_RETURN(models::Losses l,
                     parts_.model->ForwardBackward(sc, *batch, models::Backward::kNo));
    sums.total += l.total;
    for (size_t k = 0; k < sums.parts.size(); ++k) sums.parts[k] += l.parts[k];
    ++n;
  }
  if (n == 0) return absl::FailedPreconditionError("validation data exhausted");
  sums.total /= n;
  for (double& p : sums.parts) p /= n;
  double no_flops = 0;
  RETURN_IF_ERROR(PpSum(&sums, &no_flops));
  RETURN_IF_ERROR(DpMean(&sums, &no_flops));
  EvalResult e;
  e.loss = sums;
  e.perplexity = e.loss.parts.empty() ? 0.0 : std::exp(e.loss.parts[0]);
  return e;
}

absl::StatusOr<Trainer::Accumulated> Trainer::AccumulateGradients(BatchStream& data) {
  if (pipeline_ != nullptr) return AccumulatePipelined(data);
  comm::Communicator* dp = GradGroup(*parts_.parallel);
  const int64_t accumulation = data.accumulation_steps();
  Accumulated r;
  r.loss.parts.assign(loss_names_.size(), 0.0);
  for (int64_t micro = 0; micro < accumulation; ++micro) {
    nn::StepContext sc = MicroStep(micro);
    // The last backward pass of the iteration reports finished gradients, so their DP
    // all-reduce overlaps the rest of it (train/grad_reducer.h).
    if (micro == accumulation - 1) sc.grads_ready = parts_.optimizer->BeginGradReduce(dp);
    std::optional<models::Batch> batch;
    {
      nn::TimerScope timed(timers_.get(), "batch-generator");
      batch = data.Next();
    }
    if (!batch) {
      return absl::OutOfRangeError(absl::StrFormat(
          "training data exhausted at iteration %d; build the dataset with more samples",
          iteration_));
    }
    ASSIGN_OR_RETURN(
        models::Losses l,
        parts_.model->ForwardBackward(sc, *batch, models::Backward::kYes, parts_.scaler->scale()));
    r.loss.total += l.total;
    for (size_t k = 0; k < r.loss.parts.size(); ++k) r.loss.parts[k] += l.parts[k];
    r.flops += parts_.model->TrainingFlops(batch->tokens.dim(0), batch->tokens.dim(1), l.scored);
  }
  r.loss.total /= accumulation;
  for (double& p : r.loss.parts) p /= accumulation;
  return r;
}

absl::Status Trainer::CheckNonfinite(const StepStats& stats, const models::Losses& loss) {
  if (!stats.skipped || parts_.scaler->dynamic()) {
    nonfinite_in_a_row_ = 0;
    return absl::OkStatus();
  }
  ++nonfinite_in_a_row_;
  const std::string what = absl::StrFormat("the loss (%g) or the gradient norm (%g) is not finite",
                                           loss.total, stats.grad_norm);
  if (config_.max_nan_skips > 0 && nonfinite_in_a_row_ >= config_.max_nan_skips) {
    return absl::AbortedError(absl::StrFormat(
        "iteration %d: %s in %d iterations in a row (%d to %d), each skipped; stopping "
        "(--max_nan_skips=%d). The weights were not updated by them and no checkpoint was "
        "written after them: resume from the last one with --load (a lower --lr may help)",
        iteration_, what, nonfinite_in_a_row_, iteration_ - nonfinite_in_a_row_ + 1, iteration_,
        config_.max_nan_skips));
  }
  if (parts_.parallel->rank() == 0 && !config_.quiet) {
    std::printf(" iteration %lld: %s; step skipped (%lld in a row; --max_nan_skips=%d)\n",
                static_cast<long long>(iteration_), what.c_str(),
                static_cast<long long>(nonfinite_in_a_row_), config_.max_nan_skips);
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

absl::StatusOr<StepStats> Trainer::OptimizerStep(const models::Losses& loss, double accumulation) {
  comm::Communicator* tp = parts_.parallel->tp_or_null();
  comm::Communicator* dp = GradGroup(*parts_.parallel);
  const double divisor = accumulation * parts_.parallel->dp_size() * parts_.scaler->scale();
  StepStats stats;
  if (std::isfinite(loss.total)) {
    nn::TimerScope timed(timers_.get(), "optimizer");
    ASSIGN_OR_RETURN(stats,
                     parts_.optimizer->Step(*parts_.exec, tp, dp, parts_.schedule->lr(), divisor));
  } else {
    stats.skipped = true;
    stats.grad_norm = std::numeric_limits<double>::quiet_NaN();
  }
  parts_.scaler->Update(stats.skipped);
  if (stats.skipped) {
    ++skipped_;
  } else {
    parts_.schedule->Advance(config_.global_batch_size);
  }
  return stats;
}

absl::Status Trainer::Train(BatchStream& data, int64_t start_iteration,
                            const std::atomic<bool>* stop,
                            const std::function<absl::Status(int64_t)>& on_iteration) {
  const int world_size = parts_.parallel->world_size();
  const double accumulation = static_cast<double>(data.accumulation_steps());
  IntervalSums interval;
  ReportMemory("before training");
  for (iteration_ = start_iteration; iteration_ < config_.train_iters;) {
    ASSIGN_OR_RETURN(const bool stop_now, AgreeToStop(parts_.parallel->world(), stop));
    if (stop_now) {
      stopped_early_ = true;
      return absl::OkStatus();
    }
    const auto start = std::chrono::steady_clock::now();
    const double comm_at_start = CommSeconds();
    RETURN_IF_ERROR(parts_.store->ZeroGrads(*parts_.exec));
    Accumulated acc;
    {
      nn::TimerScope timed(timers_.get(), "forward-backward");
      ASSIGN_OR_RETURN(acc, AccumulateGradients(data));
    }
    // The DP reduction and, with pipeline stages, the sum of the tied embedding's copies.
    RETURN_IF_ERROR(parts_.optimizer->FinishGradReduce());
    RETURN_IF_ERROR(PpSum(&acc.loss, &acc.flops));
    if (parts_.hooks != nullptr) {
      RETURN_IF_ERROR(parts_.hooks->AfterBackward(iteration_, parts_, &acc.loss));
    }
    // The mean loss first: a non-finite one (the same on every rank) skips the step.
    RETURN_IF_ERROR(DpMean(&acc.loss, &acc.flops));
    const double lr_used = parts_.schedule->lr();
    ASSIGN_OR_RETURN(const StepStats stats, OptimizerStep(acc.loss, accumulation));
    consumed_samples_ += config_.global_batch_size;
    ++iteration_;
    const double flops = acc.flops;
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    LogRecord r;
    r.loss = acc.loss;
    r.iteration = iteration_;
    r.consumed_samples = consumed_samples_;
    r.ms_per_iteration = ms;
    r.learning_rate = lr_used;
    r.loss_scale = parts_.scaler->scale();
    r.grad_norm = stats.grad_norm;
    r.skipped_iterations = skipped_;
    r.tokens_per_second = config_.global_batch_size * config_.seq_length / (ms / 1e3);
    r.tflops_per_rank = flops / (ms / 1e3) / world_size / 1e12;
    r.num_zeros = stats.num_zeros;
    r.params_norm = stats.params_norm;
    history_.push_back(r);
    interval.Add(r, flops);
    interval_step_ms_ += ms;
    interval_comm_ms_ += 1e3 * (CommSeconds() - comm_at_start);
    ++interval_steps_;
    if (iteration_ % config_.logging.tensorboard_log_interval == 0) {
      RETURN_IF_ERROR(WriteTensorBoard(r));
    }
    if (iteration_ % config_.log_interval == 0 || iteration_ == config_.train_iters) {
      RETURN_IF_ERROR(Log(interval.Mean(r, config_, world_size)));
      RETURN_IF_ERROR(ReportTimings());
      interval = IntervalSums();
      if (!memory_reported_) {
        ReportMemory(absl::StrCat("after ", iteration_, " iterations"));
      }
      memory_reported_ = true;
    }
    RETURN_IF_ERROR(CheckNonfinite(stats, acc.loss));
    if (on_iteration) RETURN_IF_ERROR(on_iteration(iteration_));
  }
  return absl::OkStatus();
}

}  // namespace train
}  // namespace mt

#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "core/ops/elementwise.h"
#include "core/status.h"
#include "nlohmann/json.hpp"
#include "train/stop_request.h"

namespace mt {
namespace train {

Trainer::Trainer(const TrainerConfig& config, comm::ParallelContext* parallel,
                 const ExecContext* exec, TrainingTask* task, nn::ParameterStore* store,
                 Optimizer* optimizer, LrSchedule* schedule, LossScaler* scaler)
    : config_(config),
      parallel_(parallel),
      exec_(exec),
      task_(task),
      store_(store),
      optimizer_(optimizer),
      schedule_(schedule),
      scaler_(scaler),
      loss_names_(task->loss_names()) {}

absl::Status Trainer::DpSum(std::vector<double>* values) {
  comm::Communicator& dp = parallel_->dp();
  if (dp.size() == 1) return absl::OkStatus();
  Tensor t = Tensor::Host({static_cast<int64_t>(values->size())}, DType::kF32);
  float* p = t.data_as<float>();
  for (size_t i = 0; i < values->size(); ++i) p[i] = static_cast<float>((*values)[i]);
  RETURN_IF_ERROR(dp.AllReduce(t.view(), comm::ReduceOp::kSum));
  for (size_t i = 0; i < values->size(); ++i) (*values)[i] = static_cast<double>(p[i]);
  return absl::OkStatus();
}

std::string Trainer::FormatLosses(const Losses& losses) const {
  std::string out;
  for (size_t i = 0; i < loss_names_.size() && i < losses.parts.size(); ++i) {
    absl::StrAppendFormat(&out, " | %s: %.6E", loss_names_[i], losses.parts[i]);
  }
  return out;
}

void Trainer::Log(const LogRecord& r) {
  if (parallel_->rank() != 0) return;
  if (!config_.quiet) {
    std::printf(
        " iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per iteration (ms): "
        "%.1f | learning rate: %.3E | global batch size: %5lld%s | loss scale: %.1f | grad norm: "
        "%.3f | number of skipped iterations: %3lld | tokens/s: %.0f | TFLOP/s per rank: %.4f\n",
        static_cast<long long>(r.iteration), static_cast<long long>(config_.train_iters),
        static_cast<long long>(r.consumed_samples), r.ms_per_iteration, r.learning_rate,
        static_cast<long long>(config_.global_batch_size), FormatLosses(r.loss).c_str(),
        r.loss_scale, r.grad_norm, static_cast<long long>(r.skipped_iterations),
        r.tokens_per_second, r.tflops_per_rank);
    std::fflush(stdout);
  }
  if (!config_.log_jsonl.empty()) {
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
    // "lm loss" -> "lm_loss".
    for (size_t i = 0; i < loss_names_.size() && i < r.loss.parts.size(); ++i) {
      j[absl::StrReplaceAll(loss_names_[i], {{" ", "_"}})] = r.loss.parts[i];
    }
    std::ofstream out(config_.log_jsonl, std::ios::app);
    out << j.dump() << "\n";
  }
}

absl::StatusOr<EvalResult> Trainer::Evaluate() {
  RETURN_IF_ERROR(task_->StartValidation());
  nn::StepContext sc;
  sc.exec = exec_;
  sc.tp = parallel_->tp_size() > 1 ? &parallel_->tp() : nullptr;
  sc.mode = nn::Mode::kEval;
  std::vector<double> sums(1 + loss_names_.size(), 0.0);
  int n = 0;
  for (int i = 0; i < config_.eval_iters; ++i) {
    ASSIGN_OR_RETURN(std::optional<Losses> l, task_->ValidMicroBatch(sc));
    if (!l) break;
    sums[0] += l->total;
    for (size_t k = 0; k < loss_names_.size(); ++k) sums[1 + k] += l->parts[k];
    ++n;
  }
  if (n == 0) return absl::FailedPreconditionError("validation data exhausted");
  for (double& s : sums) s /= n;
  RETURN_IF_ERROR(DpSum(&sums));
  EvalResult e;
  e.loss.total = sums[0] / parallel_->dp_size();
  for (size_t k = 0; k < loss_names_.size(); ++k) {
    e.loss.parts.push_back(sums[1 + k] / parallel_->dp_size());
  }
  e.perplexity = e.loss.parts.empty() ? 0.0 : std::exp(e.loss.parts[0]);
  return e;
}

absl::Status Trainer::Train(int64_t start_iteration, const std::atomic<bool>* stop,
                            const std::function<absl::Status(int64_t)>& on_iteration) {
  comm::Communicator* tp = parallel_->tp_size() > 1 ? &parallel_->tp() : nullptr;
  comm::Communicator* dp = parallel_->dp_size() > 1 ? &parallel_->dp() : nullptr;
  const int64_t accumulation = task_->accumulation_steps();
  const size_t num_parts = loss_names_.size();
  std::vector<double> interval(1 + num_parts, 0.0);  // total, parts.
  double interval_ms = 0, interval_flops = 0;
  int interval_steps = 0;
  for (iteration_ = start_iteration; iteration_ < config_.train_iters;) {
    ASSIGN_OR_RETURN(const bool stop_now, AgreeToStop(parallel_->world(), stop));
    if (stop_now) {
      stopped_early_ = true;
      return absl::OkStatus();
    }
    const auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(store_->ZeroGrads(*exec_));
    // Sums over this rank's micro-batches: total, parts..., model FLOPs.
    std::vector<double> sums(2 + num_parts, 0.0);
    for (int64_t micro = 0; micro < accumulation; ++micro) {
      nn::StepContext sc;
      sc.exec = exec_;
      sc.tp = tp;
      sc.dropout_seed = config_.seed;
      sc.micro_step = static_cast<uint64_t>(iteration_);
      sc.sample_offset = consumed_samples_ +
                         config_.micro_batch_size * (micro * parallel_->dp_size() +
                                                     parallel_->dp_rank());
      // The last backward pass of the iteration reports finished gradients, so their DP
      // all-reduce overlaps the rest of it (train/grad_reducer.h).
      if (micro == accumulation - 1) sc.grads_ready = optimizer_->BeginGradReduce(dp);
      ASSIGN_OR_RETURN(std::optional<MicroBatchResult> mb,
                       task_->TrainMicroBatch(sc, scaler_->scale()));
      if (!mb) {
        return absl::OutOfRangeError(absl::StrFormat(
            "training data exhausted at iteration %d; build the dataset with more samples",
            iteration_));
      }
      if (mb->losses.parts.size() != num_parts) {
        return absl::InternalError(absl::StrCat("the task reported ", mb->losses.parts.size(),
                                                " losses, not ", num_parts));
      }
      sums[0] += mb->losses.total;
      for (size_t k = 0; k < num_parts; ++k) sums[1 + k] += mb->losses.parts[k];
      sums[1 + num_parts] += mb->model_flops;
    }
    RETURN_IF_ERROR(optimizer_->FinishGradReduce());
    if (iteration_ == config_.inject_grad_overflow_at) {
      RETURN_IF_ERROR(ops::Fill(*exec_, store_->flat_grads().Slice(0, 1),
                                std::numeric_limits<double>::infinity()));
    }
    const double divisor =
        static_cast<double>(accumulation) * parallel_->dp_size() * scaler_->scale();
    ASSIGN_OR_RETURN(StepStats stats,
                     optimizer_->Step(*exec_, tp, dp, schedule_->lr(), divisor));
    const double lr_used = schedule_->lr();
    scaler_->Update(stats.skipped);
    if (stats.skipped) {
      ++skipped_;
    } else {
      schedule_->Advance(config_.global_batch_size);
    }
    consumed_samples_ += config_.global_batch_size;
    ++iteration_;
    for (size_t k = 0; k <= num_parts; ++k) sums[k] /= accumulation;
    RETURN_IF_ERROR(DpSum(&sums));
    const double dp_size = parallel_->dp_size();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    const double flops = sums[1 + num_parts];
    LogRecord r;
    r.iteration = iteration_;
    r.consumed_samples = consumed_samples_;
    r.ms_per_iteration = ms;
    r.learning_rate = lr_used;
    r.loss.total = sums[0] / dp_size;
    for (size_t k = 0; k < num_parts; ++k) r.loss.parts.push_back(sums[1 + k] / dp_size);
    r.loss_scale = scaler_->scale();
    r.grad_norm = stats.grad_norm;
    r.skipped_iterations = skipped_;
    r.tokens_per_second = config_.global_batch_size * config_.seq_length / (ms / 1e3);
    r.tflops_per_rank = flops / (ms / 1e3) / parallel_->world_size() / 1e12;
    history_.push_back(r);
    for (size_t k = 0; k <= num_parts; ++k) interval[k] += k == 0 ? r.loss.total : r.loss.parts[k - 1];
    interval_ms += ms;
    interval_flops += flops;
    ++interval_steps;
    if (iteration_ % config_.log_interval == 0 || iteration_ == config_.train_iters) {
      LogRecord avg = r;
      avg.loss.total = interval[0] / interval_steps;
      for (size_t k = 0; k < num_parts; ++k) avg.loss.parts[k] = interval[1 + k] / interval_steps;
      avg.ms_per_iteration = interval_ms / interval_steps;
      avg.tokens_per_second =
          config_.global_batch_size * config_.seq_length / (avg.ms_per_iteration / 1e3);
      avg.tflops_per_rank =
          interval_flops / (interval_ms / 1e3) / parallel_->world_size() / 1e12;
      Log(avg);
      std::fill(interval.begin(), interval.end(), 0.0);
      interval_ms = interval_flops = 0;
      interval_steps = 0;
    }
    if (on_iteration) RETURN_IF_ERROR(on_iteration(iteration_));
  }
  return absl::OkStatus();
}

}  // namespace train
}  // namespace mt

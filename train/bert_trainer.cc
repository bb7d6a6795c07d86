#include "train/bert_trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "absl/strings/str_format.h"
#include "core/status.h"
#include "train/stop_request.h"
#include "nlohmann/json.hpp"
#include "train/flops.h"

namespace mt {
namespace train {

BertTrainer::BertTrainer(const TrainerConfig& config, comm::ParallelContext* parallel,
                         const ExecContext* exec, models::BertModel* model,
                         nn::ParameterStore* store, Optimizer* optimizer, LrSchedule* schedule,
                         LossScaler* scaler)
    : config_(config),
      parallel_(parallel),
      exec_(exec),
      model_(model),
      store_(store),
      optimizer_(optimizer),
      schedule_(schedule),
      scaler_(scaler) {}

absl::Status BertTrainer::DpMean(double* a, double* b, double* c) {
  comm::Communicator& dp = parallel_->dp();
  if (dp.size() == 1) return absl::OkStatus();
  Tensor t = Tensor::Host({3}, DType::kF32);
  float* p = t.data_as<float>();
  p[0] = static_cast<float>(*a);
  p[1] = static_cast<float>(*b);
  p[2] = static_cast<float>(*c);
  RETURN_IF_ERROR(dp.AllReduce(t.view(), comm::ReduceOp::kSum));
  *a = static_cast<double>(p[0]) / dp.size();
  *b = static_cast<double>(p[1]) / dp.size();
  *c = static_cast<double>(p[2]) / dp.size();
  return absl::OkStatus();
}

void BertTrainer::Log(const BertLogRecord& r, const std::string& eval_suffix) {
  if (parallel_->rank() != 0) return;
  if (!config_.quiet) {
    std::printf(
        " iteration %8lld/%8lld | consumed samples: %12lld | elapsed time per iteration (ms): "
        "%.1f | learning rate: %.3E | global batch size: %5lld | lm loss: %.6E | sop loss: %.6E | "
        "loss scale: %.1f | grad norm: %.3f | number of skipped iterations: %3lld | tokens/s: "
        "%.0f | TFLOP/s per rank: %.4f%s\n",
        static_cast<long long>(r.iteration), static_cast<long long>(config_.train_iters),
        static_cast<long long>(r.consumed_samples), r.ms_per_iteration, r.learning_rate,
        static_cast<long long>(config_.global_batch_size), r.lm_loss, r.sop_loss, r.loss_scale,
        r.grad_norm, static_cast<long long>(r.skipped_iterations), r.tokens_per_second,
        r.tflops_per_gpu, eval_suffix.c_str());
    std::fflush(stdout);
  }
  if (!config_.log_jsonl.empty()) {
    nlohmann::json j = {{"iteration", r.iteration},
                        {"consumed_samples", r.consumed_samples},
                        {"ms_per_iteration", r.ms_per_iteration},
                        {"learning_rate", r.learning_rate},
                        {"loss", r.loss},
                        {"lm_loss", r.lm_loss},
                        {"sop_loss", r.sop_loss},
                        {"loss_scale", r.loss_scale},
                        {"grad_norm", std::isfinite(r.grad_norm) ? r.grad_norm : -1.0},
                        {"skipped_iterations", r.skipped_iterations},
                        {"tokens_per_second", r.tokens_per_second},
                        {"tflops_per_rank", r.tflops_per_gpu}};
    std::ofstream out(config_.log_jsonl, std::ios::app);
    out << j.dump() << "\n";
  }
}

absl::StatusOr<BertEvalResult> BertTrainer::Evaluate(data::BertLoader* valid) {
  nn::StepContext sc;
  sc.exec = exec_;
  sc.tp = parallel_->tp_size() > 1 ? &parallel_->tp() : nullptr;
  sc.mode = nn::Mode::kEval;
  double total = 0, lm = 0, sop = 0;
  int n = 0;
  for (int i = 0; i < config_.eval_iters; ++i) {
    std::optional<data::BertMicroBatch> mb = valid->Next();
    if (!mb) break;
    ASSIGN_OR_RETURN(models::BertPretrainingLosses l,
                     model_->ForwardBackward(sc, mb->tokens.view(), mb->token_types.view(),
                                             mb->padding_mask.view(), mb->mlm_labels.view(),
                                             mb->sop_labels.view(), /*compute_grad=*/false));
    total += l.total;
    lm += l.mlm;
    sop += l.sop;
    ++n;
  }
  if (n == 0) return absl::FailedPreconditionError("validation data exhausted");
  total /= n;
  lm /= n;
  sop /= n;
  RETURN_IF_ERROR(DpMean(&total, &lm, &sop));
  return BertEvalResult{total, lm, sop, std::exp(lm)};
}

absl::Status BertTrainer::Train(data::BertLoader* train, data::BertLoader* valid,
                                int64_t start_iteration, const std::atomic<bool>* stop,
                                const std::function<absl::Status(int64_t)>& on_iteration) {
  const models::ModelConfig& mc = model_->config();
  // The GPT formula (Megatron's estimate); it counts the logits at every position, while BERT
  // computes them only at the masked ones, so this overestimates BERT's work somewhat.
  const double flops = ModelFlopsPerIteration(config_.global_batch_size, config_.seq_length,
                                              mc.num_layers, mc.hidden_size,
                                              model_->padded_vocab(), config_.recompute);
  comm::Communicator* tp = parallel_->tp_size() > 1 ? &parallel_->tp() : nullptr;
  comm::Communicator* dp = parallel_->dp_size() > 1 ? &parallel_->dp() : nullptr;
  const int64_t accumulation = train->accumulation_steps();
  double interval_loss = 0, interval_lm = 0, interval_sop = 0, interval_ms = 0;
  int interval_steps = 0;
  for (iteration_ = start_iteration; iteration_ < config_.train_iters;) {
    ASSIGN_OR_RETURN(const bool stop_now, AgreeToStop(parallel_->world(), stop));
    if (stop_now) {
      stopped_early_ = true;
      return absl::OkStatus();
    }
    const auto start = std::chrono::steady_clock::now();
    store_->ZeroGrads();
    double total_sum = 0, lm_sum = 0, sop_sum = 0;
    for (int64_t micro = 0; micro < accumulation; ++micro) {
      std::optional<data::BertMicroBatch> mb = train->Next();
      if (!mb) {
        return absl::OutOfRangeError(absl::StrFormat(
            "training data exhausted at iteration %d; build the dataset with more samples",
            iteration_));
      }
      nn::StepContext sc;
      sc.exec = exec_;
      sc.tp = tp;
      sc.dropout_seed = config_.seed;
      sc.micro_step = static_cast<uint64_t>(iteration_);
      sc.sample_offset = mb->consumed_samples -
                         config_.micro_batch_size * parallel_->dp_size() +
                         config_.micro_batch_size * parallel_->dp_rank();
      ASSIGN_OR_RETURN(models::BertPretrainingLosses l,
                       model_->ForwardBackward(sc, mb->tokens.view(), mb->token_types.view(),
                                               mb->padding_mask.view(), mb->mlm_labels.view(),
                                               mb->sop_labels.view(), /*compute_grad=*/true,
                                               scaler_->scale()));
      total_sum += l.total;
      lm_sum += l.mlm;
      sop_sum += l.sop;
    }
    if (iteration_ == config_.inject_grad_overflow_at) {
      store_->flat_grads().data_as<float>()[0] = std::numeric_limits<float>::infinity();
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
    double loss = total_sum / accumulation, lm = lm_sum / accumulation,
           sop = sop_sum / accumulation;
    RETURN_IF_ERROR(DpMean(&loss, &lm, &sop));
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    BertLogRecord r;
    r.iteration = iteration_;
    r.consumed_samples = consumed_samples_;
    r.ms_per_iteration = ms;
    r.learning_rate = lr_used;
    r.loss = loss;
    r.lm_loss = lm;
    r.sop_loss = sop;
    r.loss_scale = scaler_->scale();
    r.grad_norm = stats.grad_norm;
    r.skipped_iterations = skipped_;
    r.tokens_per_second = config_.global_batch_size * config_.seq_length / (ms / 1e3);
    r.tflops_per_gpu = flops / (ms / 1e3) / parallel_->world_size() / 1e12;
    history_.push_back(r);
    interval_loss += loss;
    interval_lm += lm;
    interval_sop += sop;
    interval_ms += ms;
    ++interval_steps;
    std::string eval_suffix;
    if (valid != nullptr && config_.eval_interval > 0 && iteration_ % config_.eval_interval == 0) {
      ASSIGN_OR_RETURN(BertEvalResult e, Evaluate(valid));
      eval_suffix = absl::StrFormat(" | validation lm loss: %.6E | validation sop loss: %.6E",
                                    e.lm_loss, e.sop_loss);
    }
    if (iteration_ % config_.log_interval == 0 || iteration_ == config_.train_iters ||
        !eval_suffix.empty()) {
      BertLogRecord avg = r;
      avg.loss = interval_loss / interval_steps;
      avg.lm_loss = interval_lm / interval_steps;
      avg.sop_loss = interval_sop / interval_steps;
      avg.ms_per_iteration = interval_ms / interval_steps;
      avg.tokens_per_second =
          config_.global_batch_size * config_.seq_length / (avg.ms_per_iteration / 1e3);
      avg.tflops_per_gpu = flops / (avg.ms_per_iteration / 1e3) / parallel_->world_size() / 1e12;
      Log(avg, eval_suffix);
      interval_loss = interval_lm = interval_sop = interval_ms = 0;
      interval_steps = 0;
    }
    if (on_iteration) RETURN_IF_ERROR(on_iteration(iteration_));
  }
  return absl::OkStatus();
}

}  // namespace train
}  // namespace mt

#include "experiments/pretrain/pretrain_flags.h"

DEFINE_string(model, "", "A registered model (see //models:describe); other model flags override.");
DEFINE_int32(num_layers, 4, "Transformer layers.");
DEFINE_int32(hidden_size, 128, "Hidden size.");
DEFINE_int32(num_attention_heads, 4, "Attention heads.");
DEFINE_int32(ffn_hidden_size, 0, "MLP width (0: 4 x hidden_size).");
DEFINE_int32(max_position_embeddings, 0, "Learned positions (0: seq_length).");
DEFINE_int32(make_vocab_size_divisible_by, 128, "Pad the vocabulary to a multiple of this x TP.");
DEFINE_double(hidden_dropout, 0.1, "Dropout on the residual stream.");
DEFINE_double(attention_dropout, 0.1, "Dropout on attention probabilities.");
DEFINE_int32(seq_length, 128, "Tokens per sample.");
DEFINE_int32(micro_batch_size, 4, "Samples per micro-batch per data-parallel rank.");
DEFINE_int32(global_batch_size, 8, "Samples per optimizer step over all ranks.");
DEFINE_double(lr, 1.5e-4, "Peak learning rate.");
DEFINE_double(min_lr, 1e-5, "Final learning rate.");
DEFINE_int64(lr_warmup_samples, 0, "Samples of linear warmup.");
DEFINE_int64(lr_decay_samples, 0, "Samples at which decay ends (0: train_iters x global batch).");
DEFINE_string(lr_decay_style, "cosine", "constant, linear or cosine.");
DEFINE_int32(train_iters, 100, "Optimizer steps.");
DEFINE_int32(tensor_model_parallel_size, 1, "Tensor-parallel degree (divides the heads).");
DEFINE_bool(fp16, false, "f16 compute (f32 master weights) with dynamic loss scaling.");
DEFINE_bool(bf16, false, "bf16 compute (f32 master weights), no loss scaling.");
DEFINE_double(clip_grad, 1.0, "Clip the global gradient L2 norm to this (0: off).");
DEFINE_double(weight_decay, 0.01, "Decoupled weight decay (not on biases or LayerNorm).");
DEFINE_string(save, "", "Checkpoint directory.");
DEFINE_string(load, "", "Resume from the latest checkpoint in this directory.");
DEFINE_int32(save_interval, 0, "Iterations between checkpoints (0: at the end and on SIGTERM).");
DEFINE_int32(keep_last, 2, "Checkpoints to keep.");
DEFINE_int32(eval_interval, 0, "Iterations between validation runs (0: only at the end).");
DEFINE_int32(eval_iters, 4, "Validation micro-batches per evaluation.");
DEFINE_int32(log_interval, 10, "Iterations between log lines.");
DEFINE_string(log_jsonl, "", "Append the log lines as JSON objects to this file.");
DEFINE_string(data_path, "", "Indexed dataset prefix (PREFIX.bin / PREFIX.idx).");
DEFINE_string(split, "969,30,1", "Train/valid/test document split weights.");
DEFINE_uint64(seed, 1234, "Seed for initialisation, data order and dropout.");
DEFINE_bool(recompute, false, "Activation checkpointing: recompute each layer in backward.");
DEFINE_int32(threads, 0, "CPU threads per rank (0: cores / ranks).");
DEFINE_string(device, "cpu",
              "cpu, or cuda (each rank on GPU local_rank mod GPUs; bf16 unless --fp16/--fp32).");
DEFINE_string(comm_backend, "auto",
              "With --device=cuda: nccl, mpi (staged through host memory; ranks may share a GPU) "
              "or auto (nccl when each local rank has its own GPU).");
DEFINE_bool(fp32, false, "f32 compute (the default on the CPU).");
DEFINE_int64(ddp_bucket_size, 1 << 22, "Gradient elements per data-parallel all-reduce bucket.");
DEFINE_bool(overlap_grad_reduce, true,
            "All-reduce each data-parallel gradient bucket during backward, as soon as its "
            "gradients are final (false: all buckets after backward).");

namespace mt {
namespace experiments {

absl::Status ApplyCommonFlags(models::Family family, int64_t vocab_size, PretrainConfig* c) {
  models::ModelConfig& m = c->model;
  if (!FLAGS_model.empty()) {
    auto r = models::FindModel(FLAGS_model);
    if (!r.ok()) return r.status();
    if (r->config.family != family) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--model=", FLAGS_model, " is not a ", family == models::Family::kGpt2 ? "GPT" : "BERT",
          " model"));
    }
    m = r->config;
  }
  const auto given = [](const char* flag) {
    return !gflags::GetCommandLineFlagInfoOrDie(flag).is_default;
  };
  if (FLAGS_model.empty() || given("num_layers")) m.num_layers = FLAGS_num_layers;
  if (FLAGS_model.empty() || given("hidden_size")) m.hidden_size = FLAGS_hidden_size;
  if (FLAGS_model.empty() || given("num_attention_heads")) {
    m.num_attention_heads = FLAGS_num_attention_heads;
  }
  if (FLAGS_model.empty() || given("vocab_size")) m.vocab_size = vocab_size;
  if (FLAGS_model.empty() || given("hidden_dropout")) {
    m.hidden_dropout = static_cast<float>(FLAGS_hidden_dropout);
  }
  if (FLAGS_model.empty() || given("attention_dropout")) {
    m.attention_dropout = static_cast<float>(FLAGS_attention_dropout);
  }
  if (FLAGS_model.empty()) {
    m.family = family;
    m.max_position_embeddings =
        FLAGS_max_position_embeddings > 0 ? FLAGS_max_position_embeddings : FLAGS_seq_length;
  } else if (given("max_position_embeddings")) {
    m.max_position_embeddings = FLAGS_max_position_embeddings;
  }
  m.ffn_hidden_size = FLAGS_ffn_hidden_size;
  m.make_vocab_size_divisible_by = FLAGS_make_vocab_size_divisible_by;
  if (FLAGS_fp16 + FLAGS_bf16 + FLAGS_fp32 > 1) {
    return absl::InvalidArgumentError(
        "--fp16, --bf16 and --fp32 are exclusive; pick one (default: f32 on the CPU, bf16 on CUDA)");
  }
  c->device = FLAGS_device;
  c->comm_backend = FLAGS_comm_backend;
  const DType default_dtype = FLAGS_device == "cuda" ? DType::kBF16 : DType::kF32;
  c->compute_dtype = FLAGS_fp16   ? DType::kF16
                     : FLAGS_bf16 ? DType::kBF16
                     : FLAGS_fp32 ? DType::kF32
                                  : default_dtype;
  train::TrainerConfig& t = c->trainer;
  t.micro_batch_size = FLAGS_micro_batch_size;
  t.global_batch_size = FLAGS_global_batch_size;
  t.seq_length = FLAGS_seq_length;
  t.train_iters = FLAGS_train_iters;
  t.log_interval = FLAGS_log_interval;
  t.eval_iters = FLAGS_eval_iters;
  t.seed = FLAGS_seed;
  t.recompute = FLAGS_recompute;
  t.log_jsonl = FLAGS_log_jsonl;
  auto style = train::ParseDecayStyle(FLAGS_lr_decay_style);
  if (!style.ok()) return style.status();
  c->lr.style = *style;
  c->lr.max_lr = FLAGS_lr;
  c->lr.min_lr = FLAGS_min_lr;
  c->lr.warmup_samples = FLAGS_lr_warmup_samples;
  c->lr.decay_samples = FLAGS_lr_decay_samples > 0
                            ? FLAGS_lr_decay_samples
                            : static_cast<int64_t>(FLAGS_train_iters) * FLAGS_global_batch_size;
  c->weight_decay = FLAGS_weight_decay;
  c->clip_grad = FLAGS_clip_grad;
  c->tensor_model_parallel_size = FLAGS_tensor_model_parallel_size;
  c->data_path = FLAGS_data_path;
  c->split = FLAGS_split;
  c->save = FLAGS_save;
  c->load = FLAGS_load;
  c->save_interval = FLAGS_save_interval;
  c->keep_last = FLAGS_keep_last;
  c->threads = FLAGS_threads;
  c->eval_interval = FLAGS_eval_interval;
  c->dp_bucket_elements = FLAGS_ddp_bucket_size;
  c->overlap_grad_reduce = FLAGS_overlap_grad_reduce;
  return absl::OkStatus();
}

namespace internal {

std::atomic<bool>& StopRequested() {
  static std::atomic<bool> stop{false};  // Written by the signal handler only.
  return stop;
}

namespace {
void OnSigterm(int) { StopRequested().store(true); }
}  // namespace

void InstallSigtermHandler() { std::signal(SIGTERM, OnSigterm); }

}  // namespace internal
}  // namespace experiments
}  // namespace mt

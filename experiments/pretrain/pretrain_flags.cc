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

namespace mt {
namespace experiments {
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

// TransformerLayer (pre-norm or post-norm, with pluggable norm and MLP) and TransformerStack (a
// stack of any nn::Layer).
//
//   pre-norm (GPT-2, Megatron BERT, LLaMA): x1 = x + drop(attn(N1(x)));  y = x1 + drop(mlp(N2(x1)))
//   post-norm (original BERT):              x1 = N1(x + drop(attn(x)));  y = N2(x1 + drop(mlp(x1)))
//
// What N1, N2 and mlp are comes from a LayerSpec: factories for the norm (LayerNorm or RMSNorm,
// nn/norm.h) and the MLP (GeLU or SwiGLU, nn/mlp.h), or any other implementation of those
// interfaces. The attention options (rotary embeddings, projection biases) are in the
// TransformerLayerConfig. The default spec (LayerNorm + GeLU MLP, biases, no rotary embeddings) is
// GPT-2's and BERT's layer; TransformerLayer::Create and TransformerStack::Create with a plain
// TransformerLayerConfig build exactly it, with the same parameter names and numbers as before
// the norm and the MLP became pluggable.
//
// A layer does exactly two TP all-reduces forward and two backward (one in the attention, one in
// the MLP) with any of the norms and MLPs here. Hidden dropout acts on the replicated [B, T, H]
// stream with masks keyed by the global element index (sample_offset * T * H + i), identical on
// the TP ranks and independent of the TP and DP degrees.
//
// Precision: activations (the residual stream included) are in the store's compute dtype (f32,
// bf16 or f16). The norms compute their statistics in f32 and read their gains as the f32 MASTER
// weights (ParameterStore::value, which the ops accept next to a 16-bit x), accumulating their
// gradients in f32: unlike Megatron, which casts them to the compute dtype, they are never rounded.
//
// Incremental decoding (nn::Layer's StartDecoding / DecodeForward): the same computation in eval
// mode over the next positions of each sequence, the attention reading and extending its
// key/value cache (nn/attention.h); causal layers only. TransformerStack runs it through every
// block and keeps the cache length.
//
// Activation checkpointing (Recompute::kYes): after Forward a layer keeps only its input (owned by
// the stack) and frees everything else; Backward first re-runs Forward, with the same dropout
// masks, then back-propagates. Gradients are bit-identical to the stored-activation path; the
// recomputation repeats the forward's two all-reduces inside Backward.
#ifndef MT_NN_TRANSFORMER_H_
#define MT_NN_TRANSFORMER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/ops/elementwise.h"
#include "core/ops/softmax.h"
#include "core/tensor.h"
#include "nn/attention.h"
#include "nn/context.h"
#include "nn/layer.h"
#include "nn/linear.h"
#include "nn/mlp.h"
#include "nn/norm.h"
#include "nn/parameter.h"
#include "nn/sequence_parallel.h"

namespace mt {
namespace nn {

enum class NormPosition { kPreNorm, kPostNorm };
// Activation recomputation: kNo keeps every activation; kYes (full) keeps only each layer's input
// and re-runs the whole layer in Backward; kSelective (Korthikanti et al. 2022) re-runs only the
// attention core in Backward (nn/attention.h AttentionConfig::recompute_core).
enum class Recompute { kNo, kYes, kSelective };
// Their names as Megatron-LM's --recompute_granularity spells them (core/fields.h tables).
inline constexpr std::pair<absl::string_view, Recompute> kRecomputeNames[] = {
    {"none", Recompute::kNo}, {"full", Recompute::kYes}, {"selective", Recompute::kSelective}};

struct TransformerLayerConfig {
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t num_query_groups = 0;  // Key/value heads (AttentionConfig); 0: heads.
  int64_t ffn = 0;               // 0: 4 * hidden.
  NormPosition norm = NormPosition::kPreNorm;
  ops::CausalMask causal = ops::CausalMask::kYes;
  float hidden_dropout = 0.0f;
  float attention_dropout = 0.0f;
  float layernorm_eps = 1e-5f;
  double init_std = 0.02;
  double output_init_std = 0.02;
  Recompute recompute = Recompute::kNo;
  // Attention options (nn/attention.h AttentionConfig): rotary embeddings on q and k when > 0,
  // and the biases of its QKV and output projections.
  double rotary_base = 0.0;
  Bias attention_bias = Bias::kYes;
  // How the attention and the MLP built for this config reduce over the TP ranks: kYes for
  // TransformerLayer; kPartial for a block that sums their partial outputs and reduces once
  // (nn/linear.h TpReduce).
  TpReduce tp_reduce = TpReduce::kYes;
  // The GeLU MLP's form (GeluMlpFactory): the tanh approximation, or the exact erf form of the
  // published BERT.
  ops::GeluForm gelu = ops::GeluForm::kTanh;
  // Sequence parallelism (nn/sequence_parallel.h; needs TP > 1): the layer's input and output are
  // this rank's slice [B, T / tp, H] of the residual stream; its norms, dropouts and residual adds
  // run on the slice; the attention and the MLP see the sequence all-gathered, and their partial
  // outputs are reduce-scattered (and the reverse in Backward) instead of the two all-reduces each
  // way. The norms' gradients are summed over TP at the end of the layer's Backward (one more
  // all-reduce per layer and micro-batch, of the norms' parameters only).
  bool sequence_parallel = false;
};

// Builders of a layer's norms and MLP, given the layer's config (with ffn resolved: 4 * hidden when
// it was 0). They declare the module's parameters under `prefix` ("<layer>.ln1", "<layer>.mlp").
using NormFactory = std::function<absl::StatusOr<std::unique_ptr<Norm>>(
    ParameterStore* store, const std::string& prefix, const TransformerLayerConfig& config)>;
using MlpFactory = std::function<absl::StatusOr<std::unique_ptr<Mlp>>(
    ParameterStore* store, const std::string& prefix, const TransformerLayerConfig& config)>;

// LayerNormModule(hidden, layernorm_eps): "<prefix>.weight", "<prefix>.bias".
NormFactory LayerNormFactory();
// RmsNormModule(hidden, layernorm_eps): "<prefix>.weight".
NormFactory RmsNormFactory();
// ParallelMLP(hidden, ffn, init_std, output_init_std, tp_reduce, gelu): "<prefix>.fc1.*",
// "<prefix>.fc2.*".
MlpFactory GeluMlpFactory();
// SwiGluMLP(hidden, ffn, init_std, output_init_std): "<prefix>.{gate,up,down}.weight".
MlpFactory SwiGluMlpFactory();

// The attention settings of layer `layer_index` with this config.
AttentionConfig AttentionConfigOf(const TransformerLayerConfig& config, int layer_index);

// A TransformerLayer's structure: the config, and the factories of its two norms and its MLP.
struct LayerSpec {
  TransformerLayerConfig config;
  NormFactory norm = LayerNormFactory();
  MlpFactory mlp = GeluMlpFactory();
};

class TransformerLayer : public Layer {
 public:
  // Parameters, in this order: "<prefix>.ln1.*", "<prefix>.attention.*", "<prefix>.ln2.*",
  // "<prefix>.mlp.*". Errors: those of the modules (InvalidArgument for indivisible sizes, a bad
  // rotary setting, duplicate names); InvalidArgument for a spec without a norm or MLP factory,
  // or one that returns no module, and for sequence parallelism at TP = 1.
  static absl::StatusOr<std::unique_ptr<TransformerLayer>> Create(ParameterStore* store,
                                                                  const std::string& prefix,
                                                                  int layer_index,
                                                                  const LayerSpec& spec);
  // The default spec: LayerSpec{config}.
  static absl::StatusOr<std::unique_ptr<TransformerLayer>> Create(
      ParameterStore* store, const std::string& prefix, int layer_index,
      const TransformerLayerConfig& config);
  // x: [B, T, H] in the compute dtype, kept alive by the caller until Backward; y: [B, T, H].
  // With sequence parallelism x and y are this rank's slices [B, T / tp, H] (padding_mask stays
  // [B, T]). InvalidArgument for another shape or dtype.
  absl::Status Forward(const StepContext& sc, const TensorView& x, const TensorView* padding_mask,
                       const TensorView& y) override;
  // dy: [B, T, H]; dx: [B, T, H] (compute dtype).
  absl::Status Backward(const StepContext& sc, const TensorView& dy, const TensorView& dx) override;
  int64_t ActivationBytes() const override;
  int64_t backward_peak_bytes() const override { return backward_peak_bytes_; }
  // Incremental decoding (nn::Layer): the attention's key/value cache.
  absl::Status StartDecoding(const StepContext& sc, int64_t batch, int64_t max_length) override;
  absl::Status DecodeForward(const StepContext& sc, const TensorView& x,
                             const TensorView& y) override;
  absl::Status DecodeSlots(const StepContext& sc, const TensorView& x,
                           absl::Span<const DecodeSpan> spans, const TensorView& y) override;
  absl::Status ResetSlot(int64_t slot) override { return attention_.ResetSlot(slot); }
  void StopDecoding() override { attention_.StopDecoding(); }
  bool sequence_parallel() const override { return config_.sequence_parallel; }
  bool context_parallel() const override { return true; }
  // With sequence parallelism: the [B, T, H] gather buffers, shared with the other layers of a
  // stack (TransformerLayers does this); by default each layer has its own.
  void ShareGatherBuffers(std::shared_ptr<GatherBuffers> buffers) { gather_ = std::move(buffers); }

 private:
  // Which attention pass a layer's computation runs: the full-sequence one, or a decoding step.
  enum class Pass { kFull, kDecode };
  TransformerLayer() = default;
  // InvalidArgument unless x is [B, T, hidden] in the compute dtype.
  absl::Status CheckInput(const TensorView& x) const;
  absl::Status ForwardImpl(const StepContext& sc, const TensorView& y);
  // The layer's computation of x into y (both [B, T, H]); kDecode: through the key/value cache.
  absl::Status Run(const StepContext& sc, Pass pass, const TensorView& x, const TensorView& y);
  absl::Status Attend(const StepContext& sc, Pass pass, const TensorView& x, const TensorView& y,
                      const TensorView** bias);
  // The residual branches, x [B, t, H] (this rank's slice with sequence parallelism) into branch_:
  // the module itself, or (sequence parallel) the module on the gathered sequence with its partial
  // output reduce-scattered.
  absl::Status AttentionBranch(const StepContext& sc, Pass pass, const TensorView& x,
                               const TensorView** bias);
  absl::Status MlpBranch(const StepContext& sc, const TensorView& x, const TensorView** bias);
  // Their backward: dy [B, t, H] -> dx [B, t, H]; x: the branch's forward input (gathered again
  // with sequence parallelism, into the memory the module saw in Forward).
  absl::Status AttentionBranchBackward(const StepContext& sc, const TensorView& x,
                                       const TensorView& dy, const TensorView& dx);
  absl::Status MlpBranchBackward(const StepContext& sc, const TensorView& x, const TensorView& dy,
                                 const TensorView& dx);
  // gather_->input <- x [B, t, H] all-gathered along the sequence.
  absl::Status GatherInput(const StepContext& sc, const TensorView& x);
  absl::Status BackwardImpl(const StepContext& sc, const TensorView& dy, const TensorView& dx);
  void ReleaseAll();
  ops::DropoutArgs HiddenDropout(const StepContext& sc, int site, int half) const;
  // out = residual + dropout(branch + bias) at dropout site `site` (2-D views of the layer's
  // activations), and its backward dx = dropout'(dy); with context parallelism one call per
  // chunk-major half, each with its chunk's keys (HiddenDropout's half).
  absl::Status DropoutAdd(const StepContext& sc, const TensorView& branch, const TensorView* bias,
                          int site, const TensorView& residual, const TensorView& out) const;
  absl::Status DropoutGrad(const StepContext& sc, const TensorView& dy, int site,
                           const TensorView& dx) const;

  TransformerLayerConfig config_;
  ParameterStore* store_ = nullptr;
  DType dtype_ = DType::kF32;  // The store's compute dtype.
  int layer_index_ = 0;
  std::unique_ptr<Norm> ln1_, ln2_;
  ParallelSelfAttention attention_;
  std::unique_ptr<Mlp> mlp_;
  SavedInput input_;
  int64_t B_ = 0, T_ = 0;  // T_: positions of this rank's input (T / tp with sequence parallelism).
  int64_t seq_ = 0;        // The whole sequence length T.
  bool saved_ = false;
  int64_t backward_peak_bytes_ = 0;
  SequenceParallelGrads norm_grads_;  // The norms' parameters (sequence parallelism).
  std::shared_ptr<GatherBuffers> gather_;
  // [B, T, H] buffers. Pre-norm: ln1_out_, x1_, ln2_out_. Post-norm: s1_, x1_, s2_.
  Tensor ln1_out_, x1_, ln2_out_, s1_, s2_, branch_;
  absl::Span<const DecodeSpan> spans_;  // The spans of the decoding step in progress.
};

// Builds TransformerLayers of this spec (a TransformerStack's blocks).
LayerFactory TransformerLayers(const LayerSpec& spec);

class TransformerStack {
 public:
  // num_layers blocks from `factory`, block i with prefix "<prefix>.<i>". InvalidArgument for
  // num_layers < 1 or a factory that returns no block; the factory's errors.
  static absl::StatusOr<std::unique_ptr<TransformerStack>> Create(ParameterStore* store,
                                                                  const std::string& prefix,
                                                                  int num_layers,
                                                                  const LayerFactory& factory);
  // TransformerLayers of one spec.
  static absl::StatusOr<std::unique_ptr<TransformerStack>> Create(ParameterStore* store,
                                                                  const std::string& prefix,
                                                                  int num_layers,
                                                                  const LayerSpec& spec);
  // TransformerLayers of the default spec (GPT-2, BERT).
  static absl::StatusOr<std::unique_ptr<TransformerStack>> Create(
      ParameterStore* store, const std::string& prefix, int num_layers,
      const TransformerLayerConfig& config);
  // x: [B, T, H] in the compute dtype; returns a view of the stack's output buffer (valid until
  // the next Forward).
  absl::StatusOr<TensorView> Forward(const StepContext& sc, const TensorView& x,
                                     const TensorView* padding_mask);
  // dy: [B, T, H]; dx: [B, T, H] (may alias dy).
  absl::Status Backward(const StepContext& sc, const TensorView& dy, const TensorView& dx);
  int num_layers() const { return static_cast<int>(layers_.size()); }
  // Whether every block runs with sequence parallelism (Layer::sequence_parallel).
  bool sequence_parallel() const;
  // Whether every block honours context parallelism (Layer::context_parallel).
  bool context_parallel() const;
  // Activation bytes held between Forward and Backward (layer internals plus the residual stream
  // buffers), and the largest transient extra seen during the last Backward (a recomputed layer).
  int64_t HeldActivationBytes() const;
  int64_t peak_backward_extra_bytes() const { return peak_backward_extra_; }

  // ---- Incremental decoding through every block (nn::Layer's decoding entries); eval mode.
  // Starts decoding `batch` sequences of up to `max_length` positions (each block allocates its
  // cache), forgetting any earlier decoding. The blocks' errors (Unimplemented for a block without
  // decoding); InvalidArgument for sizes < 1.
  absl::Status StartDecoding(const StepContext& sc, int64_t batch, int64_t max_length);
  // x: [B, n, H] (compute dtype), the next n positions of each sequence; returns a view of the
  // stack's decoding output [B, n, H] (valid until the next call). FailedPrecondition when not
  // decoding; InvalidArgument for another B or decode_length() + n > max_length (decoding goes
  // on). An error of a block ends decoding (StartDecoding again).
  absl::StatusOr<TensorView> DecodeForward(const StepContext& sc, const TensorView& x);
  // The slotted step (continuous batching; nn::Layer::DecodeSlots): x [N, H], the packed rows of
  // `spans`; returns a view of the stack's output [N, H] (valid until the next call).
  // FailedPrecondition when not decoding; InvalidArgument for a bad span (decoding goes on). An
  // error of a block ends decoding.
  absl::StatusOr<TensorView> DecodeSlots(const StepContext& sc, const TensorView& x,
                                         absl::Span<const DecodeSpan> spans);
  // Empties a slot in every block. InvalidArgument for a slot out of range.
  absl::Status ResetSlot(int64_t slot);
  // Positions held by a slot (0 .. decode_batch() - 1).
  int64_t slot_length(int64_t slot) const { return slot_lengths_[slot]; }
  // Frees every block's cache.
  void StopDecoding();
  // Positions decoded so far per sequence (slot 0's with DecodeSlots); 0 when not decoding.
  int64_t decode_length() const { return slot_lengths_.empty() ? 0 : slot_lengths_[0]; }
  // The started batch and maximum length; 0 when not decoding.
  int64_t decode_batch() const { return decode_batch_; }
  int64_t decode_max_length() const { return decode_max_length_; }

 private:
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<int> first_handles_;  // The first parameter handle of each layer.
  std::vector<Tensor> hidden_;      // [L + 1] x [B, T, H]; hidden_[0] is a copy of the input.
  int64_t peak_backward_extra_ = 0;
  int64_t decode_batch_ = 0, decode_max_length_ = 0;
  std::vector<int64_t> slot_lengths_;  // [decode_batch_]
  Tensor decode_out_[2];               // [N, H]: the blocks' decoding outputs, alternately.
  // The blocks' step through decode_out_.
  absl::StatusOr<TensorView> RunDecode(const StepContext& sc, const TensorView& x,
                                       absl::Span<const DecodeSpan> spans);
};

}  // namespace nn
}  // namespace mt

#endif  // MT_NN_TRANSFORMER_H_

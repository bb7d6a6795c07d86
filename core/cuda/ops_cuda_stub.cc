// Builds without the CUDA backend (no CUDA toolkit, or --config=cpu_only): the entry points of
// ops_cuda.h, so that the ops' device dispatch (core/ops/dispatch.h) links unchanged. Tensors
// labelled with a CUDA device reach them after the op's argument checks, as they reach the real
// functions; each answers Unimplemented "<op>: not implemented for cuda:N: this binary was built
// without the CUDA backend ...", naming the op and the device as the real functions do on a
// machine without a CUDA device.
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/cuda/ops_cuda.h"

namespace mt {
namespace cuda {

namespace {

absl::Status NoBackend(absl::string_view op, const TensorView& t) {
  return absl::UnimplementedError(absl::StrCat(
      op, ": not implemented for ", t.device.ToString(),
      ": this binary was built without the CUDA backend; rebuild on a machine with the CUDA "
      "toolkit (and without --config=cpu_only), or keep the tensors on the CPU"));
}

}  // namespace

// ---- Element-wise (op names as ops_cuda.cc gives them) ----

absl::Status BiasAdd(const ExecContext&, const TensorView& x, const TensorView&,
                     const TensorView&) {
  return NoBackend("BiasAdd", x);
}

absl::Status BiasGrad(const ExecContext&, const TensorView& dy, const TensorView&) {
  return NoBackend("BiasGrad", dy);
}

absl::Status Gelu(const ExecContext&, const TensorView& x, const TensorView&) {
  return NoBackend("Gelu", x);
}

absl::Status GeluBackward(const ExecContext&, const TensorView& x, const TensorView&,
                          const TensorView&) {
  return NoBackend("GeluBackward", x);
}

absl::Status GeluErf(const ExecContext&, const TensorView& x, const TensorView&) {
  return NoBackend("Gelu", x);
}

absl::Status GeluErfBackward(const ExecContext&, const TensorView& x, const TensorView&,
                             const TensorView&) {
  return NoBackend("GeluBackward", x);
}

absl::Status Add(const ExecContext&, const TensorView& a, const TensorView&, const TensorView&) {
  return NoBackend("Add", a);
}

absl::Status Scale(const ExecContext&, const TensorView& x, float, const TensorView&) {
  return NoBackend("Scale", x);
}

absl::Status Tanh(const ExecContext&, const TensorView& x, const TensorView&) {
  return NoBackend("Tanh", x);
}

absl::Status TanhBackward(const ExecContext&, const TensorView& y, const TensorView&,
                          const TensorView&) {
  return NoBackend("TanhBackward", y);
}

absl::Status Convert(const ExecContext&, const TensorView& x, const TensorView&) {
  return NoBackend("Convert", x);
}

absl::Status Fill(const ExecContext&, const TensorView& x, const void*, size_t) {
  return NoBackend("Fill", x);
}

absl::Status Dropout(absl::string_view op, const ExecContext&, const TensorView& x,
                     const DropoutParams&, const TensorView&) {
  return NoBackend(op, x);
}

absl::Status BiasDropoutAdd(const ExecContext&, const TensorView& x, const TensorView*,
                            const DropoutParams&, const TensorView&, const TensorView&) {
  return NoBackend("BiasDropoutAdd", x);
}

// ---- Normalisation, softmax, attention ----

absl::Status LayerNorm(const ExecContext&, const TensorView& x, const TensorView&,
                       const TensorView&, float, const TensorView&, const TensorView&,
                       const TensorView&) {
  return NoBackend("LayerNorm", x);
}

absl::Status LayerNormBackward(const ExecContext&, const TensorView& x, const TensorView&,
                               const TensorView&, const TensorView&, const TensorView&,
                               const TensorView&, const TensorView&, const TensorView&) {
  return NoBackend("LayerNormBackward", x);
}

absl::Status Softmax(const ExecContext&, const TensorView& x, const TensorView&, float, bool,
                     const TensorView*) {
  return NoBackend("Softmax", x);
}

absl::Status SoftmaxBackward(const ExecContext&, const TensorView& y, const TensorView&,
                             const TensorView&, float) {
  return NoBackend("SoftmaxBackward", y);
}

absl::Status FusedAttention(const ExecContext&, const TensorView& q, const TensorView&,
                            const TensorView&, const TensorView*, const AttentionParams&,
                            const TensorView&, const TensorView&) {
  return NoBackend("FusedAttention", q);
}

absl::Status FusedAttentionBackward(const ExecContext&, const TensorView& q, const TensorView&,
                                    const TensorView&, const TensorView&, const TensorView&,
                                    const TensorView&, const TensorView*, const AttentionParams&,
                                    const TensorView&, const TensorView&, const TensorView&) {
  return NoBackend("FusedAttentionBackward", q);
}

// ---- Ids, embedding, cross-entropy ----

absl::StatusOr<BadId> FindBadId(absl::string_view op, const ExecContext&, absl::string_view,
                                const TensorView& ids, int64_t, int64_t, bool) {
  return NoBackend(op, ids);
}

absl::Status Embedding(const ExecContext&, const TensorView& ids, const TensorView&,
                       const TensorView&, int64_t) {
  return NoBackend("Embedding", ids);
}

absl::Status EmbeddingBackward(const ExecContext&, const TensorView& ids, const TensorView&,
                               const TensorView&, int64_t) {
  return NoBackend("EmbeddingBackward", ids);
}

absl::Status CrossEntropy(const ExecContext&, const TensorView& logits, const TensorView&,
                          const TensorView&) {
  return NoBackend("CrossEntropy", logits);
}

absl::Status CrossEntropyBackward(const ExecContext&, const TensorView& logits, const TensorView&,
                                  const TensorView&, const TensorView&) {
  return NoBackend("CrossEntropyBackward", logits);
}

absl::Status ShardedRowMax(const ExecContext&, const TensorView& logits, int64_t,
                           const TensorView&) {
  return NoBackend("ShardedRowMax", logits);
}

absl::Status ShardedTargetAndSumExp(const ExecContext&, const TensorView& logits, const TensorView&,
                                    int64_t, int64_t, const TensorView&, const TensorView&) {
  return NoBackend("ShardedTargetAndSumExp", logits);
}

absl::Status ShardedLoss(const ExecContext&, const TensorView&, const TensorView&,
                         const TensorView&, const TensorView& losses) {
  return NoBackend("ShardedLoss", losses);
}

absl::Status ShardedCrossEntropyBackward(const ExecContext&, const TensorView& logits,
                                         const TensorView&, int64_t, int64_t, const TensorView&,
                                         const TensorView&, const TensorView&, const TensorView&) {
  return NoBackend("ShardedCrossEntropyBackward", logits);
}

// ---- Heads, reductions, Adam, GEMM, decoder blocks ----

absl::Status HeadsPermute(absl::string_view op, const ExecContext&, int64_t, int64_t, int64_t,
                          int64_t, int64_t, const TensorView& token_major,
                          const TensorView* const[], int64_t, bool) {
  return NoBackend(op, token_major);
}

absl::StatusOr<double> Reduce(absl::string_view op, const ExecContext&, const TensorView& x,
                              ReduceOp) {
  return NoBackend(op, x);
}

absl::Status AdamUpdate(const ExecContext&, const TensorView& param, const TensorView&,
                        const TensorView&, const TensorView&, const AdamConstants&) {
  return NoBackend("AdamUpdate", param);
}

absl::Status Gemm(absl::string_view op, const ExecContext&, const TensorView&, const TensorView&,
                  const TensorView& c, const GemmDims&) {
  return NoBackend(op, c);
}

absl::Status RmsNorm(const ExecContext&, const TensorView& x, const TensorView&, float,
                     const TensorView&, const TensorView&) {
  return NoBackend("RmsNorm", x);
}

absl::Status RmsNormBackward(const ExecContext&, const TensorView& x, const TensorView&,
                             const TensorView&, const TensorView&, const TensorView&,
                             const TensorView&) {
  return NoBackend("RmsNormBackward", x);
}

absl::Status Rope(absl::string_view op, const ExecContext&, const TensorView& x, double, int64_t,
                  float, const TensorView&) {
  return NoBackend(op, x);
}

absl::Status SwiGlu(const ExecContext&, const TensorView& gate, const TensorView&,
                    const TensorView&) {
  return NoBackend("SwiGlu", gate);
}

absl::Status SwiGluBackward(const ExecContext&, const TensorView& gate, const TensorView&,
                            const TensorView&, const TensorView&, const TensorView&) {
  return NoBackend("SwiGluBackward", gate);
}

}  // namespace cuda
}  // namespace mt

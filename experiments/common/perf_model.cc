#include "experiments/common/perf_model.h"

#include <algorithm>
#include <cmath>

#include "models/flops.h"

namespace mt {
namespace experiments {
namespace perf {
namespace {

// What an element-wise kernel of a layer runs over, per TP rank: the replicated residual stream
// (n x h on every rank), the split activations (n x h/t, 3h/t, 4h/t) or the attention scores
// (B x heads/t x s x s).
enum class Extent { kStream, kSplit, kSplit3, kSplit4, kScores };

struct Kernel {
  Extent extent;
  double passes;  // Reads + writes of the tensor (a 1-byte dropout mask counts 0.5).
};

// A 2019 GPT-2 layer in PyTorch (pre-LN), forward: LN1; QKV bias; Q, K, V made contiguous per
// head; the scores' scale, mask multiply, mask subtract, softmax, dropout; the context made
// contiguous; the output projection's bias (after the all-reduce), dropout, residual add; LN2;
// fc1 bias, GeLU (one fused kernel); fc2 bias, dropout, residual add.
constexpr Kernel kForward[] = {
    {Extent::kStream, 2},   {Extent::kSplit3, 2},   {Extent::kSplit, 2},    {Extent::kSplit, 2},
    {Extent::kSplit, 2},    {Extent::kScores, 2},   {Extent::kScores, 2},   {Extent::kScores, 2},
    {Extent::kScores, 2},   {Extent::kScores, 2.5}, {Extent::kSplit, 2},    {Extent::kStream, 2},
    {Extent::kStream, 2.5}, {Extent::kStream, 3},   {Extent::kStream, 2},   {Extent::kSplit4, 2},
    {Extent::kSplit4, 2},   {Extent::kStream, 2},   {Extent::kStream, 2.5}, {Extent::kStream, 3},
};

// Backward, in reverse: LN1 (and its parameter-gradient reduction); QKV bias gradient; the three
// head copies; scale, mask, softmax and dropout backward; the context copy; output bias gradient,
// dropout, the residual's gradient sum; LN2 (and parameter gradients); fc1 bias gradient, GeLU
// backward; fc2 bias gradient, dropout, residual sum.
constexpr Kernel kBackward[] = {
    {Extent::kStream, 3},   {Extent::kStream, 0.1}, {Extent::kSplit3, 1}, {Extent::kSplit, 2},
    {Extent::kSplit, 2},    {Extent::kSplit, 2},    {Extent::kScores, 2}, {Extent::kScores, 2},
    {Extent::kScores, 3},   {Extent::kScores, 2.5}, {Extent::kSplit, 2},  {Extent::kStream, 1},
    {Extent::kStream, 2.5}, {Extent::kStream, 3},   {Extent::kStream, 3}, {Extent::kStream, 0.1},
    {Extent::kSplit4, 1},   {Extent::kSplit4, 3},   {Extent::kStream, 1}, {Extent::kStream, 2.5},
    {Extent::kStream, 3},
};

double Elements(Extent e, const Workload& w) {
  const double n = static_cast<double>(w.micro_batch) * w.seq, h = w.hidden, t = w.tp;
  switch (e) {
    case Extent::kStream:
      return n * h;
    case Extent::kSplit:
      return n * h / t;
    case Extent::kSplit3:
      return 3 * n * h / t;
    case Extent::kSplit4:
      return 4 * n * h / t;
    case Extent::kScores:
      return static_cast<double>(w.micro_batch) * w.heads / t * w.seq * w.seq;
  }
  return 0;
}

double ElementwiseSeconds(double elements, double passes, double bytes, const Hardware& hw) {
  return elements * passes * bytes / hw.mem_bandwidth + hw.kernel_overhead;
}

template <size_t N>
double KernelsSeconds(const Kernel (&kernels)[N], const Workload& w, const Hardware& hw,
                      const Software& sw) {
  double s = 0;
  for (const Kernel& k : kernels) {
    s += ElementwiseSeconds(Elements(k.extent, w), k.passes, sw.activation_bytes, hw);
  }
  return s;
}

struct Gemm {
  int64_t m, n, k, batch;
};

// The layer's forward matrix products per TP rank: QKV, scores, context, projection, fc1, fc2.
std::vector<Gemm> ForwardGemms(const Workload& w) {
  const int64_t n = w.micro_batch * w.seq, h = w.hidden, t = w.tp, s = w.seq;
  const int64_t d = h / w.heads, bh = w.micro_batch * w.heads / t;
  return {{n, 3 * h / t, h, 1}, {s, s, d, bh},        {s, d, s, bh},
          {n, h, h / t, 1},     {n, 4 * h / t, h, 1}, {n, h, 4 * h / t, 1}};
}

// Forward (twice with recompute) and backward: each product's input gradient (M x K from
// M x N and N x K) and weight gradient (K x N over M); batched attention products: two of the
// same size.
double LayerGemmSeconds(const Workload& w, const Hardware& hw, const Software& sw) {
  double fwd = 0, bwd = 0;
  for (const Gemm& g : ForwardGemms(w)) {
    fwd += GemmSeconds(hw, g.m, g.n, g.k, g.batch);
    if (g.batch == 1) {
      bwd += GemmSeconds(hw, g.m, g.k, g.n) + GemmSeconds(hw, g.k, g.n, g.m);
    } else {
      bwd += 2 * GemmSeconds(hw, g.m, g.n, g.k, g.batch);
    }
  }
  return (sw.recompute ? 2 : 1) * fwd + bwd;
}

// One tensor's optimizer kernels: each at least the host's time per op (the queue is empty
// after the synchronisations), plus the synchronisations.
double TensorOptimizerSeconds(double elements, const Hardware& hw, const Software& sw) {
  double s = sw.syncs_per_tensor * sw.sync;
  for (double b : sw.optimizer_bytes) s += std::max(sw.host_op, elements * b / hw.mem_bandwidth);
  return s;
}

double OptimizerSeconds(const Workload& w, const Hardware& hw, const Software& sw) {
  const double h = w.hidden, t = w.tp;
  if (!sw.per_tensor_optimizer) {
    double bytes = 0;
    for (double b : sw.optimizer_bytes) bytes += b;
    return w.params_per_rank * bytes / hw.mem_bandwidth +
           sw.optimizer_bytes.size() * (hw.kernel_overhead + sw.host_op);
  }
  // A layer's tensors: LN1 (2), QKV weight and bias, projection weight and bias, LN2 (2), fc1
  // weight and bias, fc2 weight and bias.
  const double layer_tensors[] = {h, h, 3 * h * h / t, 3 * h / t, h * h / t,     h,
                                  h, h, 4 * h * h / t, 4 * h / t, 4 * h * h / t, h};
  double layer = 0;
  for (double e : layer_tensors) layer += TensorOptimizerSeconds(e, hw, sw);
  // Word and position embeddings, final LN.
  const double other[] = {w.vocab / t * h, static_cast<double>(w.seq) * h, h, h};
  double rest = 0;
  for (double e : other) rest += TensorOptimizerSeconds(e, hw, sw);
  return w.layers * layer + rest;
}

// The logits (n x V/t, forward and two backward products), the vocab-parallel cross-entropy in
// fp32 (about 12 passes over the logits), the embedding's all-reduce and the f before the logits.
double HeadSeconds(const Workload& w, const Hardware& hw, const Software& sw) {
  const int64_t n = w.micro_batch * w.seq;
  const int64_t v = w.vocab / w.tp;
  return GemmSeconds(hw, n, v, w.hidden) + GemmSeconds(hw, n, w.hidden, v) +
         GemmSeconds(hw, w.hidden, v, n) +
         ElementwiseSeconds(static_cast<double>(n) * v, 12, 4, hw) +
         2 * TpAllReduceSeconds(w, hw, sw);
}

// The DP gradient all-reduce left after backward, plus the compute it slows while overlapped.
double DpSeconds(const Workload& w, const Hardware& hw, const Software& sw, double backward) {
  if (w.dp <= 1) return 0;
  const double bytes = static_cast<double>(w.params_per_rank) * sw.activation_bytes;
  const int ranks = w.tp * w.dp;
  const int nodes = (ranks + hw.gpus_per_node - 1) / hw.gpus_per_node;
  double t;
  if (nodes <= 1) {
    t = RingAllReduceSeconds(bytes, w.dp, hw.intra_alpha, hw.intra_bus_bandwidth);
  } else {
    // Each node's boundary carries 2 (nodes - 1) / nodes of every DP group's gradients, for the
    // min(tp, gpus per node) groups with members in the node; the hops inside go over NVLink.
    const double groups = std::min(w.tp, hw.gpus_per_node);
    const double inter = groups * 2.0 * (nodes - 1) / nodes * bytes / hw.inter_node_bandwidth;
    const double intra = 2.0 * (w.dp - 1) / w.dp * bytes / hw.intra_bus_bandwidth;
    const double buckets = std::ceil(bytes / sw.dp_bucket_bytes);
    t = std::max(inter, intra) + buckets * 2.0 * (w.dp - 1) * hw.inter_alpha;
  }
  const double window = sw.dp_overlap * backward;
  const double last_bucket = t * std::min(1.0, sw.dp_bucket_bytes / bytes);
  return std::max(t - window, last_bucket) + sw.nccl_sm_share * std::min(t, window);
}

}  // namespace

double RingAllReduceSeconds(double bytes, int ranks, double alpha, double bus_bandwidth) {
  if (ranks <= 1) return 0;
  return 2.0 * (ranks - 1) * alpha + 2.0 * (ranks - 1) / ranks * bytes / bus_bandwidth;
}

double WaveEfficiency(const Hardware& hw, int64_t m, int64_t n, int64_t batch) {
  if (hw.sms <= 0) return 1.0;
  const int64_t tiles =
      ((m + hw.tile_m - 1) / hw.tile_m) * ((n + hw.tile_n - 1) / hw.tile_n) * batch;
  const int64_t waves = (tiles + hw.sms - 1) / hw.sms;
  return static_cast<double>(m) * n * batch /
         (static_cast<double>(waves) * hw.sms * hw.tile_m * hw.tile_n);
}

double GemmEfficiency(const Hardware& hw, int64_t m, int64_t n, int64_t k, int64_t batch) {
  return hw.gemm_efficiency * WaveEfficiency(hw, m, n, batch) * k / (k + hw.tile_k_overhead);
}

double GemmSeconds(const Hardware& hw, int64_t m, int64_t n, int64_t k, int64_t batch) {
  const double flops = 2.0 * m * n * k * batch;
  return flops / (hw.peak_flops * GemmEfficiency(hw, m, n, k, batch)) + hw.kernel_overhead;
}

double TpAllReduceSeconds(const Workload& w, const Hardware& hw, const Software& sw) {
  const double bytes = static_cast<double>(w.micro_batch) * w.seq * w.hidden * sw.activation_bytes;
  if (w.tp <= hw.gpus_per_node) {
    return RingAllReduceSeconds(bytes, w.tp, hw.intra_alpha, hw.intra_bus_bandwidth);
  }
  return RingAllReduceSeconds(bytes, w.tp, hw.inter_alpha,
                              hw.inter_node_bandwidth / hw.gpus_per_node);
}

Breakdown PredictIteration(const Workload& w, const Hardware& hw, const Software& sw) {
  Breakdown b;
  const double passes = sw.recompute ? 2 : 1;
  b.gemm = w.layers * LayerGemmSeconds(w, hw, sw);
  b.elementwise = w.layers * (passes * KernelsSeconds(kForward, w, hw, sw) +
                              KernelsSeconds(kBackward, w, hw, sw));
  b.tp_comm = w.layers * (2 * passes + 2) * TpAllReduceSeconds(w, hw, sw);
  b.head = HeadSeconds(w, hw, sw);
  b.optimizer = OptimizerSeconds(w, hw, sw);
  // Backward (with the recomputed forward) is 3/4 of the layers' time with recompute, 2/3
  // without: the window the DP all-reduce can hide under.
  const double layers = b.gemm + b.elementwise + b.tp_comm;
  b.dp = DpSeconds(w, hw, sw, layers * (sw.recompute ? 0.75 : 2.0 / 3.0));
  return b;
}

double ModelFlopsPerGpu(const Workload& w, double seconds) {
  const double f = models::ModelFlopsPerIteration(w.micro_batch * w.dp, w.seq, w.layers, w.hidden,
                                                  w.vocab, /*recompute=*/false);
  return f / seconds / (w.tp * w.dp);
}

double Efficiency(const Workload& w, const Workload& baseline, const Hardware& hw,
                  const Software& sw) {
  return ModelFlopsPerGpu(w, PredictIteration(w, hw, sw).total()) /
         ModelFlopsPerGpu(baseline, PredictIteration(baseline, hw, sw).total());
}

Hardware Dgx2hV100() {
  Hardware hw;
  hw.name = "DGX-2H (16 x V100 32GB, NVSwitch)";
  hw.peak_flops = 130e12;       // Paper: 39 TFLOP/s is 30% of the DGX-2H V100's peak.
  hw.gemm_efficiency = 0.85;    // cuBLAS fp16 tensor-core GEMMs on large shapes.
  hw.sms = 80;                  // V100.
  hw.tile_m = hw.tile_n = 128;  // Volta HMMA GEMM kernels' tile.
  hw.tile_k_overhead = 64;      // Prologue/epilogue ~ two 32-deep main-loop steps.
  hw.mem_bandwidth = 800e9;     // HBM2 900 GB/s x ~0.89 (STREAM-like copy).
  hw.kernel_overhead = 5e-6;    // Launch + ramp per kernel.
  hw.gpus_per_node = 16;
  hw.intra_bus_bandwidth = 120e9;  // 6 NVLinks x 25 GB/s per direction x 0.8 (NCCL bus bw).
  hw.intra_alpha = 8e-6;           // Per ring step (NCCL over NVSwitch).
  hw.inter_node_bandwidth = 85e9;  // 8 x 100 Gb/s InfiniBand per node x 0.85.
  hw.inter_alpha = 10e-6;          // Per ring step over InfiniBand.
  return hw;
}

Hardware H200Node() {
  Hardware hw;
  hw.name = "8 x H200 per node (NVLink 4), 8 x 400 Gb/s InfiniBand per node";
  hw.peak_flops = 989e12;     // Dense bf16.
  hw.gemm_efficiency = 0.75;  // cuBLAS bf16 on large shapes (~740 TFLOP/s).
  hw.sms = 132;
  hw.tile_m = 128;
  hw.tile_n = 256;  // Hopper WGMMA kernels' common tile.
  hw.tile_k_overhead = 64;
  hw.mem_bandwidth = 4.3e12;  // HBM3e 4.8 TB/s x 0.9.
  hw.kernel_overhead = 3e-6;
  hw.gpus_per_node = 8;
  hw.intra_bus_bandwidth = 360e9;  // NVLink 4: 450 GB/s per direction x 0.8.
  hw.intra_alpha = 5e-6;
  hw.inter_node_bandwidth = 340e9;  // 8 x 400 Gb/s per node x 0.85.
  hw.inter_alpha = 8e-6;
  return hw;
}

Software Megatron2019() {
  Software sw;
  sw.host_op = 30e-6;  // PyTorch eager from Python: tens of microseconds per op.
  sw.sync = 25e-6;     // Device-to-host read of a scalar (.item()).
  return sw;
}

Software FusedSoftware() {
  Software sw = Megatron2019();
  sw.syncs_per_tensor = 0;
  sw.per_tensor_optimizer = false;
  return sw;
}

}  // namespace perf
}  // namespace experiments
}  // namespace mt

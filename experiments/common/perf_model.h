// An analytical performance model of one training iteration of a GPT with tensor (TP) and data
// (DP) parallelism, built from physical quantities only (experiments/table1_weak_scaling/
// README.md and the report list each value and where it comes from):
//
//   - every matrix product of a layer (forward, recomputed forward, backward) timed at the peak
//     rate times a GEMM efficiency that depends on the per-GPU shape: wave quantization of
//     tile_m x tile_n tiles on the SMs, and a per-tile prologue/epilogue worth `tile_k_overhead`
//     steps of K (efficiency K / (K + k0));
//   - every element-wise kernel of the layer as it was written in 2019 (unfused PyTorch ops:
//     bias adds, dropouts, residual adds, layer norms, the attention softmax chain), timed as
//     bytes / memory bandwidth plus a fixed per-kernel overhead; the ones outside the TP regions
//     are replicated on every TP rank, the others split;
//   - the TP all-reduces (2 forward, 2 in the recomputed forward, 2 backward per layer) as ring
//     all-reduces: 2 (t - 1) alpha + 2 (t - 1) / t * bytes / bus bandwidth;
//   - the optimizer step per parameter tensor: its bytes at memory bandwidth, each of its small
//     kernels costing at least the host's time per op, and host-device synchronisations (the
//     2019 fp16 optimizer read back an inf/NaN check and a norm per tensor);
//   - the DP gradient all-reduce between nodes (InfiniBand per node shared by the TP ranks' DP
//     groups), overlapped with backward, slowing compute while it runs by the SM share NCCL
//     takes.
// Nothing is fitted per configuration. All times in seconds, bandwidths in bytes/s.
#ifndef MT_EXPERIMENTS_COMMON_PERF_MODEL_H_
#define MT_EXPERIMENTS_COMMON_PERF_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

namespace mt {
namespace experiments {
namespace perf {

// One GPU type in its node.
struct Hardware {
  std::string name;
  double peak_flops = 0;       // Dense tensor-core FLOP/s (fp16 / bf16).
  double gemm_efficiency = 0;  // Fraction of peak a large GEMM reaches.
  int sms = 1;                 // Streaming multiprocessors (0: no wave quantization).
  int tile_m = 128, tile_n = 128;
  double tile_k_overhead = 0;  // k0: the per-tile fixed cost in units of K.
  double mem_bandwidth = 0;    // Achieved by element-wise kernels.
  double kernel_overhead = 0;  // Per kernel launch, on the GPU.
  int gpus_per_node = 1;
  double intra_bus_bandwidth = 0;   // Ring all-reduce bus bandwidth per GPU inside a node.
  double intra_alpha = 0;           // Per ring step inside a node.
  double inter_node_bandwidth = 0;  // Per node, per direction, achieved (all NICs).
  double inter_alpha = 0;           // Per ring step between nodes.
};

// The software stack.
struct Software {
  bool recompute = true;             // Activation checkpointing of every layer.
  int activation_bytes = 2;          // fp16 activations, gradients and all-reduces.
  double host_op = 0;                // Host time to issue one op when the GPU queue is empty.
  double sync = 0;                   // One host-device synchronisation (read back a scalar).
  int syncs_per_tensor = 2;          // In the optimizer step, per parameter tensor.
  bool per_tensor_optimizer = true;  // false: one multi-tensor kernel per optimizer op.
  // Bytes per element of each optimizer kernel on a tensor: grad to fp32, inf/NaN check,
  // its sum, the norm, unscale, Adam, copy to the fp16 weights.
  std::vector<double> optimizer_bytes = {6, 6, 4, 4, 8, 28, 6};
  double dp_overlap = 1.0;        // Fraction of backward the DP all-reduce may run under.
  double dp_bucket_bytes = 25e6;  // DP all-reduce bucket.
  double nccl_sm_share = 0.1;     // Compute slowdown while a DP all-reduce runs.
};

// One configuration: the model and how it is split.
struct Workload {
  int64_t hidden = 0, heads = 0, layers = 0;
  int64_t vocab = 0;  // Padded.
  int64_t seq = 1024;
  int64_t micro_batch = 8;  // Samples per model replica per iteration.
  int tp = 1, dp = 1;
  int64_t params_per_rank = 0;  // Parameters one TP rank holds.
};

// Seconds per iteration on one GPU, by part.
struct Breakdown {
  double gemm = 0, elementwise = 0, tp_comm = 0, head = 0, optimizer = 0, dp = 0;
  double total() const { return gemm + elementwise + tp_comm + head + optimizer + dp; }
};

// 2 (n - 1) alpha + 2 (n - 1) / n * bytes / bus_bandwidth; 0 for one rank.
double RingAllReduceSeconds(double bytes, int ranks, double alpha, double bus_bandwidth);

// Tile quantization of an M x N (x batch) output: useful tile area over the area the waves of
// tiles occupy on the SMs; 1 with sms == 0.
double WaveEfficiency(const Hardware& hw, int64_t m, int64_t n, int64_t batch);
// gemm_efficiency * WaveEfficiency * K / (K + k0).
double GemmEfficiency(const Hardware& hw, int64_t m, int64_t n, int64_t k, int64_t batch);
// 2 M N K batch / (peak * GemmEfficiency) + kernel overhead.
double GemmSeconds(const Hardware& hw, int64_t m, int64_t n, int64_t k, int64_t batch = 1);

// The TP all-reduce of one layer's activations (n tokens x hidden): inside a node, or over
// InfiniBand (each GPU's share of its node's bandwidth) when the group spans nodes.
double TpAllReduceSeconds(const Workload& w, const Hardware& hw, const Software& sw);

Breakdown PredictIteration(const Workload& w, const Hardware& hw, const Software& sw);

// The paper's FLOPs per iteration (models/flops.h, no recompute term) for the whole batch
// (micro_batch x dp), over the time and GPUs: model FLOP/s per GPU.
double ModelFlopsPerGpu(const Workload& w, double seconds);

// Per-GPU model FLOP/s of `w` relative to `baseline` (both predicted): the paper's weak-scaling
// efficiency.
double Efficiency(const Workload& w, const Workload& baseline, const Hardware& hw,
                  const Software& sw);

// The hardware and software of the paper's runs, and an H200 cluster. Each value's source is in
// the .cc file and the report.
Hardware Dgx2hV100();
Hardware H200Node();
Software Megatron2019();
Software FusedSoftware();  // No per-tensor optimizer syncs or launches.

}  // namespace perf
}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_COMMON_PERF_MODEL_H_

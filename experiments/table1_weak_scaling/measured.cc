#include "experiments/table1_weak_scaling/measured.h"

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "experiments/report/plot.h"
#include "experiments/report/report.h"
#include "experiments/table1_weak_scaling/perf_model.h"
#include "models/count.h"
#include "models/registry.h"

namespace mt {
namespace experiments {
namespace {

// Copy bandwidth (bytes read + written per second) with `threads` threads, best of 5.
double CopyBandwidth(int threads) {
  const size_t n = size_t{32} << 20;  // Floats per buffer: 128 MiB.
  std::vector<float> a(n, 1.0f), b(n, 0.0f);
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i) {
      pool.emplace_back([&, i] {
        const size_t lo = n * i / threads, hi = n * (i + 1) / threads;
        std::memcpy(b.data() + lo, a.data() + lo, (hi - lo) * sizeof(float));
      });
    }
    for (auto& t : pool) t.join();
    best = std::min(best,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * n * sizeof(float) / best;
}

std::vector<std::string> Mpirun(int np, std::vector<std::string> args) {
  std::vector<std::string> cmd = {
      "mpirun",     "--oversubscribe", "--bind-to",           "none", "--mca", "btl",
      "self,vader", "--mca",           "mpi_yield_when_idle", "1",    "-np",   std::to_string(np)};
  cmd.insert(cmd.end(), args.begin(), args.end());
  return cmd;
}

absl::StatusOr<MeasuredRun> RunBench(const MeasureConfig& c, const std::string& name, int tp,
                                     int dp) {
  MeasuredRun r;
  r.name = name;
  r.tp = tp;
  r.dp = dp;
  const std::vector<std::string> cmd = Mpirun(
      tp * dp,
      {c.train_step_bench, absl::StrCat("--hidden_size=", c.hidden),
       absl::StrCat("--num_layers=", c.layers), absl::StrCat("--num_attention_heads=", c.heads),
       absl::StrCat("--seq_length=", c.seq), absl::StrCat("--micro_batch_size=", c.micro_batch),
       absl::StrCat("--tensor_model_parallel_size=", tp), absl::StrCat("--steps=", c.steps),
       "--breakdown_steps=0", "--gemm_rate_size=1024"});
  r.command = absl::StrJoin(cmd, " ");
  auto out = RunCommand(cmd);
  if (!out.ok()) return out.status();
  auto gemm = NumberAfter(*out, "f32 GEMM rate per rank", "): ");
  if (!gemm.ok()) return gemm.status();
  auto step = NumberAfter(*out, "step time (median of", "): ");
  if (!step.ok()) return step.status();
  r.gemm_gflops = *gemm;
  r.measured_s = *step;
  return r;
}

// The model with this machine's measured inputs: a CPU "GPU" whose GEMMs run at the run's own
// measured rate (no tiles), element-wise work at the measured copy bandwidth, the all-reduce's
// fitted latency and bandwidth; f32, no recompute, AdamW reading and writing 28 bytes a weight,
// no host overheads (C++).
double Predict(const MeasureConfig& c, const Measurement& m, const MeasuredRun& r) {
  perf::Hardware hw;
  hw.peak_flops = r.gemm_gflops * 1e9;
  hw.gemm_efficiency = 1.0;
  hw.sms = 0;
  hw.tile_k_overhead = 0;
  hw.mem_bandwidth = r.tp * r.dp == 1 ? m.mem_bandwidth_all : m.mem_bandwidth_1thread;
  hw.gpus_per_node = 2;
  hw.intra_bus_bandwidth = m.allreduce_bus_bandwidth;
  hw.intra_alpha = m.allreduce_alpha_s / 2.0;  // Ring of 2: 2 (n - 1) = 2 steps.
  perf::Software sw;
  sw.recompute = false;
  sw.activation_bytes = 4;
  sw.per_tensor_optimizer = false;
  sw.syncs_per_tensor = 0;
  sw.optimizer_bytes = {28};
  sw.nccl_sm_share = 0;
  models::ModelConfig mc;
  mc.num_layers = static_cast<int>(c.layers);
  mc.hidden_size = c.hidden;
  mc.num_attention_heads = static_cast<int>(c.heads);
  mc.max_position_embeddings = c.seq;
  auto count = models::CountParameters(mc, r.tp);
  perf::Workload w;
  w.hidden = c.hidden;
  w.heads = c.heads;
  w.layers = c.layers;
  w.seq = c.seq;
  w.micro_batch = c.micro_batch;
  w.tp = r.tp;
  w.dp = r.dp;
  w.vocab = count.ok() ? count->padded_vocab : mc.vocab_size;
  w.params_per_rank = count.ok() ? count->per_rank : 0;
  return perf::PredictIteration(w, hw, sw).total();
}

}  // namespace

absl::StatusOr<double> NumberAfter(absl::string_view text, absl::string_view line_prefix,
                                   absl::string_view marker) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const size_t at = line.find(line_prefix);
    if (at == absl::string_view::npos) continue;
    const size_t m = line.find(marker, at);
    if (m == absl::string_view::npos) continue;
    absl::string_view rest = line.substr(m + marker.size());
    const size_t end = rest.find_first_of(" |");
    double v;
    if (absl::SimpleAtod(rest.substr(0, end), &v)) return v;
  }
  return absl::NotFoundError(
      absl::StrCat("no number after '", line_prefix, "...", marker, "' in the output:\n", text));
}

std::vector<std::pair<double, double>> ParseAllReduceRows(absl::string_view out) {
  std::vector<std::pair<double, double>> rows;
  bool in_all_reduce = false;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (absl::StartsWith(line, "# all_reduce"))
      in_all_reduce = true;
    else if (absl::StartsWith(line, "# all_gather") || absl::StartsWith(line, "# overlap"))
      in_all_reduce = false;
    if (!in_all_reduce || absl::StartsWith(line, "#")) continue;
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    double bytes, us;
    if (f.size() >= 4 && absl::SimpleAtod(f[0], &bytes) && absl::SimpleAtod(f[3], &us)) {
      rows.emplace_back(bytes, us * 1e-6);
    }
  }
  return rows;
}

std::pair<double, double> FitAllReduce(const std::vector<std::pair<double, double>>& rows,
                                       int ranks) {
  const double k = 2.0 * (ranks - 1) / ranks;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [bytes, s] : rows) {
    const double x = k * bytes;
    sx += x;
    sy += s;
    sxx += x * x;
    sxy += x * s;
  }
  const double n = rows.size();
  const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  const double alpha = (sy - slope * sx) / n;
  return {std::max(0.0, alpha), 1.0 / slope};
}

absl::StatusOr<Measurement> MeasureOnThisMachine(const MeasureConfig& c) {
  Measurement m;
  m.mem_bandwidth_1thread = CopyBandwidth(1);
  m.mem_bandwidth_all =
      CopyBandwidth(std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
  const std::vector<std::string> comm =
      Mpirun(2, {c.comm_bench, "--min_bytes=4096", absl::StrCat("--max_bytes=", c.comm_max_bytes),
                 "--step_factor=4", "--iters=10", "--warmup=3", "--ops=all_reduce"});
  m.comm_command = absl::StrJoin(comm, " ");
  auto out = RunCommand(comm);
  if (!out.ok()) return out.status();
  m.allreduce_points = ParseAllReduceRows(*out);
  if (m.allreduce_points.size() < 2) {
    return absl::InternalError(absl::StrCat("comm_bench printed no all-reduce rows:\n", *out));
  }
  std::tie(m.allreduce_alpha_s, m.allreduce_bus_bandwidth) = FitAllReduce(m.allreduce_points, 2);
  for (auto [name, tp, dp] : {std::make_tuple("TP=1", 1, 1), std::make_tuple("TP=2", 2, 1),
                              std::make_tuple("DP=2", 1, 2)}) {
    auto r = RunBench(c, name, tp, dp);
    if (!r.ok()) return r.status();
    r->predicted_s = Predict(c, m, *r);
    m.runs.push_back(*r);
  }
  return m;
}

}  // namespace experiments
}  // namespace mt

#include "experiments/table1_weak_scaling/measured.h"

#include <stdlib.h>

#include <algorithm>
#include <tuple>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/status.h"
#include "core/subprocess.h"
#include "experiments/common/bench_parse.h"
#include "experiments/common/eval_runs.h"
#include "experiments/common/perf_model.h"
#include "experiments/common/report.h"
#include "experiments/table1_weak_scaling/tables.h"
#include "models/count.h"
#include "models/registry.h"

namespace mt {
namespace experiments {
namespace {

std::vector<std::string> Mpirun(int np, std::vector<std::string> args) {
  std::vector<std::string> cmd = LocalMpirun(np);
  cmd.insert(cmd.end(), args.begin(), args.end());
  return cmd;
}

// The rank's compute by part: step_op_bench at its shapes, one copy per rank of the configuration;
// after the first round each part keeps its least time (the copy bandwidth its highest).
absl::Status TimeOps(const MeasureConfig& c, const StepShape& s, bool first, MeasuredRun* r) {
  const std::vector<std::string> cmd = Mpirun(
      s.tp * s.dp,
      {c.step_op_bench, absl::StrCat("--hidden=", s.hidden), absl::StrCat("--heads=", s.heads),
       absl::StrCat("--layers=", s.layers), absl::StrCat("--seq=", s.seq),
       absl::StrCat("--micro_batch=", s.micro_batch), absl::StrCat("--tp=", s.tp),
       absl::StrCat("--vocab=", s.vocab), absl::StrCat("--params=", s.params_per_rank),
       absl::StrCat("--threads=", r->threads), "--reps=3"});
  r->op_command = absl::StrJoin(cmd, " ");
  ASSIGN_OR_RETURN(const std::string out, RunCommand(cmd));
  ASSIGN_OR_RETURN(const OpTimes t, ParseOpTimes(out));
  if (first) {
    r->ops = t;
    return absl::OkStatus();
  }
  OpTimes& o = r->ops;
  for (auto [best, now] :
       {std::make_pair(&o.gemm, t.gemm), std::make_pair(&o.attention, t.attention),
        std::make_pair(&o.layernorm, t.layernorm), std::make_pair(&o.loss, t.loss),
        std::make_pair(&o.optimizer, t.optimizer)}) {
    *best = std::min(*best, now);
  }
  o.copy_bandwidth = std::max(o.copy_bandwidth, t.copy_bandwidth);
  return absl::OkStatus();
}

// The training step: its best time over the rounds.
absl::Status TimeStep(const MeasureConfig& c, bool first, bool last, MeasuredRun* r) {
  const std::vector<std::string> cmd = Mpirun(
      r->tp * r->dp,
      {c.train_step_bench, absl::StrCat("--hidden_size=", c.hidden),
       absl::StrCat("--num_layers=", c.layers), absl::StrCat("--num_attention_heads=", c.heads),
       absl::StrCat("--seq_length=", c.seq), absl::StrCat("--micro_batch_size=", c.micro_batch),
       absl::StrCat("--tensor_model_parallel_size=", r->tp), absl::StrCat("--steps=", c.steps),
       absl::StrCat("--threads=", r->threads),
       absl::StrCat("--ddp_bucket_size=", c.dp_bucket_elements),
       absl::StrCat("--breakdown_steps=", last ? c.breakdown_steps : 0), "--gemm_rate_size=1024"});
  r->command = absl::StrJoin(cmd, " ");
  ASSIGN_OR_RETURN(const std::string out, RunCommand(cmd));
  ASSIGN_OR_RETURN(r->gemm_gflops, NumberAfter(out, "f32 GEMM rate per rank", "): "));
  ASSIGN_OR_RETURN(const double best, NumberAfter(out, "step time (best of", "): "));
  r->measured_s = first ? best : std::min(r->measured_s, best);
  if (last) r->profile = ParseStepProfile(out);
  return absl::OkStatus();
}

absl::StatusOr<StepShape> ShapeOf(const MeasureConfig& c, int tp, int dp) {
  models::ModelConfig mc;
  mc.num_layers = static_cast<int>(c.layers);
  mc.hidden_size = c.hidden;
  mc.num_attention_heads = static_cast<int>(c.heads);
  mc.max_position_embeddings = c.seq;
  StepShape s;
  ASSIGN_OR_RETURN(static_cast<perf::Workload&>(s), WorkloadOf(mc, tp, dp, c.seq, c.micro_batch));
  s.dp_bucket_elements = c.dp_bucket_elements;
  return s;
}

// perf_model.h's element-wise kernels of the layers (the 2019 list: an upper estimate here,
// where the attention chain is fused) at `bandwidth`, f32, no recompute, no launch overhead.
double ElementwiseSeconds(const StepShape& s, double bandwidth) {
  perf::Hardware hw;
  hw.peak_flops = 1e12;  // The GEMM terms are not used.
  hw.gemm_efficiency = 1.0;
  hw.sms = 0;
  hw.mem_bandwidth = bandwidth;
  perf::Software sw;
  sw.recompute = false;
  sw.activation_bytes = 4;
  sw.per_tensor_optimizer = false;
  return perf::PredictIteration(s, hw, sw).elementwise;
}

}  // namespace

std::vector<std::pair<std::string, double>> ParseStepProfile(absl::string_view out) {
  std::vector<std::pair<std::string, double>> rows;
  bool in_profile = false;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    if (absl::StartsWith(line, "step breakdown by op class")) {
      in_profile = true;
      continue;
    }
    if (!in_profile) continue;
    // "  GEMM             0.298 s   40.9%  ...": a class, its seconds, "s".
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    double seconds;
    if (!absl::StartsWith(line, "  ") || f.size() < 3 || f[2] != "s" ||
        !absl::SimpleAtod(f[1], &seconds)) {
      break;
    }
    rows.emplace_back(std::string(f[0]), seconds);
  }
  return rows;
}

absl::StatusOr<OpTimes> ParseOpTimes(absl::string_view out) {
  OpTimes t;
  ASSIGN_OR_RETURN(t.gemm, NumberAfter(out, "gemm_s", ": "));
  ASSIGN_OR_RETURN(t.attention, NumberAfter(out, "attention_s", ": "));
  ASSIGN_OR_RETURN(t.layernorm, NumberAfter(out, "layernorm_s", ": "));
  ASSIGN_OR_RETURN(t.loss, NumberAfter(out, "loss_s", ": "));
  ASSIGN_OR_RETURN(t.optimizer, NumberAfter(out, "optimizer_s", ": "));
  ASSIGN_OR_RETURN(t.copy_bandwidth, NumberAfter(out, "copy_bytes_per_s", ": "));
  return t;
}

PredictedStep PredictStep(const StepShape& s, const OpTimes& ops, double alpha,
                          double bus_bandwidth) {
  PredictedStep p;
  p.ops = ops;
  p.elementwise = ElementwiseSeconds(s, ops.copy_bandwidth);
  // alpha is a 2-rank all-reduce's latency: 2 ring steps.
  const double step_alpha = alpha / 2;
  const double tokens = static_cast<double>(s.micro_batch) * s.seq;
  // 2 forward and 2 backward per layer, 2 around the logits; the cross-entropy's row maxima and
  // (target logit, sum of exponentials) pairs.
  p.tp_comm = (4.0 * s.layers + 2) * perf::RingAllReduceSeconds(tokens * s.hidden * 4, s.tp,
                                                                step_alpha, bus_bandwidth) +
              perf::RingAllReduceSeconds(tokens * 4, s.tp, step_alpha, bus_bandwidth) +
              perf::RingAllReduceSeconds(tokens * 8, s.tp, step_alpha, bus_bandwidth);
  if (s.dp > 1) {
    const int64_t buckets = (s.params_per_rank + s.dp_bucket_elements - 1) / s.dp_bucket_elements;
    p.dp_comm = buckets * perf::RingAllReduceSeconds(0, s.dp, step_alpha, bus_bandwidth) +
                perf::RingAllReduceSeconds(s.params_per_rank * 4.0, s.dp, 0, bus_bandwidth);
  }
  return p;
}

absl::StatusOr<Measurement> MeasureOnThisMachine(const MeasureConfig& c) {
  Measurement m;
  const std::vector<std::string> comm =
      Mpirun(2, {c.comm_bench, "--min_bytes=4096", absl::StrCat("--max_bytes=", c.comm_max_bytes),
                 "--step_factor=4", "--iters=10", "--warmup=3", "--ops=all_reduce"});
  m.comm_command = absl::StrJoin(comm, " ");
  // Two ranks on a busy machine (2 cores and a parallel test run) can have every size's time
  // set by preemptions rather than by the message, so that the largest is no slower than the
  // fastest and no bandwidth can be fitted: such a run is taken again, a few times at most.
  constexpr int kCommAttempts = 5;
  absl::StatusOr<std::pair<double, double>> fit;
  for (int attempt = 1; attempt <= kCommAttempts; ++attempt) {
    ASSIGN_OR_RETURN(const std::string out, RunCommand(comm));
    m.allreduce_points = ParseAllReduceRows(out);
    if (m.allreduce_points.size() < 2) {
      return absl::InternalError(absl::StrCat("comm_bench printed no all-reduce rows:\n", out));
    }
    fit = FitAllReduce(m.allreduce_points, 2);
    if (fit.ok()) break;
  }
  if (!fit.ok()) {
    return absl::Status(fit.status().code(),
                        absl::StrCat(fit.status().message(), " in ", kCommAttempts,
                                     " runs of comm_bench (the machine too busy to time it?)"));
  }
  m.allreduce_alpha_s = fit->first;
  m.allreduce_bus_bandwidth = fit->second;
  std::vector<StepShape> shapes;
  for (auto [name, tp, dp] : {std::make_tuple("TP=1", 1, 1), std::make_tuple("TP=2", 2, 1),
                              std::make_tuple("DP=2", 1, 2)}) {
    MeasuredRun r;
    r.name = name;
    r.tp = tp;
    r.dp = dp;
    r.threads = std::max(1, c.cores / (tp * dp));
    ASSIGN_OR_RETURN(const StepShape shape, ShapeOf(c, tp, dp));
    shapes.push_back(shape);
    m.runs.push_back(r);
  }
  // Round by round over the configurations, so that each sees the machine's load of each round.
  for (int round = 0; round < c.rounds; ++round) {
    for (size_t i = 0; i < m.runs.size(); ++i) {
      RETURN_IF_ERROR(TimeOps(c, shapes[i], round == 0, &m.runs[i]));
      RETURN_IF_ERROR(TimeStep(c, round == 0, round == c.rounds - 1, &m.runs[i]));
    }
  }
  for (size_t i = 0; i < m.runs.size(); ++i) {
    m.runs[i].predicted =
        PredictStep(shapes[i], m.runs[i].ops, m.allreduce_alpha_s, m.allreduce_bus_bandwidth);
  }
  return m;
}

}  // namespace experiments
}  // namespace mt

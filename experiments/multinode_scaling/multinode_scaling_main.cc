// ./bazelw run //experiments/multinode_scaling (as root): Table 1's data-parallel cost measured
// across a real link. Two nodes of the test cluster (tools/cluster: network namespaces on a
// bridge, the link shaped by tc tbf) run a fixed GPT at DP=2, one rank per node and one thread
// each, at several link rates. Per rate: comm_bench's all-reduce across the link, its latency and
// bandwidth fitted (experiments/common/bench_parse.h); the step time predicted from that fit and
// this machine's measured one-rank compute (dp_model.h), written down before the step is
// measured; then train_step_bench's step with the gradient all-reduce after backward and
// overlapped with it. Writes results/multinode_scaling/ (report.md, CSVs, efficiency.png).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "core/subprocess.h"
#include "experiments/common/bench_parse.h"
#include "experiments/common/eval_runs.h"
#include "experiments/common/plot.h"
#include "experiments/common/report.h"
#include "experiments/multinode_scaling/dp_model.h"

namespace mt {
namespace experiments {
namespace {

struct ScalingConfig {
  std::string results_dir;
  std::string rates = "200mbit,1gbit,5gbit,off";
  int64_t hidden = 256, heads = 4, layers = 4, seq = 128, micro_batch = 4, vocab = 1024;
  int steps = 11;
  int64_t comm_max_bytes = 4 << 20;
  int comm_iters = 10;
  int cluster_id = 4;

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("results_dir", &self.results_dir,
      "Where to write (default: <workspace>/results/multinode_scaling).");
    v("rates", &self.rates,
      "Link rates, comma-separated, as tc takes them (200mbit, 1gbit, ...); off: unshaped.");
    v("hidden_size", &self.hidden, "Hidden size of the GPT.");
    v("num_attention_heads", &self.heads, "Attention heads.");
    v("num_layers", &self.layers, "Layers.");
    v("seq_length", &self.seq, "Sequence length.");
    v("micro_batch_size", &self.micro_batch, "Samples per rank and step.");
    v("vocab_size", &self.vocab, "Vocabulary size.");
    v("steps", &self.steps, "Timed steps per measurement (the median counts).");
    v("comm_max_bytes", &self.comm_max_bytes, "Largest all-reduce comm_bench times.");
    v("comm_iters", &self.comm_iters, "comm_bench's timed calls per size.");
    v("cluster_id", &self.cluster_id, "The test cluster's id (tools/cluster/cluster.sh --id).");
  }
};

// The two-node test cluster, removed when this goes.
class Cluster {
 public:
  // No run may take longer (a stalled link must not hang the experiment): seconds.
  static constexpr const char* kLimit = "600";
  static absl::StatusOr<std::unique_ptr<Cluster>> Up(const std::string& script, int id) {
    auto why = RunCommand({script, "check"}, "", Stderr::kDiscard);
    if (!why.ok()) {
      return absl::FailedPreconditionError(
          "cannot make the test cluster here (it needs root: network namespaces, a bridge, tc); "
          "`tools/cluster/cluster.sh check` says why");
    }
    std::unique_ptr<Cluster> c(new Cluster(script, absl::StrCat(id)));
    RETURN_IF_ERROR(RunCommand({script, "up", "--id", c->id_, "--nodes", "2"}).status());
    c->up_ = true;
    return c;
  }
  ~Cluster() {
    if (up_) (void)RunCommand({script_, "down", "--id", id_});
  }
  absl::Status Shape(const std::string& rate) {
    return RunCommand({script_, "shape", "--id", id_, rate}).status();
  }
  // argv on `node` alone (no MPI launcher: one process).
  absl::StatusOr<std::string> Exec(const std::string& node, const std::vector<std::string>& argv) {
    std::vector<std::string> cmd = {"timeout", kLimit, script_, "exec", "--id", id_, node};
    cmd.insert(cmd.end(), argv.begin(), argv.end());
    return RunCommand(cmd);
  }
  // argv under mpirun, one rank on each node.
  absl::StatusOr<std::string> OnePerNode(const std::vector<std::string>& argv) {
    std::vector<std::string> cmd = {script_, "mpirun",          "--id", id_,
                                    "-H",    "node1:1,node2:1", "-np",  "2"};
    cmd.insert(cmd.end(), argv.begin(), argv.end());
    return RunCommand(cmd);
  }

 private:
  Cluster(std::string script, std::string id) : script_(std::move(script)), id_(std::move(id)) {}
  std::string script_, id_;
  bool up_ = false;
};

// One all-reduce call's rows and fit: time = alpha + bytes / bus bandwidth (2 ranks).
struct Fit {
  std::vector<std::pair<double, double>> rows;
  double alpha_s = 0, bus_bandwidth = 0;
};

// A --rates entry as the tables name it.
std::string LinkName(const std::string& rate) { return rate == "off" ? "unshaped" : rate; }

struct RateResult {
  std::string rate;
  // The non-blocking all-reduce the trainer's buckets use (waited for at once), which the
  // prediction is fed; the blocking one, shown beside it.
  Fit blocking, async;
  DpPrediction predicted;
  // Measured: after backward, overlapped, and overlapped with --mpi_async_progress.
  double after_s = 0, overlapped_s = 0, progress_s = 0;
  double gemm_rate = 0;  // train_step_bench's own GEMM rate in the DP run (GFLOP/s).
};

struct Compute {
  double step_s = 0;  // The mean of the two nodes' medians.
  int64_t parameters = 0;
  double gemm_rate = 0;
};

std::vector<std::string> BenchArgs(const std::string& bin, const ScalingConfig& c) {
  return {bin,
          absl::StrCat("--hidden_size=", c.hidden),
          absl::StrCat("--num_attention_heads=", c.heads),
          absl::StrCat("--num_layers=", c.layers),
          absl::StrCat("--seq_length=", c.seq),
          absl::StrCat("--micro_batch_size=", c.micro_batch),
          absl::StrCat("--vocab_size=", c.vocab),
          "--threads=1",
          absl::StrCat("--steps=", c.steps),
          "--breakdown_steps=0"};
}

// One rank's step without communication: train_step_bench alone on each node at once, so the two
// share the machine as the DP ranks will.
absl::StatusOr<Compute> MeasureCompute(Cluster& cluster, const std::vector<std::string>& bench) {
  absl::StatusOr<std::string> out[2];
  std::thread second([&] { out[1] = cluster.Exec("node2", bench); });
  out[0] = cluster.Exec("node1", bench);
  second.join();
  Compute c;
  for (auto& o : out) {
    if (!o.ok()) return o.status();
    ASSIGN_OR_RETURN(const double median, NumberAfter(*o, "step time (median of", "): "));
    ASSIGN_OR_RETURN(const double gemm, NumberAfter(*o, "f32 GEMM rate per rank", "): "));
    c.step_s += median / 2;
    c.gemm_rate += gemm / 2;
  }
  ASSIGN_OR_RETURN(const double params, NumberAfter(*out[0], "parameters", ": "));
  c.parameters = static_cast<int64_t>(params);
  return c;
}

absl::StatusOr<RateResult> MeasureRate(Cluster& cluster, const ScalingConfig& c,
                                       const std::string& rate, const std::string& comm_bench,
                                       const std::vector<std::string>& bench,
                                       const Compute& compute, const ExperimentRun& run,
                                       Table* predictions) {
  RateResult r;
  r.rate = rate;
  RETURN_IF_ERROR(cluster.Shape(rate));
  ASSIGN_OR_RETURN(
      const std::string comm,
      cluster.OnePerNode({comm_bench, "--ops=all_reduce,all_reduce_async", "--min_bytes=4096",
                          absl::StrCat("--max_bytes=", c.comm_max_bytes), "--step_factor=2",
                          absl::StrCat("--iters=", c.comm_iters), "--warmup=2"}));
  for (auto [fit, section] :
       {std::make_pair(&r.blocking, "all_reduce"), std::make_pair(&r.async, "all_reduce_async")}) {
    fit->rows = ParseAllReduceRows(comm, section);
    ASSIGN_OR_RETURN(const auto ab, FitAllReduce(fit->rows, 2));
    fit->alpha_s = ab.first;
    fit->bus_bandwidth = ab.second;
  }
  DpStepInputs in;
  in.compute_s = compute.step_s;
  in.parameters = compute.parameters;
  in.alpha_s = r.async.alpha_s;
  in.bus_bandwidth = r.async.bus_bandwidth;
  r.predicted = PredictDpStep(in);
  // Written down before the step is measured.
  predictions->AddRow({LinkName(rate), absl::StrFormat("%.1f", r.blocking.bus_bandwidth / 1e6),
                       absl::StrFormat("%.1f", r.async.bus_bandwidth / 1e6),
                       absl::StrFormat("%.4f", r.predicted.after_s),
                       absl::StrFormat("%.4f", r.predicted.overlapped_s)});
  RETURN_IF_ERROR(WriteCsv(run.Path("predictions.csv"), *predictions));
  std::printf(
      "%s: all-reduce %.1f MB/s blocking, %.1f MB/s non-blocking; predicted DP=2 step %.3f s "
      "after backward, %.3f s overlapped; measuring\n",
      rate.c_str(), r.blocking.bus_bandwidth / 1e6, r.async.bus_bandwidth / 1e6,
      r.predicted.after_s, r.predicted.overlapped_s);
  std::fflush(stdout);
  struct Mode {
    const char* flags;
    const char* line;
    double* step;
  };
  for (const Mode& m : {Mode{"--dp_modes=after", "after backward:", &r.after_s},
                        Mode{"--dp_modes=overlapped", "overlapped with backward:", &r.overlapped_s},
                        Mode{"--dp_modes=overlapped --mpi_async_progress",
                             "overlapped with backward:", &r.progress_s}}) {
    std::vector<std::string> args = bench;
    for (absl::string_view f : absl::StrSplit(m.flags, ' ')) args.emplace_back(f);
    ASSIGN_OR_RETURN(const std::string out, cluster.OnePerNode(args));
    ASSIGN_OR_RETURN(*m.step, NumberAfter(out, m.line, "step "));
    ASSIGN_OR_RETURN(const double gemm, NumberAfter(out, "f32 GEMM rate per rank", "): "));
    r.gemm_rate += gemm / 3;
  }
  return r;
}

std::string Pct(double v) { return absl::StrFormat("%.1f", 100 * v); }

Table ResultTable(const std::vector<RateResult>& results, const Compute& compute) {
  Table t({"link", "link_gbit_s", "blocking_gbit_s", "predicted_after_s", "measured_after_s",
           "error_after_pct", "predicted_overlapped_s", "measured_overlapped_s",
           "error_overlapped_pct", "measured_progress_s", "error_progress_pct",
           "overlap_saving_pct", "progress_saving_pct", "efficiency_after_pct",
           "predicted_efficiency_after_pct", "efficiency_overlapped_pct", "efficiency_progress_pct",
           "predicted_efficiency_overlapped_pct", "gemm_rate_gflops"});
  auto secs = [](double s) { return absl::StrFormat("%.3f", s); };
  for (const RateResult& r : results) {
    const double one = compute.step_s;
    const DpPrediction& p = r.predicted;
    t.AddRow({LinkName(r.rate), absl::StrFormat("%.3f", r.async.bus_bandwidth * 8 / 1e9),
              absl::StrFormat("%.3f", r.blocking.bus_bandwidth * 8 / 1e9), secs(p.after_s),
              secs(r.after_s), Pct(r.after_s / p.after_s - 1), secs(p.overlapped_s),
              secs(r.overlapped_s), Pct(r.overlapped_s / p.overlapped_s - 1), secs(r.progress_s),
              Pct(r.progress_s / p.overlapped_s - 1), Pct(1 - r.overlapped_s / r.after_s),
              Pct(1 - r.progress_s / r.after_s), Pct(one / r.after_s), Pct(one / p.after_s),
              Pct(one / r.overlapped_s), Pct(one / r.progress_s), Pct(one / p.overlapped_s),
              absl::StrFormat("%.1f", r.gemm_rate)});
  }
  return t;
}

Table AllReduceTable(const std::vector<RateResult>& results) {
  Table t({"link", "call", "bytes", "measured_s", "fitted_s", "alpha_us", "bus_mb_s"});
  for (const RateResult& r : results) {
    for (const auto& [fit, call] :
         {std::make_pair(&r.blocking, "blocking"), std::make_pair(&r.async, "non-blocking")}) {
      for (const auto& [bytes, s] : fit->rows) {
        t.AddRow({LinkName(r.rate), call, absl::StrFormat("%.0f", bytes),
                  absl::StrFormat("%.6g", s),
                  absl::StrFormat("%.6g", fit->alpha_s + bytes / fit->bus_bandwidth),
                  absl::StrFormat("%.1f", fit->alpha_s * 1e6),
                  absl::StrFormat("%.1f", fit->bus_bandwidth / 1e6)});
      }
    }
  }
  return t;
}

absl::Status DrawEfficiency(const ExperimentRun& run) {
  Plot p;
  p.title = "Data-parallel efficiency across a link (DP=2, one rank per node)";
  p.xlabel = "the link's rate as the non-blocking all-reduce measures it (Gbit/s)";
  p.ylabel = "efficiency: one rank's step / DP=2 step (%)";
  p.logx = true;
  p.ymin = 0;
  p.ymax = 110;
  p.series = {
      {"measured, all-reduce after backward", "scaling.csv", "link_gbit_s", "efficiency_after_pct"},
      {"predicted, after backward", "scaling.csv", "link_gbit_s", "predicted_efficiency_after_pct"},
      {"measured, overlapped with backward", "scaling.csv", "link_gbit_s",
       "efficiency_overlapped_pct"},
      {"measured, overlapped, --mpi_async_progress", "scaling.csv", "link_gbit_s",
       "efficiency_progress_pct"},
      {"predicted, overlapped", "scaling.csv", "link_gbit_s",
       "predicted_efficiency_overlapped_pct"},
  };
  p.series[1].style = p.series[4].style = "lines";  // The predictions.
  return DrawPlot(p, run.Path("efficiency.png"));
}

void WriteReport(const ScalingConfig& c, const Compute& compute,
                 const std::vector<RateResult>& results, const Table& table,
                 const std::string& bench_command, Report* report);

absl::Status Run(const ScalingConfig& c, int argc, char** argv) {
  ASSIGN_OR_RETURN(ExperimentRun run,
                   StartExperiment("multinode_scaling", c.results_dir, argc, argv));
  ASSIGN_OR_RETURN(const std::string script, RunfilePath(argv[0], "tools/cluster/cluster.sh"));
  ASSIGN_OR_RETURN(const std::string bench_bin,
                   RunfilePath(argv[0], "jobs/bench/train_step_bench"));
  ASSIGN_OR_RETURN(const std::string comm_bench, RunfilePath(argv[0], "comm/comm_bench"));
  // OpenMPI's session files go to a short shared directory; shared memory to each node's own.
  char tmp[] = "/tmp/mt_multinode.XXXXXX";
  if (mkdtemp(tmp) == nullptr) return absl::InternalError("cannot create a directory in /tmp");
  struct RemoveAll {
    std::string dir;
    ~RemoveAll() {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  } remove_tmp{tmp};
  setenv("TMPDIR", tmp, 1);
  unsetenv("OMPI_MCA_btl_vader_backing_directory");
  std::vector<RateResult> results;
  Compute compute;
  const std::vector<std::string> bench = BenchArgs(bench_bin, c);
  {
    ASSIGN_OR_RETURN(std::unique_ptr<Cluster> cluster, Cluster::Up(script, c.cluster_id));
    ASSIGN_OR_RETURN(compute, MeasureCompute(*cluster, bench));
    std::printf("one rank's step on each node at once: %.3f s (%lld parameters)\n", compute.step_s,
                static_cast<long long>(compute.parameters));
    Table predictions({"link", "blocking_bus_mb_s", "async_bus_mb_s", "predicted_after_s",
                       "predicted_overlapped_s"});
    for (absl::string_view rate : absl::StrSplit(c.rates, ',', absl::SkipEmpty())) {
      ASSIGN_OR_RETURN(RateResult r, MeasureRate(*cluster, c, std::string(rate), comm_bench, bench,
                                                 compute, run, &predictions));
      results.push_back(std::move(r));
    }
  }
  const Table table = ResultTable(results, compute);
  RETURN_IF_ERROR(WriteCsv(run.Path("scaling.csv"), table));
  RETURN_IF_ERROR(WriteCsv(run.Path("allreduce.csv"), AllReduceTable(results)));
  RETURN_IF_ERROR(DrawEfficiency(run));
  Report report("Data-parallel scaling across a link: measured beside the performance model");
  // The command as a reader runs it from the workspace.
  WriteReport(c, compute, results, table,
              absl::StrJoin(BenchArgs("bazel-bin/jobs/bench/train_step_bench", c), " "), &report);
  return report.Write(run);
}

void WriteReport(const ScalingConfig& c, const Compute& compute,
                 const std::vector<RateResult>& results, const Table& table,
                 const std::string& bench_command, Report* report) {
  // The blocking call's fitted rate as a share of the non-blocking one's, over the shaped links.
  double lo = 1e9, hi = 0;
  for (const RateResult& r : results) {
    if (r.rate == "off") continue;
    const double share = r.blocking.bus_bandwidth / r.async.bus_bandwidth;
    lo = std::min(lo, share);
    hi = std::max(hi, share);
  }
  report->Paragraph(absl::StrFormat(
      "Table 1 of the paper puts data parallelism across nodes (InfiniBand between DGX-2H "
      "boxes). Here two nodes of the test cluster (`tools/cluster/cluster.sh`: network "
      "namespaces joined by a bridge, each with its own hostname and shared memory, so OpenMPI "
      "goes over TCP between them) train one GPT (%lld layers, hidden %lld, %lld heads, "
      "sequence %lld, %lld samples per rank, vocabulary %lld: %lld parameters, f32) at DP=2, one "
      "rank per node and one thread each, while `tc tbf` limits the link to each rate below. "
      "Efficiency is one rank's step (both nodes running it alone at once, %.3f s, GEMM rate "
      "%.1f GFLOP/s) over the DP=2 step: weak scaling, the same work per rank.",
      static_cast<long long>(c.layers), static_cast<long long>(c.hidden),
      static_cast<long long>(c.heads), static_cast<long long>(c.seq),
      static_cast<long long>(c.micro_batch), static_cast<long long>(c.vocab),
      static_cast<long long>(compute.parameters), compute.step_s, compute.gemm_rate));
  report->Paragraph(
      "The prediction is made per link rate before that rate's step is measured "
      "(`predictions.csv` is written first). comm_bench times the all-reduce of 2 ranks across "
      "the link from 4 KiB up as the trainer calls it for a gradient bucket, non-blocking "
      "(`all_reduce_async`, MPI_Iallreduce) and waited for, and it is fitted to time = alpha + "
      "bytes / bus bandwidth (alpha the fastest size, the bandwidth the least-squares slope); "
      "the blocking MPI_Allreduce is timed and fitted beside it for comparison "
      "(`allreduce.csv`). Every gradient bucket (1M elements, 4 MiB) then costs the performance "
      "model's ring all-reduce at that fit. After backward (`--overlap_grad_reduce=false`), the "
      "trainer all-reduces the buckets one after another, so the prediction is the measured "
      "one-rank step plus those all-reduces. Overlapped, each bucket starts as backward "
      "finalises it, and the model queues the buckets on the link: forward a third of the step, "
      "backward two thirds (the optimizer's few percent counted with forward), the buckets final "
      "uniformly over backward, one all-reduce at a time, "
      "the link progressing in the background. Nothing is fitted to the step times. The overlapped "
      "step is measured twice: as it runs by default, and with `--mpi_async_progress`, a thread "
      "that drives MPI's progress while the buckets are in flight (comm/mpi_progress.h).");
  report->AddTable(table);
  report->Image("efficiency.png", "DP efficiency against the link's measured rate");
  std::string notes = absl::StrFormat(
      "The unshaped link is a veth pair through a bridge. Its rate is what the two cores can copy "
      "through the kernel's TCP stack while they also compute, so that row measures CPU cost, "
      "not a network. tbf's bucket holds 1 ms at the rate, so an idle link saves up no large free "
      "transfer. The two calls differ over a link: the non-blocking all-reduce (libnbc's "
      "reduce-scatter + all-gather, which the MPI communicator selects) runs at about the "
      "nominal rate; the blocking one (OpenMPI's own choice for 2 ranks) reached %.0f-%.0f%% of "
      "its fitted rate on the shaped links in this run (the share varies from run to run), so "
      "the trainer uses the non-blocking call after backward too. The overlapped prediction "
      "assumes the link progresses while backward computes. OpenMPI's non-blocking collectives "
      "on the CPU progress only inside MPI calls, which the trainer makes once per layer's "
      "backward (Test): without the progress thread a measured step above that prediction is "
      "overlap the MPI backend does not deliver; with it, the buckets move while backward "
      "computes, at the price of the cores' time the thread and the TCP stack take from the "
      "computation. Errors are measured / predicted - 1. The GEMM rate column is "
      "train_step_bench's own reference GEMM in the DP runs: lower than the one-rank run's when "
      "something else used the cores.",
      100 * lo, 100 * hi);
  report->Paragraph(notes);
  report->Paragraph(
      absl::StrCat("Commands (one rank per node; `--dp_modes=after`, `--dp_modes=overlapped`, "
                   "`--dp_modes=overlapped --mpi_async_progress`):\n\n    ",
                   "tools/cluster/cluster.sh mpirun -H node1:1,node2:1 -np 2 ", bench_command,
                   " --dp_modes=after\n\n",
                   "all-reduce: `bazel-bin/comm/comm_bench --ops=all_reduce,all_reduce_async "
                   "--min_bytes=4096 --max_bytes=",
                   c.comm_max_bytes, " --step_factor=2 --iters=", c.comm_iters,
                   " --warmup=2`, under `tools/cluster/cluster.sh mpirun -H "
                   "node1:1,node2:1 -np 2` after `tools/cluster/cluster.sh shape "
                   "RATE`."));
}

}  // namespace
}  // namespace experiments
}  // namespace mt

int main(int argc, char** argv) {
  return mt::experiments::ExperimentMain("multinode_scaling", argc, argv,
                                         mt::experiments::ScalingConfig(), mt::experiments::Run);
}

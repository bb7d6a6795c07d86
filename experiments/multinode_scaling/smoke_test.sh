#!/bin/bash
# multinode_scaling at a tiny size on one shaped link: its report, CSVs (with their headers),
# predictions written and efficiency plot. Needs root (the test cluster); prints SKIP and passes
# where a cluster cannot be made.
#   smoke_test.sh MULTINODE_SCALING_BIN
set -uo pipefail
bin="$1"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_mnsmoke || exit 1
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/cluster/test_lib.sh" 6  # The experiment makes cluster 6 itself (--cluster_id).
out="$work/out"
timeout --foreground 300 "$bin" --results_dir="$out" --cluster_id=$id --rates=1gbit --hidden_size=64 \
  --num_layers=1 --num_attention_heads=2 --seq_length=32 --micro_batch_size=2 --vocab_size=256 \
  --steps=3 --comm_max_bytes=1048576 --comm_iters=3 >"$work/run.log" 2>&1 ||
  { cat "$work/run.log"; fail "multinode_scaling exited non-zero"; }
grep -q "^- commit: " "$out/report.md" || fail "report.md has no commit line"
header() { [[ "$(head -n 1 "$out/$1")" == "$2" ]] || fail "$1's header: $(head -n 1 "$out/$1")"; }
header scaling.csv "link,link_gbit_s,blocking_gbit_s,predicted_after_s,measured_after_s,error_after_pct,predicted_overlapped_s,measured_overlapped_s,error_overlapped_pct,measured_progress_s,error_progress_pct,overlap_saving_pct,progress_saving_pct,efficiency_after_pct,predicted_efficiency_after_pct,efficiency_overlapped_pct,efficiency_progress_pct,predicted_efficiency_overlapped_pct,gemm_rate_gflops"
header predictions.csv "link,blocking_bus_mb_s,async_bus_mb_s,predicted_after_s,predicted_overlapped_s"
header allreduce.csv "link,call,bytes,measured_s,fitted_s,alpha_us,bus_mb_s"
[[ $(grep -c '^1gbit,' "$out/scaling.csv") -eq 1 ]] || fail "no 1gbit row in scaling.csv"
# The prediction was written before the measurement: the log says so in that order.
grep -q "predicted DP=2 step .* measuring" "$work/run.log" || fail "no prediction line"
[[ "$(head -c 8 "$out/efficiency.png" | od -An -tx1 | tr -d ' \n')" == "89504e470d0a1a0a" ]] ||
  fail "efficiency.png is not a PNG"
ip netns list | grep -q "^mtc${id}-" && fail "the experiment left its cluster behind"
echo PASS

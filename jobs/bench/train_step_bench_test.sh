#!/bin/bash
# train_step_bench's pipeline mode on a tiny GPT (4 layers, hidden 64, vocabulary 512), 2 steps:
#   - PP=2 (2 ranks): the two stages' parameters add up to the whole model's (from the PP=1 run)
#     plus the last stage's copy of the tied word embedding (512 x 64); the bubble line gives
#     each stage's idle share, in [0, 100]%, and the activation sets it keeps (2 and 1, nothing
#     recomputed; with --keep_stage_activations=false one each, stage 0 recomputing 8 forwards);
#   - PP=2 x DP=2 interleaved with the distributed optimizer (4 ranks): each rank's Adam moments
#     are its 1/DP shard (half its parameters, rounded up), and DP buckets start during the
#     schedule;
#   - bad pipeline flags and an unknown --simd_target end with one line naming the flag and a
#     non-zero exit; --simd_target=SSE4 runs and prints its "simd:" line;
#   - --bf16 --vs_f32 times an f32 copy in turn with the bf16 model: one ratio per timed step,
#     their median between the lowest and the highest, and each side's fastest step; refused
#     without a 16-bit dtype, with pipeline stages or on more than one rank.
#   train_step_bench_test.sh TRAIN_STEP_BENCH_BIN
set -uo pipefail
bench="$1"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_step_bench || exit 1
export OMPI_MCA_plm_rsh_agent=false
tiny=(--num_layers=4 --hidden_size=64 --num_attention_heads=4 --seq_length=32 --vocab_size=512
      --micro_batch_size=2 --steps=2 --threads=1 --breakdown_steps=0 --gemm_rate_size=128)

timeout 120 "$bench" "${tiny[@]}" > "$work/serial.out" 2>&1 || { cat "$work/serial.out"; fail "PP=1 run"; }
whole=$(sed -n 's/^parameters: \([0-9]*\)$/\1/p' "$work/serial.out")
[[ -n "$whole" ]] || { cat "$work/serial.out"; fail "no parameter count in the PP=1 run"; }

mpi_timeout=120 mpi 2 "$bench" "${tiny[@]}" --pipeline_model_parallel_size=2 \
  > "$work/pp2.out" 2>&1 || { cat "$work/pp2.out"; fail "PP=2 run"; }
staged=$(sed -n 's/^rank [0-9]* (stage .*): parameters \([0-9]*\) .*/\1/p' "$work/pp2.out" |
  awk '{ s += $1 } END { print s }')
[[ "$staged" == "$((whole + 512 * 64))" ]] ||
  { cat "$work/pp2.out"; fail "stage parameters $staged != $whole + 512 x 64"; }
bubble=$(grep '^pipeline bubble' "$work/pp2.out") || { cat "$work/pp2.out"; fail "no bubble line"; }
for share in $(echo "$bubble" | grep -o 'stage [01] [0-9.-]*%' | sed 's/.* \([0-9.-]*\)%/\1/'); do
  awk -v s="$share" 'BEGIN { exit !(s >= 0 && s <= 100) }' || fail "idle share $share% in: $bubble"
done
[[ $(echo "$bubble" | grep -o 'stage [01] ' | wc -l) -eq 2 ]] || fail "not two stages in: $bubble"
grep -q '^step time (median of 2, 8 micro-batches of 2 per DP rank)' "$work/pp2.out" ||
  { cat "$work/pp2.out"; fail "no step time line"; }
# 1F1B over 8 micro-batches: stage 0 keeps 2 in flight, stage 1 one, and nothing is recomputed;
# with one activation set per chunk stage 0 recomputes each of its 8 forwards.
grep -q 'stage 0 [0-9.]*% (activation sets 2, forwards recomputed 0) stage 1 [0-9.]*% (activation sets 1, forwards recomputed 0)' <<<"$bubble" ||
  fail "activation sets in: $bubble"
mpi_timeout=120 mpi 2 "$bench" "${tiny[@]}" --pipeline_model_parallel_size=2 \
  --keep_stage_activations=false > "$work/recompute.out" 2>&1 ||
  { cat "$work/recompute.out"; fail "PP=2 recomputing run"; }
grep -q 'stage 0 [0-9.]*% (activation sets 1, forwards recomputed 8) stage 1 [0-9.]*% (activation sets 1, forwards recomputed 0)' "$work/recompute.out" ||
  { cat "$work/recompute.out"; fail "recomputation not reported"; }

mpi_timeout=180 mpi 4 "$bench" "${tiny[@]}" --pipeline_model_parallel_size=2 \
  --num_layers_per_virtual_pipeline_stage=1 --use_distributed_optimizer --ddp_bucket_size=2000 \
  > "$work/dist.out" 2>&1 || { cat "$work/dist.out"; fail "PP=2 x DP=2 distributed run"; }
ranks=0
while read -r params moments; do
  ranks=$((ranks + 1))
  [[ "$moments" -ge $(((params + 1) / 2)) && "$moments" -le $(((params + 1) / 2 + 1)) ]] ||
    fail "moments $moments for $params parameters: not a half shard"
done < <(sed -n 's/^rank .*: parameters \([0-9]*\) .*Adam moments .* (\([0-9]*\) elements each, a 1\/DP shard).*/\1 \2/p' "$work/dist.out")
[[ $ranks -eq 4 ]] || { cat "$work/dist.out"; fail "$ranks ranks reported sharded moments, not 4"; }
started=$(sed -n 's/^DP gradient reduce-scatter of rank 0: \([0-9]*\) buckets .*, \([0-9]*\) started during the schedule$/\2/p' "$work/dist.out")
[[ -n "$started" && "$started" -gt 0 ]] || { cat "$work/dist.out"; fail "no bucket started during the schedule"; }

# Bad flags: one line naming the flag, a non-zero exit.
bad() {  # bad FLAG-TEXT ARGS...
  local want="$1"; shift
  out=$(timeout 60 "$bench" "${tiny[@]}" "$@" 2>&1) && fail "accepted: $*"
  [[ $(echo "$out" | wc -l) -eq 1 && "$out" == *"$want"* ]] || fail "for $*: $out"
}
bad num_layers_per_virtual_pipeline_stage --pipeline_model_parallel_size=2 \
  --num_layers_per_virtual_pipeline_stage=3
bad pipeline_model_parallel_size --pipeline_model_parallel_size=3
bad num_micro_batches --num_micro_batches=-1
bad "--simd_target=NOSUCH: not a SIMD target of this CPU" --simd_target=NOSUCH
bad "--vs_f32 compares a CPU model's --bf16 or --fp16 steps" --vs_f32
bad "--vs_f32 compares a CPU model's --bf16 or --fp16 steps" --vs_f32 --bf16 \
  --pipeline_model_parallel_size=2
out=$(mpi_timeout=60 mpi 2 "$bench" "${tiny[@]}" --bf16 --vs_f32 2>&1) && fail "--vs_f32 on 2 ranks"
grep -q -- "--vs_f32 runs one rank, not 2" <<<"$out" || fail "--vs_f32 on 2 ranks: $out"

# --vs_f32: the pairs' line, with as many pairs as timed steps.
timeout 120 "$bench" "${tiny[@]}" --steps=3 --bf16 --vs_f32 > "$work/vs.out" 2>&1 ||
  { cat "$work/vs.out"; fail "--bf16 --vs_f32 run"; }
pairs=$(sed -n 's/^f32 copy, its steps taking turns with these (median of 3): [0-9.]* s | bf16 \/ f32: median of the 3 pairs. ratios \([0-9.]*\) (lowest \([0-9.]*\), highest \([0-9.]*\))$/\2 \1 \3/p' "$work/vs.out")
[[ -n "$pairs" ]] || { cat "$work/vs.out"; fail "no pairs line"; }
awk -v p="$pairs" 'BEGIN { split(p, r, " "); exit !(r[1] > 0 && r[1] <= r[2] && r[2] <= r[3]) }' ||
  fail "pair ratios out of order: $pairs"
# The fastest steps' line: the bf16 one is the run's best step, the f32 one at most the f32 median,
# and the ratio their quotient within what printing each to 3 places can move it.
fastest=$(sed -n 's/^fastest steps: bf16 \([0-9.]*\) s, f32 \([0-9.]*\) s | bf16 \/ f32: \([0-9.]*\)$/\1 \2 \3/p' "$work/vs.out")
[[ -n "$fastest" ]] || { cat "$work/vs.out"; fail "no fastest steps line"; }
best=$(sed -n 's/^step time (best of 3): \([0-9.]*\) s.*/\1/p' "$work/vs.out")
f32_median=$(sed -n 's/^f32 copy, its steps taking turns with these (median of 3): \([0-9.]*\) s .*/\1/p' "$work/vs.out")
awk -v p="$fastest" -v best="$best" -v med="$f32_median" 'BEGIN {
  split(p, r, " "); if (!(r[1] == best && r[2] > 0.0005 && r[2] <= med)) exit 1
  q = r[1] / r[2]; slack = 0.0005 * (1 + (1 + q) / (r[2] - 0.0005)) + 1e-9
  exit !(r[3] - q <= slack && q - r[3] <= slack) }' ||
  fail "fastest steps $fastest against best $best and f32 median $f32_median"

# --simd_target: the kernels run at the target named (SSE4: the build's baseline, on every CPU
# it runs on), and the run says so; a run without it names the CPU's best.
timeout 120 "$bench" "${tiny[@]}" --simd_target=SSE4 > "$work/sse4.out" 2>&1 ||
  { cat "$work/sse4.out"; fail "--simd_target=SSE4 run"; }
grep -q '^simd: SSE4$' "$work/sse4.out" || { cat "$work/sse4.out"; fail "no 'simd: SSE4' line"; }
grep -q '^simd: ' "$work/serial.out" || { cat "$work/serial.out"; fail "no simd line"; }
echo PASS

#!/bin/bash
# Numerics faults (pretrain_gpt_with_faults --inject_nonfinite_*: the production job with a
# train/testing/fault_hooks.h hook; --max_nan_skips) on 2-rank jobs saving every 4 iterations:
#   f32 (DP=2) inf in a gradient, and bf16 (TP=2) NaN in the loss of DP rank 0, at iterations
#     6, 7, 8: each step is skipped, and after the third (--max_nan_skips=3) the job exits
#     non-zero with one error naming iterations 6 to 8; the last checkpoint (iteration 4) is
#     byte-identical to an uninjected run's and nothing newer exists; --load then resumes from it
#     and ends with the uninjected run's loss, bit for bit;
#   f32, one bad iteration (6): skipped, training continues to the end (1 skipped iteration);
#   f16 (dynamic loss scaling), inf gradients at iterations 6 to 10 (more than --max_nan_skips):
#     each of those steps is skipped by the loss scaler, and the job completes.
#   a bad --inject_nonfinite_into is one line naming the choices.
#   nan_test.sh SYNTHETIC_CORPUS_BIN PRETRAIN_GPT_WITH_FAULTS_BIN
set -uo pipefail
corpus_bin="$1"; pretrain="$2"
source "$(dirname "$0")/tiny_job.sh" "$corpus_bin" mt_nan
common=("${tiny[@]}" --train_iters=12 --save_interval=4
        --distributed_timeout=60 --keep_last=5)
mpi=(timeout 120 mpirun --oversubscribe --bind-to none -np 2 --mca btl self,vader
     --mca mpi_yield_when_idle 1)
inject=(--inject_nonfinite_at_iteration=6 --inject_nonfinite_count=3)
field() {  # field JSONL ITERATION KEY: the value logged for that iteration
  python3 -c 'import json,sys
for l in open(sys.argv[1]):
    j = json.loads(l)
    if j["iteration"] == int(sys.argv[2]): print(repr(j[sys.argv[3]]))' "$@"
}

# stops NAME PRECISION_AND_LAYOUT... : the injected run stops at 8 and resumes like the reference.
stops() {
  local name="$1"; shift
  local ref="$work/$name.ref" run="$work/$name"
  "${mpi[@]}" "$pretrain" "${common[@]}" "$@" --save="$ref" --log_jsonl="$ref.jsonl" \
    > "$ref.out" 2>&1 || { cat "$ref.out"; fail "$name: reference run"; }
  "${mpi[@]}" "$pretrain" "${common[@]}" "$@" "${inject[@]}" --save="$run" \
    --log_jsonl="$run.jsonl" > "$run.out" 2>&1
  local rc=$?
  [[ $rc -ne 0 && $rc -ne 124 ]] || { cat "$run.out"; fail "$name: exit code $rc"; }
  grep -q "fatal: ABORTED: iteration 8: the loss (.*) or the gradient norm (.*) is not finite in 3 iterations in a row (6 to 8), each skipped; stopping (--max_nan_skips=3)" "$run.out" \
    || { cat "$run.out"; fail "$name: no error naming iterations 6 to 8"; }
  grep -q " iteration 6: .* step skipped (1 in a row" "$run.out" || fail "$name: no note at 6"
  [[ "$(cat "$run/latest_checkpointed_iteration.txt")" == 4 ]] || fail "$name: latest is not 4"
  [[ "$(ls "$run")" == "$(printf 'iter_0000004\nlatest_checkpointed_iteration.txt')" ]] \
    || fail "$name: checkpoints after iteration 4: $(ls "$run")"
  (cd "$ref/iter_0000004" && find . -type f | sort | xargs sha256sum) > "$work/$name.ref.sha"
  (cd "$run/iter_0000004" && sha256sum -c --quiet "$work/$name.ref.sha") \
    || fail "$name: the checkpoint of iteration 4 differs from the uninjected run's"
  "${mpi[@]}" "$pretrain" "${common[@]}" "$@" --save="$run" --load="$run" \
    --log_jsonl="$run.resumed.jsonl" > "$run.resumed.out" 2>&1 \
    || { cat "$run.resumed.out"; fail "$name: resume"; }
  grep -q "loaded checkpoint from $run at iteration 4 " "$run.resumed.out" || fail "$name: no load"
  local a b
  a=$(field "$ref.jsonl" 12 loss); b=$(field "$run.resumed.jsonl" 12 loss)
  [[ -n "$a" && "$a" == "$b" ]] || fail "$name: final loss $b after resuming, $a uninjected"
  echo "$name: stopped at iteration 8 ($(grep -o 'fatal: ABORTED: iteration 8: [^;]*' "$run.out" | head -1));" \
       "checkpoint 4 unchanged; resumed to 12 with the uninjected loss $a"
}

stops f32_grad --tensor_model_parallel_size=1 --fp32 --inject_nonfinite_into=grad
stops bf16_loss --tensor_model_parallel_size=2 --bf16 --inject_nonfinite_into=loss

# One bad step in f32: skipped, and the run goes on.
"${mpi[@]}" "$pretrain" "${common[@]}" --fp32 --inject_nonfinite_at_iteration=6 \
  --log_jsonl="$work/once.jsonl" > "$work/once.out" 2>&1 || { cat "$work/once.out"; fail "once"; }
[[ $(field "$work/once.jsonl" 12 skipped_iterations) == 1 ]] || fail "once: skipped count"
[[ $(field "$work/once.jsonl" 6 grad_norm) == -1.0 ]] || fail "once: iteration 6 not flagged"
echo "f32 once: iteration 6 skipped, run completed with 1 skipped iteration"

# f16: dynamic loss scaling skips every injected step, past --max_nan_skips, and completes.
"${mpi[@]}" "$pretrain" "${common[@]}" --fp16 --inject_nonfinite_at_iteration=6 \
  --inject_nonfinite_count=5 --log_jsonl="$work/f16.jsonl" > "$work/f16.out" 2>&1 \
  || { cat "$work/f16.out"; fail "f16 run"; }
for i in 6 7 8 9 10; do
  [[ $(field "$work/f16.jsonl" $i skipped_iterations) -eq \
     $(( $(field "$work/f16.jsonl" $((i - 1)) skipped_iterations) + 1 )) ]] \
    || fail "f16: iteration $i was not skipped"
done
[[ $(field "$work/f16.jsonl" 12 iteration) == 12 ]] || fail "f16: did not complete"
echo "f16: iterations 6-10 skipped by the loss scaler (scale $(field "$work/f16.jsonl" 10 loss_scale) at 10), completed"
# A bad target is refused before any work, in one line naming the choices.
"$pretrain" "${common[@]}" --inject_nonfinite_into=weights > "$work/bad.out" 2>&1 &&
  fail "--inject_nonfinite_into=weights was accepted"
grep -q "inject_nonfinite_into=weights: must be one of grad, loss" "$work/bad.out" ||
  { cat "$work/bad.out"; fail "no one-line error for --inject_nonfinite_into=weights"; }
echo PASS

#!/bin/bash
# SIGTERM during training (to every rank, as a scheduler's preemption does) saves a checkpoint at
# the iteration reached and exits 0; a resumed run continues from it. The first run saves every 2
# iterations with --async_save, so the signal may find a save in flight: the job waits for it,
# then saves (and commits) the last iteration before exiting. The resumed run saves
# synchronously.
#   sigterm_test.sh SYNTHETIC_CORPUS_BIN PRETRAIN_GPT_BIN
set -uo pipefail
corpus_bin="$1"; pretrain="$2"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_sigterm || exit 1

"$corpus_bin" --output_prefix="$work/corpus" --vocab=64 --documents=300 || fail "corpus"
common=(--data_path="$work/corpus" --vocab_size=64 --make_vocab_size_divisible_by=8
        --num_layers=2 --hidden_size=32 --num_attention_heads=4 --seq_length=16
        --micro_batch_size=2 --global_batch_size=4 --train_iters=100000 --lr=1e-3
        --tensor_model_parallel_size=2 --log_interval=1 --eval_iters=0 --threads=1
        --save="$work/ckpt" --log_jsonl="$work/log.jsonl")
mpirun --oversubscribe --bind-to none -np 2 --mca btl self,vader --mca mpi_yield_when_idle 1 \
  "$pretrain" "${common[@]}" --async_save --save_interval=2 > "$work/out" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  [[ -f "$work/log.jsonl" && $(wc -l < "$work/log.jsonl") -ge 3 ]] && break
  sleep 0.1
done
# SIGTERM to one rank only (the ranks must agree to stop at the same iteration), as a
# scheduler preempting a task would deliver it; mpirun then sees every rank exit 0.
rank=$(pgrep -P "$pid" | head -1)
[[ -n "$rank" ]] || fail "no rank process found"
kill -TERM "$rank"
timeout 60 tail --pid="$pid" -f /dev/null || fail "did not exit within 60 s of SIGTERM"
wait "$pid"; rc=$?
[[ $rc -eq 0 ]] || { cat "$work/out"; fail "exit code $rc after SIGTERM"; }
grep -q "stopped by SIGTERM at iteration" "$work/out" || fail "no stop message: $(tail -3 "$work/out")"
it=$(sed -n 's/.*stopped by SIGTERM at iteration \([0-9]*\).*/\1/p' "$work/out")
[[ "$(cat "$work/ckpt/latest_checkpointed_iteration.txt")" == "$it" ]] || fail "latest is not $it"
echo "SIGTERM at iteration $it: checkpoint saved, exit 0"
# Resume for two more iterations.
timeout 120 mpirun --oversubscribe --bind-to none -np 2 --mca btl self,vader \
  "$pretrain" "${common[@]/--train_iters=100000/--train_iters=$((it + 2))}" --load="$work/ckpt" \
  > "$work/out2" 2>&1 || { cat "$work/out2"; fail "resume"; }
grep -q "loaded checkpoint from .* at iteration $it" "$work/out2" || fail "did not resume at $it"
echo PASS

#!/bin/bash
# Kill -9 during training, resume from the last checkpoint: the losses from there equal the
# uninterrupted run's bit for bit (CPU), and the checkpoint directory never holds a half-written
# checkpoint. Runs TP=2 over 2 MPI ranks.
#   resume_test.sh SYNTHETIC_CORPUS_BIN PRETRAIN_GPT_BIN
set -uo pipefail
corpus_bin="$1"; pretrain="$2"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_resume || exit 1

"$corpus_bin" --output_prefix="$work/corpus" --vocab=64 --documents=300 || fail "corpus"
common=(--data_path="$work/corpus" --vocab_size=64 --make_vocab_size_divisible_by=8
        --num_layers=2 --hidden_size=64 --num_attention_heads=4 --seq_length=32
        --micro_batch_size=2 --global_batch_size=4 --lr=3e-3 --min_lr=3e-4
        --lr_warmup_samples=8 --tensor_model_parallel_size=2 --train_iters=400
        --log_interval=1 --eval_iters=0 --threads=1)
# (Every run has the same train_iters: the dataset's sample order depends on the number of
# samples requested, as in Megatron.)
mpi=(mpirun --oversubscribe --bind-to none -np 2 --mca btl self,vader)

# 1. A run checkpointing every 25 iterations, killed with SIGKILL (the whole job) once at least
#    60 iterations were logged.
setsid "${mpi[@]}" "$pretrain" "${common[@]}" --save_interval=25 --save="$work/ckpt_b" \
  --log_jsonl="$work/b.jsonl" > "$work/b.out" 2>&1 &
pid=$!
for _ in $(seq 1 1200); do
  [[ -f "$work/b.jsonl" && $(wc -l < "$work/b.jsonl") -ge 60 ]] && break
  sleep 0.02
done
# The ranks run in their own process groups: kill them (mpirun's children) and mpirun itself.
pkill -9 -P "$pid" 2>/dev/null
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
for _ in $(seq 1 50); do pgrep -f "$work/ckpt_b" >/dev/null || break; sleep 0.1; done
pgrep -f "$work/ckpt_b" >/dev/null && fail "ranks still running after the kill"
latest=$(cat "$work/ckpt_b/latest_checkpointed_iteration.txt") || fail "no checkpoint after the kill"
[[ "$latest" -ge 25 ]] || fail "latest checkpoint is $latest"
[[ $(wc -l < "$work/b.jsonl") -lt 400 ]] || fail "run B finished before the kill"
echo "killed after $(wc -l < "$work/b.jsonl") logged iterations; latest committed checkpoint: $latest"
# No half-written shard: the committed iteration has both shards with complete files.
for r in 00 01; do
  d=$(printf "%s/iter_%07d/mp_rank_%s" "$work/ckpt_b" "$latest" "$r")
  [[ -s "$d/model_optim.safetensors" && -s "$d/metadata.json" ]] || fail "incomplete shard $d"
done
end=400

# 2. The uninterrupted reference run.
timeout 200 "${mpi[@]}" "$pretrain" "${common[@]}" \
  --log_jsonl="$work/a.jsonl" > "$work/a.out" 2>&1 || { cat "$work/a.out"; fail "run A"; }
[[ $(wc -l < "$work/a.jsonl") -eq $end ]] || fail "run A logged $(wc -l < "$work/a.jsonl") lines"

# 3. Resume the killed run and compare every later iteration with run A.
timeout 200 "${mpi[@]}" "$pretrain" "${common[@]}" --save="$work/ckpt_b" \
  --load="$work/ckpt_b" --log_jsonl="$work/c.jsonl" > "$work/c.out" 2>&1 \
  || { cat "$work/c.out"; fail "resume"; }
grep -q "loaded checkpoint" "$work/c.out" || fail "did not resume: $(head -5 "$work/c.out")"
python3 - "$work/a.jsonl" "$work/c.jsonl" "$latest" "$end" <<'PY' || fail "resumed curve differs"
import json, sys
a = {r["iteration"]: r for r in map(json.loads, open(sys.argv[1]))}
c = [json.loads(l) for l in open(sys.argv[2])]
start, end = int(sys.argv[3]), int(sys.argv[4])
assert c and c[0]["iteration"] == start + 1, (c[0]["iteration"] if c else None, start)
assert c[-1]["iteration"] == end
for r in c:
    ref = a[r["iteration"]]
    for k in ("lm_loss", "grad_norm", "learning_rate", "consumed_samples"):
        assert r[k] == ref[k], (r["iteration"], k, r[k], ref[k])
print("resumed iterations %d..%d match bit for bit" % (start + 1, end))
PY
echo PASS

#!/bin/bash
# End-to-end BERT pretraining: a small English text -> //data:preprocess (bert WordPiece, one
# sequence per sentence) -> pretrain_bert over 2 MPI ranks (DP=2) for 12 iterations with a
# checkpoint at 6: the MLM loss falls, checkpoints are written, and a second job that trains to 6,
# saves, and resumes to 12 logs exactly the uninterrupted run's iterations 7..12; then bf16 and
# fp16 runs at TP=2 (fp16 skips the overflowing steps from a loss scale of 2^32, then learns);
# then --finetune from the first run's checkpoint at TP=2: iterations restart at 1 from its weights.
#   pretrain_bert_test.sh PREPROCESS_BIN PRETRAIN_BERT_BIN
set -uo pipefail
preprocess="$1"; pretrain="$2"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_bert || exit 1

# 300 documents of 3-6 short sentences, separated by blank lines.
sentences "$work/corpus.txt" 300 5 || fail "corpus"
"$preprocess" --input="$work/corpus.txt" --input_format=text --tokenizer=bert --split_sentences \
  --output_prefix="$work/bert" --workers=1 > "$work/pre.out" 2>&1 ||
  { cat "$work/pre.out"; fail "preprocess"; }

common=(--data_path="$work/bert" --num_layers=2 --hidden_size=32 --num_attention_heads=4
        --seq_length=32 --micro_batch_size=4 --global_batch_size=8 --lr=1e-2 --min_lr=1e-3
        --lr_warmup_samples=16 --lr_decay_samples=96 --log_interval=1 --eval_iters=2
        --save_interval=6 --threads=1 --mask_prob=0.15 --short_seq_prob=0.1)
mpi=(mpirun --oversubscribe --bind-to none -np 2 --mca btl self,vader)

# 1. Uninterrupted: 12 iterations.
timeout 200 "${mpi[@]}" "$pretrain" "${common[@]}" --train_iters=12 --save="$work/ckpt_a" \
  --log_jsonl="$work/a.jsonl" > "$work/a.out" 2>&1 || { cat "$work/a.out"; fail "run A"; }
cat "$work/a.out" | grep -E "iteration +(1|12)/|validation at the end"
[[ $(wc -l < "$work/a.jsonl") -eq 12 ]] || fail "run A logged $(wc -l < "$work/a.jsonl") lines"
grep -q "lm loss:.*sop loss:" "$work/a.out" || fail "no lm/sop loss in the log line"
[[ $(cat "$work/ckpt_a/latest_checkpointed_iteration.txt") -eq 12 ]] || fail "no final checkpoint"
[[ -s $(printf "%s/iter_%07d/mp_rank_00/model_optim.safetensors" "$work/ckpt_a" 6) ]] ||
  fail "no checkpoint at iteration 6"

# 2. Train to 6 (saves), then resume to 12.
timeout 200 "${mpi[@]}" "$pretrain" "${common[@]}" --train_iters=6 --save="$work/ckpt_b" \
  --log_jsonl="$work/b.jsonl" > "$work/b.out" 2>&1 || { cat "$work/b.out"; fail "run B"; }
timeout 200 "${mpi[@]}" "$pretrain" "${common[@]}" --train_iters=12 --save="$work/ckpt_b" \
  --load="$work/ckpt_b" --log_jsonl="$work/c.jsonl" > "$work/c.out" 2>&1 ||
  { cat "$work/c.out"; fail "resume"; }
grep -q "loaded checkpoint" "$work/c.out" || fail "did not resume: $(head -5 "$work/c.out")"

python3 - "$work/a.jsonl" "$work/b.jsonl" "$work/c.jsonl" <<'PY' || fail "curves"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
c = [json.loads(l) for l in open(sys.argv[3])]
first, last = a[0]["lm_loss"], a[-1]["lm_loss"]
assert last < first - 1.0, ("the MLM loss did not fall", first, last)
assert [r["iteration"] for r in c] == list(range(7, 13)), [r["iteration"] for r in c]
for r, ref in zip(b + c, a):
    for k in ("lm_loss", "sop_loss", "grad_norm", "learning_rate", "consumed_samples"):
        assert r[k] == ref[k], (r["iteration"], k, r[k], ref[k])
print("lm loss %.4f -> %.4f; resumed iterations 7..12 match bit for bit" % (first, last))
PY

# 3. Mixed precision at TP=2 through the driver: bf16 (no loss scaling) learns; fp16 starts from a
#    loss scale of 2^32, skips the overflowing steps and reports them.
#    The fp16 run is long enough to learn after the skipped steps.
for prec in bf16 fp16; do
  iters=8; [ "$prec" = fp16 ] && iters=36
  timeout 200 "${mpi[@]}" "$pretrain" "${common[@]}" --train_iters=$iters --$prec \
    --lr_decay_samples=$((iters * 8)) --tensor_model_parallel_size=2 --eval_iters=0 --save="" \
    --log_jsonl="$work/$prec.jsonl" > "$work/$prec.out" 2>&1 || { cat "$work/$prec.out"; fail "--$prec"; }
done
python3 - "$work/bf16.jsonl" "$work/fp16.jsonl" <<'PY' || fail "mixed precision"
import json, math, sys
bf = [json.loads(l) for l in open(sys.argv[1])]
fp = [json.loads(l) for l in open(sys.argv[2])]
assert len(bf) == 8 and len(fp) == 36
assert all(r["loss_scale"] == 1 and r["skipped_iterations"] == 0 for r in bf)
assert bf[-1]["lm_loss"] < bf[0]["lm_loss"] - 0.5, (bf[0]["lm_loss"], bf[-1]["lm_loss"])
skipped = fp[-1]["skipped_iterations"]
assert skipped > 0 and fp[-1]["loss_scale"] < 2.0 ** 32, fp[-1]
assert all(math.isfinite(r["lm_loss"]) for r in fp)
# After the overflowing steps (which leave the weights alone) it learns: the last steps' MLM loss
# is well below the first, and steps were applied after the last skip.
last_skip = max(r["iteration"] for r in fp if r["grad_norm"] == -1)
assert last_skip <= 26, ("still skipping at iteration", last_skip)
first, last = fp[0]["lm_loss"], sum(r["lm_loss"] for r in fp[-5:]) / 5
assert last < first - 1.0, ("fp16 did not learn after the skipped steps", first, last)
print("bf16 TP=2 lm loss %.4f -> %.4f; fp16: %d skipped steps (the last at iteration %d), "
      "loss scale %g, lm loss %.4f -> %.4f" % (bf[0]["lm_loss"], bf[-1]["lm_loss"], skipped,
      last_skip, fp[-1]["loss_scale"], first, last))
PY

# 4. --finetune at TP=2 from run A's final checkpoint (saved at TP=1): the weights only, so the
#    iterations restart at 1 and the first MLM loss is run A's trained one, not a fresh model's.
timeout 200 "${mpi[@]}" "$pretrain" "${common[@]}" --train_iters=2 --tensor_model_parallel_size=2 \
  --load="$work/ckpt_a" --finetune --save="" --eval_iters=0 --log_jsonl="$work/ft.jsonl" \
  > "$work/ft.out" 2>&1 || { cat "$work/ft.out"; fail "--finetune"; }
grep -q "loaded the weights of .* only (--finetune)" "$work/ft.out" || fail "$(head -5 "$work/ft.out")"
python3 - "$work/a.jsonl" "$work/ft.jsonl" <<'PY' || fail "finetune"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
ft = [json.loads(l) for l in open(sys.argv[2])]
assert [r["iteration"] for r in ft] == [1, 2], [r["iteration"] for r in ft]
assert ft[0]["lm_loss"] < a[0]["lm_loss"] - 1.0, (ft[0]["lm_loss"], a[0]["lm_loss"])
print("--finetune: iterations 1..2 from lm loss %.4f (a fresh model: %.4f)" %
      (ft[0]["lm_loss"], a[0]["lm_loss"]))
PY
echo PASS

#!/bin/bash
# pretrain_gpt's mixed-precision flags end to end (TP=2 over 2 MPI ranks, and one rank):
#   --bf16: loss scale 1, no skipped steps; a run resumed from a checkpoint continues the
#           uninterrupted run's curve bit for bit (the bf16 compute weights are rebuilt from the
#           loaded f32 masters);
#   --fp16: dynamic loss scaling from 2^32: the first steps overflow in f16 and are skipped, the
#           scale halves, then training proceeds;
#   --fp16 --bf16 together are refused; so are a bad --device, and --device=cuda without a GPU.
#   mixed_precision_driver_test.sh SYNTHETIC_CORPUS_BIN PRETRAIN_GPT_BIN
set -uo pipefail
corpus_bin="$1"; pretrain="$2"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_mixed || exit 1

"$corpus_bin" --output_prefix="$work/corpus" --vocab=64 --documents=300 || fail "corpus"
common=(--data_path="$work/corpus" --vocab_size=64 --make_vocab_size_divisible_by=8
        --num_layers=2 --hidden_size=32 --num_attention_heads=4 --seq_length=16
        --micro_batch_size=2 --global_batch_size=4 --lr=3e-3 --min_lr=3e-4
        --lr_warmup_samples=8 --log_interval=1 --eval_iters=0 --threads=1)
mpi=(mpirun --oversubscribe --bind-to none -np 2 --mca btl self,vader)

# 1. bf16, TP=2, 10 iterations with checkpoints at 5 and 10.
timeout 200 "${mpi[@]}" "$pretrain" "${common[@]}" --bf16 --tensor_model_parallel_size=2 \
  --train_iters=10 --save_interval=5 --save="$work/ckpt" --log_jsonl="$work/a.jsonl" \
  > "$work/a.out" 2>&1 || { cat "$work/a.out"; fail "bf16 run"; }
grep -q "compute_dtype: bf16" "$work/a.out" || fail "resolved config lacks compute_dtype: bf16"
# 2. Resume from iteration 5 (point the latest-checkpoint file back at it) and run to 10.
cp -r "$work/ckpt" "$work/ckpt5"
echo 5 > "$work/ckpt5/latest_checkpointed_iteration.txt"
timeout 200 "${mpi[@]}" "$pretrain" "${common[@]}" --bf16 --tensor_model_parallel_size=2 \
  --train_iters=10 --load="$work/ckpt5" --log_jsonl="$work/b.jsonl" \
  > "$work/b.out" 2>&1 || { cat "$work/b.out"; fail "bf16 resume"; }
grep -q "loaded checkpoint" "$work/b.out" || fail "did not resume: $(head -5 "$work/b.out")"
python3 - "$work/a.jsonl" "$work/b.jsonl" <<'PY' || fail "bf16 curves"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
assert len(a) == 10 and [r["iteration"] for r in b] == list(range(6, 11)), (len(a), b)
assert all(r["loss_scale"] == 1 and r["skipped_iterations"] == 0 for r in a), a
assert a[-1]["lm_loss"] < a[0]["lm_loss"], (a[0]["lm_loss"], a[-1]["lm_loss"])
ref = {r["iteration"]: r for r in a}
for r in b:
    for k in ("lm_loss", "grad_norm", "learning_rate"):
        assert r[k] == ref[r["iteration"]][k], (r["iteration"], k, r[k], ref[r["iteration"]][k])
print("bf16: loss %.4f -> %.4f; resumed iterations 6..10 match bit for bit"
      % (a[0]["lm_loss"], a[-1]["lm_loss"]))
PY

# 3. fp16, one rank: real overflows at the initial scale 2^32, then training.
timeout 200 "$pretrain" "${common[@]}" --fp16 --train_iters=40 --log_jsonl="$work/c.jsonl" \
  > "$work/c.out" 2>&1 || { cat "$work/c.out"; fail "fp16 run"; }
grep -q "compute_dtype: f16" "$work/c.out" || fail "resolved config lacks compute_dtype: f16"
grep -q "loss_scale: dynamic" "$work/c.out" || fail "resolved config lacks loss_scale: dynamic"
python3 - "$work/c.jsonl" <<'PY' || fail "fp16 curve"
import json, sys
c = [json.loads(l) for l in open(sys.argv[1])]
assert len(c) == 40, len(c)
skipped = c[-1]["skipped_iterations"]
assert skipped > 0, "no step overflowed"
assert c[0]["grad_norm"] == -1 and c[0]["loss_scale"] == 2.0 ** 32, c[0]  # hysteresis 2
assert c[-1]["loss_scale"] == 2.0 ** (33 - skipped), (c[-1]["loss_scale"], skipped)
scales = [r["loss_scale"] for r in c]
assert all(x >= y for x, y in zip(scales, scales[1:])), scales
first, last = c[0]["lm_loss"], sum(r["lm_loss"] for r in c[-5:]) / 5
assert last < first - 0.3, (first, last)
print("fp16: %d skipped steps, loss scale 2^32 -> %g, loss %.4f -> %.4f"
      % (skipped, c[-1]["loss_scale"], first, last))
PY

# 4. Both flags: a clear error, non-zero exit.
if "$pretrain" "${common[@]}" --fp16 --bf16 --train_iters=1 > "$work/d.out" 2>&1; then
  fail "--fp16 --bf16 was accepted"
fi
grep -q "exclusive" "$work/d.out" || fail "unclear error: $(cat "$work/d.out")"

# 5. Device flags: a bad --device is refused before training; --device=cuda without a GPU (as
#    here and in CI) fails with one line naming the reason, not a crash. (Under the CUDA
#    emulator, --config=cuda_emu, there is a device.)
if "$pretrain" "${common[@]}" --device=tpu --train_iters=4 > "$work/e.out" 2>&1; then
  fail "--device=tpu was accepted"
fi
grep -q -- "--device=tpu: must be one of cpu, cuda" "$work/e.out" || fail "unclear error: $(cat "$work/e.out")"
if ! nvidia-smi -L > /dev/null 2>&1 && [[ -z "${MT_CUDA_EMU:-}" ]]; then
  if "$pretrain" "${common[@]}" --device=cuda --train_iters=4 > "$work/f.out" 2>&1; then
    fail "--device=cuda ran without a GPU"
  fi
  grep -q "device=cuda: no CUDA device" "$work/f.out" || fail "unclear error: $(cat "$work/f.out")"
  [ "$(grep -c . "$work/f.out")" -le 2 ] || fail "more than a line or two: $(cat "$work/f.out")"
fi
echo PASS

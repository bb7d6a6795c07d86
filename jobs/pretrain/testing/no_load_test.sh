#!/bin/bash
# --no_load_optim and --no_load_rng on a resume of pretrain_gpt (TP=1), against an uninterrupted
# run A that saved at iterations 20 and 40, each resume starting from A's iteration-20 checkpoint:
#   a full resume: iterations 21..40 are A's bit for bit; the saved optimizer step is 40, the
#     saved seed A's.
#   --no_load_optim: the weights, schedule and data position load (iteration 21's loss, gradient
#     norm and learning rate are A's bit for bit: they precede the first update), the Adam moments
#     and step do not (iteration 22 on differ from A; the saved optimizer step is 20, not 40).
#   --seed=77 --no_load_rng records 77 in the checkpoint it saves; --seed=77 alone keeps A's seed.
# Each says what it did on stdout.
#   no_load_test.sh SYNTHETIC_CORPUS_BIN PRETRAIN_GPT_BIN
set -uo pipefail
corpus_bin="$1"; pretrain="$2"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_no_load || exit 1

"$corpus_bin" --output_prefix="$work/corpus" --vocab=64 --documents=200 > /dev/null ||
  fail "corpus"
common=(--data_path="$work/corpus" --vocab_size=64 --make_vocab_size_divisible_by=8
        --num_layers=2 --hidden_size=32 --num_attention_heads=4 --seq_length=16
        --micro_batch_size=2 --global_batch_size=4 --lr=3e-3 --min_lr=3e-4
        --lr_warmup_samples=8 --train_iters=40 --log_interval=1 --eval_iters=0 --threads=2
        --seed=1234 --keep_last=5)

timeout 200 "$pretrain" "${common[@]}" --save_interval=20 --save="$work/a" \
  --log_jsonl="$work/a.jsonl" > "$work/a.out" 2>&1 || { cat "$work/a.out"; fail "run A"; }
[[ -d "$work/a/iter_0000020" ]] || fail "run A saved no iteration-20 checkpoint"

resume() {  # resume NAME FLAGS...: from A's iteration 20, saving into NAME at iteration 40
  cp -r "$work/a" "$work/$1" && rm -rf "$work/$1/iter_0000040" &&
    echo 20 > "$work/$1/latest_checkpointed_iteration.txt" || fail "copying A's checkpoint"
  local name="$1"; shift
  timeout 200 "$pretrain" "${common[@]}" --load="$work/$name" --save="$work/$name" "$@" \
    --log_jsonl="$work/$name.jsonl" > "$work/$name.out" 2>&1 ||
    { cat "$work/$name.out"; fail "resume $name"; }
  grep -q "loaded checkpoint from $work/$name at iteration 20" "$work/$name.out" ||
    { head -5 "$work/$name.out"; fail "$name did not resume at 20"; }
}
resume full
resume optim --no_load_optim
resume rng --seed=77 --no_load_rng
resume seed --seed=77
grep -q "fresh optimizer state (--no_load_optim)" "$work/optim.out" || fail "optim: not said"
grep -q "this run's --seed (--no_load_rng)" "$work/rng.out" || fail "rng: not said"
grep -q "(--no_load_" "$work/full.out" "$work/seed.out" && fail "a plain resume says --no_load_*"

python3 - "$work" <<'PY' || fail "numbers"
import json, os, sys
w = sys.argv[1]
log = lambda n: {r["iteration"]: r for r in map(json.loads, open(os.path.join(w, n + ".jsonl")))}
def state(n):
    meta = json.load(open(os.path.join(w, n, "iter_0000040", "mp_rank_00", "metadata.json")))
    return json.loads(meta["trainer_state"])
a, full, optim = log("a"), log("full"), log("optim")
assert sorted(full) == sorted(optim) == list(range(21, 41)), (sorted(full), sorted(optim))
keys = ("lm_loss", "grad_norm", "learning_rate", "consumed_samples")
for i in range(21, 41):
    assert all(full[i][k] == a[i][k] for k in keys), (i, full[i], a[i])
assert all(optim[21][k] == a[21][k] for k in keys), (optim[21], a[21])
# Fresh Adam moments change every update after the first step (its first update is lr * sign of
# the gradient rather than the carried moments' direction).
for i in range(22, 41):
    assert optim[i]["lm_loss"] != a[i]["lm_loss"], (i, optim[i], a[i])
    assert optim[i]["learning_rate"] == a[i]["learning_rate"], (i, optim[i], a[i])
# The weights were loaded: iteration 21's loss is well below a fresh model's (A's iteration 1).
assert optim[21]["lm_loss"] < a[1]["lm_loss"] - 0.05, (optim[21], a[1])
s_a, s_full, s_optim, s_rng, s_seed = (state(n) for n in ("a", "full", "optim", "rng", "seed"))
assert s_full["optimizer_step"] == s_a["optimizer_step"] == 40, (s_full, s_a)
assert s_optim["optimizer_step"] == 20, s_optim
assert s_a["seed"] == s_full["seed"] == s_seed["seed"] == 1234, (s_a, s_full, s_seed)
assert s_rng["seed"] == 77, s_rng
print("--no_load_optim: iteration 21 loss %.6f = A's, iteration 40 %.6f vs A's %.6f; "
      "saved optimizer step %d (full resume %d)" % (optim[21]["lm_loss"], optim[40]["lm_loss"],
      a[40]["lm_loss"], s_optim["optimizer_step"], s_full["optimizer_step"]))
PY
echo PASS

#!/bin/bash
# Weighted dataset blending (--data_path 0.3 A 0.7 B, data/loader/blending.h) end to end:
#   GPT: Megatron's spelling (separate words) and one quoted value train bit-identically; the
#     blend's losses differ from A's alone (it reads B); a job that saves at 6 and resumes logs
#     the uninterrupted run's iterations 7..12 bit for bit; bad blends fail in one line.
#   BERT: a blend of two sentence-level datasets trains and its MLM loss falls.
#   blend_test.sh SYNTHETIC_CORPUS PRETRAIN_GPT PREPROCESS PRETRAIN_BERT
set -uo pipefail
corpus_bin="$1" gpt="$2" preprocess="$3" bert="$4"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_blend || exit 1

"$corpus_bin" --output_prefix="$work/a" --vocab=64 --documents=200 --seed=5 >/dev/null &&
  "$corpus_bin" --output_prefix="$work/b" --vocab=64 --documents=150 --seed=9 >/dev/null ||
  fail "corpora"
model=(--vocab_size=64 --make_vocab_size_divisible_by=8 --num_layers=2 --hidden_size=32
       --num_attention_heads=4 --seq_length=16 --micro_batch_size=2 --global_batch_size=4
       --lr=3e-3 --train_iters=12 --log_interval=1 --eval_iters=0 --threads=1 --seed=7)
run() {  # run NAME ARGS...: one job, its JSONL in $work/NAME.jsonl
  local name="$1"; shift
  timeout 200 "$gpt" "${model[@]}" --log_jsonl="$work/$name.jsonl" "$@" >"$work/$name.out" 2>&1 ||
    { cat "$work/$name.out"; fail "run $name"; }
}
run words --data_path 0.3 "$work/a" 0.7 "$work/b" --save="$work/ckpt" --save_interval=6
run joined --data_path="0.3 $work/a 0.7 $work/b"
run only_a --data_path="$work/a"
cp -r "$work/ckpt" "$work/resumed" && rm -rf "$work/resumed/iter_0000012" &&
  echo 6 > "$work/resumed/latest_checkpointed_iteration.txt" || fail "copying the checkpoint"
run resumed --data_path 0.3 "$work/a" 0.7 "$work/b" --load="$work/resumed"
grep -q "loaded checkpoint from $work/resumed at iteration 6" "$work/resumed.out" ||
  fail "no resume at 6"

python3 - "$work" <<'PY' || fail "numbers"
import json, sys
w = sys.argv[1]
def losses(name):
    return {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(f"{w}/{name}.jsonl"))
            if "lm_loss" in r}
words, joined, only_a, resumed = (losses(n) for n in ("words", "joined", "only_a", "resumed"))
assert sorted(words) == list(range(1, 13)), sorted(words)
assert words == joined, ("spellings differ", words, joined)
same = [i for i in words if words[i] == only_a[i]]
assert len(same) < 12, ("the blend trains on A alone", same)
assert sorted(resumed) == list(range(7, 13)), sorted(resumed)
for i in range(7, 13):
    assert resumed[i] == words[i], ("resume differs at", i, resumed[i], words[i])
print("blend: both spellings equal over 12 iterations; differs from A alone at",
      12 - len(same), "of 12; resume 7..12 bit-exact")
PY

bad() {  # bad EXPECT ARGS...: one line on stderr containing EXPECT, exit code 1
  timeout 60 "$gpt" "${model[@]}" "$@" >"$work/bad.out" 2>"$work/bad.err"
  local rc=$?
  [[ $rc -eq 1 ]] || { cat "$work/bad.err"; fail "exit $rc for: $*"; }
  [[ $(wc -l <"$work/bad.err") -eq 1 ]] && grep -qF -- "$1" "$work/bad.err" ||
    { cat "$work/bad.err"; fail "message for: $*"; }
}
bad "expected one prefix or pairs of weight and prefix, got 3 words" \
  --data_path="0.3 $work/a 0.7"
bad "weight 'x' (before '$work/a') must be a number > 0" --data_path="x $work/a 1 $work/b"
bad "$work/missing.idx does not exist" --data_path 0.5 "$work/a" 0.5 "$work/missing"
bad "unexpected argument 'stray'" --data_path="$work/a" stray

# BERT: two sentence-level datasets (different sentences), blended 1:3.
python3 - "$work" <<'PY'
import random, sys
for name, seed, things in (("x", 3, ["the ball", "a small house", "the river"]),
                           ("y", 4, ["a green tree", "the red car", "the moon"])):
    random.seed(seed)
    with open(f"{sys.argv[1]}/{name}.txt", "w") as f:
        for d in range(120):
            f.write(" ".join("%s %s %s." % (random.choice(["The cat", "A dog", "My friend"]),
                                            random.choice(["sees", "likes", "finds"]),
                                            random.choice(things))
                             for _ in range(random.randint(3, 6))) + "\n\n")
PY
for n in x y; do
  "$preprocess" --input="$work/$n.txt" --input_format=text --tokenizer=bert --split_sentences \
    --output_prefix="$work/bert_$n" --workers=1 >"$work/pre.out" 2>&1 ||
    { cat "$work/pre.out"; fail "preprocess $n"; }
done
timeout 300 "$bert" --data_path 1 "$work/bert_x" 3 "$work/bert_y" --num_layers=2 --hidden_size=32 \
  --num_attention_heads=4 --seq_length=32 --micro_batch_size=4 --global_batch_size=8 --lr=1e-2 \
  --train_iters=20 --log_interval=1 --eval_iters=0 --threads=1 --log_jsonl="$work/bert.jsonl" \
  >"$work/bert.out" 2>&1 || { cat "$work/bert.out"; fail "bert blend"; }
python3 - "$work/bert.jsonl" <<'PY' || fail "bert numbers"
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
mlm = [x["lm_loss"] for x in r if "lm_loss" in x]
assert len(mlm) == 20, len(mlm)
first, last = sum(mlm[:3]) / 3, sum(mlm[-3:]) / 3
assert last < 0.8 * first, (first, last)
print("bert blend: lm (MLM) loss %.3f -> %.3f over 20 iterations" % (first, last))
PY
echo "PASS"

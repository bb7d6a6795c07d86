#!/bin/bash
# //jobs/eval:race end to end on a tiny random BERT "pretraining" checkpoint (MLM + SOP heads) and a
# RACE tree written here in the official format, where the right option is always a colour word
# and the wrong ones animals (learnable from the option's own tokens, so a 2-layer model gets it in
# a few dozen steps; the position of the answer is uniform):
#   - fine-tuning (TP=1) lifts training accuracy from about chance (25%) in epoch 1 to >= 75% in
#     epoch 3, and dev and test to >= 75%, while the untrained model (--lr=0) scores near chance;
#     one JSON line per epoch, the last equal to the results (last stdout line, --results_json);
#   - the same run at TP=2 (mpirun): per-step losses within 1e-6 (relative) for the first 10 steps
#     and 1e-4 throughout (float32 rounding, amplified where the loss falls steeply), the same
#     per-step and final correct counts;
#   - --eval_only on the saved checkpoint reproduces the last epoch's scores exactly at TP=1, and at
#     TP=2 gives the same predictions (losses within 1e-6), also for the untrained model;
#   - the fixture tree (eval/testdata/RACE) fine-tunes with odd batch shapes;
#   - every input error is one line on stderr and exit 1.
#   race_harness_test.sh TEST_CHECKPOINT RACE FIXTURE_FILE (any file of eval/testdata/RACE/*/*/)
set -uo pipefail
make_ckpt="$1"; race="$2"; fixture="$(dirname "$(dirname "$(dirname "$3")")")"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_race || exit 1
tiny=(--num_layers=2 --hidden_size=32 --num_attention_heads=4 --max_position_embeddings=64)
bert=(--family=bert --vocab_size=30522 --num_token_types=2 "${tiny[@]}")

python3 - "$work/RACE" <<'PY' || fail "synthetic RACE"
import json, os, random, sys
rng = random.Random(1)
right = "red blue green yellow purple orange pink brown black white".split()
wrong = "dog cat horse sheep goat mouse lion tiger bear wolf fox deer".split()
filler = ("the a man woman went to market river house school garden morning evening saw took "
          "gave found").split()
for split, files in (("train", 24), ("dev", 6), ("test", 6)):
    for level in ("middle", "high"):
        d = os.path.join(sys.argv[1], split, level)
        os.makedirs(d)
        for f in range(files):
            article = " ".join(rng.choice(filler) for _ in range(rng.randint(20, 40))) + " ."
            questions, options, answers = [], [], []
            for _ in range(rng.randint(1, 3)):
                questions.append(rng.choice(["Which word fits the story?", "It was about _ ."]))
                o = rng.sample(wrong, 3)
                k = rng.randrange(4)
                o.insert(k, rng.choice(right))
                options.append(o)
                answers.append("ABCD"[k])
            with open(os.path.join(d, "%d.txt" % f), "w") as out:
                json.dump({"answers": answers, "options": options, "questions": questions,
                           "article": article, "id": "%s%d.txt" % (level, f)}, out)
PY
"$make_ckpt" --save="$work/bert" "${bert[@]}" --zero=false --seed=3 --model_name=tiny-bert \
  > /dev/null || fail "checkpoint"

run() {  # run NAME NP FLAGS...: stdout + stderr in NAME.out, results in NAME.json
  local name="$1" np="$2"; shift 2
  local cmd=("$race" "$@" --threads=$((2 / np)) --results_json="$work/$name.json"
             --per_example_jsonl="$work/$name.examples.jsonl")
  if [[ $np -eq 1 ]]; then "${cmd[@]}" > "$work/$name.out" 2>&1; else timeout 300 mpirun \
    --oversubscribe --bind-to none -np "$np" --mca btl self,vader "${cmd[@]}" \
    > "$work/$name.out" 2>&1; fi || { cat "$work/$name.out"; fail "$name"; }
  [[ "$(tail -1 "$work/$name.out")" == "$(cat "$work/$name.json")" ]] ||
    fail "$name: the last line is not the results"
}
train=(--load="$work/bert" --data="$work/RACE" --seq_length=64 --epochs=3 --global_batch_size=8
       --micro_batch_size=4 --lr=1e-2 --log_interval=5)
run tp1 1 "${train[@]}" --save="$work/ft1" --log_jsonl="$work/tp1.steps.jsonl" \
  --progress_interval=0
run tp2 2 "${train[@]}" --save="$work/ft2" --log_jsonl="$work/tp2.steps.jsonl"
run untrained 1 "${train[@]}" --epochs=1 --lr=0 --save="$work/ft0"
run eval1 1 --eval_only --load="$work/ft1" --data="$work/RACE" --seq_length=64
run eval2 2 --eval_only --load="$work/ft1" --data="$work/RACE" --seq_length=64
run eval0_tp1 1 --eval_only --load="$work/ft0" --data="$work/RACE" --seq_length=64
run eval0_tp2 2 --eval_only --load="$work/ft0" --data="$work/RACE" --seq_length=64
grep -q "initialised from --seed: multiple_choice_head" "$work/tp1.out" || fail "no new head"
grep -Eq "^race: step 5/[0-9]+ \(epoch 1\) \| choice loss" "$work/tp1.out" || fail "no step log"
grep -q "ETA" "$work/tp1.out" || fail "no progress line"
grep -q "run at TP 2" "$work/tp2.out" || fail "not TP 2"

python3 - "$work" <<'PY' || fail "RACE numbers"
import json, os, sys
w = sys.argv[1]
load = lambda n: json.load(open(os.path.join(w, n + ".json")))
jsonl = lambda n: [json.loads(l) for l in open(os.path.join(w, n))]
epochs = lambda n: [json.loads(l) for l in open(os.path.join(w, n + ".out")) if l.startswith('{"epoch"')]
close = lambda a, b, tol: abs(a - b) <= tol * max(abs(a), abs(b))
groups = ["dev/middle", "dev/high", "test/middle", "test/high"]
# The questions of the tree written above.
count = lambda d: sum(len(json.load(open(os.path.join(d, f)))["questions"]) for f in os.listdir(d))
n = {g: count(os.path.join(w, "RACE", g)) for g in groups}
n_train = count(os.path.join(w, "RACE/train/middle")) + count(os.path.join(w, "RACE/train/high"))
steps = 3 * (n_train // 8)

tp1, tp2, untrained = load("tp1"), load("tp2"), load("untrained")
assert tp1["task"] == "race" and tp1["model"] == "tiny-bert" and tp1["seq_length"] == 64, tp1
assert tp1["epochs"] == 3 and tp1["steps"] == steps, tp1
assert all(tp1["splits"][g]["questions"] == n[g] for g in groups), (tp1, n)
for g in groups + ["dev", "test"]:
    s = tp1["splits"][g]
    assert s["accuracy"] == s["correct"] / s["questions"], s
    assert s["accuracy"] >= 0.75, (g, s)
for split in ("dev", "test"):
    parts = [tp1["splits"][g] for g in groups if g.startswith(split + "/")]
    assert tp1["splits"][split]["questions"] == sum(p["questions"] for p in parts)
    assert tp1["splits"][split]["correct"] == sum(p["correct"] for p in parts)
assert tp1["overall"]["questions"] == sum(n.values()), tp1["overall"]
assert tp1["overall"]["correct"] == sum(tp1["splits"][g]["correct"] for g in groups)

# Training accuracy: about chance in epoch 1, well above it in epoch 3.
lines = epochs("tp1")
assert [l["epoch"] for l in lines] == [1, 2, 3] and lines[-1]["steps"] == steps, lines
assert lines[0]["train"]["accuracy"] <= 0.45, lines[0]["train"]
assert lines[-1]["train"]["accuracy"] >= 0.75, lines[-1]["train"]
assert lines[-1]["train"] == tp1["train"]
assert {k: lines[-1][k] for k in ("splits", "overall")} == \
       {k: tp1[k] for k in ("splits", "overall")}
# The untrained model (lr 0: the pretrained encoder and a random head) is near chance.
assert untrained["overall"]["accuracy"] <= 0.5, untrained["overall"]
assert abs(untrained["overall"]["loss"] - 1.3862943611) < 1e-2, untrained["overall"]

# Per-example lines of the last evaluation: every question once, counts as in the results.
ex = jsonl("tp1.examples.jsonl")
assert len(ex) == sum(n.values()), len(ex)
for g in groups:
    split, level = g.split("/")
    mine = [e for e in ex if e["split"] == split and e["level"] == level]
    assert len(mine) == n[g] and sum(e["correct"] for e in mine) == tp1["splits"][g]["correct"]
    assert all(e["correct"] == (e["answer"] == e["predicted"]) for e in mine)

# TP=2 follows TP=1 step by step.
s1, s2 = jsonl("tp1.steps.jsonl"), jsonl("tp2.steps.jsonl")
assert [s["step"] for s in s1] == list(range(1, steps + 1)) == [s["step"] for s in s2]
for a, b in zip(s1, s2):
    assert close(a["loss"], b["loss"], 1e-6 if a["step"] <= 10 else 1e-4), (a, b)
    assert a["correct"] == b["correct"] and a["learning_rate"] == b["learning_rate"], (a, b)
    assert close(a["grad_norm"], b["grad_norm"], 1e-3), (a, b)
for g in groups + ["overall"]:
    x, y = (tp1["splits"][g], tp2["splits"][g]) if g != "overall" else (tp1[g], tp2[g])
    assert x["correct"] == y["correct"] and close(x["loss"], y["loss"], 1e-4), (g, x, y)
# The learning rate: linear warmup over 6% of the questions, then linear decay to 0.
total = steps * 8
warmup = round(0.06 * total)
assert s1[0]["learning_rate"] == 0 and close(s1[1]["learning_rate"], 1e-2 * 8 / warmup, 1e-9)
assert close(s1[-1]["learning_rate"], 1e-2 * 8 / (total - warmup), 1e-9), s1[-1]

# --eval_only on the saved checkpoint: the last epoch's scores exactly (TP 1), and TP 2 agrees.
e1, e2 = load("eval1"), load("eval2")
assert e1["splits"] == tp1["splits"] and e1["overall"] == tp1["overall"], (e1, tp1)
assert e1["epochs"] == 0 and e1["steps"] == 0 and "train" not in e1, e1
for a, b in (("eval1", "eval2"), ("eval0_tp1", "eval0_tp2")):
    x, y = load(a), load(b)
    for g in groups:
        assert x["splits"][g]["correct"] == y["splits"][g]["correct"], (a, b, g)
        assert close(x["splits"][g]["loss"], y["splits"][g]["loss"], 1e-6), (a, b, g)
    px, py = jsonl(a + ".examples.jsonl"), jsonl(b + ".examples.jsonl")
    assert px == py, (a, b)
assert 0 < load("eval0_tp1")["overall"]["correct"] < sum(n.values())  # Not degenerate.
print("trained: train %.3f -> %.3f, dev %.3f, test %.3f; untrained overall %.3f" % (
    lines[0]["train"]["accuracy"], lines[-1]["train"]["accuracy"],
    tp1["splits"]["dev"]["accuracy"], tp1["splits"]["test"]["accuracy"],
    untrained["overall"]["accuracy"]))
PY

# The masked readout (no new head: the checkpoint's MLM head scores the option at the blank) on the
# same tree with every question a cloze: learns the colours in 3 epochs, TP=2 follows TP=1, and
# --eval_only scores the pretraining checkpoint itself.
python3 - "$work/RACE" "$work/cloze/RACE" <<'PY' || fail "cloze tree"
import json, os, shutil, sys
shutil.copytree(sys.argv[1], sys.argv[2])
for root, _, files in os.walk(sys.argv[2]):
    for f in files:
        j = json.load(open(os.path.join(root, f)))
        j["questions"] = ["It was about _ ." for _ in j["questions"]]
        json.dump(j, open(os.path.join(root, f), "w"))
PY
masked=(--load="$work/bert" --data="$work/cloze/RACE" --readout=masked --seq_length=64
        --global_batch_size=8 --micro_batch_size=4 --lr=1e-2)
run masked1 1 "${masked[@]}" --epochs=3 --log_jsonl="$work/masked1.steps.jsonl"
run masked2 2 "${masked[@]}" --epochs=3 --log_jsonl="$work/masked2.steps.jsonl"
run masked0 1 "${masked[@]}" --eval_only
grep -q "initialised from --seed" "$work/masked1.out" && fail "masked readout: a new parameter"
python3 - "$work" <<'PY' || fail "masked readout numbers"
import json, os, sys
w = sys.argv[1]
load = lambda n: json.load(open(os.path.join(w, n + ".json")))
jsonl = lambda n: [json.loads(l) for l in open(os.path.join(w, n))]
close = lambda a, b, tol: abs(a - b) <= tol * max(abs(a), abs(b))
m1, m2, m0 = load("masked1"), load("masked2"), load("masked0")
assert m1["readout"] == "masked" and m1["epochs"] == 3, m1
for split in ("dev", "test"):
    assert m1["splits"][split]["accuracy"] >= 0.75, m1["splits"][split]
assert m0["overall"]["accuracy"] <= 0.5, m0["overall"]
s1, s2 = jsonl("masked1.steps.jsonl"), jsonl("masked2.steps.jsonl")
assert len(s1) == len(s2) > 10, (len(s1), len(s2))
for a, b in zip(s1, s2):
    assert close(a["loss"], b["loss"], 1e-6 if a["step"] <= 10 else 1e-4), (a, b)
    assert a["correct"] == b["correct"], (a, b)
assert m1["overall"]["correct"] == m2["overall"]["correct"], (m1["overall"], m2["overall"])
print("masked readout: untrained %.3f, trained dev %.3f, test %.3f" % (
    m0["overall"]["accuracy"], m1["splits"]["dev"]["accuracy"], m1["splits"]["test"]["accuracy"]))
PY

# The fixture tree: one question per micro-batch, 2 per step (its 6 training questions: 3 steps).
run fixture 1 --load="$work/bert" --data="$fixture" --seq_length=48 --epochs=1 \
  --global_batch_size=2 --micro_batch_size=1 --lr=1e-3
python3 - "$work/fixture.json" <<'PY' || fail "fixture numbers"
import json, sys
r = json.load(open(sys.argv[1]))
assert r["steps"] == 3 and r["train"]["questions"] == 6, r
assert [r["splits"][g]["questions"] for g in ("dev/middle", "dev/high", "test/middle",
                                              "test/high")] == [5, 3, 2, 2], r
PY

# Input errors: exit 1 with exactly one line on stderr, containing the expected text.
expect_error() {  # expect_error TEXT FLAGS...
  local text="$1"; shift
  "$race" "$@" > "$work/err.out" 2> "$work/err.txt" && fail "accepted: $*"
  [[ $(wc -l < "$work/err.txt") -eq 1 ]] || { cat "$work/err.txt"; fail "not one line: $*"; }
  grep -qF -- "$text" "$work/err.txt" || { cat "$work/err.txt"; fail "no '$text': $*"; }
}
"$make_ckpt" --save="$work/gpt" "${tiny[@]}" > /dev/null || fail "GPT checkpoint"
"$make_ckpt" --save="$work/v1000" --family=bert --vocab_size=1000 --num_token_types=2 \
  "${tiny[@]}" > /dev/null || fail "checkpoint"
"$make_ckpt" --save="$work/types1" --family=bert --vocab_size=30522 --num_token_types=1 \
  "${tiny[@]}" > /dev/null || fail "checkpoint"
copy() { mkdir -p "$work/$1" && cp -r "$work/RACE" "$work/$1/"; }  # copy NAME: NAME/RACE
copy no_train && rm -rf "$work/no_train/RACE/train"
copy no_dev_high && rm -rf "$work/no_dev_high/RACE/dev/high"
copy bad && echo '{"article": "x", "questions": [' > "$work/bad/RACE/dev/high/3.txt"
copy nokey &&
  echo '{"article": "x", "questions": [], "options": []}' > "$work/nokey/RACE/test/middle/0.txt"
head -1000 "${MT_ASSETS_DIR:-/opt/megatron-cpp}/bert/vocab.txt" > "$work/vocab1000.txt" ||
  fail "the installed vocab.txt"
ok=(--data="$work/RACE" --seq_length=64)
expect_error "race: error: race fine-tunes BERT-family models; checkpoint $work/gpt holds a gpt2-family" \
  --load="$work/gpt" "${ok[@]}"
expect_error "vocabulary of 1000 tokens but the bert tokenizer has 30522" --load="$work/v1000" \
  "${ok[@]}"
expect_error "has a vocabulary of 30522 tokens but the bert tokenizer has 1000" \
  --load="$work/bert" "${ok[@]}" --vocab_file="$work/vocab1000.txt"
expect_error "num_token_types = 1" --load="$work/types1" "${ok[@]}"
expect_error "cannot open directory $work/none/dev" --load="$work/bert" --data="$work/none"
expect_error "cannot open directory $work/no_train/RACE/train" --load="$work/bert" \
  --data="$work/no_train/RACE"
expect_error "RACE dev/high: cannot open directory $work/no_dev_high/RACE/dev/high" \
  --load="$work/bert" --data="$work/no_dev_high/RACE" --eval_only --seq_length=64
expect_error "$work/bad/RACE/dev/high/3.txt: not valid JSON" --load="$work/ft1" \
  --data="$work/bad/RACE" --eval_only
expect_error "$work/nokey/RACE/test/middle/0.txt: no key 'answers'" --load="$work/ft1" \
  --data="$work/nokey/RACE" --eval_only
expect_error "lacks multiple_choice_head.weight, multiple_choice_head.bias (--eval_only" \
  --load="$work/bert" "${ok[@]}" --eval_only
expect_error "--save=$work/ft1 already holds a checkpoint (iteration " --load="$work/bert" \
  "${ok[@]}" --save="$work/ft1"
expect_error "--save with --eval_only" --load="$work/ft1" "${ok[@]}" --eval_only --save="$work/x"
expect_error "--seq_length=65 must be in [2, 64]" --load="$work/bert" --data="$work/RACE" \
  --seq_length=65
expect_error "--global_batch_size=6 must be a positive multiple of --micro_batch_size=4" \
  --load="$work/bert" "${ok[@]}" --global_batch_size=6
expect_error "--global_batch_size=4000 exceeds the " --load="$work/bert" "${ok[@]}" \
  --global_batch_size=4000
expect_error "has no blank \"_\" for the masked readout (cloze questions only)" --load="$work/bert" \
  "${ok[@]}" --readout=masked
expect_error "unknown RACE readout 'cls'; known: pooled, masked" --load="$work/bert" "${ok[@]}" \
  --readout=cls
expect_error "--merge_file is GPT-2's" --load="$work/bert" "${ok[@]}" --merge_file=x
expect_error "--data is required" --load="$work/bert"
expect_error "--load is required" --data="$work/RACE"
expect_error "$work/none" --load="$work/none" "${ok[@]}"
# Three processes cannot split 4 heads: one line, before any collective.
timeout 60 mpirun --oversubscribe --bind-to none -np 3 --mca btl self,vader \
  "$race" --load="$work/bert" "${ok[@]}" > "$work/np3.out" 2> "$work/np3.err" &&
  fail "3 ranks accepted for 4 heads"
[[ $(grep -c "race: error:" "$work/np3.err") -eq 1 ]] || { cat "$work/np3.err"; fail "np3"; }
grep -q "cannot run on 3 processes" "$work/np3.err" || { cat "$work/np3.err"; fail "np3 text"; }
echo PASS

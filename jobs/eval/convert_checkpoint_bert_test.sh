#!/bin/bash
# The README's "Fine-tuning a published BERT on RACE" flow end to end with the real binaries: a
# tiny BertForPreTraining in Hugging Face's layout with the real vocabulary (30,522 tokens) and the
# installed bert-base-uncased vocab.txt, converted by convert_checkpoint --from=hf, fine-tuned by
# race on the fixture tree with the checkpoint's own vocab.txt (a new multiple-choice head from
# --seed, the converted weights for the rest), whose saved checkpoint --eval_only scores exactly as
# the run reported; the converted checkpoint exported back with --to=hf byte for byte.
#   convert_checkpoint_bert_test.sh HF_TEST_MODEL CONVERT RACE WEIGHTS_MATCH_PY RACE_FIXTURE_FILE
set -uo pipefail
hf_model="$1"; convert="$2"; race="$3"; weights_match="$4"
fixture="$(dirname "$(dirname "$(dirname "$5")")")"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_convert_bert || exit 1
vocab="${MT_ASSETS_DIR:-/opt/megatron-cpp}/bert/vocab.txt"

hf="$work/bert"
"$hf_model" --family=bert --save="$hf" --vocab=30522 --hidden=16 --layers=2 --heads=4 \
  --positions=64 > /dev/null || fail "writing the Hugging Face BERT"
[[ $(wc -l < "$vocab") -eq 30522 ]] || fail "$vocab: not the 30,522-line vocab.txt (tools/setup.sh)"
cp "$vocab" "$hf/vocab.txt" || fail "copying $vocab"

"$convert" --from=hf --input="$hf" --save="$work/ckpt" > "$work/import.out" 2>&1 ||
  { cat "$work/import.out"; fail "--from=hf"; }
grep -q "(bert, f32) .*padded vocabulary 30592, iteration 0" "$work/import.out" ||
  { cat "$work/import.out"; fail "import summary"; }
cmp -s "$hf/vocab.txt" "$work/ckpt/tokenizer/vocab.txt" || fail "tokenizer/vocab.txt not copied"

# Fine-tune one epoch (6 training questions, 2 per step: 3 steps), then score the saved checkpoint.
"$race" --load="$work/ckpt" --data="$fixture" --vocab_file="$work/ckpt/tokenizer/vocab.txt" \
  --seq_length=64 --epochs=1 --global_batch_size=2 --micro_batch_size=1 --lr=1e-3 \
  --save="$work/ft" --results_json="$work/ft.json" > "$work/ft.out" 2>&1 ||
  { cat "$work/ft.out"; fail "race fine-tuning"; }
grep -q "initialised from --seed: multiple_choice_head" "$work/ft.out" ||
  { cat "$work/ft.out"; fail "no new head"; }
[[ "$(tail -1 "$work/ft.out")" == "$(cat "$work/ft.json")" ]] ||
  fail "race: last line != results JSON"
"$race" --eval_only --load="$work/ft" --data="$fixture" \
  --vocab_file="$work/ckpt/tokenizer/vocab.txt" --seq_length=64 \
  --results_json="$work/eval.json" > "$work/eval.out" 2>&1 || { cat "$work/eval.out"; fail "eval"; }
python3 - "$work/ft.json" "$work/eval.json" <<'PY' || fail "RACE numbers"
import json, sys
ft, ev = (json.load(open(p)) for p in sys.argv[1:3])
groups = ("dev/middle", "dev/high", "test/middle", "test/high")
assert ft["task"] == "race" and ft["steps"] == 3 and ft["train"]["questions"] == 6, ft
assert [ft["splits"][g]["questions"] for g in groups] == [5, 3, 2, 2], ft
for g in groups + ("dev", "test"):
    a, b = ft["splits"][g], ev["splits"][g]
    assert a["accuracy"] == a["correct"] / a["questions"], (g, a)
    assert (a["questions"], a["correct"]) == (b["questions"], b["correct"]), (g, a, b)
print("race dev %.3f test %.3f (--eval_only: the same)" %
      (ft["splits"]["dev"]["accuracy"], ft["splits"]["test"]["accuracy"]))
PY

# --to=hf: the source's tensors byte for byte (position_ids is a buffer, not a weight).
"$convert" --to=hf --input="$work/ckpt" --save="$work/back" > "$work/export.out" 2>&1 ||
  { cat "$work/export.out"; fail "--to=hf"; }
cmp -s "$hf/vocab.txt" "$work/back/vocab.txt" || fail "exported vocab.txt"
python3 "$weights_match" "$hf/model.safetensors" "$work/back/model.safetensors" bert. \
  position_ids cls.predictions.decoder.weight,cls.predictions.decoder.bias || fail "BERT back"
echo PASS

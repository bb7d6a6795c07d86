#!/bin/bash
# Pretraining continues from a converted Hugging Face GPT-2 (convert_checkpoint --from=hf): the
# driver loads its weights only, as --finetune (it says so), starts at iteration 1 and trains; the
# losses equal those of an explicit --finetune of the same checkpoint bit for bit, and the first
# differs from a fresh model's (the weights were loaded, not initialised).
#   hf_pretrain_test.sh SYNTHETIC_CORPUS_BIN PRETRAIN_GPT_BIN HF_TEST_MODEL_BIN CONVERT_BIN
set -uo pipefail
corpus_bin="$1"; pretrain="$2"; hf_model="$3"; convert="$4"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_hf_pretrain || exit 1

"$corpus_bin" --output_prefix="$work/corpus" --vocab=64 --documents=200 > /dev/null ||
  fail "corpus"
"$hf_model" --family=gpt2 --save="$work/hf" --vocab=64 --hidden=32 --layers=2 --heads=4 \
  --positions=64 > /dev/null || fail "writing the Hugging Face model"
"$convert" --from=hf --input="$work/hf" --save="$work/ckpt" > "$work/convert.out" 2>&1 ||
  { cat "$work/convert.out"; fail "convert_checkpoint"; }
common=(--data_path="$work/corpus" --vocab_size=64 --make_vocab_size_divisible_by=8
        --num_layers=2 --hidden_size=32 --num_attention_heads=4 --max_position_embeddings=64
        --seq_length=16 --micro_batch_size=2 --global_batch_size=4 --lr=1e-3 --min_lr=1e-4
        --lr_warmup_samples=8 --train_iters=10 --log_interval=1 --eval_iters=0 --threads=2)

run() {  # run NAME FLAGS...
  local name="$1"; shift
  timeout 200 "$pretrain" "${common[@]}" "$@" --log_jsonl="$work/$name.jsonl" \
    > "$work/$name.out" 2>&1 || { cat "$work/$name.out"; fail "run $name"; }
}
losses() { python3 -c 'import json,sys; print(" ".join(repr(json.loads(l)["lm_loss"]) for l in open(sys.argv[1])))' "$1"; }

run converted --load="$work/ckpt"
grep -q "a converted checkpoint without optimizer state, as --finetune" "$work/converted.out" ||
  { head -20 "$work/converted.out"; fail "the driver did not say it loads the converted weights only"; }
first_iter=$(head -1 "$work/converted.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["iteration"])')
[[ "$first_iter" == 1 ]] || fail "training started at iteration $first_iter, not 1"
[[ $(wc -l < "$work/converted.jsonl") -eq 10 ]] || fail "not 10 logged iterations"

run finetune --load="$work/ckpt" --finetune
[[ "$(losses "$work/converted.jsonl")" == "$(losses "$work/finetune.jsonl")" ]] ||
  fail "converted load and --finetune differ: $(losses "$work/converted.jsonl") vs $(losses "$work/finetune.jsonl")"

run fresh
a=$(losses "$work/converted.jsonl" | cut -d' ' -f1); b=$(losses "$work/fresh.jsonl" | cut -d' ' -f1)
[[ "$a" != "$b" ]] || fail "the converted run's first loss equals a fresh model's ($a): weights not loaded"
echo "converted GPT-2: losses $(losses "$work/converted.jsonl")"
echo PASS

#!/bin/bash
# A model variant through the standard drivers linked in its package (//models:variant.bzl), with no
# file outside the package naming it: describe knows the model, pretrain_gpt --model=NAME trains
# it at TP=2 (the loss falls), the checkpoint records its architecture, and a second run resumes
# from that checkpoint.
#   driver_test.sh SYNTHETIC_CORPUS_BIN DESCRIBE_BIN PRETRAIN_GPT_BIN MODEL ARCHITECTURE
set -uo pipefail
corpus_bin="$1"; describe="$2"; pretrain="$3"; model="$4"; architecture="$5"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_variant || exit 1

"$describe" --model="$model" > "$work/describe.out" || fail "describe: $(cat "$work/describe.out")"
grep -q "^architecture: $architecture " "$work/describe.out" || fail "describe: $(cat "$work/describe.out")"

"$corpus_bin" --output_prefix="$work/corpus" --vocab=64 --documents=200 || fail "corpus"
common=(--model="$model" --data_path="$work/corpus" --vocab_size=64 --make_vocab_size_divisible_by=8
        --num_layers=2 --hidden_size=64 --num_attention_heads=4 --ffn_hidden_size=96
        --max_position_embeddings=32 --seq_length=32 --micro_batch_size=2 --global_batch_size=4
        --lr=3e-3 --min_lr=3e-4 --lr_warmup_samples=8 --tensor_model_parallel_size=2
        --log_interval=1 --eval_iters=2 --threads=1 --save="$work/ckpt")
mpi=(mpirun --oversubscribe --bind-to none -np 2 --mca btl self,vader)

timeout 240 "${mpi[@]}" "$pretrain" "${common[@]}" --train_iters=40 --log_jsonl="$work/a.jsonl" \
  > "$work/a.out" 2>&1 || { cat "$work/a.out"; fail "training"; }
first=$(head -1 "$work/a.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["lm_loss"])')
last=$(tail -1 "$work/a.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["lm_loss"])')
echo "$model at TP=2: lm loss $first -> $last"
python3 -c "import sys; sys.exit(0 if $last < $first - 1.0 else 1)" || fail "did not learn: $first -> $last"
grep -Eq "\"architecture\": *\"$architecture\"" "$work"/ckpt/iter_0000040/mp_rank_00/metadata.json ||
  fail "the checkpoint does not record the architecture"

timeout 240 "${mpi[@]}" "$pretrain" "${common[@]}" --train_iters=44 --load="$work/ckpt" \
  > "$work/b.out" 2>&1 || { cat "$work/b.out"; fail "resuming"; }
grep -q "loaded checkpoint from .* at iteration 40" "$work/b.out" || fail "did not resume: $(head -5 "$work/b.out")"
grep -q "iteration       44/      44" "$work/b.out" || fail "did not train on: $(tail -3 "$work/b.out")"
echo "PASS"

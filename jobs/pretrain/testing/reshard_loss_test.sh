#!/bin/bash
# Resharding a TP=2 training checkpoint to TP=1 and TP=4 gives the same loss on the same batch:
# train 3 iterations at TP=2, reshard, then evaluate the validation loss (fixed samples) from each
# checkpoint with no further training.
#   reshard_loss_test.sh SYNTHETIC_CORPUS_BIN PRETRAIN_GPT_BIN RESHARD_BIN
set -uo pipefail
corpus_bin="$1"; pretrain="$2"; reshard="$3"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_reshard || exit 1

"$corpus_bin" --output_prefix="$work/corpus" --vocab=61 --documents=300 || fail "corpus"
# vocab 61 pads to 72 at TP 1 (multiple of 24), 96 at TP 2 (48) and 96 at TP 4 (96): resharding
# must re-pad the vocabulary.
common=(--data_path="$work/corpus" --vocab_size=61 --make_vocab_size_divisible_by=24
        --num_layers=2 --hidden_size=32 --num_attention_heads=4 --seq_length=16
        --micro_batch_size=2 --global_batch_size=4 --lr=3e-3 --log_interval=1 --eval_iters=3
        --threads=1 --train_iters=3)
mpi 2 "$pretrain" "${common[@]}" --tensor_model_parallel_size=2 --save="$work/tp2" \
  > "$work/train.out" 2>&1 || { cat "$work/train.out"; fail "training"; }
"$reshard" --load="$work/tp2" --save="$work/tp1" --tensor_model_parallel_size=1 || fail "reshard to 1"
"$reshard" --load="$work/tp2" --save="$work/tp4" --tensor_model_parallel_size=4 || fail "reshard to 4"
# Loading the TP=2 checkpoint at TP=4 without resharding is refused with a clear message.
mpi 4 "$pretrain" "${common[@]}" --tensor_model_parallel_size=4 --load="$work/tp2" \
  > "$work/refused.out" 2>&1 && fail "TP=2 checkpoint accepted at TP=4"
grep -q "reshard_checkpoint" "$work/refused.out" || fail "unclear refusal: $(tail -3 "$work/refused.out")"

loss() {  # np tp dir -> the final validation loss
  mpi "$1" "$pretrain" "${common[@]}" --tensor_model_parallel_size="$2" --load="$3" \
    > "$work/eval_$2.out" 2>&1 || { cat "$work/eval_$2.out" >&2; return 1; }
  grep -q "loaded checkpoint" "$work/eval_$2.out" || return 1
  sed -n 's/.*validation at the end | lm loss: \([0-9.E+-]*\).*/\1/p' "$work/eval_$2.out"
}
l2=$(loss 2 2 "$work/tp2") || fail "eval at TP 2"
l1=$(loss 1 1 "$work/tp1") || fail "eval at TP 1"
l4=$(loss 4 4 "$work/tp4") || fail "eval at TP 4"
echo "validation loss from the same checkpoint: TP=1 $l1, TP=2 $l2, TP=4 $l4"
python3 - "$l1" "$l2" "$l4" <<'PY' || fail "losses differ"
import sys
l1, l2, l4 = map(float, sys.argv[1:])
assert abs(l1 - l2) <= 1e-5 * l2 and abs(l4 - l2) <= 1e-5 * l2, (l1, l2, l4)
PY
echo PASS

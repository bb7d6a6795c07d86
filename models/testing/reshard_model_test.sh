#!/bin/bash
# A model through //checkpoint:reshard_checkpoint at TP 1 -> 2 -> 4 -> 1 -> (TP 2, PP 2) -> 1: trained 2
# iterations at TP=1 and saved, resharded step by step, and each checkpoint resumed by the
# pretraining driver at its layout gives the validation loss (fixed samples) the TP=1 run reported
# before the reshard. The vocabulary is padded differently at each degree, so every
# vocabulary-sized tensor must be re-padded (what nn::ParamSpec::vocab_padded declares and
# models::CreateModel enforces); the pipeline stages (mp_rank_TT_PPP) hold the layers the model
# places on them and the tied word embedding twice. Then the TP=1 checkpoint is resumed directly
# at PP=2 (each stage reading its tensors from the one-stage checkpoint) and trained on, its
# checkpoint (two stages) resumed at PP=1: the same loss as the run that never changed layout.
#   reshard_model_test.sh gpt  SYNTHETIC_CORPUS_BIN PRETRAIN_GPT_BIN  RESHARD_BIN [MODEL FLAGS...]
#   reshard_model_test.sh bert PREPROCESS_BIN       PRETRAIN_BERT_BIN RESHARD_BIN [MODEL FLAGS...]
set -uo pipefail
family="$1"; data_tool="$2"; pretrain="$3"; reshard="$4"; shift 4
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_reshard_model || exit 1

common=(--num_layers=2 --hidden_size=32 --num_attention_heads=4 --ffn_hidden_size=64
        --max_position_embeddings=32 --seq_length=16 --micro_batch_size=2 --global_batch_size=4
        --lr=3e-3 --log_interval=1 --eval_iters=2 --threads=1 --train_iters=2 "$@")
if [[ "$family" == gpt ]]; then
  "$data_tool" --output_prefix="$work/corpus" --vocab=61 --documents=100 || fail "corpus"
  # Vocabulary 61 pads to 72 at TP 1 (a multiple of 24) and 96 at TP 2 and 4.
  common+=(--data_path="$work/corpus" --vocab_size=61 --make_vocab_size_divisible_by=24)
else
  sentences "$work/corpus.txt" 60 7 || fail "corpus"
  "$data_tool" --input="$work/corpus.txt" --input_format=text --tokenizer=bert \
    --split_sentences --output_prefix="$work/bert" --workers=1 > "$work/pre.out" 2>&1 ||
    { cat "$work/pre.out"; fail "BERT preprocessing"; }
  # BERT's 30,522 tokens pad to 30,592 at TP 1 (multiple of 128) and 30,720 at TP 2 and 4.
  common+=(--data_path="$work/bert" --mask_prob=0.15 --short_seq_prob=0.1)
fi

# The final validation loss a run printed.
final_loss() { sed -n 's/.*validation at the end | lm loss: \([0-9.E+-]*\).*/\1/p' "$1"; }
mpi 1 "$pretrain" "${common[@]}" --tensor_model_parallel_size=1 --save="$work/tp1" \
  > "$work/train.out" 2>&1 || { cat "$work/train.out"; fail "training at TP 1"; }
before=$(final_loss "$work/train.out")
[[ -n "$before" ]] || fail "no validation loss: $(tail -3 "$work/train.out")"

losses=()
from=tp1
for layout in "2 1" "4 1" "1 1" "2 2" "1 1"; do
  read -r tp pp <<< "$layout"
  to="tp${tp}_pp${pp}_from_$from"
  "$reshard" --load="$work/$from" --save="$work/$to" --tensor_model_parallel_size=$tp \
    --pipeline_model_parallel_size=$pp > "$work/reshard.out" 2>&1 ||
    fail "reshard $from -> TP $tp PP $pp: $(cat "$work/reshard.out")"
  if [[ $pp -gt 1 ]]; then
    [[ -d "$work/$to/iter_0000002/mp_rank_01_001" ]] || fail "$to: no mp_rank_01_001 shard"
  fi
  mpi $((tp * pp)) "$pretrain" "${common[@]}" --tensor_model_parallel_size=$tp \
    --pipeline_model_parallel_size=$pp --load="$work/$to" > "$work/$to.out" 2>&1 ||
    { cat "$work/$to.out"; fail "resuming $to"; }
  grep -q "loaded checkpoint from $work/$to at iteration 2 " "$work/$to.out" ||
    fail "$to did not resume: $(head -3 "$work/$to.out")"
  losses+=("$(final_loss "$work/$to.out")")
  from=$to
done
echo "validation loss of ${*:-$family} before resharding (TP 1): $before; after TP 1->2: ${losses[0]}," \
  "->4: ${losses[1]}, ->1: ${losses[2]}, ->TP 2 PP 2: ${losses[3]}, ->TP 1 PP 1: ${losses[4]}"
python3 - "$before" "${losses[@]}" <<'PY' || fail "losses differ"
import sys
before, *after = map(float, sys.argv[1:])
# Different TP degrees reduce in a different order: f32 rounding, far below 1e-5 relative here.
assert all(abs(a - before) <= 1e-5 * before for a in after), (before, after)
PY

# Without the tool: 2 more iterations from the TP=1 checkpoint at PP=2, saved as two stages, then
# resumed at PP=1 for a 5th; against the same 5 iterations never leaving TP=1, PP=1.
more=("${common[@]}" --tensor_model_parallel_size=1 --lr_decay_samples=20 --train_iters=4)
cp -r "$work/tp1" "$work/pp2"
mpi 2 "$pretrain" "${more[@]}" --pipeline_model_parallel_size=2 --load="$work/pp2" \
  --save="$work/pp2" > "$work/pp2.out" 2>&1 || { cat "$work/pp2.out"; fail "PP=2 from TP=1"; }
grep -q "loaded checkpoint from $work/pp2 at iteration 2 " "$work/pp2.out" ||
  fail "PP=2 did not resume: $(head -3 "$work/pp2.out")"
[[ -d "$work/pp2/iter_0000004/mp_rank_00_001" ]] || fail "PP=2 saved no mp_rank_00_001 shard"
more[-1]=--train_iters=5
mpi 1 "$pretrain" "${more[@]}" --load="$work/pp2" > "$work/pp1_again.out" 2>&1 ||
  { cat "$work/pp1_again.out"; fail "PP=1 from the PP=2 checkpoint"; }
cp -r "$work/tp1" "$work/serial"
mpi 1 "$pretrain" "${more[@]}" --load="$work/serial" > "$work/serial.out" 2>&1 ||
  { cat "$work/serial.out"; fail "the serial run on"; }
# Iteration 5's training loss and the final validation loss.
iter5() { sed -n 's/.*iteration  *5\/ *5 .*lm loss: \([0-9.E+-]*\).*/\1/p' "$1"; }
a="$(iter5 "$work/pp1_again.out") $(final_loss "$work/pp1_again.out")"
b="$(iter5 "$work/serial.out") $(final_loss "$work/serial.out")"
echo "iteration 5 and validation losses through PP=2: $a; never leaving PP=1: $b"
python3 - $a $b <<'PY' || fail "losses through PP=2 differ"
import sys
x = list(map(float, sys.argv[1:]))
assert len(x) == 4, x
# Stages only split the layers; the reductions are the serial ones: f32 rounding at most.
assert all(abs(p - q) <= 1e-6 * abs(q) for p, q in zip(x[:2], x[2:])), x
PY
echo PASS

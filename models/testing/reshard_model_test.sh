#!/bin/bash
# A model through //train:reshard_checkpoint at TP 1 -> 2 -> 4 -> 1: trained 2 iterations at TP=1
# and saved, resharded step by step, and each checkpoint resumed by the pretraining driver at its
# degree gives the validation loss (fixed samples) the TP=1 run reported before the reshard. The
# vocabulary is padded differently at each degree, so every vocabulary-sized tensor must be
# re-padded (what nn::ParamSpec::vocab_padded declares and models::CreateModel enforces).
#   reshard_model_test.sh gpt  SYNTHETIC_CORPUS_BIN PRETRAIN_GPT_BIN  RESHARD_BIN [MODEL FLAGS...]
#   reshard_model_test.sh bert PREPROCESS_BIN       PRETRAIN_BERT_BIN RESHARD_BIN [MODEL FLAGS...]
set -uo pipefail
family="$1"; data_tool="$2"; pretrain="$3"; reshard="$4"; shift 4
work="$(mktemp -d /tmp/mt_reshard_model.XXXXXX)"
trap 'rm -rf "$work"' EXIT
export TMPDIR="$work" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_backing_directory="$TMPDIR"  # not /dev/shm: see comm/mpi_test.sh
unset XML_OUTPUT_FILE GTEST_OUTPUT TEST_PREMATURE_EXIT_FILE
fail() { echo "FAIL: $*" >&2; exit 1; }
mpi() { local np="$1"; shift; timeout 200 mpirun --oversubscribe --bind-to none -np "$np" \
  --mca btl self,vader --mca mpi_yield_when_idle 1 "$@"; }

common=(--num_layers=2 --hidden_size=32 --num_attention_heads=4 --ffn_hidden_size=64
        --max_position_embeddings=32 --seq_length=16 --micro_batch_size=2 --global_batch_size=4
        --lr=3e-3 --log_interval=1 --eval_iters=2 --threads=1 --train_iters=2 "$@")
if [[ "$family" == gpt ]]; then
  "$data_tool" --output_prefix="$work/corpus" --vocab=61 --documents=100 || fail "corpus"
  # Vocabulary 61 pads to 72 at TP 1 (a multiple of 24) and 96 at TP 2 and 4.
  common+=(--data_path="$work/corpus" --vocab_size=61 --make_vocab_size_divisible_by=24)
else
  python3 - "$work/corpus.txt" <<'PY'
import random, sys
random.seed(7)
who = ["the cat", "a dog", "my friend", "the old man", "our teacher", "the bird"]
does = ["sees", "likes", "finds", "watches", "follows", "helps"]
what = ["the ball", "a small house", "the river", "a green tree", "the red car"]
with open(sys.argv[1], "w") as f:
    for _ in range(60):
        f.write(" ".join("%s %s %s." % (random.choice(who).capitalize(), random.choice(does),
                                        random.choice(what)) for _ in range(random.randint(3, 6))))
        f.write("\n\n")
PY
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
for tp in 2 4 1; do
  to="tp${tp}_from_$from"
  "$reshard" --load="$work/$from" --save="$work/$to" --tensor_model_parallel_size=$tp \
    > "$work/reshard.out" 2>&1 || fail "reshard $from -> TP $tp: $(cat "$work/reshard.out")"
  mpi "$tp" "$pretrain" "${common[@]}" --tensor_model_parallel_size=$tp --load="$work/$to" \
    > "$work/$to.out" 2>&1 || { cat "$work/$to.out"; fail "resuming $to"; }
  grep -q "loaded checkpoint from $work/$to at iteration 2 " "$work/$to.out" ||
    fail "$to did not resume: $(head -3 "$work/$to.out")"
  losses+=("$(final_loss "$work/$to.out")")
  from=$to
done
echo "validation loss of ${*:-$family} before resharding (TP 1): $before; after TP 1->2: ${losses[0]}," \
  "->4: ${losses[1]}, ->1: ${losses[2]}"
python3 - "$before" "${losses[@]}" <<'PY' || fail "losses differ"
import sys
before, *after = map(float, sys.argv[1:])
# Different TP degrees reduce in a different order: f32 rounding, far below 1e-5 relative here.
assert all(abs(a - before) <= 1e-5 * before for a in after), (before, after)
PY
echo PASS

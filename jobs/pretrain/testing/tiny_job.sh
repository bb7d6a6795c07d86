# Sourced by the fault tests (rank_fault_test.sh, nan_test.sh) and the driver tests: the test
# environment of tools/test_env.sh ($work removed at exit, fail, mpi), a synthetic corpus at
# $work/corpus and `tiny`, the flags of a tiny GPT on it, and make_bert_corpus.
#   source tiny_job.sh SYNTHETIC_CORPUS_BIN NAME_PREFIX
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" "$2" || exit 1
"$1" --output_prefix="$work/corpus" --vocab=64 --documents=300 >/dev/null || fail "corpus"
tiny=(--data_path="$work/corpus" --vocab_size=64 --make_vocab_size_divisible_by=8
      --num_layers=2 --hidden_size=64 --num_attention_heads=4 --seq_length=32
      --micro_batch_size=2 --global_batch_size=4 --lr=3e-3 --log_interval=1 --eval_iters=0
      --threads=1)

# make_bert_corpus PREPROCESS_BIN: a small English sentence corpus (200 documents of 3-6
# sentences from 16 words) preprocessed for BERT (WordPiece, sentence split) at $work/bert.
make_bert_corpus() {
  python3 - "$work/bert.txt" <<'PY'
import random, sys
random.seed(3)
words = "the cat a dog sees likes finds the ball a small house river green tree red car".split()
with open(sys.argv[1], "w") as f:
    for d in range(200):
        f.write(" ".join(" ".join(random.choice(words) for _ in range(random.randint(4, 9)))
                         .capitalize() + "." for _ in range(random.randint(3, 6))) + "\n\n")
PY
  "$1" --input="$work/bert.txt" --input_format=text --tokenizer=bert --split_sentences \
    --output_prefix="$work/bert" --workers=1 >"$work/pre.out" 2>&1 ||
    { cat "$work/pre.out"; fail "preprocess"; }
}

# Sourced by the fault tests (rank_fault_test.sh, nan_test.sh): a work directory removed at exit
# (OpenMPI's too), fail(), a synthetic corpus at $work/corpus and `tiny`, the flags of a tiny GPT
# on it.
#   source tiny_job.sh SYNTHETIC_CORPUS_BIN NAME_PREFIX
work="$(mktemp -d "/tmp/$2.XXXXXX")"
trap 'rm -rf "$work"' EXIT
export TMPDIR="$work" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_backing_directory="$TMPDIR"  # not /dev/shm: see comm/mpi_test.sh
unset XML_OUTPUT_FILE GTEST_OUTPUT
fail() { echo "FAIL: $*" >&2; exit 1; }
"$1" --output_prefix="$work/corpus" --vocab=64 --documents=300 >/dev/null || fail "corpus"
tiny=(--data_path="$work/corpus" --vocab_size=64 --make_vocab_size_divisible_by=8
      --num_layers=2 --hidden_size=64 --num_attention_heads=4 --seq_length=32
      --micro_batch_size=2 --global_batch_size=4 --lr=3e-3 --log_interval=1 --eval_iters=0
      --threads=1)

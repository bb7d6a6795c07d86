#!/usr/bin/env bash
# The drivers' standard runs, for proving that a restructuring changed no number: GPT at TP=2,
# DP=2 with full recomputation, TP=2 in bf16, TP=2 in f16 (dynamic loss scaling), PP=2, and BERT
# at TP=2, each 16 iterations of a tiny model with validation, on a synthetic corpus (GPT) and a
# small English text (BERT). Writes one file per run to OUT_DIR: every JSONL record and every
# validation line, without the wall-clock fields (ms per iteration, tokens/s, TFLOP/s), so two
# builds' outputs compare with `diff -r`:
#
#   tools/curves.sh --bin DIR_A /tmp/curves_a     # e.g. binaries kept from the commit before
#   tools/curves.sh /tmp/curves_b                 # this checkout's bazel-bin
#   diff -r /tmp/curves_a /tmp/curves_b && echo bit-identical
#
# --bin DIR: a folder holding pretrain_gpt, pretrain_bert, preprocess and synthetic_corpus (the
# binaries of //jobs/pretrain:pretrain_gpt, :pretrain_bert, //data:preprocess and
# //data/testing:synthetic_corpus, copied there); default: this checkout's bazel-bin, built first
# with `./bazelw build` of those four targets. Needs mpirun and python3; seconds on 2 cores.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin=""
if [[ ${1:-} == --bin ]]; then
  bin="$(cd "$2" && pwd)"
  shift 2
fi
[[ $# -eq 1 ]] || { echo "usage: tools/curves.sh [--bin DIR] OUT_DIR" >&2; exit 2; }
out="$1"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
if [[ -z $bin ]]; then
  targets=(//jobs/pretrain:pretrain_gpt //jobs/pretrain:pretrain_bert
           //data:preprocess //data/testing:synthetic_corpus)
  (cd "$root" && ./bazelw build "${targets[@]}" >/dev/null 2>&1) ||
    { echo "tools/curves.sh: building ${targets[*]} failed" >&2; exit 1; }
  bin="$(mktemp -d)"
  trap 'rm -rf "$bin"' EXIT
  for t in "${targets[@]}"; do
    # The path of a target's output: bazel-bin/<package>/<name>.
    p="${t#//}"
    ln -s "$root/bazel-bin/${p%%:*}/${p##*:}" "$bin/${p##*:}"
  done
fi
for b in pretrain_gpt pretrain_bert preprocess synthetic_corpus; do
  [[ -x $bin/$b ]] || { echo "tools/curves.sh: $bin/$b is not an executable" >&2; exit 1; }
done

source "$root/tools/test_env.sh" mt_curves || exit 1
"$bin/synthetic_corpus" --output_prefix="$work/corpus" --vocab=64 --documents=300 >/dev/null
sentences "$work/bert.txt" 300 5
"$bin/preprocess" --input="$work/bert.txt" --input_format=text --tokenizer=bert \
  --split_sentences --output_prefix="$work/bert" --workers=1 >/dev/null 2>&1

common=(--num_layers=2 --hidden_size=64 --num_attention_heads=4 --seq_length=32
        --micro_batch_size=2 --global_batch_size=8 --lr=3e-3 --min_lr=3e-4
        --lr_warmup_samples=16 --lr_decay_samples=128 --train_iters=16 --log_interval=1
        --eval_interval=8 --eval_iters=2 --threads=1)
gpt=("$bin/pretrain_gpt" --data_path="$work/corpus" --vocab_size=64
     --make_vocab_size_divisible_by=8 "${common[@]}")
bert=("$bin/pretrain_bert" --data_path="$work/bert" --mask_prob=0.15 --short_seq_prob=0.1
      "${common[@]}")

# run NAME COMMAND...: COMMAND under mpirun with 2 ranks; NAME's record to $out/NAME.
run() {
  local name="$1"
  shift
  mpi 2 "$@" --log_jsonl="$work/$name.jsonl" >"$work/$name.out" 2>&1 ||
    { cat "$work/$name.out" >&2; fail "$name"; }
  python3 - "$work/$name.jsonl" "$work/$name.out" >"$out/$name" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    record = json.loads(line)
    for key in ("ms_per_iteration", "tokens_per_second", "tflops_per_rank"):
        record.pop(key, None)
    print(json.dumps(record, sort_keys=True))
for line in open(sys.argv[2]):
    if "validation" in line:
        print(line.rstrip())
PY
  echo "$name: $(grep -c . "$out/$name") lines"
}
run gpt_tp2 "${gpt[@]}" --tensor_model_parallel_size=2
run gpt_dp2_recompute "${gpt[@]}" --recompute
run gpt_tp2_bf16 "${gpt[@]}" --tensor_model_parallel_size=2 --bf16
run gpt_tp2_fp16 "${gpt[@]}" --tensor_model_parallel_size=2 --fp16
run gpt_pp2 "${gpt[@]}" --pipeline_model_parallel_size=2
run bert_tp2 "${bert[@]}" --tensor_model_parallel_size=2

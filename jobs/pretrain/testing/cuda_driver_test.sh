#!/bin/bash
# pretrain_gpt --device=cuda end to end against the CPU, on whatever GPU the binary finds (a real
# one, or the CUDA emulator under --config=cuda_emu); skips when there is none. Ranks beyond the
# GPU count share GPUs through the MPI communicator (staged through host memory).
#   1. f32, TP=2 over 2 ranks: the GPU losses and grad norms follow the CPU run's within 1e-4
#      (relative) for 12 iterations.
#   2. bf16 (the GPU default), DP=2: within 2e-2 of the CPU bf16 run.
#   3. bf16, TP=2, checkpoint at 6 on the GPU; resuming on the GPU repeats iterations 7..12 bit
#      for bit, and the same checkpoint resumes on the CPU within bf16 tolerance (checkpoints are
#      device-independent).
#   4. pretrain_bert, bf16, TP=2: MLM and SOP losses within 2e-2 of the CPU bf16 run (skipped
#      where the BERT vocabulary is not installed, as on a bare GPU machine).
#   cuda_driver_test.sh SYNTHETIC_CORPUS_BIN PRETRAIN_GPT_BIN PREPROCESS_BIN PRETRAIN_BERT_BIN
set -uo pipefail
corpus_bin="$1"; pretrain="$2"; preprocess="$3"; pretrain_bert="$4"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_cuda_driver || exit 1

"$corpus_bin" --output_prefix="$work/corpus" --vocab=64 --documents=300 || fail "corpus"
common=(--data_path="$work/corpus" --vocab_size=64 --make_vocab_size_divisible_by=8
        --num_layers=2 --hidden_size=32 --num_attention_heads=4 --seq_length=16
        --micro_batch_size=2 --global_batch_size=4 --lr=3e-3 --min_lr=3e-4
        --lr_warmup_samples=8 --lr_decay_samples=48 --log_interval=1 --eval_iters=0 --threads=1
        --train_iters=12)
mpi=(mpirun --oversubscribe --bind-to none -np 2 --mca btl self,vader)

if ! "$pretrain" "${common[@]}" --device=cuda --train_iters=2 > "$work/probe.out" 2>&1; then
  if grep -q "no CUDA device" "$work/probe.out"; then
    echo "SKIPPED: no CUDA device ($(head -1 "$work/probe.out"))"
    exit 0
  fi
  cat "$work/probe.out"; fail "--device=cuda probe"
fi

run() {  # run NAME [flags...]: a 2-rank GPT job logging to NAME.jsonl
  local name="$1"; shift
  timeout 300 "${mpi[@]}" "$pretrain" "${common[@]}" "$@" --log_jsonl="$work/$name.jsonl" \
    > "$work/$name.out" 2>&1 || { cat "$work/$name.out"; fail "run $name"; }
}
compare() {  # compare A B RTOL FIRST [LAST [KEYS]]: B's iterations FIRST..LAST against A's
  python3 - "$work/$1.jsonl" "$work/$2.jsonl" "$3" "$4" "${5:-12}" "${6:-lm_loss,grad_norm}" <<'PY'
import json, sys
a = {r["iteration"]: r for r in map(json.loads, open(sys.argv[1]))}
b = [json.loads(l) for l in open(sys.argv[2])]
rtol, first, last = float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
keys = sys.argv[6].split(",")
assert [r["iteration"] for r in b] == list(range(first, last + 1)), [r["iteration"] for r in b]
worst = 0.0
for r in b:
    for k in keys:
        ref = a[r["iteration"]][k]
        err = abs(r[k] - ref) / max(abs(ref), 1e-30)
        assert err <= rtol, (sys.argv[2], r["iteration"], k, r[k], ref, err, rtol)
        worst = max(worst, err)
print("%s vs %s: iterations %d..%d within %.2g (worst %.2g); loss %.4f -> %.4f"
      % (sys.argv[2].split("/")[-1], sys.argv[1].split("/")[-1], first, last, rtol, worst,
         b[0]["lm_loss"], b[-1]["lm_loss"]))
PY
}

# 1. f32, TP=2.
run cpu_f32 --device=cpu --tensor_model_parallel_size=2
run gpu_f32 --device=cuda --fp32 --tensor_model_parallel_size=2
grep -q "compute_dtype: f32" "$work/gpu_f32.out" || fail "GPU f32 run not in f32"
compare cpu_f32 gpu_f32 1e-4 1 || fail "GPU f32 vs CPU f32"

# 2. bf16 (the default on CUDA), DP=2.
run cpu_bf16_dp --device=cpu --bf16
run gpu_bf16_dp --device=cuda
grep -q "compute_dtype: bf16" "$work/gpu_bf16_dp.out" || fail "--device=cuda did not default to bf16"
compare cpu_bf16_dp gpu_bf16_dp 2e-2 1 || fail "GPU bf16 vs CPU bf16 (DP=2)"

# 3. bf16, TP=2: save at 6 on the GPU, resume on the GPU and on the CPU.
run gpu_bf16 --device=cuda --tensor_model_parallel_size=2 --save_interval=6 --save="$work/ckpt"
echo 6 > "$work/ckpt/latest_checkpointed_iteration.txt"
run gpu_resume --device=cuda --tensor_model_parallel_size=2 --load="$work/ckpt"
grep -q "loaded checkpoint" "$work/gpu_resume.out" || fail "GPU run did not resume"
compare gpu_bf16 gpu_resume 0 7 || fail "GPU resume is not bit for bit"
run cpu_resume --device=cpu --bf16 --tensor_model_parallel_size=2 --load="$work/ckpt"
grep -q "loaded checkpoint" "$work/cpu_resume.out" || fail "CPU run did not resume"
compare gpu_bf16 cpu_resume 2e-2 7 || fail "GPU checkpoint resumed on the CPU"

# 4. BERT: sentences of a small made-up text, WordPiece ids, TP=2, bf16.
sentences "$work/bert.txt" 300 5 || fail "BERT corpus"
if ! "$preprocess" --input="$work/bert.txt" --input_format=text --tokenizer=bert \
     --split_sentences --output_prefix="$work/bert" --workers=1 > "$work/pre.out" 2>&1; then
  grep -qi "vocab" "$work/pre.out" || { cat "$work/pre.out"; fail "BERT preprocessing"; }
  echo "BERT part skipped: $(head -1 "$work/pre.out")"
  echo PASS
  exit 0
fi
bert=(--data_path="$work/bert" --num_layers=2 --hidden_size=32 --num_attention_heads=4
      --seq_length=32 --micro_batch_size=4 --global_batch_size=8 --lr=1e-2 --min_lr=1e-3
      --lr_warmup_samples=16 --lr_decay_samples=96 --log_interval=1 --eval_iters=0 --threads=1
      --mask_prob=0.15 --short_seq_prob=0.1 --train_iters=6 --tensor_model_parallel_size=2)
for job in "cpu_bert --device=cpu --bf16" "gpu_bert --device=cuda"; do
  read -r name flags <<< "$job"
  # shellcheck disable=SC2086  # flags are words.
  timeout 300 "${mpi[@]}" "$pretrain_bert" "${bert[@]}" $flags --log_jsonl="$work/$name.jsonl" \
    > "$work/$name.out" 2>&1 || { cat "$work/$name.out"; fail "run $name"; }
done
compare cpu_bert gpu_bert 2e-2 1 6 lm_loss,sop_loss,grad_norm || fail "GPU BERT vs CPU BERT"
echo PASS

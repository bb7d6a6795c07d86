#!/bin/bash
# //jobs/eval:race with --device=cuda against the CPU, on whatever GPU the binary finds (a real one, or
# the CUDA emulator under --config=cuda_emu); skips when there is none. A tiny random BERT and a
# small RACE tree written here:
#   - fine-tuning in f32 on the GPU follows the CPU step by step (losses within 1e-4, relative:
#     float32 reductions in another order, over a few steps) and saves a checkpoint the CPU scores
#     as the GPU run did;
#   - --eval_only of the CPU-trained checkpoint: f32 on the GPU (one process, and two sharing it
#     through MPI at TP=2) gives the CPU's predictions, losses within 1e-5; bf16 (the GPU default)
#     losses within 2e-2.
# The data is written here (tools/gpu_check.sh carries this script and the binaries only).
#   race_cuda_test.sh TEST_CHECKPOINT RACE
set -uo pipefail
make_ckpt="$1"; race="$2"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_race_cuda || exit 1

python3 - "$work/RACE" <<'PY' || fail "RACE tree"
import json, os, random, sys
rng = random.Random(7)
words = "red blue green dog cat horse sheep river house school garden market".split()
for split, files in (("train", 4), ("dev", 2), ("test", 2)):
    for level in ("middle", "high"):
        d = os.path.join(sys.argv[1], split, level)
        os.makedirs(d)
        for f in range(files):
            questions = ["Which word is in the story?", "The story is about _ ."]
            with open(os.path.join(d, "%d.txt" % f), "w") as out:
                json.dump({"article": " ".join(rng.choice(words) for _ in range(12)),
                           "questions": questions,
                           "options": [rng.sample(words, 4) for _ in questions],
                           "answers": [rng.choice("ABCD") for _ in questions]}, out)
PY
"$make_ckpt" --save="$work/bert" --family=bert --vocab_size=30522 --num_token_types=2 \
  --zero=false --seed=5 --num_layers=2 --hidden_size=32 --num_attention_heads=4 \
  --max_position_embeddings=32 > /dev/null || fail "checkpoint"
train=(--load="$work/bert" --data="$work/RACE" --epochs=1 --global_batch_size=4
       --micro_batch_size=2 --lr=5e-3 --threads=1)

if ! "$race" "${train[@]}" --device=cuda --fp32 --save="$work/ft_gpu" \
    --log_jsonl="$work/gpu.steps.jsonl" --results_json="$work/train_gpu.json" \
    > "$work/train_gpu.out" 2>&1; then
  if grep -q "no CUDA device" "$work/train_gpu.out"; then
    echo "SKIPPED: no CUDA device ($(head -1 "$work/train_gpu.out"))"
    exit 0
  fi
  cat "$work/train_gpu.out"; fail "--device=cuda fine-tuning"
fi
grep -q "run at TP 1 on cuda:0 in f32" "$work/train_gpu.out" || fail "not on the GPU"

run() {  # run NAME NP FLAGS...: results in NAME.json, per-question lines in NAME.jsonl
  local name="$1" np="$2"; shift 2
  local cmd=("$race" "$@" --results_json="$work/$name.json" --per_example_jsonl="$work/$name.jsonl")
  if [[ $np -eq 1 ]]; then "${cmd[@]}" > "$work/$name.out" 2>&1; else timeout 300 mpirun \
    --oversubscribe --bind-to none -np "$np" --mca btl self,vader "${cmd[@]}" \
    > "$work/$name.out" 2>&1; fi || { cat "$work/$name.out"; fail "$name"; }
}
run train_cpu 1 "${train[@]}" --save="$work/ft_cpu" --log_jsonl="$work/cpu.steps.jsonl"
score=(--eval_only --data="$work/RACE" --threads=1)
run gpu_ckpt_on_cpu 1 "${score[@]}" --load="$work/ft_gpu"
run eval_cpu 1 "${score[@]}" --load="$work/ft_cpu"
run eval_gpu 1 "${score[@]}" --load="$work/ft_cpu" --device=cuda --fp32
run eval_gpu_tp2 2 "${score[@]}" --load="$work/ft_cpu" --device=cuda --fp32
run eval_gpu_bf16 1 "${score[@]}" --load="$work/ft_cpu" --device=cuda
grep -q "run at TP 1 on cuda:0 in bf16" "$work/eval_gpu_bf16.out" || fail "bf16 is not the default"

python3 - "$work" <<'PY' || fail "GPU results differ from the CPU's"
import json, os, sys
w = sys.argv[1]
load = lambda n: json.load(open(os.path.join(w, n + ".json")))
lines = lambda n: [json.loads(l) for l in open(os.path.join(w, n))]
close = lambda a, b, tol: abs(a - b) <= tol * max(abs(a), abs(b))
groups = ["dev/middle", "dev/high", "test/middle", "test/high"]
cpu, gpu = lines("cpu.steps.jsonl"), lines("gpu.steps.jsonl")
assert len(cpu) == len(gpu) == 4, (len(cpu), len(gpu))  # 16 training questions, 4 a step.
for a, b in zip(cpu, gpu):
    assert close(a["loss"], b["loss"], 1e-4), (a, b)
    assert close(a["grad_norm"], b["grad_norm"], 1e-3), (a, b)
# The GPU's checkpoint, scored on the CPU, gives what the GPU run reported.
trained, rescored = load("train_gpu"), load("gpu_ckpt_on_cpu")
for g in groups:
    assert trained["splits"][g]["correct"] == rescored["splits"][g]["correct"], g
    assert close(trained["splits"][g]["loss"], rescored["splits"][g]["loss"], 1e-5), g
want = load("eval_cpu")
for name, tol in (("eval_gpu", 1e-5), ("eval_gpu_tp2", 1e-5), ("eval_gpu_bf16", 2e-2)):
    got = load(name)
    for g in groups:
        assert close(got["splits"][g]["loss"], want["splits"][g]["loss"], tol), (name, g)
    if tol < 1e-3:
        assert lines(name + ".jsonl") == lines("eval_cpu.jsonl"), name
print("GPU f32 fine-tuning, f32 scores (TP 1 and 2) and bf16 scores follow the CPU's")
PY
echo PASS

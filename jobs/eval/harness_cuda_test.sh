#!/bin/bash
# The harnesses with --device=cuda against the CPU, on whatever GPU the binaries find (a real one,
# or the CUDA emulator under --config=cuda_emu); skips when there is none. A randomly initialised
# GPT-2 saved at TP=2:
#   - f32 on the GPU (one process, and two sharing the GPU through MPI at TP=2): WikiText-103 and
#     LAMBADA per-example numbers within 1e-4 (relative) of the CPU's;
#   - bf16 (the GPU default): within 2e-2.
# The data is written here (tools/gpu_check.sh carries this script and the binaries only).
#   harness_cuda_test.sh TEST_CHECKPOINT WIKITEXT103 LAMBADA
set -uo pipefail
make_ckpt="$1"; wikitext="$2"; lambada="$3"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_eval_cuda || exit 1
wiki="$work/wiki.tokens"
lambada_data="$work/lambada.jsonl"
cat > "$wiki" <<'TXT'
 
 = Tide Mill = 
 
 The tide mill at Orford Ness was built in 1791 by the miller Samuel Crane . 
 Its wheel , 5 @.@ 4 metres across , turned on the ebb tide for four hours twice a day . 
 The mill ground wheat and barley until 1912 , when a storm breached the dam . 
 
 = = Restoration = = 
 
 A trust bought the building in 1986 . After ten years of work , the wheel turned again on 
 14 May 1996 , and the mill now grinds flour for visitors during the summer months . 
TXT
cat > "$lambada_data" <<'TXT'
{"text": "She locked the door, put the key under the stone and walked down to the harbour"}
{"text": "After ten years the wheel turned again, and the miller ground flour at the mill"}
{"text": "Every spring the swallows came back to nest under the roof of the old barn"}
TXT

"$make_ckpt" --save="$work/ckpt" --zero=false --seed=5 --num_layers=2 --hidden_size=32 \
  --num_attention_heads=4 --max_position_embeddings=64 --tensor_model_parallel_size=2 \
  > /dev/null || fail "checkpoint"
wiki_flags=(--load="$work/ckpt" --data="$wiki" --seq_length=32 --overlapping_eval=16 --threads=1)
lambada_flags=(--load="$work/ckpt" --data="$lambada_data" --threads=1)

if ! "$lambada" "${lambada_flags[@]}" --device=cuda > "$work/probe.out" 2>&1; then
  if grep -q "no CUDA device" "$work/probe.out"; then
    echo "SKIPPED: no CUDA device ($(head -1 "$work/probe.out"))"
    exit 0
  fi
  cat "$work/probe.out"; fail "--device=cuda probe"
fi

run() {  # run NAME NP BINARY FLAGS...: per-example lines into NAME.jsonl
  local name="$1" np="$2"; shift 2
  local cmd=("$@" --per_example_jsonl="$work/$name.jsonl")
  if [[ $np -eq 1 ]]; then "${cmd[@]}" > "$work/$name.out" 2>&1; else timeout 300 mpirun \
    --oversubscribe --bind-to none -np "$np" --mca btl self,vader "${cmd[@]}" \
    > "$work/$name.out" 2>&1; fi || { cat "$work/$name.out"; fail "$name"; }
}
run wiki_cpu 1 "$wikitext" "${wiki_flags[@]}"
run wiki_gpu 1 "$wikitext" "${wiki_flags[@]}" --device=cuda --fp32
run wiki_gpu_tp2 2 "$wikitext" "${wiki_flags[@]}" --device=cuda --fp32
run wiki_gpu_bf16 1 "$wikitext" "${wiki_flags[@]}" --device=cuda
run lambada_cpu 1 "$lambada" "${lambada_flags[@]}"
run lambada_gpu 1 "$lambada" "${lambada_flags[@]}" --device=cuda --fp32
run lambada_gpu_bf16 1 "$lambada" "${lambada_flags[@]}" --device=cuda
grep -q "run at TP 1 on cuda:0 in bf16" "$work/wiki_gpu_bf16.out" ||
  fail "bf16 is not the GPU default: $(head -1 "$work/wiki_gpu_bf16.out")"

python3 - "$work" <<'PY' || fail "GPU results differ from the CPU's"
import json, os, sys
w = sys.argv[1]
lines = lambda n: [json.loads(l) for l in open(os.path.join(w, n + ".jsonl"))]
close = lambda a, b, tol: abs(a - b) <= tol * max(abs(a), abs(b))
for name, tol in (("wiki_gpu", 1e-4), ("wiki_gpu_tp2", 1e-4), ("wiki_gpu_bf16", 2e-2)):
    got, want = lines(name), lines("wiki_cpu")
    assert len(got) == len(want) > 1, name
    for a, b in zip(got, want):
        assert close(a["nll_sum"], b["nll_sum"], tol), (name, a, b)
for name, tol in (("lambada_gpu", 1e-4), ("lambada_gpu_bf16", 2e-2)):
    for a, b in zip(lines(name), lines("lambada_cpu")):
        assert close(a["target_nll"], b["target_nll"], tol), (name, a, b)
        if tol < 1e-3:
            assert a["predicted"] == b["predicted"], (name, a, b)
print("GPU f32 (TP 1 and 2) and bf16 per-example NLLs follow the CPU's")
PY
echo PASS

#!/bin/bash
# A trained pipeline checkpoint through the reshard tool and back, on a tiny 4-layer GPT:
#   pretrain_gpt at PP=2 x TP=2 (4 ranks) saves iterations 3 and 6; its iteration-3 checkpoint,
#   resharded by //checkpoint:reshard_checkpoint to PP=1 x TP=1 and resumed on one rank, logs
#   iterations 4-6 within float32 rounding of the uninterrupted PP=2 x TP=2 run (relative 1e-5,
#   the bound of train:pipeline_trainer_test: only the TP/PP sums' order differs) and ends with
#   the same validation loss; that serial checkpoint resharded back to PP=2 x TP=2 resumes the
#   4-rank run bit for bit (resharding moves the weights and Adam moments without changing them);
#   the Hugging Face export (//checkpoint:convert_checkpoint --to=hf) of the PP=2 x TP=2 checkpoint is
#   byte for byte that of its PP=1 x TP=1 reshard.
#   pipeline_reshard_resume_test.sh SYNTHETIC_CORPUS_BIN PRETRAIN_GPT_BIN RESHARD_BIN CONVERT_BIN
set -uo pipefail
corpus_bin="$1"; pretrain="$2"; reshard="$3"; convert="$4"
source "$(dirname "$0")/tiny_job.sh" "$corpus_bin" mt_pp_reshard
common=("${tiny[@]}" --num_layers=4 --global_batch_size=8 --train_iters=6 --eval_iters=2)
layout=(--pipeline_model_parallel_size=2 --tensor_model_parallel_size=2)
run() {  # run NAME NP FLAGS...: logs NAME.jsonl, NAME.log
  local name="$1" np="$2"; shift 2
  local launcher=("$pretrain")
  [[ "$np" -gt 1 ]] && launcher=(mpi "$np" "$pretrain")
  "${launcher[@]}" "${common[@]}" "$@" --log_jsonl="$work/$name.jsonl" >"$work/$name.log" 2>&1 ||
    { cat "$work/$name.log"; fail "run $name"; }
}

run whole 4 "${layout[@]}" --save="$work/ckpt" --save_interval=3
cp -r "$work/ckpt" "$work/ckpt3" && rm -rf "$work/ckpt3/iter_0000006" &&
  echo 3 >"$work/ckpt3/latest_checkpointed_iteration.txt" || fail "copying the checkpoint"
"$reshard" --load="$work/ckpt3" --save="$work/serial3" --tensor_model_parallel_size=1 \
  --pipeline_model_parallel_size=1 >"$work/reshard1.log" 2>&1 ||
  { cat "$work/reshard1.log"; fail "reshard to PP=1 x TP=1"; }
[ -d "$work/serial3/iter_0000003/mp_rank_00" ] || fail "no mp_rank_00 in the resharded checkpoint"
run serial 1 --load="$work/serial3"
for c in ckpt3 serial3; do
  "$convert" --to=hf --input="$work/$c" --save="$work/hf_$c" >"$work/hf_$c.log" 2>&1 ||
    { cat "$work/hf_$c.log"; fail "HF export of $c"; }
done
for f in model.safetensors config.json; do
  cmp "$work/hf_ckpt3/$f" "$work/hf_serial3/$f" ||
    fail "HF export: $f of the PP=2 x TP=2 checkpoint differs from its PP=1 x TP=1 reshard's"
done
"$reshard" --load="$work/serial3" --save="$work/back3" "${layout[@]}" >"$work/reshard2.log" 2>&1 ||
  { cat "$work/reshard2.log"; fail "reshard back to PP=2 x TP=2"; }
for shard in mp_rank_00_000 mp_rank_01_000 mp_rank_00_001 mp_rank_01_001; do
  [ -d "$work/back3/iter_0000003/$shard" ] || fail "no $shard in the checkpoint resharded back"
done
run back 4 "${layout[@]}" --load="$work/back3"
for name in serial back; do
  grep -q "loaded checkpoint from $work/.* at iteration 3 " "$work/$name.log" ||
    fail "$name did not resume at 3: $(head -3 "$work/$name.log")"
done

python3 - "$work" <<'PY' || fail "resumed curves differ"
import json, sys
work = sys.argv[1]
def curve(name):
    return [json.loads(l) for l in open(f"{work}/{name}.jsonl")]
whole, serial, back = curve("whole"), curve("serial"), curve("back")
assert [r["iteration"] for r in whole] == list(range(1, 7)), whole
assert [r["iteration"] for r in serial] == [r["iteration"] for r in back] == [4, 5, 6], serial
assert [r["lm_loss"] for r in back] == [r["lm_loss"] for r in whole[3:]], (back, whole)
worst = max(abs(a["lm_loss"] - b["lm_loss"]) / b["lm_loss"] for a, b in zip(serial, whole[3:]))
print(f"PP=2 x TP=2 -> PP=1 x TP=1: worst relative lm_loss difference {worst:.3g}; "
      "resharded back: bit for bit")
assert worst < 1e-5, worst
PY
valid() { grep -o 'validation at the end | lm loss: [0-9.E+-]*' "$1" | grep -o '[0-9.E+-]*$'; }
python3 -c 'import sys; a, b, c = map(float, sys.argv[1:]);
assert abs(a - b) <= 1e-5 * b and c == b, (a, b, c)' "$(valid "$work/serial.log")" \
  "$(valid "$work/whole.log")" "$(valid "$work/back.log")" ||
  fail "validation losses: serial $(valid "$work/serial.log"), whole $(valid "$work/whole.log"), back $(valid "$work/back.log")"
echo PASS

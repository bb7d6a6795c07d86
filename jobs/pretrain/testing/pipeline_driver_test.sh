#!/bin/bash
# pretrain_gpt with pipeline stages against the serial run, on a tiny 4-layer GPT, 6 iterations:
#   PP=2 (2 ranks) and PP=2 x TP=2 with the interleaved schedule (4 ranks, 1 layer per chunk)
#   log the serial run's lm_loss at every iteration within float32 rounding (relative 1e-5, the
#   bound of train:pipeline_trainer_test), in one JSONL file with one line per iteration (one
#   writer per job, the same keys), and the same end-of-training validation loss; rank 0's log
#   shows "lm loss" and the pipeline line (the share of the schedule spent waiting);
#   checkpoints of pipeline stages (mp_rank_TT_PPP): the interleaved run saved at iteration 3 and
#   resumed in the same layout logs iterations 4-6 bit for bit as the uninterrupted run, and
#   resumed with plain 1F1B (stage 0 then holds layers 0-1, not 0 and 2) within float32
#   rounding of the serial run;
#   bad pipeline flags are refused with one line naming the flag (non-zero exit);
#   pretrain_bert at PP=2 (2 layers per stage), and at PP=2 x TP=2 with --sequence_parallel
#   (stages passing each TP rank's slice of the sequence), logs the serial lm and sop losses alike.
#   pipeline_driver_test.sh SYNTHETIC_CORPUS_BIN PRETRAIN_GPT_BIN PREPROCESS_BIN PRETRAIN_BERT_BIN
set -uo pipefail
corpus_bin="$1"; pretrain="$2"; preprocess="$3"; bert="$4"
source "$(dirname "$0")/tiny_job.sh" "$corpus_bin" mt_pipeline
common=("${tiny[@]}" --num_layers=4 --global_batch_size=8 --train_iters=6 --eval_iters=2)

"$pretrain" "${common[@]}" --log_jsonl="$work/serial.jsonl" >"$work/serial.log" 2>&1 ||
  { cat "$work/serial.log"; fail "serial run"; }
mpi 2 "$pretrain" "${common[@]}" --pipeline_model_parallel_size=2 \
  --log_jsonl="$work/pp2.jsonl" >"$work/pp2.log" 2>&1 || { cat "$work/pp2.log"; fail "PP=2 run"; }
mpi 4 "$pretrain" "${common[@]}" --pipeline_model_parallel_size=2 --tensor_model_parallel_size=2 \
  --num_layers_per_virtual_pipeline_stage=1 --log_jsonl="$work/pp2tp2.jsonl" >"$work/pp2tp2.log" \
  2>&1 || { cat "$work/pp2tp2.log"; fail "PP=2 x TP=2 interleaved run"; }

python3 - "$work" <<'PY' || fail "curves differ"
import json, sys
work = sys.argv[1]
def curve(name):
    return [json.loads(l) for l in open(f"{work}/{name}.jsonl")]
serial = curve("serial")
assert len(serial) == 6, len(serial)
for name in ("pp2", "pp2tp2"):
    run = curve(name)
    assert len(run) == 6, (name, len(run))
    assert [set(r) for r in run] == [set(r) for r in serial], name
    worst = max(abs(a["lm_loss"] - b["lm_loss"]) / b["lm_loss"] for a, b in zip(run, serial))
    print(f"{name}: worst relative lm_loss difference {worst:.3g}")
    assert worst < 1e-5, (name, worst)
PY
# Save at iteration 3 (interleaved PP=2 x TP=2), resume in the same layout and in another.
interleaved=(--pipeline_model_parallel_size=2 --tensor_model_parallel_size=2
             --num_layers_per_virtual_pipeline_stage=1)
half=("${common[@]}" --train_iters=3 --lr_decay_samples=48)  # the 6-iteration run's schedule
mpi 4 "$pretrain" "${half[@]}" "${interleaved[@]}" --save="$work/ckpt" >"$work/half.log" 2>&1 ||
  { cat "$work/half.log"; fail "PP=2 x TP=2 interleaved run to iteration 3"; }
for shard in mp_rank_00_000 mp_rank_01_000 mp_rank_00_001 mp_rank_01_001; do
  [ -d "$work/ckpt/iter_0000003/$shard" ] || fail "no $shard in the PP=2 x TP=2 checkpoint"
done
cp -r "$work/ckpt" "$work/ckpt_1f1b"
mpi 4 "$pretrain" "${common[@]}" "${interleaved[@]}" --load="$work/ckpt" \
  --log_jsonl="$work/same.jsonl" >"$work/same.log" 2>&1 || { cat "$work/same.log"; fail "resume"; }
mpi 4 "$pretrain" "${common[@]}" --pipeline_model_parallel_size=2 --tensor_model_parallel_size=2 \
  --load="$work/ckpt_1f1b" --log_jsonl="$work/other.jsonl" >"$work/other.log" 2>&1 ||
  { cat "$work/other.log"; fail "resume with plain 1F1B"; }
grep -q "loaded checkpoint from $work/ckpt_1f1b at iteration 3 " "$work/other.log" ||
  fail "1F1B did not resume: $(head -3 "$work/other.log")"
python3 - "$work" <<'PY' || fail "resumed curves differ"
import json, sys
work = sys.argv[1]
def curve(name):
    return [json.loads(l) for l in open(f"{work}/{name}.jsonl")]
whole, same, other, serial = (curve(n) for n in ("pp2tp2", "same", "other", "serial"))
assert [r["iteration"] for r in same] == [r["iteration"] for r in other] == [4, 5, 6], same
assert [r["lm_loss"] for r in same] == [r["lm_loss"] for r in whole[3:]], (same, whole)
worst = max(abs(a["lm_loss"] - b["lm_loss"]) / b["lm_loss"] for a, b in zip(other, serial[3:]))
print(f"resumed in another stage layout: worst relative lm_loss difference {worst:.3g}")
assert worst < 1e-5, worst
PY

valid() { grep -o 'validation at the end | lm loss: [0-9.E+-]*' "$1"; }
want="$(valid "$work/serial.log")"
[ -n "$want" ] || fail "no validation line in the serial log"
for run in pp2 pp2tp2; do
  [ "$(grep -c ' iteration .* lm loss: ' "$work/$run.log")" = 6 ] || fail "$run: not 6 log lines"
  grep -q 'pipeline: 2 stages, 6 iterations' "$work/$run.log" || fail "$run: no pipeline line"
  got="$(valid "$work/$run.log")"
  python3 -c 'import sys; a, b = (float(x.split()[-1]) for x in sys.argv[1:]);
assert abs(a - b) <= 1e-5 * b, (a, b)' "$got" "$want" || fail "$run: validation $got vs $want"
done

# BERT: serial against PP=2 (the MLM head and the tied decoder on the last stage).
make_bert_corpus "$preprocess"
bert_common=(--data_path="$work/bert" --num_layers=4 --hidden_size=32 --num_attention_heads=4
             --seq_length=16 --micro_batch_size=2 --global_batch_size=8 --lr=3e-3 --log_interval=1
             --eval_iters=0 --threads=1 --train_iters=6)
"$bert" "${bert_common[@]}" --log_jsonl="$work/bert_serial.jsonl" >"$work/bert_serial.log" 2>&1 ||
  { cat "$work/bert_serial.log"; fail "BERT serial run"; }
mpi 2 "$bert" "${bert_common[@]}" --pipeline_model_parallel_size=2 \
  --log_jsonl="$work/bert_pp2.jsonl" >"$work/bert_pp2.log" 2>&1 ||
  { cat "$work/bert_pp2.log"; fail "BERT PP=2 run"; }
grep -q 'pipeline: 2 stages, 6 iterations' "$work/bert_pp2.log" || fail "BERT: no pipeline line"
mpi 4 "$bert" "${bert_common[@]}" --pipeline_model_parallel_size=2 --tensor_model_parallel_size=2 \
  --sequence_parallel --log_jsonl="$work/bert_pp2_sp.jsonl" >"$work/bert_pp2_sp.log" 2>&1 ||
  { cat "$work/bert_pp2_sp.log"; fail "BERT PP=2 x TP=2 sequence-parallel run"; }
python3 - "$work" <<'PY' || fail "BERT curves differ"
import json, sys
work = sys.argv[1]
def curve(name):
    return [json.loads(l) for l in open(f"{work}/{name}.jsonl")]
serial = curve("bert_serial")
for name, what in (("bert_pp2", "PP=2"), ("bert_pp2_sp", "PP=2 x TP=2 sequence parallel")):
    run = curve(name)
    assert len(serial) == len(run) == 6, (len(serial), len(run))
    assert [set(r) for r in run] == [set(r) for r in serial]
    for key in ("lm_loss", "sop_loss"):
        worst = max(abs(a[key] - b[key]) / b[key] for a, b in zip(run, serial))
        print(f"BERT {what}: worst relative {key} difference {worst:.3g}")
        assert worst < 1e-5, (key, worst)
PY

refused() {  # refused NEEDLE FLAGS...: exits non-zero with one error line containing NEEDLE
  local needle="$1"; shift
  if mpi 2 "$pretrain" "${common[@]}" "$@" >"$work/bad.log" 2>&1; then fail "accepted: $*"; fi
  grep -q -- "$needle" "$work/bad.log" || { cat "$work/bad.log"; fail "no '$needle' for: $*"; }
}
refused "not divisible by tensor_model_parallel_size 1 x pipeline_model_parallel_size 3" \
  --pipeline_model_parallel_size=3
refused "--num_layers=3 does not divide into 2 pipeline stages" --pipeline_model_parallel_size=2 \
  --num_layers=3
refused "multiple of --pipeline_model_parallel_size=2" --pipeline_model_parallel_size=2 \
  --num_layers_per_virtual_pipeline_stage=1 --global_batch_size=6
refused "must divide the 2 layers of each stage" --pipeline_model_parallel_size=2 \
  --num_layers_per_virtual_pipeline_stage=3
echo PASS

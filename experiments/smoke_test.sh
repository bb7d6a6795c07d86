#!/bin/bash
# //experiments:smoke_test: every experiment at a tiny size with --results_dir in a temporary
# directory; checks that its report, CSVs (with their headers) and PNGs are written and
# well-formed; and that each refuses an unknown --device before any work. Add an experiment with
# one `check` line at the bottom.
#   check NAME BINARY "FLAGS" CSV:HEADER... PNG...
set -uo pipefail
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_smoke || exit 1
command -v gnuplot >/dev/null || fail "gnuplot not installed: run tools/setup.sh (Debian gnuplot-nox)"

check() {
  local name="$1" bin="$2" flags="$3"
  shift 3
  local dir="${TEST_TMPDIR:-$TMPDIR}/$name"
  # shellcheck disable=SC2086
  "$bin" --results_dir="$dir" $flags >"$dir.log" 2>&1 || { cat "$dir.log" >&2; fail "$name exited $?"; }
  [[ -s "$dir/report.md" ]] || fail "$name: no report.md"
  grep -q "^- wall time: " "$dir/report.md" || fail "$name: report.md has no wall time"
  grep -q "^- command: " "$dir/report.md" || fail "$name: report.md has no command"
  local f
  for f in "$@"; do
    if [[ "$f" == *.csv:* ]]; then
      local csv="${f%%:*}" header="${f#*:}"
      [[ "$(head -n 1 "$dir/$csv")" == "$header" ]] || fail "$name: $csv header is not '$header'"
      [[ $(wc -l <"$dir/$csv") -ge 2 ]] || fail "$name: $csv has no rows"
    else
      [[ "$(head -c 8 "$dir/$f" | od -An -tx1 | tr -d ' \n')" == "89504e470d0a1a0a" ]] ||
        fail "$name: $f is not a PNG"
    fi
  done
  echo "ok: $name"
}

# The all-reduce fit needs sizes whose bandwidth term outgrows the timing noise of a loaded
# machine: up to 4 MiB (at 64 KiB, latency and noise alone, the times could fail to grow).
check table1_weak_scaling "$1" \
  "--bench_hidden_size=64 --bench_num_layers=1 --bench_heads=2 --bench_seq_length=32 --bench_micro_batch_size=2 --bench_steps=1 --bench_rounds=1 --bench_comm_max_bytes=4194304" \
  "efficiency.csv:params,gpus,mode,paper_pct,model_pct" "measured.csv:config,threads per rank,GEMM (s),loss (s),optimizer (s),attention + LayerNorm (s),element-wise (s),all-reduce (s),predicted step (s),measured step (s),predicted / measured,measured efficiency %,predicted efficiency %,reference GEMM GFLOP/s per rank" \
  efficiency.png strong_scaling.png
check gpt2_zeroshot "$2" \
  "--models=1x16x2 --train_iters=2 --seq_length=32 --micro_batch_size=2 --global_batch_size=2 --heldout_docs=60 --max_corpus_documents=1200 --overlapping_eval=8 --work_dir=$TMPDIR/gpt2_zeroshot_work --tensorboard_dir=$TMPDIR/tb_zeroshot" \
  "zeroshot.csv:model,params,dataset,metric,value" wikitext_ppl.png lambada_acc.png
ls "$TMPDIR"/tb_zeroshot/*/events.out.tfevents.* >/dev/null || fail "gpt2_zeroshot: no event file"
# The model and the bigram compared line by line (the harness's per-example lines read back).
grep -q "exact one-sided McNemar test p = " "${TEST_TMPDIR:-$TMPDIR}/gpt2_zeroshot/report.md" ||
  fail "gpt2_zeroshot: no paired test in report.md"
check race_finetune "$3" \
  "--models=1x16x2,1x32x2 --pretrain_iters=2 --pretrain_batch_size=2 --seq_length=64 --train_questions=40 --max_corpus_documents=2000 --work_dir=$TMPDIR/race_finetune_work" \
  "race.csv:model,split,subset,accuracy"
# The models compared question by question (eval/race's per-question lines read back).
grep -q "exact one-sided McNemar test p = " "${TEST_TMPDIR:-$TMPDIR}/race_finetune/report.md" ||
  fail "race_finetune: no paired test in report.md"
grep -q "The dev split, a second sample: " "${TEST_TMPDIR:-$TMPDIR}/race_finetune/report.md" ||
  fail "race_finetune: no dev-split test in report.md"
# In-process training experiments (binaries from the runfiles): bert_prenorm_vs_postnorm on the
# shortened prose corpus race_finetune built above (with a 50-word vocabulary of its own),
# gpt2_scaling_curves on the embedded corpus tokenised into $TMPDIR/data.
check bert_prenorm_vs_postnorm experiments/bert_prenorm_vs_postnorm/bert_prenorm_vs_postnorm \
  "--max_corpus_documents=2000 --vocab_words=50 --num_layers=1,2 --hidden_size=16,32 --num_attention_heads=2 --seq_length=32 --micro_batch_size=2 --global_batch_size=2 --train_iters_per_width=16:4,32:6 --seeds=1,2 --window=2" \
  "loss_curves.csv:iteration,depth,norm,seed,loss,hidden" "final_losses.csv:layers,norm,seeds,mean,stddev,min,max,diverged,stalled,learned,hidden,stderr,band_low,band_high,series" \
  "final_losses_per_seed.csv:layers,norm,seed,final_loss,outcome,hidden,series" "gaps.csv:hidden,layers,gap,stderr,z,pairs,paired_stderr,paired_z" \
  loss_curves_h16.png loss_curves_h32.png final_loss.png
# --train_iters_per_width: each width trains its own steps (loss_curves.csv: iteration ... hidden).
[[ "$(awk -F, 'NR > 1 && $1 > n[$6] { n[$6] = $1 } END { print n[16], n[32] }' \
  "${TEST_TMPDIR:-$TMPDIR}/bert_prenorm_vs_postnorm/loss_curves.csv")" == "4 6" ]] ||
  fail "bert_prenorm_vs_postnorm: hidden 16 and 32 did not train 4 and 6 iterations"
check gpt2_scaling_curves experiments/gpt2_scaling_curves/gpt2_scaling_curves \
  "--data_dir=$TMPDIR/data --num_layers=1,1,1 --hidden_size=16,32,64 --num_attention_heads=2,2,2 --seq_length=32 --micro_batch_size=2 --global_batch_size=2 --train_iters=4 --eval_interval=2 --eval_iters=1 --tensorboard_dir=$TMPDIR/tb_scaling" \
  "val_curves.csv:model,params,iteration,val_loss,val_ppl" "final_losses.csv:variant,model,non_embedding_params,train_flops,final_val_loss,fit_loss" \
  "compute_curves.csv:model,non_embedding_params,iteration,tokens,train_flops,val_loss" val_ppl.png final_loss.png compute_loss.png
grep -q "alpha = " "${TEST_TMPDIR:-$TMPDIR}/gpt2_scaling_curves/report.md" || fail "gpt2_scaling_curves: no fitted exponent in report.md"
# --tensorboard_dir: each run's event files in a directory of its own (one per chunk of training).
for run in 1L-32H 1L-64H; do
  [[ $(ls "$TMPDIR/tb_scaling/$run" | grep -c tfevents) -eq 2 ]] ||
    fail "gpt2_scaling_curves: not two event files in $TMPDIR/tb_scaling/$run"
done
# An unknown --device is refused before any work: exit 1 and one line listing the choices.
for bin in "$2" "$3" experiments/bert_prenorm_vs_postnorm/bert_prenorm_vs_postnorm \
  experiments/gpt2_scaling_curves/gpt2_scaling_curves; do
  err=$("$bin" --device=gpu --results_dir="$work/bad_device" 2>&1 >/dev/null)
  rc=$?
  [[ $rc -eq 1 && "$err" == *"--device=gpu: must be one of cpu, cuda" && $(grep -c . <<<"$err") -eq 1 ]] ||
    fail "$bin --device=gpu: exit $rc, stderr '$err'"
  [[ ! -e "$work/bad_device" ]] || fail "$bin --device=gpu wrote $work/bad_device"
done
echo "ok: --device=gpu refused"
# The paper's pooled readout without fine-tuning (an untrained choice head) is refused before
# any work, in one line.
err=$("$3" --readout=pooled --results_dir="$work/pooled_zero_shot" 2>&1 >/dev/null)
[[ $? -eq 1 && "$err" == *"--readout=pooled with --epochs=0: "* && $(grep -c . <<<"$err") -eq 1 ]] ||
  fail "race_finetune --readout=pooled --epochs=0: stderr '$err'"
[[ ! -e "$work/pooled_zero_shot" ]] || fail "race_finetune --readout=pooled wrote $work/pooled_zero_shot"
# --vocab_file without --load or --data_path (the prose corpus has --vocab_words), and a masking
# fraction outside (0, 1], likewise.
for flags in "--vocab_file=vocab.txt|--vocab_file is the vocabulary of --load or --data_path" \
  "--mask_prob=1.5|--mask_prob=1.5: must be in (0, 1]"; do
  err=$("$3" "${flags%%|*}" --results_dir="$work/bad_flag" 2>&1 >/dev/null)
  [[ $? -eq 1 && "$err" == *"${flags#*|}"* && $(grep -c . <<<"$err") -eq 1 ]] ||
    fail "race_finetune ${flags%%|*}: stderr '$err'"
  [[ ! -e "$work/bad_flag" ]] || fail "race_finetune ${flags%%|*} wrote $work/bad_flag"
done
# A width without steps is refused before any work, in one line.
err=$(experiments/bert_prenorm_vs_postnorm/bert_prenorm_vs_postnorm --hidden_size=16 \
  --train_iters_per_width=32:5 --results_dir="$work/no_steps" 2>&1 >/dev/null)
[[ $? -eq 1 && "$err" == *"no steps for --hidden_size 16"* && $(grep -c . <<<"$err") -eq 1 ]] ||
  fail "a width without steps: stderr '$err'"
[[ ! -e "$work/no_steps" ]] || fail "a width without steps wrote $work/no_steps"
echo PASS

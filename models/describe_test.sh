#!/bin/bash
# End-to-end check of //models:describe: the parameters line, the per-rank count, the registered
# names (including the variant package), and one-line errors with a non-zero exit for bad input.
set -uo pipefail
bin="$1"
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$("$bin" --model=gpt2-1.2b --tensor_model_parallel_size=2) || fail "describe exited $?"
grep -qx "parameters: 1212300288" <<<"$out" || fail "unexpected parameters line in: $out"
grep -q "^parameters per rank: " <<<"$out" || fail "no per-rank line"
grep -q "^registered models: .*gpt2-tiny-nopos" <<<"$out" || fail "variant not registered: $out"
grep -qx "architecture: gpt2 (.*)" <<<"$out" || fail "no architecture line in: $out"
grep -q "^registered architectures: bert gpt2" <<<"$out" || fail "architectures not listed: $out"
# 72 B s L h^2 (1 + s / (12 h) + V / (12 L h)) for B = 1, s = 1024, L = 40, h = 1536, V = 50304
# (TP 2 pads to 50432: V = 50432 here).
grep -qx "training FLOPs per sample of 1024 tokens: 7.82e+12" <<<"$out" || fail "FLOPs line: $out"
# Every head its own key/value head; the cache per token and TP rank: 2 L h e / t = 2 x 40 x 1536
# x 2 / 2 bytes.
grep -qx "key/value heads: 16 of 16 (head dim 96)" <<<"$out" || fail "key/value heads: $out"
grep -qx "KV cache per token and rank (generation, bf16): 122880 bytes" <<<"$out" ||
  fail "KV cache line: $out"

# Memory per rank, GPT-2 1.2B at TP 2 x PP 2 x DP 2, bf16, micro batch 4, 16 micro-batches per DP
# rank: stage 0's parameters (embeddings + 20 layers, per TP rank) and bytes by hand.
out=$("$bin" --model=gpt2-1.2b --tensor_model_parallel_size=2 --pipeline_model_parallel_size=2 \
  --data_parallel_size=2 --bf16 --micro_batch_size=4 --global_batch_size=128) ||
  fail "describe with a layout exited $?"
h=1536
p0=$((50432 / 2 * h + 1024 * h + 20 * ((12 * h * h + 7 * h) / 2 + 6 * h)))
# Per layer: s b h (10 + 24 / t + 5 a s / (h t)) bytes; stage 0 keeps both in-flight
# micro-batches' 20 layers and their embedding dropout masks (s b h each). Held (this stack, e = 2,
# rows = s b, f = 4 h, a = 16, t = 2): per layer (4 e h + 16) rows + e (4 h + 2 f) rows / t +
# (4 e h + 4 a) rows / t, and 21 residual-stream tensors of e rows h per set.
want=$(awk -v p="$p0" -v h="$h" 'BEGIN {
  g = 1024 * 1024 * 1024; sbh = 1024 * 4 * h; layer = sbh * (10 + 12 + 5 * 16 * 1024 / (h * 2));
  act = 40 * layer + 2 * sbh;
  rows = 1024 * 4; held_layer = (8 * h + 16) * rows + 2 * 12 * h * rows / 2 + (8 * h + 64) * rows / 2;
  held = 2 * (20 * held_layer + 21 * 2 * rows * h);
  printf "0 %d 20 %.3f %.3f %.3f 2 2 %.3f %.3f %.3f", p, 6 * p / g, 4 * p / g, 8 * p / g, act / g,
    (18 * p + act) / g, held / g }')
got=$(grep -E '^0 +[0-9]' <<<"$out" | tr -s ' ')
[[ "$got" == "$want" ]] || fail "stage 0 memory: got '$got', want '$want' in: $out"
grep -q "^memory per rank: TP 2 x PP 2 x DP 2, micro batch 4 x 1024 tokens, bf16 compute" <<<"$out" ||
  fail "no memory header in: $out"

err=$("$bin" --model=gpt2-1.2b --pipeline_model_parallel_size=3 2>&1 >/dev/null) &&
  fail "PP 3 accepted for 40 layers"
grep -q "does not divide into 3 pipeline stages" <<<"$err" || fail "unclear error: $err"
err=$("$bin" --model=gpt2-1.2b --recompute_granularity=some 2>&1 >/dev/null) &&
  fail "--recompute_granularity=some accepted"
grep -q "recompute_granularity=some: must be one of none, full, selective" <<<"$err" ||
  fail "unclear error: $err"

err=$("$bin" --model=gpt2-1.2b --tensor_model_parallel_size=3 2>&1 >/dev/null) && fail "TP 3 accepted"
[[ $(wc -l <<<"$err") -eq 1 ]] || fail "error is not one line: $err"
grep -q "not divisible by tensor_model_parallel_size 3" <<<"$err" || fail "unclear error: $err"

err=$("$bin" --model=no-such-model 2>&1 >/dev/null) && fail "unknown model accepted"
grep -q "unknown model 'no-such-model'; registered: " <<<"$err" || fail "unclear error: $err"
echo "PASS"

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

err=$("$bin" --model=gpt2-1.2b --tensor_model_parallel_size=3 2>&1 >/dev/null) && fail "TP 3 accepted"
[[ $(wc -l <<<"$err") -eq 1 ]] || fail "error is not one line: $err"
grep -q "not divisible by tensor_model_parallel_size 3" <<<"$err" || fail "unclear error: $err"

err=$("$bin" --model=no-such-model 2>&1 >/dev/null) && fail "unknown model accepted"
grep -q "unknown model 'no-such-model'; registered: " <<<"$err" || fail "unclear error: $err"
echo "PASS"

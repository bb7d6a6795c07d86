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

err=$("$bin" --model=gpt2-1.2b --tensor_model_parallel_size=3 2>&1 >/dev/null) && fail "TP 3 accepted"
[[ $(wc -l <<<"$err") -eq 1 ]] || fail "error is not one line: $err"
grep -q "not divisible by tensor_model_parallel_size 3" <<<"$err" || fail "unclear error: $err"

err=$("$bin" --model=no-such-model 2>&1 >/dev/null) && fail "unknown model accepted"
grep -q "unknown model 'no-such-model'; registered: " <<<"$err" || fail "unclear error: $err"
echo "PASS"

#!/bin/bash
# End-to-end check of //checkpoint:reshard_checkpoint: converts a synthetic TP=2 checkpoint to TP=4,
# TP=1 and back to 2, verifying every shard against the synthetic model; then its error paths,
# each a one-line error with a non-zero exit (a TP size that splits key/value groups among them).
set -uo pipefail
tool="$1"
fixture="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/reshard"
rm -rf "$tmp"
mkdir -p "$tmp"
fail() { echo "FAIL: $*" >&2; exit 1; }

# expect_error SUBSTRING ARGS...: the tool fails with exactly one stderr line containing SUBSTRING.
expect_error() {
  local want="$1"
  shift
  local err
  err=$("$tool" "$@" 2>&1 >/dev/null) && fail "accepted: $*"
  [[ $(wc -l <<<"$err") -eq 1 ]] || fail "error is not one line for $*: $err"
  grep -qF -- "$want" <<<"$err" || fail "unclear error for $*: $err (wanted: $want)"
  echo "ok: $err"
}

"$fixture" --mode=write --dir="$tmp/src" --tp=2 --iteration=100 || fail "fixture write"

out=$("$tool" --load="$tmp/src" --save="$tmp/tp4" --tensor_model_parallel_size=4) ||
  fail "reshard to 4 exited $?"
echo "$out"
grep -qF "resharded iteration 100 of $tmp/src from tensor_model_parallel_size 2 to 4 (padded vocabulary 40 -> 48)" <<<"$out" ||
  fail "unexpected output: $out"
"$fixture" --mode=verify --dir="$tmp/tp4" --tp=4 --source_tp=2 --iteration=100 || fail "TP=4 content"

"$tool" --load="$tmp/src" --save="$tmp/tp1" --tensor_model_parallel_size=1 --iteration=100 ||
  fail "reshard to 1 exited $?"
"$fixture" --mode=verify --dir="$tmp/tp1" --tp=1 --source_tp=2 --iteration=100 || fail "TP=1 content"

"$tool" --load="$tmp/tp4" --save="$tmp/back2" --tensor_model_parallel_size=2 ||
  fail "reshard 4 -> 2 exited $?"
"$fixture" --mode=verify --dir="$tmp/back2" --tp=2 --source_tp=2 --iteration=100 ||
  fail "TP=4 -> 2 content"
[[ $(cat "$tmp/back2/latest_checkpointed_iteration.txt") == "100" ]] || fail "pointer not written"

# Error paths.
mkdir -p "$tmp/empty"
expect_error "--load is required" --save="$tmp/x" --tensor_model_parallel_size=2
expect_error "--save is required" --load="$tmp/src" --tensor_model_parallel_size=2
expect_error "--tensor_model_parallel_size must be >= 1 (got 0)" --load="$tmp/src" --save="$tmp/x"
expect_error "--iteration must be >= 0" --load="$tmp/src" --save="$tmp/x" \
  --tensor_model_parallel_size=2 --iteration=-5
expect_error "unexpected argument 'stray'" --load="$tmp/src" --save="$tmp/x" \
  --tensor_model_parallel_size=2 stray
expect_error "checkpoint directory $tmp/missing does not exist" --load="$tmp/missing" \
  --save="$tmp/x" --tensor_model_parallel_size=2
expect_error "no checkpoint in $tmp/empty" --load="$tmp/empty" --save="$tmp/x" \
  --tensor_model_parallel_size=2
expect_error "no checkpoint shard $tmp/src/iter_0000099/mp_rank_00" --load="$tmp/src" \
  --save="$tmp/x" --tensor_model_parallel_size=2 --iteration=99
expect_error "tensor 'layers.0.dense.weight' of global shape [6, 8] cannot be split on dim 1 over tensor_model_parallel_size 3" \
  --load="$tmp/src" --save="$tmp/x" --tensor_model_parallel_size=3
expect_error "already exists" --load="$tmp/src" --save="$tmp/tp4" --tensor_model_parallel_size=4
expect_error "must differ from the source" --load="$tmp/src" --save="$tmp/src/" \
  --tensor_model_parallel_size=4
[[ -e "$tmp/x" && -n "$(ls -A "$tmp/x" 2>/dev/null)" ]] && fail "a failed run left files in $tmp/x"

cp -r "$tmp/src" "$tmp/bad_pointer"
echo "not a number" >"$tmp/bad_pointer/latest_checkpointed_iteration.txt"
expect_error "latest_checkpointed_iteration.txt: expected an iteration number" \
  --load="$tmp/bad_pointer" --save="$tmp/x" --tensor_model_parallel_size=2

cp -r "$tmp/src" "$tmp/incomplete"
rm -rf "$tmp/incomplete/iter_0000100/mp_rank_01"
expect_error "shard mp_rank_01 of 2 is missing" --load="$tmp/incomplete" --save="$tmp/x" \
  --tensor_model_parallel_size=2

cp -r "$tmp/src" "$tmp/truncated"
truncate -s 100 "$tmp/truncated/iter_0000100/mp_rank_00/model_optim.safetensors"
expect_error "model_optim.safetensors has 100 bytes" --load="$tmp/truncated" --save="$tmp/x" \
  --tensor_model_parallel_size=2

"$fixture" --mode=write --dir="$tmp/novocab" --tp=2 --config_json='{"hidden_size": 6}' ||
  fail "fixture write"
expect_error "lacks positive integers vocab_size and make_vocab_size_divisible_by" \
  --load="$tmp/novocab" --save="$tmp/x" --tensor_model_parallel_size=2

# Grouped-query attention: each rank must hold whole key/value groups.
"$fixture" --mode=write --dir="$tmp/gqa" --tp=2 --config_json='{"vocab_size": 37,
  "make_vocab_size_divisible_by": 8, "group_query_attention": true, "num_query_groups": 2}' ||
  fail "fixture write"
expect_error "has 2 key/value groups (num_query_groups), which tensor_model_parallel_size 4 does not divide" \
  --load="$tmp/gqa" --save="$tmp/x" --tensor_model_parallel_size=4

echo "PASS"

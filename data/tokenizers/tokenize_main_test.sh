#!/usr/bin/env bash
# Tests the //data:tokenize tool end to end: ids out, text back, and one-line errors with a
# non-zero exit for bad flags, missing files, bad ids and missing assets.
set -uo pipefail

tool="${TEST_SRCDIR}/megatron_cpp/data/tokenize"
tmp="${TEST_TMPDIR:-/tmp}"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

expect_stdout() {  # expect_stdout WANT ARGS...
  local want="$1"; shift
  local got
  got=$("$tool" "$@" 2>"$tmp/stderr") || fail "exit $? for: $*"
  [[ "$got" == "$want" ]] || fail "for $*: got '$got', want '$want'"
}

expect_error() {  # expect_error SUBSTRING ARGS...: non-zero exit, one stderr line containing SUBSTRING
  local want="$1"; shift
  if "$tool" "$@" >"$tmp/stdout" 2>"$tmp/stderr"; then fail "exit 0 for: $*"; fi
  [[ $(wc -l <"$tmp/stderr") -eq 1 ]] || fail "stderr is not one line for $*: $(cat "$tmp/stderr")"
  grep -qF -- "$want" "$tmp/stderr" || fail "stderr lacks '$want' for $*: $(cat "$tmp/stderr")"
  [[ ! -s "$tmp/stdout" ]] || fail "stdout not empty for $*"
}

printf 'Hello world' >"$tmp/hello.txt"
expect_stdout "15496 995" --tokenizer=gpt2 --input="$tmp/hello.txt"
expect_stdout "7592 2088" --tokenizer=bert --input="$tmp/hello.txt"
printf '15496\n 995 \n' >"$tmp/ids.txt"
expect_stdout "Hello world" --tokenizer=gpt2 --input="$tmp/ids.txt" --decode
printf '101 7592 2088 102' >"$tmp/bert_ids.txt"
expect_stdout "[CLS] hello world [SEP]" --tokenizer=bert --input="$tmp/bert_ids.txt" --decode

# Round trip of a multi-line UTF-8 file through ids (GPT-2 is lossless).
printf 'Line one.\n\tÜber   naïve 中文 😀\r\n  trailing  \n' >"$tmp/text.txt"
"$tool" --tokenizer=gpt2 --input="$tmp/text.txt" >"$tmp/text.ids" || fail "encode text.txt"
[[ $(wc -l <"$tmp/text.ids") -eq 1 ]] || fail "ids are not on one line"
"$tool" --tokenizer=gpt2 --input="$tmp/text.ids" --decode >"$tmp/text.out" || fail "decode"
cmp -s "$tmp/text.txt" "$tmp/text.out" || fail "round trip changed the text"

expect_error "unknown tokenizer 'xlnet'" --tokenizer=xlnet --input="$tmp/hello.txt"
expect_error "--tokenizer is required" --input="$tmp/hello.txt"
expect_error "--input is required" --tokenizer=gpt2
expect_error "cannot open --input=$tmp/missing.txt" --tokenizer=gpt2 --input="$tmp/missing.txt"
expect_error "unknown command line flag 'bogus'" --tokenizer=gpt2 --bogus
expect_error "'Hello' is not a token id" --tokenizer=gpt2 --input="$tmp/hello.txt" --decode
printf '1 50257' >"$tmp/bad_ids.txt"
expect_error "id 50257 at position 1" --tokenizer=gpt2 --input="$tmp/bad_ids.txt" --decode
MT_ASSETS_DIR="$tmp/no_assets" expect_error "tools/setup.sh" --tokenizer=bert --input="$tmp/hello.txt"

if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "all checks passed"

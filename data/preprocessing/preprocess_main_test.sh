#!/usr/bin/env bash
# Tests the //data:preprocess tool end to end: the summary, one-line errors with a non-zero exit
# and no output files, and (small scale) that peak RSS does not grow with the input: a 10x larger
# input may add at most a quarter of its extra size to the peak RSS (holding the input would add
# all of it). The 5x / 50x fortunes measurement is preprocess_benchmark.sh (docs/perf/preprocess.md).
set -uo pipefail

tool="${TEST_SRCDIR}/megatron_cpp/data/preprocess"
tmp="${TEST_TMPDIR:-/tmp}/preprocess_main_test"
rm -rf "$tmp" && mkdir -p "$tmp"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

summary_value() {  # summary_value KEY FILE
  sed -n "s/^$1: //p" "$2"
}

expect_error() {  # expect_error SUBSTRING ARGS...: exit != 0, one stderr line, no files at $tmp/err*
  local want="$1"; shift
  if "$tool" "$@" >"$tmp/stdout" 2>"$tmp/stderr"; then fail "exit 0 for: $*"; fi
  [[ $(wc -l <"$tmp/stderr") -eq 1 ]] || fail "stderr is not one line for $*: $(cat "$tmp/stderr")"
  grep -qF -- "$want" "$tmp/stderr" || fail "stderr lacks '$want' for $*: $(cat "$tmp/stderr")"
  if compgen -G "$tmp/err*" >/dev/null; then fail "left files for $*: $(ls "$tmp"/err*)"; fi
}

# A small jsonl corpus.
printf '{"text": "Hello world"}\n{"text": ""}\n{"id": 3, "text": "Second doc."}\n' >"$tmp/in.jsonl"
if "$tool" --input="$tmp/in.jsonl" --tokenizer=gpt2 --output_prefix="$tmp/out" --append_eod \
    >"$tmp/summary" 2>"$tmp/stderr"; then
  [[ $(summary_value documents "$tmp/summary") == 2 ]] || fail "documents: $(cat "$tmp/summary")"
  [[ $(summary_value empty_documents_skipped "$tmp/summary") == 1 ]] || fail "empty documents"
  [[ $(summary_value sequences "$tmp/summary") == 2 ]] || fail "sequences"
  # "Hello world" = 15496 995, "Second doc." = 12211 2205 13, plus two EODs.
  [[ $(summary_value tokens "$tmp/summary") == 7 ]] || fail "tokens: $(cat "$tmp/summary")"
  [[ $(summary_value bytes_in "$tmp/summary") == $(stat -c %s "$tmp/in.jsonl") ]] || fail "bytes_in"
  out_bytes=$(( $(stat -c %s "$tmp/out.bin") + $(stat -c %s "$tmp/out.idx") ))
  [[ $(summary_value bytes_out "$tmp/summary") == "$out_bytes" ]] || fail "bytes_out"
  [[ $(stat -c %s "$tmp/out.bin") == 14 ]] || fail "out.bin is not 7 u16 tokens"
  grep -q '^peak_rss_mb: [0-9.]*$' "$tmp/summary" || fail "no peak RSS"
  grep -q '^preprocess: input=.*tokenizer=gpt2' "$tmp/summary" || fail "no settings line"
else
  fail "preprocess of in.jsonl: $(cat "$tmp/stderr")"
fi

# Errors.
printf '{"text": "ok"}\n{"text": "broken\n' >"$tmp/bad.jsonl"
printf '{"text": "ok"}\n{"body": "no text"}\n' >"$tmp/nokey.jsonl"
expect_error "cannot open input $tmp/missing.jsonl" --input="$tmp/missing.jsonl" --tokenizer=gpt2 \
  --output_prefix="$tmp/err"
expect_error "$tmp/bad.jsonl:2: not valid JSON" --input="$tmp/bad.jsonl" --tokenizer=gpt2 \
  --output_prefix="$tmp/err"
expect_error "$tmp/nokey.jsonl:2: no key 'text'" --input="$tmp/nokey.jsonl" --tokenizer=bert \
  --output_prefix="$tmp/err"
expect_error "unknown tokenizer 'xlnet'" --input="$tmp/in.jsonl" --tokenizer=xlnet \
  --output_prefix="$tmp/err"
expect_error "has no end-of-document token" --input="$tmp/in.jsonl" --tokenizer=bert --append_eod \
  --output_prefix="$tmp/err"
expect_error "--input_format=csv: must be one of jsonl, text" --input="$tmp/in.jsonl" \
  --input_format=csv --tokenizer=gpt2 --output_prefix="$tmp/err"
expect_error "--input is required" --tokenizer=gpt2 --output_prefix="$tmp/err"
expect_error "--output_prefix is required" --input="$tmp/in.jsonl" --tokenizer=gpt2
expect_error "--tokenizer is required" --input="$tmp/in.jsonl" --output_prefix="$tmp/err"
expect_error "unexpected argument 'extra'" --input="$tmp/in.jsonl" --tokenizer=gpt2 \
  --output_prefix="$tmp/err" extra
MT_ASSETS_DIR="$tmp/no_assets" expect_error "tools/setup.sh" --input="$tmp/in.jsonl" \
  --tokenizer=gpt2 --output_prefix="$tmp/err"

# Peak RSS against input size: ~2 MB and ~20 MB of text documents of ~1 KB, in 0.1 MB chunks so
# that both inputs fill the pipeline (at most 2 x workers + 2 chunks in flight).
awk 'BEGIN {
  srand(1); n = split("The quick brown fox jumps over the lazy dog. Mr. Smith said hello, world! Why? Because 42 is the answer.", w, " ");
  for (d = 1; d <= 2100; d++) {
    for (i = 0; i < 170; i++) printf "%s ", w[int(rand() * n) + 1];
    printf "%d\n%%\n", d;
  }
}' >"$tmp/small.txt"
for i in $(seq 10); do cat "$tmp/small.txt"; done >"$tmp/big.txt"
declare -A rss
for size in small big; do
  if "$tool" --input="$tmp/$size.txt" --input_format=text --document_separator=% \
      --tokenizer=gpt2 --append_eod --workers=2 --chunk_mb=0.1 --output_prefix="$tmp/rss_$size" \
      >"$tmp/summary_$size" 2>"$tmp/stderr"; then
    rss[$size]=$(summary_value peak_rss_mb "$tmp/summary_$size")
  else
    fail "preprocess $size.txt: $(cat "$tmp/stderr")"
    rss[$size]=0
  fi
done
small_mb=$(awk -v b="$(stat -c %s "$tmp/small.txt")" 'BEGIN { print b / 1e6 }')
big_mb=$(awk -v b="$(stat -c %s "$tmp/big.txt")" 'BEGIN { print b / 1e6 }')
echo "peak RSS: ${rss[small]} MB for $small_mb MB of input, ${rss[big]} MB for $big_mb MB"
if [[ -n "${ASAN_OPTIONS:-}" ]]; then
  # --config=asan: AddressSanitizer's quarantine holds freed memory, so RSS follows the bytes
  # allocated, not those live; the bound is this build's to check, not the sanitizer's.
  echo "peak RSS bound not checked under AddressSanitizer"
else
  awk -v s="${rss[small]}" -v b="${rss[big]}" -v si="$small_mb" -v bi="$big_mb" \
    'BEGIN { exit !(s > 0 && b - s < 0.25 * (bi - si)) }' ||
    fail "peak RSS grew from ${rss[small]} MB to ${rss[big]} MB with the input ($small_mb -> $big_mb MB)"
fi
[[ $(summary_value documents "$tmp/summary_big") == 21000 ]] || fail "big.txt documents"

if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "all checks passed"

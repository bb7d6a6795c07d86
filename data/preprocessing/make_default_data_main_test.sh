#!/usr/bin/env bash
# Tests the //data:make_default_data tool on a small temporary corpus: builds both datasets into
# --output_dir (or $MT_DATA_DIR), skips them when up to date, rebuilds with --force, and fails
# with one line for a missing corpus.
set -uo pipefail

tool="${TEST_SRCDIR}/megatron_cpp/data/make_default_data"
dump="${TEST_SRCDIR}/megatron_cpp/data/dump_dataset"
tmp="${TEST_TMPDIR:-/tmp}/make_default_data_main_test"
rm -rf "$tmp" && mkdir -p "$tmp/corpus"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

printf 'Hello world. Second sentence here.\n%%\nAnother fortune!\n%%\n' >"$tmp/corpus/one"
printf 'binary index' >"$tmp/corpus/one.dat"

run() {  # run ARGS...: stdout to $tmp/out, must succeed
  "$tool" "$@" >"$tmp/out" 2>"$tmp/err" || fail "exit $? for $*: $(cat "$tmp/err")"
}

run --corpus_dir="$tmp/corpus" --output_dir="$tmp/data" --workers=1
grep -q "fortunes_gpt2_text_document: built (2 documents, 2 sequences" "$tmp/out" ||
  fail "gpt2 not built: $(cat "$tmp/out")"
grep -q "fortunes_bert_text_sentence: built (2 documents, 3 sequences" "$tmp/out" ||
  fail "bert not built: $(cat "$tmp/out")"
for f in fortunes_gpt2_text_document fortunes_bert_text_sentence; do
  for ext in bin idx stamp; do [[ -s "$tmp/data/$f.$ext" ]] || fail "missing $f.$ext"; done
done
# "Hello world. Second sentence here." + EOD, "Another fortune!" + EOD (GPT-2 ids).
"$dump" --prefix="$tmp/data/fortunes_gpt2_text_document" >"$tmp/dump" || fail "dump_dataset"
grep -q "^15496 995 13 5498 6827 994 13 50256$" "$tmp/dump" || fail "gpt2 ids: $(cat "$tmp/dump")"
grep -q "^6610 15807 0 50256$" "$tmp/dump" || fail "gpt2 ids: $(cat "$tmp/dump")"

MT_DATA_DIR="$tmp/data" run --corpus_dir="$tmp/corpus"
[[ $(grep -c ": up to date$" "$tmp/out") == 2 ]] || fail "not up to date: $(cat "$tmp/out")"
MT_CORPUS_DIR="$tmp/corpus" run --output_dir="$tmp/data" --force
[[ $(grep -c ": built" "$tmp/out") == 2 ]] || fail "--force did not rebuild: $(cat "$tmp/out")"

if "$tool" --corpus_dir="$tmp/none" --output_dir="$tmp/data2" >"$tmp/out" 2>"$tmp/err"; then
  fail "exit 0 for a missing corpus"
fi
[[ $(wc -l <"$tmp/err") -eq 1 ]] || fail "stderr is not one line: $(cat "$tmp/err")"
grep -q "corpus directory $tmp/none not found" "$tmp/err" || fail "message: $(cat "$tmp/err")"

if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "all checks passed"

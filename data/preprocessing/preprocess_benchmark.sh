#!/usr/bin/env bash
# Preprocessing throughput and peak RSS on corpora N times the size of the embedded default
# corpus (the Debian fortunes text), to show that memory does not grow with the input.
#
#   bazel run -c opt //data/preprocessing:preprocess_benchmark -- [COPIES...]   # default: 5 50
#
# For each COPIES it writes $BENCH_DIR/fortunes_xCOPIES.txt (default BENCH_DIR=/tmp/preprocess_bench):
# the fortunes corpus repeated COPIES times, each document's first line prefixed with "[copy.doc] "
# so that no two documents are identical. It then preprocesses it with the GPT-2 tokenizer and EOD
# (or $TOKENIZER; bert adds --split_sentences) once per worker count in $WORKERS (default "1 2")
# and prints one table row per run: input MB, documents, tokens, seconds, MB/s, peak RSS.
# Results for this project are in docs/perf/preprocess.md.
set -euo pipefail

tool="$(cd "$(dirname "$0")" && pwd)/../preprocess"
[[ -x "$tool" ]] || tool="${RUNFILES_DIR:-$0.runfiles}/megatron_cpp/data/preprocess"
corpus_dir="${MT_CORPUS_DIR:-/usr/share/games/fortunes}"
bench_dir="${BENCH_DIR:-/tmp/preprocess_bench}"
tokenizer="${TOKENIZER:-gpt2}"
workers_list="${WORKERS:-1 2}"
copies_list=("$@")
[[ ${#copies_list[@]} -gt 0 ]] || copies_list=(5 50)
mkdir -p "$bench_dir"

# The corpus files, as make_default_data lists them: regular files without .dat / .u8.
mapfile -t files < <(find "$corpus_dir" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' | sort)
[[ ${#files[@]} -gt 0 ]] || { echo "no corpus files in $corpus_dir (run tools/setup.sh)" >&2; exit 1; }

extra=(--append_eod)
[[ "$tokenizer" == bert ]] && extra=(--split_sentences)

printf '| copies | input MB | documents | tokens | workers | seconds | MB/s | peak RSS MB |\n'
printf '|---:|---:|---:|---:|---:|---:|---:|---:|\n'
for copies in "${copies_list[@]}"; do
  input="$bench_dir/fortunes_x$copies.txt"
  if [[ ! -s "$input" ]]; then
    for ((k = 1; k <= copies; k++)); do
      # Each file is closed with a separator line unless it ends with one, so that documents
      # never run into the next file and no empty ones appear.
      for f in "${files[@]}"; do
        cat "$f"
        [[ -z "$(tail -c 1 "$f")" ]] || printf '\n'  # $(...) drops a final newline.
        [[ "$(tail -n 1 "$f")" == "%" ]] || printf '%%\n'
      done |
        awk -v k="$k" 'BEGIN { d = 1; first = 1 }
          $0 == "%" { print; if (!first) d++; first = 1; next }
          first { printf "[%d.%d] %s\n", k, d, $0; first = 0; next }
          { print }'
    done >"$input.tmp"
    mv "$input.tmp" "$input"
  fi
  for workers in $workers_list; do
    summary=$("$tool" --input="$input" --input_format=text --document_separator=% \
      --tokenizer="$tokenizer" "${extra[@]}" --workers="$workers" --progress_interval_s=1000 \
      --output_prefix="$bench_dir/out_${tokenizer}_x${copies}_w$workers")
    value() { sed -n "s/^$1: //p" <<<"$summary"; }
    printf '| %d | %.1f | %d | %d | %d | %.2f | %.1f | %.1f |\n' "$copies" \
      "$(awk -v b="$(value bytes_in)" 'BEGIN { print b / 1e6 }')" "$(value documents)" \
      "$(value tokens)" "$workers" "$(value seconds)" "$(value mb_per_s)" "$(value peak_rss_mb)"
  done
done

#!/usr/bin/env bash
# Runs one fuzz target (tools/defs.bzl mt_fuzz_test) under libFuzzer for as long as you want:
# builds it with --config=fuzz (clang-16, ASan + UBSan + coverage), then fuzzes from its seeds.
#
#   tools/fuzz.sh //data/indexed:idx_fuzz 600 [libFuzzer flags...]
#
# The corpus libFuzzer grows is kept in $MT_FUZZ_DIR/<target> (default
# ~/.cache/megatron-cpp/fuzz/<pkg>_<target>/corpus), so a later run continues from it; the seeds
# (<pkg>/testdata/fuzz/<target>/) are read but never written. A crashing, leaking or hanging input
# is written to .../crashes/ and ends the run with a non-zero exit and libFuzzer's report; make it
# a seed (copy it into the seed directory) and fix the reader. The last line libFuzzer prints,
# "Done N runs in S second(s)", says how many inputs ran. `bazel-bin/.../TARGET crash-file`
# (after the build) replays one input; the regression form in the default build runs as a test.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

usage() {
  echo "usage: tools/fuzz.sh //PKG:TARGET SECONDS [libFuzzer flags...]" >&2
  exit 2
}
[[ $# -ge 2 && "$2" =~ ^[0-9]+$ ]] || usage
[[ "$1" =~ ^//([^:]+):([A-Za-z0-9_]+)$ ]] || usage
target=$1 seconds=$2
pkg=${BASH_REMATCH[1]} name=${BASH_REMATCH[2]}
shift 2
seeds="$pkg/testdata/fuzz/$name"
[[ -d "$seeds" ]] || { echo "fuzz: no seed directory $seeds" >&2; exit 2; }

./bazelw build --config=fuzz "$target"
binary="$(./bazelw info --config=fuzz bazel-bin 2>/dev/null)/$pkg/$name"

work="${MT_FUZZ_DIR:-$HOME/.cache/megatron-cpp/fuzz}/${pkg//\//_}_$name"
mkdir -p "$work/corpus" "$work/crashes"
echo "fuzz: $target for ${seconds}s; corpus $work/corpus, crashes to $work/crashes/" >&2
# Inputs up to 64 KiB; an input running over 10 s is a hang.
exec "$binary" -max_total_time="$seconds" -timeout=10 -max_len=65536 -print_final_stats=1 \
  -artifact_prefix="$work/crashes/" "$@" "$work/corpus" "$seeds"

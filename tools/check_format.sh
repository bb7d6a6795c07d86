#!/usr/bin/env bash
# Checks that every C++ and CUDA source in the repository is formatted by the tree's .clang-format
# (Google style, 100 columns). Reports each file that is not, with the command that fixes it.
#
#   tools/check_format.sh          exit 0 and "format: N files clean"
#   tools/check_format.sh --fix    formats them in place
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

command -v clang-format > /dev/null || { echo "format: clang-format is not installed (tools/setup.sh installs it)" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
if [[ "${1:-}" == "--fix" ]]; then
  clang-format -i "${files[@]}"
  exit
fi
# Files in batches of 40, one clang-format per batch, a batch per core: each file it would change
# gets "FILE:LINE:COL: error: code should be clang-formatted" lines on stderr.
out=$(printf '%s\0' "${files[@]}" |
  xargs -0 -n 40 -P "$(nproc)" clang-format --dry-run --Werror 2>&1 > /dev/null)
rc=$?
mapfile -t bad < <(sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' \
  <<<"$out" | sort -u)
if [[ $rc -ne 0 && ${#bad[@]} -eq 0 ]]; then  # clang-format itself failed
  echo "$out" | head -20 >&2
  echo "format: clang-format failed (exit $rc)" >&2
  exit 1
fi
if [[ ${#bad[@]} -gt 0 ]]; then
  printf 'format: not formatted: %s\n' "${bad[@]}" >&2
  echo "format: ${#bad[@]} of ${#files[@]} files differ; run tools/check_format.sh --fix" >&2
  exit 1
fi
echo "format: ${#files[@]} files clean"

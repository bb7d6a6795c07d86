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
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" > /dev/null 2>&1 || bad+=("$f")
done
if [[ ${#bad[@]} -gt 0 ]]; then
  printf 'format: not formatted: %s\n' "${bad[@]}" >&2
  echo "format: ${#bad[@]} of ${#files[@]} files differ; run tools/check_format.sh --fix" >&2
  exit 1
fi
echo "format: ${#files[@]} files clean"

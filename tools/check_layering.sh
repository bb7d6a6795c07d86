#!/usr/bin/env bash
# Proves that Bazel enforces the layering (root BUILD, docs/architecture.md): for each layer, a
# throwaway package in the layer just below that depends on one of the layer's targets must fail
# to build with "not visible", and one in the layer itself must build. Analysis only (--nobuild),
# so it takes seconds once Bazel is warm. The probe packages are removed on exit.
#
# A model-variant package links the jobs' public main()s (models/variant.bzl), never experiments/:
# a probe there that depends on experiments/ must be refused too.
#
#   tools/check_layering.sh        exit 0 and "layering: N of N upward dependencies refused"
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Bottom to top: a directory and a target of each layer.
layers=(core:core:tensor comm:comm:communicator nn:nn:context data:data/indexed:indexed_dataset
        models:models:count checkpoint:checkpoint:safetensors train:train:trainer
        serve:serve:sampling eval:eval:wikitext jobs:jobs/pretrain:pretrain_lib
        experiments:experiments/common:report)
probe=layering_probe
probes=()
trap 'rm -rf "${probes[@]}"' EXIT

write_probe() {  # DIR DEP (DIR is a new directory, removed on exit)
  mkdir -p "$1/$probe"
  probes+=("$1")
  printf 'cc_library(name = "probe", deps = ["%s"])\n' "$2" > "$1/$probe/BUILD"
}

upward=() allowed=()
for ((i = 1; i < ${#layers[@]}; ++i)); do
  IFS=: read -r lower_dir lower_pkg lower_name <<<"${layers[i - 1]}"
  IFS=: read -r dir pkg name <<<"${layers[i]}"
  write_probe "$lower_dir/upward_$dir" "//$pkg:$name"
  upward+=("//$lower_dir/upward_$dir/$probe:probe")
  write_probe "$dir/downward_$lower_dir" "//$lower_pkg:$lower_name"
  allowed+=("//$dir/downward_$lower_dir/$probe:probe")
done

write_probe models/variants/upward_experiments "//experiments/common:report"
upward+=("//models/variants/upward_experiments/$probe:probe")

if ! out=$(./bazelw build --nobuild "${allowed[@]}" 2>&1); then
  echo "$out" | grep -E "ERROR" | head -20
  echo "layering: a dependency on the layer below was refused"
  exit 1
fi
out=$(./bazelw build --nobuild --keep_going "${upward[@]}" 2>&1)
refused=0
for target in "${upward[@]}"; do
  if grep -qF "is not visible from target '${target}'" <<<"$out"; then
    refused=$((refused + 1))
  else
    echo "layering: ${target} was not refused"
  fi
done
echo "layering: ${refused} of ${#upward[@]} upward dependencies refused, ${#allowed[@]} downward ones built"
[[ $refused -eq ${#upward[@]} ]]

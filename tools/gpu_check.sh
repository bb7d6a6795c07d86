#!/usr/bin/env bash
# GPU check: one prepared script for a machine with an NVIDIA GPU but (perhaps) no Bazel.
#
#   tools/gpu_check.sh bundle   # HERE (any machine with Bazel + CUDA toolkit): build every test
#                               # target tagged "gpu" and every GPU benchmark, copy the binaries
#                               # and the shared libraries they need (except CUDA's own) into
#                               # gpu_bundle/ (git-ignored, < 64 MiB)
#   tools/gpu_check.sh run      # THERE (the GPU machine, repo root, gpu_bundle/ carried along):
#                               # run every test binary and benchmark in gpu_bundle/, write the
#                               # log to $OUT (or ./gpu_check_out) and print a table last
#
# On the GPU machine, cuBLAS(Lt) and NCCL are too large to carry; they are found in the CUDA
# toolkit there (/usr/local/cuda/lib64) or in its Python environment (site-packages/nvidia/*/lib).
# Everything must finish within 8 minutes (each binary is killed after PER_BINARY_TIMEOUT).
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bundle="$root/gpu_bundle"
PER_BINARY_TIMEOUT=${PER_BINARY_TIMEOUT:-180}

# GPU benchmarks: "package:target args...".
GPU_BENCHMARKS=(
  "core/ops:ops_cuda_bench --iters=20"  # per-op bandwidth vs d2d copy; cuBLASLt bf16 GEMM rates
)

do_bundle() {
  cd "$root"
  mapfile -t tests < <(bazel query 'attr(tags, "\bgpu\b", tests(//...))' 2>/dev/null)
  if [[ ${#tests[@]} -eq 0 ]]; then
    echo "gpu_check: no test targets tagged gpu" >&2
    exit 1
  fi
  targets=("${tests[@]}")
  for b in "${GPU_BENCHMARKS[@]}"; do targets+=("//${b%% *}"); done
  ./bazelw build --config=cuda "${targets[@]}" || exit 1
  rm -rf "$bundle"
  mkdir -p "$bundle/bin" "$bundle/lib"
  for t in "${targets[@]}"; do
    path="bazel-bin/${t#//}"
    path="${path/://}"
    cp "$path" "$bundle/bin/$(basename "$path")"
  done
  printf '%s\n' "${GPU_BENCHMARKS[@]}" > "$bundle/benchmarks.txt"
  # Shared libraries the binaries need, except glibc's and the CUDA libraries found there.
  for bin in "$bundle"/bin/*; do
    ldd "$bin" | awk '/=> \// {print $3}'
  done | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda.so*|libcublas*|libnccl*|libcudart*) ;;
      *) cp -L "$lib" "$bundle/lib/" ;;
    esac
  done
  # Symbols are not needed there; stripping keeps the bundle under the 64 MiB a device call carries.
  strip --strip-unneeded "$bundle"/bin/* "$bundle"/lib/* 2>/dev/null || true
  du -sh "$bundle"
}

do_run() {
  cd "$root"
  [[ -d "$bundle/bin" ]] || { echo "gpu_check: $bundle/bin missing; run 'tools/gpu_check.sh bundle' first" >&2; exit 1; }
  out="${OUT:-$root/gpu_check_out}"
  mkdir -p "$out"
  log="$out/gpu_check.log"
  libpath="$bundle/lib:/usr/local/cuda/lib64"
  for d in $(python3 -c 'import site,glob; [print(p) for s in site.getsitepackages() for p in glob.glob(s+"/nvidia/*/lib")]' 2>/dev/null); do
    libpath="$libpath:$d"
  done
  export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  {
    echo "gpu_check $(date -u +%FT%TZ) on $(hostname)"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
  } | tee "$log"
  table=()
  for bin in "$bundle"/bin/*_test; do
    name=$(basename "$bin")
    start=$(date +%s)
    timeout "$PER_BINARY_TIMEOUT" "$bin" >"$out/$name.log" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    passed=$(grep -c '^\[       OK \]' "$out/$name.log")
    skipped=$(grep -c '^\[  SKIPPED \]' "$out/$name.log")
    failed=$(grep -c '^\[  FAILED  \].*(' "$out/$name.log")
    cat "$out/$name.log" >> "$log"
    table+=("$(printf '%-32s rc=%-3s ok=%-4s skipped=%-3s failed=%-3s %4ss' "$name" "$rc" "$passed" "$skipped" "$failed" "$secs")")
  done
  while read -r line; do
    [[ -z "$line" ]] && continue
    name=$(basename "${line%% *}")
    args="${line#* }"
    [[ "$args" == "$line" ]] && args=""
    echo "=== benchmark $name $args" >> "$log"
    timeout "$PER_BINARY_TIMEOUT" "$bundle/bin/${name##*:}" $args >> "$log" 2>&1
    table+=("$(printf '%-32s rc=%-3s (benchmark; see log)' "${name##*:}" "$?")")
  done < "$bundle/benchmarks.txt"
  echo "=== summary" | tee -a "$log"
  printf '%s\n' "${table[@]}" | tee -a "$log"
}

case "${1:-}" in
  bundle) do_bundle ;;
  run) do_run ;;
  *) echo "usage: tools/gpu_check.sh bundle|run" >&2; exit 2 ;;
esac

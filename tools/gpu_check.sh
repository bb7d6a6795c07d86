#!/usr/bin/env bash
# GPU check: one prepared script for a machine with an NVIDIA GPU but (perhaps) no Bazel and no
# OpenMPI.
#
#   tools/gpu_check.sh bundle   # HERE (any machine with Bazel + CUDA toolkit + OpenMPI): build
#                               # every test target tagged "gpu" and every GPU benchmark; pack the
#                               # binaries, the shared libraries they need (except CUDA's own) and
#                               # a relocatable mini OpenMPI into gpu_bundle/bundle.tar.xz
#                               # (git-ignored; < 64 MiB, what a device call carries)
#   tools/gpu_check.sh run      # THERE (the GPU machine, repo root, gpu_bundle/ carried along):
#                               # unpack the bundle under /tmp, run every test binary (multi-rank
#                               # ones under the carried mpirun) and benchmark, write the logs to
#                               # $OUT (or ./gpu_check_out) and print a table last
#
# On the GPU machine, cuBLAS(Lt) and NCCL are too large to carry; they are found in the CUDA
# toolkit there (/usr/local/cuda/lib64) or in its Python environment (site-packages/nvidia/*/lib).
# There is no Bazel and no OpenMPI there: the bundle carries Debian's, relocated (see mpi_env).
# Everything must finish within 8 minutes: each binary is killed after PER_BINARY_TIMEOUT seconds
# (or its sh_test's own limit, if lower), and nothing starts once TOTAL_BUDGET seconds are spent.
# tools/gpu_check_simulate.sh runs `run` here with the system OpenMPI hidden.
#
# The tree in bundle.tar.xz (gpu_bundle/CONTENTS.txt lists it):
#   bin/            single-process gtest binaries (listed in tests.txt), the binaries behind the
#                   multi-rank sh_tests (mpi_tests.txt) and the benchmarks (benchmarks.txt)
#   lib/            every shared library those, mpirun and the MPI plugins load, except glibc's
#                   and CUDA's
#   mpi/            Debian's OpenMPI 4.1 (configured --prefix=/usr --libdir=/usr/lib/x86_64-linux-
#                   gnu/openmpi/lib), relocated with OPAL_PREFIX=<tree>/mpi: bin/ (mpirun, orterun,
#                   orted, ompi_info), lib/x86_64-linux-gnu/openmpi/lib/openmpi3/ (the MCA plugins,
#                   less the InfiniBand/UCX/OFI/PSM/OpenSHMEM ones), share/openmpi/ (help files)
#                   and etc/ (Debian's /etc/openmpi, which OPAL_PREFIX does not relocate)
#   pmix/           Debian's PMIx 4 (prefix /usr/lib/x86_64-linux-gnu/pmix2), relocated with
#                   PMIX_PREFIX, PMIX_LIBDIR, ...: lib/pmix/ (plugins), share/pmix/ (help files)
#   mpi_tests.txt   one line per multi-rank sh_test: NAME NP TIMEOUT_S BINARY [ARGS...], from the
#                   sh_test's args in its BUILD file (they all run comm/mpi_test.sh NP TIMEOUT BIN)
#   scripts/        the other gpu sh_tests' scripts (e.g. jobs/pretrain/testing/cuda_driver_test.sh, which
#                   runs mpirun itself); script_tests.txt: NAME SCRIPT [ARGS...], where @bin:X is
#                   bin/X (a binary named by $(location ...) in the sh_test's args); and
#                   scripts/tools/test_env.sh, which they source (run with TEST_SRCDIR=<tree>,
#                   TEST_WORKSPACE=scripts)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bundle="$root/gpu_bundle"
PER_BINARY_TIMEOUT=${PER_BINARY_TIMEOUT:-180}
TOTAL_BUDGET=${TOTAL_BUDGET:-450}  # seconds for all binaries together (the device call: 8 min)

# GPU benchmarks: "package:target args...".
GPU_BENCHMARKS=(
  "core/ops:ops_cuda_bench --iters=20"  # per-op bandwidth vs d2d copy; cuBLASLt bf16 GEMM rates
  # Training steps in bf16 (tokens/s, model TFLOP/s, MFU against the measured bf16 GEMM rate,
  # device memory): GPT-2 124M and 355M, and the paper's 1.2B config (hidden 1536, 40 layers).
  "jobs/bench:train_step_bench --device=cuda --num_layers=12 --hidden_size=768 --num_attention_heads=12 --seq_length=1024 --micro_batch_size=8 --steps=5"
  "jobs/bench:train_step_bench --device=cuda --num_layers=24 --hidden_size=1024 --num_attention_heads=16 --seq_length=1024 --micro_batch_size=8 --steps=5"
  "jobs/bench:train_step_bench --device=cuda --num_layers=40 --hidden_size=1536 --num_attention_heads=16 --seq_length=1024 --micro_batch_size=8 --steps=3"
)

# Where Debian installs OpenMPI and PMIx, and the same paths relative to their prefixes.
SYS_MPI_PLUGINS=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
MPI_PLUGINS_REL=lib/x86_64-linux-gnu/openmpi/lib/openmpi3
SYS_PMIX=/usr/lib/x86_64-linux-gnu/pmix2
# OpenBLAS as Debian installs it (the alternatives link to the pthread or OpenMP build).
SYS_OPENBLAS=/usr/lib/x86_64-linux-gnu/libopenblas.so.0
# MCA plugins not carried: fabrics a single machine does not use (and their large libraries),
# OpenSHMEM, and anything that links one of these.
MPI_PLUGIN_DROP='libuc[pstm]\.|libfabric|libpsm|libinfinipath|libibverbs|librdmacm|libefa|libnl-|libmca_common_(verbs|ucx|ofi)|liboshmem'

# Prints "SONAME PATH" for each shared library the given ELF files load, except glibc's and
# CUDA's (the GPU machine has its own); "SONAME not-found" for unresolved ones.
needed_libs() {
  local f
  for f in "$@"; do ldd "$f" 2>/dev/null; done | awk '
    $2 == "=>" && $3 ~ /^\// {print $1, $3; next}
    $2 == "=>" && $3 == "not" {print $1, "not-found"}' | sort -u | while read -r name path; do
    case "$name" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libresolv.so*|libutil.so*|ld-linux*) ;;
      libcuda.so*|libcublas*|libnccl*|libcudart*|libnvidia-ml*) ;;
      *) echo "$name $path" ;;
    esac
  done
}

# Writes the manifest line of the gpu sh_test LABEL. MODE mpi: the test must run comm/mpi_test.sh
# with args NP TIMEOUT $(location BINARY) [ARGS...]; the line is NAME NP TIMEOUT_S BINARY_LABEL
# [ARGS...]. MODE script: a script of its own; the line is NAME SCRIPT_PATH [ARGS...], each
# $(location X) argument written @label:X.
manifest_line() {
  local mode="$1" label="$2"
  bazel query --output=build "$label" 2>/dev/null | python3 -c '
import ast, re, sys
mode, label = sys.argv[1], sys.argv[2]
pkg, name = label[2:].split(":")
text = sys.stdin.read()
srcs = ast.literal_eval(re.search(r"^\s*srcs = (\[.*\]),$", text, re.M).group(1))
m = re.search(r"^\s*args = (\[.*\]),$", text, re.M)
args = ast.literal_eval(m.group(1)) if m else []

def target(arg):  # the label in "$(location LABEL)", or None
    m = re.fullmatch(r"\$\((?:location|rootpath|execpath) (.+)\)", arg)
    if not m:
        return None
    return "//%s%s" % (pkg, m.group(1)) if m.group(1).startswith(":") else m.group(1)

if mode == "mpi":
    if not any(s.endswith("mpi_test.sh") for s in srcs) or len(args) < 3:
        sys.exit("gpu_check: %s does not run comm/mpi_test.sh NP TIMEOUT BINARY" % label)
    if target(args[2]) is None:
        sys.exit("gpu_check: %s: cannot read the binary from %r" % (label, args[2]))
    print(" ".join([name, args[0], args[1], target(args[2])] + args[3:]))
    sys.exit(0)
script = srcs[0]
script = script[2:].replace(":", "/") if script.startswith("//") else "%s/%s" % (pkg, script.lstrip(":"))
out = [name, script]
for a in args:
    if target(a) is not None:
        out.append("@label:" + target(a))
    elif " " in a:
        sys.exit("gpu_check: %s: argument with a space: %r" % (label, a))
    else:
        out.append(a)
print(" ".join(out))
' "$mode" "$label"
}

do_bundle() {
  cd "$root" || exit 1
  local tests sh_tests benchmarks t b
  mapfile -t tests < <(bazel query 'attr(tags, "\bgpu\b", tests(//...))' 2>/dev/null)
  if [[ ${#tests[@]} -eq 0 ]]; then
    echo "gpu_check: no test targets tagged gpu" >&2
    exit 1
  fi
  mapfile -t sh_tests < <(bazel query 'kind(sh_test, attr(tags, "\bgpu\b", tests(//...)))' \
    2>/dev/null)
  benchmarks=()
  # A benchmark may appear with several argument lists: build and carry it once.
  for b in "${GPU_BENCHMARKS[@]}"; do
    printf '%s\n' "${benchmarks[@]}" | grep -qxF -- "//${b%% *}" || benchmarks+=("//${b%% *}")
  done
  # The tests with the caching allocator poisoning every block it hands out (0xFF bytes, NaN:
  # core/cuda/poison_blocks.h), so that a kernel reading memory nobody wrote fails its comparison
  # instead of passing on leftovers; the benchmarks without (built after, as they run in use).
  ./bazelw build --config=cuda --define=mt_poison_blocks=on "${tests[@]}" || exit 1

  # The tree is put together in a scratch directory and carried as one archive.
  tree="$(mktemp -d /tmp/gpu_bundle.XXXXXX)"
  trap 'rm -rf "$tree"' EXIT
  mkdir -p "$tree/bin" "$tree/lib"

  # Multi-rank tests: carry the binary behind each sh_test plus its manifest line.
  : > "$tree/mpi_tests.txt"
  : > "$tree/script_tests.txt"
  mkdir -p "$tree/scripts/tools"
  # What the scripts source from their runfiles ($TEST_SRCDIR/$TEST_WORKSPACE: scripts/ there).
  cp "$root/tools/test_env.sh" "$tree/scripts/tools/"
  local label line binlabel path f a
  for label in "${sh_tests[@]}"; do
    if ! line=$(manifest_line mpi "$label" 2>/dev/null); then
      # A script of its own: carry it and the binaries its arguments name.
      if ! line=$(manifest_line script "$label"); then
        echo "$label" >> "$tree/not_carried.txt"  # reported as a table row there
        continue
      fi
      read -r -a f <<< "$line"
      cp "${f[1]}" "$tree/scripts/${f[0]}.sh"
      f[1]="${f[0]}.sh"
      for ((a = 2; a < ${#f[@]}; ++a)); do
        [[ "${f[a]}" == @label:* ]] || continue
        path="bazel-bin/${f[a]#@label://}"
        path="${path/://}"
        cp -n "$path" "$tree/bin/"
        f[a]="@bin:$(basename "$path")"
      done
      echo "${f[*]}" >> "$tree/script_tests.txt"
      continue
    fi
    read -r -a f <<< "$line"
    binlabel="${f[3]}"
    path="bazel-bin/${binlabel#//}"
    path="${path/://}"
    f[3]="$(basename "$path")"
    echo "${f[*]}" >> "$tree/mpi_tests.txt"
    cp "$path" "$tree/bin/"
  done
  # Single-process tests (every gpu test that is not an sh_test), then the benchmarks.
  : > "$tree/tests.txt"
  carry() {  # LABEL: bazel-bin's binary into bin/
    path="bazel-bin/${1#//}"
    path="${path/://}"
    if [[ -e "$tree/bin/$(basename "$path")" ]]; then
      echo "gpu_check: two targets named $(basename "$path")" >&2
      exit 1
    fi
    cp "$path" "$tree/bin/$(basename "$path")"
  }
  for t in "${tests[@]}"; do
    printf '%s\n' "${sh_tests[@]}" | grep -qxF -- "$t" && continue
    carry "$t"
    basename "$path" >> "$tree/tests.txt"
  done
  ./bazelw build --config=cuda "${benchmarks[@]}" || exit 1
  for t in "${benchmarks[@]}"; do carry "$t"; done
  printf '%s\n' "${GPU_BENCHMARKS[@]}" > "$tree/benchmarks.txt"

  # The mini OpenMPI. No symbolic links: the tree must survive being copied as plain files.
  local mpi="$tree/mpi" pmix="$tree/pmix" so dropped=()
  mkdir -p "$mpi/bin" "$mpi/$MPI_PLUGINS_REL" "$mpi/share" "$mpi/etc" "$pmix/lib/pmix" \
    "$pmix/share"
  cp -L /usr/bin/orterun "$mpi/bin/orterun"
  cp -L /usr/bin/orterun "$mpi/bin/mpirun"
  cp -L /usr/bin/orted /usr/bin/ompi_info "$mpi/bin/"
  for so in "$SYS_MPI_PLUGINS"/*.so; do
    if ldd "$so" | grep -qE "$MPI_PLUGIN_DROP|not found"; then
      dropped+=("$(basename "$so" .so)")
    else
      cp -L "$so" "$mpi/$MPI_PLUGINS_REL/"
    fi
  done
  echo "gpu_check: MCA plugins not carried: ${dropped[*]}"
  cp -rL /usr/share/openmpi "$mpi/share/openmpi"
  cp -L /etc/openmpi/openmpi-mca-params.conf /etc/openmpi/openmpi-default-hostfile "$mpi/etc/"
  cp -L "$SYS_PMIX"/lib/pmix/*.so "$pmix/lib/pmix/"
  # Not share/pmix-mca-params.conf: it names the system's plugin directory.
  cp -rL "$SYS_PMIX"/share/pmix "$pmix/share/pmix"

  # Libraries the binaries dlopen() rather than link: OpenBLAS (core/openblas.h loads it after
  # choosing its kernel), so ldd does not list it; it goes in lib/ with what it needs.
  cp -L "$SYS_OPENBLAS" "$tree/lib/libopenblas.so.0"

  # Shared libraries the binaries, mpirun and the plugins need (glibc and CUDA stay behind).
  local name missing=0
  while read -r name path; do
    if [[ "$path" == not-found ]]; then
      echo "gpu_check: $name not found (needed by the bundle)" >&2
      missing=1
    else
      cp -L "$path" "$tree/lib/$name"
    fi
  done < <(needed_libs "$tree"/bin/* "$mpi"/bin/* "$mpi/$MPI_PLUGINS_REL"/*.so \
             "$pmix"/lib/pmix/*.so "$SYS_OPENBLAS")
  [[ $missing -eq 0 ]] || exit 1
  # Symbols are not needed there.
  strip --strip-unneeded "$tree"/bin/* "$tree"/lib/* "$mpi"/bin/* \
    "$mpi/$MPI_PLUGINS_REL"/*.so "$pmix"/lib/pmix/*.so 2>/dev/null || true
  # glibc is the machine's own: the newest symbol version the bundle needs from it.
  find "$tree" -type f -exec objdump -T {} + 2>/dev/null | grep -o 'GLIBC_2\.[0-9]*' |
    sort -uV | tail -1 | sed 's/GLIBC_//' > "$tree/glibc_required.txt"

  # Unpacked, the tree is larger than the 64 MiB a device call carries (OpenBLAS alone is 36 MiB);
  # xz brings it to a fifth.
  rm -rf "$bundle"
  mkdir -p "$bundle"
  tar -C "$tree" -cf - . | xz -T0 -6 > "$bundle/bundle.tar.xz" || exit 1
  {
    echo "# gpu_bundle/bundle.tar.xz, made $(date -u +%FT%TZ) by tools/gpu_check.sh bundle"
    echo "# multi-rank tests (NAME NP TIMEOUT_S BINARY [ARGS...]):"
    sed 's/^/#   /' "$tree/mpi_tests.txt"
    echo "# script tests (NAME SCRIPT [ARGS...]):"
    sed 's/^/#   /' "$tree/script_tests.txt"
    [[ -s "$tree/not_carried.txt" ]] && sed 's/^/# not carried: /' "$tree/not_carried.txt"
    (cd "$tree" && find . -type f -printf '%9s %P\n' | sort -k2)
  } > "$bundle/CONTENTS.txt"
  echo "gpu_check: multi-rank tests:"
  sed 's/^/  /' "$tree/mpi_tests.txt"
  echo "gpu_check: script tests:"
  sed 's/^/  /' "$tree/script_tests.txt"
  echo "gpu_check: unpacked $(du -sh "$tree" | cut -f1), carried: $(du -sh "$bundle" | cut -f1)"
  local kib
  kib=$(du -sk "$bundle" | cut -f1)
  if (( kib >= 64 * 1024 )); then
    echo "gpu_check: gpu_bundle is ${kib} KiB, over the 64 MiB a device call carries" >&2
    exit 1
  fi
}

# Unpacks gpu_bundle/bundle.tar.xz into $work/b and sets tree to it; with xz, or Python's
# tarfile where there is no xz.
unpack_bundle() {
  tree="$work/b"
  mkdir -p "$tree"
  if command -v xz >/dev/null; then
    xz -dc "$bundle/bundle.tar.xz" | tar -C "$tree" -xf -
  else
    python3 -c '
import sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    kw = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
    t.extractall(sys.argv[2], **kw)
' "$bundle/bundle.tar.xz" "$tree"
  fi
}

# Environment for the carried OpenMPI: relocated to $tree/mpi, nothing read from /usr or /etc.
mpi_env() {
  local mpi="$tree/mpi"
  export OPAL_PREFIX="$mpi"
  # Debian's PMIx has absolute libdir and datadir: PMIX_PREFIX alone does not move its plugins.
  export PMIX_PREFIX="$tree/pmix" PMIX_LIBDIR="$tree/pmix/lib" PMIX_DATADIR="$tree/pmix/share"
  export PMIX_SYSCONFDIR="$tree/pmix/share" PMIX_PKGLIBDIR="$tree/pmix/lib/pmix"
  export PMIX_PKGDATADIR="$tree/pmix/share/pmix"
  export PMIX_MCA_mca_base_component_path="$tree/pmix/lib/pmix"
  export PATH="$mpi/bin:$PATH"
  # Debian's sysconfdir (/etc/openmpi) is absolute, so OPAL_PREFIX does not move it.
  export OMPI_MCA_mca_base_param_files="$mpi/etc/openmpi-mca-params.conf"
  export OMPI_MCA_orte_default_hostfile="$mpi/etc/openmpi-default-hostfile"
  # hwloc's plugins (PCI, CUDA, ...) are not carried: the same topology here and there.
  export HWLOC_PLUGINS_PATH="$tree/hwloc-plugins-not-carried"
  # Single-process tests call MPI_Init as singletons: no orted to start.
  export OMPI_MCA_ess_singleton_isolated=1
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # One machine: mpirun forks the ranks itself (no ssh, which is found here but not there).
  export OMPI_MCA_plm=isolated
  export OMPI_MCA_btl=self,vader
  # Ranks are siblings: CMA (process_vm_readv) fails where ptrace is restricted (containers).
  export OMPI_MCA_btl_vader_single_copy_mechanism=none
  export OMPI_MCA_mca_base_component_show_load_errors=0
  export PMIX_MCA_mca_base_component_show_load_errors=0
  # OpenMPI's session directory and sockets: short and writable (Unix sockets: 108 bytes).
  export TMPDIR="$work/t"
  mkdir -p "$TMPDIR"
  # mpirun gives each rank a pseudo-terminal: no colour codes in the logs the table counts.
  export GTEST_COLOR=no
}

# Seconds the next binary may run: its own limit, PER_BINARY_TIMEOUT and what is left of
# TOTAL_BUDGET, whichever is least.
limit_for() {
  local want="$1" left=$(( TOTAL_BUDGET - ($(date +%s) - run_start) ))
  (( want > PER_BINARY_TIMEOUT )) && want=$PER_BINARY_TIMEOUT
  (( want > left )) && want=$left
  echo "$want"
}

# run_test NAME LIMIT HEADER COMMAND...: runs COMMAND for at most LIMIT seconds (less if the
# budget is nearly spent) with its output in $out/NAME.log, appended to the log under "=== HEADER";
# sets rc and secs. Returns 1, with a "not run" row, when too little of the budget is left.
run_test() {
  local name="$1" limit="$2" header="$3" lim start
  shift 3
  lim=$(limit_for "$limit")
  if (( lim < 10 )); then table+=("$(printf '%-32s not run (time budget)' "$name")"); return 1; fi
  start=$(date +%s)
  timeout -k 5 "$lim" "$@" </dev/null >"$out/$name.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  echo "=== $header" >> "$log"
  cat "$out/$name.log" >> "$log"
}

# Appends a table row for a gtest log (per-test result lines end in "(N ms)").
gtest_row() {
  local name="$1" rc="$2" secs="$3" log="$4" passed skipped failed
  passed=$(grep -cE '^\[       OK \] .* \([0-9]+ ms\)$' "$log")
  skipped=$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$log")
  failed=$(grep -cE '^\[  FAILED  \] .* \([0-9]+ ms\)$' "$log")
  table+=("$(printf '%-32s rc=%-3s ok=%-4s skipped=%-3s failed=%-3s %4ss' "$name" "$rc" \
    "$passed" "$skipped" "$failed" "$secs")")
}

do_run() {
  cd "$root" || exit 1
  [[ -f "$bundle/bundle.tar.xz" ]] || { echo "gpu_check: $bundle/bundle.tar.xz missing; run 'tools/gpu_check.sh bundle' first" >&2; exit 1; }
  run_start=$(date +%s)
  out="${OUT:-$root/gpu_check_out}"
  mkdir -p "$out"
  log="$out/gpu_check.log"
  work="$(mktemp -d /tmp/gpu_check.XXXXXX)"
  trap 'rm -rf "$work"' EXIT
  unpack_bundle || { echo "gpu_check: cannot unpack $bundle/bundle.tar.xz" >&2; exit 1; }
  libpath="$tree/lib:/usr/local/cuda/lib64"
  for d in $(python3 -c 'import site,glob; [print(p) for s in site.getsitepackages() for p in glob.glob(s+"/nvidia/*/lib")]' 2>/dev/null); do
    libpath="$libpath:$d"
  done
  export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  mpi_env
  {
    echo "gpu_check $(date -u +%FT%TZ) on $(hostname)"
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1
    local have need
    have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
    need=$(cat "$tree/glibc_required.txt")
    if [[ "$(printf '%s\n' "$need" "$have" | sort -V | head -1)" == "$need" ]]; then
      echo "glibc $have (the bundle needs $need)"
    else
      echo "WARNING: glibc $have is older than the $need the bundle was built against"
    fi
    echo "mpirun: $(command -v mpirun); plugins: $(ompi_info --path pkglibdir 2>&1 | xargs)"
    # The carried OpenMPI works (a 2-rank job) and finds its help files (a failing launch).
    timeout -k 5 30 mpirun --oversubscribe --bind-to none -np 2 true </dev/null \
      >"$work/true.log" 2>&1
    echo "mpirun -np 2 true: rc=$? $(tail -3 "$work/true.log" | xargs)"
    timeout -k 5 30 mpirun -np 1 "$work/no-such-program" </dev/null >"$work/help.log" 2>&1
    if grep -q 'could not access' "$work/help.log"; then
      echo "mpirun help files: found"
    else
      echo "mpirun help files: NOT found"
    fi
  } | tee "$log"
  table=()
  local name rc secs lim np limit binary args line
  while read -r name; do
    [[ -z "$name" ]] && continue
    run_test "$name" "$PER_BINARY_TIMEOUT" "$name" "$tree/bin/$name" || continue
    gtest_row "$name" "$rc" "$secs" "$out/$name.log"
  done < "$tree/tests.txt"
  # Multi-rank tests, as comm/mpi_test.sh runs them, with the carried mpirun.
  while read -r name np limit binary args; do
    [[ -z "$name" ]] && continue
    # shellcheck disable=SC2086  # ARGS are words from the manifest.
    run_test "$name" "$limit" "$name (mpirun -np $np $binary $args)" \
      "$tree/mpi/bin/mpirun" --oversubscribe --bind-to none -np "$np" --mca btl self,vader \
      --mca mpi_yield_when_idle 1 "$tree/bin/$binary" $args || continue
    gtest_row "$name" "$rc" "$secs" "$out/$name.log"
  done < "$tree/mpi_tests.txt"
  # Script tests (they run the carried mpirun through PATH); PASS or SKIPPED is their last line.
  local script word words
  while read -r name script args; do
    [[ -z "$name" ]] && continue
    words=()
    for word in $args; do
      [[ "$word" == @bin:* ]] && word="$tree/bin/${word#@bin:}"
      words+=("$word")
    done
    run_test "$name" "$PER_BINARY_TIMEOUT" "$name ($script ${words[*]})" \
      env TEST_SRCDIR="$tree" TEST_WORKSPACE=scripts bash "$tree/scripts/$script" "${words[@]}" ||
      continue
    table+=("$(printf '%-32s rc=%-3s %-30s %4ss' "$name" "$rc" \
      "$(tail -1 "$out/$name.log" | cut -c1-30)" "$secs")")
  done < <(cat "$tree/script_tests.txt" 2>/dev/null)
  while read -r name; do
    table+=("$(printf '%-32s not carried (no script or binary found)' "$name")")
  done < <(cat "$tree/not_carried.txt" 2>/dev/null)
  while read -r line; do
    [[ -z "$line" ]] && continue
    name=$(basename "${line%% *}")
    args="${line#* }"
    [[ "$args" == "$line" ]] && args=""
    lim=$(limit_for "$PER_BINARY_TIMEOUT")
    if (( lim < 10 )); then table+=("$(printf '%-32s not run (time budget)' "${name##*:}")"); continue; fi
    echo "=== benchmark $name $args" >> "$log"
    # shellcheck disable=SC2086
    timeout -k 5 "$lim" "$tree/bin/${name##*:}" $args </dev/null >> "$log" 2>&1
    rc=$?
    table+=("$(printf '%-32s rc=%-3s (benchmark; see log)' "${name##*:}" "$rc")")
  done < "$tree/benchmarks.txt"
  echo "=== summary ($(( $(date +%s) - run_start ))s)" | tee -a "$log"
  printf '%s\n' "${table[@]}" | tee -a "$log"
}

case "${1:-}" in
  bundle) do_bundle ;;
  run) do_run ;;
  *) echo "usage: tools/gpu_check.sh bundle|run" >&2; exit 2 ;;
esac

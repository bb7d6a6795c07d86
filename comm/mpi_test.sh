#!/bin/bash
# Runs a multi-process test binary under mpirun on this machine:
#   mpi_test.sh NP TIMEOUT_S BINARY [ARGS...]
# Works as root (CI containers), oversubscribed (more ranks than cores) and inside Bazel's
# sandbox: OpenMPI keeps its session directory and sockets under $TMPDIR, which must be writable
# and short (Unix socket paths are limited to 108 bytes), so a short directory under /tmp is used
# when $TEST_TMPDIR is long. The whole job is bounded by TIMEOUT_S seconds: a
# hang fails the test (exit code 124) instead of running into Bazel's timeout. The exit code is
# mpirun's: 0 only if every rank exited 0.
set -euo pipefail
np="$1"
limit="$2"
bin="$3"
shift 3

tmp="${TEST_TMPDIR:-${TMPDIR:-/tmp}}"
if [[ ${#tmp} -gt 60 ]]; then
  tmp="$(mktemp -d /tmp/mt_mpi.XXXXXX)"
  trap 'rm -rf "$tmp"' EXIT
fi
export TMPDIR="$tmp"
# OpenMPI's shared-memory segments go to /dev/shm by default, named by a job id derived from
# mpirun's PID; tests run in Bazel's PID namespaces, where concurrent (or killed, leaked) jobs get
# the same PIDs, so two jobs could open each other's segments (a crash inside the vader BTL). In
# the test's own directory they cannot, and they go when it does.
export OMPI_MCA_btl_vader_backing_directory="$TMPDIR"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Under --config=asan: OpenMPI keeps memory until exit, which tools/lsan_suppressions.txt drops by
# OpenMPI's modules (found next to this script's source, which the runfiles link to); OpenMPI has
# no frame pointers, so the slow unwinder is needed for its frames to appear in an allocation's
# stack at all. Leak detection stays on for our own code.
suppressions="$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../tools/lsan_suppressions.txt"
if [[ -n "${ASAN_OPTIONS:-}" ]]; then
  limit=$((limit * 3))  # Sanitized code is slower; .bazelrc triples Bazel's timeouts alike.
fi
if [[ -f "$suppressions" ]]; then
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
  export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$suppressions"
else
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi
# Every rank would write the same gtest XML file; Bazel writes its own summary instead.
unset XML_OUTPUT_FILE GTEST_OUTPUT TEST_PREMATURE_EXIT_FILE

timeout "$limit" mpirun --oversubscribe --bind-to none -np "$np" \
  --mca btl self,vader --mca mpi_yield_when_idle 1 "$bin" "$@"

#!/usr/bin/env bash
# Installs everything the build, the tests and the quickstart need on Debian 12, quietly and
# idempotently. ./bazelw runs it before Bazel; it does nothing once everything is present.
#
#   tools/setup.sh          install what is missing (needs root or sudo the first time)
#   tools/setup.sh --check  exit 0 if nothing is missing, 1 otherwise; installs nothing
set -euo pipefail

DEBIAN_PACKAGES=(
  bazel-bootstrap      # Bazel 4.2, WORKSPACE mode, offline
  g++
  libabsl-dev
  libgoogle-glog-dev
  libgflags-dev
  libgtest-dev
  libgmock-dev
  libeigen3-dev
  libopenblas-dev      # Eigen's GEMM is routed to OpenBLAS (see docs/perf/gemm.md)
  libopenmpi-dev
  openmpi-bin          # mpirun
  nlohmann-json3-dev
  fortunes             # plain English prose: the embedded default corpus
  fortunes-min
)

missing_packages() {
  local p
  for p in "${DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || echo "$p"
  done
}

mapfile -t MISSING < <(missing_packages)

if [[ "${1:-}" == "--check" ]]; then
  [[ ${#MISSING[@]} -eq 0 ]]
  exit
fi

if [[ ${#MISSING[@]} -gt 0 ]]; then
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${MISSING[*]}" >&2; exit 1; }
    SUDO="sudo"
  fi
  echo "setup: installing ${MISSING[*]}" >&2
  log=$(mktemp)
  if ! { $SUDO apt-get update -qq && \
         DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
           "${MISSING[@]}"; } >"$log" 2>&1; then
    echo "setup: apt-get failed; its output:" >&2
    cat "$log" >&2
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
fi

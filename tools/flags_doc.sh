#!/usr/bin/env bash
# Runs tools/flags_doc.py from Bazel (//experiments:flags_doc and :flags_doc_test):
#   flags_doc.sh --write            docs/flags.md of the checkout `bazel run` was started in
#   flags_doc.sh --check DOC.md     fails when DOC.md is stale
# followed by LABEL=BINARY pairs.
# Bazel runs both from the runfiles tree of the workspace: the script and the binaries' paths
# are relative to it.
set -euo pipefail
here=tools
mode="$1"
shift
if [[ "$mode" == --write ]]; then
  [[ -n "${BUILD_WORKSPACE_DIRECTORY:-}" ]] ||
    { echo "flags_doc: run it with ./bazelw run //experiments:flags_doc" >&2; exit 2; }
  exec python3 "$here/flags_doc.py" --write "$BUILD_WORKSPACE_DIRECTORY/docs/flags.md" "$@"
fi
exec python3 "$here/flags_doc.py" "$mode" "$@"

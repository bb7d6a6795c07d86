#!/usr/bin/env python3
"""docs/flags.md from the binaries' own flag tables.

Every flag of the project's binaries is a field of a config struct (core/fields.h, made a flag by
core/config_flags.h) or a DEFINE_ of the binary's start-up; gflags lists them all with
--helpxml. This script runs each binary given with --helpxml, keeps the flags defined in the
project's own sources (not glog's or gflags' own), and writes one Markdown table per binary.

  flags_doc.py --write OUT.md LABEL=BINARY ...    write the document
  flags_doc.py --check DOC.md LABEL=BINARY ...    exit 1, naming the command that regenerates
                                                  it, when DOC.md differs from what it would be
"""
import subprocess
import sys
import xml.etree.ElementTree as ET

# The top-level directories of the project's sources: a flag defined in a file under one of them
# is the project's.
OURS = ("core/", "comm/", "nn/", "data/", "models/", "checkpoint/", "train/", "serve/", "eval/",
        "jobs/", "experiments/", "tools/")

HEADER = """# Flags

Every flag of the binaries users run, with its default: generated from the binaries' own flag
tables (each config struct's fields, `core/fields.h`, and the few `DEFINE_` flags of their
start-up) by `tools/flags_doc.py`, which reads their `--helpxml`. `//experiments:flags_doc_test`
fails when this file is stale; regenerate it with `./bazelw run //experiments:flags_doc`. Every
binary also takes glog's and gflags' own flags (`--minloglevel`, `--helpfull`, ...), not listed.
"""


def cell(text):
    return text.replace("|", "\\|").replace("\n", " ").strip()


def section(label, binary):
    out = subprocess.run([binary, "--helpxml"], capture_output=True, text=True, timeout=60)
    root = ET.fromstring(out.stdout)
    name = root.findtext("program")
    usage = " ".join((root.findtext("usage") or "").split())
    flags = []
    for f in root.iter("flag"):
        if not f.findtext("file", "").startswith(OURS):
            continue
        flags.append((f.findtext("name"), f.findtext("default") or "", f.findtext("meaning") or ""))
    lines = ["## %s (`%s`)" % (name, label), ""]
    if usage:
        lines += [cell(usage), ""]
    lines += ["| flag | default | meaning |", "|---|---|---|"]
    for flag, default, meaning in sorted(flags):
        shown = "`%s`" % cell(default) if default != "" else "(empty)"
        lines.append("| `--%s` | %s | %s |" % (flag, shown, cell(meaning)))
    return "\n".join(lines) + "\n"


def main(argv):
    if len(argv) < 3 or argv[0] not in ("--write", "--check"):
        sys.exit(__doc__)
    mode, path, pairs = argv[0], argv[1], argv[2:]
    sections = []
    for pair in pairs:
        label, _, binary = pair.partition("=")
        sections.append(section(label, binary))
    doc = HEADER + "\n" + "\n".join(sections)
    if mode == "--write":
        with open(path, "w") as f:
            f.write(doc)
        print("flags_doc: wrote %s (%d binaries)" % (path, len(pairs)))
        return
    with open(path) as f:
        old = f.read()
    if old != doc:
        old_lines, new_lines = old.splitlines(), doc.splitlines()
        first = next((i for i, (a, b) in enumerate(zip(old_lines, new_lines)) if a != b),
                     min(len(old_lines), len(new_lines)))
        print("flags_doc: docs/flags.md is stale from line %d (it has %r, the binaries give %r); "
              "regenerate it: ./bazelw run //experiments:flags_doc"
              % (first + 1, old_lines[first] if first < len(old_lines) else "",
                 new_lines[first] if first < len(new_lines) else ""))
        sys.exit(1)
    print("flags_doc: docs/flags.md is current (%d binaries)" % len(pairs))


if __name__ == "__main__":
    main(sys.argv[1:])

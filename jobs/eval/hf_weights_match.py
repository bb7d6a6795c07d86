#!/usr/bin/env python3
"""Checks that an exported model.safetensors holds a source one's weights byte for byte.

  hf_weights_match.py SOURCE EXPORTED PREFIX BUFFER_SUFFIXES TIED_NAMES

PREFIX ("transformer.", "bert.") is stripped from either file's names; source tensors whose name
ends with one of the comma-separated BUFFER_SUFFIXES are buffers, not weights; the export must
hold every other source tensor (same dtype, shape and bytes) and nothing else but TIED_NAMES
(comma-separated). Exits non-zero with the first difference.
"""
import json
import struct
import sys


def read(path, prefix):
    """name -> (dtype, shape, bytes) of a safetensors file, PREFIX stripped."""
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        out[name.removeprefix(prefix)] = (t["dtype"], t["shape"], data[8 + n + begin:8 + n + end])
    return out


def main(source, exported, prefix, buffer_suffixes, tied_names):
    buffers = tuple(s for s in buffer_suffixes.split(",") if s)
    tied = {s for s in tied_names.split(",") if s}
    src, back = read(source, prefix), read(exported, prefix)
    weights = {k: v for k, v in src.items() if not k.endswith(buffers)}
    extra = set(back) - tied - set(weights)
    missing = set(weights) - set(back)
    assert not extra and not missing, ("extra", sorted(extra), "missing", sorted(missing))
    for name, t in weights.items():
        assert back[name] == t, (name, back[name][:2], t[:2])
    print("%d tensors back unchanged" % len(weights))


if __name__ == "__main__":
    main(*sys.argv[1:6])

#!/usr/bin/python3
"""Prints the scalars of TensorBoard event files as JSON lines, read without the writer's code.

  /usr/bin/python3 tools/tfevents_decode.py PATH...

Each PATH is an event file, or a directory whose files with "tfevents" in their names are read in
name order (as TensorBoard does). Every record's framing is checked (its length and both masked
CRC32Cs, computed by Debian's python3-crc32c) and its Event decoded by protoc (Debian's
protobuf-compiler) against the schema below, which states the format on its own. Each scalar
prints as one line, in file order:
  {"step": 1, "wall_time": 1700000000.25, "tag": "lm loss", "value": 10.8125}
value is the float32 as a Python float; NaN and the infinities as Python's json spells them (NaN,
Infinity, -Infinity).

Exit status 1 with one line on stderr ("tfevents_decode: FILE: what") for a truncated record, a
bad CRC, a record protoc cannot parse as an Event, a field the schema does not have (or of another
wire type than it says), a tag that is not UTF-8, a file whose first record is not the Event with
file_version "brain.Event:2", or no event file at all; 2 for a usage error.

Run it with /usr/bin/python3: Debian's crc32c module is not visible to another Python (a pyenv
one, say).

protoc --decode with a schema, not --decode_raw: without one, protoc takes any length-delimited
field whose bytes happen to parse as a message for one, and Megatron's tag "iteration-time" does
("i" is the key of a field 13 of 8 bytes, "teration"; "-" of a field 5 of 4, "time"). The schema
declares the double and the float by their bits (fixed64 and fixed32: the same wire types), which
protoc prints as integers, so the values come back exactly.
"""

import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import crc32c
except ImportError:
    sys.exit("tfevents_decode: %s has no crc32c module: run it with /usr/bin/python3 (Debian's "
             "python3-crc32c, which tools/setup.sh installs)" % sys.executable)

# Field numbers and types of TensorBoard's Event, Summary and Summary.Value (only what scalars
# use); proto2, so that a field that is present prints even when it is zero.
SCHEMA = """
syntax = "proto2";
package tfevents_decode;
message Value {
  optional bytes tag = 1;
  optional fixed32 simple_value_bits = 2;  // float
}
message Summary {
  repeated Value value = 1;
}
message Event {
  optional fixed64 wall_time_bits = 1;  // double
  optional int64 step = 2;
  optional bytes file_version = 3;
  optional Summary summary = 5;
}
message Records {
  repeated Event record = 1;
}
"""


class DecodeError(Exception):
    pass


def masked_crc(data):
    crc = crc32c.crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def read_records(data):
    """The data of each record, its framing checked."""
    records = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < 12:
            raise DecodeError("truncated record header at byte %d (%d bytes left)"
                              % (pos, len(data) - pos))
        (length,) = struct.unpack_from("<Q", data, pos)
        (length_crc,) = struct.unpack_from("<I", data, pos + 8)
        if masked_crc(data[pos:pos + 8]) != length_crc:
            raise DecodeError("bad CRC of the length of record %d at byte %d" % (len(records), pos))
        if len(data) - pos - 12 < length + 4:
            raise DecodeError("truncated record %d at byte %d: %d bytes of data and CRC, %d left"
                              % (len(records), pos, length + 4, len(data) - pos - 12))
        body = data[pos + 12:pos + 12 + length]
        (body_crc,) = struct.unpack_from("<I", data, pos + 12 + length)
        if masked_crc(body) != body_crc:
            raise DecodeError("bad CRC of the data of record %d at byte %d" % (len(records), pos))
        records.append(body)
        pos += 12 + length + 4
    return records


def varint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def protoc_decode(schema_dir, message, payload):
    """protoc's text format of `payload` as `message`, or None if protoc cannot parse it."""
    run = subprocess.run(
        ["protoc", "--proto_path=" + schema_dir, "--decode=tfevents_decode." + message,
         "tfevents.proto"],
        input=payload, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    if run.returncode != 0:
        return None
    return run.stdout.decode("ascii")


def unescape(quoted):
    """The bytes of a string as protoc's text format quotes it (C escapes, octal for the rest)."""
    assert quoted[0] == '"' and quoted[-1] == '"', quoted
    s = quoted[1:-1]
    simple = {"n": 10, "r": 13, "t": 9, '"': 34, "'": 39, "\\": 92, "a": 7, "b": 8, "f": 12,
              "v": 11, "?": 63}
    out = bytearray()
    i = 0
    while i < len(s):
        c = s[i]
        if c != "\\":
            out.append(ord(c))
            i += 1
            continue
        e = s[i + 1]
        if e in simple:
            out.append(simple[e])
            i += 2
        elif e in "01234567":
            j = i + 1
            while j < len(s) and j < i + 4 and s[j] in "01234567":
                j += 1
            out.append(int(s[i + 1:j], 8))
            i = j
        elif e == "x":
            j = i + 2
            while j < len(s) and j < i + 4 and s[j] in "0123456789abcdefABCDEF":
                j += 1
            out.append(int(s[i + 2:j], 16))
            i = j
        else:
            raise DecodeError("unknown escape \\%s in protoc's output" % e)
    return bytes(out)


def parse_text(text):
    """protoc's text format as nested lists of (name, value) pairs: a message's value is a list,
    a field's the text after the colon."""
    root = []
    stack = [root]
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line == "}":
            stack.pop()
        elif line.endswith(" {"):
            child = []
            stack[-1].append((line[:-2], child))
            stack.append(child)
        else:
            name, _, value = line.partition(": ")
            stack[-1].append((name, value))
    return root


def fields(message, allowed, where):
    """The (name, value) pairs of `message`, each name one of `allowed`: any other is a field the
    schema does not have, printed by its number."""
    for name, value in message:
        if name not in allowed:
            raise DecodeError("%s has a field %s the schema does not have (or of another wire "
                              "type than it says)" % (where, name))
    return message


def bits_to_double(text):
    return struct.unpack("<d", struct.pack("<Q", int(text)))[0]


def bits_to_float(text):
    return struct.unpack("<f", struct.pack("<I", int(text)))[0]


def decode_event(event, index):
    """(wall_time, step, file_version or None, [(tag, value)]) of one parsed Event."""
    where = "record %d" % index
    wall_time, step, version, scalars = 0.0, 0, None, []
    for name, value in fields(event, ("wall_time_bits", "step", "file_version", "summary"), where):
        if name == "wall_time_bits":
            wall_time = bits_to_double(value)
        elif name == "step":
            step = int(value)
        elif name == "file_version":
            version = unescape(value)
        else:
            for _, v in fields(value, ("value",), where + "'s summary"):
                tag, number = b"", None
                for vname, vvalue in fields(v, ("tag", "simple_value_bits"),
                                            where + "'s summary value"):
                    if vname == "tag":
                        tag = unescape(vvalue)
                    else:
                        number = bits_to_float(vvalue)
                if number is None:
                    raise DecodeError("%s holds a summary value without simple_value" % where)
                try:
                    scalars.append((tag.decode("utf-8"), number))
                except UnicodeDecodeError:
                    raise DecodeError("%s has a tag that is not UTF-8: %r" % (where, tag))
    return wall_time, step, version, scalars


def decode_file(path, schema_dir, out):
    with open(path, "rb") as f:
        records = read_records(f.read())
    if not records:
        raise DecodeError("no records")
    wrapped = b"".join(b"\x0a" + varint(len(r)) + r for r in records)  # Records.record, field 1
    text = protoc_decode(schema_dir, "Records", wrapped)
    if text is None:
        for i, r in enumerate(records):
            if protoc_decode(schema_dir, "Event", r) is None:
                raise DecodeError("protoc cannot parse record %d as an Event" % i)
        raise DecodeError("protoc cannot parse the records")
    parsed = fields(parse_text(text), ("record",), "the file")
    if len(parsed) != len(records):
        raise DecodeError("protoc read %d records of %d" % (len(parsed), len(records)))
    for i, (_, event) in enumerate(parsed):
        wall_time, step, version, scalars = decode_event(event, i)
        if i == 0 and (version != b"brain.Event:2" or scalars):
            raise DecodeError("the first record is not the Event with file_version "
                              "\"brain.Event:2\"")
        if i > 0 and version is not None:
            raise DecodeError("record %d has a file_version" % i)
        for tag, value in scalars:
            out.write(json.dumps({"step": step, "wall_time": wall_time, "tag": tag,
                                  "value": value}) + "\n")


def event_files(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += [os.path.join(p, n) for n in sorted(os.listdir(p)) if "tfevents" in n]
        else:
            files.append(p)
    return files


def main(argv):
    if len(argv) < 2 or argv[1].startswith("-"):
        sys.stderr.write("usage: /usr/bin/python3 tfevents_decode.py EVENT_FILE_OR_DIR...\n")
        return 2
    files = event_files(argv[1:])
    if not files:
        sys.stderr.write("tfevents_decode: no event files in %s\n" % " ".join(argv[1:]))
        return 1
    with tempfile.TemporaryDirectory() as schema_dir:
        with open(os.path.join(schema_dir, "tfevents.proto"), "w") as f:
            f.write(SCHEMA)
        for path in files:
            try:
                decode_file(path, schema_dir, sys.stdout)
            except (DecodeError, OSError) as e:
                sys.stdout.flush()
                sys.stderr.write("tfevents_decode: %s: %s\n" % (path, e))
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

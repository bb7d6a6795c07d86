#!/bin/bash
# An event file written by //train:tensorboard read back by tools/tfevents_decode.py, which shares
# none of its code (its CRC32C is Debian's python3-crc32c, its protobuf decoder protoc): every
# scalar comes back with its tag, step and value as float32 rounds it, and a wall time of this
# run. Then the reader must refuse the file with one byte flipped (in a record's data, in a
# length) and cut short.
#   tensorboard_decode_test.sh TENSORBOARD_WRITE TFEVENTS_DECODE_PY
set -uo pipefail
write="$1"; decode="$2"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_tensorboard || exit 1

start=$(date +%s)
"$write" "$work/logs" > "$work/path" || fail "tensorboard_write"
end=$(date +%s)
file=$(cat "$work/path")
[[ "$(dirname "$file")" == "$work/logs" && "$(basename "$file")" == events.out.tfevents.* ]] ||
  fail "the event file is $file"

/usr/bin/python3 "$decode" "$work/logs" > "$work/scalars.jsonl" || fail "decoding $file"

# The scalars of tensorboard_write_main.cc, as float32 rounds their values.
/usr/bin/python3 - "$work/scalars.jsonl" "$start" "$end" <<'PY' || fail "scalars differ"
import json, math, struct, sys
path, start, end = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
inf = float("inf")
want = [
    ("lm loss", 10.8125, 1),
    ("lm loss vs samples", 10.8125, 32),
    ("learning-rate", f32(1.5e-4), 1),
    ("iteration-time", f32(0.1), 1),
    ("lm loss", 9.5, 2),
    ("lm loss vs samples", 9.5, 64),
    ("grad-norm", math.nan, 2),
    ("loss-scale", inf, 2),
    ("loss-scale", -inf, 3),
    ("num-zeros", inf, 3),  # 1e40 is beyond float32's range
    ("validation ppl (\u03bc)", f32(123456.789), 4294967297),
    ("", -0.0, 0),
    ("negative step", 1.0, -5),
]
got = [json.loads(line) for line in open(path)]
assert len(got) == len(want), (len(got), got)
for g, (tag, value, step) in zip(got, want):
    assert set(g) == {"step", "wall_time", "tag", "value"}, g
    assert g["tag"] == tag and g["step"] == step, (g, tag, step)
    same = (math.isnan(value) and math.isnan(g["value"])) or (
        g["value"] == value and math.copysign(1, g["value"]) == math.copysign(1, value))
    assert same, (g, value)
    assert start <= g["wall_time"] <= end + 1, (g, start, end)
assert f32(0.1) != 0.1 and f32(1.5e-4) != 1.5e-4  # the rounding is seen
PY

# Each corruption must fail the reader with one line naming the file.
corrupt() {
  local what="$1" expect="$2"
  local out
  out=$(/usr/bin/python3 "$decode" "$work/bad" 2>&1 > /dev/null) && fail "$what: decoded"
  [[ $(wc -l <<<"$out") -eq 1 && "$out" == "tfevents_decode: $work/bad/"*"$expect"* ]] ||
    fail "$what: the reader said: $out"
}
mkdir "$work/bad"
bad="$work/bad/$(basename "$file")"
size=$(stat -c %s "$file")
flip() {  # flip(OFFSET): a copy of the file with the byte at OFFSET inverted
  /usr/bin/python3 - "$file" "$bad" "$1" <<'PY'
import sys
data = bytearray(open(sys.argv[1], "rb").read())
data[int(sys.argv[3])] ^= 0xFF
open(sys.argv[2], "wb").write(data)
PY
}
# The first record is 40 bytes (12 of header, 24 of data, 4 of CRC); the second's data starts
# at 52, its tag "lm loss" at 52 + 9 (wall time) + 2 (step) + 2 + 2 + 2 (keys and lengths).
flip 70 && corrupt "a flipped tag byte" "bad CRC of the data of record 1"
flip 41 && corrupt "a flipped length byte" "bad CRC of the length of record 1"
flip $((size - 1)) && corrupt "a flipped CRC byte" "bad CRC of the data of record 13"
head -c $((size - 3)) "$file" > "$bad" && corrupt "a cut file" "truncated record 13"
head -c 45 "$file" > "$bad" && corrupt "a cut header" "truncated record header at byte 40"
echo "PASS"

#!/bin/bash
# The harnesses on a checkpoint whose weights are all zero (it predicts the uniform distribution
# over the real vocabulary at every position), against numbers computed here independently:
#   wikitext103: loss = ln 50257 (padding columns excluded: not ln 50304), ppl = 50257,
#     adjusted_ppl = exp(ln(50257) * (T - 1) / (T_o - 1)), with T_o from Python's
#     raw.strip().split(" ") and T from the reference GPT-2 encoder (npm gpt-3-encoder under node)
#     on the text detokenised here by the protocol's rules; the windows cover every target once.
#   lambada: every target token costs ln 50257 and nothing is predicted right (argmax 0).
# Then every input error: one line on stderr naming the file / line / model, exit 1.
#   harness_zero_test.sh TEST_CHECKPOINT WIKITEXT103 LAMBADA WIKI_FIXTURE LAMBADA_FIXTURE
set -uo pipefail
make_ckpt="$1"; wikitext="$2"; lambada="$3"; wiki="$4"; lambada_data="$5"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_eval_zero || exit 1
tiny=(--num_layers=2 --hidden_size=32 --num_attention_heads=4 --max_position_embeddings=64)

"$make_ckpt" --save="$work/zero" "${tiny[@]}" --model_name=zero-gpt > /dev/null || fail "checkpoint"
"$wikitext" --load="$work/zero" --data="$wiki" --seq_length=32 --overlapping_eval=8 \
  --micro_batch_size=5 --results_json="$work/wiki.json" --per_example_jsonl="$work/wiki.jsonl" \
  --progress_interval=0 > "$work/wiki.out" 2>&1 || { cat "$work/wiki.out"; fail "wikitext103"; }
grep -q "ETA" "$work/wiki.out" || fail "no progress line"
[[ "$(tail -1 "$work/wiki.out")" == "$(cat "$work/wiki.json")" ]] || fail "last line != results"

node_js="$work/count.js"
cat > "$node_js" <<'JS'
const path = require('path');
const fs = require('fs');
const enc = require(path.join(process.argv[2], 'node_modules', 'gpt-3-encoder'));
console.log(enc.encode(fs.readFileSync(process.argv[3], 'utf8')).length);
JS
python3 - "$wiki" "$work/detok.txt" <<'PY' || fail "detokenise"
import re, sys
s = open(sys.argv[1], encoding="utf-8").read()
s = s.replace("s '", "s'")
s = re.sub(r"/' [0-9]/", r"/'[0-9]/", s)
for a, b in ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."), (" : ", ": "), (" ; ", "; "),
             (" . ", ". "), (" ! ", "! "), (" ? ", "? "), (" , ", ", ")):
    s = s.replace(a, b)
for o, c in (("\\(", "\\)"), ("\\[", "\\]"), ("{", "}"), ('"', '"'), ("'", "'")):
    s = re.sub(o + r"\s*([^" + c + r"]*?)\s*" + c, o.strip("\\") + r"\1" + c.strip("\\"), s)
for a, b in (("= = = =", "===="), ("= = =", "==="), ("= =", "=="), (" \u00b0 ", "\u00b0"),
             (" \n", "\n"), ("\n ", "\n"), (" N ", " 1 "), (" 's", "'s")):
    s = s.replace(a, b)
open(sys.argv[2], "w", encoding="utf-8").write(s)
PY
bpe=$(/usr/bin/node "$node_js" "${MT_ASSETS_DIR:-/opt/megatron-cpp}" "$work/detok.txt") ||
  fail "the reference encoder (node, npm gpt-3-encoder) did not run"

python3 - "$work/wiki.json" "$work/wiki.jsonl" "$wiki" "$bpe" <<'PY' || fail "wikitext103 numbers"
import json, math, sys
r = json.load(open(sys.argv[1]))
windows = [json.loads(l) for l in open(sys.argv[2])]
t_o = len(open(sys.argv[3], encoding="utf-8").read().strip().split(" "))
t = int(sys.argv[4])
ln_v = math.log(50257)
assert r["task"] == "wikitext103" and r["model"] == "zero-gpt", r
assert r["original_tokens"] == t_o, (r["original_tokens"], t_o)
assert r["tokenized_tokens"] == t, (r["tokenized_tokens"], t)
assert r["scored_targets"] == t - 1 and r["seq_length"] == 32 and r["overlapping_eval"] == 8, r
assert abs(r["loss"] - ln_v) <= 1e-6, (r["loss"], ln_v)
assert abs(r["ppl"] / 50257 - 1) <= 1e-6, r["ppl"]
adjusted = math.exp(ln_v * (t - 1) / (t_o - 1))
assert abs(r["adjusted_ppl"] / adjusted - 1) <= 1e-6, (r["adjusted_ppl"], adjusted)
# Windows: 1 + ceil((T - 1 - 32) / 8) of them, 32 targets in the first, 8 in the others (fewer in
# the last), every one costing ln 50257.
assert len(windows) == 1 + -(-(t - 1 - 32) // 8), len(windows)
assert [w["window"] for w in windows] == list(range(len(windows)))
assert [w["start"] for w in windows] == [8 * i for i in range(len(windows))]
assert sum(w["scored_targets"] for w in windows) == t - 1
assert windows[0]["scored_targets"] == 32 and all(w["scored_targets"] <= 8 for w in windows[1:])
for w in windows:
    assert abs(w["nll_sum"] - w["scored_targets"] * ln_v) <= 1e-9 * w["scored_targets"], w
print("T_o %d, T %d: loss %.15f (ln 50257 = %.15f), adjusted ppl %.6f" %
      (t_o, t, r["loss"], ln_v, r["adjusted_ppl"]))
PY

"$lambada" --load="$work/zero" --data="$lambada_data" --per_example_jsonl="$work/lambada.jsonl" \
  --micro_batch_size=3 > "$work/lambada.out" 2>&1 || { cat "$work/lambada.out"; fail "lambada"; }
python3 - "$work/lambada.out" "$work/lambada.jsonl" <<'PY' || fail "lambada numbers"
import json, math, sys
r = json.loads(open(sys.argv[1]).read().splitlines()[-1])
ex = [json.loads(l) for l in open(sys.argv[2])]
assert r == {"task": "lambada", "strict": True, "examples": 4, "correct": 0, "accuracy": 0.0,
             "target_tokens": sum(len(e["target"]) for e in ex), "model": "zero-gpt"}, r
for e in ex:
    assert not e["correct"] and e["predicted"] == [0] * len(e["target"]), e
    assert abs(e["target_nll"] - len(e["target"]) * math.log(50257)) <= 1e-9, e
PY

# Input errors: exit 1 with exactly one line on stderr, containing the expected text.
expect_error() {  # expect_error TEXT BINARY FLAGS...
  local text="$1"; shift
  "$@" > "$work/err.out" 2> "$work/err.txt" && fail "accepted: $*"
  [[ $(wc -l < "$work/err.txt") -eq 1 ]] || { cat "$work/err.txt"; fail "not one line: $*"; }
  grep -qF -- "$text" "$work/err.txt" || { cat "$work/err.txt"; fail "no '$text': $*"; }
}
"$make_ckpt" --save="$work/bert" --family=bert --vocab_size=30522 --num_token_types=2 \
  "${tiny[@]}" > /dev/null || fail "BERT checkpoint"
"$make_ckpt" --save="$work/v1000" --vocab_size=1000 "${tiny[@]}" > /dev/null || fail "checkpoint"
printf '{"text": "the cat sat on the mat"}\n{"text": oops}\n' > "$work/bad.jsonl"
printf '{"text": "the cat sat on the mat"}\n{"txt": "no text key"}\n' > "$work/nokey.jsonl"
expect_error "holds a bert-family model (architecture 'bert')" "$wikitext" --load="$work/bert" \
  --data="$wiki"
expect_error "$work/bert holds a bert-family" "$lambada" --load="$work/bert" --data="$lambada_data"
expect_error "vocabulary of 1000 tokens but the gpt2 tokenizer has 50257" "$lambada" \
  --load="$work/v1000" --data="$lambada_data"
expect_error "wikitext103: error: cannot read $work/missing.tokens" "$wikitext" \
  --load="$work/zero" --data="$work/missing.tokens"
expect_error "$work/missing.jsonl" "$lambada" --load="$work/zero" --data="$work/missing.jsonl"
expect_error "$work/bad.jsonl:2: not valid JSON" "$lambada" --load="$work/zero" \
  --data="$work/bad.jsonl"
expect_error "$work/nokey.jsonl:2:" "$lambada" --load="$work/zero" --data="$work/nokey.jsonl"
expect_error "$work/none" "$wikitext" --load="$work/none" --data="$wiki"
expect_error "--load is required" "$wikitext" --data="$wiki"
expect_error "max_position_embeddings 64" "$wikitext" --load="$work/zero" --data="$wiki" \
  --seq_length=65
expect_error "$work/nodir/x.jsonl" "$lambada" --load="$work/zero" --data="$lambada_data" \
  --per_example_jsonl="$work/nodir/x.jsonl"
expect_error "exclusive" "$lambada" --load="$work/zero" --data="$lambada_data" --bf16 --fp16
expect_error "must be one of crc32c, sha256, none" "$lambada" --load="$work/zero" \
  --data="$lambada_data" --checkpoint_verify=md5
# A flipped byte in the weights: refused by its CRC32C (the default) and its SHA-256, read as is
# with --checkpoint_verify=none.
cp -r "$work/zero" "$work/flipped"
tensors=$(find "$work/flipped" -name '*.safetensors' | head -1)
python3 - "$tensors" <<'PY' || fail "flip a byte"
import json, struct, sys
with open(sys.argv[1], "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    # A model weight (not an optimizer moment, which inference does not read), mid-tensor.
    name = next(k for k in sorted(header) if k.endswith("weight") and "optimizer" not in k)
    begin, end = header[name]["data_offsets"]
    f.seek(8 + n + (begin + end) // 2)
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0x40]))
PY
expect_error "fails its CRC32C check" "$lambada" --load="$work/flipped" --data="$lambada_data"
expect_error "fails its SHA-256 check" "$lambada" --load="$work/flipped" --data="$lambada_data" \
  --checkpoint_verify=sha256
"$lambada" --load="$work/flipped" --data="$lambada_data" --checkpoint_verify=none > /dev/null \
  2>&1 || fail "--checkpoint_verify=none did not load the flipped checkpoint"
# Two processes that cannot split 4 heads three ways: one line, before any collective.
timeout 60 mpirun --oversubscribe --bind-to none -np 3 --mca btl self,vader \
  "$wikitext" --load="$work/zero" --data="$wiki" > "$work/np3.out" 2> "$work/np3.err" &&
  fail "3 ranks accepted for 4 heads"
[[ $(grep -c "wikitext103: error:" "$work/np3.err") -eq 1 ]] || { cat "$work/np3.err"; fail "np3"; }
grep -q "cannot run on 3 processes" "$work/np3.err" || { cat "$work/np3.err"; fail "np3 text"; }
echo PASS

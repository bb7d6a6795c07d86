#!/bin/bash
# Sequence parallelism and selective recomputation end to end, for pretrain_gpt and pretrain_bert
# (tiny configs, dropout on, 20 iterations, 2 ranks oversubscribed):
#   - TP=2 with --sequence_parallel logs the lm loss of TP=1 at every iteration, and its final
#     weights (resharded to TP=1) are TP=1's, within float32 rounding. The bound is derived from
#     the run itself: TP=2 without sequence parallelism reorders the same f32 sums (partial products
#     over the ranks), and sequence parallelism reorders only a few more (the norms' gradient sums
#     over the ranks' positions), so its deviation from TP=1 must stay within 4 times TP=2's
#     (plus 64 unit roundoffs of the value, for curves that TP=2 happens to reproduce almost
#     exactly); a wrong slice, mask or missing reduction is off by orders of magnitude more;
#   - --recompute_granularity=selective and =full log bitwise the losses of the run without
#     recomputation and end with the same weights, bit for bit;
#   - --context_parallel_size=2 (GPT and BERT) logs the losses of CP=1, and its checkpoint resumes
#     at CP=1 on CP=1's curve (see below);
#   - the flags refuse sequence parallelism at TP=1 and with a seq_length TP does not divide, and
#     --recompute with --recompute_granularity=selective.
#   sequence_parallel_test.sh TINY_JOB_SH SYNTHETIC_CORPUS PREPROCESS PRETRAIN_GPT PRETRAIN_BERT RESHARD
set -uo pipefail
preprocess="$3"; gpt="$4"; bert="$5"; reshard="$6"
source "$1" "$2" mt_sp  # $work (removed at exit), fail, mpi, the GPT corpus $work/corpus (vocab 64).

make_bert_corpus "$3"  # $work/bert

common=(--num_layers=2 --hidden_size=32 --num_attention_heads=4 --seq_length=16
        --micro_batch_size=2 --global_batch_size=4 --lr=3e-3 --log_interval=1 --eval_iters=0
        --threads=1 --train_iters=20 --hidden_dropout=0.1 --attention_dropout=0.1)
gpt_flags=(--data_path="$work/corpus" --vocab_size=64 --make_vocab_size_divisible_by=8)
bert_flags=(--data_path="$work/bert" --mask_prob=0.15 --short_seq_prob=0.1)

# run NAME NP BINARY FLAGS...: 20 iterations, JSONL log and final checkpoint under $work/NAME.
run() {
  local name="$1" np="$2"; shift 2
  mpi "$np" "$@" "${common[@]}" --log_jsonl="$work/$name.jsonl" --save="$work/$name" \
    > "$work/$name.out" 2>&1 || { tail -20 "$work/$name.out"; fail "run $name"; }
}

for family in gpt bert; do
  if [[ $family == gpt ]]; then bin="$gpt"; flags=("${gpt_flags[@]}"); else bin="$bert"; flags=("${bert_flags[@]}"); fi
  run "${family}_tp1" 1 "$bin" "${flags[@]}"
  run "${family}_tp2" 2 "$bin" "${flags[@]}" --tensor_model_parallel_size=2
  run "${family}_sp" 2 "$bin" "${flags[@]}" --tensor_model_parallel_size=2 --sequence_parallel
  run "${family}_selective" 1 "$bin" "${flags[@]}" --recompute_granularity=selective
  run "${family}_full" 1 "$bin" "${flags[@]}" --recompute_granularity=full
  grep -q "sequence_parallel: true" "$work/${family}_sp.out" || fail "$family: flag not shown"
  for name in tp2 sp; do
    "$reshard" --load="$work/${family}_$name" --save="$work/${family}_${name}_as_tp1" \
      --tensor_model_parallel_size=1 > /dev/null || fail "reshard $family $name"
  done
  python3 - "$work" "$family" <<'PY' || fail "$family: sequence parallelism or recomputation differs"
import json, os, struct, sys, array
work, family = sys.argv[1:]
u = 2.0 ** -24

def curve(name):
    with open(os.path.join(work, "%s_%s.jsonl" % (family, name))) as f:
        return [json.loads(line)["lm_loss"] for line in f]

def weights(name):
    """The TP=1 checkpoint's f32 tensors by name; vocabulary-padded ones cut to the vocabulary
    (the padding rows are not part of the model, and resharding re-pads them)."""
    d = os.path.join(work, "%s_%s" % (family, name))
    it = int(open(os.path.join(d, "latest_checkpointed_iteration.txt")).read())
    shard = os.path.join(d, "iter_%07d" % it, "mp_rank_00")
    meta = json.load(open(os.path.join(shard, "metadata.json")))
    vocab = meta["model_config"]["vocab_size"]
    padded = {t["name"]: t["global_shape"] for t in meta["tensors"] if t["vocab_padded"]}
    data = open(os.path.join(shard, "model_optim.safetensors"), "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for key, t in header.items():
        if key == "__metadata__" or t["dtype"] != "F32":
            continue
        b, e = t["data_offsets"]
        out[key] = array.array("f", data[8 + n + b:8 + n + e])
        if key in padded:
            out[key] = out[key][:len(out[key]) // padded[key][0] * vocab]
        assert len(out[key]) > 0, (key, t, vocab)
    return out

c1, c2, csp = curve("tp1"), curve("tp2"), curve("sp")
assert len(c1) == len(c2) == len(csp) == 20, (len(c1), len(c2), len(csp))
d2 = max(abs(a - b) for a, b in zip(c1, c2))
dsp = max(abs(a - b) for a, b in zip(c1, csp))
bound = 4 * d2 + 64 * u * max(c1)
print("%s lm loss over 20 iterations: %.6f -> %.6f; max |TP=2 - TP=1| %.3g, "
      "max |TP=2+SP - TP=1| %.3g (bound %.3g)" % (family, c1[0], c1[-1], d2, dsp, bound))
assert c1[-1] < c1[0], "did not learn"
assert dsp <= bound, (dsp, bound)

w1, w2, wsp = weights("tp1"), weights("tp2_as_tp1"), weights("sp_as_tp1")
# Per tensor: the largest deviation relative to the tensor's largest TP=1 value; sequence
# parallelism within 4 times TP=2's for that tensor, plus 64 u.
rows = []
for key, a in w1.items():
    assert key in wsp and len(wsp[key]) == len(a), key
    scale = max(abs(x) for x in a) or 1.0
    d2 = max(abs(x - y) for x, y in zip(a, w2[key])) / scale
    dsp = max(abs(x - y) for x, y in zip(a, wsp[key])) / scale
    rows.append((dsp, d2, key))
    assert dsp <= 4 * d2 + 64 * u, (key, dsp, d2)
rows.sort(reverse=True)
print("%s final weights and optimizer state (%d tensors): largest deviations from TP=1, relative "
      "to the tensor's largest value (TP=2+SP, TP=2): %s" % (family, len(rows), "; ".join(
          "%s %.3g %.3g" % (k, a, b) for a, b, k in rows[:3])))
for name in ("selective", "full"):
    assert curve(name) == c1, name + ": losses differ from no recomputation"
    wr = weights(name)
    assert all(wr[k].tobytes() == a.tobytes() for k, a in w1.items()), name + ": weights differ"
print("%s: selective and full recomputation: the same 20 losses and final weights, bitwise" % family)
PY
done

# Context parallelism end to end (GPT and BERT, dropout on, attention probabilities too): CP=2
# (ring attention over 2 x 2 chunks) logs the losses of CP=1 within 1e-5 relative at every
# iteration (BERT: lm and sop), and its iteration-10 checkpoint (written by CP rank 0 in CP=1's
# layout) resumed at CP=1 logs CP=1's iterations 11-20 within 1e-5.
run_cp() {
  local name="$1" np="$2"; shift 2
  mpi "$np" "$@" "${common[@]}" --log_jsonl="$work/$name.jsonl" \
    > "$work/$name.out" 2>&1 || { tail -20 "$work/$name.out"; fail "run $name"; }
}
for family in gpt bert; do
  if [[ $family == gpt ]]; then bin=("$gpt" "${gpt_flags[@]}"); else bin=("$bert" "${bert_flags[@]}"); fi
  run_cp ${family}_cp1 1 "${bin[@]}"
  run_cp ${family}_cp2 2 "${bin[@]}" --context_parallel_size=2 --save="$work/${family}_cp2" \
    --save_interval=10
  grep -q "context_parallel_size: 2" "$work/${family}_cp2.out" || fail "cp: flag not shown"
  cp -r "$work/${family}_cp2" "$work/${family}_cp2_at10"
  echo 10 > "$work/${family}_cp2_at10/latest_checkpointed_iteration.txt"
  run_cp ${family}_cp1_resumed 1 "${bin[@]}" --load="$work/${family}_cp2_at10"
  python3 - "$work" "$family" <<'PY' || fail "$family: context parallelism differs from CP=1"
import json, os, sys
work, family = sys.argv[1:]
keys = ["lm_loss"] + (["sop_loss"] if family == "bert" else [])
def curve(name):
    with open(os.path.join(work, "%s_%s.jsonl" % (family, name))) as f:
        return [(r["iteration"], [r[k] for k in keys]) for r in map(json.loads, f)]
c1, c2, res = curve("cp1"), curve("cp2"), curve("cp1_resumed")
assert len(c1) == len(c2) == 20 and len(res) == 10, (len(c1), len(c2), len(res))
def worst(a, b):
    return max(abs(x - y) / abs(x) for (_, xs), (_, ys) in zip(a, b) for x, y in zip(xs, ys))
assert [i for i, _ in res] == [i for i, _ in c1[10:]], res
w, w_res = worst(c1, c2), worst(c1[10:], res)
print("%s %s, CP=2 against CP=1 over 20 iterations: worst relative %.3g; resumed at CP=1 from "
      "CP=2's iteration 10: %.3g" % (family, " and ".join(keys), w, w_res))
assert w < 1e-5 and w_res < 1e-5, (w, w_res)
PY
done

# Bad flags: one line naming the flag, non-zero exit.
bad() {
  local np="$1" want="$2"; shift 2
  mpi "$np" "$gpt" "${gpt_flags[@]}" "${common[@]}" "$@" > "$work/bad.out" 2>&1 &&
    fail "accepted: $*"
  grep -q -- "$want" "$work/bad.out" || fail "unclear refusal of $*: $(tail -2 "$work/bad.out")"
}
bad 1 "sequence_parallel needs tensor parallelism" --sequence_parallel
bad 2 "not divisible by --tensor_model_parallel_size" --sequence_parallel \
  --tensor_model_parallel_size=2 --seq_length=15
bad 1 "contradicts --recompute_granularity=selective" --recompute --recompute_granularity=selective
echo PASS

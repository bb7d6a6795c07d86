#!/bin/bash
# Expert parallelism end to end through the variant's pretrain_gpt (a tiny moe-tiny: 2 layers,
# 4 experts, top-2, aux loss on, dropout on, 20 iterations, ranks oversubscribed):
#   - DP=2 with --expert_model_parallel_size=2 (each rank holds and runs 2 of the 4 experts,
#     tokens exchanged by all-to-all) logs the lm loss and the aux loss of DP=2 at EP=1 within
#     1e-5 at every iteration (and each expert's load, which sums to 1), and ends with its weights
#     within 1e-5 of each tensor's largest value (read from all of the EP=2 checkpoint's shards);
#   - the same at TP=2 x DP=2 x EP=2 and at DP=4 x EP=2 against DP=4 (4 ranks; the latter
#     sums the experts' gradients over expert-data-parallel groups of 2), and at PP=2 x DP=2 x
#     EP=2 (one layer per stage: the logged aux loss and loads are summed over the stages);
#   - each rank's parameters and Adam moments fall by half the experts' elements at EP=2
#     (counted from the checkpoint's shapes, not the program's);
#   - a checkpoint saved at EP=2 is one shard per EP rank (mp_rank_00_000, mp_rank_00_001), each
#     holding its own experts and moments (listed in its metadata), EP rank 0's the dense tensors
#     too;
#   - a checkpoint saved at EP=2 after 10 iterations resumes at EP=1, at EP=2 and (4 ranks) at
#     EP=4, one saved at EP=1 resumes at EP=2, each continuing the EP=1 curve; with an expert
#     shard missing or a byte of one changed it is refused in one line;
#   - the reshard tool turns the EP=2 checkpoint into one shard holding every expert, bit for
#     bit, and the Hugging Face export (Mixtral layout) of both is byte-identical;
#   - --finetune from an EP=2 checkpoint at EP=2 follows the same at EP=1 (each rank loads its
#     own experts);
#   - an asynchronous save at EP=2 writes the same tensors, bit for bit, as the synchronous one;
#   - with --use_distributed_optimizer (dense state sharded over DP, the experts' over the
#     expert-data-parallel group) DP=2 x EP=2 follows the EP=1 curve for 20 iterations, a DP=4 x
#     EP=2 checkpoint of it holds the same weights and moments as the replicated optimizer's, and
#     resumes with it (DP=4 x EP=2) and without it (DP=2, EP=1), continuing the curve;
#   - the flags refuse an EP size that does not divide the DP size or the experts and EP on a
#     model without experts, each with one line naming the flag.
#   ep_test.sh SYNTHETIC_CORPUS PRETRAIN_GPT RESHARD_CHECKPOINT CONVERT_CHECKPOINT
set -uo pipefail
corpus_bin="$1"; gpt="$2"; reshard="$3"; convert="$4"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_moe_ep || exit 1

"$corpus_bin" --output_prefix="$work/corpus" --vocab=64 --documents=100 || fail "corpus"
common=(--model=moe-tiny --data_path="$work/corpus" --vocab_size=64
        --make_vocab_size_divisible_by=8 --num_layers=2 --hidden_size=32 --num_attention_heads=4
        --ffn_hidden_size=32 --num_experts=4 --moe_router_topk=2 --moe_aux_loss_coeff=0.01
        --max_position_embeddings=16 --seq_length=16 --micro_batch_size=2 --global_batch_size=8
        --lr=3e-3 --lr_decay_samples=160 --log_interval=1 --eval_iters=0 --threads=1
        --hidden_dropout=0.1 --attention_dropout=0.1)

# run NAME NP FLAGS...: JSONL log and final checkpoint under $work/NAME.
run() {
  local name="$1" np="$2"; shift 2
  mpi "$np" "$gpt" "${common[@]}" --log_jsonl="$work/$name.jsonl" --save="$work/$name" "$@" \
    > "$work/$name.out" 2>&1 || { tail -20 "$work/$name.out"; fail "run $name"; }
}
run ep1 2 --train_iters=20
run ep2 2 --train_iters=20 --expert_model_parallel_size=2
run ep2_tp2 4 --train_iters=20 --expert_model_parallel_size=2 --tensor_model_parallel_size=2
run ep1_dp4 4 --train_iters=20
run ep2_dp4 4 --train_iters=20 --expert_model_parallel_size=2
run ep2_pp2 4 --train_iters=20 --expert_model_parallel_size=2 --pipeline_model_parallel_size=2
run ep2_half 2 --train_iters=10 --expert_model_parallel_size=2
run ep2_half_async 2 --train_iters=10 --expert_model_parallel_size=2 --async_save
run ep1_half 2 --train_iters=10
run ep2_dist 2 --train_iters=20 --expert_model_parallel_size=2 --use_distributed_optimizer
run ep2_dist_dp4_half 4 --train_iters=10 --expert_model_parallel_size=2 --use_distributed_optimizer
# resume NAME FROM EP [NP [FLAGS...]]: checkpoint FROM (saved at iteration 10) continued to 20 at
# EP.
resume() {
  local name="$1" from="$2" ep="$3" np="${4:-2}"
  shift 4 2> /dev/null || shift $#
  cp -r "$work/$from" "$work/$name"
  mpi "$np" "$gpt" "${common[@]}" --train_iters=20 --load="$work/$name" "$@" \
    --expert_model_parallel_size="$ep" --log_jsonl="$work/$name.jsonl" > "$work/$name.out" 2>&1 ||
    { tail -20 "$work/$name.out"; fail "resuming $from at EP=$ep"; }
  grep -q "loaded checkpoint from .* at iteration 10" "$work/$name.out" ||
    fail "did not resume: $(head -3 "$work/$name.out")"
}
resume resumed ep2_half 1
resume resumed_ep2 ep2_half 2
resume resumed_from_ep1 ep1_half 2
resume resumed_ep4 ep2_half 4 4
resume resumed_dist ep2_dist_dp4_half 2 4 --use_distributed_optimizer
resume resumed_dist_ep1 ep2_dist_dp4_half 1
# refused NAME WANT: a copy of ep2_half, changed by the caller, does not resume.
refused() {
  mpi 2 "$gpt" "${common[@]}" --train_iters=20 --load="$work/$1" \
    > "$work/$1.out" 2>&1 && fail "resumed from $1"
  grep -q -- "$2" "$work/$1.out" || fail "unclear refusal of $1: $(tail -2 "$work/$1.out")"
}
cp -r "$work/ep2_half" "$work/missing" && rm -r "$work/missing/iter_0000010/mp_rank_00_001"
refused missing "shard mp_rank_00_001 of 2 is missing"
cp -r "$work/ep2_half" "$work/corrupt"
python3 - "$work/corrupt/iter_0000010/mp_rank_00_001/model_optim.safetensors" <<'PY'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(-5, 2); b = f.read(1); f.seek(-5, 2); f.write(bytes([b[0] ^ 1]))
PY
refused corrupt "mp_rank_00_001/model_optim.safetensors: tensor '.*' fails its CRC32C check"
"$reshard" --load="$work/ep2_half" --save="$work/resharded" --tensor_model_parallel_size=1 \
  > "$work/resharded.out" 2>&1 || { cat "$work/resharded.out"; fail "resharding the EP=2 checkpoint"; }
for name in ep2_half resharded; do
  "$convert" --to=hf --input="$work/$name" --save="$work/hf_$name" > "$work/hf_$name.out" 2>&1 ||
    { cat "$work/hf_$name.out"; fail "exporting $name to Hugging Face"; }
done
for f in "$work"/hf_resharded/*; do
  cmp -s "$f" "$work/hf_ep2_half/$(basename "$f")" || fail "HF export of the EP=2 shards: $f differs"
done
ls "$work"/hf_ep2_half/*.safetensors > /dev/null || fail "no HF export"
# finetune NAME EP: the weights of ep2_half (all 4 experts) only, 10 iterations at EP.
finetune() {
  mpi 2 "$gpt" "${common[@]}" --train_iters=10 --load="$work/ep2_half" --finetune \
    --expert_model_parallel_size="$2" --log_jsonl="$work/$1.jsonl" > "$work/$1.out" 2>&1 ||
    { tail -20 "$work/$1.out"; fail "fine-tuning at EP=$2"; }
  grep -q "loaded the weights of .* iteration 10 only" "$work/$1.out" ||
    fail "did not load the weights: $(head -3 "$work/$1.out")"
}
finetune finetuned_ep1 1
finetune finetuned_ep2 2
grep -q "expert_model_parallel_size: 2" "$work/ep2.out" || fail "flag not shown"

python3 - "$work" <<'PY' || fail "expert parallelism changes the numbers"
import array, json, os, struct, sys
work = sys.argv[1]

def curve(name, key):
    with open(os.path.join(work, name + ".jsonl")) as f:
        return [(r["iteration"], r[key]) for r in map(json.loads, f)]

def shards(name):
    d = os.path.join(work, name)
    it = int(open(os.path.join(d, "latest_checkpointed_iteration.txt")).read())
    d = os.path.join(d, "iter_%07d" % it)
    return [os.path.join(d, s) for s in sorted(os.listdir(d)) if s.startswith("mp_rank_")]

def shard_weights(shard):
    data = open(os.path.join(shard, "model_optim.safetensors"), "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    out = {}
    for key, t in json.loads(data[8:8 + n]).items():
        if key != "__metadata__" and t["dtype"] == "F32":
            b, e = t["data_offsets"]
            out[key] = array.array("f", data[8 + n + b:8 + n + e])
    return out

# Every tensor of a TP=1 checkpoint, from all of its (expert-parallel) shards.
def weights(name):
    out = {}
    for shard in shards(name):
        w = shard_weights(shard)
        assert not set(w) & set(out), (shard, sorted(set(w) & set(out)))
        out.update(w)
    return out

def expert_of(key):
    return int(key.split(".experts.")[1].split(".")[0]) if ".experts." in key else None

base = curve("ep1", "lm_loss")
assert len(base) == 20 and base[-1][1] < base[0][1], base
# Each expert's share of the routed slots, logged beside the losses: they sum to 1.
loads = [curve("ep1", "moe_load_%d" % e) for e in range(4)]
assert all(abs(sum(l[i][1] for l in loads) - 1) < 1e-9 for i in range(20)), loads
for base_name, name in (("ep1", "ep2"), ("ep1", "ep2_tp2"), ("ep1_dp4", "ep2_dp4"),
                        ("ep1", "ep2_pp2"), ("finetuned_ep1", "finetuned_ep2"), ("ep1", "ep2_dist")):
    for key in ("lm_loss", "moe_aux_loss", "moe_load_0", "moe_load_3"):
        a, b = curve(base_name, key), curve(name, key)
        d = max(abs(x[1] - y[1]) for x, y in zip(a, b))
        print("%s %s over %d iterations: %.6f -> %.6f, max |EP=2 - EP=1| %.3g" %
              (name, key, len(b), b[0][1], b[-1][1], d))
        assert len(a) == len(b) and len(a) in (10, 20) and d <= 1e-5, (name, key, d)
w1 = weights("ep1")
for base_name, name in (("ep1", "ep2"), ("ep1_dp4", "ep2_dp4")):
    w0 = weights(base_name)
    w = weights(name)
    assert sorted(w) == sorted(w0), sorted(set(w) ^ set(w0))
    worst = max((max(abs(x - y) for x, y in zip(a, w[k])) / (max(abs(x) for x in a) or 1), k)
                for k, a in w0.items())
    print("%s final weights (%d tensors): largest deviation from EP=1 relative to the tensor's "
          "largest value: %.3g (%s)" % (name, len(w0), worst[0], worst[1]))
    assert worst[0] <= 1e-5, worst
assert any(".experts.3." in k for k in w1), "no experts in the checkpoint"
# An asynchronous save at EP=2 writes what the synchronous one writes, every expert included.
sync_w, async_w = weights("ep2_half"), weights("ep2_half_async")
assert sorted(sync_w) == sorted(async_w) and all(sync_w[k] == async_w[k] for k in sync_w), \
    sorted(k for k in sync_w if sync_w[k] != async_w.get(k))
print("async save at EP=2: %d tensors, identical to the synchronous save's" % len(sync_w))
# One shard per EP rank, each with its own experts (values and moments) only, listed in its
# metadata; the dense tensors in EP rank 0's.
for name in ("ep2_half", "ep2_half_async", "ep2"):
    names = [os.path.basename(s) for s in shards(name)]
    assert names == ["mp_rank_00_000", "mp_rank_00_001"], (name, names)
    for r, shard in enumerate(shards(name)):
        meta = json.load(open(os.path.join(shard, "metadata.json")))
        held_experts = {expert_of(k) for k in shard_weights(shard)}
        mine = [2 * r, 2 * r + 1]
        assert meta["expert_model_parallel_size"] == 2 and meta["expert_model_parallel_rank"] == r
        assert meta["experts"] == mine, (shard, meta["experts"])
        assert held_experts - {None} == set(mine), (shard, held_experts)
        assert (None in held_experts) == (r == 0), (shard, "dense tensors")
        assert sum(expert_of(k) == mine[1] for k in shard_weights(shard)) == 2 * 3 * 3
print("EP=2 checkpoints: one shard per EP rank holding its own experts")
resharded = weights("resharded")
assert [os.path.basename(s) for s in shards("resharded")] == ["mp_rank_00"]
assert sorted(resharded) == sorted(sync_w) and all(resharded[k] == sync_w[k] for k in sync_w)
print("the reshard tool gathers the EP=2 shards into one (%d tensors, bit for bit)" % len(sync_w))
# The distributed optimizer's checkpoint (DP=4 x EP=2: its shards gathered to each EP shard's
# writer) holds what the replicated optimizer's does (DP=2 x EP=2), moments included.
dist_w = weights("ep2_dist_dp4_half")
assert sorted(dist_w) == sorted(sync_w), sorted(set(dist_w) ^ set(sync_w))
worst = max((max(abs(x - y) for x, y in zip(a, dist_w[k])) / (max(abs(x) for x in a) or 1), k)
            for k, a in sync_w.items())
print("distributed optimizer's checkpoint at DP=4 x EP=2 (%d tensors, moments included): largest "
      "deviation from the replicated optimizer's relative to the tensor's largest value: %.3g (%s)"
      % (len(sync_w), worst[0], worst[1]))
assert worst[0] <= 1e-4, worst
for name in ("resumed", "resumed_ep2", "resumed_from_ep1", "resumed_ep4", "resumed_dist",
             "resumed_dist_ep1"):
    resumed = dict(curve(name, "lm_loss"))
    d = max(abs(resumed[i] - l) for i, l in base if i > 10)
    print("%s at iteration 10: max |lm loss - EP=1's| over 11-20 %.3g" % (name, d))
    assert sorted(resumed) == list(range(11, 21)) and d <= 1e-5, (name, sorted(resumed), d)

# Memory per rank: the parameters (and each Adam moment) a rank holds, as pretrain_gpt reports
# them, fall at EP=2 by half the experts' elements, counted from the EP=1 checkpoint's shapes.
def held(name):
    for line in open(os.path.join(work, name + ".out")):
        if line.startswith("parameter elements on rank 0: "):
            p, m = line.split(": ", 1)[1].split("; adam moments: 2 x ")
            return int(p), int(m.split()[0])
    raise AssertionError("no parameter count in " + name)
params = {k: a for k, a in w1.items() if not k.startswith("optimizer.")}
total = sum(len(a) for a in params.values())
experts = sum(len(a) for k, a in params.items() if ".mlp.experts." in k)
assert experts == 2 * 4 * 3 * 32 * 32, experts  # layers x experts x (gate, up, down) x h x f
p1, m1 = held("ep1")
p2, m2 = held("ep2")
print("elements per rank: EP=1 %d (moments 2 x %d), EP=2 %d (moments 2 x %d); experts %d of %d" %
      (p1, m1, p2, m2, experts, total))
assert p1 == total and m1 == total, (p1, m1, total)
assert p2 == total - experts // 2 and m2 == p2, (p2, m2, total, experts)
PY

# Bad flags: one line naming the flag, non-zero exit.
bad() {
  local np="$1" want="$2"; shift 2
  mpi "$np" "$gpt" "${common[@]}" --train_iters=1 "$@" > "$work/bad.out" 2>&1 &&
    fail "accepted: $*"
  grep -q -- "$want" "$work/bad.out" || fail "unclear refusal of $*: $(tail -2 "$work/bad.out")"
}
bad 2 "expert_model_parallel_size 4 must be >= 1 and divide the data-parallel size 2" \
  --expert_model_parallel_size=4
bad 2 "expert_model_parallel_size 2 must divide num_experts 3" --expert_model_parallel_size=2 \
  --num_experts=3
bad 1 "moe_router_topk 5 must be in \[1, num_experts = 4\]" --moe_router_topk=5
bad 2 "has no experts" --expert_model_parallel_size=2 --model= --position_embeddings
echo PASS

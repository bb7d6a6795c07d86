#!/bin/bash
# Expert parallelism end to end through the variant's pretrain_gpt (a tiny moe-tiny: 2 layers,
# 4 experts, top-2, aux loss on, dropout on, 20 iterations, ranks oversubscribed):
#   - DP=2 with --expert_model_parallel_size=2 (each rank holds and runs 2 of the 4 experts,
#     tokens exchanged by all-to-all) logs the lm loss and the aux loss of DP=2 at EP=1 within
#     1e-5 at every iteration (and each expert's load, which sums to 1), and ends with its weights
#     within 1e-5 of each tensor's largest value (the EP=2 checkpoint holds all 4 experts);
#   - the same at TP=2 x DP=2 x EP=2 and at DP=4 x EP=2 against DP=4 (4 ranks; the latter
#     sums the experts' gradients over expert-data-parallel groups of 2), and at PP=2 x DP=2 x
#     EP=2 (one layer per stage: the logged aux loss and loads are summed over the stages);
#   - each rank's parameters and Adam moments fall by half the experts' elements at EP=2
#     (counted from the checkpoint's shapes, not the program's);
#   - a checkpoint saved at EP=2 after 10 iterations resumes at EP=1 and at EP=2, one saved at
#     EP=1 resumes at EP=2, each continuing the EP=1 curve;
#   - --finetune from an EP=2 checkpoint at EP=2 follows the same at EP=1 (each rank loads its
#     own experts);
#   - an asynchronous save at EP=2 writes the same tensors, bit for bit, as the synchronous one;
#   - the flags refuse an EP size that does not divide the DP size or the experts, EP on a model
#     without experts and EP with the distributed optimizer, each with one line naming the flag.
#   ep_test.sh SYNTHETIC_CORPUS PRETRAIN_GPT
set -uo pipefail
corpus_bin="$1"; gpt="$2"
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
# resume NAME FROM EP: checkpoint FROM (saved at iteration 10) continued to 20 at EP.
resume() {
  local name="$1" from="$2" ep="$3"
  cp -r "$work/$from" "$work/$name"
  mpi 2 "$gpt" "${common[@]}" --train_iters=20 --load="$work/$name" \
    --expert_model_parallel_size="$ep" --log_jsonl="$work/$name.jsonl" > "$work/$name.out" 2>&1 ||
    { tail -20 "$work/$name.out"; fail "resuming $from at EP=$ep"; }
  grep -q "loaded checkpoint from .* at iteration 10" "$work/$name.out" ||
    fail "did not resume: $(head -3 "$work/$name.out")"
}
resume resumed ep2_half 1
resume resumed_ep2 ep2_half 2
resume resumed_from_ep1 ep1_half 2
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

def weights(name):
    d = os.path.join(work, name)
    it = int(open(os.path.join(d, "latest_checkpointed_iteration.txt")).read())
    shard = os.path.join(d, "iter_%07d" % it, "mp_rank_00")
    data = open(os.path.join(shard, "model_optim.safetensors"), "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    out = {}
    for key, t in json.loads(data[8:8 + n]).items():
        if key != "__metadata__" and t["dtype"] == "F32":
            b, e = t["data_offsets"]
            out[key] = array.array("f", data[8 + n + b:8 + n + e])
    return out

base = curve("ep1", "lm_loss")
assert len(base) == 20 and base[-1][1] < base[0][1], base
# Each expert's share of the routed slots, logged beside the losses: they sum to 1.
loads = [curve("ep1", "moe_load_%d" % e) for e in range(4)]
assert all(abs(sum(l[i][1] for l in loads) - 1) < 1e-9 for i in range(20)), loads
for base_name, name in (("ep1", "ep2"), ("ep1", "ep2_tp2"), ("ep1_dp4", "ep2_dp4"),
                        ("ep1", "ep2_pp2"), ("finetuned_ep1", "finetuned_ep2")):
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
for name in ("resumed", "resumed_ep2", "resumed_from_ep1"):
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
bad 2 "use_distributed_optimizer is not supported with expert_model_parallel_size > 1" \
  --expert_model_parallel_size=2 --use_distributed_optimizer
echo PASS

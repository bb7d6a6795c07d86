#!/bin/bash
# Expert parallelism end to end through the variant's pretrain_gpt (a tiny moe-tiny: 2 layers,
# 4 experts, top-2, aux loss on, dropout on, 20 iterations, ranks oversubscribed):
#   - DP=2 with --expert_model_parallel_size=2 (each rank runs 2 of the 4 experts, tokens
#     exchanged by all-to-all) logs the lm loss and the aux loss of DP=2 at EP=1 within 1e-5 at
#     every iteration (and each expert's load, which sums to 1), and ends with its weights within
#     1e-5 of each tensor's largest value;
#   - the same at TP=2 x DP=2 x EP=2 (4 ranks), and with the distributed optimizer;
#   - a checkpoint saved at EP=2 after 10 iterations resumes at EP=1 and continues the EP=1 curve;
#   - the flags refuse an EP size that does not divide the DP size or the experts, and EP on a
#     model without experts, each with one line naming the flag.
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
run ep2_dist 2 --train_iters=20 --expert_model_parallel_size=2 --use_distributed_optimizer
run ep2_half 2 --train_iters=10 --expert_model_parallel_size=2
cp -r "$work/ep2_half" "$work/resumed"
mpi 2 "$gpt" "${common[@]}" --train_iters=20 --load="$work/resumed" \
  --log_jsonl="$work/resumed.jsonl" > "$work/resumed.out" 2>&1 ||
  { tail -20 "$work/resumed.out"; fail "resuming the EP=2 checkpoint at EP=1"; }
grep -q "loaded checkpoint from .* at iteration 10" "$work/resumed.out" ||
  fail "did not resume: $(head -3 "$work/resumed.out")"
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
for name in ("ep2", "ep2_tp2", "ep2_dist"):
    for key in ("lm_loss", "moe_aux_loss", "moe_load_0"):
        a, b = curve("ep1", key), curve(name, key)
        d = max(abs(x[1] - y[1]) for x, y in zip(a, b))
        print("%s %s over 20 iterations: %.6f -> %.6f, max |EP=2 - EP=1| %.3g" %
              (name, key, b[0][1], b[-1][1], d))
        assert len(a) == len(b) and d <= 1e-5, (name, key, d)
w1 = weights("ep1")
for name in ("ep2",):
    w = weights(name)
    worst = max((max(abs(x - y) for x, y in zip(a, w[k])) / (max(abs(x) for x in a) or 1), k)
                for k, a in w1.items())
    print("%s final weights (%d tensors): largest deviation from EP=1 relative to the tensor's "
          "largest value: %.3g (%s)" % (name, len(w1), worst[0], worst[1]))
    assert worst[0] <= 1e-5, worst
assert any(".experts.3." in k for k in w1), "no experts in the checkpoint"
resumed = dict(curve("resumed", "lm_loss"))
d = max(abs(resumed[i] - l) for i, l in base if i > 10)
print("EP=2 checkpoint at iteration 10 resumed at EP=1: max |lm loss - EP=1's| over 11-20 %.3g" % d)
assert sorted(resumed) == list(range(11, 21)) and d <= 1e-5, (sorted(resumed), d)
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

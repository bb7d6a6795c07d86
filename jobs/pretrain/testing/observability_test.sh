#!/bin/bash
# What a run reports besides its log line, read back by readers that are not the writers:
#  1. A 20-iteration GPT run (DP=2) with --tensorboard_dir and every TensorBoard option: its event
#     file, decoded by tools/tfevents_decode.py (protoc and Debian's crc32c, no code of the
#     writer), holds Megatron's tags with the JSON lines' values for every iteration (float32
#     rounding), their "vs samples" twins at the consumed samples, the validation losses the log
#     prints (and exp of them as ppl), iteration-time and the level-1 timers, and the memory
#     (resident <= peak resident). params-norm at the last iteration equals the float64 L2 norm
#     of the f32 weights in the checkpoint saved there (read from the safetensors file here), and
#     num-zeros counts at least the 4 x 64 gradient elements of the padded vocabulary rows.
#  2. The same job at TP=2 x DP=2 (pretrain_gpt_with_faults, rank 2 sleeping 150 ms per
#     iteration): --timing_log_level=2 prints forward/backward compute, the gradient all-reduce
#     and the optimizer with (min, max) over the ranks; --log_straggler names rank 2 and no
#     other; params norm (each parameter counted once over the TP ranks) equals the TP=1 run's
#     and num zeros counts the padded rows once.
#   observability_test.sh SYNTHETIC_CORPUS_BIN PRETRAIN_GPT_BIN PRETRAIN_GPT_WITH_FAULTS_BIN
set -uo pipefail
corpus_bin="$1"; pretrain="$2"; faulty="$3"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_observability || exit 1
decoder="${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/tfevents_decode.py"
"$corpus_bin" --output_prefix="$work/corpus" --vocab=60 --documents=300 >/dev/null || fail "corpus"
# Vocabulary 60 padded to 64: four rows of the word embedding that no token reaches.
job=(--data_path="$work/corpus" --vocab_size=60 --make_vocab_size_divisible_by=8 --num_layers=2
     --hidden_size=64 --num_attention_heads=4 --seq_length=32 --micro_batch_size=2
     --global_batch_size=8 --lr=3e-3 --log_interval=1 --threads=1 --distributed_timeout=60
     --lr_decay_style=constant --log_num_zeros_in_grad --log_params_norm)

mpi 2 "$pretrain" "${job[@]}" --train_iters=20 --eval_interval=10 --eval_iters=2 \
  --tensorboard_dir="$work/tb" --log_jsonl="$work/log.jsonl" --log_timers_to_tensorboard \
  --timing_log_level=1 --log_memory_to_tensorboard --log_validation_ppl_to_tensorboard \
  --save="$work/ckpt" > "$work/run1.out" 2>&1 || { cat "$work/run1.out"; fail "TP=1 run"; }
[[ $(ls "$work/tb" | grep -c tfevents) -eq 1 ]] || fail "not one event file: $(ls "$work/tb")"
/usr/bin/python3 "$decoder" "$work/tb" > "$work/scalars.jsonl" || fail "the event file does not decode"

/usr/bin/python3 - "$work" <<'PY' || fail "TensorBoard scalars"
import json, math, re, struct, sys
work = sys.argv[1]
events = [json.loads(l) for l in open(f"{work}/scalars.jsonl")]
jsonl = {j["iteration"]: j for j in map(json.loads, open(f"{work}/log.jsonl"))}
def f32(x): return struct.unpack("<f", struct.pack("<f", x))[0]
by = {}
for e in events:
    by.setdefault(e["tag"], {})[e["step"]] = e["value"]
def same(tag, step, want):
    got = by.get(tag, {}).get(step)
    assert got is not None, f"no '{tag}' at step {step}"
    assert got == f32(want) or (math.isnan(got) and math.isnan(want)), f"'{tag}' at {step}: {got} != {want}"
fields = {"lm loss": "lm_loss", "learning-rate": "learning_rate", "grad-norm": "grad_norm",
          "loss-scale": "loss_scale", "num-zeros": "num_zeros", "params-norm": "params_norm"}
assert sorted(jsonl) == list(range(1, 21)), sorted(jsonl)
for it, j in jsonl.items():
    for tag, key in fields.items():
        same(tag, it, j[key])
        same(tag + " vs samples", j["consumed_samples"], j[key])
    same("batch-size", it, 8)
    assert by["iteration-time"][it] > 0 and by["forward-backward-time"][it] > 0
    assert by["optimizer-time"][it] > 0 and "forward-compute-time" not in by  # level 1 only
    assert 1e6 < by["mem-resident-bytes"][it] <= by["mem-max-resident-bytes"][it]
    assert 4 * 64 <= j["num_zeros"] < 4 * 64 + 64, j["num_zeros"]
printed = {int(m[0]): float(m[1]) for m in
           re.findall(r"validation at iteration (\d+) \| lm loss: (\S+)", open(f"{work}/run1.out").read())}
assert sorted(printed) == [10, 20], printed
for it, loss in printed.items():
    got = by["lm loss validation"][it]
    assert abs(got - loss) <= 1e-6 * loss, (it, got, loss)
    assert abs(by["lm loss validation ppl"][it] - math.exp(got)) <= 1e-5 * math.exp(got)
    assert by["lm loss validation vs samples"][8 * it] == got
# The weights' norm against the checkpoint of iteration 20 (one shard at TP=1).
path = f"{work}/ckpt/iter_0000020/mp_rank_00/model_optim.safetensors"
data = open(path, "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
sq = 0.0
for name, t in header.items():
    if name == "__metadata__" or name.startswith("optimizer."):
        continue
    assert t["dtype"] == "F32", (name, t["dtype"])
    b, e = t["data_offsets"]
    sq += sum(v * v for v in struct.unpack(f"<{(e - b) // 4}f", data[8 + n + b:8 + n + e]))
norm = math.sqrt(sq)
assert abs(jsonl[20]["params_norm"] - norm) <= 1e-5 * norm, (jsonl[20]["params_norm"], norm)
print(f"tensorboard: {len(events)} scalars, {len(by)} tags, 20 iterations as the JSON lines; "
      f"params norm {jsonl[20]['params_norm']:.6f} vs the checkpoint's {norm:.6f}")
PY

# 2. TP=2 x DP=2 with a straggler.
mpi 4 "$faulty" "${job[@]}" --train_iters=4 --log_interval=2 --eval_iters=0 \
  --tensor_model_parallel_size=2 --timing_log_level=2 --log_straggler --slow_rank=2 \
  --slow_rank_ms=150 > "$work/run2.out" 2>&1 || { cat "$work/run2.out"; fail "TP=2 run"; }
grep -A30 "^(min, max) time across ranks (ms):" "$work/run2.out" | head -20
/usr/bin/python3 - "$work" <<'PY' || fail "timers, straggler report or norms"
import re, sys
work = sys.argv[1]
out = open(f"{work}/run2.out").read()
reports = out.split("(min, max) time across ranks (ms):")[1:]
assert len(reports) == 2, len(reports)
for r in reports:
    timers = dict((m[0], (float(m[1]), float(m[2])))
                  for m in re.findall(r"\n    (\S+) \.+: \((\S+), (\S+)\)", r))
    for name in ["forward-backward", "forward-compute", "backward-compute", "all-grads-sync",
                 "optimizer", "optimizer-inner-step"]:
        lo, hi = timers[name]
        assert 0 <= lo <= hi, (name, lo, hi)
stragglers = re.findall(r"straggler report .*", out)
assert len(stragglers) == 2 and all("; rank 2 is a straggler" in s for s in stragglers), stragglers
tp2 = re.findall(r"iteration +(\d+)/.*num zeros: (\d+) \| params norm: (\S+)", out)
tp1 = {int(m[0]): (int(m[1]), float(m[2])) for m in
       re.findall(r"iteration +(\d+)/.*num zeros: (\d+) \| params norm: (\S+)",
                  open(f"{work}/run1.out").read())}
assert len(tp2) == 2
for it, zeros, norm in tp2:
    z1, n1 = tp1[int(it)]
    # Zeros beyond the padding's are chance roundings that TP=2 sums in another order.
    assert 4 * 64 <= int(zeros) < 4 * 64 + 64 and abs(float(norm) - n1) <= 2e-3, (it, zeros, norm, z1, n1)
print("TP=2 x DP=2:", stragglers[-1])
PY
echo PASS

#!/bin/bash
# Training across two "nodes" of tools/cluster (network namespaces on a bridge; TCP between them,
# shared memory only inside one) equals the serial run:
#   - the ranks land where the mapping says (ranks 0-1 on node1, 2-3 on node2) and bytes cross
#     the link (the bridge ports' counters);
#   - NCCL's bootstrap exchange (comm/bootstrap_id.h) across nodes;
#   - GPT and BERT at TP=2 inside a node x DP=2 across the nodes: every iteration's loss and
#     gradient norm within 1e-6 (relative) of one process;
#   - GPT at PP=2 with one stage per node;
#   - a checkpoint saved across two nodes resumes on one node, and one saved on one node resumes
#     across two, continuing the serial curve.
# Needs root (the cluster); prints SKIP and passes where a cluster cannot be made.
#   multinode_test.sh SYNTHETIC_CORPUS PRETRAIN_GPT PRETRAIN_BERT PREPROCESS BOOTSTRAP_ID_TEST
set -uo pipefail
corpus_bin="$1"; gpt_bin="$2"; bert_bin="$3"; preprocess="$4"; bootstrap_test="$5"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_multinode || exit 1
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/cluster/test_lib.sh" 1
"$cluster" up --id $id --nodes 2 >/dev/null || fail "cluster up"
start=$(date +%s)

# on HOSTS NP ARGS...: ARGS under mpirun on the cluster, bounded.
on() {
  local hosts="$1" np="$2"
  shift 2
  timeout --foreground 120 "$cluster" mpirun --id $id -H "$hosts" -np "$np" "$@"
}
link_bytes() {  # bytes through node2's bridge port, both ways
  ip -s -j link show "mtc${id}n2" |
    python3 -c 'import json,sys; s=json.load(sys.stdin)[0]["stats64"]; print(s["rx"]["bytes"]+s["tx"]["bytes"])'
}

# 1. Placement, and the bootstrap exchange across nodes.
got=$(on node1:2,node2:2 4 sh -c 'echo $OMPI_COMM_WORLD_RANK $(hostname)' | sort | tr '\n' ' ')
[[ "$got" == "0 node1 1 node1 2 node2 3 node2 " ]] || fail "placement: $got"
on node1:2,node2:2 4 "$bootstrap_test" >"$work/bootstrap.out" 2>&1 ||
  { cat "$work/bootstrap.out"; fail "bootstrap id across nodes"; }
grep -q "PASSED.*2 tests" "$work/bootstrap.out" || fail "bootstrap test: $(tail -3 "$work/bootstrap.out")"

# 2. Data.
"$corpus_bin" --output_prefix="$work/corpus" --vocab=64 --documents=300 >/dev/null || fail corpus
sentences "$work/bert.txt" 200 3
"$preprocess" --input="$work/bert.txt" --input_format=text --tokenizer=bert --split_sentences \
  --output_prefix="$work/bert" --workers=1 >/dev/null 2>&1 || fail "preprocess"
common=(--num_layers=2 --hidden_size=64 --num_attention_heads=4 --seq_length=32
        --micro_batch_size=2 --global_batch_size=8 --lr=3e-3 --min_lr=3e-4
        --lr_warmup_samples=16 --train_iters=8 --log_interval=1 --eval_iters=0 --threads=1
        --distributed_timeout=60)
gpt=("$gpt_bin" --data_path="$work/corpus" --vocab_size=64 --make_vocab_size_divisible_by=8
     "${common[@]}")
bert=("$bert_bin" --data_path="$work/bert" --mask_prob=0.15 --short_seq_prob=0.1 "${common[@]}")

# same REFERENCE CANDIDATE FIRST_ITERATION: the candidate's iterations from FIRST_ITERATION on
# have the reference's loss and gradient norm within 1e-6 (relative).
same() {
  python3 - "$@" <<'PY' || fail "$2 differs from $1"
import json, sys
ref = {r["iteration"]: r for r in map(json.loads, open(sys.argv[1]))}
got = [json.loads(l) for l in open(sys.argv[2])]
first = int(sys.argv[3])
assert [r["iteration"] for r in got] == list(range(first, 9)), [r["iteration"] for r in got]
worst = 0.0
for r in got:
    for k in ("loss", "grad_norm"):
        a, b = ref[r["iteration"]][k], r[k]
        worst = max(worst, abs(a - b) / abs(a))
        assert abs(a - b) <= 1e-6 * abs(a), (r["iteration"], k, a, b)
print("%s: iterations %d-8 within %.1e of %s" % (sys.argv[2].split("/")[-1], first, worst,
                                                sys.argv[1].split("/")[-1]))
PY
}
serial() {  # NAME COMMAND...: one process, this machine
  timeout --foreground 120 "${@:2}" --log_jsonl="$work/$1.jsonl" >"$work/$1.out" 2>&1 ||
    { cat "$work/$1.out"; fail "$1"; }
}
run() {  # NAME HOSTS NP COMMAND...: on the cluster
  on "$2" "$3" "${@:4}" --log_jsonl="$work/$1.jsonl" >"$work/$1.out" 2>&1 ||
    { cat "$work/$1.out"; fail "$1"; }
}

# 3. TP=2 inside a node x DP=2 across the nodes, GPT and BERT; the GPT run saves at 4 and 8.
serial gpt_serial "${gpt[@]}"
serial bert_serial "${bert[@]}"
before=$(link_bytes)
run gpt_2nodes node1:2,node2:2 4 "${gpt[@]}" --tensor_model_parallel_size=2 --save_interval=4 \
  --save="$work/ckpt_2nodes"
crossed=$(( $(link_bytes) - before ))
same "$work/gpt_serial.jsonl" "$work/gpt_2nodes.jsonl" 1
# The data-parallel all-reduce of 8 iterations' gradients (~50k parameters per TP rank in f32)
# crossed the link: at least 8 x 2 x 100 kB.
[[ $crossed -gt 1600000 ]] || fail "only $crossed bytes crossed node2's link"
echo "gpt TP=2 x DP=2 on 2 nodes: $crossed bytes through node2's link"
run bert_2nodes node1:2,node2:2 4 "${bert[@]}" --tensor_model_parallel_size=2
same "$work/bert_serial.jsonl" "$work/bert_2nodes.jsonl" 1

# 4. PP=2, one stage per node.
run gpt_pp_2nodes node1:1,node2:1 2 "${gpt[@]}" --pipeline_model_parallel_size=2
same "$work/gpt_serial.jsonl" "$work/gpt_pp_2nodes.jsonl" 1

# 5. Checkpoints across the node boundary, both ways: resume from iteration 4 (the latest
#    marker rolled back to it, as a user rolls back a run) and continue the serial curve.
echo 4 >"$work/ckpt_2nodes/latest_checkpointed_iteration.txt"
run resume_1node node1:4 4 "${gpt[@]}" --tensor_model_parallel_size=2 --load="$work/ckpt_2nodes"
same "$work/gpt_serial.jsonl" "$work/resume_1node.jsonl" 5
run gpt_1node node1:4 4 "${gpt[@]}" --tensor_model_parallel_size=2 --save_interval=4 \
  --save="$work/ckpt_1node"
echo 4 >"$work/ckpt_1node/latest_checkpointed_iteration.txt"
run resume_2nodes node1:2,node2:2 4 "${gpt[@]}" --tensor_model_parallel_size=2 \
  --load="$work/ckpt_1node"
same "$work/gpt_serial.jsonl" "$work/resume_2nodes.jsonl" 5
echo "PASS in $(( $(date +%s) - start )) s"

#!/bin/bash
# Network and node faults on a two-node job (tools/cluster: GPT at TP=2 in a node x DP=2 across
# the nodes, --distributed_timeout=T): node2's link cut (ip link down), node2's ranks stopped
# (SIGSTOP), node2's ranks killed (SIGKILL), and node2 killed whole (its OpenMPI daemon too).
# After each, every rank on both nodes and the launcher (mpirun) must be gone within T + 15 s
# (OpenMPI's daemons within T + 40 s: one behind a cut link gives up a few seconds after its ranks),
# the launcher must return non-zero, and one line must name the rank(s) (or, for the daemon's
# death, the node) that were lost. After the link is back, the run resumes from its last
# checkpoint and continues the uninterrupted curve (within 1e-6).
# Needs root (the cluster); prints SKIP and passes where a cluster cannot be made.
#   network_fault_test.sh SYNTHETIC_CORPUS PRETRAIN_GPT
set -uo pipefail
corpus_bin="$1"; gpt_bin="$2"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_netfault || exit 1
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/cluster/test_lib.sh" 2
"$cluster" up --id $id --nodes 2 >/dev/null || fail "cluster up"
T=6
"$corpus_bin" --output_prefix="$work/corpus" --vocab=64 --documents=300 >/dev/null || fail corpus
gpt=("$gpt_bin" --data_path="$work/corpus" --vocab_size=64 --make_vocab_size_divisible_by=8
     --num_layers=2 --hidden_size=64 --num_attention_heads=4 --seq_length=32
     --micro_batch_size=2 --global_batch_size=8 --lr=3e-3 --min_lr=3e-4 --lr_warmup_samples=16
     --train_iters=300 --log_interval=1 --eval_iters=0 --threads=1 --tensor_model_parallel_size=2
     --distributed_timeout=$T)
left() {  # PATTERN: the processes matching it on either node and on the login node
  local p n=0
  for p in $("$cluster" pids --id $id node1) $("$cluster" pids --id $id node2) \
    $("$cluster" pids --id $id login); do
    grep -qE "$1" "/proc/$p/cmdline" 2>/dev/null && n=$((n + 1))
  done
  echo $n
}
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

# fault NAME ACTION WANT: starts the job, waits for 30 logged iterations, runs ACTION, then
# checks that the job is gone within T + 15 s with a line matching WANT.
fault() {
  local name="$1" action="$2" want="$3" log="$work/$1.out"
  rm -rf "$work/ckpt_$name"
  "$cluster" mpirun --id $id -H node1:2,node2:2 -np 4 "${gpt[@]}" --save_interval=10 \
    --save="$work/ckpt_$name" --log_jsonl="$work/$name.jsonl" >"$log" 2>&1 &
  local launcher=$! k
  for k in $(seq 1 300); do
    [[ -f "$work/$name.jsonl" && $(wc -l <"$work/$name.jsonl") -ge 30 ]] && break
    sleep 0.1
  done
  [[ $(wc -l <"$work/$name.jsonl" 2>/dev/null) -ge 30 ]] || { cat "$log"; fail "$name: no start"; }
  local t0 ranks="" all="" returned="" rc=""
  t0=$(date +%s%N)
  eval "$action"
  local deadline=$((SECONDS + T + 40))
  while [[ $SECONDS -le $deadline ]]; do
    if [[ -z "$returned" ]] && ! kill -0 "$launcher" 2>/dev/null; then
      wait "$launcher"
      rc=$?
      returned=$(ms_since "$t0")
    fi
    [[ -n "$ranks" || $(left pretrain_gpt) -ne 0 ]] || ranks=$(ms_since "$t0")
    [[ -n "$all" || $(left .) -ne 0 ]] || all=$(ms_since "$t0")
    [[ -z "$all" || -n "$ranks" ]] || ranks=$all
    [[ -n "$all" && -n "$ranks" && -n "$returned" ]] && break
    sleep 0.2
  done
  echo "$name: launcher returned $rc after ${returned:-never} ms; every rank gone after" \
    "${ranks:-never} ms (limit $(( (T + 15) * 1000 )) ms), OpenMPI's daemons too after" \
    "${all:-never} ms; $(wc -l <"$work/$name.jsonl") iterations logged"
  grep -E "watchdog: |lost communication|noticed that process rank|Remote daemon" "$log" |
    sed 's/^/  | /'
  if [[ -z "$all" || -z "$ranks" || -z "$returned" ]]; then
    "$cluster" signal --id $id node1 KILL; "$cluster" signal --id $id node2 KILL
    "$cluster" signal --id $id login KILL
    fail "$name: the job did not end"
  fi
  [[ $ranks -le $(( (T + 15) * 1000 )) && $returned -le $(( (T + 15) * 1000 )) ]] ||
    fail "$name: over the limit"
  [[ $all -le $(( (T + 40) * 1000 )) ]] || fail "$name: OpenMPI's daemons outlived T + 40 s"
  [[ $rc -ne 0 ]] || fail "$name: the launcher returned 0"
  grep -qE "$want" "$log" || { cat "$log"; fail "$name: no line matching '$want'"; }
}

fault cut '"$cluster" link --id $id node2 down' \
  'watchdog: rank [23] has sent no heartbeat'
"$cluster" link --id $id node2 up
fault stop 'for p in $("$cluster" pids --id $id node2); do
              grep -q pretrain_gpt /proc/$p/cmdline 2>/dev/null && kill -STOP $p; done' \
  'watchdog: rank [23] has sent no heartbeat'
fault kill 'for p in $("$cluster" pids --id $id node2); do
              grep -q pretrain_gpt /proc/$p/cmdline 2>/dev/null && kill -KILL $p; done' \
  'noticed that process rank [23] .* on node node2 exited on signal 9'
fault node 'for p in $("$cluster" pids --id $id node2); do kill -KILL $p; done' \
  'Remote daemon: .* on node node2'

# The link is back: resume the cut run from its last checkpoint; the curve continues the
# uninterrupted run's (one process, same flags).
timeout --foreground 120 "${gpt[@]}" --tensor_model_parallel_size=1 \
  --log_jsonl="$work/reference.jsonl" >"$work/reference.out" 2>&1 ||
  { cat "$work/reference.out"; fail "reference run"; }
latest=$(cat "$work/ckpt_cut/latest_checkpointed_iteration.txt") || fail "cut run: no checkpoint"
timeout --foreground 120 "$cluster" mpirun --id $id -H node1:2,node2:2 -np 4 "${gpt[@]}" \
  --load="$work/ckpt_cut" --log_jsonl="$work/resumed.jsonl" >"$work/resumed.out" 2>&1 ||
  { cat "$work/resumed.out"; fail "resume after the cut"; }
python3 - "$work/reference.jsonl" "$work/resumed.jsonl" "$latest" <<'PY' || fail "resumed curve"
import json, sys
ref = {r["iteration"]: r for r in map(json.loads, open(sys.argv[1]))}
got = [json.loads(l) for l in open(sys.argv[2])]
latest = int(sys.argv[3])
assert [r["iteration"] for r in got] == list(range(latest + 1, 301)), "iterations"
worst = max(abs(r["loss"] - ref[r["iteration"]]["loss"]) / ref[r["iteration"]]["loss"] for r in got)
assert worst <= 1e-6, worst
print("resumed from iteration %d after the cut: iterations %d-300 within %.1e of the "
      "uninterrupted run" % (latest, latest + 1, worst))
PY
echo PASS

#!/bin/bash
# Rank faults on a real pretraining job (comm/watchdog.h, --distributed_timeout): a random rank of
# a tiny pretrain_gpt job (TP=2; 2 or 4 ranks, so DP 1 or 2) gets SIGKILL (a crash) or SIGSTOP (a
# hang) at a random iteration. Each trial checks that
#   - the whole job ends, non-zero, within the timeout plus SLACK_S seconds of the signal;
#   - the message names the rank (SIGSTOP: the watchdog's one line "rank R has sent no
#     heartbeat"; SIGKILL: mpirun's "process rank R ... exited on signal 9");
#   - no process of the job is left (pgrep on a marker unique to the trial);
#   - the job then resumes from the last checkpoint (--load) and completes.
# Trials cycle through (2 ranks, KILL), (2, STOP), (4, KILL), (4, STOP); the victim and the
# iteration are random (seeded; the seed is printed).
#   rank_fault_test.sh SYNTHETIC_CORPUS_BIN PRETRAIN_GPT_BIN
#   RANK_FAULT_TRIALS=20 RANK_FAULT_SEED=N ... (default: 4 trials, seed 17)
set -uo pipefail
corpus_bin="$1"; pretrain="$2"
trials="${RANK_FAULT_TRIALS:-4}"
RANDOM="${RANK_FAULT_SEED:-17}"
timeout_s=8    # --distributed_timeout
slack_s=20     # detection (up to two heartbeats), MPI_Abort, mpirun's teardown, a loaded machine
iters=40
source "$(dirname "$0")/tiny_job.sh" "$corpus_bin" mt_rankfault
common=("${tiny[@]}" --tensor_model_parallel_size=2
        --train_iters=$iters --save_interval=5
        --distributed_timeout=$timeout_s)

# The PID of world rank $2 among the processes whose command line holds marker $1.
rank_pid() {
  local p
  for p in $(pgrep -f -- "$1"); do
    [[ "$(cat /proc/"$p"/comm 2>/dev/null)" == "$(basename "$pretrain" | cut -c1-15)" ]] || continue
    if tr '\0' '\n' < /proc/"$p"/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then
      echo "$p"; return 0
    fi
  done
  return 1
}

max_ms=0; left_total=0; resumed=0
summary=()
for ((t = 0; t < trials; ++t)); do
  np=$(( (t / 2) % 2 == 0 ? 2 : 4 ))
  if (( t % 2 == 0 )); then sig=KILL; else sig=STOP; fi
  victim=$(( RANDOM % np ))
  at=$(( 6 + RANDOM % 25 ))   # Signal once this many iterations are logged (checkpoint at 5 done).
  dir="$work/t$t"; mkdir -p "$dir"
  marker="$dir/ckpt"          # In every rank's command line (--save), unique to the trial.
  mpi=(mpirun --oversubscribe --bind-to none -np "$np" --mca btl self,vader
       --mca mpi_yield_when_idle 1)
  timeout 300 "${mpi[@]}" "$pretrain" "${common[@]}" --save="$marker" --log_jsonl="$dir/a.jsonl" \
    > "$dir/a.out" 2>&1 &
  job=$!
  for _ in $(seq 1 3000); do
    [[ -f "$dir/a.jsonl" && $(wc -l < "$dir/a.jsonl") -ge $at ]] && break
    kill -0 "$job" 2>/dev/null || break
    sleep 0.02
  done
  pid=$(rank_pid "$marker" "$victim") || { cat "$dir/a.out"; fail "trial $t: rank $victim not found"; }
  kill -"$sig" "$pid"
  start=$(date +%s%N)
  while kill -0 "$job" 2>/dev/null; do
    (( ($(date +%s%N) - start) / 1000000000 > timeout_s + slack_s + 30 )) && break
    sleep 0.05
  done
  ms=$(( ($(date +%s%N) - start) / 1000000 ))
  wait "$job"; rc=$?
  sleep 0.5
  left=$(pgrep -f -- "$marker" | wc -l)
  if [[ $left -gt 0 ]]; then
    pgrep -f -- "$marker" | xargs -r kill -KILL
    fail "trial $t: $left processes of the job left behind"
  fi
  (( ms > max_ms )) && max_ms=$ms
  logged=$(wc -l < "$dir/a.jsonl")
  echo "trial $t: np=$np SIG$sig to rank $victim (pid $pid) after $logged logged iterations:" \
       "job ended after $ms ms, exit code $rc"
  [[ $rc -ne 0 && $rc -ne 124 ]] || { cat "$dir/a.out"; fail "trial $t: exit code $rc"; }
  (( ms <= (timeout_s + slack_s) * 1000 )) || fail "trial $t: took $ms ms (bound $((timeout_s + slack_s)) s)"
  if [[ $sig == STOP ]]; then
    [[ $(grep -c "watchdog: " "$dir/a.out") -eq 1 ]] \
      && grep -q "watchdog: .*rank $victim has sent no heartbeat" "$dir/a.out" \
      || { cat "$dir/a.out"; fail "trial $t: no single watchdog line naming rank $victim"; }
    line=$(grep "watchdog: " "$dir/a.out")
  else
    grep -qE "process rank $victim with PID [0-9]+ on node .* exited on signal 9" "$dir/a.out" \
      || { cat "$dir/a.out"; fail "trial $t: mpirun did not name rank $victim"; }
    line=$(grep -E "process rank $victim with PID" "$dir/a.out")
  fi
  echo "  message: $line"
  latest=$(cat "$marker/latest_checkpointed_iteration.txt") || fail "trial $t: no checkpoint"
  timeout 300 "${mpi[@]}" "$pretrain" "${common[@]}" --save="$marker" --load="$marker" \
    --log_jsonl="$dir/b.jsonl" > "$dir/b.out" 2>&1 || { cat "$dir/b.out"; fail "trial $t: resume"; }
  grep -q "loaded checkpoint from $marker at iteration $latest " "$dir/b.out" \
    || { head -30 "$dir/b.out"; fail "trial $t: did not resume from iteration $latest"; }
  # A signal that lands after the last iteration (a loaded machine lets the job outrun the poll
  # above) finds a final checkpoint: then the resumed job has nothing left to train.
  if (( latest < iters )); then
    [[ $(tail -1 "$dir/b.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["iteration"])') \
       -eq $iters ]] || fail "trial $t: the resumed job did not reach iteration $iters"
  fi
  [[ $(pgrep -f -- "$marker" | wc -l) -eq 0 ]] || fail "trial $t: resumed job left processes"
  resumed=$((resumed + 1))
  echo "  resumed from iteration $latest to $iters"
  summary+=("$np $sig $victim $logged $ms $rc $latest")
  rm -rf "$dir"
done
echo "np signal victim at_iteration ms_to_end exit_code resumed_from"
printf '%s\n' "${summary[@]}"
echo "PASS: $trials trials, max time to job end ${max_ms} ms (timeout ${timeout_s} s)," \
     "0 ranks left behind, $resumed resumes to completion"

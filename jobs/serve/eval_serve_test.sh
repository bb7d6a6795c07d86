#!/bin/bash
# //jobs/serve:serve end to end: a tiny GPT-2 (the GPT-2 vocabulary, 64 positions) trained for a few
# steps with pretrain_gpt and resharded to TP=2; a TP=1 server passes every check of
# eval_serve_test.py (both APIs, a concurrent burst, malformed / mistyped / out-of-range / over-long
# requests, an oversized body, a stalled and a vanished client, a full queue) and stops cleanly on
# SIGTERM; a TP=2 server (two MPI ranks) gives the TP=1 server's answers and stops cleanly too.
#   eval_serve_test.sh PREPROCESS PRETRAIN_GPT RESHARD SERVE SERVE_TEST_PY
set -uo pipefail
preprocess="$1"; pretrain="$2"; reshard="$3"; serve="$4"; client="$5"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_serve || exit 1
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*.log; do echo "== $f"; tail -20 "$f"; done
  exit 1
}

python3 - "$work/corpus.txt" <<'PY'
import random, sys
random.seed(1)
words = "alpha bravo charlie delta echo foxtrot golf hotel india juliett kilo lima".split()
with open(sys.argv[1], "w") as f:
    for d in range(200):
        s, n = random.randrange(12), random.randint(20, 50)
        f.write(" ".join(words[(s + i) % 12] for i in range(n)) + "\n\n")
PY
"$preprocess" --input="$work/corpus.txt" --input_format=text --tokenizer=gpt2 \
  --output_prefix="$work/corpus" --append_eod > "$work/preprocess.log" 2>&1 || fail "preprocess"
timeout 200 "$pretrain" --data_path="$work/corpus" --num_layers=2 --hidden_size=64 \
  --num_attention_heads=4 --seq_length=32 --max_position_embeddings=64 --micro_batch_size=4 \
  --global_batch_size=8 --train_iters=6 --lr=1e-3 --log_interval=6 --eval_iters=0 --threads=2 \
  --save="$work/tp1" > "$work/train.log" 2>&1 || fail "training"
"$reshard" --load="$work/tp1" --save="$work/tp2" --tensor_model_parallel_size=2 \
  > "$work/reshard.log" 2>&1 || fail "reshard"

# Waits for "serving ... at http://127.0.0.1:PORT" in log $1 and prints PORT.
port_of() {
  for _ in $(seq 1 300); do
    local p
    p=$(grep -o 'at http://127.0.0.1:[0-9]*' "$1" 2>/dev/null | sed 's/.*://')
    [[ -n "$p" ]] && { echo "$p"; return 0; }
    sleep 0.1
  done
  return 1
}

# Sends SIGTERM to process $3 (default: $1) and expects $1 to exit 0 within 20 s, with "stopped
# after" in log $2.
stop_cleanly() {
  kill -TERM "${3:-$1}"
  for _ in $(seq 1 200); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$1" 2>/dev/null && fail "still running 20 s after SIGTERM"
  wait "$1"
  local rc=$?
  [[ $rc -eq 0 ]] || fail "exit code $rc after SIGTERM"
  grep -q "stopped after" "$2" || fail "no clean stop in $2"
}

# 1. TP = 1: every check.
queue=6
"$serve" --load="$work/tp1" --port=0 --queue_size=$queue --hold_file="$work/hold" --timeout_s=2 \
  --max_body_bytes=20000 --max_prompts=8 --max_tokens_per_request=400 --threads=1 \
  > "$work/serve1.log" 2>&1 &
pid=$!; pids+=("$pid")
port=$(port_of "$work/serve1.log") || fail "the TP=1 server did not start"
timeout 240 python3 "$client" --port="$port" --phase=full --hold_file="$work/hold" \
  --queue_size=$queue --save="$work/answers.json" || fail "checks against the TP=1 server"
stop_cleanly "$pid" "$work/serve1.log"

# 2. TP = 2 over two MPI ranks: the same answers. SIGTERM to one rank (as a scheduler delivers
#    it) stops both cleanly, and mpirun sees them exit 0.
mpirun --oversubscribe --bind-to none -np 2 --mca btl self,vader --mca mpi_yield_when_idle 1 \
  "$serve" --load="$work/tp2" --port=0 --threads=1 > "$work/serve2.log" 2>&1 &
pid=$!; pids+=("$pid")
port=$(port_of "$work/serve2.log") || fail "the TP=2 server did not start"
grep -q "tensor parallel 2" "$work/serve2.log" || fail "not tensor parallel"
timeout 120 python3 "$client" --port="$port" --phase=compare --compare="$work/answers.json" \
  || fail "TP=2 answers differ"
rank=$(pgrep -P "$pid" | tail -1)
[[ -n "$rank" ]] || fail "no rank process found"
stop_cleanly "$pid" "$work/serve2.log" "$rank"
echo PASS

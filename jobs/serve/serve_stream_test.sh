#!/bin/bash
# //jobs/serve:serve with continuous batching, end to end with curl as the client, on a tiny
# random-init GPT-2 checkpoint (test_checkpoint; the GPT-2 vocabulary):
#   - a streamed completion ("stream": true) is server-sent events, one per token, then a final
#     event with finish_reason and [DONE]; its texts add up to the unstreamed completion's text;
#   - 6 clients at once (--max_batch_size=4, --queue_size=2) all get 200 and the text each gets
#     alone (batching does not change greedy outputs);
#   - a streaming client that disconnects after its first event frees its cache slot: with
#     --max_batch_size=1 the next request is answered while the first would still have ~1000
#     tokens to go, and /metrics counts it cancelled;
#   - /v1/models and /metrics (Prometheus text) answer.
#   serve_stream_test.sh TEST_CHECKPOINT SERVE
set -uo pipefail
make_checkpoint="$1"; serve="$2"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_serve_stream || exit 1
command -v curl >/dev/null || fail "curl is not installed (tools/setup.sh installs it)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
show() { for f in "$work"/*.log; do echo "== $f"; tail -20 "$f"; done; }

"$make_checkpoint" --save="$work/ckpt" --vocab_size=50257 --num_layers=2 --hidden_size=64 \
  --num_attention_heads=4 --max_position_embeddings=1024 --zero=false --seed=3 \
  > "$work/checkpoint.log" 2>&1 || { show; fail "test_checkpoint"; }

# Starts a server with flags "$@" and sets $port and $pid.
start() {
  "$serve" --load="$work/ckpt" --port=0 --threads=1 "$@" > "$work/serve.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  port=""
  for _ in $(seq 1 300); do
    port=$(grep -o 'at http://127.0.0.1:[0-9]*' "$work/serve.log" 2>/dev/null | sed 's/.*://')
    [[ -n "$port" ]] && return 0
    sleep 0.1
  done
  show
  fail "the server did not start"
}
stop() {
  kill -TERM "$pid"
  for _ in $(seq 1 200); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && fail "still running 20 s after SIGTERM"
  wait "$pid" || fail "exit code $? after SIGTERM"
}
url() { echo "http://127.0.0.1:$port$1"; }
post() { curl -sS --max-time 60 "$(url /v1/completions)" -d "$1"; }
text_of() { python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"], end="")'; }

start --max_batch_size=4 --queue_size=2
body='{"prompt": "The quick brown fox", "max_tokens": 12, "temperature": 0}'
want=$(post "$body" | text_of) || fail "completion"
[[ -n "$want" ]] || fail "empty completion"

# Streamed: the events, checked and their texts joined.
curl -sS -N --max-time 60 "$(url /v1/completions)" \
  -d '{"prompt": "The quick brown fox", "max_tokens": 12, "temperature": 0, "stream": true}' \
  > "$work/stream.txt" || fail "streamed completion"
python3 - "$work/stream.txt" "$want" <<'PY' || fail "the stream"
import json, sys
raw = open(sys.argv[1]).read()
events = [e for e in raw.split("\n\n") if e]
assert all(e.startswith("data: ") for e in events), raw
assert events[-1] == "data: [DONE]", events[-1]
chunks = [json.loads(e[len("data: "):]) for e in events[:-1]]
tokens = [c for c in chunks if c["choices"][0]["finish_reason"] is None]
assert len(tokens) == 12, f"{len(tokens)} token events, want 12"
assert chunks[-1]["choices"][0]["finish_reason"] == "length", chunks[-1]
assert all(c["object"] == "text_completion" and c["id"] == chunks[0]["id"] for c in chunks)
text = "".join(c["choices"][0]["text"] for c in chunks)
assert text == sys.argv[2], (text, sys.argv[2])
PY

# Six clients at once, each alone first; batched they must get the same texts, and no 503.
for i in 0 1 2 3 4 5; do
  p="{\"prompt\": \"Client $i says\", \"max_tokens\": $((8 + 3 * i)), \"temperature\": 0}"
  post "$p" | text_of > "$work/alone.$i" || fail "client $i alone"
done
for i in 0 1 2 3 4 5; do
  p="{\"prompt\": \"Client $i says\", \"max_tokens\": $((8 + 3 * i)), \"temperature\": 0}"
  curl -sS --max-time 60 -o "$work/batched.$i" -w '%{http_code}' "$(url /v1/completions)" \
    -d "$p" > "$work/code.$i" &
done
wait_clients() { for j in $(jobs -p); do [[ " ${pids[*]} " == *" $j "* ]] || wait "$j"; done; }
wait_clients
for i in 0 1 2 3 4 5; do
  [[ "$(cat "$work/code.$i")" == 200 ]] || fail "client $i got HTTP $(cat "$work/code.$i")"
  [[ "$(text_of < "$work/batched.$i")" == "$(cat "$work/alone.$i")" ]] ||
    fail "client $i: batched text differs from its text alone"
done

curl -sS "$(url /v1/models)" | python3 -c '
import json, sys
m = json.load(sys.stdin)
assert m["object"] == "list" and m["data"][0]["id"] == "ckpt", m' || fail "/v1/models"
curl -sS "$(url /metrics)" > "$work/metrics.txt" || fail "/metrics"
for m in mt_serve_queue_depth mt_serve_batch_size mt_serve_generated_tokens_total \
  mt_serve_time_to_first_token_seconds mt_serve_token_latency_seconds; do
  grep -q "^# TYPE $m " "$work/metrics.txt" || fail "/metrics has no $m"
done
grep -q '^mt_serve_requests_total{status="ok"} 14$' "$work/metrics.txt" ||
  fail "/metrics: $(grep requests_total "$work/metrics.txt")"
stop

# A streaming client that goes away after its first event frees the only slot.
start --max_batch_size=1
curl -sS -N --max-time 60 "$(url /v1/completions)" \
  -d '{"prompt": "Once", "max_tokens": 1000, "temperature": 0, "stream": true}' | head -c 100 \
  > /dev/null
post '{"prompt": "Then", "max_tokens": 5, "temperature": 0}' | text_of > /dev/null ||
  fail "the request after the disconnect"
curl -sS "$(url /metrics)" > "$work/metrics.txt"
grep -q '^mt_serve_requests_total{status="cancelled"} 1$' "$work/metrics.txt" ||
  fail "the disconnected stream was not cancelled: $(grep requests_total "$work/metrics.txt")"
generated=$(sed -n 's/^mt_serve_generated_tokens_total //p' "$work/metrics.txt")
[[ "$generated" -lt 500 ]] || fail "$generated tokens generated: the stream ran on"
grep -q '^mt_serve_running_sequences 0$' "$work/metrics.txt" || fail "a slot is still held"
stop
echo PASS

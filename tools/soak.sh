#!/bin/bash
# A long run of the quickstart model with random kills: is a long job's memory flat, do its file
# descriptors stay bounded, and do its final weights equal an uninterrupted run's bit for bit?
#
#   tools/soak.sh [--iters N] [--save_interval N] [--kill_every N] [--seed N] [--work DIR]
#                 [-- more quickstart flags]
#
# Two runs of //experiments/quickstart (TP = 2 over 2 MPI ranks, on the embedded corpus) with the
# same flags and --train_iters=N:
#   soak:      checkpoints every --save_interval iterations and is killed (SIGKILL to the whole
#              job) at a random iteration in every window of about --kill_every iterations, then
#              restarted with --load until it finishes; its ranks' resident memory (VmRSS) and
#              open file descriptors are sampled every 2 s into rss.csv;
#   reference: the same N iterations without a kill.
# Then it reports: kills, the RSS growth of each uninterrupted stretch after warm-up (its first
# sample past 50 iterations to its last before the stretch's final iteration), the peak RSS, the
# most descriptors open, whether every iteration's logged values of the soak run (the last time
# each iteration ran) equal the reference's, and whether the final checkpoints' tensors are the
# same bytes. Exit status 0 only when both are bit-exact and nothing grew by more than 5%.
#
# Defaults: 5000 iterations, a checkpoint every 100, a kill about every 400 (about 65 minutes per
# run on a 2-core machine). Results go to --work (default: a new /tmp/mt_soak.XXXXXX), kept.
set -uo pipefail
iters=5000 save_interval=100 kill_every=400 seed=1 work=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --iters) iters="$2"; shift 2 ;;
    --save_interval) save_interval="$2"; shift 2 ;;
    --kill_every) kill_every="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "soak.sh: error: unknown argument '$1' (see the comment at the top)" >&2; exit 2 ;;
  esac
done
extra=("$@")
for v in iters save_interval kill_every seed; do
  [[ "${!v}" =~ ^[0-9]+$ && "${!v}" -gt 0 ]] || {
    echo "soak.sh: error: --$v must be a positive integer, got '${!v}'" >&2; exit 2; }
done
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root" || exit 1
./bazelw build //experiments/quickstart >/dev/null 2>&1 || {
  echo "soak.sh: error: building //experiments/quickstart failed" >&2; exit 1; }
[[ -n "$work" ]] || work="$(mktemp -d /tmp/mt_soak.XXXXXX)"
mkdir -p "$work" || exit 1
# A copy, so that a rebuild during the hours of the run does not change the binary under it.
bin="$work/quickstart"
cp -f "$root/bazel-bin/experiments/quickstart/quickstart" "$bin" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
RANDOM=$seed
common=(--train_iters="$iters" --log_interval=1 --save_interval="$save_interval" --keep_last=2
        --generate_tokens=0 "${extra[@]}")

# Whether a quickstart run ended well: exit 0, or (a short run with few iterations) only the
# quickstart's final verdict that its validation loss is not yet below the unigram baseline.
finished() {
  [[ $1 -eq 0 ]] || grep -q "did not fall below the unigram baseline" "$2"
}

# The last iteration logged in a JSONL file (0 when none).
last_iteration() {
  [[ -s "$1" ]] || { echo 0; return; }
  tail -n 1 "$1" | grep -o '"iteration": *[0-9]*' | grep -o '[0-9]*$' || echo 0
}

# The processes of the job whose command line holds "$1" (the unique --save directory).
job_pids() { pgrep -f -- "--save=$1" 2>/dev/null; }

# Appends one sample "seconds,segment,iteration,rss_kib,fds" of the job's ranks to rss.csv.
sample() {
  local dir="$1" segment="$2" jsonl="$3" rss=0 fds=0 p
  for p in $(job_pids "$dir"); do
    [[ "$(cat "/proc/$p/comm" 2>/dev/null)" == quickstart ]] || continue
    rss=$((rss + $(awk '/^VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)))
    fds=$((fds + $(ls "/proc/$p/fd" 2>/dev/null | wc -l)))
  done
  [[ $rss -gt 0 ]] && echo "$SECONDS,$segment,$(last_iteration "$jsonl"),$rss,$fds" >> "$work/rss.csv"
}

echo "soak.sh: $iters iterations, checkpoint every $save_interval, a kill about every" \
  "$kill_every; work directory $work"
echo "seconds,segment,iteration,rss_kib,fds" > "$work/rss.csv"
ckpt="$work/soak_ckpt"
kills=0 segment=0
while :; do
  start=$(last_iteration "$work/soak.jsonl")
  [[ $start -ge $iters ]] && break
  segment=$((segment + 1))
  kill_at=$((start + kill_every / 2 + RANDOM % kill_every))
  load=()
  [[ -f "$ckpt/latest_checkpointed_iteration.txt" ]] && load=(--load="$ckpt")
  setsid "$bin" "${common[@]}" --save="$ckpt" "${load[@]}" --log_jsonl="$work/soak.jsonl" \
    >> "$work/soak.out" 2>&1 &
  pid=$!
  killed=0
  while kill -0 "$pid" 2>/dev/null; do
    sample "$ckpt" "$segment" "$work/soak.jsonl"
    if [[ $kill_at -lt $iters && $(last_iteration "$work/soak.jsonl") -ge $kill_at ]]; then
      kill -9 -- "-$pid" 2>/dev/null
      for p in $(job_pids "$ckpt"); do kill -9 "$p" 2>/dev/null; done
      killed=1
      break
    fi
    sleep 2
  done
  wait "$pid" 2>/dev/null
  rc=$?
  for _ in $(seq 1 50); do [[ -z "$(job_pids "$ckpt")" ]] && break; sleep 0.2; done
  [[ -z "$(job_pids "$ckpt")" ]] || { echo "soak.sh: error: ranks left after a kill" >&2; exit 1; }
  if [[ $killed -eq 1 ]]; then
    kills=$((kills + 1))
    echo "  segment $segment: killed at iteration $(last_iteration "$work/soak.jsonl")" \
      "(resumes from $(cat "$ckpt/latest_checkpointed_iteration.txt" 2>/dev/null || echo none))"
  elif ! finished "$rc" "$work/soak.out"; then
    echo "soak.sh: error: the soak run failed (exit $rc); see $work/soak.out" >&2
    exit 1
  fi
done
echo "  soak run finished after $kills kills; the uninterrupted reference run follows"
"$bin" "${common[@]}" --save="$work/ref_ckpt" --log_jsonl="$work/ref.jsonl" > "$work/ref.out" 2>&1
finished $? "$work/ref.out" || { echo "soak.sh: error: reference run failed; see $work/ref.out" >&2; exit 1; }

python3 - "$work" "$iters" "$kills" <<'PY'
import csv, json, os, sys
work, iters, kills = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
keys = ("lm_loss", "grad_norm", "learning_rate", "consumed_samples")
def last_per_iteration(path):
    rows = {}
    for line in open(path):
        r = json.loads(line)
        rows[r["iteration"]] = r  # A resumed run logs the iterations after its checkpoint again.
    return rows
soak, ref = last_per_iteration(os.path.join(work, "soak.jsonl")), last_per_iteration(os.path.join(work, "ref.jsonl"))
same_log = sorted(soak) == sorted(ref) == list(range(1, iters + 1)) and all(
    soak[i][k] == ref[i][k] for i in ref for k in keys)
def tensors(ckpt):
    it = open(os.path.join(ckpt, "latest_checkpointed_iteration.txt")).read().strip()
    d = os.path.join(ckpt, "iter_%07d" % int(it))
    return it, {r: open(os.path.join(d, r, "model_optim.safetensors"), "rb").read()
                for r in sorted(os.listdir(d)) if r.startswith("mp_rank_")}
(it_s, ts), (it_r, tr) = tensors(os.path.join(work, "soak_ckpt")), tensors(os.path.join(work, "ref_ckpt"))
same_ckpt = it_s == it_r and ts == tr
segs = {}
for row in csv.DictReader(open(os.path.join(work, "rss.csv"))):
    segs.setdefault(row["segment"], []).append(row)
growth, max_fds, samples, peak = [], 0, 0, 0
for rows in segs.values():
    samples += len(rows)
    max_fds = max([max_fds] + [int(r["fds"]) for r in rows])
    peak = max([peak] + [int(r["rss_kib"]) for r in rows])
    # From 50 iterations into the stretch to its last training sample (the end of a run adds
    # the final validation, the checkpoint and the sample on top, once).
    warm = [r for r in rows if int(rows[0]["iteration"]) + 50 <= int(r["iteration"]) <
            int(rows[-1]["iteration"])]
    if len(warm) >= 2:
        a, b = int(warm[0]["rss_kib"]), int(warm[-1]["rss_kib"])
        growth.append((b - a) / a)
worst = max(growth) if growth else float("nan")
print("soak.sh: %d iterations, %d kills and resumes, %d samples in %d stretches" %
      (iters, kills, samples, len(segs)))
print("  RSS of the ranks after warm-up: largest growth within a stretch %+.2f%%" % (100 * worst))
print("  peak RSS of the ranks (both together): %.1f MiB" % (peak / 1024))
print("  open file descriptors (both ranks): at most %d" % max_fds)
print("  logged values of every iteration equal the uninterrupted run's: %s" % ("yes" if same_log else "NO"))
print("  final checkpoint (iteration %s) tensors bit-identical to the uninterrupted run's: %s" %
      (it_s, "yes" if same_ckpt else "NO"))
sys.exit(0 if same_log and same_ckpt and growth and worst <= 0.05 else 1)
PY

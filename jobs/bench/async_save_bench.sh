#!/bin/bash
# What a checkpoint save costs a training run, synchronous and with --async_save, measured in the
# same session against the same steps without saving:
#
#   ./bazelw run //jobs/bench:async_save_bench -- [--model=gpt2-124m] [--rounds=3] [--dir=DIR]
#       [any pretrain_gpt flags, e.g. --threads=1]
#
# Each round runs pretrain_gpt three times, in turn: no --save, --save_interval=8, and
# --save_interval=8 --async_save, for 24 iterations of one 64-token sample (saves at 8 and 16 are
# measured, far enough apart for a background write to finish before the next save; the final
# save at 24 ends the run and is not). A run's lost time per save is the time the saves held the
# loop (a synchronous save's "saved ... in S s"; an async save's set-up "... in S s" and any wait
# for the one before; a wait of the next update for the writer's copy of the state is inside that
# iteration's time) plus the slowdown of the iterations after them, over two saves, taken two
# ways: against the no-save run of the same round (the sum of its iteration times), and against
# the run's own iterations 2-8, before any save (24 x their median; runs here differ in speed by a
# few percent, which the second way does not see). Both sum the noise of 16 iterations; a third way
# counts only the iterations an async save's write was in flight (logged between the save and its
# "saved checkpoint" line), each against that median and, in a fourth, against the same iteration
# of the no-save run, plus the held time, and sets it against the time a synchronous save held the
# loop (its write is all inside it). A fifth way takes the fourth's differences less the two runs'
# median difference over the iterations 2-24 outside the writes: how much slower the write's
# iterations were than the same iterations without a save, beyond the runs' own difference in
# speed (a few percent between any two runs, the same run twice included). Prints each round, the
# medians, and the ratio async / sync of the lost time per save. Needs the tokenised default corpus
# ($MT_DATA_DIR or ~/.cache/megatron-cpp/data: any experiment builds it) and ~2 x 1.5 GB of disk
# in DIR (default: $TMPDIR or /tmp).
set -euo pipefail
here="$(dirname "$0")"
pretrain=jobs/pretrain/pretrain_gpt  # In the runfiles tree `bazel run` starts in.
[[ -x "$pretrain" ]] || pretrain="$here/../pretrain/pretrain_gpt"
model=gpt2-124m rounds=3 dir="${TMPDIR:-/tmp}" extra=()
for a in "$@"; do
  case "$a" in
    --model=*) model="${a#*=}" ;;
    --rounds=*) rounds="${a#*=}" ;;
    --dir=*) dir="${a#*=}" ;;
    *) extra+=("$a") ;;
  esac
done
data="${MT_DATA_DIR:-$HOME/.cache/megatron-cpp/data}/fortunes_gpt2_text_document"
[[ -f "$data.idx" ]] || { echo "async_save_bench: no $data.idx (run any GPT experiment once)" >&2; exit 1; }
work=$(mktemp -d "$dir/mt_async_save_bench.XXXXXX")
trap 'rm -rf "$work"' EXIT

run() {  # run NAME FLAGS...: NAME.out, NAME.jsonl
  local name="$1"; shift
  rm -rf "$work/ckpt" "$work/$name.jsonl"
  "$pretrain" --model="$model" --data_path="$data" --seq_length=64 --micro_batch_size=1 \
    --global_batch_size=1 --train_iters=24 --log_interval=1 --eval_iters=0 \
    --log_jsonl="$work/$name.jsonl" "${extra[@]}" "$@" > "$work/$name.out" 2>&1 ||
    { tail -5 "$work/$name.out" >&2; exit 1; }
}

results="$work/rounds.txt"
for r in $(seq 1 "$rounds"); do
  run none
  run sync --save="$work/ckpt" --save_interval=8 --keep_last=1
  run async --save="$work/ckpt" --save_interval=8 --keep_last=1 --async_save
  python3 - "$work" "$r" >> "$results" <<'PY'
import json, re, statistics, sys
w, r = sys.argv[1], sys.argv[2]
def steps(name):
    return sum(json.loads(l)["ms_per_iteration"] for l in open(f"{w}/{name}.jsonl")) / 1e3
def held(name):  # Seconds the saves at iterations 8 and 16 held the loop.
    out = open(f"{w}/{name}.out").read()
    total = 0.0
    for it in (8, 16):
        m = re.search(rf"saved checkpoint at iteration {it} to \S+ in ([0-9.]+) s", out)
        if m:
            total += float(m.group(1))
            continue
        m = re.search(rf"checkpoint at iteration {it}: state (?:copied to|handed to the "
                      rf"writer to copy to) host memory \(\d+ MB\) "
                      rf"in ([0-9.]+) s(?: after waiting ([0-9.]+) s)?", out)
        assert m, (name, it)
        total += float(m.group(1)) + float(m.group(2) or 0)
    return total
def per_iteration(name):
    return {json.loads(l)["iteration"]: json.loads(l)["ms_per_iteration"]
            for l in open(f"{w}/{name}.jsonl")}
def before(ms):  # The median of iterations 2-8, before any save.
    return sorted(ms[i] for i in range(2, 9))[3]
def own(name):  # Lost per save against the run's own iterations before any save.
    ms = per_iteration(name)
    return (sum(ms[i] - before(ms) for i in ms if i > 8) / 1e3 + held(name)) / 2
def written(name):  # The iterations logged while a save's write was in flight.
    in_flight, out = set(), []
    for line in open(f"{w}/{name}.out"):
        m = re.match(r"checkpoint at iteration (8|16): state", line)
        if m:
            in_flight.add(int(m.group(1)))
        m = re.match(r"saved checkpoint at iteration (\d+) to \S+ \(written in the background", line)
        if m:
            in_flight.discard(int(m.group(1)))
        m = re.match(r"\s*iteration\s+(\d+)/", line)
        if m and in_flight:
            out.append(int(m.group(1)))
    return out
def overlap_level(name):  # The fourth way less the runs' difference outside the writes.
    ms, none, inside = per_iteration(name), per_iteration("none"), written(name)
    level = statistics.median(ms[i] - none[i] for i in sorted(ms)[1:] if i not in inside)
    return (held(name) + sum(ms[i] - none[i] - level for i in inside) / 1e3) / 2
def overlap(name, against_none=False):  # Lost per save over the iterations its write was in flight.
    ms, none = per_iteration(name), per_iteration("none")
    excess = sum(ms[i] - (none[i] if against_none else before(ms)) for i in written(name)) / 1e3
    return (held(name) + excess) / 2
base = steps("none")
lost = {n: steps(n) + held(n) - base for n in ("sync", "async")}
print(r, f"{base:.3f}", f"{steps('sync'):.3f}", f"{held('sync'):.3f}", f"{lost['sync'] / 2:.3f}",
      f"{own('sync'):.3f}", f"{steps('async'):.3f}", f"{held('async'):.3f}",
      f"{lost['async'] / 2:.3f}", f"{own('async'):.3f}", f"{held('sync') / 2:.3f}",
      f"{overlap('async'):.3f}", f"{overlap('async', against_none=True):.3f}",
      f"{overlap_level('async'):.3f}")
PY
  tail -1 "$results"
done

python3 - "$results" "$model" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
print(f"\n{sys.argv[2]}, 24 iterations, saves at 8 and 16 ({len(rows)} rounds)")
print("round | steps, no save (s) | sync: steps (s) | sync: held (s) | sync: lost per save vs "
      "no save (s) | sync: vs own (s) | async: steps (s) | async: held (s) | async: lost per save "
      "vs no save (s) | async: vs own (s) | sync: held per save (s) | async: lost per save over "
      "its write (s) | async: the same against the no-save run's iterations (s) | async: the same "
      "less the runs' difference outside the writes (s)")
for r in rows:
    print(" | ".join(r))
for label, s_col, a_col in (("against the no-save run", 4, 8), ("against the run's own", 5, 9),
                            ("while the write was in flight (sync: held)", 10, 11),
                            ("while the write was in flight, against the no-save run", 10, 12),
                            ("while the write was in flight, against the no-save run, less the "
                             "runs' difference outside the writes", 10, 13)):
    sync = statistics.median(float(r[s_col]) for r in rows)
    asyn = statistics.median(float(r[a_col]) for r in rows)
    print(f"median lost per save {label}: sync {sync:.3f} s, async {asyn:.3f} s; async / sync = "
          f"{asyn / sync:.3f}")
PY

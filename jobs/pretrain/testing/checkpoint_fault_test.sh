#!/bin/bash
# Faults during checkpoint saves, injected through the file system the job saves through
# (pretrain_gpt_with_faults --file_fault: the production job with core/faulty_file_system.h),
# on a tiny model (TP=1, one process, saves at iterations 2, 4 and 6):
#   1. SIGKILL after byte k of the save at iteration 4, for 25 values of k spread over the whole
#      save (the safetensors header and data, metadata.json, the latest_checkpointed_iteration.txt
#      commit), and once at the first byte of the next save: the pointer names the newest complete
#      checkpoint (2, or 4 for the last), no partial shard is visible, and --load resumes from it
#      with losses bit-exact against an uninterrupted run;
#   2. ENOSPC and EIO at three points of the same save: one error line naming the file, a non-zero
#      exit, the previous checkpoint intact (pointer unchanged, no leftovers) and resumable
#      bit-exactly;
#   3. a flipped byte inside a tensor of the final checkpoint: --load refuses it in one line naming
#      the tensor and the shard file;
#   4. --async_save (the shard written by a background thread while iterations 5 and 6 train, the
#      commit at a later iteration): SIGKILL at 9 of the kill points of 1 and ENOSPC in the
#      tensors, with the same outcomes: the previous checkpoint the latest and resumed bit-exactly.
# Prints "kill points: N, bit-exact resumes: N" etc. for docs/reliability.md.
#   checkpoint_fault_test.sh SYNTHETIC_CORPUS_BIN PRETRAIN_GPT_WITH_FAULTS_BIN
set -uo pipefail
corpus_bin="$1"; pretrain="$2"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_ckpt_fault || exit 1

"$corpus_bin" --output_prefix="$work/corpus" --vocab=64 --documents=100 || fail "corpus"
common=(--data_path="$work/corpus" --vocab_size=64 --make_vocab_size_divisible_by=8
        --num_layers=1 --hidden_size=32 --num_attention_heads=2 --seq_length=16
        --micro_batch_size=2 --global_batch_size=2 --lr=3e-3 --train_iters=6 --save_interval=2
        --log_interval=1 --eval_iters=0 --threads=1)
run() { timeout 60 "$pretrain" "${common[@]}" "$@"; }

# The uninterrupted reference, keeping every checkpoint to measure the saves' sizes.
run --save="$work/ref" --keep_last=0 --log_jsonl="$work/ref.jsonl" > "$work/ref.out" 2>&1 ||
  { cat "$work/ref.out"; fail "reference run"; }
shard() { printf "%s/iter_%07d/mp_rank_00" "$1" "$2"; }
size() { stat -c %s "$1"; }
# Bytes the process writes per save: the tensors file, metadata.json, and the pointer ("N\n").
s1=$(( $(size "$(shard "$work/ref" 2)/model_optim.safetensors") +
       $(size "$(shard "$work/ref" 2)/metadata.json") + 2 ))
t=$(size "$(shard "$work/ref" 4)/model_optim.safetensors")
m=$(size "$(shard "$work/ref" 4)/metadata.json")
h=$(( 8 + $(od -An -t u8 -N 8 "$(shard "$work/ref" 4)/model_optim.safetensors") ))
echo "save at iteration 4: $t bytes of tensors (header $h), $m of metadata, 2 of pointer"

# Checks the losses of a resumed run (JSONL) against the reference from iteration $2 + 1 on.
same_losses() {
  python3 - "$work/ref.jsonl" "$1" "$2" <<'PY'
import json, sys
ref = {r["iteration"]: r for r in map(json.loads, open(sys.argv[1]))}
got = [json.loads(l) for l in open(sys.argv[2])]
start = int(sys.argv[3])
assert got and got[0]["iteration"] == start + 1 and got[-1]["iteration"] == 6, \
    [r["iteration"] for r in got]
for r in got:
    for k in ("lm_loss", "grad_norm", "learning_rate", "consumed_samples"):
        assert r[k] == ref[r["iteration"]][k], (r["iteration"], k, r[k], ref[r["iteration"]][k])
PY
}
# Resumes $1 (expected to hold iteration $2) to the end and compares with the reference.
resume_matches() {
  rm -f "$work/resume.jsonl"
  run --save="$1" --load="$1" --log_jsonl="$work/resume.jsonl" > "$work/resume.out" 2>&1 ||
    { cat "$work/resume.out" >&2; return 1; }
  grep -q "loaded checkpoint from $1 at iteration $2 " "$work/resume.out" ||
    { head -5 "$work/resume.out" >&2; return 1; }
  same_losses "$work/resume.jsonl" "$2"
}
# The pointer says exactly "$2\n", and every visible shard of $1 is complete.
consistent() {
  [[ "$(cat "$1/latest_checkpointed_iteration.txt")" == "$2" ]] || return 1
  [[ $(size "$1/latest_checkpointed_iteration.txt") -eq $(( ${#2} + 1 )) ]] || return 1
  for d in "$1"/iter_*/mp_rank_00; do
    [[ -e "$d" ]] || continue
    python3 - "$d" <<'PY' || return 1
import json, os, sys
meta = json.load(open(os.path.join(sys.argv[1], "metadata.json")))
size = os.path.getsize(os.path.join(sys.argv[1], "model_optim.safetensors"))
assert meta["tensors_file_bytes"] == size, (sys.argv[1], size)
PY
  done
}

# 1. SIGKILL at byte k of the save at iteration 4.
points=(0 1 7 8 $((h / 2)) $((h - 1)) $h)
for i in $(seq 1 11); do points+=( $(( h + (t - h) * i / 12 )) ); done
points+=( $((t - 1)) $t $((t + 1)) $((t + m / 2)) $((t + m - 1)) $((t + m)) $((t + m + 1)) )
points+=( $((t + m + 2)) )  # The first byte of the next save: iteration 4 is committed.
# kill_case K LABEL [FLAGS...]: SIGKILL at byte K of the save at iteration 4 (FLAGS: the run's
# own), then the checks above; counts into $kills.
kills=0
kill_case() {
  local k="$1" label="$2"; shift 2
  local ck="$work/kill_$k" expected=2
  [[ $k -ge $((t + m + 2)) ]] && expected=4
  run "$@" --file_fault="kill_at_write_byte:$((s1 + k))" --save="$ck" > "$work/kill.out" 2>&1
  local rc=$?
  [[ $rc -eq 137 ]] || { tail -3 "$work/kill.out"; fail "${label}kill at byte $k: exit $rc"; }
  consistent "$ck" "$expected" || fail "${label}kill at byte $k: inconsistent checkpoint directory"
  # The shard of iteration 4 is published only once its files are complete (before the pointer).
  if [[ $k -lt $((t + m)) ]]; then
    [[ ! -e "$(shard "$ck" 4)" ]] || fail "${label}kill at byte $k: a shard of iteration 4 is visible"
  fi
  resume_matches "$ck" "$expected" || fail "${label}kill at byte $k: resume from $expected differs"
  kills=$((kills + 1))
  rm -rf "$ck"
}
for k in "${points[@]}"; do kill_case "$k" ""; done
exact=$kills
echo "kill points: $kills, bit-exact resumes: $exact"

# 2. A full disk and an I/O error during the save at iteration 4.
faults=0
for kind in enospc:"No space left on device" eio:"Input/output error"; do
  name="${kind%%:*}"; message="${kind#*:}"
  for k in $(( h + (t - h) / 2 )) $((t + m / 2)) $((t + m + 1)); do
    ck="$work/${name}_$k"
    run --file_fault="${name}_at_byte:$((s1 + k))" --save="$ck" > "$work/fault.out" 2>&1
    rc=$?
    [[ $rc -ne 0 && $rc -ne 137 ]] || fail "$name at byte $k: exit $rc"
    [[ $(grep -c . "$work/fault.out" | tr -d ' ') -ge 1 ]] || fail "$name at byte $k: no message"
    errors=$(grep -ci "error\|fatal" "$work/fault.out")
    [[ $errors -eq 1 ]] || { cat "$work/fault.out"; fail "$name at byte $k: $errors error lines"; }
    grep -i "error\|fatal" "$work/fault.out" | grep -q "$message" ||
      fail "$name at byte $k: unclear error: $(grep -i "error\|fatal" "$work/fault.out")"
    grep -i "error\|fatal" "$work/fault.out" | grep -q "$ck/" ||
      fail "$name at byte $k: the error does not name the file"
    consistent "$ck" 2 || fail "$name at byte $k: the previous checkpoint was disturbed"
    leftovers=$(find "$ck" -name '.*' | wc -l)
    [[ $leftovers -eq 0 ]] || fail "$name at byte $k: temporaries left: $(find "$ck" -name '.*')"
    resume_matches "$ck" 2 || fail "$name at byte $k: resume differs"
    faults=$((faults + 1))
    echo "$name at byte $k of the save: $(grep -i "error\|fatal" "$work/fault.out")"
  done
done
echo "ENOSPC/EIO cases: $faults, previous checkpoint intact and resumed bit-exact: $faults"

# 3. A flipped byte inside a tensor of the final checkpoint: refused by its CRC32C (the default
# check), and by its SHA-256 under --checkpoint_verify=sha256.
file="$(shard "$work/ref" 6)/model_optim.safetensors"
offset=$(( h + (t - h) / 2 ))
byte=$(od -An -t u1 -j "$offset" -N 1 "$file" | tr -d ' ')
printf "$(printf '\\%03o' $(( byte ^ 1 )))" | dd of="$file" bs=1 seek="$offset" conv=notrunc status=none
for verify in crc32c:CRC32C sha256:SHA-256; do
  run --load="$work/ref" --checkpoint_verify="${verify%%:*}" > "$work/flip.out" 2>&1 &&
    fail "a flipped byte was loaded (${verify%%:*})"
  line=$(grep -i "error\|fatal" "$work/flip.out")
  [[ $(echo "$line" | wc -l) -eq 1 ]] || fail "flipped byte: $(cat "$work/flip.out")"
  echo "$line" | grep -q "$file: tensor '.*' fails its ${verify#*:} check" ||
    fail "flipped byte: $line"
  echo "flipped byte refused: $line"
done

# 4. The same faults with --async_save: the background writer's bytes are counted the same way
# (the save at iteration 2 is committed before the one at 4 starts, and 4's before 6's).
kills=0
for k in 0 $((h - 1)) $(( h + (t - h) / 3 )) $(( h + (t - h) * 2 / 3 )) $((t - 1)) \
         $((t + m / 2)) $((t + m)) $((t + m + 1)) $((t + m + 2)); do
  kill_case "$k" "async: " --async_save
done
async_kills=$kills
ck="$work/async_enospc"
run --async_save --file_fault="enospc_at_byte:$((s1 + h + (t - h) / 2))" --save="$ck" > "$work/fault.out" 2>&1
rc=$?
[[ $rc -ne 0 && $rc -ne 137 ]] || fail "async ENOSPC: exit $rc"
line=$(grep -i "error\|fatal" "$work/fault.out")
[[ $(echo "$line" | wc -l) -eq 1 ]] || { cat "$work/fault.out"; fail "async ENOSPC: not one error line"; }
echo "$line" | grep -q "iteration 4 written in the background (--async_save) failed: .*$ck/.*No space left on device" ||
  fail "async ENOSPC: unclear error: $line"
consistent "$ck" 2 || fail "async ENOSPC: the previous checkpoint was disturbed"
resume_matches "$ck" 2 || fail "async ENOSPC: resume differs"
echo "async kill points: $async_kills, bit-exact resumes: $async_kills; async ENOSPC: $line"
echo PASS

#!/bin/bash
# An unusable --save directory is refused at start-up, before any training, in one line naming the
# flag and the path, by pretrain_gpt and pretrain_bert: a path below a regular file, a regular file
# itself, a place the permission check passes but that takes no entries (as root: /proc/x, which
# only creating it tells), and (when not running as root, which may write anywhere) a read-only
# directory and a directory this user cannot enter.
#   save_dir_test.sh SYNTHETIC_CORPUS_BIN PRETRAIN_GPT_BIN PRETRAIN_BERT_BIN
set -uo pipefail
corpus_bin="$1"; shift
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_save_dir || exit 1
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

"$corpus_bin" --output_prefix="$work/corpus" --vocab=64 --documents=20 || fail "corpus"
common=(--data_path="$work/corpus" --vocab_size=64 --num_layers=1 --hidden_size=16
        --num_attention_heads=2 --seq_length=8 --micro_batch_size=1 --global_batch_size=1
        --train_iters=2 --eval_iters=0 --threads=1)
touch "$work/a_file"
mkdir "$work/read_only" && chmod 555 "$work/read_only"
cases=("$work/a_file/ckpt|$work/a_file is not a directory" "$work/a_file|$work/a_file is not a directory")
mkdir "$work/locked" && chmod 000 "$work/locked"
if [[ $(id -u) -ne 0 ]]; then
  cases+=("$work/read_only/ckpt|$work/read_only" "$work/locked/ckpt|$work/locked: Permission denied")
else
  cases+=("/proc/mt_save_dir_test/ckpt|/proc/mt_save_dir_test/ckpt: No such file or directory")
fi
tried=0
for driver in "$@"; do
  for c in "${cases[@]}"; do
    save="${c%%|*}"; why="${c#*|}"
    timeout 60 "$driver" "${common[@]}" --save="$save" > "$work/out" 2>&1 &&
      fail "$(basename "$driver") accepted --save=$save"
    [[ $(grep -c . "$work/out") -eq 1 ]] || fail "$(basename "$driver"): $(cat "$work/out")"
    grep -q "error: --save=$save: .*$why" "$work/out" || fail "unclear: $(cat "$work/out")"
    ! grep -q "iteration" "$work/out" || fail "trained before refusing: $(cat "$work/out")"
    [[ ! -e "$save" || "$save" == "$work/a_file" ]] || fail "$save was created"
    echo "$(basename "$driver"): $(cat "$work/out")"
    tried=$((tried + 1))
  done
done
echo "unwritable --save refused at start-up: $tried of $tried"
echo PASS

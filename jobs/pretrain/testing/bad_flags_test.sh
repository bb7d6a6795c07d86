#!/bin/bash
# Bad invocations of the drivers and tools, table-driven: each row is a command that must fail
# with exactly one line on stderr, containing the row's text (which names the flag or the file),
# and a non-zero exit code: never a signal (exit code > 128: a crash or CHECK failure), never a
# hang (each runs under `timeout 60`, exit code 124). Prints the count of invocations tried and
# passing. Single-process runs (a world of one) except the rows that need several ranks.
#   bad_flags_test.sh SYNTHETIC_CORPUS PRETRAIN_GPT PRETRAIN_BERT RESHARD_CHECKPOINT \
#     CONVERT_CHECKPOINT PREPROCESS WIKITEXT103 LAMBADA RACE GENERATE SERVE
# (The unwritable --save case belongs to the checkpoint tests.)
set -uo pipefail
[[ $# -eq 11 ]] || { echo "usage: see the header" >&2; exit 2; }
corpus_bin="$1" gpt="$2" bert="$3" r="$4" c="$5" p="$6" w="$7" l="$8" ra="$9" g="${10}" s="${11}"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_badflags || exit 1

# Fixtures: a dataset, a tiny GPT checkpoint, a directory where files are expected, bad files.
"$corpus_bin" --output_prefix="$work/corpus" --vocab=64 --documents=200 >/dev/null \
  || fail "corpus"
model=(--vocab_size=64 --make_vocab_size_divisible_by=8 --num_layers=2 --hidden_size=64
       --num_attention_heads=4 --seq_length=32 --micro_batch_size=2 --global_batch_size=4
       --eval_iters=0 --threads=1 --log_interval=1)
ok=(--data_path="$work/corpus" "${model[@]}" --train_iters=2)
"$gpt" "${ok[@]}" --save="$work/ckpt" >"$work/ckpt.out" 2>&1 || { cat "$work/ckpt.out"; fail "ckpt"; }
# One with the GPT-2 vocabulary, so that the harnesses get as far as their data files.
"$gpt" "${ok[@]}" --vocab_size=50257 --make_vocab_size_divisible_by=128 --save="$work/ckpt50k" \
  >"$work/ckpt.out" 2>&1 || { cat "$work/ckpt.out"; fail "ckpt50k"; }
mkdir -p "$work/dir" "$work/dirds.idx" "$work/dirds.bin" "$work/badlatest"
echo "not a number" > "$work/badlatest/latest_checkpointed_iteration.txt"
echo "plain file" > "$work/file"
printf '{"text": "a"}\n{"text": \n' > "$work/bad.jsonl"
printf '{"other": "a"}\n' > "$work/nokey.jsonl"
printf '{"text": "hello world"}\n' > "$work/ok.jsonl"
head -c 1000 "$work/corpus.bin" > "$work/short.bin"; cp "$work/corpus.idx" "$work/short.idx"
printf 'garbage' > "$work/garbage.idx"; cp "$work/corpus.bin" "$work/garbage.bin"

tried=0; passed=0; failures=()
# bad EXPECT COMMAND...: one run of a row.
bad() {
  local expect="$1"; shift
  tried=$((tried + 1))
  timeout 60 "$@" >"$work/out" 2>"$work/err" </dev/null
  local rc=$? lines why=""
  # Under mpirun, its own banner (framed by dashed lines) follows the job's output.
  lines=$(sed '/^-----/,/^-----/d' "$work/err" | grep -c .)
  if [[ $rc -eq 0 ]]; then why="exit code 0"
  elif [[ $rc -eq 124 ]]; then why="hung (60 s)"
  elif [[ $rc -gt 128 ]]; then why="killed by signal $((rc - 128))"
  elif [[ $lines -ne 1 ]]; then why="$lines lines on stderr"
  elif ! grep -qF -- "$expect" "$work/err"; then why="stderr does not contain '$expect'"
  fi
  local shown
  shown="$(basename "$1") ${*:2}"
  if [[ -z "$why" ]]; then
    passed=$((passed + 1))
    echo "ok  [$rc] ${shown//$work/W}  ->  $(head -c 300 "$work/err")"
  else
    failures+=("${shown//$work/W}: $why")
    echo "BAD [$rc] ${shown//$work/W}: $why"; head -c 2000 "$work/err" | sed 's/^/      /'
  fi
}

# --- pretrain_gpt: types, ranges, consistency, files ---
bad "train_iters" "$gpt" "${ok[@]}" --train_iters=abc
bad "train_iters" "$gpt" "${ok[@]}" --train_iters=0
bad "micro_batch_size" "$gpt" "${ok[@]}" --micro_batch_size=0
bad "global_batch_size 4 must be a multiple of micro_batch_size 3" "$gpt" "${ok[@]}" --micro_batch_size=3
bad "global_batch_size must be >= 1" "$gpt" "${ok[@]}" --global_batch_size=0
bad "seq_length must be >= 1" "$gpt" "${ok[@]}" --seq_length=0
bad "seq_length" "$gpt" "${ok[@]}" --seq_length=100 --max_position_embeddings=64
bad "num_attention_heads" "$gpt" "${ok[@]}" --num_attention_heads=3
bad "num_attention_heads" "$gpt" "${ok[@]}" --num_attention_heads=0
bad "tensor_model_parallel_size" "$gpt" "${ok[@]}" --tensor_model_parallel_size=0
bad "tensor_model_parallel_size" "$gpt" "${ok[@]}" --tensor_model_parallel_size=3
bad "hidden_size" "$gpt" "${ok[@]}" --hidden_size=0
bad "num_layers" "$gpt" "${ok[@]}" --num_layers=0
bad "vocab_size" "$gpt" "${ok[@]}" --vocab_size=0
bad "make_vocab_size_divisible_by" "$gpt" "${ok[@]}" --make_vocab_size_divisible_by=0
bad "ffn_hidden_size" "$gpt" "${ok[@]}" --ffn_hidden_size=-1
bad "max_position_embeddings" "$gpt" "${ok[@]}" --max_position_embeddings=0
bad "lr" "$gpt" "${ok[@]}" --lr=-1
bad "lr" "$gpt" "${ok[@]}" --lr=nan
bad "min_lr" "$gpt" "${ok[@]}" --lr=1e-4 --min_lr=1e-3
bad "lr_warmup_samples" "$gpt" "${ok[@]}" --lr_warmup_samples=-5
bad "lr_decay_style" "$gpt" "${ok[@]}" --lr_decay_style=exp
bad "weight_decay" "$gpt" "${ok[@]}" --weight_decay=-1
bad "clip_grad" "$gpt" "${ok[@]}" --clip_grad=-1
bad "log_interval" "$gpt" "${ok[@]}" --log_interval=0
bad "eval_interval" "$gpt" "${ok[@]}" --eval_interval=-1
bad "eval_iters" "$gpt" "${ok[@]}" --eval_iters=-1
bad "save_interval" "$gpt" "${ok[@]}" --save_interval=-1
bad "threads" "$gpt" "${ok[@]}" --threads=-1
bad "ddp_bucket_size" "$gpt" "${ok[@]}" --ddp_bucket_size=0
bad "split" "$gpt" "${ok[@]}" --split=abc
bad "split" "$gpt" "${ok[@]}" --split=0,0,0
bad "seed" "$gpt" "${ok[@]}" --seed=-1
bad "--fp16, --bf16 and --fp32 are exclusive" "$gpt" "${ok[@]}" --fp16 --bf16
bad "device" "$gpt" "${ok[@]}" --device=tpu
bad "--comm_backend=nccl needs --device=cuda" "$gpt" "${ok[@]}" --comm_backend=nccl
bad "comm_backend" "$gpt" "${ok[@]}" --comm_backend=gloo
bad "--model=bert-tiny is a bert-family model" "$gpt" "${ok[@]}" --model=bert-tiny
bad "no-such-model" "$gpt" "${ok[@]}" --model=no-such-model
bad "distributed_timeout" "$gpt" "${ok[@]}" --distributed_timeout=-1
bad "max_nan_skips" "$gpt" "${ok[@]}" --max_nan_skips=-1
bad "no_such_flag" "$gpt" "${ok[@]}" --no_such_flag=1
bad "--data_path is required" "$gpt" "${model[@]}" --train_iters=2
bad "$work/missing" "$gpt" "${ok[@]}" --data_path="$work/missing"
bad "$work/dirds" "$gpt" "${ok[@]}" --data_path="$work/dirds"
bad "$work/short" "$gpt" "${ok[@]}" --data_path="$work/short"
bad "$work/garbage" "$gpt" "${ok[@]}" --data_path="$work/garbage"
bad "$work/file" "$gpt" "${ok[@]}" --load="$work/file"
bad "$work/badlatest" "$gpt" "${ok[@]}" --load="$work/badlatest"
bad "$work/file" "$gpt" "${ok[@]}" --save="$work/file"
bad "$work/dir" "$gpt" "${ok[@]}" --log_jsonl="$work/dir"
bad "$work/missing/x.jsonl" "$gpt" "${ok[@]}" --log_jsonl="$work/missing/x.jsonl"
bad "hidden_size" "$gpt" "${ok[@]}" --load="$work/ckpt" --hidden_size=128 --num_attention_heads=4
# Several ranks: rank 0 alone reports, before any collective.
mpi=(mpirun --oversubscribe --bind-to none --mca btl self,vader -np)
bad "world size 3 is not divisible by tensor_model_parallel_size 2" \
  "${mpi[@]}" 3 "$gpt" "${ok[@]}" --tensor_model_parallel_size=2
bad "global_batch_size 4 must be a multiple of micro_batch_size 2 x data-parallel size 4" \
  "${mpi[@]}" 4 "$gpt" "${ok[@]}"
bad "x context_parallel_size 2" "$gpt" "${ok[@]}" --context_parallel_size=2 --attention_dropout=0
bad "context_parallel_size must be >= 1 (got 0)" "$gpt" "${ok[@]}" --context_parallel_size=0
bad "--seq_length 30 does not split into 2 x --context_parallel_size = 4 chunks" \
  "${mpi[@]}" 2 "$gpt" "${ok[@]}" --context_parallel_size=2 --seq_length=30

# --- pretrain_bert ---
bert_ok=(--data_path="$work/corpus" "${model[@]}" --train_iters=2)
bad "mask_prob" "$bert" "${bert_ok[@]}" --mask_prob=2
bad "short_seq_prob" "$bert" "${bert_ok[@]}" --short_seq_prob=-1
bad "train_iters" "$bert" "${bert_ok[@]}" --train_iters=-3
bad "tensor_model_parallel_size" "$bert" "${bert_ok[@]}" --tensor_model_parallel_size=3
bad "$work/missing" "$bert" "${bert_ok[@]}" --data_path="$work/missing"
bad "$work/missing.txt" "$bert" "${bert_ok[@]}" --vocab_file="$work/missing.txt"
bad "$work/dir" "$bert" "${bert_ok[@]}" --vocab_file="$work/dir"
bad "--model=gpt2-tiny is a gpt2-family model" "$bert" "${bert_ok[@]}" --model=gpt2-tiny

# --- //checkpoint:reshard_checkpoint ---
bad "--load" "$r" --save="$work/out1" --tensor_model_parallel_size=2
bad "--save" "$r" --load="$work/ckpt" --tensor_model_parallel_size=2
bad "tensor_model_parallel_size" "$r" --load="$work/ckpt" --save="$work/out2"
bad "tensor_model_parallel_size" "$r" --load="$work/ckpt" --save="$work/out3" --tensor_model_parallel_size=3
bad "tensor_model_parallel_size" "$r" --load="$work/ckpt" --save="$work/out4" --tensor_model_parallel_size=abc
bad "$work/missing" "$r" --load="$work/missing" --save="$work/out5" --tensor_model_parallel_size=2
bad "$work/file" "$r" --load="$work/file" --save="$work/out6" --tensor_model_parallel_size=2
bad "999" "$r" --load="$work/ckpt" --save="$work/out7" --tensor_model_parallel_size=2 --iteration=999
bad "$work/file" "$r" --load="$work/ckpt" --save="$work/file" --tensor_model_parallel_size=2

# --- //checkpoint:convert_checkpoint ---
bad "--from" "$c" --input="$work/ckpt" --save="$work/out8"
bad "--from=hf" "$c" --from=xyz --input="$work/ckpt" --save="$work/out9"
bad "$work/missing" "$c" --from=hf --input="$work/missing" --save="$work/out10"
bad "$work/file" "$c" --from=hf --input="$work/file" --save="$work/out11"
bad "config.json" "$c" --from=hf --input="$work/dir" --save="$work/out12"
bad "dtype" "$c" --to=hf --input="$work/ckpt" --save="$work/out13" --dtype=f8
bad "tensor_model_parallel_size" "$c" --from=hf --input="$work/dir" --save="$work/out14" --tensor_model_parallel_size=0
bad "--input" "$c" --to=hf --save="$work/out15"

# --- //data:preprocess ---
pre=(--tokenizer=gpt2 --output_prefix="$work/pp")
bad "$work/missing.jsonl" "$p" "${pre[@]}" --input="$work/missing.jsonl"
bad "$work/dir" "$p" "${pre[@]}" --input="$work/dir"
bad "$work/bad.jsonl" "$p" "${pre[@]}" --input="$work/bad.jsonl"
bad "text" "$p" "${pre[@]}" --input="$work/nokey.jsonl"
bad "tokenizer" "$p" --tokenizer=foo --output_prefix="$work/pp" --input="$work/nokey.jsonl"
bad "--input_format=xml: must be one of jsonl, text" "$p" "${pre[@]}" --input="$work/nokey.jsonl" --input_format=xml
bad "workers" "$p" "${pre[@]}" --input="$work/nokey.jsonl" --workers=-1
bad "chunk_mb" "$p" "${pre[@]}" --input="$work/nokey.jsonl" --chunk_mb=0
bad "output_prefix" "$p" --tokenizer=gpt2 --input="$work/nokey.jsonl"
bad "cannot create output directory $work/file:" "$p" --tokenizer=gpt2 --input="$work/ok.jsonl" --output_prefix="$work/file/pp"
bad "--input" "$p" "${pre[@]}"

# --- eval harnesses and generation ---
echo " = Title = " > "$work/wiki.tokens"
bad "--load" "$w" --data="$work/wiki.tokens"
bad "$work/missing" "$w" --load="$work/missing" --data="$work/wiki.tokens"
bad "$work/missing.tokens" "$w" --load="$work/ckpt50k" --data="$work/missing.tokens"
bad "$work/dir" "$w" --load="$work/ckpt50k" --data="$work/dir"
bad "seq_length" "$w" --load="$work/ckpt" --data="$work/wiki.tokens" --seq_length=-1
bad "overlapping_eval" "$w" --load="$work/ckpt" --data="$work/wiki.tokens" --overlapping_eval=0
bad "micro_batch_size" "$w" --load="$work/ckpt" --data="$work/wiki.tokens" --micro_batch_size=0
bad "999" "$w" --load="$work/ckpt" --data="$work/wiki.tokens" --iteration=999
bad "$work/dir" "$l" --load="$work/ckpt50k" --data="$work/dir"
bad "$work/bad.jsonl" "$l" --load="$work/ckpt50k" --data="$work/bad.jsonl"
bad "strict" "$l" --load="$work/ckpt" --data="$work/bad.jsonl" --strict=maybe
bad "checkpoint $work/ckpt holds a gpt2-family model" "$ra" --load="$work/ckpt" --data="$work/missing"
bad "epochs" "$ra" --load="$work/ckpt" --data="$work/dir" --epochs=-1
bad "top_k" "$g" --load="$work/ckpt" --prompt=hi --top_k=5 --top_p=0.9
bad "top_p" "$g" --load="$work/ckpt" --prompt=hi --top_p=2
bad "temperature" "$g" --load="$work/ckpt" --prompt=hi --temperature=-1
bad "tokens_to_generate" "$g" --load="$work/ckpt" --prompt=hi --tokens_to_generate=-1
bad "$work/missing.txt" "$g" --load="$work/ckpt" --prompts_file="$work/missing.txt"
bad "$work/dir" "$g" --load="$work/ckpt" --prompts_file="$work/dir"
bad "$work/missing" "$g" --load="$work/missing" --prompt=hi
bad "port" "$s" --load="$work/ckpt" --port=70000
bad "port" "$s" --load="$work/ckpt" --port=-1
bad "$work/missing" "$s" --load="$work/missing" --port=0

echo "bad invocations: $tried tried, $passed passed"
if [[ ${#failures[@]} -gt 0 ]]; then
  printf 'FAILED: %s\n' "${failures[@]}"
  exit 1
fi
echo PASS

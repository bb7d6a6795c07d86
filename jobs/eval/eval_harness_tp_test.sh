#!/bin/bash
# The harnesses on a small trained GPT-2 (vocab 50257, so the GPT-2 tokenizer applies): trained
# for 40 iterations at TP=2 by pretrain_gpt from the registered gpt2-tiny (shrunk by flags) on a
# generated English corpus, then evaluated from that TP=2 checkpoint
#   - at TP=1 (a plain process), TP=2 and TP=4 (mpirun): the same WikiText-103 numbers and LAMBADA
#     per-example results within float32 rounding;
#   - batched against one sequence per forward pass: the same results (right-padding is inert);
#   - in bf16: close to f32.
#   eval_harness_tp_test.sh PREPROCESS PRETRAIN_GPT WIKITEXT103 LAMBADA WIKI_FIXTURE LAMBADA_FIXTURE
set -uo pipefail
preprocess="$1"; pretrain="$2"; wikitext="$3"; lambada="$4"; wiki="$5"; lambada_data="$6"
source "${TEST_SRCDIR:+$TEST_SRCDIR/$TEST_WORKSPACE/}tools/test_env.sh" mt_eval_tp || exit 1

# 400 short documents of simple sentences, separated by blank lines; and 20 more sentences in the
# WikiText format (in-distribution text on which the trained model must beat the uniform one).
python3 - "$work/corpus.txt" "$work/indist.tokens" <<'PY'
import random, sys
random.seed(11)
people = ["the keeper", "a sailor", "my grandmother", "the engineer", "our neighbour", "the child"]
verbs = ["watched", "painted", "repaired", "visited", "described", "followed", "remembered"]
things = ["the lighthouse", "the old boat", "the railway", "the harbour", "the roses", "the beach",
          "the storm", "the quarry", "the museum", "a wooden beacon"]
ends = ["in the morning", "every evening", "after the storm", "for three days", "near the shore"]
with open(sys.argv[1], "w") as f:
    for d in range(400):
        n = random.randint(3, 6)
        f.write(" ".join("%s %s %s %s." % (random.choice(people).capitalize(), random.choice(verbs),
                                            random.choice(things), random.choice(ends))
                         for _ in range(n)) + "\n\n")
with open(sys.argv[2], "w") as f:
    f.write(" \n = Sentences = \n \n")
    for _ in range(20):
        f.write(" %s %s %s %s . \n" % (random.choice(people).capitalize(), random.choice(verbs),
                                        random.choice(things), random.choice(ends)))
PY
"$preprocess" --input="$work/corpus.txt" --input_format=text --tokenizer=gpt2 --append_eod \
  --output_prefix="$work/gpt" --workers=1 > "$work/pre.out" 2>&1 ||
  { cat "$work/pre.out"; fail "preprocess"; }
mpi 2 "$pretrain" --model=gpt2-tiny --num_layers=2 --hidden_size=32 --ffn_hidden_size=128 \
  --max_position_embeddings=64 --seq_length=32 --data_path="$work/gpt" --micro_batch_size=4 \
  --global_batch_size=8 --train_iters=40 --lr=3e-3 --min_lr=3e-4 --lr_warmup_samples=16 \
  --log_interval=10 --eval_iters=0 --threads=1 --tensor_model_parallel_size=2 \
  --save="$work/ckpt" > "$work/train.out" 2>&1 || { cat "$work/train.out"; fail "training"; }

wiki_flags=(--data="$wiki" --seq_length=48 --overlapping_eval=16 --threads=1)
run() {  # run NAME NP BINARY FLAGS...: the results line into NAME.json, examples into NAME.jsonl
  local name="$1" np="$2"; shift 2
  local cmd=("$@" --load="$work/ckpt" --per_example_jsonl="$work/$name.jsonl")
  if [[ $np -eq 1 ]]; then "${cmd[@]}" > "$work/$name.out" 2>&1; else mpi "$np" "${cmd[@]}" \
    > "$work/$name.out" 2>&1; fi || { cat "$work/$name.out"; fail "$name"; }
  tail -1 "$work/$name.out" > "$work/$name.json"
}
grep -E "iteration +(10|40)/" "$work/train.out"
run indist 1 "$wikitext" --data="$work/indist.tokens" --seq_length=48 --overlapping_eval=16
run wiki_tp1 1 "$wikitext" "${wiki_flags[@]}" --micro_batch_size=3
run wiki_tp2 2 "$wikitext" "${wiki_flags[@]}" --micro_batch_size=3
run wiki_tp4 4 "$wikitext" "${wiki_flags[@]}" --micro_batch_size=3
run wiki_mb1 1 "$wikitext" "${wiki_flags[@]}" --micro_batch_size=1
run wiki_bf16 1 "$wikitext" "${wiki_flags[@]}" --micro_batch_size=3 --bf16
run lambada_tp1 1 "$lambada" --data="$lambada_data" --micro_batch_size=4 --threads=1
run lambada_tp2 2 "$lambada" --data="$lambada_data" --micro_batch_size=4 --threads=1
run lambada_mb1 1 "$lambada" --data="$lambada_data" --micro_batch_size=1 --threads=1
run lambada_last 2 "$lambada" --data="$lambada_data" --strict=false --threads=1
described="gpt2-tiny (gpt2: 2 layers, hidden 32, 4 heads, vocab 50257) from $work/ckpt"
grep -qF "$described iteration 40 (saved at TP 2), run at TP 4" "$work/wiki_tp4.out" ||
  fail "no description line: $(head -2 "$work/wiki_tp4.out")"

python3 - "$work" <<'PY' || fail "results differ"
import json, math, os, sys
w = sys.argv[1]
res = lambda n: json.load(open(os.path.join(w, n + ".json")))
lines = lambda n: [json.loads(l) for l in open(os.path.join(w, n + ".jsonl"))]
close = lambda a, b, tol: abs(a - b) <= tol * max(abs(a), abs(b))
ref = res("wiki_tp1")
assert ref["model"] == "gpt2-tiny", ref
indist = res("indist")["loss"]
assert indist < math.log(50257) - 3, ("the trained weights were not loaded?", indist)
for name in ("wiki_tp2", "wiki_tp4", "wiki_mb1"):
    r = res(name)
    for k in ("task", "original_tokens", "tokenized_tokens", "scored_targets", "seq_length",
              "overlapping_eval", "model"):
        assert r[k] == ref[k], (name, k, r[k], ref[k])
    for k in ("loss", "ppl", "adjusted_ppl"):
        assert close(r[k], ref[k], 1e-5), (name, k, r[k], ref[k])
    for a, b in zip(lines(name), lines("wiki_tp1")):
        assert a["scored_targets"] == b["scored_targets"], (name, a, b)
        assert close(a["nll_sum"], b["nll_sum"], 1e-5), (name, a, b)
bf16 = res("wiki_bf16")
assert close(bf16["loss"], ref["loss"], 2e-2), ("bf16", bf16["loss"], ref["loss"])
lref = res("lambada_tp1")
assert lref["examples"] == 4 and lref["strict"] and lref["model"] == "gpt2-tiny", lref
for name in ("lambada_tp2", "lambada_mb1"):
    assert res(name) == lref, (name, res(name), lref)
    for a, b in zip(lines(name), lines("lambada_tp1")):
        assert a["predicted"] == b["predicted"] and a["target"] == b["target"], (name, a, b)
        assert close(a["target_nll"], b["target_nll"], 1e-5), (name, a, b)
last = res("lambada_last")
assert not last["strict"] and last["target_tokens"] == 4, last
print("in-distribution text: loss %.4f" % indist)
print("wikitext103 loss %.6f (TP 1), %.6f (TP 2), %.6f (TP 4), %.6f (one window per pass), "
      "%.6f (bf16); lambada %d/%d at TP 1 and 2, batched and one at a time" %
      (ref["loss"], res("wiki_tp2")["loss"], res("wiki_tp4")["loss"], res("wiki_mb1")["loss"],
       bf16["loss"], lref["correct"], lref["examples"]))
PY
echo PASS

#!/usr/bin/python3
"""The PyTorch peer of train_step_bench: full GPT-2 training steps in plain PyTorch.

One step is what train_step_bench times: forward over B x T random tokens, the cross-entropy
against random labels, backward, the gradients clipped to a global norm of 1 and an AdamW update
of every parameter. The model is GPT-2 (pre-norm blocks, learned positions, GeLU with the tanh
approximation, dropout 0.1 on the embeddings' sum, the attention probabilities and both residual
branches, the output layer tied to the token embedding, the vocabulary padded to a multiple of 128
as ours is): train_step_bench's defaults, so both do the same work. It is built from
torch.nn primitives so nothing beyond Debian's python3-torch is needed. --dtype=bf16 runs the
forward under torch.autocast (bf16 matmuls, f32 master weights and Adam state: PyTorch's own
mixed precision); f32 runs plain. The first step warms up and is not timed.

  /usr/bin/python3 experiments/benchmarks/torch_gpt2_step.py --threads=2 --dtype=bf16
  /usr/bin/python3 experiments/benchmarks/torch_gpt2_step.py --device=cuda --dtype=bf16

Prints the configuration, each step's time and the median, in the words train_step_bench uses.
Needs python3-torch (Debian), installed by hand for a benchmark; never by the build or CI.
"""
import argparse
import math
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    sys.exit("torch_gpt2_step: error: PyTorch is not installed (apt-get install python3-torch)")


class Block(nn.Module):
    """A pre-norm transformer layer: x + attn(ln1(x)), then x + mlp(ln2(x))."""

    def __init__(self, hidden, heads, dropout):
        super().__init__()
        self.heads = heads
        self.drop = nn.Dropout(dropout)
        self.ln1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.ln2 = nn.LayerNorm(hidden)
        self.up = nn.Linear(hidden, 4 * hidden)
        self.down = nn.Linear(4 * hidden, hidden)

    def forward(self, x, causal):
        b, t, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        shape = (b, t, self.heads, h // self.heads)
        q, k, v = (z.view(shape).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(h // self.heads)
        scores = scores.masked_fill(causal[:t, :t], float("-inf"))
        probs = self.drop(F.softmax(scores.float(), dim=-1).to(v.dtype))
        y = (probs @ v).transpose(1, 2).reshape(b, t, h)
        x = x + self.drop(self.proj(y))
        return x + self.drop(self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh")))


class Gpt2(nn.Module):
    def __init__(self, vocab, positions, hidden, heads, layers, dropout):
        super().__init__()
        self.tokens = nn.Embedding(vocab, hidden)
        self.positions = nn.Embedding(positions, hidden)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(hidden, heads, dropout) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        mask = torch.triu(torch.ones(positions, positions, dtype=torch.bool), diagonal=1)
        self.register_buffer("causal", mask, persistent=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.drop(self.tokens(ids) + self.positions(pos))
        for block in self.blocks:
            x = block(x, self.causal)
        return self.ln_f(x) @ self.tokens.weight.t()  # Tied output layer.


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads (CPU)")
    ap.add_argument("--micro_batch_size", type=int, default=4)
    ap.add_argument("--seq_length", type=int, default=64)
    ap.add_argument("--num_layers", type=int, default=12)
    ap.add_argument("--hidden_size", type=int, default=768)
    ap.add_argument("--num_attention_heads", type=int, default=12)
    ap.add_argument("--vocab_size", type=int, default=50257)
    ap.add_argument("--dropout", type=float, default=0.1, help="as train_step_bench's defaults")
    ap.add_argument("--clip_grad", type=float, default=1.0, help="global norm (0: no clipping)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps, after one warm-up step")
    a = ap.parse_args()
    if a.steps < 1 or a.threads < 1 or a.hidden_size % a.num_attention_heads:
        sys.exit("torch_gpt2_step: error: --steps and --threads must be >= 1 and the heads must "
                 "divide --hidden_size")
    if not 0 <= a.dropout < 1 or a.clip_grad < 0:
        sys.exit("torch_gpt2_step: error: --dropout must be in [0, 1) and --clip_grad >= 0")
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_gpt2_step: error: --device=cuda but PyTorch sees no GPU")
    torch.manual_seed(1)
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    padded = (a.vocab_size + 127) // 128 * 128
    model = Gpt2(padded, a.seq_length, a.hidden_size, a.num_attention_heads, a.num_layers,
                 a.dropout).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    ids = torch.randint(0, a.vocab_size, (a.micro_batch_size, a.seq_length), device=dev)
    labels = torch.randint(0, a.vocab_size, (a.micro_batch_size, a.seq_length), device=dev)
    autocast = torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.dtype == "bf16")

    def step():
        opt.zero_grad(set_to_none=True)
        with autocast:
            logits = model(ids)
        loss = F.cross_entropy(logits.float().view(-1, padded), labels.view(-1))
        loss.backward()
        if a.clip_grad > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip_grad)
        opt.step()
        if a.device == "cuda":
            torch.cuda.synchronize()
        return loss.item()

    params = sum(p.numel() for p in model.parameters())
    print(f"config: torch {torch.__version__} layers={a.num_layers} hidden={a.hidden_size} "
          f"heads={a.num_attention_heads} seq={a.seq_length} batch={a.micro_batch_size} "
          f"vocab={a.vocab_size} (padded {padded}) threads={torch.get_num_threads()} "
          f"dropout={a.dropout} clip_grad={a.clip_grad} dtype={a.dtype} device={a.device}")
    print(f"parameters: {params}")
    step()  # Warm-up.
    times = []
    for i in range(a.steps):
        start = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - start)
        print(f"step {i + 1}: {times[-1]:.3f} s (loss {loss:.4f})")
    print(f"step time (median of {a.steps}): {statistics.median(times):.3f} s")
    print(f"step time (best of {a.steps}): {min(times):.3f} s")


if __name__ == "__main__":
    main()

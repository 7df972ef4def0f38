"""A character-level GPT (d 64, 2 pre-norm blocks, 4 heads, context 32)
trained on a text every Debian system has, then sampled, written as a
PyTorch user writes it; the twin of build/example_gpt.

    .venv/bin/python examples/python/gpt.py [--steps N] [TEXT]
"""
import argparse
import time

import numpy as np

import loom
import loom.nn as nn
import loom.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        y = self.ln1(x)
        x = x + self.attn(y, y, y, need_weights=False, is_causal=True)[0]
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, d=64, layers=2, heads=4, context=32):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(context, d)
        self.blocks = nn.Sequential(*[Block(d, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        self.positions = [loom.arange(n) for n in range(context + 1)]

    def forward(self, tokens):
        n = tokens.shape[1]
        x = self.tok(tokens) + self.pos(self.positions[n])
        return self.head(self.ln(self.blocks(x)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("text", nargs="?", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    text = open(args.text, encoding="utf-8", errors="replace").read()
    chars = sorted(set(text))
    index = {c: i for i, c in enumerate(chars)}
    data = np.array([index[c] for c in text], np.int64)
    rng = np.random.default_rng(0)
    loom.manual_seed(0)
    batch, context = 16, 32
    model = GPT(len(chars), context=context)
    opt = loom.optim.AdamW(model.parameters(), lr=3e-3)
    start = time.perf_counter()
    for step in range(args.steps):
        at = rng.integers(0, len(data) - context - 1, batch)
        x = np.stack([data[a:a + context] for a in at])
        y = np.stack([data[a + 1:a + context + 1] for a in at])
        opt.zero_grad()
        logits = model(loom.from_numpy(x))
        loss = F.cross_entropy(logits.reshape(-1, len(chars)), loom.from_numpy(y.reshape(-1)))
        loss.backward()
        opt.step()
        if step % 50 == 0 or step == args.steps - 1:
            print(f"step {step:4d}  loss {loss.item():.4f}")
    elapsed = time.perf_counter() - start
    model.eval()
    out = list(data[:context])
    with loom.no_grad():
        for _ in range(120):
            ctx = np.array([out[-context:]], np.int64)
            out.append(int(model(loom.from_numpy(ctx))[0, -1].argmax().item()))
    print(f"{args.steps / elapsed:.1f} steps/s; a sample: "
          + repr("".join(chars[i] for i in out[context:])))
    s = loom.stats()
    print(f"segments {s['segments']}, hits {s['hits']}, compiles {s['compiles']}")


if __name__ == "__main__":
    main()

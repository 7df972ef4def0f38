"""The dynamic workloads of bench/run dynamic in PyTorch eager: the twins of
examples/dynamic/, with the same data, initial weights, model and AdamW.

  torch_dynamic.py WORKLOAD --threads N [--steps S] [--warmup W]
  prints "ITEMS_PER_S FIRST_LOSS LAST_LOSS WALL_S" (items per second over
  the steps after the warm-up; WALL_S: seconds of every step)

Every number (data, sizes, weights) comes from models.init_values(name, i,
bound) (model_init_value in C), so both sides see the same steps. A step k
of each workload:
  lstm      16 sequences of one length T in [5, 200] (32 features), a
            one-layer LSTM (hidden 128, gates i f g o, one bias) whose last
            state feeds a 4-class head; label: the argmax over the first 4
            features of their sum over time. Items: tokens (16 * T).
  moe       256 tokens of 64 features; a residual mixture of 8 experts
            (64-128-64, ReLU) with top-2 softmax routing (gates renormalized
            over the two), then an 8-class head; label: argmax of x @ T^T for
            a fixed teacher T. Items: tokens.
  gnn       a graph of N in [200, 1000] nodes (32 features) with 4N random
            edges plus self loops; two mean-aggregating GCN layers (32-64-8,
            ReLU between); label: argmax of (mean of in-neighbours' features)
            @ T^T. Items: nodes.
  treelstm  8 random binary trees of 2 to 24 leaves over a 500-word
            vocabulary (embedding 32); a binary TreeLSTM (hidden 64) walked by
            recursion, a 5-class head on the root; label: the clamped sum of
            the words' fixed sentiments (-1, 0, 1), shifted to 0..4. Items:
            trees.
Optimizer: AdamW(lr 2e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01)."""
import argparse
import math
import os
import sys
import time

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import init_values, lock_memory  # noqa: E402

LR, BETAS, EPS, WD = 2e-3, (0.9, 0.999), 1e-8, 0.01


def values(name, shape, bound=1.0):
    return torch.from_numpy(init_values(name, int(np.prod(shape)), bound)).view(*shape)


def randint(name, i, lo, hi):
    """lo..hi from value i of stream name (ex_randint in C)."""
    u = float(init_values(name, i + 1, 1.0)[i])
    return lo + min(hi - lo, int(math.floor((u + 1.0) * 0.5 * (hi - lo + 1))))


def randints(name, n, lo, hi):
    u = init_values(name, n, 1.0).astype(np.float64)
    return np.minimum(hi - lo, np.floor((u + 1.0) * 0.5 * (hi - lo + 1))).astype(np.int64) + lo


def param(name, shape, bound):
    return nn.Parameter(values(name, shape, bound))


# ---- lstm -----------------------------------------------------------------

class Lstm(nn.Module):
    B, F, H, C = 16, 32, 128, 4

    def __init__(self):
        super().__init__()
        H, b = self.H, 1.0 / math.sqrt(self.H)
        self.rnn = nn.LSTM(self.F, H)
        self.rnn.weight_ih_l0 = param("lstm.w_ih", (4 * H, self.F), b)
        self.rnn.weight_hh_l0 = param("lstm.w_hh", (4 * H, H), b)
        self.rnn.bias_ih_l0 = param("lstm.b", (4 * H,), b)
        self.rnn.bias_hh_l0 = nn.Parameter(torch.zeros(4 * H), requires_grad=False)
        self.head = nn.Linear(H, self.C)
        self.head.weight = param("lstm.w_out", (self.C, H), b)
        self.head.bias = param("lstm.b_out", (self.C,), b)

    def batch(self, k):
        T = randint("lstm.len", k, 5, 200)
        x = values(f"lstm.x.{k}", (T, self.B, self.F))
        y = x[:, :, :self.C].sum(0).argmax(1)
        return (x,), y, self.B * T

    def forward(self, x):
        _, (h, _) = self.rnn(x)
        return self.head(h[0])


# ---- moe ------------------------------------------------------------------

class Moe(nn.Module):
    N, D, E, HID, C = 256, 64, 8, 128, 8

    def __init__(self):
        super().__init__()
        D, HID = self.D, self.HID
        self.router = param("moe.router", (self.E, D), 1 / math.sqrt(D))
        self.w1 = nn.ParameterList(param(f"moe.e{e}.w1", (HID, D), 1 / math.sqrt(D)) for e in range(self.E))
        self.b1 = nn.ParameterList(param(f"moe.e{e}.b1", (HID,), 1 / math.sqrt(D)) for e in range(self.E))
        self.w2 = nn.ParameterList(param(f"moe.e{e}.w2", (D, HID), 1 / math.sqrt(HID)) for e in range(self.E))
        self.b2 = nn.ParameterList(param(f"moe.e{e}.b2", (D,), 1 / math.sqrt(HID)) for e in range(self.E))
        self.head = param("moe.head", (self.C, D), 1 / math.sqrt(D))
        self.head_b = param("moe.head_b", (self.C,), 1 / math.sqrt(D))
        self.teacher = values("moe.teacher", (self.C, D))

    def batch(self, k):
        x = values(f"moe.x.{k}", (self.N, self.D))
        return (x,), (x @ self.teacher.t()).argmax(1), self.N

    def forward(self, x):
        probs = F.softmax(x @ self.router.t(), dim=1)
        topv, topi = probs.topk(2, dim=1)
        gates = topv / topv.sum(1, keepdim=True)
        out = torch.zeros_like(x)
        for e in range(self.E):
            rows, slot = torch.where(topi == e)
            h = F.relu(x[rows] @ self.w1[e].t() + self.b1[e])
            y = (h @ self.w2[e].t() + self.b2[e]) * gates[rows, slot].unsqueeze(1)
            out = out.index_add(0, rows, y)
        return (x + out) @ self.head.t() + self.head_b


# ---- gnn ------------------------------------------------------------------

class Gnn(nn.Module):
    F, H, C = 32, 64, 8

    def __init__(self):
        super().__init__()
        self.w1 = param("gnn.w1", (self.H, self.F), 1 / math.sqrt(self.F))
        self.b1 = param("gnn.b1", (self.H,), 1 / math.sqrt(self.F))
        self.w2 = param("gnn.w2", (self.C, self.H), 1 / math.sqrt(self.H))
        self.b2 = param("gnn.b2", (self.C,), 1 / math.sqrt(self.H))
        self.teacher = values("gnn.teacher", (self.C, self.F))

    @staticmethod
    def aggregate(h, src, dst, deg):
        agg = torch.zeros_like(h).index_add(0, dst, h.index_select(0, src))
        return agg / deg.unsqueeze(1)

    def batch(self, k):
        n = randint("gnn.nodes", k, 200, 1000)
        loops = np.arange(n, dtype=np.int64)
        src = torch.from_numpy(np.concatenate([randints(f"gnn.src.{k}", 4 * n, 0, n - 1), loops]))
        dst = torch.from_numpy(np.concatenate([randints(f"gnn.dst.{k}", 4 * n, 0, n - 1), loops]))
        deg = torch.zeros(n).index_add(0, dst, torch.ones(5 * n))
        x = values(f"gnn.x.{k}", (n, self.F))
        y = (self.aggregate(x, src, dst, deg) @ self.teacher.t()).argmax(1)
        return (x, src, dst, deg), y, n

    def forward(self, x, src, dst, deg):
        h = F.relu(self.aggregate(x @ self.w1.t(), src, dst, deg) + self.b1)
        return self.aggregate(h @ self.w2.t(), src, dst, deg) + self.b2


# ---- treelstm -------------------------------------------------------------

def tree(k, j):
    """(words, shape): shape is a leaf index or a (left, right) pair; splits
    are drawn in preorder from stream tree.split.k.j."""
    leaves = randint(f"tree.leaves.{k}", j, 2, 24)
    words = randints(f"tree.word.{k}.{j}", leaves, 0, Treelstm.V - 1)
    counter = [0]

    def build(lo, n):
        if n == 1:
            return lo
        s = randint(f"tree.split.{k}.{j}", counter[0], 1, n - 1)
        counter[0] += 1
        left = build(lo, s)
        return (left, build(lo + s, n - s))
    return words, build(0, leaves)


class Treelstm(nn.Module):
    TREES, V, DE, H, C = 8, 500, 32, 64, 5

    def __init__(self):
        super().__init__()
        H, DE = self.H, self.DE
        self.emb = param("tree.emb", (self.V, DE), 1.0)
        self.w_leaf = param("tree.w_leaf", (3 * H, DE), 1 / math.sqrt(DE))
        self.b_leaf = param("tree.b_leaf", (3 * H,), 1 / math.sqrt(DE))
        self.u = param("tree.u", (5 * H, 2 * H), 1 / math.sqrt(2 * H))
        self.b_int = param("tree.b_int", (5 * H,), 1 / math.sqrt(2 * H))
        self.head = param("tree.head", (self.C, H), 1 / math.sqrt(H))
        self.head_b = param("tree.head_b", (self.C,), 1 / math.sqrt(H))
        self.sentiment = randints("tree.sentiment", self.V, -1, 1)

    def batch(self, k):
        trees = [tree(k, j) for j in range(self.TREES)]
        y = [min(2, max(-2, int(self.sentiment[w].sum()))) + 2 for w, _ in trees]
        return (trees,), torch.tensor(y), self.TREES

    def node(self, words, shape):
        H = self.H
        if isinstance(shape, int):
            g = self.emb[int(words[shape])] @ self.w_leaf.t() + self.b_leaf
            i, o, u = g[:H], g[H:2 * H], g[2 * H:]
            c = torch.sigmoid(i) * torch.tanh(u)
            return torch.sigmoid(o) * torch.tanh(c), c
        hl, cl = self.node(words, shape[0])
        hr, cr = self.node(words, shape[1])
        g = torch.cat([hl, hr]) @ self.u.t() + self.b_int
        i, fl, fr, o, u = (g[n * H:(n + 1) * H] for n in range(5))
        c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr
        return torch.sigmoid(o) * torch.tanh(c), c

    def forward(self, trees):
        roots = [self.node(words, shape)[0] for words, shape in trees]
        return torch.stack(roots) @ self.head.t() + self.head_b


WORKLOADS = {"lstm": Lstm, "moe": Moe, "gnn": Gnn, "treelstm": Treelstm}


def main():
    lock_memory()
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=sorted(WORKLOADS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = WORKLOADS[args.workload]()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad],
                            lr=LR, betas=BETAS, eps=EPS, weight_decay=WD)
    batches = [model.batch(k) for k in range(args.warmup + args.steps)]
    losses, items, elapsed, wall = [], 0, 0.0, 0.0
    for k, (inputs, y, n) in enumerate(batches):
        t0 = time.perf_counter()
        loss = F.cross_entropy(model(*inputs), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        losses.append(loss.item())
        wall += dt
        if k >= args.warmup:
            elapsed += dt
            items += n
    print(f"{items / elapsed:.6g} {losses[0]:.8g} {losses[-1]:.8g} {wall:.6g}")


if __name__ == "__main__":
    main()

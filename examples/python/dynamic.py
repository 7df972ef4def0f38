"""Four dynamic models written once, as a PyTorch user writes them, and
run by Loom or by PyTorch (the same code: `lib` is the loom or the torch
module). Each step's shapes or control flow change with its data:

  lstm      an LSTM over 16 sequences of a random length in [5, 200]
            (tokens per second)
  treelstm  a binary TreeLSTM recursing in Python over random trees of
            8-24 leaves (nodes per second)
  moe       a mixture of 4 experts with data-dependent top-2 routing of 256
            tokens (tokens per second)
  gnn       a 2-layer graph convolution over a random graph of 200-400
            nodes and 4-8 edges per node (nodes per second)

    .venv/bin/python examples/python/dynamic.py lstm [--steps N] [--lib torch]

Loom's one hint: loom.sync() at the end of a repeated body (a time step,
a tree node), a segment boundary, so that the body compiles once and
replays instead of the whole unrolled program compiling per shape.
Each workload, called as workload(lib, steps, seed, init), returns
(losses, items, seconds): its batches are drawn with
NumPy before the clock starts (as bench/run dynamic's C workloads and their
PyTorch twins draw theirs), and seconds covers the training steps.
bench/python.py times these against PyTorch (python_dynamic lines)."""
import argparse
import time

import numpy as np


def _keep(modules):
    """The modules' initial weights as made (init=: another set, for tests
    that start Loom and PyTorch from the same weights)."""


def _sync(lib):
    return getattr(lib, "sync", lambda: None)


def _train(rng, steps, make_batch, train_step):
    """The batches drawn first, then the timed steps: (losses, items, s)."""
    batches = [make_batch(rng) for _ in range(steps)]
    losses, items = [], 0
    t0 = time.perf_counter()
    for b in batches:
        loss, n = train_step(b)
        losses.append(float(loss))
        items += n
    return losses, items, time.perf_counter() - t0


# ---- LSTM over variable-length sequences ----

def lstm(lib, steps, seed=0, init=None):
    nn, F = lib.nn, lib.nn.functional
    B, D, H, C = 16, 32, 128, 4
    rng = np.random.default_rng(seed)
    lib.manual_seed(seed)
    cell, head = nn.LSTMCell(D, H), nn.Linear(H, C)
    (init or _keep)([cell, head])
    opt = lib.optim.Adam(list(cell.parameters()) + list(head.parameters()), lr=1e-3)
    sync = _sync(lib)

    def batch(rng):
        T = int(rng.integers(5, 201))
        x = rng.standard_normal((T, B, D)).astype(np.float32)
        return x, np.argmax(x[:, :, :C].sum(0), 1)

    def step(b):
        x, y = b
        h = c = lib.zeros(B, H)
        for t in range(x.shape[0]):
            h, c = cell(lib.from_numpy(x[t]), (h, c))
            sync()
        loss = F.cross_entropy(head(h), lib.from_numpy(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss, x.shape[0] * B

    return _train(rng, steps, batch, step)


# ---- TreeLSTM recursing over random trees ----

def random_tree(rng, n_leaves, vocab):
    """A binary tree as nested tuples with word ids at the leaves."""
    nodes = [int(w) for w in rng.integers(0, vocab, n_leaves)]
    while len(nodes) > 1:
        i = int(rng.integers(0, len(nodes) - 1))
        nodes[i:i + 2] = [(nodes[i], nodes[i + 1])]
    return nodes[0]


def treelstm(lib, steps, seed=0, init=None):
    nn, F = lib.nn, lib.nn.functional
    V, D, H, C = 100, 32, 64, 3
    rng = np.random.default_rng(seed)
    lib.manual_seed(seed)
    embed = nn.Embedding(V, D)
    leaf = nn.Linear(D, 3 * H)        # i, o, u of a leaf
    node = nn.Linear(2 * H, 5 * H)    # i, o, u, f_left, f_right of a node
    head = nn.Linear(H, C)
    (init or _keep)([embed, leaf, node, head])
    params = [p for m in (embed, leaf, node, head) for p in m.parameters()]
    opt = lib.optim.Adam(params, lr=1e-3)
    sync = _sync(lib)
    words = [lib.tensor([w]) for w in range(V)]

    def encode(tree):
        if isinstance(tree, int):
            i, o, u = leaf(embed(words[tree])).chunk(3, 1)
            c = i.sigmoid() * u.tanh()
        else:
            (hl, cl), (hr, cr) = encode(tree[0]), encode(tree[1])
            i, o, u, fl, fr = node(lib.cat([hl, hr], 1)).chunk(5, 1)
            c = i.sigmoid() * u.tanh() + fl.sigmoid() * cl + fr.sigmoid() * cr
        h = o.sigmoid() * c.tanh()
        sync()
        return h, c

    def batch(rng):
        n = int(rng.integers(8, 25))
        return random_tree(rng, n, V), n

    def step(b):
        tree, n = b
        h, _ = encode(tree)
        loss = F.cross_entropy(head(h), labels[n % C])
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss, 2 * n - 1

    labels = [lib.tensor([k]) for k in range(C)]
    return _train(rng, steps, batch, step)


# ---- mixture of experts with top-2 routing ----

def moe(lib, steps, seed=0, init=None):
    nn, F = lib.nn, lib.nn.functional
    N, D, H, E, C = 256, 64, 128, 4, 8
    rng = np.random.default_rng(seed)
    lib.manual_seed(seed)
    gate = nn.Linear(D, E)
    experts = nn.ModuleList([nn.Sequential(nn.Linear(D, H), nn.ReLU(), nn.Linear(H, D))
                             for _ in range(E)])
    head = nn.Linear(D, C)
    (init or _keep)([gate, experts, head])
    params = [p for m in (gate, experts, head) for p in m.parameters()]
    opt = lib.optim.Adam(params, lr=1e-3)
    centers = rng.standard_normal((C, D)).astype(np.float32)

    def batch(rng):
        y = rng.integers(0, C, N)
        return centers[y] + rng.standard_normal((N, D)).astype(np.float32), y

    def step(b):
        x, y = lib.from_numpy(b[0]), lib.from_numpy(b[1])
        weights, chosen = gate(x).softmax(1).topk(2, 1)
        out = lib.zeros(N, D)
        for e in range(E):
            hit = (chosen == e)
            rows = lib.nonzero(hit.any(1))[:, 0]
            if rows.shape[0] == 0:
                continue
            w = (weights * hit.float()).sum(1)[rows]
            out = out.index_add(0, rows, experts[e](x[rows]) * w[:, None])
        loss = F.cross_entropy(head(out + x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss, N

    return _train(rng, steps, batch, step)


# ---- graph convolution over random graphs ----

def gnn(lib, steps, seed=0, init=None):
    nn, F = lib.nn, lib.nn.functional
    D, H, C = 16, 64, 4
    rng = np.random.default_rng(seed)
    lib.manual_seed(seed)
    l1, l2 = nn.Linear(D, H), nn.Linear(H, C)
    (init or _keep)([l1, l2])
    opt = lib.optim.Adam(list(l1.parameters()) + list(l2.parameters()), lr=1e-2)

    def propagate(h, src, dst, norm):
        msg = h[src] * norm
        return lib.zeros(h.shape[0], h.shape[1]).index_add(0, dst, msg)

    def batch(rng):
        n = int(rng.integers(200, 401))
        m = n * int(rng.integers(4, 9))
        src = rng.integers(0, n, m)
        dst = rng.integers(0, n, m)
        feats = rng.standard_normal((n, D)).astype(np.float32)
        deg = np.bincount(dst, minlength=n).astype(np.float32) + 1
        # a node's class: the largest of its first C features summed over
        # itself and its in-neighbours
        agg = feats[:, :C].copy()
        np.add.at(agg, dst, feats[src, :C])
        norm = (1.0 / deg[dst]).astype(np.float32)[:, None]
        return feats, src, dst, norm, agg.argmax(1).astype(np.int64)

    def step(b):
        feats, src, dst, norm, y = (lib.from_numpy(a) for a in b)
        h = propagate(l1(feats), src, dst, norm).relu()
        h = propagate(l2(h), src, dst, norm)
        loss = F.cross_entropy(h, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss, b[0].shape[0]

    return _train(rng, steps, batch, step)


WORKLOADS = {"lstm": lstm, "treelstm": treelstm, "moe": moe, "gnn": gnn}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=sorted(WORKLOADS))
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--lib", choices=["loom", "torch"], default="loom")
    args = ap.parse_args()
    lib = __import__(args.lib)
    if args.lib == "torch":
        lib.set_num_threads(1)
    losses, items, dt = WORKLOADS[args.workload](lib, args.steps)
    print(f"{args.workload} ({args.lib}): loss {losses[0]:.4f} -> {losses[-1]:.4f}; "
          f"{items / dt:.0f} items/s over {args.steps} steps")
    if args.lib == "loom":
        print(lib.stats())


if __name__ == "__main__":
    main()

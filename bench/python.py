"""Loom driven from Python against PyTorch eager on the same programs
(issue 19's benchmarks). One JSON object per line:

  python_overhead: 200 small elementwise ops on a (16,) tensor, written as
    plain Python, the result read at the end (Loom records them lazily and
    replays the segment, compiled once); ns per op, each side's best round.
  python_dynamic: the four dynamic models of examples/python/dynamic.py
    (one script, run by Loom and by PyTorch eager), items per second over
    the same steps (their batches drawn before the clock starts): Loom cold
    (an empty module cache; the wall time includes every compile, which
    runs in the background while the eager fallback runs), warm (the
    modules on disk from a run before: a new trace loads them) and steady
    (the same steps again in that trace, its modules loaded: a long run's
    rate). Each window takes LOOM_BENCH_ROUNDS rounds (3) in which a
    PyTorch run (after two warm-up steps) and Loom's alternate; a line
    gives the medians of the rates and of the rounds' ratios.
    LOOM_BENCH_WORKLOADS=lstm,moe picks some; LOOM_BENCH_THREADS=1 one count.
  python_train: the training step (forward, cross-entropy, backward,
    AdamW) of the MLP, ResNet-18, Transformer and ViT of bench/run train,
    written with loom.nn (examples/python/static_models.py) and driven
    from Python, against the same step driven from C (build/bench_train,
    LOOM_BENCH_PEERS=0: its one compiled executable per step) and PyTorch
    eager with the same initial weights; median ms per step (at least a
    second of steps). loom_ms: the step under loom.compile (one
    executable), timed in three rounds that alternate with the C driver's,
    python_over_c the median of the rounds' ratios; loom_traced_ms: the
    plain loop, traced (segments: forward and loss, backward, the update).
    LOOM_BENCH_MODELS=mlp picks some.

Arguments name the parts to run (overhead, dynamic, train); none runs all.

Run by bench/run python, which points PYTHONPATH at the build's package.
"""
import gc
import json
import os
import shutil
import sys
import tempfile
import time


def _peer_environment():
    """PyTorch runs in this process: it gets the environment bench_util.c's
    bench_torch_env gives the C benches' PyTorch (these machines set
    OPENBLAS_CORETYPE for older cores, which slows OpenBLAS on this one),
    by running this script again under it, before torch loads."""
    if os.environ.get("LOOM_BENCH_PEER_ENV") == "1":
        return
    if not os.path.exists("/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0"):
        print("bench/python.py: OpenMP OpenBLAS is missing (bench/setup.sh installs it): "
              "PyTorch runs on the reference BLAS here, 20-40x below its best",
              file=sys.stderr)
    env = dict(os.environ, LOOM_BENCH_PEER_ENV="1", MALLOC_MMAP_THRESHOLD_="33554432",
               MALLOC_TRIM_THRESHOLD_="100000000000",
               LD_LIBRARY_PATH="/usr/lib/x86_64-linux-gnu/openblas-openmp")
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    cap = os.environ.get("LOOM_CPU_ISA")
    if cap in ("avx2", "portable"):  # the peers held to the ISA Loom is held to
        avx2 = cap == "avx2"
        env.update(ATEN_CPU_CAPABILITY="avx2" if avx2 else "default",
                   ONEDNN_MAX_CPU_ISA="AVX2" if avx2 else "SSE41",
                   OPENBLAS_CORETYPE="Haswell" if avx2 else "Nehalem")
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


if __name__ == "__main__":
    _peer_environment()

import numpy as np  # noqa: E402

import loom

try:
    import torch
    torch.set_num_threads(1)
except ImportError:
    torch = None

OPS = 200
ROUNDS = 9


def program(x, a, b, c):
    for _ in range(OPS // 4):
        x = ((x * a + b).tanh() - c)
    return x


def time_loom(reps):
    rng = np.random.default_rng(0)
    x, a, b, c = (loom.from_numpy(rng.standard_normal(16).astype(np.float32))
                  for _ in range(4))
    for _ in range(3):  # record, compile, settle
        program(x, a, b, c).numpy()
    deadline = time.perf_counter() + 5.0  # the compile runs in the background
    while loom.stats()["compiles"] == 0 and time.perf_counter() < deadline:
        program(x, a, b, c).numpy()
    best = float("inf")
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for _ in range(reps):
            y = program(x, a, b, c).numpy()
        best = min(best, (time.perf_counter() - t0) / (reps * OPS))
    return best, y


def time_torch(reps):
    rng = np.random.default_rng(0)
    x, a, b, c = (torch.from_numpy(rng.standard_normal(16).astype(np.float32))
                  for _ in range(4))
    best = float("inf")
    with torch.no_grad():
        for _ in range(ROUNDS):
            t0 = time.perf_counter()
            for _ in range(reps):
                y = program(x, a, b, c).numpy()
            best = min(best, (time.perf_counter() - t0) / (reps * OPS))
    return best, y


def line(**kw):
    print(json.dumps(kw), flush=True)


def overhead():
    mine, y = time_loom(50)
    theirs, ty = time_torch(50) if torch else (float("nan"), None)
    if ty is not None and not np.allclose(y, ty, rtol=1e-4, atol=1e-5):
        print("bench python: Loom and PyTorch disagree on the overhead program",
              file=sys.stderr)
    line(bench="python_overhead", ops=OPS, loom_ns_per_op=round(mine * 1e9, 1),
         torch_ns_per_op=round(theirs * 1e9, 1), vs_torch_eager=round(theirs / mine, 3),
         compiles=loom.stats()["compiles"])


STEPS = {"lstm": 40, "treelstm": 100, "moe": 100, "gnn": 100}  # as bench/run dynamic: 100
DYNAMIC_ROUNDS = int(os.environ.get("LOOM_BENCH_ROUNDS", "3"))


def run_loom(fn, steps, seed):
    # The run before's model is garbage, but a workload's recursive closure
    # (the TreeLSTM's encode) keeps it in a reference cycle: until Python's
    # collector frees it, its parameters stay in the trace's optimizer step
    # (docs/python.md), which every new model then recompiles with them.
    gc.collect()
    _, items, seconds = fn(loom, steps, seed)
    return items / seconds


def run_torch(fn, steps):
    if not torch:
        return float("nan")
    _, items, seconds = fn(torch, steps, 2)
    return items / seconds


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def dynamic_rounds(fn, steps):
    """{window: [(loom, torch) items/s a round]}: PyTorch's run and Loom's
    alternate, so that a ratio compares runs seconds apart on a shared
    machine whose speed drifts over a minute (either side's rate moved by
    up to 40% between runs a minute apart). Each cold round starts from
    an empty module cache and a new trace; warm rounds start a new trace
    over the modules a compiled run put on disk, and steady runs the same
    steps again in that trace."""
    rounds = {"cold": [], "warm": [], "steady": []}
    compiles = {}
    cache = tempfile.mkdtemp(prefix="loom-bench-python-")
    try:
        for r in range(DYNAMIC_ROUNDS):
            os.environ["LOOM_CACHE_DIR"] = os.path.join(cache, f"cold{r}")
            # a new trace; the last one's compile still running ends first
            loom.set_compile_mode("tiered")
            theirs = run_torch(fn, steps)
            rounds["cold"].append((run_loom(fn, steps, 2), theirs))
            compiles["cold"] = loom.stats()["compiles"]
        os.environ["LOOM_CACHE_DIR"] = os.path.join(cache, "warm")
        loom.set_compile_mode("wait")  # every key of the workload to disk
        fn(loom, steps, 2)
        for r in range(DYNAMIC_ROUNDS):
            loom.set_compile_mode("tiered")
            theirs = run_torch(fn, steps)
            rounds["warm"].append((run_loom(fn, steps, 2), theirs))
            compiles["warm"] = loom.stats()["compiles"]
            theirs = run_torch(fn, steps)
            rounds["steady"].append((run_loom(fn, steps, 2), theirs))
            compiles["steady"] = loom.stats()["compiles"] - compiles["warm"]
        loom.set_compile_mode("tiered")
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return rounds, compiles


def dynamic():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    "examples", "python"))
    import dynamic as models
    wanted = os.environ.get("LOOM_BENCH_WORKLOADS", "lstm,treelstm,moe,gnn").split(",")
    threads = [int(t) for t in os.environ.get("LOOM_BENCH_THREADS", "1,2").split(",")]
    for name in wanted:
        fn, steps = models.WORKLOADS[name], STEPS[name]
        for th in threads:
            if torch:
                torch.set_num_threads(th)
                fn(torch, 2, 1)  # warm
            loom.set_num_threads(th)
            rounds, compiles = dynamic_rounds(fn, steps)
            for label, pairs in rounds.items():
                line(bench="python_dynamic", workload=name, threads=th, cache=label,
                     steps=steps, rounds=len(pairs),
                     loom_items_per_s=round(median([m for m, _ in pairs]), 1),
                     torch_eager_items_per_s=round(median([t for _, t in pairs]), 1),
                     vs_torch_eager=round(median([m / t for m, t in pairs]), 3),
                     compiles=compiles[label])


def median_step_ms(step, warm, reps, seconds=0.0):
    """The median of at least reps steps and of as many as fit in seconds."""
    for _ in range(warm):
        step()
    times = []
    t_end = time.perf_counter() + seconds
    while len(times) < reps or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return float(np.median(times))


def c_step_ms(model, threads):
    build = os.environ.get("LOOM_BUILD_DIR") or os.path.join(HERE, "..", "build")
    env = dict(os.environ, LOOM_BENCH_PEERS="0", LOOM_BENCH_THREADS=str(threads))
    import subprocess
    out = subprocess.run([os.path.join(build, "bench_train"), "bench", model], env=env,
                         capture_output=True, text=True, check=False).stdout
    for row in out.splitlines():
        d = json.loads(row)
        if d.get("model") == model and d.get("threads") == threads:
            return d.get("loom_ms") or float("nan")
    return float("nan")


def train():
    sys.path.insert(0, os.path.join(HERE, "..", "examples", "python"))
    import static_models as loom_models
    peers = None
    if torch:
        import importlib.util
        spec = importlib.util.spec_from_file_location("peer_models",
                                                      os.path.join(HERE, "peers", "models.py"))
        peers = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(peers)
    wanted = os.environ.get("LOOM_BENCH_MODELS", "mlp,resnet18,transformer,vit").split(",")
    threads = [int(t) for t in os.environ.get("LOOM_BENCH_THREADS", "1,2").split(",")]
    reps = {"mlp": 30, "resnet18": 6, "transformer": 6, "vit": 8}
    for name in wanted:
        make, shape, classes = loom_models.MODELS[name]
        n = int(np.prod(shape))
        x_np = (peers.init_values("input", n, 1.0) if peers else
                np.random.default_rng(0).uniform(-1, 1, n).astype(np.float32)).reshape(shape)
        y_np = (np.arange(shape[0]) * 7 % classes).astype(np.int64)
        for th in threads:
            theirs, state = float("nan"), None
            if torch:
                torch.set_num_threads(th)
                tm = peers.load_loom_init(make(torch)).train()
                state = {k: v.detach().numpy().copy() for k, v in tm.state_dict().items()}
                topt = torch.optim.AdamW(tm.parameters(), lr=1e-3, weight_decay=0.01)
                tx, ty = torch.from_numpy(x_np), torch.from_numpy(y_np)

                def tstep():
                    topt.zero_grad()
                    torch.nn.functional.cross_entropy(tm(tx), ty).backward()
                    topt.step()
                theirs = median_step_ms(tstep, 3, reps[name], 1.0)
            loom.set_num_threads(th)
            loom.set_compile_mode("wait")  # compiled from the first step on
            lm = make(loom).train()
            if state:
                lm.load_state_dict(state)
            lopt = loom.optim.AdamW(lm.parameters(), lr=1e-3, weight_decay=0.01)
            lx, ly = loom.from_numpy(x_np), loom.from_numpy(y_np)

            def lstep():
                lopt.zero_grad()
                loss = loom.nn.functional.cross_entropy(lm(lx), ly)
                loss.backward()
                lopt.step()
                return loss
            mine = median_step_ms(lstep, 3, reps[name], 1.0)
            compiled = loom.compile(lstep)
            for _ in range(3):
                compiled()
            # The step from Python and from C alternate, ROUNDS of each: a
            # minute in which the machine lost a core weighs on both sides.
            py, cs = [], []
            for _ in range(ROUNDS_TRAIN):
                py.append(median_step_ms(lambda: compiled(), 0, reps[name], 1.0))
                cs.append(c_step_ms(name, th))
            loom.set_compile_mode("tiered")
            mine_compiled, c = float(np.median(py)), float(np.median(cs))
            line(bench="python_train", model=name, threads=th,
                 loom_ms=round(mine_compiled, 3), loom_traced_ms=round(mine, 3),
                 c_ms=round(c, 3), torch_eager_ms=round(theirs, 3),
                 vs_torch_eager=round(theirs / mine_compiled, 3),
                 python_over_c=round(float(np.median(np.array(py) / np.array(cs))), 3),
                 traced_over_c=round(mine / c, 3))


HERE = os.path.dirname(os.path.abspath(__file__))
ROUNDS_TRAIN = 3

if __name__ == "__main__":
    parts = {"overhead": overhead, "dynamic": dynamic, "train": train}
    for part in sys.argv[1:] or parts:
        if part not in parts:
            sys.exit(f"bench/python.py: no part named {part!r} (overhead, dynamic, train)")
        parts[part]()

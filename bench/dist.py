"""bench/run dist (issue 21): the training step of bench/train.c's models
data-parallel on 2 ranks of 1 thread (mpirun, build/bench_dist) against
the same step on 1 rank of 1 thread and of 2 threads, and against PyTorch
DistributedDataParallel (gloo) on 2 processes of 1 thread with the same
model and per-rank batch (bench/peers/torch_ddp.py), run one after the
other in this run; then what Loom's bucketed all_reduce of each model's
gradients adds to a step's tail against what one MPI_Allreduce of the
same bytes adds to it (bench/dist.c, docs/distributed.md). JSON lines:

  {"bench":"dist","model","ranks":2,"threads_per_rank":1,"loom_items_per_s",
   "single_rank_items_per_s","scaling_efficiency","two_thread_items_per_s",
   "torch_ddp_items_per_s","vs_torch_ddp"}
  {"bench":"dist_zero","model","ranks":2,"loom_items_per_s",
   "data_parallel_items_per_s","vs_data_parallel","state_bytes_per_rank",
   "data_parallel_state_bytes_per_rank","state_ratio"}: the same 2-rank step
   with AdamW's state split across the ranks (ZeRO-1), against the plain
   2-rank step measured just before; state bytes are AdamW's moments
  {"bench":"allreduce","model","bytes","loom_ms","mpi_ms","overhead","mpi_alone_ms"}
  {"bench":"dist_sim",...}: bench/dist_sim.py's model of the Transformer's
  step at 8, 64 and 512 ranks, from its one-rank step measured here

scaling_efficiency = loom_items_per_s / single_rank_items_per_s / 2.
LOOM_BENCH_MODELS=mlp,vit picks some. A side that fails prints null, with
its error on stderr."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("LOOM_BUILD_DIR") or os.path.join(HERE, "..", "build")
MODELS = os.environ.get("LOOM_BENCH_MODELS", "mlp,resnet18,transformer,vit").split(",")
MPIRUN = ["mpirun", "--allow-run-as-root", "-np", "2"]


def torch_env():
    """PyTorch at its best here, as bench_util.c's bench_torch_env."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="33554432",
               MALLOC_TRIM_THRESHOLD_="100000000000",
               LD_LIBRARY_PATH="/usr/lib/x86_64-linux-gnu/openblas-openmp")
    env.pop("OPENBLAS_CORETYPE", None)
    env.pop("OPENBLAS_L2_SIZE", None)
    return env


def run(cmd, env=None):
    """stdout's last line, or None (stderr shown) when the command fails."""
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if p.returncode != 0 or not p.stdout.strip():
        sys.stderr.write("bench dist: %s failed (%d):\n%s" % (" ".join(cmd), p.returncode,
                                                               p.stderr[-2000:]))
        return None
    return p.stdout.strip().splitlines()[-1]


def items(line):
    return json.loads(line)["items_per_s"] if line else None


def step_ms(line):
    return json.loads(line)["step_ms"] if line else None


def state(line):
    return json.loads(line)["state_bytes"] if line else None


def ratio(a, b):
    return round(a / b, 3) if a and b else None


def main():
    dist = os.path.join(BUILD, "bench_dist")
    one_rank_ms = {}
    for model in MODELS:
        line = run([dist, "step", model, "--threads", "1"])
        one, one_rank_ms[model] = items(line), step_ms(line)
        two = items(run([dist, "step", model, "--threads", "2"]))
        plain = run(MPIRUN + [dist, "step", model, "--threads", "1", "--data-parallel"])
        zero = run(MPIRUN + [dist, "step", model, "--threads", "1", "--zero"])
        mine = items(plain)
        ddp = run([sys.executable, os.path.join(HERE, "peers", "torch_ddp.py"), model,
                   "--ranks", "2"], env=torch_env())
        theirs = float(ddp.split()[1]) if ddp else None
        print(json.dumps({
            "bench": "dist", "model": model, "ranks": 2, "threads_per_rank": 1,
            "loom_items_per_s": mine, "single_rank_items_per_s": one,
            "scaling_efficiency": round(mine / one / 2, 3) if mine and one else None,
            "two_thread_items_per_s": two, "vs_two_threads": ratio(mine, two),
            "torch_ddp_items_per_s": round(theirs, 2) if theirs else None,
            "vs_torch_ddp": ratio(mine, theirs)}), flush=True)
        print(json.dumps({
            "bench": "dist_zero", "model": model, "ranks": 2, "loom_items_per_s": items(zero),
            "data_parallel_items_per_s": mine, "vs_data_parallel": ratio(items(zero), mine),
            "state_bytes_per_rank": state(zero), "data_parallel_state_bytes_per_rank": state(plain),
            "state_ratio": ratio(state(zero), state(plain))}), flush=True)
    for model in MODELS:
        line = run(MPIRUN + [dist, "allreduce", model])
        if line:
            print(line, flush=True)
    if one_rank_ms.get("transformer"):
        subprocess.run([sys.executable, os.path.join(HERE, "dist_sim.py"), "--model",
                        "transformer", "--step-ms", str(one_rank_ms["transformer"])],
                       env=dict(os.environ, LOOM_BUILD_DIR=BUILD), check=False)


if __name__ == "__main__":
    main()

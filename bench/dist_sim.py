"""A model of the data-parallel step at many ranks (issue 21): where the
overlap of the gradient exchange with the backward pass stops hiding it.

  bench/dist_sim.py [--model transformer] [--ranks 8,64,512]
                    [--bandwidth-gbs 12.5] [--latency-us 5] [--bucket-mb 25,4,1]
                    [--step-ms MS]

Inputs measured here, in the same run: the model's step on one rank of
one thread (build/bench_dist step MODEL; or --step-ms) and its gradients'
sizes (build/bench_dist layout MODEL). The model, stated:

- weak scaling: each rank keeps its batch, so its compute time is the
  measured step whatever the number of ranks;
- the step is one third forward, two thirds backward (a matmul's backward
  costs twice its forward), and the backward pass makes the gradients in
  reverse parameter order at a rate proportional to their bytes;
- buckets as loom_data_parallel_grads makes them (reverse parameter order,
  closed past --bucket-mb);
- each bucket's all_reduce is a ring all-reduce: 2 (p - 1) / p x bytes /
  bandwidth + 2 (p - 1) x latency (bandwidth: one link's, default 12.5 GB/s
  = 100 Gb/s InfiniBand; latency: a message's, default 5 us); buckets go
  one after another on one channel, each starting once its last gradient
  exists and the bucket before it is done;
- the optimizer waits for the last bucket; its own time is in the step.

One JSON line per bucket size and rank count: {"bench":"dist_sim","model",
"ranks","bucket_mb","buckets",
"compute_ms","comm_ms" (all buckets back to back),"step_ms" (overlapped),
"step_ms_no_overlap","exposed_comm_ms","efficiency" (compute / step)}.
Exposed communication is what the overlap no longer hides: with a ring the
bandwidth term stops growing with p (2 (p - 1) / p < 2) while the latency
term grows linearly, so at some count the last buckets end after the
backward pass."""
import argparse
import json
import os
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("LOOM_BUILD_DIR") or os.path.join(HERE, "..", "build")


def measured(model, step_ms):
    dist = os.path.join(BUILD, "bench_dist")
    grads = json.loads(subprocess.run([dist, "layout", model], capture_output=True, text=True,
                                      check=True).stdout)["grad_bytes"]
    if step_ms is None:
        out = subprocess.run([dist, "step", model, "--threads", "1"], capture_output=True,
                             text=True, check=True).stdout
        step_ms = json.loads(out.strip().splitlines()[-1])["step_ms"]
    return step_ms, grads


def buckets(grads, bucket_bytes):
    """(bytes, ready fraction of the backward pass) per bucket, in order."""
    total, done, out, open_bytes = sum(grads), 0, [], 0
    for b in reversed(grads):
        if open_bytes and open_bytes + b > bucket_bytes:
            out.append((open_bytes, done / total))
            open_bytes = 0
        open_bytes += b
        done += b
    out.append((open_bytes, 1.0))
    return out


def ring_ms(nbytes, p, bandwidth, latency):
    if p == 1:
        return 0.0
    return (2 * (p - 1) / p * nbytes / bandwidth + 2 * (p - 1) * latency) * 1e3


def simulate(step_ms, grads, p, bandwidth, latency, bucket_bytes):
    forward, backward = step_ms / 3, 2 * step_ms / 3
    t, comm = 0.0, 0.0
    for nbytes, ready in buckets(grads, bucket_bytes):
        cost = ring_ms(nbytes, p, bandwidth, latency)
        t = max(t, forward + backward * ready) + cost
        comm += cost
    step = max(step_ms, t + (step_ms - forward - backward))
    return comm, step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="transformer")
    ap.add_argument("--ranks", default="8,64,512")
    ap.add_argument("--bandwidth-gbs", type=float, default=12.5)
    ap.add_argument("--latency-us", type=float, default=5.0)
    ap.add_argument("--bucket-mb", default="25,4,1")
    ap.add_argument("--step-ms", type=float, default=None)
    a = ap.parse_args()
    step_ms, grads = measured(a.model, a.step_ms)
    for mb in [float(b) for b in a.bucket_mb.split(",")]:
        for p in [int(r) for r in a.ranks.split(",")]:
            comm, step = simulate(step_ms, grads, p, a.bandwidth_gbs * 1e9, a.latency_us * 1e-6,
                                  mb * (1 << 20))
            print(json.dumps({
                "bench": "dist_sim", "model": a.model, "ranks": p, "bucket_mb": mb,
                "buckets": len(buckets(grads, mb * (1 << 20))),
                "bandwidth_gbs": a.bandwidth_gbs, "latency_us": a.latency_us,
                "grad_bytes": sum(grads), "compute_ms": round(step_ms, 3),
                "comm_ms": round(comm, 3), "step_ms": round(step, 3),
                "step_ms_no_overlap": round(step_ms + comm, 3),
                "exposed_comm_ms": round(step - step_ms, 3),
                "efficiency": round(step_ms / step, 3)}), flush=True)


if __name__ == "__main__":
    main()

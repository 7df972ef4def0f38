"""loom.distributed: distributed_ranks.py alone and as two MPI ranks, each a
process of its own (MPI starts once a process: not inside pytest's)."""
import os
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("torch")
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "distributed_ranks.py")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    if "distributed_ranks: skipped" in out:
        pytest.skip(out.strip())
    assert r.returncode == 0, out
    return out


def test_one_process():
    out = run([sys.executable, SCRIPT])
    assert "rank 0 of 1: ok" in out


@pytest.mark.skipif(not shutil.which("mpirun"), reason="no mpirun (scripts/setup.sh installs it)")
@pytest.mark.skipif(os.environ.get("LOOM_SANITIZED") == "1",
                    reason="mpirun under the sanitizers' preload: test_comm covers the C side")
def test_two_ranks_match_one_process_on_the_whole_batch():
    env = ["-x", "PYTHONPATH"] if "PYTHONPATH" in os.environ else []
    out = run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", *env,
               sys.executable, SCRIPT])
    assert "rank 0 of 2: ok" in out and "rank 1 of 2: ok" in out


def test_collectives_need_a_process_group():
    import loom
    import loom.distributed as dist
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="init_process_group"):
        dist.all_reduce(loom.tensor([1.0]))
    with pytest.raises(RuntimeError, match="not initialized"):
        dist.get_rank()
    with pytest.raises(ValueError, match="backend"):
        dist.init_process_group("nccl")

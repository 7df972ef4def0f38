"""The module cache on disk across runs of a program: one that ends while
its first compile runs in the background still leaves the compiled module
for its next run (the compiles in flight finish at exit)."""
import os
import re
import subprocess
import sys

SCRIPT = """
import loom
x = loom.randn(64, 64)
for _ in range(5):
    float((x @ x).relu().sum())
"""


def run(cache_dir):
    env = dict(os.environ, LOOM_CACHE_DIR=str(cache_dir), LOOM_LOG="cache")
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stderr


def keys(log, what):
    return set(re.findall(r"loom\[cache\]: " + what + r" ([0-9a-f]{12}) ", log))


def test_a_short_program_finds_its_modules_on_its_next_run(tmp_path):
    first = run(tmp_path)
    built = keys(first, "miss")
    assert built, first
    second = run(tmp_path)
    assert built <= keys(second, "hit"), (first, second)

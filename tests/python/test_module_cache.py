"""The module cache on disk across runs of a program: one that ends while
its first compile runs in the background still leaves the compiled module
for its next run (the compiles queued or running finish at exit, for at
most LOOM_EXIT_COMPILE_SECONDS)."""
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


# Thirty graphs of different lengths: thirty compiles queued behind the
# program, which ends as soon as it has queued them.
MANY = """
import loom
x = loom.randn(64, 64)
for n in range(1, 31):
    y = x
    for _ in range(n):
        y = y.sin()
    float(y.sum())
"""


def run_many(cache_dir, seconds):
    env = dict(os.environ, LOOM_CACHE_DIR=str(cache_dir), LOOM_LOG="cache",
               LOOM_EXIT_COMPILE_SECONDS=seconds)
    r = subprocess.run([sys.executable, "-c", MANY], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stderr


def queued(log):
    return set(re.findall(r"loom\[cache\]: miss at site ([0-9a-f]+): compiling in the background",
                          log))


def test_the_exit_waits_for_every_queued_compile_without_a_bound(tmp_path):
    first = run_many(tmp_path, "-1")
    assert len(queued(first)) >= 30, first
    built = keys(first, "miss")  # the modules compiled (none was on disk)
    assert len(built) >= len(queued(first)), first
    assert built <= keys(run_many(tmp_path, "-1"), "hit")


def test_an_exit_bounded_at_zero_seconds_leaves_queued_compiles_undone(tmp_path):
    # A compile takes far longer than recording and interpreting the next
    # graph, so most of the thirty are still queued when the program
    # ends: they are dropped, not compiled.
    first = run_many(tmp_path, "0")
    assert len(queued(first)) >= 30, first
    assert len(keys(first, "miss")) < len(queued(first)), first


def test_a_bad_exit_bound_warns_and_the_program_still_ends(tmp_path):
    log = run_many(tmp_path, "soon")
    assert "LOOM_EXIT_COMPILE_SECONDS='soon' is not a number" in log, log


def test_a_compile_still_running_at_the_bound_is_abandoned(tmp_path):
    # A compiler that takes a minute: at the bound the program ends, its
    # compile (and the compiler) stopped, with no warning of a failure.
    slow = tmp_path / "slowcc.sh"
    slow.write_text('#!/bin/sh\ncase "$1" in --version) exec cc --version;; esac\n'
                    'sleep 60\nexec cc "$@"\n')
    slow.chmod(0o755)
    env = dict(os.environ, LOOM_CACHE_DIR=str(tmp_path / "cache"), LOOM_CC=str(slow),
               LOOM_EXIT_COMPILE_SECONDS="1")
    r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True,
                       timeout=50)  # the compile alone would take 60 s
    assert r.returncode == 0, r.stdout + r.stderr
    assert "warning" not in r.stderr, r.stderr
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if str(slow).encode() in f.read():
                    left.append(pid)
        except OSError:
            pass
    assert not left, left

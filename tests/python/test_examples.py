"""The Python examples run as a user runs them, and their losses fall."""
import os
import re
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python")
pytestmark = pytest.mark.skipif(os.environ.get("LOOM_SANITIZED") == "1",
                                reason="the sanitizer pass runs the tests of the parts")


def run(*args):
    import loom  # the package under test, wherever it was imported from
    path = os.path.dirname(os.path.dirname(os.path.abspath(loom.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (path, os.environ.get("PYTHONPATH")) if p))
    out = subprocess.run([sys.executable, *args], cwd=EXAMPLES, capture_output=True,
                         text=True, timeout=600, env=env)
    assert out.returncode == 0, out.stderr
    losses = [float(v) for v in re.findall(r"loss (\d+\.\d+)", out.stdout)]
    return out.stdout, losses


@pytest.mark.parametrize("args", [("mlp.py", "--steps", "300"), ("gpt.py", "--steps", "120"),
                                  ("resnet.py", "--steps", "20"),
                                  ("resnet.py", "--vit", "--steps", "30")])
def test_example_learns(args):
    out, losses = run(*args)
    assert len(losses) >= 2 and min(losses[1:]) < losses[0], out


def test_dynamic_example_runs_on_both_libraries():
    for lib in ("loom", "torch"):
        out, losses = run("dynamic.py", "treelstm", "--steps", "4", "--lib", lib)
        assert "items/s" in out and all(v == v for v in losses)

"""What the tests that drive `loom run` share (cli_test.py,
symbolic_rnn_test.py, exporter_forms_test.py): a failure count, and a
model run from the command line as a user runs it."""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx

failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL:", what)


def run_model(loom, model, feeds, extra=()):
    """model's outputs {name: array} from `loom run` on feeds {name:
    array} (and the arguments extra), or its error text when it fails."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.onnx")
        onnx.save(model, path)
        args = [loom, "run", path, "--output-dir", os.path.join(d, "out")]
        for name, a in feeds.items():
            f = os.path.join(d, name + ".npy")
            np.save(f, a)
            args += ["--input", f"{name}={f}"]
        p = subprocess.run(args + list(extra), capture_output=True, text=True, timeout=300)
        if p.returncode:
            return p.stderr.strip()
        return {o.name: np.load(os.path.join(d, "out", o.name + ".npy"))
                for o in model.graph.output}


def finish(name):
    print(f"{name}: {failures} failures")
    sys.exit(1 if failures else 0)

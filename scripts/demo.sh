#!/usr/bin/env bash
# Sets up, builds, and runs the main demo: the C API's (build/loom demo),
# then a PyTorch-style Python training loop run by Loom
# (examples/python/mlp.py, the package as built in build/python).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release >/dev/null
build/loom demo
echo
echo "== the same compiler from Python: examples/python/mlp.py =="
PYTHONPATH=build/python /usr/bin/python3 examples/python/mlp.py --steps 2000

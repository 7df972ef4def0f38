#!/usr/bin/env bash
# Sets up, builds, and runs the main demo.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh release >/dev/null
exec build/loom demo

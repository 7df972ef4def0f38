#!/usr/bin/env bash
# Installs the peers the benchmarks compare Loom with (never run by CI):
# PyTorch, torchvision and ONNX from Debian (for /usr/bin/python3), the
# OpenMP OpenBLAS that PyTorch runs best with here (../shared/PEERS.md), and
# onnxruntime-node from npm into bench/node_modules.
set -euo pipefail
cd "$(dirname "$0")"

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root (or sudo) for apt-get" >&2; exit 1; }
  sudo="sudo"
fi
packages=(python3-torch python3-torchvision python3-onnx python3-numpy libopenblas0-openmp)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -d node_modules/onnxruntime-node ]; then
  command -v npm >/dev/null || { echo "setup: npm is missing: no ONNX Runtime peer" >&2; exit 1; }
  # The install script fetches GPU binaries; the CPU library ships inside.
  npm install --no-save --ignore-scripts --prefix . onnxruntime-node >/dev/null
fi
echo "setup: peers ready"

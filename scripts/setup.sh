#!/usr/bin/env bash
# Installs the Debian packages Loom needs, when they are missing.
#   gcc, make, cmake: the build (gcc also compiles generated kernels);
#   clang, libclang-rt-dev: the second compiler CI builds with, and its
#   sanitizer and libFuzzer runtimes;
#   python3-numpy: the conformance tests compare every op with NumPy;
#   pkg-config: the install test builds a program with it;
#   python3-dev, python3-pytest, python3-setuptools, python3-pip,
#   python3-venv: the Python package (python/), its build, its tests and
#   its install (scripts/install_python.sh).
set -euo pipefail

packages=(gcc make cmake clang libclang-rt-dev python3 python3-numpy pkg-config
          python3-dev python3-pytest python3-setuptools python3-pip python3-venv)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null

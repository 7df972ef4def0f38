#!/usr/bin/env bash
# Installs the Debian packages Loom needs, when they are missing.
#   gcc, make, cmake: the build (gcc also compiles generated kernels);
#   clang, libclang-rt-dev: the second compiler CI builds with, and its
#   sanitizer and libFuzzer runtimes;
#   python3-numpy: the conformance tests compare every op with NumPy;
#   pkg-config: the install test builds a program with it;
#   python3-dev, python3-pytest, python3-setuptools, python3-pip,
#   python3-venv: the Python package (python/), its build, its tests and
#   its install (scripts/install_python.sh);
#   libprotobuf-c-dev, protobuf-c-compiler, libonnx-dev: the ONNX importer
#   (its protobuf code is generated at build time from Debian's onnx.proto);
#   libonnx-testdata: the ONNX conformance cases the tests run;
#   libopenmpi-dev, openmpi-bin: the collectives' transport (MPI) and
#   mpirun, which the tests launch two ranks with;
#   python3-torch: the reference the Python tests compare with (PyTorch's
#   values and torch.autograd's gradients); if it cannot be installed,
#   setup goes on and says so, and those tests are skipped.
set -euo pipefail

packages=(gcc make cmake clang libclang-rt-dev python3 python3-numpy pkg-config
          python3-dev python3-pytest python3-setuptools python3-pip python3-venv
          libprotobuf-c-dev protobuf-c-compiler libonnx-dev libonnx-testdata
          libopenmpi-dev openmpi-bin)
reference=(python3-torch)
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=()
for p in "${packages[@]}"; do installed "$p" || missing+=("$p"); done
missing_ref=()
for p in "${reference[@]}"; do installed "$p" || missing_ref+=("$p"); done
if [ ${#missing[@]} -eq 0 ] && [ ${#missing_ref[@]} -eq 0 ]; then
  exit 0
fi

skip_reference() {
  echo "setup: could not install ${missing_ref[*]}: the Python tests against PyTorch" \
       "will be skipped" >&2
  exit 0
}
echo "setup: installing ${missing[*]} ${missing_ref[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null; then
    [ ${#missing[@]} -eq 0 ] && skip_reference
    echo "setup: need root (or sudo) to install ${missing[*]}" >&2
    exit 1
  fi
  sudo="sudo"
fi
if [ ${#missing[@]} -gt 0 ]; then
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
elif ! $sudo apt-get update -qq; then
  skip_reference
fi
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing_ref[@]}" >/dev/null \
  || skip_reference

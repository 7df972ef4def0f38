#!/usr/bin/env bash
# Configures and builds one flavour of Loom: build.sh release|asan, or
# build.sh tsan TARGET... (ThreadSanitizer; only the targets named, since a
# TSan build of everything takes long).
set -euo pipefail
cd "$(dirname "$0")/.."

flavour=${1:-release}
jobs=$(nproc 2>/dev/null || echo 2)
case "$flavour" in
  release) dir=build; flags=(-DCMAKE_BUILD_TYPE=Release) ;;
  asan) dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=Debug -DLOOM_SANITIZE=ON) ;;
  tsan) dir=build-tsan; flags=(-DCMAKE_BUILD_TYPE=Debug "-DCMAKE_C_FLAGS=-fsanitize=thread"
                               "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread"
                               "-DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread") ;;
  *) echo "usage: build.sh release|asan|tsan [TARGET...]" >&2; exit 2 ;;
esac
shift || true
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake -S . -B "$dir" "${flags[@]}" >/dev/null
cmake --build "$dir" -j "$jobs" "${targets[@]}"

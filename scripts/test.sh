#!/usr/bin/env bash
# Sets up, then builds and runs the whole test suite twice: optimized
# (with the NumPy conformance run), then under AddressSanitizer and
# UndefinedBehaviorSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc 2>/dev/null || echo 2)
# Compiled modules are cached here: the sanitizer pass reuses what the
# optimized pass compiled, and the user's own cache stays untouched.
export LOOM_CACHE_DIR="${LOOM_CACHE_DIR:-$PWD/build-cache}"

echo "== optimized build =="
scripts/build.sh release
(cd build && ctest --output-on-failure -j "$jobs")

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build =="
scripts/build.sh asan
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j "$jobs")

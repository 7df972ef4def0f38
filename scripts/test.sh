#!/usr/bin/env bash
# Sets up, then builds and runs the whole test suite three times: optimized
# (with the NumPy conformance run), built by clang, then under
# AddressSanitizer and UndefinedBehaviorSanitizer; the fuzz harnesses under
# libFuzzer; then the tests of code shared between threads once more under
# ThreadSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
jobs=$(nproc 2>/dev/null || echo 2)
# Compiled modules are cached here: the sanitizer pass reuses what the
# optimized pass compiled, and the user's own cache stays untouched.
export LOOM_CACHE_DIR="${LOOM_CACHE_DIR:-$PWD/build-cache}"

echo "== optimized build =="
scripts/build.sh release
# The layers of src/ (docs/architecture.md): includes and calls point down.
python3 scripts/check_layers.py build
# Its pytest run is the installed package's, next.
(cd build && ctest --output-on-failure -j "$jobs" -E '^python$')

# The Python package as a user installs it (the README's line): pip into a
# fresh virtual environment, then the Python tests against that install.
echo "== Python package, installed =="
pyenv_dir=$(mktemp -d)
scripts/install_python.sh "$pyenv_dir/venv"
(cd "$pyenv_dir" && venv/bin/python -c \
  'import loom, sys; assert loom.__file__.startswith(sys.prefix), loom.__file__' &&
  venv/bin/python -m pytest -q -p no:cacheprovider "$OLDPWD/tests/python")
rm -rf "$pyenv_dir"

# The second compiler: everything built by clang (warnings as errors), and
# every test run in that build. The generated code is still compiled by
# cc, so the modules the optimized pass cached serve this one (about a
# minute on 2 idle cores, the build another 1.5).
echo "== clang build =="
scripts/build.sh clang
(cd build-clang && ctest --output-on-failure -j "$jobs")

# The fuzz harnesses (tests/fuzz/) under libFuzzer's coverage guidance,
# with ASan and UBSan, LOOM_FUZZ_SECONDS each (the other builds run them
# with the plain driver).
fuzzers=()
for f in tests/fuzz/fuzz_*.c; do fuzzers+=("$(basename "$f" .c)"); done
echo "== libFuzzer build (${fuzzers[*]}) =="
scripts/build.sh fuzz "${fuzzers[@]}"
(cd build-fuzz && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j "$jobs" -R "^fuzz_")

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build =="
scripts/build.sh asan
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j "$jobs")

# Tests that share caches or traces between threads (add new ones here).
tsan_tests=()
for t in test_cache test_trace test_trace_optim test_trace_defer test_eager test_pool test_storage test_threads test_codegen_index test_conv_winograd test_conv_choice test_split test_comm; do [ -f "tests/$t.c" ] && tsan_tests+=("$t"); done
echo "== ThreadSanitizer build (${tsan_tests[*]}) =="
scripts/build.sh tsan "${tsan_tests[@]}"
(cd build-tsan && TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/../scripts/tsan.supp" \
  ctest --output-on-failure -j "$jobs" -R "^($(IFS='|'; echo "${tsan_tests[*]}"))\$")

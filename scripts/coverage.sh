#!/usr/bin/env bash
# Line coverage of the library (src/) by the test suite, with gcov: builds
# the coverage flavour (build-coverage/: -O1 --coverage), runs every test
# in it, then prints each source file's executed lines and the total.
#   scripts/coverage.sh [CTEST_ARGS...]   (e.g. -R test_ir: only those)
# The kernels generated at run time are compiled without coverage and are
# not counted; the library code that generates them is.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
export LOOM_CACHE_DIR="${LOOM_CACHE_DIR:-$PWD/build-cache}"

scripts/build.sh coverage
objects=build-coverage/CMakeFiles/loom_objects.dir
find build-coverage -name '*.gcda' -delete
# A failing test still counts its lines: the figure is the suite's reach.
(cd build-coverage && ctest -j "$jobs" "$@") || echo "coverage: some tests failed" >&2

# gcov -n prints, per source, "File 'src/x.c'" then "Lines executed:P% of N".
report=$(cd "$objects" && find . -name '*.gcda' | sort | xargs gcov -n 2>/dev/null)
# One line per file of src/ (a header seen from several objects: once), then
# the total.
lines=$(awk '
  /^File / { file = $2; gsub(/\x27/, "", file); next }
  /^Lines executed:/ && file ~ /(^|\/)src\// {
    split($2, a, ":"); pct = a[2]; sub(/%/, "", pct)
    sub(/.*\/src\//, "src/", file)
    printf "%s %s %d\n", file, pct, $4
    file = "" }' <<<"$report" | sort -u -k1,1)
awk '{ printf "%6.1f%% of %5d  %s\n", $2, $3, $1 }' <<<"$lines"
awk '{ hit += $2 * $3 / 100; total += $3 }
  END { if (total) printf "total: %.1f%% of %d lines of src/ executed\n", 100 * hit / total, total }' <<<"$lines"

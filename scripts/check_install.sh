#!/bin/sh
# Checks the install: installs a build of Loom into a temporary prefix,
# then builds tests/install/consumer.c outside the source tree twice, with
# `cc $(pkg-config --cflags --libs loom)` and with a CMake project that
# calls find_package(loom), and runs both (each builds, compiles and runs
# a graph, checking its values). The installed library must export only
# the installed headers' API (check_exports.sh), and the installed `loom
# api` must print the listing. Exits 77 (a skip) when pkg-config is missing.
# usage: check_install.sh BUILD_DIR [CC]
set -eu
build=$(cd "$1" && pwd)
cc=${2:-cc}
src=$(cd "$(dirname "$0")/.." && pwd)
command -v pkg-config >/dev/null || { echo "pkg-config not found: skipped"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" ||
  { cat "$tmp/install.log"; exit 1; }
pc=$(find "$prefix" -name loom.pc)
[ -n "$pc" ] || { echo "no loom.pc installed under $prefix"; exit 1; }
lib=$(find "$prefix" -name 'libloom.so' | head -n 1)
[ -n "$lib" ] || { echo "no libloom.so installed under $prefix"; exit 1; }
sh "$src/scripts/check_exports.sh" "$lib" "$prefix/include/loom"

echo "== pkg-config"
export PKG_CONFIG_PATH="$(dirname "$pc")"
# The consumer is compiled from a copy, so that nothing of the source
# tree is on its include path.
cp "$src/tests/install/consumer.c" "$src/tests/install/CMakeLists.txt" "$tmp/"
flags=$(pkg-config --cflags --libs loom)
echo "$cc consumer.c $flags"
(cd "$tmp" && $cc -std=c11 -Wall -Wextra -Werror -o consumer_pc consumer.c $flags)
LD_LIBRARY_PATH="$(dirname "$lib")" "$tmp/consumer_pc"

echo "== find_package(loom)"
cmake -S "$tmp" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" >"$tmp/cmake.log" || { cat "$tmp/cmake.log"; exit 1; }
cmake --build "$tmp/cmake-build" >"$tmp/build.log" || { cat "$tmp/build.log"; exit 1; }
"$tmp/cmake-build/consumer"  # the build tree's RPATH finds the library

echo "== loom api"
LD_LIBRARY_PATH="$(dirname "$lib")" "$prefix/bin/loom" api >"$tmp/api.json"
grep -q '"name": "loom_graph_add_op"' "$tmp/api.json" ||
  { echo "the installed loom api lacks loom_graph_add_op"; exit 1; }
echo "install ok: $prefix"

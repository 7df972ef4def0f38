#!/bin/sh
# Checks that a shared library of Loom exports exactly its public API: every
# dynamic symbol it defines is a function declared LOOM_API in the headers,
# and every such declaration is defined. A symbol that leaks (an internal
# function lacking static or hidden visibility) or a public declaration
# without a body fails, naming it.
# usage: check_exports.sh path/to/libloom.so path/to/include/loom
set -eu
lib=$1
inc=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

nm -D --defined-only "$lib" | awk '{print $3}' | sort -u >"$tmp/exported"
# The name before the first '(' of each LOOM_API declaration.
grep -h 'LOOM_API' "$inc"/*.h | grep -v '^#' | sed -n 's/^LOOM_API[^(]*[^a-zA-Z0-9_]\(loom_[a-zA-Z0-9_]*\)(.*/\1/p' |
  sort -u >"$tmp/declared"

status=0
if grep -v '^loom_' "$tmp/exported" >"$tmp/unprefixed"; then
  echo "exported without the loom_ prefix:"; cat "$tmp/unprefixed"; status=1
fi
if comm -23 "$tmp/exported" "$tmp/declared" | grep . >"$tmp/extra"; then
  echo "exported but not declared LOOM_API in $inc:"; cat "$tmp/extra"; status=1
fi
if comm -13 "$tmp/exported" "$tmp/declared" | grep . >"$tmp/missing"; then
  echo "declared LOOM_API but not exported by $lib:"; cat "$tmp/missing"; status=1
fi
[ "$(wc -l <"$tmp/declared")" -gt 0 ] || { echo "no LOOM_API declaration found in $inc"; status=1; }
echo "$(wc -l <"$tmp/exported") exported, $(wc -l <"$tmp/declared") declared"
exit $status

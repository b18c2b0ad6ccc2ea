#!/bin/bash
# The library's ABI against the 1.0 release's, recorded in
# tests/abi/libclade-1.0.abi (abidw; abigail-tools): no function or
# variable of the CLADE_1 node may go or change its type, and no public
# struct may change but by fields added at its end (the growth rule). New
# functions are fine; the experimental calls (CLADE_EXPERIMENTAL node of the
# version script) and their types are left out.
#
# usage: abidiff.sh LIB_WITH_DEBUG_INFO HEADERS_DIR MAP SUPPRESSIONS DUMP
#        abidiff.sh --write ...same...   (rewrite DUMP: only at a release)
# LIB must carry DWARF for lib/api.cpp (tests/abi/debug builds such a copy).
# Exit 77 (skipped) when abidw or abidiff is missing.
set -uo pipefail
write=0
if [ "${1:-}" == "--write" ]; then write=1; shift; fi
lib=$1; headers=$2; map=$3; suppr=$4; dump=$5
for tool in abidw abidiff; do
  command -v $tool > /dev/null || { echo "no $tool (Debian: apt-get install abigail-tools): skipped"; exit 77; }
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# The experimental calls, from the version script's CLADE_EXPERIMENTAL node.
experimental=$(sed -n '/^CLADE_EXPERIMENTAL/,/}/s/^ *\(clade_[a-z0-9_]*\);.*/\1/p' "$map" | paste -sd'|' -)
cp "$suppr" "$dir/all.suppr"
if [ -n "$experimental" ]; then
  printf '\n[suppress_function]\n  symbol_name_regexp = ^(%s)$\n  drop = yes\n' "$experimental" >> "$dir/all.suppr"
fi

# Public interfaces only: types defined outside HEADERS_DIR (the handles'
# insides, the C++ core) are private.
abidw --headers-dir "$headers" --drop-private-types --exported-interfaces-only --no-comp-dir-path \
  --short-locs --no-show-locs --type-id-style hash --suppressions "$dir/all.suppr" --out-file "$dir/now.abi" "$lib" ||
  { echo "FAIL: abidw $lib"; exit 1; }
if [ $write -eq 1 ]; then
  cp "$dir/now.abi" "$dump" && echo "wrote $dump"
  exit $?
fi
abidiff --no-added-syms --leaf-changes-only --impacted-interfaces --suppressions "$dir/all.suppr" \
  "$dump" "$dir/now.abi" > "$dir/report" 2>&1
rc=$?
cat "$dir/report"
# abidiff's status is a bit set: 1 error, 2 usage error, 4 an ABI change,
# 8 an incompatible change.
if [ $((rc & 3)) -ne 0 ]; then echo "FAIL: abidiff could not compare (status $rc)"; exit 1; fi
if [ $((rc & 8)) -ne 0 ]; then echo "FAIL: an incompatible ABI change against $(basename "$dump")"; exit 1; fi
if [ $rc -ne 0 ]; then
  # Changes, each of which must be a struct grown by the rule: a larger size
  # and members inserted at or past the old size, nothing else. Every line
  # of the leaf report must be one of those.
  awk '
    function bad(why) { print "not the growth rule: " why ": " $0; failed = 1 }
    /^Leaf changes summary|^Changed leaf types summary/ { next }
    /^Removed\/Changed\/Added (functions|variables) summary/ {
      if ($0 !~ /: 0 Removed, 0 Changed,/) bad("removed or changed interfaces"); next }
    /^$/ { section = ""; next }
    /^\x27struct clade_[a-z0-9_]*\x27 changed:$/ { old = -1; section = "struct"; next }
    section == "struct" && /^  type size changed from [0-9]+ to [0-9]+ \(in bits\)$/ {
      old = $5 + 0; if ($7 + 0 <= old) bad("smaller"); next }
    section == "struct" && /^  [0-9a-z]+ data members? insertions?:$/ { section = "insert"; next }
    section == "insert" && /^    \x27.*\x27, at offset [0-9]+ \(in bits\)$/ {
      off = $(NF - 2) + 0; if (old < 0 || off < old) bad("a member inserted before the old end"); next }
    (section == "struct" || section == "insert") && /^  ([0-9]+|one) impacted interfaces?:$/ { section = "impacted"; next }
    section == "impacted" && /^    (function|variable) / { next }
    { bad("unexpected") }
    END { exit failed }
  ' "$dir/report" || { echo "FAIL: the ABI changed against $(basename "$dump") (status $rc)"; exit 1; }
  echo "ok: only structs grown by the rule (fields added at their end)"
fi
echo "ok: the ABI of $(basename "$lib") is compatible with $(basename "$dump")"

#!/bin/bash
# The shared library exports exactly the functions the version script lists,
# and the version script lists exactly the functions the header declares.
set -eu
lib="$1"; map="$2"; header="$3"
exported=$(nm -D --defined-only "$lib" | awk '$2 == "T" || $2 == "D" || $2 == "B" {print $3}' | sed 's/@.*//' | sort -u)
listed=$(sed -n 's/^ *\(clade_[a-z0-9_]*\);.*/\1/p' "$map" | sort -u)
declared=$(grep -o 'CLADE_API [^(]*clade_[a-z0-9_]*(' "$header" | sed 's/.*[ *]\(clade_[a-z0-9_]*\)($/\1/' | sort -u)
status=0
if [ "$exported" != "$listed" ]; then
  echo "exported symbols differ from $map:"; diff <(echo "$exported") <(echo "$listed") || true; status=1
fi
if [ "$declared" != "$listed" ]; then
  echo "header declarations differ from $map:"
  printf '%s\n' "$declared" > /tmp/clade-declared.$$; printf '%s\n' "$listed" > /tmp/clade-listed.$$
  diff /tmp/clade-declared.$$ /tmp/clade-listed.$$ || true; rm -f /tmp/clade-declared.$$ /tmp/clade-listed.$$
  status=1
fi
[ $status -eq 0 ] && echo "$(echo "$listed" | wc -l) symbols: exported = version script = header"
exit $status
